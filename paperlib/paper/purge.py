"""Purging the paper's models (App. D) with the method's one engine, :func:`paperlib.method.graph_purge.purge`.

:func:`purge` is that engine: ``purge(model)`` purges one of :mod:`paperlib.paper.models` on a zero batch of its
``input_shape``. This module adds what the paper's tables need: :func:`pruned_architecture` (Table 1's "pruned
architecture"), :func:`purge_groups` (the purge with 0/1 or other scales in place of the median gates, which magnitude
pruning uses: "step 1 is replaced with the ranking-and-thresholding operation of Li et al.", App. D) and
:func:`keep_first` (an architecture the paper gives by its shape, counted).

A layer whose groups are all removed keeps a single *placeholder* group with zero weights, which outputs exact zeros;
it costs its few parameters in :func:`paperlib.method.counting.count_params`, and :func:`pruned_architecture` reports
such a layer as 0.
"""

import copy

import torch
import torch.nn as nn

from ..method.graph_purge import purge
from ..method.layers import ConvBN, L0Layer
from .models import build_model, gated_layer_names, gated_layers

__all__ = ["keep_first", "pruned_architecture", "purge", "purge_groups"]


def pruned_architecture(model: nn.Module) -> list[int]:
    """Groups left by purging, per gated layer: the "Pruned architecture" of Table 1.

    Input neurons for linear layers, output channels for convolutions, e.g.
    198-233-100 for an MLP and 20-21-34-407 for LeNet5 (conv1, conv2, fc1,
    fc2). A linear layer reading a flattened convolution output (LeNet5's fc1)
    counts only the features whose gate *and* whose channel survive.
    """
    if any(layer.sparsity == "unstructured" for layer in gated_layers(model)):
        raise ValueError("pruned_architecture needs a structured model; unstructured purging removes no unit")
    kept = purge(model).kept_groups
    return [kept[name] for name, module in model.named_modules() if isinstance(module, L0Layer)]


@torch.no_grad()
def purge_groups(model: nn.Module, scales: dict[str, torch.Tensor]) -> nn.Module:
    """Remove or rescale the structured groups of ``model`` (App. D, steps 2-4).

    ``model`` is one of :mod:`paperlib.paper.models`, gated or dense. ``scales`` maps
    the module name of a gated layer position (the same in the gated and dense
    forms) to one value per group: per output channel of a convolution, per
    input neuron of a linear layer. A zero removes the group (and, for a convolution followed by batch norm, the batch
    norm's channel, as :class:`~paperlib.method.layers.ConvBN` does for a zero gate), any other value multiplies its
    weights. Every gated layer of ``model`` needs a scale, since its weights mean nothing without their gates.
    """
    modules = dict(model.named_modules())
    for name, scale in scales.items():
        layer = modules.get(name)
        if not isinstance(layer, (nn.Conv2d, nn.Linear, L0Layer)):
            raise ValueError(f"scales[{name!r}]: the model has no linear or convolutional layer named {name!r}")
        size = layer.weight.shape[1 if layer.weight.dim() == 2 else 0]
        if scale.shape != (size,):
            raise ValueError(f"scales[{name!r}] must have shape ({size},), one value per group; "
                             f"got shape {tuple(scale.shape)}")
    for name, layer in modules.items():
        if isinstance(layer, L0Layer) and (layer.sparsity == "unstructured" or name not in scales):
            raise ValueError(f"gated layer {name!r} ({layer.sparsity}) needs a scale per group; "
                             "purge unstructured models with purge()")
    scaled = copy.deepcopy(model)
    for name, scale in scales.items():
        layer, parent = scaled.get_submodule(name), scaled.get_submodule(name.rpartition(".")[0])
        scale = scale.to(layer.weight)
        conv = layer.weight.dim() == 4
        layer.weight.mul_(scale.view(-1, 1, 1, 1) if conv else scale)
        if conv and layer.bias is not None:
            layer.bias.mul_(scale)
        if isinstance(layer, L0Layer):  # gates at exactly 0 (the group's batch-norm channel too) or 1
            layer.weight_log_alpha.copy_(torch.where(scale != 0, 10.0, -10.0))
        elif conv and isinstance(parent, ConvBN) and parent.bn.affine:
            parent.bn.weight.mul_(scale != 0)
            parent.bn.bias.mul_(scale != 0)
    return purge(scaled)


def keep_first(model_name: str, kept: list[int]) -> nn.Module:
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
    scales = {}
    for name, count in zip(names, kept):
        layer = model.get_submodule(name)
        size = layer.out_channels if isinstance(layer, nn.Conv2d) else layer.in_features
        if not 0 <= count <= size:
            raise ValueError(f"layer {name!r} has {size} groups; cannot keep {count}")
        scales[name] = (torch.arange(size) < count).float()
    return purge_groups(model, scales)
