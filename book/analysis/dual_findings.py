"""Beyond the paper (book/results_dual_optimizers.md): does another dual optimiser (:data:`OPTIMIZERS`; the updates
are in :mod:`paperlib.method.lagrangian`) end a constrained run at its target, on the paper's own cells
(:data:`CELLS`, seed 0, the paper's protocol)? Tables, figures and numbers; the page holds the prose.

No choice here looks at the test split: nuPI's gain is chosen by the final distance to the target alone
(:func:`chosen_gain`), and an optimiser removes the overshoot when every cell is on target
(:func:`paperlib.harness.rules.judge_record`) at no cost in error (:func:`verdicts`).
"""

import math
import statistics
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import plots, rules, studies
from paperlib.harness.paper_rows import constrained_densities, largest_gap, target_label
from paperlib.harness.vocabulary import short_number
from paperlib.paper.models import display_name
from paperlib.paper.paper_numbers import ref

from .control import run_link
from .mnist_findings import records_of, select
from .report import grid_runs, notebook_link, sweep_command

#: Table 1's MLP rows at the paper's protocol (five seeds), and the MLP control table's.
TABLE1_GRID = studies.grids("tab:mnist", preset="paper")[0]
CONTROL_GRID = studies.grids("tab:mlp_control", preset="paper")[0]
#: nuPI's proportional gain, tried on Table 1's model-wise MLP cell.
GAIN_GRID, = studies.grids("nupi_gain")
#: Every cell with every optimiser other than the paper's.
GRID, = studies.grids("dual_optimizers")
#: Table 1's LeNet5 rows with the best other optimiser on the MLP cells.
LENET5_GRID, = studies.grids("dual_optimizers_lenet5")
#: The cause test of the LeNet5 rows' collapse under nuPI: the same rows at a smaller gain, for their first epochs.
GAIN_CAUSE_GRID, = studies.grids("nupi_lenet5_gain_cause")

#: The dual optimisers compared, by the name of their run parameter (``paper``: the paper's gradient ascent
#: with dual restarts, the default of every grid of the paper's tables).
OPTIMIZERS = {"paper": "gradient ascent, dual restarts (paper)", "gradient_ascent": "gradient ascent",
              "nupi": "nuPI", "augmented_lagrangian": "augmented Lagrangian"}


@dataclass(frozen=True)
class Cell:
    """One constrained cell of the paper's tables: the table's label, the grouping, the target (a tuple for
    one target per layer) and the model."""

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

    @property
    def paper_grid(self) -> str:
        return TABLE1_GRID if self.table == "tab:mnist" else CONTROL_GRID


CELLS = (Cell("tab:mnist", "model", 0.33), Cell("tab:mnist", "layer", (0.3, 0.3, 0.3)),
         Cell("tab:mlp_control", "model", 0.2), Cell("tab:mlp_control", "model", 0.35),
         Cell("tab:mlp_control", "layer", 0.2), Cell("tab:mlp_control", "layer", 0.35))

#: Table 1's LeNet5 rows, run with the paper's optimiser and the best other one on the MLP cells
#: (:func:`best_other`; :data:`LENET5_GRID`).
LENET5_CELLS = (Cell("tab:mnist", "layer", (0.5, 0.3, 0.7, 0.1), "lenet5"), Cell("tab:mnist", "model", 0.1, "lenet5"))


def final_multipliers(record: dict) -> list[float]:
    """The multipliers at the end of training, one per constraint."""
    return list(record["metrics"]["multipliers_final"])


# --------------------------------------------------------------------------- #
# nuPI's gain
# --------------------------------------------------------------------------- #

def _train_epochs(run: dict, column: str) -> list[float]:
    return [float(row[column]) for row in run["history"]
            if row["phase"] == "train" and row.get(column) not in (None, "")]


