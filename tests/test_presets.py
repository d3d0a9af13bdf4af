"""The presets: the paper's configurations (App. J, L) and the fixes an audit of them found."""

import math

import pytest
import torch

from paperlib.method import gates
from paperlib.paper.models import build_model, model_density
from paperlib.harness.presets import CPU, PAPER, config_differences, resolve_config


@pytest.mark.parametrize("preset", ["paper", "cpu"])
@pytest.mark.parametrize("model", ["mlp", "lenet5"])
def test_unstructured_magnitude_pruning_fine_tunes_with_adam_at_7e_4(preset, model):
    """App. L: prune the trained dense model, then retrain it with Adam at 7e-4 (tab:optim_mnist_unstructured)."""
    config = resolve_config(dataset="mnist", model=model, method="magnitude_pruning", sparsity="unstructured",
                            target=0.1, preset=preset)
    assert config.finetune_lr == 7e-4 and config.optimizer == "adam"
    assert config.finetune_epochs == (200 if preset == "paper" else CPU[("mnist", model)]["finetune_epochs"])
    assert config.finetune_epochs > 0


@pytest.mark.parametrize("model, rho", [("mlp", [0.2, 0.05, 0.05]), ("lenet5", 0.05)])
def test_unstructured_mnist_gates(model, rho):
    """App. L.1: rho_init 0.05 (the MLP's input layer keeps 0.2, as in the authors' MLP), gates at 1e-3."""
    config = resolve_config(dataset="mnist", model=model, sparsity="unstructured", target=0.1, preset="paper")
    assert (config.rho_init, config.gates_lr, config.dual_lr) == (rho, 1e-3, 1e-3)


def test_mnist_mlp_starts_its_input_layer_at_rho_0_2():
    """Louizos et al.'s and the authors' MLP: rho_init 0.2 on the input layer, 0.5 elsewhere (App. A.2).

    The initial expected density is then the parameter-weighted mean of eq. 11
    per layer: 93.8%, where the paper's penalized runs at small lambda plateau.
    """
    config = resolve_config(dataset="mnist", model="mlp", target=0.3, preset="paper")
    assert config.rho_init == [0.2, 0.5, 0.5]
    torch.manual_seed(0)
    model = build_model("mlp", gated=True, rho_init=config.rho_init)
    sizes = [784 * 300, 300 * 100, 100 * 10]  # input-neuron groups times their fan-out
    expected = sum(n * gates.initial_density(r) for n, r in zip(sizes, config.rho_init)) / sum(sizes)
    assert expected == pytest.approx(0.938, abs=5e-4)
    assert float(model_density(model).detach()) == pytest.approx(expected, abs=1e-3)
    assert float(gates.median_gates(model.fc1.weight_log_alpha.detach()).mean()) == pytest.approx(
        (1 / (1 + math.exp(-math.log(4) / gates.BETA))) * 1.2 - 0.1, abs=1e-3)


def test_mnist_dual_learning_rate_is_the_one_the_authors_ran():
    """mnist_defaults.yml's 1e-4 is applied after the command line by core_exp.py, so it is what ran."""
    for model in ("mlp", "lenet5"):
        for preset in ("paper", "cpu"):
            assert resolve_config(dataset="mnist", model=model, target=0.3, preset=preset).dual_lr == 1e-4


def test_every_paper_configuration_leaves_log_alpha_unclamped():
    """The authors' clamp is skipped under DistributedDataParallel, and every run used torchrun."""
    assert all(values["clamp_log_alpha"] is False for values in PAPER.values())
    assert resolve_config(dataset="cifar100", preset="cpu", target=0.7).clamp_log_alpha is True  # as its records ran


def test_tinyimagenet_unstructured_dual_lr_follows_the_target_also_for_per_layer_lists():
    base = dict(dataset="tinyimagenet", model="resnet18", sparsity="unstructured", preset="paper")
    assert resolve_config(**base, target=0.05).dual_lr == 7e-4
    assert resolve_config(**base, grouping="layer", target=[0.05] * 16).dual_lr == 7e-4
    with pytest.raises(ValueError, match="pass dual_lr explicitly"):
        resolve_config(**base, grouping="layer", target=[0.05] * 15 + [0.1])
    assert resolve_config(**base, grouping="layer", target=[0.05] * 15 + [0.1], dual_lr=1e-3).dual_lr == 1e-3


