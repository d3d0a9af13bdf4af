"""How this book judges a run and a claim: every tolerance and every rule, in one place.

Every verdict of the book is computed here; the pages state the rules in words (book/intro.md, "How this book judges a
claim") with the numbers of this module. A constrained run is :func:`feasible` (every constraint at most
:data:`FEASIBLE_POINTS` above its target, App. G), its constraints bind or not (:func:`binding`: whether the free-gates
run of its model and protocol ends above the target; without one, *unknown*, judged as binding), and it is *on target*,
*under*, *violated* or *does not bind* (:func:`judge_run`). A penalized cell is judged by :func:`judge_penalty`, a claim
by the share of its judged runs that pass (:func:`claim_verdict`). The rules return outcomes and counts, never
sentences.

Example::

    >>> judge_run([0.4, -3.0], [Binding.BINDS, Binding.FREE], [1.0, 1.0])
    <Outcome.ON_TARGET: 'on target'>
    >>> claim_verdict(passed=9, judged=10)
    <Verdict.REPRODUCED: 'reproduced'>
"""

import functools
import statistics
from collections import Counter
from dataclasses import dataclass
from enum import Enum

# Tolerances (points are percentage points of density, error or counts)

#: A constraint holds when it ends at most this many points above its target (App. G: "within (~1%)").
FEASIBLE_POINTS = 1.0
#: A binding constraint is met when it ends within this many points of its target ...
ON_TARGET_POINTS = 1.0
#: ... unless one gate is worth more than this many points of its group: then the tolerance is half a gate.
COARSE_GATE_POINTS = 2.0
#: A penalized cell reproduces the paper's when its density is within this many points of the paper's.
PENALTY_POINTS = 2.0
#: Two percentages (parameters, MACs, densities) agree when they differ by at most this many points.
AGREE_POINTS = 2.0
#: Two best errors agree when they differ by at most this many points (App. L's unstructured tables).
ERROR_POINTS = 0.5
#: An ablation's effect counts when it moves a number by more than this many points (App. H).
EFFECT_POINTS = 1.0
#: A penalty "needs a search" when the bisection takes at least this many trainings (App. E counts 6 and 7).
SEARCH_TRAININGS = 4
#: Test-time gates "end at 0 or 1" when at least this share of the first gated layer's medians do (App. I).
DECIDED_GATES_SHARE = 0.8
#: Another dual optimiser costs nothing in error when no cell's final error is more than this many seed spreads
#: (standard deviations over Table 1's seeds) above the paper's optimiser's.
COST_SPREADS = 2.0
#: nuPI's gain is the smallest whose final distance to target is within this many points of the best gain's.
GAIN_SLACK_POINTS = 0.1
#: A claim is reproduced when at least this share of its judged runs pass ...
REPRODUCED_SHARE = 0.9
#: ... partly when at least this share do, and not reproduced below.
PARTLY_SHARE = 0.5


class Binding(str, Enum):
    """Whether a constraint binds: the free-gates density of its model and protocol is above its target."""
    BINDS = "binds"
    FREE = "does not bind"
    UNKNOWN = "unknown"


class Outcome(str, Enum):
    """How a constrained run ends (:func:`judge_run`)."""
    ON_TARGET = "on target"
    UNDER = "under"
    VIOLATED = "violated"
    DOES_NOT_BIND = "does not bind"


class PenaltyOutcome(str, Enum):
    """Whether a penalized cell lands within :data:`PENALTY_POINTS` of the paper's density."""
    WITHIN = "within"
    OFF = "off"


class Verdict(str, Enum):
    """A claim's verdict (:func:`claim_verdict`); *not tested here* where no data or GPU can test it."""
    REPRODUCED = "reproduced"
    PARTLY = "partly"
    NOT_REPRODUCED = "not reproduced"
    IN_PROGRESS = "in progress"
    NOT_TESTED = "not tested here"


def binding(target: float, free_density: float | None) -> Binding:
    """Whether a constraint at ``target`` binds, from the free-gates density of the same model and protocol (fractions;
    None: no free-gates record, :attr:`Binding.UNKNOWN`).

    >>> binding(0.8, 0.75), binding(0.5, 0.75), binding(0.5, None)
    (<Binding.FREE: 'does not bind'>, <Binding.BINDS: 'binds'>, <Binding.UNKNOWN: 'unknown'>)
    """
    if free_density is None:
        return Binding.UNKNOWN
    return Binding.BINDS if free_density > target else Binding.FREE


