"""analysis.causes: each cause test's outcome by the rule its grid declared, on synthetic blocks."""

from analysis import causes
from analysis.causes import Blocks

ON, UNDER, OVER = "on target", "under", "violated"


def _base():
    return {0.35: Blocks([-3.0, -2.0, -0.5, -1.5, -4.0, -0.2], [0.2, -0.2, -2.3, -5.2, -0.4, -0.1],
                         [ON, ON, UNDER, UNDER, ON, ON]),
            0.65: Blocks([-7.4, -0.5, -2.0, -1.2, -0.3, -1.1], [-10.1, -0.8, -2.4, 0.5, 0.2, -1.5],
                         [UNDER, ON, UNDER, ON, ON, UNDER])}


def test_one_block_stands_is_refuted_or_partial_by_stage_1():
    base = _base()
    free = [None, -30.0, -20.0, -10.0, -10.0, -10.0]
    assert causes._one_block({0.65: Blocks([-0.5] + free[1:], [0.3] + [0] * 5, [ON] * 6)}, base) == causes.CAUSE
    assert causes._one_block({0.65: Blocks([-8.0] + free[1:], [-12.0] + [0] * 5, [UNDER] + [ON] * 5)}, base) \
        == causes.NOT_CAUSE
    assert causes._one_block({0.65: Blocks([-3.0] + free[1:], [-4.0] + [0] * 5, [UNDER] + [ON] * 5)}, base) \
        == causes.CONTRIBUTES  # under, by less than the layer-wise run's stage1.0
    assert causes._one_block({0.65: Blocks([-3.0] + free[1:], [0.1] + [0] * 5, [ON] * 6)}, base) \
        == causes.CONTRIBUTES  # a deep fall that comes back


def test_a_damped_multiplier_is_the_cause_only_without_falls_and_misses():
    base = _base()
    clean = Blocks([-0.5] * 6, [0.1] * 6, [ON] * 6)
    assert causes._damped({0.35: clean, 0.65: clean}, base) == causes.CAUSE
    falls = {t: Blocks([-2.0] * 6, [-3.0] + [0.0] * 5, [UNDER] + [ON] * 5) for t in (0.35, 0.65)}
    assert causes._damped(falls, base) == causes.NOT_CAUSE
    fewer = {t: Blocks([-2.0] + [-0.5] * 5, [-3.0] + [0.0] * 5, [UNDER] + [ON] * 5) for t in (0.35, 0.65)}
    assert causes._damped(fewer, base) == causes.CONTRIBUTES
    assert causes._damped({0.35: clean, 0.65: Blocks([-0.5] * 6, [2.0] * 6, [OVER] * 6)}, base) == causes.VIOLATED


def test_a_longer_schedule_is_the_cause_when_blocks_come_back():
    base = _base()
    assert causes._longer({t: Blocks([-2.0] * 6, [0.0] * 6, [ON] * 6) for t in (0.35, 0.65)}, base) == causes.CAUSE
    as_far = {t: Blocks(b.dips, [g - 1 for g in b.gaps], b.outcomes) for t, b in base.items()}
    assert causes._longer(as_far, base) == causes.NOT_CAUSE
    climbing = {t: Blocks(b.dips, [g / 2 for g in b.gaps], b.outcomes) for t, b in base.items()}
    assert causes._longer(climbing, base) == causes.CONTRIBUTES


def test_the_unscaled_dual_lr_has_the_two_declared_outcomes():
    base = _base()
    assert causes._unscaled({t: Blocks([-0.5] * 6, [0.0] * 6, [ON] * 6) for t in (0.35, 0.65)}, base) == causes.CAUSE
    assert causes._unscaled({t: Blocks([-1.7] + [-0.5] * 5, [-7.0] + [0.0] * 5, [UNDER] + [ON] * 5)
                             for t in (0.35, 0.65)}, base) == causes.NOT_CAUSE


