"""Control of the density (§5.5, App. K; book/results_cifar10.md and the MNIST pages' control figure): does a
constraint end at its target in one run, where a penalty must be tuned? Why some runs miss: :mod:`analysis.misses`.

A smaller model trained for fewer epochs does not have the paper's errors, so the comparable quantity is a run's
error *cost*: its final error minus a dense model's at the same protocol (:func:`run_rows`); the paper prints no
dense WideResNet-28-10, so its costs are taken against its densest run (:func:`paper_reference_error`).

>>> condition({"method": "constrained", "grouping": "model", "target": 0.2, "seed": 0})
'model-wise 20%'
"""

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
import pandas as pd

from paperlib.harness import rules, studies
from paperlib.harness.index import device_kind
from paperlib.harness.paper_rows import constrained_densities, largest_gap, target_label
from paperlib.harness.plots import history_frame, plot_gate_histograms, steps_frame
from paperlib.harness.presets import resolve_config
from paperlib.harness.protocols import protocol_name, record_protocol
from paperlib.harness.rules import final_gaps
from paperlib.harness.vocabulary import METRIC_LABELS
from paperlib.paper.paper_results import paper_results

from . import style
from .report import complete_records, missing_runs, notebook_link, select  # noqa: F401 (pages: control.missing_runs)

#: The grids of the control table at the pilot protocol (``cpu`` preset, the paper's gates' learning rate of 6).
CONTROL_GRIDS = studies.grids("tab:cifar10_control", preset="cpu")
#: The grids of the control table at the CPU protocol (``cpu2``): its constrained rows, its penalized rows.
CPU_CONTROL_GRIDS = ("grids/cifar10_cpu2_control.yaml", "grids/cifar10_cpu2_penalized.yaml")
DUAL_LR_GRID, = studies.grids("cifar10_dual_lr")
ABLATION_GRID = studies.grids("tab:cifar10")[0]


# --------------------------------------------------------------------------- #
# Naming a run
# --------------------------------------------------------------------------- #

def short_layer_name(layer: str) -> str:
    """``stage2.1.conv1.conv`` -> ``s2.1``: a gated WideResNet block's column heading; other names unchanged."""
    if layer.startswith("stage") and ".conv1" in layer:
        return "s" + layer[len("stage"):layer.index(".conv1")]
    return layer


def constraint_names(record: dict) -> list[str]:
    """A constrained run's constraints in the order of its multipliers: ``model``, or each gated block's short name."""
    if record["params"]["grouping"] == "model":
        return ["model"]
    return [short_layer_name(layer) for layer in record["metrics"]["l0_density_per_layer"]]


def protocol_of(run: dict) -> str:
    """The protocol a record's parameters define; for a record without them, its preset's on CIFAR-10."""
    params = run.get("params") or {}
    if {"preset", "run_name", "dataset"} <= set(params):
        return record_protocol(params)
    try:
        return protocol_name(params.get("preset"), params.get("dataset") or "cifar10")
    except KeyError:
        return str(params.get("preset"))


def run_link(run: dict) -> str:
    """A run's name linked to its notebook; a run of a CPU protocol that trained on a GPU says so (its name
    ends ``-cpu``, naming the protocol, not the device)."""
    link = notebook_link(run["path"], run["params"]["run_name"]) or run["params"]["run_name"]
    if run["params"].get("preset") in ("cpu", "cpu2") and device_kind(run["metrics"].get("device")) == "GPU":
        link += f" ({protocol_of(run)}, ran on GPU)"
    return link


def setting(params: dict) -> str:
    """What a run was asked for, as the paper's tables print it: ``target 20%``, ``λ_pen 0.01``, ``dense``."""
    if params["method"] == "constrained":
        target = params["target"]
        if isinstance(target, list):
            return "targets " + "/".join(f"{100 * t:g}" for t in target) + "%"
        return f"target {100 * target:g}%"
    if params["method"] == "penalized":
        return f"λ_pen {params['lmbda']:g}"
    return params["method"]


def condition(params: dict, seed: bool = False) -> str:
    """A run named by its condition, as the page's rows name it (with its seed if ``seed``).

    >>> condition({"method": "penalized", "grouping": "layer", "lmbda": 0.1, "seed": 1}, seed=True)
    'layer-wise λ_pen 0.1, seed 1'
    """
    if params["method"] == "dense":
        text = "dense"
    elif params["method"] == "constrained":
        text = f"{params['grouping']}-wise {target_label(params['target'])}"
    else:
        text = f"{params['grouping']}-wise λ_pen {params['lmbda']:g}"
    return text + (f", seed {params['seed']}" if seed else "")


