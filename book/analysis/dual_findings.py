"""Beyond the paper (book/results_dual_optimizers.md): does another dual optimiser (:data:`OPTIMIZERS`,
:mod:`paperlib.method.lagrangian`) end a constrained run at its target on the paper's own cells (:data:`CELLS`,
seed 0, the paper's protocol)? No choice looks at the test split: nuPI's gain is chosen by the final distance to
the target (:func:`chosen_gain`); an optimiser removes the overshoot when every cell is on target at no cost in
error (:func:`verdicts`).
"""

import math
import statistics
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import plots, rules, studies
from paperlib.harness.paper_rows import largest_gap, target_label
from paperlib.harness.vocabulary import short_number
from paperlib.paper.models import display_name
from paperlib.paper.paper_numbers import ref

from .control import run_link, step_gaps
from . import style
from .report import grid_runs, notebook_link, records_of, select

#: Table 1's rows at the paper's protocol (five seeds) and the MLP control table's; nuPI's gains on Table 1's
#: model-wise MLP cell; every cell with every other optimiser; Table 1's LeNet5 rows with the best other
#: optimiser on the MLP cells; and the cause test of their collapse (a smaller gain, for their first epochs).
TABLE1_GRID = studies.grids("tab:mnist", preset="paper")[0]
CONTROL_GRID = studies.grids("tab:mlp_control", preset="paper")[0]
GAIN_GRID, = studies.grids("nupi_gain")
GRID, = studies.grids("dual_optimizers")
LENET5_GRID, = studies.grids("dual_optimizers_lenet5")
GAIN_CAUSE_GRID, = studies.grids("nupi_lenet5_gain_cause")
#: Every grid of the page, for :func:`analysis.report.missing_runs`.
GRIDS = (GAIN_GRID, GRID, LENET5_GRID, GAIN_CAUSE_GRID, TABLE1_GRID, CONTROL_GRID)

#: The dual optimisers compared, by the name of their run parameter (``paper``: the paper's gradient ascent
#: with dual restarts, the default of every grid of the paper's tables).
OPTIMIZERS = {"paper": "gradient ascent, dual restarts (paper)", "gradient_ascent": "gradient ascent",
              "nupi": "nuPI", "augmented_lagrangian": "augmented Lagrangian"}


@dataclass(frozen=True)
class Cell:
    """One constrained cell of the paper's tables (a tuple of targets: one per layer)."""

    table: str
    grouping: str
    targets: float | tuple[float, ...]
    model: str = "mlp"

    @property
    def target(self) -> float | list[float]:
        """The target as a run's parameter gives it."""
        return list(self.targets) if isinstance(self.targets, tuple) else self.targets

    @property
    def label(self) -> str:
        model = "" if self.model == "mlp" else f"{display_name(self.model)} "
        return f"{ref(self.table)}, {model}{self.grouping}-wise {target_label(self.target)}"


CELLS = (Cell("tab:mnist", "model", 0.33), Cell("tab:mnist", "layer", (0.3, 0.3, 0.3)),
         Cell("tab:mlp_control", "model", 0.2), Cell("tab:mlp_control", "model", 0.35),
         Cell("tab:mlp_control", "layer", 0.2), Cell("tab:mlp_control", "layer", 0.35))

#: Table 1's LeNet5 rows (:data:`LENET5_GRID`).
LENET5_CELLS = (Cell("tab:mnist", "layer", (0.5, 0.3, 0.7, 0.1), "lenet5"), Cell("tab:mnist", "model", 0.1, "lenet5"))


# --------------------------------------------------------------------------- #
# nuPI's gain
# --------------------------------------------------------------------------- #

def _train_epochs(run: dict, column: str) -> list[float]:
    return [float(row[column]) for row in run["history"]
            if row["phase"] == "train" and row.get(column) not in (None, "")]


