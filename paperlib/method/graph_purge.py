"""Purging any gated model through its traced graph (App. D): :func:`purge`.

The purged model is a copy of the user's model, of the same class, whose layers are plain ``nn.Conv2d`` / ``nn.Linear``
/ ``nn.BatchNorm2d`` modules with fewer channels. It is made in three steps:

1. the *test-time model*: every gated layer becomes the plain layer it computes
   with its median gates (eq. 9). A gate's value is absorbed into the weights
   it multiplies, or, where a convolution took its batch norm in
   (:class:`~paperlib.method.sparsify.GatedConv2d`), into that batch norm's scale and
   shift, and the batch norm goes back to its place. A closed channel is then
   exactly zero. The paper's own layers (:class:`~paperlib.method.layers.L0Conv2d`,
   :class:`~paperlib.method.layers.L0Linear`, :class:`~paperlib.method.layers.ConvBN`) are
   made plain the same way;
2. the test-time model is traced with ``torch.fx`` on ``example_input`` and its
   channels grouped (:mod:`paperlib.method.channels`). In a group that is not pinned,
   a channel that every reading layer ignores (its input there is exactly zero,
   or its weights there are) is removed everywhere: the output rows of the
   layers creating it, the batch norms and depthwise convolutions along the
   way, the input columns of the layers reading it ("double sparsification");
3. a linear layer also drops its input features whose weights are all zero
   (the gates of :class:`~paperlib.method.sparsify.GatedLinear`), through a
   :class:`SelectFeatures` in front of it when the features themselves stay.

A closed channel that stays (its group is pinned, e.g. by a residual sum, or another layer still reads it) is reported:
the purged model's ``purge_report`` maps each such gated layer to the closed channels it keeps, and a warning says so. A
group never loses all its channels: one zero channel stays, so that every tensor keeps a channel.
"""

import contextlib
import copy
import io
import sys
import warnings
from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn as nn
from torch.fx.passes.shape_prop import ShapeProp

from .channels import ChannelGraph, Selector, is_depthwise, trace
from .layers import ConvBN, L0Conv2d, L0Linear
from .sparsify import GatedConv2d, GatedLinear, _set_module


