"""Purging (App. D, App. L): the purged model computes what the gated model computes with median gates.

Gates are set through ``log_alpha``: the median of eq. 9 is exactly 0 for
log_alpha <= -beta ln 11 (about -1.60), exactly 1 for log_alpha >= beta ln 11
and fractional in between, so every layer below gets the three kinds of groups.
Batch-norm statistics and affine parameters are randomised too, so that a
removed channel whose batch-norm shift leaked through would show.
"""

import copy
import math
import warnings

import pytest
import torch
import torch.nn as nn
from fake_models import randomise_batch_norms_, run_without_paperlib

from paperlib.method.counting import count_macs, count_params
from paperlib.method.gates import BETA, median_gates
from paperlib.method.layers import GatedConv2d, L0Layer
from paperlib.paper.models import LeNet5, build_model, gated_layers
from paperlib.paper.purge import keep_first, pruned_architecture, purge, purge_groups

OFF, ON = -5.0, 5.0  # log_alpha values whose median gate is exactly 0 and exactly 1
BOUND = BETA * math.log(11.0)  # |log_alpha| below this: fractional median
PLAIN_MODULES = (nn.Linear, nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Flatten,
                 nn.Identity, nn.Sequential, nn.Module)

# name, input shape used in the test, layers switched entirely off in the "collapsed" case
ARCHITECTURES = [
    ("mlp", (1, 28, 28), ["fc1"]),
    ("mlp", (1, 28, 28), ["fc2"]),
    ("lenet5", (1, 28, 28), ["conv1"]),
    ("lenet5", (1, 28, 28), ["fc1"]),
    ("wrn-28-10", (3, 32, 32), ["stage2.0.conv1.conv"]),
    # conv1 off: conv2 sees zeros but bn2 still adds its shift; conv2 off: the branch is exactly zero.
    ("resnet18", (3, 32, 32), ["layer2.0.conv1.conv", "layer3.1.conv2.conv"]),
    ("resnet50", (3, 64, 64), ["layer1.1.conv2.conv", "layer3.0.conv3.conv"]),
]


def set_random_gates_(model: nn.Module, off_layers=(), seed: int = 0) -> None:
    """A third of each layer's gates at median 0, a third at 1, a third fractional; ``off_layers`` all 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, layer in model.named_modules():
            if not isinstance(layer, L0Layer):
                continue
            for log_alpha in layer.gate_parameters():
                kind = (torch.randperm(log_alpha.numel(), generator=generator) % 3).view(log_alpha.shape)
                fractional = torch.empty(log_alpha.shape).uniform_(-0.9 * BOUND, 0.9 * BOUND, generator=generator)
                values = torch.where(kind == 0, OFF, torch.where(kind == 1, ON, fractional))
                log_alpha.copy_(torch.full_like(values, OFF) if name in off_layers else values)


def assert_same_outputs(model_a: nn.Module, model_b: nn.Module, input_shape, batch: int = 3) -> torch.Tensor:
    x = torch.randn(batch, *input_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = model_a.eval()(x), model_b.eval()(x)
    scale = a.abs().max()
    assert scale > 0
    assert (a - b).abs().max() <= 1e-5 * scale
    return a


def dense_params(model: nn.Module) -> int:
    """Parameters of the model without its gates."""
    return sum(p.numel() for name, p in model.named_parameters() if "log_alpha" not in name)


@pytest.fixture(scope="module")
def gated_models():
    torch.manual_seed(0)
    models = {name: build_model(name, gated=True) for name in dict.fromkeys(a[0] for a in ARCHITECTURES)}
    for model in models.values():
        randomise_batch_norms_(model)
    return models


@pytest.mark.parametrize("collapse", [False, True], ids=["mixed", "collapsed"])
@pytest.mark.parametrize("name, input_shape, off_layers", ARCHITECTURES,
                         ids=[f"{name}-{'+'.join(off)}" for name, _, off in ARCHITECTURES])
def test_purged_model_matches_gated_model(gated_models, name, input_shape, off_layers, collapse):
    model = gated_models[name]
    set_random_gates_(model, off_layers if collapse else ())
    purged = purge(model)

    assert isinstance(purged, torch.fx.GraphModule)
    assert all(type(m) in PLAIN_MODULES for m in list(purged.modules())[1:])
    assert (purged.input_shape, purged.num_classes) == (model.input_shape, model.num_classes)
    output = assert_same_outputs(model, purged, input_shape)
    if collapse and name in ("mlp", "lenet5"):  # a layer outputs its bias only: the model is constant
        assert torch.allclose(output, output[0].expand_as(output))

    # Every gated layer keeps its non-zero groups (a collapsed one keeps a single zero placeholder).
    kept = [max(1, int(layer.group_gate_values().count_nonzero())) for layer in gated_layers(model)]
    widths = _purged_widths(model, purged)
    if name != "lenet5":  # LeNet5's fc1 also loses the features of removed channels: checked below
        assert widths == kept
    assert count_params(purged) < dense_params(model)


def _purged_widths(model: nn.Module, purged: nn.Module) -> list[int]:
    """Width of each gated layer's counterpart (same name) along its gated dimension."""
    return [purged.get_submodule(name).out_channels if isinstance(layer, GatedConv2d)
            else purged.get_submodule(name).in_features for name, layer in model.named_modules()
            if isinstance(layer, L0Layer)]


