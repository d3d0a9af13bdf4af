"""Gated layers (paper §2 "Parameter grouping", App. B, App. L, eq. 13)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperlib.method import gates
from paperlib.method.layers import ConvBN, GatedConv2d, GatedLinear
from paperlib.paper.models import LayerFactory

LN11 = math.log(11.0)
THR = gates.BETA * LN11  # median is 0 below -THR and 1 above +THR


def _set_log_alpha(layer, seed=0):
    """Spread log_alpha so that medians are a mix of 0, fractional and 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.gate_parameters():
            p.copy_(torch.empty(p.shape).uniform_(-2 * THR, 2 * THR, generator=g))


def make_layer(kind, sparsity, bias=True, rho_init=0.5):
    torch.manual_seed(0)
    if kind == "linear":
        return GatedLinear(nn.Linear(5, 3, bias=bias), sparsity=sparsity, rho_init=rho_init)
    return GatedConv2d(nn.Conv2d(2, 4, 3, stride=1, padding=1, bias=bias), sparsity=sparsity, rho_init=rho_init)


LAYER_CASES = [(k, s, b) for k in ("linear", "conv") for s in ("structured", "unstructured") for b in (True, False)]


def _expected_counts(layer):
    """(num_sparsifiable, expected_active, expected_l2) computed by hand from App. B / eq. 8 / eq. 13."""
    P = lambda la: torch.sigmoid(la + gates.BETA * LN11)  # noqa: E731
    W, b = layer.weight, layer.bias
    if layer.sparsity == "unstructured":
        n = W.numel() + (0 if b is None else b.numel())
        active = P(layer.weight_log_alpha).sum()
        l2 = (P(layer.weight_log_alpha) * W ** 2).sum()
        if b is not None:
            active = active + P(layer.bias_log_alpha).sum()
            l2 = l2 + (P(layer.bias_log_alpha) * b ** 2).sum()
        return n, active, l2
    pj = P(layer.weight_log_alpha)
    if isinstance(layer, GatedLinear):
        # one gate per input neuron j, shared by the out_features weights W[:, j]; bias not gated, not counted
        n = layer.in_features * layer.out_features
        active = sum(pj[j] * layer.out_features for j in range(layer.in_features))
        l2 = sum(pj[j] * (W[:, j] ** 2).sum() for j in range(layer.in_features))
        if b is not None:
            l2 = l2 + (b ** 2).sum()
        return n, active, l2
    # conv: one gate per output channel c, shared by the filter W[c] and the bias b[c]
    per_group = W[0].numel() + (1 if b is not None else 0)
    n = layer.out_channels * per_group
    active = sum(pj[c] * per_group for c in range(layer.out_channels))
    l2 = sum(pj[c] * ((W[c] ** 2).sum() + (0 if b is None else b[c] ** 2)) for c in range(layer.out_channels))
    return n, active, l2


@pytest.mark.parametrize("kind,sparsity,bias", LAYER_CASES)
def test_counts_density_and_expected_l2(kind, sparsity, bias):
    layer = make_layer(kind, sparsity, bias)
    _set_log_alpha(layer)
    n, active, l2 = _expected_counts(layer)
    assert layer.num_sparsifiable_params == n
    torch.testing.assert_close(layer.expected_active_params(), active.to(torch.float32))
    torch.testing.assert_close(layer.density(), active / n)
    torch.testing.assert_close(layer.expected_l2(detach_gates=True), l2)
    torch.testing.assert_close(layer.expected_l2(detach_gates=False), l2)


