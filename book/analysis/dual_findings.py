"""Beyond the paper: does another dual optimiser end a constrained run at its target?

At the paper's protocol our constrained MLP runs end 1-2 points above their targets,
as the paper's own runs do. The multiplier is slow: gradient ascent at a dual
learning rate of 1e-4, reset to zero whenever the constraint holds (dual restarts,
App. G). This module compares, on the paper's own cells, the paper's dual optimiser
with three others (:data:`OPTIMIZERS`; the updates are in
:mod:`paperlib.method.lagrangian` and :mod:`paperlib.method.objective`):

- gradient ascent without dual restarts;
- nuPI (Sohrabi et al., ICML 2024), a PI controller on the multiplier, whose
  proportional gain ``nupi_kp`` is chosen first on one cell (:func:`chosen_gain`);
- the augmented Lagrangian (the method of multipliers, with rho = the dual lr).

The cells (:data:`CELLS`) are Table 1's two MLP rows and the 20% and 35% constrained
cells of the MLP control table, model- and layer-wise, all at the paper's protocol,
seed 0. The paper's optimiser is each cell's committed record of its own grid. Per
cell, :func:`summary` gives each optimiser's final largest distance to target over
the constrained layers and its final error. :func:`plot_trajectories` draws the
densities and multipliers side by side, and :func:`findings` says whether any
optimiser removes the overshoot at no cost in error: every cell on target
(:func:`paperlib.harness.rules.judge_record`) and no final error more than
:data:`~paperlib.harness.rules.COST_SPREADS` seed spreads above the paper's optimiser's. The page is
book/results_dual_optimizers.md.

No choice here looks at the test split: the gain is chosen by the final distance
to the target alone.
"""

import math
import statistics
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import rules, studies
from paperlib.harness.paper_rows import PAPER_MODEL_NAMES, constrained_densities, largest_gap, target_label
from .control import run_link
from .mnist_findings import records_of, select
from paperlib.paper.paper_numbers import ref
from .report import count_of, grid_runs, in_words, no_record_line, show
from paperlib.harness.vocabulary import short_number

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
        model = "" if self.model == "mlp" else f"{PAPER_MODEL_NAMES[self.model]} "
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
             "run": run_link(run)} for run in runs]
    return pd.DataFrame(rows).sort_values("kp", ignore_index=True) if rows else pd.DataFrame(rows)


def gain_table(runs: list[dict]) -> pd.DataFrame:
    """:func:`gain_rows` for the page: each gain as it is written (1, 10, 1e+04)."""
    rows = gain_rows(runs)
    return rows.assign(kp=rows["kp"].map(short_number)) if len(rows) else rows


def violation_change(run: dict) -> float:
    """The median change of a model-wise run's violation from one training step to the next, from its step log
    (logged every few steps; each change is divided by the steps between two rows)."""
    steps = pd.DataFrame(run["steps"]).apply(pd.to_numeric, errors="coerce")
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


#: The caption of a :func:`layer_gaps` table.
LAYER_GAPS_CAPTION = "Final expected density minus target on each layer of the layer-wise cells (points)"


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
        raise ValueError(f"no cell of {in_words(cell.label for cell in cells)} has two seeds: the seed spread "
                         f"cannot be measured")
    return statistics.fmean(variances) ** 0.5