def test_mlp_and_lenet5_purged_shapes_and_parameter_counts(gated_models):
    # MLP 784-300-100-10: fc_i keeps k_i inputs, so fc1 is k1 x k2, fc2 is k2 x k3, fc3 is k3 x 10.
    mlp = gated_models["mlp"]
    set_random_gates_(mlp, seed=3)
    k1, k2, k3 = [int(layer.group_gate_values().count_nonzero()) for layer in gated_layers(mlp)]
    purged = purge(mlp)
    assert pruned_architecture(mlp) == [k1, k2, k3]
    assert purged.fc1_index.tolist() == mlp.fc1.group_gate_values().nonzero().flatten().tolist()  # read pixels
    assert count_params(purged) == (k1 * k2 + k2) + (k2 * k3 + k3) + (k3 * 10 + 10)

    # LeNet5: conv1 keeps c1 maps, conv2 c2; fc1 reads f1 features of the kept maps (4 x 4 each); fc2 k4 inputs.
    lenet = gated_models["lenet5"]
    set_random_gates_(lenet, seed=3)
    conv1, conv2, fc1, fc2 = [layer.group_gate_values() != 0 for layer in gated_layers(lenet)]
    c1, c2, k4 = int(conv1.sum()), int(conv2.sum()), int(fc2.sum())
    f1 = int((fc1 & conv2.repeat_interleave(16)).sum())
    assert f1 < int(fc1.sum())  # some features with an open gate belong to removed maps
    purged = purge(lenet)
    assert pruned_architecture(lenet) == [c1, c2, f1, k4]
    assert (purged.conv2.in_channels, purged.conv2.out_channels, purged.fc1.in_features) == (c1, c2, f1)
    assert count_params(purged) == (c1 * 25 + c1) + (c2 * c1 * 25 + c2) + (f1 * k4 + k4) + (k4 * 10 + 10)


def test_fractional_gates_are_absorbed_into_weights_and_conv_bias():
    model = LeNet5()
    with torch.no_grad():
        for layer in gated_layers(model):
            layer.weight_log_alpha.fill_(ON)
        model.conv1.weight_log_alpha[3] = 0.0  # median 0.5
        model.fc2.weight_log_alpha[7] = 0.0
    purged = purge(model)
    assert torch.equal(purged.conv1.weight[3], 0.5 * model.conv1.weight[3])
    assert torch.equal(purged.conv1.bias[3], 0.5 * model.conv1.bias[3])
    assert torch.equal(purged.fc2.weight[:, 7], 0.5 * model.fc2.weight[:, 7])
    assert torch.equal(purged.fc2.bias, model.fc2.bias)  # the bias of a structured linear layer has no gate
    assert torch.equal(purged.conv2.weight, model.conv2.weight)


