"""The book's verdict, claim by claim: what reproduced, what did not, what was not tested here.

One :class:`Claim` per claim of the paper's §5 and Appendices E, H, I, K and L,
each with where the paper shows it, what we ran (:class:`Ran`: model, budget,
seeds, device, read from the records), how many of its runs, cells or checks pass
(:attr:`Claim.passed` of :attr:`Claim.judged`, counting :attr:`Claim.counts`) and a verdict. Every
verdict is :func:`paperlib.harness.rules.claim_verdict` of how many of the claim's runs,
cells or checks pass their rule in :mod:`paperlib.harness.rules`, the same thresholds
for every claim; the run-level rules are there too. A claim whose records do
not exist yet says so, and is never called reproduced.

Verdicts (:class:`paperlib.harness.rules.Verdict`): *reproduced*, *partly*, *not
reproduced*, *in progress* (runs planned, not all in), *not tested here* (no
data or no GPU; the page says what would test it).
"""

from dataclasses import dataclass

import pandas as pd

from paperlib.harness import presets, rules, studies
from paperlib.paper.paper_numbers import ref

from . import comparison, control, report

VERDICTS = tuple(verdict.value for verdict in rules.Verdict)

MNIST_TABLES = ("tab:mnist", "tab:mlp_control", "tab:lenet_control")

#: How the verdict table names our models.
MODEL_NAMES = {"mlp": "MLP", "lenet5": "LeNet5", "wrn-16-1": "WideResNet-16-1", "wrn-28-10": "WideResNet-28-10",
               "resnet18": "ResNet18", "resnet50": "ResNet50"}
#: How the verdict table names a preset's protocol.
PROTOCOLS = {"paper": "the paper's protocol", "cpu": "CPU protocol"}


@dataclass(frozen=True)
class Ran:
    """What was run for a claim: models, budget (epochs and protocol), seeds and device, as the table shows them."""
    model: str
    budget: str
    seeds: str
    device: str

    def __str__(self) -> str:
        return "; ".join(part for part in (self.model, self.budget, self.seeds, self.device) if part)


NOTHING_RAN = Ran("—", "", "", "")

#: Run parameters besides the model, method, grouping, target and λ_pen that tell a study's cells apart.
CELL_PARAMETERS = ("sparsity", "gates_lr", "detach_gates", "dual_restarts", "dual_optimizer", "nupi_kp")
#: What a record written before one of them existed ran with: its default (gradient ascent before the
#: dual-optimiser study).
_DEFAULTS = {name: getattr(presets.ExperimentConfig, name) for name in CELL_PARAMETERS}


def _span(numbers) -> str:
    numbers = sorted(set(numbers))
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}–{numbers[-1]}"
    return ", ".join(map(str, numbers))


def ran(runs: list[dict]) -> Ran:
    """:class:`Ran` of ``runs`` (their ``metrics``): models, epochs and preset, the seeds of each cell (the same
    run but for its seed), and where they trained (:func:`analysis.control.ran_on`). A run of the CPU protocol
    that trained on a GPU is counted as such.

    Example: ``Ran("MLP, LeNet5", "200 epochs, the paper's protocol", "seeds 0–4 per cell", "CPU, 3 on GPU")``.
    """
    metrics = [run["metrics"] for run in runs]
    if not metrics:
        return NOTHING_RAN
    models = ", ".join(dict.fromkeys(MODEL_NAMES.get(m["model"], m["model"]) for m in metrics))
    epochs = "/".join(map(str, sorted({m.get("epochs_completed", m.get("epochs")) for m in metrics})))
    presets = ", ".join(PROTOCOLS.get(p, p) for p in dict.fromkeys(m["preset"] for m in metrics))
    cells: dict[tuple, set] = {}
    for run, m in zip(runs, metrics):
        params = run.get("params") or {}
        key = (m["model"], m.get("method"), m.get("grouping"), str(m.get("target")),
               str(m.get("lmbda")) if m.get("method") == "penalized" else None,
               *(str(params.get(name, _DEFAULTS[name])) for name in CELL_PARAMETERS))
        cells.setdefault(key, set()).add(m["seed"])
    counts = sorted({len(seeds) for seeds in cells.values()})
    every = sorted(set().union(*cells.values()))
    if len(counts) == 1:
        seeds = f"seed{'s' if len(every) > 1 else ''} {_span(every)}" + (" per cell" if len(cells) > 1 else "")
    else:
        seeds = f"{counts[0]} to {counts[-1]} seeds per cell (seeds {_span(every)})"
    on_gpu = sum(control.ran_on(m) == "GPU" for m in metrics)
    device = "CPU" if not on_gpu else ("GPU" if on_gpu == len(metrics) else f"CPU, {on_gpu} of {len(metrics)} on GPU")
    return Ran(models, f"{epochs} epochs, {presets}", seeds, device)


