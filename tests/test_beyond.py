"""analysis.beyond: App. L's pruned copies and records, Table 4's counts and App. E's searches, on records made here."""

import json
import math
from types import SimpleNamespace

import pytest

from paperlib.harness import records
from analysis import beyond, report

LAYERS = ["fc1", "fc2", "fc3"]


def variants(model="mlp", init="fan_in", dense=1.5, by_density=None):
    """A record of benchmarks/pruning_variants.py: ``by_density`` gives {variant: error} at each density."""
    by_density = by_density or {d: {"every layer": 10 * d, "one global threshold": 5 * d} for d in beyond.DENSITIES}
    return {"model": model, "init": init, "seed": 0, "dense_val_error": dense,
            "pruned_val_error": {str(d): errors for d, errors in by_density.items()}}


def pruning_record(model, target, errors, seed=0, dense_errors=("50.0", "2.0"), **metrics):
    """A magnitude-pruning record: a dense phase whose epochs end at ``dense_errors``, then the pruned model's
    error and one per fine-tuning epoch, ``errors`` (the first is the pruned model's)."""
    history = [{"epoch": str(e), "phase": "train", "val_error": v, "train_loss": str(1 / (e + 1))}
               for e, v in enumerate(dense_errors, start=1)]
    history += [{"epoch": str(len(dense_errors) + i), "phase": "pruned" if i == 0 else "finetune", "val_error": str(v),
                 "train_loss": ""} for i, v in enumerate(errors)]
    params = {"seed": seed, "method": "magnitude_pruning", "model": model, "target": target,
              "run_name": metrics.pop("run_name", f"{model}-t{target}-s{seed}")}
    return {"params": params,
            "history": history, "metrics": {"device_name": "cpu A", **metrics}}


def constrained_record(model, densities, final_error=2.0, history=()):
    """A layer-wise constrained record at 1% whose layers end at ``densities``; ``history``: (errors, densities)."""
    layers = dict(zip(LAYERS, densities))
    rows = [{"epoch": str(e), "phase": "train", "val_error": str(error),
             **{f"density[{layer}]": str(d) for layer, d in zip(LAYERS, epoch_densities)}}
            for e, (error, epoch_densities) in enumerate(history, start=1)]
    return {"history": rows, "params": {"model": model, "method": "constrained", "grouping": "layer", "target": 0.01},
            "metrics": {"l0_density": sum(densities) / len(densities), "l0_density_per_layer": layers,
                        "val_error_final": final_error}}


def test_the_papers_pruned_and_dense_errors_are_those_tables_20_and_21_print():
    assert beyond.paper_pruned_error("mlp", 0.2) == 3.81  # Table 20, just pruned
    assert [beyond.paper_pruned_error("mlp", 0.01, e) for e in beyond.FINETUNING_EPOCHS] == [60.82, 60.69, 55.45]
    assert beyond.paper_pruned_error("lenet5", 0.01) == 88.76  # Table 21
    assert beyond.paper_dense_error("mlp") == 1.72 and beyond.paper_dense_error("lenet5") == 0.85


def test_a_missing_pruning_variants_record_names_the_command_that_writes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="pruning_variants.py --model mlp --init authors --seed 0"):
        beyond.read_pruning_variants("mlp", "authors")
    (tmp_path / "pruning_variants").mkdir()
    (tmp_path / "pruning_variants" / "mlp-authors-s0.json").write_text(json.dumps(variants(init="authors")))
    assert beyond.read_pruning_variants("mlp", "authors")["init"] == "authors"


def test_the_pruning_variants_table_puts_each_dense_models_copies_under_the_papers_row(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path))
    (tmp_path / "pruning_variants").mkdir()
    for init, dense in (("fan_out", 1.7), ("fan_in", 1.45)):
        path = tmp_path / "pruning_variants" / f"mlp-{init}-s0.json"
        path.write_text(json.dumps(variants(init=init, dense=dense)))
    table = beyond.pruning_variants_table("mlp")
    assert list(table.columns) == ["20%", "10%", "5%", "1%"]
    assert table.index.tolist() == [
        ("paper", "as printed (App. L)"),
        ("ours, fan-in init., seed 0, dense 1.45%", "every layer"),
        ("ours, fan-in init., seed 0, dense 1.45%", "one global threshold"),
        ("ours, fan-out init., seed 0, dense 1.70%", "every layer"),
        ("ours, fan-out init., seed 0, dense 1.70%", "one global threshold")]  # the initialisations' order
    assert table.iloc[0].tolist() == [3.81, 9.31, 30.68, 90.45]
    assert table.iloc[2].tolist() == pytest.approx([1.0, 0.5, 0.25, 0.05])