def gain_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per run of the gain experiment: ``kp``, final density and distance to target, largest and final
    multiplier, the fewest parameters the test-time model kept at an epoch's end and the epochs it spent
    collapsed (a gain whose multiplier leaps closes every median for a while). The errors are shown, not used."""
    rows = [{"kp": run["params"]["nupi_kp"], "L0-density (%)": 100 * run["metrics"]["l0_density"],
             "gap (points)": largest_gap(run), "largest λ": max(_train_epochs(run, "lambda_0"), default=None),
             "final λ": run["metrics"]["multipliers_final"][0],
             "lowest params (%)": min(_train_epochs(run, "params_pct"), default=None),
             "epochs collapsed": collapsed_epochs(run), "val. error final (%)": run["metrics"]["val_error_final"],
             "run": notebook_link(run["path"]) or "—"} for run in runs]
    return pd.DataFrame(rows).sort_values("kp", ignore_index=True) if rows else pd.DataFrame(rows)


def gain_table(runs: list[dict]) -> pd.DataFrame:
    """:func:`gain_rows` with each gain as it is written (1, 10, 1e+04)."""
    rows = gain_rows(runs)
    return rows.assign(kp=rows["kp"].map(short_number)) if len(rows) else rows


def violation_change(run: dict) -> float:
    """The median change of a model-wise run's violation per training step, from its step log."""
    steps = plots.steps_frame(run)
    steps_per_epoch = math.ceil(run["metrics"]["data"]["num_train"] / run["params"]["batch_size"])
    per_step = steps["constrained_density_0"].diff().abs() / (steps["epoch"].diff() * steps_per_epoch)
    return float(per_step.median())


def _best_gain(rows: pd.DataFrame) -> float:
    distance = rows["gap (points)"].abs()
    return float(rows.loc[distance <= distance.min() + rules.GAIN_SLACK_POINTS, "kp"].min())


def gain_at_edge(runs: list[dict]) -> bool:
    """Whether the range of gains must go on: the best gain is the largest tried and more than
    :data:`~paperlib.harness.rules.GAIN_SLACK_POINTS` from the target, so a larger one could still end closer."""
    rows = gain_rows(runs)
    if rows.empty:
        return False
    best = _best_gain(rows)
    return best == rows["kp"].max() and rows.loc[rows["kp"] == best, "gap (points)"].abs().iloc[0] > \
        rules.GAIN_SLACK_POINTS


def chosen_gain(runs: list[dict], planned: int) -> float | None:
    """The smallest ``kp`` whose final distance to target is within the slack of the smallest; None until all
    ``planned`` runs are in, or while the best may lie beyond the range (:func:`gain_at_edge`)."""
    if len(runs) < planned or gain_at_edge(runs):
        return None
    return _best_gain(gain_rows(runs))


# --------------------------------------------------------------------------- #
# The cells
# --------------------------------------------------------------------------- #

def cell_records(cell: Cell, runs: list[dict], paper_runs: list[dict], kp: float | None) -> dict[str, dict | None]:
    """Each optimiser's seed-0 record of ``cell`` or None: the paper's from ``paper_runs``, the others from
    ``runs``, nuPI at the gain ``kp`` (None: not chosen yet)."""
    where = {"model": cell.model, "method": "constrained", "grouping": cell.grouping, "target": cell.target, "seed": 0}
    wanted = {"paper": (paper_runs, where)}
    for name in ("gradient_ascent", "nupi", "augmented_lagrangian"):
        wanted[name] = (runs, {**where, "dual_optimizer": name, "dual_restarts": False}
                        | ({"nupi_kp": kp} if name == "nupi" else {}))
    found = {name: next(iter(select(among, **params)), None) for name, (among, params) in wanted.items()}
    if kp is None:
        found["nupi"] = None
    return found


#: The columns of :func:`summary`.
SUMMARY_COLUMNS = ["cell", "dual optimiser", "largest gap (points)", "hit", "val. error final (%)",
                   "Δ error (points)", "final λ", "run"]


def summary(cells: dict[Cell, dict[str, dict | None]], free: list[dict] | None = None) -> pd.DataFrame:
    """One row per cell and optimiser with a record: the largest final gap, whether it is on target by the book's
    rule (against the free-gates records ``free``), the final error and its difference from the paper's
    optimiser's, the largest final multiplier."""
    free = rules.free_gates_records() if free is None else free
    rows = []
    for cell, found in cells.items():
        paper = found.get("paper")
        for name, run in found.items():
            if run is None:
                continue
            error = run["metrics"]["val_error_final"]
            rows.append({"cell": cell.label, "dual optimiser": OPTIMIZERS[name],
                         "largest gap (points)": largest_gap(run),
                         "hit": rules.judge_record(run, free).outcome == rules.Outcome.ON_TARGET,
                         "val. error final (%)": error,
                         "Δ error (points)": error - paper["metrics"]["val_error_final"] if paper else None,
                         "final λ": max(run["metrics"]["multipliers_final"]), "run": run_link(run)})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def by_cell(table: pd.DataFrame, cells: tuple[Cell, ...] = CELLS) -> pd.DataFrame:
    """:func:`summary` with one row per cell: each optimiser's gap and final error side by side."""
    values = {"largest gap (points)": "gap", "val. error final (%)": "error (%)"}
    wide = table.pivot(index="cell", columns="dual optimiser", values=list(values)).rename(columns=values)
    present = set(table["dual optimiser"])
    columns = [(label, metric) for label in OPTIMIZERS.values() if label in present for metric in values.values()]
    rows = [cell.label for cell in cells if cell.label in wide.index]
    wide = wide.swaplevel(axis=1).reindex(index=rows, columns=columns)
    wide.columns = pd.MultiIndex.from_tuples(columns)
    return wide.rename_axis(index=None).reset_index(names=[("cell", "")])


