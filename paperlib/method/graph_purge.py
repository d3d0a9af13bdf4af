"""Purging (App. D): :func:`purge`, the one engine for the paper's models and any model :func:`sparsify` gated.

The purged model is a ``torch.fx.GraphModule`` of torch modules and operations only, so ``torch.save(purged)`` loads
where paperlib is not installed; its submodules keep their names (``layer1.0.conv1``), with fewer channels, in
``nn.Sequential`` where the model has one. Where ``torch.fx`` cannot trace the model's own forward (``leaves="auto"``,
:func:`~paperlib.method.channels.trace`), it is the model's test-time copy, each traced part purged in its place. Steps:

1. the *test-time model* (:func:`at_test_time`): every gated layer becomes the plain layer it computes with its median
   gates (eq. 9), each gate's value absorbed into the weights it multiplies, or into the scale and shift of the batch
   norm a convolution took in (:class:`~paperlib.method.layers.GatedConv2d`, :class:`~paperlib.method.layers.ConvBN`):
   a closed channel is then exactly zero;
2. that model is traced on ``example_input`` and its channels grouped (:mod:`paperlib.method.channels`). In a group
   that is not pinned, a channel goes everywhere (the rows of the layers making it, the batch norms and depthwise
   convolutions on its way, the columns of the layers reading it) when every reader ignores it: its input there is
   zero, or, for a linear layer reading one feature per channel, its weights there are. A channel that a convolution
   reads stays unless it is zero, as in the paper's purge;
3. a residual branch whose channels are partly zero is cut from its sum: its non-zero channels are added back at their
   places (``torch.index_add``), as the paper's ResNets purge their second convolutions; a linear layer drops its input
   features whose weights are all zero through a ``torch.index_select`` in front of it.

A closed channel that stays (its group is pinned, another layer reads it, or the example does not reach it) is in the
purged model's ``purge_report`` (gated layer -> the closed channels it keeps), with a warning; ``kept_groups`` gives per
structured gated layer the groups left, the paper's "pruned architecture". A group keeps at least one channel. The
test-time graph is that of the model in eval mode. Unstructured gates (App. L) remove no channel: the purged model
keeps the shapes, its weights exact zeros where the median gate is 0.
"""

import contextlib
import copy
import io
import operator
import sys
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from typing import Literal

import torch
import torch.fx as fx
import torch.nn as nn
from torch.fx.passes.shape_prop import ShapeProp

from .channels import ChannelGraph, Selector, full_name, is_depthwise, trace
from .layers import ConvBN, GatedConv2d, GatedLinear, L0Layer
from .sparsify import _set_module

_ADDS = (operator.add, operator.iadd, torch.add)


@torch.no_grad()
def purge(model: nn.Module, example_input: torch.Tensor | None = None,
          leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None) -> fx.GraphModule:
    """The smaller dense model computing what gated ``model`` computes at test time (median gates, eq. 9).

    ``model`` is any model gated by :func:`paperlib.method.sparsify.sparsify`, one built from this package's gated
    layers (the paper's), or plain; ``example_input`` is one batch it accepts (default: zeros of ``model.input_shape``).
    See the module docstring for ``purge_report`` and ``kept_groups``. ``leaves`` selects submodules that ``torch.fx``
    is not to enter, as for :func:`~paperlib.method.sparsify.sparsify`.

    >>> import torchvision
    >>> from paperlib.method.sparsify import sparsify
    >>> model = sparsify(torchvision.models.resnet18(num_classes=10)).eval()
    >>> with torch.no_grad():
    ...     model.layer1[0].conv1.weight_log_alpha[:40] = -10.0  # close 40 of 64 channels
    >>> small = purge(model, torch.randn(1, 3, 32, 32))
    >>> small.layer1[0].conv1, small.layer1[0].conv2.in_channels
    (Conv2d(64, 24, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False), 24)
    """
    if example_input is None:
        if getattr(model, "input_shape", None) is None:
            raise ValueError(f"purge({type(model).__name__}) needs example_input, one batch the model accepts (e.g. "
                             f"torch.randn(1, 3, 32, 32)): the model has no input_shape to make one from")
        example_input = torch.zeros(1, *model.input_shape)
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(f"example_input must be a tensor, one batch the model accepts (e.g. torch.randn(1, 3, 32, "
                        f"32)); got {type(example_input).__name__}")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    plain, gates = at_test_time(model)
    plain = plain.cpu().eval()
    parts, originals = trace(plain, "purge", leaves)[0], dict(plain.named_modules())
    structured = not any(m.sparsity == "unstructured" for m in model.modules() if isinstance(m, L0Layer))
    kept_groups, purge_report = {}, {}
    for part, args in _inputs(plain, parts, example_input.cpu(), type(model).__name__).items():
        traced = parts[part]
        _propagate(traced, args, type(model).__name__)
        own = {name[len(part) + bool(part):]: g for name, g in gates.items() if not part or name.startswith(part + ".")}
        for name, (kept, stays) in (_purge_part(traced, own) if structured else {}).items():
            kept_groups[full_name(part, name)] = kept
            purge_report.update({full_name(part, name): stays} if stays else {})
        for name, module in list(traced.named_modules()):  # where the model has an nn.Sequential, so does the purged one
            if name and type(module) is nn.Module and isinstance(originals.get(full_name(part, name)), nn.Sequential):
                _set_module(traced, name, nn.Sequential(OrderedDict(module.named_children())))
        traced.meta.pop("owners")  # the trace's, not the purged model's
        if part:
            _set_module(plain, part, traced)
    for name, (conv, opened) in gates.items():  # in a part that the example does not reach: as it is, gates folded in
        if name not in kept_groups:
            kept_groups[name] = int(opened.sum())
            purge_report.update({name: (~opened).nonzero().flatten().tolist()} if conv and not opened.all() else {})
    purged = parts.get("", plain)
    purged.purge_report, purged.kept_groups = purge_report, kept_groups
    for attribute in ("input_shape", "num_classes"):
        if hasattr(model, attribute):
            setattr(purged, attribute, getattr(model, attribute))
    if purge_report:
        where = ", ".join(f"{name} ({len(c)})" for name, c in purge_report.items())
        warnings.warn(f"purge kept closed channels it could not remove, in {where}; see purge_report", stacklevel=2)
    return purged.to(device).train(model.training)