def test_concrete_counts():
    # Structured linear 5 -> 3: 15 weights, bias excluded.
    assert make_layer("linear", "structured", True).num_sparsifiable_params == 15
    assert make_layer("linear", "structured", True).group_size == 3
    # Unstructured linear: weights + biases.
    assert make_layer("linear", "unstructured", True).num_sparsifiable_params == 18
    assert make_layer("linear", "unstructured", False).num_sparsifiable_params == 15
    # Structured conv 2 -> 4, 3x3: group = 2*9 (+1 bias) per output channel.
    assert make_layer("conv", "structured", True).num_sparsifiable_params == 4 * 19
    assert make_layer("conv", "structured", False).num_sparsifiable_params == 4 * 18
    assert make_layer("conv", "unstructured", True).num_sparsifiable_params == 72 + 4
    # Gate shapes: per input neuron / per output map / per entry.
    assert make_layer("linear", "structured").weight_log_alpha.shape == (5,)
    assert make_layer("conv", "structured").weight_log_alpha.shape == (4,)
    assert make_layer("linear", "unstructured").weight_log_alpha.shape == (3, 5)
    assert make_layer("linear", "unstructured").bias_log_alpha.shape == (3,)
    assert make_layer("conv", "structured").bias_log_alpha is None


def test_density_all_on_and_all_off():
    for kind, sparsity, bias in LAYER_CASES:
        layer = make_layer(kind, sparsity, bias)
        with torch.no_grad():
            for p in layer.gate_parameters():
                p.fill_(60.0)
        assert layer.density().item() == pytest.approx(1.0, abs=1e-6)
        with torch.no_grad():
            for p in layer.gate_parameters():
                p.fill_(-60.0)
        assert layer.density().item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("kind,sparsity,bias", LAYER_CASES)
def test_density_differentiable_in_log_alpha(kind, sparsity, bias):
    layer = make_layer(kind, sparsity, bias)
    layer.density().backward()
    for p in layer.gate_parameters():
        assert p.grad is not None and (p.grad > 0).all()
    assert layer.weight.grad is None


@pytest.mark.parametrize("kind,sparsity,bias", LAYER_CASES)
def test_expected_l2_detach_gates(kind, sparsity, bias):
    layer = make_layer(kind, sparsity, bias)
    _set_log_alpha(layer)
    layer.expected_l2(detach_gates=True).backward()
    for p in layer.gate_parameters():
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, "detached gates must get zero gradient (App. H.2)"
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    layer.zero_grad()
    layer.expected_l2(detach_gates=False).backward()
    for p in layer.gate_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0


def _reference_forward(layer, x, wz, bz):
    W = layer.weight * wz
    b = None if layer.bias is None else (layer.bias if bz is None else layer.bias * bz)
    if isinstance(layer, GatedLinear):
        return F.linear(x, W, b)
    return F.conv2d(x, W, b, layer.stride, layer.padding)


def _input(layer, batch=4):
    g = torch.Generator().manual_seed(3)
    if isinstance(layer, GatedLinear):
        return torch.randn(batch, layer.in_features, generator=g)
    return torch.randn(batch, layer.in_channels, 6, 6, generator=g)


def _broadcast(layer, z):
    if layer.sparsity == "unstructured":
        return z
    return z.view(1, -1) if isinstance(layer, GatedLinear) else z.view(-1, 1, 1, 1)


@pytest.mark.parametrize("kind,sparsity,bias", LAYER_CASES)
def test_eval_forward_uses_median_gates(kind, sparsity, bias):
    layer = make_layer(kind, sparsity, bias)
    _set_log_alpha(layer)
    layer.eval()
    x = _input(layer)
    med_w = gates.median_gates(layer.weight_log_alpha)
    assert (med_w == 0).any() and (med_w == 1).any() and ((med_w > 0) & (med_w < 1)).any()
    if sparsity == "unstructured":
        bz = None if layer.bias is None else gates.median_gates(layer.bias_log_alpha)
    else:
        bz = med_w if (kind == "conv" and bias) else None  # structured linear bias is never gated
    expected = _reference_forward(layer, x, _broadcast(layer, med_w), bz)
    with torch.no_grad():
        out = layer(x)
        out2 = layer(x)
    torch.testing.assert_close(out, expected)
    assert torch.equal(out, out2), "eval-mode forward must be deterministic"


