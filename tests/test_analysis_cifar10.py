import pytest
import pandas as pd

from paperlib.harness import rules

from analysis import cifar10


def test_gates_per_block_are_the_blocks_gate_counts():
    assert cifar10.gates_per_block("wrn-16-1") == "16/32/64"
    assert cifar10.gates_per_block("wrn-16-4") == "64/128/256"
    assert cifar10.gates_per_block("wrn-28-10") == "160/320/640"


def _free(model, grouping, gates_lr, density):
    return {"metrics": {"l0_density": density}, "params": {"model": model, "grouping": grouping, "gates_lr": gates_lr}}


def test_the_free_density_is_the_model_wise_free_run_at_the_protocols_gates_lr():
    free = [_free("wrn-16-1", "model", 6.0, 0.75), _free("wrn-16-1", "model", 1.0, 0.90),
            _free("wrn-16-1", "model", 1.0, 0.92), _free("wrn-16-1", "layer", 1.0, 0.5)]
    assert cifar10.free_density("wrn-16-1", 1.0, free) == pytest.approx(91.0)
    assert cifar10.free_density("wrn-16-1", 6.0, free) == pytest.approx(75.0)
    assert cifar10.free_density("wrn-16-4", 6.0, free) is None


def test_the_papers_rows_are_judged_by_the_same_rule():
    outcomes = cifar10.paper_outcomes()
    assert len(outcomes) == 10  # five targets, model-wise and layer-wise
    assert set(outcomes) == {rules.Outcome.ON_TARGET}  # the paper prints every density within 0.1 of its target
    paper = cifar10.protocol_answers((), paper=True).loc["paper protocol"]
    assert paper["free density (%)"] == "91.6" and paper["on target"] == 10 and paper["verdict"] == "reproduced"


def test_a_gpu_protocol_without_records_is_not_tested_here_and_one_with_some_is_in_progress():
    assert cifar10._row("GPU", "wrn-16-4", 20, None, [], 30, needs_gpu=True)["verdict"] == "not tested here"
    some = [rules.Outcome.ON_TARGET, rules.Outcome.UNDER]
    assert cifar10._row("GPU", "wrn-16-4", 20, 90.0, some, 30, needs_gpu=True)["verdict"] == "in progress"
    # its rule judges its rows only if its free density reaches 85%: under it, its runs are counted, not judged
    low = cifar10._row("GPU", "wrn-16-4", 20, 77.1, some, 30, needs_gpu=True, free_needed=85.0)
    assert low["verdict"] == cifar10.FREE_TOO_LOW.format(85.0) and (low["on target"], low["under"]) == (1, 1)
    assert cifar10._row("GPU", "wrn-16-4", 20, 85.0, some, 30, needs_gpu=True, free_needed=85.0)["verdict"] \
        == "in progress"
    row = cifar10._row("CPU", "wrn-16-1", 20, 75.0, some + [rules.Outcome.DOES_NOT_BIND], 3)
    assert (row["on target"], row["under"], row["does not bind"], row["runs"]) == (1, 1, 1, "3 of 3")


def test_the_gates_lr_candidates_are_every_rate_tried_largest_first_with_the_rules_threshold():
    table = cifar10.gates_lr_candidates()
    rates = [float(rate) for rate in table["gates lr"]]
    assert rates == sorted(rates, reverse=True) and 6.0 in rates
    for _, row in table.iterrows():
        if row["free density (%)"] != "–":
            assert (row["≥ 85%"] == "✓") == (float(row["free density (%)"]) >= cifar10.FREE_DENSITY_NEEDED)
        else:
            assert row["≥ 85%"] == "not in yet"


def test_each_candidate_reads_its_model_wise_free_run_never_the_layer_wise_one():
    model_wise = {run["params"]["gates_lr"]: run for grid in cifar10.CPU_FREE_GATES_GRIDS
                  for run in cifar10.report.complete_records(grid) if run["params"]["grouping"] == "model"}
    table = cifar10.gates_lr_candidates().set_index("gates lr")
    for rate, run in model_wise.items():
        assert table.loc[f"{rate:g}", "free density (%)"] == f"{100 * run['metrics']['l0_density']:.2f}"