def _inputs(plain: nn.Module, parts: dict, example: torch.Tensor, name: str) -> dict:
    """Each traced part (:func:`~paperlib.method.channels.trace`) that the forward on ``example`` reaches, with the
    arguments of its first call."""
    if list(parts) == [""]:
        return {"": (example,)}
    seen = {}
    hooks = [plain.get_submodule(p).register_forward_pre_hook(lambda m, args, p=p: seen.setdefault(p, args))
             for p in parts]
    try:
        with torch.no_grad():
            plain(example)
    except Exception as error:
        raise ValueError(f"{name} cannot run on example_input of shape {tuple(example.shape)} ({error})") from None
    finally:
        for hook in hooks:
            hook.remove()
    return {p: seen[p] for p in parts if p in seen}


def _purge_part(traced: fx.GraphModule, gates: dict) -> dict:
    """Steps 2 and 3 on one traced part whose shapes are known. Per gated layer of ``gates`` (:func:`at_test_time`'s,
    by their names in the part): the open groups it keeps, and the closed channels that stay (a convolution's)."""
    graph = ChannelGraph(traced)
    zero = graph.zero_channels()
    cuts = {node: inp for node in traced.graph.nodes if (inp := _branch(node, graph, zero)) is not None}
    if cuts:
        graph = ChannelGraph(traced, cuts)
        zero = graph.zero_channels()
    keep = _kept(graph, zero)
    nodes = {n.target: n for n in traced.graph.nodes if n.op == "call_module"}
    reads, result = _slice(traced, graph, keep, zero), {}
    for name, (conv, opened) in gates.items():
        node = nodes.get(name) or nodes.get(f"{name}.0")
        kept = keep.get(node, torch.ones_like(opened)) if conv else reads.get(name, torch.ones_like(opened))
        kept = torch.zeros_like(opened) if node is None else kept  # not in the test-time graph: gone
        stays = (~opened & kept).nonzero().flatten().tolist()
        result[name] = int((opened & kept).sum()), stays if conv and (len(stays) > 1 or (opened & kept).any()) else []
    traced.graph.lint()
    traced.recompile()
    return result


def _kept(graph: ChannelGraph, zero: dict) -> dict:
    """Node -> bool mask over its channels (dimension ``graph.axis[node]``): those purging keeps (step 2)."""
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
                read = ~zero[inp]
                if layer.op == "call_module" and isinstance(graph.modules[layer.target], nn.Linear) \
                        and graph.block[inp] == 1:
                    read = _read(graph.modules[layer.target], zero[inp])
                kept[index] |= read.view(channels, -1).any(1)
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
    return {node: kept[index].repeat_interleave(graph.block[node])
            for index, group in enumerate(graph.groups) if index in kept for node in group.nodes}


def _branch(node: fx.Node, graph: ChannelGraph, zero: dict) -> fx.Node | None:
    """The summand that ``node``, a sum of two tensors of one shape with channels along dimension 1, is to read
    through a cut (step 3): the first with a zero channel; None for anything else."""
    if node.op != "call_function" or node.target not in _ADDS or node.kwargs or len(node.args) != 2 \
            or not all(isinstance(a, fx.Node) and a in zero and graph.axis.get(a) == 1 and graph.block[a] == 1
                       for a in node.args) \
            or node.args[0].meta["tensor_meta"].shape != node.args[1].meta["tensor_meta"].shape:
        return None
    return next((a for a in node.args if zero[a].any()), None)


