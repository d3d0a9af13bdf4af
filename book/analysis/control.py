"""Control of the density: does a constraint end at its target in one run, where a penalty must be tuned?

The paper's headline claim (§5.5; the control tables and the comparison figure of
App. K): a constrained run ends at the density it was asked for, model-wise or on
every layer, while the density a penalized run reaches depends on lambda_pen in a
way that cannot be known before training. This module turns a control table's
records into the page's answer (book/results_cifar10.md): one row per run
(:func:`run_rows`), the per-layer densities of layer-wise runs
(:func:`layer_rows`), the paper's points (:func:`paper_points`), the figure
(:func:`plot_comparison`) and the findings in words (:func:`findings`; each run judged by
:func:`paperlib.harness.rules.judge_record`), with
whether a target or a lambda_pen means the same density on the paper's model
and ours (:func:`transfer_in_words`), and whether the constraint dynamics settle
(§5.4, Figure 3; :func:`stability_rows`). Why some runs miss is
:mod:`analysis.misses`.

Errors of a smaller model trained for fewer epochs are not the paper's, so the
comparable quantity is each run's error *cost*: its final error minus the final
error of a dense model trained at the same protocol (:func:`run_rows`). The
paper prints no dense WideResNet-28-10; its cost is taken against its own
densest run of the table (:func:`paper_reference_error`).
"""

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
import pandas as pd

from paperlib.harness import rules, studies
from paperlib.harness.paper_rows import constrained_densities, largest_gap, target_label
from paperlib.paper.paper_results import paper_results
from paperlib.harness.plots import plot_gate_histograms
from .report import (complete_records, count_of, in_words, no_record_line, notebook_link, plot_density_traces,
                     show)
from paperlib.harness.vocabulary import METRIC_LABELS

def short_layer_name(layer: str) -> str:
    """``stage2.1.conv1.conv`` -> ``s2.1``: a gated WideResNet block's column heading; other names unchanged."""
    if layer.startswith("stage") and ".conv1" in layer:
        return "s" + layer[len("stage"):layer.index(".conv1")]
    return layer


def run_link(run: dict) -> str:
    """A run's name, linked to its executed notebook where it has one, and where a run of the CPU protocol
    trained on a GPU, said beside it (its name, which ends ``-cpu``, names the protocol, not the device)."""
    link = notebook_link(run["path"], run["metrics"]["run_name"]) or run["metrics"]["run_name"]
    if run["metrics"].get("preset") == "cpu" and ran_on(run["metrics"]) == "GPU":
        link += " (CPU protocol, ran on GPU)"
    return link


def setting(metrics: dict) -> str:
    """What a run was asked for, as the paper's tables print it: ``target 20%``, ``λ_pen 0.01``, ``dense``."""
    if metrics["method"] == "constrained":
        return f"target {100 * metrics['target']:g}%"
    if metrics["method"] == "penalized":
        return f"λ_pen {metrics['lmbda']:g}"
    return metrics["method"]


#: The columns of :func:`run_rows`.
RUN_COLUMNS = ["run", "method", "grouping", "setting", "target", "lmbda", "seed", "L0-density (%)",
               "largest gap (points)", "outcome", "over target (points)", "params (%)", "MACs (%)",
               "val. error final (%)", "cost (points)", "epochs", "ran on"]


def ran_on(metrics: dict) -> str:
    """Where a run trained: ``GPU`` for a CUDA device, else ``CPU`` (records without a device are CPU runs)."""
    return "GPU" if str(metrics.get("device", "cpu")).startswith("cuda") else "CPU"


