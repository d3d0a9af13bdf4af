"""A record's numbers beside the rows the paper printed for its setting (:func:`paper_rows_for`), for a run's page and
the book's tables (``book/analysis/comparison.py``). A constrained run's "best" error is taken over the epochs at which
its constraints hold (:func:`best_feasible_error`): early in training a constrained model is still dense and often has
its lowest error; the authors' code takes the lowest of any epoch of any seed (:func:`authors_best_error`). Nothing here
invents a number: the paper's come from ``paper_results.csv``, ours from a record.
"""

import math

import pandas as pd

from . import presets, rules
from ..paper.paper_numbers import ref
from ..paper.paper_results import paper_results
from .rules import constrained_densities
from .vocabulary import DATASET_LABELS, METRIC_LABELS

#: The paper's model names (``paper_results.csv``) and the model names of our records.
MODEL_FAMILIES = {"MLP": ("mlp",), "LeNet5": ("lenet5",), "WideResNet-28-10": ("wrn-28-10", "wrn-16-1"),
                  "ResNet18": ("resnet18",), "ResNet50": ("resnet50",)}

#: Columns of the paper's table that tell its rows apart (besides the metric).
ROW_KEYS = ("model", "method", "grouping", "target", "lmbda", "gates_lr", "finetune_epochs")


def largest_gap(record: dict) -> float:
    """The final expected density's largest distance from its target over a constrained run's constraints, in points
    (positive: above the target, where the constraint is violated)."""
    return max(rules.final_gaps(record), key=abs)


def best_feasible_error(record: dict) -> float | None:
    """The lowest validation error over the training epochs at which the constraints hold (None: none does); for other
    methods, the record's best error."""
    if record["params"]["method"] != "constrained":
        return record["metrics"]["val_error_best"]
    errors = [float(row["val_error"]) for row in record["history"]
              if row["phase"] == "train"
              and rules.feasible([100 * (density - target) for density, target in constrained_densities(record, row)])]
    return min(errors) if errors else None


def authors_best_error(runs: list[dict]) -> float:
    """The lowest validation error of any epoch of any of ``runs``, as the authors' code computes the paper's "best"
    column (the minimum per seed, then the minimum over seeds); constraints are ignored."""
    return min(float(row["val_error"]) for record in runs for row in record["history"] if row["phase"] == "train")


def _finetuning_rows(record: dict, finetune_epochs: int) -> list[dict] | None:
    """The history rows of a magnitude-pruning record from the pruned model through ``finetune_epochs`` epochs of
    fine-tuning, or None if the run did not get that far (App. L)."""
    history = record["history"]
    start = next((i for i, row in enumerate(history) if row["phase"] == "pruned"), None)
    if start is None or start + finetune_epochs >= len(history):
        return None
    return history[start:start + finetune_epochs + 1]


def finetuning_row(record: dict, finetune_epochs: int) -> dict | None:
    """The history row of a magnitude-pruning record after ``finetune_epochs`` epochs of fine-tuning (0: the pruned
    model before fine-tuning), or None if the run did not get that far (App. L)."""
    rows = _finetuning_rows(record, finetune_epochs)
    return None if rows is None else rows[-1]


def best_finetuned_error(record: dict, finetune_epochs: int) -> float | None:
    """The lowest validation error of a magnitude-pruning record over its first ``finetune_epochs`` epochs of
    fine-tuning (0: the pruned model's), or None if the run did not get that far. App. L's "Best Val. Error (%) after
    fine-tuning for # epochs" is the best so far: its values never rise from 50 to 100 to 200 epochs and often
    repeat."""
    rows = _finetuning_rows(record, finetune_epochs)
    return None if rows is None else min(float(row["val_error"]) for row in rows)


def our_value(record: dict, metric: str, finetune_epochs: int | None = None):
    """A record's value of one of the paper's metrics (percentages in percent); for magnitude pruning at
    ``finetune_epochs``, App. L's columns: the best error so far (:func:`best_finetuned_error`), and the error of that
    checkpoint as the last."""
    m = record["metrics"]
    if finetune_epochs is not None and record["params"]["method"] == "magnitude_pruning":
        row = finetuning_row(record, finetune_epochs)
        if row is None or metric not in ("val_error_best", "val_error_final", "l0_density"):
            return None
        if metric == "l0_density":
            return 100.0 * record["params"]["target"]
        return best_finetuned_error(record, finetune_epochs) if metric == "val_error_best" else float(row["val_error"])
    if metric == "l0_density":
        return None if m["l0_density"] is None else 100.0 * m["l0_density"]
    if metric == "pruned_architecture":
        return "-".join(map(str, m.get("pruned_architecture") or [])) or None
    if metric == "val_error_best":
        return best_feasible_error(record)
    return m[metric]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def paper_key(cells: pd.DataFrame) -> dict:
    """The setting of one row of the paper's tables (its cells in ``paper_results.csv``): model, method, grouping,
    sparsity, target or λ_pen, gates lr and fine-tuning epochs."""
    first = cells.iloc[0]
    target = [float(t) for t in first["target"].split()] if first["target"] else None
    return {"model": first["model"], "method": first["method"], "grouping": first["grouping"],
            "sparsity": first["sparsity"] or "structured",
            "finetune_epochs": int(first["finetune_epochs"]) if first["finetune_epochs"] else None,
            "target": None if target is None else (target[0] if len(target) == 1 else target),
            "lmbda": _number(first["lmbda"]) if first["lmbda"] else None, "lmbda_printed": first["lmbda"],
            "gates_lr": _number(first["gates_lr"]) if first["gates_lr"] else None}


