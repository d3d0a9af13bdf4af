"""Training objectives: constrained (§3, App. B) and penalized (§2, App. B, C).

Both see the model's expected L0-densities (eq. 3), either one for the whole
model (``grouping="model"``) or one per gated layer (``grouping="layer"``).

* :class:`ConstrainedObjective` forms the Lagrangian of eq. 4 with
  :class:`~paperlib.lagrangian.LagrangeMultipliers` and, after the primal
  step, updates the multipliers from the same iterate (simultaneous GDA, eq. 5,
  with optional dual restarts, eq. 6).
* :class:`PenalizedObjective` adds lambda_pen * density (model-wise) or
  sum_g lambda_pen_g * density_g (layer-wise).

Weight decay on gated layers is the expected L2 norm of eq. 13, with the gate
probabilities detached by default (App. H.2); other parameters get ordinary
weight decay from the optimiser (see :func:`parameter_groups`).
"""

from collections.abc import Sequence

import torch
import torch.nn as nn

from .lagrangian import LagrangeMultipliers
from .layers import L0Layer
from .models import gated_layers, layer_densities, model_density
from .vocabulary import GROUPINGS



def _check_grouping(grouping: str) -> None:
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}; got {grouping!r}")


def densities(model: nn.Module, grouping: str) -> torch.Tensor:
    """The constrained or penalized quantities: shape (1,) model-wise, (G,) layer-wise."""
    _check_grouping(grouping)
    return model_density(model).reshape(1) if grouping == "model" else layer_densities(model)


def num_groups(model: nn.Module, grouping: str) -> int:
    """1 for model-wise grouping, the number of gated layers for layer-wise grouping (App. B)."""
    _check_grouping(grouping)
    return 1 if grouping == "model" else len(gated_layers(model))


def _per_group(values: float | Sequence[float], groups: int, name: str) -> torch.Tensor:
    """Broadcast a scalar to every group, or check that a list has one value per group.

    The values' ranges are checked where a run's parameters are resolved
    (:func:`paperlib.presets.validate`).
    """
    if isinstance(values, (int, float)):
        values = [float(values)] * groups
    values = [float(v) for v in values]
    if len(values) != groups:
        raise ValueError(f"{name} must be a scalar or a list of {groups} values (one per group); "
                         f"got {len(values)} values: {values}")
    return torch.tensor(values)


class ConstrainedObjective:
    """Lagrangian of min f_obj s.t. density_g <= eps_g (eq. 2, eq. 4).

    ``target`` is the target density eps: a scalar, or for layer-wise grouping
    a list with one entry per gated layer (e.g. [0.5, 0.3, 0.7, 0.1] for LeNet5).
    """

    def __init__(self, model: nn.Module, target: float | Sequence[float], grouping: str = "model",
                 dual_lr: float = 1e-3, dual_restarts: bool = True):
        groups = num_groups(model, grouping)
        self.grouping = grouping
        self.target = _per_group(target, groups, "target density")
        device = next(model.parameters()).device
        self.target = self.target.to(device)
        self.multipliers = LagrangeMultipliers(groups, dual_lr, dual_restarts, device=device)

    def __call__(self, model: nn.Module, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the Lagrangian (to minimise over the primal variables) and the densities.

        The multipliers enter as constants: the primal step uses their current value.
        """
        density = densities(model, self.grouping)
        lagrangian = loss + torch.sum(self.multipliers.value * (density - self.target))
        return lagrangian, density

    def dual_step(self, density: torch.Tensor) -> torch.Tensor:
        """Projected gradient ascent on the multipliers (eq. 5), or dual restart (eq. 6)."""
        return self.multipliers.step(density.detach() - self.target)

    def state_dict(self) -> dict:
        return {"multipliers": self.multipliers.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.multipliers.load_state_dict(state["multipliers"])


class PenalizedObjective:
    """loss + lambda_pen * density, or loss + sum_g lambda_pen_g * density_g (App. B).

    The densities are normalised by the number of parameters (App. C); use
    :func:`lambda_from_louizos` to translate Louizos et al.'s lambda / N.
    """

    def __init__(self, model: nn.Module, lambdas: float | Sequence[float], grouping: str = "model"):
        self.grouping = grouping
        groups = num_groups(model, grouping)
        self.lambdas = _per_group(lambdas, groups, "lambda_pen").to(next(model.parameters()).device)

    def __call__(self, model: nn.Module, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        density = densities(model, self.grouping)
        return loss + torch.sum(self.lambdas * density), density

    def dual_step(self, density: torch.Tensor) -> None:
        """Penalties have no dual variables."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def lambda_from_louizos(lmbda: float, train_set_size: int, num_sparsifiable_params: int) -> float:
    """Convert Louizos et al.'s penalty lambda / N into this package's normalisation (App. C).

    They penalise (lambda / N) * E[#active params]; we penalise
    lambda_pen * E[#active params] / #params, so
    lambda_pen = lambda * #params / N. For layer-wise grouping pass each layer's
    own number of sparsifiable parameters.
    """
    if lmbda < 0:
        raise ValueError(f"lambda must be >= 0; got {lmbda!r}")
    return lmbda * num_sparsifiable_params / train_set_size


def expected_l2_penalty(model: nn.Module, weight_decay: float, detach_gates: bool = True) -> torch.Tensor:
    """0.5 * wd * sum_j P(z_j != 0) * theta_j^2 over the gated layers (eq. 13).

    With ``detach_gates`` (default, App. H.2) the term has no gradient towards
    the gates; without it, weight decay can lower the loss by closing gates,
    which over-sparsifies (Fig. 7).
    """
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0; got {weight_decay!r}")
    layers = gated_layers(model)
    if not layers or weight_decay == 0:
        return torch.zeros((), device=next(model.parameters()).device)
    return 0.5 * weight_decay * torch.stack([layer.expected_l2(detach_gates) for layer in layers]).sum()


def parameter_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """Split parameters into (gated-layer weights, other weights, gate log_alphas).

    Gates get their own optimiser or learning rate (App. H.1). Weights of gated
    layers are decayed through :func:`expected_l2_penalty`, the other weights by
    the optimiser's own weight decay.
    """
    gate_ids, gated_weight_ids = set(), set()
    for layer in model.modules():
        if isinstance(layer, L0Layer):
            gate_ids.update(id(p) for p in layer.gate_parameters())
            gated_weight_ids.update(id(p) for p in (layer.weight, layer.bias) if p is not None)
    gated_weights = [p for p in model.parameters() if id(p) in gated_weight_ids]
    other = [p for p in model.parameters() if id(p) not in gate_ids and id(p) not in gated_weight_ids]
    gate_params = [p for p in model.parameters() if id(p) in gate_ids]
    return gated_weights, other, gate_params
