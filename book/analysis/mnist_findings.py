"""MNIST: the numbers and tables of ``book/results_mnist.md`` (our records against Table 1 and the control tables
of App. K.1) and ``book/results_mnist_why.md`` (the tests of the differences); the pages hold the prose.

Ours come from records (:func:`records_of`), the paper's from ``paper_results.csv``; the only numbers typed here
are the authors' aggregated densities of Table 1's rows (:data:`AUTHORS_TABLE1_DENSITY`), which the paper does
not print.
"""

import json
import math
import re
import statistics
from functools import cache
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from paperlib.harness import paper_rows, plots, records, rules, studies
from paperlib.harness.paper_rows import target_label
from paperlib.harness.vocabulary import METRIC_LABELS
from paperlib.method import counting, gates
from paperlib.paper import models
from paperlib.paper.paper_numbers import ref
from paperlib.paper.paper_results import paper_cell, paper_results, paper_runs
from paperlib.paper.purge import keep_first  # not `from . import purge`: paperlib.purge is the function (paperlib/__init__.py)

from . import comparison, intervals, report, style
from .control import epoch_violations
from .report import records_of, select

#: The paper's MNIST tables: Table 1, Table 10 (MLP) and Table 11 (LeNet5).
TABLES = ("tab:mnist", "tab:mlp_control", "tab:lenet_control")
#: Table 1's grids: the paper's protocol, then the cpu one.
TABLE1_GRID, TABLE1_CPU_GRID = studies.TABLES["tab:mnist"].grids
#: Every grid of the three tables.
GRIDS = [grid for label in TABLES for grid in studies.TABLES[label].grids]
MLP_CONTROL_GRID = studies.grids("tab:mlp_control", preset="paper")[0]
LENET_CONTROL_GRID = studies.grids("tab:lenet_control", preset="paper")[0]
#: Seed 0 of Table 1's MLP rows at the dual learning rate of Appendix J.3, 1e-3.
DUAL_LR_GRID, = studies.grids("mlp_dual_lr")
#: The MLP's and LeNet5's cells rerun with the authors' fan-out initialisation of linear layers.
FAN_OUT_GRIDS = studies.grids("fan_out_init")
#: Cells rerun with log alpha clamped after every step.
CLAMP_GRID, = studies.grids("mnist_clamp")
#: More seeds of the control tables' cells.
SEEDS_GRIDS = {label: studies.grids(label, preset="paper")[1] for label in ("tab:mlp_control", "tab:lenet_control")}
#: Every grid with a penalized LeNet5 run at the paper's protocol: Table 11's, fan-out, clamped.
LENET_PENALIZED_GRIDS = [*studies.grids("tab:lenet_control", preset="paper"), FAN_OUT_GRIDS[1], CLAMP_GRID]
#: Our twins of a run of the authors' code: the same cell, seed 0, with our initialisation and with theirs.
TWIN_GRIDS = {"mlp": {"ours, fan-in": MLP_CONTROL_GRID, "ours, fan-out": FAN_OUT_GRIDS[0]},
              "lenet5": {"ours, fan-in": LENET_CONTROL_GRID, "ours, fan-out": FAN_OUT_GRIDS[1]}}
#: The targets of the control tables.
CONTROL_TARGETS = (0.2, 0.35, 0.5, 0.65, 0.8)
#: Final model L0-density of Table 1's rows in the authors' aggregated results (mean of 5 runs,
#: get_results/saved_dataframes/{mlp,lenet}_table_normalized.csv); the paper prints none.
AUTHORS_TABLE1_DENSITY = {("mlp", "model"): 34.17, ("mlp", "layer"): 30.87, ("lenet5", "model"): 12.24}
#: The columns that name a row of a :func:`comparison.compare` table.
ROW = ["model", "method", "grouping", "target / λ_pen"]
#: The tables and metrics :func:`initialisation_table` compares.
INITIALISATION_CELLS = (("tab:mlp_control", ["l0_density", "params_pct", "val_error_final"]),
                        ("tab:mnist", ["l0_density", "pruned_architecture", "val_error_final"]),
                        ("tab:lenet_control", ["l0_density", "macs_pct", "val_error_final"]))
#: The cells rerun clamped: model, grouping, target, the unclamped paper-protocol grid, the paper's table.
CLAMP_CELLS = [
    ("mlp", "model", 0.33, TABLE1_GRID, "tab:mnist"),
    ("mlp", "layer", [0.3, 0.3, 0.3], TABLE1_GRID, "tab:mnist"),
    *(("mlp", grouping, target, MLP_CONTROL_GRID, "tab:mlp_control")
      for target in CONTROL_TARGETS for grouping in ("model", "layer")),
    ("lenet5", "model", 0.1, TABLE1_GRID, "tab:mnist"),
    ("lenet5", "model", 0.2, LENET_CONTROL_GRID, "tab:lenet_control"),
    ("lenet5", "layer", 0.5, LENET_CONTROL_GRID, "tab:lenet_control"),
]
#: |log alpha| of a gate that training has settled: P(z != 0) within 1e-12 of 0 or 1.
DECIDED = 30.0


# --- records -------------------------------------------------------------------------------------

def constrained_records(grids: str | list[str], model: str, grouping: str, target, **params) -> list[dict]:
    """Our complete constrained records of one cell (``seed=0``, ``dual_lr=1e-4`` ... narrow it further)."""
    return records_of(grids, model=model, method="constrained", grouping=grouping, target=target, **params)


def table1_records() -> list[dict]:
    """Table 1's complete records at the paper's protocol, or at the cpu one where none is complete."""
    return report.complete_records(TABLE1_GRID) or report.complete_records(TABLE1_CPU_GRID)


def naming_pending(table: pd.DataFrame, grids) -> pd.DataFrame:
    """``table``, with the command that makes the missing runs of ``grids`` (:func:`report.missing_runs`, found
    by their parameters) in ``attrs["command"]`` (which :func:`report.show` puts in the caption)."""
    pending = report.missing_runs(grids)
    if len(pending):
        table.attrs["command"] = report.sweep_command(pending["grid"])
    return table


def authors_runs(folder: Path | None = None, **keys) -> list[dict]:
    """The runs of the authors' code (``benchmarks/authors_training.py`` writes one JSON per run to
    ``runs/authors_code/``: command, cell, per-epoch history) whose keys have these values, by file name;
    constrained unless ``method="penalized"``."""
    folder = folder or records.runs_dir() / "authors_code"
    runs = [{"method": "constrained", **json.loads(path.read_text())} for path in sorted(Path(folder).glob("*.json"))]
    keys = {"method": "constrained", **keys}
    return [run for run in runs if all(run.get(name) == value for name, value in keys.items())]


def our_twins(theirs: dict) -> dict[str, dict | None]:
    """Our seed-0 records of the cell of a run of the authors' code, fan-in and fan-out (None where missing)."""
    return {label: next(iter(constrained_records(grid, theirs["model"], theirs["grouping"], theirs["target"],
                                                 seed=0)), None)
            for label, grid in TWIN_GRIDS[theirs["model"]].items()}


# --- the results: Table 1 and how close to the target ---------------------------------------------

