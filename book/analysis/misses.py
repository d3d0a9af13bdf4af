"""Why some CIFAR-10 runs miss their targets (book/results_cifar10_misses.md): the two ways a constrained run
misses (over, in whole gates; under, with the constraint holding) and the tests of their causes. Every choice
reads training-time densities and multipliers, never the test split; numbers are Python ints, floats and names
(for MyST-NB's glue).

>>> sorted(paper_free_densities())
[0.1, 6]
"""

import math

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import rules, studies
from paperlib.harness.paper_rows import constrained_densities
from paperlib.harness.plots import history_frame, steps_frame
from paperlib.harness.rules import final_gaps
from paperlib.paper.models import gate_counts
from paperlib.paper.paper_results import paper_cell

from .control import (ABLATION_GRID, condition, condition_link, constraint_names, dense_run, dual_lr_rows, run_rows,
                      short_layer_name)
from . import style
from .report import complete_records, notebook_link, select

#: The cause test of layer-wise 20%: the gates' learning rate decayed with the weights'.
CAUSE_GRID, = studies.grids("cifar10_layer_cause")
#: The same model with a constraint that never binds (a target of 100%), gates' learning rate 6.
FREE_GATES_GRID, = studies.grids("cifar10_free_gates")
#: The control table's 80% constraints at the gates' learning rate of 0.1.
UNDER_CAUSE_GRID, = studies.grids("cifar10_under_cause")
#: The cpu2 protocol's layer-wise 35% and 65% at the paper's unscaled dual learning rate.
DUAL_LR_CAUSE_GRID, = studies.grids("cifar10_cpu2_dual_lr")


# --------------------------------------------------------------------------- #
# Over, in whole gates: layer-wise 20%
# --------------------------------------------------------------------------- #

def gate_rows(run: dict) -> pd.DataFrame:
    """A layer-wise constrained run's final densities counted in gates, one row per gated layer: a layer of n
    saturated gates (medians at 0 or 1, as at the gates' lr of 6) moves in steps of one gate, 100/n points, so a
    gap under one gate is as close as it can come. *Open medians*: gates whose last saved median is not 0."""
    counts = gate_counts(run["params"]["model"])
    medians = run["gate_medians"][max(run["gate_medians"], key=int)]
    layers = list(run["metrics"]["l0_density_per_layer"])
    rows = []
    for layer, (density, target) in zip(layers, constrained_densities(run, run["history"][-1])):
        n = counts[layer]
        rows.append({"block": short_layer_name(layer), "gates": n, "one gate (points)": 100 / n,
                     "target (gates)": target * n, "expected open gates": density * n,
                     "open medians": sum(value > 0 for value in medians[layer]),
                     "gap (points)": 100 * (density - target), "gap (gates)": (density - target) * n})
    return pd.DataFrame(rows)


def gate_changes(run: dict, after_epoch: int = 1) -> pd.DataFrame:
    """Every epoch after ``after_epoch`` at whose end a layer's whole number of expected open gates changed, with
    its multiplier before and after: which gates the multiplier closed, which opened with it at zero."""
    counts = gate_counts(run["params"]["model"])
    layers = list(run["metrics"]["l0_density_per_layer"])
    history = [row for row in run["history"] if row["phase"] == "train" and int(row["epoch"]) >= after_epoch]
    rows = []
    for before, after in zip(history, history[1:]):
        for index, layer in enumerate(layers):
            was, now = (round(counts[layer] * float(row[f"density[{layer}]"])) for row in (before, after))
            if was != now:
                rows.append({"epoch": int(after["epoch"]), "block": short_layer_name(layer),
                             "open gates": f"{was} → {now}", "λ before": float(before[f"lambda_{index}"]),
                             "λ after": float(after[f"lambda_{index}"])})
    return pd.DataFrame(rows, columns=["epoch", "block", "open gates", "λ before", "λ after"])