@pytest.mark.parametrize("kind,sparsity,bias", LAYER_CASES)
def test_train_forward_draws_fresh_sample(kind, sparsity, bias):
    layer = make_layer(kind, sparsity, bias)  # log_alpha ~ 0: gates are fractional with high probability
    layer.train()
    x = _input(layer)
    outs = [layer(x).detach() for _ in range(3)]
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[1], outs[2])
    # The output is the forward pass with one reparametrised sample per gate (eq. 7),
    # weight gates drawn before bias gates.
    torch.manual_seed(11)
    out = layer(x)
    torch.manual_seed(11)
    wz = gates.sample_gates(layer.weight_log_alpha)
    if sparsity == "unstructured":
        bz = None if layer.bias is None else gates.sample_gates(layer.bias_log_alpha)
    else:
        bz = wz if (kind == "conv" and bias) else None
    torch.testing.assert_close(out, _reference_forward(layer, x, _broadcast(layer, wz), bz))
    # gradients reach both weights and gates through the sample
    out.pow(2).sum().backward()
    assert layer.weight.grad.abs().sum() > 0
    assert layer.weight_log_alpha.grad.abs().sum() > 0


def test_structured_linear_gate_zero_removes_input_neuron():
    layer = make_layer("linear", "structured", True)
    with torch.no_grad():
        layer.weight_log_alpha.copy_(torch.tensor([-30.0, 30.0, -30.0, 30.0, 30.0]))
    layer.eval()
    x = _input(layer)
    x2 = x.clone()
    x2[:, [0, 2]] = 1e3  # changing switched-off inputs must not change the output
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer(x2))


def test_structured_conv_gate_zero_zeroes_output_map_including_bias():
    layer = make_layer("conv", "structured", True)
    with torch.no_grad():
        layer.weight_log_alpha.copy_(torch.tensor([-30.0, 30.0, -30.0, 30.0]))
        layer.bias.fill_(0.5)
    for mode in (True, False):
        layer.train(mode)
        with torch.no_grad():
            out, mask = layer.forward_with_mask(_input(layer))
        assert torch.equal(mask, torch.tensor([False, True, False, True]))
        assert torch.count_nonzero(out[:, [0, 2]]) == 0
        assert torch.count_nonzero(out[:, [1, 3]]) > 0


def _convbn(bias=False):
    torch.manual_seed(0)
    conv = GatedConv2d(nn.Conv2d(3, 4, 3, padding=1, bias=bias), sparsity="structured")
    with torch.no_grad():
        # log_alpha = -/+30 make the training-mode sample deterministically 0 / 1
        # (|logit(u)| <= 13.8 because u is kept in [1e-6, 1 - 1e-6]).
        conv.weight_log_alpha.copy_(torch.tensor([-30.0, 30.0, -30.0, 30.0]))
    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.5, 0.7, 2.0, 1.1]))
        bn.bias.copy_(torch.tensor([0.3, -0.2, 0.9, 0.4]))  # non-zero shift: would leak from inactive channels
        bn.running_mean.copy_(torch.tensor([0.1, 0.2, 0.3, 0.4]))
        bn.running_var.copy_(torch.tensor([1.1, 1.2, 1.3, 1.4]))
    return ConvBN(conv, bn)


@pytest.mark.parametrize("bias", [False, True])
def test_convbn_training_masks_output_and_running_stats(bias):
    unit = _convbn(bias)
    unit.train()
    x = torch.randn(8, 3, 5, 5, generator=torch.Generator().manual_seed(5))
    old_mean, old_var = unit.bn.running_mean.clone(), unit.bn.running_var.clone()
    # reference: plain BN on the (gated) conv output, same starting statistics
    ref_bn = nn.BatchNorm2d(4)
    ref_bn.load_state_dict(unit.bn.state_dict())
    with torch.no_grad():
        conv_out, mask = unit.conv.forward_with_mask(x)
        ref = ref_bn(conv_out)
        out = unit(x)
    inactive, active = [0, 2], [1, 3]
    assert torch.equal(mask, torch.tensor([False, True, False, True]))
    assert torch.count_nonzero(out[:, inactive]) == 0, "BN output of switched-off channels must be zero"
    assert torch.count_nonzero(ref[:, inactive]) > 0  # plain BN would emit its shift there
    torch.testing.assert_close(out[:, active], ref[:, active])
    # Running statistics: untouched for inactive channels, usual momentum update for active ones.
    assert torch.equal(unit.bn.running_mean[inactive], old_mean[inactive])
    assert torch.equal(unit.bn.running_var[inactive], old_var[inactive])
    m = unit.bn.momentum
    batch_mean = conv_out.mean(dim=(0, 2, 3))
    batch_var = conv_out.var(dim=(0, 2, 3), unbiased=True)
    torch.testing.assert_close(unit.bn.running_mean[active], ((1 - m) * old_mean + m * batch_mean)[active])
    torch.testing.assert_close(unit.bn.running_var[active], ((1 - m) * old_var + m * batch_var)[active])
    assert not torch.allclose(unit.bn.running_mean[active], old_mean[active])


