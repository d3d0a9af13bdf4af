"""analysis.collapse: the LeNet5 collapse's runs, findings and numbers, on records made here."""

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from paperlib.method import gates
from analysis import collapse

matplotlib.use("Agg")

LAYERS = collapse.LAYERS
CELL = "lenet5-constrained-layer-t0.5_0.3_0.7_0.1"
#: P(z ≠ 0) of a gate whose median is 1: log α = β ln 11 in Eq. 8.
P_OF_MEDIAN_ONE = 1 / (1 + 11 ** (-4 / 3))


def record(errors, densities=None, fc2_lambdas=None, train_errors=None, medians=None, steps=None, **metrics):
    """A LeNet5 record as records.load_record returns it: epoch 0 (at initialisation), then one epoch per
    validation error. Every layer's density is 0.8 and every multiplier 0 unless ``densities`` (layer ->
    one value per epoch) and ``fc2_lambdas`` say otherwise; fc2 has four gates."""
    epochs = range(len(errors))
    densities = {**{layer: [0.8] * len(errors) for layer in LAYERS}, **(densities or {})}
    fc2_lambdas = fc2_lambdas or [0.0] * len(errors)
    train_errors = train_errors or [1.0] * len(errors)
    history = [{"epoch": str(epoch), "phase": "init" if epoch == 0 else "train", "val_error": str(errors[epoch]),
                "train_error": "" if epoch == 0 else str(train_errors[epoch]),
                **{f"density[{layer}]": str(densities[layer][epoch]) for layer in LAYERS},
                "lambda_0": "0", "lambda_1": "0", "lambda_2": "0", "lambda_3": str(fc2_lambdas[epoch])}
               for epoch in epochs]
    last = len(errors) - 1
    params = {"run_name": "a-test-run", "dual_lr": 3e-3, "target": metrics.pop("target", collapse.TABLE1_TARGETS)}
    metrics = {"val_error_final": errors[-1], "val_error_best": min(errors),
               "epochs_completed": last, "multipliers_final": [0.0] * 4,
               "l0_density_per_layer": {layer: densities[layer][-1] for layer in LAYERS},
               "pruned_architecture": [9, 12, 192, 7], **metrics}
    medians = medians or {str(last): {layer: [1.0, 1.0, 0.0, 0.0] for layer in LAYERS}}
    return {"path": "/nowhere", "params": params, "metrics": metrics, "history": history,
            "steps": steps or [], "gate_medians": medians}


@pytest.fixture
def no_records(tmp_path, monkeypatch):
    """An empty runs/ folder: the grids' runs have no record."""
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path))
    return tmp_path


def test_crossing_epoch_is_the_first_epoch_that_ends_below_half():
    run = record([90, 9, 8, 7, 6, 5], densities={"fc2": [0.83, 0.7, 0.5, 0.49, 0.3, 0.6]})
    assert collapse.crossing_epoch(run) == 3  # 50% itself is not below
    with pytest.raises(ValueError, match="conv1's expected density never went below 50% in a-test-run"):
        collapse.crossing_epoch(run, "conv1")


def test_largest_multiplier_is_read_from_the_per_step_log():
    steps = [{"epoch": "0.05", "lambda_0": "0.1", "lambda_3": "2.5"},
             {"epoch": "0.1", "lambda_0": "0.3", "lambda_3": "1.0"}]
    run = record([90, 5], steps=steps)
    assert collapse.largest_multiplier(run) == 2.5
    assert collapse.largest_multiplier(run, 0) == 0.3


def test_peak_error_counts_from_epoch_10_on():
    run = record([90, 95, *[2.0] * 8, 3, 7, 7, 5, 1])  # epoch 1 is worse, but early
    assert collapse.peak_error(run) == (7.0, 11)  # the first of two equal peaks


def test_the_plateau_is_the_epochs_within_one_test_image_of_predicting_the_digit_one():
    run = record([90, 20, 88.55, 88.63, 88.64, 88.65, 88.66, 50])
    assert collapse.PREDICTS_ONE == pytest.approx(88.65)
    assert collapse.plateau(run).index.tolist() == [4, 5, 6]


def test_first_epoch_above_skips_the_first_epoch():
    run = record([93, 95, 5, 4, 12, 30])
    assert collapse.first_epoch_above(run) == 4
    assert collapse.first_epoch_above(run, 4.5) == 2
    with pytest.raises(ValueError, match="never had an error above 50%"):
        collapse.first_epoch_above(run, 50)


