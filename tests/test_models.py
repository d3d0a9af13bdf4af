"""The paper's architectures (App. J): builders, gated-layer counts, densities."""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperlib.method.layers import GatedConv2d, GatedLinear, L0Layer
from paperlib.paper.models import (MLP, MODEL_NAMES, build_model, gate_counts, gated_layer_names, gated_layers,
                             layer_densities, memory_format, model_density)

# Number of sparsifiable layers (App. J.3-J.6) and output classes of the paired dataset.
EXPECTED = {
    "mlp": dict(gated=3, classes=10, input=(1, 28, 28), params=266_000, kind=GatedLinear),
    "lenet5": dict(gated=4, classes=10, input=(1, 28, 28), params=431_000, kind=None),
    "wrn-28-10": dict(gated=12, classes=10, input=(3, 32, 32), params=36_500_000, kind=GatedConv2d),
    "resnet18": dict(gated=16, classes=200, input=(3, 64, 64), params=11_300_000, kind=GatedConv2d),
    "resnet50": dict(gated=48, classes=1000, input=(3, 224, 224), params=25_500_000, kind=GatedConv2d),
}

_CACHE: dict = {}


def get(name, gated=True):
    key = (name, gated)
    if key not in _CACHE:
        torch.manual_seed(0)
        _CACHE[key] = build_model(name, gated=gated)
    return _CACHE[key]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_model_names():
    assert set(MODEL_NAMES) == set(EXPECTED)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_gated_layer_count(name):
    model = get(name)
    layers = gated_layers(model)
    assert len(layers) == EXPECTED[name]["gated"]
    kind = EXPECTED[name]["kind"]
    if kind is not None:
        assert all(isinstance(layer, kind) for layer in layers)
    else:  # LeNet5: two convs then two linear layers, in forward order
        assert [type(layer) for layer in layers] == [GatedConv2d, GatedConv2d, GatedLinear, GatedLinear]
    assert all(layer.sparsity == "structured" for layer in layers)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_shape(name):
    model = get(name)
    assert tuple(model.input_shape) == EXPECTED[name]["input"]
    x = torch.randn(2, *model.input_shape)
    model.eval()
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, EXPECTED[name]["classes"])
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", ["mlp", "lenet5", "resnet18"])
def test_train_mode_forward_and_backward(name):
    model = get(name)
    model.train()
    x = torch.randn(2, *model.input_shape)
    y = model(x)
    y.pow(2).mean().backward()
    for layer in gated_layers(model):
        assert layer.weight_log_alpha.grad is not None
    model.zero_grad(set_to_none=True)
    model.eval()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_dense_variant(name):
    gated, dense = get(name, True), get(name, False)
    assert not any(isinstance(m, L0Layer) for m in dense.modules())
    assert gated_layers(dense) == []
    n_gates = sum(p.numel() for layer in gated_layers(gated) for p in layer.gate_parameters())
    assert n_params(dense) == n_params(gated) - n_gates
    # Parameter counts of App. J.1 (Table 5), rounded there.
    assert n_params(dense) == pytest.approx(EXPECTED[name]["params"], rel=0.005)
    x = torch.randn(2, *dense.input_shape)
    dense.eval()
    with torch.no_grad():
        assert dense(x).shape == (2, EXPECTED[name]["classes"])