@dataclass
class Claim:
    """One claim's row: ``passed`` of ``judged`` things pass their rule; ``counts`` names them (a fixed phrase:
    "runs on target"), or, for a claim not tested here, why not. ``page`` is the page that answers it, and
    ``section`` the label of the section there (``(label)=`` in the page), if any."""
    claim: str
    where: str
    ran: Ran
    verdict: str
    passed: int
    judged: int
    counts: str
    page: str
    section: str | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")


def _at_paper_protocol(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["protocol"].str.startswith("paper")]


def _records(grids, preset: str | None = None, **where) -> list[dict]:
    """The complete records of ``grids`` at ``preset`` whose metrics have the values ``where``, each once (grids
    may share a run: seeds 1 and 2 of some MLP cells are in two grids)."""
    found = {str(run["path"]): run for grid in grids for run in report.complete_records(grid)
             if (preset is None or run["metrics"]["preset"] == preset)
             and all(run["metrics"].get(key) == value for key, value in where.items())}
    return list(found.values())


def outcomes(judged: list[rules.RunJudgement]) -> pd.Series:
    """How many of ``judged`` runs had each outcome (on target, under, violated, does not bind), and how many
    were judged as binding for want of a free-gates record ("binding unknown")."""
    counts = {outcome.value: count for outcome, count in rules.tally(j.outcome for j in judged).items()}
    return pd.Series({**counts, "binding unknown": sum(not j.binding_known for j in judged)}, dtype=int)


def _judged_claim(runs: list[dict], complete: bool = True) -> tuple[str, int, int, list[rules.RunJudgement]]:
    """The constrained ``runs`` judged by :func:`paperlib.harness.rules.judge_record`: the verdict, how many
    pass of how many judged, and the judgements."""
    free = rules.free_gates_records()
    judged = [rules.judge_record(run, free) for run in runs]
    passed, total = rules.passed_and_judged(j.outcome for j in judged)
    return rules.claim_verdict(passed, total, complete).value, passed, total, judged


def one_shot_mnist() -> Claim:
    """Constrained structured MNIST runs of Table 1 and the control tables at the paper's protocol, every seed
    in: each run judged by :func:`paperlib.harness.rules.judge_record`; the share on target of those whose targets bind
    gives the verdict."""
    grids = [g for t in MNIST_TABLES for g in studies.TABLES[t].grids]
    runs = _records(grids, "paper", method="constrained")
    runs = [run for run in runs if run["metrics"].get("sparsity", "structured") == "structured"]
    verdict, passed, total, _ = _judged_claim(runs)
    return Claim("A constraint sets the density in one run (MNIST)",
                 f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, {ref('tab:lenet_control')}",
                 ran(runs), verdict, passed, total, "runs on target", "results_mnist", "claim-one-shot-mnist")


def _mnist_runs() -> list[dict]:
    return _records([g for t in MNIST_TABLES for g in studies.TABLES[t].grids], "paper")


def accuracy_mnist() -> Claim:
    """Final errors of the MNIST tables at the paper's protocol against the spread of the paper's runs
    (:func:`comparison.agreement`): a row passes when its difference is within what chance explains (95%)."""
    rows = pd.concat([comparison.agreement(label) for label in MNIST_TABLES], ignore_index=True)
    within = int((~rows["beyond chance"].astype(bool)).sum()) if len(rows) else 0
    return Claim("At no cost in accuracy (MNIST)", f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, "
                 f"{ref('tab:lenet_control')}", ran(_mnist_runs()), rules.claim_verdict(within, len(rows)).value,
                 within, len(rows), "rows whose final error the runs' spread explains", "results_mnist_why",
                 "mnist-final-errors")