def _propagate(traced: torch.fx.GraphModule, args: tuple, name: str) -> None:
    """Shapes on the graph from ``example``; an example the model cannot read (or, read by a convolution first, one
    without its batch dimension) is a one-line error that says what the model's first layer reads."""
    modules = dict(traced.named_modules())
    first = next((n for n in traced.graph.nodes if n.op == "call_module"
                  and isinstance(modules[n.target], (nn.Conv2d, nn.Linear))), None)
    layer = None if first is None else modules[first.target]
    reads = "" if layer is None else f"; its first layer, {first.target}, reads " + (
        f"(batch, {layer.in_channels}, H, W)" if isinstance(layer, nn.Conv2d) else f"(..., {layer.in_features})")
    problem = None
    example = args[0]
    if isinstance(layer, nn.Conv2d) and first.args[0].op == "placeholder" and example.dim() != 4:
        problem = "a batch of images has 4 dimensions"
    else:
        printed = io.StringIO()  # ShapeProp prints the traceback of a node that fails before it raises
        try:
            with contextlib.redirect_stderr(printed):
                ShapeProp(traced).propagate(*args)
            sys.stderr.write(printed.getvalue())
        except Exception as err:  # ShapeProp's error names the node; its cause says what failed there
            problem = str(err.__cause__ or err).strip().splitlines()[-1][:300]
    if problem:
        raise ValueError(f"{name} cannot run on example_input of shape {tuple(example.shape)} ({problem}){reads}") \
            from None


def at_test_time(model: nn.Module) -> tuple[nn.Module, dict]:
    """A copy of ``model`` whose gated layers are plain layers with their median gates absorbed (step 1).

    Also returns, per structured gated layer, by name: (whether it is a convolution, which of its groups' median gates
    are non-zero: output channels of a convolution, input features of a linear layer).
    """
    plain, gates = copy.deepcopy(model), {}
    with torch.no_grad():
        for name, module in list(plain.named_modules()):
            conv = module.conv if isinstance(module, ConvBN) else None
            if isinstance(module, L0Layer) and module.sparsity == "structured":
                gates[name] = (isinstance(module, GatedConv2d), module.group_gate_values().ne(0).cpu())
            if isinstance(conv, GatedConv2d) and conv.sparsity == "structured":  # ConvBN zeroes its closed channels
                module.bn = _scaled_batch_norm(module.bn, conv.group_gate_values().ne(0).float())
            if isinstance(module, GatedConv2d) and module.bn is not None:
                bn = _scaled_batch_norm(module.bn, module.group_gate_values(median=True))
                conv = _plain_conv(module, module.weight, module.bias)
                _set_module(plain, name, conv if module.bn_name else nn.Sequential(conv, bn))
                if module.bn_name:
                    _set_module(plain, module.bn_name, bn)
            elif isinstance(module, GatedConv2d):
                _set_module(plain, name, _plain_conv(module, *module.gated_weight_and_bias(median=True)))
            elif isinstance(module, GatedLinear):
                weight, bias = module.gated_weight_and_bias(median=True)
                linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
                _set_module(plain, name, _filled(linear, weight, bias))
    return plain, gates


