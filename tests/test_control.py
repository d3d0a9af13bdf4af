"""analysis.control: the control table's rows, layer densities, paper points and verdict, on records made here."""

import math

import pandas as pd
import pytest

from fake_records import LAYERS, record
from analysis import control, misses


def test_largest_gap_is_the_worst_layer_of_a_layer_wise_run_and_the_model_of_a_model_wise_one():
    assert control.largest_gap(record("constrained", "layer", 0.2, densities=(0.205, 0.17))) == pytest.approx(-3.0)
    assert control.largest_gap(record("constrained", "model", 0.2, densities=(0.205, 0.215))) == pytest.approx(1.0)


def test_run_rows_judge_each_constrained_run_by_the_rules_and_cost_against_the_dense_run():
    dense = record("dense", error=8.0)
    runs = [record("constrained", "layer", 0.2, densities=(0.205, 0.195), error=9.5),
            record("constrained", "model", 0.5, densities=(0.52, 0.52), error=8.5),
            record("penalized", "model", lmbda=0.01, densities=(0.3, 0.4), error=9.0), dense]
    rows = control.run_rows(runs, dense, free=[])
    assert rows["outcome"].tolist()[:2] == ["on target", "violated"] and rows["outcome"].iloc[2:].isna().all()
    assert rows["cost (points)"].tolist() == pytest.approx([1.5, 0.5, 1.0, 0.0])
    assert rows["setting"].tolist() == ["target 20%", "target 50%", "λ_pen 0.01", "dense"]
    assert rows["L0-density (%)"].iloc[3] == 100.0  # a dense model keeps every group
    assert control.run_rows(runs, None)["cost (points)"].isna().all()
    assert rows["ran on"].tolist() == ["CPU"] * 4  # the fake records name no device: CPU runs


def test_run_rows_say_which_runs_trained_on_a_gpu_where_the_reader_sees_the_run():
    cpu, gpu = record("constrained", "model", 0.5), record("constrained", "model", 0.5, seed=1)
    cpu["metrics"]["device"], gpu["metrics"]["device"] = "cpu", "cuda:0"
    rows = control.run_rows([cpu, gpu], None, free=[])
    assert rows["ran on"].tolist() == ["CPU", "GPU"]
    assert not rows["run"].str.contains("GPU").any()  # no preset named: nothing to set apart
    cpu["params"]["preset"] = gpu["params"]["preset"] = "cpu"  # the pilot protocol, whose names end -cpu
    names = control.run_rows([cpu, gpu], None, free=[])["run"].tolist()
    assert "GPU" not in names[0] and names[1].endswith("(pilot protocol, ran on GPU)")


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


def test_the_answers_numbers_count_each_outcome_and_find_the_furthest_misses_and_the_costs():
    dense = record("dense", error=8.0)
    runs = [record("constrained", "layer", 0.2, densities=(0.205, 0.195), error=9.5),
            record("constrained", "model", 0.5, densities=(0.53, 0.53), error=8.5),
            record("constrained", "model", 0.8, densities=(0.7, 0.7), error=8.5),
            record("penalized", "model", lmbda=0.01, densities=(0.3, 0.4), error=9.0),
            record("penalized", "model", lmbda=1.0, densities=(0.05, 0.05), error=12.0), dense]
    rows = control.run_rows(runs, dense, free=[])
    assert rows["outcome"].tolist()[:3] == ["on target", "violated", "under"]  # no free record: 80% binds
    numbers = control.outcome_numbers(rows)
    assert (numbers["on target"], numbers["violated"], numbers["under"], numbers["judged"]) == (1, 1, 1, 3)
    assert numbers["under gap"] == pytest.approx(-10.0) and numbers["under run"] == "model-wise 80%"
    assert numbers["over gap"] == pytest.approx(3.0) and numbers["over run"] == "model-wise 50%"
    assert (numbers["penalized lowest"], numbers["penalized highest"]) == pytest.approx((5.0, 35.0))
    assert (numbers["constrained cost lowest"], numbers["constrained cost highest"]) == pytest.approx((0.5, 1.5))
    assert (numbers["penalized cost lowest"], numbers["penalized cost highest"]) == pytest.approx((1.0, 4.0))
    free = record("constrained", "model", 1.0, densities=(0.75, 0.75))
    for run in [*runs, free]:
        run["params"] |= {"model": "wrn-16-1", "method": run["params"]["method"], "preset": "cpu",
                         "grouping": run["params"]["grouping"], "target": run["params"]["target"]}
        run["params"]["preset"] = "cpu"
    rows = control.run_rows(runs, dense, free=[free])
    assert rows["outcome"].tolist()[:3] == ["on target", "violated", "does not bind"]  # 80% is above 75%
    numbers = control.outcome_numbers(rows)
    assert (numbers["does not bind"], numbers["judged"], numbers["under"]) == (1, 2, 0) and "under gap" not in numbers
    assert control.outcome_numbers(control.run_rows([], None))["judged"] == 0


