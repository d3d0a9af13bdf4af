import numpy as np
import pandas as pd

from analysis import intro


def _points():
    return pd.DataFrame([
        {"models": "MNIST, MLP", "kind": "target", "setting": 20.0, "paper": 23.0, "ours": 20.5},
        {"models": "CIFAR-10, WideResNet", "kind": "target", "setting": 80.0, "paper": 80.1, "ours": 71.0},
        {"models": "MNIST, MLP", "kind": "lmbda", "setting": 0.01, "paper": 90.0, "ours": 92.0},
    ])


def test_the_constrained_panel_plots_the_distance_to_the_target_and_the_penalized_one_the_density():
    fig = intro.plot_central_claim(_points())
    left, right = fig.axes[:2]
    plotted = {ax: np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
               for ax in (left, right)}
    assert np.allclose(sorted(map(tuple, plotted[left].tolist())), [(20, 0.5), (20, 3.0), (80, -9.0), (80, 0.1)])
    assert sorted(plotted[right][:, 1].tolist()) == [90.0, 92.0]
    assert right.get_xscale() == "log"


def test_settings_are_read_from_the_tables_labels():
    assert intro._setting("20%") == ("target", 20.0)
    assert intro._setting("λ_pen 0.001") == ("lmbda", 0.001)
    assert np.isnan(intro._mean(float("nan"))) and intro._mean("1.50 ± 0.04") == 1.5


def test_the_sentences_numbers_count_rows_within_a_point_and_the_largest_gaps():
    points = pd.concat([_points(), pd.DataFrame([
        {"models": "MNIST, MLP", "kind": "target", "setting": 50.0, "paper": 50.0, "ours": 52.5},
        {"models": "MNIST, LeNet5", "kind": "lmbda", "setting": 0.01, "paper": 80.0, "ours": 61.0}])])
    numbers = intro.central_claim_numbers(points)
    assert (numbers["mnist_within"], numbers["mnist_rows"]) == ("1", "2")
    assert (numbers["mnist_lowest"], numbers["mnist_highest"]) == ("+0.5", "+2.5")
    assert (numbers["cifar_within"], numbers["cifar_furthest_under"]) == ("0", "9.0")
    assert numbers["mnist_furthest_under"] == "0.0"  # every MNIST row ends over its target here
    assert (numbers["penalty_spread"], numbers["penalty_spread_at"]) == ("31", "0.01")
