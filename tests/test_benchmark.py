"""paperlib.harness.benchmark: its step is the runner's step, and its timing interleaves and takes medians."""

import copy

import pytest
import torch
from fake_data import make_mnist

from paperlib.harness import benchmark, training
from paperlib.harness.presets import resolve_config


@pytest.mark.parametrize("model, method, extra", [
    ("mlp", "constrained", dict(target=[0.3, 0.3, 0.3])),
    ("lenet5", "constrained", dict(target=[0.5, 0.3, 0.7, 0.1])),
    ("mlp", "penalized", dict(lmbda=0.5)),
])
def test_step_is_the_runners_step(tmp_path, monkeypatch, model, method, extra):
    """From the same model, batch and RNG state, one benchmark step and one runner epoch of one batch agree bit for bit
    (the runner adds nothing to the method's step that changes a number)."""
    make_mnist(tmp_path / "data", n_train=16, n_test=8)
    monkeypatch.setenv("PAPERLIB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PAPERLIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    config = resolve_config(experiment="unit", dataset="mnist", model=model, method=method, grouping="layer",
                            preset="cpu", batch_size=16, epochs=1, dual_lr=0.05, gates_lr=0.05, **extra)
    runner = training.Runner(config, progress=False)
    start_model = copy.deepcopy(runner.method.model)
    initial = copy.deepcopy(runner.method.model.state_dict())
    x, y = next(iter(runner.data.loader("train", 16, seed=config.seed, memory_format=runner.memory_format)))
    x, y = x.to(runner.device), y.to(runner.device)
    gpus = [runner.device] if runner.device.type == "cuda" else []
    with torch.random.fork_rng(devices=gpus):  # the gate noise comes from the CPU or the CUDA generator
        runner.train_epoch()  # 16 examples: exactly one step

    step = benchmark.TrainStep(config, model=start_model, device=runner.device)
    step(x, y)
    ours, runners = step.model.state_dict(), runner.method.model.state_dict()
    assert ours.keys() == runners.keys()
    changed = [name for name in ours if not torch.equal(ours[name], initial[name])]
    assert changed  # the step trained something
    for name in ours:
        assert torch.equal(ours[name], runners[name]), name
    if method == "constrained":
        multipliers = step.method.objective.multipliers.value
        assert torch.equal(multipliers, runner.method.objective.multipliers.value)
        assert (multipliers > 0).any()  # dense start violates the targets: lambda moved


def test_time_interleaved_rotates_and_reports_per_repetition():
    """On a fake clock each call costs a known time per repetition; warm-up is untimed, the order rotates."""
    now, calls = [0.0], []
    costs = {"a": [1.0, 5.0, 1.0], "b": [2.0, 2.0, 9.0], "c": [3.0, 3.0, 3.0]}  # seconds per call, per repetition
    counts = dict.fromkeys(costs, 0)

    def make(name):
        def run():
            calls.append(name)
            n = counts[name]
            counts[name] += 1
            now[0] += 100.0 if n < 2 else costs[name][(n - 2) // 4]  # 2 warm-up calls, then blocks of 4 steps
        return run

    samples = benchmark.time_interleaved({name: make(name) for name in costs}, repeats=3, steps=4, warmup=2,
                                         clock=lambda: now[0])
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]
    timed = calls[6:]
    assert [timed[i:i + 4] for i in range(0, len(timed), 4)] == [[n] * 4 for n in "abcbcacab"]
    assert samples == costs  # per repetition, per step; warm-up excluded
    assert benchmark.medians_ms(samples) == {"a": 1000.0, "b": 2000.0, "c": 3000.0}  # medians resist the outliers


@pytest.mark.parametrize("name", ["wrn-28-10", "resnet18"])
def test_gpu_workloads_are_the_paper_presets_on_their_datasets_shapes(name):
    """WideResNet-28-10 on CIFAR-10 and ResNet18 on TinyImageNet: the paper preset's batch size, the dataset's
    input shape and classes, and gated steps that train the gates."""
    work = benchmark.WORKLOADS[name]
    config = benchmark.config_for(name, "constrained")
    assert (config.dataset, config.preset, config.batch_size) == (work.dataset, "paper",
                                                                 {"wrn-28-10": 128, "resnet18": 100}[name])
    step = benchmark.TrainStep(benchmark.config_for(name, "constrained", batch_size=2), num_classes=work.num_classes)
    x, y = benchmark.random_batch(work, 2, step.memory_format)
    assert x.shape == (2, *work.input_shape) and int(y.max()) < work.num_classes
    assert step.model(x).shape == (2, work.num_classes)
    before = [p.detach().clone() for n, p in step.model.named_parameters() if n.endswith("log_alpha")]
    step(x, y)
    after = [p for n, p in step.model.named_parameters() if n.endswith("log_alpha")]
    assert before and any(not torch.equal(b, a) for b, a in zip(before, after))


def test_main_estimates_an_epoch_as_steps_per_epoch_times_the_constrained_step(capsys):
    benchmark.main(["--models", "resnet18", "--batch-size", "2", "--repeats", "1", "--steps", "1", "--device", "cpu"])
    row = capsys.readouterr().out.strip().splitlines()[-1].split()
    name, batch, constrained, epoch = row[0], int(row[1]), float(row[3]), float(row[6].rstrip("s"))
    assert (name, batch) == ("resnet18", 2)
    assert 0 < int(row[7]) < int(row[8])  # operations dispatched per step: dense, then constrained
    assert epoch == pytest.approx(constrained * 100_000 / 2 / 1e3, rel=0.02)


def test_dispatched_ops_counts_top_level_aten_operations_forward_and_backward():
    a = torch.ones(3, requires_grad=True)
    assert benchmark.dispatched_ops(lambda: torch.add(a, 1)) == 1
    assert benchmark.dispatched_ops(lambda: a.mul(2).sum()) == 2  # sum's own inner operations are not counted
    two = benchmark.dispatched_ops(lambda: (a * 2).sum().backward())
    assert two > 2  # the backward pass dispatches operations of its own
    dense = benchmark.TrainStep(benchmark.config_for("mlp", "dense"))
    gated = benchmark.TrainStep(benchmark.config_for("mlp", "constrained"))
    x, y = benchmark.random_batch(benchmark.WORKLOADS["mlp"], 8, torch.contiguous_format)
    counts = [benchmark.dispatched_ops(lambda: step(x, y)) for step in (dense, gated, dense)]
    assert counts[0] == counts[2] < counts[1]  # the same step dispatches the same operations every time


@pytest.mark.parametrize("name", ["mlp", "resnet18"])
def test_compiled_gate_pass_dispatches_at_most_one_and_a_half_times_the_dense_step(name):
    """With the gate pass compiled, a constrained step dispatches at most 1.5x the dense step's operations
    (3.6-5.5x when every layer computed its own gates)."""
    work = benchmark.WORKLOADS[name]
    steps = {variant: benchmark.TrainStep(benchmark.config_for(name, variant, compile_gates=compile_gates),
                                          num_classes=work.num_classes)
             for variant, compile_gates in (("dense", "never"), ("constrained", "always"))}
    x, y = benchmark.random_batch(work, 2, steps["dense"].memory_format)
    dense, gated = (benchmark.dispatched_ops(lambda s=s: s(x, y)) for s in steps.values())
    assert dense < gated <= 1.5 * dense