def _filled(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    """``layer`` holding ``weight`` and ``bias`` (new tensors, not shared with another module)."""
    with torch.no_grad():
        layer.weight = nn.Parameter(weight.detach())
        layer.bias = None if bias is None else nn.Parameter(bias.detach())
    return layer


def _plain_conv(source: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, **changes) -> nn.Conv2d:
    """An ``nn.Conv2d`` with the geometry of ``source`` (``nn.Conv2d`` or :class:`GatedConv2d`) and these tensors."""
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


def _slice(traced: fx.GraphModule, graph: ChannelGraph, keep: dict, zero: dict) -> dict:
    """Replace the layers of ``traced`` by their kept channels, and its cut sums by ``index_add`` (steps 2 and 3).
    Returns, per linear layer, the input features it reads (before one is kept for a layer that reads none)."""
    reads = {}
    for node in list(traced.graph.nodes):
        if node in graph.cuts:
            branch = graph.cuts[node]
            other = node.args[1] if node.args[0] is branch else node.args[0]
            if not keep[branch].all() and graph.find(branch) is not graph.find(other):  # else both are sliced alike
                index = _index(traced, node, keep[branch])
                with traced.graph.inserting_before(node):
                    added = traced.graph.call_function(torch.index_add, (other, 1, index, branch))
                node.replace_all_uses_with(added)
                traced.graph.erase_node(node)
            continue
        if node.op != "call_module" or node not in keep:
            continue
        layer, out = graph.modules[node.target], keep[node].nonzero().flatten()
        weight = layer.weight.detach() if isinstance(layer, (nn.Conv2d, nn.Linear)) else None
        inp = keep.get(node.args[0])
        full_out = len(out) == len(keep[node])
        if isinstance(layer, nn.Conv2d) and is_depthwise(layer):
            if not full_out:
                bias = None if layer.bias is None else layer.bias[out]
                _set_module(traced, node.target, _plain_conv(layer, weight[out], bias, groups=len(out)))
        elif isinstance(layer, nn.Conv2d) and layer.groups == 1:
            columns = inp.nonzero().flatten()
            if not full_out or len(columns) < len(inp):
                bias = None if layer.bias is None else layer.bias[out]
                rows = weight if full_out else weight.index_select(0, out)
                _set_module(traced, node.target, _plain_conv(layer, rows.index_select(1, columns), bias))
        elif isinstance(layer, nn.Linear):
            if len(node.args[0].meta["tensor_meta"].shape) == 2 or graph.axis[node.args[0]] == -1:
                read = inp & _read(layer, zero[node.args[0]])
            else:  # it reads the last dimension of a tensor whose channels run along dimension 1 (a layer norm's
                # output): that group is pinned, and the layer still drops the features whose weights are all zero
                inp = torch.ones(layer.in_features, dtype=torch.bool)
                read = _read(layer, torch.zeros(layer.in_features, dtype=torch.bool))
            reads[node.target] = read.clone()
            if not read.any():
                read[inp.nonzero().flatten()[:1]] = True
            bias = None if layer.bias is None else layer.bias[out]
            linear = nn.Linear(int(read.sum()), len(out), bias=bias is not None, device="meta")
            rows = weight if full_out else weight.index_select(0, out)
            if not read[inp].all():  # the features it reads of those that stay
                with traced.graph.inserting_before(node):
                    index = _index(traced, node, read[inp])
                    node.args = (traced.graph.call_function(torch.index_select, (node.args[0], -1, index)),)
            if not full_out or not read.all():
                _set_module(traced, node.target, _filled(linear, rows.index_select(1, read.nonzero().flatten()), bias))
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm) and not full_out:
            _set_module(traced, node.target, _sliced_batch_norm(layer, out))
    return reads


def _index(traced: fx.GraphModule, node: fx.Node, mask: torch.Tensor) -> fx.Node:
    """A buffer of ``traced`` holding the positions of ``mask``, read by a node inserted before ``node``."""
    traced.register_buffer(f"{node.name}_index", mask.nonzero().flatten())
    with traced.graph.inserting_before(node):
        return traced.graph.get_attr(f"{node.name}_index")


def _dense_names(model: nn.Module) -> dict[str, str]:
    """Each entry of a sparsified model's state dict -> its name in the model before ``sparsify``."""
    prefixes = {f"{name}.bn.": f"{module.bn_name}." for name, module in model.named_modules()
                if isinstance(module, GatedConv2d) and module.bn_name}
    return {key: next((dense + key[len(p):] for p, dense in prefixes.items() if key.startswith(p)), key)
            for key in model.state_dict()}


def load_dense_state_dict(model: nn.Module, state_dict: dict, strict: bool = True):
    """Load ``state_dict``, a checkpoint of the model before :func:`~paperlib.method.sparsify.sparsify` (its
    ``state_dict()``), into the sparsified ``model``; the gates keep their values. ``strict``: every other entry of
    the model is in it, and it has no other entry. Returns what ``load_state_dict`` returns.

    >>> import torchvision
    >>> from paperlib.method.sparsify import sparsify
    >>> dense = torchvision.models.resnet18(num_classes=10)
    >>> load_dense_state_dict(sparsify(torchvision.models.resnet18(num_classes=10)), dense.state_dict()).unexpected_keys
    []
    """
    names = _dense_names(model)
    renamed = {dense: key for key, dense in names.items()}
    result = model.load_state_dict({renamed.get(key, key): value for key, value in state_dict.items()}, strict=False)
    missing = [names.get(key, key) for key in result.missing_keys if not key.endswith("log_alpha")]
    if strict and (missing or result.unexpected_keys):
        raise RuntimeError(f"the state dict is not one of {type(model).__name__} before sparsify: missing "
                           f"{missing or 'nothing'}, unexpected {result.unexpected_keys or 'nothing'}")
    return result


def dense_state_dict(model: nn.Module) -> dict:
    """The state dict of sparsified ``model`` as the model before :func:`~paperlib.method.sparsify.sparsify` names
    it, each gate folded in at its test-time value (median, eq. 9): into the weights it multiplies, or, where a
    convolution took its batch norm in, into that batch norm's scale and shift (the batch norm becomes affine). Loaded
    into the stock architecture, it computes what ``model`` computes in eval mode."""
    return at_test_time(model)[0].state_dict()