def test_first_restart_is_the_first_epoch_that_ends_with_a_lower_multiplier():
    run = record([90] * 6, fc2_lambdas=[0, 1, 2, 3, 0.5, 1])
    assert collapse.first_restart(run) == 4
    with pytest.raises(ValueError, match="the multiplier of constraint 0 never fell"):
        collapse.first_restart(run, 0)


def test_first_epoch_at_target_is_the_first_logged_step_at_or_below_it():
    densities = [0.3, 0.15, 0.1, 0.12, 0.09]  # fc2's target is 0.1
    steps = [{"epoch": str(1 + i / 20), "constrained_density_3": str(d)} for i, d in enumerate(densities)]
    assert collapse.first_epoch_at_target(record([90, 5], steps=steps)) == pytest.approx(1.1)
    with pytest.raises(ValueError, match="constraint 3 never reached its target"):
        collapse.first_epoch_at_target(record([90, 5], steps=steps[:2]))


def test_saved_medians_are_ordered_by_epoch_and_the_test_time_share_counts_non_zero_ones():
    medians = {"0": {"fc2": [0.5] * 4}, "20": {"fc2": [0.0, 0.2, 0.7, 0.0]}, "3": {"fc2": [0.4] * 4}}
    run = record([90, 5], medians=medians)
    assert collapse.saved_epochs(run) == [0, 3, 20]
    assert collapse.medians(run).tolist() == [0.0, 0.2, 0.7, 0.0]  # the last: epoch 20, not "3"
    assert collapse.kept_share(run, 20) == 50.0
    assert collapse.kept_share(run, 3) == 100.0


def test_prob_from_medians_inverts_eq_9_and_bounds_the_decided_gates():
    log_alpha = torch.tensor([-1.0, 0.0, 0.5], dtype=torch.float64)  # fractional medians: |log α| < β ln 11
    values = gates.median_gates(log_alpha).tolist()
    assert collapse.prob_from_medians(values) == pytest.approx(gates.prob_active(log_alpha).numpy())
    assert collapse.prob_from_medians([0.0, 1.0]) == pytest.approx([0.5, P_OF_MEDIAN_ONE])


def test_zero_median_gates_carry_what_the_other_gates_do_not():
    density = (0.6 + P_OF_MEDIAN_ONE) / 4  # three zero medians carry 0.6 of P(z ≠ 0) in all
    run = record([90, 5], densities={"fc2": [0.8, density]},
                 medians={"1": {layer: [0.0, 0.0, 0.0, 1.0] for layer in LAYERS}})
    zeros = collapse.zero_median_gates(run)
    assert zeros["gates"] == 3
    assert zeros["mean P"] == pytest.approx(0.2)
    assert zeros["share (%)"] == pytest.approx(100 * 0.6 / (0.6 + P_OF_MEDIAN_ONE))
    assert zeros["largest P"] == pytest.approx(P_OF_MEDIAN_ONE)


def test_the_median_band_and_how_fast_it_falls_until_it_reaches_zero():
    values = {5: [0.5], 6: [0.44], 7: [0.36], 8: [0.3], 9: [0.0]}
    medians = {str(epoch): {"fc2": v * 4} for epoch, v in values.items()}
    medians["10"] = {"fc2": np.linspace(0, 1, 101).tolist()}
    band = collapse.median_band(record([90, 5], medians=medians))
    assert band.index.tolist() == [5, 6, 7, 8, 9, 10]
    assert band.loc[6, 95] == pytest.approx(0.44)
    assert band.loc[10, [5, 50, 95]].tolist() == pytest.approx([0.05, 0.5, 0.95])
    drops = collapse.band_drops(band.loc[:9], from_epoch=6)
    assert sorted(drops) == pytest.approx([0.06, 0.06, 0.08, 0.08])  # not the last fall, to 0


def test_crossing_epochs_give_each_layers_first_epoch_below_half():
    densities = {"conv1": [0.8, 0.6, 0.496, 0.4, 0.3, 0.3], "conv2": [0.8, 0.6, 0.55, 0.493, 0.3, 0.3],
                 "fc1": [0.8, 0.7, 0.6, 0.55, 0.45, 0.4], "fc2": [0.8, 0.7, 0.6, 0.55, 0.52, 0.4]}
    assert collapse.crossing_epochs(record([90] * 6, densities=densities)) == {"conv1": 2, "conv2": 3, "fc1": 4,
                                                                               "fc2": 5}


