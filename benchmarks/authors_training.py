"""Train the authors' own MNIST model and constrained step, to tell their code from their runs (issue 6).

    PAPERLIB_DATA=../shared/data python benchmarks/authors_training.py [AUTHORS_DIR] \\
        --model mlp --grouping layer --target 0.2 [--epochs 200] [--seed 0]
    PAPERLIB_DATA=../shared/data python benchmarks/authors_training.py [AUTHORS_DIR] \\
        --model lenet5 --grouping layer --lmbda 0.01

Where our paper-protocol records and the paper's tables disagree (for example
the MLP at a 20% target: the paper's runs end at 22.8-23.3% where ours end on
the target), the difference can come from our implementation or from how the
authors' runs differed from their public code. This script runs *their*
implementation, loaded from AUTHORS_DIR (default /tmp/authors, an unpacked copy
of ``gallego-posada/constrained_sparsity``; nothing of it is part of this
repository), through the loader of ``benchmarks/authors_side_by_side.py``:
their ``L0MLP`` / ``L0LeNet5`` (their fan-out initialisation, their MLP's input
layer at droprate 0.2), their Lagrangian step written out from their code
(``TheirStep``: Adam at 7e-4 on weights and gates, SGD at the dual learning
rate of their MNIST configuration, 1e-4, dual restarts, no clamp, as under
their DistributedDataParallel launch). With ``--lmbda`` it trains their model
with their penalized objective instead (``TheirPenalizedStep``: the same Adam, the
penalty ``lambda_pen`` times each layer's expected L0-density, or the model's);
their own penalized class raises ``TypeError`` when it is constructed, which the
record keeps (``their_penalized_class``). Data is ours (:mod:`paperlib.harness.data`,
batch 128, the same seeded order as our runs); their launch split each batch
over two GPUs with one gate sample for both.

Every epoch it logs, as their tables read them (``get_results``): the model
L0-density averaged over the epoch's steps, the layer densities, the
validation error with their evaluation gates (the medians), and the groups
kept per layer at test time (median > 0, the pruned architecture before
purging removes units orphaned by another layer). The result is written to
``runs/authors_code/<model>-<grouping>-t<target>-s<seed>.json`` (``-lmbda<lambda_pen>`` for a
penalized run) with this command.

After every epoch the run saves its state (their model, both optimisers, the
multipliers, the loader's position, the random generator and the history) to
``<checkpoints>/authors_code/<name>.pt`` (:func:`paperlib.harness.records.checkpoints_dir`);
the same command resumes from there, to the same numbers.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from authors_side_by_side import (TheirPenalizedStep, TheirStep, load_authors, their_model,  # noqa: E402
                                  their_penalized_class_error)

from paperlib.harness import records  # noqa: E402
from paperlib.harness.data import load_dataset  # noqa: E402
from paperlib.harness.presets import resolve_config  # noqa: E402


def kept_groups(model: torch.nn.Module) -> list[int]:
    """Groups per gated layer whose evaluation gate (the median) is non-zero."""
    return [int((layer.evaluation_gates()[0] > 0).sum()) for layer in model.layers_dict["l0"]]


@torch.no_grad()
def validation_error(model: torch.nn.Module, loader) -> float:
    model.eval()
    wrong = total = 0
    for x, y in loader:
        wrong += int((model(x).argmax(1) != y).sum())
        total += len(y)
    model.train()
    return 100.0 * wrong / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("authors", nargs="?", default="/tmp/authors", type=Path)
    parser.add_argument("--model", default="mlp", choices=["mlp", "lenet5"])
    parser.add_argument("--grouping", default="layer", choices=["model", "layer"])
    cell = parser.add_mutually_exclusive_group(required=True)
    cell.add_argument("--target", type=float, help="constrained: the target density of every constraint")
    cell.add_argument("--lmbda", type=float, help="penalized: lambda_pen of every layer (or of the model)")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="default: runs/authors_code/<name>.json")
    args = parser.parse_args()
    torch.set_num_threads(1)

    method = "constrained" if args.lmbda is None else "penalized"
    config = resolve_config(dataset="mnist", model=args.model, preset="paper", grouping=args.grouping,
                            method=method, target=args.target, lmbda=args.lmbda, seed=args.seed)
    models = load_authors(args.authors)
    torch.manual_seed(args.seed)
    model = their_model(models, args.model, config.weight_decay)
    layers = len(model.layers_dict["l0"])
    value = args.target if method == "constrained" else args.lmbda
    values = [value] * layers if args.grouping == "layer" else [value]
    if method == "constrained":
        step = TheirStep(model, values, config.lr, config.gates_lr, config.dual_lr, grouping=args.grouping)
    else:
        step = TheirPenalizedStep(model, values, config.lr, config.gates_lr, grouping=args.grouping)
        their_class = their_penalized_class_error(args.authors)
        print(f"their PenalizedL0Problem, constructed: {their_class}", flush=True)
    data = load_dataset("mnist")
    train = data.loader("train", config.batch_size, seed=args.seed)
    val = data.loader("val", 500)

    setting = f"t{args.target:g}" if method == "constrained" else f"lmbda{args.lmbda:g}"
    name = f"{args.model}-{args.grouping}-{setting}-s{args.seed}"
    checkpoint = records.checkpoints_dir() / "authors_code" / f"{name}.pt"
    history, elapsed = [], 0.0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        step.primal.load_state_dict(state["primal"])
        if method == "constrained":
            step.dual.load_state_dict(state["dual"])
            with torch.no_grad():
                step.multipliers.copy_(state["multipliers"])
        train.load_state_dict(state["loader"])
        torch.set_rng_state(state["rng"])
        history, elapsed = state["history"], state["elapsed"]
        print(f"resumed from {checkpoint} after epoch {len(history)}", flush=True)
    start = time.time() - elapsed
    for epoch in range(len(history) + 1, args.epochs + 1):
        densities = []
        for x, y in train:
            step(x.contiguous(), y)
            densities.append(step.l0_model)
        with torch.no_grad():
            reg = model.regularization()
        history.append({"epoch": epoch, "l0_density_epoch_mean": float(torch.stack(densities).mean()),
                        **{f"density[{i}]": float(d) for i, d in enumerate(reg.l0_layer)},
                        "l0_density": float(reg.l0_model),
                        **({"lambda": [float(m) for m in step.multipliers.detach()]} if method == "constrained" else {}),
                        "val_error": validation_error(model, val), "kept_groups": kept_groups(model)})
        last = history[-1]
        print(f"epoch={epoch} l0_density={last['l0_density']:.4f} val_error={last['val_error']:.2f} "
              f"kept={'-'.join(map(str, last['kept_groups']))}", flush=True)
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        duals = ({"dual": step.dual.state_dict(), "multipliers": step.multipliers.detach().clone()}
                 if method == "constrained" else {})
        torch.save({"model": model.state_dict(), "primal": step.primal.state_dict(), **duals,
                    "loader": train.state_dict(), "rng": torch.get_rng_state(), "history": history,
                    "elapsed": time.time() - start}, checkpoint.with_suffix(".tmp"))
        checkpoint.with_suffix(".tmp").replace(checkpoint)

    out = args.out or records.runs_dir() / "authors_code" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cell = f"--target {args.target:g}" if method == "constrained" else f"--lmbda {args.lmbda:g}"
    command = ("PAPERLIB_DATA=../shared/data python benchmarks/authors_training.py "
               f"--model {args.model} --grouping {args.grouping} {cell} --epochs {args.epochs} --seed {args.seed}")
    extra = ({"dual_lr": config.dual_lr} if method == "constrained"
             else {"lmbda": args.lmbda, "their_penalized_class": their_class})
    out.write_text(json.dumps({"command": command, "method": method, "model": args.model, "grouping": args.grouping,
                               "target": args.target, "seed": args.seed, "epochs": args.epochs, **extra,
                               "lr": config.lr, "batch_size": config.batch_size,
                               "wall_time_s": time.time() - start, "history": history}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