def test_pruned_architecture_on_hand_made_gates():
    mlp = build_model("mlp", gated=True)
    lenet = build_model("lenet5", gated=True)
    with torch.no_grad():
        for layer, kept in zip(gated_layers(mlp), (198, 233, 100)):
            layer.weight_log_alpha.fill_(OFF)[:kept] = 0.5  # fractional, non-zero gates count as kept
        conv1, conv2, fc1, fc2 = (layer.weight_log_alpha for layer in gated_layers(lenet))
        conv1.fill_(OFF)[:7] = ON
        conv2.fill_(OFF)[[0, 3, 10]] = ON
        # fc1 reads 50 maps of 4 x 4: map c owns features 16c .. 16c + 15.
        fc1.fill_(OFF)[0:5] = ON  # map 0 (kept): 5 features
        fc1[16:32] = ON  # map 1 (removed): none
        fc1[48:64] = ON  # map 3 (kept): 16 features
        fc2.fill_(OFF)[:407] = ON
    assert pruned_architecture(mlp) == [198, 233, 100]
    assert pruned_architecture(lenet) == [7, 3, 21, 407]
    purged = purge(lenet)
    assert purged.fc1_index.tolist() == [0, 1, 2, 3, 4] + list(range(16, 32))  # map 3 is the 2nd kept map
    assert purged.conv2.out_channels == 3  # map 10 stays, although fc1 reads none of its features (the paper's rule)
    with torch.no_grad():
        fc2.fill_(OFF)
    assert pruned_architecture(lenet) == [7, 3, 21, 0]


@pytest.mark.parametrize("kept", [(20, 50, 800, 500), (20, 21, 34, 407), (20, 42, 89, 500), (3, 1, 16, 1)])
def test_keep_first_counts_a_lenet5_architecture_as_a_closed_form_does(kept):
    c1, c2, f1, f2 = kept
    # conv1 5x5 on 28x28 -> 24x24, pool -> 12x12; conv2 5x5 -> 8x8, pool -> 4x4; fc1 reads f1 of 16 * c2 features.
    params = c1 * (25 + 1) + c2 * (c1 * 25 + 1) + f2 * (f1 + 1) + 10 * (f2 + 1)
    plain_macs = c1 * 24 * 24 * 25 + c2 * 8 * 8 * c1 * 25 + f1 * f2 + f2 * 10
    purged = keep_first("lenet5", list(kept))
    assert count_params(purged) == params
    assert count_macs(purged, (1, 28, 28), "plain") == plain_macs


def test_keep_first_counts_an_mlp_architecture_as_a_closed_form_does():
    purged = keep_first("mlp", [198, 233, 100])  # Table 1's constrained model-wise MLP
    assert count_params(purged) == 233 * (198 + 1) + 100 * (233 + 1) + 10 * (100 + 1)


def test_keep_first_says_what_does_not_fit():
    with pytest.raises(ValueError, match="lenet5 has 4 gated layers"):
        keep_first("lenet5", [20, 50, 800])
    with pytest.raises(ValueError, match="has 50 groups; cannot keep 51"):
        keep_first("lenet5", [20, 51, 800, 500])


def test_dense_shortcut_stem_and_classifier_are_copied(gated_models):
    model = gated_models["resnet18"]
    set_random_gates_(model)
    purged = purge(model)
    assert torch.equal(purged.stem.conv.weight, model.stem.conv.weight)
    assert torch.equal(purged.get_submodule("layer2.0.shortcut.conv").weight, model.layer2[0].shortcut.conv.weight)
    assert torch.equal(purged.fc.weight, model.fc.weight)
    # conv2 of the block keeps its open channels, added to the 128 of the shortcut at their places
    opened = model.layer2[0].conv2.conv.group_gate_values().nonzero().flatten()
    assert purged.get_submodule("layer2.0.conv2.conv").out_channels == len(opened) < 128
    adds = [n for n in purged.graph.nodes if n.target is torch.index_add]
    assert len(adds) == 8  # one per block: every conv2 has closed gates
    (shortcut, dim, index, branch), = [n.args for n in adds if n.args[3].target == "layer2.0.conv2.bn"]
    assert shortcut.target == "layer2.0.shortcut.bn" and dim == 1
    assert getattr(purged, index.target).tolist() == opened.tolist()


