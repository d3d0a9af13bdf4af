"""The intro's summary figure: the paper's central claim (a target sets the density; a penalty does not)
beside ours, constrained and penalized, on MNIST and CIFAR-10."""

import re

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import index, rules
from paperlib.harness.protocols import protocol_name

from analysis import comparison, style

PAPER, CPU = protocol_name("paper"), protocol_name("cpu2", "cifar10")

#: The control tables of the claim, and what each row's marker stands for.
TABLES = {"tab:mlp_control": "MNIST, MLP", "tab:lenet_control": "MNIST, LeNet5",
          "tab:cifar10_control": "CIFAR-10, WideResNet"}
MARKERS = {"MNIST, MLP": "o", "MNIST, LeNet5": "s", "CIFAR-10, WideResNet": "^"}
#: Our records of each: the index query (:func:`paperlib.harness.index.select`) beside the paper's rows.
OURS = {"MNIST, MLP": dict(experiment="mlp_control", protocol=PAPER, variant="", model="mlp"),
        "MNIST, LeNet5": dict(experiment="lenet_control", protocol=PAPER, variant="", model="lenet5"),
        "CIFAR-10, WideResNet": dict(experiment=("cifar10", "cifar10_cpu2"), protocol=CPU, variant="",
                                     model="wrn-16-1")}
#: What "ours" ran where it differs from the paper's model (the legend says so).
OUR_MODELS = {"CIFAR-10, WideResNet": f"CIFAR-10, WideResNet-16-1 ({CPU})"}
#: The paper and ours, in the book's one style for each (:mod:`analysis.style`).
COLOURS = {"paper": style.PAPER["color"], "ours": style.OURS["color"]}
DENSITY = "L0-density (%)"


def _setting(label: str) -> tuple[str, float]:
    """``("target", 20.0)`` for ``"20%"``, ``("lmbda", 0.01)`` for ``"λ_pen 0.01"``."""
    if label.startswith("λ_pen"):
        return "lmbda", float(label.split()[1])
    return "target", float(re.fullmatch(r"([\d.]+)%", label).group(1))


def claim_points(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per constrained or penalized row of the control tables: the setting (target in % or λ_pen), the
    paper's and our mean final L0-density (%; NaN where not run), our runs and protocol (:data:`OURS`), and for a
    constrained row its outcome by the book's rule (:func:`paperlib.harness.rules.judge_cell`, every constraint)
    and ``gap``, the constraint furthest from its target (points)."""
    frame = index.record_index() if frame is None else frame
    free = rules.free_gates_records()
    rows = []
    for table, models in TABLES.items():
        printed = comparison.compare_table(table, metrics=["l0_density"])
        for _, row in printed[printed["method"].isin(["constrained", "penalized"])].iterrows():
            kind, setting = _setting(row["target / λ_pen"])
            mine = index.select(frame, **OURS[models], method=row["method"], grouping=row["grouping"],
                                **{kind: setting / 100 if kind == "target" else setting})
            point = {"models": models, "method": row["method"], "grouping": row["grouping"], "kind": kind,
                     "setting": setting, "paper": comparison.mean_of(row[f"{DENSITY} paper"]),
                     "ours": 100 * mine["l0_density"].mean() if len(mine) else float("nan"), "runs": len(mine),
                     "protocol": OURS[models]["protocol"], "outcome": None, "gap": float("nan")}
            if kind == "target" and len(mine):
                judged = rules.judge_cell(index.load(mine), free)
                point.update(outcome=judged.outcome.value, gap=max(judged.gaps, key=abs))
            rows.append(point)
    return pd.DataFrame(rows)


def plot_central_claim(points: pd.DataFrame) -> plt.Figure:
    """Left: the density reached minus the target against the target (ours: the constraint furthest from it; the
    paper's: the model, all it prints), a band within 1 point. Right: the density against λ_pen, which lands far
    apart from one model to the next: a penalty must be searched."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.8), constrained_layout=True)
    constrained = points[points["kind"] == "target"].assign(paper=lambda t: t["paper"] - t["setting"],
                                                            ours=lambda t: t["gap"])
    penalized = points[points["kind"] == "lmbda"]
    left.axhspan(-1, 1, color="0.9", zorder=0)
    left.axhline(0, color="0.6", lw=1, zorder=0)
    for models, marker in MARKERS.items():
        for who, colour in COLOURS.items():
            look = dict(color=colour) if who == "ours" else dict(facecolors="none", edgecolors=colour)
            label = f"ours: {OUR_MODELS.get(models, models)}" if who == "ours" else f"paper: {models}"
            for ax, part in ((left, constrained), (right, penalized)):
                mine = part[part["models"] == models]
                ax.scatter(mine["setting"], mine[who], marker=marker, s=42, linewidths=1.2, label=label,
                           zorder=3 if who == "paper" else 2, **look)
    left.set(xlabel="target density (%)", ylabel="density reached − target (points)", xlim=(12, 88),
             title="Constrained: distance to the target")
    right.set(xscale="log", xlabel="penalty coefficient λ_pen", ylabel="density reached (%)", ylim=(0, 100),
              title="Penalized: density reached")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=13)
        ax.title.set_fontsize(14)
        ax.xaxis.label.set_fontsize(13)
        ax.yaxis.label.set_fontsize(13)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=12, frameon=False)
    return fig