def authors_best_errors(runs: list[dict]) -> pd.DataFrame:
    """Table 1's "error best" taken the authors' way (:func:`paper_rows.authors_best_error`), one row per
    constrained row with records, beside the paper's."""
    by_row = {}
    for run in runs:
        by_row.setdefault((run["params"]["model"], run["params"]["grouping"]), []).append(run)
    return pd.DataFrame([{"model": models.display_name(model), "row": f"constrained, {grouping}-wise",
                          "seeds": len(cell_runs),
                          "val. error best (%) paper": paper_cell("tab:mnist", model=models.display_name(model),
                                                                  method="constrained", grouping=grouping,
                                                                  metric="val_error_best").value,
                          "val. error best (%) ours, authors' way": paper_rows.authors_best_error(cell_runs)}
                         for (model, grouping), cell_runs in by_row.items()])


def by_seed(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`comparison.compare` table one value per cell: per row of the paper's, its line (``paper (mean of
    5)`` or ``Louizos et al. (quoted)``), one line per seed of ours, then our mean ± 95% CI (ours − the paper's
    in brackets). A row's model and name are written on its first line only."""
    shown = [(metric, METRIC_LABELS[metric]) for metric in ("pruned_architecture", "val_error_best", "val_error_final")
             if f"{METRIC_LABELS[metric]} paper" in table]
    rows = []
    for (_, row), runs in zip(table.iterrows(), table.attrs["per_run"]):
        first = {"model": row["model"], "row": comparison.row_name(row["method"], row["grouping"], row["target / λ_pen"])}
        quoted = row["method"] == "louizos"
        rows.append({**first, "run": "Louizos et al. (quoted)" if quoted else "paper (mean of 5)",
                     **{label: row[f"{label} paper"] for _, label in shown}})
        for run in sorted(runs, key=lambda run: run["seed"]):
            rows.append({**first, "run": run["run"],
                         **{label: run[metric] if metric == "pruned_architecture" or run[metric] is None
                            else f"{run[metric]:.2f}" for metric, label in shown}})
        if len(runs) > 1:
            rows.append({**first, "run": f"ours, mean of {len(runs)} (Δ)",
                         **{label: None if metric == "pruned_architecture" else _with_delta(row, label)
                            for metric, label in shown}})
        elif not runs and not quoted:
            rows.append({**first, "run": row["protocol"]})
    result = pd.DataFrame(rows, columns=["model", "row", "run", *(label for _, label in shown)])
    same_model = result["model"].eq(result["model"].shift())
    result.loc[result[["model", "row"]].duplicated(), "row"] = ""
    result.loc[same_model, "model"] = ""
    protocols = {text for text in table["protocol"] if comparison.has_protocol(text)}
    result.attrs["protocol"] = next(iter(protocols)) if len(protocols) == 1 else "per row"
    return result


def _with_delta(row: pd.Series, label: str) -> str | None:
    """Our mean ± CI in a :func:`comparison.compare` row, with ours minus the paper's in brackets."""
    ours, delta = row.get(f"{label} ours"), row.get(f"{label} Δ")
    if not isinstance(ours, str):
        return None
    return f"{ours} ({delta})" if isinstance(delta, str) else ours


def control_tables(label: str) -> list[pd.DataFrame]:
    """A control table beside ours, twice, so that each fits the page: densities and counts, then errors."""
    return [comparison.compare_table(label, metrics) for metrics in
            (["l0_density", "params_pct", "macs_pct"], ["val_error_best", "val_error_final"])]


def seeds_column(table: pd.DataFrame) -> pd.DataFrame:
    """A :func:`comparison.compact` table whose rows share one protocol, with its ``protocol`` column replaced by
    ``seeds`` and the protocol moved to ``attrs`` (the caption); a table whose rows mix protocols as it is.

    >>> seeds_column(pd.DataFrame({"row": ["a"], "protocol": ["paper protocol, 200 ep, 3 seeds, 2 on GPU"]}))["seeds"].tolist()
    [3]
    """
    found = table["protocol"].astype(str).str.extract(r"^(?P<shared>.+? ep)(?:, (?P<seeds>\d+) seeds?)?")
    shared = set(found["shared"])
    if len(shared) != 1 or found["shared"].isna().any():
        return table
    shown = table.drop(columns="protocol")
    shown.insert(len(shown.columns) - ("runs" in shown), "seeds", found["seeds"].fillna(1).astype(int).tolist())
    shown.attrs = dict(table.attrs) | {"protocol": next(iter(shared))}
    return shown


def paper_constrained_densities() -> pd.DataFrame:
    """The paper's constrained cells of Table 10 and Table 11 (final L0-density), with ``gap``: minus the target
    (points)."""
    printed = paper_results()
    printed = printed[printed["table"].isin(["tab:mlp_control", "tab:lenet_control"])
                      & (printed["method"] == "constrained") & (printed["metric"] == "l0_density")]
    return printed.assign(gap=printed["value_num"] - 100 * printed["target"].astype(float))


def paper_gap_table() -> pd.DataFrame:
    """The paper's final L0-density minus its target (points) in Table 10 and Table 11, by grouping and target."""
    table = paper_constrained_densities().pivot_table(index=["table", "grouping"], columns="target",
                                                      values="gap").reset_index()
    table["table"] = table["table"].map(ref)
    table.columns = [c if c in ("table", "grouping") else f"target {100 * float(c):g}%" for c in table.columns]
    return table


def paper_gap(model: str, grouping: str, target: str) -> float:
    """The paper's final model L0-density minus the target (points) in the cell labelled ``target``; for Table 1's
    rows, which print no density, the authors' aggregate (:data:`AUTHORS_TABLE1_DENSITY`) minus the first
    layer's target."""
    printed = paper_constrained_densities()
    cell = printed[(printed["model"] == models.display_name(model)) & (printed["grouping"] == grouping)
                   & (printed["target"].astype(float).map(target_label) == target)]
    if len(cell):
        return float(cell["gap"].iloc[0])
    first_target = float(target.strip("[]%").split(",")[0])  # Table 1's rows share one target across layers
    return AUTHORS_TABLE1_DENSITY.get((model, grouping), float("nan")) - first_target


def _paper_protocol_misses(gaps: pd.DataFrame) -> pd.DataFrame:
    return gaps[gaps["protocol"].map(comparison.is_paper_protocol) & ~gaps["within 1 point"].astype(bool)]


def misses_by_cell(gaps: pd.DataFrame) -> pd.DataFrame:
    """The paper-protocol runs of a :func:`comparison.distance_to_target` table more than 1 point from a target,
    by cell: how many, their lowest and highest gap, and the paper's gap (:func:`paper_gap`)."""
    by_cell = (_paper_protocol_misses(gaps).groupby(["model", "grouping", "target"], sort=False)
               ["largest gap (points)"].agg(runs="size", lowest="min", highest="max").reset_index())
    by_cell["paper's gap (points)"] = [paper_gap(*cell) for cell in by_cell[["model", "grouping", "target"]].values]
    return by_cell


