"""paperlib.control: the control table's rows, layer densities, paper points and verdict, on records made here."""

import math

import pandas as pd
import pytest

from paperlib import control

LAYERS = ["stage1.0.conv1.conv", "stage2.0.conv1.conv"]


def record(method, grouping="model", target=None, lmbda=None, densities=(0.5, 0.5), error=10.0, seed=0):
    """A record as records.load_record returns it, with the final epoch's densities (one per layer)."""
    model_density = sum(densities) / len(densities)
    history = [{"epoch": "1", "phase": "train", "l0_density": str(model_density),
                **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, densities)}}]
    metrics = {"run_name": f"{method}-{grouping}-{target}-{lmbda}-s{seed}", "method": method, "grouping": grouping,
               "target": target, "lmbda": lmbda, "seed": seed,
               "l0_density": None if method == "dense" else model_density,
               "l0_density_per_layer": dict(zip(LAYERS, densities)), "params_pct": 100 * model_density,
               "macs_pct": 90 * model_density, "val_error_final": error, "epochs_completed": 1}
    return {"path": "/nowhere", "metrics": metrics, "history": history}


def test_largest_gap_is_the_worst_layer_of_a_layer_wise_run_and_the_model_of_a_model_wise_one():
    assert control.largest_gap(record("constrained", "layer", 0.2, densities=(0.205, 0.17))) == pytest.approx(-3.0)
    assert control.largest_gap(record("constrained", "model", 0.2, densities=(0.205, 0.215))) == pytest.approx(1.0)


def test_run_rows_mark_hits_within_one_point_and_costs_against_the_dense_run():
    dense = record("dense", error=8.0)
    runs = [record("constrained", "layer", 0.2, densities=(0.205, 0.195), error=9.5),
            record("constrained", "model", 0.5, densities=(0.52, 0.52), error=8.5),
            record("penalized", "model", lmbda=0.01, densities=(0.3, 0.4), error=9.0), dense]
    rows = control.run_rows(runs, dense)
    assert rows["hit"].tolist()[:2] == [True, False] and rows["hit"].iloc[2] is None
    assert rows["cost (points)"].tolist() == pytest.approx([1.5, 0.5, 1.0, 0.0])
    assert rows["setting"].tolist() == ["target 20%", "target 50%", "λ_pen 0.01", "dense"]
    assert rows["L0-density (%)"].iloc[3] == 100.0  # a dense model keeps every group
    assert control.run_rows(runs, None)["cost (points)"].isna().all()


def test_layer_rows_give_each_gated_block_a_short_column():
    rows = control.layer_rows([record("constrained", "layer", 0.2, densities=(0.25, 0.2)),
                               record("constrained", "model", 0.2)])
    assert len(rows) == 1 and list(rows.columns) == ["run", "setting", "seed", "s1.0", "s2.0", "largest gap (points)"]
    assert rows[["s1.0", "s2.0", "largest gap (points)"]].iloc[0].tolist() == pytest.approx([25.0, 20.0, 5.0])


def test_paper_points_of_the_cifar10_control_table_match_its_printed_cells():
    points = control.paper_points("tab:cifar10_control")
    layer20 = points[(points["method"] == "constrained") & (points["grouping"] == "layer") & (points["target"] == 0.2)]
    assert layer20[["L0-density (%)", "params (%)", "MACs (%)", "val. error final (%)"]].iloc[0].tolist() == [
        20.00, 16.24, 16.10, 4.28]  # the table's first row
    assert len(points[points["method"] == "constrained"]) == 10 and len(points[points["method"] == "penalized"]) == 10
    collapsed = points[(points["method"] == "penalized") & (points["grouping"] == "layer") & (points["lmbda"] == 1.0)]
    assert collapsed["L0-density (%)"].isna().all() and "collapse" in collapsed["status"].iloc[0]
    error, label = control.paper_reference_error(points)
    assert label.startswith("penalized") and error == points.loc[points["L0-density (%)"].idxmax(), "val. error final (%)"]