def test_exact_small_model_param_counts():
    # 784-300-100-10 and LeNet5 (20, 50 maps, 800-500-10), weights + biases.
    assert n_params(get("mlp", False)) == 784 * 300 + 300 + 300 * 100 + 100 + 100 * 10 + 10
    assert n_params(get("lenet5", False)) == (20 * 25 + 20) + (50 * 20 * 25 + 50) + (800 * 500 + 500) + (500 * 10 + 10)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_density_is_parameter_weighted_mean(name):
    model = get(name)
    layers = gated_layers(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in layers:  # heterogeneous layer densities
            layer.weight_log_alpha.uniform_(-4, 4, generator=g)
    sizes = torch.tensor([float(layer.num_sparsifiable_params) for layer in layers], dtype=torch.float64)
    dens = layer_densities(model)
    assert dens.shape == (len(layers),)
    torch.testing.assert_close(dens, torch.stack([layer.density() for layer in layers]))
    weighted = (dens.double() * sizes).sum() / sizes.sum()
    md = model_density(model)
    assert md.dim() == 0
    assert md.item() == pytest.approx(weighted.item(), rel=1e-5)
    # differs from the unweighted mean whenever group sizes differ
    if len(set(sizes.tolist())) > 1:
        assert abs(md.item() - dens.mean().item()) > 1e-4
    # both differentiable in log_alpha
    for fn in (lambda: model_density(model), lambda: layer_densities(model).sum()):
        model.zero_grad(set_to_none=True)
        fn().backward()
        for layer in layers:
            assert layer.weight_log_alpha.grad is not None
            assert (layer.weight_log_alpha.grad > 0).all()
    model.zero_grad(set_to_none=True)


def test_initial_model_density_matches_rho_init():
    from paperlib.method.gates import initial_density

    for rho in (0.05, 0.3, 0.5):
        torch.manual_seed(0)
        m = build_model("lenet5", rho_init=rho)
        assert model_density(m).item() == pytest.approx(initial_density(rho), abs=1e-3)


def test_model_density_requires_gated_layers():
    with pytest.raises(ValueError):
        model_density(get("mlp", False))


def test_unknown_model_name():
    with pytest.raises(ValueError) as info:
        build_model("resnet34")
    msg = str(info.value)
    assert "resnet34" in msg
    for name in MODEL_NAMES:
        assert name in msg


def test_build_model_passes_options():
    m = build_model("mlp", num_classes=7, sparsity="unstructured", rho_init=0.2)
    assert all(layer.sparsity == "unstructured" for layer in gated_layers(m))
    assert m(torch.randn(2, 1, 28, 28)).shape == (2, 7)
    assert len(gated_layers(build_model("wrn-16-1"))) == 6  # wrn-D-W: (D - 4) / 6 blocks per stage


def test_tiny_mlp():
    m = MLP(hidden=(8, 4), input_shape=(1, 4, 4))
    layers = gated_layers(m)
    assert [(lay.in_features, lay.out_features) for lay in layers] == [(16, 8), (8, 4), (4, 10)]
    assert m(torch.randn(2, 1, 4, 4)).shape == (2, 10)
    assert isinstance(m, nn.Module)


def test_resnet50_is_torchvisions_resnet50():
    """Our dense ResNet50 computes exactly what torchvision's does with the same (renamed) weights."""
    import torchvision

    from paperlib.paper.models import build_model, from_torchvision_resnet

    torch.manual_seed(0)
    reference = torchvision.models.resnet50(weights=None).eval()
    for module in reference.modules():  # non-trivial batch-norm statistics
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    ours = build_model("resnet50", gated=False).eval()
    ours.load_state_dict(from_torchvision_resnet(reference.state_dict()))
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, layout", [("mlp", torch.contiguous_format), ("lenet5", torch.channels_last),
                                          ("wrn-16-1", torch.channels_last)])
def test_memory_format_is_channels_last_for_conv_models(name, layout):
    assert memory_format(build_model(name, gated=True)) == layout


@pytest.mark.parametrize("name", ["lenet5", "wrn-16-1"])
@pytest.mark.parametrize("sparsity", ["structured", "unstructured"])
def test_a_channels_last_model_trains_in_channels_last_from_its_first_convolution(name, sparsity):
    """Every convolution and pooling output of a training step is laid out channels_last.

    LeNet5's input and first weight have one channel, so NCHW and channels_last
    describe them equally; its unstructured gated weight came out NCHW and made
    the first convolution and pooling run in the slower layout (an unstructured
    LeNet5 step took 1.6x a structured one on one CPU thread).
    """
    torch.manual_seed(0)
    model = build_model(name, gated=True, sparsity=sparsity).to(memory_format=torch.channels_last).train()
    layouts = {}

    def record(module_name):
        def hook(module, inputs, output):
            layouts[module_name] = output.dim() == 4 and output.stride(1) == 1 and output.shape[1] > 1
        return hook

    for module_name, module in model.named_modules():
        if isinstance(module, (GatedConv2d, nn.Conv2d, nn.MaxPool2d)):
            module.register_forward_hook(record(module_name))
    channels = 1 if name == "lenet5" else 3
    size = 28 if name == "lenet5" else 32
    model(torch.randn(4, channels, size, size).contiguous(memory_format=torch.channels_last))
    assert layouts and all(layouts.values()), [module for module, last in layouts.items() if not last]