def miss_summary(gaps: pd.DataFrame) -> dict:
    """Those misses (:func:`misses_by_cell`) summed up: how many runs, cells and models, whether all end above,
    their smallest and largest distance (points), and the paper's own gap in those cells."""
    ours, by_cell = _paper_protocol_misses(gaps)["largest gap (points)"], misses_by_cell(gaps)
    theirs = by_cell["paper's gap (points)"]
    return {"runs": len(ours), "cells": len(by_cell),
            "models": " and ".join(sorted(models.display_name(m) for m in set(by_cell["model"]))),
            "all above": bool((ours > 0).all()), "lowest": float(ours.abs().min()), "highest": float(ours.abs().max()),
            "paper all above": bool((theirs > 0).all()), "paper lowest": float(theirs.min()),
            "paper highest": float(theirs.max())}


def penalty_summary(judged: list[rules.PenaltyJudgement]) -> dict:
    """Penalized cells judged by :func:`paperlib.harness.rules.judge_penalty`: how many end within
    :data:`~paperlib.harness.rules.PENALTY_POINTS` of the paper's density, of how many; the others' smallest and
    largest difference (points; None if none); and the largest scatter of our seeds within a cell."""
    off = [j.difference for j in judged if j.outcome == rules.PenaltyOutcome.OFF]
    return {"within": sum(j.outcome == rules.PenaltyOutcome.WITHIN for j in judged), "cells": len(judged),
            "off low": min(off, default=None), "off high": max(off, default=None),
            "scatter": max((j.scatter for j in judged), default=0.0)}


def _mean_target(label: str) -> float:
    """The target (%) of a :func:`paper_rows.target_label`; a layer-wise list's mean."""
    return statistics.fmean(float(t) for t in label.strip("[]%").split(","))


def plot_target_gaps(gaps: pd.DataFrame) -> plt.Figure:
    """Each paper-protocol run's largest gap to a target (points) against its target, one panel per model, beside
    the paper's gap in the cell (:func:`paper_gap`); a marker per grouping, the one-point tolerance shaded."""
    ours = gaps[gaps["protocol"].map(comparison.is_paper_protocol)]
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.1), sharey=True)
    for ax, model in zip(axes, ("mlp", "lenet5")):
        ax.axhspan(-rules.ON_TARGET_POINTS, rules.ON_TARGET_POINTS, color="0.88", zorder=0)
        ax.axhline(0, color="0.5", lw=0.8)
        for grouping in ("model", "layer"):
            chosen = ours[(ours["model"] == model) & (ours["grouping"] == grouping)]
            ax.scatter(chosen["target"].map(_mean_target), chosen["largest gap (points)"], s=22, alpha=0.7,
                       label=f"ours, {grouping}-wise (one run each)", **style.scatter("ours", grouping))
            paper = [(_mean_target(t), paper_gap(model, grouping, t)) for t in chosen["target"].unique()]
            paper = [point for point in paper if not math.isnan(point[1])]
            if paper:
                ax.scatter(*zip(*paper), s=60, label=f"paper, {grouping}-wise (mean of 5)",
                           **style.scatter("paper", grouping))
        ax.set(title=models.display_name(model), xlabel="target (%)", xlim=(5, 85))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final density − target (points)")
    style.legend_below(fig, axes[0])
    return fig


# --- why the constrained runs end above their target ----------------------------------------------

def lowest_worst_layers(runs: list[dict]) -> pd.DataFrame:
    """Per layer-wise record: the lowest its densest layer came (%, at an epoch's end) and that epoch (an epoch
    is feasible only when every layer is within a point of its target at once)."""
    rows = []
    for run in runs:
        history = plots.history_frame(run).set_index("epoch")
        worst = history[[f"density[{layer}]" for layer in run["metrics"]["l0_density_per_layer"]]].max(axis=1)
        rows.append({"seed": run["params"]["seed"], "lowest densest layer (%)": 100 * worst.min(),
                     "epoch": int(worst.idxmin())})
    return pd.DataFrame(rows, columns=["seed", "lowest densest layer (%)", "epoch"])


# --- the dual learning rate, tested ----------------------------------------------------------------

def settled_epoch(gaps: list[float], points: float = rules.ON_TARGET_POINTS) -> int | None:
    """The first epoch (1-based) from which every gap stays within ``points`` of zero, or None."""
    return next((i + 1 for i in range(len(gaps)) if all(abs(g) <= points for g in gaps[i:])), None)


def dual_lr_table(runs: list[dict]) -> pd.DataFrame:
    """Per constrained run: its dual learning rate, final largest gap, the epoch from which every constraint stays
    within a point (:func:`settled_epoch`) and its errors."""
    rows = []
    for run in runs:
        gaps = epoch_violations(run).tolist()
        settled = settled_epoch(gaps)
        rows.append({"grouping": run["params"]["grouping"], "dual lr": f"{run['params']['dual_lr']:g}",
                     "final largest gap (points)": gaps[-1],
                     "within 1 point from epoch": None if settled is None else str(settled),
                     "val. error best (%)": paper_rows.best_feasible_error(run),
                     "val. error final (%)": run["metrics"]["val_error_final"],
                     "run": report.notebook_link(run["path"], "notebook")})
    return naming_pending(pd.DataFrame(rows), [DUAL_LR_GRID])


def plot_gap_histories(runs: list[dict]) -> plt.Figure:
    """Each run's largest gap to a target against epochs, a colour per grouping, a line style per dual lr."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    styles = {1e-4: "-", 1e-3: "--"}
    for run in runs:
        gaps, lr = epoch_violations(run), run["params"]["dual_lr"]
        ax.plot(gaps.index, gaps, lw=1.2, ls=styles.get(lr, ":"),
                color="C0" if run["params"]["grouping"] == "model" else "C3",
                label=f"{run['params']['grouping']}-wise, dual lr {lr:g}")
    ax.axhspan(-rules.ON_TARGET_POINTS, rules.ON_TARGET_POINTS, color="0.88", zorder=0)
    ax.set(xlabel="epoch", ylabel="largest gap to a target (points)", ylim=(-5, 15),
           title="MLP, Table 1's rows, seed 0")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- the authors' initialisation, tested -----------------------------------------------------------

def initialisation_table(table: str, metrics: list[str]) -> pd.DataFrame:
    """The paper's cells beside our fan-in records (the table's grids, all seeds) and fan-out ones
    (:data:`FAN_OUT_GRIDS`), for the rows a fan-out grid has run at the paper's protocol."""
    fan_out = comparison.compare(table, list(FAN_OUT_GRIDS), metrics).set_index(ROW)
    fan_in = comparison.compare(table, studies.TABLES[table].grids, metrics).set_index(ROW)
    rows = []
    for key, row in fan_out[fan_out["protocol"].map(comparison.is_paper_protocol)].iterrows():
        protocol = fan_in.loc[key, "protocol"]
        seeds = re.search(r"\d+ seeds?", protocol)
        cells = dict(zip(ROW, key)) | {"seeds fan-in": seeds[0] if seeds else protocol}
        for label in (METRIC_LABELS[m] for m in metrics):
            cells |= {f"{label} paper": row[f"{label} paper"], f"{label} fan-in": fan_in.loc[key, f"{label} ours"],
                      f"{label} fan-out": row[f"{label} ours"]}
        rows.append(cells | {"run fan-out": row["runs"]})
    return pd.DataFrame(rows)