def run_rows(runs: list[dict], dense: dict | None, free: list[dict] | None = None) -> pd.DataFrame:
    """One row per run: its setting, final densities and counts, final error, and error cost.

    ``largest gap``, ``outcome`` and ``over target`` (the largest final gap above a target, 0 if none) are for
    constrained runs (:func:`largest_gap`; the outcome's value, :func:`paperlib.harness.rules.judge_record` with the
    free-gates records ``free``, by default :func:`paperlib.harness.rules.free_gates_records`); ``cost`` is the run's
    final error minus the ``dense`` run's (None without one); ``ran on`` is :func:`ran_on`.
    """
    dense_error = dense["metrics"]["val_error_final"] if dense else None
    if free is None and any(run["metrics"]["method"] == "constrained" for run in runs):
        free = rules.free_gates_records()
    rows = []
    for run in runs:
        m = run["metrics"]
        gap = largest_gap(run) if m["method"] == "constrained" else None
        rows.append({
            "run": run_link(run),
            "method": m["method"], "grouping": m["grouping"] if m["method"] != "dense" else None,
            "setting": setting(m), "target": m["target"], "lmbda": m["lmbda"], "seed": m["seed"],
            "L0-density (%)": 100 * m["l0_density"] if m["l0_density"] is not None else 100.0,
            "largest gap (points)": gap,
            "outcome": None if gap is None else rules.judge_record(run, free).outcome.value,
            "over target (points)": max(0.0, *final_gaps(run)) if gap is not None else None,
            "params (%)": m["params_pct"], "MACs (%)": m["macs_pct"],
            "val. error final (%)": m["val_error_final"],
            "cost (points)": None if dense_error is None else m["val_error_final"] - dense_error,
            "epochs": m["epochs_completed"], "ran on": ran_on(m),
        })
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def devices_in_words(runs: list[dict]) -> str:
    """How the seeds of each constrained setting that was trained on both devices ended, CPU first: the
    nearest check of whether a GPU run differs from a CPU run of the same protocol more than a seed does."""
    settings: dict[tuple, dict[str, list[dict]]] = {}
    for run in runs:
        m = run["metrics"]
        if m["method"] == "constrained":
            target = tuple(m["target"]) if isinstance(m["target"], list) else m["target"]  # per-layer targets
            settings.setdefault((m["grouping"], target), {}).setdefault(ran_on(m), []).append(m)

    def ends(device: str, seeds: list[dict]) -> str:
        seeds = sorted(seeds, key=lambda m: m["seed"])
        numbers = ", ".join(f"{100 * m['l0_density']:.2f}% ({m['val_error_final']:.2f}% error)" for m in seeds)
        return f"{device} seed{'s' if len(seeds) > 1 else ''} {in_words(m['seed'] for m in seeds)} at {numbers}"

    parts = [f"{grouping}-wise {target_label(list(target) if isinstance(target, tuple) else target)}: "
             + " and ".join(ends(device, seeds) for device, seeds in sorted(by_device.items()))
             for (grouping, target), by_device in sorted(settings.items(), key=lambda item: str(item[0]))
             if len(by_device) > 1]
    if not parts:
        return "No constrained setting has been trained on both the CPU and a GPU yet."
    return "Seeds of one setting on the two devices, final density (final error): " + "; ".join(parts) + "."


def layer_rows(runs: list[dict]) -> pd.DataFrame:
    """The final expected density of every gated layer of each layer-wise run (%), beside its setting."""
    rows = []
    for run in runs:
        m = run["metrics"]
        if m["grouping"] != "layer" or m["method"] == "dense":
            continue
        row = {"run": run_link(run), "setting": setting(m),
               "seed": m["seed"]}
        row.update({short_layer_name(layer): 100 * density for layer, density in m["l0_density_per_layer"].items()})
        if m["method"] == "constrained":
            row["largest gap (points)"] = largest_gap(run)
        rows.append(row)
    return pd.DataFrame(rows)


#: The paper's metrics a control figure plots, and their labels.
POINT_METRICS = {metric: METRIC_LABELS[metric]
                 for metric in ("l0_density", "params_pct", "macs_pct", "val_error_final")}


def paper_points(table: str) -> pd.DataFrame:
    """The paper's rows of a control table: method, grouping, target or lambda (numbers), the metrics
    of :data:`POINT_METRICS`, and ``status``: the text of a row the paper reports as failed (a
    collapse), whose metrics are NaN."""
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
    """The paper's final error of its densest run in a control table, and that run's setting: the
    reference of the paper's error cost where it prints no dense model."""
    densest = points.loc[points["L0-density (%)"].idxmax()]
    return densest["val. error final (%)"], f"{densest['method']}, {densest['grouping']}-wise, {setting(densest)}"


