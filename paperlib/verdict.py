"""The book's verdict, claim by claim: what reproduced, what did not, what was not tested here.

One :class:`Claim` per claim of the paper's §5 and Appendices E, H, I, K and L,
each with where the paper shows it, what we ran, a verdict and its evidence.
The evidence is computed from the records when the book is built; the rule that
turns it into a verdict is in each function's docstring, so a reader can check
it. A claim whose records do not exist yet says so, and is never called
reproduced.

Verdicts (:data:`VERDICTS`): *reproduced* (our runs show what the paper shows,
within the stated tolerance), *partly* (some cells do, others differ by more),
*not reproduced*, *in progress* (runs made, not all), *not tested here* (no
data or no GPU; the page says what would test it).
"""

from dataclasses import dataclass

import pandas as pd

from . import comparison, control, misses, report, studies
from .paper_numbers import ref

VERDICTS = ("reproduced", "partly", "not reproduced", "in progress", "not tested here")

#: Two numbers "agree" when they differ by at most this many points (densities, parameters, MACs).
POINTS = 2.0

MNIST_TABLES = ("tab:mnist", "tab:mlp_control", "tab:lenet_control")


@dataclass
class Claim:
    claim: str
    where: str
    ran: str
    verdict: str
    evidence: str
    page: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}; got {self.verdict!r}")


def _at_paper_protocol(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["protocol"].str.startswith("paper")]


def share_verdict(agree: int, total: int, partly_at: float = 0.5) -> str:
    """*reproduced* when every one agrees, *partly* when at least ``partly_at`` of them do, else *not
    reproduced*; *in progress* without any."""
    if total == 0:
        return "in progress"
    if agree == total:
        return "reproduced"
    return "partly" if agree >= partly_at * total else "not reproduced"


def one_shot_mnist() -> Claim:
    """Constrained MNIST runs at the paper's protocol (Table 1 and the control tables): reproduced when every
    run ends within :data:`POINTS` of every target, as the paper's own runs do (they end up to 3.3 points above)."""
    grids = [g for t in MNIST_TABLES for g in studies.TABLES[t].grids]
    gaps = comparison.distance_to_target(grids)
    gaps = gaps[gaps["protocol"].astype(str).str.startswith("paper") & (gaps["sparsity"] == "structured")]
    within = int((gaps["largest gap (points)"].abs() <= POINTS).sum())
    one = int(gaps["within 1 point"].sum())
    above = gaps.loc[~gaps["within 1 point"].astype(bool), "largest gap (points)"]
    evidence = (f"{one} of {len(gaps)} runs end within 1 point of every target, {within} within {POINTS:g}"
                + (f"; the others {above.min():+.2f} to {above.max():+.2f} points" if len(above) else ""))
    return Claim("A constraint sets the density in one run (MNIST)",
                 f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, {ref('tab:lenet_control')}",
                 "MLP and LeNet5, the paper's protocol", share_verdict(within, len(gaps), 0.9), evidence,
                 "results_mnist")


