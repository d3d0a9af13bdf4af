"""Training-step timings: ``python -m paperlib.harness.benchmark``.

For each workload (the MNIST models by default; ``--models wrn-28-10 resnet18`` for what a GPU cluster run is planned
with) it times one training step of the ``dense``, ``constrained`` and ``penalized`` variants at the ``paper`` preset's
batch size, counts the ATen operations a step dispatches (:func:`dispatched_ops`: on a GPU each is at least one kernel
launch), and estimates an epoch (``--real-epoch`` trains one real MNIST epoch through the loader).

The step is the method's own (:meth:`paperlib.harness.methods.Method.step`) on a fixed random batch; on CUDA the clock
waits for the device. The variants are interleaved in a rotating order within every repetition and summarised by their
median, so that a loaded machine biases none in particular.
"""

import argparse
import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import torch

from ..method.gate_pass import compiles
from .methods import build_method
from ..paper.models import memory_format
from .presets import ExperimentConfig, resolve_config
from .training import device_name, resolve_device
from .vocabulary import COMPILE_GATES


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model on its dataset's shapes, with the constraints its gated variants train under."""

    dataset: str
    input_shape: tuple[int, int, int]
    num_classes: int
    train_examples: int
    grouping: str
    target: float | list[float]


#: Layer-wise targets for MNIST (those of benchmarks/record_baseline.py), model-wise ones for the GPU models; neither
#: the targets nor the penalty change the cost of a step.
WORKLOADS = {
    "mlp": Workload("mnist", (1, 28, 28), 10, 60_000, "layer", [0.3, 0.3, 0.3]),
    "lenet5": Workload("mnist", (1, 28, 28), 10, 60_000, "layer", [0.5, 0.3, 0.7, 0.1]),
    "wrn-28-10": Workload("cifar10", (3, 32, 32), 10, 50_000, "model", 0.5),
    "resnet18": Workload("tinyimagenet", (3, 64, 64), 200, 100_000, "model", 0.5),
}
MODELS = ("mlp", "lenet5")
VARIANTS = ("dense", "constrained", "penalized")
LMBDA = 0.1


def config_for(model: str, variant: str, **overrides) -> ExperimentConfig:
    """The paper preset's parameters of ``model`` on its dataset, for one variant."""
    work = WORKLOADS[model]
    extra = {"dense": dict(method="dense"),
             "constrained": dict(method="constrained", grouping=work.grouping, target=work.target),
             "penalized": dict(method="penalized", grouping=work.grouping, lmbda=LMBDA)}[variant]
    return resolve_config(dataset=work.dataset, model=model, preset="paper", **extra, **overrides)


class TrainStep:
    """One training step of the runner for ``config`` (its method's :meth:`~paperlib.harness.methods.Method.step`)."""

    def __init__(self, config: ExperimentConfig, model: torch.nn.Module | None = None, num_classes: int = 10,
                 device: str | torch.device = "cpu"):
        self.config = config
        self.method = build_method(config)
        self.model = model if model is not None else self.method.build_model(num_classes)
        self.memory_format = memory_format(self.model)
        self.model.to(device, memory_format=self.memory_format).train()
        self.method.attach(self.model)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Train on one batch; returns the minimised objective (loss, or Lagrangian / penalized loss)."""
        return self.method.step(x, y).objective.detach()


def random_batch(work: Workload, batch_size: int, fmt: torch.memory_format, device: str | torch.device = "cpu",
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch of the workload's shape (normalised-looking pixels, random labels), on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, *work.input_shape, generator=gen).contiguous(memory_format=fmt)
    y = torch.randint(0, work.num_classes, (batch_size,), generator=gen)
    return x.to(device), y.to(device)


def time_interleaved(variants: dict[str, Callable[[], object]], repeats: int, steps: int, warmup: int = 2,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each variant, one value per repetition, after ``warmup`` calls each: every repetition runs
    each variant ``steps`` times in a row, the order rotated by one (A B C, B C A, C A B, ...)."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    names = list(variants)
    samples = {name: [] for name in names}
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            start = clock()
            for _ in range(steps):
                variants[name]()
            samples[name].append((clock() - start) / steps)
    return samples


def medians_ms(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: 1e3 * statistics.median(values) for name, values in samples.items()}


def device_clock(device: torch.device) -> Callable[[], float]:
    """``time.perf_counter``, after waiting for the device's queued work where the device runs asynchronously."""
    if device.type != "cuda":
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return clock