def paper_penalized(grouping: str, lmbda: float, metric: str = "l0_density") -> float:
    """The paper's ``metric`` (final L0-density, %, by default) of a penalized LeNet5 cell of Table 11."""
    return paper_cell("tab:lenet_control", model="LeNet5", method="penalized", grouping=grouping,
                      lmbda=f"{lmbda:g}", metric=metric).value_num


# --- the authors' own code, run --------------------------------------------------------------------

def _authors_row(theirs: dict) -> dict:
    last = theirs["history"][-1]
    return {"run": "authors' code", "groups kept": "-".join(map(str, last["kept_groups"])),
            "L0-density (%)": f"{100 * last['l0_density_epoch_mean']:.2f}", "val. error final (%)": last["val_error"],
            "record": f"<code title=\"{theirs['command']}\">authors_training.py</code>"}


def _our_row(label: str, run: dict) -> dict:
    m = run["metrics"]
    return {"run": label, "groups kept": "-".join(map(str, m["pruned_architecture"])),
            "L0-density (%)": f"{100 * m['l0_density']:.2f}", "val. error final (%)": m["val_error_final"],
            "record": report.notebook_link(run["path"], "notebook")}


def _train_rows(run: dict) -> pd.DataFrame:
    frame = plots.history_frame(run)
    return frame[frame["phase"] == "train"]


#: The panels of a LeNet5 run of the authors' code beside ours: (their column, our column, title).
LENET_PANELS = (("l0_density_epoch_mean", "l0_density", "model L0-density (%)"),
                ("density[1]", "density[conv2]", "conv2 expected density (%)"))


def _plot_with_twins(axes, theirs: dict, ours: dict[str, dict | None], panels) -> None:
    """A run of the authors' code and our records (by label, line style by :func:`_variant_style`) against
    epochs, one panel (their column, our column, title) per axis."""
    history = pd.DataFrame(theirs["history"])
    for ax, (column, _, title) in zip(axes, panels):
        ax.plot(history["epoch"], 100 * history[column], label="authors' code", **style.line("authors' code"))
        ax.set(xlabel="epoch", title=title)
        ax.grid(alpha=0.3)
    for label, record in ours.items():
        if record:
            frame = _train_rows(record)
            for ax, (_, column, _) in zip(axes, panels):
                ax.plot(frame["epoch"], 100 * frame[column], label=label,
                        **style.line("ours", **_variant_style(record["params"])))


def authors_mlp_table(theirs: list[dict], twins: list[dict]) -> pd.DataFrame:
    """Per MLP run of the authors' code: its final density, groups kept and error, beside our twins
    (:func:`our_twins`) and the paper's cell of Table 10."""
    rows = []
    for run, ours in zip(theirs, twins):
        keys = dict(model="MLP", method="constrained", grouping=run["grouping"], target=run["target"])
        cell = f"{run['grouping']}-wise {100 * run['target']:g}%"
        rows += [{"cell": cell, **_authors_row(run)},
                 *({"cell": cell, **_our_row(label, record)} for label, record in ours.items() if record),
                 {"cell": cell, "run": "paper", "groups kept": None, "record": None,
                  "L0-density (%)": paper_rows.printed_cell(paper_cell("tab:mlp_control", metric="l0_density", **keys)),
                  "val. error final (%)": paper_cell("tab:mlp_control", metric="val_error_final", **keys).value}]
    return pd.DataFrame(rows, columns=["cell", "run", "L0-density (%)", "groups kept", "val. error final (%)", "record"])


def plot_authors_mlp(theirs: list[dict], twins: list[dict]) -> plt.Figure:
    """One panel per MLP run of the authors' code: its model density against epochs beside our twins', with the
    target (dotted) and the paper's final density (dashed)."""
    fig, axes = plt.subplots(1, max(len(theirs), 1), figsize=(7, 3.4), sharey=True, squeeze=False)
    for ax, run, ours in zip(axes[0], theirs, twins):
        title = f"MLP {run['grouping']}-wise {100 * run['target']:g}%"
        _plot_with_twins([ax], run, ours, [("l0_density_epoch_mean", "l0_density", title)])
        paper = paper_cell("tab:mlp_control", model="MLP", method="constrained", grouping=run["grouping"],
                           target=run["target"], metric="l0_density")
        ax.axhline(100 * run["target"], label="target", **style.TARGET)
        ax.axhline(paper.value_num, label="paper, final (mean of 5)", **style.line("paper"))
        ax.set(ylim=(15, 60))
    axes[0][0].set_ylabel("model L0-density (%)")
    style.legend_below(fig, axes[0][0], ncol=4)
    return fig


# --- LeNet5: where the paper's runs spend their density -------------------------------------------

@cache
def _dense_counts(model: str) -> np.ndarray:
    dense = models.build_model(model, gated=False)
    return np.array([counting.count_params(dense), counting.count_macs(dense, (1, 28, 28))])


@cache
def _percentages(model: str, kept: tuple[int, ...]) -> tuple[float, float]:
    pruned = keep_first(model, list(kept))
    return tuple(100 * np.array([counting.count_params(pruned), counting.count_macs(pruned, (1, 28, 28))])
                 / _dense_counts(model))


def model_percentages(model: str, kept) -> np.ndarray:
    """Parameters and MACs (%, the paper's convention) of an MNIST ``model`` pruned to ``kept`` groups per gated
    layer (:func:`paperlib.paper.purge.keep_first`); counted once per architecture."""
    return np.array(_percentages(model, tuple(int(k) for k in kept)))


def implied_conv2_fc1(params_pct: float, macs_pct: float, fc2: int) -> np.ndarray:
    """The conv2 maps and fc1 inputs (conv1 at 20, fc2 at ``fc2``) whose LeNet5 has these percentages: both
    counts are affine in the two, so two printed percentages determine them."""
    base = model_percentages("lenet5", (20, 20, 100, fc2))
    slopes = np.stack([model_percentages("lenet5", (20, 21, 100, fc2)) - base,
                       model_percentages("lenet5", (20, 20, 101, fc2)) - base], 1)
    return np.linalg.solve(slopes, np.array([params_pct, macs_pct]) - base) + [20, 100]


def _paper_lenet_counts(target: float) -> dict:
    return {m: paper_cell("tab:lenet_control", model="LeNet5", method="constrained", grouping="model",
                          target=target, metric=m).value_num for m in ("params_pct", "macs_pct", "l0_density")}


def _implied(target: float, fc2: int = 500) -> np.ndarray:
    """The conv2 maps and fc1 inputs that Table 11's model-wise LeNet5 counts at ``target`` imply."""
    cell = _paper_lenet_counts(target)
    return implied_conv2_fc1(cell["params_pct"], cell["macs_pct"], fc2=fc2)


