"""The channels of a traced model: which tensors share a channel index, and which channels are exactly zero.

:func:`~paperlib.method.sparsify.sparsify` and :func:`~paperlib.method.graph_purge.purge` read a model through its
``torch.fx`` graph, as Torch-Pruning reads its dependency graph. Two tensors are in one *channel group* when channel
``c`` of one is computed from channel ``c`` of the other alone: through a batch norm, an activation, pooling (also
``x.mean((2, 3))``), dropout, a depthwise convolution, flattening, or an element-wise sum or product of two such
tensors. A group's channels are made by its *sources* (convolutions with ``groups=1``, linear layers) and read by its
*sinks* (the same layers, one group on): in a ResNet block conv1's channels are read by conv2, while conv2's join the
residual sum, and with it every tensor of the stage. A concatenation along the channels (Inception) makes a group whose
channels are its inputs', in segments; where a batch norm, a sigmoid or a sum meets it (DenseNet), a closed channel of
an input is no longer zero where it is read: that input group *leaks*, and the default rule does not gate it. Channels
run along dimension 1, except the features a linear layer computes from a tensor of three or four dimensions (a
transformer's MLP), which run along the last, where only element-wise operations join a group.

A group is *pinned* when slicing its channels could change what the model computes, or the graph does not show that it
could not: it holds the model's input or output, an operation not listed above, a module whose weights the forward uses
twice (called twice, read directly, or tied to another module's), a tensor that is neither ``(N, C)`` nor
``(N, C, H, W)``, or the input of a linear layer that reads the last dimension of such a tensor. A channel is *zero*
when it is exactly zero for every input (a row of zero weights and a zero bias, ``f(0) = 0`` of a zero channel, ...);
removing a channel of an unpinned group changes nothing when every sink ignores it.

Where ``torch.fx`` cannot trace a forward (Python control flow on a tensor's values), :func:`trace` calls the modules
``leaves`` selects whole, without entering them: the channels on their way in and out are pinned, and the layers inside
are neither gated nor sliced. ``leaves="auto"`` finds them (:func:`untraceable`) and, where the model's own forward is
what fails, traces its children apart, each a *part* whose input and output are pinned.
"""

import math
import operator
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import TensorMetadata

#: Modules and functions that act on the last two dimensions, each channel separately, mapping a zero channel to a zero
#: channel: per channel only when channels run along dimension 1.
_SPATIAL_MODULES = (nn.Dropout2d, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
_SPATIAL_FUNCTIONS = {F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d, F.interpolate}
#: Modules and functions that act on each channel separately and map a zero channel to a zero channel: the element-wise
#: ones, and the spatial ones.
_ZERO_PRESERVING_MODULES = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.Hardtanh, nn.SiLU, nn.GELU, nn.Hardswish, nn.Tanh,
                            nn.ELU, nn.Dropout, nn.Identity, *_SPATIAL_MODULES)
_ZERO_PRESERVING_FUNCTIONS = {F.relu, torch.relu, F.relu6, F.leaky_relu, F.hardtanh, F.silu, F.gelu, F.hardswish,
                              torch.tanh, F.elu, F.dropout, *_SPATIAL_FUNCTIONS}
_ZERO_PRESERVING_METHODS = {"relu", "relu_", "contiguous", "clone", "tanh"}
#: Channel by channel, but f(0) != 0.
_CHANNELWISE_MODULES = (nn.Sigmoid, nn.Hardsigmoid)
_CHANNELWISE_FUNCTIONS = {torch.sigmoid, F.sigmoid, F.hardsigmoid}
_CHANNELWISE_METHODS = {"sigmoid"}
#: Element-wise operations of two tensors: channel c of the result reads channel c of both.
_SUMS = {operator.add, operator.iadd, torch.add, operator.sub, operator.isub, torch.sub}
_PRODUCTS = {operator.mul, operator.imul, torch.mul}
#: Reductions that pool each channel over its positions with ``dim=(2, 3)`` (:meth:`ChannelGraph._pools`).
_POOLS = {torch.mean, "mean", torch.sum, "sum", torch.amax, "amax"}
#: Uses of a tensor that read only its shape.
_SHAPE_METHODS = {"size", "dim"}
#: Concatenations: along dimension 1, each input's channels are a segment of the output's.
_CONCATS = {torch.cat, torch.concat, torch.concatenate}
_BATCH_NORMS = nn.modules.batchnorm._BatchNorm


