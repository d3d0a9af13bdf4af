"""Purging: from a gated model to a deterministic, smaller dense model (App. D).

A structured gated model is purged in four steps (App. D):

1. every gate takes its test-time value, the median of eq. 9;
2. a group whose gate is 0 is inactive; an active gate's value is absorbed
   multiplicatively into the weights it gates (and, for a convolution, into the
   bias, which shares the output channel's gate);
3. inactive groups are removed: a convolution loses its output channels, the
   adjacent batch-norm channels and the matching *input* channels of the next
   convolution, gated or not ("double sparsification"); a linear layer loses
   its input neurons and the previous layer the matching output neurons;
4. the remaining weights are copied into new, smaller ``nn.Linear`` /
   ``nn.Conv2d`` / ``nn.BatchNorm2d`` modules.

The core, :func:`purge_groups`, takes one vector of per-group *scales* for each
gated layer (0 removes the group, anything else multiplies it), so that
magnitude pruning (§5.5, App. J.7) can reuse it with 0/1 scales computed on a
dense model: "steps 1 is replaced with the ranking-and-thresholding operation
of Li et al." (App. D). :func:`purge` feeds it the median gates.

The purged model is an ``nn.Sequential`` of plain torch modules, with three
small helpers: :class:`SelectFeatures` (keeps some input pixels or flattened
features), :class:`ScatterChannels` (puts the surviving output channels of a
residual branch back at full width before the addition, since shortcuts stay
dense) and :class:`Residual` (the addition itself).

A layer whose groups are all removed is kept as a single *placeholder* group
with zero weights (and zero batch-norm affine parameters), which outputs exact
zeros. This keeps every tensor non-empty and the purged model exactly
equivalent, whatever follows (a following batch norm still adds its shift, a
following linear layer still adds its bias). It costs the placeholder's few
parameters in :func:`paperlib.method.counting.count_params`; :func:`pruned_architecture`
reports such a layer as 0.

Unstructured models (App. L) keep their shapes: :func:`purge` returns a copy
whose gated layers are plain layers holding ``weight * z_hat``, with exact zeros
where the median gate is 0, to be counted with ``sparse_weights=True``.
"""

import copy
from collections import OrderedDict

import torch
import torch.nn as nn
from torch.nn.utils import skip_init

from ..method import graph_purge
from ..method.graph_purge import SelectFeatures
from ..method.layers import ConvBN, L0Conv2d, L0Layer, L0Linear
from .models import BasicBlock, Bottleneck, WideBasicBlock, build_model, gated_layer_names, gated_layers
from ..method.sparsify import GatedConv2d, GatedLinear

_CONVS = (nn.Conv2d, L0Conv2d)
_LINEARS = (nn.Linear, L0Linear)
_WEIGHTED = (*_CONVS, ConvBN, *_LINEARS)

#: Residual branch (in forward order) and the activation applied after the addition.
_RESNET_BLOCKS = {
    BasicBlock: (("conv1", "relu1", "conv2"), "relu2"),
    Bottleneck: (("conv1", "relu1", "conv2", "relu2", "conv3"), "relu3"),
}


class ScatterChannels(nn.Module):
    """Place the channels of the input at positions ``index`` of a zero tensor with ``width`` channels."""

    def __init__(self, index: torch.Tensor, width: int):
        super().__init__()
        self.register_buffer("index", index)
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(x.shape[0], self.width, *x.shape[2:])
        return out.index_copy(1, self.index, x)

    def extra_repr(self) -> str:
        return f"{len(self.index)} -> {self.width} channels"


class Residual(nn.Module):
    """``branch(x) + shortcut(x)``."""

    def __init__(self, branch: nn.Module, shortcut: nn.Module):
        super().__init__()
        self.branch, self.shortcut = branch, shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(x) + self.shortcut(x)


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #


def median_scales(model: nn.Module) -> dict[str, torch.Tensor]:
    """The median gate (eq. 9) of every group of every structured gated layer, by module name."""
    return {name: layer.group_gate_values(median=True).detach()
            for name, layer in model.named_modules()
            if isinstance(layer, L0Layer) and layer.sparsity == "structured"}


