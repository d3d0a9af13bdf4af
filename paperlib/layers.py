"""Layers with hard-concrete gates (paper §2, App. B and App. L).

Two sparsity kinds are supported:

* ``"structured"`` (the paper's main setting, §2 "Parameter grouping"):
  :class:`L0Linear` has one gate per *input neuron* and :class:`L0Conv2d` one gate
  per *output feature map*.
* ``"unstructured"`` (App. L): one gate per weight entry and one per bias entry.

Each layer knows how many parameters its gates can switch off
(:attr:`num_sparsifiable_params`) and how many are active in expectation
(:meth:`expected_active_params`), so that the L0-density of eq. 3 is their
ratio. Counting follows the authors' code: a convolution's bias belongs to its
output-channel group (it is switched off with the channel), while a structured
linear layer's bias is never gated and is left out of both counts.

A gated convolution that feeds a batch-norm layer is wrapped in
:class:`ConvBN`, which zeroes the batch-norm output of inactive channels so that
removing those channels at purge time (App. D) leaves the output unchanged.
"""

from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import gates
from .vocabulary import LINEAR_INITS, SPARSITY_KINDS



def _check_sparsity(sparsity: str) -> None:
    if sparsity not in SPARSITY_KINDS:
        raise ValueError(f"sparsity must be one of {SPARSITY_KINDS}; got {sparsity!r}")


def init_weights_(weight: torch.Tensor, bias: torch.Tensor | None, mode: str = "fan_in") -> None:
    """He-normal weights (standard deviation sqrt(2 / fan)) and biases drawn from N(0, 0.01^2).

    Every layer uses fan-in, the initialisation both the authors' and Louizos
    et al.'s code intended. The authors' gated linear layer asks for fan-out, a
    mode inherited from Louizos et al.'s code, where the weight is stored
    transposed as (in, out) so that it meant fan-in there. In PyTorch's (out, in)
    layout it scales each linear layer's weights by sqrt(in / out), e.g. sqrt(10)
    for the MLP's output layer (book/errata.md). ``mode="fan_out"`` reproduces it.
    """
    if mode not in LINEAR_INITS:
        raise ValueError(f"initialisation mode must be one of {LINEAR_INITS}; got {mode!r}")
    with torch.no_grad():
        nn.init.kaiming_normal_(weight, mode=mode)
        if bias is not None:
            bias.normal_(0.0, 1e-2)


