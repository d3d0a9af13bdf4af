"""analysis.mnist_findings: the MNIST pages' findings, on records made here and on the paper's printed numbers."""

import json
import math

import pandas as pd
import pytest

from paperlib.harness import presets
from paperlib.method import gates
from analysis import comparison, mnist_findings as findings, report

MLP_LAYERS = ["fc1", "fc2", "fc3"]
LENET_LAYERS = ["conv1", "conv2", "fc1", "fc2"]


def record(model="mlp", method="constrained", grouping="model", target=0.2, lmbda=None, seed=0, density=0.2,
           per_layer=None, pruned=(100, 100, 100), params_pct=20.0, macs_pct=20.0, error=1.5, history=(), **params):
    """A record as records.load_record returns it; ``history``: (model density, per-layer densities, val error)
    at the end of each training epoch."""
    layers = MLP_LAYERS if model == "mlp" else LENET_LAYERS
    per_layer = per_layer or [density] * len(layers)
    rows = [{"epoch": str(epoch), "phase": "train", "l0_density": str(d), "val_error": str(e),
             **{f"density[{layer}]": str(x) for layer, x in zip(layers, layer_densities)}}
            for epoch, (d, layer_densities, e) in enumerate(history, start=1)]
    hyper = {"target": target, "lmbda": lmbda}
    metrics = {"l0_density": density,
               "l0_density_per_layer": dict(zip(layers, per_layer)), "pruned_architecture": list(pruned),
               "params_pct": params_pct, "macs_pct": macs_pct, "val_error_final": error, "val_error_best": error,
               "epochs_completed": len(rows)}
    return {"path": "/nowhere", "params": {"run_name": f"{model}-{method}-{grouping}-{target}-{lmbda}-s{seed}",
                                           "model": model, "method": method, "grouping": grouping, **hyper,
                                           "seed": seed, "dual_lr": 1e-4, **params},
            "metrics": metrics, "history": rows}


@pytest.fixture
def grids(monkeypatch):
    """Serve records for grid files: ``grids[grid] = [records]``; ``grids.sizes[grid]``: runs the grid asks for."""
    served = {}
    served_sizes = {}
    monkeypatch.setattr(report, "complete_records", lambda grid: list(served.get(grid, [])))
    monkeypatch.setattr(report, "grid_records", lambda grid: [(None, "a folder")] * len(served.get(grid, []))
                        + [(None, None)] * (served_sizes.get(grid, 0) - len(served.get(grid, []))))

    class Grids(dict):
        sizes = served_sizes

        def __setitem__(self, grid, runs):
            served[grid] = runs
            super().__setitem__(grid, runs)

    return Grids()


# --- records --------------------------------------------------------------------------------------


def test_records_of_keep_grid_order_and_the_asked_parameters(grids):
    a, b = record(seed=0), record(seed=1)
    c = record(model="lenet5", target=[0.3, 0.3, 0.3, 0.3], grouping="layer")
    grids["g1.yaml"], grids["g2.yaml"] = [a, c], [b]
    assert findings.records_of(["g2.yaml", "g1.yaml"], model="mlp") == [b, a]
    assert findings.records_of("g1.yaml", target=[0.3, 0.3, 0.3, 0.3]) == [c]  # a layer-wise list of targets
    assert findings.constrained_records(["g1.yaml", "g2.yaml"], "mlp", "model", 0.2, seed=1) == [b]
    assert findings.select([a, b], seed=2) == []
    grids["g3.yaml"] = [a]  # a run in two grids is one record
    assert findings.records_of(["g1.yaml", "g3.yaml"], model="mlp") == [a]


def test_a_missing_record_is_named_with_the_command_that_makes_it(grids):
    grids["done.yaml"], grids["half.yaml"] = [record()], [record()]
    grids.sizes["half.yaml"] = 2
    assert findings.naming_pending(pd.DataFrame(), ["done.yaml", "half.yaml"]).attrs["command"] == \
        "python -m paperlib.harness.sweeps half.yaml"
    assert "command" not in findings.naming_pending(pd.DataFrame(), ["done.yaml"]).attrs


def test_authors_runs_are_read_by_file_name_and_filtered(tmp_path):
    for name, model in (("b.json", "mlp"), ("a.json", "mlp"), ("c.json", "lenet5")):
        (tmp_path / name).write_text(json.dumps({"model": model, "name": name}))
    (tmp_path / "d.json").write_text(json.dumps({"model": "mlp", "name": "d.json", "method": "penalized"}))
    assert [run["name"] for run in findings.authors_runs(tmp_path, model="mlp")] == ["a.json", "b.json"]
    assert [run["name"] for run in findings.authors_runs(tmp_path, method="penalized")] == ["d.json"]


