"""The paper's claims, each declared once (:data:`CLAIMS`), and the book's verdict on each.

A :class:`Claim` holds its words, where the paper makes it, the paper's scale, the query on the record index
(:mod:`paperlib.harness.index`) that selects our evidence, the judge that counts passes by
:mod:`paperlib.harness.rules`, and the page that answers it. :func:`assess` judges a claim on the index: what was
run, passes of judged, the verdict at our scale and at the paper's (*not tested here* where we never ran it).
Every page and test reads :func:`assess`; no verdict word is typed in prose.
"""

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from paperlib.harness import index, rules, studies
from paperlib.harness.protocols import protocol_name
from paperlib.paper.models import display_name
from paperlib.paper.paper_numbers import ref

from . import comparison, control, report

VERDICTS = tuple(verdict.value for verdict in rules.Verdict)
NOT_TESTED = rules.Verdict.NOT_TESTED.value
PAPER = protocol_name("paper")
CPU = protocol_name("cpu2", "cifar10")
PILOT = protocol_name("cpu", "cifar10")
MNIST_TABLES = ("tab:mnist", "tab:mlp_control", "tab:lenet_control")


@dataclass(frozen=True)
class Ran:
    """What was run for a claim: models, budget (epochs and protocol), seeds and device."""
    model: str
    budget: str
    seeds: str
    device: str

    def __str__(self) -> str:
        return "; ".join(part for part in (self.model, self.budget, self.seeds, self.device) if part)


NOTHING_RAN = Ran("—", "", "", "")
#: Parameters besides the model, method, grouping, target and λ_pen that tell a claim's cells apart.
CELL_PARAMETERS = ("dataset", "sparsity", "gates_lr", "detach_gates", "dual_restarts", "dual_optimizer", "nupi_kp")


def _span(numbers) -> str:
    numbers = sorted(set(numbers))
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}–{numbers[-1]}"
    return ", ".join(map(str, numbers))


def ran(rows: pd.DataFrame) -> Ran:
    """:class:`Ran` of the index ``rows``, e.g. ``MLP, LeNet5; 200 epochs, paper protocol; seeds 0–4 per cell;
    CPU, 12 of 82 on GPU`` (a cell: the same run but for its seed)."""
    if rows.empty:
        return NOTHING_RAN
    models = ", ".join(dict.fromkeys(map(display_name, rows["model"])))
    epochs = "/".join(str(int(e)) for e in sorted(set(rows["epochs_completed"])))
    protocols = ", ".join(dict.fromkeys(rows["protocol"]))
    keys = ["model", "method", "grouping", "target", "lmbda", *CELL_PARAMETERS]
    cells = rows.assign(**{k: rows[k].map(str) for k in keys}).groupby(keys)["seed"].agg(lambda seeds: set(seeds))
    counts = sorted({len(seeds) for seeds in cells})
    every = sorted(set().union(*cells))
    if len(counts) == 1:
        seeds = f"seed{'s' if len(every) > 1 else ''} {_span(every)}" + (" per cell" if len(cells) > 1 else "")
    else:
        seeds = f"{counts[0]} to {counts[-1]} seeds per cell (seeds {_span(every)})"
    return Ran(models, f"{epochs} epochs, {protocols}", seeds, index.where_ran(rows["device"]))


@dataclass(frozen=True)
class Count:
    """``passed`` of ``judged``; ``complete`` once every planned run is in; ``criteria``: the paper's own criterion
    where it differs from the book's rule, name -> (passed, judged)."""
    passed: int
    judged: int
    complete: bool = True
    criteria: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """One claim: ``evidence``, the index query (:func:`paperlib.harness.index.select`) of our records; ``judge``,
    what of them passes (``counted`` names it); ``scale`` ours, ``paper_scale`` the paper's (``at_paper_scale``:
    the same); ``why_not``: why a claim without evidence is not tested here."""
    key: str
    words: str
    where: str
    paper_scale: str
    page: str
    section: str | None
    counted: str = ""
    evidence: dict | None = None
    judge: Callable[[pd.DataFrame], Count] | None = None
    scale: str = ""
    at_paper_scale: bool = False
    why_not: str = ""


@dataclass(frozen=True)
class Assessment:
    """A claim judged: what was run, the counts, the verdict at our scale and at the paper's."""
    claim: Claim
    ran: Ran
    count: Count
    verdict: str
    paper_verdict: str

    def __post_init__(self):
        for verdict in (self.verdict, self.paper_verdict):
            if verdict not in VERDICTS:
                raise ValueError(f"verdict must be one of {VERDICTS}; got {verdict!r}")


