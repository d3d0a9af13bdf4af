"""Paper-vs-ours tables: the right records, the authors' CI, best errors only where the constraint holds."""

import math
import statistics

import pandas as pd
import pytest
import yaml

from paperlib.harness import paper_rows, records, studies
from analysis import comparison, intervals
from paperlib.paper.paper_results import paper_cell
from analysis.report import grid_runs


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    return tmp_path


def _history(errors, densities):
    return [{"epoch": i, "phase": "train" if i else "init", "val_error": e, "l0_density": d,
             "density[fc1]": d, "density[fc2]": d, "density[fc3]": d}
            for i, (e, d) in enumerate(zip(errors, densities))]


def _write(grid, index: int, final_error: float, epochs: int, history=None) -> None:
    """A complete record of the grid's run ``index``, made with exactly the parameters the preset gives today."""
    config, folder = grid_runs(grid)[index]
    metrics = {"status": "complete", "l0_density": 0.33,
               "l0_density_per_layer": {"fc1": 0.3, "fc2": 0.4, "fc3": 0.9}, "params_pct": 30.0, "macs_pct": 30.0,
               "pruned_architecture": [200, 230, 100], "val_error_best": final_error - 0.5,
               "val_error_final": final_error, "epochs_completed": epochs}
    history = history or _history([90.0, final_error], [0.9, 0.33])
    records.write_record(folder, config.to_dict(), metrics, history, [], {})


def test_best_error_is_taken_only_where_every_constraint_holds():
    # The lowest error (0.5) is at epoch 1, while the model is still far too dense.
    record = {"params": {"method": "constrained", "grouping": "model", "target": 0.3},
              "metrics": {"val_error_best": 0.5, "l0_density_per_layer": {"fc1": 0, "fc2": 0, "fc3": 0}},
              "history": _history([90.0, 0.5, 1.2, 0.9, 1.0], [0.9, 0.8, 0.305, 0.311, 0.309])}
    # 0.311 is more than 1 point above 0.3, so epoch 3 does not count; epochs 2 and 4 do.
    assert paper_rows.best_feasible_error(record) == 1.0
    record["params"]["grouping"] = "layer"
    record["params"]["target"] = [0.3, 0.3, 0.2]  # fc3 never gets within a point of 20%
    assert paper_rows.best_feasible_error(record) is None
    record["params"].update(method="penalized")  # no constraint: the best error over training
    assert paper_rows.best_feasible_error(record) == 0.5


def test_the_authors_best_error_is_the_lowest_of_any_epoch_of_any_seed():
    """comparison_tables.py: per seed the minimum over epochs, then the minimum over seeds, feasible or not."""
    dense_early = {"history": _history([90.0, 0.5, 1.2], [0.9, 0.8, 0.3])}  # 0.5 while far too dense
    other_seed = {"history": _history([80.0, 0.7, 0.6], [0.9, 0.4, 0.3])}
    assert paper_rows.authors_best_error([dense_early, other_seed]) == 0.5
    assert paper_rows.authors_best_error([other_seed]) == 0.6


def test_a_missing_dense_row_is_named_by_model_and_method_alone(runs):
    grid = runs / "grid.yaml"
    grid.write_text(yaml.safe_dump({"notebook": str(records.project_root() / "book" / "mnist.ipynb"),
                                    "dataset": "tinyimagenet", "base": {"experiment": "cmp", "preset": "paper"},
                                    "runs": [{"model": "resnet18", "method": "dense"}]}))
    missing = comparison.compare("tab:tiny_unstructured_comparison", [grid]).attrs["missing"]
    assert "ResNet18 dense" in missing and not [row for row in missing if "none" in row]


