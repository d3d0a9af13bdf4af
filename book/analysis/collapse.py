"""The LeNet5 layer-wise collapse (book/lenet5_collapse.md): two LeNet5 runs of the short protocol at its
superseded settings that ended far worse than they had been during training, read from their records.

The runs (:data:`VARIANTS`) are found in the record index by their parameters and protocol (:func:`find`), never
by folder. ``*_numbers`` give the page's prose its numbers, formatted as the page prints them (numbers, never
clauses: the page writes the sentences).
"""

import json
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from paperlib.harness import index, plots, protocols, studies
from paperlib.method import gates
from paperlib.paper.paper_results import paper_cell

from . import report, style

LAYERS = ("conv1", "conv2", "fc1", "fc2")
#: The layer-wise targets of Table 1's LeNet5 cell, for :data:`LAYERS`.
TABLE1_TARGETS = [0.5, 0.3, 0.7, 0.1]
#: The error (%) of a model that always predicts the digit 1: 1 − 1,135/10,000 on MNIST's test set.
PREDICTS_ONE = 100 * (1 - 1135 / 10_000)
#: The epoch from which a run's error counts as "late" (after the first fast descent of training).
LATE_EPOCH = 10
#: fc2's multiplier is the fourth constraint's (``lambda_3`` in the logs).
FC2 = LAYERS.index("fc2")


@dataclass(frozen=True)
class Variant:
    """A run of the investigation: its label on the page, the grid that makes it (None: made with
    ``python -m paperlib.harness.run``) and the record index's values that single out its record."""

    label: str
    grid: str | None
    params: dict


_COLLAPSE_GRID, = studies.grids("lenet5_collapse")
_TABLE1_PAPER, _TABLE1_CPU = studies.grids("tab:mnist")
_CONTROL_PAPER = studies.grids("tab:lenet_control", preset="paper")[0]
_CONTROL_CPU, = studies.grids("tab:lenet_control", preset="cpu")
#: The protocols as the page's tables and figures name them (:mod:`paperlib.harness.protocols`).
SHORT, PAPER = protocols.protocol_name("cpu", "mnist"), protocols.protocol_name("paper")
SHORT_SUPERSEDED = f"{SHORT}, {protocols.SUPERSEDED}"
_LAYER_WISE = {"method": "constrained", "grouping": "layer"}
_HAND_MADE = {"experiment": "lenet5_collapse", "dataset": "mnist", "model": "lenet5", "preset": "cpu", **_LAYER_WISE}
_COLLAPSE = {"experiment": "lenet5_collapse", "protocol": SHORT, "target": TABLE1_TARGETS}
_TABLE1 = {"experiment": "mnist", "model": "lenet5", **_LAYER_WISE}
_CONTROL = {"experiment": "lenet_control", "model": "lenet5", **_LAYER_WISE}

#: Every run of the investigation, by its name in this module.
VARIANTS = {
    "old": Variant(f"{SHORT_SUPERSEDED} (Table 1 record)", _TABLE1_CPU, {**_TABLE1, "protocol": SHORT_SUPERSEDED}),
    "fast": Variant("dual lr 3e-3, clamped", _COLLAPSE_GRID, {**_COLLAPSE, "dual_lr": 3e-3, "clamp_log_alpha": True}),
    "fast_unclamped": Variant("dual lr 3e-3, unclamped", _COLLAPSE_GRID,
                              {**_COLLAPSE, "dual_lr": 3e-3, "clamp_log_alpha": False}),
    "dual_1e3": Variant("dual lr 1e-3 (Table 5), clamped", _COLLAPSE_GRID,
                        {**_COLLAPSE, "dual_lr": 1e-3, "clamp_log_alpha": True}),
    "slow_clamped": Variant("dual lr 1e-4, clamped", _COLLAPSE_GRID,
                            {**_COLLAPSE, "dual_lr": 1e-4, "clamp_log_alpha": True}),
    "slow": Variant(f"dual lr 1e-4, unclamped ({SHORT})", _COLLAPSE_GRID,
                    {**_COLLAPSE, "dual_lr": 1e-4, "clamp_log_alpha": False}),
    "paper": Variant(f"{PAPER} (200 epochs, dual lr 1e-4, unclamped)", _TABLE1_PAPER,
                     {**_TABLE1, "protocol": PAPER, "variant": "", "seed": 0}),
    "control_old": Variant(f"20%, {SHORT_SUPERSEDED}", _CONTROL_CPU,
                           {**_CONTROL, "protocol": SHORT_SUPERSEDED, "target": 0.2}),
    "control_slow": Variant(f"20%, {SHORT}", None, {**_HAND_MADE, "target": 0.2}),
    "control_35": Variant(f"35%, {SHORT_SUPERSEDED}", _CONTROL_CPU,
                          {**_CONTROL, "protocol": SHORT_SUPERSEDED, "target": 0.35}),
    "control_paper": Variant(f"20%, {PAPER}", _CONTROL_PAPER,
                             {**_CONTROL, "protocol": PAPER, "variant": "", "target": 0.2, "seed": 0}),
    "every": Variant("dual lr 3e-3, every epoch", None,
                     {**_HAND_MADE, "target": TABLE1_TARGETS, "dual_lr": 3e-3, "clamp_log_alpha": True, "epochs": 14,
                      "histogram_epochs": list(range(15))}),
}
#: The rows of the page's first table (the Table 1 cell) and second (the layer-wise cells of Table 11).
TABLE1 = ("old", "fast", "fast_unclamped", "dual_1e3", "slow_clamped", "slow", "paper")
CONTROL = ("control_old", "control_slow", "control_35", "control_paper")
#: The runs that :func:`plot_descent` and :func:`plot_error_against_density` draw.
DESCENT = ("fast", "fast_unclamped", "dual_1e3", "slow")
ERROR_AGAINST_DENSITY = ("paper", "fast", "dual_1e3", "slow")
#: The grids of LeNet5 runs at the paper's protocol: Table 1, Table 11, the dual restarts, the gate histograms.
PAPER_GRIDS = [studies.grids(name, preset="paper")[0]
               for name in ("tab:mnist", "tab:lenet_control", "fig:dual_restarts", "fig:mnist_gate_histograms")]