def _cells(tables: tuple[str, ...], method: str, column: str) -> pd.Series:
    """Our minus the paper's value of ``column`` in the paper-protocol rows of ``method``, as floats."""
    deltas = []
    for label in tables:
        table = _at_paper_protocol(comparison.compare_table(label))
        table = table[table["method"] == method]
        deltas += [float(d) for d in table[f"{column} Δ"].dropna()]
    return pd.Series(deltas, dtype=float)


def penalty_cells(tables: tuple[str, ...] = ("tab:mlp_control", "tab:lenet_control")) -> list[rules.PenaltyJudgement]:
    """Every penalized cell of ``tables`` with records at the paper's protocol and a printed density, judged by
    :func:`paperlib.harness.rules.judge_penalty` on our seeds' final densities."""
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


def penalized_mnist() -> Claim:
    """Penalized MNIST cells at the paper's λ_pen (:func:`penalty_cells`): a cell passes when its density is
    within :data:`~paperlib.harness.rules.PENALTY_POINTS` of the paper's; the evidence says how far the seeds scatter."""
    judged = penalty_cells()
    within = sum(j.outcome == rules.PenaltyOutcome.WITHIN for j in judged)
    runs = [run for run in _mnist_runs() if run["metrics"]["method"] == "penalized"]
    return Claim("A penalty's density follows λ_pen as printed (MNIST)",
                 f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", ran(runs),
                 rules.claim_verdict(within, len(judged)).value, within, len(judged),
                 "cells near the paper's density", "results_mnist", "claim-penalty-mnist")


def _agreeing(deltas: pd.Series, points: float = rules.AGREE_POINTS) -> int:
    """How many of ``deltas`` agree with the paper (:func:`paperlib.harness.rules.agrees`)."""
    return int(sum(rules.agrees(d, points) for d in deltas))


def counts_mnist() -> Claim:
    """Parameters and MACs of the purged constrained MNIST models: a cell passes when it is within
    :data:`~paperlib.harness.rules.AGREE_POINTS` of the paper's."""
    deltas = pd.concat([_cells(MNIST_TABLES[1:], "constrained", metric) for metric in ("params (%)", "MACs (%)")])
    agree = _agreeing(deltas)
    runs = [run for run in _mnist_runs() if run["metrics"]["method"] == "constrained"]
    return Claim("What a target leaves: parameters and MACs (MNIST)",
                 f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", ran(runs),
                 rules.claim_verdict(agree, len(deltas)).value, agree, len(deltas),
                 "parameter and MAC cells near the paper's", "results_mnist", "claim-counts-mnist")


def dual_restarts() -> Claim:
    """LeNet5 with and without dual restarts (the paper's protocol): a target passes when the run with restarts
    ends nearer it than the run without."""
    runs = report.complete_records(studies.grids("fig:dual_restarts", preset="paper")[0])
    pairs = {}
    for run in runs:
        pairs.setdefault(run["metrics"]["target"], {})[run["params"]["dual_restarts"]] = run["metrics"]["l0_density"]
    pairs = {target: pair for target, pair in pairs.items() if len(pair) == 2}
    nearer = sum(abs(pair[True] - target) < abs(pair[False] - target) for target, pair in pairs.items())
    return Claim("Dual restarts keep the model at its target", f"§5.3, {ref('fig:dual_restarts')}", ran(runs),
                 rules.claim_verdict(nearer, len(pairs)).value, nearer, len(pairs),
                 "targets nearer with restarts than without", "results_dynamics", "claim-dual-restarts")


def stable_dynamics() -> Claim:
    """Figure 3's claim on our CIFAR-10 control runs (:func:`~analysis.control.stability_rows`): a run passes when
    it settles feasible (:func:`paperlib.harness.rules.feasible` at every logged step to the end); in progress until
    seed 0's constrained runs are complete. Figure 3's ResNet18 on TinyImageNet is not run."""
    runs = control.control_runs()
    rows = control.stability_rows(runs)
    settled = rows.dropna(subset=["settled from epoch"])
    seed0 = [run for run in runs if (run["metrics"]["method"], run["metrics"]["seed"]) == ("constrained", 0)]
    complete = len(rows) >= control.CONTROL_RUNS["constrained"]
    return Claim("Constraint dynamics stay stable on ResNets", f"§5.4, {ref('fig:stable_training')}",
                 ran(seed0), rules.claim_verdict(len(settled), len(rows), complete).value, len(settled), len(rows),
                 "runs that settle feasible", "results_cifar10", "claim-stable-dynamics")


