"""Hard-concrete gates on anyone's model: :func:`sparsify`.

:func:`sparsify` puts the gates of :mod:`paperlib.method.gates` on the layers of a model of plain ``torch.nn`` layers
(a torchvision ResNet, MobileNetV2, VGG, ConvNeXt, the MLPs of a vision transformer), in place, keeping its weights:
``sparsity="structured"`` (§2) gates each *output channel* of a convolution
(:class:`~paperlib.method.layers.GatedConv2d`) and each *input feature* of a linear layer
(:class:`~paperlib.method.layers.GatedLinear`), as the paper's MLP has; ``"unstructured"`` (App. L) each weight.

Which layers? The model is traced with ``torch.fx`` and its channels grouped (:mod:`paperlib.method.channels`). A
convolution is gated by default when purging can remove its closed channels: they join no residual sum (the paper
gates only the first convolution of a ResNet block, App. J.4-J.6), do not reach the model's output, pass through no
operation the graph does not show to act per channel (a grouped convolution that is not depthwise: ResNeXt, RegNet-X),
and, concatenated (GoogLeNet), meet no batch norm or sum after it (DenseNet). Where channels run through a depthwise
convolution (MobileNet), the last convolution of the run is gated, unless some layer reads the run before it
(ShuffleNet's two-branch blocks). Every linear layer has its input features gated. A layer whose weights the forward
uses twice (called twice, read directly, tied to another layer's) is not gated. ``include`` and ``exclude`` (names, or
predicates ``f(name, module)``) add layers to that rule or take them out.

A structured convolution followed by its batch norm takes it in (its place becomes an ``nn.Identity``) and gates its
output, ``bn(conv(x)) * z``: a closed channel outputs exactly zero, and the batch norm sees the ungated convolution.
Without a batch norm, the gates multiply the weights and bias. The gated layers keep the model's weights under their
names (``layer1.0.conv1.weight``; a batch norm taken in is ``layer1.0.conv1.bn``), so that
:func:`~paperlib.method.graph_purge.load_dense_state_dict` loads a checkpoint of the model before :func:`sparsify`, and
:func:`~paperlib.method.graph_purge.dense_state_dict` gives it back, the gates folded in at test time.
"""

from collections.abc import Iterable
from typing import Literal

import torch
import torch.fx as fx
import torch.nn as nn

from . import gates
from .channels import ChannelGraph, Selector, full_name, select_modules, trace
from .layers import GatedConv2d, GatedLinear, L0Layer, _check_sparsity


def default_layers(model: nn.Module, leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None) -> list[str]:
    """Names of the convolutions and linear layers that :func:`sparsify` gates unless told otherwise.

    >>> import torchvision
    >>> names = default_layers(torchvision.models.resnet18())
    >>> names[:3], names[-1]
    (['layer1.0.conv1', 'layer1.1.conv1', 'layer2.0.conv1'], 'fc')
    """
    parts = trace(model, "default_layers", leaves)[0]
    chosen = {full_name(part, name) for part, traced in parts.items() for name in _defaults(ChannelGraph(traced))}
    return [name for name, _ in model.named_modules() if name in chosen]


def _defaults(graph: ChannelGraph) -> set[str]:
    """:func:`default_layers` of one traced part, by their names in it."""
    order = {node: i for i, node in enumerate(graph.module.graph.nodes)}
    chosen = set()
    for group in graph.groups:
        convs = sorted((n for n in group.sources + group.channel_ops if isinstance(graph.modules[n.target], nn.Conv2d)),
                       key=order.get)
        if convs and not group.pinned and not group.merged and not group.leaks and len(group.sources) == 1 \
                and _reaches_every_sink(convs[-1], group):
            chosen.add(convs[-1].target)
    return chosen | {node.target for node in graph.module.graph.nodes if node.op == "call_module"
                     and isinstance(graph.modules[node.target], nn.Linear) and graph.calls[node.target] == 1}


