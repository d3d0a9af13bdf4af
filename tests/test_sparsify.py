"""sparsify and purge on anyone's model: torchvision's ResNet18, MobileNetV2 and VGG11-BN (issue 40).

Gates are closed by setting ``log_alpha`` very negative (the median of eq. 9 is
exactly 0 below -beta ln 11, about -1.6, and a sample of eq. 7 is exactly 0
below about -10 whatever the noise); batch-norm statistics and affine
parameters are randomised so that a closed channel whose batch-norm shift
leaked through would show.
"""

import copy
import operator
import warnings

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from fake_models import CLOSED, close_gates_, randomise_batch_norms_, run_without_paperlib
import torchvision

import paperlib
from paperlib.method.channels import untraceable
from paperlib.method.counting import count_macs, count_params
from paperlib.method.layers import L0Layer
from paperlib import dense_state_dict, load_dense_state_dict
from paperlib.method.sparsify import GatedConv2d, GatedLinear, default_layers, sparsify

SHAPE = (3, 32, 32)
BUILDERS = {"resnet18": torchvision.models.resnet18, "mobilenet_v2": torchvision.models.mobilenet_v2,
            "vgg11_bn": torchvision.models.vgg11_bn}
PLAIN = (nn.Conv2d, nn.Linear, nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Dropout,
         nn.Identity, nn.Sequential, nn.Module)


def build(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    if name == "vgg11_bn":  # 129M parameters: skip torch's slow initialisation, draw them directly
        with torch.device("meta"):
            model = BUILDERS[name](num_classes=10)
        model = model.to_empty(device="cpu")
        for parameter in model.parameters():
            parameter.data.normal_(0.0, 0.02)
        for buffer in model.buffers():
            buffer.data.fill_(1)
        return model
    return BUILDERS[name](weights=None, num_classes=10)


def reaches_a_sum(node: fx.Node, modules: dict) -> bool:
    """Whether a convolution's output meets a residual sum before another convolution or linear layer reads it."""
    frontier = list(node.users)
    while frontier:
        user = frontier.pop()
        if user.op == "call_function" and user.target in (operator.add, operator.iadd, torch.add):
            return True
        if user.op == "call_module" and isinstance(modules[user.target], (nn.Conv2d, nn.Linear)):
            continue
        frontier.extend(user.users)
    return False


def assert_same_outputs(a: nn.Module, b: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        out_a, out_b = a.eval()(x), b.eval()(x)
    assert out_a.abs().max() > 0
    assert (out_a - out_b).abs().max() <= 1e-5 * out_a.abs().max()


def purged_without_closed_channels(model: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    """Randomise the batch norms of sparsified ``model``, close about 40% of its gates, purge it: no closed channel
    stays, and the purged model computes what the gated one does. Returns the purged model and the input."""
    randomise_batch_norms_(model)
    close_gates_(model)
    x = torch.randn(2, *SHAPE)
    purged = paperlib.purge(model.eval(), x)
    assert purged.purge_report == {}
    assert_same_outputs(model, purged, x)
    return purged, x


# ----- which layers --------------------------------------------------------------------------------------------


def test_default_rule_on_resnet18_gates_every_first_conv_of_a_block_and_the_classifier_inputs():
    model = build("resnet18")
    traced = fx.symbolic_trace(model)
    modules = dict(traced.named_modules())
    convs = [n for n in traced.graph.nodes if n.op == "call_module" and isinstance(modules[n.target], nn.Conv2d)]
    expected = [n.target for n in convs if not reaches_a_sum(n, modules)]
    assert expected == [f"layer{s}.{b}.conv1" for s in range(1, 5) for b in range(2)]
    assert default_layers(model) == expected + ["fc"]
    sparsify(model)
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == expected + ["fc"]
    assert isinstance(model.layer1[0].bn1, nn.Identity) and isinstance(model.layer1[0].bn2, nn.BatchNorm2d)
    assert model.layer1[0].conv1.bn is not None and isinstance(model.fc, GatedLinear)


def test_default_rule_on_mobilenet_v2_gates_the_last_conv_of_each_channel_run():
    model = build("mobilenet_v2")
    traced = fx.symbolic_trace(model)
    modules = dict(traced.named_modules())
    names = default_layers(model)
    for node in traced.graph.nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], nn.Conv2d):
            continue
        conv = modules[node.target]
        if reaches_a_sum(node, modules):
            assert node.target not in names
        elif conv.groups == 1 and conv.kernel_size == (1, 1) and node.target.endswith("conv.0.0"):
            # an expansion: its channels run through the depthwise conv, which is gated instead
            assert node.target not in names
            assert node.target.replace("conv.0.0", "conv.1.0") in names
    depthwise = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert set(depthwise) <= set(names)
    assert "features.18.0" in names and "classifier.1" in names  # the last conv feeds the classifier
    assert "features.0.0" not in names  # the stem's channels run into the first depthwise conv


def test_default_rule_skips_a_depthwise_run_that_another_branch_reads_before_it():
    # ShuffleNetV2's first block of a stage reads its input in two branches: a depthwise 3x3 (then a 1x1) and
    # a 1x1. A gate on the depthwise convolution would close a channel the other branch still reads, open.
    model = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    blocks = {2: 4, 3: 8, 4: 4}
    # gated: the depthwise convolution of every block's second branch, whose 1x1 input is read by nothing else, and
    # the last convolution, whose channels reach the classifier through x.mean([2, 3])
    assert default_layers(model) == [f"stage{s}.{b}.branch2.3" for s, n in blocks.items() for b in range(n)] \
        + ["conv5.0", "fc"]
    purged_without_closed_channels(sparsify(model))


def test_include_and_exclude_change_the_rule():
    model = build("resnet18")
    chosen = sparsify(model, include=["layer1.0.conv2"],
                      exclude=lambda name, m: name.startswith("layer4") or name == "fc")
    gated = [name for name, m in chosen.named_modules() if isinstance(m, L0Layer)]
    assert gated == ["layer1.0.conv1", "layer1.0.conv2", "layer1.1.conv1", "layer2.0.conv1", "layer2.1.conv1",
                     "layer3.0.conv1", "layer3.1.conv1"]
    with pytest.raises(ValueError, match="'layer1.0.bn1' is not a convolution or linear layer"):
        sparsify(build("resnet18"), include="layer1.0.bn1")
    with pytest.raises(ValueError, match="already has gated layers"):
        sparsify(chosen)


# ----- the gated layers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    dict(groups=2, dilation=(2, 1), kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), padding_mode="reflect"),
    dict(groups=6, kernel_size=3, padding="same", bias=False),  # depthwise
    dict(kernel_size=1, padding_mode="circular", padding=1),
])
@pytest.mark.parametrize("sparsity", ["structured", "unstructured"])
def test_gated_conv_takes_every_conv2d_argument(options, sparsity):
    torch.manual_seed(0)
    conv = nn.Conv2d(6, 6, **options)
    layer = GatedConv2d(conv, sparsity=sparsity).eval()
    x = torch.randn(2, 6, 9, 11)
    with torch.no_grad():
        for log_alpha in layer.gate_parameters():
            log_alpha.fill_(5.0)  # median exactly 1
        assert torch.equal(layer(x), conv(x))
        for log_alpha in layer.gate_parameters():
            log_alpha.fill_(0.0)  # median 0.5
        assert torch.allclose(layer(x), 0.5 * conv(x), atol=1e-6)
        layer.weight_log_alpha.view(6, -1)[1] = CLOSED
        assert torch.all(layer(x)[:, 1] == 0) == (sparsity == "structured" or conv.bias is None)