def _run(densities: list[list[float]], multipliers: list[list[float]], target=0.5) -> dict:
    """A layer-wise record's step log: one row per logged step, a density and a multiplier per block."""
    steps = [{"epoch": 0.5 * i, **{f"constrained_density_{b}": d for b, d in enumerate(row)},
              **{f"lambda_{b}": m for b, m in enumerate(lams)}} for i, (row, lams) in enumerate(zip(densities,
                                                                                                   multipliers))]
    return {"steps": steps, "params": {"target": target}}


def test_after_reaching_reads_when_the_push_ends_and_how_far_the_block_falls_after():
    run = _run([[0.9, 0.9], [0.6, 0.45], [0.48, 0.44], [0.40, 0.46], [0.42, 0.47]],
               [[0.1, 0.1], [0.3, 0.2], [0.2, 0.0], [0.0, 0.0], [0.0, 0.0]])
    rows = causes.after_reaching(run).set_index("block")
    # block 0 first at/under 50% at step 2 (epoch 1.0), multiplier first 0 at step 3 (epoch 1.5): 0.5 epochs later,
    # at 40%, and its lowest in the epoch after is 40%
    assert rows.loc[0, "reaches (epoch)"] == 1.0 and rows.loc[0, "λ positive after (epochs)"] == 0.5
    assert rows.loc[0, "density when λ is 0 (%)"] == 40.0 and rows.loc[0, "lowest in the next epoch (%)"] == 40.0
    # block 1 reaches at epoch 0.5 with its multiplier still 0.2, released at epoch 1.0 at 44%
    assert rows.loc[1, "reaches (epoch)"] == 0.5 and rows.loc[1, "λ positive after (epochs)"] == 0.5
    assert rows.loc[1, "density when λ is 0 (%)"] == 44.0 and rows.loc[1, "final (%)"] == 47.0
    never = causes.after_reaching(_run([[0.9], [0.8]], [[0.1], [0.2]]))
    assert never.loc[0, "reaches (epoch)"] is None and never.loc[0, "λ positive after (epochs)"] is None


def test_causes_are_listed_by_their_outcome():
    import pandas as pd
    tests = pd.DataFrame({"cause tested": ["a", "b", "c", "d"],
                          "outcome by the declared rule": [causes.NOT_CAUSE, causes.INCOMPLETE, causes.NOT_CAUSE,
                                                           causes.CONTRIBUTES]})
    assert causes.by_outcome(tests) == {"ruled out": "a; c", "found": "none", "contributing": "d", "open": "b",
                                        "shown": "none"}


def _history_run(per_epoch: list[list[float]], target: float) -> dict:
    """A layer-wise record's per-epoch history (a train row per epoch, and an evaluation row that must be skipped)."""
    names = [f"stage{s}.{b}.conv1.conv" for s in (1, 2) for b in (0, 1)][:len(per_epoch[0])]
    history = []
    for epoch, row in enumerate(per_epoch, start=1):
        history.append({"epoch": epoch, "phase": "train", **{f"density[{n}]": d for n, d in zip(names, row)}})
        history.append({"epoch": epoch, "phase": "test", **{f"density[{n}]": 0.0 for n in names}})
    return {"history": history, "params": {"target": target}, "metrics": {"l0_density_per_layer": dict.fromkeys(names)}}


def test_the_schedule_table_reads_the_longer_run_at_the_shorter_ones_end_and_at_its_own(monkeypatch):
    monkeypatch.setattr(causes.rules, "free_gates_records", lambda: [])
    monkeypatch.setattr(causes, "blocks", lambda run, free: Blocks([None] * 2, [0.0, -3.0], [ON, UNDER])
                        if len(run["history"]) == 6 else Blocks([None] * 2, [-4.0, -3.0], [UNDER, UNDER]))
    monkeypatch.setattr(causes, "constraint_names", lambda run: ["a", "b"])
    longer = _history_run([[0.6, 0.5], [0.62, 0.55], [0.65, 0.6]], 0.65)
    shorter = _history_run([[0.4, 0.3], [0.45, 0.35]], 0.65)
    rows = causes.schedule_rows({0.65: longer}, {0.65: shorter}, at_epoch=2)
    assert rows["20 epochs, final (%)"].round(6).tolist() == [45.0, 35.0]
    assert rows["40 epochs, at epoch 2 (%)"].round(6).tolist() == [62.0, 55.0]
    assert rows["40 epochs, final (%)"].round(6).tolist() == [65.0, 60.0]
    assert rows["outcome (40 epochs)"].tolist() == [ON, UNDER] and rows["outcome (20 epochs)"].tolist() == [UNDER] * 2


