"""Control of the density (§5.5, App. K; book/results_cifar10.md and the MNIST pages' control figure): does a
constraint end at its target in one run, where a penalty must be tuned? Tables, numbers and figures of a control
table's records; why some runs miss is :mod:`analysis.misses`.

Errors of a smaller model trained for fewer epochs are not the paper's, so the comparable quantity is each
run's error *cost*: its final error minus the final error of a dense model trained at the same protocol
(:func:`run_rows`). The paper prints no dense WideResNet-28-10; its cost is taken against its own densest run
of the table (:func:`paper_reference_error`).

>>> condition({"method": "constrained", "grouping": "model", "target": 0.2, "seed": 0})
'model-wise 20%'
"""

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
import pandas as pd

from paperlib.harness import rules, studies
from paperlib.harness.index import device_kind
from paperlib.harness.protocols import protocol_name, record_protocol
from paperlib.harness.paper_rows import constrained_densities, largest_gap, target_label
from paperlib.harness.plots import history_frame, plot_gate_histograms, steps_frame
from paperlib.harness.vocabulary import METRIC_LABELS
from paperlib.paper.paper_results import paper_results

from . import style
from .report import complete_records, grid_records, notebook_link, sweep_command

def short_layer_name(layer: str) -> str:
    """``stage2.1.conv1.conv`` -> ``s2.1``: a gated WideResNet block's column heading; other names unchanged."""
    if layer.startswith("stage") and ".conv1" in layer:
        return "s" + layer[len("stage"):layer.index(".conv1")]
    return layer


def protocol_of(run: dict) -> str:
    """The protocol a record's own parameters define (:func:`paperlib.harness.protocols.record_protocol`); for a
    record without them, its preset's protocol on its dataset (CIFAR-10 unless it says)."""
    params = run.get("params") or {}
    if {"preset", "run_name", "dataset"} <= set(params):
        return record_protocol(params)
    preset = params.get("preset")
    try:
        return protocol_name(preset, params.get("dataset") or "cifar10")
    except KeyError:
        return str(preset)


def run_link(run: dict) -> str:
    """A run's name, linked to its executed notebook where it has one, and where a run of one of the CPU
    protocols trained on a GPU, said beside it (its name, which ends ``-cpu`` or ``-cpu2``, names the protocol,
    not the device)."""
    link = notebook_link(run["path"], run["params"]["run_name"]) or run["params"]["run_name"]
    if run["params"].get("preset") in ("cpu", "cpu2") and ran_on(run["metrics"]) == "GPU":
        link += f" ({protocol_of(run)}, ran on GPU)"
    return link


def setting(params: dict) -> str:
    """What a run was asked for (its ``params``), as the paper's tables print it: ``target 20%``, ``λ_pen 0.01``,
    ``dense``."""
    if params["method"] == "constrained":
        target = params["target"]
        if isinstance(target, list):  # one target per layer
            return "targets " + "/".join(f"{100 * t:g}" for t in target) + "%"
        return f"target {100 * target:g}%"
    if params["method"] == "penalized":
        return f"λ_pen {params['lmbda']:g}"
    return params["method"]


def condition(params: dict, seed: bool = False) -> str:
    """A run named by its condition, as the page's rows name it (with its seed if ``seed``).

    >>> condition({"method": "constrained", "grouping": "layer", "target": 0.35, "seed": 1}, seed=True)
    'layer-wise 35%, seed 1'
    >>> condition({"method": "penalized", "grouping": "model", "lmbda": 0.1, "seed": 0})
    'model-wise λ_pen 0.1'
    """
    if params["method"] == "dense":
        text = "dense"
    elif params["method"] == "constrained":
        text = f"{params['grouping']}-wise {target_label(params['target'])}"
    else:
        text = f"{params['grouping']}-wise λ_pen {params['lmbda']:g}"
    return text + (f", seed {params['seed']}" if seed else "")


def condition_link(run: dict, seed: bool = False) -> str:
    """:func:`condition`, linked to the run's executed notebook where it has one."""
    text = condition(run["params"], seed)
    return notebook_link(run["path"], text) or text


