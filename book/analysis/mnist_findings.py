"""MNIST: how close our runs come to the paper's tables, and what the tests of the differences show.

The analysis behind the MNIST pages. ``book/results_mnist.md`` compares our
records with Table 1 and the control tables of Appendix K.1 (Table 10, the MLP;
Table 11, LeNet5): the "error best" of Table 1 taken the authors' way
(:func:`authors_best_errors`) and how far each constrained run ends from its
target, beside the paper's own runs (:func:`paper_gap_table`,
:func:`misses_by_cell`). ``book/results_mnist_investigations.md``, ``results_mnist_authors.md`` and
``results_mnist_differences.md`` test the causes
of the differences: the dual learning rate (:func:`dual_lr_table`), the authors'
initialisation (:func:`initialisation_table`), the authors' published code run
(:func:`authors_runs`), which groups the paper's LeNet5 keeps
(:func:`implied_conv2_fc1`), the clamp on log alpha (:func:`clamp_comparison`),
and whether the final errors differ by more than chance (:func:`error_agreement`,
:func:`seeds_table`).

Every number of ours comes from a record (:func:`records_of` reads the grids'
complete records); the paper's from ``paper_results.csv``. The only numbers
typed here are the authors' aggregated densities of Table 1's rows
(:data:`AUTHORS_TABLE1_DENSITY`), which the paper does not print.
"""

import json
import statistics
from functools import cache
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from paperlib.harness import paper_rows, plots, records, rules, studies
from paperlib.method import counting, gates
from paperlib.paper import models
from . import comparison, intervals, report
from paperlib.harness.paper_rows import PAPER_MODEL_NAMES, target_label
from paperlib.paper.paper_numbers import ref
from paperlib.paper.purge import keep_first  # not `from . import purge`: paperlib.purge is the function (paperlib/__init__.py)
from paperlib.paper.paper_results import paper_cell, paper_results, paper_runs
from paperlib.harness.vocabulary import METRIC_LABELS

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
#: Table 11's grids at the paper's protocol.
LENET_PAPER_GRIDS = list(studies.grids("tab:lenet_control", preset="paper"))
#: Every grid with a penalized LeNet5 run at the paper's protocol: more seeds, fan-out, clamped.
LENET_PENALIZED_GRIDS = [*LENET_PAPER_GRIDS, FAN_OUT_GRIDS[1], CLAMP_GRID]
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


def select(runs: list[dict], **params) -> list[dict]:
    """The records among ``runs`` whose parameters have these values (``model="mlp", seed=0``), in order."""
    return [run for run in runs if all(run["params"].get(name) == value for name, value in params.items())]


def records_of(grids: str | list[str], **params) -> list[dict]:
    """Our complete records of a grid file or of several (in grid order, each record once: grids may share a run)
    whose parameters have these values."""
    grids = [grids] if isinstance(grids, str) else grids
    runs = {(str(run["path"]), run["metrics"]["run_name"]): run
            for grid in grids for run in report.complete_records(grid)}
    return select(list(runs.values()), **params)


def constrained_records(grids: str | list[str], model: str, grouping: str, target, **params) -> list[dict]:
    """Our complete constrained records of one cell (``seed=0``, ``dual_lr=1e-4`` ... narrow it further)."""
    return records_of(grids, model=model, method="constrained", grouping=grouping, target=target, **params)


def table1_records() -> list[dict]:
    """Table 1's complete records at the paper's protocol, or at the cpu one where none is complete."""
    return report.complete_records(TABLE1_GRID) or report.complete_records(TABLE1_CPU_GRID)


def pending_command(grids) -> str | None:
    """The sweep command for those of ``grids`` that have runs without a complete record (None if none has)."""
    pending = [grid for grid in grids
               if len(report.complete_records(grid)) < len(report.grid_runs(grid))]
    return report.sweep_command(pending) if pending else None


def naming_pending(table: pd.DataFrame, grids) -> pd.DataFrame:
    """``table`` with the command that makes the missing runs of ``grids`` where there are any
    (``attrs["command"]``, which :func:`report.show` puts in the caption)."""
    command = pending_command(grids)
    if command:
        table.attrs["command"] = command
    return table


def authors_runs(folder: Path | None = None, **keys) -> list[dict]:
    """The runs of the authors' published code whose keys have these values (``model="mlp"``; constrained
    unless ``method="penalized"``), by file name.

    ``benchmarks/authors_training.py`` writes one JSON per run to ``runs/authors_code/``: its command, cell
    and a history whose rows hold the epoch's mean model density (as the authors' tables average it), the
    groups kept and the validation error.
    """
    folder = folder or records.runs_dir() / "authors_code"
    runs = [{"method": "constrained", **json.loads(path.read_text())} for path in sorted(Path(folder).glob("*.json"))]
    keys = {"method": "constrained", **keys}
    return [run for run in runs if all(run.get(name) == value for name, value in keys.items())]


def authors_command(model: str, grouping: str, target: float) -> str:
    """The command that runs the authors' code on one cell."""
    return (f"PAPERLIB_DATA=../shared/data python benchmarks/authors_training.py --model {model} "
            f"--grouping {grouping} --target {target:g}")


def our_twins(theirs: dict) -> dict[str, dict | None]:
    """Our seed-0 records of the cell of a run of the authors' code, fan-in and fan-out (None where missing)."""
    return {label: next(iter(constrained_records(grid, theirs["model"], theirs["grouping"], theirs["target"],
                                                 seed=0)), None)
            for label, grid in TWIN_GRIDS[theirs["model"]].items()}


# --- the results: Table 1 and how close to the target ---------------------------------------------


def authors_best_errors(runs: list[dict]) -> pd.DataFrame:
    """Table 1's "error best" taken the authors' way (the lowest error of any epoch of any seed,
    :func:`paper_rows.authors_best_error`), one row per constrained row with records, beside the paper's."""
    by_row = {}
    for run in runs:
        by_row.setdefault((run["metrics"]["model"], run["metrics"]["grouping"]), []).append(run)
    rows = []
    for (model, grouping), cell_runs in by_row.items():
        paper = paper_cell("tab:mnist", model=PAPER_MODEL_NAMES[model], method="constrained", grouping=grouping,
                           metric="val_error_best").value
        rows.append({"model": PAPER_MODEL_NAMES[model], "row": f"constrained, {grouping}-wise", "seeds": len(cell_runs),
                     "val. error best (%) paper": paper,
                     "val. error best (%) ours, authors' way": paper_rows.authors_best_error(cell_runs)})
    return pd.DataFrame(rows)


def control_tables(label: str) -> list[pd.DataFrame]:
    """A control table beside ours, twice, so that each fits the page: densities and counts, then errors."""
    return [comparison.compare_table(label, metrics) for metrics in
            (["l0_density", "params_pct", "macs_pct"], ["val_error_best", "val_error_final"])]