def _judged(table: pd.DataFrame, spread: float, n_cells: int) -> tuple[list[str], str, bool]:
    """One line per optimiser with records (cells hit, gaps, error against the paper's optimiser), and the
    answer: which optimisers remove the overshoot at no cost in error (every cell a hit, no final error more
    than :data:`~paperlib.harness.rules.COST_SPREADS` seed spreads above the paper's optimiser's), once every cell of every optimiser has a record; and
    whether every cell of every optimiser has one."""
    lines, winners, pending = [], [], []
    for name, label in OPTIMIZERS.items():
        rows = table[table["dual optimiser"] == label]
        if rows.empty:
            pending.append(label)
            continue
        gaps = in_words(f"{gap:+.2f}" for gap in rows["largest gap (points)"])
        text = (f"**{label}**: on target in "
                f"{count_of(int(rows['hit'].sum()), len(rows), 'cell')} "
                f"(largest gap{'s' if len(rows) > 1 else ''} {gaps})")
        if name != "paper" and rows["Δ error (points)"].notna().any():
            low, high = rows["Δ error (points)"].min(), rows["Δ error (points)"].max()
            text += f"; final error {low:+.2f}{f' to {high:+.2f}' if high > low else ''} points against the paper's optimiser"
        lines.append(text + ".")
        if len(rows) < n_cells:
            pending.append(f"{label} ({n_cells - len(rows)} cells)")
        elif name != "paper" and rows["hit"].all() and (rows["Δ error (points)"] <= rules.COST_SPREADS * spread).all():
            winners.append(label)
    if pending:
        answer = f"Not all records are in yet ({in_words(pending)}), so no optimiser is judged."
    elif winners:
        answer = f"{in_words(winners)} removes the overshoot at no cost in error."
    else:
        answer = "None of them removes the overshoot at no cost in error."
    return lines, answer, not pending