@pytest.mark.parametrize("train", [True, False], ids=["training", "eval"])
def test_a_closed_channel_outputs_exactly_zero_after_its_batch_norm(train):
    model = sparsify(build("resnet18"))
    randomise_batch_norms_(model)
    unit = model.layer2[0].conv1
    with torch.no_grad():
        unit.weight_log_alpha[:5] = CLOSED
        unit.weight_log_alpha[5:] = 10.0  # open in every sample
    out = unit.train(train)(torch.randn(4, 64, 8, 8))
    assert torch.all(out[:, :5] == 0)
    assert torch.all(out[:, 5:].abs().sum((0, 2, 3)) > 0)
    before = (unit.bn.running_mean.clone(), unit.bn.running_var.clone())
    if train:  # the batch norm saw the ungated convolution: every channel's statistics moved
        out = unit(torch.randn(4, 64, 8, 8))
        assert torch.all(unit.bn.running_mean != before[0])


# ----- training, then purging ----------------------------------------------------------------------------------


def density(model: nn.Module) -> torch.Tensor:
    layers = [m for m in model.modules() if isinstance(m, L0Layer)]
    active = torch.stack([m.expected_active_params() for m in layers]).sum()
    return active / sum(m.num_sparsifiable_params for m in layers)


def train_constrained_(model: nn.Module, steps: int = 20, target: float = 0.5) -> list[float]:
    """``steps`` steps under the constraint "expected density <= target"; returns the violations.

    With :class:`paperlib.ConstrainedStep` where the package has it; else the same simultaneous gradient
    descent-ascent written out: descent on the Lagrangian in the weights and gates, projected ascent in the
    multiplier.
    """
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, *SHAPE, generator=generator), torch.randint(0, 10, (4,), generator=generator)
    model.train()
    if hasattr(paperlib, "ConstrainedStep"):
        step = paperlib.ConstrainedStep(model, torch.optim.Adam(paperlib.weight_parameters(model), lr=1e-3),
                                        target=target, gates_lr=0.1, dual_lr=1.0)
        return [float(step.roll(lambda: nn.functional.cross_entropy(model(x), y)).violations)
                for _ in range(steps)]
    gate_params = [p for n, p in model.named_parameters() if "log_alpha" in n]
    weights = [p for n, p in model.named_parameters() if "log_alpha" not in n]
    primal = torch.optim.Adam([{"params": weights, "lr": 1e-3}, {"params": gate_params, "lr": 0.1}])
    multiplier, history = torch.zeros(()), []
    for _ in range(steps):
        violation = density(model) - target
        loss = nn.functional.cross_entropy(model(x), y) + multiplier * violation
        primal.zero_grad()
        loss.backward()
        primal.step()
        multiplier = torch.clamp(multiplier + 1.0 * violation.detach(), min=0.0)
        history.append(float(violation.detach()))
    return history


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_twenty_constrained_steps_then_purge_gives_the_test_time_outputs(name):
    model = sparsify(build(name))
    violations = train_constrained_(model)
    assert violations[-1] < violations[0]  # the multiplier pulls the density towards the target
    randomise_batch_norms_(model)
    close_gates_(model)
    x = torch.randn(3, *SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every closed channel of the default rule goes: no warning
        purged = paperlib.purge(model.eval(), x)
    assert purged.purge_report == {}
    assert_same_outputs(model, purged, x)
    assert isinstance(purged, fx.GraphModule) and all(type(m) in PLAIN for m in list(purged.modules())[1:])
    assert not any("log_alpha" in n for n, _ in purged.named_parameters())
    # each gated convolution keeps its open channels; MobileNetV2's last one only those whose classifier input
    # (one feature per channel after pooling) is open too
    modules = dict(purged.named_modules())
    for layer_name, layer in model.named_modules():
        if isinstance(layer, GatedConv2d):
            kept = layer.group_gate_values() != 0
            if layer_name == "features.18.0":
                kept &= model.classifier[1].group_gate_values() != 0
            assert modules[layer_name].out_channels == int(kept.sum()) > 0
    assert count_params(purged) < count_params(model, gates="test") < count_params(model, gates="dense")
    assert count_macs(purged, SHAPE, "plain") < count_macs(model, SHAPE, "plain", gates="test") \
        < count_macs(model, SHAPE, "plain")


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_the_purged_model_loads_and_runs_where_paperlib_cannot_be_imported(name, tmp_path):
    model = sparsify(build(name))
    randomise_batch_norms_(model)
    close_gates_(model)
    x = torch.randn(3, *SHAPE)
    purged = paperlib.purge(model.eval(), x)
    assert all(type(m).__module__.startswith("torch.") for m in purged.modules())  # torch's classes only
    torch.save(purged, tmp_path / "purged.pt")
    assert b"paperlib" not in (tmp_path / "purged.pt").read_bytes()
    with torch.no_grad():
        gated = model(x)
    elsewhere = run_without_paperlib(tmp_path / "purged.pt", x, tmp_path)
    assert (elsewhere - gated).abs().max() <= 1e-5 * gated.abs().max()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_a_dense_checkpoint_loads_into_the_sparsified_model_and_its_gates_fold_back_into_the_stock_model(name):
    dense = build(name, seed=1)
    randomise_batch_norms_(dense)
    model = sparsify(build(name, seed=2))  # other weights: all of them come from the checkpoint
    result = load_dense_state_dict(model, dense.state_dict())
    assert result.unexpected_keys == [] and result.missing_keys \
        and all(key.endswith("weight_log_alpha") for key in result.missing_keys)
    with torch.no_grad():  # every gate open at 1: the sparsified model is the checkpoint's
        for layer in model.modules():
            if isinstance(layer, L0Layer):
                layer.weight_log_alpha.fill_(10.0)
    x = torch.randn(3, *SHAPE)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), dense.eval()(x))
    close_gates_(model)  # closed and fractional medians, folded into the weights and batch norms
    stock = BUILDERS[name](num_classes=10)
    stock.load_state_dict(dense_state_dict(model))  # strict: the stock architecture's names and shapes
    assert_same_outputs(model, stock, x)
    with torch.no_grad():
        assert not torch.equal(model(x), dense(x))  # the gates did change the function
    last = "fc.bias" if name == "resnet18" else "classifier.1.bias"  # a wrong checkpoint: one entry less, one more
    wrong = {**{key: value for key, value in dense.state_dict().items() if key != last}, "extra": torch.zeros(1)}
    with pytest.raises(RuntimeError, match=rf"missing \['{last}'\], unexpected \['extra'\]"):
        load_dense_state_dict(model, wrong)


