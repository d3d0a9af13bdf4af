"""Gated layers: hard-concrete gates on a convolution's or a linear layer's weights (paper §2, App. B and App. L).

:class:`GatedLinear` and :class:`GatedConv2d` take an ``nn.Linear``'s or ``nn.Conv2d``'s weight and bias as their own,
under their names (``fc.weight``; the gates are ``fc.weight_log_alpha``): :func:`~paperlib.method.sparsify.sparsify`
puts them on anyone's model, and the paper's models (:mod:`paperlib.paper.models`) are built from them.
``"structured"`` sparsity (§2) has one gate per *input feature* of a linear layer and per *output channel* of a
convolution; ``"unstructured"`` (App. L) one per weight and bias entry. A gate multiplies what it gates (theta =
theta_tilde * z), except in a structured :class:`GatedConv2d` that took in its batch norm: ``bn(conv(x)) * z``. Each
layer counts the parameters its gates can switch off and those active in expectation, whose ratio is the L0-density of
eq. 3. As in the authors' code, a convolution's bias belongs to its output channel's group, and a structured linear
layer's bias is never gated nor counted. The paper's models wrap a gated convolution and its batch norm in
:class:`ConvBN`.
"""
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from . import gates
from .vocabulary import SPARSITY_KINDS


def _check_sparsity(sparsity: str) -> None:
    if sparsity not in SPARSITY_KINDS:
        raise ValueError(f"sparsity must be one of {SPARSITY_KINDS}; got {sparsity!r}")