# --------------------------------------------------------------------------- #
# The judges: each counts one claim's evidence by the rules of paperlib.harness.rules.
# --------------------------------------------------------------------------- #

def runs_on_target(planned_grids: tuple[str, ...] = ()) -> Callable[[pd.DataFrame], Count]:
    """Each constrained run judged by the book's rule (every constraint); beside it App. G's own criterion
    (feasible: every constraint at most a point over). In progress until ``planned_grids``' runs are in."""
    def judge(rows: pd.DataFrame) -> Count:
        free = rules.free_gates_records()
        judged = [rules.judge_record(run, free) for run in index.load(rows)]
        passed, total = rules.passed_and_judged(j.outcome for j in judged)
        binding = [j for j in judged if j.outcome != rules.Outcome.DOES_NOT_BIND]
        feasible = sum(j.outcome != rules.Outcome.VIOLATED for j in binding)
        complete = len(rows) >= report.planned_runs(planned_grids) if planned_grids else True
        return Count(passed, total, complete, {"App. G's criterion (feasible)": (feasible, len(binding))})
    return judge


def outcomes(judged: list[rules.RunJudgement]) -> pd.Series:
    """How many runs had each outcome, and how many were judged binding for want of a free-gates record."""
    counts = {outcome.value: count for outcome, count in rules.tally(j.outcome for j in judged).items()}
    return pd.Series({**counts, "binding unknown": sum(not j.binding_known for j in judged)}, dtype=int)


def cells_near(tables: tuple[str, ...], method: str, columns: tuple[str, ...], points: float):
    """Cells of ``tables`` (``method``, paper's protocol) whose ``columns`` are within ``points`` of the paper's."""
    def judge(rows: pd.DataFrame) -> Count:
        deltas = []
        for label in tables:
            table = comparison.compare_table(label)
            table = table[table["protocol"].str.startswith("paper")]
            table = table[table["method"] == method]
            deltas += [float(d) for column in columns if f"{column} Δ" in table  # no Δ: no records of ours
                       for d in table[f"{column} Δ"].dropna()]
        return Count(sum(rules.agrees(d, points) for d in deltas), len(deltas))
    return judge


def final_errors_within_chance(rows: pd.DataFrame) -> Count:
    """An MNIST row passes when chance explains its final error's difference from the paper's (95%)."""
    found = pd.concat([comparison.agreement(label) for label in MNIST_TABLES], ignore_index=True)
    within = int((~found["beyond chance"].astype(bool)).sum()) if len(found) else 0
    return Count(within, len(found))


def penalty_cells(tables: tuple[str, ...] = ("tab:mlp_control", "tab:lenet_control")) -> list[rules.PenaltyJudgement]:
    """Every penalized cell of ``tables`` with records at the paper's protocol and a printed density, judged by
    :func:`paperlib.harness.rules.judge_penalty`."""
    label = comparison.METRIC_LABELS["l0_density"]
    judged = []
    for table in tables:
        compared = comparison.compare_table(table)
        for (_, row), values in zip(compared.iterrows(), compared.attrs["values"]):
            ours = values.get("l0_density")
            if row["method"] == "penalized" and ours and str(row["protocol"]).startswith("paper") \
                    and row[f"{label} paper"]:
                judged.append(rules.judge_penalty(ours, comparison.mean_of(row[f"{label} paper"])))
    return judged


def penalties_as_printed(rows: pd.DataFrame) -> Count:
    judged = penalty_cells()
    return Count(sum(j.outcome == rules.PenaltyOutcome.WITHIN for j in judged), len(judged))


def restarts_nearer(rows: pd.DataFrame) -> Count:
    """A target passes when its run with dual restarts ends nearer it than its run without."""
    pairs = {}
    for _, row in rows.iterrows():
        pairs.setdefault(row["target"], {})[row["dual_restarts"]] = row["l0_density"]
    pairs = {target: pair for target, pair in pairs.items() if len(pair) == 2}
    nearer = sum(abs(pair[True] - target) < abs(pair[False] - target) for target, pair in pairs.items())
    return Count(nearer, len(pairs))