def test_vgg11_bn_sparsified_purged_and_counted():
    model = build("vgg11_bn")
    convs = [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    sparsify(model)
    gated = [name for name, m in model.named_modules() if isinstance(m, L0Layer)]
    assert gated == convs + ["classifier.0", "classifier.3", "classifier.6"]  # no residual sum: every layer
    purged, _ = purged_without_closed_channels(model)
    # the first classifier layer reads 512 x 7 x 7 features: those of closed channels go with them, and
    # a closed feature gate of a kept channel is dropped by a selection in front of it
    open_channels = model.features[25].group_gate_values() != 0
    open_features = model.classifier[0].group_gate_values() != 0
    first = purged.classifier[0]
    selection, = [n for n in purged.graph.nodes if n.target is torch.index_select]
    assert list(selection.users)[0].target == "classifier.0"
    assert len(getattr(purged, selection.args[2].target)) == first.in_features
    assert first.in_features == int((open_features & open_channels.repeat_interleave(49)).sum())
    assert first.in_features < int(open_channels.sum()) * 49
    assert count_params(purged) < count_params(model, gates="test")


def test_a_closed_channel_that_feeds_a_residual_sum_is_removed_and_the_rest_added_at_their_places():
    model = sparsify(build("resnet18"), include="layer1.0.conv2")
    randomise_batch_norms_(model)
    with torch.no_grad():
        model.layer1[0].conv2.weight_log_alpha[:3] = CLOSED
        model.layer1[0].conv1.weight_log_alpha[:7] = CLOSED
    x = torch.randn(2, *SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        purged = paperlib.purge(model.eval(), x)
    assert purged.purge_report == {}
    assert purged.layer1[0].conv2.out_channels == 61 and purged.layer1[0].conv1.out_channels == 57
    assert purged.layer1[0].bn2.num_features == 61
    add, = [n for n in purged.graph.nodes if n.target is torch.index_add]  # the only branch with a closed channel
    assert getattr(purged, add.args[2].target).tolist() == list(range(3, 64))
    assert_same_outputs(model, purged, x)


class SelfSum(nn.Module):
    """A sum of a gated tensor and a function of it: both summands have the same channels, sliced alike."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1, self.conv2, self.fc = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 4, 3), \
            nn.Linear(4, 2)

    def forward(self, x):
        h = self.bn1(self.conv1(x))
        return self.fc(F.adaptive_avg_pool2d(self.conv2(h + F.relu(h)), 1).flatten(1))


def test_a_sum_of_one_gated_tensor_with_itself_is_sliced_not_cut():
    torch.manual_seed(0)
    model = sparsify(SelfSum(), include="conv1")
    randomise_batch_norms_(model)
    with torch.no_grad():
        model.conv1.weight_log_alpha[:3] = CLOSED
    x = torch.randn(2, 3, 16, 16)
    purged = paperlib.purge(model.eval(), x)
    assert purged.conv1.out_channels == purged.conv2.in_channels == 5 and purged.purge_report == {}
    assert torch.index_add not in {n.target for n in purged.graph.nodes}
    assert_same_outputs(model, purged, x)


def test_unstructured_purge_keeps_shapes_and_counts_match_the_test_time_model():
    model = sparsify(build("resnet18"), sparsity="unstructured")
    assert all(m.bn is None for m in model.modules() if isinstance(m, GatedConv2d))
    randomise_batch_norms_(model)
    close_gates_(model)
    x = torch.randn(2, *SHAPE)
    purged = paperlib.purge(model.eval(), x)
    assert_same_outputs(model, purged, x)
    assert count_params(purged) == count_params(model, gates="dense")
    assert count_params(purged, sparse_weights=True) == count_params(model, gates="test")
    assert count_macs(purged, SHAPE, "plain", sparse_weights=True) == count_macs(model, SHAPE, "plain", gates="test")


class ChannelsLastBlock(nn.Module):
    """ConvNeXt's block in small: a depthwise convolution, then channels last through a layer norm and two
    linear layers, scaled by a parameter, added to the block's input. The forward reads the layer norm's
    parameters (vectors) and the scale directly, as torchvision's ConvNeXt does."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm_weight, self.norm_bias = nn.Parameter(torch.rand(dim) + 0.5), nn.Parameter(torch.randn(dim))
        self.up, self.act, self.down = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = F.layer_norm(y, self.norm_weight.shape, self.norm_weight, self.norm_bias)
        y = self.down(self.act(self.up(y))).permute(0, 3, 1, 2)
        return x + self.scale * y


def test_linear_layers_on_channels_last_tensors_are_gated_and_purged_to_their_open_features():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), ChannelsLastBlock(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    sparsify(model)
    block = model[1]
    assert isinstance(block.up, GatedLinear) and isinstance(block.down, GatedLinear)
    close_gates_(model)
    x = torch.randn(2, *SHAPE)
    purged = paperlib.purge(model.eval(), x)
    assert_same_outputs(model, purged, x)
    # the hidden features run along the last dimension, from `up` to `down` through an activation: a feature
    # whose gate in `down` is closed goes from both; the layer norm's output, which `up` reads, stays whole
    open_hidden = int((block.down.group_gate_values() != 0).sum())
    up, down = purged.get_submodule("1.up"), purged.get_submodule("1.down")
    assert "1.up" in [u.target for n in purged.graph.nodes if n.target is torch.index_select for u in n.users]
    assert up.in_features == int((block.up.group_gate_values() != 0).sum()) < 8  # up's own closed inputs
    assert up.out_features == down.in_features == open_hidden < 32
    assert down.out_features == 8  # its output joins the residual sum
    assert count_params(purged) < count_params(model, gates="test")


class TokenMLP(nn.Module):
    """A transformer's MLP block on (batch, tokens, features): layer norm, two linear layers, a residual sum."""

    def __init__(self, dim: int = 8, hidden: int = 24):
        super().__init__()
        self.embed, self.norm = nn.Linear(5, dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.1), nn.Linear(hidden, dim),
                                 nn.Dropout(0.1))
        self.head = nn.Linear(dim, 3)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.mlp(self.norm(h))
        return self.head(h.mean(1))


def test_a_transformer_mlp_loses_its_closed_hidden_features_from_both_layers():
    torch.manual_seed(0)
    model = sparsify(TokenMLP())
    close_gates_(model)
    x = torch.randn(4, 6, 5)
    purged = paperlib.purge(model.eval(), x)
    assert_same_outputs(model, purged, x)
    open_hidden = int((model.mlp[3].group_gate_values() != 0).sum())
    assert purged.mlp[0].out_features == purged.mlp[3].in_features == open_hidden < 24
    # the residual stream keeps its 8 features: `embed` and the MLP's last layer feed the sum
    assert purged.embed.out_features == 8 and purged.mlp[3].out_features == 8
    assert count_params(purged) < count_params(model, gates="test")


def test_a_gated_layer_the_example_input_does_not_reach_is_not_in_the_test_time_model():
    class AuxiliaryHead(nn.Module):  # GoogLeNet's auxiliary classifiers: called in training only
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 3)
            self.aux = nn.Sequential(nn.Conv2d(8, 6, 1), nn.ReLU(), nn.Conv2d(6, 4, 1))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

        def forward(self, x):
            h = torch.relu(self.conv1(x))
            out = self.head(torch.relu(self.conv2(h)))
            return (out, self.aux(h)) if self.training else out

    torch.manual_seed(0)
    model = sparsify(AuxiliaryHead())  # traced in training mode: the auxiliary branch is gated
    assert isinstance(model.aux[0], GatedConv2d)
    with torch.no_grad():
        model.aux[0].weight_log_alpha[:2] = CLOSED
        model.conv1.weight_log_alpha[:3] = CLOSED
    x = torch.randn(2, *SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        purged = paperlib.purge(model.eval(), x)  # traced in eval mode: the branch is not in the graph
    assert purged.purge_report == {} and purged.kept_groups["aux.0"] == 0 and not hasattr(purged, "aux")
    assert purged.conv1.out_channels == 5
    assert_same_outputs(model, purged, x)


class Router(nn.Module):
    """Python control flow on a tensor's values: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        self.wide, self.narrow = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.wide(x) if x.mean() > 0 else self.narrow(x)


class Routed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.router = Router()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        h = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.router(h)), 1).flatten(1))


def test_a_submodule_fx_cannot_trace_is_called_whole_when_named_in_leaves():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="cannot trace Routed.*leaves="):
        sparsify(Routed())
    with pytest.raises(ValueError, match="leaves: 'routr' is not a submodule of the model"):
        sparsify(Routed(), leaves="routr")
    model = sparsify(Routed(), leaves="router")
    # conv1's channels run to conv2 only; conv2's go into the router, which the graph does not see into
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == ["conv1", "fc"]
    randomise_batch_norms_(model)
    close_gates_(model)
    closed = int((model.conv1.weight_log_alpha == CLOSED).sum())
    assert 0 < closed < 16
    x = torch.randn(2, *SHAPE)
    with pytest.raises(ValueError, match="purge reads the model through torch.fx"):
        paperlib.purge(model.eval(), x)
    purged = paperlib.purge(model.eval(), x, leaves=lambda name, module: isinstance(module, Router))
    assert purged.conv1.out_channels == purged.conv2.in_channels == 16 - closed
    assert purged.router.wide.in_channels == purged.router.narrow.in_channels == 8 and purged.purge_report == {}
    assert_same_outputs(model, purged, x)

    with pytest.warns(UserWarning, match="cannot trace router; each is called whole"):
        auto = sparsify(Routed(), leaves="auto")
    assert [name for name, m in auto.named_modules() if isinstance(m, L0Layer)] == ["conv1", "fc"]
    auto.load_state_dict(model.state_dict())
    with pytest.warns(UserWarning, match="cannot trace router"):
        assert_same_outputs(purged, paperlib.purge(auto.eval(), x, leaves="auto"), x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model fx traces whole: "auto" chooses no leaf, and says nothing
        assert default_layers(build("resnet18")) == [n for n, m in sparsify(build("resnet18"), leaves="auto")
                                                      .named_modules() if isinstance(m, L0Layer)]


def test_untraceable_lists_the_deepest_modules_whose_own_code_fx_cannot_trace():
    class Block(nn.Module):  # traceable code around a router
        def __init__(self):
            super().__init__()
            self.router, self.bn = Router(), nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn(self.router(x)) + x

    class Odd(nn.Module):  # code fx cannot trace (a branch on a size), around a router
        def __init__(self):
            super().__init__()
            self.router = Router()

        def forward(self, x):
            return self.router(x) if x.shape[-1] % 2 == 0 else x

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Block(), Odd(), nn.Sequential(Block(), nn.ReLU()))
    assert untraceable(model) == ["1.router", "2", "3.0.router"]
    assert untraceable(build("resnet18")) == []


class Branches(nn.Module):
    """An Inception-like block: three branches concatenated along the channels (the second itself a
    concatenation), read by a 1x1 convolution; ``norm_after=True`` puts a batch norm after the concatenation, as
    DenseNet does."""

    def __init__(self, norm_after: bool = False):
        super().__init__()
        def unit(c_in, c_out, k):
            return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2), nn.BatchNorm2d(c_out), nn.ReLU())

        self.stem = unit(3, 8, 3)
        self.a, self.b1, self.b2, self.c = unit(8, 6, 1), unit(8, 4, 3), unit(8, 5, 1), unit(8, 7, 3)
        self.norm = nn.BatchNorm2d(22) if norm_after else nn.Identity()
        self.mix = nn.Conv2d(22, 12, 1)
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        h = self.stem(x)
        joined = torch.cat([self.a(h), torch.cat([self.b1(h), self.b2(h)], 1), self.c(h)], dim=1)
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.mix(self.norm(joined))), 1).flatten(1))


def test_concatenated_branches_are_gated_and_their_closed_channels_removed_from_the_reader():
    torch.manual_seed(0)
    model = sparsify(Branches())
    branches = ["a.0", "b1.0", "b2.0", "c.0"]
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == ["stem.0", *branches, "mix", "fc"]
    purged, x = purged_without_closed_channels(model)
    open_ = {name: int((model.get_submodule(name).weight_log_alpha != CLOSED).sum()) for name in branches}
    assert [purged.get_submodule(name).out_channels for name in branches] == list(open_.values())
    assert purged.mix.in_channels == sum(open_.values()) < 22


def test_a_batch_norm_after_a_concatenation_keeps_the_branches_ungated():
    torch.manual_seed(0)
    model = sparsify(Branches(norm_after=True))  # a closed channel would leave the norm as its shift: not zero
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == ["stem.0", "mix", "fc"]
    model = sparsify(Branches(norm_after=True), include=["a.0"])
    randomise_batch_norms_(model)
    close_gates_(model)
    closed = (model.a[0].weight_log_alpha == CLOSED).nonzero().flatten().tolist()
    x = torch.randn(2, *SHAPE)
    with pytest.warns(UserWarning, match="a.0"):
        purged = paperlib.purge(model.eval(), x)
    assert closed and purged.purge_report == {"a.0": closed} and purged.mix.in_channels == 22
    assert_same_outputs(model, purged, x)


def test_purge_without_example_input_says_what_it_needs():
    with pytest.raises(ValueError, match="needs example_input.*no input_shape"):
        paperlib.purge(sparsify(build("resnet18")))


def test_sparsify_what_is_no_model_is_refused():
    with pytest.raises(TypeError, match="model must be an nn.Module; got list"):
        sparsify([nn.Linear(3, 2)])


@pytest.mark.parametrize("name, example, reads", [
    ("resnet18", torch.zeros(1, 1, 28, 28), r"\(1, 1, 28, 28\).*first layer, conv1, reads \(batch, 3, H, W\)"),
    ("resnet18", torch.zeros(3, 32, 32), r"\(3, 32, 32\).*4 dimensions.*reads \(batch, 3, H, W\)"),
    ("mlp", torch.zeros(1, 3, 32, 32), r"\(1, 3, 32, 32\).*first layer, 1, reads \(\.\.\., 784\)"),
])
def test_purge_on_an_example_the_model_cannot_read_says_what_its_first_layer_reads(name, example, reads, capfd):
    model = sparsify(nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10))
                     if name == "mlp" else build(name)).eval()
    with pytest.raises(ValueError, match=reads) as error:
        paperlib.purge(model, example)
    assert "\n" not in str(error.value) and error.value.__suppress_context__  # one line, without torch.fx's traceback
    assert "Traceback" not in capfd.readouterr().err
    with pytest.raises(TypeError, match="example_input must be a tensor"):
        paperlib.purge(model, (1, 3, 32, 32))


def test_the_gate_pass_of_the_runner_drives_sparsified_layers_as_their_own_sampling_does():
    from paperlib.method.gate_pass import ModelGates
    from paperlib.method.objective import linear_term

    model = sparsify(build("mobilenet_v2")).train()
    model.classifier[0].p = 0.0  # dropout would draw from the generator between the gates
    x = torch.randn(2, *SHAPE)
    torch.manual_seed(3)
    own = model(x)
    torch.manual_seed(3)
    model_gates = ModelGates(model, "model", weight_decay=1e-4)
    step = model_gates.sample(linear_term, (torch.ones(1), torch.full((1,), 0.5)))
    with model_gates.installed(step):
        passed = model(x)
    assert torch.allclose(own, passed, atol=1e-6)
    assert torch.allclose(step.model_density, density(model))


# ----- coverage of common code (issue 51, item 7) --------------------------------------------------------------
# Each model below uses one idiom. Its layers are either gated, and then the purged model computes what the gated
# one computes at test time with the parameters that an independent count of its open gates gives, or left without
# gates, and then the report names them with the category of the reason.

SMALL = (3, 8, 8)


def unit(c_in: int, c_out: int, k: int = 3, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU())


class MeanPooled(nn.Module):
    """Global pooling written as x.mean((2, 3)) instead of nn.AdaptiveAvgPool2d."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.fc = unit(3, 8), unit(8, 12), nn.Linear(12, 5)

    def forward(self, x):
        return self.fc(self.b(self.a(x)).mean((2, 3)))


class Flattened(nn.Module):
    """torch.flatten of a feature map, no pooling: the linear layer reads 64 features per channel."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 6, 3, padding=1), nn.Linear(6 * 64, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.b(F.relu(self.a(x)))), 1))


class CalledTwice(nn.Module):
    """One convolution applied twice: its weights serve two places."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(F.relu(self.conv(F.relu(self.conv(F.relu(self.stem(x)))))).mean((2, 3)))


class Tied(nn.Module):
    """Two convolutions that share one weight tensor (tied weights), each with its own bias."""

    def __init__(self):
        super().__init__()
        self.stem, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)
        self.a, self.b = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.fc(F.relu(self.b(F.relu(self.a(F.relu(self.stem(x)))))).mean((2, 3)))