def gain_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per run of the gain experiment: ``kp``, the final density, its distance to the target, the
    largest and the final multiplier, the lowest share of parameters the test-time model (gates at their
    medians, computed from the gates alone) kept at any epoch, and the epochs it spent collapsed
    (:func:`collapsed_epochs`): a gain whose multiplier leaps closes every median for a while. The errors are
    shown, not used."""
    rows = [{"kp": run["params"]["nupi_kp"], "L0-density (%)": 100 * run["metrics"]["l0_density"],
             "gap (points)": largest_gap(run), "largest λ": max(_train_epochs(run, "lambda_0"), default=None),
             "final λ": final_multipliers(run)[0],
             "lowest params (%)": min(_train_epochs(run, "params_pct"), default=None),
             "epochs collapsed": collapsed_epochs(run), "val. error final (%)": run["metrics"]["val_error_final"],
             "run": notebook_link(run["path"]) or "—"} for run in runs]
    return pd.DataFrame(rows).sort_values("kp", ignore_index=True) if rows else pd.DataFrame(rows)


def gain_table(runs: list[dict]) -> pd.DataFrame:
    """:func:`gain_rows` for the page: each gain as it is written (1, 10, 1e+04)."""
    rows = gain_rows(runs)
    return rows.assign(kp=rows["kp"].map(short_number)) if len(rows) else rows


def violation_change(run: dict) -> float:
    """The median change of a model-wise run's violation from one training step to the next, from its step log
    (logged every few steps; each change is divided by the steps between two rows)."""
    steps = plots.steps_frame(run)
    steps_per_epoch = math.ceil(run["metrics"]["data"]["num_train"] / run["params"]["batch_size"])
    per_step = steps["constrained_density_0"].diff().abs() / (steps["epoch"].diff() * steps_per_epoch)
    return float(per_step.median())


def chosen_gain(runs: list[dict], planned: int) -> float | None:
    """The smallest ``kp`` whose final distance to the target is within :data:`~paperlib.harness.rules.GAIN_SLACK_POINTS` of the
    smallest; None until all ``planned`` runs of the gain experiment have a record, and None while the best
    may lie beyond the range (:func:`gain_at_edge`)."""
    if len(runs) < planned or gain_at_edge(runs):
        return None
    return _best_gain(runs)


def _best_gain(runs: list[dict]) -> float:
    gaps = gain_rows(runs)
    best = gaps["gap (points)"].abs().min()
    return float(gaps.loc[gaps["gap (points)"].abs() <= best + rules.GAIN_SLACK_POINTS, "kp"].min())


def gain_at_edge(runs: list[dict]) -> bool:
    """Whether the range of gains must go on: the gain :func:`chosen_gain` would choose is the largest one
    tried, and its final distance to the target is more than :data:`~paperlib.harness.rules.GAIN_SLACK_POINTS`, so that a larger
    gain could still end closer by more than the slack."""
    if not runs:
        return False
    rows = gain_rows(runs)
    best = _best_gain(runs)
    distance = rows.loc[rows["kp"] == best, "gap (points)"].abs().iloc[0]
    return best == rows["kp"].max() and distance > rules.GAIN_SLACK_POINTS


# --------------------------------------------------------------------------- #
# The cells
# --------------------------------------------------------------------------- #

def cell_records(cell: Cell, runs: list[dict], paper_runs: list[dict], kp: float | None) -> dict[str, dict | None]:
    """Each optimiser's seed-0 record of ``cell`` (None where there is none): the paper's from ``paper_runs``
    (its grid), the others from ``runs`` (this module's grids), nuPI at the gain ``kp`` (None: not chosen yet)."""
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
    """One row per cell and dual optimiser with a record: the final largest distance to target over the
    constrained layers (positive: above it), whether it is on target (:func:`paperlib.harness.rules.judge_record`, with
    the free-gates records ``free``, by default :func:`paperlib.harness.rules.free_gates_records`), the final error and
    its difference from the paper's optimiser on the same cell, the largest final multiplier."""
    free = rules.free_gates_records() if free is None else free
    rows = []
    for cell, found in cells.items():
        paper = found.get("paper")
        for name, run in found.items():
            if run is None:
                continue
            error = run["metrics"]["val_error_final"]
            rows.append({"cell": cell.label, "dual optimiser": OPTIMIZERS[name], "largest gap (points)": largest_gap(run),
                         "hit": rules.judge_record(run, free).outcome == rules.Outcome.ON_TARGET,
                         "val. error final (%)": error,
                         "Δ error (points)": error - paper["metrics"]["val_error_final"] if paper else None,
                         "final λ": max(final_multipliers(run)), "run": run_link(run)})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def by_cell(table: pd.DataFrame, cells: tuple[Cell, ...] = CELLS) -> pd.DataFrame:
    """:func:`summary` with one row per cell: each dual optimiser's largest gap (points) and final error (%)
    side by side, optimisers in the order of :data:`OPTIMIZERS`, cells in that of ``cells``."""
    values = {"largest gap (points)": "gap", "val. error final (%)": "error (%)"}
    wide = table.pivot(index="cell", columns="dual optimiser", values=list(values)).rename(columns=values)
    present = set(table["dual optimiser"])
    columns = [(label, metric) for label in OPTIMIZERS.values() if label in present for metric in values.values()]
    rows = [cell.label for cell in cells if cell.label in wide.index]
    wide = wide.swaplevel(axis=1).reindex(index=rows, columns=columns)
    wide.columns = pd.MultiIndex.from_tuples(columns)
    return wide.rename_axis(index=None).reset_index(names=[("cell", "")])


def layer_gaps(cells: dict[Cell, dict[str, dict | None]]) -> pd.DataFrame:
    """One row per layer-wise cell and dual optimiser with a record: the final expected density's distance from
    its target on every constrained layer, in points (positive: above), in the layers' order."""
    rows = []
    for cell, found in cells.items():
        for name, run in found.items():
            if run is None or cell.grouping != "layer":
                continue
            layers = list(run["metrics"]["l0_density_per_layer"])
            pairs = constrained_densities(run, run["history"][-1])
            rows.append({"cell": cell.label, "dual optimiser": OPTIMIZERS[name],
                         **{layer: 100 * (density - target) for layer, (density, target) in zip(layers, pairs)}})
    return pd.DataFrame(rows)


def seed_spread(table1_runs: list[dict], cells: tuple[Cell, ...] = CELLS[:2]) -> float:
    """The run-to-run standard deviation of the final error over the seeds of Table 1's ``cells`` (pooled: the
    mean of the cells' variances, square-rooted); by default its two MLP cells."""
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
    """One row per dual optimiser of :data:`OPTIMIZERS` with records in ``table`` (:func:`summary`): its cells with
    a record, those on target, the largest distance to target and the range of its final error against the paper's
    optimiser (points); ``no cost``: no cell's final error more than :data:`~paperlib.harness.rules.COST_SPREADS` seed
    spreads (``spread``) above the paper's optimiser's; ``removes overshoot``: on target in all ``n_cells`` cells
    at no cost (None until every cell has a record; always None for the paper's own).

    >>> verdicts(summary(cells), spread=0.1).set_index("dual optimiser")["removes overshoot"]  # doctest: +SKIP
    """
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
    """The optimisers that remove the overshoot at no cost (:func:`verdicts`), or None while one of the others
    still lacks a cell."""
    others = judged[judged["dual optimiser"] != OPTIMIZERS["paper"]]
    if len(others) < len(OPTIMIZERS) - 1 or others["removes overshoot"].isna().any():
        return None
    return others.loc[others["removes overshoot"].astype(bool), "dual optimiser"].tolist()


def best_other(table: pd.DataFrame) -> tuple[str | None, bool]:
    """The dual optimiser other than the paper's that did best on the MLP cells of ``table`` (:func:`summary`):
    on target (:func:`paperlib.harness.rules.judge_record`) in the largest share of its cells, then the
    smallest mean distance to target (training-time densities alone, never the error); None without records.
    Also whether every MLP cell of every optimiser has a record (False: the leader so far)."""
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
    """The dual optimiser a grid file's runs use (its ``dual_optimizer``, the same for every run)."""
    names = {config.dual_optimizer for config, _ in grid_runs(grid)}
    if len(names) != 1:
        raise ValueError(f"{grid} runs {len(names)} dual optimisers ({', '.join(sorted(names))}); one was expected")
    return names.pop()


@dataclass
class Comparison:
    """Everything the page shows, from the committed records: the gain experiment's runs, the chosen gain
    (None until all have run), every cell's records, their :func:`summary` and the seed spread."""

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
        cells = load(kp)
        lenet5 = {cell: cell_records(cell, records_of(LENET5_GRID), records_of(TABLE1_GRID), kp)
                  for cell in LENET5_CELLS}
        return cls(gains, kp, cells, summary(cells), seed_spread(records_of(TABLE1_GRID)), lenet5)

    def lenet5_shown(self) -> dict[Cell, dict[str, dict | None]]:
        """Table 1's LeNet5 rows with the paper's optimiser and the one :data:`LENET5_GRID` runs."""
        ran = grid_optimizer(LENET5_GRID)
        return {cell: {name: found[name] for name in ("paper", ran)} for cell, found in self.lenet5.items()}

    def lenet5_rows(self) -> tuple[pd.DataFrame, pd.DataFrame, float]:
        """The :func:`summary` of :meth:`lenet5_shown`, its rows of the optimiser :data:`LENET5_GRID` runs, and
        the seed spread of Table 1's LeNet5 rows (which judges the cost in error there)."""
        table = summary(self.lenet5_shown())
        ours = table[table["dual optimiser"] == OPTIMIZERS[grid_optimizer(LENET5_GRID)]]
        spread = seed_spread(records_of(TABLE1_GRID), LENET5_CELLS) if len(ours) else math.nan
        return table, ours, spread

    def lenet5_verdicts(self) -> pd.DataFrame:
        """One row per LeNet5 row run with :data:`LENET5_GRID`'s optimiser: on target, its largest gap, its
        final error and the paper's optimiser's, the difference, whether that exceeds
        :data:`~paperlib.harness.rules.COST_SPREADS` seed spreads of Table 1's LeNet5 rows, the epochs its test-time model
        spent collapsed and whether it ended collapsed (:func:`collapsed_epochs`)."""
        table, ours, spread = self.lenet5_rows()
        ran = grid_optimizer(LENET5_GRID)
        runs = {cell.label: found[ran] for cell, found in self.lenet5.items()}
        rows = [{"cell": row["cell"], "on target": bool(row["hit"]), "gap (points)": row["largest gap (points)"],
                 "error paper's (%)": row["val. error final (%)"] - row["Δ error (points)"],
                 "error (%)": row["val. error final (%)"], "Δ error (points)": row["Δ error (points)"],
                 "beyond the cost": bool(row["Δ error (points)"] > rules.COST_SPREADS * spread),
                 "epochs collapsed": collapsed_epochs(runs[row["cell"]]),
                 "ends collapsed": ends_collapsed(runs[row["cell"]])} for _, row in ours.iterrows()]
        result = pd.DataFrame(rows, columns=["cell", "on target", "gap (points)", "error paper's (%)", "error (%)",
                                             "Δ error (points)", "beyond the cost", "epochs collapsed",
                                             "ends collapsed"])
        result.attrs["cost"] = rules.COST_SPREADS * spread
        return result

    def gain_cause(self) -> pd.DataFrame:
        """:func:`gain_cause` for Table 1's LeNet5 rows: the cause test's optimiser at the chosen gain against the
        cause test."""
        tested = grid_optimizer(GAIN_CAUSE_GRID)
        return gain_cause({cell: found[tested] for cell, found in self.lenet5.items()}, records_of(GAIN_CAUSE_GRID))


#: One colour and marker per dual optimiser, in every figure of the page.
STYLES = {"paper": ("C0", "o"), "gradient_ascent": ("C1", "s"), "nupi": ("C2", "^"),
          "augmented_lagrangian": ("C3", "D")}


def _gap_curves(cell: Cell, run: dict) -> list[tuple[pd.Series, pd.Series]]:
    """(epochs, expected density − target in points) of each constrained layer of ``run``, from its step log."""
    steps = plots.steps_frame(run)
    targets = cell.target if isinstance(cell.target, list) else [cell.target] * len(final_multipliers(run))
    return [(steps["epoch"], 100 * (steps[f"constrained_density_{k}"] - target)) for k, target in enumerate(targets)]


def plot_gaps(cells: dict[Cell, dict[str, dict | None]], columns: int = 3, zoom: float = 2.0) -> plt.Figure:
    """One panel per cell: each optimiser's expected density minus target (points) of every constrained layer
    against epochs, on a symmetric log scale, linear within ± ``zoom`` points (where the paper's overshoot of 1-2
    points lies) and logarithmic beyond (the first epochs' 60 points, the other optimisers' undershoot). One
    colour and marker per optimiser (:data:`STYLES`), one line style per layer; a band marks ± 1 point."""
    rows = math.ceil(len(cells) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7, 2.4 * rows + 0.6), sharex=True, sharey=True, squeeze=False)
    for ax, (cell, found) in zip(axes.flat, cells.items()):
        for name, run in found.items():
            if run is None:
                continue
            colour, marker = STYLES[name]
            for k, (epochs, gaps) in enumerate(_gap_curves(cell, run)):
                ax.plot(epochs, gaps, color=colour, ls=("-", "--", ":", "-.")[k % 4], lw=1.2, marker=marker,
                        markevery=max(1, len(epochs) // 6), ms=4, label=OPTIMIZERS[name] if k == 0 else None)
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
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.1 if rows > 1 else 0.2, 1, 1))
    return fig


