"""analysis.verdict: every claim's verdict is paperlib.harness.rules' of its runs, MNIST and CIFAR-10 alike; a claim without
records is never called reproduced; what was run is read from the records."""

import pandas as pd
import pytest

from paperlib.harness import rules
from analysis import verdict


def test_a_claims_verdict_must_be_one_of_the_rules_verdicts():
    assert verdict.VERDICTS == ("reproduced", "partly", "not reproduced", "in progress", "not tested here")
    with pytest.raises(ValueError, match="verdict must be one of"):
        verdict.Claim("c", "w", verdict.NOTHING_RAN, "sort of", 0, 0, "runs", "p")


def _record(gap, target=0.5, model="mlp", seed=0, device="cpu", preset="paper", method="constrained", epochs=200):
    """A model-wise record ending ``gap`` points from its target."""
    density = target + gap / 100
    metrics = {"run_name": f"{model}-{target}-{gap}-s{seed}", "method": method, "grouping": "model",
               "target": target, "lmbda": None, "seed": seed, "model": model, "preset": preset, "device": device,
               "l0_density": density, "l0_density_per_layer": {}, "epochs_completed": epochs,
               "multipliers_final": [0.0], "val_error_final": 2.0}
    params = {"model": model, "method": method, "grouping": "model", "target": target, "seed": seed, "preset": preset}
    history = [{"epoch": str(epochs), "phase": "train", "l0_density": str(density)}]
    return {"path": f"/nowhere/{model}-{target}-{gap}-{seed}", "params": params, "metrics": metrics,
            "history": history, "steps": []}


@pytest.fixture
def no_free_gates(monkeypatch):
    monkeypatch.setattr(rules, "free_gates_records", lambda: [])


def test_the_mnist_claim_counts_runs_on_target_and_calls_violations_misses(monkeypatch, no_free_gates):
    runs = [_record(0.2), _record(-0.5, seed=1), _record(1.5, seed=2)]
    monkeypatch.setattr(verdict, "_records", lambda grids, preset=None, **where: runs)
    claim = verdict.one_shot_mnist()
    assert claim.verdict == "partly"  # 2 of 3 on target, the third violated (before: within 2 points, a pass)
    assert (claim.passed, claim.judged) == (2, 3)
    runs[:] = [_record(0.2, seed=s) for s in range(9)] + [_record(-3.0, seed=9)]
    assert verdict.one_shot_mnist().verdict == "reproduced"  # 9 of 10; the under run is a miss: no free record
    runs[:] = [_record(0.2), _record(3.0, seed=1), _record(-3.0, seed=2)]
    assert verdict.one_shot_mnist().verdict == "not reproduced"
    runs[:] = []
    assert verdict.one_shot_mnist().verdict == "in progress"


def test_a_target_above_the_free_density_is_neither_a_hit_nor_a_miss(monkeypatch):
    free = _record(0.0, target=1.0)  # free gates end at 100%: not useful; at 75%:
    free["history"][0]["l0_density"] = "0.75"
    monkeypatch.setattr(rules, "free_gates_records", lambda: [free])
    runs = [_record(0.3, target=0.5), _record(-9.0, target=0.8, seed=1), _record(-9.0, target=0.8, seed=2)]
    monkeypatch.setattr(verdict, "_records", lambda grids, preset=None, **where: runs)
    assert verdict.one_shot_mnist().verdict == "reproduced"  # 1 of 1 judged; the 80% runs do not bind