def test_pruned_numbers_give_ours_and_the_papers_and_which_mlp_layer_makes_the_error():
    alone = {d: {"every layer": 10 * d, "one global threshold": 5 * d, "fc1 alone": 1.5 + d, "fc2 alone": 1.6 + 0.1 / d,
                 "fc3 alone": 4.0 + 100 * d, "all but the output layer": 2.0 + 10 * d} for d in beyond.DENSITIES}
    authors = variants(init="authors", dense=1.6, by_density={0.2: {"every layer": 19.0}})
    lenet5 = variants("lenet5", by_density={d: {"every layer": 7 * d, "one global threshold": d, "conv1 alone": 35.421}
                                            for d in beyond.DENSITIES})
    numbers = beyond.pruned_numbers({"fan_in": variants(dense=1.5, by_density=alone),
                                     "fan_out": variants(init="fan_out", dense=1.7), "authors": authors}, lenet5)
    assert numbers["mlp_dense"] == 1.5 and numbers["mlp_paper_dense"] == 1.72 and numbers["lenet5_paper_dense"] == 0.85
    assert [numbers[f"mlp_just_pruned_{d}"] for d in (20, 10, 5)] == pytest.approx([2.0, 1.0, 0.5])
    assert [numbers[f"mlp_paper_just_pruned_{d}"] for d in (20, 10, 5)] == [3.81, 9.31, 30.68]
    assert [numbers[f"lenet5_global_{d}"] for d in (20, 10, 5)] == pytest.approx([0.2, 0.1, 0.05])
    assert "mlp_just_pruned_1" not in numbers  # at 1% every pruned model is near chance
    assert numbers["mlp_out_20"] == 24.0 and numbers["mlp_out_10"] == 14.0
    assert numbers["mlp_first_two_cost"] == pytest.approx(1.1)  # fc2 alone at 10%: 2.6 against 1.5; 5% and 1% not
    assert [numbers[f"mlp_but_output_{d}"] for d in (20, 10, 5, 1)] == pytest.approx([4.0, 3.0, 2.5, 2.1])
    assert numbers["mlp_paper_1"] == 90.45
    assert {name: numbers[name] for name in ("mlp_fan_out_dense", "mlp_fan_out_pruned_20", "mlp_authors_dense",
                                             "mlp_authors_pruned_20")} == pytest.approx(
        {"mlp_fan_out_dense": 1.7, "mlp_fan_out_pruned_20": 2.0, "mlp_authors_dense": 1.6, "mlp_authors_pruned_20": 19.0})
    assert "mlp_fan_in_dense" not in numbers and numbers["lenet5_conv1_20"] == 35.421


def test_constrained_runs_keep_the_constrained_records_at_the_target_by_the_key(monkeypatch):
    runs = [{"params": {"method": m, "target": t, "model": model, "grouping": g}}
            for m, t, model, g in (("constrained", 0.01, "mlp", "layer"), ("constrained", 0.05, "mlp", "layer"),
                                   ("dense", None, "lenet5", None), ("constrained", 0.01, "lenet5", "model"))]
    monkeypatch.setattr(report, "complete_records", lambda grid: runs)
    assert beyond.constrained_runs("grid.yaml", 0.01) == {"mlp": runs[0], "lenet5": runs[3]}
    assert beyond.constrained_runs("grid.yaml", 0.01, "grouping") == {"layer": runs[0], "model": runs[3]}


def test_the_constrained_models_at_one_percent_layer_by_layer():
    mlp = constrained_record("mlp", (0.011, 0.009, 0.0643), final_error=2.346)
    # LeNet5's best error counts only the epochs at which every layer is at most 1 point above its 1% target.
    lenet5 = constrained_record("lenet5", (0.016, 0.0105, 0.0153), history=[
        (0.9, (0.5, 0.5, 0.5)), (1.3, (0.019, 0.01, 0.01)), (1.4, (0.021, 0.01, 0.01)), (1.2, (0.016, 0.0105, 0.0153))])
    assert beyond.at_one_percent({"mlp": mlp, "lenet5": lenet5}) == pytest.approx({
        "mlp1_density": 2.81, "mlp1_first_two": 1.1, "mlp1_output": 6.43, "mlp1_final_error": 2.346,
        "lenet1_density": 100 * (0.016 + 0.0105 + 0.0153) / 3, "lenet1_lowest": 1.05, "lenet1_highest": 1.6,
        "lenet1_best": 1.2})