def test_our_twins_are_seed_0_of_the_cell_with_each_initialisation(grids):
    fan_in = [record(seed=1), record(seed=0, error=1.1)]
    grids[findings.MLP_CONTROL_GRID] = fan_in
    twins = findings.our_twins({"model": "mlp", "grouping": "model", "target": 0.2})
    assert twins == {"ours, fan-in": fan_in[1], "ours, fan-out": None}


# --- the results page -----------------------------------------------------------------------------


def test_authors_best_error_is_the_lowest_of_any_epoch_of_any_seed_beside_the_papers():
    dense_early = [(0.9, [0.9] * 3, 1.2), (0.33, [0.33] * 3, 1.6)]  # the best epoch is the dense one
    runs = [record(target=0.33, history=dense_early, seed=0), record(target=0.33, history=[(0.3, [0.3] * 3, 1.4)], seed=1),
            record(grouping="layer", target=[0.3] * 3, history=[(0.3, [0.3] * 3, 1.7)])]
    table = findings.authors_best_errors(runs)
    assert table["row"].tolist() == ["constrained, model-wise", "constrained, layer-wise"]
    assert table["seeds"].tolist() == [2, 1]
    assert table["val. error best (%) ours, authors' way"].tolist() == pytest.approx([1.2, 1.7])
    assert table["val. error best (%) paper"].tolist() == ["1.36", "1.58"]  # Table 1's printed "best"


def test_the_papers_gap_is_its_final_density_minus_the_target():
    table = findings.paper_gap_table().set_index(["table", "grouping"])
    assert table.loc[("Table 10", "layer"), "target 20%"] == pytest.approx(23.28 - 20)  # Table 10's printed 23.28
    assert table.loc[("Table 11", "model"), "target 20%"] == pytest.approx(20.27 - 20)
    assert findings.paper_gap("mlp", "model", "20%") == pytest.approx(22.77 - 20)
    assert findings.paper_gap("mlp", "layer", "[30, 30, 30]%") == pytest.approx(30.87 - 30)  # the authors' aggregate
    assert math.isnan(findings.paper_gap("lenet5", "layer", "[50, 30, 70, 10]%"))  # no density anywhere


def test_misses_are_grouped_by_cell_beside_the_papers_gap_and_summed_up():
    gaps = pd.DataFrame({"model": ["mlp", "mlp", "mlp", "mlp", "lenet5"],
                         "grouping": ["layer", "layer", "model", "model", "model"],
                         "target": ["20%", "20%", "20%", "50%", "20%"],
                         "protocol": ["paper protocol, 200 ep"] * 4 + ["short protocol, 40 ep"],
                         "largest gap (points)": [1.5, 2.5, 1.2, 0.3, 4.0],
                         "within 1 point": [False, False, False, True, False]})
    by_cell = findings.misses_by_cell(gaps)
    assert by_cell[["runs", "lowest", "highest"]].values.tolist() == [[2, 1.5, 2.5], [1, 1.2, 1.2]]
    assert by_cell["paper's gap (points)"].tolist() == pytest.approx([3.28, 2.77])
    summary = findings.miss_summary(gaps)  # the cpu run 4 points off is not a paper-protocol miss
    assert (summary["runs"], summary["cells"], summary["models"]) == (3, 2, "MLP")
    assert summary["all above"] and summary["paper all above"]
    assert (summary["lowest"], summary["highest"]) == (1.2, 2.5)
    assert (summary["paper lowest"], summary["paper highest"]) == pytest.approx((2.77, 3.28))
    below = gaps.assign(**{"largest gap (points)": [1.5, -2.5, 1.2, 0.3, 4.0]})
    assert not findings.miss_summary(below)["all above"] and findings.miss_summary(below)["highest"] == 2.5


def test_the_target_gaps_figure_puts_each_run_beside_the_papers_cell():
    gaps = pd.DataFrame({"model": ["mlp", "mlp", "lenet5"], "grouping": ["layer", "layer", "model"],
                         "target": ["20%", "[30, 30, 30]%", "10%"], "protocol": ["paper protocol, 200 ep"] * 2 + ["short protocol, 40 ep"],
                         "largest gap (points)": [1.5, 1.1, 4.0], "within 1 point": [False, False, False]})
    fig = findings.plot_target_gaps(gaps)
    mlp, lenet = fig.axes
    ours, paper = [c.get_offsets().tolist() for c in mlp.collections if len(c.get_offsets())][:2]
    assert ours == [[20, 1.5], [30, 1.1]]  # a layer-wise row at its layers' mean target
    assert sum(paper, []) == pytest.approx([20, 23.28 - 20, 30, 30.87 - 30])  # Table 10; Table 1 from the authors'
    assert not any(len(c.get_offsets()) for c in lenet.collections)  # cpu runs are not drawn