#: Selects modules of a model: a module's qualified name (``"layer1.0.conv1"``), or a predicate
#: ``f(name, module) -> bool``.
Selector = str | Callable[[str, nn.Module], bool]


def select_modules(selectors: Iterable[Selector] | Selector | None, candidates: dict[str, nn.Module], what: str,
                   kind: str) -> set[str]:
    """The names among ``candidates`` that ``selectors`` select; a name that is not a candidate is an error that names
    the argument (``what``), says what a candidate is (``kind``) and lists them."""
    if selectors is None:
        return set()
    if isinstance(selectors, str) or callable(selectors):
        selectors = [selectors]
    names = set()
    for selector in selectors:
        if callable(selector):
            names |= {name for name, module in candidates.items() if selector(name, module)}
        elif selector in candidates:
            names.add(selector)
        else:
            raise ValueError(f"{what}: {selector!r} is not {kind}; those are: {', '.join(candidates) or 'none'}")
    return names


def _traced(model: nn.Module, chosen: set[str]) -> fx.GraphModule:
    """``model`` traced with the submodules named in ``chosen`` called whole; raises what ``torch.fx`` raises."""

    class Tracer(fx.Tracer):
        def is_leaf_module(self, module: nn.Module, name: str) -> bool:
            return name in chosen or super().is_leaf_module(module, name)

    return fx.GraphModule(model, Tracer().trace(model), model.__class__.__name__)


def _untraceable(model: nn.Module) -> dict[str, str]:
    """Name -> fx's error, of the modules that ``torch.fx`` cannot trace even with those listed inside them called
    whole; the model itself (``""``) last, and those inside it stay listed."""
    chosen: dict[str, str] = {}
    for name, module in sorted(model.named_modules(), key=lambda item: -(item[0].count(".") + bool(item[0]))):
        if name and fx.Tracer().is_leaf_module(module, name):  # torch.nn's own layers: never entered
            continue
        inside = {c: why for c, why in chosen.items() if not name or c.startswith(name + ".")}
        try:
            _traced(module, {c[len(name) + bool(name):] for c in inside})
        except Exception as error:  # fx raises several types
            why = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            chosen = {c: w for c, w in chosen.items() if c not in inside or not name} | {name: why}
    return chosen


def untraceable(model: nn.Module) -> list[str]:
    """The submodules that ``torch.fx`` cannot trace, each as deep as possible: listed when it cannot be traced even
    with the listed modules inside it called whole (its own code fails), and none inside a listed one is."""
    return sorted(set(_untraceable(model)) - {""}, key=[name for name, _ in model.named_modules()].index)


def _parts(model: nn.Module, name: str = "") -> tuple[dict, dict]:
    """:func:`trace` with ``leaves="auto"`` from the module ``name`` down."""
    module = model.get_submodule(name)
    try:
        return {name: _traced(module, set())}, {}
    except Exception:
        failed = _untraceable(module)
    if "" not in failed:
        return {name: _traced(module, set(failed))}, {full_name(name, c): why for c, why in failed.items()}
    parts, untraced = {}, {name: f"torch.fx cannot trace its forward ({failed['']})"}
    for child, sub in module.named_children():
        if not fx.Tracer().is_leaf_module(sub, child):
            more = _parts(model, full_name(name, child))
            parts, untraced = parts | more[0], untraced | more[1]
    return parts, untraced


