"""Magnitude pruning (§5.5, App. J.7 structured; App. L unstructured)."""

import copy

import pytest
import torch
import torch.nn as nn

from paperlib.method.counting import count_params
from paperlib.paper.models import LayerFactory
from paperlib.paper.models import MLP, build_model, gated_layer_names
from paperlib.paper.pruning import (apply_weight_masks_, l1_filter_prune, magnitude_prune_unstructured, num_kept,
                              weight_masks)


def same_outputs(model_a: nn.Module, model_b: nn.Module, input_shape) -> bool:
    x = torch.randn(3, *input_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model_a.eval()(x), model_b.eval()(x)
    return bool((a - b).abs().max() <= 1e-5 * a.abs().max())


def test_prunable_layers_are_the_gated_ones():
    assert gated_layer_names("mlp") == ["fc1", "fc2", "fc3"]
    assert gated_layer_names("lenet5") == ["conv1", "conv2", "fc1", "fc2"]
    wrn = gated_layer_names("wrn-28-10")
    assert len(wrn) == 12 and wrn[0] == "stage1.0.conv1.conv"
    resnet50 = gated_layer_names("resnet50", sparsity="unstructured")
    assert len(resnet50) == 48
    assert resnet50[:3] == ["layer1.0.conv1.conv", "layer1.0.conv2.conv", "layer1.0.conv3.conv"]


def test_rounding_rule():
    assert num_kept(784, 0.3) == 235  # 235.2
    assert num_kept(4, 0.375) == 2  # 1.5 rounds half to even
    assert num_kept(4, 0.625) == 2  # 2.5 too
    assert num_kept(10, 0.0) == 1  # never a whole layer
    assert num_kept(10, 1.0) == 10


def test_l1_filter_prune_keeps_largest_input_neurons_of_a_small_mlp():
    model = MLP(num_classes=3, input_shape=(1, 2, 2), hidden=(5, 4), layers=LayerFactory(gated=False))
    with torch.no_grad():
        model.fc1.weight.copy_(torch.tensor([[1.0, -2, 0.5, 3], [-1, 4, 0.5, -1], [1, 4, 0, 3], [0, 0, 0, 0],
                                             [0, 0, 0, 0]]))
        model.fc2.weight.copy_(torch.tensor([[1.0, -3, 3, 1, 2], [-1, 3, -3, 1, 2], [0, 3, 3, 2, 2],
                                             [0, 0, 0, 0, 0]]))
    # L1 norms of the input neurons (the gated groups): fc1 [3, 10, 1, 7], fc2 [2, 9, 9, 4, 6].
    pruned = l1_filter_prune(model, [0.5, 0.4, 1.0], "mlp")

    # fc1 keeps round(0.5 * 4) = 2 pixels, norms 10 and 7; fc2 keeps round(0.4 * 5) = 2 hidden neurons, the 9s,
    # so fc1 keeps only the two rows feeding them.
    assert pruned.fc1_index.tolist() == [1, 3]
    assert torch.equal(pruned.fc1.weight, model.fc1.weight[[1, 2]][:, [1, 3]])
    assert torch.equal(pruned.fc1.bias, model.fc1.bias[[1, 2]])
    assert torch.equal(pruned.fc2.weight, model.fc2.weight[:, [1, 2]])
    assert torch.equal(pruned.fc3.weight, model.fc3.weight)

    masked = copy.deepcopy(model)
    with torch.no_grad():
        masked.fc1.weight[:, [0, 2]] = 0.0
        masked.fc2.weight[:, [0, 3, 4]] = 0.0
    assert same_outputs(masked, pruned, model.input_shape)
    assert not same_outputs(model, pruned, model.input_shape)


def test_l1_filter_prune_ties_keep_the_lower_index():
    model = MLP(num_classes=2, input_shape=(1, 1, 4), hidden=(3, 3), layers=LayerFactory(gated=False))
    with torch.no_grad():
        model.fc1.weight.copy_(torch.tensor([[1.0, 2, 2, 2]] * 3))
    assert l1_filter_prune(model, [0.5, 1.0, 1.0], "mlp").fc1_index.tolist() == [1, 2]


def masked_by_l1_norm(model: nn.Module, densities: list[float], model_name: str) -> nn.Module:
    """Reference: zero each prunable layer's smallest-L1 groups (a filter and its bias, or an input column)."""
    masked = copy.deepcopy(model)
    with torch.no_grad():
        for name, density in zip(gated_layer_names(model_name), densities):
            layer = masked.get_submodule(name)
            conv = isinstance(layer, nn.Conv2d)
            norms = layer.weight.abs().sum((1, 2, 3) if conv else 0)
            removed = torch.argsort(norms, descending=True)[num_kept(len(norms), density):]
            if conv:
                layer.weight[removed] = 0.0
                layer.bias[removed] = 0.0
            else:
                layer.weight[:, removed] = 0.0
    return masked


def test_l1_filter_prune_lenet5_removes_smallest_filters():
    torch.manual_seed(0)
    model = build_model("lenet5", gated=False)
    norms = torch.randperm(20).float() + 1.0
    signs = torch.sign(torch.randn(20, 1, 5, 5))
    with torch.no_grad():
        model.conv1.weight.copy_((norms / 25).view(20, 1, 1, 1) * signs)
    expected = torch.argsort(norms, descending=True)[:5].sort().values  # round(0.25 * 20) = 5 filters

    densities = [0.25, 0.5, 0.1, 0.3]
    pruned = l1_filter_prune(model, densities, "lenet5")
    assert torch.equal(pruned.conv1.weight, model.conv1.weight[expected])
    assert torch.equal(pruned.conv1.bias, model.conv1.bias[expected])
    assert (pruned.conv2.in_channels, pruned.conv2.out_channels) == (5, 25)
    assert pruned.fc1_index.numel() == pruned.fc1.in_features <= 80  # round(0.1 * 800), minus removed maps
    assert pruned.fc2.in_features == 150  # round(0.3 * 500)
    assert same_outputs(masked_by_l1_norm(model, densities, "lenet5"), pruned, model.input_shape)


def test_l1_filter_prune_resnet18_equals_gated_model_with_binary_gates():
    """With batch norm, the reference is the gated model whose gates are the kept (1) / removed (0) filters."""
    torch.manual_seed(0)
    dense = build_model("resnet18", gated=False)
    with torch.no_grad():
        for bn in (m for m in dense.modules() if isinstance(m, nn.BatchNorm2d)):
            bn.running_mean.normal_(0.0, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
            bn.bias.normal_(0.0, 0.2)
    pruned = l1_filter_prune(dense, 0.5, "resnet18")

    gated = build_model("resnet18", gated=True)
    gated.load_state_dict(dense.state_dict(), strict=False)
    with torch.no_grad():
        for name in gated_layer_names("resnet18"):
            layer = gated.get_submodule(name)
            norm = layer.weight.abs().sum((1, 2, 3))
            keep = torch.argsort(norm, descending=True)[:num_kept(len(norm), 0.5)]
            layer.weight_log_alpha.fill_(-5.0)[keep] = 5.0
    assert same_outputs(gated, pruned, (3, 32, 32))
    assert pruned.layer1[0].conv1.conv.out_channels == 32
    assert count_params(pruned) < count_params(dense)


def test_magnitude_prune_unstructured_keeps_top_weights_and_dense_biases():
    torch.manual_seed(0)
    dense = build_model("lenet5", gated=False)
    pruned = magnitude_prune_unstructured(dense, [0.01, 0.1, 0.05, 0.2], "lenet5")
    assert all(type(m) is type(d) for m, d in zip(pruned.modules(), dense.modules()))  # plain layers, same shapes

    expected_kept = {"conv1": 5, "conv2": 2500, "fc1": 20000, "fc2": 1000}  # round(density * size)
    for name, kept in expected_kept.items():
        original, weight = dense.get_submodule(name), pruned.get_submodule(name).weight
        assert int(weight.count_nonzero()) == kept
        magnitudes = original.weight.abs().flatten()
        assert torch.equal(weight.flatten() != 0, magnitudes >= magnitudes.topk(kept).values.min())
        assert torch.equal(weight[weight != 0], original.weight[weight != 0])
        assert torch.equal(pruned.get_submodule(name).bias, original.bias)
    biases = sum(pruned.get_submodule(name).bias.numel() for name in expected_kept)
    assert count_params(pruned, sparse_weights=True) == sum(expected_kept.values()) + biases


def test_weight_masks_keep_pruned_weights_at_zero_during_fine_tuning():
    torch.manual_seed(0)
    pruned = magnitude_prune_unstructured(build_model("mlp", gated=False), 0.1, "mlp")
    masks = weight_masks(pruned, "mlp")
    assert list(masks) == ["fc1", "fc2", "fc3"]
    before = copy.deepcopy(pruned)
    optimizer = torch.optim.SGD(pruned.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        pruned(torch.randn(8, 1, 28, 28)).logsumexp(1).mean().backward()
        optimizer.step()
        apply_weight_masks_(pruned, masks)
    for name, mask in masks.items():
        weight, old = pruned.get_submodule(name).weight, before.get_submodule(name).weight
        assert torch.equal(weight != 0, mask)
        assert not torch.equal(weight, old)  # the kept weights did train


def test_magnitude_prune_unstructured_touches_only_gated_layers_of_resnet18():
    torch.manual_seed(0)
    dense = build_model("resnet18", gated=False)
    pruned = magnitude_prune_unstructured(dense, 0.1, "resnet18")
    changed = {name for name, module in pruned.named_modules() if isinstance(module, (nn.Conv2d, nn.Linear))
               and not torch.equal(module.weight, dense.get_submodule(name).weight)}
    assert changed == set(gated_layer_names("resnet18"))
    conv = pruned.layer4[1].conv2.conv
    assert int(conv.weight.count_nonzero()) == round(0.1 * conv.weight.numel())


@pytest.mark.parametrize("prune", [l1_filter_prune, magnitude_prune_unstructured])
@pytest.mark.parametrize("density, message", [
    ([0.5, 0.5], r"density must be a float or a list of 3 floats.*list of 2"),
])
def test_bad_density_raises(prune, density, message):
    model = build_model("mlp", gated=False)
    with pytest.raises(ValueError, match=message):
        prune(model, density, "mlp")


def test_magnitude_prune_unstructured_of_a_channels_last_model_prunes_the_same_weights():
    """Conv models train in channels_last; pruning them keeps exactly the weights it keeps in NCHW."""
    torch.manual_seed(0)
    dense = build_model("lenet5")
    nchw = magnitude_prune_unstructured(dense, 0.1, "lenet5")
    last = magnitude_prune_unstructured(dense.to(memory_format=torch.channels_last), 0.1, "lenet5")
    for name in gated_layer_names("lenet5", sparsity="unstructured"):
        assert torch.equal(last.get_submodule(name).weight, nchw.get_submodule(name).weight)
