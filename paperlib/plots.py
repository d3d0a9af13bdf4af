"""Figures and tables drawn from run records (the notebooks' and the book's).

Every function takes records as returned by :func:`paperlib.records.load_record`
(or :func:`paperlib.training.run_experiment`) and never computes a number that
is not in them.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .vocabulary import METRIC_LABELS


def history_frame(record: dict) -> pd.DataFrame:
    """The per-epoch history as a DataFrame with numeric columns."""
    frame = pd.DataFrame(record["history"])
    for column in frame.columns:
        if column != "phase":
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def steps_frame(record: dict) -> pd.DataFrame:
    """The within-epoch log (density and multipliers every few steps)."""
    return pd.DataFrame(record.get("steps") or []).apply(pd.to_numeric, errors="coerce")


def _targets(record: dict) -> list[float]:
    target = record["params"].get("target")
    if target is None:
        return []
    return target if isinstance(target, list) else [target]


def plot_dynamics(record: dict, title: str | None = None) -> plt.Figure:
    """Training dynamics of one run: L0-density, multipliers, training loss and validation error."""
    history, steps = history_frame(record), steps_frame(record)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    axes = axes.ravel()
    ax = axes[0]
    if "l0_density" in history:
        layer_columns = [c for c in history.columns if c.startswith("density[")]
        if record["params"]["grouping"] == "layer":
            for column in layer_columns:
                ax.plot(history["epoch"], 100 * history[column], lw=0.8, alpha=0.6)
        source = steps if "l0_density" in steps else history
        ax.plot(source["epoch"], 100 * source["l0_density"], color="C0", lw=2, label="model L0-density")
        for target in sorted(set(_targets(record))):
            ax.axhline(100 * target, ls="--", color="k", lw=1)
        ax.set_ylabel("L0-density (%)")
        ax.legend(loc="upper right", fontsize=8)
    else:
        ax.plot(history["epoch"], history["params_pct"], color="C0")
        ax.set_ylabel("parameters (% of dense)")
    ax = axes[1]
    lambda_columns = [c for c in steps.columns if c.startswith("lambda_")]
    if lambda_columns:
        for column in lambda_columns:
            ax.plot(steps["epoch"], steps[column], lw=1)
        ax.set_ylabel("Lagrange multiplier(s)")
    else:
        ax.plot(history["epoch"], history["macs_pct"], color="C1")
        ax.set_ylabel("MACs (% of dense)")
    axes[2].plot(history["epoch"], history["train_loss"], color="C2")
    axes[2].set_ylabel("training loss")
    axes[3].plot(history["epoch"], history["val_error"], color="C3")
    axes[3].set_ylabel("validation error (%)")
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    fig.suptitle(title or record["metrics"]["run_name"], fontsize=10)
    fig.tight_layout()
    return fig


def result_columns(record: dict) -> dict:
    """The numbers of the paper's result tables (App. K): the columns every table of results shows."""
    m = record["metrics"]
    values = {"l0_density": None if m["l0_density"] is None else 100 * m["l0_density"],
              "params_pct": m["params_pct"], "macs_pct": m["macs_pct"],
              "val_error_best": m["val_error_best"], "val_error_final": m["val_error_final"]}
    return {**{METRIC_LABELS[metric]: value for metric, value in values.items()}, "epochs": m["epochs_completed"]}


def summary_row(record: dict, digits: int = 2) -> dict:
    """One table row: the run, its method and hyper-parameter, :func:`result_columns` rounded, status, commit."""
    m = record["metrics"]
    hyper = m["target"] if m["method"] in ("constrained", "magnitude_pruning") else m.get("lmbda")
    numbers = {name: None if value is None else round(value, digits) for name, value in result_columns(record).items()}
    return {"run": m["run_name"], "method": m["method"], "grouping": m["grouping"], "hyper-parameter": hyper,
            **numbers, "status": m["status"], "commit": m["git_commit"][:8]}


def summary_table(records: list[dict]) -> pd.DataFrame:
    """A table of runs, one row each."""
    return pd.DataFrame([summary_row(r) for r in records])


def plot_gate_histograms(record: dict, layer: str | None = None, epochs: list[str] | None = None) -> plt.Figure:
    """Histograms of test-time gate medians of one layer at saved epochs (App. I, Figs. 8-9)."""
    medians = record["gate_medians"]
    if not medians:
        raise ValueError(f"record {record['metrics']['run_name']} has no gate medians (not a gated run)")
    epochs = epochs or sorted(medians, key=int)
    layer = layer or next(iter(medians[epochs[0]]))
    fig, axes = plt.subplots(1, len(epochs), figsize=(3 * len(epochs), 2.6), sharey=True)
    for ax, epoch in zip(np.atleast_1d(axes), epochs):
        values = medians[epoch][layer]
        if isinstance(values, dict):  # unstructured layers store counts
            counts = np.array(values["histogram_20_bins"])
            ax.bar(np.linspace(0.025, 0.975, 20), counts / counts.sum(), width=0.05)
        else:
            ax.hist(values, bins=20, range=(0, 1), weights=np.full(len(values), 1 / len(values)))
            inactive = 100 * np.mean(np.asarray(values) == 0)
            ax.set_title(f"epoch {epoch}: {inactive:.0f}% at 0", fontsize=9)
        ax.set_xlabel("gate median")
    np.atleast_1d(axes)[0].set_ylabel(f"fraction of gates\n{record['metrics']['model']} {layer}")
    fig.tight_layout()
    return fig