def test_convbn_matches_batchnorm_with_cumulative_momentum():
    """ConvBN must accept any nn.BatchNorm2d, including momentum=None (cumulative moving average)."""
    unit = _convbn()
    unit.bn.momentum = None
    unit.train()
    ref_bn = nn.BatchNorm2d(4, momentum=None)
    ref_bn.load_state_dict(unit.bn.state_dict())
    active, inactive = [1, 3], [0, 2]
    old_mean, old_var = unit.bn.running_mean.clone(), unit.bn.running_var.clone()
    for seed in (0, 1, 2):
        x = torch.randn(8, 3, 5, 5, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            ref = ref_bn(unit.conv(x))
            try:
                out = unit(x)
            except TypeError as err:
                pytest.fail(f"BUG paperlib.method.layers.ConvBN: training forward fails for a BatchNorm2d with "
                            f"momentum=None ({err}); F.batch_norm is called with bn.momentum directly")
        torch.testing.assert_close(out[:, active], ref[:, active])
    assert int(unit.bn.num_batches_tracked) == 3, (
        "BUG paperlib.method.layers.ConvBN: num_batches_tracked is not incremented in training mode")
    torch.testing.assert_close(unit.bn.running_mean[active], ref_bn.running_mean[active])
    torch.testing.assert_close(unit.bn.running_var[active], ref_bn.running_var[active])
    assert torch.equal(unit.bn.running_mean[inactive], old_mean[inactive])
    assert torch.equal(unit.bn.running_var[inactive], old_var[inactive])


def test_convbn_eval_masks_output():
    unit = _convbn()
    unit.eval()
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        out = unit(x)
        ref = unit.bn(unit.conv(x))
    assert torch.count_nonzero(out[:, [0, 2]]) == 0
    torch.testing.assert_close(out[:, [1, 3]], ref[:, [1, 3]])


def test_convbn_dense_conv_is_plain_conv_bn():
    torch.manual_seed(0)
    conv, bn = nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
    unit = ConvBN(conv, bn).eval()
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(unit(x), bn(conv(x)))


@pytest.mark.parametrize("bad", ["Structured", "channel", "", None])
def test_bad_sparsity_string_raises(bad):
    with pytest.raises(ValueError, match="sparsity"):
        GatedLinear(nn.Linear(4, 3), sparsity=bad)
    with pytest.raises(ValueError, match="sparsity"):
        GatedConv2d(nn.Conv2d(2, 3, 3), sparsity=bad)
    with pytest.raises(ValueError, match="sparsity"):
        LayerFactory(sparsity=bad).linear(4, 3)


def test_factory_builds_gated_or_dense_layers():
    gated = LayerFactory(gated=True, sparsity="unstructured", rho_init=0.2)
    assert isinstance(gated.linear(4, 3), GatedLinear) and gated.linear(4, 3).sparsity == "unstructured"
    assert isinstance(gated.conv(2, 3, 3), GatedConv2d)
    assert type(gated.dense.linear(4, 3)) is nn.Linear
    assert type(gated.dense.conv(2, 3, 3)) is nn.Conv2d
    unit = gated.conv_bn(2, 3, 3, stride=2)
    assert isinstance(unit, ConvBN) and unit.conv.bias is None
    assert unit(torch.randn(1, 2, 5, 5)).shape == (1, 3, 3, 3)  # "same" padding, stride 2


def test_a_per_layer_rho_init_overrides_the_factorys():
    """The MLP's input layer starts at rho_init 0.2, the others at the configured value (App. A.2)."""
    def density(factory, **override):
        torch.manual_seed(0)
        return factory.linear(50, 4, **override).density().item()

    overridden = density(LayerFactory(rho_init=0.5), rho_init=0.2)
    assert overridden == density(LayerFactory(rho_init=0.2))
    assert overridden != density(LayerFactory(rho_init=0.5))


@pytest.mark.parametrize("init, fan", [("fan_in", 1200), ("fan_out", 300)])
def test_gated_linear_weights_are_he_normal_over_the_chosen_fan_divided_by_one_minus_rho(init, fan):
    """std = sqrt(2 / fan) / (1 - rho_init): fan-in by default, fan-out as the authors' code (errata)."""
    torch.manual_seed(0)
    layer = LayerFactory(rho_init=0.2, linear_init=init).linear(1200, 300)
    assert layer.weight.std().item() == pytest.approx(math.sqrt(2 / fan) / 0.8, rel=0.01)
    assert layer.weight.mean().item() == pytest.approx(0.0, abs=1e-3)


def test_linear_init_reaches_gated_linear_layers_only():
    """The authors' plain linear layers and all convolutions use fan-in whatever their gated linear layers use."""
    factory = LayerFactory(rho_init=0.2, linear_init="fan_out")
    torch.manual_seed(0)
    assert factory.linear(1200, 300).weight.std().item() == pytest.approx(math.sqrt(2 / 300) / 0.8, rel=0.01)
    torch.manual_seed(0)
    assert factory.dense.linear(1200, 300).weight.std().item() == pytest.approx(math.sqrt(2 / 1200), rel=0.01)
    torch.manual_seed(0)
    conv = factory.conv(200, 20, 5)  # fan-in 200 * 25 = 5000, fan-out 20 * 25 = 500
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / 5000) / 0.8, rel=0.02)
    with pytest.raises(ValueError, match="fan_in"):
        LayerFactory(linear_init="xavier").linear(4, 3)


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.7])
def test_gate_initialisation_follows_rho_init(rho):
    torch.manual_seed(0)
    layer = GatedLinear(nn.Linear(400, 50), sparsity="structured", rho_init=rho)
    la = layer.weight_log_alpha.detach()
    assert la.mean().item() == pytest.approx(math.log((1 - rho) / rho), abs=5e-3)
    assert la.std().item() == pytest.approx(1e-2, rel=0.2)
    assert layer.density().item() == pytest.approx(gates.initial_density(rho), abs=1e-3)