def test_a_variants_row_gives_its_errors_densities_and_multipliers(no_records):
    run = record([90, 95, *[2.0] * 8, 3, 7, 7, 5, 1], densities={"fc2": [0.8] * 14 + [0.14]},
                 multipliers_final=[0.0171776, 0.20016, 0.00129386, 0.589089])
    row = collapse.variant_row("fast", run)
    assert row["variant"] == "dual lr 3e-3, clamped"
    assert row["dual lr"] == "0.003, clamped"  # a record older than the clamp's parameter clamped
    assert row["val. error final (%)"] == 1 and row["val. error best (%)"] == 1 and row["epochs"] == 14
    assert row["peak error from epoch 10 (%)"] == "7.0 (ep. 11)"
    assert row["fc2 (%)"] == "14.0 / 50.0"
    assert row["final λ"] == "0.0172, 0.2, 0.00129, 0.589"
    table = collapse.variant_table({"fast": run, "slow": None}, ("fast", "slow"))
    assert table["variant"].tolist()[1] == "dual lr 1e-4, unclamped (short protocol): not run"
    assert table.attrs["command"] == "python -m paperlib.harness.sweeps grids/lenet5_collapse.yaml"


def test_each_run_is_found_in_the_record_index_by_its_parameters_and_protocol():
    base = {"folder": "fast", "experiment": "lenet5_collapse", "dataset": "mnist", "model": "lenet5", "preset": "cpu",
            "method": "constrained", "grouping": "layer", "target": collapse.TABLE1_TARGETS, "dual_lr": 3e-3,
            "clamp_log_alpha": True, "epochs": 40, "histogram_epochs": [], "seed": 0, "protocol": collapse.SHORT,
            "variant": "dual_lr 0.003, clamp_log_alpha True"}
    every = {**base, "folder": "every", "epochs": 14, "histogram_epochs": list(range(15)),
             "protocol": collapse.SHORT_SUPERSEDED}  # the same parameters but for its epochs and saved medians
    frame = pd.DataFrame([base, every, {**base, "folder": "unclamped", "clamp_log_alpha": False}])
    found = {name: collapse.find(collapse.VARIANTS[name], frame)["folder"].tolist()
             for name in ("fast", "fast_unclamped", "every", "slow")}
    assert found == {"fast": ["fast"], "fast_unclamped": ["unclamped"], "every": ["every"], "slow": []}
    with pytest.raises(ValueError, match="2 records have"):
        collapse.find(collapse.VARIANTS["fast"], pd.DataFrame([base, {**base, "folder": "again"}]))


def test_a_run_without_a_record_is_named_with_the_command_that_makes_it(no_records):
    missing = collapse.missing_runs({"every": None, "slow": record([90, 5])})
    assert missing["what"].tolist() == ["dual lr 3e-3, every epoch"]
    assert missing["command"].iloc[0].startswith("python -m paperlib.harness.run experiment=lenet5_collapse dataset=mnist")
    assert "target=[0.5,0.3,0.7,0.1] dual_lr=0.003 clamp_log_alpha=true epochs=14" in missing["command"].iloc[0]
    assert collapse.missing_runs({"slow": record([90, 5])}).empty
    with pytest.raises(FileNotFoundError, match="`python -m paperlib.harness.sweeps grids/table1_mnist.yaml`"):
        collapse.intro_numbers({"old": None, "control_old": record([90, 5])})


def test_the_introductions_and_the_experiments_numbers_as_the_page_prints_them():
    runs = {"old": record([90, 3.21, 33.64]), "control_old": record([90, 3.86, 12.8]),
            "fast": record([90, 32.9]), "fast_unclamped": record([90, 32.46]),
            "dual_1e3": record([90, *[2.0] * 9, 3, 53.84, 5.95]),
            "slow_clamped": record([90, *[2.0] * 9, 1.83, 1.5]), "slow": record([90, *[2.0] * 9, 1.9, 1.46]),
            "paper": record([90, *[2.0] * 9, 1.2, 0.77])}
    assert collapse.intro_numbers(runs) == {"table1_best": "3.2", "table1_final": "33.6",
                                            "control_best": "3.9", "control_final": "12.8"}
    numbers = collapse.experiment_numbers(runs)
    assert [numbers[name] for name in ("dual_1e3_peak", "dual_1e3_peak_epoch", "dual_1e3_final")] == [
        "53.8", "11", "5.95"]
    assert numbers["slow_below"] == "2.0"  # above the largest late error, 1.9, at one decimal
    assert numbers["fast_fc2_kept"] == "2 of 4" and numbers["fast_fc2_kept_pct"] == "50.0"
    assert numbers["fast_architecture"] == "9-12-192-7"