def test_magnitude_pruning_runs_are_the_models_records(monkeypatch):
    runs = [pruning_record("mlp", 0.2, [5.0]), pruning_record("lenet5", 0.2, [3.0])]
    monkeypatch.setattr(report, "complete_records", lambda grid: runs if grid == beyond.PRUNING_GRID else [])
    assert beyond.magnitude_pruning_runs("lenet5") == [runs[1]]


def test_the_mlps_pruning_against_the_paper_reads_the_rows_of_the_comparison_table():
    import pandas as pd

    table = pd.DataFrame({
        "method": ["dense", "magnitude_pruning", "magnitude_pruning", "magnitude_pruning", "magnitude_pruning",
                   "magnitude_pruning"],
        "target / λ_pen": ["", "20%", "20%", "10%", "1%", "1%"],
        "fine-tuned (epochs)": ["0", "0", "50", "0", "50", "100"],
        "val. error best (%) ours": ["1.40", "16.31 ± 4.98", "1.70 ± 0.07", None, "53.00 ± 3.00", "52.50 ± 3.00"],
        "val. error best (%) Δ": ["-0.32", "+12.50", "-0.33", None, "-7.82", "-8.19"],
        "protocol": ["paper protocol, 200 ep, 1 seed", "paper protocol, 400 ep, 3 seeds", "paper protocol, 400 ep, 3 seeds", "not run",
                     "paper protocol, 400 ep, 3 seeds", "paper protocol, 400 ep, 3 seeds"]})
    assert beyond.mlp_pruning_against_paper(table) == {
        "mlp_pruned_seeds": 3, "mlp_finetuned_low": -0.33, "mlp_finetuned_high": -0.33,
        "mlp1_finetuned_low": -8.19, "mlp1_finetuned_high": -7.82}


def test_finetuned_errors_are_the_best_so_far_and_the_mlp_at_one_percent_seed_by_seed():
    # The pruned model, then 200 epochs of fine-tuning: the error falls to 60 by epoch 50, rises, and is 55 at 200.
    falling = [90.0] + [60.0] * 50 + [70.0] * 149 + [55.0]
    seed_1 = pruning_record("mlp", 0.01, falling, seed=1)
    seed_0 = pruning_record("mlp", 0.01, [x - 2 for x in falling], seed=0)
    assert beyond.finetuned_errors(seed_1) == [60.0, 60.0, 55.0]
    assert beyond.finetuned_errors(seed_1, (0, 1)) == [90.0, 60.0]
    numbers = beyond.mlp_one_percent_by_seed([seed_1, pruning_record("mlp", 0.2, [5.0]), seed_0])
    assert numbers == pytest.approx({"mlp1_paper_drop": 60.69 - 55.45, "mlp1_seed_spread": 2.0})
    with pytest.raises(ValueError, match="no magnitude-pruning record at 1%"):
        beyond.mlp_one_percent_by_seed([pruning_record("mlp", 0.2, [5.0])])


def test_lenet5s_finetuning_gives_nan_where_a_record_is_missing():
    at_20 = pruning_record("lenet5", 0.2, [4.0, 1.1] + [0.9] * 199)
    numbers = beyond.lenet5_finetuning([at_20])
    assert numbers["lenet5_ft_1"] == 1.1 and numbers["lenet5_ft_200"] == 0.9
    assert numbers["lenet5_paper_ft_200"] == 0.92 and numbers["lenet5_1_paper"] == 88.76
    assert math.isnan(numbers["lenet5_1_ft_200"])  # no record at 1%