def trace(model: nn.Module, reader: str, leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None
          ) -> tuple[dict[str, fx.GraphModule], dict[str, str]]:
    """``model`` traced by ``torch.fx`` as ``{"": graph module}``, the submodules ``leaves`` selects called whole (see
    the module docstring), and those, by name, with why. ``leaves="auto"`` calls :func:`untraceable`'s modules whole and
    warns which; where fx cannot trace the model's own forward, its children are traced apart (``{"body": ...}``, the
    same rule again inside a child fx cannot trace), and the code around them runs as it is. ``reader`` names the
    function that reads the model, for the error when tracing fails."""
    if leaves == "auto":
        parts, untraced = _parts(model)
        if untraced:
            names = (n or f"{type(model).__name__}'s forward (its children are traced apart)" for n in untraced)
            warnings.warn(f"{reader}: torch.fx cannot trace {', '.join(names)}; each is called whole: its channels are "
                          f"kept and its layers neither gated nor sliced", stacklevel=3)
    else:
        chosen = select_modules(leaves, dict(list(model.named_modules())[1:]), "leaves", "a submodule of the model")
        untraced = dict.fromkeys(chosen, "called whole (leaves=)")
        try:
            parts = {"": _traced(model, chosen)}
        except Exception as error:  # fx raises several types; say what failed, why, and the way around it
            raise ValueError(f"{reader} reads the model through torch.fx, which cannot trace {type(model).__name__}: "
                             f"{error}. Pass the submodules that hold what cannot be traced in leaves=, each then "
                             f"called whole, its channels kept and its layers neither gated nor sliced; or "
                             f"leaves='auto', which finds them, and traces the model's children apart where its own "
                             f"forward is what fails") from error
    owners = Counter(id(p) for m in model.modules() for p in m.parameters(recurse=False))  # tied weights
    for part in parts.values():
        part.meta["owners"] = owners
    return parts, untraced


def full_name(part: str, target: str) -> str:
    """A module's name in the model, from its name in the traced ``part`` (:func:`trace`)."""
    return f"{part}.{target}" if part else target


def is_depthwise(conv: nn.Conv2d) -> bool:
    """One filter per input channel: channel c of the output reads channel c of the input only."""
    return conv.groups > 1 and conv.groups == conv.in_channels == conv.out_channels


@dataclass
class Group:
    """Tensors sharing one channel index (see the module docstring)."""

    nodes: list = field(default_factory=list)
    #: Nodes creating the group's channels: convolutions with groups=1 and linear layers.
    sources: list = field(default_factory=list)
    #: Batch norms and depthwise convolutions inside the group, whose parameters are per channel.
    channel_ops: list = field(default_factory=list)
    #: (layer node, input node) of the convolutions and linear layers reading the group.
    sinks: list = field(default_factory=list)
    #: Why the group's channels must stay (empty: they may go).
    pinned: set = field(default_factory=set)
    #: Whether a sum or product of two tensors joins the group (a residual connection, a gating branch).
    merged: bool = False
    #: Why a channel closed in this group may not be zero where a layer reads it after a concatenation (a batch norm or
    #: a sum after it): the default rule does not gate the group; purge removes what is zero.
    leaks: set = field(default_factory=set)