#: How the compute table names the index's devices.
DEVICE_KINDS = {"CPU": "CPU core (one thread)", "GPU": "GPU (one H100, shared by runs)"}


def compute_spent(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The compute behind the book's records: runs and hours of training per device kind."""
    frame = index.record_index() if frame is None else frame
    spent = frame.groupby(frame["device"].map(lambda device: DEVICE_KINDS.get(device, device)), sort=False)
    return pd.DataFrame([{"device": kind, "runs": len(rows), "hours of training": f"{hours:.1f}"}
                         for kind, rows in spent for hours in [rows["wall_time_s"].sum() / 3600]])


def first_screen(found) -> pd.DataFrame:
    """The first screen's table: each claim (central ones first), its verdict at our scale and at the paper's."""
    from analysis import verdict

    table = verdict.table(found, central_first=True)
    return table[["claim", "verdict, our scale", "verdict there"]].rename(
        columns={"verdict there": "verdict at the paper's scale"})


def central_claim_numbers(points: pd.DataFrame) -> dict[str, str]:
    """The numbers the intro quotes from the same points: per dataset (and grouping) the binding constrained rows
    on target of how many, the violated ones, the extreme gaps; the widest spread of one λ_pen's densities."""
    numbers = {}
    constrained = points[(points["kind"] == "target") & points["outcome"].notna()]
    for name, rows in (("mnist", constrained[constrained["models"].str.startswith("MNIST")]),
                       ("cifar", constrained[constrained["models"].str.startswith("CIFAR")])):
        binding = rows[rows["outcome"] != rules.Outcome.DOES_NOT_BIND.value]
        for part, mine in (("", binding), *((f"_{g}", binding[binding["grouping"] == g]) for g in ("model", "layer"))):
            numbers[f"{name}{part}_on_target"] = str(int((mine["outcome"] == rules.Outcome.ON_TARGET.value).sum()))
            numbers[f"{name}{part}_binding"] = str(len(mine))
        over = rows[rows["outcome"] == rules.Outcome.VIOLATED.value]
        numbers[f"{name}_violated"] = str(len(over))
        paper_over = over["paper"] - over["setting"] > rules.FEASIBLE_POINTS
        numbers[f"{name}_violated_paper_over"] = str(int(paper_over.sum()))
        numbers[f"{name}_lowest"] = f"{rows['gap'].min():+.1f}"
        numbers[f"{name}_highest"] = f"{rows['gap'].max():+.1f}"
    penalized = points[(points["kind"] == "lmbda") & points["ours"].notna()]
    spread = penalized.groupby("setting")["ours"].agg(lambda d: d.max() - d.min())
    numbers["penalty_spread"] = f"{spread.max():.0f}"
    numbers["penalty_spread_at"] = f"{spread.idxmax():g}"
    return numbers
