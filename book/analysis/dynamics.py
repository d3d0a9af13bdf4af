"""The training dynamics the paper shows (§5.3, App. G, App. I; book/results_dynamics.md): dual restarts and gate
medians, each from the most faithful protocol that has records (:func:`~analysis.report.grid_to_show`)."""

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
import pandas as pd

from paperlib.harness import plots, studies

from . import report, style

#: The dual-restarts figure's grids and the gate-histogram figure's, the paper's protocol first.
RESTARTS_GRIDS = list(studies.grids("fig:dual_restarts"))
HISTOGRAM_GRIDS = list(studies.grids("fig:mnist_gate_histograms"))


def restarts_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per run of the dual-restarts figure, by target, restarts first: its final logged density, the
    highest and lowest after it first reaches its target (the last if it never does; %), its final error (%).

    >>> run = {"metrics": {"val_error_final": 1.0}, "params": {"target": 0.3, "dual_restarts": True},
    ...        "steps": [{"l0_density": d} for d in (0.9, 0.25, 0.5, 0.75)]}
    >>> restarts_rows([run]).iloc[0, 2:5].tolist()
    [75.0, 75.0, 25.0]
    """
    rows = []
    for run in sorted(runs, key=lambda run: (run["params"]["target"], not run["params"]["dual_restarts"])):
        density, target = 100 * plots.steps_frame(run)["l0_density"], 100 * run["params"]["target"]
        feasible = density[density <= target]
        after = density.loc[feasible.index[0]:] if len(feasible) else density.iloc[-1:]
        rows.append({"target (%)": target, "restarts": "✓" if run["params"]["dual_restarts"] else "✗",
                     "final (%)": density.iloc[-1], "highest after target (%)": after.max(),
                     "lowest after target (%)": after.min(), "error (%)": run["metrics"]["val_error_final"]})
    return pd.DataFrame(rows)


def plot_restarts(runs: list[dict]) -> plt.Figure:
    """Figure 2 and Figure 6: the model's L0-density (left) and multiplier (right) against epochs, one colour
    per target (dotted), solid with restarts and dashed without."""
    targets = sorted({run["params"]["target"] for run in runs})
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
    for run in runs:
        steps = plots.steps_frame(run)
        colour = f"C{targets.index(run['params']['target'])}"
        dashes = "-" if run["params"]["dual_restarts"] else "--"
        axes[0].plot(steps["epoch"], 100 * steps["l0_density"], color=colour, ls=dashes, lw=1.2)
        axes[1].plot(steps["epoch"], steps["lambda_0"], color=colour, ls=dashes, lw=1)
    for target in targets:
        axes[0].axhline(100 * target, color=f"C{targets.index(target)}", ls=":", lw=1)
    axes[0].set(xlabel="epoch", ylabel="model L0-density (%)", ylim=(0, 100))
    axes[1].set(xlabel="epoch", ylabel="multiplier λ")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=f"C{i}", label=f"target {100 * t:g}%") for i, t in enumerate(targets)]
    handles += [Line2D([], [], color="0.3", ls="-", label="with restarts"),
                Line2D([], [], color="0.3", ls="--", label="without")]
    style.legend_below(fig, handles, ncol=4, bottom=0.1)
    return fig


def fractional_rows(runs: list[dict]) -> pd.DataFrame:
    """Per run, the share (%) of the first gated layer's medians strictly between 0 and 1 at the last saved epoch."""
    rows = []
    for run in runs:
        layer, fractional = report.fractional_medians(run)
        rows.append({"model": run["params"]["model"], "layer": layer, "fractional medians (%)": 100 * fractional})
    return pd.DataFrame(rows, columns=["model", "layer", "fractional medians (%)"])
