"""analysis.misses: why CIFAR-10 runs miss their targets (whole-gate steps, the drift under a target with the
constraint holding, and the tests of each cause), on records made here."""

import pandas as pd
import pytest

from fake_records import LAYERS, record
from analysis import control, misses


def test_gate_rows_count_a_saturated_layer_in_whole_gates():
    run = record("constrained", "layer", 0.2, densities=(0.1875, 0.21875))  # 3 of 16 gates, 7 of 32
    run["params"]["model"] = "wrn-16-1"
    run["history"][0].update({"lambda_0": "0.0", "lambda_1": "0.5"})
    run["gate_medians"] = {"0": {layer: [0.5] * n for layer, n in zip(LAYERS, (16, 32))},
                           "1": {LAYERS[0]: [1.0] * 3 + [0.0] * 13, LAYERS[1]: [1.0] * 6 + [0.3] + [0.0] * 25}}
    rows = misses.gate_rows(run)
    assert rows["gates"].tolist() == [16, 32] and rows["one gate (points)"].tolist() == pytest.approx([6.25, 3.125])
    assert rows["expected open gates"].tolist() == pytest.approx([3.0, 7.0])
    assert rows["target (gates)"].tolist() == pytest.approx([3.2, 6.4])
    assert rows["gap (gates)"].tolist() == pytest.approx([-0.2, 0.6])
    assert rows["gap (points)"].tolist() == pytest.approx([-1.25, 1.875])
    assert rows["open medians"].tolist() == [3, 7]  # the last saved epoch's; a fractional median is open
    fig = misses.plot_gate_steps(run)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["s1.0 (16 gates)", "s2.0 (32 gates)"]
    assert fig.axes[0].lines[0].get_ydata().tolist() == pytest.approx([3.0])


def test_gate_changes_list_each_whole_gate_a_layer_gained_or_lost_with_its_multiplier():
    run = record("constrained", "layer", 0.2, densities=(0.1875, 0.21875))
    run["params"]["model"] = "wrn-16-1"
    densities = [(0.9, 0.9), (0.1875, 0.21875), (0.1875, 0.1875), (0.1878, 0.21875)]  # 16 and 32 gates
    multipliers = [(0.0, 0.0), (0.0, 0.2), (0.0, 0.0), (0.0, 0.05)]
    run["history"] = [{"epoch": str(epoch), "phase": "train",
                       **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, density)},
                       **{f"lambda_{i}": str(m) for i, m in enumerate(multiplier)}}
                      for epoch, (density, multiplier) in enumerate(zip(densities, multipliers))]
    changes = misses.gate_changes(run)  # from epoch 1 on: the first epoch's fall from 90% is not listed
    assert changes.to_dict("records") == [
        {"epoch": 2, "block": "s2.0", "open gates": "7 → 6", "λ before": 0.2, "λ after": 0.0},
        {"epoch": 3, "block": "s2.0", "open gates": "6 → 7", "λ before": 0.0, "λ after": 0.05}]