def settle_feasible(planned_grids: tuple[str, ...]) -> Callable[[pd.DataFrame], Count]:
    """Figure 3: a run passes when it settles feasible (:func:`~analysis.control.stability_rows`)."""
    def judge(rows: pd.DataFrame) -> Count:
        found = control.stability_rows(index.load(rows))
        settled = int(found["settled from epoch"].notna().sum())
        return Count(settled, len(found), len(rows) >= report.planned_runs(planned_grids))
    return judge


def searches_needed(rows: pd.DataFrame) -> Count:
    """App. E: a search passes when it needs :data:`~paperlib.harness.rules.SEARCH_TRAININGS` trainings or more
    (the paper's 6 and 7); only searches whose trainings are all in ``rows`` count."""
    folders = set(rows["folder"].map(lambda f: f.split("/")[-1]))
    searches = [s for s in report.complete_searches(studies.grids("app:bisection")[0])
                if {e["run"] for e in s.get("evaluations", [])} <= folders]
    return Count(sum(s["num_trainings"] >= rules.SEARCH_TRAININGS for s in searches), len(searches))


def gates_decided(rows: pd.DataFrame) -> Count:
    """App. I: a run passes when :data:`~paperlib.harness.rules.DECIDED_GATES_SHARE` of its first gated layer's
    medians (eq. 9) are exactly 0 or 1 at the last saved epoch."""
    shares = [1.0 - report.fractional_medians(run)[1] for run in index.load(rows)]
    return Count(sum(share >= rules.DECIDED_GATES_SHARE for share in shares), len(shares))


def ablation_holds(rows: pd.DataFrame) -> Count:
    """App. H: each of :func:`~analysis.control.ablation_checks` once the ablation grid is in."""
    ablation = index.load(rows)
    complete = len(ablation) >= len(report.grid_runs(control.ABLATION_GRID))
    checks = control.ablation_checks(ablation, control.control_runs()) if complete else []
    return Count(sum(bool(check[-1]) for check in checks), len(checks), complete)


# --------------------------------------------------------------------------- #
# The claims, in the paper's order
# --------------------------------------------------------------------------- #

def _experiments(*study_names: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(e for name in study_names for e in studies.study(name).experiments))


_MNIST = dict(experiment=_experiments(*MNIST_TABLES), protocol=PAPER, variant="")
_MNIST_SCALE = "MLP and LeNet5 on MNIST, 200 epochs"
_CIFAR_SCALE = "WideResNet-28-10 on CIFAR-10, 200 epochs"
_CPU_SCALE = "WideResNet-16-1, 20 epochs"
_CPU_GRIDS = ("grids/cifar10_cpu2_control.yaml",)
_CPU_RUNS = dict(experiment=("cifar10", "cifar10_cpu2"), protocol=CPU, variant="", method="constrained")
_UNSTRUCTURED = ("tab:mnist_unstructured_comparison_mlp", "tab:mnist_unstructured_comparison_lenet")