def test_purge_groups_on_a_dense_model_with_explicit_scales():
    torch.manual_seed(0)
    dense = build_model("mlp", gated=False)
    scale = torch.zeros(300)
    scale[[4, 7]] = torch.tensor([2.0, 0.5])
    purged = purge_groups(dense, {"fc2": scale})
    assert (purged.fc1.out_features, purged.fc2.in_features) == (2, 2)
    assert torch.equal(purged.fc1.weight, dense.fc1.weight[[4, 7]])
    assert torch.equal(purged.fc2.weight, dense.fc2.weight[:, [4, 7]] * torch.tensor([2.0, 0.5]))
    masked = copy.deepcopy(dense)
    with torch.no_grad():
        masked.fc2.weight.mul_(scale)
    assert_same_outputs(masked, purged, dense.input_shape)


def test_purge_groups_rejects_bad_scales():
    gated = build_model("mlp", gated=True)
    scales = {name: torch.ones(size) for name, size in (("fc1", 784), ("fc2", 300), ("fc3", 100))}
    with pytest.raises(ValueError, match="fc9"):
        purge_groups(gated, {**scales, "fc9": torch.ones(3)})
    with pytest.raises(ValueError, match=r"shape \(300,\)"):
        purge_groups(gated, {**scales, "fc2": torch.ones(299)})
    with pytest.raises(ValueError, match="'fc3'"):
        purge_groups(gated, {"fc1": scales["fc1"], "fc2": scales["fc2"]})


@pytest.mark.parametrize("name, input_shape", [("mlp", (1, 28, 28)), ("lenet5", (1, 28, 28)),
                                               ("resnet18", (3, 32, 32))])
def test_unstructured_purge_masks_weights(name, input_shape):
    torch.manual_seed(0)
    model = build_model(name, gated=True, sparsity="unstructured")
    set_random_gates_(model)
    randomise_batch_norms_(model)
    purged = purge(model)

    assert not any(isinstance(m, L0Layer) for m in purged.modules())
    assert_same_outputs(model, purged, input_shape)
    non_zero = 0
    for layer in gated_layers(model):
        weight, bias = layer.gated_weight_and_bias(median=True)
        non_zero += int(weight.count_nonzero()) + (0 if bias is None else int(bias.count_nonzero()))
        assert 0 < int(weight.count_nonzero()) < weight.numel()
    ungated = sum(p.numel() for m in model.modules() if not isinstance(m, L0Layer)
                  for p in m.parameters(recurse=False))
    assert count_params(purged, sparse_weights=True) == non_zero + ungated
    assert count_params(purged) == dense_params(model)
    if name == "mlp":  # plain MACs of a one-example MLP are its non-zero weights
        weights = sum(int(m.weight.count_nonzero()) for m in purged.modules() if isinstance(m, nn.Linear))
        assert count_macs(purged, convention="plain", sparse_weights=True) == weights


def test_median_gates_used_by_purge_are_those_of_eq_9(gated_models):
    model = gated_models["mlp"]
    with torch.no_grad():  # every gate open, most fractional: nothing is removed, every column is scaled
        for layer in gated_layers(model):
            layer.weight_log_alpha.uniform_(-0.5 * BOUND, 2 * BOUND)
    z = median_gates(model.fc2.weight_log_alpha)
    assert {1.0} < set(z.tolist()) and z.min() > 0
    purged = purge(model)
    assert torch.equal(purged.fc2.weight, model.fc2.weight * z)


