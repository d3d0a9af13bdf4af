"""paperlib.verdict: each rule turns evidence into the verdict its docstring states; a claim without records is
never called reproduced."""

import pandas as pd
import pytest

from paperlib import verdict


def test_share_verdict_rules():
    assert verdict.share_verdict(5, 5) == "reproduced"
    assert verdict.share_verdict(3, 5) == "partly" and verdict.share_verdict(2, 5) == "not reproduced"
    assert verdict.share_verdict(45, 50, partly_at=0.9) == "partly"
    assert verdict.share_verdict(0, 0) == "in progress"
    with pytest.raises(ValueError, match="verdict must be one of"):
        verdict.Claim("c", "w", "r", "sort of", "e", "p")


def _gaps(gaps, protocol="paper, 200 ep"):
    return pd.DataFrame({"largest gap (points)": gaps, "within 1 point": [abs(g) <= 1 for g in gaps],
                         "protocol": [protocol] * len(gaps), "sparsity": ["structured"] * len(gaps)})


def test_one_shot_counts_runs_within_two_points_at_the_papers_protocol_only(monkeypatch):
    frame = pd.concat([_gaps([0.2, -0.5, 1.5]), _gaps([9.0], protocol="cpu, 100 ep")])
    monkeypatch.setattr(verdict.comparison, "distance_to_target", lambda grids: frame)
    claim = verdict.one_shot_mnist()
    assert claim.verdict == "reproduced" and claim.evidence.startswith("2 of 3 runs end within 1 point")
    frame = _gaps([0.2] * 9 + [3.0])
    assert verdict.one_shot_mnist().verdict == "partly"  # 9 of 10 within 2 points: "partly" from 90%
    frame = _gaps([0.2, 3.0])
    assert verdict.one_shot_mnist().verdict == "not reproduced"
    frame = _gaps([])
    assert verdict.one_shot_mnist().verdict == "in progress"


def _record(method, grouping, target, density, lmbda=None):
    history = [{"epoch": "20", "phase": "train", "l0_density": str(density), "density[l]": str(density)}]
    metrics = {"run_name": "r", "method": method, "grouping": grouping, "target": target, "lmbda": lmbda, "seed": 0,
               "l0_density": density, "l0_density_per_layer": {"l": density}, "params_pct": 50.0, "macs_pct": 50.0,
               "val_error_final": 10.0, "epochs_completed": 20}
    return {"path": "/nowhere", "metrics": metrics, "history": history}


def test_cifar10_is_in_progress_until_its_21_runs_and_then_needs_9_hits(monkeypatch):
    runs = [_record("constrained", "model", 0.5, 0.505)] * 10 + [_record("penalized", "model", None, 0.4, lmbda=0.01)] * 10
    tests = []  # the cause test of the misses under a target
    monkeypatch.setattr(verdict.report, "complete_records",
                        lambda grid: tests if grid == verdict.misses.UNDER_CAUSE_GRID else runs)
    assert verdict.cifar10_control().verdict == "in progress"
    runs.append(_record("dense", "model", None, None))
    assert verdict.cifar10_control().verdict == "reproduced"
    runs[:2] = [_record("constrained", "model", 0.5, 0.53)] * 2
    claim = verdict.cifar10_control()
    assert claim.verdict == "partly" and "8 of 10 constrained runs within 1 point" in claim.evidence
    runs[2:8] = [_record("constrained", "layer", 0.5, 0.40)] * 5 + [_record("constrained", "layer", 0.5, 0.52)]
    claim = verdict.cifar10_control()
    assert claim.verdict == "not reproduced"  # 2 hits
    assert claim.evidence.endswith("2 of 10 constrained runs within 1 point of every target (model-wise 2 of 4, "
                                   "layer-wise 0 of 6); 5 more than a point under with every constraint holding, "
                                   "3 more than a point over a target")
    tests[:] = [_record("constrained", "model", 0.8, 0.815), _record("constrained", "layer", 0.8, 0.77)]
    assert verdict.cifar10_control().evidence.endswith(
        "; the cause test, 80% targets at the gates' learning rate of 0.1: 1 of the 2 runs ends under")


def test_gate_medians_need_four_fifths_at_zero_or_one_in_every_run(monkeypatch):
    def run(model, medians):
        return {"metrics": {"model": model}, "gate_medians": {"0": {"fc1": [0.5] * 5}, "200": {"fc1": medians}}}

    runs = [run("mlp", [0.0] * 8 + [0.3, 1.0]), run("lenet5", [1.0] * 4 + [0.5])]
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: runs)
    claim = verdict.gate_medians()
    assert claim.verdict == "reproduced" and "mlp: 90.0%" in claim.evidence and "lenet5: 80.0%" in claim.evidence
    runs[1] = run("lenet5", [1.0] * 3 + [0.5, 0.2])
    assert verdict.gate_medians().verdict == "partly"


def test_every_claim_of_the_papers_experiments_has_a_row_and_untested_ones_say_why():
    claims = verdict.claims()
    where = " ".join(c.where for c in claims)
    for part in ("§5.2", "§5.3", "§5.4", "§5.5", "§5.6", "Appendix E", "Appendix H", "Appendix I", "Appendix K"):
        assert part in where, part
    assert all(c.evidence for c in claims)


def test_the_gates_ablation_is_in_progress_until_its_grid_is_complete_then_every_check_must_hold(monkeypatch):
    records = []
    monkeypatch.setattr(verdict.report, "complete_records", lambda grid: records)
    monkeypatch.setattr(verdict.report, "grid_runs", lambda grid: [None] * 2)
    monkeypatch.setattr(verdict.control, "control_runs", lambda: [])
    checks = [("gates lr", True), ("stop-gradient", False)]
    monkeypatch.setattr(verdict.control, "ablation_checks", lambda ablation, runs: checks)
    records.append("one run")
    claim = verdict.gates_ablation()
    assert (claim.verdict, claim.evidence) == ("in progress", "1 of 2 ablation runs complete")
    records.append("another")
    claim = verdict.gates_ablation()
    assert claim.verdict == "partly" and claim.evidence == "2 of 2 ablation runs complete; gates lr; stop-gradient"
    checks[1] = ("stop-gradient", True)
    assert verdict.gates_ablation().verdict == "reproduced"


def test_stable_dynamics_are_in_progress_until_the_ten_constrained_runs_then_need_every_run_to_settle(monkeypatch):
    monkeypatch.setattr(verdict.control, "control_runs", lambda: ["a run"])

    def rows(settled):
        return pd.DataFrame({"settled from epoch": settled})

    for settled, expected in (([3.0] * 9, "in progress"), ([3.0] * 10, "reproduced"),
                              ([3.0] * 9 + [None], "partly"), ([None] * 6 + [3.0] * 4, "not reproduced")):
        monkeypatch.setattr(verdict.control, "stability_rows", lambda runs, s=settled: rows(s))
        claim = verdict.stable_dynamics()
        assert claim.verdict == expected, settled
    assert claim.evidence == "4 of the 10 constrained runs settle within 1 point above every target, by epoch 3.0 of 20 at the latest"
    assert claim.page == "results_cifar10" and "not ResNet18" in claim.ran