def test_compare_prefers_paper_protocol_records_and_names_missing_rows(runs):
    grid = runs / "grid.yaml"
    base = {"experiment": "cmp", "method": "constrained", "model": "mlp", "grouping": "model", "target": 0.33}
    grid.write_text(yaml.safe_dump({
        "notebook": str(records.project_root() / "book" / "mnist.ipynb"), "dataset": "mnist",
        "base": base, "runs": [{"preset": "paper", "seed": 0}, {"preset": "paper", "seed": 1},
                               {"preset": "paper", "seed": 2}, {"preset": "cpu", "seed": 0},
                               {"preset": "paper", "model": "lenet5", "target": 0.1}]}))
    _write(grid, 0, 1.6, 200)
    _write(grid, 1, 1.9, 200)
    _write(grid, 3, 5.0, 100)  # the cpu record is not shown: paper-protocol records exist

    table = comparison.compare("tab:mnist", [grid]).set_index(["model", "method", "grouping"])
    row = table.loc[("MLP", "constrained", "model")]
    mean, ci = 1.75, 12.706 * statistics.stdev([1.6, 1.9]) / math.sqrt(2)  # Student's t at 1 degree of freedom
    assert row["val. error final (%) ours"] == f"{mean:.2f} ± {ci:.2f}"
    assert comparison.mean_of(row["val. error final (%) ours"]) == pytest.approx(1.75)
    paper = paper_cell("tab:mnist", model="MLP", method="constrained", grouping="model", metric="val_error_final")
    assert row["val. error final (%) paper"] == f"{paper.value} ± {paper.ci}"
    assert comparison.mean_of(row["val. error final (%) paper"]) == float(paper.value)
    assert row["val. error final (%) Δ"] == f"{mean - float(paper.value):+.2f}"
    assert row["val. error best (%) ours"] == row["val. error final (%) ours"]  # the final epochs meet the 33% target
    assert row["pruned architecture ours"] == "200-230-100 / 200-230-100"
    assert row["protocol"] == "paper protocol, 200 ep, 2 seeds"
    # LeNet5 model-wise is in the grid but not run; the layer-wise rows are in no grid.
    assert table.loc[("LeNet5", "constrained", "model"), "protocol"] == "not run"
    missing = table.attrs["missing"]
    assert missing["LeNet5 constrained model 10%"] == f"python -m paperlib.harness.sweeps {grid}"
    assert missing["LeNet5 constrained layer [50, 30, 70, 10]%"].startswith(
        f"papermill {records.project_root() / 'book' / 'mnist.ipynb'} out.ipynb -p experiment cmp -p model lenet5 "
        "-p method constrained -p grouping layer -p preset paper -p target '[0.5, 0.3, 0.7, 0.1]'")
    assert table.loc[("MLP", "louizos", "model"), "protocol"].startswith("Louizos et al.")


def test_a_record_made_with_an_earlier_preset_is_not_the_cells_record(runs):
    """A row's records are found by the parameters of the grid's cell: one at settings its preset no longer gives
    is not the cell's, though it sits in the folder the cell's run writes to."""
    grid = runs / "grid.yaml"
    base = {"experiment": "cmp", "method": "constrained", "model": "mlp", "grouping": "model", "target": 0.33,
            "preset": "cpu"}
    grid.write_text(yaml.safe_dump({"notebook": str(records.project_root() / "book" / "mnist.ipynb"),
                                    "dataset": "mnist", "base": base}))
    _write(grid, 0, 1.7, 100)
    folder = grid_runs(grid)[0][1]
    params = records.load_record(folder)["params"]
    assert comparison.compare("tab:mnist", [grid]).loc[1, "protocol"] == "short protocol, 100 ep, 1 seed"
    records.write_json(folder / "params.json", {**params, "dual_lr": 3e-3})  # what the old cpu preset used
    records.write_json(folder / "metrics.json", records.load_record(folder)["metrics"])  # the index sees a new record
    compared = comparison.compare("tab:mnist", [grid])
    assert compared.loc[1, "protocol"] == "not run" and "val. error final (%) ours" not in compared
    assert comparison.distance_to_target([grid]).empty