def tolerance(gate_points: float) -> float:
    """How far (points) a binding constraint may end from its target when one gate is worth ``gate_points`` points of
    its group: :data:`ON_TARGET_POINTS`, or half a gate where a gate is worth more than :data:`COARSE_GATE_POINTS`
    (WideResNet-16-1's first stage, 16 gates: 3.125).

    >>> tolerance(0.5), tolerance(6.25)
    (1.0, 3.125)
    """
    return gate_points / 2 if gate_points > COARSE_GATE_POINTS else ON_TARGET_POINTS


def feasible(gaps: list[float]) -> bool:
    """Whether every constraint ends at most :data:`FEASIBLE_POINTS` above its target (``gaps``: final density minus
    target, points).

    >>> feasible([0.9, -5.0]), feasible([1.2])
    (True, False)
    """
    return all(gap <= FEASIBLE_POINTS for gap in gaps)


def judge_run(gaps: list[float], bindings: list[Binding], gate_points: list[float]) -> Outcome:
    """A constrained run's outcome from each constraint's final gap (density minus target, points), whether it binds,
    and what one gate is worth in its group (points): *violated* when not :func:`feasible`; else *does not bind* when no
    constraint binds (an unknown binding counts as binding); else *on target* when every binding constraint is within
    its :func:`tolerance`, *under* when one is further below.

    >>> judge_run([-2.0], [Binding.BINDS], [6.25]), judge_run([-2.0], [Binding.BINDS], [0.5])
    (<Outcome.ON_TARGET: 'on target'>, <Outcome.UNDER: 'under'>)
    """
    if not len(gaps) == len(bindings) == len(gate_points):
        raise ValueError(f"one binding and one gate size per constraint: {len(gaps)} gaps, {len(bindings)} "
                         f"bindings, {len(gate_points)} gate sizes")
    if not gaps:
        raise ValueError("a constrained run has at least one constraint; got no gap")
    if not feasible(gaps):
        return Outcome.VIOLATED
    judged = [(gap, points) for gap, bound, points in zip(gaps, bindings, gate_points) if bound != Binding.FREE]
    if not judged:
        return Outcome.DOES_NOT_BIND
    return Outcome.ON_TARGET if all(abs(gap) <= tolerance(points) for gap, points in judged) else Outcome.UNDER


def tally(outcomes) -> dict[Outcome, int]:
    """How many of ``outcomes`` are each :class:`Outcome` (every outcome listed, zeros included)."""
    counts = Counter(outcomes)
    return {outcome: counts.get(outcome, 0) for outcome in Outcome}


def passed_and_judged(outcomes) -> tuple[int, int]:
    """How many runs are on target, and how many are judged (all but *does not bind*, neither hit nor miss).

    >>> passed_and_judged([Outcome.ON_TARGET, Outcome.UNDER, Outcome.DOES_NOT_BIND])
    (1, 2)
    """
    counts = tally(outcomes)
    return counts[Outcome.ON_TARGET], sum(counts.values()) - counts[Outcome.DOES_NOT_BIND]


@dataclass(frozen=True)
class PenaltyJudgement:
    """A penalized cell: our seeds' mean density minus the paper's (points), how far our seeds scatter (largest minus
    smallest density, points; 0 with one seed), and the outcome."""
    difference: float
    scatter: float
    outcome: PenaltyOutcome


def judge_penalty(ours: list[float], paper: float) -> PenaltyJudgement:
    """A penalized cell at one of the paper's λ_pen: our seeds' final densities ``ours`` against the paper's ``paper``
    (percent): *within* when their mean is within :data:`PENALTY_POINTS` of it.

    >>> judge_penalty([30.0, 33.0], 30.0)
    PenaltyJudgement(difference=1.5, scatter=3.0, outcome=<PenaltyOutcome.WITHIN: 'within'>)
    """
    if not ours:
        raise ValueError("a penalized cell needs at least one of our runs")
    difference = statistics.fmean(ours) - paper
    outcome = PenaltyOutcome.WITHIN if abs(difference) <= PENALTY_POINTS else PenaltyOutcome.OFF
    return PenaltyJudgement(difference, max(ours) - min(ours), outcome)


def agrees(difference: float, points: float = AGREE_POINTS) -> bool:
    """Whether two numbers ``difference`` apart agree (at most ``points`` apart, :data:`AGREE_POINTS`)."""
    return abs(difference) <= points