class ChannelGraph:
    """The channel groups of a traced model, and, with shapes, its zero channels.

    ``graph_module`` comes from :func:`trace` (or ``torch.fx.symbolic_trace``); when ``ShapeProp`` ran on it, the
    tensors' shapes are known, flattening is resolved into features per channel and :meth:`zero_channels` can be called.

    >>> import torchvision
    >>> graph = ChannelGraph(torch.fx.symbolic_trace(torchvision.models.resnet18()))
    >>> conv1 = next(n for n in graph.module.graph.nodes if n.target == "layer1.0.conv1")
    >>> [n.target for n in graph.group(conv1).sources], [layer.target for layer, _ in graph.group(conv1).sinks]
    (['layer1.0.conv1'], ['layer1.0.conv2'])
    """

    def __init__(self, graph_module: fx.GraphModule, cuts: dict | None = None):
        self.module = graph_module
        #: Sums whose one summand (the value) is read as by a layer, not joined: purge's residual branches.
        self.cuts = cuts or {}
        self.modules = dict(graph_module.named_modules())
        #: Per module, how often the forward uses its weights: its calls, its parameters read directly, or shared with
        #: another module of the model (tied weights; :func:`trace` knows the whole model's).
        nodes, params = graph_module.graph.nodes, dict(graph_module.named_parameters(remove_duplicate=False))
        calls = Counter(n.target for n in nodes if n.op == "call_module")
        uses = Counter(id(p) for n in nodes if n.op == "call_module" for p in self._own(n.target))
        uses.update(id(params[n.target]) for n in nodes if n.op == "get_attr" and n.target in params)
        uses |= graph_module.meta.get("owners", Counter())
        self.calls = Counter({t: max([c, *(uses[id(p)] for p in self._own(t))]) for t, c in calls.items()})
        self._parent: dict = {}
        #: Features per channel of each node: H * W after flattening an (N, C, H, W) tensor, else 1.
        self.block: dict = {}
        #: The dimension along which each node's channels run: 1, or -1 (a linear layer's features on the last dimension
        #: of a tensor of three or four dimensions).
        self.axis: dict = {}
        self._sources, self._ops, self._sinks, self._pins, self._merged = [], [], [], [], []
        #: Nodes that may turn a zero channel into a nonzero one: batch norms, sigmoids, depthwise biases.
        self._unzeroing: list = []
        #: Each concatenation along the channels, with the nodes it concatenates, in graph order.
        self.concats: list[tuple[fx.Node, list[fx.Node]]] = []
        for node in graph_module.graph.nodes:
            self._visit(node)
        groups: dict = {}
        for node in self._parent:
            groups.setdefault(self.find(node), Group()).nodes.append(node)
        for attribute, items in (("sources", self._sources), ("channel_ops", self._ops)):
            for node in items:
                getattr(groups[self.find(node)], attribute).append(node)
        for layer, inp in self._sinks:
            groups[self.find(inp)].sinks.append((layer, inp))
        for node, reason in self._pins:
            groups[self.find(node)].pinned.add(reason)
        for node in self._merged:
            groups[self.find(node)].merged = True
        self.groups = list(groups.values())
        self._group = {root: group for root, group in groups.items()}
        self._concatenated = dict(self.concats)
        unzeroing = {self.find(node) for node in self._unzeroing}
        for node, parts in reversed(self.concats):  # the last first: a concatenation of concatenations
            joined = self.group(node)
            leaks = set(joined.leaks)
            if joined.merged:
                leaks.add(f"{node.name} joins a sum or product")
            if self.find(node) in unzeroing:
                leaks.add(f"a batch norm or sigmoid reads {node.name}")
            for part in parts:
                self.group(part).pinned |= {f"concatenated by {node.name}: {reason}" for reason in joined.pinned}
                self.group(part).leaks |= leaks

    def _own(self, target: str) -> list:
        return list(self.modules[target].parameters(recurse=False))

    # ----- union-find ----------------------------------------------------------
    def find(self, node):
        while self._parent[node] is not node:
            self._parent[node] = self._parent[self._parent[node]]
            node = self._parent[node]
        return node

    def _new(self, node, block: int = 1, axis: int = 1):
        self._parent[node], self.block[node], self.axis[node] = node, block, axis

    def _union(self, node, other, block: int | None = None):
        self._parent.setdefault(node, node)
        self.block[node] = self.block[other] if block is None else block
        self.axis[node] = self.axis[other]
        self._parent[self.find(node)] = self.find(other)

    def group(self, node) -> Group:
        """The group of a tensor node."""
        return self._group[self.find(node)]

    # ----- building ------------------------------------------------------------
    @staticmethod
    def is_tensor(node) -> bool:
        meta = node.meta.get("tensor_meta")
        if meta is not None or "type" in node.meta:
            return isinstance(meta, TensorMetadata)
        return not (node.op == "call_method" and node.target in _SHAPE_METHODS
                    or node.op == "call_function" and node.target in (getattr, operator.getitem)
                    and not ChannelGraph.is_tensor(node.args[0]))

    def _tensor_inputs(self, node) -> list:
        return [n for n in node.all_input_nodes if n in self._parent]

    def _pin_all(self, node, reason: str) -> None:
        for inp in self._tensor_inputs(node):
            self._pins.append((inp, reason))
        self._new(node)
        self._pins.append((node, reason))

    def _visit(self, node) -> None:
        if node.op == "output":
            for inp in self._tensor_inputs(node):
                self._pins.append((inp, "model output"))
            return
        if not self.is_tensor(node):
            if not self._reads_shape_only(node):
                for inp in self._tensor_inputs(node):
                    self._pins.append((inp, f"read by {node.format_node()}"))
            return
        meta = node.meta.get("tensor_meta")
        if node.op == "placeholder":
            self._new(node)
            self._pins.append((node, "model input"))
        elif node.op == "get_attr":
            self._new(node)
            self._pins.append((node, f"parameter {node.target} used directly"))
        elif node.op == "call_module":
            self._visit_module(node, self.modules[node.target])
        else:
            self._visit_operation(node)
        if meta is not None and len(meta.shape) not in (2, 4) and self.axis.get(node) != -1:
            self._pin_all(node, f"{node.name} is {len(meta.shape)}-dimensional")

    def _reads_shape_only(self, node) -> bool:
        return (node.op == "call_method" and node.target in _SHAPE_METHODS
                or node.op == "call_function" and node.target is getattr and node.args[1] in ("shape", "dtype"))

    def _visit_module(self, node, module: nn.Module) -> None:
        inp = node.args[0] if node.args else None
        if inp not in self._parent or len(self._tensor_inputs(node)) != 1:
            return self._pin_all(node, f"module {node.target} takes other inputs")
        if self._own(node.target) and self.calls[node.target] > 1:
            return self._pin_all(node, f"the weights of module {node.target} are used {self.calls[node.target]} times")
        meta = inp.meta.get("tensor_meta")
        last = self.axis[inp] == -1
        if isinstance(module, nn.Conv2d) and module.groups == 1 or isinstance(module, nn.Linear):
            features_last = isinstance(module, nn.Linear) and meta is not None and len(meta.shape) > 2
            if features_last and not last:
                self._pins.append((inp, f"linear layer {node.target} reads the last of {len(meta.shape)} dimensions"))
            elif isinstance(module, nn.Conv2d) and last:
                self._pins.append((inp, f"convolution {node.target} reads channels that run along the last dimension"))
            else:
                self._sinks.append((node, inp))
            self._new(node, axis=-1 if features_last else 1)
            self._sources.append(node)
            if isinstance(module, nn.Conv2d) and self.block[inp] != 1:
                self._pins.append((inp, f"flattened input of {node.target}"))
        elif last and isinstance(module, (nn.Conv2d, _BATCH_NORMS, nn.Flatten, *_SPATIAL_MODULES)):
            self._pin_all(node, f"module {node.target} ({type(module).__name__}) does not act per channel on "
                                f"channels that run along the last dimension")
        elif isinstance(module, nn.Conv2d) and is_depthwise(module) or isinstance(module, _BATCH_NORMS):
            self._union(node, inp)
            self._ops.append(node)
            if isinstance(module, _BATCH_NORMS) or module.bias is not None:
                self._unzeroing.append(node)
        elif isinstance(module, nn.Flatten) and module.start_dim == 1 and module.end_dim == -1:
            self._flatten(node, inp)
        elif isinstance(module, (*_ZERO_PRESERVING_MODULES, *_CHANNELWISE_MODULES)):
            self._union(node, inp)
            if isinstance(module, _CHANNELWISE_MODULES):
                self._unzeroing.append(node)
        else:
            self._pin_all(node, f"module {node.target} ({type(module).__name__}) is not known to act per channel")

    def _visit_operation(self, node) -> None:
        inputs = self._tensor_inputs(node)
        target, first = node.target, node.args[0] if node.args else None
        known = (_ZERO_PRESERVING_FUNCTIONS | _CHANNELWISE_FUNCTIONS if node.op == "call_function"
                 else _ZERO_PRESERVING_METHODS | _CHANNELWISE_METHODS)
        if len(inputs) == 1 and first is inputs[0] and (target in known and not (
                self.axis[first] == -1 and target in _SPATIAL_FUNCTIONS) or self._pools(node) and self.axis[first] == 1):
            self._union(node, first)
            if target in _CHANNELWISE_FUNCTIONS | _CHANNELWISE_METHODS:
                self._unzeroing.append(node)
        elif target in _SUMS | _PRODUCTS and node.op == "call_function" or target in ("add", "mul", "sub"):
            if len(inputs) == 1:  # a tensor and a number
                self._union(node, inputs[0])
                if target not in _PRODUCTS and target != "mul":
                    self._unzeroing.append(node)
            elif len(inputs) == 2 and self._same_channels(*inputs):
                joined = [inp for inp in inputs if inp is not self.cuts.get(node)]
                self._union(node, joined[0])
                if len(joined) == 2:
                    self._union(inputs[1], inputs[0])
                else:
                    self._sinks.append((node, self.cuts[node]))
                self._merged.append(node)
            else:
                self._pin_all(node, f"{node.name} broadcasts across channels")
        elif len(inputs) == 1 and first is inputs[0] and self._flattens(node) and self.axis[first] == 1:
            self._flatten(node, first)
        elif (parts := self._concatenated(node, inputs)) is not None:
            self._new(node)
            self.concats.append((node, parts))
        else:
            self._pin_all(node, f"{node.format_node()} is not known to act per channel")

    def _concatenated(self, node, inputs: list) -> list | None:
        """The tensors ``node`` concatenates, if it is ``torch.cat([a, b, ...], 1)`` (or ``dim=1``) of tensors whose
        channels run along dimension 1, one channel per feature; else None."""
        if node.op != "call_function" or node.target not in _CONCATS:
            return None
        parts = node.args[0] if node.args else node.kwargs.get("tensors")
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if (dim == 1 and isinstance(parts, (list, tuple)) and len(parts) > 0
                and all(isinstance(part, fx.Node) and part in self._parent for part in parts)
                and all(self.axis[part] == 1 and self.block[part] == 1 for part in parts)
                and len(inputs) == len(set(parts))):
            return list(parts)
        return None

    def _same_channels(self, a, b) -> bool:
        shapes = [n.meta.get("tensor_meta") for n in (a, b)]
        if self.axis[a] != self.axis[b]:
            return False
        if any(s is None for s in shapes):
            return True
        if self.axis[a] == -1:
            return tuple(shapes[0].shape) == tuple(shapes[1].shape)
        return tuple(shapes[0].shape[1:2]) == tuple(shapes[1].shape[1:2]) and self.block[a] == self.block[b]

    @staticmethod
    def _pools(node) -> bool:
        """``x.mean((2, 3))``, ``torch.sum(x, dim=[-2, -1], keepdim=True)``, ``x.amax((2, 3))``: global pooling."""
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        meta = node.args[0].meta.get("tensor_meta") if node.args and isinstance(node.args[0], fx.Node) else None
        return node.target in _POOLS and isinstance(dims, (tuple, list)) and (
            sorted(dims) in ([2, 3], [-2, -1]) if meta is None else len(meta.shape) == 4
            and sorted(d % 4 for d in dims) == [2, 3])

    @staticmethod
    def _flattens(node) -> bool:
        """``torch.flatten(x, 1)``, ``x.flatten(1)``, ``x.view(x.size(0), -1)`` or ``x.reshape(x.size(0), -1)``."""
        args = list(node.args[1:]) + list(node.kwargs.values())
        if node.target in (torch.flatten, "flatten"):
            return args in ([1], [1, -1])
        if node.target in ("view", "reshape") or node.target is torch.reshape:
            sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
            return (len(sizes) == 2 and sizes[1] == -1 and isinstance(sizes[0], fx.Node)
                    and sizes[0].op == "call_method" and sizes[0].target == "size" and sizes[0].args[1:] == (0,))
        return False

    def _flatten(self, node, inp) -> None:
        meta = inp.meta.get("tensor_meta")
        self._union(node, inp, self.block[inp] * (math.prod(meta.shape[2:]) if meta is not None else 1))

    # ----- zero channels -------------------------------------------------------
    @torch.no_grad()
    def zero_channels(self) -> dict:
        """Node -> bool tensor over its channels (:attr:`axis`): entries exactly zero for every input (needs shapes).

        Evaluated for the module in eval mode (batch norms use their running statistics).
        """
        zero = {}
        for node in self.module.graph.nodes:
            meta = node.meta.get("tensor_meta")
            if not isinstance(meta, TensorMetadata) or len(meta.shape) < 2:
                continue
            size = meta.shape[self.axis.get(node, 1)]
            zero[node] = self._zero(node, size, zero)
            if zero[node] is None or zero[node].shape != (size,):
                zero[node] = torch.zeros(size, dtype=torch.bool)
        return zero

    def _zero(self, node, size: int, zero: dict):
        inputs = [zero.get(n) for n in node.all_input_nodes]
        first = inputs[0] if inputs else None
        if node.op == "call_module":
            module = self.modules[node.target]
            if first is None:
                return None
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                weight = module.weight.detach()
                inputs = module.in_channels if isinstance(module, nn.Conv2d) else module.in_features
                if first.shape != (inputs,):  # its input's channels run along another dimension: none known zero
                    first = torch.zeros(inputs, dtype=torch.bool)
                if isinstance(module, nn.Conv2d) and module.groups > 1:  # each group reads its own input slice
                    live = ~first.view(module.groups, -1).repeat_interleave(module.out_channels // module.groups, 0)
                    silent = ~(weight.ne(0).flatten(2).any(2) & live).any(1)
                else:  # a row of zero weights: a zero input channel does not silence the layer (the paper's purge)
                    silent = ~weight.ne(0).flatten(1).any(1)
                return silent if module.bias is None else silent & module.bias.detach().eq(0)
            if isinstance(module, _BATCH_NORMS):
                out = module.eval()(torch.zeros(1, size, *([1] * (len(node.meta["tensor_meta"].shape) - 2))))
                constant_zero = out.flatten(1).eq(0).all(1) if out.dim() > 2 else out[0].eq(0)
                scaled_out = (module.weight.detach().eq(0) & module.bias.detach().eq(0)) if module.affine else False
                return (first & constant_zero.view(-1)) | scaled_out
            if isinstance(module, nn.Flatten):
                return first.repeat_interleave(size // len(first))
            if isinstance(module, _ZERO_PRESERVING_MODULES):
                return first
            return None
        target = node.target
        if target in _ZERO_PRESERVING_FUNCTIONS or target in _ZERO_PRESERVING_METHODS or self._pools(node):
            return first
        parts = self._concatenated.get(node)
        if parts is not None:
            return torch.cat([zero[part] for part in parts]) if all(part in zero for part in parts) else None
        if node.op in ("call_function", "call_method") and self._flattens(node) and first is not None:
            return first.repeat_interleave(size // len(first))
        tensors = [zero.get(n) for n in node.args if isinstance(n, fx.Node) and n in zero]
        if target in _SUMS or target in ("add", "sub"):
            if len(tensors) == 2 and tensors[0].shape == tensors[1].shape:
                return tensors[0] & tensors[1]
        if target in _PRODUCTS or target == "mul":
            if len(tensors) == 1:
                return tensors[0]
            if len(tensors) == 2 and tensors[0].shape == tensors[1].shape:
                return tensors[0] | tensors[1]
        return None