def test_the_protocol_says_which_seeds_trained_on_a_gpu(runs):
    """Records from a lent GPU (metrics ``device``) are named, so a table mixing machines says so."""
    grid = runs / "grid.yaml"
    base = {"experiment": "cmp", "method": "constrained", "model": "mlp", "grouping": "model", "target": 0.33,
            "preset": "paper"}
    grid.write_text(yaml.safe_dump({"notebook": str(records.project_root() / "book" / "mnist.ipynb"),
                                    "dataset": "mnist", "base": base, "grid": {"seed": [0, 1, 2]}}))
    for index in range(3):
        _write(grid, index, 1.7, 200)
    assert comparison.compare("tab:mnist", [grid]).loc[1, "protocol"] == "paper protocol, 200 ep, 3 seeds"
    for index in (1, 2):
        folder = grid_runs(grid)[index][1]
        metrics = records.load_record(folder)["metrics"]
        records.write_json(folder / "metrics.json", {**metrics, "device": "cuda"})
    assert comparison.compare("tab:mnist", [grid]).loc[1, "protocol"] == "paper protocol, 200 ep, 3 seeds, 2 on GPU"
    folder = grid_runs(grid)[0][1]
    records.write_json(folder / "metrics.json", {**records.load_record(folder)["metrics"], "device": "cuda"})
    assert comparison.compare("tab:mnist", [grid]).loc[1, "protocol"] == "paper protocol, 200 ep, 3 seeds, on GPU"


def test_distance_to_target_takes_the_largest_gap_over_the_constraints(runs):
    grid = runs / "grid.yaml"
    base = {"experiment": "cmp", "method": "constrained", "model": "mlp", "grouping": "layer",
            "target": [0.3, 0.3, 0.3], "preset": "cpu"}
    grid.write_text(yaml.safe_dump({"notebook": str(records.project_root() / "book" / "mnist.ipynb"),
                                    "dataset": "mnist", "base": base}))
    history = _history([90.0, 2.0], [0.9, 0.3])
    history[-1].update({"density[fc1]": 0.305, "density[fc2]": 0.288, "density[fc3]": 0.3})
    _write(grid, 0, 2.0, 100, history)
    row = comparison.distance_to_target([grid]).iloc[0]
    assert row["largest gap (points)"] == pytest.approx(-1.2)  # fc2, 1.2 points below its target
    assert not row["within 1 point"]
    assert row["protocol"] == "short protocol, 100 ep"
    assert (row["model"], row["grouping"], row["target"]) == ("mlp", "layer", "[30, 30, 30]%")


def test_magnitude_pruning_is_read_at_the_papers_fine_tuning_checkpoints():
    """App. L reports the best error after 0, 50, 100 and 200 epochs of fine-tuning: the best so far."""
    finetuned = [29.0, 26.0, 27.0, 28.0, 25.0]  # the error rises after the second epoch, then falls below it
    history = ([{"phase": "init", "val_error": 90.0}] + [{"phase": "train", "val_error": 2.0}] * 3
               + [{"phase": "pruned", "val_error": 30.0}]
               + [{"phase": "finetune", "val_error": e} for e in finetuned])
    record = {"params": {"method": "magnitude_pruning", "target": 0.1}, "metrics": {}, "history": history}
    assert paper_rows.our_value(record, "val_error_best", 0) == 30.0  # the pruned model, dense epochs excluded
    assert paper_rows.our_value(record, "val_error_best", 1) == 29.0
    assert paper_rows.our_value(record, "val_error_best", 4) == 26.0  # best so far, not the checkpoint's 28
    assert paper_rows.our_value(record, "val_error_final", 4) == 28.0
    assert paper_rows.our_value(record, "val_error_best", 5) == 25.0
    assert paper_rows.our_value(record, "val_error_best", 6) is None  # not fine-tuned that long
    assert paper_rows.our_value(record, "l0_density", 3) == 10.0


