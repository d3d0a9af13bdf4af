"""analysis.dynamics: the dual-restarts figure's runs and the gate medians, as numbers, on records made here."""

import pytest

from analysis import dynamics


def run(target, restarts, densities, error=1.5):
    """A record whose logged model density takes these values, one per step."""
    return {"metrics": {"val_error_final": error}, "params": {"target": target, "dual_restarts": restarts},
            "steps": [{"epoch": str(i), "l0_density": str(d), "lambda_0": "0"} for i, d in enumerate(densities)]}


def test_with_restarts_the_highest_density_after_first_reaching_the_target_is_the_bounce():
    row = dynamics.restarts_rows([run(0.3, True, [0.9, 0.5, 0.29, 0.31, 0.305])]).iloc[0]
    assert row["restarts"] == "✓" and row[["final (%)", "highest after target (%)", "error (%)"]].tolist() == \
        pytest.approx([30.5, 31.0, 1.5])


def test_without_restarts_the_lowest_and_a_run_never_feasible_its_last_density():
    rows = dynamics.restarts_rows([run(0.3, False, [0.9, 0.29, 0.21, 0.24]), run(0.5, False, [0.9, 0.6, 0.55])])
    assert rows["lowest after target (%)"].tolist() == pytest.approx([21.0, 55.0])
    assert rows["restarts"].tolist() == ["✗", "✗"]


def test_the_runs_come_by_target_with_restarts_first_and_are_drawn_alike():
    runs = [run(0.5, False, [0.4]), run(0.3, False, [0.2]), run(0.5, True, [0.5]), run(0.3, True, [0.3])]
    rows = dynamics.restarts_rows(runs)
    assert rows[["target (%)", "restarts"]].values.tolist() == [[30.0, "✓"], [30.0, "✗"], [50.0, "✓"], [50.0, "✗"]]
    fig = dynamics.plot_restarts(runs)
    styles = [line.get_linestyle() for line in fig.axes[0].lines[:4]]
    assert styles == ["--", "--", "-", "-"] and fig.get_size_inches()[0] <= 7


def test_the_fractional_share_counts_medians_strictly_between_0_and_1():
    record = {"params": {"model": "mlp"}, "gate_medians": {"0": {"fc1": [0.5] * 4}, "40": {"fc1": [0, 1, 0.3, 1]}}}
    assert dynamics.fractional_rows([record]).values.tolist() == [["mlp", "fc1", 25.0]]