def test_mnist_and_cifar10_verdicts_come_from_the_same_rule(monkeypatch, no_free_gates):
    """The same runs, given to both claims, get the same verdict and counts."""
    runs = [_record(0.2, model="wrn-16-1", preset="cpu"), _record(-4.0, model="wrn-16-1", preset="cpu", seed=1),
            _record(0.9, model="wrn-16-1", preset="cpu", seed=2)]
    monkeypatch.setattr(verdict, "_records", lambda grids, preset=None, **where: runs)
    monkeypatch.setattr(verdict.control, "control_runs", lambda: runs)
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: runs if grid != "cause" else [])
    monkeypatch.setattr(verdict.report, "grid_runs", lambda grid: runs)
    import analysis.misses
    monkeypatch.setattr(analysis.misses, "UNDER_CAUSE_GRID", "cause")
    mnist, cifar = verdict.one_shot_mnist(), verdict.cifar10_control()
    assert mnist.verdict == cifar.verdict == "partly"  # 2 of 3
    assert (mnist.passed, mnist.judged) == (cifar.passed, cifar.judged) == (2, 3)


def test_the_cifar10_claim_is_in_progress_until_seed_0s_grid_is_complete(monkeypatch, no_free_gates):
    runs = [_record(0.2, model="wrn-16-1", preset="cpu", seed=s) for s in range(3)]
    monkeypatch.setattr(verdict.control, "control_runs", lambda: runs)
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: runs[:2])
    monkeypatch.setattr(verdict.report, "grid_runs", lambda grid: runs)
    assert verdict.cifar10_control().verdict == "in progress"
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: runs)
    assert verdict.cifar10_control().verdict == "reproduced"


def test_what_was_run_names_models_budget_seeds_per_cell_and_device():
    runs = [_record(0.2, seed=s) for s in range(5)] + [_record(0.2, target=0.2, seed=s, device="cuda") for s in (0, 1)]
    ran = verdict.ran(runs)
    assert ran.model == "MLP" and ran.budget.startswith("200 epochs")
    assert ran.seeds == "2 to 5 seeds per cell (seeds 0–4)"
    assert ran.device == "CPU, 2 of 7 on GPU"
    assert verdict.ran(runs[:5]).seeds == "seeds 0–4" and verdict.ran(runs[:1]).seeds == "seed 0"
    assert verdict.ran(runs[5:]).device == "GPU" and verdict.ran([]) == verdict.NOTHING_RAN


def test_a_record_without_a_parameter_counts_as_its_default_in_the_cell_of_its_seeds():
    runs = [_record(0.2, seed=s) for s in range(3)]
    for run in runs[1:]:
        run["params"].update(dual_optimizer="gradient_ascent", nupi_kp=1.0)  # written after the parameters existed
    assert verdict.ran(runs).seeds == "seeds 0–2"
    runs[2]["params"]["dual_optimizer"] = "nupi"
    assert verdict.ran(runs).seeds == "1 to 2 seeds per cell (seeds 0–2)"


def test_the_penalty_claim_judges_each_cell_by_the_penalty_rule(monkeypatch):
    label = "L0-density (%)"
    table = pd.DataFrame({"method": ["penalized", "penalized", "penalized", "constrained"],
                          f"{label} paper": ["30.00", "50.00 ± 1.00", "40.00", "20.00"],
                          "protocol": ["paper, 200 ep, 2 seeds", "paper, 200 ep, 1 seed", "cpu, 100 ep", "paper"]})
    table.attrs["values"] = [{"l0_density": [31.0, 33.0]}, {"l0_density": [45.0]}, {"l0_density": [40.0]},
                             {"l0_density": [20.0]}]
    monkeypatch.setattr(verdict.comparison, "compare_table", lambda name: table)
    judged = verdict.penalty_cells(("one table",))
    assert [j.outcome for j in judged] == [rules.PenaltyOutcome.WITHIN, rules.PenaltyOutcome.OFF]
    assert [j.scatter for j in judged] == [2.0, 0.0]


def test_gate_medians_need_four_fifths_at_zero_or_one_in_every_run(monkeypatch):
    def run(model, medians):
        return {"metrics": {"model": model, "preset": "paper", "seed": 0, "epochs_completed": 200},
                "gate_medians": {"0": {"fc1": [0.5] * 5}, "200": {"fc1": medians}}}

    runs = [run("mlp", [0.0] * 8 + [0.3, 1.0]), run("lenet5", [1.0] * 4 + [0.5])]
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: runs)
    assert verdict.gate_medians().verdict == "reproduced"  # 90% and 80%
    runs[1] = run("lenet5", [1.0] * 3 + [0.5, 0.2])
    assert verdict.gate_medians().verdict == "partly"  # 1 of 2


