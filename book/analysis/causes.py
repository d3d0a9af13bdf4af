"""Why layer-wise targets end under at the CPU protocol: the cause tests, each judged by the rule its grid file
wrote down before its runs (grids/cifar10_cpu2_one_block.yaml, _schedule, _nupi, _dual_lr and
grids/cifar10_gpu_granularity.yaml), and the GPU protocol's wider network, whose grid file named the question but
declared no rule (:data:`NO_RULE`).

Every test compares training-time quantities only (each block's lowest density after it first reaches its
target, in gates, and its final density by :mod:`paperlib.harness.rules`), never the test split, with the CPU
protocol's gradient-ascent run of the same target (its *baseline*). A test's outcome is one of :data:`OUTCOMES`.
Every run is one seed.
"""

from dataclasses import dataclass
from typing import Callable

import matplotlib.pyplot as plt
import pandas as pd

from paperlib.harness import index, rules
from paperlib.harness.plots import history_frame, steps_frame
from paperlib.harness.protocols import protocol_name

from . import misses, style
from .control import constraint_names

CAUSE, CONTRIBUTES, NOT_CAUSE = "the cause", "contributes", "not the cause"
INCOMPLETE, VIOLATED = "runs not all in", "a constraint violated"
NO_RULE = "shown, no rule declared before the runs"
OUTCOMES = (CAUSE, CONTRIBUTES, NOT_CAUSE, INCOMPLETE, VIOLATED, NO_RULE)
CPU = protocol_name("cpu2", "cifar10")
CAUSE_EXPERIMENT = "cifar10_cpu2_layer_cause"


@dataclass(frozen=True)
class Blocks:
    """One run's blocks (constraints, in order): the deepest fall under the target after first reaching it (in
    the block's gates; None if it never reached it), the final gap (points) and the outcome by the rule."""
    dips: list
    gaps: list
    outcomes: list

    @property
    def deep(self) -> int:
        """How many blocks go more than a gate under their target after first reaching it."""
        return sum(dip is not None and dip < -1 for dip in self.dips)


def blocks(run: dict, free: list[dict]) -> Blocks:
    """:class:`Blocks` of a layer-wise record (:func:`analysis.misses.first_push_rows`, and
    :func:`paperlib.harness.rules.judge_record` constraint by constraint)."""
    rows = misses.first_push_rows([run])
    judged = rules.judge_record(run, free)
    outcomes = [rules.judge_run([gap], [binding], [points]).value
                for gap, binding, points in zip(judged.gaps, judged.bindings, rules.constraint_gate_points(run))]
    dips = [None if pd.isna(d) else float(d) for d in rows["deepest under (gates)"]]
    return Blocks(dips, list(judged.gaps), outcomes)


@dataclass(frozen=True)
class CauseTest:
    """A cause test: the cause in words, its grid file, the index query of its runs, how many runs it has, and
    ``judge``, its declared rule: (test runs' Blocks by target, baselines' Blocks by target) -> outcome; None where
    no rule was declared before the runs (the outcome is then :data:`NO_RULE`)."""
    key: str
    cause: str
    grid: str
    query: dict
    runs: int
    judge: Callable[[dict, dict], str] | None
    blocks: tuple = (0, 1, 2, 3, 4, 5)  # the blocks the rule reads (one-block test: stage1.0)


def _one_block(tests: dict, baselines: dict) -> str:
    """Stage1.0 alone constrained at 65%: on target with no fall deeper than a gate, the reading "the other
    blocks hold it down" stands; under by at least as much as in the layer-wise 65% run, it is refuted; between
    (under by less, or a deep fall that comes back), partial."""
    test, base = tests[0.65], baselines[0.65]
    outcome, dip, gap = test.outcomes[0], test.dips[0], test.gaps[0]
    if outcome == rules.Outcome.ON_TARGET.value and (dip is None or dip >= -1):
        return CAUSE
    if outcome == rules.Outcome.UNDER.value and gap <= base.gaps[0]:
        return NOT_CAUSE
    return CONTRIBUTES


def _damped(tests: dict, baselines: dict) -> str:
    """nuPI: every block within a gate of its target after first reaching it and the runs on target, the
    overshoot of gradient ascent is the cause; as many blocks more than a gate under as with gradient ascent
    and the runs under, it is not; fewer or shallower falls with blocks still under, it contributes. A violated
    constraint is reported as such."""
    if any(rules.Outcome.VIOLATED.value in t.outcomes for t in tests.values()):
        return VIOLATED
    if all(t.deep == 0 and set(t.outcomes) <= {rules.Outcome.ON_TARGET.value} for t in tests.values()):
        return CAUSE
    if all(t.deep >= baselines[target].deep and rules.Outcome.UNDER.value in t.outcomes
           for target, t in tests.items()):
        return NOT_CAUSE
    return CONTRIBUTES