def test_the_cause_numbers_count_late_whole_gate_changes_and_compares_gaps_and_errors():
    def run(densities, multipliers, error):
        made = record("constrained", "layer", 0.2, densities=densities[-1], error=error)
        made["params"]["model"] = "wrn-16-1"
        made["params"] |= {"lr_milestones": [2, 3]}
        made["history"] = [{"epoch": str(epoch), "phase": "train", "val_error": str(error if epoch > 2 else 30.0),
                            "l0_density": str(sum(density) / 2),
                            **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, density)},
                            **{f"lambda_{i}": str(m) for i, m in enumerate(multiplier)}}
                           for epoch, (density, multiplier) in enumerate(zip(densities, multipliers))]
        made["gate_medians"] = {"1": {LAYERS[0]: [1.0] * 3 + [0.0] * 13, LAYERS[1]: [1.0] * 7 + [0.0] * 25}}
        return made

    start = [(0.9, 0.9), (0.1875, 0.25), (0.1875, 0.25)]  # 3 of 16 and 8 of 32 gates
    reference = run(start + [(0.1875, 0.1875), (0.125, 0.1875)], [(0, 0)] * 3 + [(0, 0.2), (0, 0)], 24.0)
    test = run(start + [(0.1875, 0.25), (0.1875, 0.25)], [(0, 0.1)] * 5, 22.5)
    numbers = misses.cause_numbers(reference, test)
    assert (numbers["same until"], numbers["milestone"]) == (2, 2)
    assert (numbers["changes with"], numbers["changes without"], numbers["unpushed"]) == (0, 2, 1)
    assert (numbers["gap with"], numbers["block with"]) == (pytest.approx(5.0), "s2.0")
    assert (numbers["gap without"], numbers["block without"]) == (pytest.approx(-7.5), "s1.0")
    assert (numbers["error with"], numbers["error without"]) == (22.5, 24.0)


def drifting(target, final, multipliers_final=(0.0,), method="constrained"):
    """A model-wise record whose multiplier pushes until epoch 0.5 and whose density then falls to ``final``."""
    run = record(method, "model", target=target, densities=(final, final))
    run["metrics"]["multipliers_final"] = list(multipliers_final)
    run["steps"] = [{"epoch": str(e), "l0_density": str(d), "constrained_density_0": str(d), "lambda_0": str(lam)}
                    for e, d, lam in ((0.0, 0.92, 0.001), (0.5, 0.805, 0.12), (0.6, 0.79, 0.0), (2.0, final, 0.0))]
    return run


def test_inactive_misses_are_runs_under_a_target_only_where_that_multiplier_is_zero():
    under = drifting(0.8, 0.72)
    still_pushing = drifting(0.8, 0.72, multipliers_final=(0.3,))
    near = drifting(0.8, 0.795)
    assert misses.inactive_misses([under, still_pushing, near, record("penalized", lmbda=0.1)]) == [under]
    layer = record("constrained", "layer", 0.5, densities=(0.505, 0.45))
    layer["metrics"]["multipliers_final"] = [0.02, 0.0]  # the first block pushed, within a point; the second not
    assert misses.unpushed_under(layer) == [1] and misses.inactive_misses([layer]) == [layer]
    layer["metrics"]["l0_density_per_layer"] = dict(zip(LAYERS, (0.52, 0.45)))
    layer["history"][-1][f"density[{LAYERS[0]}]"] = "0.52"  # now over a target by 2 points: a miss of another kind
    assert misses.inactive_misses([layer]) == []


def with_params(run, gates_lr):
    """``run`` with the run parameters that tell its protocol (and whether its constraint can bind)."""
    run["params"] |= {"method": "constrained", "grouping": "model", "target": run["params"]["target"],
                     "gates_lr": gates_lr, "epochs": 20}
    return run


def test_the_drift_starts_at_the_last_step_a_multiplier_pushed():
    run = drifting(0.8, 0.72)
    push, after = misses.last_push(run)
    assert push["epoch"] == 0.5 and push["l0_density"] == pytest.approx(0.805) and after["epoch"] == 0.6
    rows = misses.drift_rows([run])
    assert rows[["last epoch with λ > 0", "a step later (%)", "lowest after (%)", "final density (%)", "gap (points)"]
                ].iloc[0].tolist() == pytest.approx([0.5, 79.0, 72.0, 72.0, -8.0])
    assert rows["gap (gates)"].isna().all()  # a model-wise density weighs gates by their parameters
    assert rows["no constraint, then (%)"].isna().all() and rows["gates' lr"].tolist() == [6.0]
    # the paper's own run with no binding constraint, read from Table 12 (source line 1370 of the LaTeX)
    assert misses.paper_free_densities() == {6: 91.63, 0.1: 92.34}