def test_compact_puts_each_difference_next_to_our_value():
    table = pd.DataFrame([{"model": "MLP", "method": "constrained", "grouping": "model", "target / λ_pen": "33%",
                           "val. error final (%) paper": "1.77 ± 0.08", "val. error final (%) ours": "1.55 ± 0.15",
                           "val. error final (%) Δ": "-0.22", "protocol": "paper, 200 ep, 2 seeds"},
                          {"model": "MLP", "method": "louizos", "grouping": "model", "target / λ_pen": "λ_pen 0.1/N",
                           "val. error final (%) paper": "1.4", "val. error final (%) ours": None, "val. error final (%) Δ": None,
                           "protocol": "Louizos et al., quoted"}])
    table.attrs["missing"] = {"x": "y"}
    shown = comparison.compact(table)
    assert list(shown.columns) == ["model", "row", "val. error final (%) paper", "val. error final (%) ours", "protocol"]
    assert list(shown["row"]) == ["constrained, model-wise 33%", "Louizos et al., model-wise λ_pen 0.1/N"]  # in words
    assert shown.loc[0, "val. error final (%) ours"] == "1.55 ± 0.15 (-0.22)"
    assert pd.isna(shown.loc[1, "val. error final (%) ours"])
    assert shown.attrs["missing"] == {"x": "y"}


def test_every_compared_table_is_a_result_table_of_the_paper_shown_on_its_page():
    """studies.TABLES is the one home of which grids fill which table: each label is one of the paper's
    tables, each grid file exists, and the page it names shows that table."""
    from paperlib.paper.paper_results import paper_results

    tables = set(paper_results().query("source_kind == 'table'")["table"])
    for label, source in studies.TABLES.items():
        assert label in tables, label
        assert all((records.project_root() / grid).is_file() for grid in source.grids), source.grids
        assert f'"{label}"' in (records.project_root() / "book" / f"{source.page}.md").read_text(), label
    with pytest.raises(ValueError, match="no grid reproduces 'tab:model_stats'"):
        comparison.compare_table("tab:model_stats")


def test_overview_counts_rows_by_protocol_and_differences_at_the_papers_protocol(runs, monkeypatch):
    grid = runs / "grid.yaml"
    base = {"experiment": "cmp", "method": "constrained", "model": "mlp", "target": 0.33}
    grid.write_text(yaml.safe_dump({
        "notebook": str(records.project_root() / "book" / "mnist.ipynb"), "dataset": "mnist", "base": base,
        "runs": [{"preset": "paper", "grouping": "model"}, {"preset": "cpu", "grouping": "layer",
                                                           "target": [0.3, 0.3, 0.3]}]}))
    paper = float(paper_cell("tab:mnist", model="MLP", method="constrained", grouping="model",
                             metric="val_error_final").value)
    _write(grid, 0, paper + 2.5, 200)  # final error 2.5 points above the paper's; best error 2.0 above
    _write(grid, 1, 9.0, 100, _history([90.0, 9.0], [0.9, 0.3]))  # cpu: counted as a row, never compared
    monkeypatch.setattr(comparison, "TABLES", {"tab:mnist": studies.Study((str(grid),), "results_mnist")})

    row = comparison.overview().iloc[0]
    # Table 1 has four constrained rows (the Louizos et al. rows are quoted, not counted).
    assert (row["rows"], row["paper protocol"], row["another protocol"], row["no record"]) == (4, 1, 1, 2)
    # The paper-protocol row compares its best and final errors (the pruned architecture is no number).
    paper_best = float(paper_cell("tab:mnist", model="MLP", method="constrained", grouping="model",
                                  metric="val_error_best").value)
    best_delta = abs(paper + 2.0 - paper_best)
    assert row["numbers compared"] == 2
    assert row["within 2 pts"] == int(round(best_delta, 2) <= 2.0)
    assert row["table"] == '<a href="results_mnist.html">Table 1</a>'