def test_the_verdict_counts_hits_scatter_cost_and_what_is_missing():
    dense = record("dense", error=8.0)
    runs = [record("constrained", "layer", 0.2, densities=(0.205, 0.195), error=9.5),
            record("constrained", "model", 0.5, densities=(0.53, 0.53), error=8.5),
            record("constrained", "model", 0.8, densities=(0.7, 0.7), error=8.5),
            record("penalized", "model", lmbda=0.01, densities=(0.3, 0.4), error=9.0),
            record("penalized", "model", lmbda=1.0, densities=(0.05, 0.05), error=12.0), dense]
    text = control.verdict(control.run_rows(runs, dense), {"constrained": 10, "penalized": 2, "dense": 1})
    assert "1 of 3 constrained runs ended within 1 point" in text
    assert "1 ended more than a point under a target and over none, so their constraints hold (the largest: " \
           "-10.00 points, model-wise target 80%)" in text
    assert "1 ended more than a point over a target (the largest: +3.00 points, model-wise target 50%)" in text
    assert "between 5.0% and 35.0% density" in text and "+0.50 to +4.00 points" in text
    assert "Not yet run:** 7 constrained" in text and "penalized" not in text.split("Not yet run")[1]
    assert control.verdict(control.run_rows([], None), {}) == "No run of this table has a complete record yet."


def test_the_figure_has_the_papers_points_hollow_beside_ours():
    dense = record("dense", error=8.0)
    ours = control.run_rows([record("constrained", "model", 0.5, densities=(0.5, 0.5), error=9.0), dense], dense)
    paper = control.paper_points("tab:cifar10_control")
    fig = control.plot_comparison(ours, paper)
    faces = [collection.get_facecolors() for collection in fig.axes[0].collections]
    assert any(len(f) and f[0][3] > 0 for f in faces) and any(len(f) == 0 or f[0][3] == 0 for f in faces)
    costs = {collection.get_label(): collection.get_offsets().tolist() for collection in fig.axes[3].collections}
    assert costs["ours, constrained, model-wise"] == [[50.0, 1.0]]  # 9.0 - 8.0 at 50% density
    reference, _ = control.paper_reference_error(paper)
    paper_constrained = costs["paper, constrained, model-wise"] + costs["paper, constrained, layer-wise"]
    assert len(paper_constrained) == 10 and min(y for _, y in paper_constrained) == pytest.approx(
        paper.loc[paper["method"] == "constrained", "val. error final (%)"].min() - reference)


def _trajectory(densities_by_epoch, dual_lr, target=0.2):
    """A layer-wise record whose epoch ends have these (layer, layer) densities."""
    run = record("constrained", "layer", target, densities=densities_by_epoch[-1])
    run["history"] = [{"epoch": str(epoch), "phase": "train", "l0_density": str(sum(d) / 2),
                       **{f"density[{layer}]": str(x) for layer, x in zip(LAYERS, d)}}
                      for epoch, d in enumerate(densities_by_epoch, start=1)]
    run["params"] = {"dual_lr": dual_lr}
    return run


def test_dual_lr_rows_say_when_every_constraint_first_held_and_how_far_it_slipped_after():
    slow = _trajectory([(0.5, 0.4), (0.3, 0.25), (0.21, 0.2), (0.225, 0.2), (0.205, 0.2)], 1e-4)
    fast = _trajectory([(0.2, 0.19), (0.2, 0.2), (0.19, 0.2)], 1e-2)
    never = _trajectory([(0.5, 0.5), (0.4, 0.3)], 1e-5)
    rows = control.dual_lr_rows([fast, slow, never])
    assert rows["dual lr"].tolist() == ["1e-05", "0.0001", "0.01"]  # as written, not rounded by the page
    assert rows["first feasible epoch"].tolist()[1:] == [3, 1] and pd.isna(rows["first feasible epoch"].iloc[0])
    assert rows["largest violation after it (points)"].tolist()[1:] == pytest.approx([2.5, 0.0])
    assert rows["final largest gap (points)"].tolist() == pytest.approx([20.0, 0.5, -1.0])
    fig = control.plot_layer_traces([slow, fast])
    assert [line.get_ydata()[-1] for line in fig.axes[0].get_lines()[:2]] == pytest.approx([20.5, 20.0])