class ReadsWeight(nn.Module):
    """A convolution whose weight the forward also uses directly, in a functional convolution."""

    def __init__(self):
        super().__init__()
        self.stem, self.a, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.a(F.relu(self.stem(x))))
        return self.fc(F.relu(F.conv2d(h, self.a.weight, self.a.bias, padding=1)).mean((2, 3)))


class Grouped(nn.Module):
    """A grouped convolution (two groups, as in ResNeXt) between two ordinary ones."""

    def __init__(self):
        super().__init__()
        self.stem, self.grouped = nn.Conv2d(3, 8, 3, padding=1), unit(8, 8, groups=2)
        self.pw, self.fc = unit(8, 12, 1), nn.Linear(12, 5)

    def forward(self, x):
        return self.fc(self.pw(self.grouped(F.relu(self.stem(x)))).mean((2, 3)))


class Depthwise(nn.Module):
    """MobileNet's separable convolution: 1x1, depthwise 3x3, 1x1."""

    def __init__(self):
        super().__init__()
        self.stem, self.dw, self.pw, self.fc = unit(3, 8, 1), unit(8, 8, groups=8), unit(8, 12, 1), nn.Linear(12, 5)

    def forward(self, x):
        return self.fc(self.pw(self.dw(self.stem(x))).mean((2, 3)))