def purge(model: nn.Module, example_input: torch.Tensor | None = None, leaves=None) -> nn.Module:
    """The deterministic test-time model of a gated model, with its closed groups removed (App. D; App. L).

    In eval mode the result computes the same function as ``model`` does with
    its median gates. With ``example_input`` (one batch the model accepts),
    any model gated by :func:`paperlib.method.sparsify.sparsify`, or any model at all,
    is purged through its traced graph (:func:`paperlib.method.graph_purge.purge`): the
    result is a copy of the model's class with smaller plain layers, and its
    ``purge_report`` lists the closed channels that could not be removed;
    ``leaves`` names submodules the trace calls whole, as for ``sparsify``.
    Without it, ``model`` is one of :mod:`paperlib.paper.models`, and the result an
    ``nn.Sequential`` (this module's docstring).

    >>> import torchvision
    >>> from paperlib.method.sparsify import sparsify
    >>> model = sparsify(torchvision.models.mobilenet_v2(num_classes=10)).eval()
    >>> small = purge(model, torch.randn(1, 3, 32, 32))
    """
    if example_input is not None:
        return graph_purge.purge(model, example_input, leaves)
    if leaves is not None:
        raise ValueError("leaves= is for purging through the traced graph, which needs an example_input")
    if any(isinstance(m, (GatedConv2d, GatedLinear)) for m in model.modules()) or not hasattr(model, "input_shape"):
        raise ValueError(f"purge({type(model).__name__}) needs an example_input: purge(model, example_input) "
                         "traces models that are not one of paperlib.paper.models")
    if any(layer.sparsity == "unstructured" for layer in gated_layers(model)):
        return _masked_copy(model)
    return purge_groups(model, median_scales(model))


def purge_groups(model: nn.Module, scales: dict[str, torch.Tensor]) -> nn.Sequential:
    """Remove or rescale the structured groups of ``model`` (App. D, steps 2-4).

    ``model`` is one of :mod:`paperlib.paper.models`, gated or dense. ``scales`` maps
    the module name of a gated layer position (the same in the gated and dense
    forms) to one value per group: per output channel of a convolution, per
    input neuron of a linear layer. A zero removes the group, any other value
    multiplies its weights. Every structured gated layer of ``model`` needs a
    scale, since its weights mean nothing without their gates.
    """
    purger = _Purger(_scales_by_layer(model, scales))
    return purger.purge(model)


def pruned_architecture(model: nn.Module) -> list[int]:
    """Groups left by purging, per gated layer: the "Pruned architecture" of Table 1.

    Input neurons for linear layers, output channels for convolutions, e.g.
    198-233-100 for an MLP and 20-21-34-407 for LeNet5 (conv1, conv2, fc1,
    fc2). A linear layer reading a flattened convolution output (LeNet5's fc1)
    counts only the features whose gate *and* whose channel survive.
    """
    layers = gated_layers(model)
    if any(layer.sparsity == "unstructured" for layer in layers):
        raise ValueError("pruned_architecture needs a structured model; unstructured purging removes no unit")
    purger = _Purger(_scales_by_layer(model, median_scales(model)))
    purger.purge(model)
    return [purger.kept_groups[layer] for layer in layers]


def keep_first(model_name: str, kept: list[int]) -> nn.Sequential:
    """The dense ``model_name`` purged to a pruned architecture: the first ``kept[i]`` groups of its i-th gated layer.

    The inverse of :func:`pruned_architecture`, to count an architecture the
    paper gives by its shape (Table 1's 20-21-34-407 LeNet5) or only through its
    parameters and MACs (`tab:lenet_control`). The counts do not depend on which
    groups survive, as long as a linear layer reading a flattened convolution
    keeps features of surviving channels only; the first ones do whenever
    ``kept`` is a pruned architecture (LeNet5's fc1 keeps at most 16 features
    per conv2 channel, and here the first 16 · conv2 of them). Asked for more,
    purging drops the features behind closed channels, as it would in training.
    """
    names = gated_layer_names(model_name)
    if len(kept) != len(names):
        raise ValueError(f"{model_name} has {len(names)} gated layers ({', '.join(names)}); got {len(kept)} counts")
    model = build_model(model_name, gated=False)
    modules = dict(model.named_modules())
    scales = {}
    for name, count in zip(names, kept):
        layer = modules[name]
        size = layer.out_channels if isinstance(layer, _CONVS) else layer.in_features
        if not 0 <= count <= size:
            raise ValueError(f"layer {name!r} has {size} groups; cannot keep {count}")
        scales[name] = (torch.arange(size) < count).float()
    return purge_groups(model, scales)


# --------------------------------------------------------------------------- #
# Structured purging
# --------------------------------------------------------------------------- #