class SelectFeatures(nn.Module):
    """Keep the features ``index`` (along the last dimension) of a linear layer's input."""

    def __init__(self, index: torch.Tensor):
        super().__init__()
        self.register_buffer("index", index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(-1, self.index)

    def extra_repr(self) -> str:
        return f"{len(self.index)} features"


@torch.no_grad()
def purge(model: nn.Module, example_input: torch.Tensor,
          leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None) -> nn.Module:
    """The smaller dense model computing what gated ``model`` computes at test time (median gates).

    ``model`` is any model gated by :func:`paperlib.method.sparsify.sparsify` (or
    built from this package's gated layers, or plain); ``example_input`` is
    one batch it accepts. The result's ``purge_report`` lists the closed
    channels that could not be removed (see the module docstring). ``leaves``
    selects submodules that ``torch.fx`` is not to enter, as for
    :func:`~paperlib.method.sparsify.sparsify` (:func:`paperlib.method.channels.trace`).

    >>> import torchvision
    >>> from paperlib.method.sparsify import sparsify
    >>> model = sparsify(torchvision.models.resnet18(num_classes=10)).eval()
    >>> with torch.no_grad():
    ...     model.layer1[0].conv1.weight_log_alpha[:40] = -10.0  # close 40 of 64 channels
    >>> small = purge(model, torch.randn(1, 3, 32, 32))
    >>> small.layer1[0].conv1, small.layer1[0].conv2.in_channels
    (Conv2d(64, 24, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False), 24)
    """
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(f"example_input must be a tensor, one batch the model accepts (e.g. torch.randn(1, 3, 32, "
                        f"32)); got {type(example_input).__name__}")
    plain, gated = at_test_time(model)
    plain.eval()
    traced = trace(plain, "purge", leaves)
    _propagate(traced, example_input, type(model).__name__)
    graph = ChannelGraph(traced)
    zero = graph.zero_channels()
    kept = {}  # group index -> bool mask over its channels
    groups = {id(group): index for index, group in enumerate(graph.groups)}
    concatenated = {groups[id(graph.group(part))] for _, parts in graph.concats for part in parts}
    for index, group in enumerate(graph.groups):
        channels = _channels(graph, group)
        if channels is None:  # a pinned group of scalars or vectors (a ConvNeXt's layer scale): nothing to slice
            continue
        kept[index] = torch.ones(channels, dtype=torch.bool)
        if not group.pinned and (group.sinks or index in concatenated):
            kept[index] = torch.zeros(channels, dtype=torch.bool)
            for layer, inp in group.sinks:
                kept[index] |= _read(graph.modules[layer.target], zero[inp]).view(channels, -1).any(1)
    # a concatenation's channels are its inputs' (in segments): a channel stays where the concatenation's readers read
    # it, the last concatenation first; then each concatenation is what its inputs keep
    for node, parts in reversed(graph.concats):
        whole = kept.get(groups[id(graph.group(node))])
        offsets = [0]
        for part in parts:
            offsets.append(offsets[-1] + part.meta["tensor_meta"].shape[1])
        for part, start, end in zip(parts, offsets, offsets[1:]):
            if whole is not None and groups[id(graph.group(part))] in kept:
                kept[groups[id(graph.group(part))]] |= whole[start:end]
    for mask in kept.values():
        if not mask.any():
            mask[0] = True
    for node, parts in graph.concats:
        kept[groups[id(graph.group(node))]] = torch.cat([kept[groups[id(graph.group(part))]] for part in parts])
    keep = {}  # node -> bool mask over its channels (dimension graph.axis[node])
    for index, group in enumerate(graph.groups):
        if index in kept:
            for node in group.nodes:
                keep[node] = kept[index].repeat_interleave(graph.block[node])
    _slice(plain, graph, keep, zero)
    plain.purge_report = _report(gated, graph, keep)
    if plain.purge_report:
        where = ", ".join(f"{name} ({len(c)})" for name, c in plain.purge_report.items())
        warnings.warn(f"purge kept closed channels it could not remove, in {where}; see purge_report", stacklevel=2)
    return plain.train(model.training)


def _propagate(traced: torch.fx.GraphModule, example: torch.Tensor, name: str) -> None:
    """Shapes on the graph from ``example``; an example the model cannot read (or, read by a convolution first, one
    without its batch dimension) is a one-line error that says what the model's first layer reads."""
    modules = dict(traced.named_modules())
    first = next((n for n in traced.graph.nodes if n.op == "call_module"
                  and isinstance(modules[n.target], (nn.Conv2d, nn.Linear))), None)
    layer = None if first is None else modules[first.target]
    reads = "" if layer is None else f"; its first layer, {first.target}, reads " + (
        f"(batch, {layer.in_channels}, H, W)" if isinstance(layer, nn.Conv2d) else f"(..., {layer.in_features})")
    problem = None
    if isinstance(layer, nn.Conv2d) and first.args[0].op == "placeholder" and example.dim() != 4:
        problem = "a batch of images has 4 dimensions"
    else:
        printed = io.StringIO()  # ShapeProp prints the traceback of a node that fails before it raises
        try:
            with contextlib.redirect_stderr(printed):
                ShapeProp(traced).propagate(example)
            sys.stderr.write(printed.getvalue())
        except Exception as err:  # ShapeProp's error names the node; its cause says what failed there
            problem = str(err.__cause__ or err).strip().splitlines()[-1][:300]
    if problem:
        raise ValueError(f"{name} cannot run on example_input of shape {tuple(example.shape)} ({problem}){reads}") \
            from None


def at_test_time(model: nn.Module) -> tuple[nn.Module, dict]:
    """A copy of ``model`` whose gated layers are plain layers with their median gates absorbed (step 1).

    Also returns, per structured gated convolution, by name, its channels whose median gate is 0.
    """
    plain = copy.deepcopy(model)
    closed, done = {}, set()
    with torch.no_grad():
        for name, module in list(plain.named_modules()):
            if id(module) in done:
                continue
            if isinstance(module, GatedConv2d) and module.sparsity == "structured":
                z = module.group_gate_values(median=True).detach()
                closed[name] = (z == 0).nonzero().flatten().tolist()
                if module.bn is None:
                    _set_module(plain, name, _plain_conv(module.conv, *module.gated_weight_and_bias(median=True)))
                elif module.bn_name:
                    _set_module(plain, name, module.conv)
                    _set_module(plain, module.bn_name, _scaled_batch_norm(module.bn, z))
                else:
                    _set_module(plain, name, nn.Sequential(module.conv, _scaled_batch_norm(module.bn, z)))
            elif isinstance(module, ConvBN) and isinstance(module.conv, L0Conv2d):
                done.add(id(module.conv))
                if module.conv.sparsity == "structured":  # ConvBN zeroes the batch norm's closed channels
                    z = module.conv.group_gate_values(median=True).detach()
                    closed[f"{name}.conv"] = (z == 0).nonzero().flatten().tolist()
                    module.bn = _scaled_batch_norm(module.bn, z.ne(0).to(z.dtype))
                module.conv = _plain_conv(module.conv, *module.conv.gated_weight_and_bias(median=True))
            elif isinstance(module, (GatedConv2d, L0Conv2d)):
                if module.sparsity == "structured":
                    closed[name] = (module.group_gate_values(median=True) == 0).nonzero().flatten().tolist()
                source = module.conv if isinstance(module, GatedConv2d) else module
                _set_module(plain, name, _plain_conv(source, *module.gated_weight_and_bias(median=True)))
            elif isinstance(module, (GatedLinear, L0Linear)):
                weight, bias = module.gated_weight_and_bias(median=True)
                linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                                   device="meta")
                _set_module(plain, name, _filled(linear, weight, bias))
    return plain, closed


