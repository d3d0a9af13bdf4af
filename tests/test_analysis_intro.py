import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis import comparison, intro


def _point(models, kind, setting, paper, ours, grouping="model", outcome=None, gap=float("nan")):
    return {"models": models, "kind": kind, "setting": setting, "paper": paper, "ours": ours, "grouping": grouping,
            "outcome": outcome, "gap": gap}


def _points():
    return pd.DataFrame([
        _point("MNIST, MLP", "target", 20.0, 23.0, 20.5, outcome="on target", gap=0.5),
        _point("CIFAR-10, WideResNet", "target", 80.0, 80.1, 71.0, grouping="layer", outcome="under", gap=-27.0),
        _point("MNIST, MLP", "lmbda", 0.01, 90.0, 92.0),
    ])


def test_the_constrained_panel_plots_the_rules_gap_and_the_penalized_one_the_density():
    """Ours: the gap of the constraint furthest from its target (a layer-wise row's worst layer, -27 here, not
    its model density's -9); the paper's: its model density minus the target."""
    fig = intro.plot_central_claim(_points())
    left, right = fig.axes[:2]
    plotted = {ax: np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
               for ax in (left, right)}
    assert np.allclose(sorted(map(tuple, plotted[left].tolist())), [(20, 0.5), (20, 3.0), (80, -27.0), (80, 0.1)])
    assert sorted(plotted[right][:, 1].tolist()) == [90.0, 92.0]
    assert right.get_xscale() == "log"
    plt.close(fig)  # a figure left open is checked by the next page test of this process


def test_settings_and_cells_are_read_from_the_tables_labels():
    assert intro._setting("20%") == ("target", 20.0)
    assert intro._setting("λ_pen 0.001") == ("lmbda", 0.001)
    assert np.isnan(comparison.mean_of(float("nan"))) and comparison.mean_of("1.50 ± 0.04") == 1.5


def test_the_sentences_numbers_count_binding_rows_on_target_by_the_rule():
    points = pd.concat([_points(), pd.DataFrame([
        _point("MNIST, MLP", "target", 50.0, 52.0, 52.5, grouping="layer", outcome="violated", gap=2.5),
        _point("MNIST, LeNet5", "target", 80.0, 80.0, 70.0, outcome="does not bind", gap=-10.0),
        _point("MNIST, LeNet5", "lmbda", 0.01, 80.0, 61.0)])])
    numbers = intro.central_claim_numbers(points)
    assert (numbers["mnist_on_target"], numbers["mnist_binding"]) == ("1", "2")  # the free row is left out
    assert (numbers["mnist_layer_on_target"], numbers["mnist_layer_binding"]) == ("0", "1")
    assert (numbers["mnist_violated"], numbers["mnist_violated_paper_over"]) == ("1", "1")
    assert (numbers["mnist_lowest"], numbers["mnist_highest"]) == ("-10.0", "+2.5")
    assert (numbers["cifar_on_target"], numbers["cifar_binding"], numbers["cifar_lowest"]) == ("0", "1", "-27.0")
    assert (numbers["penalty_spread"], numbers["penalty_spread_at"]) == ("31", "0.01")


def test_compute_spent_counts_runs_and_hours_per_device_in_the_order_the_index_meets_them():
    frame = pd.DataFrame({"device": ["GPU", "CPU", "GPU"], "wall_time_s": [3600.0, 1800.0, 5400.0]})
    assert intro.compute_spent(frame).to_dict("records") == [
        {"device": "GPU (one H100, shared by runs)", "runs": 2, "hours of training": "2.5"},
        {"device": "CPU core (one thread)", "runs": 1, "hours of training": "0.5"}]
