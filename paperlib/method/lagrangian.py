"""Lagrange multipliers updated by projected gradient ascent, with dual restarts (§3).

For constraints g_g(phi) - eps_g <= 0 the Lagrangian is L = f_obj + sum_g lambda_g (g_g(phi) - eps_g) (eq. 4).
Simultaneous gradient descent-ascent (eq. 5) takes a primal step on L with the current multipliers and, from the same
iterate, the dual step lambda <- max(0, lambda + eta_dual * (g(phi) - eps)): the gradient of L in lambda is the
violation, so no autograd is needed. With dual restarts (eq. 6) a satisfied constraint's multiplier is reset to zero,
the dual player's best response (App. G.1). Beyond the paper, :class:`NuPI` adds a proportional term in the change of
the violation (Sohrabi et al., ICML 2024), damping the multipliers' overshoot; :class:`AugmentedLagrangian` keeps
gradient ascent and changes the primal objective (:func:`paperlib.method.objective.augmented_lagrangian_term`). Each
dual optimiser, checked once when made, builds the multipliers a step updates; :func:`dual_optimizer` makes one from an
experiment's configuration.
"""

import math
from dataclasses import dataclass

import torch

from .vocabulary import DUAL_OPTIMIZERS


def _checked(spec, field: str, name: str, accepts: str = "a step size > 0", ok=lambda v: v > 0) -> None:
    """Set ``spec.field`` to its value as a float, refused unless finite and ``ok`` (Python, numpy or 0-d tensor)."""
    value = getattr(spec, field)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number; got {type(value).__name__}") from None
    if isinstance(value, bool) or not (math.isfinite(number) and ok(number)):
        raise ValueError(f"{name} must be {accepts} (finite); got {value!r}")
    object.__setattr__(spec, field, number)


@dataclass(frozen=True)
class GradientAscent:
    """The paper's dual optimiser: projected gradient ascent at step ``lr`` (eq. 5), with dual restarts (eq. 6)
    unless ``restarts=False``."""
    lr: float
    restarts: bool = True

    def __post_init__(self):
        _checked(self, "lr", "the dual learning rate lr")

    def multipliers(self, count: int, device=None) -> "LagrangeMultipliers":
        return LagrangeMultipliers(count, self.lr, self.restarts, device=device)


@dataclass(frozen=True)
class NuPI:
    """The nuPI controller (Sohrabi et al., 2024): integral step ``lr``, proportional gain ``kp`` >= 0 (0 is
    gradient ascent without restarts), EMA coefficient ``ema`` in [0, 1) of the violation; no restarts."""
    lr: float
    kp: float
    ema: float = 0.0

    def __post_init__(self):
        _checked(self, "lr", "the dual learning rate lr")
        _checked(self, "kp", "nuPI's proportional gain kp", ">= 0", lambda v: v >= 0)
        _checked(self, "ema", "nuPI's EMA coefficient ema", "in [0, 1)", lambda v: 0 <= v < 1)

    def multipliers(self, count: int, device=None) -> "NuPIMultipliers":
        return NuPIMultipliers(count, self.lr, self.kp, self.ema, device=device)


@dataclass(frozen=True)
class AugmentedLagrangian:
    """The method of multipliers: gradient ascent at step ``rho`` on the multipliers, no restarts, and the primal
    term :func:`paperlib.method.objective.augmented_lagrangian_term` with penalty coefficient ``rho``."""
    rho: float

    def __post_init__(self):
        _checked(self, "rho", "the penalty coefficient rho")

    def multipliers(self, count: int, device=None) -> "LagrangeMultipliers":
        return LagrangeMultipliers(count, self.rho, dual_restarts=False, device=device)


#: What :class:`~paperlib.method.constrained.ConstrainedStep` takes as ``dual_optimizer``.
DualOptimizer = GradientAscent | NuPI | AugmentedLagrangian