def test_the_drift_is_set_beside_the_run_of_its_protocol_whose_constraint_never_binds():
    slow, fast = with_params(drifting(0.8, 0.72), 2.0), with_params(drifting(0.8, 0.72), 6.0)
    free_slow = with_params(drifting(1.0, 0.74), 2.0)    # 79% a step after the push, then 74%: 5 points
    free_fast = with_params(drifting(1.0, 0.715), 6.0)  # 7.5 points, more than the pushed run's 7
    free_other = with_params(drifting(1.0, 0.9), 2.0)
    free_other["params"]["epochs"] = 200                # another protocol: never a twin
    free = [free_other, free_fast, free_slow]
    assert misses.free_twin(slow, free) is free_slow and misses.free_twin(fast, free) is free_fast
    assert misses.free_twin(slow, [free_other, fast]) is None  # a run whose constraint binds is no twin
    slow["steps"].insert(3, {"epoch": "1.0", "l0_density": "0.70", "constrained_density_0": "0.70", "lambda_0": "0.0"})
    rows = misses.drift_rows([slow, fast], free)
    assert rows["gates' lr"].tolist() == [2.0, 6.0]
    assert rows["lowest after (%)"].tolist() == pytest.approx([70.0, 72.0])  # slow dips under its final 72%
    assert rows[["no constraint, then (%)", "no constraint, final (%)"]].values.ravel().tolist() == pytest.approx(
        [79.0, 74.0, 79.0, 71.5])
    assert misses.drift_numbers(rows) == {"crossed": 2, "constraints": 2, "within a gate": 0, "blocks": 0,
                                          "fell further": 1, "no further": 1, "compared": 2}
    fig = misses.plot_free_drift([slow, fast], free)
    assert len(fig.axes[0].lines) == 6  # each run's density, its twin's and its 80% target
    assert [line.get_linestyle() for line in fig.axes[0].lines[:2]] == ["-", ":"]
    assert list(fig.axes[0].lines[1].get_ydata()) == pytest.approx([92.0, 80.5, 79.0, 74.0])  # slow's own twin
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "model-wise 80%, gates' lr 2", "model-wise 80%, gates' lr 6", "its protocol, no binding constraint"]


def test_a_layers_drift_is_counted_in_its_gates():
    run = record("constrained", "layer", 0.5, densities=(0.5, 0.5 - 1 / 32))  # 16 of 32 gates, then 15
    run["metrics"].update(model="wrn-16-1", multipliers_final=[0.01, 0.0],
                          l0_density_per_layer={"stage1.0.conv1.conv": 0.5, "stage2.0.conv1.conv": 0.5 - 1 / 32})
    run["history"][-1] = {"epoch": "2", "phase": "train", "density[stage1.0.conv1.conv]": "0.5",
                          "density[stage2.0.conv1.conv]": str(0.5 - 1 / 32)}
    run["steps"] = [{"epoch": str(e), "constrained_density_0": "0.5", "constrained_density_1": str(d),
                     "lambda_0": "0.01", "lambda_1": str(lam)}
                    for e, d, lam in ((0.0, 0.9, 0.01), (1.0, 0.501, 0.03), (1.1, 0.5 - 1 / 32, 0.0), (2.0, 0.5 - 1 / 32, 0.0))]
    rows = misses.drift_rows([run])
    assert rows["constraint"].tolist() == ["s2.0"]  # s1.0 is at its target
    assert rows[["last epoch with λ > 0", "a step later (%)", "gap (points)", "gap (gates)"]].iloc[0].tolist() == \
        pytest.approx([1.0, 100 * (0.5 - 1 / 32), -100 / 32, -1.0])
    assert misses.drift_numbers(rows) == {"crossed": 1, "constraints": 1, "within a gate": 1, "blocks": 1,
                                          "fell further": 0, "no further": 0, "compared": 0}