def test_the_figure_draws_ours_and_the_papers_in_the_books_styles_and_costs_against_each_reference():
    dense = record("dense", error=8.0)
    ours = control.run_rows([record("constrained", "model", 0.5, densities=(0.5, 0.5), error=9.0), dense], dense)
    paper = control.paper_points("tab:cifar10_control")
    fig = control.plot_comparison(ours, paper, ours_label="ours (small)", paper_label="paper (large)")
    density = {c.get_label(): c for c in fig.axes[0].collections}
    mine, theirs = density["ours (small), constrained, model-wise"], density["paper (large), constrained, model-wise"]
    assert mine.get_offsets().tolist() == [[50.0, 50.0]]
    assert tuple(mine.get_edgecolors()[0]) != tuple(theirs.get_edgecolors()[0])  # colours differ
    assert len(theirs.get_facecolors()) == 0 and mine.get_facecolors()[0][3] > 0  # the paper's hollow, ours filled
    layer = density["paper (large), constrained, layer-wise"]
    assert layer.get_paths()[0].vertices.tolist() != theirs.get_paths()[0].vertices.tolist()  # grouping: marker shape
    costs = {c.get_label(): c.get_offsets().tolist() for c in fig.axes[2].collections}
    assert costs["ours (small), constrained, model-wise"] == [[50.0, 1.0]]  # 9.0 - 8.0 at 50% density
    reference, _ = control.paper_reference_error(paper)
    paper_constrained = costs["paper (large), constrained, model-wise"] + costs["paper (large), constrained, layer-wise"]
    assert len(paper_constrained) == 10 and min(y for _, y in paper_constrained) == pytest.approx(
        paper.loc[paper["method"] == "constrained", "val. error final (%)"].min() - reference)
    assert fig.get_size_inches()[0] <= 7 and all(t.get_fontsize() >= 9 for t in fig.legends[0].get_texts())
    assert [t.get_text() for t in fig.legends[0].get_texts()][0] == "ours (small), model-wise"


def _trajectory(densities_by_epoch, dual_lr, target=0.2):
    """A layer-wise record whose epoch ends have these (layer, layer) densities."""
    run = record("constrained", "layer", target, densities=densities_by_epoch[-1])
    run["history"] = [{"epoch": str(epoch), "phase": "train", "l0_density": str(sum(d) / 2),
                       **{f"density[{layer}]": str(x) for layer, x in zip(LAYERS, d)}}
                      for epoch, d in enumerate(densities_by_epoch, start=1)]
    run["params"] |= {"dual_lr": dual_lr}
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


def test_the_protocol_table_reads_each_protocols_preset_and_names_what_differs_from_the_papers():
    table = control.protocol_table("cifar10").set_index("parameter")
    assert table.loc["epochs", "paper protocol"] == "200" and table.loc["model", "CPU protocol"] == "wrn-16-1"
    assert table.loc["gates' learning rate", "pilot protocol"] == table.loc["gates' learning rate", "paper protocol"]
    differs = table["differs from the paper's"].str.split(", ")
    assert set(table.index[differs.map(lambda names: "pilot" in names)]) == {
        "model", "epochs", "lr milestones (epochs)", "dual learning rate"}
    assert "CPU" in table.loc["gates' learning rate", "differs from the paper's"]
    assert table.loc["dual restarts", "paper protocol"] == "yes" and table.loc["log α clamped", "paper protocol"] in ("yes", "no")
    assert not table.isin(["True", "False"]).any().any()


def test_the_pages_selections_of_the_control_records(monkeypatch):
    def run(method="constrained", grouping="layer", target=0.2, seed=0, dual_lr=7e-3, experiment="cifar10_control",
            **params):
        made = record(method, grouping, target, seed=seed)
        made["metrics"].update(wall_time_s=1200.0, epochs_completed=20)
        made["params"] |= {"experiment": experiment, "model": "wrn-16-1", "preset": "cpu", "dual_lr": dual_lr,
                           "method": method, "schedule_gates": False, "detach_gates": True, **params}
        return made

    fast = run(dual_lr=2.8e-2, experiment="cifar10_dual_lr")
    monkeypatch.setattr(control, "complete_records", lambda grid: [fast] if grid == control.DUAL_LR_GRID else [])
    scaled, model20, dense = run(), run(grouping="model"), run(method="dense", grouping="model", target=None)
    other_seed = run(seed=1)
    found = control.layer_runs_at([model20, other_seed, scaled, dense])
    assert found == [scaled, fast]  # seed 0's layer-wise 20%, by dual learning rate
    assert control.preset_run(found) is scaled and control.dense_run([scaled, dense]) is dense
    undetached = run(grouping="model", detach_gates=False)
    assert control.detach_pairs([undetached, run(grouping="model")], [model20, scaled]) == [undetached, model20]
    tested = run(schedule_gates=True)
    names = misses.cause_rows(scaled, [tested])["run"].tolist()
    assert ["decayed" in name for name in names] == [False, True] and "constant" in names[0]


