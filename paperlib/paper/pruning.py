"""Magnitude-pruning baselines (§5.5 and App. J.7 structured, App. L unstructured).

Both prune a trained dense model (``build_model(name, gated=False)``) layer by
layer, on exactly the layers that the gated form of the same architecture
gates (:func:`gated_layer_names`), keeping a fraction ``density`` (the
paper's epsilon) of each layer:

* :func:`l1_filter_prune` (Li et al., 2017): in each layer, keep the groups
  with the largest L1 norms, the groups being those of the gates: output
  filters of a convolution, input neurons of a linear layer. The result is
  purged exactly like a gated model whose gates are these 0/1 values (App. D:
  "steps 1 is replaced with the ranking-and-thresholding operation").
* :func:`magnitude_prune_unstructured`: in each layer, keep the weights with the
  largest absolute values; biases stay dense (App. L). During fine-tuning the
  training loop keeps the pruned weights at zero with :func:`weight_masks` and
  :func:`apply_weight_masks_`.

Rounding rule: a layer of ``n`` groups (or weights) keeps
``max(1, round(density * n))`` of them, ``round`` being Python's
round-half-to-even, so that no layer is ever removed entirely.
"""

import copy
import numbers
from collections.abc import Sequence

import torch
import torch.nn as nn
from torch.nn.utils import prune

from .models import gated_layer_names
from .purge import purge_groups


def num_kept(num_groups: int, density: float) -> int:
    """How many of ``num_groups`` groups (or weights) a layer keeps at ``density``: at least one."""
    return max(1, round(density * num_groups))


def l1_filter_prune(dense_model: nn.Module, density: float | Sequence[float], model_name: str) -> nn.Module:
    """Structured L1-norm pruning (Li et al., 2017; §5.5, App. J.7), returned purged (App. D).

    ``density`` is one fraction for every prunable layer or one per layer, in
    the order of :func:`gated_layer_names`. Ties between equal norms keep
    the group with the lower index. The purged model computes what the dense
    model does with the removed groups masked (and, for a convolution followed
    by batch norm, the removed channels' batch-norm outputs zeroed, as
    :class:`~paperlib.method.layers.ConvBN` does for a zero gate).
    """
    names = gated_layer_names(model_name)
    scales = {}
    for name, layer_density in zip(names, _layer_densities(density, len(names))):
        layer = dense_model.get_submodule(name)
        # L1 norm of each group: per output filter of a convolution, per input neuron of a linear layer.
        norms = layer.weight.detach().abs().sum(dim=(1, 2, 3) if layer.weight.dim() == 4 else 0)
        keep = torch.argsort(norms, descending=True, stable=True)[:num_kept(len(norms), layer_density)]
        scales[name] = torch.zeros_like(norms).index_fill_(0, keep, 1.0)
    return purge_groups(dense_model, scales)


def magnitude_prune_unstructured(dense_model: nn.Module, density: float | Sequence[float],
                                 model_name: str) -> nn.Module:
    """Unstructured magnitude pruning (App. L): keep the largest ``|w|`` of each prunable layer.

    Returns a copy of ``dense_model`` of the same architecture whose pruned
    weights are exact zeros, to be counted with ``sparse_weights=True``.
    Biases stay dense. To fine-tune it, take :func:`weight_masks` right away
    and call :func:`apply_weight_masks_` after every optimiser step.
    """
    # torch's pruning flattens each weight with .view(-1), which a channels_last weight does not allow; the
    # caller puts the pruned model back in its memory format (the ranking is that of the NCHW order).
    pruned = copy.deepcopy(dense_model).to(memory_format=torch.contiguous_format)
    names = gated_layer_names(model_name, sparsity="unstructured")
    for name, layer_density in zip(names, _layer_densities(density, len(names))):
        layer = pruned.get_submodule(name)
        size = layer.weight.numel()
        prune.l1_unstructured(layer, "weight", amount=size - num_kept(size, layer_density))
        prune.remove(layer, "weight")  # a plain weight holding the zeros
    return pruned


def weight_masks(model: nn.Module, model_name: str) -> dict[str, torch.Tensor]:
    """The non-zero pattern of each prunable layer's weight, by module name.

    Taken from a freshly pruned model, these are the weights that fine-tuning
    may change (a kept weight that is exactly zero, which has probability
    zero, would stay frozen at zero).
    """
    return {name: model.get_submodule(name).weight.detach() != 0
            for name in gated_layer_names(model_name, sparsity="unstructured")}


@torch.no_grad()
def apply_weight_masks_(model: nn.Module, masks: dict[str, torch.Tensor]) -> None:
    """Zero, in place, the weights outside ``masks``: after each optimiser step, pruned weights stay pruned.

    For element-wise optimisers (SGD with momentum, Adam, weight decay) the kept
    weights then follow exactly the trajectory they would follow if the pruned
    ones were absent from the model.
    """
    for name, mask in masks.items():
        model.get_submodule(name).weight.mul_(mask)


def _layer_densities(density: float | Sequence[float], num_layers: int) -> list[float]:
    """One density per prunable layer (its range is checked where a run's parameters are resolved)."""
    densities = [density] * num_layers if isinstance(density, numbers.Real) else list(density)
    if len(densities) != num_layers:
        raise ValueError(f"density must be a float or a list of {num_layers} floats, one per prunable layer; "
                         f"got a list of {len(densities)}: {density!r}")
    return [float(value) for value in densities]
