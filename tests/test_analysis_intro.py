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