def opened(model: nn.Module, name: str) -> torch.Tensor:
    """Which groups of a gated layer have a non-zero median gate."""
    return model.get_submodule(name).group_gate_values() != 0


def n(mask: torch.Tensor) -> int:
    return int(mask.sum())


# idiom -> (model, the layers sparsify gates, the reason of each other layer, the purged model's parameters counted
# from the open gates: a channel stays where its gate is open and a reader reads it; a linear layer's input feature
# where its gate is open too)
IDIOMS = {
    "mean": (MeanPooled, ["a.0", "b.0", "fc"], {}, lambda o: (
        n(o("a.0")) * (27 + 2) + n(o("b.0") & o("fc")) * (n(o("a.0")) * 9 + 2 + 5) + 5)),
    "flatten": (Flattened, ["a", "b", "fc"], {}, lambda o: (
        n(o("a")) * 28 + n(o("b") & o("fc").view(6, 64).any(1)) * (n(o("a")) * 9 + 1)
        + 5 * n(o("fc") & (o("b") & o("fc").view(6, 64).any(1)).repeat_interleave(64)) + 5)),
    "called twice": (CalledTwice, ["fc"], {"stem": "pinned", "conv": "shared weight"},
                     lambda o: 224 + 584 + 5 * n(o("fc")) + 5),
    "tied": (Tied, ["fc"], {"stem": "pinned", "a": "shared weight", "b": "shared weight"},
             lambda o: 224 + 576 + 8 + 8 + 5 * n(o("fc")) + 5),  # the weight they share counts once
    "weight read directly": (ReadsWeight, ["fc"], {"stem": "pinned", "a": "shared weight"},
                             lambda o: 224 + 584 + 5 * n(o("fc")) + 5),
    "grouped": (Grouped, ["pw.0", "fc"], {"stem": "pinned", "grouped.0": "grouped convolution"}, lambda o: (
        224 + 8 * 4 * 9 + 2 * 8 + n(o("pw.0") & o("fc")) * (8 + 2 + 5) + 5)),
    "depthwise": (Depthwise, ["dw.0", "pw.0", "fc"], {"stem.0": "gated by another layer"}, lambda o: (
        n(o("dw.0")) * (3 + 2 + 9 + 2) + n(o("pw.0") & o("fc")) * (n(o("dw.0")) + 2 + 5) + 5)),
}