def condition_link(run: dict, seed: bool = False) -> str:
    text = condition(run["params"], seed)
    return notebook_link(run["path"], text) or text


# --------------------------------------------------------------------------- #
# The control table
# --------------------------------------------------------------------------- #

#: The columns of :func:`run_rows`.
RUN_COLUMNS = ["run", "condition", "method", "grouping", "setting", "target", "lmbda", "seed", "L0-density (%)",
               "largest gap (points)", "outcome", "over target (points)", "params (%)", "MACs (%)",
               "val. error final (%)", "cost (points)", "epochs", "ran on"]
#: The columns the page shows, and their short names.
TABLE_COLUMNS = {"condition": "run", "L0-density (%)": "density (%)", "largest gap (points)": "gap (pts)",
                 "outcome": "outcome", "MACs (%)": "MACs (%)",
                 "val. error final (%)": "error (%)", "cost (points)": "cost (pts)", "ran on": "ran on"}


def run_rows(runs: list[dict], dense: dict | None, free: list[dict] | None = None) -> pd.DataFrame:
    """One row per run: setting, final densities and counts, error and its cost against ``dense`` (None without).
    A constrained run's largest gap, its outcome by the book's rule (judged against the free-gates records
    ``free``, by default :func:`paperlib.harness.rules.free_gates_records`) and how far it ends over a target."""
    dense_error = dense["metrics"]["val_error_final"] if dense else None
    if free is None and any(run["params"]["method"] == "constrained" for run in runs):
        free = rules.free_gates_records()
    rows = []
    for run in runs:
        p, m = run["params"], run["metrics"]
        gap = largest_gap(run) if p["method"] == "constrained" else None
        rows.append({
            "run": run_link(run), "condition": condition_link(run, seed=p["seed"] != 0),
            "method": p["method"], "grouping": p["grouping"] if p["method"] != "dense" else None,
            "setting": setting(p), "target": p["target"], "lmbda": p["lmbda"], "seed": p["seed"],
            "L0-density (%)": 100 * m["l0_density"] if m["l0_density"] is not None else 100.0,
            "largest gap (points)": gap,
            "outcome": None if gap is None else rules.judge_record(run, free).outcome.value,
            "over target (points)": max(0.0, *final_gaps(run)) if gap is not None else None,
            "params (%)": m["params_pct"], "MACs (%)": m["macs_pct"], "val. error final (%)": m["val_error_final"],
            "cost (points)": None if dense_error is None else m["val_error_final"] - dense_error,
            "epochs": m["epochs_completed"], "ran on": device_kind(m.get("device")),
        })
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def control_table(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[list(TABLE_COLUMNS)].rename(columns=TABLE_COLUMNS)


def layer_rows(runs: list[dict]) -> pd.DataFrame:
    """The final expected density (%) of every gated layer of each layer-wise run, beside its setting."""
    rows = []
    for run in runs:
        p = run["params"]
        if p["grouping"] != "layer" or p["method"] == "dense":
            continue
        row = {"run": condition_link(run, seed=p["seed"] != 0), "setting": setting(p), "seed": p["seed"]}
        row.update({short_layer_name(layer): 100 * density
                    for layer, density in run["metrics"]["l0_density_per_layer"].items()})
        if p["method"] == "constrained":
            row["largest gap (points)"] = largest_gap(run)
        rows.append(row)
    return pd.DataFrame(rows)


def outcome_numbers(rows: pd.DataFrame) -> dict:
    """The page's answer from :func:`run_rows`: the constrained runs per outcome (``judged``: those whose targets
    bind), the furthest under and over a target, the penalized densities' range and each method's costs' range.

    >>> outcome_numbers(pd.DataFrame(columns=RUN_COLUMNS))["judged"]
    0
    """
    constrained = rows[rows["method"] == "constrained"]
    numbers = {outcome.value: int((constrained["outcome"] == outcome.value).sum()) for outcome in rules.Outcome}
    numbers["judged"] = len(constrained) - numbers[rules.Outcome.DOES_NOT_BIND.value]
    for name, outcome, column, pick in (("under", rules.Outcome.UNDER, "largest gap (points)", "idxmin"),
                                        ("over", rules.Outcome.VIOLATED, "over target (points)", "idxmax")):
        missed = constrained[constrained["outcome"] == outcome.value]
        if len(missed):
            worst = missed.loc[getattr(missed[column], pick)()]
            numbers.update({f"{name} gap": float(worst[column]), f"{name} run": condition(worst)})
    penalized = rows.loc[rows["method"] == "penalized", "L0-density (%)"]
    if len(penalized):
        numbers.update({"penalized lowest": float(penalized.min()), "penalized highest": float(penalized.max())})
    for method in ("constrained", "penalized"):
        costs = rows.loc[rows["method"] == method, "cost (points)"].dropna()
        if len(costs):
            numbers.update({f"{method} cost lowest": float(costs.min()), f"{method} cost highest": float(costs.max())})
    return numbers


def table_order(run: dict) -> tuple:
    """Table 13's order: the dense run (the costs' reference), then layer-wise before model-wise, constrained by
    rising target before penalized by falling λ_pen, seeds in order."""
    m = run["params"]
    if m["method"] == "dense":
        return (0, 0, 0, 0, m["seed"])
    value = m["target"] if m["method"] == "constrained" else -m["lmbda"]
    return (1, ("layer", "model").index(m["grouping"]), ("constrained", "penalized").index(m["method"]), value,
            m["seed"])


def table_runs(grids, method: str | None = None, seed: int | None = None) -> list[dict]:
    """The complete records of ``grids`` (of ``method`` and ``seed`` only, if given), in :func:`table_order`."""
    return sorted((run for grid in grids for run in complete_records(grid)
                   if method in (None, run["params"]["method"]) and seed in (None, run["params"]["seed"])),
                  key=table_order)


def control_runs() -> list[dict]:
    """The control table's records at the pilot protocol (:data:`CONTROL_GRIDS`)."""
    return table_runs(CONTROL_GRIDS)


def cpu_control_runs() -> list[dict]:
    """The control table's records at the CPU protocol, with the pilot's dense run (a dense model has no gates:
    both protocols' dense runs would be one)."""
    return sorted([*table_runs(CONTROL_GRIDS, "dense"), *table_runs(CPU_CONTROL_GRIDS)], key=table_order)


def dense_run(runs: list[dict]) -> dict | None:
    return next((run for run in runs if run["params"]["method"] == "dense"), None)


def densest_run(runs: list[dict]) -> dict | None:
    """The run of highest final L0-density: the cost reference of a table without a dense run."""
    return max(runs, key=lambda run: run["metrics"]["l0_density"] or 1.0, default=None)


# --------------------------------------------------------------------------- #
# Ours beside the paper's
# --------------------------------------------------------------------------- #

#: The paper's metrics a control figure plots, and their labels.
POINT_METRICS = {metric: METRIC_LABELS[metric]
                 for metric in ("l0_density", "params_pct", "macs_pct", "val_error_final")}


def paper_points(table: str) -> pd.DataFrame:
    """The paper's rows of a control table: method, grouping, target or λ_pen, :data:`POINT_METRICS`, and the
    ``status`` of a row the paper reports as failed (a collapse; its metrics NaN)."""
    cells = paper_results()
    cells = cells[(cells["table"] == table) & cells["metric"].isin([*POINT_METRICS, "status"])]
    rows = {}
    for _, cell in cells.iterrows():
        key = (cell["method"], cell["grouping"], cell["target"], cell["lmbda"])
        row = rows.setdefault(key, {"method": cell["method"], "grouping": cell["grouping"],
                                    "target": float(cell["target"]) if cell["target"] else None,
                                    "lmbda": float(cell["lmbda"]) if cell["lmbda"] else None,
                                    **dict.fromkeys(POINT_METRICS.values(), math.nan), "status": None})
        if cell["metric"] == "status":
            row["status"] = cell["value"]
        else:
            row[POINT_METRICS[cell["metric"]]] = cell["value_num"]
    return pd.DataFrame(list(rows.values()))


def paper_reference_error(points: pd.DataFrame) -> tuple[float, str]:
    """The final error of the paper's densest run of a control table, and its setting."""
    densest = points.loc[points["L0-density (%)"].idxmax()]
    return densest["val. error final (%)"], f"{densest['method']}, {densest['grouping']}-wise, {setting(densest)}"


def plot_comparison(ours: pd.DataFrame, paper: pd.DataFrame, title: str = "", ours_label: str = "ours",
                    paper_label: str = "paper") -> plt.Figure:
    """The control figure: L0-density and MACs against the target (top, constrained) and λ_pen (bottom,
    penalized), and each run's error cost against its density (right), ours and the paper's in the book's
    styles (:mod:`analysis.style`), model-wise and layer-wise by marker shape."""
    reference, _ = paper_reference_error(paper)
    paper = paper.assign(**{"cost (points)": paper["val. error final (%)"] - reference})
    fig, axes = plt.subplots(2, 3, figsize=(7, 4.8))
    columns = (("L0-density (%)", "L0-density (%)"), ("MACs (%)", "MACs (%)"), ("cost (points)", "error cost (pts)"))
    for row, (method, x_key, x_label) in enumerate((("constrained", "target", "target (%)"),
                                                    ("penalized", "lmbda", "λ_pen"))):
        for col, (metric, label) in enumerate(columns):
            ax = axes[row, col]
            for (source, frame), name in zip((("ours", ours), ("paper", paper)), (ours_label, paper_label)):
                for grouping in ("model", "layer"):
                    chosen = frame[(frame["method"] == method) & (frame["grouping"] == grouping)].dropna(
                        subset=[metric])
                    if chosen.empty:
                        continue
                    if metric == "cost (points)":
                        x = chosen["L0-density (%)"]
                    else:
                        x = 100 * chosen[x_key] if method == "constrained" else chosen[x_key]
                    ax.scatter(x, chosen[metric], s=30, label=f"{name}, {method}, {grouping}-wise",
                               **style.scatter(source, grouping))
            if metric == "cost (points)":
                ax.axhline(0, ls=":", color="0.4", lw=0.8)
                ax.set(xlabel="L0-density (%)", xlim=(0, 100))
            elif method == "constrained":
                ax.plot([0, 100], [0, 100], ls="-", lw=0.8, color="0.7", zorder=0)
                ax.set(xlim=(0, 100), ylim=(0, 105), xlabel=x_label)
            else:
                ax.set(xscale="log", ylim=(0, 105), xlabel=x_label)
            ax.set_title(f"{method}: {label}", fontsize=9)
            ax.tick_params(labelsize=9)
            ax.xaxis.label.set_size(9)
            ax.grid(alpha=0.3)
    handles = [style.handle(source, f"{name}, {grouping}-wise", grouping)
               for source, name in (("ours", ours_label), ("paper", paper_label)) for grouping in ("model", "layer")]
    if title:
        fig.suptitle(title, fontsize=10)
    style.legend_below(fig, handles, bottom=0.1)
    return fig


def penalty_table(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """The penalized runs' final L0-density (%) by λ_pen and grouping, ours beside the paper's."""
    table = {}
    for source, frame in (("ours", rows), ("paper", paper)):
        for _, row in frame[frame["method"] == "penalized"].iterrows():
            table.setdefault(f"{row['grouping']}-wise, {source}", {})[row["lmbda"]] = row["L0-density (%)"]
    columns = [f"{g}-wise, {s}" for g in ("model", "layer") for s in ("ours", "paper") if f"{g}-wise, {s}" in table]
    frame = pd.DataFrame(table)[columns].sort_index()
    frame.index = [f"{lmbda:g}" for lmbda in frame.index]
    return frame.rename_axis("λ_pen")


def transfer_rows(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Each of our runs at a setting the paper also ran (its collapsed rows left out): both final densities and
    ours minus the paper's."""
    def key(row) -> tuple:
        value = row["target"] if row["method"] == "constrained" else row["lmbda"]
        return row["method"], row["grouping"], round(float(value), 10)

    theirs = {key(row): row["L0-density (%)"] for _, row in paper.iterrows() if not math.isnan(row["L0-density (%)"])}
    found = [{"method": row["method"], "grouping": row["grouping"], "setting": row["setting"],
              "ours (%)": row["L0-density (%)"], "paper (%)": theirs[key(row)]}
             for _, row in rows[rows["method"].isin(["constrained", "penalized"])].iterrows() if key(row) in theirs]
    table = pd.DataFrame(found, columns=["method", "grouping", "setting", "ours (%)", "paper (%)"])
    return table.assign(**{"ours − paper (points)": table["ours (%)"] - table["paper (%)"]})


#: The fewest penalized cells on which :func:`transfer_summary` says whether a setting carries over.
TRANSFER_CELLS = 3


def transfer_summary(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Whether a setting means the same density on the paper's model and ours, by method: the cells both ran
    (:func:`transfer_rows`), the median and range of ours minus the paper's, and ``carries over`` (✓ for targets,
    ✗ for λ_pen once :data:`TRANSFER_CELLS` penalized cells put the penalized median over
    :data:`~paperlib.harness.rules.AGREE_POINTS` and three times the constrained one; "–" otherwise)."""
    table = transfer_rows(rows, paper)
    summary = {}
    for method in ("constrained", "penalized"):
        differences = table.loc[table["method"] == method, "ours − paper (points)"]
        if len(differences):
            summary[method] = {"cells": len(differences), "median |ours − paper| (pts)": differences.abs().median(),
                               "lowest (pts)": differences.min(), "highest (pts)": differences.max()}
    frame = pd.DataFrame.from_dict(summary, orient="index")
    medians = frame.get("median |ours − paper| (pts)", pd.Series(dtype=float))
    decided = ("penalized" in frame.index and "constrained" in frame.index
               and frame.loc["penalized", "cells"] >= TRANSFER_CELLS
               and medians["penalized"] > max(rules.AGREE_POINTS, 3 * medians["constrained"]))
    if len(frame):
        frame["carries over"] = [("✓" if method == "constrained" else "✗") if decided else "–"
                                 for method in frame.index]
    return frame


# --------------------------------------------------------------------------- #
# Dynamics: violations over training (Figure 3, the dual learning rate)
# --------------------------------------------------------------------------- #

def step_gaps(record: dict) -> pd.DataFrame:
    """Each constraint's expected density minus its target (points; column ``i`` for constraint ``i``) at every
    logged step, indexed by the step's epoch."""
    steps = steps_frame(record)
    targets = [target for _, target in constrained_densities(record, record["history"][-1])]
    return pd.DataFrame({i: 100 * (steps[f"constrained_density_{i}"] - target)
                         for i, target in enumerate(targets)}).set_axis(steps["epoch"])


def violations(record: dict) -> pd.Series:
    """The largest violation over a run's constraints at each logged step (points; negative: all hold)."""
    return step_gaps(record).max(axis=1)


def epoch_violations(record: dict) -> pd.Series:
    """The largest violation over a run's constraints at each training epoch's end (points), by epoch."""
    rows = [row for row in record["history"] if row["phase"] == "train"]
    return pd.Series([max(100 * (d - t) for d, t in constrained_densities(record, row)) for row in rows],
                     index=[int(row["epoch"]) for row in rows], dtype=float)


def settling_epoch(record: dict) -> float | None:
    """The epoch from which every constraint stays feasible (:func:`paperlib.harness.rules.feasible`) at every
    logged step to the end (0.0: always), or None if the last logged step violates one."""
    late = violations(record)
    over = [epoch for epoch, violation in late.items() if not rules.feasible([violation])]
    if not over:
        return 0.0
    after = late.index[late.index > over[-1]]
    return float(after[0]) if len(after) else None


def stability_rows(runs: list[dict]) -> pd.DataFrame:
    """Figure 3's question for seed 0's constrained runs: the epoch every constraint first held, the epoch from
    which it stays feasible (:func:`settling_epoch`) and its share of training, the largest violation between the
    two (the oscillation before settling) and the largest over the second half."""
    rows = []
    for run in runs:
        if (run["params"]["method"], run["params"]["seed"]) != ("constrained", 0):
            continue
        late, settled = violations(run), settling_epoch(run)
        held = late.index[late <= rules.FEASIBLE_POINTS]
        between = late[(late.index > held[0]) & (late.index < (settled if settled is not None else math.inf))] \
            if len(held) else late.iloc[:0]
        epochs = run["metrics"]["epochs_completed"]
        rows.append({"run": condition_link(run), "setting": condition(run["params"]),
                     "first held (epoch)": float(held[0]) if len(held) else None, "settled from epoch": settled,
                     "share of training (%)": None if settled is None else 100 * settled / epochs,
                     "largest violation between (points)": between.max() if len(between) else None,
                     "largest violation, 2nd half (points)": late[late.index >= epochs / 2].max()})
    return pd.DataFrame(rows, columns=["run", "setting", "first held (epoch)", "settled from epoch",
                                       "share of training (%)", "largest violation between (points)",
                                       "largest violation, 2nd half (points)"])


def stability_numbers(rows: pd.DataFrame) -> dict:
    """The Figure 3 section's numbers from :func:`stability_rows`: runs settled, the latest settling epoch (its
    share and run) and the median, the largest violation before settling; the unsettled runs and their violation."""
    settled = rows.dropna(subset=["settled from epoch"])
    numbers = {"settled": len(settled), "runs": len(rows), "unsettled": len(rows) - len(settled)}
    if len(settled):
        latest = settled.loc[settled["settled from epoch"].idxmax()]
        numbers.update({"latest": float(latest["settled from epoch"]),
                        "latest share": float(latest["share of training (%)"]), "latest run": latest["setting"],
                        "median": float(settled["settled from epoch"].median()),
                        "between": float(settled["largest violation between (points)"].max())})
    unsettled = rows[rows["settled from epoch"].isna()]
    if len(unsettled):
        numbers.update({"unsettled runs": ", ".join(unsettled["setting"]),
                        "unsettled violation": float(unsettled["largest violation, 2nd half (points)"].max())})
    return numbers


def plot_stability(runs: list[dict]) -> plt.Figure:
    """Figure 3 at our protocol: the model's density in seed 0's model-wise constrained runs (left) and the last
    gated block's in the layer-wise ones (right) against epochs, one colour per target; targets dashed."""
    constrained = select(runs, method="constrained", seed=0)
    colours = {target: f"C{i}" for i, target in enumerate(sorted({run["params"]["target"] for run in constrained}))}
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.9), sharey=True)
    for ax, grouping in zip(axes, ("model", "layer")):
        chosen = select(constrained, grouping=grouping)
        for run in chosen:
            steps, last, target = steps_frame(run), len(constraint_names(run)) - 1, run["params"]["target"]
            ax.plot(steps["epoch"], 100 * steps[f"constrained_density_{last}"], color=colours[target], lw=1)
            ax.axhline(100 * target, color=colours[target], ls="--", lw=0.8)
        name = f"block {constraint_names(chosen[0])[-1]} (last gated)" if grouping == "layer" and chosen else (
            "the model" if grouping == "model" else "the last gated block")
        ax.set(xlabel="epoch", ylim=(0, 100))
        ax.set_title(f"{grouping}-wise: {name}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set(ylabel="expected L0-density (%)")
    handles = [Line2D([], [], color=colour, label=target_label(target)) for target, colour in colours.items()]
    if handles:
        fig.legend(handles=handles, title="target (dashed)", loc="center right", fontsize=9, title_fontsize=9,
                   frameon=False)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return fig


def layer_runs_at(runs: list[dict], target: float = 0.2) -> list[dict]:
    """Seed 0's layer-wise constrained runs at ``target`` among ``runs`` and :data:`DUAL_LR_GRID`, by dual lr."""
    found = select([*runs, *complete_records(DUAL_LR_GRID)], method="constrained", grouping="layer", target=target,
                   seed=0)
    return sorted(found, key=lambda run: run["params"]["dual_lr"])


def preset_run(runs: list[dict]) -> dict | None:
    """The run trained at its preset's dual learning rate (the control table's own)."""
    return next((run for run in runs if run["params"]["experiment"] == "cifar10_control"), None)


def dual_lr_rows(runs: list[dict]) -> pd.DataFrame:
    """Constrained runs that differ in their dual learning rate: the first epoch at whose end every constraint
    held, the largest violation at an epoch's end after it, the final largest gap and the final error."""
    rows = []
    for run in sorted(runs, key=lambda r: r["params"]["dual_lr"]):
        by_epoch = epoch_violations(run)
        held = by_epoch.index[by_epoch.map(lambda v: rules.feasible([v])).astype(bool)]
        later = by_epoch[by_epoch.index > held[0]] if len(held) else by_epoch.iloc[:0]
        name = f"dual lr {run['params']['dual_lr']:g}"
        rows.append({"run": notebook_link(run["path"], name) or condition(run["params"]),
                     "dual lr": f"{run['params']['dual_lr']:g}", "first feasible epoch": held[0] if len(held) else None,
                     "largest violation after it (points)": later.max() if len(later) else None,
                     "final largest gap (points)": largest_gap(run),
                     "val. error final (%)": run["metrics"]["val_error_final"],
                     "epochs": run["metrics"]["epochs_completed"]})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["first feasible epoch"] = frame["first feasible epoch"].astype("Int64")  # an epoch, or none
    return frame


def plot_layer_traces(runs: list[dict]) -> plt.Figure:
    """Each gated layer's expected density (top, targets dashed) and multiplier (bottom) against epochs, one
    column per layer-wise run."""
    fig, axes = plt.subplots(2, len(runs), figsize=(min(7, 2.4 * len(runs)), 4.6), sharex=True, sharey="row",
                             squeeze=False)
    for column, run in enumerate(runs):
        frame = history_frame(run)
        for index, layer in enumerate(run["metrics"]["l0_density_per_layer"]):
            axes[0, column].plot(frame["epoch"], 100 * frame[f"density[{layer}]"], lw=1.2,
                                 label=short_layer_name(layer))
            if f"lambda_{index}" in frame:
                axes[1, column].plot(frame["epoch"], frame[f"lambda_{index}"], lw=1.2)
        for target in {t for _, t in constrained_densities(run, run["history"][-1])}:
            axes[0, column].axhline(100 * target, ls="--", color="k", lw=0.8)
        axes[0, column].set(ylim=(0, 100))
        axes[0, column].set_title(f"dual lr {run['params']['dual_lr']:g}", fontsize=9)
        axes[1, column].set(xlabel="epoch")
        for ax in axes[:, column]:
            ax.grid(alpha=0.3)
    axes[0, 0].set(ylabel="L0-density (%)")
    axes[1, 0].set(ylabel="multiplier λ")
    axes[0, -1].legend(fontsize=9, ncol=2, loc="upper right", title="block", title_fontsize=9)
    fig.tight_layout()
    return fig


def plot_dense_curve(dense: dict) -> plt.Figure:
    """The dense model's test error against epochs: where the schedule ends it."""
    fig, ax = plt.subplots(figsize=(6, 3))
    history = history_frame(dense)
    ax.plot(history["epoch"], history["val_error"], marker=".")
    ax.set(xlabel="epoch", ylabel="test error (%)", ylim=(0, None),
           title=f"dense {dense['params']['model']}, {protocol_of(dense)}")
    ax.grid(alpha=0.3)
    return fig


# --------------------------------------------------------------------------- #
# App. H's ablation (Table 12, Figures 7-8)
# --------------------------------------------------------------------------- #

def plot_gates_lr_histograms(ablation: list[dict], lmbda: float = 0.001) -> list[plt.Figure]:
    """Figure 7 at our protocol: the first gated layer's medians of the penalized ablation runs at ``lmbda``."""
    figures = []
    for run in select(ablation, method="penalized", lmbda=lmbda):
        fig = plot_gate_histograms(run, width=7)
        fig.suptitle(f"gates' learning rate {run['params']['gates_lr']:g}", y=1.05)
        figures.append(fig)
    return figures


def detach_pairs(ablation: list[dict], runs: list[dict]) -> list[dict]:
    """Figure 8 at our protocol: the ablation runs without Eq. 13's stop-gradient, then seed 0's model-wise
    constrained runs at their targets, with it."""
    undetached = [run for run in ablation if not run["params"]["detach_gates"]]
    targets = {run["params"]["target"] for run in undetached}
    detached = [run for run in select(runs, method="constrained", grouping="model", seed=0)
                if run["params"]["target"] in targets]
    return undetached + detached


def ablation_checks(ablation: list[dict], runs: list[dict]) -> list[tuple[str, bool]]:
    """App. H's two findings as (what was checked, whether it held): for each pair of runs that differ only in
    the gates' learning rate, the test-time model at 6 keeps more than
    :data:`~paperlib.harness.rules.EFFECT_POINTS` fewer of its parameters than at 0.1; each model-wise run without
    the stop-gradient ends more than that further under its target than its twin with it (:func:`detach_pairs`)."""
    checks, by_lr = [], {}
    for run in ablation:
        params = run["params"]
        if params["detach_gates"]:
            value = (f"λ_pen {params['lmbda']:g}" if params["method"] == "penalized"
                     else f"target {target_label(params['target'])}")
            by_lr.setdefault(f"{params['method']}, {params['grouping']}-wise {value}", {})[params["gates_lr"]] = \
                run["metrics"]["params_pct"]
    for name, kept in by_lr.items():
        if {0.1, 6.0} <= set(kept):
            checks.append((f"{name}: parameters kept {kept[0.1]:.2f}% at gates lr 0.1, {kept[6.0]:.2f}% at 6",
                           kept[6.0] < kept[0.1] - rules.EFFECT_POINTS))
    pairs = detach_pairs(ablation, runs)
    for undetached in (run for run in pairs if not run["params"]["detach_gates"]):
        target = undetached["params"]["target"]
        twin = next((run for run in pairs if run["params"]["detach_gates"] and run["params"]["target"] == target),
                    None)
        if twin is not None:
            without, with_ = (100 * (r["metrics"]["l0_density"] - target) for r in (undetached, twin))
            checks.append((f"model-wise target {100 * target:g}%: {without:+.2f} points without the stop-gradient, "
                           f"{with_:+.2f} with it", without < with_ - rules.EFFECT_POINTS))
    return checks


# --------------------------------------------------------------------------- #
# Protocols, devices and time
# --------------------------------------------------------------------------- #

#: The hyper-parameters a protocol table compares, in the order a reader checks them, and how it names them.
PROTOCOL_FIELDS = ("model", "epochs", "batch_size", "optimizer", "lr", "lr_milestones", "lr_gamma", "weight_decay",
                   "gates_optimizer", "gates_lr", "dual_lr", "dual_restarts", "rho_init", "clamp_log_alpha")
PROTOCOL_LABELS = {"batch_size": "batch size", "lr": "learning rate", "lr_milestones": "lr milestones (epochs)",
                   "lr_gamma": "lr decay at a milestone", "weight_decay": "weight decay",
                   "gates_optimizer": "gates' optimiser", "gates_lr": "gates' learning rate",
                   "dual_lr": "dual learning rate", "dual_restarts": "dual restarts", "rho_init": "ρ_init",
                   "clamp_log_alpha": "log α clamped"}
#: The presets whose protocols :func:`protocol_table` sets side by side, per dataset (the paper's first).
TABLE_PRESETS = {"cifar10": ("paper", "cpu2", "gpu", "cpu")}


def protocol_table(dataset: str, presets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """A dataset's protocols side by side (their values from :mod:`paperlib.harness.presets`), with the
    protocols whose value differs from the paper's."""
    presets = presets or TABLE_PRESETS.get(dataset, ("paper", "cpu"))
    configs = {protocol_name(preset, dataset): resolve_config(dataset=dataset, preset=preset, target=0.5)
               for preset in presets}
    paper = configs[protocol_name("paper")]

    def shown(value) -> str:
        return ("yes" if value else "no") if isinstance(value, bool) else str(value)

    return pd.DataFrame([{"parameter": PROTOCOL_LABELS.get(name, name),
                          **{label: shown(getattr(config, name)) for label, config in configs.items()},
                          "differs from the paper's": ", ".join(label.removesuffix(" protocol")
                                                                for label, config in configs.items()
                                                                if getattr(config, name) != getattr(paper, name))}
                         for name in PROTOCOL_FIELDS])


def epoch_times(runs: list[dict]) -> pd.DataFrame:
    """Training time by protocol (and model) and device: runs, the median and range of minutes per epoch
    (``wall_time_s`` over epochs, evaluation included) and the median minutes per run."""
    frame = pd.DataFrame([{"protocol": f"{protocol_of(r)}, {r['params']['model']}",
                           "ran on": device_kind(r["metrics"].get("device")),
                           "epochs": r["metrics"]["epochs_completed"],
                           "minutes": r["metrics"]["wall_time_s"] / r["metrics"]["epochs_completed"] / 60}
                          for r in runs])
    if frame.empty:
        return pd.DataFrame(columns=["protocol", "ran on", "runs", "min/epoch", "range", "min/run"])
    return pd.DataFrame([{"protocol": protocol, "ran on": device, "runs": len(group),
                          "min/epoch": group["minutes"].median(),
                          "range": f"{group['minutes'].min():.1f}–{group['minutes'].max():.1f}",
                          "min/run": (group["minutes"] * group["epochs"]).median()}
                         for (protocol, device), group in frame.groupby(["protocol", "ran on"], sort=True)])