def cifar10_control() -> Claim:
    """The CIFAR-10 control table at the CPU protocol, every seed in: each constrained run judged by
    :func:`paperlib.harness.rules.judge_record` (its free density from the free-gates runs of the same model and
    protocol); in progress until seed 0's grid is complete."""
    planned = len(report.grid_runs(control.CONTROL_GRIDS[0]))
    complete = len(report.complete_records(control.CONTROL_GRIDS[0])) >= planned
    runs = [run for run in control.control_runs() if run["metrics"]["method"] == "constrained"]
    verdict, passed, total, _ = _judged_claim(runs, complete)
    return Claim("The control holds on a residual network (CIFAR-10)",
                 f"§5.5, {ref('fig:cifar10_comparison')}, {ref('tab:cifar10_control')}", ran(runs), verdict, passed,
                 total, "runs on target", "results_cifar10", "claim-cifar10-control")


def bisection() -> Claim:
    """App. E's bisection over λ_pen for a 50% MLP: a search passes when it needs at least
    :data:`~paperlib.harness.rules.SEARCH_TRAININGS` trainings (the paper counts 6 and 7) to land within its tolerance."""
    searches = report.complete_searches(studies.grids("app:bisection")[0])
    needed = sum(s["num_trainings"] >= rules.SEARCH_TRAININGS for s in searches)
    verdict = rules.claim_verdict(needed, len(searches))
    described = [{"metrics": {"model": s["run_name"].split("-")[1], "epochs": s["epochs"], "preset": s["preset"],
                              "seed": s["seed"], "grouping": s["grouping"]}} for s in searches]
    return Claim("A penalty needs a search to reach a density", f"{ref('app:bisection')}, {ref('fig:bisection')}",
                 ran(described), verdict.value, needed, len(searches), "searches that needed several trainings",
                 "results_beyond", "claim-bisection")


def unstructured_mnist() -> Claim:
    """Unstructured MNIST (App. L): a cell passes when our constrained runs' best error is within
    :data:`~paperlib.harness.rules.ERROR_POINTS` of the paper's."""
    deltas = _cells(("tab:mnist_unstructured_comparison_mlp", "tab:mnist_unstructured_comparison_lenet"),
                    "constrained", "val. error best (%)")
    agree = _agreeing(deltas, rules.ERROR_POINTS)
    grids = studies.TABLES["tab:mnist_unstructured_comparison_mlp"].grids
    runs = _records(grids, "paper", method="constrained")
    return Claim("Unstructured sparsity, against magnitude pruning (MNIST)",
                 f"§5.6, {ref('tab:mnist_unstructured_comparison_mlp')}, "
                 f"{ref('tab:mnist_unstructured_comparison_lenet')}", ran(runs),
                 rules.claim_verdict(agree, len(deltas)).value, agree, len(deltas),
                 "cells whose best error is near the paper's", "results_unstructured", "claim-unstructured")


def gate_medians() -> Claim:
    """App. I's test-time gates on MNIST: a run passes when at least :data:`~paperlib.harness.rules.DECIDED_GATES_SHARE`
    of the first gated layer's medians (eq. 9) are exactly 0 or 1 at the last saved epoch."""
    runs = report.complete_records(studies.grids("fig:mnist_gate_histograms", preset="paper")[0])
    shares = [1.0 - report.fractional_medians(run)[1] for run in runs]
    passed = sum(share >= rules.DECIDED_GATES_SHARE for share in shares)
    return Claim("Test-time gates end at 0 or 1", f"{ref('app:test_time_gates')}, {ref('fig:mnist_gate_histograms')}",
                 ran(runs), rules.claim_verdict(passed, len(shares)).value, passed, len(shares),
                 "runs whose first layer's gates end decided", "results_dynamics", "claim-gate-medians")