def within_one_point(gaps: pd.DataFrame) -> list[str]:
    """Per preset, how many runs of a :func:`comparison.distance_to_target` table end within 1 point of every
    target, in words."""
    lines = []
    for protocol in ("paper", "cpu"):
        chosen = gaps[gaps["protocol"].str.startswith(protocol)]
        if len(chosen):
            lines.append(f"{protocol} preset: {chosen['within 1 point'].sum()} of {len(chosen)} runs end within "
                         f"1 point of every target")
    return lines


def paper_constrained_densities() -> pd.DataFrame:
    """The paper's constrained cells of Table 10 and Table 11 (final L0-density, mean of 5 runs), with ``gap``:
    the density minus the target, in points."""
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
    """The paper's final model L0-density minus the target (points) in the cell labelled ``target``
    (:func:`paper_rows.target_label`); for Table 1's rows, which print no density, the authors' aggregated
    density (:data:`AUTHORS_TABLE1_DENSITY`) minus the first layer's target."""
    printed = paper_constrained_densities()
    cell = printed[(printed["model"] == PAPER_MODEL_NAMES[model]) & (printed["grouping"] == grouping)
                   & (printed["target"].astype(float).map(target_label) == target)]
    if len(cell):
        return float(cell["gap"].iloc[0])
    first_target = float(target.strip("[]%").split(",")[0])  # Table 1's rows share one target across layers
    return AUTHORS_TABLE1_DENSITY.get((model, grouping), float("nan")) - first_target


def _paper_protocol_misses(gaps: pd.DataFrame) -> pd.DataFrame:
    return gaps[gaps["protocol"].str.startswith("paper") & ~gaps["within 1 point"].astype(bool)]


def misses_by_cell(gaps: pd.DataFrame) -> pd.DataFrame:
    """The paper-protocol runs of a :func:`comparison.distance_to_target` table that end more than 1 point from
    a target, by cell: how many, their lowest and highest gap, and the paper's gap (:func:`paper_gap`)."""
    by_cell = (_paper_protocol_misses(gaps).groupby(["model", "grouping", "target"], sort=False)
               ["largest gap (points)"].agg(runs="size", lowest="min", highest="max").reset_index())
    by_cell["paper's gap (points)"] = [paper_gap(*cell) for cell in by_cell[["model", "grouping", "target"]].values]
    return by_cell


def misses_in_words(gaps: pd.DataFrame, by_cell: pd.DataFrame) -> str:
    """:func:`misses_by_cell` in a sentence: how many runs miss, in which models, on which side, by how much,
    and where the paper's own runs end in these cells."""
    ours, theirs = _paper_protocol_misses(gaps)["largest gap (points)"], by_cell["paper's gap (points)"]
    side = "above" if (ours > 0).all() else "above or below"
    names = sorted(PAPER_MODEL_NAMES[m] for m in set(by_cell["model"]))
    sentence = (f"These {len(ours)} runs fall in {len(by_cell)} cells, all of them {' and '.join(names)} cells, "
                f"and end {side} their target by {ours.abs().min():.2f} to {ours.abs().max():.2f} points. ")
    if (theirs > 0).all():
        return sentence + (f"In every one of these cells the paper's own runs end above the target too, by "
                           f"{theirs.min():.2f} to {theirs.max():.2f} points.")
    return sentence + f"The paper's own runs in these cells end {theirs.min():+.2f} to {theirs.max():+.2f} points from it."


# --- why the constrained runs end above their target ----------------------------------------------


def expected_and_kept(runs: list[dict]) -> pd.DataFrame:
    """Per model-wise record: each gated layer's expected open groups (its expected density times its groups)
    beside the groups its test-time model keeps, and the parameters kept."""
    rows = []
    for run in runs:
        m = run["metrics"]
        counts = models.gate_counts(m["model"])
        row = {"seed": m["seed"], "model density (%)": 100 * m["l0_density"]}
        for (layer, density), kept in zip(m["l0_density_per_layer"].items(), m["pruned_architecture"]):
            row[f"{layer}: expected / kept"] = f"{density * counts[layer]:.1f} / {kept}"
        rows.append(row | {"params kept (%)": m["params_pct"]})
    return pd.DataFrame(rows)


def lowest_worst_layer(record: dict) -> tuple[float, int]:
    """The lowest that the densest layer of a layer-wise record came (%, at an epoch's end), and that epoch:
    an epoch is feasible only when every layer is within a point of its target at once."""
    history = plots.history_frame(record).set_index("epoch")
    worst = history[[f"density[{layer}]" for layer in record["metrics"]["l0_density_per_layer"]]].max(axis=1)
    return 100 * worst.min(), int(worst.idxmin())


# --- the dual learning rate, tested ----------------------------------------------------------------


def gap_history(record: dict) -> list[float]:
    """Per training epoch, the largest gap (points) between an expected density and its target."""
    return [max(100 * (density - target) for density, target in paper_rows.constrained_densities(record, row))
            for row in record["history"] if row["phase"] == "train"]


def settled_epoch(gaps: list[float], points: float = rules.ON_TARGET_POINTS) -> int | None:
    """The first epoch (1-based) from which every gap stays within ``points`` of zero, or None."""
    return next((i + 1 for i in range(len(gaps)) if all(abs(g) <= points for g in gaps[i:])), None)


def dual_lr_table(runs: list[dict]) -> pd.DataFrame:
    """One row per constrained run: its dual learning rate, final largest gap, the epoch from which every
    constraint stays within a point (:func:`settled_epoch`) and its errors."""
    rows = []
    for run in runs:
        m, gaps = run["metrics"], gap_history(run)
        settled = settled_epoch(gaps)
        rows.append({"grouping": m["grouping"], "dual lr": f"{run['params']['dual_lr']:g}",
                     "final largest gap (points)": gaps[-1],
                     "within 1 point from epoch": None if settled is None else str(settled),
                     "val. error best (%)": paper_rows.best_feasible_error(run), "val. error final (%)": m["val_error_final"],
                     "run": report.notebook_link(run["path"], m["run_name"])})
    return naming_pending(pd.DataFrame(rows), [DUAL_LR_GRID])