def test_penalty_summary_counts_cells_within_and_the_largest_scatter():
    from paperlib.harness import rules

    judged = [rules.judge_penalty([25.0, 26.0], 27.0), rules.judge_penalty([80.0, 70.0], 90.0),
              rules.judge_penalty([14.0], 10.0)]
    summary = findings.penalty_summary(judged)
    assert (summary["within"], summary["cells"]) == (1, 3)
    assert (summary["off low"], summary["off high"], summary["scatter"]) == pytest.approx((-15.0, 4.0, 10.0))
    assert findings.penalty_summary([])["off low"] is None


# --- why the runs end above their target ----------------------------------------------------------


def test_the_lowest_worst_layer_is_the_densest_layer_at_its_best_epoch():
    run = record(grouping="layer", target=[0.3] * 3,
                 history=[(0, [0.5, 0.3, 0.3], 2), (0, [0.31, 0.32, 0.3], 2), (0, [0.305, 0.3, 0.33], 2)])
    table = findings.lowest_worst_layers([run])
    assert table.values.tolist() == [[0, pytest.approx(32.0), 2]]


# --- the dual learning rate -----------------------------------------------------------------------


def test_epoch_gaps_and_the_epoch_a_run_settles_within_a_point(grids):
    slow = record(target=0.3, history=[(0.5, [0] * 3, 3), (0.305, [0] * 3, 2), (0.32, [0] * 3, 2),
                                       (0.308, [0] * 3, 1.8)], error=1.8)
    fast = record(target=0.3, history=[(0.295, [0] * 3, 2), (0.3, [0] * 3, 1.9)], dual_lr=1e-3)
    assert list(findings.epoch_violations(slow)) == pytest.approx([20, 0.5, 2, 0.8])
    assert findings.settled_epoch(findings.epoch_violations(slow).tolist()) == 4
    assert findings.settled_epoch([3.0, 2.0]) is None
    grids[findings.DUAL_LR_GRID] = [fast]
    grids.sizes[findings.DUAL_LR_GRID] = 2
    table = findings.dual_lr_table([slow, fast])
    assert table["within 1 point from epoch"].tolist() == ["4", "1"]
    assert table["dual lr"].tolist() == ["0.0001", "0.001"]
    assert table["val. error best (%)"].tolist() == pytest.approx([1.8, 1.9])  # feasible epochs only
    assert table.attrs["command"] == f"python -m paperlib.harness.sweeps {findings.DUAL_LR_GRID}"
    fig = findings.plot_gap_histories([slow, fast])
    assert fig.axes[0].lines[1].get_ydata().tolist() == pytest.approx([-0.5, 0.0])


# --- the authors' initialisation ------------------------------------------------------------------


def test_initialisation_table_puts_fan_in_and_fan_out_beside_the_paper(monkeypatch):
    key = {"model": "MLP", "method": "constrained", "grouping": "model", "target / λ_pen": "20%"}
    other = key | {"target / λ_pen": "35%"}

    def compare(table, grids, metrics):
        fan_out = list(grids) == list(findings.FAN_OUT_GRIDS)
        rows = [key | {"L0-density (%) paper": "22.77 ± 0.17", "L0-density (%) ours": "20.5" if fan_out else "20.1 ± 0.2",
                       "protocol": "paper protocol, 200 ep, 1 seed" if fan_out else "paper protocol, 200 ep, 3 seeds, 2 on GPU",
                       "runs": "s0"},
                other | {"L0-density (%) paper": "36.25", "L0-density (%) ours": None,
                         "protocol": "not run" if fan_out else "paper protocol, 200 ep, 1 seed", "runs": None}]
        return pd.DataFrame(rows)

    monkeypatch.setattr(comparison, "compare", compare)
    table = findings.initialisation_table("tab:mlp_control", ["l0_density"])
    assert len(table) == 1  # the row no fan-out grid has run is left out
    assert table.iloc[0][["seeds fan-in", "L0-density (%) paper", "L0-density (%) fan-in", "L0-density (%) fan-out",
                          "run fan-out"]].tolist() == ["3 seeds", "22.77 ± 0.17", "20.1 ± 0.2", "20.5", "s0"]