CLAIMS = (
    Claim("one_shot_mnist", "A constraint sets the density in one run (MNIST)",
          f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, {ref('tab:lenet_control')}", _MNIST_SCALE,
          "results_mnist", "claim-one-shot-mnist", "runs on target, each constraint (layer-wise: each layer)",
          dict(_MNIST, method="constrained", sparsity="structured"), runs_on_target(), _MNIST_SCALE, True),
    Claim("accuracy_mnist", "At no cost in accuracy (MNIST)",
          f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, {ref('tab:lenet_control')}", _MNIST_SCALE,
          "results_mnist_why", "mnist-final-errors", "rows whose final error the runs' spread explains",
          dict(_MNIST, sparsity="structured"), final_errors_within_chance, _MNIST_SCALE, True),
    Claim("penalty_mnist", "A penalty's density follows its coefficient as printed (MNIST)",
          f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", _MNIST_SCALE, "results_mnist",
          "claim-penalty-mnist", "cells near the paper's density", dict(_MNIST, method="penalized"),
          penalties_as_printed, _MNIST_SCALE, True),
    Claim("counts_mnist", "What a target leaves: parameters and MACs (MNIST)",
          f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", _MNIST_SCALE, "results_mnist",
          "claim-counts-mnist", "parameter and MAC cells near the paper's",
          dict(_MNIST, method="constrained", experiment=_experiments(*MNIST_TABLES[1:])),
          cells_near(MNIST_TABLES[1:], "constrained", ("params (%)", "MACs (%)"), rules.AGREE_POINTS),
          _MNIST_SCALE, True),
    Claim("dual_restarts", "Dual restarts keep the model at its target", f"§5.3, {ref('fig:dual_restarts')}",
          "LeNet5 on MNIST, 200 epochs", "results_dynamics", "claim-dual-restarts",
          "targets nearer with restarts than without",
          dict(experiment="dual_restarts", protocol=PAPER, dual_optimizer="gradient_ascent"), restarts_nearer,
          "LeNet5 on MNIST, 200 epochs", True),
    Claim("stable_dynamics", "Constraint dynamics stay stable on residual networks",
          f"§5.4, {ref('fig:stable_training')}", "ResNet18 on TinyImageNet, 120 epochs", "results_cifar10",
          "claim-stable-dynamics", "runs that settle feasible", _CPU_RUNS, settle_feasible(_CPU_GRIDS),
          _CPU_SCALE),
    Claim("cifar10_control", "The control holds on a residual network (CIFAR-10)",
          f"§5.5, {ref('fig:cifar10_comparison')}, {ref('tab:cifar10_control')}", _CIFAR_SCALE, "results_cifar10",
          "claim-cifar10-control", "runs on target, each constraint (layer-wise: each block)", _CPU_RUNS,
          runs_on_target(_CPU_GRIDS), _CPU_SCALE),
    Claim("imagenet", "Constraints beat magnitude pruning on ImageNet", f"§5.5, {ref('tab:mp_comparison_imagenet')}",
          "ResNet50 on ImageNet, 90 epochs", "results_beyond", "not-run",
          why_not="ImageNet is not on these machines"),
    Claim("unstructured_mnist", "Unstructured constrained runs reach the paper's errors (MNIST)",
          f"§5.6, {ref('tab:mnist_unstructured_comparison_mlp')}, {ref('tab:mnist_unstructured_comparison_lenet')}",
          _MNIST_SCALE, "results_unstructured", "claim-unstructured", "cells whose best error is near the paper's",
          dict(experiment=_experiments(_UNSTRUCTURED[0]), protocol=PAPER, method="constrained",
               sparsity="unstructured"),
          cells_near(_UNSTRUCTURED, "constrained", ("val. error best (%)",), rules.ERROR_POINTS), _MNIST_SCALE, True),
    Claim("magnitude_pruning_mnist", "Magnitude pruning, the baseline, as printed (MNIST)",
          f"§5.6, {ref('tab:mnist_unstructured_comparison_mlp')}, {ref('tab:mnist_unstructured_comparison_lenet')}",
          _MNIST_SCALE, "results_unstructured", "claim-unstructured", "cells whose best error is near the paper's",
          dict(experiment=_experiments(_UNSTRUCTURED[0]), protocol=PAPER, method="magnitude_pruning"),
          cells_near(_UNSTRUCTURED, "magnitude_pruning", ("val. error best (%)",), rules.ERROR_POINTS),
          _MNIST_SCALE, True),
    Claim("bisection", "A penalty needs a search to reach a density", f"{ref('app:bisection')}, {ref('fig:bisection')}",
          "MLP on MNIST, 150 epochs a training", "results_beyond", "claim-bisection",
          "searches that needed several trainings", dict(experiment="bisection", protocol=PAPER), searches_needed,
          "MLP on MNIST, 150 epochs a training", True),
    Claim("gate_medians", "Test-time gates end at 0 or 1",
          f"{ref('app:test_time_gates')}, {ref('fig:mnist_gate_histograms')}", _MNIST_SCALE, "results_dynamics",
          "claim-gate-medians", "runs whose first layer's gates end decided",
          dict(experiment="gate_histograms_mnist", protocol=PAPER), gates_decided, _MNIST_SCALE, True),
    Claim("gates_ablation", "Gates need a larger learning rate and no weight decay",
          f"{ref('app:resnet_control_fixes')}, {ref('tab:cifar10')}, {ref('fig:increase_lr')}, {ref('fig:wd_overpen')}",
          _CIFAR_SCALE, "results_cifar10", "claim-gates-ablation", "checks that hold",
          dict(experiment="gates_ablation", protocol=PILOT), ablation_holds, f"{_CPU_SCALE}, {PILOT}"),
    Claim("beyond", "The same control on CIFAR-100 and TinyImageNet, structured and unstructured",
          f"{ref('app:all_comparisons')}, {ref('tab:cifar100_control')}, {ref('fig:cifar100_comparison')}, "
          f"{ref('tab:tiny_unstructured_comparison')}", "WideResNet-28-10 and ResNet18, 200 and 120 epochs",
          "results_beyond", "not-run", why_not="CIFAR-100 and TinyImageNet are not on these machines"),
)
#: The claims by key.
BY_KEY = {claim.key: claim for claim in CLAIMS}
#: The central claims, first on the intro's first screen.
CENTRAL = ("one_shot_mnist", "cifar10_control", "accuracy_mnist", "penalty_mnist")