def gates_ablation() -> Claim:
    """App. H at the CPU protocol: in progress until every run of the ablation grid is complete; then each of
    :func:`~analysis.control.ablation_checks` (the gates' learning rate and the stop-gradient) is one pass or
    fail."""
    ablation = report.complete_records(control.ABLATION_GRID)
    planned = len(report.grid_runs(control.ABLATION_GRID))
    checks = control.ablation_checks(ablation, control.control_runs()) if len(ablation) >= planned else []
    held = sum(bool(check[-1]) for check in checks)
    verdict = rules.claim_verdict(held, len(checks), len(ablation) >= planned)
    return Claim("Gates need a larger learning rate and no weight decay",
                 f"{ref('app:resnet_control_fixes')}, {ref('tab:cifar10')}, {ref('fig:increase_lr')}, "
                 f"{ref('fig:wd_overpen')}", ran(ablation), verdict.value, held, len(checks), "checks that hold",
                 "results_cifar10", "claim-gates-ablation")


def not_tested(claim: str, where: str, why: str, page: str) -> Claim:
    """A claim nothing here tests; ``why`` takes the place of what its runs would count."""
    return Claim(claim, where, NOTHING_RAN, rules.Verdict.NOT_TESTED.value, 0, 0, why, page, "not-run")


def claims() -> list[Claim]:
    """Every claim, in the paper's order."""
    return [
        one_shot_mnist(), accuracy_mnist(), penalized_mnist(), counts_mnist(), dual_restarts(),
        stable_dynamics(),
        cifar10_control(),
        not_tested("Constraints beat magnitude pruning on ImageNet", f"§5.5, {ref('tab:mp_comparison_imagenet')}",
                   "ImageNet is not on these machines", "results_beyond"),
        unstructured_mnist(),
        bisection(),
        gate_medians(),
        gates_ablation(),
        not_tested("The same control on CIFAR-100 and TinyImageNet, structured and unstructured",
                   f"{ref('app:all_comparisons')}, {ref('tab:cifar100_control')}, {ref('fig:cifar100_comparison')}, "
                   f"{ref('tab:tiny_unstructured_comparison')}", "CIFAR-100 and TinyImageNet are not on these machines",
                   "results_beyond"),
    ]


#: How the verdict table names the book's pages.
PAGE_NAMES = {"results_mnist": "MNIST", "results_mnist_why": "MNIST, differences",
              "results_dynamics": "dynamics", "results_cifar10": "CIFAR-10", "results_cifar10_misses": "CIFAR-10, misses",
              "results_unstructured": "unstructured", "results_beyond": "beyond"}


def section_link(claim: Claim) -> str:
    """A link to the section of the page that answers ``claim`` (the page's top when it has no section)."""
    anchor = f"#{claim.section}" if claim.section else ""
    return f'<a href="{claim.page}.html{anchor}">{PAGE_NAMES.get(claim.page, claim.page)}</a>'


def table(found: list[Claim]) -> pd.DataFrame:
    """The verdict table of the book's first page: one row per claim, what was run (model, budget, seeds,
    device), how many pass of how many judged and what they count, the verdict, and the section that answers it."""
    return pd.DataFrame([{"claim": c.claim, "in the paper": c.where, "what was run": str(c.ran),
                          "pass": f"{c.passed} / {c.judged}" if c.judged else "—", "counted": c.counts,
                          "verdict": c.verdict, "answered in": section_link(c)} for c in found])


#: The verdicts the book printed before :mod:`paperlib.harness.rules` (one rule for every claim), one per claim.
BEFORE = "book/analysis/verdicts_before_rules.csv"


def before_and_after(found: list[Claim]) -> pd.DataFrame:
    """Each claim's verdict as the book printed it before :mod:`paperlib.harness.rules` (:data:`BEFORE`) beside its
    verdict now, and whether it moved."""
    from paperlib.harness.records import project_root

    before = pd.read_csv(project_root() / BEFORE, comment="#").set_index("claim")["verdict"]
    rows = [{"claim": c.claim, "before": before.get(c.claim, "—"), "now": c.verdict} for c in found]
    frame = pd.DataFrame(rows, columns=["claim", "before", "now"])
    return frame.assign(moved=frame["before"] != frame["now"])