class L0Layer(nn.Module):
    """What :class:`GatedLinear` and :class:`GatedConv2d` share: gates on the ``weight`` and ``bias`` of ``layer`` (an
    ``nn.Linear`` or ``nn.Conv2d``), which become this module's. ``structured_shape`` is the structured gates' shape;
    unstructured, one gate per weight (``weight_log_alpha``) and bias entry (``bias_log_alpha``, else None). Subclasses
    define :attr:`group_size` (parameters per structured gate, App. B) and :meth:`_group_view` (per-gate values
    broadcast against ``weight``)."""

    #: Whether a structured gate also switches off its group's bias entry (a convolution's output channel), or the bias
    #: is never gated (a linear layer's input neuron).
    bias_in_group: bool = False

    #: The training forward's gated (weight, bias, channel mask), when :mod:`paperlib.method.gate_pass` computed them
    #: for every layer at once; None: the layer samples its own gates.
    pass_params: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None = None

    def __init__(self, layer: nn.Module, sparsity: str, rho_init: float, structured_shape: tuple[int, ...]):
        super().__init__()
        _check_sparsity(sparsity)
        self.sparsity = sparsity
        self.weight, self.bias = layer.weight, layer.bias
        self.weight_log_alpha = nn.Parameter(torch.empty(structured_shape if sparsity == "structured"
                                                         else tuple(self.weight.shape)))
        gates.init_log_alpha_(self.weight_log_alpha, rho_init)
        self.bias_log_alpha = None
        if sparsity == "unstructured" and self.bias is not None:
            self.bias_log_alpha = nn.Parameter(torch.empty(self.bias.shape))
            gates.init_log_alpha_(self.bias_log_alpha, rho_init)
        self.to(self.weight.device)

    # ----- gate values -------------------------------------------------------
    def gate_tensors(self, median: bool, uniforms: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One gate per entry of ``weight_log_alpha`` and of ``bias_log_alpha`` (None when the bias has no gates).

        ``median=True`` gives the deterministic test-time gates (eq. 9), else one reparametrised sample per gate (eq.
        7), from ``uniforms`` (noise shaped like the two tensors) when given, else from a fresh draw.
        """
        uniforms = uniforms or (None, None)
        return tuple(None if log_alpha is None
                     else gates.median_gates(log_alpha) if median else gates.sample_gates(log_alpha, uniform=u)
                     for log_alpha, u in zip((self.weight_log_alpha, self.bias_log_alpha), uniforms))

    def _broadcast_gates(self, weight_z: torch.Tensor, bias_z: torch.Tensor | None):
        if self.sparsity == "unstructured":
            return weight_z, bias_z
        bias_z = weight_z if (self.bias is not None and self.bias_in_group) else None
        return self._group_view(weight_z), bias_z

    def gated_weight_and_bias(self, median: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weight and bias multiplied by their gates: theta = theta_tilde * z (§2)."""
        return self._apply_gates(*self._broadcast_gates(*self.gate_tensors(median)))

    def _apply_gates(self, weight_z: torch.Tensor, bias_z: torch.Tensor | None):
        """The product with gates broadcast to the parameters' shapes, laid out in memory like the weight: where NCHW
        and channels_last describe the same tensor (LeNet5's conv1 has one input channel) it could come out NCHW, and
        the convolution and everything after it up to the next one would run in the slower layout."""
        bias = self.bias if (self.bias is None or bias_z is None) else self.bias * bias_z
        weight = self.weight * weight_z
        if weight.stride() != self.weight.stride():
            weight = torch.empty_strided(self.weight.shape, self.weight.stride(), dtype=weight.dtype,
                                         device=weight.device).copy_(weight)
        return weight, bias

    def forward_params(self, weight_z: torch.Tensor, bias_z: torch.Tensor | None):
        """What the forward computes with, from the gates of :meth:`gate_tensors`: (weight, bias, channel mask); the
        mask (which output channels have a non-zero gate) exists for structured convolutions only, else it is None."""
        return *self._apply_gates(*self._broadcast_gates(weight_z, bias_z)), None

    def _forward_params(self):
        if self.training and self.pass_params is not None:
            return self.pass_params
        return self.forward_params(*self.gate_tensors(median=not self.training))

    def group_gate_values(self, median: bool = True) -> torch.Tensor:
        """One value per structured group (per input neuron or output channel), unbroadcast."""
        return self.gate_tensors(median)[0]

    # ----- expected L0 and L2 ------------------------------------------------
    @property
    def num_sparsifiable_params(self) -> int:
        """#(theta_g) of eq. 3: parameters that some gate can switch off."""
        if self.sparsity == "unstructured":
            return self.weight.numel() + (0 if self.bias is None else self.bias.numel())
        return self.weight_log_alpha.numel() * self.group_size

    def gate_probabilities(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """P(z != 0) of every gate of ``weight_log_alpha`` and of ``bias_log_alpha`` (eq. 8)."""
        return tuple(None if log_alpha is None else gates.prob_active(log_alpha)
                     for log_alpha in (self.weight_log_alpha, self.bias_log_alpha))

    def expected_active_params(self, probs: tuple | None = None) -> torch.Tensor:
        """E[||theta_g||_0] = sum_j P(z_j != 0) * (parameters gated by z_j) (eq. 8), whose share of the layer's
        parameters is the L0-density of eq. 3; ``probs`` are the layer's :meth:`gate_probabilities` if known."""
        prob_w, prob_b = probs or self.gate_probabilities()
        if self.sparsity == "structured":
            return prob_w.sum() * self.group_size
        return prob_w.sum() if prob_b is None else prob_w.sum() + prob_b.sum()

    def density(self) -> torch.Tensor:
        """Layer-wise L0-density: expected active over sparsifiable parameters (eq. 3)."""
        return self.expected_active_params() / self.num_sparsifiable_params

    def expected_l2(self, detach_gates: bool = True, probs: tuple | None = None) -> torch.Tensor:
        """E[||theta_hat||_2^2] = sum_j P(z_j != 0) * theta_tilde_j^2 (§2, eq. 13). With ``detach_gates`` (the paper's
        fix, App. H.2) the probabilities are constants, so weight decay cannot switch gates off. Ungated biases of
        structured linear layers enter with probability one. ``probs`` are the layer's :meth:`gate_probabilities`."""
        prob_w, prob_b = probs or self.gate_probabilities()
        if detach_gates:
            prob_w = prob_w.detach()
            prob_b = None if prob_b is None else prob_b.detach()
        if self.sparsity == "unstructured":
            total = (prob_w * self.weight.pow(2)).sum()
            if prob_b is not None:
                total = total + (prob_b * self.bias.pow(2)).sum()
            return total
        total = (self._group_view(prob_w) * self.weight.pow(2)).sum()
        if self.bias is not None:
            prob_b = prob_w if self.bias_in_group else torch.ones_like(self.bias)
            total = total + (prob_b * self.bias.pow(2)).sum()
        return total

    def gate_parameters(self) -> list[nn.Parameter]:
        """The learnable ``log_alpha`` tensors of this layer."""
        return [p for p in (self.weight_log_alpha, self.bias_log_alpha) if p is not None]

    def clamp_log_alpha_(self) -> None:
        """Clamp every ``log_alpha`` to [ln 0.01, ln 100] (authors' code)."""
        for p in self.gate_parameters():
            gates.clamp_log_alpha_(p)


class GatedLinear(L0Layer):
    """An ``nn.Linear`` with gates: one per input feature, shared by the weights leaving it (structured; the bias is
    not gated), or one per weight and per bias entry (unstructured).

    >>> GatedLinear(nn.Linear(4, 2))(torch.randn(3, 4)).shape
    torch.Size([3, 2])
    """

    def __init__(self, linear: nn.Linear, sparsity: str = "structured", rho_init: float = gates.RHO_INIT):
        super().__init__(linear, sparsity, rho_init, (linear.in_features,))
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def group_size(self) -> int:
        return self.weight.shape[0]  # the weights one input feature's gate scales: one per output

    def _group_view(self, per_gate: torch.Tensor) -> torch.Tensor:
        return per_gate.view(1, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias, _ = self._forward_params()
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, sparsity={self.sparsity}"


class GatedConv2d(L0Layer):
    """An ``nn.Conv2d`` (any: groups, depthwise, dilation, padding modes, bias or not) with gates, and the batch norm
    after it, if any: one gate per output channel, shared by its filter and bias (structured; with ``bn``, the gate
    multiplies the batch norm's output instead), or one per weight and per bias entry (unstructured, without ``bn``).
    ``bn_name`` is where the batch norm sat in the model, so that :func:`~paperlib.method.graph_purge.purge` can put it
    back.

    >>> layer = GatedConv2d(nn.Conv2d(3, 8, 3, groups=1, dilation=2), nn.BatchNorm2d(8))
    >>> layer(torch.randn(2, 3, 9, 9)).shape
    torch.Size([2, 8, 5, 5])
    """

    bias_in_group = True
    _GEOMETRY = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
                 "output_padding", "padding_mode", "_reversed_padding_repeated_twice")

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, sparsity: str = "structured",
                 rho_init: float = gates.RHO_INIT, bn_name: str | None = None):
        if bn is not None and sparsity != "structured":
            raise ValueError("only a structured GatedConv2d takes in its batch norm")
        super().__init__(conv, sparsity, rho_init, (conv.out_channels,))
        self.bn, self.bn_name = bn, bn_name
        for name in self._GEOMETRY:
            setattr(self, name, getattr(conv, name))

    @property
    def group_size(self) -> int:
        return self.weight[0].numel() + (1 if self.bias is not None else 0)

    def _group_view(self, per_gate: torch.Tensor) -> torch.Tensor:
        return per_gate.view(-1, 1, 1, 1)

    def forward_params(self, weight_z: torch.Tensor, bias_z: torch.Tensor | None):
        """(weight, bias, channel mask). Structured: the mask is 1 for output channels with a non-zero gate, else 0;
        with a batch norm taken in, (the channel gates, None, None)."""
        if self.sparsity == "unstructured":
            return super().forward_params(weight_z, bias_z)
        if self.bn is not None:
            return weight_z, None, None
        bias = None if self.bias is None else self.bias * weight_z
        return self.weight * self._group_view(weight_z), bias, weight_z.ne(0).to(weight_z.dtype)

    def forward_with_mask(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output, and which output channels have a non-zero gate in the same sample (1, else 0; None when
        unstructured, or with a batch norm taken in: channels a purge never removes, or that output exact zeros)."""
        first, second, mask = self._forward_params()
        if self.bn is None:
            return nn.Conv2d._conv_forward(self, x, first, second), mask
        return self.bn(nn.Conv2d._conv_forward(self, x, self.weight, self.bias)) * first.view(1, -1, 1, 1), mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with_mask(x)[0]

    def extra_repr(self) -> str:
        return f"{nn.Conv2d.extra_repr(self)}, sparsity={self.sparsity}"

    def __setstate__(self, state: dict) -> None:  # also a checkpoint's L0Conv2d, pickled before the one family
        padding = state.pop("_padding_repeated", None)
        defaults = {"bn": None, "bn_name": None, "output_padding": (0, 0), "_reversed_padding_repeated_twice": padding}
        state = {**{k: v for k, v in defaults.items() if k not in state.get("_modules", {})}, **state}  # bn: a module
        state |= {k: _pair(state[k]) for k in ("kernel_size", "stride", "padding", "dilation")
                  if not isinstance(state[k], str)}
        super().__setstate__(state)


#: The names under which checkpoints made before the one family pickled the paper's gated layers: the harness resumes
#: trainings from them.
L0Linear, L0Conv2d = GatedLinear, GatedConv2d


class ConvBN(nn.Module):
    """A convolution followed by batch normalisation, gated or not.

    When the convolution is a structured :class:`GatedConv2d`, the batch-norm output of channels whose gate is zero is
    zero and their running statistics are left untouched, as the authors' ``L0BatchNorm2d`` does. Without this a closed
    channel would still emit the batch-norm shift ``beta``, and purging it (App. D) would change the output.
    """

    def __init__(self, conv: nn.Module, bn: nn.BatchNorm2d):
        super().__init__()
        self.conv, self.bn = conv, bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(self.conv, GatedConv2d):
            return self.bn(self.conv(x))
        out, mask = self.conv.forward_with_mask(x)
        if mask is None:
            return self.bn(out)
        own_pass = self.training and self.conv.pass_params is None  # else the gate pass keeps every layer's statistics
        with closed_channel_stats_kept([self.bn], [mask]) if own_pass else contextlib.nullcontext():
            return self.bn(out) * mask.view(1, -1, 1, 1)

    def gated_batch_norm(self) -> nn.BatchNorm2d | None:
        """The batch norm whose closed channels keep their running statistics, if any."""
        gated = isinstance(self.conv, GatedConv2d) and self.conv.sparsity == "structured"
        return self.bn if gated and self.bn.track_running_stats else None


@contextlib.contextmanager
def closed_channel_stats_kept(batch_norms: list[nn.BatchNorm2d], masks: list[torch.Tensor]):
    """Within the block, the batch norms update the running statistics of open channels only (``masks``: 1 open, 0
    closed, one per batch norm), as the authors' ``L0BatchNorm2d`` does: a closed channel's zeros would pull them to
    zero. The closed channels' statistics are kept before the block and put back after it, exactly (x * 1 + 0, 0 + x),
    through ``.data``: ``batch_norm`` saves them for its backward, and autograd's version check would fail."""
    stats = [t.data for bn in batch_norms if bn.track_running_stats for t in (bn.running_mean, bn.running_var)]
    open_ = [m for bn, m in zip(batch_norms, masks) if bn.track_running_stats for _ in range(2)]
    if not stats:
        yield
        return
    closed = torch._foreach_add(torch._foreach_neg(open_), 1.0)
    kept = torch._foreach_mul(stats, closed)
    try:
        yield
    finally:
        torch._foreach_mul_(stats, open_)
        torch._foreach_add_(stats, kept)