def plot_collapse(groups: dict[str, dict[Cell, dict[str, dict | None]]]) -> plt.Figure:
    """One panel per group of cells (``{"MLP": cells, "LeNet5": cells}``): every run's test error at the end of
    each training epoch, on a log scale, coloured by optimiser (:data:`STYLES`); the line at
    :data:`COLLAPSED_ERROR_PCT` marks a collapsed test-time model."""
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
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    return fig


#: A test-time model (gates at their medians) that misclassifies this share of the test set (%) or more has
#: collapsed: it does about as well as a constant answer, which errs on 88.65% of MNIST's test set (the commonest
#: digit, 1, is 11.35% of it). The share of parameters it keeps does not tell: a LeNet5 whose conv layers keep no
#: map still keeps its fully connected tail, over 1% of its parameters.
COLLAPSED_ERROR_PCT = 80.0


def collapsed_epochs(run: dict, first: int | None = None) -> int:
    """The training epochs (of the ``first`` ones, if given) at whose end the run's test-time model misclassified
    :data:`COLLAPSED_ERROR_PCT` of the test set or more (the test split describes the run here; it chooses
    nothing)."""
    return sum(error >= COLLAPSED_ERROR_PCT for error in _train_epochs(run, "val_error")[:first])


def ends_collapsed(run: dict) -> bool:
    """Whether the run's test-time model misclassified :data:`COLLAPSED_ERROR_PCT` of the test set or more at the
    end of its last training epoch."""
    return _train_epochs(run, "val_error")[-1] >= COLLAPSED_ERROR_PCT