#: The columns of :func:`run_rows`.
RUN_COLUMNS = ["run", "condition", "method", "grouping", "setting", "target", "lmbda", "seed", "L0-density (%)",
               "largest gap (points)", "outcome", "over target (points)", "params (%)", "MACs (%)",
               "val. error final (%)", "cost (points)", "epochs", "ran on"]


def ran_on(metrics: dict) -> str:
    """Where a run trained: ``GPU`` for a CUDA device, else ``CPU`` (records without a device are CPU runs)."""
    return device_kind(metrics.get("device"))


def run_rows(runs: list[dict], dense: dict | None, free: list[dict] | None = None) -> pd.DataFrame:
    """One row per run: its setting, final densities and counts, final error, and error cost.

    ``largest gap``, ``outcome`` and ``over target`` (the largest final gap above a target, 0 if none) are for
    constrained runs (:func:`largest_gap`; the outcome's value, :func:`paperlib.harness.rules.judge_record` with the
    free-gates records ``free``, by default :func:`paperlib.harness.rules.free_gates_records`); ``cost`` is the run's
    final error minus the ``dense`` run's (None without one); ``ran on`` is :func:`ran_on`.
    """
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
            "params (%)": m["params_pct"], "MACs (%)": m["macs_pct"],
            "val. error final (%)": m["val_error_final"],
            "cost (points)": None if dense_error is None else m["val_error_final"] - dense_error,
            "epochs": m["epochs_completed"], "ran on": ran_on(m),
        })
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def layer_rows(runs: list[dict]) -> pd.DataFrame:
    """The final expected density of every gated layer of each layer-wise run (%), beside its setting."""
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


def plot_comparison(ours: pd.DataFrame, paper: pd.DataFrame, title: str = "", ours_label: str = "ours",
                    paper_label: str = "paper") -> plt.Figure:
    """The control figure: L0-density and MACs against the target (top row, constrained) and against λ_pen
    (bottom row, penalized), and each run's error cost against its density (right): ours against the reference
    run given to :func:`run_rows` (our dense run, or the densest where a table has none), the paper's against
    its densest run (:func:`paper_reference_error`).

    The paper's points and ours take the book's one style for each (:mod:`analysis.style`: the paper's black and
    hollow, ours blue and filled), model-wise and layer-wise differ by marker shape; the legend names
    ``ours_label`` and ``paper_label``.
    """
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
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


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
    steps = steps_frame(record)
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