@pytest.mark.parametrize("idiom", IDIOMS)
def test_each_idiom_is_gated_and_purged_exactly_or_reported_with_its_reason(idiom):
    build_idiom, gated, reasons, params = IDIOMS[idiom]
    torch.manual_seed(0)
    dense = build_idiom()
    model = sparsify(copy.deepcopy(dense))
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == gated
    randomise_batch_norms_(model)
    close_gates_(model)
    table = paperlib.report(model, SMALL)
    assert table.loc[gated, "gated"].all()
    assert table.loc[~table["gated"], "why_not"].to_dict() == reasons
    x = torch.randn(2, *SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no closed channel stays
        purged = paperlib.purge(model.eval(), x)
    assert purged.purge_report == {}
    assert_same_outputs(model, purged, x)
    assert count_params(purged) == sum(p.numel() for p in purged.parameters()) \
        == params(lambda name: opened(model, name)) < sum(p.numel() for p in dense.parameters())
    assert table["params_now"].sum() == sum(p.numel() for name, m in purged.named_modules()
                                            if isinstance(m, (nn.Conv2d, nn.Linear)) for p in m.parameters())


def test_a_layer_with_shared_weights_is_refused_by_name_and_tied_weights_stay_tied_after_purge():
    for build_idiom, name in ((CalledTwice, "conv"), (Tied, "b"), (ReadsWeight, "a")):
        with pytest.raises(ValueError, match=f"include: '{name}'"):
            sparsify(build_idiom(), include=name)
    model = sparsify(Tied())
    close_gates_(model)
    purged = paperlib.purge(model.eval(), torch.randn(2, *SMALL))
    assert purged.a.weight is purged.b.weight
    assert count_params(Tied()) == sum(p.numel() for p in Tied().parameters()) == 224 + 576 + 16 + 45


def test_a_grouped_convolution_gated_on_request_keeps_its_closed_channels_and_says_so():
    torch.manual_seed(0)
    model = sparsify(Grouped(), include="grouped.0")
    randomise_batch_norms_(model)
    close_gates_(model)
    closed = (~opened(model, "grouped.0")).nonzero().flatten().tolist()
    x = torch.randn(2, *SMALL)
    with pytest.warns(UserWarning, match="grouped.0"):
        purged = paperlib.purge(model.eval(), x)
    assert closed and purged.purge_report == {"grouped.0": closed} and purged.grouped[0].out_channels == 8
    assert_same_outputs(model, purged, x)  # the closed channels are zeros the next layer reads


class Switched(nn.Module):
    """A top-level forward that torch.fx cannot trace: which branch runs depends on the input's values."""

    def __init__(self):
        super().__init__()
        self.stem, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)
        self.body = nn.Sequential(unit(8, 12), unit(12, 8))
        self.other = nn.Sequential(unit(8, 6), nn.Conv2d(6, 8, 1))

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = self.body(h) if x.mean() > 0 else self.other(h)
        return self.fc(h.mean((2, 3)))


