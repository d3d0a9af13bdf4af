"""Report tables list every run a grid asks for, with numbers only from complete records."""

import json
import re

import pandas as pd
import pytest
import yaml

from paperlib.harness import records, run_pages, training
from analysis import report


def test_layer_densities_compare_expected_and_test_time_density():
    record = {"params": {"target": [0.5, 0.1]}, "metrics": {"l0_density_per_layer": {"a": 0.52, "b": 0.12}},
              "gate_medians": {"0": {"a": [0.5] * 4, "b": [0.5] * 10},
                               "7": {"a": [0.0, 0.3, 1.0, 1.0], "b": [0.0] * 9 + [1.0]}}}
    table = report.layer_densities(record)
    assert list(table["groups kept"]) == ["3 of 4", "1 of 10"]
    assert list(table["groups kept at test time (%)"]) == [75.0, 10.0]
    assert list(table["target (%)"]) == [50.0, 10.0]
    unstructured = {"params": {"target": 0.2}, "metrics": {"l0_density_per_layer": {"w": 0.21}},
                    "gate_medians": {"3": {"w": {"zero": 80, "one": 15, "histogram_20_bins": [80] + [0] * 18 + [20]}}}}
    assert report.layer_densities(unstructured)["groups kept"][0] == "20 of 100"


def test_layer_densities_by_run_puts_each_run_on_a_row_headed_by_the_layers_targets(tmp_path):
    def run(seed, b_expected):
        return {"path": tmp_path / f"s{seed}",
                "params": {"model": "lenet5", "method": "constrained", "grouping": "layer", "target": [0.5, 0.1],
                           "seed": seed, "preset": "paper", "dataset": "mnist"},
                "metrics": {"l0_density_per_layer": {"a": 0.52, "b": b_expected}},
                "gate_medians": {"7": {"a": [0.0, 0.3, 1.0, 1.0], "b": [0.0] * 9 + [1.0]}}}
    table = report.layer_densities_by_run([run(0, 0.12), run(1, 0.0875)])
    assert list(table.columns) == ["run", "a (50%)", "b (10%)"]
    assert list(table["run"]) == [f"LeNet5, constrained, layer-wise 50/10%, seed {seed}" for seed in (0, 1)]
    assert list(table["a (50%)"]) == ["52.0 / 75.0"] * 2
    assert list(table["b (10%)"]) == ["12.0 / 10.0", "8.8 / 10.0"]


