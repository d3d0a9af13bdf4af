"""One pass over every gate of a model per step (paperlib.method.gate_pass): the same numbers as the layers' own."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperlib.method import gates
from paperlib.method.gate_pass import ModelGates, gate_pass
from paperlib.method.layers import ConvBN, closed_channel_stats_kept
from paperlib.paper.models import LayerFactory
from paperlib.paper.models import gated_layers, layer_densities, model_density
from paperlib.method.objective import linear_term


class Mixed(nn.Module):
    """Every kind of gated layer: structured and unstructured convolutions and linear layers."""

    def __init__(self):
        super().__init__()
        structured, unstructured = LayerFactory(rho_init=0.5), LayerFactory(sparsity="unstructured", rho_init=0.5)
        self.block1 = structured.conv_bn(3, 6, 3)
        self.conv2 = unstructured.conv(6, 4, 3)
        self.fc1 = unstructured.linear(4 * 4 * 4, 5)
        self.fc2 = structured.linear(5, 3)

    def forward(self, x):
        x = F.relu(self.block1(x))
        x = F.relu(self.conv2(x))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


@pytest.fixture
def mixed():
    torch.manual_seed(0)
    model = Mixed()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in gated_layers(model):  # heterogeneous gates, a few of them closed in every sample
            for p in layer.gate_parameters():
                p.uniform_(-4, 3, generator=g)
    return model.train()


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 3, (4,), generator=g)


def test_one_draw_gives_every_layer_its_own_sample(mixed):
    """The pass's single draw is the layers' own draws, in forward order: the gated parameters are bit-identical."""
    torch.manual_seed(7)
    own = [layer.forward_params(*layer.gate_tensors(median=False)) for layer in gated_layers(mixed)]
    torch.manual_seed(7)
    gate_pass = ModelGates(mixed, "layer", weight_decay=0.0).sample(linear_term, (torch.zeros(4), torch.zeros(4)))
    for mine, theirs in zip(gate_pass.forward_params, own):
        for a, b in zip(mine, theirs):
            assert (a is None and b is None) or torch.equal(a, b)
    # ... and the forward with the pass installed is the forward in which each layer samples itself
    x, _ = _batch()
    reference = Mixed()
    reference.load_state_dict(mixed.state_dict())
    gates_ = ModelGates(mixed, "layer", weight_decay=0.0)
    torch.manual_seed(3)
    with gates_.installed(gates_.sample(linear_term, (torch.zeros(4), torch.zeros(4)))):
        with_pass = mixed(x)
    torch.manual_seed(3)
    assert torch.equal(with_pass, reference.train()(x))
    assert torch.equal(mixed.block1.bn.running_mean, reference.block1.bn.running_mean)
    assert torch.equal(mixed.block1.bn.running_var, reference.block1.bn.running_var)


def test_densities_and_expected_l2(mixed):
    """Densities equal the layers' (eq. 3); the L2 term is 0.5 wd sum_j P(z_j != 0) theta_j^2 (eq. 13) by hand."""
    wd = 5e-4
    for detach in (True, False):
        gate_pass = ModelGates(mixed, "layer", wd, detach).sample(linear_term, (torch.zeros(4), torch.zeros(4)))
        assert torch.equal(gate_pass.layer_densities, layer_densities(mixed))
        assert torch.equal(gate_pass.model_density, model_density(mixed))
        assert torch.equal(gate_pass.densities, gate_pass.layer_densities)
        prob = lambda la: torch.sigmoid(la - (2 / 3) * math.log(0.1 / 1.1))  # eq. 8: log_alpha - beta log(-gamma / zeta)
        b1, c2, f1, f2 = gated_layers(mixed)
        by_hand = ((prob(b1.weight_log_alpha).view(-1, 1, 1, 1) * b1.weight ** 2).sum()  # no bias
                   + (prob(c2.weight_log_alpha) * c2.weight ** 2).sum() + (prob(c2.bias_log_alpha) * c2.bias ** 2).sum()
                   + (prob(f1.weight_log_alpha) * f1.weight ** 2).sum() + (prob(f1.bias_log_alpha) * f1.bias ** 2).sum()
                   + (prob(f2.weight_log_alpha).view(1, -1) * f2.weight ** 2).sum() + (f2.bias ** 2).sum())
        torch.testing.assert_close(gate_pass.l2_penalty, 0.5 * wd * by_hand)
        # detached (App. H.2): weight decay sends no gradient to the gates
        grads = torch.autograd.grad(gate_pass.l2_penalty, [f2.weight_log_alpha, f2.weight], allow_unused=True)
        assert (grads[0] is None) == detach and grads[1].abs().sum() > 0
    model_wise = ModelGates(mixed, "model", 0.0).sample(linear_term, (torch.zeros(1), torch.zeros(1)))
    assert model_wise.l2_penalty.item() == 0.0
    assert torch.equal(model_wise.densities, model_density(mixed).reshape(1))