def _longer(tests: dict, baselines: dict) -> str:
    """40 epochs: every block on target, the short schedule is the cause; as many blocks end under, as far, as at
    20 epochs, it is not; blocks that climb back part of the way, it contributes."""
    if all(set(t.outcomes) <= {rules.Outcome.ON_TARGET.value} for t in tests.values()):
        return CAUSE
    under = rules.Outcome.UNDER.value

    def depth(b):
        return min((g for g, o in zip(b.gaps, b.outcomes) if o == under), default=0.0)

    if all(t.outcomes.count(under) >= baselines[k].outcomes.count(under) and depth(t) <= depth(baselines[k])
           for k, t in tests.items()):
        return NOT_CAUSE
    return CONTRIBUTES


def _wider(tests: dict, baselines: dict) -> str:
    """WideResNet-16-4 at the CPU protocol's settings: a violated constraint is reported as such; otherwise judged as
    the longer schedule is (:func:`_longer`: every block on target, the coarse blocks are the cause; as many blocks
    under in each run, the furthest as far, they are not; otherwise they contribute)."""
    if any(rules.Outcome.VIOLATED.value in t.outcomes for t in tests.values()):
        return VIOLATED
    return _longer(tests, baselines)


def _unscaled(tests: dict, baselines: dict) -> str:
    """The paper's unscaled dual lr: every block within a gate of its target after first reaching it and the
    runs on target, the scaled rate is the cause; otherwise it is not (the rule declared two outcomes only)."""
    if all(t.deep == 0 and set(t.outcomes) <= {rules.Outcome.ON_TARGET.value} for t in tests.values()):
        return CAUSE
    return NOT_CAUSE


TESTS = (
    CauseTest("others", "the other blocks, held at their targets", "grids/cifar10_cpu2_one_block.yaml",
              dict(experiment=CAUSE_EXPERIMENT, epochs=20, dual_optimizer="gradient_ascent"), 1, _one_block, (0,)),
    CauseTest("schedule", "the short schedule (20 epochs)", "grids/cifar10_cpu2_schedule.yaml",
              dict(experiment=CAUSE_EXPERIMENT, epochs=40), 2, _longer),
    CauseTest("dynamics", "the multiplier's overshoot under gradient ascent", "grids/cifar10_cpu2_nupi.yaml",
              dict(experiment=CAUSE_EXPERIMENT, dual_optimizer="nupi"), 2, _damped),
    CauseTest("dual_lr", "the dual learning rate scaled for 20 epochs", "grids/cifar10_cpu2_dual_lr.yaml",
              dict(experiment="cifar10_cpu2_dual_lr"), 2, _unscaled),
    CauseTest("granularity", "the coarse blocks (16 to 64 gates)", "grids/cifar10_gpu_control.yaml",
              dict(experiment="cifar10_gpu", method="constrained", grouping="layer", target=(0.35, 0.65), seed=0), 2,
              None),
    CauseTest("width", "the coarse blocks, all else the CPU protocol's", "grids/cifar10_gpu_granularity.yaml",
              dict(experiment="cifar10_gpu_granularity", method="constrained", grouping="layer"), 2, _wider),
)


def _target(run: dict) -> float:
    target = run["params"]["target"]
    return target[0] if isinstance(target, list) else target


def baseline_runs(frame: pd.DataFrame) -> dict[float, dict]:
    """The CPU protocol's layer-wise gradient-ascent records at 35% and 65%, by target."""
    rows = index.select(frame, experiment="cifar10_cpu2", protocol=CPU, variant="", method="constrained",
                        grouping="layer", target=(0.35, 0.65))
    return {_target(run): run for run in index.load(rows)}


def test_runs(frame: pd.DataFrame, key: str) -> dict[float, dict]:
    """The records of the cause test ``key`` (:data:`TESTS`) that are in, by target."""
    test = next(test for test in TESTS if test.key == key)
    return {_target(run): run for run in index.load(index.select(frame, **test.query))}


def baselines(frame: pd.DataFrame, free: list[dict]) -> dict[float, Blocks]:
    """:class:`Blocks` of the CPU protocol's layer-wise gradient-ascent runs at 35% and 65%, by target."""
    return {target: blocks(run, free) for target, run in baseline_runs(frame).items()}