def test_the_papers_penalized_density_is_table_11s_printed_cell():
    assert findings.paper_penalized("model", 1.0) == 13.01
    assert findings.paper_penalized("layer", 0.01) == 90.63


# --- the authors' own code ------------------------------------------------------------------------


def authors_run(model="mlp", grouping="model", target=0.2, kept=(130, 144, 98)):
    history = [{"epoch": epoch, "l0_density_epoch_mean": d, "density[1]": d, "kept_groups": list(kept),
                "val_error": 2.18} for epoch, d in ((1, 0.5), (2, 0.2017))]
    return {"model": model, "grouping": grouping, "target": target, "command": "python authors.py", "history": history}


def test_the_authors_mlp_run_sits_beside_our_twins_and_the_paper():
    theirs = [authors_run()]
    ours = record(density=0.2012, pruned=(131, 140, 100), error=2.2,
                  history=[(0.6, [0] * 3, 3.0), (0.2012, [0] * 3, 2.2)])
    twins = [{"ours, fan-in": ours, "ours, fan-out": None}]
    table = findings.authors_mlp_table(theirs, twins)
    assert table["run"].tolist() == ["authors' code", "ours, fan-in", "paper"]
    assert table["L0-density (%)"].tolist() == ["20.17", "20.12", "22.77 ± 0.17"]
    assert table["groups kept"].tolist()[:2] == ["130-144-98", "131-140-100"]
    fig = findings.plot_authors_mlp(theirs, twins)
    lines = fig.axes[0].lines  # authors', ours, the target, the paper's final density
    assert [line.get_ydata()[-1] for line in lines[:2]] == pytest.approx([20.17, 20.12])
    assert lines[3].get_ydata()[0] == pytest.approx(22.77) and fig.axes[0].get_title() == "MLP model-wise 20%"


# --- LeNet5: where the paper's runs spend their density -------------------------------------------


def test_the_conv2_and_fc1_counts_are_recovered_from_parameters_and_macs():
    assert findings.model_percentages("lenet5", (20, 50, 800, 500)).tolist() == pytest.approx([100, 100])
    assert findings.implied_conv2_fc1(*findings.model_percentages("lenet5", (20, 30, 300, 500)), fc2=500) == \
        pytest.approx([30, 300])


def test_paper_rows_count_table1s_architecture_and_imply_table11s():
    table1 = findings.paper_row("cell", "mlp", "model", 0.33, "tab:mnist")
    assert table1["architecture"] == "198-233-100" and table1["L0-density (%)"] == 34.17
    assert table1["params (%)"] == pytest.approx(findings.model_percentages("mlp", (198, 233, 100))[0])
    assert table1["val. error final (%)"] == 1.77
    control = findings.paper_row("cell", "lenet5", "model", 0.2, "tab:lenet_control")
    assert control["architecture"] == "20-42-89-500 (implied)"
    assert (control["L0-density (%)"], control["params (%)"], control["MACs (%)"]) == (20.27, 16.58, 73.67)


def test_implied_architectures_list_every_target_and_table1s_row_beside_ours(monkeypatch):
    monkeypatch.setattr(findings, "CONTROL_TARGETS", (0.2,))
    ours = [record(model="lenet5", target=0.2, pruned=(20, 29, 200, 500), params_pct=18.0, macs_pct=60.0),
            record(model="lenet5", target=0.35, pruned=(20, 40, 300, 500))]
    table = findings.implied_architectures(ours, [])
    assert table["target"].tolist() == ["20%", "10% (Table 1)"]
    row = table.iloc[0]
    assert row["implied conv2 (fc2 500 | 407)"].startswith("42.") and row["implied fc1 (fc2 500)"] == "89"
    assert row["ours: architecture"] == "20-29-200-500" and row["ours: params / MACs (%)"] == "18.00 / 60.00"
    assert pd.isna(table.iloc[1]["ours: architecture"])  # no record of Table 1's row