def findings(table: pd.DataFrame, spread: float, n_cells: int = len(CELLS)) -> str:
    """The page's answer: a line per optimiser, then whether one removes the overshoot at no cost in error."""
    if table.empty:
        return "No record of this comparison yet."
    lines, answer, _ = _judged(table, spread, n_cells)
    return "\n".join(f"- {line}" for line in lines) + (
        f"\n\n{answer} (No cost: no cell's final error more than {rules.COST_SPREADS:g} seed spreads, "
        f"{rules.COST_SPREADS * spread:.2f} points, above the paper's optimiser's; the spread is the standard "
        f"deviation over Table 1's five seeds.)")


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
        raise ValueError(f"{grid} runs {len(names)} dual optimisers ({in_words(sorted(names))}); one was expected")
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

    def findings(self) -> str:
        return findings(self.table, self.spread)

    def gain_section(self) -> list:
        """The gain experiment's table, how large the proportional step is against the integral one in its
        first run, and the gain chosen (or the command for the runs it waits for)."""
        first = min(self.gains, key=lambda run: run["params"]["nupi_kp"], default=None)
        ratio = None
        if first is not None:
            violation, change = abs(largest_gap(first)) / 100, violation_change(first)
            balance = float(f"{violation / change:.0e}")  # one significant digit
            ratio = (f"In the kp = {short_number(first['params']['nupi_kp'])} run the violation changes by "
                     f"{change:.1e} a step (median) and is {violation:.2f} at the end: the proportional step "
                     f"matches the integral one at kp ≈ {short_number(balance)}.")
        if self.kp is not None:
            chosen = f"Chosen gain: kp = {short_number(self.kp)}."
        elif gain_at_edge(self.gains):
            chosen = (f"The best final distance so far is at the largest gain tried "
                      f"(kp = {short_number(_best_gain(self.gains))}): no gain is chosen until a larger one has run. "
                      f"{no_record_line('every gain of the range', [GAIN_GRID])}")
        else:
            chosen = no_record_line("all the gains", [GAIN_GRID])
        return [show(gain_table(self.gains)) if self.gains else None, ratio, chosen]

    def lenet5_section(self) -> list:
        """Table 1's LeNet5 rows with the paper's optimiser (seed 0 of Table 1) and the one
        :data:`LENET5_GRID` runs: which optimiser the MLP cells choose (:func:`best_other`) and whether the grid
        runs it, the table of gaps and errors, each layer's gap on the layer-wise row, in words whether it hits
        each row at no cost in error (:data:`~paperlib.harness.rules.COST_SPREADS` seed spreads of Table 1's LeNet5 rows), and the epochs its test-time
        model spends collapsed (:func:`collapse_table`), with its thin layers (:func:`thin_layers_in_words`); or
        the command for what is missing."""
        best, complete = best_other(self.table)
        ran = grid_optimizer(LENET5_GRID)
        if best is None:
            return [no_record_line("the other dual optimisers on the MLP cells", [GRID])]
        others = int((self.table["dual optimiser"] != OPTIMIZERS["paper"]).sum())
        planned = (len(OPTIMIZERS) - 1) * len(CELLS)
        records = f"all {planned} records" if complete else f"{others} of the {planned} records so far"
        chosen = (f"The best other optimiser on the MLP cells ({records}; most cells on target, then the "
                  f"smallest mean distance) is {OPTIMIZERS[best]}.")
        if best != ran:
            chosen += (f" The LeNet5 rows were run with {OPTIMIZERS[ran]}, which led when the grid was written: "
                       f"set `dual_optimizer: {best}` in {LENET5_GRID} and run "
                       f"`python -m paperlib.harness.sweeps {LENET5_GRID}`.")
        table, ours, spread = self.lenet5_rows()
        runs = self.lenet5_shown()
        missing = [cell.label for cell, found in runs.items() if found[ran] is None]
        gaps = layer_gaps(runs)
        items = [chosen, show(by_cell(table, LENET5_CELLS)) if len(table) else None,
                 show(gaps, caption=LAYER_GAPS_CAPTION) if len(gaps) else None]
        if len(ours):
            judged = [f"{row['cell']}: {'on target' if row['hit'] else 'off target'} "
                      f"(largest gap {row['largest gap (points)']:+.2f}), final error "
                      f"{row['Δ error (points)']:+.2f} points against the paper's optimiser, "
                      f"{'within' if row['Δ error (points)'] <= rules.COST_SPREADS * spread else 'more than'} "
                      f"{rules.COST_SPREADS:g} seed spreads ({rules.COST_SPREADS * spread:.2f} points, Table 1's "
                      f"LeNet5 rows)" for _, row in ours.iterrows()]
            items.append(f"With {OPTIMIZERS[ran]}, " + "; ".join(judged) + ".")
            thin = [thin_layers_in_words(found[ran], cell.label) for cell, found in runs.items() if found[ran]]
            items += [show(collapse_table(runs).dropna(axis=1, how="all"),
                           caption=f"Epochs at whose end the test-time model misclassified {COLLAPSED_ERROR_PCT:g}% "
                                   f"of the test set or more"),
                      collapse_in_words(runs), *filter(None, thin)]
        if missing:
            items.append(no_record_line(f"{OPTIMIZERS[ran]} on {in_words(missing)}", [LENET5_GRID]))
        return items

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

    def gain_cause(self) -> list[str]:
        """:func:`gain_cause_lines` for Table 1's LeNet5 rows: the cause test's optimiser at the chosen gain
        against the cause test."""
        tested = grid_optimizer(GAIN_CAUSE_GRID)
        return gain_cause_lines({cell: found[tested] for cell, found in self.lenet5.items()},
                                records_of(GAIN_CAUSE_GRID))

    def lenet5_answer(self) -> str | None:
        """How the optimiser run on Table 1's LeNet5 rows does there: rows within a point of every target and its
        cost in error against the paper's optimiser (beyond :data:`~paperlib.harness.rules.COST_SPREADS` seed spreads or not); None until both are in."""
        _, ours, spread = self.lenet5_rows()
        if len(ours) < len(LENET5_CELLS):
            return None
        costs = ours["Δ error (points)"]
        return (f"{ours['dual optimiser'].iloc[0]} on Table 1's {len(ours)} LeNet5 rows ends on target in "
                f"{count_of(int(ours['hit'].sum()), len(ours), 'row')}, "
                f"at {costs.min():+.2f} to {costs.max():+.2f} points of error against the paper's optimiser "
                f"({int((costs > rules.COST_SPREADS * spread).sum())} beyond {rules.COST_SPREADS:g} seed spreads)")

    def answer(self) -> str:
        """The intro's sentence: does any other dual optimiser remove the paper's overshoot at no cost in error,
        on the MLP cells, and how the one run on Table 1's LeNet5 rows does there (once all are in)?"""
        if not len(self.table):
            return "No record yet."
        _, answer, complete = _judged(self.table, self.spread, len(CELLS))
        lenet5 = self.lenet5_answer()
        if not complete or lenet5 is None:
            return answer
        return f"{answer[:-1]} on the {len(CELLS)} MLP cells, and {lenet5}."