def test_clamp_log_alpha_on_layer():
    layer = make_layer("linear", "unstructured", True)
    with torch.no_grad():
        layer.weight_log_alpha.fill_(20.0)
        layer.bias_log_alpha.fill_(-20.0)
    layer.clamp_log_alpha_()
    assert torch.allclose(layer.weight_log_alpha, torch.tensor(math.log(100.0)))
    assert torch.allclose(layer.bias_log_alpha, torch.tensor(math.log(0.01)))


@pytest.mark.parametrize("options", [
    dict(kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    dict(kernel_size=3, padding="same", groups=4, padding_mode="reflect"),  # depthwise
    dict(kernel_size=(1, 3), padding=(0, 1), padding_mode="circular", bias=False),
])
@pytest.mark.parametrize("sparsity", ["structured", "unstructured"])
def test_gated_conv2d_takes_the_arguments_of_conv2d(options, sparsity):
    """With its median gates absorbed, a GatedConv2d is the nn.Conv2d of the same arguments."""
    torch.manual_seed(0)
    layer = GatedConv2d(nn.Conv2d(4, 4, **options), sparsity=sparsity).eval()
    plain = nn.Conv2d(4, 4, **options)
    weight, bias = layer.gated_weight_and_bias(median=True)
    with torch.no_grad():
        plain.weight.copy_(weight)
        if bias is not None:
            plain.bias.copy_(bias)
    x = torch.randn(2, 4, 7, 9)
    assert layer.weight.shape == plain.weight.shape
    assert torch.allclose(layer(x), plain(x), atol=1e-6)
    assert layer.group_size == plain.weight[0].numel() + (plain.bias is not None)


@pytest.mark.parametrize("sparsity", ["structured", "unstructured"])
def test_a_gated_layer_takes_the_plain_layers_weight_and_bias_as_its_own(sparsity):
    """The same tensors, under the plain layer's names, the gates added beside them: one gate per input feature or
    output channel (structured), or per entry."""
    torch.manual_seed(0)
    linear, conv = nn.Linear(5, 3), nn.Conv2d(2, 4, 3)
    gated_linear, gated_conv = GatedLinear(linear, sparsity), GatedConv2d(conv, sparsity=sparsity)
    for plain, gated, groups in ((linear, gated_linear, 5), (conv, gated_conv, 4)):
        assert gated.weight is plain.weight and gated.bias is plain.bias
        gates_added = ["weight_log_alpha"] + (["bias_log_alpha"] if sparsity == "unstructured" else [])
        assert list(gated.state_dict()) == list(plain.state_dict()) + gates_added
        assert gated.weight_log_alpha.shape == ((groups,) if sparsity == "structured" else plain.weight.shape)
        x = torch.randn(2, 2, 6, 6) if plain is conv else torch.randn(2, 5)
        with torch.no_grad():
            gated.weight_log_alpha.fill_(30.0)  # every median gate exactly 1: the plain layer's output
            if gated.bias_log_alpha is not None:
                gated.bias_log_alpha.fill_(30.0)
            assert torch.equal(gated.eval()(x), plain(x))


def test_every_gated_layer_starts_at_the_one_rho_init_default():
    """GatedLinear, GatedConv2d, sparsify and the paper's models: log_alpha ~ N(log((1 - RHO_INIT) / RHO_INIT), 0.01^2)."""
    from paperlib.method.sparsify import sparsify
    from paperlib.paper.models import build_model

    torch.manual_seed(0)
    centre = math.log((1 - gates.RHO_INIT) / gates.RHO_INIT)
    layers = [GatedLinear(nn.Linear(400, 2)), GatedConv2d(nn.Conv2d(2, 400, 1)),
              *[m for m in sparsify(nn.Sequential(nn.Linear(400, 3), nn.ReLU(), nn.Linear(3, 2))).modules()
                if isinstance(m, GatedLinear)][:1], build_model("mlp").fc1]
    for layer in layers:
        assert layer.weight_log_alpha.detach().mean().item() == pytest.approx(centre, abs=3e-3)


def test_a_checkpoints_l0conv2d_loads_as_a_gated_conv2d_that_convolves_alike():
    """Checkpoints pickle the model; those written before the one family name L0Conv2d and L0Linear and hold the old
    attributes (int geometry, ``_padding_repeated``, no ``bn``): they load as the new classes, with the same outputs."""
    from paperlib.method import layers

    torch.manual_seed(0)
    layer = GatedConv2d(nn.Conv2d(3, 4, 3, stride=2, padding=1)).eval()
    old = {k: v for k, v in layer.__dict__.items()
           if k not in ("bn", "bn_name", "output_padding", "_reversed_padding_repeated_twice")}
    old.update(kernel_size=3, stride=2, padding=1, dilation=1, _padding_repeated=(1, 1, 1, 1))
    restored = layers.L0Conv2d.__new__(layers.L0Conv2d)
    restored.__setstate__(old)
    x = torch.randn(2, 3, 8, 8)
    assert isinstance(restored, GatedConv2d) and layers.L0Linear is GatedLinear
    assert torch.equal(restored(x), layer(x)) and repr(restored) == repr(layer)


def test_a_copied_gated_convolution_keeps_its_batch_norm_and_computes_the_same():
    """A deepcopy (what purge makes first) goes through __setstate__: its defaults for old checkpoints must not hide
    the batch norm the layer took in."""
    import copy

    layer = GatedConv2d(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).eval()
    with torch.no_grad():
        layer.bn.running_mean.normal_()
        layer.bn.weight.normal_()
    twin = copy.deepcopy(layer)
    assert isinstance(twin.bn, nn.BatchNorm2d) and twin.bn is not layer.bn
    x = torch.randn(2, 3, 9, 9)
    torch.testing.assert_close(twin(x), layer(x))