def dispatched_ops(fn: Callable[[], object]) -> int:
    """The ATen operations one call of ``fn`` dispatches at the top level (without an ATen parent), forward and
    backward: how much of a small step is launch overhead on a GPU, counted on any machine."""
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm: lazily created optimiser state and caches are not part of a step
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for event in prof.events() if event.name.startswith("aten::")
               and (event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::")))


def time_real_epoch(model_name: str, device: torch.device) -> float:
    """Seconds for one real epoch of the constrained step over MNIST's training split, on ``device``."""
    from .data import load_dataset

    step = TrainStep(config_for(model_name, "constrained"), device=device)
    loader = load_dataset("mnist").loader("train", step.config.batch_size, seed=0, device=device,
                                          memory_format=step.memory_format)
    clock = device_clock(device)
    start = clock()
    for x, y in loader:
        step(x, y)
    return clock() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(WORKLOADS))
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1 ...")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (medians are reported)")
    parser.add_argument("--steps", type=int, default=20, help="steps per variant per repetition")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-size", type=int, default=0, help="0: the paper preset's batch size")
    parser.add_argument("--autocast-bf16", action="store_true",
                        help="bfloat16 autocast for WideResNet and ResNet (CUDA only; the paper's numbers are float32)")
    parser.add_argument("--compile-gates", default="auto", choices=COMPILE_GATES,
                        help="torch.compile the gated steps' gate pass: auto (on CUDA, as the runner), always, never")
    parser.add_argument("--real-epoch", action="store_true",
                        help="also time one real epoch of the constrained step (MNIST models; reads PAPERLIB_DATA)")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {device.type}: {device_name(device)}")
    compiled = compiles(args.compile_gates, device)
    print(f"median of {args.repeats} interleaved repetitions x {args.steps} steps; ms per training step; "
          f"gate pass {'compiled' if compiled else 'eager'}")
    print(f"{'model':<9} {'batch':>5} {'dense':>7} {'constr.':>8} {'penal.':>7} {'gated/dense':>11} "
          f"{'epoch (est.)':>12} {'ops dense':>9} {'ops constr.':>11}"
          + (f" {'epoch (real)':>12}" if args.real_epoch else ""))
    for name in args.models:
        work = WORKLOADS[name]
        overrides = {"compile_gates": args.compile_gates, **({"batch_size": args.batch_size} if args.batch_size else {})}
        if args.autocast_bf16 and work.dataset != "mnist":
            overrides["autocast_bf16"] = True
        torch.manual_seed(0)
        steps = {variant: TrainStep(config_for(name, variant, **overrides), num_classes=work.num_classes,
                                    device=device) for variant in VARIANTS}
        batch_size = steps["constrained"].config.batch_size
        x, y = random_batch(work, batch_size, steps["constrained"].memory_format, device)
        ms = medians_ms(time_interleaved({v: (lambda s=s: s(x, y)) for v, s in steps.items()},
                                         args.repeats, args.steps, clock=device_clock(device)))
        epoch = ms["constrained"] * math.ceil(work.train_examples / batch_size) / 1e3
        ops = {v: dispatched_ops(lambda s=steps[v]: s(x, y)) for v in ("dense", "constrained")}
        row = (f"{name:<9} {batch_size:>5} {ms['dense']:>7.1f} {ms['constrained']:>8.1f} {ms['penalized']:>7.1f} "
               f"{ms['constrained'] / ms['dense']:>10.2f}x {epoch:>11.1f}s {ops['dense']:>9} {ops['constrained']:>11}")
        if args.real_epoch and work.dataset == "mnist":
            row += f" {time_real_epoch(name, device):>11.1f}s"
        print(row, flush=True)


if __name__ == "__main__":
    main()