def test_the_authors_lenet5_run_beside_the_implied_paper_row_and_the_conv2_maps():
    theirs = [authors_run("lenet5", kept=(20, 14, 156, 496))]
    fan_in = record(model="lenet5", pruned=(20, 29, 200, 500), history=[(0.2, [1, 0.5, 0.1, 1], 1.0)])
    twins = [{"ours, fan-in": fan_in, "ours, fan-out": None}]
    table = findings.authors_lenet_table(theirs, twins)
    assert table["run"].tolist() == ["paper", "authors' code", "ours, fan-in"]
    assert table["groups kept"].tolist() == ["20-42-89-500 (implied)", "20-14-156-496", "20-29-200-500"]
    assert table["params / MACs (%)"].iloc[1].startswith("≤ ")  # counted as if no fc1 input sat behind a closed map
    fig = findings.plot_authors_lenet(theirs, twins)
    assert fig.axes[1].lines[1].get_ydata().tolist() == pytest.approx([50.0])  # our conv2's expected density
    fan_out = [record(model="lenet5", target=0.1, pruned=(20, 12, 60, 500))]
    fan_in_10 = [record(model="lenet5", target=0.1, pruned=(20, 21, 57, 499)),
                 record(model="lenet5", target=0.1, pruned=(20, 19, 57, 499), seed=1), fan_in]
    conv2 = findings.conv2_maps(theirs, fan_out, fan_in_10).set_index("target")
    ten, twenty = conv2.loc["10%"], conv2.loc["20%"]
    assert ten["paper"] == 21 and twenty["paper"] == 42  # printed in 20-21-34-407; implied by Table 11's counts
    assert [ten["ours, fan-in"], ten["ours, fan-out"], twenty["authors' code"], twenty["ours, fan-in"]] == \
        ["21, 19", "12", "14", "29"]
    assert pd.isna(ten["authors' code"]) and pd.isna(twenty["ours, fan-out"])


def test_the_clamps_floor_keeps_closed_gates_in_the_expected_density(monkeypatch):
    low, high = findings.clamp_bound_probabilities()
    assert (round(low, 4), round(high, 4)) == (0.0471, 0.998)
    assert findings.expected_density((20, 50, 800, 500), findings.DECIDED, -findings.DECIDED) == pytest.approx(100)
    assert findings.expected_density((0, 0, 0, 0), gates.LOG_ALPHA_MAX, gates.LOG_ALPHA_MIN) == pytest.approx(100 * low)
    monkeypatch.setattr(findings, "CONTROL_TARGETS", ())
    row = findings.clamp_floor_table().iloc[0]
    assert row["architecture"] == "20-21-34-407" and row["paper's expected density (%)"] == 12.24
    assert row["closed for good (%)"] < row["closed at the clamp's floor (%)"]


# --- the clamp on log alpha -----------------------------------------------------------------------


def configured(clamp=False, **metrics):
    """A record whose parameters are a full configuration (so that report.counterpart can compare them)."""
    config = presets.resolve_config(dataset="mnist", preset="paper", model="lenet5", method="constrained",
                                    grouping="layer", target=0.5, seed=0, clamp_log_alpha=clamp)
    run = record(model="lenet5", grouping="layer", target=0.5, **metrics)
    return run | {"params": config.to_dict()}


def test_clamp_rows_compare_the_twins_distances_to_the_paper():
    paper = {"cell": "c", "run": "paper", "L0-density (%)": 50.0, "params (%)": 21.0}
    unclamped = configured(density=0.502, params_pct=24.0, pruned=(10, 24, 376, 254))
    clamped = configured(clamp=True, density=0.499, params_pct=23.0, pruned=(10, 24, 377, 250))
    rows, closer = findings.clamp_rows("c", paper, unclamped, [clamped])
    assert [row["run"] for row in rows] == ["paper", "ours", "ours, clamped, dual lr 1e-4"]
    assert closer["L0-density: |ours − paper|, unclamped → clamped"] == "0.20 → 0.10"
    assert closer["params: |ours − paper|, unclamped → clamped"] == "3.00 → 2.00"
    assert findings.clamp_rows("c", paper, None, [clamped])[1] is None  # no twin, no distance
    counts = findings.clamp_counts(pd.DataFrame([closer, closer | {"cell": "d", "clamped closer in params": False}]))
    assert counts == {"cells": 2, "closer in params": 1, "closer in density": 2}
    behind = findings.fc1_behind_conv2([("unclamped", unclamped)]).set_index("run")
    assert behind.loc["unclamped", ["fc1 inputs behind open conv2 maps", "fc1 inputs kept"]].tolist() == [384, 376]
    assert behind.loc["paper", ["params (%)", "MACs (%)", "L0-density (%)"]].tolist() == [21.38, 24.03, 50.02]