def plot_gap_histories(runs: list[dict]) -> plt.Figure:
    """Each run's largest gap to a target against epochs (:func:`gap_history`), the one-point band shaded."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for run in runs:
        gaps = gap_history(run)
        ax.plot(range(1, len(gaps) + 1), gaps,
                label=f"{run['metrics']['grouping']}-wise, dual lr {run['params']['dual_lr']:g}")
    ax.axhspan(-1, 1, color="C2", alpha=0.15)
    ax.set(xlabel="epoch", ylabel="largest gap to a target (points)", ylim=(-5, 15))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- the authors' initialisation, tested -----------------------------------------------------------


def initialisation_table(table: str, metrics: list[str]) -> pd.DataFrame:
    """The paper's cells beside our fan-in records (the table's grids, all seeds) and fan-out records
    (:data:`FAN_OUT_GRIDS`), for the rows a fan-out grid has run at the paper's protocol."""
    fan_out = comparison.compare(table, list(FAN_OUT_GRIDS), metrics).set_index(ROW)
    fan_in = comparison.compare(table, studies.TABLES[table].grids, metrics).set_index(ROW)
    rows = []
    for key, row in fan_out[fan_out["protocol"].str.startswith("paper")].iterrows():
        protocol = fan_in.loc[key, "protocol"].split(", ")
        cells = dict(zip(ROW, key)) | {"seeds fan-in": protocol[2] if len(protocol) > 2 else protocol[0]}
        for label in (METRIC_LABELS[m] for m in metrics):
            cells |= {f"{label} paper": row[f"{label} paper"], f"{label} fan-in": fan_in.loc[key, f"{label} ours"],
                      f"{label} fan-out": row[f"{label} ours"]}
        rows.append(cells | {"run fan-out": row["runs"]})
    return pd.DataFrame(rows)


def paper_penalized_density(grouping: str, lmbda: float) -> float:
    """The paper's final L0-density (%) of a penalized LeNet5 cell of Table 11."""
    return paper_cell("tab:lenet_control", model="LeNet5", method="penalized", grouping=grouping,
                      lmbda=f"{lmbda:g}", metric="l0_density").value_num


def fan_out_penalized_lines(fan_out: list[dict], fan_in: list[dict]) -> list[str]:
    """One Markdown line per penalized LeNet5 record with fan-out: its final L0-density beside the fan-in
    records of its cell and the paper's."""
    lines = []
    for run in fan_out:
        p = run["params"]
        densities = [f"{100 * r['metrics']['l0_density']:.2f}"
                     for r in select(fan_in, grouping=p["grouping"], lmbda=p["lmbda"])]
        lines.append(f"- {p['grouping']}-wise, λ_pen = {p['lmbda']:g}: L0-density "
                     f"{100 * run['metrics']['l0_density']:.2f}% with fan-out, {report.in_words(densities)}% with "
                     f"fan-in, the paper's {paper_penalized_density(p['grouping'], p['lmbda']):.2f}%.")
    return lines


# --- the authors' own code, run --------------------------------------------------------------------


def _authors_row(theirs: dict) -> dict:
    last = theirs["history"][-1]
    return {"run": "authors' code", "groups kept": "-".join(map(str, last["kept_groups"])),
            "L0-density (%)": f"{100 * last['l0_density_epoch_mean']:.2f}", "val. error final (%)": last["val_error"],
            "record": f"<code>{theirs['command']}</code>"}


def _our_row(label: str, run: dict) -> dict:
    m = run["metrics"]
    return {"run": label, "groups kept": "-".join(map(str, m["pruned_architecture"])),
            "L0-density (%)": f"{100 * m['l0_density']:.2f}", "val. error final (%)": m["val_error_final"],
            "record": report.notebook_link(run["path"], "notebook")}


def _train_rows(run: dict) -> pd.DataFrame:
    frame = plots.history_frame(run)
    return frame[frame["phase"] == "train"]


def authors_mlp_table(theirs: list[dict], twins: list[dict]) -> pd.DataFrame:
    """Per MLP run of the authors' code: its final density, groups kept and error, beside our twins
    (:func:`our_twins`) and the paper's cell of Table 10."""
    rows = []
    for run, ours in zip(theirs, twins):
        keys = dict(model="MLP", method="constrained", grouping=run["grouping"], target=run["target"])
        paper = paper_cell("tab:mlp_control", metric="l0_density", **keys)
        cell = f"{run['grouping']}-wise {100 * run['target']:g}%"
        rows += [{"cell": cell, **_authors_row(run)},
                 *({"cell": cell, **_our_row(label, record)} for label, record in ours.items() if record),
                 {"cell": cell, "run": "paper", "L0-density (%)": paper_rows.printed_cell(paper), "groups kept": None,
                  "val. error final (%)": paper_cell("tab:mlp_control", metric="val_error_final", **keys).value,
                  "record": None}]
    return pd.DataFrame(rows, columns=["cell", "run", "L0-density (%)", "groups kept", "val. error final (%)", "record"])