def _filled(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    """``layer`` holding ``weight`` and ``bias`` (new tensors, not shared with another module)."""
    with torch.no_grad():
        layer.weight = nn.Parameter(weight.detach())
        layer.bias = None if bias is None else nn.Parameter(bias.detach())
    return layer


def _plain_conv(source: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, **changes) -> nn.Conv2d:
    """An ``nn.Conv2d`` with the geometry of ``source`` (``nn.Conv2d`` or :class:`L0Conv2d`) and these tensors."""
    out_channels, in_per_group = weight.shape[:2]
    groups = changes.get("groups", getattr(source, "groups", 1))
    conv = nn.Conv2d(in_per_group * groups, out_channels, weight.shape[2:], stride=source.stride,
                     padding=source.padding, dilation=getattr(source, "dilation", 1), groups=groups,
                     bias=bias is not None, padding_mode=getattr(source, "padding_mode", "zeros"),
                     device="meta")
    return _filled(conv, weight, bias)


def _scaled_batch_norm(bn: nn.BatchNorm2d, z: torch.Tensor) -> nn.BatchNorm2d:
    """A copy of ``bn`` whose output channel c is multiplied by z[c] (an affine one if ``bn`` is not)."""
    scaled = copy.deepcopy(bn)
    weight = bn.weight if bn.affine else torch.ones_like(z)
    bias = bn.bias if bn.affine else torch.zeros_like(z)
    scaled.affine = True
    return _filled(scaled, weight * z, bias * z)


def _sliced_batch_norm(bn: nn.modules.batchnorm._BatchNorm, index: torch.Tensor) -> nn.Module:
    sliced = copy.deepcopy(bn)
    sliced.num_features = len(index)
    for name in ("weight", "bias"):
        if getattr(bn, name) is not None:
            setattr(sliced, name, nn.Parameter(getattr(bn, name).detach()[index].clone()))
    for name in ("running_mean", "running_var"):
        if getattr(bn, name) is not None:
            setattr(sliced, name, getattr(bn, name)[index].clone())
    return sliced


def _channels(graph: ChannelGraph, group) -> int | None:
    """The group's number of channels; None when none of its tensors has a dimension 1."""
    for node in group.nodes:
        shape = node.meta["tensor_meta"].shape
        if len(shape) >= 2:
            return shape[graph.axis[node]] // graph.block[node]
    return None


def _read(layer: nn.Module, zero: torch.Tensor) -> torch.Tensor:
    """Which input features of a convolution (groups=1) or linear layer reach its output."""
    nonzero = layer.weight.detach().ne(0)
    columns = nonzero.any(0) if nonzero.dim() == 2 else nonzero.flatten(2).any(2).any(0)
    return columns & ~zero


def _slice(plain: nn.Module, graph: ChannelGraph, keep: dict, zero: dict) -> None:
    """Replace the layers of ``plain`` by their kept channels (steps 2 and 3)."""
    for node in graph.module.graph.nodes:
        if node.op != "call_module" or node not in keep:
            continue
        layer, out = graph.modules[node.target], keep[node].nonzero().flatten()
        weight = layer.weight.detach() if isinstance(layer, (nn.Conv2d, nn.Linear)) else None
        inp = keep.get(node.args[0])
        full_out = len(out) == len(keep[node])
        if isinstance(layer, nn.Conv2d) and is_depthwise(layer):
            if not full_out:
                bias = None if layer.bias is None else layer.bias[out]
                _set_module(plain, node.target, _plain_conv(layer, weight[out], bias, groups=len(out)))
        elif isinstance(layer, nn.Conv2d) and layer.groups == 1:
            columns = inp.nonzero().flatten()
            if not full_out or len(columns) < len(inp):
                bias = None if layer.bias is None else layer.bias[out]
                rows = weight if full_out else weight.index_select(0, out)
                _set_module(plain, node.target, _plain_conv(layer, rows.index_select(1, columns), bias))
        elif isinstance(layer, nn.Linear):
            if len(node.args[0].meta["tensor_meta"].shape) == 2 or graph.axis[node.args[0]] == -1:
                read = inp & _read(layer, zero[node.args[0]])
            else:  # it reads the last dimension of a tensor whose channels run along dimension 1 (a layer norm's
                # output): that group is pinned, and the layer still drops the features whose weights are all zero
                inp = torch.ones(layer.in_features, dtype=torch.bool)
                read = _read(layer, torch.zeros(layer.in_features, dtype=torch.bool))
            if not read.any():
                read[inp.nonzero().flatten()[:1]] = True
            bias = None if layer.bias is None else layer.bias[out]
            linear = nn.Linear(int(read.sum()), len(out), bias=bias is not None, device="meta")
            rows = weight if full_out else weight.index_select(0, out)
            linear = _filled(linear, rows.index_select(1, read.nonzero().flatten()), bias)
            if not read[inp].all():
                linear = nn.Sequential(SelectFeatures(read[inp].nonzero().flatten()), linear)
            if not full_out or not read.all():
                _set_module(plain, node.target, linear)
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm) and not full_out:
            _set_module(plain, node.target, _sliced_batch_norm(layer, out))


def _report(closed: dict, graph: ChannelGraph, keep: dict) -> dict:
    """Gated convolution -> its closed channels that the purged model keeps.

    A layer that ``example_input``'s forward pass does not reach (GoogLeNet's auxiliary classifiers in eval mode) is not
    in the graph and keeps them all."""
    nodes = {n.target: n for n in graph.module.graph.nodes if n.op == "call_module"}
    report = {}
    for name, channels in closed.items():
        node = nodes.get(name) or nodes.get(f"{name}.0")
        stays = channels if node is None else [c for c in channels if keep[node][c]]
        if stays:
            report[name] = stays
    return report