def test_clamp_comparison_takes_each_cells_seed_0_and_names_the_missing_runs(grids, monkeypatch):
    monkeypatch.setattr(findings, "CLAMP_CELLS", [("lenet5", "layer", 0.5, findings.LENET_CONTROL_GRID,
                                                   "tab:lenet_control")])
    grids[findings.LENET_CONTROL_GRID] = [configured(seed=0)]
    grids[findings.CLAMP_GRID] = [configured(clamp=True)]
    grids.sizes[findings.CLAMP_GRID] = 3
    table, closer = findings.clamp_comparison()
    assert table["run"].tolist() == ["paper", "ours", "ours, clamped, dual lr 1e-4"]
    assert table["cell"].iloc[0] == "LeNet5 layer-wise 50% (Table 11)"
    assert closer["cell"].tolist() == table["cell"].iloc[:1].tolist()
    assert table.attrs["command"] == f"python -m paperlib.harness.sweeps {findings.CLAMP_GRID}"


# --- where ours and the paper's differ by more than 2 points --------------------------------------


def test_large_differences_name_each_table_by_its_number():
    table = pd.DataFrame([{"method": "constrained", "grouping": "layer", "target / λ_pen": "20%",
                           "L0-density (%) paper": "23.28 ± 0.31", "L0-density (%) ours": "20.37",
                           "L0-density (%) Δ": "-2.91", "params (%) paper": "3.41", "params (%) ours": "4.36",
                           "params (%) Δ": "+0.95", "protocol": "paper protocol, 200 ep, 1 seed"}])
    found = findings.large_differences({"tab:mlp_control": [table], "tab:mnist": [table.iloc[:0]]})
    assert found[["table", "row", "metric", "Δ"]].values.tolist() == [
        ["Table 10", "constrained layer 20%", "L0-density (%)", "-2.91"]]


def test_penalized_lenet5_runs_are_told_apart_by_seed_initialisation_and_clamp():
    runs = [record(model="lenet5", method="penalized", target=None, lmbda=0.01, density=0.8647,
                   history=[(0.9, [0] * 4, 1), (0.8647, [0] * 4, 1)]),
            record(model="lenet5", method="penalized", target=None, lmbda=0.01, seed=1, density=0.772,
                   history=[(0.772, [0] * 4, 1)]),
            record(model="lenet5", method="penalized", target=None, lmbda=0.01, density=0.3797, linear_init="fan_out",
                   history=[(0.3797, [0] * 4, 1)])]
    assert [findings.variant(r["params"]) for r in runs] == ["", "seed 1", "fan-out"]
    assert findings.variant(runs[0]["params"] | {"clamp_log_alpha": True, "seed": 2}) == "seed 2, clamped"
    table = findings.penalized_densities({"model": runs}, 0.01)
    assert table["run"].tolist() == ["seed 0", "seed 1", "fan-out"]
    assert table["L0-density (%)"].tolist() == pytest.approx([86.47, 77.2, 37.97])
    assert set(table["paper (%)"]) == {90.78} and findings.penalized_densities({"model": runs}, 1.0).empty
    fig = findings.plot_penalized_lenet({"model": runs, "layer": runs[:1]})
    assert [line.get_linestyle() for line in fig.axes[0].lines[:3]] == ["-", "-", "-."]  # fan-out dash-dotted (analysis.style)
    assert list(fig.axes[1].lines[-1].get_ydata()) == [90.63]  # the paper's final, layer-wise


def test_the_authors_penalized_lenet5_is_put_beside_the_papers_cell_and_ours():
    history = [{"epoch": e, "l0_density": d, **{f"density[{i}]": d for i in range(4)}, "val_error": err,
                "kept_groups": [20, 50, 800, 500]} for e, d, err in ((1, 0.83, 59.5), (2, 0.9, 3.0), (3, 0.5, 1.1))]
    theirs = {"method": "penalized", "model": "lenet5", "grouping": "layer", "lmbda": 0.01, "history": history}
    paper = findings.paper_penalized("layer", 0.01)
    ours = [record(model="lenet5", method="penalized", grouping="layer", target=None, lmbda=0.01,
                   density=paper / 100 - 0.2, error=0.7)]
    table = findings.authors_penalized_table(theirs, ours)
    assert table["run"].tolist() == ["authors' code", "ours, seed 0", "paper"]
    assert table["L0-density (%)"].tolist() == pytest.approx([50.0, paper - 20, paper])
    assert table["|Δ| to the paper (points)"].tolist()[:2] == pytest.approx([paper - 50, 20])
    numbers = findings.authors_penalized_numbers(theirs, ours)  # theirs at 50%: further from the paper than ours
    assert (numbers["density"], numbers["peak"], numbers["peak epoch"], numbers["epochs"]) == (50.0, 90.0, 2, 3)
    assert numbers["position"] == "further" and numbers["gap"] == pytest.approx(paper - 50)
    assert numbers["our gaps low"] == numbers["our gaps high"] == pytest.approx(20)
    assert numbers["twin"] is None and numbers["share"] is None  # no fan-out record: no share
    near_paper = paper / 100 - 0.05
    theirs["history"][-1].update({"l0_density": near_paper})
    assert findings.authors_penalized_numbers(theirs, ours)["position"] == "nearer"
    ours.append(record(model="lenet5", method="penalized", grouping="layer", target=None, lmbda=0.01, seed=1,
                       density=paper / 100 - 0.1))  # our gaps: 10 and 20 points
    theirs["history"][-1].update({"l0_density": paper / 100 + 0.15})
    assert findings.authors_penalized_numbers(theirs, ours)["position"] == "within"