def assess(claim: Claim | str, frame: pd.DataFrame | None = None) -> Assessment:
    """``claim`` (or its key) judged on the record index ``frame`` (default: every record of ``runs/``)."""
    claim = BY_KEY[claim] if isinstance(claim, str) else claim
    if claim.evidence is None:
        return Assessment(claim, NOTHING_RAN, Count(0, 0), NOT_TESTED, NOT_TESTED)
    frame = index.record_index() if frame is None else frame
    rows = index.select(frame, **claim.evidence)
    count = claim.judge(rows)
    verdict = rules.claim_verdict(count.passed, count.judged, count.complete).value
    return Assessment(claim, ran(rows), count, verdict, verdict if claim.at_paper_scale else NOT_TESTED)


def claims(frame: pd.DataFrame | None = None) -> list[Assessment]:
    """Every claim assessed, in the paper's order."""
    frame = index.record_index() if frame is None else frame
    return [assess(claim, frame) for claim in CLAIMS]


#: How the verdict table names the book's pages.
PAGE_NAMES = {"results_mnist": "MNIST", "results_mnist_why": "MNIST, differences",
              "results_dynamics": "dynamics", "results_cifar10": "CIFAR-10",
              "results_cifar10_misses": "CIFAR-10, protocols under test",
              "results_unstructured": "unstructured", "results_beyond": "beyond"}


def section_link(claim: Claim, text: str | None = None) -> str:
    """A link to the section of the page that answers ``claim`` (the page's top when it has no section)."""
    anchor = f"#{claim.section}" if claim.section else ""
    return f'<a href="{claim.page}.html{anchor}">{text or PAGE_NAMES.get(claim.page, claim.page)}</a>'


def verdict_at_scale(found: Assessment) -> str:
    """The verdict with its scale where ours is smaller (``reproduced at WideResNet-16-1, 20 epochs``)."""
    if found.verdict == NOT_TESTED or found.claim.at_paper_scale:
        return found.verdict
    return f"{found.verdict} at {found.claim.scale}"


def _counts(found: Assessment) -> str:
    if not found.count.judged:
        return "—"
    extra = "".join(f"; {name}: {p} / {j}" for name, (p, j) in found.count.criteria.items())
    return f"{found.count.passed} / {found.count.judged}{extra}"


def table(found: list[Assessment], central_first: bool = False) -> pd.DataFrame:
    """The verdict table, a row per claim (:data:`CENTRAL` first if ``central_first``), linked to its section."""
    if central_first:
        found = sorted(found, key=lambda f: (f.claim.key not in CENTRAL, CENTRAL.index(f.claim.key)
                                             if f.claim.key in CENTRAL else 0))
    return pd.DataFrame([{"claim": section_link(f.claim, f.claim.words), "in the paper": f.claim.where,
                          "verdict, our scale": verdict_at_scale(f), "what we ran": str(f.ran),
                          "the paper's scale": f.claim.paper_scale, "verdict there": f.paper_verdict,
                          "pass": _counts(f), "counted": f.claim.counted or f.claim.why_not} for f in found])


#: The verdicts the book printed before, by claim key ("How the verdicts changed").
BEFORE = "book/analysis/verdicts_before_rules.csv"


def before_and_after(found: list[Assessment]) -> pd.DataFrame:
    """Each claim's verdict at the commits of :data:`BEFORE` beside its verdict now."""
    from paperlib.harness.records import project_root

    before = pd.read_csv(project_root() / BEFORE, comment="#", dtype=str, keep_default_na=False).set_index("key")
    rows = [{"claim": f.claim.words, "at 704e401": before.loc[f.claim.key, "verdict_704e401"] or "—",
             "at 8175249": before.loc[f.claim.key, "verdict_8175249"] or "—", "now": verdict_at_scale(f)}
            for f in found]
    return pd.DataFrame(rows, columns=["claim", "at 704e401", "at 8175249", "now"])