@pytest.mark.parametrize("grouping", ["model", "layer"])
def test_density_term_value_and_gradient(mixed, grouping):
    """sum_g c_g (d_g - o_g), and its gradient in log_alpha is sum_g c_g grad d_g (eq. 4)."""
    c = torch.tensor([0.7]) if grouping == "model" else torch.tensor([0.7, 0.2, 1.3, 0.0])
    o = torch.full_like(c, 0.4)
    gate_pass = ModelGates(mixed, grouping, 0.0).sample(linear_term, (c, o))
    torch.testing.assert_close(gate_pass.density_term, torch.sum(c * (gate_pass.densities - o)))
    params = [p for layer in gated_layers(mixed) for p in layer.gate_parameters()]
    term = torch.autograd.grad(gate_pass.density_term, params, retain_graph=True)
    each = [torch.autograd.grad(gate_pass.densities[g], params, retain_graph=True) for g in range(len(c))]
    for k, grad in enumerate(term):
        torch.testing.assert_close(grad, sum(c[g] * each[g][k] for g in range(len(c))))
    assert sum(g.abs().sum() for g in term) > 0


def test_closed_channels_keep_their_running_statistics():
    """Open channels update like a plain batch norm; closed ones keep their statistics exactly."""
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(5)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    plain = nn.BatchNorm2d(5)
    plain.load_state_dict(bn.state_dict())
    before = bn.running_mean.clone(), bn.running_var.clone()
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])
    x = torch.randn(4, 5, 3, 3) * mask.view(1, -1, 1, 1)  # closed channels' inputs are zero
    with closed_channel_stats_kept([bn], [mask]):
        out = bn(x)
    expected = plain(x)
    assert torch.equal(out, expected)
    open_, closed = mask.bool(), ~mask.bool()
    for stat, reference, old in zip((bn.running_mean, bn.running_var), (plain.running_mean, plain.running_var), before):
        assert torch.equal(stat[open_], reference[open_])
        assert torch.equal(stat[closed], old[closed])
        assert not torch.equal(reference[closed], old[closed])  # a plain update would have moved them
    out.sum().backward()  # the statistics were written without breaking autograd's saved tensors


def test_compiled_pass_agrees_with_eager(mixed):
    """torch.compile changes the order of float operations only: values and gradients agree to rounding."""
    c, o = torch.tensor([0.7, 0.2, 1.3, 0.5]), torch.full((4,), 0.3)
    results = []
    for compile_ in (False, True):
        model = Mixed()
        model.load_state_dict(mixed.state_dict())
        gates_ = ModelGates(model.train(), "layer", 5e-4, compile=compile_)
        x, y = _batch()
        torch.manual_seed(5)
        gate_pass = gates_.sample(linear_term, (c, o))
        with gates_.installed(gate_pass):
            objective = F.cross_entropy(model(x), y) + gate_pass.l2_penalty + gate_pass.density_term
        objective.backward()
        results.append((objective.detach(), gate_pass.densities.detach(),
                        [p.grad for p in model.parameters()], model.block1.bn.running_var.clone()))
    (obj_e, dens_e, grads_e, var_e), (obj_c, dens_c, grads_c, var_c) = results
    torch.testing.assert_close(obj_c, obj_e)
    torch.testing.assert_close(dens_c, dens_e)
    torch.testing.assert_close(var_c, var_e)
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b)


def test_errors_say_what_is_wrong(mixed):
    with pytest.raises(ValueError, match="no gated layers"):
        ModelGates(nn.Linear(3, 2), "model", 0.0)
    with pytest.raises(ValueError, match="weight_decay"):
        ModelGates(mixed, "model", -1e-4)


def test_uniform_noise_is_eq7():
    """sample_gates with given noise is eq. 7 applied to that noise."""
    log_alpha, u = torch.tensor([-1.0, 0.0, 2.5]), torch.tensor([0.1, 0.5, 0.9])
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / gates.BETA)
    expected = torch.clamp(s * (gates.ZETA - gates.GAMMA) + gates.GAMMA, 0, 1)
    torch.testing.assert_close(gates.sample_gates(log_alpha, uniform=u), expected)
    assert gate_pass  # the function ModelGates compiles is importable on its own