#: The counts of the paper's purge before the engines were one (paperlib/paper/purge.py's ``_Purger``, removed): params,
#: MACs ("paper", "plain") and the pruned architecture, at seeded gates (``_close_share_``). Its outputs were equal bit
#: for bit too, on these and on wrn-28-10, resnet50, magnitude pruning and keep_first.
BEFORE_ONE_ENGINE = {
    ("mlp", 0.3): (131062, 131342, 130772, [542, 214, 66]),
    ("mlp", 0.9): (2905, 2950, 2850, [75, 30, 15]),
    ("lenet5", 0.3): (151819, 1374509, 1345697, [18, 33, 367, 361]),
    ("lenet5", 0.9): (1336, 27366, 25092, [1, 6, 11, 52]),
    ("wrn-16-1", 0.3): (124104, 25135690, 24703616, [14, 13, 21, 21, 45, 45]),
    ("wrn-16-1", 0.9): (24188, 4538698, 4280960, [0, 2, 5, 0, 7, 9]),
    ("resnet18", 0.3): (6502059, 82719384, 82361920, [48, 43, 45, 44, 93, 86, 91, 82, 181, 179, 187, 182, 347, 355,
                                                      349, 343]),
    ("resnet18", 0.9): (760411, 8645964, 8473864, [7, 4, 6, 10, 13, 14, 10, 10, 24, 30, 21, 27, 51, 46, 44, 57]),
}


def _close_share_(model: nn.Module, share: float, seed: int) -> None:
    """A ``share`` of each layer's gates at median 0, half the rest at 1, half at a fraction."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in gated_layers(model):
            u = torch.rand(layer.weight_log_alpha.shape, generator=generator)
            layer.weight_log_alpha.copy_(torch.where(u < share, OFF, torch.where(u < (1 + share) / 2, ON, 0.5)))


@pytest.mark.parametrize("name, share", list(BEFORE_ONE_ENGINE), ids=[f"{n}-{s}" for n, s in BEFORE_ONE_ENGINE])
def test_the_one_engine_counts_the_paper_models_as_the_paper_purge_did(name, share):
    """At 90% closed, LeNet5's conv2 keeps maps that fc1 reads nothing of and WideResNet has whole layers closed."""
    shape = {"mlp": (1, 28, 28), "lenet5": (1, 28, 28)}.get(name, (3, 32, 32))
    torch.manual_seed(0)
    model = build_model(name, gated=True)
    _close_share_(model, share, seed=1)
    purged = purge(model)
    params, macs, plain, architecture = BEFORE_ONE_ENGINE[name, share]
    assert (count_params(purged), count_macs(purged, shape, "paper"), count_macs(purged, shape, "plain")) \
        == (params, macs, plain)
    assert pruned_architecture(model) == architecture
    assert_same_outputs(model, purged, shape)


def test_one_engine_with_or_without_an_example_input(gated_models):
    """``purge(model)`` of a paper model is ``purge(model, example)``: the zero batch of its input_shape is only for
    the shapes; on the ResNet no closed channel stays (no warning): the branch is cut from the residual sum."""
    model = gated_models["resnet18"]
    randomise_batch_norms_(model)
    set_random_gates_(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        by_example, by_default = purge(model, torch.randn(2, 3, 32, 32)), purge(model)
    assert by_example.purge_report == by_default.purge_report == {}
    assert count_params(by_example) == count_params(by_default) < dense_params(model)
    assert_same_outputs(by_example, by_default, (3, 32, 32))


@pytest.mark.parametrize("name, input_shape", [("lenet5", (1, 28, 28)), ("resnet18", (3, 32, 32))])
def test_a_purged_paper_model_loads_and_runs_where_paperlib_cannot_be_imported(gated_models, name, input_shape,
                                                                               tmp_path):
    """LeNet5's fc1 selects its read features (``index_select``), the ResNet adds its branches back (``index_add``)."""
    model = gated_models[name]
    set_random_gates_(model)
    purged = purge(model)
    assert {torch.index_select if name == "lenet5" else torch.index_add} <= {n.target for n in purged.graph.nodes}
    torch.save(purged, tmp_path / "purged.pt")
    assert b"paperlib" not in (tmp_path / "purged.pt").read_bytes()
    x = torch.randn(3, *input_shape)
    with torch.no_grad():
        gated = model.eval()(x)
    assert (run_without_paperlib(tmp_path / "purged.pt", x, tmp_path) - gated).abs().max() <= 1e-5 * gated.abs().max()
