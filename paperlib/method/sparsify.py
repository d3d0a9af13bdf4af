"""Hard-concrete gates on anyone's model: :func:`sparsify`.

:func:`sparsify` puts the gates of :mod:`paperlib.method.gates` on the layers of a model built with plain ``torch.nn``
layers (a torchvision ResNet, a MobileNetV2, a VGG, a ConvNeXt, the MLPs of a vision transformer), in place, keeping its
weights:

* ``sparsity="structured"`` (§2, "Parameter grouping"): one gate per *output channel* of a convolution
  (:class:`~paperlib.method.layers.GatedConv2d`) and one per *input feature* of a linear layer
  (:class:`~paperlib.method.layers.GatedLinear`), as the paper's MLP has;
* ``sparsity="unstructured"`` (App. L): one gate per weight and per bias entry.

Which layers? The model is traced with ``torch.fx`` and its channels grouped (:mod:`paperlib.method.channels`). A
convolution is gated by default when purging can remove its closed channels: its channels do not join a residual sum
(the paper gates only the first convolution of a ResNet block, App. J.4-J.6), do not reach the model's output (a
classifier's outputs stay), pass through no operation the graph does not show to act per channel (a grouped convolution
that is not depthwise, as in ResNeXt and RegNet-X, where the default rule gates almost nothing), and, concatenated
(GoogLeNet's branches), meet no batch norm or sum after the concatenation (DenseNet's dense layers). Where a channel
runs through a depthwise convolution (MobileNet), the last convolution of the run is gated, so that a closed channel is
silent where the next layer reads it; a run that some layer reads before its last convolution (ShuffleNet's two-branch
blocks) is not gated. Every linear layer has its input features gated. ``include`` and ``exclude`` (module names, or
predicates ``f(name, module)``) add layers to that rule or take them out.

A structured convolution followed by its batch norm takes the batch norm in (the batch norm's place in the model becomes
an ``nn.Identity``) and gates its output: ``bn(conv(x)) * z``, so a closed channel outputs exactly zero and the batch
norm's statistics are those of the ungated convolution. Without a batch norm, the gates multiply the weights and bias.

The gated layers are those the paper's models are built from (:mod:`paperlib.method.layers`); they keep the model's
weights under their names (``layer1.0.conv1.weight``; a batch norm taken in is ``layer1.0.conv1.bn``), so that
:func:`~paperlib.method.graph_purge.load_dense_state_dict` loads a checkpoint of the model before :func:`sparsify`, and
:func:`~paperlib.method.graph_purge.dense_state_dict` gives it back, the gates folded in at test time. A group's
parameters, for the densities, are the paper's: a filter and its bias; an input feature's column of weights.
"""

from collections.abc import Iterable
from typing import Literal

import torch
import torch.fx as fx
import torch.nn as nn

from . import gates
from .channels import ChannelGraph, Selector, select_modules, trace
from .layers import GatedConv2d, GatedLinear, L0Layer, _check_sparsity


def default_layers(model: nn.Module, graph: ChannelGraph | None = None) -> list[str]:
    """Names of the convolutions and linear layers that :func:`sparsify` gates unless told otherwise.

    >>> import torchvision
    >>> names = default_layers(torchvision.models.resnet18())
    >>> names[:3], names[-1]
    (['layer1.0.conv1', 'layer1.1.conv1', 'layer2.0.conv1'], 'fc')
    """
    graph = graph or ChannelGraph(trace(model, "default_layers"))
    order = {node: i for i, node in enumerate(graph.module.graph.nodes)}
    chosen = set()
    for group in graph.groups:
        convs = sorted((n for n in group.sources + group.channel_ops if isinstance(graph.modules[n.target], nn.Conv2d)),
                       key=order.get)
        if convs and not group.pinned and not group.merged and not group.leaks and len(group.sources) == 1 \
                and _reaches_every_sink(convs[-1], group):
            chosen.add(convs[-1].target)
    for node in graph.module.graph.nodes:
        if node.op == "call_module" and isinstance(graph.modules[node.target], nn.Linear) \
                and graph.calls[node.target] == 1:
            chosen.add(node.target)
    return [name for name, _ in model.named_modules() if name in chosen]


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
    return select_modules(selectors, candidates, what, "a convolution or linear layer of the model, called once in "
                          "its forward")


def sparsify(model: nn.Module, sparsity: str = "structured", include: Iterable[Selector] | Selector | None = None,
             exclude: Iterable[Selector] | Selector | None = None, rho_init: float = gates.RHO_INIT,
             leaves: Iterable[Selector] | Selector | Literal["auto"] | None = None) -> nn.Module:
    """Put hard-concrete gates on ``model``'s convolutions and linear layers, in place; returns ``model``.

    ``sparsity`` is ``"structured"`` (output channels of convolutions, input features of linear layers) or
    ``"unstructured"`` (every weight). The layers are those of :func:`default_layers`, plus ``include`` and minus
    ``exclude`` (module names, or predicates ``f(name, module) -> bool``). ``leaves`` selects submodules that
    ``torch.fx`` is not to enter, for a forward it cannot trace (:func:`paperlib.method.channels.trace`; ``"auto"``:
    those it cannot trace, with a warning that names them); pass the same to :func:`paperlib.method.graph_purge.purge`.
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
    traced = trace(model, "sparsify", leaves)
    graph = ChannelGraph(traced)
    candidates = {n.target: graph.modules[n.target] for n in traced.graph.nodes
                  if n.op == "call_module" and isinstance(graph.modules[n.target], (nn.Conv2d, nn.Linear))
                  and graph.calls[n.target] == 1}
    chosen = (set(default_layers(model, graph)) | _selected(include, candidates, "include")) \
        - _selected(exclude, candidates, "exclude")
    nodes = {n.target: n for n in traced.graph.nodes if n.op == "call_module"}
    for name in [name for name, _ in model.named_modules() if name in chosen]:
        layer = candidates[name]
        if isinstance(layer, nn.Linear):
            _set_module(model, name, GatedLinear(layer, sparsity, rho_init))
            continue
        bn_name = _batch_norm_after(nodes[name], graph) if sparsity == "structured" else None
        bn = graph.modules[bn_name] if bn_name else None
        _set_module(model, name, GatedConv2d(layer, bn, sparsity, rho_init, bn_name))
        if bn_name:
            _set_module(model, bn_name, nn.Identity())
    return model


def _batch_norm_after(node: fx.Node, graph: ChannelGraph) -> str | None:
    """The name of the batch norm that alone reads a convolution's output and is called once, if any."""
    users = list(node.users)
    if len(users) == 1 and users[0].op == "call_module" and graph.calls[users[0].target] == 1 \
            and isinstance(graph.modules[users[0].target], nn.BatchNorm2d):
        return users[0].target
    return None


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)
