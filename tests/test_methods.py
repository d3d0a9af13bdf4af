"""Training methods: what one step of each computes (eq. 4-6, App. B, App. J.7, App. L)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from paperlib.harness import methods
from paperlib.method.layers import L0Layer
from paperlib.paper.models import layer_densities, model_density
from paperlib.harness.presets import resolve_config

#: Plain SGD steps, so that a step can be recomputed by hand.
SGD = dict(dataset="mnist", model="mlp", preset="cpu", optimizer="sgdm", gates_optimizer="sgdm", momentum=0.0,
           lr=0.1, gates_lr=0.5, clamp_log_alpha=False, weight_decay=0.0)


def _attached(**params) -> methods.Method:
    method = methods.build_method(resolve_config(**{**SGD, **params}))
    torch.manual_seed(0)
    method.attach(method.build_model(10))
    return method


def _batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(8, 1, 28, 28, generator=generator), torch.randint(0, 10, (8,), generator=generator)


def test_each_method_names_its_class():
    assert {name: type(methods.build_method(resolve_config(**SGD, method=name, target=0.5, lmbda=0.1))).__name__
            for name in ("constrained", "penalized", "dense", "magnitude_pruning")} == {
        "constrained": "Constrained", "penalized": "Penalized", "dense": "Dense",
        "magnitude_pruning": "MagnitudePruning"}


def test_constrained_step_is_simultaneous_gradient_descent_ascent():
    """Eq. 5: a primal step on the Lagrangian at the current lambda, then a dual step from the same iterate."""
    method = _attached(method="constrained", target=0.3, dual_lr=0.5, dual_restarts=False, gates_lr=20.0)
    method.objective.multipliers.value = torch.tensor([2.0])
    before = copy.deepcopy(method.model)
    x, y = _batch()

    torch.manual_seed(2)
    step = method.step(x, y)

    torch.manual_seed(2)  # the same gate samples
    density = model_density(before)
    lagrangian = F.cross_entropy(before(x), y) + 2.0 * (density - 0.3)
    grads = torch.autograd.grad(lagrangian, list(before.parameters()))
    for (name, p), p0, g in zip(method.model.named_parameters(), before.parameters(), grads):
        lr = 20.0 if "log_alpha" in name else 0.1
        torch.testing.assert_close(p, p0 - lr * g, msg=name)
    torch.testing.assert_close(step.objective, lagrangian)
    expected = max(0.0, 2.0 + 0.5 * (density.item() - 0.3))
    assert method.objective.multipliers.value.item() == pytest.approx(expected, abs=1e-6)
    after = model_density(method.model).item()  # a dual step from the new iterate would give another multiplier
    assert method.objective.multipliers.value.item() != pytest.approx(2.0 + 0.5 * (after - 0.3), abs=1e-4)


def test_dual_restart_resets_a_satisfied_constraint():
    """Eq. 6: the multiplier of a constraint that holds goes back to zero."""
    method = _attached(method="constrained", target=0.99, dual_lr=0.5, dual_restarts=True)
    method.objective.multipliers.value = torch.tensor([2.0])
    method.step(*_batch())
    assert method.objective.multipliers.value.item() == 0.0


def test_penalized_step_minimises_loss_plus_lambda_times_density():
    method = _attached(method="penalized", grouping="layer", lmbda=[0.1, 2.0, 0.0])
    before = copy.deepcopy(method.model)
    x, y = _batch()
    torch.manual_seed(2)
    step = method.step(x, y)
    torch.manual_seed(2)
    expected = F.cross_entropy(before(x), y) + (torch.tensor([0.1, 2.0, 0.0]) * layer_densities(before)).sum()
    torch.testing.assert_close(step.objective, expected)
    assert set(method.step_log(step)) == {"l0_density", "constrained_density_0", "constrained_density_1",
                                          "constrained_density_2"}  # no multipliers


def test_dense_trains_a_plain_model_and_evaluates_it_as_it_is():
    method = _attached(method="dense")
    assert not any(isinstance(m, L0Layer) for m in method.model.modules())
    assert method.test_time_model() is method.model
    assert method.gates_optimizer is None and method.gate_medians() is None and method.step_log(None) is None
    assert method.phases == [("train", SGD.get("epochs", 100))]


def test_magnitude_pruning_prunes_between_its_phases_and_keeps_pruned_weights_at_zero():
    method = _attached(method="magnitude_pruning", sparsity="unstructured", target=0.2, epochs=3,
                       finetune_epochs=2, finetune_lr=0.05)
    assert method.phases == [("train", 3), ("finetune", 2)]
    assert method.enter_phase("finetune") == "pruned"
    zeros = {name: method.model.get_submodule(name).weight == 0 for name in method.weight_masks}
    assert all(0.75 < float(z.float().mean()) < 0.85 for z in zeros.values())
    assert method.optimizer.param_groups[0]["lr"] == 0.05 and method.scheduler is None
    method.step(*_batch())
    for name, zero in zeros.items():
        assert torch.equal(method.model.get_submodule(name).weight == 0, zero), name
    with pytest.raises(NotImplementedError, match="single phase"):
        methods.build_method(resolve_config(**SGD, method="dense")).enter_phase("finetune")


@pytest.mark.parametrize("autocast", [False, True])
def test_bf16_autocast_covers_the_forward_pass_only(autocast):
    """bfloat16 logits under autocast (on the batch's device: the CPU here), float32 loss, objective and weights."""
    config = resolve_config(dataset="cifar10", model="wrn-16-1", preset="cpu", grouping="layer", target=[0.5] * 6,
                            autocast_bf16=autocast)
    method = methods.build_method(config)
    torch.manual_seed(0)
    method.attach(method.build_model(10))
    generator = torch.Generator().manual_seed(1)
    step = method.step(torch.randn(2, 3, 32, 32, generator=generator), torch.randint(0, 10, (2,), generator=generator))
    assert step.logits.dtype == (torch.bfloat16 if autocast else torch.float32)
    assert step.loss.dtype == step.objective.dtype == step.density.dtype == torch.float32
    assert {p.dtype for p in method.model.parameters()} == {torch.float32}
    assert torch.isfinite(step.objective)