def test_make_portable_removes_machine_paths_and_nothing_else(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "x" / "run"
    metrics = {"status": "complete", "val_error_final": 1.23456789,
               "data": {"dataset": "mnist", "location": "/somewhere/MNIST/raw", "num_train": 60000}}
    records.write_json(run / "metrics.json", metrics)
    notebook = {"cells": [], "metadata": {"papermill": {"input_path": "book/mnist.ipynb",
                                                        "output_path": "/root/.cache/x/notebook.ipynb"}},
                "nbformat": 4, "nbformat_minor": 5}
    (run / "notebook.ipynb").write_text(json.dumps(notebook))
    monkeypatch.setattr(records, "project_root", lambda: tmp_path)

    records.make_portable(run)
    after = json.loads((run / "metrics.json").read_text())
    assert after == {**metrics, "data": {"dataset": "mnist", "num_train": 60000}}
    papermill = json.loads((run / "notebook.ipynb").read_text())["metadata"]["papermill"]
    assert papermill == {"input_path": "book/mnist.ipynb", "output_path": "runs/x/run/notebook.ipynb"}


def test_committed_records_hold_no_machine_path():
    """Every committed record is portable: no home, cache or data folder of the machine that ran it."""
    machine_path = re.compile(r'"(/(?:root|home|work|tmp|Users|check|scratch)/[^"]*)"')
    found = {}
    for path in sorted((records.project_root() / "runs").rglob("*")):
        if path.suffix in {".json", ".ipynb", ".csv"}:
            hits = machine_path.findall(path.read_text())
            if hits:
                found[str(path.relative_to(records.project_root()))] = hits[:2]
    assert not found, f"machine paths in committed records (fix with records.make_portable): {found}"


def test_grid_to_show_draws_one_protocol_the_most_faithful_complete_one(workspace):
    common = {"model": "mlp", "epochs": 1, "batch_size": 16, "method": "penalized"}
    grids = []
    for name in ("faithful", "budget"):
        grid = workspace / f"{name}.yaml"
        grid.write_text(yaml.safe_dump({
            "notebook": str(records.project_root() / "book" / "mnist.ipynb"), "dataset": "mnist",
            "base": {**common, "experiment": name}, "grid": {"lmbda": [0.1, 0.2]}}))
        grids.append(grid)
    for lmbda in (0.1, 0.2):
        training.run_experiment(progress=False, dataset="mnist", experiment="budget", lmbda=lmbda, **common)
    training.run_experiment(progress=False, dataset="mnist", experiment="faithful", lmbda=0.1, **common)

    chosen, progress = report.grid_to_show(grids)
    assert chosen == grids[1]
    assert progress[["complete", "planned"]].values.tolist() == [[1, 2], [2, 2]]
    assert progress["shown"].tolist() == [False, True]

    training.run_experiment(progress=False, dataset="mnist", experiment="faithful", lmbda=0.2, **common)
    chosen, progress = report.grid_to_show(grids)
    assert chosen == grids[0] and progress["shown"].tolist() == [True, False]


def test_final_errors_lists_each_record_of_the_preset_once_largest_first(workspace):
    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    base = {"experiment": "errors", "model": "mlp", "method": "constrained", "grouping": "model"}
    grids = []
    for name, targets in (("one", [0.2, 0.5]), ("two", [0.5, 0.8])):  # the 50% run is in both grids
        grid = workspace / f"{name}.yaml"
        grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist", "base": base,
                                        "grid": {"target": targets, "preset": ["paper", "cpu"]}}))
        grids.append(grid)
    final = {(0.2, "paper"): 1.5, (0.5, "paper"): 33.6, (0.2, "cpu"): 80.0}  # 80% (cpu) must not be listed
    for config, folder in report.grid_runs(grids[0]):
        error = final[(config.target, config.preset)] if (config.target, config.preset) in final else None
        if error is not None:
            metrics = {"status": "complete", "val_error_final": error,
                       "val_error_best": error / 2}
            records.write_record(folder, config.to_dict(), metrics, [], [], {})

    table = report.final_errors(grids, "paper")
    assert list(table["val. error final (%)"]) == [33.6, 1.5]
    assert list(table["val. error best (%)"]) == [16.8, 0.75]
    assert list(table["target"]) == [0.5, 0.2] and set(table["grouping"]) == {"model"}
    assert all(name.startswith("mlp-constrained-model-t0.") for name in table["run"])
    assert report.final_errors(grids, "cpu")["val. error final (%)"].tolist() == [80.0]


def test_complete_searches_reads_each_finished_bisection_search_of_a_grid(workspace):
    grid = workspace / "bisection.yaml"
    grid.write_text(yaml.safe_dump({
        "notebook": str(records.project_root() / "book" / "bisection.ipynb"), "dataset": "mnist",
        "base": {"experiment": "search", "preset": "paper", "epochs": 3, "target": 0.5},
        "grid": {"grouping": ["model", "layer"]}}))
    (model_search, model_folder), (_, layer_folder) = report.grid_runs(grid)
    assert model_search.grouping == "model"
    for folder, status in ((model_folder, "complete"), (layer_folder, "partial")):
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({"status": status, "grouping": folder.name, "num_trainings": 6}))

    (search,) = report.complete_searches(grid)
    assert search["path"] == model_folder and search["grouping"] == model_folder.name and search["num_trainings"] == 6


def test_counterpart_pairs_runs_that_differ_only_in_the_named_parameters():
    def rec(name, **params):
        base = {"experiment": "e", "run_name": name, "model": "mlp", "method": "constrained", "target": 0.2,
                "seed": 0, "dual_lr": 1e-4, "clamp_log_alpha": False}
        return {"params": {**base, **params}}

    clamped = rec("c", experiment="clamp", clamp_log_alpha=True)
    other_seed = rec("s1", seed=1)
    other_dual_lr = rec("lr", dual_lr=1e-3)
    twin = rec("twin", threads=2, lmbda=0.0)  # the machine, and a parameter constrained runs do not use, differ
    clamped_too = rec("c2", experiment="x", clamp_log_alpha=True)
    candidates = [other_seed, other_dual_lr, clamped_too, twin]
    assert report.counterpart(clamped, candidates, ("clamp_log_alpha",)) is twin
    assert report.counterpart(clamped, candidates, ("clamp_log_alpha", "dual_lr")) is other_dual_lr
    assert report.counterpart(clamped, [other_seed, clamped_too], ("clamp_log_alpha",)) is None
    # twin's parameters predate linear_init: it is compared at the option's default, fan_in.
    assert "linear_init" not in twin["params"]
    assert report.counterpart({"params": {**clamped["params"], "linear_init": "fan_in"}}, [twin],
                              ("clamp_log_alpha",)) is twin
    assert report.counterpart({"params": {**clamped["params"], "linear_init": "fan_out"}}, [twin],
                              ("clamp_log_alpha",)) is None
    with pytest.raises(ValueError, match="not parameters"):
        report.counterpart(clamped, candidates, ("clamp",))