@pytest.mark.parametrize("sparsity", ["structured", "unstructured"])
def test_a_channels_last_training_step_matches_nchw_up_to_rounding(sparsity):
    """Same weights, same gate noise, same batch: the two layouts agree to float rounding."""
    torch.manual_seed(0)
    nchw = build_model("lenet5", gated=True, sparsity=sparsity)
    last = copy.deepcopy(nchw).to(memory_format=torch.channels_last)
    assert last.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(32, 1, 28, 28)
    y = torch.randint(0, 10, (32,))
    grads = []
    for model, batch in ((nchw, x), (last, x.contiguous(memory_format=torch.channels_last))):
        torch.manual_seed(1)  # the same gate samples
        loss = F.cross_entropy(model(batch), y)
        loss.backward()
        grads.append((loss.detach(), [p.grad.contiguous() for p in model.parameters()]))
    (loss_a, grads_a), (loss_b, grads_b) = grads
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gate_counts_are_the_channels_or_neurons_each_gated_layer_switches():
    model = build_model("wrn-16-1", 10)
    independent = {name: (module.weight.shape[0] if isinstance(module, GatedConv2d) else module.weight.shape[1])
                   for name, module in model.named_modules() if isinstance(module, L0Layer)}
    assert gate_counts("wrn-16-1") == independent
    assert list(independent.values()) == [16, 16, 32, 32, 64, 64]
    assert gate_counts("lenet5") == {"conv1": 20, "conv2": 50, "fc1": 800, "fc2": 500}
    assert gated_layer_names("lenet5") == ["conv1", "conv2", "fc1", "fc2"]


def test_the_paper_models_draw_their_initial_tensors_in_the_order_the_records_drew_them():
    """Layer after layer: the He-normal weight, the N(0, 0.01^2) bias, the gates' N(log((1 - rho) / rho), 0.01^2), then
    the weights divided by 1 - rho (a structured linear layer's bias not). Replayed from the same seed with torch's own
    draws, the gated LeNet5 is equal bit for bit, under the same names in the same order: the committed records' runs
    and their checkpoints stay reproducible."""
    rho = 0.3
    torch.manual_seed(0)
    state = build_model("lenet5", gated=True, rho_init=rho, linear_init="fan_out").state_dict()
    torch.manual_seed(0)
    expected = {}
    for name, shape, conv in (("conv1", (20, 1, 5, 5), True), ("conv2", (50, 20, 5, 5), True),
                              ("fc1", (500, 800), False), ("fc2", (10, 500), False)):
        weight, bias = torch.empty(shape), torch.empty(shape[0])
        nn.init.kaiming_normal_(weight, mode="fan_in" if conv else "fan_out")
        bias.normal_(0.0, 1e-2)
        log_alpha = torch.empty(shape[0 if conv else 1]).normal_(math.log((1 - rho) / rho), 1e-2)
        expected.update({f"{name}.weight": weight / (1 - rho), f"{name}.bias": bias / (1 - rho) if conv else bias,
                         f"{name}.weight_log_alpha": log_alpha})
    assert list(state) == list(expected)
    for key, tensor in expected.items():
        assert torch.equal(state[key], tensor), key


def test_a_wide_resnet_block_keeps_the_state_dict_names_its_checkpoints_have():
    """A gated convolution sits in its ConvBN unit as ``conv``, its gates beside its weight: the names under which
    the trainings' checkpoints were saved."""
    with torch.device("meta"):
        state = build_model("wrn-16-1").state_dict()
    assert [k for k in state if k.startswith("stage1.0.")] == [
        "stage1.0.bn1.weight", "stage1.0.bn1.bias", "stage1.0.bn1.running_mean", "stage1.0.bn1.running_var",
        "stage1.0.bn1.num_batches_tracked", "stage1.0.conv1.conv.weight", "stage1.0.conv1.conv.weight_log_alpha",
        "stage1.0.conv1.bn.weight", "stage1.0.conv1.bn.bias", "stage1.0.conv1.bn.running_mean",
        "stage1.0.conv1.bn.running_var", "stage1.0.conv1.bn.num_batches_tracked", "stage1.0.conv2.weight"]