def collapse_summary(cells: dict[Cell, dict[str, dict | None]]) -> pd.DataFrame:
    """One row per dual optimiser with records in ``cells``: its cells with a record, those whose test-time model
    ever collapsed (:func:`collapsed_epochs`), the fewest and most epochs collapsed among those, the lowest share of
    parameters its test-time model kept at any epoch (%), and the cells it ends collapsed in."""
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
    """How a collapsed test-time model keeps its expected density: at the epoch with saved gate medians (App. I)
    where the run's test error was highest, if that error is :data:`COLLAPSED_ERROR_PCT` or more, every layer that
    kept under half the share of its groups that its expected density promises (its gates share the density
    thinly: each opens with a probability near the layer's density, below the median's threshold, Eq. 9). Columns:
    epoch, test error (%), layer, groups kept, groups, expected density (%); empty if the run never collapsed at a
    saved epoch."""
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
    """The cause test of a collapse at the chosen gain (:data:`GAIN_CAUSE_GRID`): for each cell with a record at
    the chosen gain (``chosen``) and a shorter one at a smaller gain (``smaller``), the epochs each spent collapsed
    within the shorter run's epochs (the MNIST protocol has no schedule: they are the longer run's first ones) and
    the highest test error each had in them. :func:`gain_is_cause` reads it."""
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
    """The cause test's outcome (:func:`gain_cause`): ``"the cause"`` where the smaller gain never collapses and
    the chosen one does in every cell, ``"not the cause"`` where the smaller one collapses as long or longer in
    every cell, ``"part of the cause"`` otherwise; None without a record."""
    if test.empty:
        return None
    big, small = test["collapsed"], test["collapsed, smaller kp"]
    if ((big > 0) & (small == 0)).all():
        return "the cause"
    if (small >= big).all():
        return "not the cause"
    return "part of the cause"