def accuracy_mnist() -> Claim:
    """Final errors of the MNIST tables at the paper's protocol against the spread of the paper's runs
    (:func:`comparison.agreement`): reproduced when no more rows differ beyond chance than chance alone
    explains (1 in 20, rounded up)."""
    rows = pd.concat([comparison.agreement(label) for label in MNIST_TABLES], ignore_index=True)
    beyond = int(rows["beyond chance"].sum()) if len(rows) else 0
    expected = -(-len(rows) // 20)
    verdict = "in progress" if not len(rows) else ("reproduced" if beyond <= expected else "partly")
    evidence = (f"{len(rows) - beyond} of {len(rows)} rows differ from the paper's final error by less than "
                f"its runs' spread explains (95%); chance alone would put about {len(rows) / 20:.1f} beyond it")
    return Claim("At no cost in accuracy (MNIST)", f"§5.2, {ref('tab:mnist')}, {ref('tab:mlp_control')}, "
                 f"{ref('tab:lenet_control')}", "MLP and LeNet5, the paper's protocol", verdict, evidence,
                 "results_mnist_differences")


def _cells(tables: tuple[str, ...], method: str, column: str) -> pd.Series:
    """Our minus the paper's value of ``column`` in the paper-protocol rows of ``method``, as floats."""
    deltas = []
    for label in tables:
        table = _at_paper_protocol(comparison.compare_table(label))
        table = table[table["method"] == method]
        deltas += [float(d) for d in table[f"{column} Δ"].dropna()]
    return pd.Series(deltas, dtype=float)


def _within(deltas: pd.Series, what: str) -> tuple[int, str]:
    """How many of ``deltas`` are within :data:`POINTS` of zero, and the sentence that says so and how far
    the others are."""
    agree = int((deltas.abs() <= POINTS).sum())
    others = deltas[deltas.abs() > POINTS]
    return agree, (f"{agree} of {len(deltas)} {what} within {POINTS:g} points of the paper's"
                   + (f"; the others {others.min():+.1f} to {others.max():+.1f}" if len(others) else ""))


def penalized_mnist() -> Claim:
    """Penalized MNIST cells: reproduced when every final density is within :data:`POINTS` of the paper's."""
    deltas = _cells(("tab:mlp_control", "tab:lenet_control"), "penalized", "L0-density (%)")
    agree, evidence = _within(deltas, "penalized cells' final densities")
    return Claim("A penalty's density follows λ_pen as printed (MNIST)",
                 f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", "MLP and LeNet5, the paper's protocol",
                 share_verdict(agree, len(deltas)), evidence, "results_mnist")


def counts_mnist() -> Claim:
    """Parameters and MACs of the purged constrained MNIST models: reproduced when every cell is within
    :data:`POINTS` of the paper's."""
    deltas = pd.concat([_cells(MNIST_TABLES[1:], "constrained", metric) for metric in ("params (%)", "MACs (%)")])
    agree, evidence = _within(deltas, "parameter and MAC percentages")
    return Claim("What a target leaves: parameters and MACs (MNIST)",
                 f"{ref('tab:mlp_control')}, {ref('tab:lenet_control')}", "MLP and LeNet5, the paper's protocol",
                 share_verdict(agree, len(deltas)), evidence, "results_mnist")


def dual_restarts() -> Claim:
    """LeNet5 with and without dual restarts (the paper's protocol): reproduced when, at every target, the
    run with restarts ends nearer its target than the run without."""
    pairs = {}
    for run in report.complete_records(studies.grids("fig:dual_restarts", preset="paper")[0]):
        pairs.setdefault(run["metrics"]["target"], {})[run["params"]["dual_restarts"]] = run["metrics"]["l0_density"]
    pairs = {target: pair for target, pair in pairs.items() if len(pair) == 2}
    nearer = sum(abs(pair[True] - target) < abs(pair[False] - target) for target, pair in pairs.items())
    evidence = "; ".join(f"at {target:.0%}: {100 * pair[True]:.1f}% with restarts, {100 * pair[False]:.1f}% without"
                         for target, pair in sorted(pairs.items()))
    return Claim("Dual restarts keep the model at its target", f"§5.3, {ref('fig:dual_restarts')}",
                 "LeNet5, model-wise, the paper's protocol", share_verdict(nearer, len(pairs)), evidence or "no pair yet",
                 "results_dynamics")


def stable_dynamics() -> Claim:
    """Figure 3's claim on our CIFAR-10 control runs (:func:`~paperlib.control.stability_rows`): reproduced when
    every constrained run of seed 0 settles within a point above its targets, partly when half of them do; in
    progress until the table's 10 constrained runs are complete. Figure 3's ResNet18 on TinyImageNet is not run."""
    rows = control.stability_rows(control.control_runs())
    settled = rows.dropna(subset=["settled from epoch"])
    evidence = f"{report.count_of(len(settled), len(rows), 'constrained run')} settle within 1 point above every target"
    if len(settled):
        evidence += f", by epoch {settled['settled from epoch'].max():.1f} of 20 at the latest"
    verdict = "in progress" if len(rows) < control.CONTROL_RUNS["constrained"] else share_verdict(len(settled), len(rows))
    return Claim("Constraint dynamics stay stable on ResNets", f"§5.4, {ref('fig:stable_training')}",
                 "WideResNet-16-1 on CIFAR-10, 20 epochs (CPU protocol); not ResNet18 on TinyImageNet", verdict,
                 evidence if len(rows) else "no constrained run yet", "results_cifar10")


def cifar10_control() -> Claim:
    """The CIFAR-10 control table at the CPU protocol: reproduced when at least 9 of the 10 constrained runs
    end within 1 point of every target, partly when at least 5 do; in progress until its 21 runs are complete.
    The evidence splits the hits by grouping and the misses into runs under their targets with every constraint
    holding and runs over a target (a violated constraint), and says how many of the cause test's runs at the
    gates' learning rate of 0.1 (:data:`~paperlib.misses.UNDER_CAUSE_GRID`) still end under."""
    runs = report.complete_records(control.CONTROL_GRIDS[0])
    rows = control.run_rows(runs, None)
    constrained = rows[rows["method"] == "constrained"]
    hit, under, over = control.misses_apart(constrained)
    hits = len(hit)
    evidence = f"{len(runs)} of 21 runs complete"
    if len(constrained):
        by_grouping = ", ".join(f"{grouping}-wise {int(group['hit'].sum())} of {len(group)}"
                                for grouping, group in constrained.groupby("grouping", sort=False))
        evidence += (f"; {hits} of {len(constrained)} constrained runs within 1 point of every target "
                     f"({by_grouping}); {len(under)} more than a point under with every constraint holding, "
                     f"{len(over)} more than a point over a target")
        tests = report.complete_records(misses.UNDER_CAUSE_GRID)
        if len(under) and tests:
            still_under = sum(min(control.final_gaps(run)) < -control.HIT_POINTS for run in tests)
            evidence += (f"; the cause test, 80% targets at the gates' learning rate of 0.1: "
                         f"{report.count_of(still_under, len(tests), 'run')} {'ends' if still_under == 1 else 'end'} "
                         f"under")
    if len(runs) < 21:
        verdict = "in progress"
    else:
        verdict = "reproduced" if hits >= 9 else ("partly" if hits >= 5 else "not reproduced")
    return Claim("The control holds on a residual network (CIFAR-10)",
                 f"§5.5, {ref('fig:cifar10_comparison')}, {ref('tab:cifar10_control')}",
                 "WideResNet-16-1, 20 epochs (CPU protocol)", verdict, evidence, "results_cifar10")


def bisection() -> Claim:
    """App. E's bisection over λ_pen for a 50% MLP: reproduced when each search needs several trainings
    (at least 4; the paper counts 6 and 7) to land within its tolerance."""
    searches = report.complete_searches(studies.grids("app:bisection")[0])
    evidence = ", ".join(f"{s['grouping']}-wise: {s['num_trainings']} trainings" for s in searches)
    verdict = share_verdict(sum(s["num_trainings"] >= 4 for s in searches), len(searches))
    return Claim("A penalty needs a search to reach a density", f"{ref('app:bisection')}, {ref('fig:bisection')}",
                 "MLP, 150 epochs", verdict, evidence or "no search yet", "results_beyond")


def unstructured_mnist() -> Claim:
    """Unstructured MNIST (App. L): reproduced when our constrained runs' best errors are within 0.5 points of
    the paper's at every target."""
    deltas = _cells(("tab:mnist_unstructured_comparison_mlp", "tab:mnist_unstructured_comparison_lenet"),
                    "constrained", "val. error best (%)")
    agree = int((deltas.abs() <= 0.5).sum())
    evidence = f"{agree} of {len(deltas)} constrained cells within 0.5 points of the paper's best error"
    return Claim("Unstructured sparsity, against magnitude pruning (MNIST)",
                 f"§5.6, {ref('tab:mnist_unstructured_comparison_mlp')}, "
                 f"{ref('tab:mnist_unstructured_comparison_lenet')}", "MLP and LeNet5, the paper's protocol",
                 share_verdict(agree, len(deltas)), evidence, "results_unstructured")


def gate_medians() -> Claim:
    """App. I's test-time gates on MNIST: reproduced when, in every run, at least 80% of the first gated layer's
    medians (eq. 9) are exactly 0 or 1 at the last saved epoch."""
    shares = []
    for run in report.complete_records(studies.grids("fig:mnist_gate_histograms", preset="paper")[0]):
        shares.append((run["metrics"]["model"], 1.0 - report.fractional_medians(run)[1]))
    evidence = "; ".join(f"{model}: {100 * share:.1f}% of the first layer's medians at 0 or 1" for model, share in shares)
    return Claim("Test-time gates end at 0 or 1", f"{ref('app:test_time_gates')}, {ref('fig:mnist_gate_histograms')}",
                 "MLP and LeNet5, the paper's protocol", share_verdict(sum(s >= 0.8 for _, s in shares), len(shares)),
                 evidence or "no run yet", "results_dynamics")


def gates_ablation() -> Claim:
    """App. H at the CPU protocol: in progress until every run of the ablation grid is complete; then
    :func:`~paperlib.control.ablation_checks` (the gates' learning rate and the stop-gradient), each of which
    must hold for *reproduced*."""
    ablation = report.complete_records(control.ABLATION_GRID)
    planned = len(report.grid_runs(control.ABLATION_GRID))
    evidence = f"{len(ablation)} of {planned} ablation runs complete"
    if len(ablation) < planned:
        verdict = "in progress"
    else:
        checks = control.ablation_checks(ablation, control.control_runs())
        verdict = share_verdict(sum(held for _, held in checks), len(checks))
        evidence += "".join(f"; {what}" for what, _ in checks)
    return Claim("Gates need a larger learning rate and no weight decay",
                 f"{ref('app:resnet_control_fixes')}, {ref('tab:cifar10')}, {ref('fig:increase_lr')}, "
                 f"{ref('fig:wd_overpen')}", "WideResNet-16-1 (CPU protocol)", verdict, evidence, "results_cifar10")


def not_tested(claim: str, where: str, why: str, page: str) -> Claim:
    return Claim(claim, where, "—", "not tested here", why, page)


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
PAGE_NAMES = {"results_mnist": "MNIST", "results_mnist_investigations": "MNIST, overshoot",
              "results_mnist_authors": "MNIST, authors' code", "results_mnist_differences": "MNIST, differences",
              "results_dynamics": "dynamics", "results_cifar10": "CIFAR-10", "results_cifar10_misses": "CIFAR-10, misses",
              "results_unstructured": "unstructured", "results_beyond": "beyond"}


def table(found: list[Claim]) -> pd.DataFrame:
    """The verdict table of the book's first page: one row per claim, its page linked."""
    return pd.DataFrame([{"claim": c.claim, "in the paper": c.where, "we ran": c.ran,
                          "verdict": c.verdict, "evidence": c.evidence,
                          "page": f'<a href="{c.page}.html">{PAGE_NAMES.get(c.page, c.page)}</a>'} for c in found])