class L0Layer(nn.Module):
    """Behaviour shared by :class:`L0Linear` and :class:`L0Conv2d`.

    Subclasses define ``weight``, ``bias`` (or None), ``weight_log_alpha``,
    ``bias_log_alpha`` (unstructured with bias only, else None) and
    :meth:`_group_view`, which reshapes per-gate values so that they broadcast
    against ``weight``.
    """

    sparsity: str

    # ----- gate values -------------------------------------------------------
    def _gate_values(self, log_alpha: torch.Tensor, median: bool) -> torch.Tensor:
        return gates.median_gates(log_alpha) if median else gates.sample_gates(log_alpha)

    def gate_values(self, median: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Gates broadcast to the weight's shape and to the bias's shape.

        ``median=True`` gives the deterministic test-time gates (eq. 9), else one
        reparametrised sample per gate (eq. 7). The bias gate is None when the
        bias is not gated (structured linear layers) or absent.
        """
        weight_z = self._gate_values(self.weight_log_alpha, median)
        if self.sparsity == "unstructured":
            bias_z = None if self.bias_log_alpha is None else self._gate_values(self.bias_log_alpha, median)
            return weight_z, bias_z
        bias_z = weight_z if (self.bias is not None and isinstance(self, L0Conv2d)) else None
        return self._group_view(weight_z), bias_z

    def gated_weight_and_bias(self, median: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Weight and bias multiplied by their gates: theta = theta_tilde * z (§2).

        The gated weight is laid out in memory like the weight. Where the two
        layouts describe the same tensor (LeNet5's first convolution has one input
        channel, so NCHW and channels_last both fit it) the product could come
        out NCHW, and that one layout would make the convolution and everything
        after it up to the next one run in the slower layout.
        """
        weight_z, bias_z = self.gate_values(median)
        bias = self.bias if (self.bias is None or bias_z is None) else self.bias * bias_z
        weight = self.weight * weight_z
        if weight.stride() != self.weight.stride():
            weight = torch.empty_strided(self.weight.shape, self.weight.stride(), dtype=weight.dtype,
                                         device=weight.device).copy_(weight)
        return weight, bias

    def group_gate_values(self, median: bool = True) -> torch.Tensor:
        """One value per structured group (per input neuron or output channel), unbroadcast."""
        return self._gate_values(self.weight_log_alpha, median)

    # ----- expected L0 and L2 ------------------------------------------------
    @property
    def group_size(self) -> int:
        """Number of parameters switched off by one structured gate (App. B)."""
        raise NotImplementedError

    @property
    def num_sparsifiable_params(self) -> int:
        """#(theta_g) of eq. 3: parameters that some gate can switch off."""
        if self.sparsity == "unstructured":
            return self.weight.numel() + (0 if self.bias is None else self.bias.numel())
        return self.weight_log_alpha.numel() * self.group_size

    def expected_active_params(self) -> torch.Tensor:
        """E[||theta_g||_0] = sum_j P(z_j != 0) * (parameters gated by z_j) (eq. 7)."""
        if self.sparsity == "unstructured":
            active = gates.prob_active(self.weight_log_alpha).sum()
            if self.bias_log_alpha is not None:
                active = active + gates.prob_active(self.bias_log_alpha).sum()
            return active
        return gates.prob_active(self.weight_log_alpha).sum() * self.group_size

    def density(self) -> torch.Tensor:
        """Layer-wise L0-density: expected active over sparsifiable parameters (eq. 3)."""
        return self.expected_active_params() / self.num_sparsifiable_params

    def expected_l2(self, detach_gates: bool = True) -> torch.Tensor:
        """E[||theta_hat||_2^2] = sum_j P(z_j != 0) * theta_tilde_j^2 (§2, eq. 13).

        With ``detach_gates`` (the paper's fix, App. H.2) the probabilities are
        constants, so weight decay cannot switch gates off. Ungated biases of
        structured linear layers enter with probability one.
        """
        prob_w = gates.prob_active(self.weight_log_alpha)
        if detach_gates:
            prob_w = prob_w.detach()
        if self.sparsity == "unstructured":
            total = (prob_w * self.weight.pow(2)).sum()
            if self.bias_log_alpha is not None:
                prob_b = gates.prob_active(self.bias_log_alpha)
                prob_b = prob_b.detach() if detach_gates else prob_b
                total = total + (prob_b * self.bias.pow(2)).sum()
            return total
        total = (self._group_view(prob_w) * self.weight.pow(2)).sum()
        if self.bias is not None:
            prob_b = prob_w if isinstance(self, L0Conv2d) else torch.ones_like(self.bias)
            total = total + (prob_b * self.bias.pow(2)).sum()
        return total

    def gate_parameters(self) -> list[nn.Parameter]:
        """The learnable ``log_alpha`` tensors of this layer."""
        return [p for p in (self.weight_log_alpha, self.bias_log_alpha) if p is not None]

    def clamp_log_alpha_(self) -> None:
        """Clamp every ``log_alpha`` to [ln 0.01, ln 100] (authors' code)."""
        for p in self.gate_parameters():
            gates.clamp_log_alpha_(p)

    # ----- construction ------------------------------------------------------
    def _init_gates(self, gate_shape: tuple[int, ...], rho_init: float) -> None:
        self.weight_log_alpha = nn.Parameter(torch.empty(gate_shape))
        gates.init_log_alpha_(self.weight_log_alpha, rho_init)
        if self.sparsity == "unstructured" and self.bias is not None:
            self.bias_log_alpha = nn.Parameter(torch.empty(self.bias.shape))
            gates.init_log_alpha_(self.bias_log_alpha, rho_init)
        else:
            self.bias_log_alpha = None

    def _compensate_init_shrinkage(self, rho_init: float) -> None:
        """Divide the initial weights by (1 - rho_init), as the authors' code does.

        Gates start around 1 - rho_init in their code's reasoning, so this keeps
        the effective initial weights of gated and dense models alike. The paper
        is silent on this detail. Their code divides the biases of convolutions
        only; this also divides the gated biases of unstructured linear layers
        (book/errata.md).
        """
        with torch.no_grad():
            self.weight.div_(1.0 - rho_init)
            if self.bias is not None and (isinstance(self, L0Conv2d) or self.sparsity == "unstructured"):
                self.bias.div_(1.0 - rho_init)


class L0Linear(L0Layer):
    """Fully connected layer with hard-concrete gates.

    Structured: one gate per input neuron, shared by the ``out_features`` weights
    leaving that neuron; the bias is not gated. Unstructured: one gate per entry.
    ``init="fan_out"`` initialises the weights as the authors' code does (:func:`init_weights_`).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 sparsity: str = "structured", rho_init: float = 0.5, init: str = "fan_in"):
        super().__init__()
        _check_sparsity(sparsity)
        self.in_features, self.out_features, self.sparsity = in_features, out_features, sparsity
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        init_weights_(self.weight, self.bias, mode=init)
        self._init_gates((in_features,) if sparsity == "structured" else (out_features, in_features), rho_init)
        self._compensate_init_shrinkage(rho_init)

    @property
    def group_size(self) -> int:
        return self.out_features

    def _group_view(self, per_gate: torch.Tensor) -> torch.Tensor:
        return per_gate.view(1, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.gated_weight_and_bias(median=not self.training)
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}, sparsity={self.sparsity}"


class L0Conv2d(L0Layer):
    """2-D convolution with hard-concrete gates.

    Structured: one gate per output feature map, shared by that filter's weights
    and its bias. Unstructured: one gate per weight and per bias entry.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, bias: bool = True, sparsity: str = "structured", rho_init: float = 0.5):
        super().__init__()
        _check_sparsity(sparsity)
        self.in_channels, self.out_channels, self.sparsity = in_channels, out_channels, sparsity
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        init_weights_(self.weight, self.bias)
        self._init_gates((out_channels,) if sparsity == "structured" else tuple(self.weight.shape), rho_init)
        self._compensate_init_shrinkage(rho_init)

    @property
    def group_size(self) -> int:
        return self.weight[0].numel() + (1 if self.bias is not None else 0)

    def _group_view(self, per_gate: torch.Tensor) -> torch.Tensor:
        return per_gate.view(-1, 1, 1, 1)

    def forward_with_mask(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Convolve and also return which output channels have a non-zero gate.

        The mask comes from the same gate sample as the output (structured only;
        None for unstructured layers, whose channels are never removed).
        """
        if self.sparsity == "unstructured":
            weight, bias = self.gated_weight_and_bias(median=not self.training)
            return F.conv2d(x, weight, bias, self.stride, self.padding), None
        z = self.group_gate_values(median=not self.training)
        bias = None if self.bias is None else self.bias * z
        out = F.conv2d(x, self.weight * self._group_view(z), bias, self.stride, self.padding)
        return out, z.ne(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with_mask(x)[0]

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, bias={self.bias is not None}, sparsity={self.sparsity}")


class ConvBN(nn.Module):
    """A convolution followed by batch normalisation, gated or not.

    When the convolution is a structured :class:`L0Conv2d`, the batch-norm
    output of channels whose gate is zero is set to zero and their running
    statistics are left untouched, as the authors' ``L0BatchNorm2d`` does.
    Without this a switched-off channel would still emit the batch-norm shift
    ``beta``, and removing it at purge time (App. D) would change the output.
    """

    def __init__(self, conv: nn.Module, bn: nn.BatchNorm2d):
        super().__init__()
        self.conv, self.bn = conv, bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(self.conv, L0Conv2d):
            return self.bn(self.conv(x))
        out, mask = self.conv.forward_with_mask(x)
        if mask is None:
            return self.bn(out)
        bn = self.bn
        if self.training and bn.track_running_stats:
            # Normalise with batch statistics, updating copies of the running
            # statistics; then keep the update only for active channels.
            mean, var = bn.running_mean.clone(), bn.running_var.clone()
            factor = 0.0 if bn.momentum is None else bn.momentum
            if bn.num_batches_tracked is not None:
                bn.num_batches_tracked.add_(1)
                if bn.momentum is None:  # cumulative moving average
                    factor = 1.0 / float(bn.num_batches_tracked)
            out = F.batch_norm(out, mean, var, bn.weight, bn.bias, True, factor, bn.eps)
            with torch.no_grad():
                bn.running_mean.copy_(torch.where(mask, mean, bn.running_mean))
                bn.running_var.copy_(torch.where(mask, var, bn.running_var))
        else:
            out = bn(out)
        return out * mask.to(out.dtype).view(1, -1, 1, 1)


@dataclass(frozen=True)
class LayerFactory:
    """Makes a model's layers: gated (:class:`L0Linear`, :class:`L0Conv2d`) or plain, with one sparsity and rho_init.

    A model's builder hands one factory to every block, in the manner of
    torchvision's ``norm_layer``, instead of threading ``gated, sparsity,
    rho_init`` through every constructor. :attr:`dense` makes the layers that
    are never gated (stems, shortcuts and classifiers, App. J.4-J.6). Plain
    layers are initialised by fan-in (:func:`init_weights_`); ``linear_init``
    applies to gated linear layers only, as in the authors' code, whose plain
    linear layers use fan-in.
    """

    gated: bool = True
    sparsity: str = "structured"
    rho_init: float | list[float] = 0.5
    linear_init: str = "fan_in"

    @property
    def dense(self) -> "LayerFactory":
        """The same factory for layers without gates."""
        return replace(self, gated=False)

    def linear(self, in_features: int, out_features: int, rho_init: float | None = None) -> nn.Module:
        """A linear layer; ``rho_init`` overrides the factory's (one value per layer, App. A.2)."""
        if self.gated:
            return L0Linear(in_features, out_features, sparsity=self.sparsity,
                            rho_init=self.rho_init if rho_init is None else rho_init, init=self.linear_init)
        layer = nn.Linear(in_features, out_features)
        init_weights_(layer.weight, layer.bias)
        return layer

    def conv(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
             bias: bool = True, rho_init: float | None = None) -> nn.Module:
        """A 2-D convolution; ``rho_init`` overrides the factory's."""
        if self.gated:
            return L0Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=bias,
                            sparsity=self.sparsity, rho_init=self.rho_init if rho_init is None else rho_init)
        layer = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=bias)
        init_weights_(layer.weight, layer.bias)
        return layer

    def conv_bn(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> ConvBN:
        """A "same"-padded convolution without bias, followed by batch norm (:class:`ConvBN`)."""
        conv = self.conv(in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, bias=False)
        return ConvBN(conv, nn.BatchNorm2d(out_channels))
