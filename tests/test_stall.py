"""ConstrainedStep warns when a constraint has stalled (issue 51, item 3): its multiplier at zero and its density
more than ``stall_margin`` under its target for ``stall_steps`` steps, once per constraint."""

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperlib.method.constrained import ConstrainedStep, weight_parameters
from paperlib.method.gates import initial_density
from paperlib.paper.models import LayerFactory


def _model():
    """Two gated layers whose gates start at an expected density of 35.5% (rho_init 0.9, eq. 11)."""
    torch.manual_seed(0)
    layers = LayerFactory(rho_init=0.9)
    return nn.Sequential(layers.linear(6, 8), nn.ReLU(), layers.linear(8, 3))


def _roll(step, model, steps: int) -> list:
    """Warnings issued over ``steps`` steps (gates frozen by a tiny learning rate: the densities stay put)."""
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            step.roll(lambda: F.cross_entropy(model(x), y))
    return [w for w in caught if issubclass(w.category, UserWarning)]


def _step(model, target, **extra):
    return ConstrainedStep(model, torch.optim.SGD(weight_parameters(model), lr=1e-3), target=target, gates_lr=1e-9,
                           dual_lr=0.1, **extra)


def test_a_target_far_above_the_density_warns_once_after_stall_steps():
    assert initial_density(0.9) == pytest.approx(0.355, abs=1e-3)
    model = _model()
    step = _step(model, 0.9, stall_steps=100)
    assert _roll(step, model, 99) == []
    caught = _roll(step, model, 401)  # steps 100 to 500: warned at the first check, then never again
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller's roll
    assert (step.multipliers == 0).all()


def test_a_binding_target_or_one_within_the_margin_never_warns():
    model = _model()
    density = 100 * initial_density(0.9)
    for target, margin in ((0.2, 0.03), ((density + 2) / 100, 0.03), ((density + 4) / 100, 0.05)):
        assert _roll(_step(model, target, stall_steps=50, stall_margin=margin), model, 300) == [], target


def test_layer_wise_each_stalled_constraint_warns_once_and_names_its_layer():
    model = _model()
    step = _step(model, [0.9, 0.2], stall_steps=50)
    caught = _roll(step, model, 300)
    assert len(caught) == 1 and "layer 0" in str(caught[0].message) and step.multipliers[1] > 0
    step = _step(model, [0.9, 0.9], stall_steps=50)
    caught = sorted(str(c.message) for c in _roll(step, model, 300))
    assert len(caught) == 2 and "layer 0" in caught[0] and "layer 2" in caught[1]


def test_stall_steps_none_never_warns_and_bad_settings_are_refused():
    model = _model()
    assert _roll(_step(model, 0.9, stall_steps=None), model, 300) == []
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="stall_steps"):
            _step(model, 0.9, stall_steps=bad)
    with pytest.raises(ValueError, match="stall_margin"):
        _step(model, 0.9, stall_margin=-0.1)