# --- the runs and their records ------------------------------------------------------------------

def find(variant: Variant, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The row of the record index (``frame``, default every record) whose columns have the variant's values;
    empty where it has no complete record yet."""
    found = index.select(index.record_index() if frame is None else frame, **variant.params)
    if len(found) > 1:
        raise ValueError(f"{len(found)} records have {variant.params}; the variant {variant.label!r} needs one")
    return found


def command(variant: Variant) -> str:
    """The command that makes a run's record: the sweep of its grid, or ``python -m paperlib.harness.run``."""
    if variant.grid is not None:
        return f"python -m paperlib.harness.sweeps {variant.grid}"
    arguments = (f"{name}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"
                 for name, value in variant.params.items())
    return "python -m paperlib.harness.run " + " ".join(arguments)


def load(variant: Variant, frame: pd.DataFrame | None = None) -> dict | None:
    """A run's record (:func:`find`), or None when it has none."""
    found = find(variant, frame)
    return index.load(found)[0] if len(found) else None


def load_runs() -> dict[str, dict | None]:
    """The record of every run of :data:`VARIANTS` by name; None for a run without a complete record."""
    frame = index.record_index()
    return {name: load(variant, frame) for name, variant in VARIANTS.items()}


def missing_runs(runs: dict[str, dict | None], names: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One row per run of ``names`` (default: every run) without a complete record, and its command."""
    rows = [{"what": VARIANTS[name].label, "command": command(VARIANTS[name])}
            for name in (names or tuple(runs)) if runs[name] is None]
    return pd.DataFrame(rows, columns=["what", "command"])


def _record(runs: dict[str, dict | None], name: str) -> dict:
    """The record of the run ``name``; an error naming the command that makes it where it has none."""
    if runs[name] is None:
        variant = VARIANTS[name]
        raise FileNotFoundError(f"no complete record of the run {variant.label!r}: `{command(variant)}`")
    return runs[name]


# --- what one record says ------------------------------------------------------------------------

def by_epoch(run: dict) -> pd.DataFrame:
    """A run's history, numeric, indexed by epoch (epoch 0: at initialisation)."""
    return plots.history_frame(run).set_index("epoch")


def layers(run: dict) -> pd.DataFrame:
    """Per layer (the index): final expected density and test-time share of groups kept
    (:func:`~analysis.report.layer_densities`)."""
    return report.layer_densities(run).set_index("layer")


def _first(found: pd.Index, run: dict, what: str):
    """The first of ``found``; an error saying the run never did ``what`` where it is empty."""
    if found.empty:
        raise ValueError(f"{what} in {run['params']['run_name']}")
    return found[0]


def crossing_epoch(run: dict, layer: str = "fc2") -> int:
    """The first epoch that ends with the layer's expected density below 50%: where a layer of equal gates would
    lose them all at test time (the median of Eq. 9 is 0 where P(z ≠ 0) < ½)."""
    density = by_epoch(run)[f"density[{layer}]"]
    return _first(density.index[density < 0.5], run, f"{layer}'s expected density never went below 50%")


def crossing_epochs(run: dict) -> dict[str, int]:
    """:func:`crossing_epoch` of each layer."""
    return {layer: int(crossing_epoch(run, layer)) for layer in LAYERS}


def _lambda_at_crossing(run: dict) -> float:
    """fc2's multiplier at the end of the epoch of its :func:`crossing_epoch`."""
    return by_epoch(run).loc[crossing_epoch(run), f"lambda_{FC2}"]


def largest_multiplier(run: dict, index: int = FC2) -> float:
    """The largest multiplier of constraint ``index`` (3: fc2) over the run, from its per-step log."""
    return plots.steps_frame(run)[f"lambda_{index}"].max()


def peak_error(run: dict) -> tuple[float, int]:
    """The worst validation error (%) from :data:`LATE_EPOCH` on, and its epoch (the first, if tied)."""
    errors = by_epoch(run).loc[LATE_EPOCH:, "val_error"]
    return errors.max(), errors.idxmax()


def plateau(run: dict) -> pd.Series:
    """The errors (%) of the epochs at most one test image (0.01%) from :data:`PREDICTS_ONE`: where the
    test-time model predicts the digit 1 for every image."""
    errors = by_epoch(run)["val_error"]
    return errors[(errors - PREDICTS_ONE).abs().mul(100).round() <= 1]


def first_epoch_above(run: dict, error: float = 10.0) -> int:
    """The first epoch after epoch 1 (every run's first is) whose validation error is above ``error`` (%)."""
    errors = by_epoch(run).loc[2:, "val_error"]
    return _first(errors.index[errors > error], run, f"never had an error above {error:g}% after epoch 1")


def first_restart(run: dict, index: int = FC2) -> int:
    """The first epoch that ends with constraint ``index``'s multiplier lower than the epoch before: a dual
    restart (Eq. 6), the multiplier set to zero once its constraint holds."""
    lambdas = by_epoch(run)[f"lambda_{index}"]
    return _first(lambdas.index[lambdas.diff() < 0], run, f"the multiplier of constraint {index} never fell")


def first_epoch_at_target(run: dict, index: int = FC2) -> float:
    """The (fractional) epoch of the first logged step with constraint ``index`` at or below its target."""
    steps = plots.steps_frame(run)
    at_target = steps.loc[steps[f"constrained_density_{index}"] <= run["params"]["target"][index], "epoch"]
    return _first(pd.Index(at_target), run, f"constraint {index} never reached its target")


def medians(run: dict, epoch: int | str | None = None, layer: str = "fc2") -> np.ndarray:
    """The test-time gate medians (Eq. 9) of a layer at a saved epoch (None: the last)."""
    return np.array(run["gate_medians"][str(saved_epochs(run)[-1] if epoch is None else epoch)][layer])


def saved_epochs(run: dict) -> list[int]:
    """The epochs at which a run saved its gate medians, in order."""
    return sorted(int(epoch) for epoch in run["gate_medians"])


def kept_share(run: dict, epoch: int | str, layer: str = "fc2") -> float:
    """The share (%) of a layer's gates with a non-zero median at a saved epoch: the groups the purged model keeps."""
    return 100 * np.mean(medians(run, epoch, layer) > 0)


def prob_from_medians(values) -> np.ndarray:
    """P(z ≠ 0) of gates from their medians: Eq. 9 inverted to log α, then Eq. 8. Exact for a fractional
    median; a median of 0 gives ½ and one of 1 gives 0.96, the bounds of P(z ≠ 0) for such gates."""
    stretched = (torch.tensor(values, dtype=torch.float64) - gates.GAMMA) / (gates.ZETA - gates.GAMMA)
    return gates.prob_active(gates.BETA * torch.logit(stretched)).numpy()


def zero_median_gates(run: dict, layer: str = "fc2") -> dict:
    """How much of a layer's final expected density sits on gates whose median is 0 (dropped at test time):
    their number, share (%) of the expected density and mean P(z ≠ 0), and the layer's largest P(z ≠ 0).
    The expected density is the mean P(z ≠ 0) (Eq. 8), so the zero-median gates carry the total less what the
    fractional and open medians give exactly (:func:`prob_from_medians`)."""
    values = medians(run, layer=layer)
    prob, zero = prob_from_medians(values), values == 0
    total = len(values) * run["metrics"]["l0_density_per_layer"][layer]  # the sum of P(z ≠ 0) over the gates
    on_zero = total - prob[~zero].sum()
    return {"gates": zero.sum(), "share (%)": 100 * on_zero / total, "mean P": on_zero / zero.sum(),
            "largest P": prob.max()}


#: The percentiles of :func:`median_band`.
PERCENTILES = [5, 25, 50, 75, 95]


def median_band(run: dict, layer: str = "fc2") -> pd.DataFrame:
    """The :data:`PERCENTILES` of a layer's gate medians at every saved epoch (rows: epochs)."""
    return pd.DataFrame({epoch: np.percentile(medians(run, epoch, layer), PERCENTILES)
                         for epoch in saved_epochs(run)}, index=PERCENTILES).T


def band_drops(band: pd.DataFrame, from_epoch: int, percentiles=(50, 95)) -> pd.Series:
    """How far each of these percentiles of :func:`median_band` falls per epoch from ``from_epoch`` on, over the
    epochs that end with it still above 0."""
    later = band.loc[from_epoch:]
    return pd.concat([-later[q].diff()[later[q] > 0] for q in percentiles]).dropna()


# --- tables and figures --------------------------------------------------------------------------

def variant_row(name: str, run: dict | None) -> dict:
    """A run's row: dual learning rate and clamp, errors (final, best, peak from :data:`LATE_EPOCH`), expected /
    test-time density per layer ("conv1 (%)": "50.0 / 48.0"), final multipliers; "not run" without a record."""
    label = VARIANTS[name].label
    if run is None:
        return {"variant": f"{label}: not run"}
    metrics, params = run["metrics"], run["params"]
    peak, peak_epoch = peak_error(run)
    kept = layers(run)
    # records made before the clamp's field existed always clamped (paperlib/training.py at their commit)
    clamped = "clamped" if params.get("clamp_log_alpha", True) else "unclamped"
    row = {"variant": report.notebook_link(run["path"], label) or label,
           "dual lr": f"{params['dual_lr']:g}, {clamped}",
           "epochs": metrics["epochs_completed"],
           "val. error final (%)": metrics["val_error_final"], "val. error best (%)": metrics["val_error_best"],
           f"peak error from epoch {LATE_EPOCH} (%)": f"{peak:.1f} (ep. {peak_epoch:.0f})"}
    for layer in LAYERS:
        row[f"{layer} (%)"] = (f"{kept.loc[layer, 'expected L0-density (%)']:.1f} / "
                               f"{kept.loc[layer, 'groups kept at test time (%)']:.1f}")
    row["final λ"] = ", ".join(f"{v:.3g}" for v in metrics["multipliers_final"])
    return row


def variant_table(runs: dict[str, dict | None], names: tuple[str, ...]) -> pd.DataFrame:
    """One :func:`variant_row` per run; ``attrs["command"]`` (the caption) makes the rows without a record."""
    table = pd.DataFrame([variant_row(name, runs[name]) for name in names])
    missing = [command(VARIANTS[name]) for name in names if runs[name] is None]
    if missing:
        table.attrs["command"] = "; ".join(dict.fromkeys(missing))
    return table


def plot_descent(runs: dict[str, dict | None]) -> plt.Figure:
    """The runs of :data:`DESCENT` against epochs: fc2's expected density (lines) and test-time share kept
    (circles), fc2's multiplier, and the test-time error; a run without a record is left out."""
    fig, grid = plt.subplots(2, 2, figsize=(7, 4.7))
    axes = grid.flat
    for i, name in enumerate(DESCENT):
        run = runs[name]
        if run is None:
            continue
        history, steps = by_epoch(run), plots.steps_frame(run)
        color = f"C{i}"
        dashes = "--" if name == "fast_unclamped" else "-"  # it lies on top of the clamped run
        axes[0].plot(history.index, 100 * history["density[fc2]"], color=color, ls=dashes, label=VARIANTS[name].label)
        epochs = saved_epochs(run)
        axes[0].plot(epochs, [kept_share(run, epoch) for epoch in epochs],
                     ls="none", marker="o", mfc="none", color=color, ms=7)
        axes[1].plot(steps["epoch"], steps[f"lambda_{FC2}"], color=color, ls=dashes, lw=1)
        axes[2].plot(history.index[1:], history["val_error"].iloc[1:], color=color, ls=dashes)
    axes[0].axhline(50, color="k", lw=0.8, ls=":")
    axes[0].axhline(10, color="k", lw=0.8, ls="--")
    axes[0].set(ylabel="fc2 density (%)", ylim=(0, 100))
    axes[0].set_title("fc2: expected (lines), test-time (○)", fontsize=9)
    axes[0].annotate("½ (equal gates)", (40, 51), ha="right", va="bottom", fontsize=9)
    axes[0].annotate("target", (0, 11), ha="left", va="bottom", fontsize=9)
    axes[1].set(ylabel="λ of fc2")
    axes[1].set_title("fc2's multiplier", fontsize=9)
    axes[2].set(ylabel="test error (%)", yscale="log")
    axes[2].set_title("test-time model's error", fontsize=9)
    for ax in axes[:3]:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[3].axis("off")
    axes[3].legend(*axes[0].get_legend_handles_labels(), loc="center", fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_error_against_density(runs: dict[str, dict | None]) -> plt.Figure:
    """Each epoch's error against fc2's expected density for the runs of :data:`ERROR_AGAINST_DENSITY`, the
    paper-protocol run drawn thick under the others; a run without a record is left out."""
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for name, color, width in zip(ERROR_AGAINST_DENSITY, ("C4", "C0", "C2", "C3"), (2.5, 0.8, 0.8, 0.8)):
        run = runs[name]
        if run is None:
            continue
        history = by_epoch(run).iloc[1:]
        ax.plot(100 * history["density[fc2]"], history["val_error"], color=color, marker=".", ms=3, lw=width,
                label=VARIANTS[name].label if name == "paper" else f"{VARIANTS[name].label}, {len(history)} epochs")
    ax.axvline(50, color="k", lw=0.8, ls=":")
    ax.axvline(10, color="k", lw=0.8, ls="--")
    ax.set(xlabel="fc2 expected density (%), decreasing as training goes on", ylabel="validation error (%)",
           yscale="log", xlim=(88, 0), ylim=(0.15, 120))
    ax.grid(alpha=0.3)
    style.legend_below(fig, ax, ncol=1, bottom=0.25)
    return fig


def _plot_median_band(ax: plt.Axes, run: dict) -> None:
    """fc2's gate medians at every saved epoch (jittered dots), how many are 0 (red), and the error (black)."""
    rng = np.random.default_rng(0)
    history = by_epoch(run)
    for epoch in range(int(history.index.max()) + 1):
        values = medians(run, epoch)
        ax.scatter(epoch + rng.uniform(-0.3, 0.3, len(values)), values, s=2, alpha=0.4, color="C0")
        ax.annotate(f"{(values == 0).sum()}", (epoch, -0.07), ha="center", fontsize=9, color="C3")
    error = ax.twinx()
    error.plot(history.index[1:], history["val_error"].iloc[1:], color="k", lw=1)
    error.set(yscale="log", ylabel="test error (%), black")
    ax.set(xlabel="epoch", ylabel="median of fc2's gates", ylim=(-0.1, 0.6))
    ax.set_title("dual lr 3e-3: fc2's 500 gate medians (red: how many are 0)", fontsize=9)


#: The runs of the right panel of :func:`plot_fc2_medians`: legend, marker, colour and the epochs named.
_KEPT_AGAINST_EXPECTED = (("every", "dual lr 3e-3, every epoch", "o", "C0", (7, 10, 12, 14)),
                          ("slow", f"dual lr 1e-4 ({SHORT})", "s", "C3", (20, 40)),
                          ("paper", f"{PAPER}, 200 epochs", "^", "C4", (200,)))


def _plot_kept_against_expected(ax: plt.Axes, runs: dict[str, dict | None]) -> None:
    """fc2's test-time share of gates kept against its expected density at the saved epochs, beside the
    lines of decided gates (the diagonal) and of equal gates (a step at 50%)."""
    for name, label, marker, color, named in _KEPT_AGAINST_EXPECTED:
        run = runs[name]
        if run is None:
            continue
        density = 100 * by_epoch(run)["density[fc2]"]
        epochs = saved_epochs(run)
        points = [(density.loc[epoch], kept_share(run, epoch)) for epoch in epochs]
        ax.plot(*zip(*points), marker=marker, color=color, ls="-" if name == "every" else ":", label=label)
        for epoch, point in zip(epochs, points):
            if epoch in named:
                ax.annotate(f"ep. {epoch}", point, textcoords="offset points",
                            xytext=(4, -10 if name == "every" else 4), fontsize=9, color=color)
    ax.plot([0, 100], [0, 100], color="k", lw=0.8, ls="--", label="decided gates (0 or 1)")
    ax.plot([0, 50, 50, 100], [0, 0, 100, 100], color="grey", lw=0.8, label="all gates equal")
    ax.set(xlabel="fc2 expected density (%)", ylabel="fc2 gates kept at test time (%)",
           xlim=(100, 0), ylim=(-3, 103))
    ax.set_title("fc2: test-time against expected density", fontsize=9)
    ax.legend(fontsize=9, loc="lower left")


def plot_fc2_medians(runs: dict[str, dict | None]) -> plt.Figure:
    """fc2's gates epoch by epoch in the run that saved them every epoch (left), and fc2's test-time against
    expected density in the runs of :data:`_KEPT_AGAINST_EXPECTED` (right); a run without a record is left out."""
    fig, axes = plt.subplots(2, 1, figsize=(7, 5.8))
    if runs["every"] is None:
        axes[0].text(0.5, 0.5, f"no record of {VARIANTS['every'].label}", transform=axes[0].transAxes,
                     ha="center", color="0.4")
    else:
        _plot_median_band(axes[0], runs["every"])
    _plot_kept_against_expected(axes[1], runs)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- the numbers of the page's prose, as it prints them ------------------------------------------

_EXPECTED, _KEPT = "expected L0-density (%)", "groups kept at test time (%)"


def _f(value, digits: int = 1) -> str:
    return f"{value:.{digits}f}"


def _just_above(value: float, digits: int) -> str:
    """The smallest number with this many decimals that is above ``value`` ("stays below 1.9%")."""
    return _f((np.floor(value * 10**digits) + 1) / 10**digits, digits)


def _layer(run: dict, layer: str, column: str = _EXPECTED, digits: int = 1) -> str:
    return _f(layers(run).loc[layer, column], digits)


def _plateau_numbers(name: str, run: dict) -> dict[str, str]:
    """The errors of :func:`plateau` (one value, or a range) and its first and last epochs."""
    errors = plateau(run)
    low, high = _f(errors.min(), 2), _f(errors.max(), 2)
    return {f"{name}_errors": low if low == high else f"{low} to {high}",
            f"{name}_first": _f(errors.index.min(), 0), f"{name}_last": _f(errors.index.max(), 0)}


def _layer_numbers(name: str, run: dict) -> dict[str, str]:
    """Every layer's final expected density and test-time share of groups kept, conv1 / conv2 / fc1 / fc2."""
    kept = layers(run)
    return {f"{name}_expected": " / ".join(_f(v) for v in kept[_EXPECTED]),
            f"{name}_kept": " / ".join(f"{round(v, 1):g}" for v in kept[_KEPT])}


def intro_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """The introduction's: best and final error of the two collapsed records."""
    return {f"{name}_{which}": _f(_record(runs, variant)["metrics"][f"val_error_{which}"])
            for name, variant in (("table1", "old"), ("control", "control_old")) for which in ("best", "final")}


def experiment_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"The experiments": final errors, the 10⁻³ run's peak, how low the 10⁻⁴ runs stay, fc2's and fc1's
    expected against test-time densities."""
    fast, dual_1e3, paper = (_record(runs, name) for name in ("fast", "dual_1e3", "paper"))
    slow_runs = [_record(runs, name) for name in ("slow_clamped", "slow", "paper")]
    peak, peak_epoch = peak_error(dual_1e3)
    return {"fast_final": _f(fast["metrics"]["val_error_final"]),
            "fast_unclamped_final": _f(_record(runs, "fast_unclamped")["metrics"]["val_error_final"]),
            "fast_architecture": "-".join(map(str, fast["metrics"]["pruned_architecture"])),
            "slow_clamped_final": _f(slow_runs[0]["metrics"]["val_error_final"], 2),
            "slow_final": _f(slow_runs[1]["metrics"]["val_error_final"], 2),
            "dual_1e3_peak": _f(peak), "dual_1e3_peak_epoch": _f(peak_epoch, 0),
            "dual_1e3_final": _f(dual_1e3["metrics"]["val_error_final"], 2),
            "slow_below": _just_above(max(peak_error(run)[0] for run in slow_runs), 1),
            **{f"{name}_fc2_{what}": _layer(run, "fc2", column) for name, run in (("fast", fast), ("paper", paper))
               for what, column in (("expected", _EXPECTED), ("kept_pct", _KEPT))},
            "fast_fc2_kept": layers(fast).loc["fc2", "groups kept"],
            "paper_fc2_kept_count": layers(paper).loc["fc2", "groups kept"].split()[0],
            "fast_fc1_kept_pct": _layer(fast, "fc1", _KEPT, 0), "fast_fc1_expected": _layer(fast, "fc1", digits=0)}


def jump_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"When the error jumps": the clamped 3·10⁻³ run's fc2 density and error at the epochs the prose names, its
    plateau at :data:`PREDICTS_ONE`, when the error first passes 10% at 3·10⁻³ and 10⁻³, and the multipliers
    and fc2's crossing of 50% at 10⁻⁴."""
    fast, dual_1e3, slow, paper = (_record(runs, name) for name in ("fast", "dual_1e3", "slow", "paper"))
    history, restart = by_epoch(fast), first_restart(fast)
    fc2 = 100 * history["density[fc2]"]
    return {"fast_max_lambda": _f(largest_multiplier(fast)), "fast_fc2_at_6": _f(fc2.loc[6], 0),
            "fast_fc2_lowest": _f(fc2.loc[restart - 1], 0),  # the epoch before the restart
            "fast_lowest_epoch": _f(restart - 1, 0),
            **{f"jump_error_{epoch}": _f(history.loc[epoch, "val_error"], digits)
               for epoch, digits in ((10, 1), (11, 0), (12, 0), (13, 1))},
            **{f"jump_fc2_{epoch}": _f(fc2.loc[epoch]) for epoch in (10, 11, 13)},
            **_plateau_numbers("plateau", fast),
            "fast_fc2_at_20": _f(fc2.loc[20]), "fast_open_at_20": str((medians(fast, 20) > 0).sum()),
            "fast_jump_epoch": _f(first_epoch_above(fast), 0),
            "dual_1e3_jump_epoch": _f(first_epoch_above(dual_1e3), 0),
            "dual_1e3_delay": _f(first_epoch_above(dual_1e3) - first_epoch_above(fast), 0),
            "slow_lambda_below": _just_above(max(largest_multiplier(run)
                                                 for run in (_record(runs, "slow_clamped"), slow)), 2),
            "paper_max_lambda": _f(largest_multiplier(paper), 2), "slow_crossing": _f(crossing_epoch(slow), 0),
            "slow_crossing_lambda": _f(_lambda_at_crossing(slow), 2)}


def gate_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"fc2's gates, epoch by epoch": the band of fc2's medians in the run that saved them every epoch (its width
    at epochs 7 and 8, how fast it falls from epoch 6, its zeros), and the spread of the medians at 3·10⁻³ and
    10⁻⁴ at the expected density of the 10⁻⁴ run's epoch 20."""
    every, slow = _record(runs, "every"), _record(runs, "slow")
    band = median_band(every)
    width, drops = band.loc[[7, 8], 95] - band.loc[[7, 8], 5], band_drops(band, from_epoch=6)
    lambdas = by_epoch(every).loc[7:12, f"lambda_{FC2}"]  # fc2's multiplier over the epochs of those falls
    slow_density = by_epoch(slow).loc[20, "density[fc2]"]
    matched = (by_epoch(every)["density[fc2]"] - slow_density).abs().idxmin()  # the epoch closest to it
    numbers = {"band_width": _f(width.mean()), "band_drops": f"{drops.min():.2f} to {drops.max():.2f}",
               "band_lambdas": f"{lambdas.min():.0f} to {lambdas.max():.0f}",
               "p95_first": _f(band.loc[6, 95], 2), "p95_last": _f(band.loc[12, 95], 2),
               "open_at_11": str((medians(every, 11) > 0).sum()),
               "p75_below_at_11": _just_above(band.loc[11, 75], 3),
               "matched_density": _f(100 * slow_density, 0), "matched_epoch": _f(matched, 0)}
    for name, run, epoch in (("fast", every, matched), ("slow", slow, 20)):
        q25, q75 = np.percentile(medians(run, epoch), [25, 75])
        numbers[f"matched_iqr_{name}"] = f"{q25:.2f}–{q75:.2f}"
        numbers[f"matched_zeros_{name}"] = str((medians(run, epoch) == 0).sum())
    return numbers | {"every_fc2_expected": _layer(every, "fc2"), "every_fc2_kept_pct": _layer(every, "fc2", _KEPT, 0),
                      "slow_fc2_expected": _layer(slow, "fc2"), "slow_fc2_kept_pct": _layer(slow, "fc2", _KEPT),
                      "slow_fc2_kept_pct_rounded": _layer(slow, "fc2", _KEPT, 0)}


def cause_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"The cause": the clamped 3·10⁻³ run's training against test-time error, where fc2's expected density sits
    (:func:`zero_median_gates`), the paper-protocol run's decided gates, the multipliers at fc2's crossing of
    50%, and the recovery after the restart."""
    fast, paper = _record(runs, "fast"), _record(runs, "paper")
    history, restart, zeros = by_epoch(fast), first_restart(fast), zero_median_gates(fast)
    return {"fast_train_error_at_20": _f(history.loc[20, "train_error"], 0),
            "fast_error_at_20": _f(history.loc[20, "val_error"], 2),
            "fast_final_exact": _f(fast["metrics"]["val_error_final"], 2),
            "fast_max_p": _f(zeros["largest P"], 2), "fast_zero_share": _f(zeros["share (%)"]),
            "fast_zero_count": str(zeros["gates"]), "fast_zero_mean_p": _f(zeros["mean P"], 2),
            "paper_decided_open": str((prob_from_medians(medians(paper)) > 0.9).sum()),
            **{f"{name}_crossing_lambda_about": _f(_lambda_at_crossing(_record(runs, name)), digits)
               for name, digits in (("fast", 0), ("dual_1e3", 1), ("slow", 1))},
            "fast_restart": _f(restart, 0), "fast_error_at_restart": _f(history.loc[restart, "val_error"], 2),
            "fast_recovery_epochs": _f(fast["metrics"]["epochs_completed"] - restart, 0)}


def control_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"Table 11's layer-wise cells: the same cause": the 20% record at superseded settings (multipliers, jump,
    crossings, plateau, final densities), the 35% one's dip, and the 20% cell at the short and paper protocols."""
    old, at_35, slow = (_record(runs, name) for name in ("control_old", "control_35", "control_slow"))
    history, crossings = by_epoch(old), crossing_epochs(old)
    maxima = [largest_multiplier(old, index) for index in range(len(LAYERS))]
    train = history.loc[plateau(old).index, "train_error"]
    peak, peak_epoch = peak_error(at_35)
    lambdas = slow["metrics"]["multipliers_final"]
    above = layers(slow)[_EXPECTED] - layers(slow)["target (%)"]
    paper = _record(runs, "control_paper")
    paper_gaps = layers(paper)[_EXPECTED] - layers(paper)["target (%)"]
    cell = paper_cell("tab:lenet_control", model="LeNet5", method="constrained", grouping="layer", target=0.2,
                      metric="val_error_final")
    return {"control_max_lambdas": f"{min(maxima):.0f} to {max(maxima):.0f}",
            "control_error_8": _f(history.loc[8, "val_error"]), "control_error_11": _f(history.loc[11, "val_error"], 0),
            "control_crossing_first": str(min(crossings.values())),
            "control_crossing_last": str(max(crossings.values())),
            **_plateau_numbers("control_plateau", old),
            "control_plateau_train": f"{train.min():.0f}–{train.max():.0f}",
            **_layer_numbers("control", old),
            "control_35_peak": _f(peak), "control_35_peak_epoch": _f(peak_epoch, 0),
            "control_35_final": _f(at_35["metrics"]["val_error_final"], 2),
            "control_slow_peak": _f(peak_error(slow)[0], 2),
            "control_slow_final": _f(slow["metrics"]["val_error_final"], 2),
            "control_slow_best": _f(slow["metrics"]["val_error_best"], 2),
            **_layer_numbers("control_slow", slow),
            "control_slow_lambdas": f"{min(lambdas):.2f} to {max(lambdas):.2f}",
            "control_slow_above": f"{above.min():.0f} to {above.max():.0f}",
            "control_paper_final": _f(paper["metrics"]["val_error_final"], 2),
            "control_paper_printed": f"{cell.value} ± {cell.ci}", "control_paper_gap": _f(paper_gaps.abs().max(), 2)}


def fix_numbers(runs: dict[str, dict | None]) -> dict[str, str]:
    """"The fix, and what it costs": the 10⁻⁴ run's conv layers at epoch 40, and the paper-protocol run's epoch at
    fc2's target (to the nearest ten: "around epoch 70") and its errors."""
    slow, paper = _record(runs, "slow"), _record(runs, "paper")
    return {"slow_conv1_expected": _layer(slow, "conv1"), "slow_conv2_expected": _layer(slow, "conv2"),
            "paper_fc2_at_target": _f(round(first_epoch_at_target(paper), -1), 0),
            "paper_final": _f(paper["metrics"]["val_error_final"], 2),
            "paper_best": _f(paper["metrics"]["val_error_best"], 2)}


def unverified_numbers() -> dict[str, str]:
    """"What remains unverified": the complete LeNet5 records of :data:`PAPER_GRIDS` (how many, how many
    layer-wise, the largest final error) and how far the paper-protocol grid of Table 11 is."""
    lenet = report.final_errors(PAPER_GRIDS, "paper").query("model == 'lenet5'")
    found = [folder for _, folder in report.grid_records(_CONTROL_PAPER)]
    return {"paper_lenet_runs": str(len(lenet)), "paper_lenet_layer_runs": str((lenet["grouping"] == "layer").sum()),
            "paper_lenet_worst": _f(lenet["val. error final (%)"].max(), 2),
            "lenet_control_paper_done": str(len(found) - found.count(None)), "lenet_control_paper_total": str(len(found))}