def dual_optimizer(name: str, lr: float, restarts: bool = True, kp: float = 1.0, ema: float = 0.0) -> DualOptimizer:
    """The dual optimiser an experiment's configuration names (``dual_optimizer``, ``dual_lr``, ``dual_restarts``,
    ``nupi_kp``, ``nupi_ema``): the one place where those words become an object and are checked. Dual restarts
    (eq. 6) are the paper's addition to gradient ascent only."""
    if name not in DUAL_OPTIMIZERS:
        raise ValueError(f"dual_optimizer must be one of {DUAL_OPTIMIZERS}; got {name!r}")
    if restarts and name != "gradient_ascent":
        raise ValueError(f"dual restarts (eq. 6) are the paper's addition to gradient ascent; with "
                         f"dual_optimizer={name!r} pass dual_restarts=False")
    if name == "nupi":
        return NuPI(lr, kp, ema)
    return GradientAscent(lr, restarts) if name == "gradient_ascent" else AugmentedLagrangian(lr)


class LagrangeMultipliers:
    """Non-negative multipliers, one per constraint, initialised at zero (App. J.2).

    ``step`` applies eq. 5 (projected gradient ascent) or, with ``dual_restarts``, eq. 6.
    """

    def __init__(self, num_constraints: int, lr: float, dual_restarts: bool = True,
                 device: torch.device | str | None = None):
        if num_constraints < 1:
            raise ValueError(f"num_constraints must be >= 1; got {num_constraints!r}")
        self.lr = float(lr)
        self.dual_restarts = bool(dual_restarts)
        self.value = torch.zeros(num_constraints, device=device)

    def _checked(self, violation: torch.Tensor) -> torch.Tensor:
        if violation.shape != self.value.shape:
            raise ValueError(f"expected {self.value.numel()} violations; got shape {tuple(violation.shape)}")
        if (violation.dtype, violation.device) != (self.value.dtype, self.value.device):
            violation = violation.to(self.value)
        return violation

    @torch.no_grad()
    def step(self, violation: torch.Tensor) -> torch.Tensor:
        """Update from the constraint violations g - eps at the current primal iterate."""
        violation = self._checked(violation)
        updated = torch.clamp(self.value + self.lr * violation, min=0.0)
        if self.dual_restarts:
            updated = torch.where(violation > 0, updated, 0.0)
        self.value = updated
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value.clone(), "lr": self.lr, "dual_restarts": self.dual_restarts}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"].to(self.value)
        self.lr, self.dual_restarts = state["lr"], state["dual_restarts"]


class NuPIMultipliers(LagrangeMultipliers):
    """Multipliers updated by the nuPI controller (Sohrabi et al., 2024), projected onto lambda >= 0: with the
    violation e_t = g(phi_t) - eps and its average xi_t = nu xi_{t-1} + (1 - nu) e_t (xi_{-1} = 0),
    lambda <- max(0, lambda + eta_dual * (e_t + kp * (xi_t - xi_{t-1}))). ``kp = 0`` is gradient ascent without
    restarts. This is Cooper 1.0's ``nuPI`` with ``init_type=ZEROS`` (tests/test_lagrangian.py checks it to 1e-6).
    """

    def __init__(self, num_constraints: int, lr: float, kp: float, ema_nu: float = 0.0,
                 device: torch.device | str | None = None):
        super().__init__(num_constraints, lr, dual_restarts=False, device=device)
        self.kp, self.ema_nu = float(kp), float(ema_nu)
        self.xi = torch.zeros_like(self.value)

    @torch.no_grad()
    def step(self, violation: torch.Tensor) -> torch.Tensor:
        """Update from the constraint violations g - eps at the current primal iterate."""
        violation = self._checked(violation)
        xi = self.ema_nu * self.xi + (1.0 - self.ema_nu) * violation
        self.value = torch.clamp(self.value + self.lr * (violation + self.kp * (xi - self.xi)), min=0.0)
        self.xi = xi
        return self.value

    def state_dict(self) -> dict:
        return {**super().state_dict(), "xi": self.xi.clone(), "kp": self.kp, "ema_nu": self.ema_nu}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.xi = state["xi"].to(self.value)
        self.kp, self.ema_nu = state["kp"], state["ema_nu"]