def paper_row(cell: str, model: str, grouping: str, target, table: str) -> dict:
    """The paper's numbers for one constrained cell of Table 1 or a control table, as a row of
    :func:`clamp_comparison`: Table 1's printed architecture, counted, with the authors' aggregated density;
    a model-wise LeNet5 row of Table 11 with the architecture its counts imply."""
    paper_target = " ".join(f"{t:g}" for t in target) if isinstance(target, list) else target
    keys = dict(model=models.display_name(model), method="constrained", grouping=grouping, target=paper_target)
    if table == "tab:mnist":
        architecture = paper_cell(table, metric="pruned_architecture", **keys).value
        density = AUTHORS_TABLE1_DENSITY[(model, grouping)]
        params, macs = model_percentages(model, architecture.split("-"))
    else:
        density, params, macs = (paper_cell(table, metric=m, **keys).value_num
                                 for m in ("l0_density", "params_pct", "macs_pct"))
        architecture = None
        if model == "lenet5" and grouping == "model":  # conv1 and fc2 whole: the counts imply conv2 and fc1
            conv2, fc1 = implied_conv2_fc1(params, macs, fc2=500)
            architecture = f"20-{conv2:.0f}-{fc1:.0f}-500 (implied)"
    return {"cell": cell, "run": "paper", "architecture": architecture, "L0-density (%)": density,
            "params (%)": params, "MACs (%)": macs,
            "val. error final (%)": paper_cell(table, metric="val_error_final", **keys).value_num, "record": None}


def _ours_cells(runs: list[dict]) -> dict:
    return {"ours: architecture": ", ".join("-".join(map(str, r["metrics"]["pruned_architecture"]))
                                            for r in runs) or None,
            "ours: params / MACs (%)": ", ".join(f"{r['metrics']['params_pct']:.2f} / {r['metrics']['macs_pct']:.2f}"
                                                 for r in runs) or None}


def implied_architectures(ours: list[dict], table1_ours: list[dict]) -> pd.DataFrame:
    """Per model-wise target of Table 11: the conv2 maps and fc1 inputs the paper's counts imply (fc2 at 500 and
    at Table 1's 407), recounted, beside our model-wise records ``ours``; then Table 1's 10% row, counted,
    beside ``table1_ours``."""
    rows = []
    for target in CONTROL_TARGETS:
        cell = _paper_lenet_counts(target)
        (conv2, fc1), (conv2_407, _) = _implied(target), _implied(target, fc2=407)
        recount = model_percentages("lenet5", (20, round(conv2), round(fc1), 500))
        rows.append({"target": f"{100 * target:g}%",
                     "paper params / MACs (%)": f"{cell['params_pct']:.2f} / {cell['macs_pct']:.2f}",
                     "implied conv2 (fc2 500 | 407)": f"{conv2:.1f} | {conv2_407:.1f}",
                     "implied fc1 (fc2 500)": f"{fc1:.0f}",
                     "recounted params / MACs (%)": f"{recount[0]:.2f} / {recount[1]:.2f}",
                     **_ours_cells(select(ours, target=target))})
    table1 = model_percentages("lenet5", (20, 21, 34, 407))
    rows.append({"target": "10% (Table 1)", "paper params / MACs (%)": f"{table1[0]:.2f} / {table1[1]:.2f} (counted)",
                 "implied conv2 (fc2 500 | 407)": "21 (printed: 20-21-34-407)", "implied fc1 (fc2 500)": None,
                 "recounted params / MACs (%)": None, **_ours_cells(table1_ours)})
    return pd.DataFrame(rows)


def authors_lenet_table(theirs: list[dict], twins: list[dict]) -> pd.DataFrame:
    """Per model-wise LeNet5 run of the authors' code: the paper's cell (architecture implied), the run (counted
    as if no fc1 input sat behind a closed conv2 map: upper bounds) and our twins."""
    rows = []
    for run, ours in zip(theirs, twins):
        target = f"{100 * run['target']:g}%"
        paper = paper_row(target, "lenet5", "model", run["target"], "tab:lenet_control")
        params, macs = model_percentages("lenet5", run["history"][-1]["kept_groups"])
        rows += [{"target": target, "run": "paper", "groups kept": paper["architecture"],
                  "L0-density (%)": f"{paper['L0-density (%)']:.2f}",
                  "params / MACs (%)": f"{paper['params (%)']:.2f} / {paper['MACs (%)']:.2f}",
                  "val. error final (%)": paper["val. error final (%)"], "record": None},
                 {"target": target, **_authors_row(run), "params / MACs (%)": f"≤ {params:.2f} / ≤ {macs:.2f}"},
                 *({"target": target, **_our_row(label, record),
                    "params / MACs (%)": f"{record['metrics']['params_pct']:.2f} / {record['metrics']['macs_pct']:.2f}"}
                   for label, record in ours.items() if record)]
    return pd.DataFrame(rows, columns=["target", "run", "groups kept", "L0-density (%)", "params / MACs (%)",
                                       "val. error final (%)", "record"])


def plot_authors_lenet(theirs: list[dict], twins: list[dict]) -> plt.Figure:
    """The model density and conv2's expected density against epochs of the authors' LeNet5 runs and our twins,
    with the target (dotted) and the conv2 maps the paper's counts imply (dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.4))
    for run, ours in zip(theirs, twins):
        _plot_with_twins(axes, run, ours, LENET_PANELS)
        conv2 = _implied(run["target"])[0]
        axes[0].axhline(100 * run["target"], label="target", **style.TARGET)
        axes[1].axhline(100 * conv2 / 50, label=f"paper, implied ({conv2:.0f} of 50 maps)", **style.line("paper"))
    handles, labels = [sum(pair, []) for pair in zip(*(ax.get_legend_handles_labels() for ax in axes))]
    fig.suptitle("LeNet5 model-wise 20%: the authors' code and ours", fontsize=10)
    style.legend_below(fig, list(dict(zip(labels, handles)).values()), ncol=3)
    return fig


def paper_conv2(target: float) -> int:
    """The conv2 maps of the paper's model-wise LeNet5 at ``target``: printed in Table 1's 10% architecture,
    implied by Table 11's counts at its targets, rounded."""
    if target == 0.1:
        kept = paper_cell("tab:mnist", model="LeNet5", method="constrained", grouping="model", target="0.1",
                          metric="pruned_architecture").value
        return int(kept.split("-")[1])
    return round(_implied(target)[0])


def conv2_maps(theirs: list[dict], fan_out: list[dict], fan_in: list[dict]) -> pd.DataFrame:
    """Per model-wise LeNet5 target with a run of the authors' code or a fan-out record: the conv2 maps kept by
    the paper's runs (:func:`paper_conv2`), the authors' code, our fan-in records (each seed) and fan-out ones."""
    def kept(runs):
        return ", ".join(str(r["metrics"]["pruned_architecture"][1]) for r in runs) or None

    targets = sorted({run["target"] for run in theirs} | {r["params"]["target"] for r in fan_out})
    return pd.DataFrame([{"target": f"{100 * t:g}%", "paper": paper_conv2(t),
                          "authors' code": ", ".join(str(run["history"][-1]["kept_groups"][1])
                                                     for run in theirs if run["target"] == t) or None,
                          "ours, fan-in": kept(select(fan_in, target=t)), "ours, fan-out": kept(select(fan_out, target=t))}
                         for t in targets])