@pytest.mark.parametrize("rho_init, message", [
    ([0.2, 0.5], "one value per gated layer"),
    ([0.2, 0.5, 1.0], "rho_init"),
])
def test_per_layer_rho_init_is_validated(rho_init, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(dataset="mnist", model="mlp", target=0.3, rho_init=rho_init)


def test_per_layer_rho_init_only_where_supported():
    with pytest.raises(ValueError, match="only for mlp and lenet5"):
        resolve_config(dataset="cifar10", model="wrn-16-1", target=0.3, rho_init=[0.3] * 6)


RUN = dict(experiment="unit", dataset="mnist", model="mlp", target=0.5, epochs=3, batch_size=16, preset="cpu")


@pytest.mark.parametrize("overrides, message", [
    ({"preset": "gpu"}, "preset"),
    ({"dataset": "svhn"}, "dataset"),
    ({"model": "vgg16"}, "model"),
    ({"method": "annealing"}, "method"),
    ({"target": 1.5}, "target"),
    ({"target": -0.1}, "target"),
    ({"target": "dense"}, "target"),
    ({"target": [0.5, 0.5]}, "grouping"),
    ({"grouping": "layer", "target": [0.5, 0.5]}, "one value per gated layer"),
    ({"method": "penalized", "lmbda": -1.0}, "lmbda"),
    ({"lr": -0.1}, "lr"),
    ({"epochs": "ten"}, "epochs"),
    ({"rho_init": 1.0}, "rho_init"),
    ({"linear_init": "xavier"}, "linear_init"),
    ({"method": "dense", "linear_init": "fan_out"}, "gated linear layers only"),
    ({"learning_rate": 0.1}, "unknown parameter"),
])
def test_bad_input_is_rejected_with_a_message_naming_the_parameter(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolve_config(**{**RUN, **overrides})


def test_papermill_strings_are_converted():
    config = resolve_config(dataset="mnist", model="lenet5", grouping="layer", target="[0.5, 0.3, 0.7, 0.1]",
                            epochs="12", dual_restarts="false", lr="1e-3")
    assert config.target == [0.5, 0.3, 0.7, 0.1] and config.epochs == 12
    assert config.dual_restarts is False and config.lr == 1e-3


def test_zero_epochs_and_empty_model_mean_the_presets_values():
    config = resolve_config(dataset="cifar10", preset="cpu", model="", epochs=0, target=0.7)
    assert (config.model, config.epochs) == ("wrn-16-1", 20)


def test_run_names_differ_when_any_hyper_parameter_differs_from_the_preset():
    base = dict(dataset="cifar10", preset="cpu", target=0.7, grouping="layer")
    names = {resolve_config(**base, **extra).run_name for extra in
             ({}, {"gates_lr": 0.1}, {"gates_lr": 1.0}, {"detach_gates": False}, {"dual_lr": 1e-3}, {"seed": 1},
                   {"linear_init": "fan_out"})}
    assert len(names) == 7
    assert resolve_config(**base).run_name == resolve_config(**base, gates_lr=6.0).run_name  # the preset's value


def test_pretrained_needs_resnet50_and_a_dense_method():
    with pytest.raises(ValueError, match="pretrained"):
        resolve_config(dataset="mnist", target=0.5, pretrained=True)


@pytest.mark.parametrize("method, unused", [("constrained", "lmbda"), ("penalized", "target"), ("dense", "target")])
def test_a_parameter_the_method_does_not_use_is_dropped_and_not_compared(method, unused):
    """Notebooks used to pass lmbda=0.0 to constrained runs: their records are records of the same runs."""
    config = resolve_config(**{**RUN, "method": method, "target": 0.5, "lmbda": 0.1})
    assert getattr(config, unused) is None
    recorded = {**config.to_dict(), unused: 0.0}
    assert config_differences(recorded, config) == []
    assert config_differences({**recorded, "seed": 1}, config) == ["seed: recorded 1, now 0"]


def test_bf16_autocast_is_off_in_every_preset_named_when_on_and_only_for_residual_models():
    """The paper's numbers are float32: no preset turns autocast on; a run that does says so in its name."""
    for preset, table in (("paper", PAPER), ("cpu", CPU)):
        for dataset, model in table:
            assert not resolve_config(preset=preset, dataset=dataset, model=model, target=0.5).autocast_bf16
    wrn = dict(dataset="cifar10", model="wrn-16-1", preset="cpu", target=0.5)
    assert resolve_config(**wrn, autocast_bf16=True).run_name == "wrn-16-1-constrained-model-t0.5-bf16-s0-cpu"
    assert resolve_config(**wrn, autocast_bf16="true").autocast_bf16 is True  # papermill's strings
    with pytest.raises(ValueError, match="'autocast_bf16' is for the WideResNet and ResNet models"):
        resolve_config(dataset="mnist", model="lenet5", preset="cpu", target=0.5, autocast_bf16=True)
    with pytest.raises(ValueError, match="'autocast_bf16' needs CUDA"):
        resolve_config(**wrn, device="cpu", autocast_bf16=True)
    recorded = resolve_config(**wrn).to_dict()
    del recorded["autocast_bf16"]  # a record made before the option compares as off
    assert config_differences(recorded, resolve_config(**wrn)) == []
    assert config_differences(recorded, resolve_config(**wrn, autocast_bf16=True, run_name="x"), ignore=("run_name",)) \
        == ["autocast_bf16: recorded False, now True"]


def test_cifar10_cpu_protocol_compresses_the_papers_schedule_and_scales_its_dual_lr_alike():
    """Table 8's WideResNet run, compressed from 200 epochs to the CPU's: the milestones keep their
    fractions of training and the dual learning rate grows by the same factor, so that a multiplier
    can grow as much per fraction of training as in the paper."""
    paper = resolve_config(dataset="cifar10", preset="paper", target=0.5)
    cpu = resolve_config(dataset="cifar10", preset="cpu", target=0.5)
    factor = paper.epochs / cpu.epochs
    assert [m * factor for m in cpu.lr_milestones] == paper.lr_milestones
    assert cpu.dual_lr == pytest.approx(paper.dual_lr * factor)
    same = ("optimizer", "lr", "gates_optimizer", "gates_lr", "weight_decay", "batch_size", "rho_init", "lr_gamma",
            "clamp_log_alpha", "detach_gates", "momentum")
    assert {k: getattr(cpu, k) for k in same} == {k: getattr(paper, k) for k in same}


def test_dual_optimizers_beyond_the_paper_are_named_and_go_without_restarts():
    mlp = dict(dataset="mnist", model="mlp", preset="paper", grouping="layer", target=0.3)
    assert resolve_config(**mlp).dual_optimizer == "gradient_ascent"  # the paper's, by default
    nupi = resolve_config(**mlp, dual_optimizer="nupi", dual_restarts=False, nupi_kp=2.0)
    assert nupi.run_name == "mlp-constrained-layer-t0.3-no-restarts-nupi-nupi_kp2-s0-paper"
    large = resolve_config(**mlp, dual_optimizer="nupi", dual_restarts=False, nupi_kp=1e6)
    assert large.run_name == "mlp-constrained-layer-t0.3-no-restarts-nupi-nupi_kp1e6-s0-paper"  # no '+' in a path
    al = resolve_config(**mlp, dual_optimizer="augmented_lagrangian", dual_restarts=False)
    assert al.run_name == "mlp-constrained-layer-t0.3-no-restarts-augmented_lagrangian-s0-paper"
    with pytest.raises(ValueError, match="dual_restarts=False"):
        resolve_config(**mlp, dual_optimizer="nupi")
    with pytest.raises(ValueError, match="dual_optimizer"):
        resolve_config(**mlp, dual_optimizer="adam", dual_restarts=False)
    with pytest.raises(ValueError, match="nupi_ema"):
        resolve_config(**mlp, dual_optimizer="nupi", dual_restarts=False, nupi_ema=1.5)


def test_the_gpu_preset_knows_only_its_wideresnets_and_compresses_the_schedule_as_the_cpu_one_does():
    gpu = resolve_config(dataset="cifar10", preset="gpu", target=0.7)
    cpu = resolve_config(dataset="cifar10", preset="cpu", target=0.7)
    assert gpu.model == "wrn-16-4" and gpu.run_name.endswith("-gpu")
    for name in ("epochs", "lr_milestones", "dual_lr", "gates_lr", "lr", "weight_decay", "rho_init", "batch_size"):
        assert getattr(gpu, name) == getattr(cpu, name), name
    for model in ("wrn-16-8", "wrn-28-10"):
        assert resolve_config(dataset="cifar10", preset="gpu", model=model, target=1.0).epochs == 20
    with pytest.raises(ValueError, match="'gpu' preset has no configuration for dataset='cifar10' with model='wrn-16-1'"):
        resolve_config(dataset="cifar10", preset="gpu", model="wrn-16-1")
    with pytest.raises(ValueError, match="'gpu' preset has no configuration for dataset='mnist'"):
        resolve_config(dataset="mnist", preset="gpu")


def test_cpu2_is_the_cpu_protocol_at_the_chosen_gates_lr_and_what_auto_gives_cifar10_on_a_cpu(monkeypatch):
    from paperlib.harness import presets

    cpu2 = resolve_config(dataset="cifar10", preset="cpu2", target=0.7)
    cpu = resolve_config(dataset="cifar10", preset="cpu", target=0.7)
    assert cpu2.gates_lr == presets.CPU2_GATES_LR != cpu.gates_lr == 6.0
    differing = [f for f in ("epochs", "lr_milestones", "dual_lr", "lr", "weight_decay", "rho_init", "batch_size",
                             "model", "optimizer", "gates_optimizer") if getattr(cpu2, f) != getattr(cpu, f)]
    assert differing == []
    assert cpu2.run_name == "wrn-16-1-constrained-model-t0.7-s0-cpu2" and cpu.run_name.endswith("-s0-cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_config(dataset="cifar10", target=0.7).preset == "cpu2"
    assert resolve_config(dataset="mnist", target=0.3).preset == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_config(dataset="cifar10", target=0.7).preset == "paper"
    with pytest.raises(ValueError, match="'cpu2' preset has no configuration for dataset='mnist'"):
        resolve_config(dataset="mnist", preset="cpu2", target=0.3)