def test_the_free_runs_at_both_gates_lrs_give_where_the_loss_alone_takes_the_model(monkeypatch):
    fast = record("constrained", "model", 1.0, densities=(0.75, 0.75), error=17.6)
    slow = record("constrained", "layer", 1.0, densities=(0.96, 0.97), error=21.4)
    fast["params"] |= {"method": "constrained", "gates_lr": 6.0}
    slow["params"] |= {"method": "constrained", "gates_lr": 0.1}
    grids = {misses.FREE_GATES_GRID: [fast], control.ABLATION_GRID: [slow]}
    monkeypatch.setattr(misses, "complete_records", lambda grid: grids[grid])
    monkeypatch.setattr(misses, "steps_frame", lambda run: pd.DataFrame({"l0_density": [0.92]}))
    table = misses.free_runs()
    assert table["gates' lr"].tolist() == [6.0, 0.1] and table["run"].tolist() == ["model-wise 100%", "layer-wise 100%"]
    assert table[["start (%)", "final (%)", "error (%)"]].values.ravel().tolist() == pytest.approx(
        [92.0, 75.0, 17.6, 92.0, 96.5, 21.4])
    grids[control.ABLATION_GRID] = []
    assert misses.free_runs()["gates' lr"].tolist() == [6.0]


def test_the_80_percent_tests_count_the_runs_on_target_and_one_that_ends_over():
    dense = record("dense", error=16.0)
    layer = record("constrained", "layer", 0.8, densities=(0.70, 0.80), error=17.0)
    tests = [record("constrained", "model", 0.8, densities=(0.815, 0.815), error=21.5),
             record("constrained", "layer", 0.8, densities=(0.805, 0.808), error=24.4)]
    for run in (dense, layer):
        run["params"] |= {"method": run["params"]["method"]}
        run["metrics"]["multipliers_final"] = [0.0, 0.0]
    for run, multipliers in zip(tests, ([0.27, 0.27], [0.01, 0.02])):
        run["params"] |= {"method": "constrained", "gates_lr": 0.1}
        run["metrics"]["multipliers_final"] = multipliers
    rows = misses.under_cause_rows([dense, layer], tests)
    assert misses.under_cause_numbers(rows) == {"runs": 2, "still under": 0, "on target": 1, "over": 1}
    assert rows["over target (points)"].iloc[1] == pytest.approx(1.5) and rows["final λ"].iloc[1] == 0.27


@pytest.mark.parametrize("slow_densities, outcome", [((0.80, 0.805), "hit"), ((0.74, 0.80), "under"),
                                                     ((0.82, 0.83), "over")])
def test_the_80_percent_constraints_at_gates_lr_01_say_whether_the_rate_is_the_cause_of_ending_under(
        slow_densities, outcome):
    under = record("constrained", "layer", 0.8, densities=(0.70, 0.80), error=17.0)
    model = record("constrained", "model", 0.8, densities=(0.73, 0.73), error=17.5)
    other = record("constrained", "model", 0.5, densities=(0.5, 0.5))
    dense = record("dense", error=16.0)
    slow = record("constrained", "layer", 0.8, densities=slow_densities, error=16.5)
    for run in (under, model, other, dense):
        run["params"] |= {"method": run["params"]["method"]}
        run["metrics"]["multipliers_final"] = [0.0, 0.0]
    slow["params"] |= {"method": "constrained", "gates_lr": 0.1}
    slow["metrics"]["multipliers_final"] = [0.27, 0.31] if outcome == "over" else [0.0, 0.0]
    rows = misses.under_cause_rows([dense, under, model, other], [slow])
    assert rows["grouping"].tolist() == ["layer", "model", "layer"]  # the 50% run is not compared
    assert rows["gates' lr"].tolist() == [6.0, 6.0, 0.1]
    assert rows["under target (points)"].tolist()[:2] == pytest.approx([-10.0, -7.0])
    assert rows["largest gap (points)"].iloc[2] == pytest.approx({"hit": 0.5, "under": -6.0, "over": 3.0}[outcome])
    assert rows["cost (points)"].tolist() == pytest.approx([1.0, 1.5, 0.5])  # against the dense run
    numbers = misses.under_cause_numbers(rows)
    assert numbers == {"runs": 1, "still under": int(outcome == "under"), "on target": int(outcome == "hit"),
                       "over": int(outcome == "over")}