def claim_verdict(passed: int, judged: int, complete: bool = True) -> Verdict:
    """A claim's verdict from how many of its ``judged`` runs (or cells, or checks) pass: *reproduced* from
    :data:`REPRODUCED_SHARE`, *partly* from :data:`PARTLY_SHARE`, else *not reproduced*; *in progress* while nothing is
    judged or the planned runs are not ``complete``.

    >>> claim_verdict(9, 10), claim_verdict(5, 10), claim_verdict(4, 10), claim_verdict(0, 0)
    (<Verdict.REPRODUCED: 'reproduced'>, <Verdict.PARTLY: 'partly'>, <Verdict.NOT_REPRODUCED: 'not reproduced'>, \
<Verdict.IN_PROGRESS: 'in progress'>)
    """
    if passed < 0 or passed > judged:
        raise ValueError(f"passed must be between 0 and judged ({judged}); got {passed}")
    if not complete or judged == 0:
        return Verdict.IN_PROGRESS
    share = passed / judged
    if share >= REPRODUCED_SHARE:
        return Verdict.REPRODUCED
    return Verdict.PARTLY if share >= PARTLY_SHARE else Verdict.NOT_REPRODUCED


# Records in, numbers for the rules out

#: Run parameters that do not change the protocol a free-gates run stands for: what the run was asked (target, method,
#: penalty), its dual optimiser (idle at a target of 100%), its seed, where it ran and how it is named.
NOT_PROTOCOL = frozenset({"experiment", "run_name", "preset", "method", "target", "lmbda", "seed", "device", "threads",
                          "dual_lr", "dual_restarts", "dual_optimizer", "nupi_kp", "nupi_ema", "histogram_epochs",
                          "smoke", "compile_gates"})


def is_free_gates(record: dict) -> bool:
    """Whether a record is a free-gates run: constrained at a target of 100% on every constraint."""
    params = record["params"]
    targets = params["target"] if isinstance(params["target"], list) else [params["target"]]
    return params["method"] == "constrained" and all(t == 1.0 for t in targets)


def same_protocol(record: dict, other: dict) -> bool:
    """Whether two records share a model and protocol: the same model and grouping, and every other run parameter
    outside :data:`NOT_PROTOCOL` that both set equal; the preset's values are compared, not its name (a ``cpu`` run at
    gates lr 2 is the ``cpu2`` protocol's)."""
    a, b = record.get("params") or {}, other.get("params") or {}
    same_model = all(a.get(key) is not None and a.get(key) == b.get(key) for key in ("model", "grouping"))
    shared = [key for key in a.keys() & b.keys() - NOT_PROTOCOL if a[key] is not None and b[key] is not None]
    return same_model and bool(a) and bool(b) and all(a[key] == b[key] for key in shared)


def constrained_densities(record: dict, row: dict) -> list[tuple[float, float]]:
    """(expected density, target) of every constraint of a history row of a constrained record: the model's, or each
    gated layer's against its own target (one target for all layers when a single value is given)."""
    target = record["params"]["target"]
    if record["params"]["grouping"] == "model":
        return [(float(row["l0_density"]), target)]
    layers = list(record["metrics"]["l0_density_per_layer"])
    targets = target if isinstance(target, list) else [target] * len(layers)
    return [(float(row[f"density[{layer}]"]), t) for layer, t in zip(layers, targets)]


def final_gaps(record: dict) -> list[float]:
    """Each constraint's final expected density minus its target, in points (positive: above the target)."""
    return [100 * (density - target) for density, target in constrained_densities(record, record["history"][-1])]


def _constraint_densities(record: dict) -> dict[str, float]:
    """A record's final expected density of each constraint, by name (``model``, or the gated layer's)."""
    names = ["model"] if record["params"]["grouping"] == "model" else list(record["metrics"]["l0_density_per_layer"])
    return {name: density for name, (density, _) in zip(names, constrained_densities(record, record["history"][-1]))}


def free_twins(record: dict, free_records: list[dict]) -> list[dict]:
    """The free-gates runs (:func:`is_free_gates`) among ``free_records`` of ``record``'s model and protocol
    (:func:`same_protocol`), every seed."""
    return [free for free in free_records if is_free_gates(free) and same_protocol(record, free)]


def free_densities(record: dict, free_records: list[dict]) -> list[float | None]:
    """The final expected density of each of ``record``'s constraints in the free-gates runs of its model and protocol
    among ``free_records`` (:func:`same_protocol`; their mean over seeds, constraint by constraint name), or None for
    each where there is none."""
    names = list(_constraint_densities(record))
    twins = [_constraint_densities(free) for free in free_twins(record, free_records)]
    return [statistics.fmean(twin[name] for twin in twins) if twins and all(name in twin for twin in twins) else None
            for name in names]