def test_the_protocol_table_reads_both_presets_and_marks_what_the_cpu_changes():
    table = control.protocol_table("cifar10").set_index("parameter")
    assert table.loc["epochs", "paper"] == "200" and table.loc["model", "CPU protocol"] == "wrn-16-1"
    assert set(table.index[table["differs"] == "yes"]) == {"model", "epochs", "lr_milestones", "dual_lr"}


def test_epoch_minutes_divide_wall_time_by_epochs():
    runs = [{"metrics": {"wall_time_s": 4800.0, "epochs_completed": 20}},
            {"metrics": {"wall_time_s": 600.0, "epochs_completed": 4}}]
    assert control.epoch_minutes(runs).tolist() == pytest.approx([4.0, 2.5])


def test_gate_rows_count_a_saturated_layer_in_whole_gates():
    run = record("constrained", "layer", 0.2, densities=(0.1875, 0.21875))  # 3 of 16 gates, 7 of 32
    run["metrics"]["model"] = "wrn-16-1"
    run["history"][0].update({"lambda_0": "0.0", "lambda_1": "0.5"})
    run["gate_medians"] = {"0": {layer: [0.5] * n for layer, n in zip(LAYERS, (16, 32))},
                           "1": {LAYERS[0]: [1.0] * 3 + [0.0] * 13, LAYERS[1]: [1.0] * 6 + [0.3] + [0.0] * 25}}
    rows = control.gate_rows(run)
    assert rows["gates"].tolist() == [16, 32] and rows["one gate (points)"].tolist() == pytest.approx([6.25, 3.125])
    assert rows["expected open gates"].tolist() == pytest.approx([3.0, 7.0])
    assert rows["target (gates)"].tolist() == pytest.approx([3.2, 6.4])
    assert rows["gap (gates)"].tolist() == pytest.approx([-0.2, 0.6])
    assert rows["gap (points)"].tolist() == pytest.approx([-1.25, 1.875])
    assert rows["open medians"].tolist() == [3, 7]  # the last saved epoch's; a fractional median is open
    fig = control.plot_gate_steps(run)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["s1.0 (16 gates)", "s2.0 (32 gates)"]
    assert fig.axes[0].lines[0].get_ydata().tolist() == pytest.approx([3.0])


def test_gate_changes_list_each_whole_gate_a_layer_gained_or_lost_with_its_multiplier():
    run = record("constrained", "layer", 0.2, densities=(0.1875, 0.21875))
    run["metrics"]["model"] = "wrn-16-1"
    densities = [(0.9, 0.9), (0.1875, 0.21875), (0.1875, 0.1875), (0.1878, 0.21875)]  # 16 and 32 gates
    multipliers = [(0.0, 0.0), (0.0, 0.2), (0.0, 0.0), (0.0, 0.05)]
    run["history"] = [{"epoch": str(epoch), "phase": "train",
                       **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, density)},
                       **{f"lambda_{i}": str(m) for i, m in enumerate(multiplier)}}
                      for epoch, (density, multiplier) in enumerate(zip(densities, multipliers))]
    changes = control.gate_changes(run)  # from epoch 1 on: the first epoch's fall from 90% is not listed
    assert changes.to_dict("records") == [
        {"epoch": 2, "block": "s2.0", "open gates": "7 → 6", "λ before": 0.2, "λ after": 0.0},
        {"epoch": 3, "block": "s2.0", "open gates": "6 → 7", "λ before": 0.0, "λ after": 0.05}]