def fc1_behind_conv2(runs: list[tuple[str, dict]]) -> pd.DataFrame:
    """LeNet5's layer-wise 50% cell: per (label, record), the architecture, the fc1 inputs behind conv2's open
    maps (16 per map) and how many fc1 keeps, parameters and MACs; then the paper's row."""
    rows = [{**record_row("", label, run), "fc1 inputs behind open conv2 maps": 16 * architecture[1],
             "fc1 inputs kept": architecture[2]}
            for label, run in runs for architecture in [run["metrics"]["pruned_architecture"]]]
    paper = paper_row("", "lenet5", "layer", 0.5, "tab:lenet_control")
    rows.append({"run": "paper", "params (%)": paper["params (%)"], "MACs (%)": paper["MACs (%)"],
                 "L0-density (%)": paper["L0-density (%)"]})
    table = pd.DataFrame(rows, columns=["run", "architecture", "fc1 inputs behind open conv2 maps", "fc1 inputs kept",
                                        "params (%)", "MACs (%)", "L0-density (%)"])
    return table.astype({"fc1 inputs behind open conv2 maps": "Int64", "fc1 inputs kept": "Int64"})


def expected_density(kept, log_alpha_open: float, log_alpha_closed: float) -> float:
    """LeNet5's model L0-density (%) with the first ``kept[i]`` gates of layer i at ``log_alpha_open``, the rest
    at ``log_alpha_closed``."""
    model = models.build_model("lenet5")
    with torch.no_grad():
        for layer, count in zip(models.gated_layers(model), kept):
            layer.weight_log_alpha.fill_(log_alpha_closed)[:count] = log_alpha_open
    return 100 * float(models.model_density(model).detach())


def clamp_bound_probabilities() -> tuple[float, float]:
    """P(z != 0) of a gate at the clamp's lower and upper bound on log alpha."""
    return tuple(float(gates.prob_active(torch.tensor(bound))) for bound in (gates.LOG_ALPHA_MIN, gates.LOG_ALPHA_MAX))


def clamp_floor_table() -> pd.DataFrame:
    """For Table 1's 10% architecture and those Table 11's counts imply: the expected density with the kept groups
    open and the others closed for good, or held at the clamp's floor, beside the paper's density."""
    architectures = [("10% (Table 1)", (20, 21, 34, 407), AUTHORS_TABLE1_DENSITY[("lenet5", "model")])]
    for target in CONTROL_TARGETS:
        conv2, fc1 = _implied(target)
        architectures.append((f"{100 * target:g}%", (20, round(conv2), round(fc1), 500),
                              _paper_lenet_counts(target)["l0_density"]))
    return pd.DataFrame([{"target": label, "architecture": "-".join(map(str, kept)),
                          "closed for good (%)": expected_density(kept, DECIDED, -DECIDED),
                          "closed at the clamp's floor (%)": expected_density(kept, gates.LOG_ALPHA_MAX,
                                                                              gates.LOG_ALPHA_MIN),
                          "paper's expected density (%)": density}
                         for label, kept, density in architectures])


# --- the clamp on log alpha, tested ----------------------------------------------------------------

def record_row(cell: str, label: str, run: dict) -> dict:
    """One of our records as a row of :func:`clamp_comparison` (and :func:`fc1_behind_conv2`)."""
    m = run["metrics"]
    return {"cell": cell, "run": label, "architecture": "-".join(map(str, m["pruned_architecture"])),
            "L0-density (%)": 100 * m["l0_density"], "params (%)": m["params_pct"], "MACs (%)": m["macs_pct"],
            "val. error final (%)": m["val_error_final"], "record": report.notebook_link(run["path"], "notebook")}


def clamp_rows(cell: str, paper: dict, unclamped: dict | None, clamped: list[dict]) -> tuple[list[dict], dict | None]:
    """One cell of :func:`clamp_comparison`: the paper's row, our unclamped record's and the clamped ones'; and,
    where the unclamped record has a clamped twin (:func:`report.counterpart`), how far each is from the paper in
    L0-density and parameters."""
    rows = [paper, *([record_row(cell, "ours", unclamped)] if unclamped else []),
            *(record_row(cell, f"ours, clamped, dual lr {r['params']['dual_lr']:.0e}".replace("e-0", "e-"), r)
              for r in clamped)]
    twin = next((r for r in clamped if report.counterpart(r, [unclamped] if unclamped else [], ("clamp_log_alpha",))),
                None)
    if twin is None:
        return rows, None
    gaps = [abs(record_row(cell, "", r)[m] - paper[m]) for r in (unclamped, twin) for m in ("L0-density (%)", "params (%)")]
    return rows, {"cell": cell, "L0-density: |ours − paper|, unclamped → clamped": f"{gaps[0]:.2f} → {gaps[2]:.2f}",
                  "params: |ours − paper|, unclamped → clamped": f"{gaps[1]:.2f} → {gaps[3]:.2f}",
                  "clamped closer in L0-density": gaps[2] < gaps[0], "clamped closer in params": gaps[3] < gaps[1]}


def clamp_comparison() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every cell of :data:`CLAMP_CELLS`: the paper, our unclamped seed 0 and the clamped runs (:func:`clamp_rows`);
    and, for the cells with a clamped twin at the authors' dual learning rate, which of the two is closer."""
    rows, closer = [], []
    for model, grouping, target, grid, label in CLAMP_CELLS:
        cell = f"{models.display_name(model)} {grouping}-wise {target_label(target)} ({ref(label)})"
        unclamped = next(iter(constrained_records(grid, model, grouping, target, seed=0)), None)
        cell_rows, cell_closer = clamp_rows(cell, paper_row(cell, model, grouping, target, label), unclamped,
                                            constrained_records(CLAMP_GRID, model, grouping, target, seed=0))
        rows += cell_rows
        closer += [cell_closer] if cell_closer else []
    return naming_pending(pd.DataFrame(rows), [CLAMP_GRID]), pd.DataFrame(closer)


def clamp_counts(closer: pd.DataFrame) -> dict:
    """Of the cells of :func:`clamp_comparison`'s second table: how many, and in how many the clamped run is closer
    to the paper in parameters and in L0-density."""
    return {"cells": len(closer), "closer in params": int(closer["clamped closer in params"].sum()),
            "closer in density": int(closer["clamped closer in L0-density"].sum())}


# --- where ours and the paper's differ by more than 2 points ---------------------------------------

def comparison_tables() -> dict[str, list[pd.DataFrame]]:
    """The tables the results page shows: Table 1, then each control table's two (:func:`control_tables`)."""
    return {"tab:mnist": [comparison.compare_table("tab:mnist")],
            **{label: control_tables(label) for label in TABLES[1:]}}