def test_the_control_numbers_as_the_page_prints_them():
    falling = {"conv1": [0.8] * 8 + [0.496] + [0.3] * 4, "conv2": [0.8] * 9 + [0.493] + [0.3] * 3,
               "fc1": [0.8] * 12 + [0.45], "fc2": [0.8] * 12 + [0.45]}
    train = [1.0] * 10 + [21.3, 1.0, 24.6]
    steps = [{"epoch": "1", "lambda_0": "7.2", "lambda_1": "8", "lambda_2": "9", "lambda_3": "10.4"}]
    old = record([90, 5, 4, 4, 4, 4, 4, 5, 6.7, 40, 88.65, 83.2, 88.64], densities=falling, train_errors=train,
                 steps=steps, target=0.2)
    slow_densities = {layer: [0.8] * 11 + [d] for layer, d in zip(LAYERS, (0.259, 0.338, 0.367, 0.345))}
    runs = {"control_old": old, "control_35": record([90, *[2.0] * 9, 65.7, 2.98], target=0.35),
            "control_slow": record([90, *[2.0] * 9, 2.05, 1.81], densities=slow_densities, target=0.2,
                                   val_error_best=1.05, multipliers_final=[0.73, 0.8, 0.85, 0.91]),
            "control_paper": None}
    with pytest.raises(FileNotFoundError, match="`python -m paperlib.harness.sweeps grids/lenet_control_paper.yaml`"):
        collapse.control_numbers(runs)  # the paper-protocol cell has no record yet
    on_target = {layer: [0.8, 0.2093 if layer == "conv1" else 0.2] for layer in LAYERS}
    runs["control_paper"] = record([90, 1.19], densities=on_target, target=0.2)
    numbers = collapse.control_numbers(runs)
    assert numbers["control_max_lambdas"] == "7 to 10"
    assert [numbers["control_error_8"], numbers["control_error_11"]] == ["6.7", "83"]
    assert (numbers["control_crossing_first"], numbers["control_crossing_last"]) == ("8", "12")
    assert [numbers[f"control_plateau_{part}"] for part in ("errors", "first", "last", "train")] == [
        "88.64 to 88.65", "10", "12", "21–25"]
    assert numbers["control_expected"] == "30.0 / 30.0 / 45.0 / 45.0" and numbers["control_kept"] == "50 / 50 / 50 / 50"
    assert [numbers["control_35_peak"], numbers["control_35_peak_epoch"]] == ["65.7", "10"]
    assert [numbers[f"control_slow_{part}"] for part in ("peak", "final", "best", "lambdas", "above")] == [
        "2.05", "1.81", "1.05", "0.73 to 0.91", "6 to 17"]
    assert [numbers[f"control_paper_{part}"] for part in ("final", "printed", "gap")] == ["1.19", "1.20 ± 0.08", "0.93"]


def test_the_unverified_numbers_say_how_far_the_paper_protocol_grid_is(no_records):
    numbers = collapse.unverified_numbers()
    assert numbers["paper_lenet_runs"] == "0"
    assert (numbers["lenet_control_paper_done"], numbers["lenet_control_paper_total"]) == ("0", "20")


def test_the_figures_leave_out_a_run_without_a_record():
    fast = record([90, 9, 30], densities={"fc2": [0.83, 0.6, 0.45]},
                  steps=[{"epoch": "0.5", "lambda_3": "1.0"}], medians={"0": {"fc2": [0.5, 0.5]}})
    runs = {"fast": fast, "fast_unclamped": None, "dual_1e3": None, "slow": None}
    fig = collapse.plot_descent(runs)
    assert fig.axes[0].lines[0].get_ydata().tolist() == pytest.approx([83, 60, 45])
    assert len(fig.axes[0].lines) == 4  # expected density, test-time circles, the 50% and 10% lines
    assert fig.axes[2].lines[0].get_ydata().tolist() == [9, 30]  # from epoch 1
    fig = collapse.plot_fc2_medians({"every": None, "slow": None, "paper": fast})
    assert fig.axes[0].texts[0].get_text() == "no record of dual lr 3e-3, every epoch"
    assert fig.axes[1].lines[0].get_xydata().tolist() == [[83.0, 100.0]]
    matplotlib.pyplot.close("all")