def test_the_cause_summary_counts_late_whole_gate_changes_and_compares_gaps_and_errors():
    def run(densities, multipliers, error):
        made = record("constrained", "layer", 0.2, densities=densities[-1], error=error)
        made["metrics"]["model"] = "wrn-16-1"
        made["params"] = {"lr_milestones": [2, 3]}
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
    assert control.cause_summary(reference, test) == (
        "The two runs are the same until epoch 2, when the first milestone decays the gates' learning rate in the "
        "test. After epoch 2, no block changes its whole number of open gates; without the decay, blocks do so 2 "
        "times, 1 of them closing a gate with the block's multiplier at zero before and after (s1.0). The largest "
        "final gap is +5.00 points (s2.0) with the decay and -7.50 (s1.0) without; the final error 22.50% and "
        "24.00% (one seed each).")


def test_the_pages_selections_of_the_control_records(monkeypatch):
    def run(method="constrained", grouping="layer", target=0.2, seed=0, dual_lr=7e-3, experiment="cifar10_control",
            **params):
        made = record(method, grouping, target, seed=seed)
        made["metrics"].update(experiment=experiment, model="wrn-16-1", preset="cpu", wall_time_s=1200.0,
                               epochs_completed=20)
        made["params"] = {"dual_lr": dual_lr, "method": method, "schedule_gates": False, "detach_gates": True,
                          **params}
        return made

    fast = run(dual_lr=2.8e-2, experiment="cifar10_dual_lr")
    monkeypatch.setattr(control, "complete_records", lambda grid: [fast] if grid == control.DUAL_LR_GRID else [])
    scaled, model20, dense = run(), run(grouping="model"), run(method="dense", grouping="model", target=None)
    other_seed = run(seed=1)
    found = control.layer_runs_at([model20, other_seed, scaled, dense])
    assert found == [scaled, fast]  # seed 0's layer-wise 20%, by dual learning rate
    assert control.preset_run(found) is scaled and control.dense_run([scaled, dense]) is dense
    assert control.epoch_sentence([scaled, dense]) == (
        "2 runs: 1.0 minutes per epoch (median; 1.0 to 1.0), 20 minutes per run.")
    assert control.epoch_sentence([]).startswith("No record yet of the control table: `python -m paperlib.sweeps")
    undetached = run(grouping="model", detach_gates=False)
    assert control.detach_pairs([undetached, run(grouping="model")], [model20, scaled]) == [undetached, model20]
    tested = run(schedule_gates=True)
    assert control.cause_rows(scaled, [tested])["gates' lr decayed"].tolist() == [False, True]


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
    assert control.inactive_misses([under, still_pushing, near, record("penalized", lmbda=0.1)]) == [under]
    layer = record("constrained", "layer", 0.5, densities=(0.505, 0.45))
    layer["metrics"]["multipliers_final"] = [0.02, 0.0]  # the first block pushed, within a point; the second not
    assert control.unpushed_under(layer) == [1] and control.inactive_misses([layer]) == [layer]
    layer["metrics"]["l0_density_per_layer"] = dict(zip(LAYERS, (0.52, 0.45)))
    layer["history"][-1][f"density[{LAYERS[0]}]"] = "0.52"  # now over a target by 2 points: a miss of another kind
    assert control.inactive_misses([layer]) == []


def test_the_drift_starts_at_the_last_step_a_multiplier_pushed():
    run = drifting(0.8, 0.72)
    push, after = control.last_push(run)
    assert push["epoch"] == 0.5 and push["l0_density"] == pytest.approx(0.805) and after["epoch"] == 0.6
    rows = control.drift_rows([run])
    assert rows[["last epoch with λ > 0", "density then (%)", "a step later (%)", "final density (%)", "gap (points)"]
                ].iloc[0].tolist() == pytest.approx([0.5, 80.5, 79.0, 72.0, -8.0])
    assert rows["gap (gates)"].isna().all()  # a model-wise density weighs gates by their parameters
    text = control.free_drift_in_words([run], None)
    assert text.startswith("In the one constraint here the multiplier's last push took the density under the target")
    assert "blocks" not in text and "cifar10_free_gates.yaml" in text  # the cause test has no record yet
    free = drifting(1.0, 0.74)
    assert "from 92.0% to 74.0% on the loss alone" in control.free_drift_in_words([run], free)
    # the paper's own run with no binding constraint, read from Table 12 (source line 1370 of the LaTeX)
    assert "ends at 91.63% with the gates' learning rate of 6 and at 92.34% with 0.1" in text
    fig = control.plot_free_drift([run], free)
    assert len(fig.axes[0].lines) == 3  # two density curves and the 80% target (none for the free run)


