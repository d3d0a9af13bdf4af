"""Figures and tables drawn from run records (the notebooks' and the book's).

Every function takes records as returned by :func:`paperlib.harness.records.load_record` (or
:func:`paperlib.harness.training.run_experiment`) and never computes a number that is not in them.
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


#: Width of a run page's figures in inches: at the inline backend's 100 dpi, 720 px, which the book's text column shows
#: at about its own size, so that 9-point text stays 9 points on the page.
PAGE_WIDTH = 5.4


def _log_axis(ax) -> None:
    """Log-scale the y axis with plain tick labels: at 1, 2 and 5 of each decade when the data spans at most two and a
    half decades (a 0.9% error is read off the axis), else at each decade."""
    low, high = ax.dataLim.intervaly
    ax.set_yscale("log")
    narrow = low > 0 and high / low <= 10 ** 2.5
    ax.yaxis.set_major_locator(plt.LogLocator(subs=(1, 2, 5) if narrow else (1.0,)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(plt.NullFormatter())


def _layer_columns(frame: pd.DataFrame, prefix: str) -> list[str]:
    return [c for c in frame.columns if c.startswith(prefix)]


def multiplier_names(record: dict, count: int) -> list[str]:
    """The names of a run's ``count`` multipliers, for a legend: its gated layers' (``fc1``, ``conv2``) when it has one
    constraint per layer, in the order of its history's ``density[...]`` columns (the constraints' order), else ``λ_0``,
    ``λ_1`` ..."""
    layers = [column[len("density["):-1] for column in _layer_columns(history_frame(record), "density[")]
    if record["params"].get("grouping") == "layer" and len(layers) == count:
        return layers
    return [f"λ_{i}" for i in range(count)]


def plot_dynamics(record: dict, title: str | None = None) -> plt.Figure:
    """Training dynamics of one run, sized for a run page (:data:`PAGE_WIDTH`, 9-point text): L0-density, multipliers,
    training loss and validation error, the last two log-scaled (a final 0.9% as readable as the first steps' 90%)."""
    history, steps = history_frame(record), steps_frame(record)
    layer_wise = record["params"].get("grouping") == "layer"
    with plt.rc_context({"font.size": 9, "legend.fontsize": 9, "axes.titlesize": 9}):
        fig, axes = plt.subplots(2, 2, figsize=(PAGE_WIDTH, 3.6), sharex=True)
        ax = axes[0, 0]
        if "l0_density" in history:
            if layer_wise:
                for i, column in enumerate(_layer_columns(history, "density[")):
                    ax.plot(history["epoch"], 100 * history[column], lw=0.8, alpha=0.7, color="0.55",
                            label="each layer" if i == 0 else None)
            source = steps if "l0_density" in steps else history
            ax.plot(source["epoch"], 100 * source["l0_density"], color="C0", lw=2, label="model")
            for i, target in enumerate(sorted(set(_targets(record)))):
                ax.axhline(100 * target, ls="--", color="k", lw=1, label="target" if i == 0 else None)
            ax.set_title("L0-density (%)")
            ax.legend(loc="best", framealpha=0.85)
        else:
            ax.plot(history["epoch"], history["params_pct"], color="C0")
            ax.set_title("params (% of dense)")
        ax = axes[0, 1]
        lambda_columns = _layer_columns(steps, "lambda_")
        names = multiplier_names(record, len(lambda_columns))
        if lambda_columns:
            for column, name in zip(lambda_columns, names):
                ax.plot(steps["epoch"], steps[column], lw=1, label=name)
            ax.set_title("multiplier λ" + (" (one per layer)" if len(lambda_columns) > 1 else ""))
            if 1 < len(names) <= 4 and max(map(len, names)) <= 6:  # a few short names fit in the panel
                ax.legend(loc="best", framealpha=0.85, fontsize=8, handlelength=1.2, labelspacing=0.2)
        else:
            ax.plot(history["epoch"], history["macs_pct"], color="C1")
            ax.set_title("MACs (% of dense)")
        ax = axes[1, 0]
        ax.plot(history["epoch"], history["train_loss"], color="C2")
        _log_axis(ax)
        ax.set_title("training loss")
        ax = axes[1, 1]
        ax.plot(history["epoch"], history["val_error"], color="C3")
        _log_axis(ax)
        ax.set_title("val. error (%) of the test-time model")
        for ax in axes.ravel():
            ax.grid(alpha=0.3)
        for ax in axes[1]:
            ax.set_xlabel("epoch")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        if len(names) > 1 and not axes[0, 1].get_legend():  # more or longer names: under the panels, in columns
            fig.legend(*axes[0, 1].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                       ncol=min(3, len(names)), fontsize=8, frameon=False, title="multiplier λ of each layer",
                       title_fontsize=8, handlelength=1.5, columnspacing=1.2)
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
    p, m = record["params"], record["metrics"]
    hyper = p["target"] if p["method"] in ("constrained", "magnitude_pruning") else p.get("lmbda")
    numbers = {name: None if value is None else round(value, digits) for name, value in result_columns(record).items()}
    return {"run": p["run_name"], "method": p["method"], "grouping": p["grouping"], "hyper-parameter": hyper,
            **numbers, "status": m["status"], "commit": m["git_commit"][:8]}


def summary_table(records: list[dict]) -> pd.DataFrame:
    """A table of runs, one row each."""
    return pd.DataFrame([summary_row(r) for r in records])


def plot_gate_histograms(record: dict, layer: str | None = None, epochs: list[str] | None = None,
                         width: float | None = None) -> plt.Figure:
    """Histograms of test-time gate medians of one layer at saved epochs (App. I, Figs. 8-9), all panels in ``width``
    inches (a run page: :data:`PAGE_WIDTH`), else 3 inches each."""
    medians = record["gate_medians"]
    if not medians:
        raise ValueError(f"record {record['params']['run_name']} has no gate medians (not a gated run)")
    epochs = epochs or sorted(medians, key=int)
    layer = layer or next(iter(medians[epochs[0]]))
    with plt.rc_context({"font.size": 9} if width else {}):
        return _gate_histograms(medians, record["params"]["model"], layer, epochs, width)


def _gate_histograms(medians: dict, model: str, layer: str, epochs: list[str], width: float | None) -> plt.Figure:
    figsize = (width, 2.0) if width else (3 * len(epochs), 2.6)
    fig, axes = plt.subplots(1, len(epochs), figsize=figsize, sharey=True)
    for ax, epoch in zip(np.atleast_1d(axes), epochs):
        values = medians[epoch][layer]
        if isinstance(values, dict):  # unstructured layers store counts
            counts = np.array(values["histogram_20_bins"])
            ax.bar(np.linspace(0.025, 0.975, 20), counts / counts.sum(), width=0.05)
            ax.set_title(f"epoch {epoch}", fontsize=9)
        else:
            ax.hist(values, bins=20, range=(0, 1), weights=np.full(len(values), 1 / len(values)))
            inactive = 100 * np.mean(np.asarray(values) == 0)
            ax.set_title(f"epoch {epoch}" + ("\n" if width else ": ") + f"{inactive:.0f}% at 0", fontsize=9)
        ax.set_xlabel("gate median")
    np.atleast_1d(axes)[0].set_ylabel(f"fraction of gates\n{model} {layer}")
    fig.tight_layout()
    return fig
