"""The intro's summary figure: the paper's central claim (a target sets the density; a penalty does not)
beside ours, constrained and penalized, on MNIST and CIFAR-10."""

import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis import comparison

#: The control tables of the claim, and what each row's marker stands for.
TABLES = {"tab:mlp_control": "MNIST, MLP", "tab:lenet_control": "MNIST, LeNet5",
          "tab:cifar10_control": "CIFAR-10, WideResNet"}
MARKERS = {"MNIST, MLP": "o", "MNIST, LeNet5": "s", "CIFAR-10, WideResNet": "^"}
#: What "ours" ran where it differs from the paper's model (the legend says so).
OUR_MODELS = {"CIFAR-10, WideResNet": "CIFAR-10, WRN-16-1 (CPU protocol)"}
#: The paper in black, ours in one colour per protocol.
COLOURS = {"paper": "black", "ours": "tab:orange"}
DENSITY = "L0-density (%)"


def _setting(label: str) -> tuple[str, float]:
    """``("target", 20.0)`` for ``"20%"``, ``("lmbda", 0.01)`` for ``"λ_pen 0.01"``."""
    if label.startswith("λ_pen"):
        return "lmbda", float(label.split()[1])
    return "target", float(re.fullmatch(r"([\d.]+)%", label).group(1))


def _mean(cell) -> float:
    """A comparison table's cell as a number (NaN where the paper prints none)."""
    return comparison.mean_of(cell) if isinstance(cell, str) and cell.strip() else float("nan")


def claim_points() -> pd.DataFrame:
    """One row per row of the control tables: ``models``, ``method``, ``grouping``, ``setting`` (target in %
    or λ_pen), ``paper`` and ``ours`` (mean final L0-density in %; ours NaN where not run), ``runs`` (ours)
    and ``protocol`` (ours, as the comparison tables word it)."""
    rows = []
    for table, models in TABLES.items():
        found = comparison.compare_table(table, metrics=["l0_density"])
        for (_, row), values in zip(found.iterrows(), found.attrs["values"]):
            kind, setting = _setting(row["target / λ_pen"])
            ours = values.get("l0_density", [])
            rows.append({"models": models, "method": row["method"], "grouping": row["grouping"],
                         "kind": kind, "setting": setting,
                         "paper": _mean(row[f"{DENSITY} paper"]),
                         "ours": sum(ours) / len(ours) if ours else float("nan"),
                         "runs": len(ours), "protocol": row["protocol"]})
    return pd.DataFrame(rows)


def plot_central_claim(points: pd.DataFrame) -> plt.Figure:
    """Left (constrained): the density reached minus the target, against the target; the grey band is
    within 1 point. Right (penalized): the density reached against λ_pen: the same λ_pen lands far apart
    from one model to the next, which is why a penalty must be searched."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4), constrained_layout=True)
    constrained = points[points["kind"] == "target"].assign(
        paper=lambda t: t["paper"] - t["setting"], ours=lambda t: t["ours"] - t["setting"])
    penalized = points[points["kind"] == "lmbda"]
    left.axhspan(-1, 1, color="0.9", zorder=0)
    left.axhline(0, color="0.6", lw=1, zorder=0)
    for models, marker in MARKERS.items():
        for who, colour in COLOURS.items():
            style = dict(color=colour) if who == "ours" else dict(facecolors="none", edgecolors=colour)
            label = f"ours: {OUR_MODELS.get(models, models)}" if who == "ours" else f"paper: {models}"
            for ax, part in ((left, constrained), (right, penalized)):
                mine = part[part["models"] == models]
                ax.scatter(mine["setting"], mine[who], marker=marker, s=42, linewidths=1.2, label=label,
                           zorder=3 if who == "paper" else 2, **style)
    left.set(xlabel="target density (%)", ylabel="density reached − target (points)", xlim=(12, 88),
             title="Constrained: distance to the target")
    right.set(xscale="log", xlabel="penalty coefficient λ_pen", ylabel="density reached (%)", ylim=(0, 100),
              title="Penalized: density reached")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=10)
        ax.title.set_fontsize(12)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=10, frameon=False)
    return fig


def compute_spent(runs_dir) -> pd.DataFrame:
    """The compute behind the book's records: runs and hours (``wall_time_s``) per device kind."""
    rows = {}
    for path in sorted(Path(runs_dir).glob("*/*/metrics.json")):
        metrics = json.loads(path.read_text())
        if "wall_time_s" not in metrics:  # a bisection search's record: its trainings are counted themselves
            continue
        kind = {"cpu": "CPU core (one thread)", "cuda": "GPU (one H100, shared by runs)"}.get(metrics.get("device"),
                                                                                            metrics.get("device"))
        runs, hours = rows.get(kind, (0, 0.0))
        rows[kind] = (runs + 1, hours + metrics["wall_time_s"] / 3600)
    return pd.DataFrame([{"device": kind, "runs": runs, "hours of training": f"{hours:.1f}"}
                         for kind, (runs, hours) in rows.items()])


def summary(claims) -> pd.DataFrame:
    """The reproducibility summary's table: one row per claim, in the order reproduced, partly, not
    reproduced, in progress, not tested; the claim linked to its page, and what was run for it."""
    order = ["reproduced", "partly", "not reproduced", "in progress", "not tested here"]
    rows = [{"verdict": c.verdict, "claim": f'<a href="{c.page}.html{"#" + c.section if c.section else ""}">{c.claim}</a>',
             "what was run": str(c.ran)}
            for c in sorted(claims, key=lambda c: order.index(c.verdict))]
    return pd.DataFrame(rows)


def central_claim_numbers(points: pd.DataFrame) -> dict[str, str]:
    """The numbers the intro's sentences on :func:`plot_central_claim` quote, computed from the same points:
    per dataset, how many constrained rows (ours, mean over seeds) end within a point of their target and the
    largest gap either way; and the widest spread of one λ_pen's densities across the three models."""
    numbers = {}
    constrained = points[(points["kind"] == "target") & points["ours"].notna()]
    for name, rows in (("mnist", constrained[constrained["models"].str.startswith("MNIST")]),
                       ("cifar", constrained[constrained["models"].str.startswith("CIFAR")])):
        gaps = rows["ours"] - rows["setting"]
        numbers[f"{name}_within"] = str(int((gaps.abs() <= 1).sum()))
        numbers[f"{name}_rows"] = str(len(gaps))
        numbers[f"{name}_lowest"] = f"{gaps.min():+.1f}"
        numbers[f"{name}_highest"] = f"{gaps.max():+.1f}"
        numbers[f"{name}_furthest_under"] = f"{max(0.0, -gaps.min()):.1f}"
    penalized = points[(points["kind"] == "lmbda") & points["ours"].notna()]
    spread = penalized.groupby("setting")["ours"].agg(lambda d: d.max() - d.min())
    numbers["penalty_spread"] = f"{spread.max():.0f}"
    numbers["penalty_spread_at"] = f"{spread.idxmax():g}"
    return numbers