def test_a_layers_drift_is_counted_in_its_gates():
    run = record("constrained", "layer", 0.5, densities=(0.5, 0.5 - 1 / 32))  # 16 of 32 gates, then 15
    run["metrics"].update(model="wrn-16-1", multipliers_final=[0.01, 0.0],
                          l0_density_per_layer={"stage1.0.conv1.conv": 0.5, "stage2.0.conv1.conv": 0.5 - 1 / 32})
    run["history"][-1] = {"epoch": "2", "phase": "train", "density[stage1.0.conv1.conv]": "0.5",
                          "density[stage2.0.conv1.conv]": str(0.5 - 1 / 32)}
    run["steps"] = [{"epoch": str(e), "constrained_density_0": "0.5", "constrained_density_1": str(d),
                     "lambda_0": "0.01", "lambda_1": str(lam)}
                    for e, d, lam in ((0.0, 0.9, 0.01), (1.0, 0.501, 0.03), (1.1, 0.5 - 1 / 32, 0.0), (2.0, 0.5 - 1 / 32, 0.0))]
    rows = control.drift_rows([run])
    assert rows["constraint"].tolist() == ["s2.0"]  # s1.0 is at its target
    assert rows[["last epoch with λ > 0", "a step later (%)", "gap (points)", "gap (gates)"]].iloc[0].tolist() == \
        pytest.approx([1.0, 100 * (0.5 - 1 / 32), -100 / 32, -1.0])
    assert "1 of the 1 blocks end within one gate of their target" in control.free_drift_in_words([run], None)


def test_the_free_drift_section_shows_table_figure_and_words_and_names_the_missing_cause_test(monkeypatch):
    monkeypatch.setattr(control, "complete_records", lambda grid: [])
    items = control.free_drift_section([drifting(0.8, 0.72), drifting(0.5, 0.495)])
    assert [type(item).__name__ for item in items] == ["Styler", "Figure", "str"]
    assert items[0].data["setting"].tolist() == ["model-wise target 80%"] and "cifar10_free_gates.yaml" in items[2]
    assert control.free_drift_section([drifting(0.5, 0.495)]) == [
        "No constrained run ends more than a point under a target with that constraint's multiplier at zero."]