def missing_runs(cells: dict[Cell, dict[str, dict | None]], kp: float | None) -> pd.DataFrame:
    """One row per optimiser and cell without a record, with the command that makes it (nuPI's wait for its
    gain: :data:`GAIN_GRID`)."""
    rows = []
    for name, label in OPTIMIZERS.items():
        for cell, found in cells.items():
            if found[name] is not None:
                continue
            grids = [cell.paper_grid] if name == "paper" else [GAIN_GRID if name == "nupi" and kp is None else GRID]
            rows.append({"what": f"{label}, {cell.label}", "command": sweep_command(grids)})
    return pd.DataFrame(rows, columns=["what", "command"])


def balance_gain(run: dict) -> tuple[float, float, float]:
    """Where nuPI's proportional step matches its integral one on ``run`` (a gain run): the median change of the
    violation a step (:func:`violation_change`), the final violation (|largest gap| / 100), and their ratio to
    one significant digit, the gain at which ``kp (e_t − e_{t−1})`` is as large as ``e_t``."""
    violation, change = abs(largest_gap(run)) / 100, violation_change(run)
    return change, violation, float(f"{violation / change:.0e}")


def load(kp: float | None) -> dict[Cell, dict[str, dict | None]]:
    """Every cell's records (:func:`cell_records`) from the committed records of the grids."""
    runs, paper_runs = records_of([GRID, GAIN_GRID]), records_of([TABLE1_GRID, CONTROL_GRID])
    return {cell: cell_records(cell, runs, paper_runs, kp) for cell in CELLS}
