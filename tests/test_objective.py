"""Constrained and penalized objectives (eq. 2, 4, 5, 6; App. B, C; eq. 13)."""

import pytest
import torch
import torch.nn as nn

from paperlib.method.gate_pass import ModelGates
from paperlib.method.layers import ConvBN, L0Layer
from paperlib.paper.models import MLP, LayerFactory, gated_layers, layer_densities, model_density
from paperlib.method.lagrangian import AugmentedLagrangian, GradientAscent, NuPIMultipliers, dual_optimizer
from paperlib.method.objective import (
    ConstrainedObjective,
    PenalizedObjective,
    augmented_lagrangian_term,
    linear_term,
    num_groups,
    parameter_groups,
)


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    model = MLP(hidden=(8, 4), input_shape=(1, 4, 4))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in gated_layers(model):  # heterogeneous densities
            layer.weight_log_alpha.uniform_(-2, 3, generator=g)
    return model


def test_grouping_shapes(mlp):
    assert num_groups(mlp, "model") == 1
    assert num_groups(mlp, "layer") == 3
    with pytest.raises(ValueError, match="grouping"):
        ConstrainedObjective(mlp, 0.5, grouping="global")


def test_scalar_vs_per_layer_targets(mlp):
    obj = ConstrainedObjective(mlp, 0.5, grouping="model")
    assert torch.equal(obj.target, torch.tensor([0.5]))
    assert obj.multipliers.value.shape == (1,)
    obj = ConstrainedObjective(mlp, 0.4, grouping="layer")
    assert torch.equal(obj.target, torch.tensor([0.4, 0.4, 0.4]))
    obj = ConstrainedObjective(mlp, [0.5, 0.3, 0.7], grouping="layer")
    torch.testing.assert_close(obj.target, torch.tensor([0.5, 0.3, 0.7]))
    assert torch.equal(obj.multipliers.value, torch.zeros(3))


@pytest.mark.parametrize("targets,grouping,expected_len", [([0.5, 0.3], "layer", 3), ([0.5, 0.3, 0.7, 0.1], "layer", 3),
                                                           ([0.5, 0.5], "model", 1)])
def test_wrong_length_targets(mlp, targets, grouping, expected_len):
    with pytest.raises(ValueError) as info:
        ConstrainedObjective(mlp, targets, grouping=grouping)
    msg = str(info.value)
    assert "target density" in msg
    assert str(expected_len) in msg


def test_terms_in_the_densities(mlp):
    """The Lagrangian's term sum_g lambda_g (d_g - eps_g) (eq. 4), the penalty's sum_g lambda_pen_g d_g, and the
    augmented Lagrangian's, whose gradient in d_g is the multiplier after a projected ascent step of size rho."""
    obj = ConstrainedObjective(mlp, [0.9, 0.5, 0.2], grouping="layer")
    obj.multipliers.value = torch.tensor([0.7, 0.2, 1.3])
    d = torch.tensor([0.8, 0.6, 0.1], requires_grad=True)
    assert obj.term is linear_term and obj.term_args()[0] is obj.multipliers.value  # constants, current values
    torch.testing.assert_close(obj.term(d, *obj.term_args()), torch.tensor(0.7 * -0.1 + 0.2 * 0.1 + 1.3 * -0.1))
    pen = PenalizedObjective(mlp, [0.1, 2.0, 0.0], grouping="layer")
    torch.testing.assert_close(pen.term(d, *pen.term_args()), torch.tensor(0.1 * 0.8 + 2.0 * 0.6))
    al = ConstrainedObjective(mlp, [0.9, 0.5, 0.2], grouping="layer", dual_optimizer=AugmentedLagrangian(rho=2.0))
    al.multipliers.value = torch.tensor([0.7, 0.2, 0.1])
    value = al.term(d, *al.term_args())
    lam_next = torch.clamp(al.multipliers.value + 2.0 * (d.detach() - al.target), min=0)  # (0.5, 0.4, 0)
    torch.testing.assert_close(value, ((lam_next ** 2 - al.multipliers.value ** 2) / 4).sum())
    torch.testing.assert_close(torch.autograd.grad(value, d)[0], lam_next)
    d64, lam64, eps64 = d.detach().double(), al.multipliers.value.double() + 1, al.target.double()
    small = augmented_lagrangian_term(d64, lam64, eps64, 1e-6)  # rho -> 0: the Lagrangian's term
    torch.testing.assert_close(small, linear_term(d64, lam64, eps64), atol=1e-6, rtol=0)


def test_dual_optimizer_choices(mlp):
    nupi = ConstrainedObjective(mlp, 0.5, dual_optimizer=dual_optimizer("nupi", 0.1, restarts=False, kp=3.0))
    assert isinstance(nupi.multipliers, NuPIMultipliers) and nupi.multipliers.kp == 3.0
    with pytest.raises(ValueError, match="dual_restarts=False"):
        dual_optimizer("nupi", 0.1)
    with pytest.raises(ValueError, match="dual_optimizer must be one of"):
        dual_optimizer("adam", 0.1, restarts=False)
    with pytest.raises(TypeError, match="dual_optimizer must be a GradientAscent, NuPI or AugmentedLagrangian"):
        ConstrainedObjective(mlp, 0.5, dual_optimizer="nupi")