def test_ablation_checks_compare_gates_lrs_on_test_time_parameters_and_the_stop_gradient_on_the_gap():
    def ablation(method, grouping, target=None, lmbda=None, density=0.9, params_pct=90.0, gates_lr=6.0,
                 detach_gates=True):
        run = record(method, grouping, target=target, lmbda=lmbda, densities=(density, density))
        run["metrics"]["params_pct"] = params_pct
        run["params"] = {"method": method, "grouping": grouping, "target": target, "lmbda": lmbda,
                         "gates_lr": gates_lr, "detach_gates": detach_gates}
        return run

    runs = [ablation("penalized", "model", lmbda=0.001, params_pct=99.8, gates_lr=0.1),
            ablation("penalized", "model", lmbda=0.001, params_pct=94.0),
            ablation("constrained", "layer", target=1.0, params_pct=99.9, gates_lr=0.1),
            ablation("constrained", "layer", target=1.0, params_pct=99.5),  # 0.4 points: not more than a point
            ablation("constrained", "model", target=0.5, density=0.45, detach_gates=False),
            ablation("constrained", "model", target=0.2, density=0.195, detach_gates=False)]
    with_stop_gradient = [ablation("constrained", "model", target=t, density=d) for t, d in ((0.5, 0.5), (0.2, 0.2))]
    checks = control.ablation_checks(runs, with_stop_gradient)
    assert [held for _, held in checks] == [True, False, True, False]
    assert checks[0][0] == "penalized, model-wise λ_pen 0.001: parameters kept 99.80% at gates lr 0.1, 94.00% at 6"
    assert checks[2][0] == "model-wise target 50%: -5.00 points without the stop-gradient, +0.00 with it"
    assert control.ablation_checks(runs[:1], []) == []  # a run without its twin tests nothing
    per_layer = [ablation("constrained", "layer", target=[0.7, 0.5], params_pct=p, gates_lr=lr)
                 for p, lr in ((99.0, 0.1), (60.0, 6.0))]
    assert control.ablation_checks(per_layer, []) == [
        ("constrained, layer-wise target [70, 50]%: parameters kept 99.00% at gates lr 0.1, 60.00% at 6", True)]


def test_the_densest_run_is_the_cost_reference_of_a_table_without_a_dense_run():
    sparse, dense_ish = record("constrained", target=0.2, densities=(0.2, 0.2)), record("penalized", lmbda=1e-4,
                                                                                        densities=(0.9, 0.95))
    assert control.densest_run([sparse, dense_ish]) is dense_ish and control.densest_run([]) is None
    sparse["metrics"]["val_error_final"], dense_ish["metrics"]["val_error_final"] = 2.5, 1.5
    rows = control.run_rows([sparse, dense_ish], control.densest_run([sparse, dense_ish]))
    assert rows["cost (points)"].tolist() == pytest.approx([1.0, 0.0])


@pytest.mark.parametrize("slow_density, explained", [((0.96, 0.97), True), ((0.78, 0.78), False)])
def test_the_free_runs_at_both_gates_lrs_say_whether_the_rate_takes_the_model_under_80(
        monkeypatch, slow_density, explained):
    fast = record("constrained", "model", 1.0, densities=(0.75, 0.75), error=17.6)
    slow = record("constrained", "layer", 1.0, densities=slow_density, error=21.4)
    fast["params"], slow["params"] = {"method": "constrained", "gates_lr": 6.0}, {"method": "constrained",
                                                                               "gates_lr": 0.1}
    grids = {control.FREE_GATES_GRID: [fast], control.ABLATION_GRID: [slow]}
    monkeypatch.setattr(control, "complete_records", lambda grid: grids[grid])
    monkeypatch.setattr(control, "_steps", lambda run: pd.DataFrame({"l0_density": [0.92]}))
    text = control.free_at_gates_lrs_in_words()
    assert text.startswith("With no binding constraint, our WideResNet-16-1's density goes from 92.0% to 75.0% "
                           "(75.0% of the parameters kept at test time, final error 17.60%) at the gates' "
                           "learning rate of 6")
    assert ("it is the gates' learning rate of 6 that takes the model under 80%" in text) == explained
    assert ("does not explain the runs that end under their 80% targets" in text) == (not explained)
    grids[control.ABLATION_GRID] = []
    assert "No record yet" in control.free_at_gates_lrs_in_words()