def test_show_keeps_constant_columns_and_the_command_in_a_given_caption():
    """A caption given to show() must not hide what show() moves there: a constant column's value and the
    command that completes the table."""
    table = pd.DataFrame({"model": ["mlp", "mlp"], "target": ["20%", "35%"], "gap": [1.5, 1.2]})
    table.attrs["command"] = "python -m paperlib.harness.sweeps grids/x.yaml"
    html = report.show(table, caption="Misses by cell").to_html()
    caption = html[html.index("<caption>"):html.index("</caption>")]
    assert caption.startswith("<caption>Misses by cell; model: mlp; ")
    assert "python -m paperlib.harness.sweeps grids/x.yaml" in caption
    assert ">model<" not in html  # the column itself moved to the caption


def test_a_run_page_says_when_its_run_resumed_or_is_of_an_earlier_preset(workspace):
    common = {"experiment": "remarks", "model": "mlp", "preset": "cpu", "epochs": 1, "batch_size": 16}
    done = training.run_experiment(progress=False, dataset="mnist", target=0.4, **common)
    folder = records.runs_dir() / "remarks" / done["params"]["run_name"]
    assert run_pages.run_page_remarks(folder) == "" and run_pages.run_page_remarks(workspace / "nothing") == ""
    search = workspace / "search"  # a bisection search's record: metrics.json only
    records.write_json(search / "metrics.json", {"status": "complete", "kind": "bisection search"})
    assert run_pages.run_page_remarks(search) == ""
    metrics = json.loads((folder / "metrics.json").read_text())
    records.write_json(folder / "metrics.json", {**metrics, "git_commits_resumed_at": ["abc"]})
    resumed = run_pages.run_page_remarks(folder)
    assert "resumed from a checkpoint" in resumed
    params = json.loads((folder / "params.json").read_text())
    records.write_json(folder / "params.json", {**params, "epochs": 7})
    superseded = run_pages.run_page_remarks(folder)  # a second remark: its settings are no longer its protocol's
    assert superseded.startswith(resumed) and len(superseded) > len(resumed) and "preset" not in superseded


def test_show_keeps_a_mean_and_its_ci_on_one_line():
    table = pd.DataFrame({"row": ["a b"], "val. error final (%) ours": ["1.55 ± 0.15 (-0.22)"], "n": [3.14159]})
    html = report.show(table).to_html()
    assert "1.55\u00a0±\u00a00.15 (-0.22)" in html and "a b" in html and "3.14" in html


def test_density_traces_name_every_run_with_steps_under_the_panels():
    def run(name, steps):
        return {"params": {"run_name": name, "target": 0.3}, "metrics": {}, "steps": steps}

    steps = [{"epoch": "0.5", "l0_density": "0.9", "lambda_0": "0.1"}, {"epoch": "1", "l0_density": "0.4",
                                                                         "lambda_0": "0.0"}]
    fig = report.plot_density_traces([run("a", steps), run("no-steps", []), run("b", steps)])
    assert [text.get_text() for text in fig.legends[0].get_texts()] == ["a", "b"]
    assert fig.axes[0].get_legend() is None  # not over the curves
    assert fig.axes[0].lines[0].get_ydata().tolist() == [90.0, 40.0]


def _synthetic_record(folder, params: dict, error: float) -> None:
    """A complete record with these parameters (nothing trained): what the report reads of one."""
    metrics = {"status": "complete", "l0_density": 0.5, "params_pct": 50.0, "macs_pct": 40.0,
               "val_error_best": error, "val_error_final": error, "epochs_completed": 1, "git_commit": "0" * 40}
    records.write_record(folder, params, metrics, [], [], {})