def cause_tests(frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cause test: the cause, its runs in (of how many), the blocks more than a gate under after first
    reaching their target and the blocks that end under (test runs; baseline in brackets), and the outcome by
    the test's declared rule (:data:`OUTCOMES`)."""
    frame = index.record_index() if frame is None else frame
    free = rules.free_gates_records()
    base = baselines(frame, free)
    rows = []
    for test in TESTS:
        found = {target: blocks(run, free) for target, run in test_runs(frame, test.key).items()}
        under = rules.Outcome.UNDER.value

        def shown(measure):
            return ", ".join(f"{100 * t:g}%: {measure(b)} ({measure(base[t])})" for t, b in sorted(found.items()))

        outcome = INCOMPLETE if len(found) < test.runs else test.judge(found, base) if test.judge else NO_RULE
        rows.append({"cause tested": test.cause, "runs in": f"{len(found)} of {test.runs}",
                     "blocks > 1 gate under after reaching the target": shown(
                         lambda b: sum(d is not None and d < -1 for i, d in enumerate(b.dips) if i in test.blocks)),
                     "blocks ending under": shown(
                         lambda b: sum(o == under for i, o in enumerate(b.outcomes) if i in test.blocks)),
                     "outcome by the declared rule": outcome, "grid": test.grid})
    return pd.DataFrame(rows)


def by_outcome(tests: pd.DataFrame) -> dict[str, str]:
    """The causes of :func:`cause_tests` by outcome: ``"ruled out"``, ``"found"``, ``"contributing"``, ``"open"``
    (tests whose runs are not all in) and ``"shown"`` (run, with no rule declared before them), each the causes'
    names joined by "; ", or "none"."""
    outcome = tests["outcome by the declared rule"]
    named = {"ruled out": NOT_CAUSE, "found": CAUSE, "contributing": CONTRIBUTES, "open": INCOMPLETE, "shown": NO_RULE}
    return {key: "; ".join(tests.loc[outcome == value, "cause tested"]) or "none" for key, value in named.items()}


def after_reaching(run: dict) -> pd.DataFrame:
    """One row per block (constraint) of a layer-wise record, read from its step log: the epoch it first reaches its
    target, for how many epochs its multiplier stays positive after that, its density when the multiplier is first 0
    after it, its lowest density within the next epoch, and its final density (densities in %)."""
    steps = steps_frame(run)
    count, target = sum(c.startswith("lambda_") for c in steps), run["params"]["target"]
    rows = []
    for i, target in enumerate(target if isinstance(target, list) else [target] * count):
        density, multiplier, epoch = steps[f"constrained_density_{i}"], steps[f"lambda_{i}"], steps["epoch"]
        reached = steps.index[density <= target]
        row = {"block": i, "target (%)": 100 * target, "reaches (epoch)": None, "λ positive after (epochs)": None,
               "density when λ is 0 (%)": None, "lowest in the next epoch (%)": None,
               "final (%)": 100 * density.iloc[-1]}
        if len(reached):
            first = reached[0]
            released = steps.index[(steps.index >= first) & (multiplier == 0)]
            if len(released):
                zero = released[0]
                near = density[(epoch >= epoch[zero]) & (epoch <= epoch[zero] + 1)]
                row.update({"λ positive after (epochs)": float(epoch[zero] - epoch[first]),
                            "density when λ is 0 (%)": 100 * density[zero],
                            "lowest in the next epoch (%)": 100 * near.min()})
            row["reaches (epoch)"] = float(epoch[first])
        rows.append(row)
    return pd.DataFrame(rows)


def plot_first_epochs(runs: dict, epochs: float = 3.0) -> plt.Figure:
    """Each block's density over the first ``epochs`` of the runs (label -> record, one target), its target dotted,
    and a dot where the run's multiplier of that block first returns to 0 after the block reached its target."""
    first = next(iter(runs.values()))
    names = constraint_names(first)
    fig, axes = plt.subplots(2, 3, figsize=(style.DISPLAYED_WIDTH, 4.4), sharex=True, sharey=True)
    for (label, run), colour in zip(runs.items(), ("tab:blue", *style.OTHER_COLOURS)):
        steps = steps_frame(run)
        steps = steps[steps["epoch"] <= epochs]
        released = after_reaching(run)
        for i, ax in enumerate(axes.flat[:len(names)]):
            ax.plot(steps["epoch"], 100 * steps[f"constrained_density_{i}"], color=colour, lw=1.3, label=label)
            reach, positive = released.loc[i, "reaches (epoch)"], released.loc[i, "λ positive after (epochs)"]
            if positive is not None and not pd.isna(positive) and reach + positive <= epochs:
                ax.plot([reach + positive], [released.loc[i, "density when λ is 0 (%)"]], "o", color=colour, ms=5)
    for i, ax in enumerate(axes.flat[:len(names)]):
        ax.axhline(released.loc[i, "target (%)"], **style.TARGET)
        ax.set_title(names[i], fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("density (%)")
    for ax in axes[1]:
        ax.set_xlabel("epoch")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="lower center", ncol=len(runs), fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def released_rows(runs: dict) -> pd.DataFrame:
    """One row per run (label -> layer-wise record): :func:`analysis.misses.first_push_summary`'s blocks more than a
    gate under, deepest fall (gates), largest final gap and outcome, with, from :func:`after_reaching`, for how long
    the multipliers stay positive after their blocks first reach their targets (fewest and most epochs) and how far the
    blocks fall, on average, within the epoch after their multiplier is first 0 again."""
    summary = misses.first_push_summary(list(runs.values()))
    rows = []
    for (label, run), (_, pushed) in zip(runs.items(), summary.iterrows()):
        after = after_reaching(run).dropna(subset=["λ positive after (epochs)"])
        fall = after["density when λ is 0 (%)"] - after["lowest in the next epoch (%)"]
        rows.append({"target (%)": round(100 * _target(run)), "multipliers": label,
                     "blocks > 1 gate under": int(pushed["blocks more than a gate under"]),
                     "deepest under (gates)": pushed["deepest under (gates)"],
                     "λ > 0 after reaching, fewest epochs": after["λ positive after (epochs)"].min(),
                     "λ > 0 after reaching, most epochs": after["λ positive after (epochs)"].max(),
                     "fall after λ is 0 (points, mean)": fall.mean(),
                     "largest final gap (points)": pushed["largest final gap (points)"],
                     "outcome": pushed["outcome"], "error (%)": pushed["val. error final (%)"]})
    return pd.DataFrame(rows)


def schedule_rows(longer: dict, shorter: dict, at_epoch: int = 20) -> pd.DataFrame:
    """One row per block of the schedule test (target -> record, 40 epochs and 20): the block's target, the 20-epoch
    run's final density and outcome by the rule, the longer run's density at epoch ``at_epoch`` and at its end, and its
    outcome (densities in %, from the per-epoch history: the expected density of the block's gates)."""
    free = rules.free_gates_records()
    rows = []
    for target in sorted(longer):
        long, short = history_frame(longer[target]), history_frame(shorter[target])
        long, short = long[long["phase"] == "train"], short[short["phase"] == "train"]
        columns = [c for c in long if c.startswith("density[")]
        outcomes = zip(blocks(shorter[target], free).outcomes, blocks(longer[target], free).outcomes)
        for name, column, (short_outcome, outcome) in zip(constraint_names(longer[target]), columns, outcomes):
            at = long.loc[long["epoch"] == at_epoch, column].iloc[0]
            rows.append({"target (%)": round(100 * target), "block": name,
                         "20 epochs, final (%)": 100 * short[column].iloc[-1], "outcome (20 epochs)": short_outcome,
                         f"40 epochs, at epoch {at_epoch} (%)": 100 * at,
                         "40 epochs, final (%)": 100 * long[column].iloc[-1], "outcome (40 epochs)": outcome})
    return pd.DataFrame(rows)


def granularity_rows(wider: dict, smaller: dict) -> pd.DataFrame:
    """One row per block of the granularity test (target -> layer-wise record, each: the GPU protocol's wider network
    and the CPU protocol's): for each network, the block's gates, its deepest fall under the target after first
    reaching it, in points (so that blocks of different sizes compare; 0 if it never fell under), its final density
    (%) and its outcome by the book's rule."""
    free = rules.free_gates_records()
    rows = []
    for target in sorted(wider):
        found = {}
        for name, run in (("CPU", smaller[target]), ("GPU", wider[target])):
            judged, points = blocks(run, free), rules.constraint_gate_points(run)
            found[name] = [{f"{name}: gates": round(100 / size),
                            f"{name}: deepest fall (points)": min(0.0, dip or 0.0) * size,
                            f"{name}: final (%)": 100 * target + gap, f"{name}: outcome": outcome}
                           for dip, gap, outcome, size in zip(judged.dips, judged.gaps, judged.outcomes, points)]
        for block, cpu, gpu in zip(constraint_names(wider[target]), found["CPU"], found["GPU"]):
            rows.append({"target (%)": round(100 * target), "block": block, **cpu, **gpu})
    return pd.DataFrame(rows)