@pytest.mark.parametrize("slow_densities, explained", [((0.80, 0.805), True), ((0.74, 0.80), False)])
def test_the_80_percent_constraints_at_gates_lr_01_say_whether_the_rate_is_the_cause_of_ending_under(
        monkeypatch, slow_densities, explained):
    under = record("constrained", "layer", 0.8, densities=(0.70, 0.80), error=17.0)
    model = record("constrained", "model", 0.8, densities=(0.73, 0.73), error=17.5)
    other = record("constrained", "model", 0.5, densities=(0.5, 0.5))
    dense = record("dense", error=16.0)
    slow = record("constrained", "layer", 0.8, densities=slow_densities, error=16.5)
    for run in (under, model, other, dense):
        run["params"] = {"method": run["metrics"]["method"]}
    slow["params"] = {"method": "constrained", "gates_lr": 0.1}
    monkeypatch.setattr(control, "complete_records", lambda grid: [slow] if grid == control.UNDER_CAUSE_GRID else [])
    table, words, missing = control.under_cause_section([dense, under, model, other])
    rows = table.data
    assert rows["grouping"].tolist() == ["layer", "model", "layer"]  # the 50% run is not compared
    assert rows["gates' lr"].tolist() == [6.0, 6.0, 0.1]
    assert rows["largest gap (points)"].tolist() == pytest.approx([-10.0, -7.0, 100 * (min(slow_densities) - 0.8)
                                                                   if not explained else 0.5])
    assert rows["cost (points)"].tolist() == pytest.approx([1.0, 1.5, 0.5])  # against the dense run
    assert words.startswith("Layer-wise, the largest final gap is -10.00 points at the gates' learning rate of 6 "
                            "(final error 17.00%) and ")
    assert ("runs end under 80% because the gates' learning rate of 6 closes gates" in words) == explained
    assert ("the one run still misses a target by more than 1 point" in words) == (not explained)
    assert "No record yet of both 80% constraints" in missing  # the model-wise test has no record yet
    monkeypatch.setattr(control, "complete_records", lambda grid: [])
    assert "No record yet" in control.under_cause_section([dense, under])[0]


def test_the_control_runs_come_in_the_papers_order_of_table_13_after_the_dense_run(monkeypatch):
    runs = [record("constrained", "model", 0.5), record("penalized", "layer", lmbda=0.001),
            record("constrained", "layer", 0.8), record("dense"), record("constrained", "layer", 0.2, seed=1),
            record("penalized", "layer", lmbda=0.1), record("constrained", "layer", 0.2),
            record("penalized", "model", lmbda=1.0)]
    monkeypatch.setattr(control, "CONTROL_GRIDS", ["one.yaml", "two.yaml"])
    monkeypatch.setattr(control, "complete_records", lambda grid: runs[:4] if grid == "one.yaml" else runs[4:])
    names = [run["metrics"]["run_name"] for run in control.control_runs()]
    assert names == ["dense-model-None-None-s0", "constrained-layer-0.2-None-s0", "constrained-layer-0.2-None-s1",
                     "constrained-layer-0.8-None-s0", "penalized-layer-None-0.1-s0", "penalized-layer-None-0.001-s0",
                     "constrained-model-0.5-None-s0", "penalized-model-None-1.0-s0"]


def test_the_transfer_sentence_sets_our_distance_from_the_papers_density_at_its_settings_constrained_against_penalized():
    paper = pd.DataFrame([
        {"method": "constrained", "grouping": "model", "target": 0.2, "lmbda": None, "L0-density (%)": 20.2},
        {"method": "constrained", "grouping": "layer", "target": 0.8, "lmbda": None, "L0-density (%)": 80.0},
        {"method": "penalized", "grouping": "model", "target": None, "lmbda": 0.01, "L0-density (%)": 88.9},
        {"method": "penalized", "grouping": "layer", "target": None, "lmbda": 1.0, "L0-density (%)": math.nan}])
    constrained = [record("constrained", "model", 0.2, densities=(0.2, 0.2)),
                   record("constrained", "layer", 0.8, densities=(0.7, 0.7))]
    penalized = [record("penalized", "model", lmbda=0.01, densities=(0.6, 0.6)),
                 record("penalized", "layer", lmbda=1.0, densities=(0.1, 0.1))]  # the paper's collapsed row
    rows = control.run_rows(constrained + penalized, None)
    table = control.transfer_rows(rows, paper)
    assert table["ours − paper (points)"].tolist() == pytest.approx([-0.2, -10.0, -28.9])
    text = control.transfer_in_words(rows, paper)
    assert text == ("**Transfer.** At the paper's own settings, our constrained runs end a median 5.1 points from the "
                    "paper's density (-10.0 to -0.2 points over 2 cells) and our penalized runs a median 28.9 points "
                    "(-28.9 points, one cell). A target means about the same density on the paper's WideResNet-28-10 "
                    "and on ours; the same λ_pen does not, so a λ_pen tuned on one model has to be searched for again "
                    "on another.")
    close = control.run_rows(constrained + [record("penalized", "model", lmbda=0.01, densities=(0.85, 0.85))], None)
    assert control.transfer_in_words(close, paper).endswith("(-3.9 points, one cell).")  # not over 3 x 5.1: no claim
    assert control.transfer_in_words(control.run_rows(constrained, None), paper) is None
    assert "**Transfer.**" in control.verdict(rows, {"constrained": 2, "penalized": 2}, paper)


