"""A budget on MACs or parameters (``ConstrainedStep(measure=...)``): how close the purged model ends to it.

Each model (torchvision, 10 classes) is gated by ``paperlib.sparsify`` and trained on CIFAR-10 batches (a random
subset of the training set or all of it, random crops and flips, batch 32) under one model-wise target on its
expected MACs or parameters (or, for comparison, the paper's density), with the weights of the book's "Your own
model" page (SGD 0.05 with momentum 0.9; dual step 0.1 with restarts) and the gates' ``SETTINGS`` named in the run.
Then it is purged at its median gates, and the table gives, per run, the target, the expected share at the last
step, the purged model's shares of the dense model's MACs and parameters, and the gap between the purged share of
the constrained measure (the test-time density, for the density) and the target, in points.

    PAPERLIB_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/macs_budget.py [--steps 600] [--subset N] \\
        [--runs resnet18:macs:0.5:damped mobilenet_v2:macs:0.5:page ...]

One thread: about 0.25 s a step for resnet18 on this project's machine, when nothing else runs.
``tests/test_budget.py`` runs a short version (resnet18, MACs at 0.5, damped, 400 steps on 5,000 images).
"""

import argparse
import time
import warnings

import torch
import torch.nn.functional as F
import torchvision

import paperlib
from paperlib.harness.data import load_dataset
from paperlib.method.gates import median_gates
from paperlib.method.layers import L0Layer

MEAN, STD = torch.tensor([0.49, 0.48, 0.45]).view(1, 3, 1, 1), torch.tensor([0.25, 0.24, 0.26]).view(1, 3, 1, 1)
SHAPE = (3, 32, 32)
RUNS = ["resnet18:macs:0.5:damped", "resnet18:macs:0.5:page", "resnet18:density:0.5:page", "resnet18:params:0.5:damped",
        "mobilenet_v2:macs:0.5:damped"]


def batches(images: torch.Tensor, labels: torch.Tensor, batch: int, seed: int):
    """Endless random batches of ``images`` (uint8), normalised, randomly cropped (padding 4) and flipped."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        index = torch.randint(0, len(labels), (batch,), generator=generator)
        x = F.pad(images[index].float() / 255, (4, 4, 4, 4))
        i, j = torch.randint(0, 9, (2,), generator=generator).tolist()
        x = x[:, :, i:i + 32, j:j + 32]
        flip = torch.rand(batch, generator=generator) < 0.5
        x[flip] = x[flip].flip(3)
        yield (x - MEAN) / STD, labels[index].long()


#: The gates' settings: the "Your own model" page's (Adam at 0.2, log_alpha clamped), and one that damps the gates'
#: momentum (Adam's beta1 0.5 at 0.05) and lets closed gates' P(z != 0) go to 0 (no clamp), so that the purged model's
#: count, at the median gates, ends near the expected one.
SETTINGS = {"page": dict(gates_lr=0.2, betas=(0.9, 0.999), clamp_log_alpha=True),
            "damped": dict(gates_lr=0.05, betas=(0.5, 0.999), clamp_log_alpha=False)}


def run(name: str, measure: str, target: float, steps: int, images, labels, setting: str = "damped", batch: int = 32,
        seed: int = 0) -> dict:
    """Train ``name`` under ``target`` on ``measure`` for ``steps`` steps; the purged model's shares."""
    torch.manual_seed(seed)
    model = paperlib.sparsify(getattr(torchvision.models, name)(num_classes=10))
    optimizer = torch.optim.SGD(paperlib.weight_parameters(model), lr=0.05, momentum=0.9)
    layers = [m for m in model.modules() if isinstance(m, L0Layer)]
    gates = [p for layer in layers for p in layer.gate_parameters()]
    config = SETTINGS[setting]
    step = paperlib.ConstrainedStep(
        model, optimizer, target=target, dual_lr=0.1, measure=measure, clamp_log_alpha=config["clamp_log_alpha"],
        gates_optimizer=torch.optim.Adam(gates, lr=config["gates_lr"], betas=config["betas"]),
        **(dict(input_shape=SHAPE) if measure != "density" else {}))
    started, data = time.perf_counter(), batches(images, labels, batch, seed)
    for _ in range(steps):
        x, y = next(data)
        record = step.roll(lambda: F.cross_entropy(model(x), y))
    seconds = time.perf_counter() - started
    dense = {"macs": paperlib.count_macs(model, SHAPE, "plain"), "params": paperlib.count_params(model, gates="dense"),
             "density": 1.0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # closed channels purge keeps are in purge_report
        small = paperlib.purge(model.eval(), torch.zeros(1, *SHAPE))
    purged = {"macs": paperlib.count_macs(small, SHAPE, "plain") / dense["macs"],
              "params": paperlib.count_params(small) / dense["params"],
              "density": sum(float(layer.expected_active_params((median_gates(layer.weight_log_alpha).ne(0).float(),
                                                                  None))) for layer in layers)
              / sum(layer.num_sparsifiable_params for layer in layers)}  # eq. 3 at the median gates
    return {"model": name, "measure": measure, "setting": setting, "target (%)": 100 * target, "steps": steps,
            "expected (%)": 100 * record.densities.item(), "purged MACs (%)": 100 * purged["macs"],
            "purged params (%)": 100 * purged["params"], "gap (points)": 100 * (purged[measure] - target),
            "s/step": seconds / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--subset", type=int, default=None, help="training images used (at random; default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", nargs="*", default=RUNS, help="model:measure:target:setting (SETTINGS)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train = load_dataset("cifar10").train  # in class order: a subset is drawn at random
    keep = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(0))[:args.subset]
    rows = []
    for spec in args.runs:
        name, measure, target, setting = spec.split(":")
        rows.append(run(name, measure, float(target), args.steps, train.images[keep], train.labels[keep], setting,
                        seed=args.seed))
        print(" | ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
              flush=True)
    import pandas as pd
    print(pd.DataFrame(rows).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