def plot_trajectories(cell: Cell, found: dict[str, dict | None]) -> plt.Figure:
    """Each optimiser's distance to target of every constrained layer (left) and multipliers (right) against
    epochs, from the records' step logs; one colour per optimiser, one line style per layer."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    styles = ("-", "--", ":")
    for i, (name, run) in enumerate(found.items()):
        if run is None:
            continue
        steps = pd.DataFrame(run["steps"]).apply(pd.to_numeric, errors="coerce")
        targets = cell.target if isinstance(cell.target, list) else [cell.target] * len(final_multipliers(run))
        for k, target in enumerate(targets):
            label = OPTIMIZERS[name] if k == 0 else None
            axes[0].plot(steps["epoch"], 100 * (steps[f"constrained_density_{k}"] - target), color=f"C{i}",
                         ls=styles[k % 3], lw=1, label=label)
            axes[1].plot(steps["epoch"], steps[f"lambda_{k}"], color=f"C{i}", ls=styles[k % 3], lw=1)
    axes[0].axhline(0, color="k", lw=0.8)
    axes[0].set(xlabel="epoch", ylabel="expected density − target (points)", title=cell.label)
    axes[1].set(xlabel="epoch", ylabel="Lagrange multiplier")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=9,
                   frameon=False)
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


def thin_layers_in_words(run: dict, label: str) -> str | None:
    """How a collapsed test-time model keeps its expected density: at the epoch with saved gate medians (App. I)
    where the run's test error was highest, every layer that kept under half the share of its groups that its
    expected density promises, with both. Such a layer spreads its density thinly, over gates whose P(z ≠ 0) sits
    near its target and whose median (Eq. 9) is 0. None if the run never collapsed at a saved epoch."""
    rows = {row["epoch"]: row for row in run["history"]
            if row["phase"] == "train" and row.get("val_error") not in (None, "")}
    errors = {epoch: float(rows[epoch]["val_error"]) for epoch in run.get("gate_medians", {}) if epoch in rows}
    worst = max(errors, key=errors.get, default=None)
    if worst is None or errors[worst] < COLLAPSED_ERROR_PCT:
        return None
    row, thin = rows[worst], []
    for layer, medians in run["gate_medians"][worst].items():
        kept, expected = sum(median > 0 for median in medians), float(row[f"density[{layer}]"])
        if kept / len(medians) < expected / 2:
            thin.append(f"{layer} keeps {kept} of its {len(medians)} groups at an expected density of "
                        f"{100 * expected:.1f}%")
    if not thin:
        return None
    return (f"{label}, at epoch {worst} (test error {errors[worst]:.2f}%): {in_words(thin)}. Its gates there share "
            f"the density thinly: each opens with a probability near the layer's density, below the median's "
            f"threshold, so the test-time model keeps almost none of them.")


def gain_cause_lines(chosen: dict[Cell, dict | None], smaller: list[dict]) -> list[str]:
    """The cause test of a collapse at the chosen gain (:data:`GAIN_CAUSE_GRID`): for each cell with a record at
    the chosen gain (``chosen``) and a shorter one at a smaller gain (``smaller``), the epochs each spent collapsed
    within the shorter run's epochs (the MNIST protocol has no schedule: they are the longer run's first ones)
    and the highest test error each had in them; then whether the gain is the cause."""
    lines, pairs = [], []
    for cell, run in chosen.items():
        test = next(iter(select(smaller, model=cell.model, grouping=cell.grouping, target=cell.target)), None)
        if run is None or test is None:
            continue
        first = test["metrics"]["epochs_completed"]
        counts = collapsed_epochs(run, first), collapsed_epochs(test, first)
        pairs.append(counts)
        kps = [short_number(r["params"]["nupi_kp"]) for r in (run, test)]
        worst = [max(_train_epochs(r, "val_error")[:first]) for r in (run, test)]
        lines.append(f"{cell.label}: collapsed at the end of {counts[0]} of the first {first} epochs at kp = {kps[0]} "
                     f"(highest test error {worst[0]:.2f}%), {counts[1]} at kp = {kps[1]} (highest {worst[1]:.2f}%).")
    if not pairs:
        return [no_record_line("the LeNet5 rows at the smaller gain and at the chosen one",
                               [GAIN_CAUSE_GRID, LENET5_GRID])]
    if all(big > 0 and small == 0 for big, small in pairs):
        lines.append("The smaller gain never collapses where the chosen one does: the gain is the cause.")
    elif all(small >= big for big, small in pairs):
        lines.append("The smaller gain collapses as long or longer: the gain is not the cause.")
    else:
        lines.append("The smaller gain shortens the collapse without removing it everywhere: the gain is part of "
                     "the cause.")
    return lines


def collapse_table(cells: dict[Cell, dict[str, dict | None]]) -> pd.DataFrame:
    """One row per cell: each dual optimiser's :func:`collapsed_epochs` (empty where it has no record)."""
    rows = [{"cell": cell.label, **{label: collapsed_epochs(found[name]) if found.get(name) else None
                                    for name, label in OPTIMIZERS.items()}} for cell, found in cells.items()]
    table = pd.DataFrame(rows, columns=["cell", *OPTIMIZERS.values()])
    return table.astype({label: "Int64" for label in OPTIMIZERS.values()})