def test_records_are_found_by_their_parameters_never_by_their_name_alone(workspace):
    """A record made under an earlier preset, sitting under the name today's preset gives, is not today's run;
    a record of today's parameters under another name is; the old record is kept and answers for its own
    parameters."""
    grid = workspace / "grid.yaml"
    base = {"experiment": "found", "model": "mlp", "method": "constrained", "preset": "cpu"}
    grid.write_text(yaml.safe_dump({"notebook": str(records.project_root() / "book" / "mnist.ipynb"),
                                    "dataset": "mnist", "base": base, "grid": {"target": [0.4, 0.6, 0.8]}}))
    (t4, own4), (t6, own6), (t8, own8) = report.grid_runs(grid)
    older = {**t4.to_dict(), "dual_lr": 10 * t4.dual_lr, "clamp_log_alpha": not t4.clamp_log_alpha}
    _synthetic_record(own4, older, 9.0)  # an earlier preset's record under today's name
    _synthetic_record(own6, {**t6.to_dict(), "threads": 4, "device": "cpu"}, 6.0)  # where it ran changes nothing
    _synthetic_record(own8.parent / "t0.8-compiled", {**t8.to_dict(), "compile_gates": "always",
                                                      "run_name": "t0.8-compiled"}, 8.0)  # another run's record

    assert [folder for _, folder in report.grid_records(grid)] == [None, own6, None]
    assert [r["metrics"]["val_error_final"] for r in report.complete_records(grid)] == [6.0]
    assert report.grid_to_show([grid])[1][["complete", "planned"]].values.tolist() == [[1, 3]]

    rerun = own4.parent / "t0.4-rerun"  # today's parameters, run under a name of their own
    _synthetic_record(rerun, {**t4.to_dict(), "run_name": rerun.name}, 4.0)
    assert [folder for _, folder in report.grid_records(grid)] == [rerun, own6, None]
    assert records.record_status(own4) == "complete"  # the old record is kept ...
    old_grid = workspace / "old.yaml"  # ... and is the record of its own parameters
    old_grid.write_text(yaml.safe_dump({
        "notebook": str(records.project_root() / "book" / "mnist.ipynb"), "dataset": "mnist",
        "base": {**base, "target": 0.4, "dual_lr": older["dual_lr"], "clamp_log_alpha": older["clamp_log_alpha"]}}))
    assert [folder for _, folder in report.grid_records(old_grid)] == [own4]
    assert [r["metrics"]["val_error_final"] for r in report.complete_records(old_grid)] == [9.0]


def test_show_writes_yes_and_no_as_ticks_and_crosses_never_true_false():
    import numpy as np

    table = pd.DataFrame({"setting": ["a", "b", "c"], "feasible": [True, False, np.bool_(True)]})
    html = report.show(table).to_html()
    assert "True" not in html and "False" not in html
    assert html.count("✓") == 2 and html.count("✗") == 1


def test_show_writes_a_number_that_rounds_to_zero_without_its_sign():
    table = pd.DataFrame({"row": ["a", "b", "c"], "Δ (points)": [-0.004, -0.006, 0.0]})
    cells = [row[-1]["display_value"] for row in report.show(table)._translate(False, False)["body"]]
    assert cells == ["0.00", "-0.01", "0.00"]


def test_show_writes_a_column_of_whole_numbers_without_decimals():
    table = pd.DataFrame({"target (%)": [30.0, 70.0, float("nan")], "final (%)": [30.48, 70.0, 1.0]})
    body = report.show(table)._translate(False, False)["body"]
    assert [[cell["display_value"] for cell in row[-2:]] for row in body] == [
        ["30", "30.48"], ["70", "70.00"], ["—", "1.00"]]




def test_a_small_number_keeps_its_digits_where_rounding_would_make_it_zero():
    """A learning rate of 7e-4 shows as 0.0007, never 0.00; the column's other numbers keep the table's digits."""
    import re

    table = pd.DataFrame({"gates' lr": [7e-4, 0.1, 6.0], "error (%)": [1.234, 2.0, 3.5]})
    cells = re.findall(r">([^<]+)</td>", report.show(table).to_html())
    assert cells == ["0.0007", "1.23", "0.10", "2.00", "6.00", "3.50"]


def test_missing_runs_list_each_grid_with_runs_not_complete_and_its_sweep(monkeypatch):
    found = {"a.yaml": ["a/1", None, None], "b.yaml": ["b/1"]}  # the folder of a record of the grid's parameters
    monkeypatch.setattr(report, "grid_records", lambda grid: [(None, folder) for folder in found[grid]])
    table = report.missing_runs(["a.yaml", "b.yaml", "a.yaml"])
    assert table.values.tolist() == [["a.yaml", "2 of 3", "python -m paperlib.harness.sweeps a.yaml"]]