def plot_stability(runs: list[dict]) -> plt.Figure:
    """Figure 3 at our protocol: the model's density in seed 0's model-wise constrained runs (left) and the
    last gated block's in the layer-wise ones (right), against epochs, one colour per target in both panels;
    targets dashed."""
    constrained = [run for run in runs if (run["params"]["method"], run["params"]["seed"]) == ("constrained", 0)]
    colours = {target: f"C{i}" for i, target in enumerate(sorted({run["params"]["target"] for run in constrained}))}
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.9), sharey=True)
    for ax, grouping in zip(axes, ("model", "layer")):
        chosen = [run for run in constrained if run["params"]["grouping"] == grouping]
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
        rows.append({"run": notebook_link(run["path"], f"dual lr {run['params']['dual_lr']:g}") or run_label(run),
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
    fig, axes = plt.subplots(2, len(runs), figsize=(min(7, 2.4 * len(runs)), 4.6), sharex=True, sharey="row",
                             squeeze=False)
    for column, run in enumerate(runs):
        frame = history_frame(run)
        layers = list(run["metrics"]["l0_density_per_layer"])
        for index, layer in enumerate(layers):
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


#: The hyper-parameters a protocol table compares, in the order a reader checks them.
PROTOCOL_FIELDS = ("model", "epochs", "batch_size", "optimizer", "lr", "lr_milestones", "lr_gamma", "weight_decay",
                   "gates_optimizer", "gates_lr", "dual_lr", "dual_restarts", "rho_init", "clamp_log_alpha")
#: How the protocol table names the configuration's fields.
PROTOCOL_LABELS = {"batch_size": "batch size", "lr": "learning rate", "lr_milestones": "lr milestones (epochs)",
                   "lr_gamma": "lr decay at a milestone", "weight_decay": "weight decay",
                   "gates_optimizer": "gates' optimiser", "gates_lr": "gates' learning rate",
                   "dual_lr": "dual learning rate", "dual_restarts": "dual restarts", "rho_init": "ρ_init",
                   "clamp_log_alpha": "log α clamped"}


#: The presets whose protocols :func:`protocol_table` sets side by side, per dataset (the paper's first).
TABLE_PRESETS = {"cifar10": ("paper", "cpu2", "gpu", "cpu")}


def protocol_table(dataset: str, presets: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The protocols of a dataset side by side, one column each named as :mod:`paperlib.harness.protocols` names
    it (the presets of :data:`TABLE_PRESETS`, else the paper's and the short protocol; their values from
    :mod:`paperlib.harness.presets`, never typed), with ``differs``: the protocols whose value differs from the
    paper's."""
    from paperlib.harness.presets import resolve_config

    presets = presets or TABLE_PRESETS.get(dataset, ("paper", "cpu"))
    configs = {protocol_name(preset, dataset): resolve_config(dataset=dataset, preset=preset, target=0.5)
               for preset in presets}
    paper = configs[protocol_name("paper")]

    def shown(value) -> str:
        return ("yes" if value else "no") if isinstance(value, bool) else str(value)

    rows = [{"parameter": PROTOCOL_LABELS.get(name, name),
             **{label: shown(getattr(config, name)) for label, config in configs.items()},
             "differs from the paper's": ", ".join(label.removesuffix(" protocol") for label, config in configs.items()
                                                   if getattr(config, name) != getattr(paper, name))}
            for name in PROTOCOL_FIELDS]
    return pd.DataFrame(rows)


def epoch_minutes(runs: list[dict]) -> pd.Series:
    """Minutes per training epoch of each run (its ``wall_time_s`` over its epochs, evaluation included)."""
    return pd.Series([r["metrics"]["wall_time_s"] / r["metrics"]["epochs_completed"] / 60 for r in runs], dtype=float)


#: The columns of the control table the page shows, and their short names (the parameters kept are in the
#: page's folded comparison with the paper).
TABLE_COLUMNS = {"condition": "run", "L0-density (%)": "density (%)", "largest gap (points)": "gap (pts)",
                 "outcome": "outcome", "MACs (%)": "MACs (%)",
                 "val. error final (%)": "error (%)", "cost (points)": "cost (pts)", "ran on": "ran on"}

#: The grids of the CIFAR-10 control table at the pilot protocol (the ``cpu`` preset at the paper's gates' learning
#: rate of 6).
CONTROL_GRIDS = studies.grids("tab:cifar10_control", preset="cpu")
#: The grids of the control table at the CPU protocol (``cpu2``): its flagship and constrained rows, its penalized rows.
CPU_CONTROL_GRIDS = ("grids/cifar10_cpu2_control.yaml", "grids/cifar10_cpu2_penalized.yaml")
DUAL_LR_GRID, = studies.grids("cifar10_dual_lr")
ABLATION_GRID = studies.grids("tab:cifar10")[0]


def table_order(run: dict) -> tuple:
    """A run's place in the control table, as the paper orders Table 13: the dense run first (the reference
    of the costs), then layer-wise before model-wise, constrained by rising target before penalized by
    falling λ_pen, and seeds in order."""
    m = run["params"]
    if m["method"] == "dense":
        return (0, 0, 0, 0, m["seed"])
    setting = m["target"] if m["method"] == "constrained" else -m["lmbda"]
    return (1, ("layer", "model").index(m["grouping"]), ("constrained", "penalized").index(m["method"]),
            setting, m["seed"])


def control_runs() -> list[dict]:
    """The complete records of :data:`CONTROL_GRIDS` (the pilot protocol), in the table's order
    (:func:`table_order`)."""
    return sorted((run for grid in CONTROL_GRIDS for run in complete_records(grid)), key=table_order)


def cpu_control_runs() -> list[dict]:
    """The complete records of :data:`CPU_CONTROL_GRIDS` (the CPU protocol), with the dense baseline of
    :data:`CONTROL_GRIDS` first (a dense model has no gates, so the two protocols' dense runs would be one), in the
    table's order (:func:`table_order`)."""
    dense = [run for grid in CONTROL_GRIDS for run in complete_records(grid) if run["params"]["method"] == "dense"]
    return sorted([*dense, *(run for grid in CPU_CONTROL_GRIDS for run in complete_records(grid))], key=table_order)


def dense_run(runs: list[dict]) -> dict | None:
    """The dense baseline among ``runs``, or None before its record exists."""
    return next((run for run in runs if run["params"]["method"] == "dense"), None)


def densest_run(runs: list[dict]) -> dict | None:
    """The run of highest final L0-density among ``runs`` (None without any): the reference of the error
    cost in a table without a dense run, as :func:`paper_reference_error` takes the paper's."""
    return max(runs, key=lambda run: run["metrics"]["l0_density"] or 1.0, default=None)


def plot_dense_curve(dense: dict) -> plt.Figure:
    """The dense model's test error against epochs: where the schedule ends it."""
    fig, ax = plt.subplots(figsize=(6, 3))
    history = history_frame(dense)
    ax.plot(history["epoch"], history["val_error"], marker=".")
    ax.set(xlabel="epoch", ylabel="test error (%)", ylim=(0, None),
           title=f"dense {dense['params']['model']}, {protocol_of(dense)}")
    ax.grid(alpha=0.3)
    return fig


def layer_runs_at(runs: list[dict], target: float = 0.2) -> list[dict]:
    """Seed 0's layer-wise constrained runs at ``target`` among ``runs`` and in :data:`DUAL_LR_GRID`, by
    dual learning rate: the dual-lr test of the hardest cell."""
    found = [run for run in [*runs, *complete_records(DUAL_LR_GRID)]
             if (run["params"]["method"], run["params"]["grouping"], run["params"]["target"],
                 run["params"]["seed"]) == ("constrained", "layer", target, 0)]
    return sorted(found, key=lambda run: run["params"]["dual_lr"])


def preset_run(runs: list[dict]) -> dict | None:
    """The run among ``runs`` trained at its preset's dual learning rate (the control table's own)."""
    return next((run for run in runs if run["params"]["experiment"] == "cifar10_control"), None)


def plot_gates_lr_histograms(ablation: list[dict], lmbda: float = 0.001) -> list[plt.Figure]:
    """Figure 7 at our protocol: the first gated layer's medians of the penalized ablation runs at
    ``lmbda``, one figure per gates' learning rate."""
    figures = []
    for run in ablation:
        if run["params"]["method"] == "penalized" and run["params"]["lmbda"] == lmbda:
            fig = plot_gate_histograms(run, width=7)
            fig.suptitle(f"gates' learning rate {run['params']['gates_lr']:g}", y=1.05)
            figures.append(fig)
    return figures


def detach_pairs(ablation: list[dict], runs: list[dict]) -> list[dict]:
    """Figure 8 at our protocol: the ablation runs without the stop-gradient of Eq. 13 and seed 0's
    model-wise constrained runs at their targets, with it."""
    undetached = [run for run in ablation if not run["params"]["detach_gates"]]
    targets = {run["params"]["target"] for run in undetached}
    detached = [run for run in runs if (run["params"]["method"], run["params"]["grouping"], run["params"]["seed"])
                == ("constrained", "model", 0) and run["params"]["target"] in targets]
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
        target = undetached["params"]["target"]
        twin = next((run for run in pairs if run["params"]["detach_gates"] and run["params"]["target"] == target),
                    None)
        if twin is not None:
            without, with_ = (100 * (r["metrics"]["l0_density"] - target) for r in (undetached, twin))
            checks.append((f"model-wise target {100 * target:g}%: {without:+.2f} points without the stop-gradient, "
                           f"{with_:+.2f} with it", without < with_ - rules.EFFECT_POINTS))
    return checks


# --------------------------------------------------------------------------- #
# A run's step log and constraints
# --------------------------------------------------------------------------- #

def constraint_names(record: dict) -> list[str]:
    """The names of a constrained run's constraints, in the order of its multipliers: ``model``, or each
    gated block's short name (:func:`short_layer_name`)."""
    if record["params"]["grouping"] == "model":
        return ["model"]
    return [short_layer_name(layer) for layer in record["metrics"]["l0_density_per_layer"]]


def final_gaps(record: dict) -> list[float]:
    """Each constraint's final expected density minus its target, in points (positive: violated)."""
    return [100 * (density - target) for density, target in constrained_densities(record, record["history"][-1])]


def run_label(run: dict) -> str:
    return f"{run['params']['grouping']}-wise {setting(run['params'])}"


# --------------------------------------------------------------------------- #
# The sections of book/results_cifar10.md (report.display_all shows each)
# --------------------------------------------------------------------------- #


# --------------------------------------------------------------------------- #
# The tables and numbers of book/results_cifar10.md
# --------------------------------------------------------------------------- #

def control_table(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`run_rows` as the page shows them: rows named by their condition, :data:`TABLE_COLUMNS`' short names."""
    return rows[list(TABLE_COLUMNS)].rename(columns=TABLE_COLUMNS)


def outcome_numbers(rows: pd.DataFrame) -> dict:
    """The numbers of the page's answer, from :func:`run_rows`: how many constrained runs end with each
    :class:`~paperlib.harness.rules.Outcome` (keys ``on target``, ``under``, ``violated``, ``does not bind``; ``judged``:
    those whose targets bind), the furthest under (``under gap``, ``under run``) and over (``over gap``, ``over
    run``) a target, the penalized runs' lowest and highest density, and each method's lowest and highest cost.

    >>> outcome_numbers(pd.DataFrame(columns=RUN_COLUMNS))["judged"]
    0
    """
    constrained = rows[rows["method"] == "constrained"]
    numbers = {outcome.value: int((constrained["outcome"] == outcome.value).sum()) for outcome in rules.Outcome}
    numbers["judged"] = len(constrained) - numbers[rules.Outcome.DOES_NOT_BIND.value]
    under = constrained[constrained["outcome"] == rules.Outcome.UNDER.value]
    over = constrained[constrained["outcome"] == rules.Outcome.VIOLATED.value]
    if len(under):
        worst = under.loc[under["largest gap (points)"].idxmin()]
        numbers.update({"under gap": float(worst["largest gap (points)"]), "under run": condition(worst)})
    if len(over):
        worst = over.loc[over["over target (points)"].idxmax()]
        numbers.update({"over gap": float(worst["over target (points)"]), "over run": condition(worst)})
    penalized = rows.loc[rows["method"] == "penalized", "L0-density (%)"]
    if len(penalized):
        numbers.update({"penalized lowest": float(penalized.min()), "penalized highest": float(penalized.max())})
    for method in ("constrained", "penalized"):
        costs = rows.loc[rows["method"] == method, "cost (points)"].dropna()
        if len(costs):
            numbers.update({f"{method} cost lowest": float(costs.min()), f"{method} cost highest": float(costs.max())})
    return numbers


def penalty_table(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """The penalized runs' final L0-density (%) by λ_pen (rows, smallest first) and grouping, ours beside the
    paper's (:func:`paper_points`; a row the paper reports as collapsed has none)."""
    table = {}
    for source, frame in (("ours", rows), ("paper", paper)):
        for _, row in frame[frame["method"] == "penalized"].iterrows():
            table.setdefault(f"{row['grouping']}-wise, {source}", {})[row["lmbda"]] = row["L0-density (%)"]
    columns = [f"{g}-wise, {s}" for g in ("model", "layer") for s in ("ours", "paper") if f"{g}-wise, {s}" in table]
    frame = pd.DataFrame(table)[columns].sort_index()
    frame.index = [f"{lmbda:g}" for lmbda in frame.index]
    return frame.rename_axis("λ_pen")


#: The fewest penalized cells on which :func:`transfer_summary` says whether a setting carries over.
TRANSFER_CELLS = 3


def transfer_summary(rows: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Whether a setting means the same density on the paper's model and on ours, by method (rows:
    ``constrained``, ``penalized``): the cells both ran (:func:`transfer_rows`), the median and range of ours
    minus the paper's (points), and ``carries over``: with at least :data:`TRANSFER_CELLS` penalized cells, ✓
    for the targets and ✗ for λ_pen when the penalized median is over :data:`~paperlib.harness.rules.AGREE_POINTS` and
    three times the constrained one, "–" otherwise."""
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


def device_seeds(runs: list[dict]) -> pd.DataFrame:
    """Each constrained setting trained on both devices (rows: :func:`condition`), its seeds side by side
    (columns ``seed 0, CPU``...): final L0-density / final error (%), the nearest check of whether a GPU run
    differs from a CPU run of the same protocol more than a seed does."""
    cells: dict[str, dict[str, str]] = {}
    devices: dict[str, set] = {}
    for run in sorted(runs, key=lambda run: run["params"]["seed"]):
        p, m = run["params"], run["metrics"]
        if p["method"] != "constrained":
            continue
        name = condition(p)
        devices.setdefault(name, set()).add(ran_on(m))
        cells.setdefault(name, {})[f"seed {p['seed']}, {ran_on(m)}"] = (
            f"{100 * m['l0_density']:.2f} / {m['val_error_final']:.2f}")
    both = {name: row for name, row in cells.items() if len(devices[name]) > 1}
    return pd.DataFrame.from_dict(both, orient="index").rename_axis("setting").reset_index()


def epoch_times(runs: list[dict]) -> pd.DataFrame:
    """Measured training time by protocol (:func:`paperlib.harness.protocols.record_protocol`, and model) and device
    (:func:`ran_on`): how many runs, the median and range of their minutes per epoch (:func:`epoch_minutes`,
    evaluation included) and the median minutes per run."""
    frame = pd.DataFrame([{"protocol": f"{protocol_of(r)}, {r['params']['model']}",
                           "ran on": ran_on(r["metrics"]), "epochs": r["metrics"]["epochs_completed"]} for r in runs])
    if frame.empty:
        return pd.DataFrame(columns=["protocol", "ran on", "runs", "min/epoch", "range", "min/run"])
    frame["minutes"] = epoch_minutes(runs)
    rows = []
    for (protocol, device), group in frame.groupby(["protocol", "ran on"], sort=True):
        rows.append({"protocol": protocol, "ran on": device, "runs": len(group),
                     "min/epoch": group["minutes"].median(),
                     "range": f"{group['minutes'].min():.1f}–{group['minutes'].max():.1f}",
                     "min/run": (group["minutes"] * group["epochs"]).median()})
    return pd.DataFrame(rows)


def stability_numbers(rows: pd.DataFrame) -> dict:
    """The numbers of the page's Figure 3 section, from :func:`stability_rows`: how many runs settle, the
    latest settling epoch (its share of training and its run) and the median one, the largest violation
    between first holding and settling, and the runs that never settle with their largest violation in the
    second half."""
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


def missing_runs(grids) -> pd.DataFrame:
    """One row per grid with runs not complete: the grid, how many of its runs are missing and the sweep that
    makes them (it skips the complete ones). Empty when every run is in."""
    rows = []
    for grid in dict.fromkeys(grids):
        found = [folder for _, folder in grid_records(grid)]  # a record of the grid's parameters, or None
        missing = sum(folder is None for folder in found)
        if missing:
            rows.append({"grid": str(grid), "missing": f"{missing} of {len(found)}", "command": sweep_command([grid])})
    return pd.DataFrame(rows, columns=["grid", "missing", "command"])