def test_each_run_of_the_cpu_protocol_sits_beside_the_pilot_protocols_run_of_its_setting():
    protocol = cifar10.CPU
    table = cifar10.beside_pilot(protocol)
    runs = cifar10.constrained_runs(protocol.grids)
    assert len(table) == len(runs)
    pilot = {(run["params"]["grouping"], str(run["params"]["target"])): run
             for run in cifar10.constrained_runs((*cifar10.PILOT.grids, cifar10.PILOT_FLAGSHIP_GRID), seed=0)}
    free = rules.free_gates_records()
    for (_, row), run in zip(table.iterrows(), runs):
        assert row["density, CPU (%)"] == pytest.approx(100 * run["metrics"]["l0_density"])
        assert row["outcome, CPU"] == rules.judge_record(run, free).outcome.value
        twin = pilot.get((run["params"]["grouping"], str(run["params"]["target"])))
        if twin is not None:
            assert row["density, pilot (%)"] == pytest.approx(100 * twin["metrics"]["l0_density"])
            assert twin["params"]["gates_lr"] == cifar10.PILOT.gates_lr == 6.0


def _run(target, density, gates_lr):
    """A model-wise WideResNet-16-1 record at the CPU protocol's settings, ending at ``density``."""
    params = {"model": "wrn-16-1", "grouping": "model", "method": "constrained", "target": target,
              "gates_lr": gates_lr, "epochs": 20, "run_name": f"t{target}-lr{gates_lr}", "seed": 0}
    metrics = {"l0_density": density}
    return {"params": params, "metrics": metrics, "history": [{"l0_density": str(density)}]}


def test_a_protocols_runs_are_judged_against_the_free_run_at_its_own_gates_lr(monkeypatch):
    """80% ending at 78.5%: under where the free run at the protocol's rate ends at 86%, but 'does not bind'
    against a free run at another rate's 75% would be the stand-in's verdict, not this protocol's."""
    monkeypatch.setattr(cifar10, "constrained_runs", lambda grids, seed=None: [_run(0.8, 0.785, 2.0),
                                                                               _run(0.5, 0.497, 2.0)])
    at_two, at_six = _run(1.0, 0.86, 2.0), _run(1.0, 0.75, 6.0)
    outcomes = cifar10.protocol_outcomes(cifar10.PROTOCOLS[1], [at_six, at_two])
    assert outcomes == [rules.Outcome.UNDER, rules.Outcome.ON_TARGET]
    assert rules.passed_and_judged(outcomes) == (1, 2)
    at_two["metrics"]["l0_density"] = at_two["history"][0]["l0_density"] = 0.78  # now 80% never binds at lr 2
    assert cifar10.protocol_outcomes(cifar10.PROTOCOLS[1], [at_six, at_two])[0] == rules.Outcome.DOES_NOT_BIND


def _device_run(target, seed, device, density, error, grouping="model"):
    return {"params": {"method": "constrained", "grouping": grouping, "target": target, "seed": seed},
            "metrics": {"device": device, "l0_density": density, "val_error_final": error}}


def test_the_device_check_sets_a_seeds_device_difference_beside_two_seeds_difference():
    runs = [_device_run(0.5, 0, "cpu", 0.49, 18.8), _device_run(0.5, 1, "cuda", 0.50, 19.2),
            _device_run(0.5, 2, "cuda", 0.495, 18.7), _device_run(0.2, 0, "cpu", 0.20, 22.3),
            _device_run(0.5, 0, "cpu", 0.1, 50.0, grouping="layer")]
    checks = [_device_run(0.5, 0, "cuda", 0.4987, 18.87), _device_run(0.2, 0, "cuda", 0.196, 22.93)]
    rows = cifar10.device_check_rows(runs, checks).set_index("setting")
    half = rows.loc["model-wise 50%"]
    assert half["density: GPU − CPU (points)"] == pytest.approx(0.87)
    assert half["error: GPU − CPU (points)"] == pytest.approx(0.07)
    assert half["density: seed 2 − seed 1, GPU (points)"] == pytest.approx(-0.5)
    assert half["error, seed 0 CPU (%)"] == 18.8  # the layer-wise run of the same target is another setting
    fifth = rows.loc["model-wise 20%"]
    assert fifth["density: GPU − CPU (points)"] == pytest.approx(-0.4) and pd.isna(
        fifth["density: seed 2 − seed 1, GPU (points)"])