def _reaches_every_sink(node: fx.Node, group) -> bool:
    """Whether every layer reading ``group`` reads it after ``node``: else a channel ``node``'s gate closes is still
    read, open, by a layer that branches off before it (the first block of a ShuffleNet stage: its input feeds a
    depthwise convolution in one branch and a 1x1 convolution in the other), and purge could not remove it."""
    after, frontier = set(), [node]
    while frontier:
        for user in frontier.pop().users:
            if user not in after:
                after.add(user)
                frontier.append(user)
    return all(inp is node or inp in after for _, inp in group.sinks)


def _selected(selectors: Iterable[Selector] | Selector | None, candidates: dict[str, nn.Module], what: str) -> set:
    return select_modules(selectors, candidates, what, "a convolution or linear layer of the model whose weights its "
                          "forward uses once (called once, not tied to another layer's), outside leaves=")


def sparsify(model: nn.Module, sparsity: str = "structured", include: Iterable[Selector] | Selector | None = None,
             exclude: Iterable[Selector] | Selector | None = None, rho_init: float = gates.RHO_INIT,
             leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None) -> nn.Module:
    """Put hard-concrete gates on ``model``'s convolutions and linear layers, in place; returns ``model``.

    ``sparsity`` is ``"structured"`` (output channels of convolutions, input features of linear layers) or
    ``"unstructured"`` (every weight). The layers are those of :func:`default_layers`, plus ``include`` and minus
    ``exclude`` (module names, or predicates ``f(name, module) -> bool``). ``leaves`` selects submodules that
    ``torch.fx`` is not to enter, for a forward it cannot trace (:func:`paperlib.method.channels.trace`; ``"auto"``:
    those it cannot trace, and the model's children where its own forward is what fails, with a warning); pass the
    same to :func:`~paperlib.method.graph_purge.purge` and :func:`~paperlib.method.budget.report`.
    Each gate's ``log_alpha`` starts at N(log((1 - rho_init) / rho_init), 0.01^2) (App. A.2); the weights are kept.

    >>> import torchvision
    >>> model = sparsify(torchvision.models.resnet18(num_classes=10), exclude="fc")
    >>> model.layer1[0].conv1.weight.shape, type(model.layer1[0].conv1.bn).__name__, model.layer1[0].bn1
    (torch.Size([64, 64, 3, 3]), 'BatchNorm2d', Identity())
    >>> sum(isinstance(m, GatedConv2d) for m in model.modules())
    8
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    _check_sparsity(sparsity)
    gates.initial_log_alpha(rho_init)  # checks the range
    if any(isinstance(m, L0Layer) for m in model.modules()):
        raise ValueError("model already has gated layers")
    candidates, nodes, defaults = {}, {}, set()
    for part, traced in trace(model, "sparsify", leaves)[0].items():
        graph = ChannelGraph(traced)
        defaults |= {full_name(part, name) for name in _defaults(graph)}
        for node in (n for n in traced.graph.nodes if n.op == "call_module"):
            nodes[full_name(part, node.target)] = part, node, graph
            if isinstance(graph.modules[node.target], (nn.Conv2d, nn.Linear)) and graph.calls[node.target] == 1:
                candidates[full_name(part, node.target)] = graph.modules[node.target]
    chosen = (defaults | _selected(include, candidates, "include")) - _selected(exclude, candidates, "exclude")
    for name in [name for name, _ in model.named_modules() if name in chosen]:
        layer = candidates[name]
        if isinstance(layer, nn.Linear):
            _set_module(model, name, GatedLinear(layer, sparsity, rho_init))
            continue
        bn_name = _batch_norm_after(*nodes[name]) if sparsity == "structured" else None
        bn = model.get_submodule(bn_name) if bn_name else None
        _set_module(model, name, GatedConv2d(layer, bn, sparsity, rho_init, bn_name))
        if bn_name:
            _set_module(model, bn_name, nn.Identity())
    return model


def _batch_norm_after(part: str, node: fx.Node, graph: ChannelGraph) -> str | None:
    """The name in the model of the batch norm that alone reads a convolution's output and is called once, if any."""
    users = list(node.users)
    if len(users) == 1 and users[0].op == "call_module" and graph.calls[users[0].target] == 1 \
            and isinstance(graph.modules[users[0].target], nn.BatchNorm2d):
        return full_name(part, users[0].target)
    return None


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)