@functools.lru_cache(maxsize=None)
def gate_points(model: str, sparsity: str = "structured") -> tuple[float, dict[str, float]]:
    """What one gate is worth (points) in each group of ``model``: model-wise, the largest gate's parameters over the
    model's gated parameters; layer-wise, 100 / a layer's number of gates, by layer name. The model is built on the meta
    device (no memory).

    >>> gate_points("wrn-16-1")[1]["stage1.0.conv1.conv"]
    6.25
    """
    import torch

    from ..paper.models import build_model

    with torch.device("meta"):
        gated = build_model(model, gated=True, sparsity=sparsity)
    layers = {name: module for name, module in gated.named_modules() if hasattr(module, "weight_log_alpha")}
    total = sum(layer.num_sparsifiable_params for layer in layers.values())
    return (100 * max(layer.group_size for layer in layers.values()) / total,
            {name: 100 * layer.group_size / layer.num_sparsifiable_params for name, layer in layers.items()})


def constraint_gate_points(record: dict) -> list[float]:
    """:func:`gate_points` for each constraint of a constrained record, in its constraints' order."""
    metrics, params = record["metrics"], record["params"]
    name = params["model"]
    model, by_layer = gate_points(name, params.get("sparsity", "structured"))
    if params["grouping"] == "model":
        return [model]
    unknown = [name for name in metrics["l0_density_per_layer"] if name not in by_layer]
    if unknown:
        raise ValueError(f"{params['run_name']}: {name} has no gated layer {unknown[0]!r}; "
                         f"its gated layers: {', '.join(by_layer)}")
    return [by_layer[name] for name in metrics["l0_density_per_layer"]]


@dataclass(frozen=True)
class RunJudgement:
    """A constrained record judged: each constraint's final gap (points), binding and tolerance (points), and the run's
    :class:`Outcome`."""
    gaps: tuple[float, ...]
    bindings: tuple[Binding, ...]
    tolerances: tuple[float, ...]
    outcome: Outcome

    @property
    def binding_known(self) -> bool:
        return Binding.UNKNOWN not in self.bindings


def judge_record(record: dict, free_records: list[dict]) -> RunJudgement:
    """:func:`judge_run` on a constrained record, with the free-gates runs of its model and protocol among
    ``free_records`` (:func:`free_densities`) and its model's gate sizes (:func:`gate_points`)."""
    m = record["params"]
    if m["method"] != "constrained":
        raise ValueError(f"only a constrained run has targets to judge; {m['run_name']} is {m['method']}")
    gaps = final_gaps(record)
    targets = m["target"] if isinstance(m["target"], list) else [m["target"]] * len(gaps)
    bindings = [binding(t, free) for t, free in zip(targets, free_densities(record, free_records))]
    points = constraint_gate_points(record)
    return RunJudgement(tuple(gaps), tuple(bindings), tuple(map(tolerance, points)), judge_run(gaps, bindings, points))



def judge_cell(records: list[dict], free_records: list[dict]) -> RunJudgement:
    """:func:`judge_run` on a cell of a table (the same setting, several seeds): each constraint's final gap is the mean
    over the seeds' gaps, judged at the rule's measure (every constraint: the model, or each layer)."""
    judged = [judge_record(record, free_records) for record in records]
    if not judged:
        raise ValueError("a cell to judge needs at least one record")
    gaps = [statistics.fmean(gap) for gap in zip(*(j.gaps for j in judged))]
    bindings = list(judged[0].bindings)
    return RunJudgement(tuple(gaps), tuple(bindings), judged[0].tolerances,
                        judge_run(gaps, bindings, constraint_gate_points(records[0])))


#: The studies whose grids hold free-gates runs (a target of 100%), by model and protocol.
FREE_GATES_STUDIES = ("cifar10_free_gates", "cifar10_cpu_protocol", "cifar10_gpu_protocol", "cifar10_gpu_granularity",
                      "tab:cifar10", "mnist_free_gates")


def free_gates_records() -> list[dict]:
    """The complete free-gates records (:func:`is_free_gates`) of :data:`FREE_GATES_STUDIES`' grids."""
    from .grids import complete_records
    from .studies import grids

    return [run for grid in grids(*FREE_GATES_STUDIES) for run in complete_records(grid) if is_free_gates(run)]