def layer_gaps(cells: dict[Cell, dict[str, dict | None]]) -> pd.DataFrame:
    """One row per layer-wise cell and optimiser with a record: every layer's final gap (points)."""
    return pd.DataFrame([{"cell": cell.label, "dual optimiser": OPTIMIZERS[name],
                          **dict(zip(run["metrics"]["l0_density_per_layer"], rules.final_gaps(run)))}
                         for cell, found in cells.items() if cell.grouping == "layer"
                         for name, run in found.items() if run is not None])


def seed_spread(table1_runs: list[dict], cells: tuple[Cell, ...] = CELLS[:2]) -> float:
    """The run-to-run standard deviation of the final error over the seeds of Table 1's ``cells``, pooled (the
    root of the cells' mean variance); by default its two MLP cells."""
    variances = []
    for cell in cells:
        errors = [run["metrics"]["val_error_final"]
                  for run in select(table1_runs, model=cell.model, grouping=cell.grouping, target=cell.target)]
        if len(errors) >= 2:
            variances.append(statistics.variance(errors))
    if not variances:
        raise ValueError(f"no cell of {', '.join(cell.label for cell in cells)} has two seeds: the seed spread "
                         f"cannot be measured")
    return statistics.fmean(variances) ** 0.5


def verdicts(table: pd.DataFrame, spread: float, n_cells: int = len(CELLS)) -> pd.DataFrame:
    """One row per optimiser in ``table`` (:func:`summary`): cells, on target, largest |gap|, the range of its
    error against the paper's optimiser; ``no cost``: none more than :data:`~paperlib.harness.rules.COST_SPREADS`
    seed spreads above it; ``removes overshoot``: on target in all ``n_cells`` cells at no cost (None until every
    cell is in, and for the paper's own)."""
    rows = []
    for name, label in OPTIMIZERS.items():
        mine = table[table["dual optimiser"] == label]
        if mine.empty:
            continue
        deltas = mine["Δ error (points)"].dropna().astype(float)
        paper = name == "paper"
        no_cost = None if paper or deltas.empty else bool((deltas <= rules.COST_SPREADS * spread).all())
        complete = len(mine) == n_cells
        rows.append({"dual optimiser": label, "cells": len(mine), "on target": int(mine["hit"].sum()),
                     "largest |gap| (points)": float(mine["largest gap (points)"].abs().max()),
                     "Δ error low": None if paper or deltas.empty else float(deltas.min()),
                     "Δ error high": None if paper or deltas.empty else float(deltas.max()),
                     "no cost": no_cost,
                     "removes overshoot": None if paper or not complete
                     else bool(mine["hit"].all() and no_cost)})
    return pd.DataFrame(rows, columns=["dual optimiser", "cells", "on target", "largest |gap| (points)",
                                       "Δ error low", "Δ error high", "no cost", "removes overshoot"])


def winners(judged: pd.DataFrame) -> list[str] | None:
    """The optimisers that remove the overshoot at no cost, or None while one still lacks a cell."""
    others = judged[judged["dual optimiser"] != OPTIMIZERS["paper"]]
    if len(others) < len(OPTIMIZERS) - 1 or others["removes overshoot"].isna().any():
        return None
    return others.loc[others["removes overshoot"].astype(bool), "dual optimiser"].tolist()


