"""Training objectives: constrained (§3, App. B) and penalized (§2, App. B, C).

Both add to f_obj a term in the expected L0-densities d_g (eq. 3) of the whole model (``grouping="model"``) or of each
gated layer (``"layer"``): a function (:attr:`term`) of the densities and of the objective's tensors (:meth:`term_args`),
the shape ``torch.compile`` takes best; the step's gate pass computes both (:mod:`paperlib.method.gate_pass`).
:class:`ConstrainedObjective` is the Lagrangian's sum_g lambda_g (d_g - eps_g) (eq. 4), its multipliers updated by a
dual optimiser (:mod:`paperlib.method.lagrangian`; the augmented Lagrangian has its own term);
:class:`PenalizedObjective` is sum_g lambda_pen_g d_g. Gated layers' weight decay is the expected L2 norm of eq. 13,
other parameters get the optimiser's (:func:`parameter_groups`).
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
    """A scalar broadcast to every group, or a list checked to have one value per group (ranges are checked where a
    run's parameters are resolved)."""
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
    """sum_g (max(0, lambda_g + rho v_g)^2 - lambda_g^2) / (2 rho), v_g = d_g - eps_g (Nocedal and Wright, 17.65), as
    Cooper 1.0's ``AugmentedLagrangian`` for inequalities. Its gradient in d_g, max(0, lambda_g + rho v_g), is the
    multiplier after a step of gradient ascent: a violated constraint pushes harder than lambda_g, a satisfied one with
    lambda_g = 0 does not pull below its target. As rho -> 0 it becomes :func:`linear_term`."""
    return torch.sum((torch.relu(multipliers + rho * (densities - targets)) ** 2 - multipliers ** 2) / (2 * rho))


class ConstrainedObjective:
    """Lagrangian of min f_obj s.t. density_g <= eps_g (eq. 3, 4): ``target`` eps is a scalar, or one per gated layer
    (e.g. [0.5, 0.3, 0.7, 0.1] for LeNet5); ``dual_optimizer`` one of :mod:`paperlib.method.lagrangian`'s."""

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
    """loss + sum_g lambda_pen_g * density_g (App. B). The densities are normalised (App. C): Louizos et al.'s
    lambda / N on the expected number of active parameters is lambda_pen = lambda * #params / N."""

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
    """(gated layers' weights, decayed through eq. 13; the other weights, by the optimiser; the gates' log_alpha,
    with their own optimiser, App. H.1)."""
    gate_ids, gated_weight_ids = set(), set()
    for layer in model.modules():
        if isinstance(layer, L0Layer):
            gate_ids.update(id(p) for p in layer.gate_parameters())
            gated_weight_ids.update(id(p) for p in (layer.weight, layer.bias) if p is not None)
    gated_weights = [p for p in model.parameters() if id(p) in gated_weight_ids]
    other = [p for p in model.parameters() if id(p) not in gate_ids and id(p) not in gated_weight_ids]
    gate_params = [p for p in model.parameters() if id(p) in gate_ids]
    return gated_weights, other, gate_params