def plot_authors_mlp(theirs: list[dict], twins: list[dict]) -> plt.Figure:
    """One panel per MLP run of the authors' code: its model density against epochs beside our twins', with
    the target and the paper's final density."""
    fig, axes = plt.subplots(1, max(len(theirs), 1), figsize=(7, 3.2), sharey=True, squeeze=False)
    for ax, run, ours in zip(axes[0], theirs, twins):
        history = pd.DataFrame(run["history"])
        ax.plot(history["epoch"], 100 * history["l0_density_epoch_mean"], color="k", lw=2.5, alpha=0.5,
                label="authors' code")
        for label, record in ours.items():
            if record:
                frame = _train_rows(record)
                ax.plot(frame["epoch"], 100 * frame["l0_density"], lw=1, label=label)
        paper = paper_cell("tab:mlp_control", model="MLP", method="constrained", grouping=run["grouping"],
                           target=run["target"], metric="l0_density")
        ax.axhline(100 * run["target"], color="C2", ls=":", lw=1)
        ax.axhline(paper.value_num, color="C3", ls="--", lw=1, label="paper, final")
        ax.set(title=f"MLP {run['grouping']}-wise {100 * run['target']:g}%", xlabel="epoch", ylim=(15, 60))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("model L0-density (%)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


# --- LeNet5: where the paper's runs spend their density -------------------------------------------


def _counts(model) -> np.ndarray:
    return np.array([counting.count_params(model), counting.count_macs(model, (1, 28, 28))])


@cache
def _dense_counts(model: str) -> np.ndarray:
    return _counts(models.build_model(model, gated=False))


@cache
def _percentages(model: str, kept: tuple[int, ...]) -> tuple[float, float]:
    return tuple(100 * _counts(keep_first(model, list(kept))) / _dense_counts(model))


def model_percentages(model: str, kept) -> np.ndarray:
    """Parameters and MACs (%, the paper's convention) of an MNIST ``model`` pruned to ``kept`` groups per
    gated layer (:func:`paperlib.paper.purge.keep_first`); counted once per architecture."""
    return np.array(_percentages(model, tuple(int(k) for k in kept)))


def implied_conv2_fc1(params_pct: float, macs_pct: float, fc2: int) -> np.ndarray:
    """The conv2 maps and fc1 inputs (conv1 at 20, fc2 at ``fc2``) whose LeNet5 has these percentages: both
    counts are affine in the two, so two printed percentages determine them."""
    base = model_percentages("lenet5", (20, 20, 100, fc2))
    slopes = np.stack([model_percentages("lenet5", (20, 21, 100, fc2)) - base,
                       model_percentages("lenet5", (20, 20, 101, fc2)) - base], 1)
    return np.linalg.solve(slopes, np.array([params_pct, macs_pct]) - base) + [20, 100]


def paper_row(cell: str, model: str, grouping: str, target, table: str) -> dict:
    """The paper's numbers for one constrained cell of Table 1 or of a control table, as a row of
    :func:`clamp_comparison`. A row of Table 1 takes its printed architecture, counted, and the authors'
    aggregated density; a model-wise LeNet5 row of Table 11 the architecture its counts imply."""
    paper_target = " ".join(f"{t:g}" for t in target) if isinstance(target, list) else target
    keys = dict(model=PAPER_MODEL_NAMES[model], method="constrained", grouping=grouping, target=paper_target)
    error = paper_cell(table, metric="val_error_final", **keys).value_num
    if table == "tab:mnist":
        kept = paper_cell(table, metric="pruned_architecture", **keys).value
        params, macs = model_percentages(model, kept.split("-"))
        return {"cell": cell, "run": "paper", "architecture": kept,
                "L0-density (%)": AUTHORS_TABLE1_DENSITY[(model, grouping)], "params (%)": params, "MACs (%)": macs,
                "val. error final (%)": error, "record": None}
    means = {m: paper_cell(table, metric=m, **keys).value_num for m in ("l0_density", "params_pct", "macs_pct")}
    architecture = None
    if model == "lenet5" and grouping == "model":  # conv1 and fc2 whole: the counts imply conv2 and fc1
        conv2, fc1 = implied_conv2_fc1(means["params_pct"], means["macs_pct"], fc2=500)
        architecture = f"20-{conv2:.0f}-{fc1:.0f}-500 (implied)"
    return {"cell": cell, "run": "paper", "architecture": architecture, "L0-density (%)": means["l0_density"],
            "params (%)": means["params_pct"], "MACs (%)": means["macs_pct"], "val. error final (%)": error, "record": None}


def _paper_lenet_counts(target: float) -> dict:
    return {m: paper_cell("tab:lenet_control", model="LeNet5", method="constrained", grouping="model",
                          target=target, metric=m).value_num for m in ("params_pct", "macs_pct", "l0_density")}


def _ours_in_words(runs: list[dict]) -> dict:
    return {"ours: architecture": ", ".join("-".join(map(str, r["metrics"]["pruned_architecture"]))
                                            for r in runs) or None,
            "ours: params / MACs (%)": ", ".join(f"{r['metrics']['params_pct']:.2f} / {r['metrics']['macs_pct']:.2f}"
                                                 for r in runs) or None}


def implied_architectures(ours: list[dict], table1_ours: list[dict]) -> pd.DataFrame:
    """Per model-wise target of Table 11: the conv2 maps and fc1 inputs the paper's parameters and MACs imply
    (fc2 at 500 and at Table 1's 407), their counts recounted, beside our records of the cell (``ours``:
    model-wise LeNet5 records of any target); then Table 1's 10% row, counted, beside ``table1_ours``."""
    rows = []
    for target in CONTROL_TARGETS:
        cell = _paper_lenet_counts(target)
        conv2, fc1 = implied_conv2_fc1(cell["params_pct"], cell["macs_pct"], fc2=500)
        conv2_407, _ = implied_conv2_fc1(cell["params_pct"], cell["macs_pct"], fc2=407)
        recount = model_percentages("lenet5", (20, round(conv2), round(fc1), 500))
        rows.append({"target": f"{100 * target:g}%",
                     "paper params / MACs (%)": f"{cell['params_pct']:.2f} / {cell['macs_pct']:.2f}",
                     "implied conv2 (fc2 500 | 407)": f"{conv2:.1f} | {conv2_407:.1f}",
                     "implied fc1 (fc2 500)": f"{fc1:.0f}",
                     "recounted params / MACs (%)": f"{recount[0]:.2f} / {recount[1]:.2f}",
                     **_ours_in_words(select(ours, target=target))})
    table1 = model_percentages("lenet5", (20, 21, 34, 407))
    rows.append({"target": "10% (Table 1)", "paper params / MACs (%)": f"{table1[0]:.2f} / {table1[1]:.2f} (counted)",
                 "implied conv2 (fc2 500 | 407)": "21 (printed: 20-21-34-407)", "implied fc1 (fc2 500)": None,
                 "recounted params / MACs (%)": None, **_ours_in_words(table1_ours)})
    return pd.DataFrame(rows)


def authors_lenet_table(theirs: list[dict], twins: list[dict]) -> pd.DataFrame:
    """Per model-wise LeNet5 run of the authors' code: the paper's cell (architecture implied), the run (its
    parameters and MACs counted as if no fc1 input sat behind a closed conv2 map: upper bounds) and our twins."""
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


def _implied_conv2(target: float) -> float:
    cell = _paper_lenet_counts(target)
    return implied_conv2_fc1(cell["params_pct"], cell["macs_pct"], fc2=500)[0]


def plot_authors_lenet(theirs: list[dict], twins: list[dict]) -> plt.Figure:
    """The model density and conv2's expected density against epochs of the authors' LeNet5 runs and our
    twins, with the target and the conv2 maps the paper's counts imply."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for run, ours in zip(theirs, twins):
        history = pd.DataFrame(run["history"])
        for ax, column in zip(axes, ("l0_density_epoch_mean", "density[1]")):
            ax.plot(history["epoch"], 100 * history[column], color="k", lw=2.5, alpha=0.5, label="authors' code")
        for label, record in ours.items():
            if record:
                frame = _train_rows(record)
                for ax, column in zip(axes, ("l0_density", "density[conv2]")):
                    ax.plot(frame["epoch"], 100 * frame[column], lw=1, label=label)
        conv2 = _implied_conv2(run["target"])
        axes[0].axhline(100 * run["target"], color="C2", ls=":", lw=1)
        axes[1].axhline(100 * conv2 / 50, color="C3", ls="--", lw=1, label=f"paper, implied ({conv2:.0f} of 50 maps)")
    for ax, title in zip(axes, ("model L0-density (%)", "conv2 expected density (%)")):
        ax.set(xlabel="epoch", title=f"LeNet5 model-wise 20%: {title}")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def conv2_in_words(theirs: list[dict], twins: list[dict], fan_out: list[dict], fan_in: list[dict]) -> str:
    """The conv2 maps kept, in sentences: the authors' code against our fan-in twin and the paper's implied
    count; then each fan-out record (model-wise LeNet5) against the fan-in records of its target."""
    sentences = [f"At {100 * run['target']:g}%, seed 0: the authors' code keeps {run['history'][-1]['kept_groups'][1]} "
                 f"conv2 maps, ours {ours['ours, fan-in']['metrics']['pruned_architecture'][1]}; the paper's counts "
                 f"imply {_implied_conv2(run['target']):.0f}."
                 for run, ours in zip(theirs, twins) if ours["ours, fan-in"]]
    for run in sorted(fan_out, key=lambda r: r["params"]["target"]):
        kept = [str(r["metrics"]["pruned_architecture"][1]) for r in select(fan_in, target=run["params"]["target"])]
        if kept:
            sentences.append(f"At {100 * run['params']['target']:g}%, our run with the authors' fan-out initialisation "
                             f"keeps {run['metrics']['pruned_architecture'][1]} conv2 maps, our fan-in runs "
                             f"{report.in_words(kept)}.")
    return " ".join(sentences)


def expected_density(kept, log_alpha_open: float, log_alpha_closed: float) -> float:
    """LeNet5's model L0-density (%) with the first ``kept[i]`` gates of layer i at ``log_alpha_open`` and
    the rest at ``log_alpha_closed``."""
    model = models.build_model("lenet5")
    with torch.no_grad():
        for layer, count in zip(models.gated_layers(model), kept):
            layer.weight_log_alpha.fill_(log_alpha_closed)[:count] = log_alpha_open
    return 100 * float(models.model_density(model).detach())


def clamp_bound_probabilities() -> tuple[float, float]:
    """P(z != 0) of a gate at the clamp's lower and upper bound on log alpha."""
    return tuple(float(gates.prob_active(torch.tensor(bound))) for bound in (gates.LOG_ALPHA_MIN, gates.LOG_ALPHA_MAX))


def clamp_floor_table() -> pd.DataFrame:
    """For Table 1's 10% architecture and the architectures Table 11's counts imply: the model's expected
    density with its kept groups fully open and the others closed for good, or held at the clamp's floor,
    beside the density the paper reports."""
    architectures = [("10% (Table 1)", (20, 21, 34, 407), AUTHORS_TABLE1_DENSITY[("lenet5", "model")])]
    for target in CONTROL_TARGETS:
        cell = _paper_lenet_counts(target)
        conv2, fc1 = implied_conv2_fc1(cell["params_pct"], cell["macs_pct"], fc2=500)
        architectures.append((f"{100 * target:g}%", (20, round(conv2), round(fc1), 500), cell["l0_density"]))
    return pd.DataFrame([{"target": label, "architecture": "-".join(map(str, kept)),
                          "closed for good (%)": expected_density(kept, DECIDED, -DECIDED),
                          "closed at the clamp's floor (%)": expected_density(kept, gates.LOG_ALPHA_MAX,
                                                                              gates.LOG_ALPHA_MIN),
                          "paper's expected density (%)": density}
                         for label, kept, density in architectures])


# --- the clamp on log alpha, tested ----------------------------------------------------------------


def record_row(cell: str, label: str, run: dict) -> dict:
    """One of our records as a row of :func:`clamp_comparison`."""
    m = run["metrics"]
    return {"cell": cell, "run": label, "architecture": "-".join(map(str, m["pruned_architecture"])),
            "L0-density (%)": 100 * m["l0_density"], "params (%)": m["params_pct"], "MACs (%)": m["macs_pct"],
            "val. error final (%)": m["val_error_final"], "record": report.notebook_link(run["path"], "notebook")}


def clamp_rows(cell: str, paper: dict, unclamped: dict | None, clamped: list[dict]) -> tuple[list[dict], dict | None]:
    """One cell of :func:`clamp_comparison`: the paper's row, our unclamped record's and the clamped ones'; and,
    where the unclamped record has a clamped twin (:func:`report.counterpart`), how far each is from the paper
    in L0-density and parameters."""
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
        cell = f"{PAPER_MODEL_NAMES[model]} {grouping}-wise {target_label(target)} ({ref(label)})"
        unclamped = next(iter(constrained_records(grid, model, grouping, target, seed=0)), None)
        cell_rows, cell_closer = clamp_rows(cell, paper_row(cell, model, grouping, target, label), unclamped,
                                            constrained_records(CLAMP_GRID, model, grouping, target, seed=0))
        rows += cell_rows
        closer += [cell_closer] if cell_closer else []
    return naming_pending(pd.DataFrame(rows), [CLAMP_GRID]), pd.DataFrame(closer)


def clamp_in_words(closer: pd.DataFrame) -> str:
    """The second table of :func:`clamp_comparison` in a sentence: in how many cells the clamped run is closer
    to the paper, and the cells where it is further in parameters."""
    farther = list(closer.loc[~closer["clamped closer in params"], "cell"])
    return (f"Of the {len(closer)} cells that have both records, the clamped run is closer to the paper in "
            f"parameters in {closer['clamped closer in params'].sum()} and in L0-density in "
            f"{closer['clamped closer in L0-density'].sum()}"
            + (f". It is further from the paper in parameters in {report.in_words(farther)}." if farther else "."))


def fc1_behind_conv2_in_words(runs: list[tuple[str, dict]]) -> str:
    """LeNet5's layer-wise 50% cell: per (label, record), how many of the fc1 inputs behind conv2's open maps
    fc1 keeps, and the parameters and MACs; then the paper's."""
    paper = paper_row("", "lenet5", "layer", 0.5, "tab:lenet_control")
    described = []
    for label, run in runs:
        m = run["metrics"]
        conv1, conv2, fc1, fc2 = m["pruned_architecture"]
        described.append(f"{label if described else label.capitalize()}, {'-'.join(map(str, m['pruned_architecture']))}: "
                         f"fc1 keeps {fc1} of the {16 * conv2} inputs behind conv2's {conv2} open maps; "
                         f"parameters {m['params_pct']:.2f}%, MACs {m['macs_pct']:.2f}%")
    return (f"LeNet5's layer-wise 50% cell, seed 0. {'; '.join(described)}. The paper's: parameters "
            f"{paper['params (%)']:.2f}%, MACs {paper['MACs (%)']:.2f}%, at an L0-density of "
            f"{paper['L0-density (%)']:.2f}%.")


# --- where ours and the paper's differ by more than 2 points ---------------------------------------


def comparison_tables() -> dict[str, list[pd.DataFrame]]:
    """The tables the results page shows: Table 1, then each control table's two (:func:`control_tables`)."""
    return {"tab:mnist": [comparison.compare_table("tab:mnist")],
            **{label: control_tables(label) for label in TABLES[1:]}}


def large_differences(tables: dict[str, list[pd.DataFrame]], threshold: float = rules.AGREE_POINTS) -> pd.DataFrame:
    """Every cell of these :func:`comparison.compare` tables (by the paper's label) where ours differs from
    the paper's by more than ``threshold`` points (:func:`comparison.misses`), with the table's number."""
    found = pd.concat([comparison.misses(table, threshold).assign(table=ref(label))
                       for label, shown in tables.items() for table in shown], ignore_index=True)
    return found[["table", "row", "metric", "paper", "ours", "Δ", "protocol"]]


def variant(params: dict) -> str:
    """How a penalized LeNet5 record differs from the paper-protocol cell's seed 0: seed, initialisation, clamp."""
    parts = [f"seed {params['seed']}"] if params["seed"] else []
    parts += ["fan-out"] if params.get("linear_init") == "fan_out" else []
    parts += ["clamped"] if params.get("clamp_log_alpha") else []
    return ", ".join(parts)


def _variant_style(params: dict) -> dict:
    """The line of a penalized LeNet5 record in a figure, by :func:`variant`: dotted clamped, dashed fan-out,
    faint for a seed other than 0."""
    style = ":" if params.get("clamp_log_alpha") else "--" if params.get("linear_init") == "fan_out" else "-"
    return {"ls": style, "alpha": 0.6 if params["seed"] else 1.0}


def plot_penalized_lenet(penalized: dict[str, list[dict]]) -> plt.Figure:
    """Model L0-density against epochs of penalized LeNet5 records, one panel per grouping (a colour per
    λ_pen; dashed: fan-out; dotted: clamped; faint: another seed), the paper's final densities as circles."""
    lambdas = sorted({r["params"]["lmbda"] for runs in penalized.values() for r in runs}, reverse=True)
    colours = {lmbda: f"C{i}" for i, lmbda in enumerate(lambdas)}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, grouping in zip(axes, ("model", "layer")):
        for run in penalized[grouping]:
            p, frame = run["params"], _train_rows(run)
            ax.plot(frame["epoch"], 100 * frame["l0_density"], color=colours[p["lmbda"]], lw=1,
                    **_variant_style(p), label=", ".join(filter(None, [f"λ_pen {p['lmbda']:g}", variant(p)])))
        for lmbda in lambdas:
            ax.plot([200], [paper_penalized_density(grouping, lmbda)], marker="o", ms=7, mfc="none", color=colours[lmbda])
        ax.set(xlabel="epoch", title=f"LeNet5 penalized, {grouping}-wise (o: the paper's final)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("model L0-density (%)")
    fig.tight_layout()
    return fig


def penalized_in_words(penalized: dict[str, list[dict]], lmbda: float) -> str:
    """The final L0-density of every penalized LeNet5 record at ``lmbda``, per grouping, beside the paper's."""
    lines = [f"- {grouping}-wise, λ_pen = {lmbda:g}: the paper's {paper_penalized_density(grouping, lmbda):.2f}%; ours "
             + report.in_words(f"{100 * r['metrics']['l0_density']:.2f}% ({variant(r['params']) or 'seed 0'})"
                               for r in select(runs, lmbda=lmbda)) + "."
             for grouping, runs in penalized.items()]
    return f"Final L0-density at λ_pen = {lmbda:g}:\n\n" + "\n".join(lines)


# --- final errors: a difference, or chance? --------------------------------------------------------


def error_agreement() -> pd.DataFrame:
    """:func:`comparison.agreement` of the final errors of the three MNIST tables, one row per row."""
    return pd.concat([comparison.agreement(label) for label in TABLES], ignore_index=True)


def beyond_chance_in_words(agreement: pd.DataFrame) -> str:
    """How many rows of :func:`error_agreement` differ beyond chance, against how many chance alone puts there."""
    beyond = agreement[agreement["beyond chance"]]
    text = (f"{len(beyond)} of {len(agreement)} rows differ from the paper's by more than chance at 95%; with no "
            f"difference at all, about {len(agreement) / 20:.1f} would. ")
    if len(beyond):
        text += f"They are {report.in_words(f'{r.row} ({r.Δ:+.2f} points, {r.ours} against {r.paper})' for r in beyond.itertuples())}."
    return text


def spreads_in_words(agreement: pd.DataFrame, table1_errors: pd.DataFrame) -> str:
    """The run-to-run standard deviation of the final error behind the paper's CIs (:func:`intervals.spread_from_ci`)
    over the rows of :func:`error_agreement`, and over our seeds of each row of ``table1_errors`` (a
    :func:`comparison.compare` of Table 1's final errors) that has 5."""
    runs_by_table = {ref(label): paper_runs(label) for label in studies.TABLES}
    spreads = {row.row: intervals.spread_from_ci(comparison.split_cell(row.paper)[1], runs_by_table[row.table])
               for row in agreement.itertuples()}
    ours = [statistics.stdev(values["val_error_final"]) for values in table1_errors.attrs["values"]
            if len(values.get("val_error_final", [])) >= 5]
    return (f"Run-to-run standard deviation of the final error behind the paper's CIs: {min(spreads.values()):.3f} to "
            f"{max(spreads.values()):.3f} points over these rows ({min(spreads, key=spreads.get)} the smallest). "
            + (f"Over our 5 seeds of each of Table 1's rows that has them: {report.in_words(f'{sd:.3f}' for sd in ours)} points."
               if ours else ""))


def cell_of(params: dict) -> tuple:
    """A control-table cell: model, method, grouping, and target or λ_pen."""
    hyper = params["target"] if params["method"] == "constrained" else params["lmbda"]
    return params["model"], params["method"], params["grouping"], hyper


def seed0_beyond_chance(label: str, cell: tuple, error: float) -> bool:
    """Whether one run's final error differs from the paper's cell by more than chance (as
    :func:`comparison.agreement`)."""
    model, method, grouping, hyper = cell
    paper = paper_cell(label, model=PAPER_MODEL_NAMES[model], method=method, grouping=grouping,
                       metric="val_error_final", **{"target" if method == "constrained" else "lmbda": f"{hyper:g}"})
    chance = intervals.difference_interval(float(paper.ci), paper_runs(label), [error])
    return abs(error - paper.value_num) > chance


def seed_rows(label: str, cells: list[tuple], runs: list[dict]) -> list[dict]:
    """Per cell of a control table (:func:`cell_of`): the final error of each seed among ``runs`` and whether
    seed 0's alone differs from the paper's beyond chance."""
    rows = []
    for cell in cells:
        model, method, grouping, hyper = cell
        chosen = sorted((r for r in runs if cell_of(r["params"]) == cell), key=lambda r: r["params"]["seed"])
        errors = {f"seed {r['params']['seed']}": r["metrics"]["val_error_final"] for r in chosen}
        beyond = seed0_beyond_chance(label, cell, errors["seed 0"]) if "seed 0" in errors else None
        rows.append({"cell": f"{PAPER_MODEL_NAMES[model]} {method} {grouping} "
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


def retested_in_words(seeds: pd.DataFrame, agreement: pd.DataFrame) -> str | None:
    """Of the cells whose seed 0 was beyond chance and that now have more seeds, how many stay beyond chance
    with all of them (None when none has more seeds yet)."""
    retested = seeds[seeds["seed 0 beyond chance"] == "yes"]["cell"]
    tested = agreement.set_index("row").loc[[c for c in retested if c in set(agreement["row"])]]
    several = tested[tested["our runs"] > 1]
    if not len(several):
        return None
    still = list(several.index[several["beyond chance"]])
    return (f"With all their seeds, {len(still)} of the {len(several)} cells that have more than seed 0 remain beyond "
            f"chance" + (f": {report.in_words(still)}." if still else "; more seeds did not confirm their seed-0 differences."))


def clamped_error_in_words(clamped: dict, unclamped: list[dict]) -> str:
    """Table 1's model-wise 10% LeNet5 row: the clamped run's final error and parameters beside the unclamped
    seeds' and the paper's, and the clamped run's difference against the interval of chance."""
    paper = paper_cell("tab:mnist", model="LeNet5", method="constrained", grouping="model", metric="val_error_final")
    error = clamped["metrics"]["val_error_final"]
    errors = report.in_words(f"{r['metrics']['val_error_final']:.2f}" for r in unclamped)
    params = [r["metrics"]["params_pct"] for r in unclamped]
    paper_params = paper_row("", "lenet5", "model", 0.1, "tab:mnist")["params (%)"]
    chance = intervals.difference_interval(float(paper.ci), paper_runs("tab:mnist"), [error])
    return (f"Final error: clamped (seed 0) {error:.2f}%, with {clamped['metrics']['params_pct']:.2f}% of the "
            f"parameters; unclamped, {errors}% ({len(unclamped)} seeds), with {min(params):.2f}–{max(params):.2f}%; "
            f"the paper's {paper.value} ± {paper.ci}%, with {paper_params:.2f}%. The clamped run's difference, "
            f"{error - paper.value_num:+.2f} points, against a 95% interval of chance of ±{chance:.2f}.")


# --------------------------------------------------------------------------- #
# The sections of the pages book/results_mnist_{investigations,authors,differences}.md (report.display_all shows each)
# --------------------------------------------------------------------------- #

def table1_mlp_traces() -> list:
    """The density traces of Table 1's MLP runs at the paper's protocol."""
    runs = records_of(TABLE1_GRID, model="mlp")
    return [report.plot_density_traces(runs)] if runs else [report.no_record_line("Table 1's MLP runs", [TABLE1_GRID])]


def table1_lenet_expected_and_kept() -> list:
    """Expected and kept density of Table 1's model-wise LeNet5 runs (:func:`expected_and_kept`)."""
    runs = records_of(TABLE1_GRID, model="lenet5", grouping="model")
    return [report.show(expected_and_kept(runs)) if runs else report.no_record_line("Table 1's model-wise LeNet5 runs", [TABLE1_GRID])]


def lowest_worst_layer_lines() -> str:
    """For each seed of Table 1's layer-wise MLP row, the lowest largest layer density and its epoch."""
    return "\n".join(f"seed {run['metrics']['seed']}: {lowest:.2f}% (epoch {epoch})"
                      for run in records_of(TABLE1_GRID, model="mlp", grouping="layer")
                      for lowest, epoch in [lowest_worst_layer(run)])


def dual_lr_section() -> list:
    """The MLP's gap histories at each dual learning rate, and their table."""
    runs = records_of(TABLE1_GRID, model="mlp", seed=0) + records_of(DUAL_LR_GRID)
    return [plot_gap_histories(runs), report.show(dual_lr_table(runs))]


def initialisation_section() -> list:
    """Each control table's cells with the fan-out initialisation beside the fan-in one."""
    items = []
    for table, metrics in INITIALISATION_CELLS:
        found = initialisation_table(table, metrics)
        items += [f"**{ref(table)}**", report.show(found) if len(found) else
                  report.no_record_line("a fan-out run", FAN_OUT_GRIDS)]
    return items


def fan_out_penalized_section() -> list:
    """The penalized runs with the fan-out initialisation against the paper-protocol LeNet5 ones, in words."""
    lines = fan_out_penalized_lines(records_of(FAN_OUT_GRIDS[1], method="penalized"),
                                    records_of(LENET_PAPER_GRIDS, model="lenet5", method="penalized"))
    return ["\n".join(lines) if lines else report.no_record_line("a penalized fan-out run", FAN_OUT_GRIDS[1:])]


def authors_mlp_section() -> list:
    """The authors' MLP runs beside their twins of ours: the figure and the table."""
    theirs = authors_runs(model="mlp")
    twins = [our_twins(run) for run in theirs]
    return [plot_authors_mlp(theirs, twins), report.show(authors_mlp_table(theirs, twins)) if theirs else
            f"No run of the authors' code yet: `{authors_command('mlp', 'layer', 0.2)}`."]


def authors_lenet_section() -> list:
    """The authors' LeNet5 runs beside their twins of ours: the figure, the table and conv2 in words."""
    theirs = authors_runs(model="lenet5", grouping="model")
    twins = [our_twins(run) for run in theirs]
    fan_out = records_of(FAN_OUT_GRIDS[1], method="constrained", grouping="model")
    fan_in = records_of([TABLE1_GRID, LENET_CONTROL_GRID], model="lenet5", method="constrained", grouping="model")
    shown = ([plot_authors_lenet(theirs, twins), report.show(authors_lenet_table(theirs, twins))] if theirs else
             [f"No run of the authors' LeNet5 yet: `{authors_command('lenet5', 'model', 0.2)}`."])
    return [*shown, conv2_in_words(theirs, twins, fan_out, fan_in) or None]


def clamp_section() -> list:
    """Every clamped cell against the paper and our unclamped run, and which is closer, in a table and words."""
    clamp_table, closer = clamp_comparison()
    caption = "Distance to the paper (points), our unclamped record against the clamped one at the authors' dual learning rate"
    return [report.show(clamp_table), report.show(closer, caption=caption), clamp_in_words(closer) if len(closer) else None]


def fc1_behind_conv2_section() -> list:
    """LeNet5's layer-wise 50% cell, unclamped and clamped: fc1's inputs behind conv2's open maps, in words."""
    runs = [(label, run) for label, grid, more in (("unclamped", LENET_CONTROL_GRID, {}),
                                                   ("clamped", CLAMP_GRID, {"dual_lr": 1e-4}))
            for run in constrained_records(grid, "lenet5", "layer", 0.5, seed=0, **more)]
    return [fc1_behind_conv2_in_words(runs) if runs else report.no_record_line("LeNet5's layer-wise 50% cell", [LENET_CONTROL_GRID, CLAMP_GRID])]


def authors_penalized_in_words(theirs: dict, ours: list[dict]) -> str:
    """A run of the authors' LeNet5 with their penalty (``benchmarks/authors_training.py --lmbda``): its final
    L0-density, layer densities and error beside the paper's cell and our records of it; then whether it ends
    further from the paper's density than every run of ours with our initialisation (the gap is then no
    departure of ours from the published code), nearer than every one (part of the gap is ours) or among them;
    then our run with their fan-out initialisation, the twin of theirs: how much of the distance from our
    fan-in seed 0 to their run it closes, which is the share of the difference the initialisation explains."""
    grouping, lmbda, last = theirs["grouping"], theirs["lmbda"], theirs["history"][-1]
    layers = "-".join(f"{100 * last[f'density[{i}]']:.1f}" for i in range(len(last["kept_groups"])))
    peak = max(theirs["history"], key=lambda row: row["l0_density"])
    cell = select(ours, grouping=grouping, lmbda=lmbda)
    ours_text = report.in_words(f"{100 * r['metrics']['l0_density']:.2f}% ({variant(r['params']) or 'seed 0'})"
                                for r in cell) or "none yet"
    paper = paper_penalized_density(grouping, lmbda)
    density = 100 * last["l0_density"]
    text = (f"The authors' own LeNet5 with their penalty, {grouping}-wise λ_pen = {lmbda:g}, "
            f"{len(theirs['history'])} epochs: final L0-density {density:.2f}% (layers {layers}%), "
            f"highest {100 * peak['l0_density']:.2f}% at epoch {peak['epoch']}, final error {last['val_error']:.2f}%; "
            f"the paper's {paper:.2f}%; ours {ours_text}.")
    fan_in = [r for r in cell if r["params"].get("linear_init") != "fan_out"]
    if not fan_in:
        return text
    theirs_gap = abs(density - paper)
    our_gaps = [abs(100 * r["metrics"]["l0_density"] - paper) for r in fan_in]
    spread = f"({min(our_gaps):.1f} to {max(our_gaps):.1f})"
    if theirs_gap > max(our_gaps):
        text += (f" Their published code ends {theirs_gap:.1f} points from the paper's cell, further than any run of "
                 f"ours with our initialisation {spread}: it does not give the paper's density either, so the gap "
                 f"between our runs and the paper's is not a departure of ours from the published code.")
    elif theirs_gap < min(our_gaps):
        text += (f" Their published code ends {theirs_gap:.1f} points from the paper's cell, nearer than any run of "
                 f"ours with our initialisation {spread}: it reaches towards the paper's density where ours do not, "
                 f"so part of the gap is in our implementation.")
    else:
        text += (f" Their published code ends {theirs_gap:.1f} points from the paper's cell, within the spread of our "
                 f"runs with our initialisation {spread}.")
    return text + _fan_out_twin_in_words(density, cell)


def _fan_out_twin_in_words(theirs: float, cell: list[dict]) -> str:
    """Our fan-out seed-0 run of a penalized cell against the authors' final density ``theirs`` (%) and our
    fan-in seed 0 (told apart by :func:`variant`): the share of the distance between those two that the
    initialisation alone closes."""
    density = {variant(r["params"]): 100 * r["metrics"]["l0_density"] for r in cell}
    twin, fan_in = density.get("fan-out"), density.get("")
    if twin is None:
        return (" Their code initialises fan-out; our run of this cell with fan-out, which would tell the "
                "initialisation from the rest of the code, has no record yet (`grids/lenet5_linear_init.yaml`).")
    text = f" Our run of the cell with their fan-out initialisation, the twin of theirs, ends at {twin:.2f}%"
    if fan_in is None or fan_in == theirs:
        return text + "."
    share = (fan_in - twin) / (fan_in - theirs)
    text += (f": {abs(twin - theirs):.1f} points from theirs and {abs(twin - fan_in):.1f} from ours with fan-in "
             f"(seed 0, {fan_in:.2f}%), so the initialisation alone closes {100 * share:.0f}% of the distance between "
             f"our fan-in run and their code")
    if share > 0.5:
        return text + ": most of the difference between their code and ours is the initialisation."
    if share > 0:
        return text + ": less than half of the difference between their code and ours is the initialisation."
    return text + ": the initialisation does not explain the difference between their code and ours."


def plot_authors_penalized(theirs: dict, ours: list[dict]) -> plt.Figure:
    """Model L0-density and conv2's expected density against epochs: the authors' LeNet5 with their penalty,
    beside our records of its cell (dashed: fan-out; dotted: clamped; faint: another seed) and the paper's
    final density (circle)."""
    grouping, lmbda = theirs["grouping"], theirs["lmbda"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    history = pd.DataFrame(theirs["history"])
    for ax, column in zip(axes, ("l0_density_epoch_mean", "density[1]")):
        ax.plot(history["epoch"], 100 * history[column], color="k", lw=2.5, alpha=0.5, label="authors' code")
    for run in select(ours, grouping=grouping, lmbda=lmbda):
        p, frame = run["params"], _train_rows(run)
        for ax, column in zip(axes, ("l0_density", "density[conv2]")):
            ax.plot(frame["epoch"], 100 * frame[column], lw=1, **_variant_style(p),
                    label=f"ours, {variant(p) or 'seed 0'}")
    axes[0].plot([len(history)], [paper_penalized_density(grouping, lmbda)], marker="o", ms=7, mfc="none",
                 color="k", ls="none", label="the paper's final")
    for ax, title in zip(axes, ("model L0-density (%)", "conv2 expected density (%)")):
        ax.set(xlabel="epoch", title=title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"LeNet5 penalized, {grouping}-wise λ_pen {lmbda:g}: the authors' code and ours", fontsize=10)
    fig.tight_layout()
    return fig


def penalized_lenet_section() -> list:
    """The penalized LeNet5 runs' densities against λ_pen and the λ_pen = 0.01 cell in words."""
    penalized = {grouping: records_of(LENET_PENALIZED_GRIDS, model="lenet5", method="penalized", grouping=grouping)
                 for grouping in ("model", "layer")}
    return [plot_penalized_lenet(penalized), penalized_in_words(penalized, 0.01)]


def authors_penalized_section() -> list:
    """The authors' LeNet5 with their penalty on the layer-wise λ_pen = 0.01 cell beside our runs of it: the
    figure and the conclusion in words, or the command that runs it."""
    theirs = authors_runs(model="lenet5", method="penalized", grouping="layer", lmbda=0.01)
    if not theirs:
        return ["No run yet of the authors' LeNet5 with their penalty: `PAPERLIB_DATA=../shared/data python "
                "benchmarks/authors_training.py --model lenet5 --grouping layer --lmbda 0.01`."]
    ours = records_of(LENET_PENALIZED_GRIDS, model="lenet5", method="penalized", grouping="layer")
    return [plot_authors_penalized(theirs[0], ours), authors_penalized_in_words(theirs[0], ours)]


def seeds_section(agreement: pd.DataFrame) -> list:
    """The final error of each seed, and whether more seeds confirmed seed 0's differences beyond chance."""
    seeds = seeds_table()
    return [report.show(seeds, caption="Final error (%) of each seed"), retested_in_words(seeds, agreement)]


def clamped_error_section() -> list:
    """Table 1's model-wise 10% LeNet5 row, clamped against unclamped, in words."""
    clamped = constrained_records(CLAMP_GRID, "lenet5", "model", 0.1, seed=0, dual_lr=1e-4)
    unclamped = constrained_records(TABLE1_GRID, "lenet5", "model", 0.1)
    return [clamped_error_in_words(clamped[0], unclamped) if clamped and unclamped else
            report.no_record_line("the model-wise 10% LeNet5 runs, clamped and unclamped", [CLAMP_GRID, TABLE1_GRID])]
