"""Training objectives: constrained (§3, App. B) and penalized (§2, App. B, C).

Both add to f_obj a term in the model's expected L0-densities d_g (eq. 3), one for the whole model
(``grouping="model"``) or one per gated layer (``grouping="layer"``). An objective names the term's function
(:attr:`term`, one of the functions below) and its tensors (:meth:`term_args`); the step's gate pass computes the
densities and the term (:attr:`paperlib.method.gate_pass.GatePass.density_term`). This ``term(densities, *term_args())``
shape is what ``torch.compile`` takes best; a training step uses the objectives through
:class:`paperlib.method.constrained.ConstrainedStep`.

* :class:`ConstrainedObjective`: the Lagrangian's term sum_g lambda_g (d_g - eps_g) of eq. 4 (:func:`linear_term`);
  after the primal step it updates the multipliers from the same iterate (simultaneous GDA, eq. 5, with optional dual
  restarts, eq. 6, :class:`~paperlib.method.lagrangian.GradientAscent`). Beyond the paper, its ``dual_optimizer`` may
  instead be the nuPI controller (:class:`~paperlib.method.lagrangian.NuPI`) or the augmented Lagrangian
  (:class:`~paperlib.method.lagrangian.AugmentedLagrangian`, :func:`augmented_lagrangian_term`).
* :class:`PenalizedObjective`: sum_g lambda_pen_g d_g, the linear term with zero offsets.

Weight decay on gated layers is the expected L2 norm of eq. 13 (computed by :mod:`paperlib.method.gate_pass`), with the
gate probabilities detached by default (App. H.2); other parameters get ordinary weight decay from the optimiser (see
:func:`parameter_groups`).
"""

from collections.abc import Sequence

import torch
import torch.nn as nn

from .lagrangian import AugmentedLagrangian, DualOptimizer, GradientAscent
from .layers import L0Layer
from .vocabulary import GROUPINGS


def _check_grouping(grouping: str) -> None:
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}; got {grouping!r}")


def num_groups(model: nn.Module, grouping: str) -> int:
    """1 for model-wise grouping, the number of gated layers for layer-wise grouping (App. B)."""
    _check_grouping(grouping)
    return 1 if grouping == "model" else sum(isinstance(m, L0Layer) for m in model.modules())


def _per_group(values: float | Sequence[float], groups: int, name: str) -> torch.Tensor:
    """Broadcast a scalar to every group, or check that a list has one value per group.

    The values' ranges are checked where a run's parameters are resolved (:func:`paperlib.harness.presets.validate`).
    """
    if isinstance(values, (int, float)):
        values = [float(values)] * groups
    values = [float(v) for v in values]
    if len(values) != groups:
        raise ValueError(f"{name} must be a scalar or a list of {groups} values (one per group); "
                         f"got {len(values)} values: {values}")
    return torch.tensor(values)


def linear_term(densities: torch.Tensor, coefficients: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """sum_g c_g (d_g - o_g): the Lagrangian's term (eq. 4) with multipliers and targets, or a penalty's."""
    return torch.sum(coefficients * (densities - offsets))


def augmented_lagrangian_term(densities: torch.Tensor, multipliers: torch.Tensor, targets: torch.Tensor,
                              rho: float) -> torch.Tensor:
    """sum_g (max(0, lambda_g + rho v_g)^2 - lambda_g^2) / (2 rho), v_g = d_g - eps_g (Nocedal and Wright, 17.65).

    Its gradient in d_g is max(0, lambda_g + rho v_g): the multiplier after a step of projected gradient ascent with
    step rho, so a violated constraint pushes harder than the Lagrangian's lambda_g, and a satisfied one with lambda_g =
    0 does not pull the density below its target. As rho -> 0 it becomes :func:`linear_term`. Cooper 1.0's
    ``AugmentedLagrangian`` formulation for inequality constraints computes the same.
    """
    return torch.sum((torch.relu(multipliers + rho * (densities - targets)) ** 2 - multipliers ** 2) / (2 * rho))


class ConstrainedObjective:
    """Lagrangian of min f_obj s.t. density_g <= eps_g (eq. 3, eq. 4).

    ``target`` is the target density eps: a scalar, or for layer-wise grouping a list with one entry per gated layer
    (e.g. [0.5, 0.3, 0.7, 0.1] for LeNet5). ``dual_optimizer`` (:mod:`paperlib.method.lagrangian`) is the paper's
    :class:`~paperlib.method.lagrangian.GradientAscent` (with or without dual restarts), the nuPI controller or the
    augmented Lagrangian (the method of multipliers).
    """

    def __init__(self, model: nn.Module, target: float | Sequence[float], grouping: str = "model",
                 dual_optimizer: DualOptimizer = GradientAscent(1e-3)):
        if not hasattr(dual_optimizer, "multipliers"):
            raise TypeError(f"dual_optimizer must be a GradientAscent, NuPI or AugmentedLagrangian "
                            f"(paperlib.method.lagrangian); got {type(dual_optimizer).__name__}")
        groups = num_groups(model, grouping)
        self.grouping, self.dual_optimizer = grouping, dual_optimizer
        device = next(model.parameters()).device
        self.target = _per_group(target, groups, "target density").to(device)
        self.multipliers = dual_optimizer.multipliers(groups, device=device)
        augmented = isinstance(dual_optimizer, AugmentedLagrangian)
        self.term = augmented_lagrangian_term if augmented else linear_term

    def term_args(self) -> tuple:
        """The multipliers (constants for the primal step, at their current value), the targets, and rho."""
        extra = (self.multipliers.lr,) if isinstance(self.dual_optimizer, AugmentedLagrangian) else ()
        return self.multipliers.value, self.target, *extra

    def dual_step(self, density: torch.Tensor) -> torch.Tensor:
        """Projected gradient ascent on the multipliers (eq. 5) or dual restart (eq. 6), or a nuPI step."""
        return self.multipliers.step(density.detach() - self.target)

    def state_dict(self) -> dict:
        return {"multipliers": self.multipliers.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.multipliers.load_state_dict(state["multipliers"])


class PenalizedObjective:
    """loss + lambda_pen * density, or loss + sum_g lambda_pen_g * density_g (App. B).

    The densities are normalised by the number of parameters (App. C): Louizos et al.'s lambda / N on the expected
    number of active parameters is lambda_pen = lambda * #params / N.
    """

    def __init__(self, model: nn.Module, lambdas: float | Sequence[float], grouping: str = "model"):
        self.grouping = grouping
        groups = num_groups(model, grouping)
        self.lambdas = _per_group(lambdas, groups, "lambda_pen").to(next(model.parameters()).device)
        self.term = linear_term
        self._offsets = torch.zeros_like(self.lambdas)  # made once, not at every step

    def term_args(self) -> tuple:
        """The penalty coefficients lambda_pen_g and zero offsets."""
        return self.lambdas, self._offsets

    def dual_step(self, density: torch.Tensor) -> None:
        """Penalties have no dual variables."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def parameter_groups(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """Split parameters into (gated-layer weights, other weights, gate log_alphas).

    Gates get their own optimiser or learning rate (App. H.1). Weights of gated layers are decayed through the expected
    L2 term of eq. 13 (:mod:`paperlib.method.gate_pass`), the other weights by the optimiser's own weight decay.
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