def best_other(table: pd.DataFrame) -> tuple[str | None, bool]:
    """The other optimiser that did best on the MLP cells (the largest share on target, then the smallest mean
    distance to target; never the error), None without records; and whether every cell is in."""
    scores, complete = {}, True
    for name, label in OPTIMIZERS.items():
        rows = table[table["dual optimiser"] == label]
        if name == "paper":
            continue
        complete &= len(rows) == len(CELLS)
        if len(rows):
            scores[name] = (-rows["hit"].mean(), rows["largest gap (points)"].abs().mean())
    return (min(scores, key=scores.get) if scores else None), complete


def grid_optimizer(grid: str) -> str:
    """The one dual optimiser a grid file's runs use."""
    names = {config.dual_optimizer for config, _ in grid_runs(grid)}
    if len(names) != 1:
        raise ValueError(f"{grid} runs {len(names)} dual optimisers ({', '.join(sorted(names))}); one was expected")
    return names.pop()


@dataclass
class Comparison:
    """Everything the page shows: the gain runs, the chosen gain, every cell's records, their :func:`summary`,
    the seed spread, and Table 1's LeNet5 rows."""

    gains: list[dict]
    kp: float | None
    cells: dict[Cell, dict[str, dict | None]]
    table: pd.DataFrame
    spread: float
    lenet5: dict[Cell, dict[str, dict | None]] = field(default_factory=dict)

    @classmethod
    def from_records(cls) -> "Comparison":
        gains = records_of(GAIN_GRID)
        kp = chosen_gain(gains, planned=len(grid_runs(GAIN_GRID)))
        runs, paper_runs = records_of([GRID, GAIN_GRID]), records_of([TABLE1_GRID, CONTROL_GRID])
        cells = {cell: cell_records(cell, runs, paper_runs, kp) for cell in CELLS}
        lenet5 = {cell: cell_records(cell, records_of(LENET5_GRID), records_of(TABLE1_GRID), kp)
                  for cell in LENET5_CELLS}
        return cls(gains, kp, cells, summary(cells), seed_spread(records_of(TABLE1_GRID)), lenet5)

    def lenet5_shown(self) -> dict[Cell, dict[str, dict | None]]:
        """Table 1's LeNet5 rows with the paper's optimiser and the one :data:`LENET5_GRID` runs."""
        ran = grid_optimizer(LENET5_GRID)
        return {cell: {name: found[name] for name in ("paper", ran)} for cell, found in self.lenet5.items()}

    def lenet5_verdicts(self) -> pd.DataFrame:
        """One row per LeNet5 row with :data:`LENET5_GRID`'s optimiser: on target, gap, its error and the paper's
        optimiser's, whether the difference exceeds :data:`~paperlib.harness.rules.COST_SPREADS` seed spreads of
        Table 1's LeNet5 rows (``attrs["cost"]``), the epochs collapsed and whether it ended so."""
        ran = grid_optimizer(LENET5_GRID)
        table = summary(self.lenet5_shown())
        ours = table[table["dual optimiser"] == OPTIMIZERS[ran]]
        cost = rules.COST_SPREADS * (seed_spread(records_of(TABLE1_GRID), LENET5_CELLS) if len(ours) else math.nan)
        runs = {cell.label: found[ran] for cell, found in self.lenet5.items()}
        rows = [{"cell": row["cell"], "on target": bool(row["hit"]), "gap (points)": row["largest gap (points)"],
                 "error paper's (%)": row["val. error final (%)"] - row["Δ error (points)"],
                 "error (%)": row["val. error final (%)"], "Δ error (points)": row["Δ error (points)"],
                 "beyond the cost": bool(row["Δ error (points)"] > cost),
                 "epochs collapsed": collapsed_epochs(runs[row["cell"]]),
                 "ends collapsed": ends_collapsed(runs[row["cell"]])} for _, row in ours.iterrows()]
        result = pd.DataFrame(rows, columns=["cell", "on target", "gap (points)", "error paper's (%)", "error (%)",
                                             "Δ error (points)", "beyond the cost", "epochs collapsed",
                                             "ends collapsed"])
        result.attrs["cost"] = cost
        return result

    def gain_cause(self) -> pd.DataFrame:
        """:func:`gain_cause` for Table 1's LeNet5 rows."""
        tested = grid_optimizer(GAIN_CAUSE_GRID)
        return gain_cause({cell: found[tested] for cell, found in self.lenet5.items()}, records_of(GAIN_CAUSE_GRID))