@pytest.mark.parametrize("twin, share", [(0.35, 95), (0.67, 15)])
def test_the_fan_out_twin_tells_how_much_of_their_codes_difference_is_the_initialisation(twin, share):
    """Theirs at 33%, ours with fan-in at 73% (seed 0; seed 1 and a clamped run must not be taken for it)."""
    history = [{"epoch": 1, "l0_density": 0.33, "l0_density_epoch_mean": 0.34, "val_error": 0.9,
                **{f"density[{i}]": 0.33 for i in range(4)}, "kept_groups": [18, 18, 276, 480]}]
    theirs = {"method": "penalized", "model": "lenet5", "grouping": "layer", "lmbda": 0.01, "history": history}
    cell = dict(model="lenet5", method="penalized", grouping="layer", target=None, lmbda=0.01)
    ours = [record(**cell, density=d, history=[(d, [d] * 4, 1.0)], **more)
            for d, more in ((0.5, {"seed": 1}), (0.8, {"clamp_log_alpha": True}), (0.73, {}), (twin, {"linear_init": "fan_out"}))]
    numbers = findings.authors_penalized_numbers(theirs, ours)
    assert numbers["fan-in seed 0"] == pytest.approx(73) and numbers["twin"] == pytest.approx(100 * twin)
    assert round(numbers["share"]) == share  # (73 - twin) / (73 - 33)
    fig = findings.plot_authors_penalized(theirs, ours)
    model_panel = fig.axes[0].lines
    assert [line.get_linestyle() for line in model_panel[:5]] == ["-", "-", ":", "-", "-."]
    assert [line.get_alpha() for line in model_panel[1:3]] == [0.6, 1.0]  # seed 1 faint
    assert list(model_panel[-1].get_ydata()) == [findings.paper_penalized("layer", 0.01)]


# --- final errors ---------------------------------------------------------------------------------


def agreement_rows():
    return pd.DataFrame([
        {"table": "Table 1", "row": "LeNet5 constrained model 10%", "paper": "1.01 ± 0.05", "ours": "0.91 ± 0.06",
         "our runs": 5, "Δ": -0.1, "beyond chance": True},
        {"table": "Table 10", "row": "MLP constrained layer 65%", "paper": "1.72 ± 0.01", "ours": "1.85",
         "our runs": 3, "Δ": 0.13, "beyond chance": False}])


def test_beyond_chance_and_the_spreads_behind_the_cis():
    agreement = agreement_rows()
    assert findings.beyond_chance(agreement) == {"beyond": 1, "rows": 2, "by chance": 0.1}
    table1 = pd.DataFrame()
    table1.attrs["values"] = [{"val_error_final": [1.0, 1.2, 1.1, 1.3, 1.4]}, {"val_error_final": [1.0]}]
    spread = findings.spreads(agreement, table1)
    assert (spread["paper low"], spread["paper high"]) == pytest.approx((0.01 * math.sqrt(5) / 1.96,
                                                                         0.05 * math.sqrt(5) / 1.96))
    assert spread["paper smallest row"] == "MLP constrained layer 65%"
    assert spread["ours low"] == spread["ours high"] == pytest.approx(0.158114, abs=1e-6)  # only the 5-seed row
    table1.attrs["values"] = [{"val_error_final": [1.0]}]
    assert findings.spreads(agreement, table1)["ours low"] is None