def test_dense_phases_compare_each_records_own_dense_phase_with_the_baseline():
    own = pruning_record("lenet5", 0.1, [30.0], dense_errors=("50.0", "1.2"), run_name="lenet5-t0.1")
    shared = pruning_record("lenet5", 0.2, [20.0], first_phase_of="lenet5-t0.1")
    retrained = pruning_record("lenet5", 0.05, [40.0], dense_errors=("50.0", "1.3"))
    baseline = {"history": [row for row in own["history"] if row["phase"] == "train"]}
    table = beyond.dense_phases([own, shared, retrained], baseline)
    assert table["target"].tolist() == ["10%", "20%", "5%"]
    assert table["dense phase"].tolist() == ["its own", "the 10% run's", "its own"]  # named by its condition
    assert table["dense error (%)"].tolist() == [1.2, 2.0, 1.3] and table["just pruned (%)"].tolist() == [30, 20, 40]
    assert table["dense phase = dense baseline record"].tolist() == [True, None, False]
    assert beyond.dense_phases([own], None)["dense phase = dense baseline record"].tolist() == [None]
    assert beyond.dense_epochs(own["history"]) == [("1", "50.0", "0.5"), ("2", "1.2", str(1 / 3))]


def test_the_dense_baseline_is_the_grids_dense_run_once_its_record_is_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path))
    assert beyond.dense_baseline("lenet5") is None
    config, folder = next((c, f) for c, f in report.grid_runs(beyond.UNSTRUCTURED_GRID)
                          if c.method == "dense" and c.model == "lenet5")
    records.write_record(folder, config.to_dict(), {"status": "complete", "val_error_final": 0.7}, [], [], {})
    assert beyond.dense_baseline("lenet5")["metrics"]["val_error_final"] == 0.7


def test_model_statistics_count_each_model_with_its_head_beside_table_4():
    table = beyond.model_statistics(beyond.MODEL_STATS[:2])
    assert table.to_dict("records") == [
        {"model": "MLP", "params paper": "266k", "params ours": "266,610", "MACs paper": "267k",
         "MACs ours": "267,010", "input": "1×28×28", "classes": 10},
        {"model": "LeNet5", "params paper": "431k", "params ours": "431,080", "MACs paper": "2,327M",
         "MACs ours": "2,327,130", "input": "1×28×28", "classes": 10}]
    assert beyond.MODEL_STATS[2][:2] == ("wrn-28-10", 10)  # CIFAR-10's head; the paper's 36.5M has CIFAR-100's


def search(grouping, num_trainings, densities=(0.95, 0.1, 0.52, 0.505)):
    """A complete bisection search's metrics.json: its trainings' (λ_pen, density), endpoints first."""
    evaluations = [{"iteration": max(0, i - 1), "lmbda": 10.0 ** -(3 - i), "l0_density": d}
                   for i, d in enumerate(densities)]
    return {"status": "complete", "kind": "bisection search", "grouping": grouping, "target": 0.5, "tolerance": 0.01,
            "epochs": 150, "converged": True, "num_trainings": num_trainings, "evaluations": evaluations}


def test_the_papers_bisection_count_and_our_searches_figure():
    assert beyond.paper_bisection_trainings() == (">=", "6")
    fig = beyond.plot_bisections([search("model", 8), search("layer", 6)])
    assert [ax.get_title() for ax in fig.axes] == ["model-wise: 8 trainings", "layer-wise: 6 trainings"]
    assert fig.axes[0].collections[0].get_offsets()[:, 1].tolist() == pytest.approx([95.0, 10.0, 52.0, 50.5])
    assert [text.get_text() for text in fig.axes[0].texts] == ["0", "0", "1", "2"]
    with pytest.raises(ValueError, match="no search to plot"):
        beyond.plot_bisections([])


def test_bisection_rows_give_the_closest_training_and_the_command_for_a_missing_search(tmp_path, monkeypatch):
    planned = [(SimpleNamespace(grouping=grouping), tmp_path / grouping) for grouping in ("model", "layer")]
    done = [search("model", 8)]
    monkeypatch.setattr(report, "grid_runs", lambda grid: planned)
    monkeypatch.setattr(report, "complete_searches", lambda grid: done)
    rows = beyond.bisection_rows("grids/searches.yaml")
    assert rows["grouping"].tolist() == ["model", "layer"] and rows["trainings paper"].tolist() == [">= 6", ">= 6"]
    model = rows.iloc[0]
    assert model["trainings ours"] == 8 and model["λ_pen found"] == "1" and model["L0-density (%)"] == 50.5
    assert rows.iloc[1]["run"] == "not run" and rows.attrs["command"] == "python -m paperlib.harness.sweeps grids/searches.yaml"
    done.append(search("layer", 6))
    assert "command" not in beyond.bisection_rows("grids/searches.yaml").attrs