@pytest.mark.parametrize("restarts", [True, False])
def test_dual_step(mlp, restarts):
    # densities at init are heterogeneous; the first group is feasible for target 0.99
    dens0 = layer_densities(mlp).detach()
    targets = [0.99, float(dens0[1]) - 0.2, float(dens0[2]) - 0.1]
    obj = ConstrainedObjective(mlp, targets, grouping="layer", dual_optimizer=GradientAscent(0.5, restarts=restarts))
    dens = layer_densities(mlp)
    viol = dens.detach() - obj.target
    assert viol[0] < 0 and (viol[1:] > 0).all()
    out = obj.dual_step(dens)
    expected = torch.clamp(0.5 * viol, min=0.0)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(obj.multipliers.value, expected)
    # second step with a synthetic density: group 1 becomes feasible
    lam1 = obj.multipliers.value.clone()
    dens2 = obj.target + torch.tensor([0.05, -0.01, 0.02])
    obj.dual_step(dens2)
    viol2 = dens2 - obj.target
    expected2 = torch.clamp(lam1 + 0.5 * viol2, min=0.0)
    if restarts:
        expected2 = torch.where(viol2 > 0, expected2, torch.zeros_like(expected2))
        assert obj.multipliers.value[1] == 0
    else:
        assert obj.multipliers.value[1] > 0
    torch.testing.assert_close(obj.multipliers.value, expected2)


def test_dual_step_accepts_graph_tensor(mlp):
    obj = ConstrainedObjective(mlp, 0.1, dual_optimizer=GradientAscent(1.0))
    dens = model_density(mlp).reshape(1)
    assert dens.requires_grad
    obj.dual_step(dens)
    torch.testing.assert_close(obj.multipliers.value, (dens.detach() - 0.1).clamp(min=0))


def test_constrained_state_dict_round_trip(mlp):
    obj = ConstrainedObjective(mlp, [0.1, 0.2, 0.3], grouping="layer", dual_optimizer=GradientAscent(0.3, restarts=False))
    obj.dual_step(layer_densities(mlp))
    other = ConstrainedObjective(mlp, [0.1, 0.2, 0.3], grouping="layer", dual_optimizer=GradientAscent(0.01, restarts=True))
    other.load_state_dict(obj.state_dict())
    assert torch.equal(other.multipliers.value, obj.multipliers.value)
    assert other.multipliers.lr == 0.3 and other.multipliers.dual_restarts is False


def test_constrained_training_reaches_target(mlp):
    """A few hundred GDA steps on the gates alone drive the model density to the target."""
    obj = ConstrainedObjective(mlp, 0.5, grouping="model", dual_optimizer=GradientAscent(0.05, restarts=True))
    gates = ModelGates(mlp, "model", weight_decay=0.0)
    gate_params = [p for layer in gated_layers(mlp) for p in layer.gate_parameters()]
    opt = torch.optim.SGD(gate_params, lr=0.5)
    assert model_density(mlp).item() > 0.6
    for _ in range(400):
        opt.zero_grad()
        gate_pass = gates.sample(obj.term, obj.term_args())
        gate_pass.density_term.backward()  # no task loss: only the constraint acts
        opt.step()
        obj.dual_step(gate_pass.densities)
    assert model_density(mlp).item() <= 0.5 + 1e-3
    assert model_density(mlp).item() >= 0.45  # no strong overshoot with restarts


def test_penalized_validation(mlp):
    obj = PenalizedObjective(mlp, 0.3, grouping="model")
    assert obj.dual_step(model_density(mlp).reshape(1)) is None
    assert obj.state_dict() == {}
    with pytest.raises(ValueError, match="lambda_pen"):
        PenalizedObjective(mlp, [0.1, 0.2], grouping="layer")


def test_parameter_groups_partition():
    torch.manual_seed(0)
    model = nn.Sequential(
        LayerFactory(rho_init=0.5).linear(6, 5),
        nn.Linear(5, 4),
        LayerFactory(sparsity="unstructured", rho_init=0.5).linear(4, 3),
        ConvBN(LayerFactory(rho_init=0.5).conv(3, 4, 3, bias=False), nn.BatchNorm2d(4)),
        ConvBN(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)),
    )
    gated_w, other, gate_params = parameter_groups(model)
    all_ids = [id(p) for p in model.parameters()]
    got = [id(p) for p in gated_w + other + gate_params]
    assert sorted(got) == sorted(all_ids), "every parameter exactly once"
    assert len(set(got)) == len(got)
    l0 = [m for m in model.modules() if isinstance(m, L0Layer)]
    assert {id(p) for p in gate_params} == {id(p) for m in l0 for p in m.gate_parameters()}
    assert len(gate_params) == 4  # structured linear: 1, unstructured linear: 2, conv: 1
    assert {id(p) for p in gated_w} == {id(p) for m in l0 for p in (m.weight, m.bias) if p is not None}
    dense = [model[1].weight, model[1].bias, model[3].bn.weight, model[3].bn.bias, model[4].conv.weight,
             model[4].conv.bias, model[4].bn.weight, model[4].bn.bias]
    assert {id(p) for p in other} == {id(p) for p in dense}


def test_parameter_groups_on_tiny_mlp(mlp):
    gated_w, other, gate_params = parameter_groups(mlp)
    assert other == []
    assert len(gate_params) == 3 and len(gated_w) == 6
    assert sum(p.numel() for p in gated_w + other + gate_params) == sum(p.numel() for p in mlp.parameters())