def test_ablation_checks_compare_gates_lrs_on_test_time_parameters_and_the_stop_gradient_on_the_gap():
    def ablation(method, grouping, target=None, lmbda=None, density=0.9, params_pct=90.0, gates_lr=6.0,
                 detach_gates=True):
        run = record(method, grouping, target=target, lmbda=lmbda, densities=(density, density))
        run["metrics"]["params_pct"] = params_pct
        run["params"] |= {"method": method, "grouping": grouping, "target": target, "lmbda": lmbda,
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


def test_the_control_runs_come_in_the_papers_order_of_table_13_after_the_dense_run(monkeypatch):
    runs = [record("constrained", "model", 0.5), record("penalized", "layer", lmbda=0.001),
            record("constrained", "layer", 0.8), record("dense"), record("constrained", "layer", 0.2, seed=1),
            record("penalized", "layer", lmbda=0.1), record("constrained", "layer", 0.2),
            record("penalized", "model", lmbda=1.0)]
    monkeypatch.setattr(control, "CONTROL_GRIDS", ["one.yaml", "two.yaml"])
    monkeypatch.setattr(control, "complete_records", lambda grid: runs[:4] if grid == "one.yaml" else runs[4:])
    names = [run["params"]["run_name"] for run in control.control_runs()]
    assert names == ["dense-model-None-None-s0", "constrained-layer-0.2-None-s0", "constrained-layer-0.2-None-s1",
                     "constrained-layer-0.8-None-s0", "penalized-layer-None-0.1-s0", "penalized-layer-None-0.001-s0",
                     "constrained-model-0.5-None-s0", "penalized-model-None-1.0-s0"]


def test_the_transfer_summary_sets_our_distance_from_the_papers_density_at_its_settings_constrained_against_penalized():
    paper = pd.DataFrame([
        {"method": "constrained", "grouping": "model", "target": 0.2, "lmbda": None, "L0-density (%)": 20.2},
        {"method": "constrained", "grouping": "layer", "target": 0.8, "lmbda": None, "L0-density (%)": 80.0},
        {"method": "penalized", "grouping": "model", "target": None, "lmbda": 0.01, "L0-density (%)": 88.9},
        {"method": "penalized", "grouping": "model", "target": None, "lmbda": 0.1, "L0-density (%)": 48.1},
        {"method": "penalized", "grouping": "model", "target": None, "lmbda": 1.0, "L0-density (%)": 14.1},
        {"method": "penalized", "grouping": "layer", "target": None, "lmbda": 1.0, "L0-density (%)": math.nan}])
    constrained = [record("constrained", "model", 0.2, densities=(0.2, 0.2)),
                   record("constrained", "layer", 0.8, densities=(0.7, 0.7))]
    penalized = [record("penalized", "model", lmbda=0.01, densities=(0.6, 0.6)),
                 record("penalized", "model", lmbda=0.1, densities=(0.3, 0.3)),
                 record("penalized", "model", lmbda=1.0, densities=(0.05, 0.05)),
                 record("penalized", "layer", lmbda=1.0, densities=(0.1, 0.1))]  # the paper's collapsed row
    rows = control.run_rows(constrained + penalized, None)
    table = control.transfer_rows(rows, paper)
    assert table["ours − paper (points)"].tolist() == pytest.approx([-0.2, -10.0, -28.9, -18.1, -9.1])
    summary = control.transfer_summary(rows, paper)
    assert summary["cells"].tolist() == [2, 3]
    assert summary["median |ours − paper| (pts)"].tolist() == pytest.approx([5.1, 18.1])
    assert summary[["lowest (pts)", "highest (pts)"]].values.ravel().tolist() == pytest.approx([-10.0, -0.2, -28.9, -9.1])
    assert summary["carries over"].tolist() == ["✓", "✗"]  # 18.1 > max(1, 3 x 5.1): a target carries, λ_pen not
    one = control.run_rows(constrained + penalized[:1], None)  # one penalized cell decides nothing yet
    assert control.transfer_summary(one, paper)["carries over"].tolist() == ["–", "–"]
    close = control.run_rows(constrained + [record("penalized", "model", lmbda=lmbda, densities=(d, d))
                                            for lmbda, d in ((0.01, 0.85), (0.1, 0.45), (1.0, 0.12))], None)
    assert control.transfer_summary(close, paper)["carries over"].tolist() == ["–", "–"]  # not over 3 x 5.1
    assert control.transfer_summary(control.run_rows(constrained, None), paper).index.tolist() == ["constrained"]
    table = control.penalty_table(rows, paper)
    assert table.index.tolist() == ["0.01", "0.1", "1"] and table.loc["1", "layer-wise, ours"] == pytest.approx(10.0)
    assert table.loc["0.1", "model-wise, paper"] == 48.1 and pd.isna(table.loc["1", "layer-wise, paper"])


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
    assert rows["setting"].tolist() == ["model-wise 20%", "layer-wise 20%", "model-wise 80%"]
    assert rows["first held (epoch)"].tolist() == pytest.approx([1.0, 1.0, 0.0])
    assert rows["share of training (%)"].iloc[0] == pytest.approx(50.0) and pd.isna(rows["settled from epoch"].iloc[1])
    assert rows["largest violation between (points)"].iloc[0] == pytest.approx(3.0)  # epoch 1.5, after first holding
    assert rows["largest violation, 2nd half (points)"].tolist() == pytest.approx([0.0, 2.0, -5.0])
    numbers = control.stability_numbers(rows)
    assert (numbers["settled"], numbers["runs"], numbers["unsettled"]) == (2, 3, 1)
    assert (numbers["latest"], numbers["latest share"], numbers["median"], numbers["between"]) == pytest.approx(
        (2.0, 50.0, 1.0, 3.0))
    assert numbers["latest run"] == "model-wise 20%" and numbers["unsettled runs"] == "layer-wise 20%"
    assert numbers["unsettled violation"] == pytest.approx(2.0)
    fig = control.plot_stability([model, layer, always])
    left, right = fig.axes[:2]
    assert len(left.lines) == 4 and len(right.lines) == 2  # a density and a dashed target per run
    assert left.lines[0].get_color() == right.lines[0].get_color()  # 20% has one colour in both panels
    assert "block s2.0" in right.get_title()


def test_epoch_times_group_runs_by_protocol_and_device():
    runs = [record("constrained", "model", 0.5, seed=s) for s in range(3)]
    for run, (device, wall, epochs) in zip(runs, [("cpu", 4800.0, 20), ("cuda", 300.0, 20), ("cuda", 600.0, 20)]):
        run["metrics"].update(device=device, wall_time_s=wall, epochs_completed=epochs, preset="cpu")
    table = control.epoch_times(runs).set_index("ran on")
    assert table.loc["CPU", "runs"] == 1 and table.loc["CPU", "min/epoch"] == pytest.approx(4.0)
    assert table.loc["GPU", "runs"] == 2 and table.loc["GPU", "min/epoch"] == pytest.approx(0.375)
    assert table.loc["GPU", "range"] == "0.2–0.5" and table.loc["GPU", "min/run"] == pytest.approx(7.5)
    assert control.epoch_times([]).empty


def test_a_run_is_named_by_its_condition_in_the_pages_rows():
    rows = control.run_rows([record("constrained", "layer", 0.35, seed=1), record("penalized", lmbda=0.1),
                             record("dense")], None, free=[])
    assert rows["condition"].tolist() == ["layer-wise 35%, seed 1", "model-wise λ_pen 0.1", "dense"]
    assert control.control_table(rows).columns.tolist() == list(control.TABLE_COLUMNS.values())


def test_the_glued_numbers_are_python_numbers_that_glue_can_format():
    runs = [record("constrained", "model", 0.5, densities=(0.4, 0.4)), record("penalized", lmbda=0.1), record("dense")]
    numbers = control.outcome_numbers(control.run_rows(runs, runs[2], free=[]))
    assert all(type(value) in (int, float, str) for value in numbers.values())
    model = with_steps(record("constrained", "model", 0.2), [(0.9,), (0.23,), (0.2,)], epochs=2)
    numbers = control.stability_numbers(control.stability_rows([model]))
    assert all(type(value) in (int, float, str) for value in numbers.values())


def test_a_setting_with_one_target_per_layer_names_each():
    assert control.setting({"method": "constrained", "target": [0.65, 1.0]}) == "targets 65/100%"
    assert control.setting({"method": "constrained", "target": 0.2}) == "target 20%"