def with_steps(run, densities_by_step, epochs=4):
    """``run`` with a step log: one row per logged step, the constrained densities given, evenly over ``epochs``."""
    run["steps"] = [{"epoch": str(epochs * i / (len(densities_by_step) - 1)),
                     **{f"constrained_density_{k}": str(d) for k, d in enumerate(densities)}}
                    for i, densities in enumerate(densities_by_step)]
    run["metrics"]["epochs_completed"] = epochs
    return run


def test_a_run_settles_from_the_step_after_its_last_violation_of_more_than_a_point():
    # model-wise 20%: falls from 90%, holds at step 2 (epoch 1), is 3 points over at epoch 2, holds from epoch 3
    model = with_steps(record("constrained", "model", 0.2), [(0.9,), (0.5,), (0.205,), (0.23,), (0.2,), (0.199,),
                                                             (0.2,), (0.2,), (0.2,)])
    assert control.violations(model).tolist() == pytest.approx([70, 30, 0.5, 3, 0, -0.1, 0, 0, 0])
    assert control.settling_epoch(model) == pytest.approx(2.0)
    # layer-wise 20%: the second block ends 2 points over, so the run never settles
    layer = with_steps(record("constrained", "layer", 0.2), [(0.9, 0.9), (0.2, 0.2), (0.2, 0.22)], epochs=2)
    assert control.settling_epoch(layer) is None
    always = with_steps(record("constrained", "model", 0.8), [(0.79,), (0.75,)], epochs=2)
    assert control.settling_epoch(always) == 0.0
    rows = control.stability_rows([model, layer, always, record("penalized", "model", lmbda=0.1)])
    assert rows["setting"].tolist() == ["model-wise target 20%", "layer-wise target 20%", "model-wise target 80%"]
    assert rows["first held (epoch)"].tolist() == pytest.approx([1.0, 1.0, 0.0])
    assert rows["share of training (%)"].iloc[0] == pytest.approx(50.0) and pd.isna(rows["settled from epoch"].iloc[1])
    assert rows["largest violation between (points)"].iloc[0] == pytest.approx(3.0)  # epoch 1.5, after first holding
    assert rows["largest violation, 2nd half (points)"].tolist() == pytest.approx([0.0, 2.0, -5.0])
    text = control.stability_in_words(rows)
    assert text.startswith("2 of the 3 constrained runs settle: from some epoch on, every constraint stays within 1 "
                           "point above its target to the end, by epoch 2.0 at the latest (50% of training, "
                           "model-wise target 20%; median epoch 1.0). Between first holding and settling, constraints "
                           "are violated by up to 3.0 points")
    assert text.endswith("Layer-wise target 20% ends violating a constraint by more than 1 point (largest violation in "
                         "the second half +2.00 points).")
    fig = control.plot_stability([model, layer, always])
    left, right = fig.axes[:2]
    assert len(left.lines) == 4 and len(right.lines) == 2  # a density and a dashed target per run
    assert left.lines[0].get_color() == right.lines[0].get_color()  # 20% has one colour in both panels
    assert "block s2.0" in right.get_title()
