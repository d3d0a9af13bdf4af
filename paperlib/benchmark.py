"""Training-step timings of the MNIST models (issue 6): ``python -m paperlib.benchmark``.

For each model (MLP, LeNet5; MNIST shapes, the paper preset's batch size 128,
one torch thread by default) it times one training step of

* ``dense``: the ungated model (forward, cross-entropy, backward, optimiser step);
* ``constrained``: the gated model with layer-wise constraints (Lagrangian, dual ascent with restarts);
* ``penalized``: the gated model with a layer-wise L0 penalty;

and gives the time of one epoch of MNIST's training split (60,000 images) at
that batch size: by default estimated as (constrained ms/step) x (steps per
epoch); with ``--real-epoch`` it trains one real epoch through
:mod:`paperlib.data`'s loader (needs ``PAPERLIB_DATA``), data loading and
augmentation included.

The step is the one of the experiment runner (``Experiment.train_epoch``),
rebuilt from the public pieces so that it does not depend on the runner's
internals: forward, loss, expected L2 term (eq. 9), objective -> (Lagrangian,
densities), zero_grad, backward, primal step(s), clamp if configured, dual
step. It leaves out the runner's per-step bookkeeping (``loss.item()``,
accuracy counts). The batch is a fixed random one in the model's memory
format. The variants are interleaved within every repetition (in a rotating
order) and the per-repetition times are summarised by their median, so that a
loaded machine biases no variant in particular.
"""

import argparse
import math
import platform
import statistics
import time
from collections.abc import Callable

import torch

from .methods import build_method
from .models import memory_format
from .presets import ExperimentConfig, resolve_config

MODELS = ("mlp", "lenet5")
VARIANTS = ("dense", "constrained", "penalized")
MNIST_TRAIN = 60_000
#: Layer-wise targets (those of benchmarks/record_baseline.py) and an arbitrary penalty; neither changes the cost.
TARGETS = {"mlp": [0.3, 0.3, 0.3], "lenet5": [0.5, 0.3, 0.7, 0.1]}
LMBDA = 0.1


def config_for(model: str, variant: str) -> ExperimentConfig:
    """The paper preset's MNIST parameters for one variant."""
    extra = {"dense": dict(method="dense"),
             "constrained": dict(method="constrained", grouping="layer", target=TARGETS[model]),
             "penalized": dict(method="penalized", grouping="layer", lmbda=LMBDA)}[variant]
    return resolve_config(dataset="mnist", model=model, preset="paper", **extra)


class TrainStep:
    """One training step of the runner for ``config`` (its method's :meth:`~paperlib.methods.Method.step`)."""

    def __init__(self, config: ExperimentConfig, model: torch.nn.Module | None = None):
        self.config = config
        self.method = build_method(config)
        self.model = model if model is not None else self.method.build_model(10)
        self.memory_format = memory_format(self.model)
        self.model.to(memory_format=self.memory_format).train()
        self.method.attach(self.model)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Train on one batch; returns the minimised objective (loss, or Lagrangian / penalized loss)."""
        return self.method.step(x, y).objective.detach()


def random_batch(batch_size: int, fmt: torch.memory_format, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed MNIST-shaped batch (normalised-looking pixels, random labels)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, 1, 28, 28, generator=gen).contiguous(memory_format=fmt)
    return x, torch.randint(0, 10, (batch_size,), generator=gen)


def time_interleaved(variants: dict[str, Callable[[], object]], repeats: int, steps: int, warmup: int = 2,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each variant, one value per repetition.

    Every variant is first called ``warmup`` times. Each repetition then runs
    every variant ``steps`` times in a row, the order rotated by one variant
    per repetition (A B C, B C A, C A B, ...).
    """
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


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_real_epoch(model_name: str) -> float:
    """Seconds for one real epoch of the constrained step over MNIST's training split."""
    from .data import load_dataset

    step = TrainStep(config_for(model_name, "constrained"))
    loader = load_dataset("mnist").loader("train", step.config.batch_size, seed=0,
                                          memory_format=step.memory_format)
    start = time.perf_counter()
    for x, y in loader:
        step(x, y)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (medians are reported)")
    parser.add_argument("--steps", type=int, default=20, help="steps per variant per repetition")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--real-epoch", action="store_true",
                        help="also time one real epoch of the constrained step (reads MNIST from PAPERLIB_DATA)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU: {cpu_model()}")
    print(f"median of {args.repeats} interleaved repetitions x {args.steps} steps; ms per training step")
    header = f"{'model':<7} {'batch':>5} {'dense':>7} {'constr.':>8} {'penal.':>7} {'gated/dense':>11} " \
             f"{'epoch (est.)':>12}" + (f" {'epoch (real)':>12}" if args.real_epoch else "")
    print(header)
    for name in args.models:
        torch.manual_seed(0)
        steps = {variant: TrainStep(config_for(name, variant)) for variant in VARIANTS}
        batch_size = steps["constrained"].config.batch_size
        x, y = random_batch(batch_size, steps["constrained"].memory_format)
        ms = medians_ms(time_interleaved({v: (lambda s=s: s(x, y)) for v, s in steps.items()},
                                         args.repeats, args.steps))
        epoch = ms["constrained"] * math.ceil(MNIST_TRAIN / batch_size) / 1e3
        row = (f"{name:<7} {batch_size:>5} {ms['dense']:>7.1f} {ms['constrained']:>8.1f} {ms['penalized']:>7.1f} "
               f"{ms['constrained'] / ms['dense']:>10.2f}x {epoch:>11.1f}s")
        if args.real_epoch:
            row += f" {time_real_epoch(name):>11.1f}s"
        print(row, flush=True)


if __name__ == "__main__":
    main()