def plot_gate_steps(run: dict) -> plt.Figure:
    """Each gated layer's expected open gates against epochs (target dashed), its multiplier on the right axis."""
    counts = gate_counts(run["params"]["model"])
    layers = list(run["metrics"]["l0_density_per_layer"])
    frame = history_frame(run)
    targets = [target for _, target in constrained_densities(run, run["history"][-1])]
    columns = min(3, len(layers))
    rows = math.ceil(len(layers) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7, 2.4 * rows), squeeze=False)
    top = max(1.0, frame[[c for c in frame if c.startswith("lambda_")]].max().max())
    for index, (layer, target) in enumerate(zip(layers, targets)):
        ax = axes.flat[index]
        n = counts[layer]
        ax.plot(frame["epoch"], n * frame[f"density[{layer}]"], color="C0", lw=1.4)
        ax.axhline(n * target, ls="--", color="k", lw=0.8)
        low = math.floor(n * target) - 2
        ax.set(ylim=(low, low + 5))
        ax.set_title(f"{short_layer_name(layer)} ({n} gates)", fontsize=9)
        ax.grid(alpha=0.3)
        multiplier = ax.twinx()
        multiplier.plot(frame["epoch"], frame[f"lambda_{index}"], color="C3", lw=1, alpha=0.8)
        multiplier.set_ylim(0, top)
        if index % columns == 0:
            ax.set_ylabel("expected open gates", color="C0")
        if index % columns == columns - 1 or index == len(layers) - 1:
            multiplier.set_ylabel("multiplier λ", color="C3")
        if index >= len(layers) - columns:
            ax.set_xlabel("epoch")
    for ax in axes.flat[len(layers):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def cause_rows(reference: dict, tests: list[dict]) -> pd.DataFrame:
    """:func:`dual_lr_rows` of a run and of its cause tests, named by whether they decay the gates' lr."""
    compared = [reference, *tests]
    rows = pd.concat([dual_lr_rows([run]) for run in compared], ignore_index=True)
    names = ["gates' lr decayed" if run["params"]["schedule_gates"] else "gates' lr constant" for run in compared]
    rows["run"] = [notebook_link(run["path"], name) or name for run, name in zip(compared, names)]
    return rows


def cause_numbers(reference: dict, test: dict) -> dict:
    """The run with the gates' lr decayed at the weights' milestones (``test``) against the same run without
    (``reference``): the last epoch they agree, the first milestone, the whole-gate changes after it
    (:func:`gate_changes`; ``unpushed``: the reference's with the multiplier at zero), and each run's largest
    final gap (:func:`gate_rows`), its block and final error."""
    milestone = test["params"]["lr_milestones"][0]

    def late(run: dict) -> pd.DataFrame:
        changes = gate_changes(run)
        return changes[changes["epoch"] > milestone]

    before, after = late(reference), late(test)
    unpushed = before[(before["λ before"] == 0) & (before["λ after"] == 0)]
    same_until = next((int(a["epoch"]) - 1 for a, b in zip(reference["history"], test["history"])
                       if (a["val_error"], a["l0_density"]) != (b["val_error"], b["l0_density"])), None)
    numbers = {"same until": same_until, "milestone": milestone, "changes with": len(after),
               "changes without": len(before), "unpushed": len(unpushed)}
    for name, run in (("with", test), ("without", reference)):
        gaps = gate_rows(run).set_index("block")["gap (points)"]
        numbers.update({f"gap {name}": float(gaps[gaps.abs().idxmax()]), f"block {name}": gaps.abs().idxmax(),
                        f"error {name}": run["metrics"]["val_error_final"]})
    return numbers


# --------------------------------------------------------------------------- #
# Under, with the constraint holding
# --------------------------------------------------------------------------- #

def unpushed_under(record: dict) -> list[int]:
    """The constraints that end more than :data:`~paperlib.harness.rules.ON_TARGET_POINTS` under their target with
    their multiplier at zero: nothing pushes them back up (:func:`last_push` finds what took them under)."""
    multipliers = record["metrics"]["multipliers_final"]
    return [i for i, gap in enumerate(final_gaps(record)) if gap < -rules.ON_TARGET_POINTS and multipliers[i] == 0]


def inactive_misses(runs: list[dict]) -> list[dict]:
    """The constrained runs that are feasible and whose every constraint under its target is
    :func:`unpushed_under`."""
    misses = []
    for run in runs:
        if run["params"]["method"] != "constrained":
            continue
        gaps = final_gaps(run)
        under = [i for i, gap in enumerate(gaps) if gap < -rules.ON_TARGET_POINTS]
        if under and rules.feasible(gaps) and under == unpushed_under(run):
            misses.append(run)
    return misses


def last_push(record: dict, index: int = 0) -> tuple[pd.Series, pd.Series]:
    """The last logged step at which constraint ``index``'s multiplier was positive and the step after it (the
    first step twice if it never was)."""
    steps = steps_frame(record)
    pushing = steps.index[steps[f"lambda_{index}"] > 0]
    last = steps.index.get_loc(pushing[-1]) if len(pushing) else 0
    return steps.iloc[last], steps.iloc[min(last + 1, len(steps) - 1) if len(pushing) else 0]


def _one_gate_points(record: dict, index: int) -> float | None:
    """Points of a layer-wise constraint one gate is; None model-wise (a gate weighs the parameters it holds)."""
    if record["params"]["grouping"] == "model":
        return None
    layer = list(record["metrics"]["l0_density_per_layer"])[index]
    return 100 / gate_counts(record["params"]["model"])[layer]


def gates_lr(run: dict) -> float:
    """A run's gates' learning rate (the paper's 6 for records that do not name one)."""
    value = (run.get("params") or {}).get("gates_lr")
    return 6.0 if value is None else float(value)


def free_twin(run: dict, free_records: list[dict]) -> dict | None:
    """The seed-0 free-gates run of ``run``'s model and protocol among ``free_records``, or None."""
    return next((free for free in rules.free_twins(run, free_records) if free["params"]["seed"] == 0), None)


def drift_rows(runs: list[dict], free_records: list[dict] = ()) -> pd.DataFrame:
    """One row per constraint of :func:`unpushed_under`: the last epoch its multiplier pushed, its density a step
    later, its lowest after and at the end, its final gap (points, gates); beside them the same constraint's
    density in the :func:`free_twin` then and at the end."""
    rows = []
    for run in runs:
        names, finals = constraint_names(run), constrained_densities(run, run["history"][-1])
        steps, twin = steps_frame(run), free_twin(run, free_records)
        if twin is not None:
            twin_steps, twin_finals = steps_frame(twin), constrained_densities(twin, twin["history"][-1])
        for i in unpushed_under(run):
            (push, after), gate = last_push(run, i), _one_gate_points(run, i)
            gap = 100 * (finals[i][0] - finals[i][1])
            later = steps.loc[steps["epoch"] >= after["epoch"], f"constrained_density_{i}"]
            free_then = free_final = None
            if twin is not None:
                nearest = (twin_steps["epoch"] - after["epoch"]).abs().idxmin()
                free_then = 100 * twin_steps.loc[nearest, f"constrained_density_{i}"]
                free_final = 100 * twin_finals[i][0]
            rows.append({"run": condition_link(run), "setting": condition(run["params"]), "gates' lr": gates_lr(run),
                         "constraint": names[i],
                         "last epoch with λ > 0": float(push["epoch"]) if push[f"lambda_{i}"] > 0 else None,
                         "a step later (%)": 100 * after[f"constrained_density_{i}"],
                         "lowest after (%)": 100 * later.min(), "final density (%)": 100 * finals[i][0],
                         "gap (points)": gap, "gap (gates)": None if gate is None else gap / gate,
                         "no constraint, then (%)": free_then, "no constraint, final (%)": free_final})
    return pd.DataFrame(rows)


def plot_free_drift(runs: list[dict], free_records: list[dict] = ()) -> plt.Figure:
    """The density (left) and multiplier (right, log epochs) of every :func:`unpushed_under` constraint, one
    colour per run, targets dashed, the :func:`free_twin`'s density dotted."""
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(7, 3.6))
    handles, twinned = [], False
    for colour, run in enumerate(runs):
        steps, twin = steps_frame(run), free_twin(run, free_records)
        twin_steps = None if twin is None else steps_frame(twin)
        twinned = twinned or twin is not None
        for i in unpushed_under(run):
            axes[0].plot(steps["epoch"], 100 * steps[f"constrained_density_{i}"], color=f"C{colour}", lw=1.2)
            axes[1].plot(steps["epoch"], steps[f"lambda_{i}"], color=f"C{colour}", lw=1.2)
            if twin_steps is not None:
                axes[0].plot(twin_steps["epoch"], 100 * twin_steps[f"constrained_density_{i}"], color=f"C{colour}",
                             lw=1.2, ls=":")
        for target in {target for _, target in constrained_densities(run, run["history"][-1])}:
            axes[0].axhline(100 * target, color=f"C{colour}", ls="--", lw=0.8)
        label = condition(run["params"]) + f", gates' lr {gates_lr(run):g}"
        handles.append(Line2D([], [], color=f"C{colour}", label=label))
    if twinned:
        handles.append(Line2D([], [], color="0.4", ls=":", label="its protocol, no binding constraint"))
    axes[0].set(xlabel="epoch", ylabel="constraint's L0-density (%)")
    axes[1].set(xlabel="epoch (log scale)", ylabel="multiplier λ", xscale="symlog", xlim=(0, None))
    for ax in axes:
        ax.grid(alpha=0.3)
    style.legend_below(fig, handles, bottom=0.05 + 0.06 * -(-len(handles) // 2))
    return fig


def under_cause_rows(runs: list[dict], tests: list[dict], target: float = 0.8) -> pd.DataFrame:
    """Seed 0's constrained runs at ``target`` (gates' lr 6) beside the same constraints at 0.1 (``tests``):
    :func:`run_rows` with the gates' lr, how far the lowest constraint ends under (0 if none) and the largest
    final multiplier."""
    at_target = select(runs, method="constrained", target=target, seed=0)
    compared = sorted(at_target, key=lambda run: run["params"]["grouping"]) + tests
    rows = run_rows(compared, dense_run(runs))
    rows.insert(4, "gates' lr", [gates_lr(run) for run in compared])
    rows.insert(rows.columns.get_loc("over target (points)"), "under target (points)",
                [min(0.0, *final_gaps(run)) for run in compared])
    rows.insert(rows.columns.get_loc("over target (points)") + 1, "final λ",
                [max(run["metrics"]["multipliers_final"]) for run in compared])
    return rows.drop(columns=["method", "target", "lmbda", "seed", "epochs"])


def drift_numbers(rows: pd.DataFrame) -> dict:
    """From :func:`drift_rows`: the constraints the last push took under within a step (``crossed``), the blocks
    ending within a gate, and of those with a free twin (``compared``) how many fell after the push more than
    :data:`~paperlib.harness.rules.ON_TARGET_POINTS` further than the twin did (``fell further``) or not."""
    targets = rows["final density (%)"] - rows["gap (points)"]
    gates = rows["gap (gates)"].dropna()
    compared = rows.dropna(subset=["no constraint, then (%)"])
    fall = compared["a step later (%)"] - compared["final density (%)"]
    free_fall = compared["no constraint, then (%)"] - compared["no constraint, final (%)"]
    return {"crossed": int((rows["a step later (%)"] < targets).sum()), "constraints": len(rows),
            "within a gate": int((gates >= -1).sum()), "blocks": len(gates),
            "fell further": int((fall > free_fall + rules.ON_TARGET_POINTS).sum()),
            "no further": int((fall <= free_fall + rules.ON_TARGET_POINTS).sum()), "compared": len(compared)}


def first_push_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per block of the layer-wise ``runs``: the first logged epoch it is at or under its target, how far
    under it goes from then on (points, gates), its final density and gap."""
    rows = []
    for run in runs:
        steps, finals = steps_frame(run), constrained_densities(run, run["history"][-1])
        for i, name in enumerate(constraint_names(run)):
            density, target = steps[f"constrained_density_{i}"], finals[i][1]
            reached = steps.index[density <= target]
            dip = 100 * (density.loc[reached[0]:].min() - target) if len(reached) else None
            gate = _one_gate_points(run, i)
            rows.append({"run": condition_link(run), "setting": condition(run["params"]),
                         "dual lr": f'{run["params"]["dual_lr"]:g}', "block": name,
                         "at target from (epoch)": float(steps.loc[reached[0], "epoch"]) if len(reached) else None,
                         "deepest under (points)": dip, "deepest under (gates)": None if dip is None else dip / gate,
                         "final density (%)": 100 * finals[i][0], "final gap (points)": 100 * (finals[i][0] - target)})
    return pd.DataFrame(rows)


def first_push_summary(runs: list[dict]) -> pd.DataFrame:
    """One row per run of :func:`first_push_rows`: its blocks more than a gate under after reaching their target,
    the deepest and where, the largest final gap and the run's outcome by the book's rule."""
    free, rows = rules.free_gates_records(), []
    for run in runs:
        own = first_push_rows([run])
        dips, gaps = own["deepest under (gates)"], own["final gap (points)"]
        deepest = dips.idxmin() if dips.notna().any() else None  # None: no block ever reached its target
        rows.append({"run": condition_link(run), "setting": condition(run["params"]), "dual lr": own["dual lr"].iloc[0],
                     "blocks more than a gate under": int((dips < -1).sum()), "blocks": len(own),
                     "deepest under (gates)": None if deepest is None else dips[deepest],
                     "deepest block": None if deepest is None else own.loc[deepest, "block"],
                     "largest final gap (points)": gaps[gaps.abs().idxmax()],
                     "outcome": rules.judge_record(run, free).outcome.value,
                     "val. error final (%)": run["metrics"]["val_error_final"]})
    return pd.DataFrame(rows)


def paper_free_densities() -> dict[float, float]:
    """Where the loss alone takes the paper's WideResNet-28-10: Table 12's layer-wise 100% rows' L0-density (%) by
    gates' lr (6, the paper's; 0.1, Louizos et al.'s)."""
    return {lr: float(paper_cell("tab:cifar10", method="constrained", grouping="layer", target=1, gates_lr=lr,
                                 metric="l0_density").value) for lr in (6, 0.1)}


def free_runs() -> pd.DataFrame:
    """Our WideResNet-16-1 with no binding constraint at gates' lr 6 (:data:`FREE_GATES_GRID`) and 0.1 (the
    ablation's): L0-density at the first logged step and the end, parameters kept, final error."""
    fast = next(iter(complete_records(FREE_GATES_GRID)), None)
    slow = next(iter(select(complete_records(ABLATION_GRID), method="constrained", target=1, gates_lr=0.1)), None)
    rows = [{"gates' lr": lr, "run": notebook_link(run["path"], f"{run['params']['grouping']}-wise 100%")
             or f"{run['params']['grouping']}-wise 100%", "start (%)": 100 * steps_frame(run).iloc[0]["l0_density"],
             "final (%)": 100 * run["metrics"]["l0_density"], "params kept (%)": run["metrics"]["params_pct"],
             "error (%)": run["metrics"]["val_error_final"]}
            for lr, run in ((6.0, fast), (0.1, slow)) if run is not None]
    return pd.DataFrame(rows, columns=["gates' lr", "run", "start (%)", "final (%)", "params kept (%)", "error (%)"])


def under_cause_numbers(rows: pd.DataFrame) -> dict:
    """From :func:`under_cause_rows`, the runs at gates' lr 0.1: how many, how many still end under a target (then
    the rate is not the whole cause), on target, and over one with a positive final multiplier."""
    slow = rows[rows["gates' lr"] == 0.1]
    return {"runs": len(slow), "still under": int((slow["under target (points)"] < -rules.ON_TARGET_POINTS).sum()),
            "on target": int((slow["outcome"] == rules.Outcome.ON_TARGET.value).sum()),
            "over": int(((slow["over target (points)"] > rules.FEASIBLE_POINTS) & (slow["final λ"] > 0)).sum())}