class _Purger:
    """One structured purge: walks a model in forward order, building the purged modules.

    Along the walk, ``alive`` is a boolean mask over the units (channels or
    features) of the source model's running activation, telling which of them
    survive; None means all of them. The purged activation holds the alive
    units, in order, or a single zero placeholder unit when none is alive.
    """

    def __init__(self, scales: dict[nn.Module, torch.Tensor]):
        self.scales = scales
        #: Groups left in each layer, placeholders excluded (see :func:`pruned_architecture`).
        self.kept_groups: dict[nn.Module, int] = {}

    @torch.no_grad()
    def purge(self, model: nn.Module) -> nn.Sequential:
        layers, _ = self.sequence(list(model.named_children()))
        purged = nn.Sequential(layers)
        purged.input_shape, purged.num_classes = model.input_shape, model.num_classes
        return purged.train(model.training)

    def scale(self, layer: nn.Module) -> torch.Tensor:
        """The layer's per-group scales; ones for a layer that is not pruned."""
        if layer in self.scales:
            return self.scales[layer]
        size = layer.out_channels if isinstance(layer, _CONVS) else layer.in_features
        return torch.ones(size, dtype=layer.weight.dtype, device=layer.weight.device)

    def sequence(self, children: list[tuple[str, nn.Module]], alive: torch.Tensor | None = None
                 ) -> tuple[OrderedDict, torch.Tensor | None]:
        """Purge modules applied one after the other (the models list their layers in forward order)."""
        purged = OrderedDict()
        for i, (name, module) in enumerate(children):
            if isinstance(module, (*_CONVS, ConvBN)):
                purged[name], alive = self.conv(module, alive)
            elif isinstance(module, _LINEARS):
                successor = next((m for _, m in children[i + 1:] if isinstance(m, _WEIGHTED)), None)
                read = self.scale(successor) != 0 if isinstance(successor, _LINEARS) else None
                select, linear, alive = self.linear(module, alive, read)
                if select is not None:
                    purged[f"{name}_select"] = select
                purged[name] = linear
            elif isinstance(module, tuple(_RESNET_BLOCKS)):
                purged[name], alive = self.resnet_block(module), None
            elif isinstance(module, WideBasicBlock):
                purged[name], alive = self.wide_block(module), None
            elif isinstance(module, nn.Sequential):
                stage, alive = self.sequence(list(module.named_children()), alive)
                purged[name] = nn.Sequential(stage)
            else:
                purged[name] = copy.deepcopy(module)
        return purged, alive

    def conv(self, module: nn.Module, alive: torch.Tensor | None) -> tuple[nn.Module, torch.Tensor]:
        """A convolution, possibly inside a :class:`ConvBN` unit, keeping its non-zero output channels."""
        conv, bn = (module.conv, module.bn) if isinstance(module, ConvBN) else (module, None)
        scale = self.scale(conv)
        out_alive = scale != 0
        rows, cols = _kept(out_alive), _kept(alive, conv.in_channels)
        bias = None if conv.bias is None else conv.bias[rows] * scale[rows]
        purged = _conv_like(conv, conv.weight[rows][:, cols] * scale[rows].view(-1, 1, 1, 1), bias)
        if bn is not None:
            purged = nn.Sequential(OrderedDict(conv=purged, bn=_sliced_batchnorm(bn, rows, out_alive[rows])))
        self.kept_groups[conv] = int(out_alive.sum())
        return purged, out_alive

    def linear(self, layer: nn.Module, alive: torch.Tensor | None, read: torch.Tensor | None
               ) -> tuple[SelectFeatures | None, nn.Linear, torch.Tensor | None]:
        """A linear layer keeping its alive, non-zero input neurons and the outputs its successor reads.

        ``read`` masks the output neurons the next linear layer keeps (None: all).
        After a flattened convolution output each channel owns ``H * W``
        consecutive features, all removed with the channel. When the purged
        input holds features the layer does not read (the model's input pixels,
        or features of a kept channel with a zero gate), a :class:`SelectFeatures`
        in front of the layer picks the read ones.
        """
        if alive is None:
            alive = torch.ones(layer.in_features, dtype=torch.bool, device=layer.weight.device)
        per_unit = layer.in_features // len(alive)
        present = (_kept(alive).view(-1, 1) * per_unit + torch.arange(per_unit, device=alive.device)).flatten()
        scale = self.scale(layer) * alive.repeat_interleave(per_unit)
        positions = _kept(scale[present] != 0)
        cols, rows = present[positions], _kept(read, layer.out_features)
        bias = None if layer.bias is None else layer.bias[rows]
        purged = _linear_like(layer.weight[rows][:, cols] * scale[cols], bias)
        select = SelectFeatures(positions) if len(positions) < len(present) else None
        self.kept_groups[layer] = int(scale.count_nonzero())
        return select, purged, read

    def resnet_block(self, block: nn.Module) -> nn.Sequential:
        """BasicBlock or Bottleneck: a chain of gated ConvBN units, scattered back to full width."""
        branch_names, activation = _RESNET_BLOCKS[type(block)]
        branch, alive = self.sequence([(name, getattr(block, name)) for name in branch_names])
        if not alive.all():
            branch["scatter"] = ScatterChannels(_kept(alive), len(alive))
        shortcut = nn.Identity() if block.shortcut is None else self.conv(block.shortcut, None)[0]
        return nn.Sequential(OrderedDict(residual=Residual(nn.Sequential(branch), shortcut),
                                         relu=copy.deepcopy(getattr(block, activation))))

    def wide_block(self, block: WideBasicBlock) -> nn.Module:
        """Pre-activation WideResNet block: the gated conv1 (with bn2) slices the dense conv2's inputs.

        conv2 is dense, so the block's output keeps its full width. The identity
        shortcut reads the block input, a projection shortcut the activated one.
        """
        pre_activation = [("bn1", copy.deepcopy(block.bn1)), ("relu1", copy.deepcopy(block.relu1))]
        branch, _ = self.sequence([("conv1", block.conv1), ("relu2", block.relu2), ("conv2", block.conv2)])
        if block.shortcut is None:
            return Residual(nn.Sequential(OrderedDict(pre_activation + list(branch.items()))), nn.Identity())
        shortcut, _ = self.conv(block.shortcut, None)
        residual = Residual(nn.Sequential(branch), shortcut)
        return nn.Sequential(OrderedDict(pre_activation + [("residual", residual)]))