def large_differences(tables: dict[str, list[pd.DataFrame]], threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """Every cell of these :func:`comparison.compare` tables where ours differs from the paper's by more than
    ``threshold`` points (:func:`comparison.misses`), with the table's number."""
    found = pd.concat([comparison.misses(table, threshold).assign(table=ref(label))
                       for label, shown in tables.items() for table in shown], ignore_index=True)
    return found[["table", "row", "metric", "paper", "ours", "Δ", "protocol"]]


# --- penalized LeNet5 ------------------------------------------------------------------------------

def variant(params: dict) -> str:
    """How a penalized LeNet5 record differs from the paper-protocol cell's seed 0: seed, initialisation, clamp."""
    parts = [f"seed {params['seed']}"] if params["seed"] else []
    parts += ["fan-out"] if params.get("linear_init") == "fan_out" else []
    parts += ["clamped"] if params.get("clamp_log_alpha") else []
    return ", ".join(parts)


def _variant_style(params: dict) -> dict:
    """The line of one of our records beside the authors' code (:data:`analysis.style.OURS_VARIANTS`): its clamp or
    initialisation, faint for a seed other than 0."""
    name = "clamped" if params.get("clamp_log_alpha") else "fan-out" if params.get("linear_init") == "fan_out" else ""
    return {"linestyle": style.OURS_VARIANTS[name], "alpha": 0.6 if params["seed"] else 1.0}


def plot_penalized_lenet(penalized: dict[str, list[dict]]) -> plt.Figure:
    """Model L0-density against epochs of penalized LeNet5 records, one panel per grouping: a colour per λ_pen, a
    line style per :func:`variant`, the paper's final densities at the last epoch, each labelled with its λ_pen."""
    from matplotlib.lines import Line2D

    lambdas = sorted({r["params"]["lmbda"] for runs in penalized.values() for r in runs}, reverse=True)
    colours = dict(zip(lambdas, style.OTHER_COLOURS))
    fig, axes = plt.subplots(1, 2, figsize=(7, 4.2), sharey=True)
    for ax, grouping in zip(axes, ("model", "layer")):
        for run in penalized.get(grouping, []):
            p, frame = run["params"], _train_rows(run)
            ax.plot(frame["epoch"], 100 * frame["l0_density"], color=colours[p["lmbda"]], lw=1.2, **_variant_style(p))
        for lmbda in lambdas:
            density = paper_penalized(grouping, lmbda)
            ax.plot([200], [density], ms=8, **style.point("paper"))
            ax.annotate(f"{lmbda:g}", (200, density), xytext=(6, 0), textcoords="offset points", va="center",
                        fontsize=9)
        ax.set(xlabel="epoch", title=f"LeNet5 penalized, {grouping}-wise", xlim=(0, 240))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("model L0-density (%)")
    handles = [Line2D([], [], color=colours[lmbda], label=f"ours, λ_pen {lmbda:g}") for lmbda in lambdas]
    handles += [Line2D([], [], color=style.OURS["color"], label="ours, seed 0"),
                Line2D([], [], color=style.OURS["color"], alpha=0.6, label="ours, seed 1 (faint)"),
                Line2D([], [], color=style.OURS["color"], ls=style.OURS_VARIANTS["fan-out"], label="ours, fan-out"),
                Line2D([], [], color=style.OURS["color"], ls=style.OURS_VARIANTS["clamped"], label="ours, clamped"),
                style.handle("paper", "paper, final (mean of 5), its λ_pen beside it")]
    style.legend_below(fig, handles, ncol=4)
    return fig


def penalized_densities(penalized: dict[str, list[dict]], lmbda: float) -> pd.DataFrame:
    """Every penalized LeNet5 record at ``lmbda``, per grouping: its final L0-density beside the paper's."""
    rows = [{"grouping": f"{grouping}-wise", "run": variant(r["params"]) or "seed 0",
             "L0-density (%)": 100 * r["metrics"]["l0_density"], "paper (%)": paper_penalized(grouping, lmbda)}
            for grouping, runs in penalized.items() for r in select(runs, lmbda=lmbda)]
    return pd.DataFrame(rows, columns=["grouping", "run", "L0-density (%)", "paper (%)"])


def authors_penalized_table(theirs: dict, ours: list[dict]) -> pd.DataFrame:
    """A run of the authors' LeNet5 with their penalty beside our records of its cell and the paper's: final
    L0-density, its highest and when, its distance to the paper's, and the final error."""
    grouping, lmbda, history = theirs["grouping"], theirs["lmbda"], theirs["history"]
    last, peak = history[-1], max(history, key=lambda row: row["l0_density"])
    paper = paper_penalized(grouping, lmbda)
    rows = [{"run": "authors' code", "L0-density (%)": 100 * last["l0_density"],
             "highest L0-density (%)": 100 * peak["l0_density"], "at epoch": int(peak["epoch"]),
             "val. error final (%)": last["val_error"]}]
    for r in select(ours, grouping=grouping, lmbda=lmbda):
        frame = _train_rows(r) if r.get("history") else pd.DataFrame()
        top = frame.loc[frame["l0_density"].idxmax()] if len(frame) else None
        rows.append({"run": f"ours, {variant(r['params']) or 'seed 0'}", "L0-density (%)": 100 * r["metrics"]["l0_density"],
                     "highest L0-density (%)": None if top is None else 100 * top["l0_density"],
                     "at epoch": None if top is None else int(top["epoch"]),
                     "val. error final (%)": r["metrics"]["val_error_final"]})
    table = pd.DataFrame(rows)
    table["|Δ| to the paper (points)"] = (table["L0-density (%)"] - paper).abs()
    paper_error = paper_penalized(grouping, lmbda, "val_error_final")
    return pd.concat([table, pd.DataFrame([{"run": "paper", "L0-density (%)": paper,
                                            "val. error final (%)": paper_error}])], ignore_index=True)


def authors_penalized_numbers(theirs: dict, ours: list[dict]) -> dict:
    """The authors' penalized LeNet5 run against ours: its final and highest density (and epoch); whether its
    distance to the paper's density is ``further`` than all our fan-in records', ``nearer`` or ``within``; and
    ``share``, the percentage of the distance from our fan-in seed 0 to their run that our fan-out twin closes
    (the initialisation alone; None without both records)."""
    grouping, lmbda, history = theirs["grouping"], theirs["lmbda"], theirs["history"]
    peak = max(history, key=lambda row: row["l0_density"])
    paper, density = paper_penalized(grouping, lmbda), 100 * history[-1]["l0_density"]
    cell = select(ours, grouping=grouping, lmbda=lmbda)
    fan_in = [abs(100 * r["metrics"]["l0_density"] - paper) for r in cell if r["params"].get("linear_init") != "fan_out"]
    theirs_gap = abs(density - paper)
    position = (None if not fan_in else "further" if theirs_gap > max(fan_in)
                else "nearer" if theirs_gap < min(fan_in) else "within")
    by_variant = {variant(r["params"]): 100 * r["metrics"]["l0_density"] for r in cell}
    twin, seed0 = by_variant.get("fan-out"), by_variant.get("")
    share = (None if twin is None or seed0 is None or seed0 == density
             else 100 * (seed0 - twin) / (seed0 - density))
    return {"density": density, "peak": 100 * peak["l0_density"], "peak epoch": int(peak["epoch"]),
            "epochs": len(history), "paper": paper, "gap": theirs_gap,
            "our gaps low": min(fan_in, default=None), "our gaps high": max(fan_in, default=None),
            "position": position, "twin": twin, "fan-in seed 0": seed0, "share": share}


def plot_authors_penalized(theirs: dict, ours: list[dict]) -> plt.Figure:
    """Model L0-density and conv2's expected density against epochs: the authors' LeNet5 with their penalty, our
    records of its cell (line style by :func:`variant`) and the paper's final density."""
    grouping, lmbda = theirs["grouping"], theirs["lmbda"]
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.8))
    _plot_with_twins(axes, theirs, {f"ours, {variant(run['params']) or 'seed 0'}": run
                                    for run in select(ours, grouping=grouping, lmbda=lmbda)}, LENET_PANELS)
    axes[0].plot([len(theirs["history"])], [paper_penalized(grouping, lmbda)], ms=8, label="paper, final (mean of 5)",
                 **style.point("paper"))
    fig.suptitle(f"LeNet5 penalized, {grouping}-wise λ_pen {lmbda:g}: the authors' code and ours", fontsize=10)
    style.legend_below(fig, axes[0], ncol=3)
    return fig