def test_the_gates_ablation_is_in_progress_until_its_grid_is_complete_then_judged_by_its_checks(monkeypatch):
    records = []
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: records)
    monkeypatch.setattr(verdict.report, "grid_runs", lambda grid: [None] * 2)
    monkeypatch.setattr(verdict.control, "control_runs", lambda: [])
    checks = [("gates lr", True), ("stop-gradient", False)]
    monkeypatch.setattr(verdict.control, "ablation_checks", lambda ablation, runs: checks)
    monkeypatch.setattr(verdict, "ran", lambda runs: verdict.NOTHING_RAN)
    records.append("one run")
    assert verdict.gates_ablation().verdict == "in progress"
    records.append("another")
    assert verdict.gates_ablation().verdict == "partly"
    checks[1] = ("stop-gradient", True)
    assert verdict.gates_ablation().verdict == "reproduced"


@pytest.mark.parametrize("settled, expected", [([3.0] * 9, "in progress"), ([3.0] * 10, "reproduced"),
                                               ([3.0] * 9 + [None], "reproduced"), ([None] * 5 + [3.0] * 5, "partly"),
                                               ([None] * 6 + [3.0] * 4, "not reproduced")])
def test_stable_dynamics_are_judged_by_the_share_of_runs_that_settle(monkeypatch, settled, expected):
    monkeypatch.setattr(verdict.control, "control_runs", lambda: [_record(0.0, model="wrn-16-1", preset="cpu")])
    monkeypatch.setattr(verdict.control, "stability_rows", lambda runs: pd.DataFrame({"settled from epoch": settled}))
    claim = verdict.stable_dynamics()
    assert claim.verdict == expected and claim.page == "results_cifar10"


def test_every_claim_of_the_papers_experiments_has_a_row_a_verdict_before_and_untested_ones_say_why():
    claims = verdict.claims()
    where = " ".join(c.where for c in claims)
    for part in ("§5.2", "§5.3", "§5.4", "§5.5", "§5.6", "Appendix E", "Appendix H", "Appendix I", "Appendix K"):
        assert part in where, part
    assert all(c.counts for c in claims)  # what a claim counts, or why it is not tested
    assert all(0 <= c.passed <= c.judged for c in claims)
    moved = verdict.before_and_after(claims)
    assert len(moved) == len(claims) and "—" not in set(moved["before"])  # every claim had a printed verdict
    assert set(moved["before"]) <= set(verdict.VERDICTS)
    assert (moved["moved"] == (moved["before"] != moved["now"])).all()
    table = verdict.table(claims)
    tested = [c for c in claims if c.verdict != "not tested here"]
    assert all(str(c.ran).count(";") == 3 for c in tested)  # model; budget; seeds; device
    assert list(table.columns) == ["claim", "in the paper", "what was run", "pass", "counted", "verdict", "answered in"]
    assert all((f"{c.passed} / {c.judged}" if c.judged else "—") == cell for c, cell in zip(claims, table["pass"]))


def test_the_outcomes_of_judged_runs_are_counted_with_those_judged_without_a_free_gates_record(no_free_gates):
    judged = [rules.judge_record(_record(gap), []) for gap in (0.2, -0.5, 1.5, 0.1)]
    counts = verdict.outcomes(judged)
    assert counts.sum() - counts["binding unknown"] == 4 and counts["binding unknown"] == 4
    assert counts[rules.Outcome.VIOLATED.value] == 1


def test_every_claim_links_a_section_its_page_labels():
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book"
    for claim in verdict.claims():
        page = book / f"{claim.page}.md"
        assert page.exists(), f"{claim.claim}: no page {page.name}"
        if claim.section:
            assert f"({claim.section})=" in page.read_text(), f"{claim.claim}: {page.name} has no ({claim.section})="