def test_seed_rows_give_each_seeds_error_and_whether_seed_0_was_beyond_chance():
    cell = ("mlp", "penalized", "layer", 1.0)
    assert findings.cell_of(record(method="penalized", grouping="layer", target=None, lmbda=1.0)["params"]) == cell
    paper = 2.93  # Table 10, penalized layer-wise λ_pen 1, final error
    runs = [record(method="penalized", grouping="layer", target=None, lmbda=1.0, seed=s, error=e)
            for s, e in ((1, 2.8), (0, paper + 2.0))]
    rows = findings.seed_rows("tab:mlp_control", [cell, ("mlp", "constrained", "model", 0.5)], runs)
    assert rows[0] == {"cell": "MLP penalized layer λ_pen 1", "seed 0 beyond chance": "yes", "seed 0": paper + 2.0,
                       "seed 1": 2.8}
    assert rows[1] == {"cell": "MLP constrained model 50%", "seed 0 beyond chance": None}
    runs[1]["metrics"]["val_error_final"] = paper  # seed 0 on the paper's mean: within chance
    assert findings.seed_rows("tab:mlp_control", [cell], runs)[0]["seed 0 beyond chance"] == "no"


def test_seeds_table_reads_each_seeds_grid_and_names_the_missing_runs(grids, monkeypatch):
    config = presets.resolve_config(dataset="mnist", preset="paper", model="mlp", method="penalized", grouping="layer",
                                    lmbda=1.0, seed=1)
    monkeypatch.setattr(findings, "SEEDS_GRIDS", {"tab:mlp_control": "seeds.yaml"})
    monkeypatch.setattr(report, "grid_runs", lambda grid: [(config, None)] * (2 if grid == "seeds.yaml" else 0))
    grids.sizes["seeds.yaml"] = 2
    grids[findings.MLP_CONTROL_GRID] = [record(method="penalized", grouping="layer", target=None, lmbda=1.0, error=3.0)]
    table = findings.seeds_table()
    assert table[["cell", "seed 0"]].values.tolist() == [["MLP penalized layer λ_pen 1", 3.0]]
    assert table.attrs["command"] == "python -m paperlib.harness.sweeps seeds.yaml"


def test_retested_cells_say_whether_more_seeds_confirm_seed_0():
    seeds = pd.DataFrame({"cell": ["LeNet5 constrained model 10%", "MLP constrained layer 65%", "other"],
                          "seed 0 beyond chance": ["yes", "yes", "no"]})
    assert findings.retested(seeds, agreement_rows()) == {"tested": 2, "still beyond": ["LeNet5 constrained model 10%"]}
    assert findings.retested(seeds.iloc[2:], agreement_rows()) == {"tested": 0, "still beyond": []}


def test_the_clamped_table1_lenet5_error_against_the_interval_of_chance():
    clamped = record(model="lenet5", target=0.1, error=1.10, params_pct=8.66)
    unclamped = [record(model="lenet5", target=0.1, error=e, params_pct=p, seed=s)
                 for s, (e, p) in enumerate(((0.94, 10.14), (0.90, 10.43)))]
    table = findings.clamped_error_table(clamped, unclamped)
    assert table["run"].tolist() == ["paper", "ours, seed 0", "ours, seed 1", "ours, clamped, seed 0"]
    assert table["val. error final (%)"].tolist() == ["1.01 ± 0.05", "0.94", "0.90", "1.10"]
    assert table["params (%)"].tolist() == pytest.approx([6.81, 10.14, 10.43, 8.66], abs=0.005)
    assert table["Δ (points)"].tolist()[1:] == pytest.approx([-0.07, -0.11, 0.09])
    half = 3.04 * 0.05 * math.sqrt(5) / 1.96  # t(0.975, 4) * s * sqrt(1 + 1/5), s from the paper's CI
    assert table["95% chance interval (±)"].tolist()[1:] == pytest.approx([half] * 3, rel=0.01)


def test_seeds_column_replaces_a_shared_protocol_by_each_rows_seeds():
    table = pd.DataFrame({"row": ["a", "b", "c"], "protocol": ["paper protocol, 200 ep, 3 seeds, 2 on GPU",
                                                               "paper protocol, 200 ep, 1 seed",
                                                               "paper protocol, 200 ep, 1 seed, on GPU"],
                          "runs": ["s0"] * 3})
    table.attrs["missing"] = {}
    shown = findings.seeds_column(table)
    assert shown.columns.tolist() == ["row", "seeds", "runs"] and shown["seeds"].tolist() == [3, 1, 1]
    assert shown.attrs == {"missing": {}, "protocol": "paper protocol, 200 ep"}
    mixed = table.assign(protocol=["short protocol, 40 ep, 1 seed", "paper protocol, 200 ep, 1 seed",
                                   "Louizos et al., quoted"])
    assert findings.seeds_column(mixed).equals(mixed)  # rows of several protocols keep their column