def collapse_in_words(cells: dict[Cell, dict[str, dict | None]]) -> str:
    """Which optimisers pass through a collapsed test-time model (:func:`collapsed_epochs`), in how many cells and
    for how many epochs, the least share of parameters it kept meanwhile, and whether it ends collapsed; and
    which never collapse."""
    lines, never = [], []
    for name, label in OPTIMIZERS.items():
        runs = [found[name] for found in cells.values() if found.get(name)]
        counts = [collapsed_epochs(run) for run in runs]
        if not runs:
            continue
        if not any(counts):
            never.append(label)
            continue
        low, high = min(c for c in counts if c), max(counts)
        least = min(min(_train_epochs(run, "params_pct")) for run in runs)
        epochs = max(run["metrics"]["epochs_completed"] for run in runs)
        ended = sum(_train_epochs(run, "val_error")[-1] >= COLLAPSED_ERROR_PCT for run in runs)
        lines.append(f"With {label}, the test-time model collapses (misclassifies {COLLAPSED_ERROR_PCT:g}% of the test "
                     f"set or more, keeping as little as {least:.2f}% of the parameters) in "
                     f"{count_of(sum(c > 0 for c in counts), len(runs), 'cell')} with a record, for "
                     f"{low}{f' to {high}' if high > low else ''} of its {epochs} epochs"
                     + (f", and ends collapsed in {count_of(ended, len(runs), 'cell')}." if ended else
                        ", before its gates reopen."))
    if never and lines and len(never) + len(lines) == len(OPTIMIZERS):
        lines.append("With no other optimiser does it collapse.")
    elif never:
        lines.append(f"With {in_words(never)}, the test-time model never collapses.")
    return " ".join(lines)


def missing_lines(cells: dict[Cell, dict[str, dict | None]], kp: float | None) -> list[str]:
    """A page line for each optimiser with cells not yet run, with the command that makes them (nuPI's wait for
    its gain: :meth:`Comparison.gain_section` names the runs that choose it)."""
    lines = []
    for name, label in OPTIMIZERS.items():
        missing = [cell for cell, found in cells.items() if found[name] is None]
        if missing and (name != "nupi" or kp is not None):
            grids = sorted({cell.paper_grid for cell in missing}) if name == "paper" else [GRID]
            lines.append(no_record_line(f"{label} on {in_words(cell.label for cell in missing)}", grids))
    return lines


def load(kp: float | None) -> dict[Cell, dict[str, dict | None]]:
    """Every cell's records (:func:`cell_records`) from the committed records of the grids."""
    runs, paper_runs = records_of([GRID, GAIN_GRID]), records_of([TABLE1_GRID, CONTROL_GRID])
    return {cell: cell_records(cell, runs, paper_runs, kp) for cell in CELLS}