def _scales_by_layer(model: nn.Module, scales: dict[str, torch.Tensor]) -> dict[nn.Module, torch.Tensor]:
    """Check ``scales`` against ``model`` and key them by layer instead of by name."""
    by_layer = {}
    modules = dict(model.named_modules())
    for name, scale in scales.items():
        layer = modules.get(name)
        if not isinstance(layer, (*_CONVS, *_LINEARS)):
            raise ValueError(f"scales[{name!r}]: the model has no linear or convolutional layer named {name!r}")
        size = layer.out_channels if isinstance(layer, _CONVS) else layer.in_features
        if scale.shape != (size,):
            raise ValueError(f"scales[{name!r}] must have shape ({size},), one value per group; "
                             f"got shape {tuple(scale.shape)}")
        by_layer[layer] = scale.to(layer.weight)
    for name, layer in modules.items():
        if isinstance(layer, L0Layer) and (layer.sparsity == "unstructured" or layer not in by_layer):
            raise ValueError(f"gated layer {name!r} ({layer.sparsity}) needs a scale per group; "
                             "purge unstructured models with purge()")
    return by_layer


def _kept(alive: torch.Tensor | None, size: int | None = None) -> torch.Tensor:
    """Indices of the alive units: all ``size`` units when ``alive`` is None, the placeholder [0] if none is."""
    if alive is None:
        return torch.arange(size)
    kept = alive.nonzero().flatten()
    return kept if len(kept) else torch.zeros(1, dtype=torch.long, device=alive.device)


def _conv_like(conv: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Conv2d:
    """An ``nn.Conv2d`` with the geometry of ``conv`` holding the given weight and bias."""
    out_channels, in_channels, kernel_size, _ = weight.shape
    purged = skip_init(nn.Conv2d, in_channels, out_channels, kernel_size, stride=conv.stride, padding=conv.padding,
                       bias=bias is not None, device=weight.device, dtype=weight.dtype)
    purged.weight.copy_(weight)
    if bias is not None:
        purged.bias.copy_(bias)
    return purged


def _linear_like(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """An ``nn.Linear`` holding the given weight and bias."""
    out_features, in_features = weight.shape
    purged = skip_init(nn.Linear, in_features, out_features, bias=bias is not None,
                       device=weight.device, dtype=weight.dtype)
    purged.weight.copy_(weight)
    if bias is not None:
        purged.bias.copy_(bias)
    return purged


def _sliced_batchnorm(bn: nn.BatchNorm2d, rows: torch.Tensor, alive: torch.Tensor) -> nn.BatchNorm2d:
    """The batch-norm channels ``rows``; a placeholder channel (``alive`` False) gets a zero affine map.

    ConvBN zeroes the output of inactive channels; with weight and bias 0 the
    placeholder's output is exactly 0 too.
    """
    purged = nn.BatchNorm2d(len(rows), eps=bn.eps, momentum=bn.momentum,
                            device=bn.weight.device, dtype=bn.weight.dtype)
    purged.weight.copy_(bn.weight[rows] * alive)
    purged.bias.copy_(bn.bias[rows] * alive)
    purged.running_mean.copy_(bn.running_mean[rows])
    purged.running_var.copy_(bn.running_var[rows])
    purged.num_batches_tracked.copy_(bn.num_batches_tracked)
    return purged


# --------------------------------------------------------------------------- #
# Unstructured purging (App. L)
# --------------------------------------------------------------------------- #


@torch.no_grad()
def _masked_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose gated layers are plain layers holding ``theta_tilde * z_hat``."""
    masked = copy.deepcopy(model)
    for name, layer in list(masked.named_modules()):
        if isinstance(layer, L0Layer):
            weight, bias = layer.gated_weight_and_bias(median=True)
            plain = _conv_like(layer, weight, bias) if isinstance(layer, L0Conv2d) else _linear_like(weight, bias)
            parent, _, child = name.rpartition(".")
            setattr(masked.get_submodule(parent), child, plain)
    return masked