def plot_comparison(ours: pd.DataFrame, paper: pd.DataFrame, title: str = "") -> plt.Figure:
    """The control figure: density, parameters and MACs against the target (constrained) and against
    lambda_pen (penalized), ours filled and the paper's hollow; and each run's error cost against its
    density: ours against the reference run given to :func:`run_rows` (our dense run, or the densest
    where a table has none), the paper's against its densest run (:func:`paper_reference_error`). In
    the cost panel a triangle marks a penalized run.
    """
    fig, axes = plt.subplots(2, 4, figsize=(10.5, 5.8))
    metrics = ["L0-density (%)", "params (%)", "MACs (%)"]
    styles = {"model": ("o", "C0"), "layer": ("s", "C3")}
    for row, (method, x_key, x_label) in enumerate((("constrained", "target", "target density (%)"),
                                                    ("penalized", "lmbda", "λ_pen"))):
        for col, metric in enumerate(metrics):
            ax = axes[row, col]
            for grouping, (marker, color) in styles.items():
                for frame, filled in ((ours, True), (paper, False)):
                    chosen = frame[(frame["method"] == method) & (frame["grouping"] == grouping)].dropna(
                        subset=[metric])
                    if chosen.empty:
                        continue
                    x = 100 * chosen[x_key] if method == "constrained" else chosen[x_key]
                    ax.scatter(x, chosen[metric], marker=marker, s=36, linewidths=1.2,
                               facecolors=color if filled else "none", edgecolors=color)
            if method == "constrained":
                ax.plot([0, 100], [0, 100], ls="--", lw=0.8, color="0.4")
                ax.set(xlim=(0, 100))
            else:
                ax.set(xscale="log")
            ax.set(ylim=(0, 105), xlabel=x_label, ylabel=metric if col == 0 else None,
                   title=f"{method}: {metric.split(' (')[0]}")
            ax.grid(alpha=0.3)
    costs = axes[0, 3]
    reference, _ = paper_reference_error(paper)
    paper = paper.assign(**{"cost (points)": paper["val. error final (%)"] - reference})
    for method in ("constrained", "penalized"):
        for grouping, (marker, color) in styles.items():
            for source, frame, filled in (("ours", ours, True), ("paper", paper, False)):
                chosen = frame[(frame["method"] == method) & (frame["grouping"] == grouping)].dropna(
                    subset=["cost (points)"])
                costs.scatter(chosen["L0-density (%)"], chosen["cost (points)"], s=30,
                              marker=marker if method == "constrained" else "^", linewidths=1.2,
                              facecolors=color if filled else "none", edgecolors=color,
                              label=f"{source}, {method}, {grouping}-wise")
    costs.axhline(0, ls=":", color="k", lw=1)
    costs.set(xlabel="L0-density (%)", ylabel="error cost (points)", xlim=(0, 100),
              title="error cost against density")
    costs.grid(alpha=0.3)
    key = [Line2D([], [], ls="", marker=marker, color=color, label=f"{grouping}-wise")
           for grouping, (marker, color) in styles.items()]
    key += [Line2D([], [], ls="", marker="^", color="0.4", label="penalized (cost panel)"),
            Line2D([], [], ls="", marker="o", color="0.4", label="filled: ours"),
            Line2D([], [], ls="", marker="o", markerfacecolor="none", color="0.4", label="hollow: paper")]
    axes[1, 3].axis("off")
    axes[1, 3].legend(handles=key, loc="center", fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def findings(rows: pd.DataFrame, expected: dict[str, int], paper: pd.DataFrame | None = None) -> str:
    """The page's answer in a few sentences, from :func:`run_rows`: how many constrained runs end with each
    outcome of :func:`paperlib.harness.rules.judge_run`, how far the penalized runs' densities scatter, whether a setting means the same density on
    the paper's model and ours (:func:`transfer_in_words`, with the paper's points), and what the densities
    cost in error.

    ``expected`` is the number of runs of each method the table asks for; a missing run is said to be
    missing, so a page never claims more than its records show.
    """
    sentences = []
    constrained = rows[rows["method"] == "constrained"]
    if len(constrained):
        count = {outcome: constrained[constrained["outcome"] == outcome.value] for outcome in rules.Outcome}
        judged = len(constrained) - len(count[rules.Outcome.DOES_NOT_BIND])
        text = (f"**Constraint.** {len(count[rules.Outcome.ON_TARGET])} of the {judged} constrained runs whose "
                f"targets bind ended on target (within {rules.ON_TARGET_POINTS:g} point, or half a gate, of every "
                f"binding constraint, none more than {rules.FEASIBLE_POINTS:g} point over).")
        under, over = count[rules.Outcome.UNDER], count[rules.Outcome.VIOLATED]
        if len(under):
            worst = under.loc[under["largest gap (points)"].idxmin()]
            text += (f" {len(under)} ended further under a binding target, their constraints holding (the largest: "
                     f"{worst['largest gap (points)']:+.2f} points, {worst['grouping']}-wise {worst['setting']}).")
        if len(over):
            worst = over.loc[over["over target (points)"].idxmax()]
            text += (f" {len(over)} ended more than {rules.FEASIBLE_POINTS:g} point over a target (the largest: "
                     f"{worst['over target (points)']:+.2f} points, {worst['grouping']}-wise {worst['setting']}).")
        free = count[rules.Outcome.DOES_NOT_BIND]
        if len(free):
            text += (f" {len(free)} {'was' if len(free) == 1 else 'were'} asked for a target at or above the density "
                     f"the same model reaches with free gates ({in_words(sorted(set(free['setting'])))}, "
                     f"{in_words(sorted(set(free['grouping'] + '-wise')))}): the target does not bind there, and the "
                     f"run is neither a hit nor a miss.")
        sentences.append(text)
    penalized = rows[rows["method"] == "penalized"]
    if len(penalized) == 1:
        only = penalized.iloc[0]
        sentences.append(f"**Penalty.** The one penalized run so far, {only['grouping']}-wise "
                         f"λ_pen {only['lmbda']:g}, ended at {only['L0-density (%)']:.1f}% density.")
    elif len(penalized):
        by_grouping = "; ".join(
            f"{grouping}-wise " + ", ".join(f"{row['lmbda']:g}: {row['L0-density (%)']:.1f}%"
                                           for _, row in group.sort_values("lmbda").iterrows())
            for grouping, group in penalized.groupby("grouping", sort=False))
        sentences.append(
            f"**Penalty.** The {len(penalized)} penalized runs ended between "
            f"{penalized['L0-density (%)'].min():.1f}% and {penalized['L0-density (%)'].max():.1f}% density "
            f"(λ_pen: density, {by_grouping}).")
    transfer = transfer_in_words(rows, paper) if paper is not None else None
    if transfer:
        sentences.append(transfer)
    costs = rows.dropna(subset=["cost (points)"])
    costs = costs[costs["method"] != "dense"]
    if len(costs):
        def extremes(group: pd.DataFrame) -> str:
            low, high = group.loc[group["cost (points)"].idxmin()], group.loc[group["cost (points)"].idxmax()]
            return (f"{low['cost (points)']:+.2f} ({low['grouping']}-wise {low['setting']}) to "
                    f"{high['cost (points)']:+.2f} points ({high['grouping']}-wise {high['setting']})")

        parts = [f"the {method} runs' final errors differ by {extremes(group)}"
                 for method, group in costs.groupby("method", sort=False)]
        sentences.append(f"**Cost.** Against the dense model at the same budget, {'; '.join(parts)}.")
    missing = {method: count - int((rows["method"] == method).sum()) for method, count in expected.items()}
    missing = {method: count for method, count in missing.items() if count > 0}
    if missing:
        parts = [f"{count} {method}" for method, count in missing.items()]
        sentences.append(f"**Not yet run:** {', '.join(parts)} (the command is below the table).")
    return " ".join(sentences) if sentences else "No run of this table has a complete record yet."


#: The fewest penalized cells on which :func:`transfer_in_words` says whether a λ_pen carries over.
TRANSFER_CELLS = 3


def transfer_rows(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Each of our runs in :func:`run_rows` at a setting the paper also ran (method, grouping, and target or
    λ_pen), with both final densities and ours minus the paper's; the paper's collapsed rows are left out."""
    def key(row) -> tuple:
        value = row["target"] if row["method"] == "constrained" else row["lmbda"]
        return row["method"], row["grouping"], round(float(value), 10)

    theirs = {key(row): row["L0-density (%)"] for _, row in paper.iterrows() if not math.isnan(row["L0-density (%)"])}
    found = [{"method": row["method"], "grouping": row["grouping"], "setting": row["setting"],
              "ours (%)": row["L0-density (%)"], "paper (%)": theirs[key(row)]}
             for _, row in rows[rows["method"].isin(["constrained", "penalized"])].iterrows() if key(row) in theirs]
    table = pd.DataFrame(found, columns=["method", "grouping", "setting", "ours (%)", "paper (%)"])
    return table.assign(**{"ours − paper (points)": table["ours (%)"] - table["paper (%)"]})


def transfer_in_words(rows: pd.DataFrame, paper: pd.DataFrame) -> str | None:
    """Whether a setting means the same density on the paper's model and on ours: how far our constrained
    runs end from the paper's density at the same target, and our penalized runs at the same λ_pen
    (:func:`transfer_rows`; the median distance, and the range); None before a penalized run has a record.
    A target is said to carry over and a λ_pen not when at least :data:`TRANSFER_CELLS` penalized cells have a
    record and their median is over :data:`~paperlib.harness.rules.AGREE_POINTS` and over three times the constrained one."""
    table = transfer_rows(rows, paper)
    medians, spans = {}, {}
    for method in ("constrained", "penalized"):
        differences = table.loc[table["method"] == method, "ours − paper (points)"]
        if len(differences):
            medians[method] = differences.abs().median()
            spans[method] = (f"{differences.iloc[0]:+.1f} points, one cell" if len(differences) == 1 else
                             f"{differences.min():+.1f} to {differences.max():+.1f} points over {len(differences)} cells")
    if "penalized" not in spans:
        return None
    said = []
    for method, median in medians.items():
        verb, where = ("", "") if said else ("end ", " from the paper's density")
        said.append(f"our {method} runs {verb}a median {median:.1f} points{where} ({spans[method]})")
    text = f"**Transfer.** At the paper's own settings, {' and '.join(said)}."
    penalized = int((table["method"] == "penalized").sum())
    carries = "constrained" in medians and medians["penalized"] > max(rules.AGREE_POINTS, 3 * medians["constrained"])
    if carries and penalized >= TRANSFER_CELLS:
        text += (" A target means about the same density on the paper's WideResNet-28-10 and on ours; the same "
                 "λ_pen does not, so a λ_pen tuned on one model has to be searched for again on another.")
    return text


def first_feasible_epoch(record: dict) -> int | None:
    """The first training epoch at whose end every constraint holds (:func:`paperlib.harness.rules.feasible`), or None."""
    for row in record["history"]:
        if row["phase"] == "train" and rules.feasible([100 * (density - target)
                                                       for density, target in constrained_densities(record, row)]):
            return int(row["epoch"])
    return None


def violations(record: dict) -> pd.Series:
    """The largest violation over a constrained run's constraints at each logged step (points above the
    target; negative: every constraint holds with room), indexed by the step's epoch."""
    steps = step_log(record)
    targets = [target for _, target in constrained_densities(record, record["history"][-1])]
    over = pd.concat([100 * (steps[f"constrained_density_{i}"] - target) for i, target in enumerate(targets)], axis=1)
    return over.max(axis=1).set_axis(steps["epoch"])


def settling_epoch(record: dict) -> float | None:
    """The epoch from which every constraint stays within :data:`~paperlib.harness.rules.FEASIBLE_POINTS` above its target
    at every logged step to the end (0.0 if it always did), or None if the last logged step violates one by more."""
    late = violations(record)
    over = [epoch for epoch, violation in late.items() if not rules.feasible([violation])]
    if not over:
        return 0.0
    after = late.index[late.index > over[-1]]
    return float(after[0]) if len(after) else None


def stability_rows(runs: list[dict]) -> pd.DataFrame:
    """Figure 3's question for seed 0's constrained runs among ``runs``: from which epoch every constraint
    stays within a point above its target (:func:`settling_epoch`; none: the run ends violating one), as a
    share of training; the largest violation between the first logged step at which every constraint held
    and that epoch (the oscillation before the run settles); and the largest over the second half."""
    rows = []
    for run in runs:
        m = run["metrics"]
        if (m["method"], m["seed"]) != ("constrained", 0):
            continue
        late, settled = violations(run), settling_epoch(run)
        held = late.index[late <= rules.FEASIBLE_POINTS]
        between = late[(late.index > held[0]) & (late.index < (settled if settled is not None else math.inf))] \
            if len(held) else late.iloc[:0]
        epochs = m["epochs_completed"]
        rows.append({"run": run_link(run), "setting": run_label(run),
                     "first held (epoch)": float(held[0]) if len(held) else None, "settled from epoch": settled,
                     "share of training (%)": None if settled is None else 100 * settled / epochs,
                     "largest violation between (points)": between.max() if len(between) else None,
                     "largest violation, 2nd half (points)": late[late.index >= epochs / 2].max()})
    return pd.DataFrame(rows, columns=["run", "setting", "first held (epoch)", "settled from epoch",
                                       "share of training (%)", "largest violation between (points)",
                                       "largest violation, 2nd half (points)"])


def plot_stability(runs: list[dict]) -> plt.Figure:
    """Figure 3 at our protocol: the model's density in seed 0's model-wise constrained runs (left) and the
    last gated block's in the layer-wise ones (right), against epochs, one colour per target in both panels;
    targets dashed."""
    constrained = [run for run in runs if (run["metrics"]["method"], run["metrics"]["seed"]) == ("constrained", 0)]
    colours = {target: f"C{i}" for i, target in enumerate(sorted({run["metrics"]["target"] for run in constrained}))}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, grouping in zip(axes, ("model", "layer")):
        chosen = [run for run in constrained if run["metrics"]["grouping"] == grouping]
        for run in chosen:
            steps, last, target = step_log(run), len(constraint_names(run)) - 1, run["metrics"]["target"]
            ax.plot(steps["epoch"], 100 * steps[f"constrained_density_{last}"], color=colours[target], lw=1)
            ax.axhline(100 * target, color=colours[target], ls="--", lw=0.8)
        name = f"block {constraint_names(chosen[0])[-1]}, the last gated one" if grouping == "layer" and chosen else (
            "the model" if grouping == "model" else "the last gated block")
        ax.set(xlabel="epoch", title=f"{grouping}-wise constraints: {name}", ylim=(0, 100))
        ax.grid(alpha=0.3)
    axes[0].set(ylabel="expected L0-density (%)")
    handles = [Line2D([], [], color=colour, label=target_label(target)) for target, colour in colours.items()]
    if handles:
        fig.legend(handles=handles, title="target (dashed)", loc="center right", fontsize=9, title_fontsize=9,
                   frameon=False)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    return fig


def stability_in_words(rows: pd.DataFrame) -> str:
    """What :func:`stability_rows` shows: how many runs settle and how soon, how far the constraints are
    violated between first holding and settling, and which runs end violating one."""
    if rows.empty:
        return no_record_line("the constrained control runs", CONTROL_GRIDS)
    settled = rows.dropna(subset=["settled from epoch"])
    share = count_of(len(settled), len(rows), "constrained run").capitalize()
    text = f"{share} {'settles' if len(settled) == 1 else 'settle'}"
    if len(settled):
        latest = settled.loc[settled["settled from epoch"].idxmax()]
        between = settled["largest violation between (points)"].dropna()
        text += (f": from some epoch on, every constraint stays within {rules.FEASIBLE_POINTS:g} point above its target to the "
                 f"end, by epoch {latest['settled from epoch']:.1f} at the latest ({latest['share of training (%)']:.0f}% "
                 f"of training, {latest['setting']}; median epoch {settled['settled from epoch'].median():.1f})")
        if len(between):
            text += (f". Between first holding and settling, constraints are violated by up to {between.max():.1f} "
                     f"points, while the multipliers, set to zero by dual restarts, build up again")
    text += "."
    for _, row in rows[rows["settled from epoch"].isna()].iterrows():
        text += (f" {row['setting'].capitalize()} ends violating a constraint by more than {rules.FEASIBLE_POINTS:g} point "
                 f"(largest violation in the second half {row['largest violation, 2nd half (points)']:+.2f} points).")
    return text


def dual_lr_rows(runs: list[dict]) -> pd.DataFrame:
    """Constrained runs that differ in their dual learning rate: how soon every constraint held, the
    largest violation at any epoch end after that, the final largest gap and the final error."""
    rows = []
    for run in sorted(runs, key=lambda r: r["params"]["dual_lr"]):
        first = first_feasible_epoch(run)
        later = [row for row in run["history"] if row["phase"] == "train" and first is not None
                 and int(row["epoch"]) > first]
        violations = [max(100 * (density - target) for density, target in constrained_densities(run, row))
                      for row in later]
        rows.append({"run": run_link(run),
                     "dual lr": f"{run['params']['dual_lr']:g}", "first feasible epoch": first,
                     "largest violation after it (points)": max(violations) if violations else None,
                     "final largest gap (points)": largest_gap(run),
                     "val. error final (%)": run["metrics"]["val_error_final"],
                     "epochs": run["metrics"]["epochs_completed"]})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["first feasible epoch"] = frame["first feasible epoch"].astype("Int64")  # an epoch, or none
    return frame


def plot_layer_traces(runs: list[dict]) -> plt.Figure:
    """Each gated layer's expected density (top) and multiplier (bottom) against epochs, one column per run
    (layer-wise constrained runs, e.g. at several dual learning rates); the targets dashed."""
    fig, axes = plt.subplots(2, len(runs), figsize=(3.3 * len(runs), 5.4), sharex=True, sharey="row", squeeze=False)
    for column, run in enumerate(runs):
        frame = pd.DataFrame(run["history"]).apply(pd.to_numeric, errors="coerce")
        layers = list(run["metrics"]["l0_density_per_layer"])
        for index, layer in enumerate(layers):
            axes[0, column].plot(frame["epoch"], 100 * frame[f"density[{layer}]"], lw=1.2,
                                 label=short_layer_name(layer))
            if f"lambda_{index}" in frame:
                axes[1, column].plot(frame["epoch"], frame[f"lambda_{index}"], lw=1.2)
        for target in {t for _, t in constrained_densities(run, run["history"][-1])}:
            axes[0, column].axhline(100 * target, ls="--", color="k", lw=0.8)
        axes[0, column].set(title=f"dual lr {run['params']['dual_lr']:g}", ylim=(0, 100))
        axes[1, column].set(xlabel="epoch")
        for ax in axes[:, column]:
            ax.grid(alpha=0.3)
    axes[0, 0].set(ylabel="expected L0-density (%)")
    axes[1, 0].set(ylabel="multiplier λ (end of epoch)")
    axes[0, -1].legend(fontsize=8, ncol=2, loc="upper right", title="gated block", title_fontsize=8)
    fig.tight_layout()
    return fig


#: The hyper-parameters a protocol table compares, in the order a reader checks them.
PROTOCOL_FIELDS = ("model", "epochs", "batch_size", "optimizer", "lr", "lr_milestones", "lr_gamma", "weight_decay",
                   "gates_optimizer", "gates_lr", "dual_lr", "dual_restarts", "rho_init", "clamp_log_alpha")


def protocol_table(dataset: str) -> pd.DataFrame:
    """The ``paper`` and ``cpu`` presets of a dataset side by side (from :mod:`paperlib.harness.presets`, never typed),
    with a mark on the rows where they differ."""
    from paperlib.harness.presets import resolve_config

    paper, cpu = (resolve_config(dataset=dataset, preset=preset, target=0.5) for preset in ("paper", "cpu"))
    rows = [{"parameter": name, "paper": str(getattr(paper, name)), "CPU protocol": str(getattr(cpu, name)),
             "differs": "yes" if getattr(paper, name) != getattr(cpu, name) else ""} for name in PROTOCOL_FIELDS]
    return pd.DataFrame(rows)


def epoch_minutes(runs: list[dict]) -> pd.Series:
    """Minutes per training epoch of each run (its ``wall_time_s`` over its epochs, evaluation included)."""
    return pd.Series([r["metrics"]["wall_time_s"] / r["metrics"]["epochs_completed"] / 60 for r in runs], dtype=float)


#: The columns of the control table the page shows.
TABLE_COLUMNS = ["run", "grouping", "setting", "L0-density (%)", "largest gap (points)", "outcome", "params (%)",
                 "MACs (%)", "val. error final (%)", "cost (points)", "ran on"]

#: The grids of the CIFAR-10 control table at the CPU protocol, and how many runs of each kind seed 0 has.
CONTROL_GRIDS = studies.grids("tab:cifar10_control", preset="cpu")
CONTROL_RUNS = {"constrained": 10, "penalized": 10, "dense": 1}
DUAL_LR_GRID, = studies.grids("cifar10_dual_lr")
ABLATION_GRID = studies.grids("tab:cifar10")[0]


def table_order(run: dict) -> tuple:
    """A run's place in the control table, as the paper orders Table 13: the dense run first (the reference
    of the costs), then layer-wise before model-wise, constrained by rising target before penalized by
    falling λ_pen, and seeds in order."""
    m = run["metrics"]
    if m["method"] == "dense":
        return (0, 0, 0, 0, m["seed"])
    setting = m["target"] if m["method"] == "constrained" else -m["lmbda"]
    return (1, ("layer", "model").index(m["grouping"]), ("constrained", "penalized").index(m["method"]),
            setting, m["seed"])


def control_runs() -> list[dict]:
    """The complete records of :data:`CONTROL_GRIDS`, in the table's order (:func:`table_order`)."""
    return sorted((run for grid in CONTROL_GRIDS for run in complete_records(grid)), key=table_order)


def dense_run(runs: list[dict]) -> dict | None:
    """The dense baseline among ``runs``, or None before its record exists."""
    return next((run for run in runs if run["metrics"]["method"] == "dense"), None)


def densest_run(runs: list[dict]) -> dict | None:
    """The run of highest final L0-density among ``runs`` (None without any): the reference of the error
    cost in a table without a dense run, as :func:`paper_reference_error` takes the paper's."""
    return max(runs, key=lambda run: run["metrics"]["l0_density"] or 1.0, default=None)


def epoch_sentence(runs: list[dict]) -> str:
    """The measured minutes per epoch of ``runs`` (:func:`epoch_minutes`) and per run, in one sentence."""
    if not runs:
        return no_record_line("the control table", CONTROL_GRIDS)
    minutes = epoch_minutes(runs)
    epochs = runs[0]["metrics"]["epochs_completed"]
    return (f"{len(runs)} runs: {minutes.median():.1f} minutes per epoch (median; {minutes.min():.1f} to "
            f"{minutes.max():.1f}), {epochs * minutes.median():.0f} minutes per run.")


def plot_dense_curve(dense: dict) -> plt.Figure:
    """The dense model's test error against epochs: where the schedule ends it."""
    fig, ax = plt.subplots(figsize=(6, 3))
    history = pd.DataFrame(dense["history"]).apply(pd.to_numeric, errors="coerce")
    ax.plot(history["epoch"], history["val_error"], marker=".")
    ax.set(xlabel="epoch", ylabel="test error (%)", ylim=(0, None),
           title=f"dense {dense['metrics']['model']}, {dense['metrics']['preset']} protocol")
    ax.grid(alpha=0.3)
    return fig


def layer_runs_at(runs: list[dict], target: float = 0.2) -> list[dict]:
    """Seed 0's layer-wise constrained runs at ``target`` among ``runs`` and in :data:`DUAL_LR_GRID`, by
    dual learning rate: the dual-lr test of the hardest cell."""
    found = [run for run in [*runs, *complete_records(DUAL_LR_GRID)]
             if (run["metrics"]["method"], run["metrics"]["grouping"], run["metrics"]["target"],
                 run["metrics"]["seed"]) == ("constrained", "layer", target, 0)]
    return sorted(found, key=lambda run: run["params"]["dual_lr"])


def preset_run(runs: list[dict]) -> dict | None:
    """The run among ``runs`` trained at its preset's dual learning rate (the control table's own)."""
    return next((run for run in runs if run["metrics"]["experiment"] == "cifar10_control"), None)


def plot_gates_lr_histograms(ablation: list[dict], lmbda: float = 0.001) -> list[plt.Figure]:
    """Figure 7 at our protocol: the first gated layer's medians of the penalized ablation runs at
    ``lmbda``, one figure per gates' learning rate."""
    figures = []
    for run in ablation:
        if run["params"]["method"] == "penalized" and run["params"]["lmbda"] == lmbda:
            fig = plot_gate_histograms(run)
            fig.suptitle(f"gates' learning rate {run['params']['gates_lr']:g}", y=1.05)
            figures.append(fig)
    return figures


def detach_pairs(ablation: list[dict], runs: list[dict]) -> list[dict]:
    """Figure 8 at our protocol: the ablation runs without the stop-gradient of Eq. 13 and seed 0's
    model-wise constrained runs at their targets, with it."""
    undetached = [run for run in ablation if not run["params"]["detach_gates"]]
    targets = {run["metrics"]["target"] for run in undetached}
    detached = [run for run in runs if (run["metrics"]["method"], run["metrics"]["grouping"], run["metrics"]["seed"])
                == ("constrained", "model", 0) and run["metrics"]["target"] in targets]
    return undetached + detached


def ablation_checks(ablation: list[dict], runs: list[dict]) -> list[tuple[str, bool]]:
    """App. H's two findings (Table 12, Figures 7-8) tested on the ablation records at our protocol, each as
    (what was checked, whether it held):

    - the gates' learning rate: for each pair of ablation runs that differ only in it (0.1 and 6), the
      test-time model at 6 keeps more than :data:`~paperlib.harness.rules.EFFECT_POINTS` fewer of its parameters (in
      points) than at 0.1;
    - the stop-gradient of eq. 13: each model-wise run without it ends more than
      :data:`~paperlib.harness.rules.EFFECT_POINTS` further under its target than seed 0's run with it
      (:func:`detach_pairs`).
    """
    checks = []
    by_lr = {}
    for run in ablation:
        params = run["params"]
        if params["detach_gates"]:
            setting = (f"λ_pen {params['lmbda']:g}" if params["method"] == "penalized"
                       else f"target {target_label(params['target'])}")
            key = f"{params['method']}, {params['grouping']}-wise {setting}"
            by_lr.setdefault(key, {})[params["gates_lr"]] = run["metrics"]["params_pct"]
    for setting, kept in by_lr.items():
        if {0.1, 6.0} <= set(kept):
            checks.append((f"{setting}: parameters kept {kept[0.1]:.2f}% at gates lr 0.1, {kept[6.0]:.2f}% at 6",
                           kept[6.0] < kept[0.1] - rules.EFFECT_POINTS))
    pairs = detach_pairs(ablation, runs)
    for undetached in (run for run in pairs if not run["params"]["detach_gates"]):
        target = undetached["metrics"]["target"]
        twin = next((run for run in pairs if run["params"]["detach_gates"] and run["metrics"]["target"] == target),
                    None)
        if twin is not None:
            without, with_ = (100 * (r["metrics"]["l0_density"] - target) for r in (undetached, twin))
            checks.append((f"model-wise target {100 * target:g}%: {without:+.2f} points without the stop-gradient, "
                           f"{with_:+.2f} with it", without < with_ - rules.EFFECT_POINTS))
    return checks


# --------------------------------------------------------------------------- #
# A run's step log and constraints
# --------------------------------------------------------------------------- #

def step_log(record: dict) -> pd.DataFrame:
    """A run's step log (``steps.csv``: every logged step's epoch, densities and multipliers) as numbers."""
    return pd.DataFrame(record["steps"] or []).apply(pd.to_numeric, errors="coerce")


def constraint_names(record: dict) -> list[str]:
    """The names of a constrained run's constraints, in the order of its multipliers: ``model``, or each
    gated block's short name (:func:`short_layer_name`)."""
    if record["metrics"]["grouping"] == "model":
        return ["model"]
    return [short_layer_name(layer) for layer in record["metrics"]["l0_density_per_layer"]]


def final_gaps(record: dict) -> list[float]:
    """Each constraint's final expected density minus its target, in points (positive: violated)."""
    return [100 * (density - target) for density, target in constrained_densities(record, record["history"][-1])]


def run_label(run: dict) -> str:
    return f"{run['metrics']['grouping']}-wise {setting(run['metrics'])}"


# --------------------------------------------------------------------------- #
# The sections of book/results_cifar10.md (report.display_all shows each)
# --------------------------------------------------------------------------- #

def dual_lr_section(dual: list[dict]) -> list:
    """The dual-lr test of layer-wise 20% (:func:`layer_runs_at`): its table and traces, and what is missing."""
    shown = [show(dual_lr_rows(dual)), plot_layer_traces(dual)] if dual else []
    missing = no_record_line("all 3 dual learning rates", [DUAL_LR_GRID, *CONTROL_GRIDS]) if len(dual) < 3 else None
    return [*shown, missing]


def ablation_section(runs: list[dict]) -> list:
    """Figure 7's gate-median histograms and Figure 8's density traces, with and without the stop-gradient."""
    ablation = complete_records(ABLATION_GRID)
    histograms = plot_gates_lr_histograms(ablation)
    pairs = detach_pairs(ablation, runs)
    missing = (no_record_line("Figure 7's or Figure 8's runs", [ABLATION_GRID])
               if not histograms or not pairs else None)
    checks = ablation_checks(ablation, runs)
    checked = show(pd.DataFrame(checks, columns=["App. H's finding, at our protocol", "holds"]),
                   caption="The gates' learning rate and the stop-gradient, tested") if checks else None
    return [*histograms, plot_density_traces(pairs) if pairs else None, checked, missing]
