"""paperlib.harness.rules: every outcome of every rule, on numbers and small synthetic records (outcomes and counts, never
sentences)."""

import pytest

from paperlib.harness import rules
from paperlib.harness.rules import Binding, Outcome, PenaltyOutcome, Verdict

B, F, U = Binding.BINDS, Binding.FREE, Binding.UNKNOWN


def test_a_constraint_binds_when_free_gates_end_above_its_target_and_is_unknown_without_a_free_record():
    assert rules.binding(0.5, 0.75) == B
    assert rules.binding(0.8, 0.75) == F and rules.binding(0.75, 0.75) == F  # at the free density: does not bind
    assert rules.binding(0.5, None) == U


def test_the_tolerance_is_one_point_or_half_a_gate_where_a_gate_is_worth_more_than_two_points():
    assert rules.tolerance(0.1) == rules.ON_TARGET_POINTS == 1.0
    assert rules.tolerance(2.0) == 1.0  # exactly 2 points: not more, so 1 point (and half a gate is 1 too)
    assert rules.tolerance(6.25) == 3.125 and rules.tolerance(5.0) == 2.5


@pytest.mark.parametrize("gaps, bindings, gates, outcome", [
    ([0.4], [B], [0.1], Outcome.ON_TARGET),                      # feasible and on target
    ([-0.9, 1.0], [B, B], [0.1, 0.1], Outcome.ON_TARGET),        # the edges are inside
    ([-1.5], [B], [0.1], Outcome.UNDER),                         # feasible and under
    ([-1.5, 0.2], [B, B], [0.1, 0.1], Outcome.UNDER),
    ([1.2], [B], [0.1], Outcome.VIOLATED),                       # over by more than a point
    ([-9.0, 1.2], [F, F], [0.1, 0.1], Outcome.VIOLATED),         # violated even where no constraint binds
    ([-9.0], [F], [0.1], Outcome.DOES_NOT_BIND),                 # neither hit nor miss
    ([-9.0, 0.5], [F, B], [0.1, 0.1], Outcome.ON_TARGET),        # judged on the constraints that bind
    ([-3.0], [B], [6.25], Outcome.ON_TARGET),                    # half a gate: 3.125 points
    ([-3.2], [B], [6.25], Outcome.UNDER),
    ([1.5], [B], [6.25], Outcome.VIOLATED),                      # half a gate widens "on target", not "feasible"
    ([-1.5], [U], [0.1], Outcome.UNDER),                         # unknown binding is judged as binding
    ([-0.5], [U], [0.1], Outcome.ON_TARGET),
])
def test_every_outcome_of_a_run(gaps, bindings, gates, outcome):
    assert rules.judge_run(gaps, bindings, gates) == outcome
    assert rules.feasible(gaps) == (outcome != Outcome.VIOLATED)


def test_a_run_needs_one_binding_and_one_gate_size_per_constraint():
    with pytest.raises(ValueError, match="one binding and one gate size per constraint"):
        rules.judge_run([0.1, 0.2], [B], [0.1, 0.1])
    with pytest.raises(ValueError, match="at least one constraint"):
        rules.judge_run([], [], [])


def test_runs_that_do_not_bind_are_left_out_of_the_share():
    outcomes = [Outcome.ON_TARGET] * 3 + [Outcome.UNDER, Outcome.VIOLATED] + [Outcome.DOES_NOT_BIND] * 4
    assert rules.passed_and_judged(outcomes) == (3, 5)
    counts = rules.tally(outcomes)
    assert counts == {Outcome.ON_TARGET: 3, Outcome.UNDER: 1, Outcome.VIOLATED: 1, Outcome.DOES_NOT_BIND: 4}
    assert rules.tally([])[Outcome.UNDER] == 0


@pytest.mark.parametrize("passed, judged, complete, verdict", [
    (10, 10, True, Verdict.REPRODUCED), (9, 10, True, Verdict.REPRODUCED), (8, 10, True, Verdict.PARTLY),
    (5, 10, True, Verdict.PARTLY), (4, 10, True, Verdict.NOT_REPRODUCED), (0, 3, True, Verdict.NOT_REPRODUCED),
    (0, 0, True, Verdict.IN_PROGRESS), (10, 10, False, Verdict.IN_PROGRESS),
    (33, 50, True, Verdict.PARTLY),  # 66%
])
def test_a_claims_verdict_is_the_share_of_its_runs_that_pass_with_the_same_thresholds_for_every_claim(
        passed, judged, complete, verdict):
    assert rules.claim_verdict(passed, judged, complete) == verdict


def test_a_claim_cannot_pass_more_runs_than_it_judges():
    with pytest.raises(ValueError, match="between 0 and judged"):
        rules.claim_verdict(3, 2)


def test_the_penalty_rule_measures_the_scatter_and_the_distance_to_the_papers_density():
    judged = rules.judge_penalty([30.0, 34.0, 32.0], 30.5)
    assert judged.difference == pytest.approx(1.5) and judged.scatter == pytest.approx(4.0)
    assert judged.outcome == PenaltyOutcome.WITHIN
    off = rules.judge_penalty([20.0], 30.0)
    assert (off.difference, off.scatter, off.outcome) == (-10.0, 0.0, PenaltyOutcome.OFF)
    assert rules.judge_penalty([32.0], 30.0).outcome == PenaltyOutcome.WITHIN  # 2 points: the edge is inside
    with pytest.raises(ValueError, match="at least one"):
        rules.judge_penalty([], 30.0)