def matches(config, key: dict) -> bool:
    """Whether one of our run configurations is the paper row ``key``."""
    if config.model not in MODEL_FAMILIES.get(key["model"], ()) or config.method != key["method"] \
            or config.sparsity != key["sparsity"]:
        return False
    if key["method"] == "dense":
        return True
    if config.grouping != key["grouping"] and key["method"] != "magnitude_pruning":  # pruning is per layer
        return False
    if key["gates_lr"] is not None and not math.isclose(config.gates_lr, key["gates_lr"]):
        return False
    if key["method"] == "penalized":
        return key["lmbda"] is not None and not isinstance(config.lmbda, list) \
            and math.isclose(config.lmbda, key["lmbda"])
    target = config.target
    if key["grouping"] == "layer" and isinstance(key["target"], float) and isinstance(target, list):
        target = target[0] if len(set(target)) == 1 else target  # one printed value for all layers
    if isinstance(target, list) or isinstance(key["target"], list):
        return isinstance(target, list) and isinstance(key["target"], list) and \
            len(target) == len(key["target"]) and all(map(math.isclose, target, key["target"]))
    return key["target"] is not None and math.isclose(target, key["target"])


def target_label(target: float | list[float] | None) -> str:
    """A target density as the tables print it: ``"30%"``, or ``"[50, 30, 70, 10]%"`` layer by layer."""
    if target is None:
        return ""
    if isinstance(target, list):
        return "[" + ", ".join(f"{100 * t:g}" for t in target) + "]%"
    return f"{100 * target:g}%"


def describe_key(key: dict) -> str:
    """A paper row's setting as a table cell: its target or λ_pen, and its gates lr where it has one."""
    if key["lmbda_printed"]:
        hyper = f"λ_pen {key['lmbda']:g}" if key["lmbda"] is not None else f"λ_pen {key['lmbda_printed']}"
    else:
        hyper = target_label(key["target"])
    if key["gates_lr"] is not None:
        hyper += f"{', ' if hyper else ''}gates lr {key['gates_lr']:g}"
    return hyper


def printed_cell(cell: pd.Series) -> str:
    """A cell of ``paper_results.csv`` as the paper prints it: its value, and ``± ci`` where it has one."""
    return cell["value"] + (f" ± {cell['ci']}" if cell["ci"] else "")


def paper_rows_for(record: dict, digits: int = 2) -> pd.DataFrame:
    """The run's numbers (first row) beside every row the paper's tables print for its setting (model family, dataset,
    method, grouping, target or λ_pen), each named by its table and model; empty when no table has the setting."""
    config = presets.ExperimentConfig(**record["params"])
    paper = paper_results()
    cells = paper[(paper["source_kind"] == "table") & (paper["dataset"] == DATASET_LABELS.get(config.dataset))]
    metrics = [m for m in METRIC_LABELS if m != "pruned_architecture"]
    rows = []
    for _, row_cells in cells.groupby(["table", *ROW_KEYS], sort=False):
        key = paper_key(row_cells)
        if not matches(config, key):
            continue
        printed = row_cells.set_index("metric")
        row = {"": f"{ref(row_cells['table'].iloc[0])}, {key['model']}"
                   + (f", fine-tuned {key['finetune_epochs']} epochs" if key["finetune_epochs"] is not None else "")}
        for metric in metrics:
            if metric in printed.index:
                cell = printed.loc[metric]
                row[METRIC_LABELS[metric]] = printed_cell(cell)
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    columns = ["", *(METRIC_LABELS[m] for m in metrics if any(METRIC_LABELS[m] in row for row in rows))]
    ours = {"": f"ours, {record['params']['model']}"}
    for metric in metrics:
        value = our_value(record, metric)
        ours[METRIC_LABELS[metric]] = None if value is None else f"{value:.{digits}f}"
    return pd.DataFrame([ours, *rows]).reindex(columns=columns)