def test_a_top_level_forward_fx_cannot_trace_has_its_submodules_gated_and_the_rest_reported():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="cannot trace Switched.*leaves='auto'"):
        sparsify(Switched())
    with pytest.warns(UserWarning, match="cannot trace Switched's forward"):
        model = sparsify(Switched(), leaves="auto")
    # each branch is traced on its own: its first unit's channels go to its second; its output leaves the branch
    assert [name for name, m in model.named_modules() if isinstance(m, L0Layer)] == ["body.0.0", "other.0.0"]
    randomise_batch_norms_(model)
    close_gates_(model)
    up, down = torch.randn(2, *SMALL) + 1, torch.randn(2, *SMALL) - 1  # the body's branch, the other's
    with pytest.warns(UserWarning):
        table = paperlib.report(model, SMALL, leaves="auto")  # a zero example takes the other branch
        purged = paperlib.purge(model.eval(), up, leaves="auto")
    assert table.loc[~table["gated"], "why_not"].to_dict() == {
        "stem": "untraced", "body.1.0": "untraced", "other.1": "pinned", "fc": "untraced"}
    assert table.loc["stem", "detail"] == table.loc["fc", "detail"] != table.loc["body.1.0", "detail"]
    assert type(purged) is Switched and isinstance(purged.body, fx.GraphModule)
    layer = purged.get_submodule
    assert layer("body.0.0").out_channels == layer("body.1.0").in_channels == n(opened(model, "body.0.0")) < 12
    # the branch the example does not take stays whole, its gates folded in, and its closed channels are named
    assert purged.other[0][0].out_channels == 6 and purged.purge_report == {
        "other.0.0": (~opened(model, "other.0.0")).nonzero().flatten().tolist()}
    for x in (up, down):
        assert_same_outputs(model, purged, x)
    assert count_params(purged) == sum(p.numel() for p in Switched().parameters()) \
        - (12 - n(opened(model, "body.0.0"))) * (8 * 9 + 2 + 8 * 9)  # a closed channel: a filter, a batch norm's
    # scale and shift, and the next convolution's 8 filters' slices