def test_numbers_agree_within_the_agreement_tolerance():
    assert rules.agrees(2.0) and not rules.agrees(-2.1)
    assert rules.agrees(0.5, rules.ERROR_POINTS) and not rules.agrees(0.6, rules.ERROR_POINTS)


def test_a_gates_worth_is_counted_from_the_model():
    """Independent counts: WideResNet-16-1's stages have 16, 32 and 64 gates; LeNet5's conv1 20 and conv2 50."""
    model, layers = rules.gate_points("wrn-16-1")
    assert [round(p, 4) for p in layers.values()] == [6.25, 6.25, 3.125, 3.125, 1.5625, 1.5625]
    assert model < 1.0  # one gate of the whole model is under a point
    _, lenet = rules.gate_points("lenet5")
    assert (lenet["conv1"], lenet["conv2"]) == (5.0, 2.0)


def record(grouping, target, densities, gates_lr=6.0, model="wrn-16-1", seed=0, preset="cpu", epochs=20):
    """A constrained record of WideResNet-16-1 (two gated blocks named) with its final densities."""
    layers = ["stage1.0.conv1.conv", "stage3.0.conv1.conv"]
    model_density = sum(densities) / len(densities)
    params = {"model": model, "method": "constrained", "grouping": grouping, "target": target, "seed": seed,
              "preset": preset, "gates_lr": gates_lr, "dual_lr": 0.007 if target != 1.0 else 0.001, "epochs": epochs,
              "run_name": f"{grouping}-{target}-{gates_lr}"}
    history = [{"epoch": "20", "phase": "train", "l0_density": str(model_density),
                **{f"density[{layer}]": str(d) for layer, d in zip(layers, densities)}}]
    metrics = {"l0_density": model_density,
               "l0_density_per_layer": dict(zip(layers, densities))}
    return {"path": "/nowhere", "params": params, "metrics": metrics, "history": history}


def test_a_record_is_judged_against_the_free_gates_run_of_its_own_model_and_protocol():
    free = [record("model", 1.0, (0.75, 0.75)), record("layer", 1.0, (0.70, 0.85)),
            record("model", 1.0, (0.95, 0.95), gates_lr=0.1)]
    # model-wise 80%: the free model ends at 75% at gates lr 6, so the target does not bind there ...
    judged = rules.judge_record(record("model", 0.8, (0.7, 0.7)), free)
    assert judged.outcome == Outcome.DOES_NOT_BIND and judged.bindings == (F,) and judged.binding_known
    # ... but at gates lr 0.1 its free run ends at 95%: the same target binds, and 10 points under is a miss
    assert rules.judge_record(record("model", 0.8, (0.7, 0.7), gates_lr=0.1), free).outcome == Outcome.UNDER
    # layer-wise 80%: only the second block binds (free 85%); its 16-gate first block is 20 points under, free
    judged = rules.judge_record(record("layer", 0.8, (0.6, 0.795)), free)
    assert judged.bindings == (F, B) and judged.outcome == Outcome.ON_TARGET
    assert judged.gaps == pytest.approx((-20.0, -0.5)) and judged.tolerances == (3.125, 1.0)
    # layer-wise 50%: both bind; the first block 3 points under is within half a gate (3.125), the second not
    assert rules.judge_record(record("layer", 0.5, (0.47, 0.5)), free).outcome == Outcome.ON_TARGET
    assert rules.judge_record(record("layer", 0.5, (0.5, 0.47)), free).outcome == Outcome.UNDER
    # another seed of the free run is averaged; none at all leaves the binding unknown
    judged = rules.judge_record(record("model", 0.8, (0.7, 0.7)), [])
    assert judged.bindings == (U,) and not judged.binding_known and judged.outcome == Outcome.UNDER
    with pytest.raises(ValueError, match="only a constrained run"):
        rules.judge_record({**free[0], "params": {**free[0]["params"], "method": "penalized"}}, free)


def test_free_densities_average_the_seeds_of_the_matching_free_runs():
    free = [record("model", 1.0, (0.74, 0.74)), record("model", 1.0, (0.78, 0.78), seed=1),
            record("layer", 1.0, (0.5, 0.5))]
    assert rules.free_densities(record("model", 0.5, (0.5, 0.5)), free) == pytest.approx([0.76])
    assert rules.free_densities(record("model", 0.5, (0.5, 0.5), model="wrn-28-10"), free) == [None]
    assert rules.is_free_gates(free[0]) and not rules.is_free_gates(record("model", 0.5, (0.5, 0.5)))


def test_a_free_gates_run_stands_for_every_preset_whose_values_it_shares_and_for_no_other():
    free = [record("model", 1.0, (0.9, 0.9), gates_lr=1.0)]  # made under "cpu" with the gates lr overridden
    same_values = record("model", 0.8, (0.7, 0.7), gates_lr=1.0, preset="cpu2")
    assert rules.free_densities(same_values, free) == [pytest.approx(0.9)]
    other_values = record("model", 0.8, (0.7, 0.7), gates_lr=1.0, preset="cpu2", epochs=40)
    assert rules.free_densities(other_values, free) == [None]