def test_the_bisection_against_the_constraint_counts_trainings_for_each():
    searches = [search("model", 8), search("layer", 6)]
    constrained = {grouping: {"metrics": {"l0_density": density, "val_error_final": error, "epochs_completed": 200}}
                   for grouping, density, error in (("layer", 0.5003, 1.86), ("model", 0.5026, 1.8))}
    table = beyond.bisection_against_constraint(searches, constrained)
    assert table["grouping"].tolist() == ["model", "layer", "model", "layer"]
    assert table["trainings"].tolist() == [8, 6, 1, 1] and table["epochs each"].tolist() == [150, 150, 200, 200]
    assert table["L0-density (%)"].tolist() == pytest.approx([50.5, 50.5, 50.26, 50.03])  # the searches' closest
    assert table["error final (%)"].tolist()[2:] == [1.8, 1.86]
    assert len(beyond.bisection_against_constraint([], constrained)) == 2


def test_what_was_not_run_is_one_command_per_row_with_a_loop_over_targets(monkeypatch):
    import pandas as pd

    papermill = "papermill book/x.ipynb out.ipynb -p model m -p method constrained -p grouping layer -p preset paper"
    table = pd.DataFrame({"model": ["m"] * 4, "method": ["constrained", "constrained", "magnitude_pruning", "dense"],
                          "grouping": ["layer", "layer", "layer", "—"], "target / λ_pen": ["20%", "10%", "20%", ""],
                          "protocol": ["not run", "not run", "not run", "paper protocol, 1 ep, 1 seed"]})
    table.attrs["missing"] = {"m constrained layer 20%": f"{papermill} -p target 0.2",
                              "m constrained layer 10%": f"{papermill} -p target 0.1",
                              "m magnitude_pruning layer 20%": "python -m paperlib.harness.sweeps grids/imagenet_magnitude_pruning.yaml"}
    monkeypatch.setattr(beyond, "compare_table", lambda label: table)
    rows = beyond.not_run({"tab:mp_comparison_imagenet": "needs a GPU"})
    assert rows["command"].tolist() == [f"for v in 0.2 0.1; do {papermill} -p target $v; done",
                                        "python -m paperlib.harness.sweeps grids/imagenet_magnitude_pruning.yaml"]
    assert rows["what"].tolist() == ["L0, constrained, layer-wise 20%, 10%", "magnitude pruning, layer-wise 20%"]
    assert rows["why not"].unique().tolist() == ["needs a GPU"] and rows["table"].unique().tolist() == ["Table 2"]


def test_the_error_density_table_and_figure_put_the_papers_and_ours_apart():
    table = beyond.error_density("mlp")
    paper = table[table["source"] == "paper"].set_index(["method", "target (%)"])
    assert paper.loc[("constrained", 1.0), "density (%)"] == 2.62 and paper.loc[("constrained", 1.0), "error (%)"] == 1.92
    assert paper.loc[("magnitude_pruning", 1.0), "error (%)"] == 55.45  # after 200 epochs of fine-tuning
    assert len(table) == 2 * 2 * len(beyond.DENSITIES)
    fig = beyond.plot_error_density({"MLP": table})
    styles = {(line.get_color(), line.get_marker()) for line in fig.axes[0].lines}
    assert len(styles) == 4  # paper and ours, each method: distinct colours and markers
    assert [text.get_text() for text in fig.legends[0].get_texts()][0].startswith("paper: ")
    assert min(text.get_fontsize() for text in fig.legends[0].get_texts()) >= 9
    summary = beyond.unstructured_summary("mlp")
    assert summary["target"].tolist() == ["20%", "10%", "5%", "1%"]
    assert summary[("magnitude pruning, just pruned", "paper")].tolist() == [3.81, 9.31, 30.68, 90.45]


def test_readable_tables_name_methods_in_words():
    import pandas as pd

    table = pd.DataFrame({"row": ["magnitude_pruning, layer-wise 20%", "constrained, model-wise 10%"]})
    assert beyond.readable(table)["row"].tolist() == ["magnitude pruning, layer-wise 20%", "L0, constrained, model-wise 10%"]