def test_agreement_tests_each_difference_against_the_spread_behind_the_papers_ci(runs, monkeypatch):
    grid = runs / "grid.yaml"
    base = {"experiment": "agree", "method": "constrained", "model": "mlp", "preset": "paper"}
    grid.write_text(yaml.safe_dump({
        "notebook": str(records.project_root() / "book" / "mnist.ipynb"), "dataset": "mnist", "base": base,
        "runs": [{"grouping": "model", "target": 0.33, "seed": 0}, {"grouping": "model", "target": 0.33, "seed": 1},
                 {"grouping": "layer", "target": [0.3, 0.3, 0.3], "seed": 0}]}))
    monkeypatch.setitem(studies.TABLES, "tab:mnist", studies.Study((str(grid),), "results_mnist"))
    paper = {g: paper_cell("tab:mnist", model="MLP", method="constrained", grouping=g, metric="val_error_final")
             for g in ("model", "layer")}
    ci = {g: float(cell.ci) for g, cell in paper.items()}
    far = paper["layer"].value_num + 10 * ci["layer"]  # ten CIs off: beyond any chance
    _write(grid, 0, paper["model"].value_num - 0.02, 200)
    _write(grid, 1, paper["model"].value_num + 0.04, 200)
    _write(grid, 2, far, 200)

    table = comparison.agreement("tab:mnist").set_index("row")
    model, layer = table.loc["MLP constrained model 33%"], table.loc["MLP constrained layer [30, 30, 30]%"]
    assert model["Δ"] == pytest.approx(0.01) and model["our runs"] == 2 and layer["our runs"] == 1
    # Two runs of ours: Welch's interval, from the paper's 5-run spread and ours.
    assert model["95% chance interval"] == pytest.approx(
        intervals.difference_interval(ci["model"], 5, [paper["model"].value_num - 0.02,
                                                              paper["model"].value_num + 0.04]))
    assert not model["beyond chance"]
    # One run: the prediction interval, t with 4 dof times the paper's spread times sqrt(1 + 1/5).
    spread = ci["layer"] * math.sqrt(5) / 1.96
    assert layer["95% chance interval"] == pytest.approx(2.7764 * spread * math.sqrt(1.2), rel=1e-4)
    assert layer["beyond chance"] and layer["Δ"] == pytest.approx(10 * ci["layer"])
    # Rows without a record, and Louizos et al.'s quoted rows, are not tested.
    assert len(table) == 2
    with pytest.raises(ValueError, match="does not say how many runs"):
        comparison.agreement("tab:mp_comparison_imagenet")


def test_a_run_sits_above_the_papers_rows_for_its_setting_and_nowhere_else():
    from paperlib.harness.presets import resolve_config

    config = resolve_config(dataset="mnist", model="mlp", method="constrained", grouping="model", target=0.5,
                            preset="paper")
    history = [{"epoch": "1", "phase": "train", "l0_density": "0.62", "val_error": "1.20"},   # infeasible
               {"epoch": "2", "phase": "train", "l0_density": "0.505", "val_error": "1.40"}]  # within 1 point
    metrics = {"l0_density": 0.505,
               "params_pct": 60.0, "macs_pct": 59.0, "val_error_best": 1.20, "val_error_final": 1.40}
    rows = paper_rows.paper_rows_for({"params": config.to_dict(), "metrics": metrics, "history": history})
    assert rows[""].tolist() == ["ours, mlp", "Table 10, MLP"]
    paper = paper_cell("tab:mlp_control", method="constrained", grouping="model", target=0.5, metric="l0_density")
    assert rows.loc[1, "L0-density (%)"] == f"{paper.value} ± {paper.ci}"
    assert rows.loc[0, "L0-density (%)"] == "50.50"
    assert rows.loc[0, "val. error best (%)"] == "1.40"  # the best error of the epochs that met the constraint
    other = resolve_config(dataset="mnist", model="mlp", method="constrained", grouping="model", target=0.42,
                           preset="paper")
    assert paper_rows.paper_rows_for({"params": other.to_dict(), "metrics": metrics, "history": history}).empty


def test_a_tables_number_of_runs_is_the_papers_own():
    from paperlib.paper.paper_results import paper_runs

    assert paper_runs("tab:mnist") == 5 and paper_runs("app:all_comparisons:tiny_imagenet") == 3
    assert paper_runs("tab:tiny_unstructured_comparison") is None  # its caption does not say
    with pytest.raises(ValueError, match="does not say how many runs"):
        comparison.agreement("tab:mp_comparison_imagenet")