# --- final errors: a difference, or chance? --------------------------------------------------------

def error_agreement() -> pd.DataFrame:
    """:func:`comparison.agreement` of the final errors of the three MNIST tables, one row per row."""
    return pd.concat([comparison.agreement(label) for label in TABLES], ignore_index=True)


def cell_of(params: dict) -> tuple:
    """A control-table cell: model, method, grouping, and target or λ_pen."""
    hyper = params["target"] if params["method"] == "constrained" else params["lmbda"]
    return params["model"], params["method"], params["grouping"], hyper


def seed_rows(label: str, cells: list[tuple], runs: list[dict]) -> list[dict]:
    """Per cell of a control table (:func:`cell_of`): the final error of each seed among ``runs``, and whether
    seed 0's alone differs from the paper's beyond chance (as :func:`comparison.agreement`)."""
    rows = []
    for cell in cells:
        model, method, grouping, hyper = cell
        chosen = sorted((r for r in runs if cell_of(r["params"]) == cell), key=lambda r: r["params"]["seed"])
        errors = {f"seed {r['params']['seed']}": r["metrics"]["val_error_final"] for r in chosen}
        beyond = None
        if "seed 0" in errors:
            paper = paper_cell(label, model=models.display_name(model), method=method, grouping=grouping,
                               metric="val_error_final",
                               **{"target" if method == "constrained" else "lmbda": f"{hyper:g}"})
            chance = intervals.difference_interval(float(paper.ci), paper_runs(label), [errors["seed 0"]])
            beyond = abs(errors["seed 0"] - paper.value_num) > chance
        rows.append({"cell": f"{models.display_name(model)} {method} {grouping} "
                             + (f"{100 * hyper:g}%" if method == "constrained" else f"λ_pen {hyper:g}"),
                     "seed 0 beyond chance": None if beyond is None else ("yes" if beyond else "no"), **errors})
    return rows


def seeds_table() -> pd.DataFrame:
    """The final error of each seed of the cells :data:`SEEDS_GRIDS` add seeds to (:func:`seed_rows`)."""
    rows = []
    for label, grid in SEEDS_GRIDS.items():
        cells = list(dict.fromkeys(cell_of(config.to_dict()) for config, _ in report.grid_runs(grid)))
        rows += seed_rows(label, cells, records_of([g for g in studies.TABLES[label].grids
                                                    if g.endswith("_paper.yaml")]))
    return naming_pending(pd.DataFrame(rows), SEEDS_GRIDS.values())


def beyond_chance(agreement: pd.DataFrame) -> dict:
    """How many rows of :func:`error_agreement` differ beyond chance, of how many, and how many chance alone puts
    there at 95% (one in 20)."""
    beyond = int(agreement["beyond chance"].astype(bool).sum())
    return {"beyond": beyond, "rows": len(agreement), "by chance": len(agreement) / 20}


def spreads(agreement: pd.DataFrame, table1_errors: pd.DataFrame) -> dict:
    """The run-to-run standard deviation of the final error (points) behind the paper's CIs
    (:func:`intervals.spread_from_ci`) over the rows of :func:`error_agreement` (smallest, largest, the row of the
    smallest), and over our seeds of each row of ``table1_errors`` that has 5 (None without)."""
    runs_by_table = {ref(label): paper_runs(label) for label in studies.TABLES}
    paper = {row.row: intervals.spread_from_ci(comparison.split_cell(row.paper)[1], runs_by_table[row.table])
             for row in agreement.itertuples()}
    ours = [statistics.stdev(values["val_error_final"]) for values in table1_errors.attrs["values"]
            if len(values.get("val_error_final", [])) >= 5]
    return {"paper low": min(paper.values()), "paper high": max(paper.values()),
            "paper smallest row": min(paper, key=paper.get),
            "ours low": min(ours, default=None), "ours high": max(ours, default=None)}


def spreads_table(found: dict) -> pd.DataFrame:
    """:func:`spreads` as a table."""
    return pd.DataFrame([{"runs": "the paper's, from its CIs (5 runs a row)", "smallest (points)": found["paper low"],
                          "largest (points)": found["paper high"], "row of the smallest": found["paper smallest row"]},
                         {"runs": "ours, Table 1's rows (5 seeds)", "smallest (points)": found["ours low"],
                          "largest (points)": found["ours high"], "row of the smallest": None}])


def retested(seeds: pd.DataFrame, agreement: pd.DataFrame) -> dict:
    """Of the cells whose seed 0 was beyond chance (:func:`seeds_table`) and that now have more seeds: how many,
    and which stay beyond chance with all of them (:func:`error_agreement`)."""
    again = seeds[seeds["seed 0 beyond chance"] == "yes"]["cell"]
    tested = agreement.set_index("row").loc[[c for c in again if c in set(agreement["row"])]]
    several = tested[tested["our runs"] > 1]
    return {"tested": len(several), "still beyond": list(several.index[several["beyond chance"].astype(bool)])}


def clamped_error_table(clamped: dict, unclamped: list[dict]) -> pd.DataFrame:
    """Table 1's model-wise 10% LeNet5 row: the paper's final error and parameters, each unclamped seed's and the
    clamped run's, each run's difference from the paper's mean and the 95% interval of chance of one run."""
    paper = paper_cell("tab:mnist", model="LeNet5", method="constrained", grouping="model", metric="val_error_final")
    chance = intervals.difference_interval(float(paper.ci), paper_runs("tab:mnist"), [0.0])
    rows = [{"run": "paper", "val. error final (%)": f"{paper.value} ± {paper.ci}",
             "params (%)": paper_row("", "lenet5", "model", 0.1, "tab:mnist")["params (%)"]}]
    for label, run in [*((f"ours, seed {r['params']['seed']}", r) for r in unclamped), ("ours, clamped, seed 0", clamped)]:
        error = run["metrics"]["val_error_final"]
        rows.append({"run": label, "val. error final (%)": f"{error:.2f}", "params (%)": run["metrics"]["params_pct"],
                     "Δ (points)": error - paper.value_num, "95% chance interval (±)": chance})
    return pd.DataFrame(rows, columns=["run", "val. error final (%)", "params (%)", "Δ (points)",
                                       "95% chance interval (±)"])