def _pushed_layers(dual_lr, block2, final2):
    """A layer-wise 50% run of two blocks (16 and 32 gates) whose second block's logged densities are ``block2``
    and whose last epoch ends at ``final2``; the first block sits at its target from epoch 1."""
    run = record("constrained", "layer", 0.5, densities=(0.5, final2))
    run["metrics"].update(model="wrn-16-1", multipliers_final=[0.01, 0.0],
                          l0_density_per_layer={"stage1.0.conv1.conv": 0.5, "stage2.0.conv1.conv": final2})
    run["params"] |= {"method": "constrained", "grouping": "layer", "target": 0.5, "dual_lr": dual_lr, "epochs": 20}
    run["history"][-1] = {"epoch": "2", "phase": "train", "density[stage1.0.conv1.conv]": "0.5",
                          "density[stage2.0.conv1.conv]": str(final2)}
    epochs = [0.0, 0.5, 1.0, 1.5, 2.0][:len(block2)]
    run["steps"] = [{"epoch": str(e), "constrained_density_0": "0.9" if e < 1 else "0.5",
                     "constrained_density_1": str(d), "lambda_0": "0.0", "lambda_1": "0.0"}
                    for e, d in zip(epochs, block2)]
    return run


def test_the_first_push_is_measured_from_where_a_block_first_reaches_its_target(monkeypatch):
    monkeypatch.setattr(misses.rules, "free_gates_records", lambda: [])
    scaled = _pushed_layers(7e-3, (0.9, 0.5 - 3 / 32, 0.5 - 4 / 32, 0.5 - 2 / 32, 0.5 - 2 / 32), 0.5 - 2 / 32)
    unscaled = _pushed_layers(7e-4, (0.9, 0.8, 0.5, 0.5 - 1 / 32, 0.5), 0.5)
    rows = misses.first_push_rows([scaled, unscaled])
    assert rows["block"].tolist() == ["s1.0", "s2.0"] * 2
    assert rows["at target from (epoch)"].tolist() == [1.0, 0.5, 1.0, 1.0]
    assert rows["deepest under (points)"].tolist() == pytest.approx([0.0, -12.5, 0.0, -3.125])
    assert rows["deepest under (gates)"].tolist() == pytest.approx([0.0, -4.0, 0.0, -1.0])
    assert rows["final gap (points)"].tolist() == pytest.approx([0.0, -6.25, 0.0, 0.0])
    never = _pushed_layers(7e-4, (0.9, 0.8, 0.8), 0.8)  # the second block never reaches its target: violated
    assert misses.first_push_rows([never])["deepest under (points)"].isna().tolist() == [False, True]
    summary = misses.first_push_summary([scaled, unscaled, never])
    assert summary["blocks more than a gate under"].tolist() == [1, 0, 0]
    assert summary["deepest block"].tolist()[:2] == ["s2.0", "s2.0"]
    assert summary["deepest under (gates)"].tolist()[:2] == pytest.approx([-4.0, -1.0])
    assert summary["largest final gap (points)"].tolist() == pytest.approx([-6.25, 0.0, 30.0])
    # 2 gates under a block of 32 is 6.25 points, beyond half a gate (1.56): under; 30 points over: violated
    assert summary["outcome"].tolist() == ["under", "on target", "violated"]
    assert summary["dual lr"].tolist() == ["0.007", "0.0007", "0.0007"]
    closed = _pushed_layers(7e-4, (0.9, 0.8, 0.8), 0.8)
    for step in closed["steps"]:
        step["constrained_density_0"] = "0.9"  # neither block ever reaches its target
    assert misses.first_push_summary([closed])["deepest block"].isna().all()
