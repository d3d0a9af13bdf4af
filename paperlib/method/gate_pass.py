"""Every gate of a model in one pass per training step.

Layer by layer, a step would draw noise once per layer, compute every gate's P(z != 0) twice (for eq. 3 and eq. 13) and
dispatch a dozen small operations per layer and quantity: on a GPU, 3.6-5.5 times the dense step's kernel launches.
:class:`ModelGates` computes, once per step for all layers, everything the gates contribute: one draw of noise for every
gate (the same numbers, in the same order, as the layers' own draws), the gates of eq. 7 and the gated weights, biases
and channel masks the layers' forward uses; P(z != 0) of every gate (eq. 8), once, for the densities (eq. 3) and the
expected L2 term (eq. 13); and the objective's term in the densities (:mod:`paperlib.method.objective`). That work is
one function, :func:`gate_pass`, which ``compile=True`` hands to ``torch.compile`` (a few fused kernels); eagerly it
computes exactly what the layers compute on their own, bit for bit.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from .layers import ConvBN, L0Layer, closed_channel_stats_kept


@dataclass
class GatePass:
    """What the gates contribute to one training step."""

    #: Per gated layer, the (weight, bias, channel mask) its training forward uses.
    forward_params: list[tuple]
    #: The layer-wise L0-densities (eq. 3), shape (layers,), differentiable in ``log_alpha``.
    layer_densities: torch.Tensor
    #: The model-wise L0-density (eq. 3), a 0-d tensor.
    model_density: torch.Tensor
    #: 0.5 * weight decay * the expected L2 norm of the gated weights (eq. 13), a 0-d tensor.
    l2_penalty: torch.Tensor
    #: The constrained or penalized densities d_g: shape (1,) model-wise, (layers,) layer-wise (App. B).
    densities: torch.Tensor
    #: The objective's term in the densities (:mod:`paperlib.method.objective`), a 0-d tensor.
    density_term: torch.Tensor
    #: Per gated batch norm, its layer's channel mask (1: open, 0: closed).
    batch_norm_masks: list


def gate_pass(layers: list[L0Layer], uniform: torch.Tensor, weight_decay: float, detach_gates: bool,
              grouping: str, term: Callable, term_args: tuple, masked: list[int], cost: Callable | None = None) -> tuple:
    """Gates, gated parameters, densities and the objective's terms of ``layers`` from the noise ``uniform``.

    ``uniform`` holds u ~ Unif(0, 1) for every gate, layer after layer, each layer's ``weight_log_alpha`` before its
    ``bias_log_alpha``. The densities of ``grouping`` enter the objective's ``term(densities, *term_args)``; ``masked``
    lists the layers whose channel masks a batch norm needs. ``cost`` (:class:`~paperlib.method.budget.ExpectedCost`),
    when given, replaces the model-wise density by the expected cost's share of the dense model's. Returns the fields of
    :class:`GatePass` as a tuple (what ``torch.compile`` returns best).
    """
    noise = iter(uniform.split([p.numel() for layer in layers for p in layer.gate_parameters()]))
    forward_params, active, l2, weight_probs = [], [], [], []
    for layer in layers:
        uniforms = tuple(None if p is None else next(noise).view(p.shape)
                         for p in (layer.weight_log_alpha, layer.bias_log_alpha))
        forward_params.append(layer.forward_params(*layer.gate_tensors(median=False, uniforms=uniforms)))
        probs = layer.gate_probabilities()
        weight_probs.append(probs[0])
        active.append(layer.expected_active_params(probs))
        if weight_decay:
            l2.append(layer.expected_l2(detach_gates, probs))
    layer_densities = torch.stack([a / layer.num_sparsifiable_params for a, layer in zip(active, layers)])
    model_density = torch.stack(active).sum() / sum(layer.num_sparsifiable_params for layer in layers)
    l2_penalty = 0.5 * weight_decay * torch.stack(l2).sum() if l2 else torch.zeros((), device=uniform.device)
    densities = model_density.reshape(1) if grouping == "model" else layer_densities
    if cost is not None:
        densities = (cost(weight_probs) / cost.dense).reshape(1)
    density_term = term(densities, *term_args)
    masks = [forward_params[i][2] for i in masked]
    return forward_params, layer_densities, model_density, l2_penalty, densities, density_term, masks


def compiles(compile_gates: str, device: torch.device) -> bool:
    """Whether the ``compile_gates`` setting (auto, always, never) compiles the pass on ``device``: auto means on CUDA.

    On CUDA the pass's kernels then launch a few at a time; on the CPU the eager pass keeps a run's numbers bit for bit
    those of the layers' own computation, with no compiler needed (``python -m paperlib.harness.benchmark`` measures
    both).
    """
    return compile_gates == "always" or (compile_gates == "auto" and device.type == "cuda")


class ModelGates:
    """The gated layers of ``model`` and the step's :func:`gate_pass` over them.

    ``compile=True`` runs the pass through ``torch.compile`` (the first step compiles it, some seconds; the numbers then
    agree with the eager pass to float rounding).
    """

    def __init__(self, model: nn.Module, grouping: str, weight_decay: float, detach_gates: bool = True,
                 compile: bool = False, cost: Callable | None = None):
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0; got {weight_decay!r}")
        self.layers = [m for m in model.modules() if isinstance(m, L0Layer)]
        if not self.layers:
            raise ValueError("model has no gated layers; build it with gated=True")
        self.grouping, self.weight_decay, self.detach_gates = grouping, float(weight_decay), bool(detach_gates)
        self.cost = cost
        self.num_gates = sum(p.numel() for layer in self.layers for p in layer.gate_parameters())
        conv_bns = [m for m in model.modules() if isinstance(m, ConvBN) and m.gated_batch_norm() is not None]
        self.batch_norms = [m.bn for m in conv_bns]
        self.masked = [next(i for i, layer in enumerate(self.layers) if layer is m.conv) for m in conv_bns]
        self._pass = torch.compile(gate_pass, dynamic=False) if compile else gate_pass

    def sample(self, term: Callable, term_args: tuple) -> GatePass:
        """Draw the step's gates (one uniform draw for all of them) and compute what they contribute.

        ``term`` and ``term_args`` are the objective's (:mod:`paperlib.method.objective`).
        """
        log_alpha = self.layers[0].weight_log_alpha
        uniform = torch.rand(self.num_gates, dtype=log_alpha.dtype, device=log_alpha.device)
        return GatePass(*self._pass(self.layers, uniform, self.weight_decay, self.detach_gates, self.grouping,
                                    term, term_args, self.masked, self.cost))

    @contextlib.contextmanager
    def installed(self, gate_pass: GatePass):
        """Within the block, each layer's training forward uses the pass's gated parameters, and the batch norms after
        gated convolutions update the statistics of open channels only."""
        for layer, params in zip(self.layers, gate_pass.forward_params):
            layer.pass_params = params
        try:
            with closed_channel_stats_kept(self.batch_norms, gate_pass.batch_norm_masks):
                yield
        finally:
            for layer in self.layers:
                layer.pass_params = None
