"""The training dynamics the paper shows (§5.3, App. G, App. I; book/results_dynamics.md): dual restarts and gate
medians.

Some of the paper's figures are about how a run gets to its density rather than where
it ends. With dual restarts (Eq. 6) a multiplier is reset to zero as soon as its
constraint holds, so the density stops falling at the target; without them the
multiplier keeps what it accumulated and the density goes on falling below it
(Figure 2 and Figure 6). And the gates' medians (Eq. 9), which decide what the
test-time model keeps, end at 0 or 1 for most gates (Figure 9).
Each figure is drawn from one grid, the most faithful protocol that has records
(:func:`~analysis.report.grid_to_show`).
"""

import pandas as pd

from paperlib.harness import plots, studies
from . import report

#: The dual-restarts figure's grids and the gate-histogram figure's, the paper's protocol first.
RESTARTS_GRIDS = list(studies.grids("fig:dual_restarts"))
HISTOGRAM_GRIDS = list(studies.grids("fig:mnist_gate_histograms"))


def restarts_label(run: dict) -> str:
    """How the dual-restarts figure names a run: its target, with or without restarts."""
    return f"target {run['metrics']['target']:.0%}, " + ("restarts" if run["params"]["dual_restarts"] else "no restarts")


def restarts_summary(run: dict) -> str:
    """One run of the dual-restarts figure in a Markdown line: its final density, the extreme the density
    reaches after it first reaches the target (the highest with restarts, the lowest without) and its
    final error."""
    steps = pd.DataFrame(run["steps"]).apply(pd.to_numeric, errors="coerce")
    density = 100 * steps["l0_density"]
    target = 100 * run["metrics"]["target"]
    feasible = density[density <= target]
    after = density.loc[feasible.index[0]:] if len(feasible) else density.iloc[-1:]
    extreme = (f"highest after first reaching the target {after.max():.1f}%" if run["params"]["dual_restarts"]
               else f"lowest {after.min():.1f}%")
    return (f"- target {target:.0f}%, {'with' if run['params']['dual_restarts'] else 'without'} restarts: "
            f"ends at {density.iloc[-1]:.1f}% ({extreme}), final error {run['metrics']['val_error_final']:.2f}%")


def restarts_section() -> tuple[list, list[dict]]:
    """The dual-restarts figure (the runs' densities and multipliers, one grid), which grid it shows, and its
    grid table; and the runs drawn."""
    grid, shown = report.grid_to_show(RESTARTS_GRIDS)
    runs = report.complete_records(grid)
    for run in runs:
        run["metrics"]["label"] = restarts_label(run)
    figure = [report.plot_density_traces(runs, label_key="label")] if runs else []
    return [*figure, shown, report.show(report.grid_table(grid))], runs


def restarts_in_words(runs: list[dict]) -> str:
    """:func:`restarts_summary` of every run, by target, the run with restarts first."""
    ordered = sorted(runs, key=lambda run: (run["metrics"]["target"], not run["params"]["dual_restarts"]))
    return "\n".join(restarts_summary(run) for run in ordered)


def histograms_section() -> list:
    """The gate-median histograms of every run of one grid, the share of the first layer's medians still
    fractional at the last saved epoch, which grid is shown, and its grid table."""
    grid, shown = report.grid_to_show(HISTOGRAM_GRIDS)
    items, shares = [], []
    for run in report.complete_records(grid):
        items.append(plots.plot_gate_histograms(run))
        layer, fractional = report.fractional_medians(run)
        shares.append(f"{run['metrics']['model']}: {100 * fractional:.1f}% of {layer}'s medians")
    if shares:
        items.append("Still fractional at the last saved epoch: " + report.in_words(shares) + ".")
    return [*items, shown, report.show(report.grid_table(grid))]