def test_a_test_without_a_declared_rule_is_shown_not_judged(monkeypatch):
    import pandas as pd
    monkeypatch.setattr(causes.rules, "free_gates_records", lambda: [])
    monkeypatch.setattr(causes, "baselines", lambda frame, free: _base())
    monkeypatch.setattr(causes, "blocks", lambda run, free: run)  # the "records" below are Blocks already
    ran = {0.35: _base()[0.35], 0.65: _base()[0.65]}
    monkeypatch.setattr(causes, "test_runs", lambda frame, key: ran if key == "granularity" else {})
    tests = causes.cause_tests(pd.DataFrame()).set_index("grid")
    assert tests.loc["grids/cifar10_gpu_control.yaml", "outcome by the declared rule"] == causes.NO_RULE
    assert (tests.drop(index="grids/cifar10_gpu_control.yaml")["outcome by the declared rule"]
            == causes.INCOMPLETE).all()
    assert causes.by_outcome(tests.reset_index())["shown"] == "the coarse blocks (16 to 64 gates)"
    ran.pop(0.65)  # one of its two runs missing: open, like any test
    assert causes.cause_tests(pd.DataFrame()).set_index("grid").loc[
        "grids/cifar10_gpu_control.yaml", "outcome by the declared rule"] == causes.INCOMPLETE


def test_the_wider_network_at_the_cpu_protocols_settings_is_judged_as_declared():
    base = _base()
    assert causes._wider({t: Blocks([-2.0] * 6, [0.0] * 6, [ON] * 6) for t in (0.35, 0.65)}, base) == causes.CAUSE
    as_far = {t: Blocks(b.dips, [g - 1 for g in b.gaps], b.outcomes) for t, b in base.items()}
    assert causes._wider(as_far, base) == causes.NOT_CAUSE
    fewer = {t: Blocks(b.dips, b.gaps, [ON if o == UNDER else o for o in b.outcomes][:-1] + [b.outcomes[-1]])
             for t, b in base.items()}
    assert causes._wider(fewer, base) == causes.CONTRIBUTES
    over = {**base, 0.65: Blocks([-0.5] * 6, [2.0] + [0.0] * 5, [OVER] + [ON] * 5)}
    assert causes._wider(over, base) == causes.VIOLATED


def test_the_granularity_table_compares_falls_in_points_across_block_sizes(monkeypatch):
    monkeypatch.setattr(causes.rules, "free_gates_records", lambda: [])
    small = {"blocks": Blocks([-2.0, None], [-4.0, 0.3], [UNDER, ON]), "points": [6.25, 3.125]}
    wide = {"blocks": Blocks([-8.0, -1.0], [-5.0, -0.2], [UNDER, ON]), "points": [1.5625, 0.78125]}
    monkeypatch.setattr(causes, "blocks", lambda run, free: run["blocks"])
    monkeypatch.setattr(causes.rules, "constraint_gate_points", lambda run: run["points"])
    monkeypatch.setattr(causes, "constraint_names", lambda run: ["s1.0", "s2.0"])
    rows = causes.granularity_rows({0.65: wide}, {0.65: small})
    assert rows["CPU: gates"].tolist() == [16, 32] and rows["GPU: gates"].tolist() == [64, 128]
    # 2 gates of 6.25 points and 8 gates of 1.5625 are the same 12.5 points; a block that never fell shows 0
    assert rows["CPU: deepest fall (points)"].tolist() == [-12.5, 0.0]
    assert rows["GPU: deepest fall (points)"].tolist() == [-12.5, -0.78125]
    assert rows["CPU: final (%)"].round(6).tolist() == [61.0, 65.3] and rows["GPU: final (%)"].round(6).tolist() \
        == [60.0, 64.8]
    assert rows["GPU: outcome"].tolist() == [UNDER, ON] and rows["target (%)"].tolist() == [65, 65]