#: One colour and marker per dual optimiser, in every figure of the page.
STYLES = {"paper": ("C0", "o"), "gradient_ascent": ("C1", "s"), "nupi": ("C2", "^"),
          "augmented_lagrangian": ("C3", "D")}


def plot_gaps(cells: dict[Cell, dict[str, dict | None]], columns: int = 3, zoom: float = 2.0) -> plt.Figure:
    """One panel per cell: each optimiser's gap of every constrained layer against epochs (:func:`step_gaps`),
    linear within ± ``zoom`` points (the paper's overshoot of 1-2 points) and logarithmic beyond; one colour and
    marker per optimiser (:data:`STYLES`), one line style per layer, a band at ± 1 point."""
    rows = math.ceil(len(cells) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7, 2.4 * rows + 0.6), sharex=True, sharey=True, squeeze=False)
    for ax, (cell, found) in zip(axes.flat, cells.items()):
        for name, run in found.items():
            if run is None:
                continue
            colour, marker = STYLES[name]
            gaps = step_gaps(run)
            for k in gaps:
                ax.plot(gaps.index, gaps[k], color=colour, ls=("-", "--", ":", "-.")[k % 4], lw=1.2, marker=marker,
                        markevery=max(1, len(gaps) // 6), ms=4, label=OPTIMIZERS[name] if k == 0 else None)
        ax.axhspan(-rules.ON_TARGET_POINTS, rules.ON_TARGET_POINTS, color="0.85", zorder=0)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_yscale("symlog", linthresh=zoom, linscale=3.0)
        ticks = [-10, -1, 0, 1, 10, 50]
        ax.set_yticks(ticks, [f"{tick:g}".replace("-", "−") for tick in ticks])
        ax.set_title(cell.label.replace(", ", "\n", 1), fontsize=9)
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(cells):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("density − target (pts)", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("epoch", fontsize=9)
    style.legend_below(fig, axes.flat[0], bottom=0.1 if rows > 1 else 0.2)
    return fig


def plot_collapse(groups: dict[str, dict[Cell, dict[str, dict | None]]]) -> plt.Figure:
    """One panel per group of cells: every run's test error at each training epoch's end (log scale) by optimiser;
    a line at :data:`COLLAPSED_ERROR_PCT` marks a collapsed test-time model."""
    fig, axes = plt.subplots(1, len(groups), figsize=(7, 3.2), sharey=True, squeeze=False)
    for ax, (title, cells) in zip(axes[0], groups.items()):
        seen = set()
        for found in cells.values():
            for name, run in found.items():
                if run is None:
                    continue
                errors = _train_epochs(run, "val_error")
                colour, marker = STYLES[name]
                ax.plot(range(1, len(errors) + 1), errors, color=colour, lw=1, alpha=0.8, marker=marker,
                        markevery=max(1, len(errors) // 5), ms=4, label=None if name in seen else OPTIMIZERS[name])
                seen.add(name)
        ax.axhline(COLLAPSED_ERROR_PCT, color="k", ls="--", lw=0.8, label=f"collapsed ({COLLAPSED_ERROR_PCT:g}%)")
        ax.set(yscale="log", xlabel="epoch")
        ax.set_title(f"{title}: one line per cell", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("test error (%)")
    handles = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    style.legend_below(fig, list(handles.values()), bottom=0.2)
    return fig


#: A test-time model that misclassifies this share (%) of the test set has collapsed: a constant answer errs on
#: 88.65% of MNIST's. The parameters it keeps do not tell: a LeNet5 without conv maps keeps its fully connected tail.
COLLAPSED_ERROR_PCT = 80.0


def collapsed_epochs(run: dict, first: int | None = None) -> int:
    """The training epochs (of the ``first`` ones) at whose end the test-time model had collapsed (the test split
    describes the run here; it chooses nothing)."""
    return sum(error >= COLLAPSED_ERROR_PCT for error in _train_epochs(run, "val_error")[:first])


def ends_collapsed(run: dict) -> bool:
    """Whether the test-time model had collapsed at the end of the last training epoch."""
    return _train_epochs(run, "val_error")[-1] >= COLLAPSED_ERROR_PCT


def collapse_summary(cells: dict[Cell, dict[str, dict | None]]) -> pd.DataFrame:
    """One row per optimiser with records: its cells, those that ever collapsed, the fewest and most epochs
    collapsed, the fewest parameters kept at any epoch (%) and the cells it ends collapsed in."""
    rows = []
    for name, label in OPTIMIZERS.items():
        runs = [found[name] for found in cells.values() if found.get(name)]
        if not runs:
            continue
        counts = [collapsed_epochs(run) for run in runs]
        hit = [count for count in counts if count]
        rows.append({"dual optimiser": label, "cells": len(runs), "collapsed": len(hit),
                     "fewest epochs": min(hit, default=None), "most epochs": max(hit, default=None),
                     "of epochs": max(run["metrics"]["epochs_completed"] for run in runs),
                     "lowest params (%)": min(min(_train_epochs(run, "params_pct")) for run in runs),
                     "ends collapsed": sum(ends_collapsed(run) for run in runs)})
    table = pd.DataFrame(rows, columns=["dual optimiser", "cells", "collapsed", "fewest epochs", "most epochs",
                                        "of epochs", "lowest params (%)", "ends collapsed"])
    return table.astype({"fewest epochs": "Int64", "most epochs": "Int64"})


def thin_layers(run: dict) -> pd.DataFrame:
    """How a collapsed test-time model keeps its expected density: at the saved epoch of highest test error, if
    collapsed, every layer that kept under half the groups its expected density promises (its gates share the
    density thinly, each below the median's threshold, Eq. 9); empty if it never collapsed at a saved epoch."""
    columns = ["epoch", "test error (%)", "layer", "groups kept", "groups", "expected density (%)"]
    rows = {row["epoch"]: row for row in run["history"]
            if row["phase"] == "train" and row.get("val_error") not in (None, "")}
    errors = {epoch: float(rows[epoch]["val_error"]) for epoch in run.get("gate_medians", {}) if epoch in rows}
    worst = max(errors, key=errors.get, default=None)
    if worst is None or errors[worst] < COLLAPSED_ERROR_PCT:
        return pd.DataFrame(columns=columns)
    thin = []
    for layer, medians in run["gate_medians"][worst].items():
        kept, expected = sum(median > 0 for median in medians), float(rows[worst][f"density[{layer}]"])
        if kept / len(medians) < expected / 2:
            thin.append([int(worst), errors[worst], layer, kept, len(medians), 100 * expected])
    return pd.DataFrame(thin, columns=columns)


def gain_cause(chosen: dict[Cell, dict | None], smaller: list[dict]) -> pd.DataFrame:
    """The cause test of a collapse at the chosen gain: per cell with a run at it (``chosen``) and a shorter one at
    a smaller gain (``smaller``), the epochs each spent collapsed within the shorter run's epochs (no schedule:
    the longer run's first ones) and the highest test error in them."""
    rows = []
    for cell, run in chosen.items():
        test = next(iter(select(smaller, model=cell.model, grouping=cell.grouping, target=cell.target)), None)
        if run is None or test is None:
            continue
        first = test["metrics"]["epochs_completed"]
        rows.append({"cell": cell.label, "epochs": first, "kp chosen": run["params"]["nupi_kp"],
                     "collapsed": collapsed_epochs(run, first),
                     "highest error (%)": max(_train_epochs(run, "val_error")[:first]),
                     "kp smaller": test["params"]["nupi_kp"], "collapsed, smaller kp": collapsed_epochs(test, first),
                     "highest error, smaller kp (%)": max(_train_epochs(test, "val_error")[:first])})
    return pd.DataFrame(rows, columns=["cell", "epochs", "kp chosen", "collapsed", "highest error (%)", "kp smaller",
                                       "collapsed, smaller kp", "highest error, smaller kp (%)"])


def gain_is_cause(test: pd.DataFrame) -> str | None:
    """``the cause`` if in every cell only the chosen gain collapses, ``not the cause`` if the smaller collapses as
    long or longer in every cell, ``part of the cause`` otherwise; None without a record."""
    if test.empty:
        return None
    big, small = test["collapsed"], test["collapsed, smaller kp"]
    if ((big > 0) & (small == 0)).all():
        return "the cause"
    if (small >= big).all():
        return "not the cause"
    return "part of the cause"


def balance_gain(run: dict) -> tuple[float, float, float]:
    """Where nuPI's proportional step matches its integral one: the median change of the violation a step, the
    final violation, and their ratio to one digit (the gain at which ``kp (e_t − e_{t−1})`` equals ``e_t``)."""
    violation, change = abs(largest_gap(run)) / 100, violation_change(run)
    return change, violation, float(f"{violation / change:.0e}")
