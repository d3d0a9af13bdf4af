"""Bisection search on log(lambda_pen) for a target density (App. E).

The penalized method has no direct handle on the density it reaches; App. E
shows how many full training runs a bisection needs to land within 1% of a
50% target. :func:`bisect_lambda` takes any callable that trains with a given
penalty and returns the achieved L0-density, so the same search runs a toy
function in tests and real MLP trainings in the book.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class BisectionResult:
    """Outcome of a search: every evaluated (lambda, density), in order, endpoints first."""

    target: float
    tolerance: float
    evaluations: list[tuple[float, float]] = field(default_factory=list)
    converged: bool = False
    message: str = ""

    @property
    def best(self) -> tuple[float, float]:
        """The evaluated (lambda, density) closest to the target."""
        return min(self.evaluations, key=lambda e: abs(e[1] - self.target))

    @property
    def num_trainings(self) -> int:
        return len(self.evaluations)


def bisect_lambda(train_and_measure: Callable[[float], float], target: float, lambda_low: float,
                  lambda_high: float, tolerance: float = 0.01, max_iterations: int = 10) -> BisectionResult:
    """Search lambda in [lambda_low, lambda_high] (log scale) until |density - target| <= tolerance.

    Density decreases as lambda grows, so ``lambda_low`` must give a density
    above the target and ``lambda_high`` one below it; both endpoints are
    trained first (App. E chose them to enclose the target). If they do not
    enclose it the search stops there, unconverged, and ``message`` says why.
    """
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target density must be in [0, 1]; got {target!r}")
    if not 0.0 < lambda_low < lambda_high:
        raise ValueError(f"need 0 < lambda_low < lambda_high; got lambda_low={lambda_low!r}, "
                         f"lambda_high={lambda_high!r}")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0; got {tolerance!r}")
    result = BisectionResult(target, tolerance)
    for lam in (lambda_low, lambda_high):
        result.evaluations.append((lam, float(train_and_measure(lam))))
    (_, d_low), (_, d_high) = result.evaluations
    if abs(d_low - target) <= tolerance or abs(d_high - target) <= tolerance:
        result.converged, result.message = True, "an endpoint is within tolerance"
        return result
    if not d_low >= target >= d_high:
        # Two trainings are spent; stop and say why rather than lose them to an exception.
        result.message = (f"endpoints do not enclose the target {target}: density {d_low:.4f} at "
                          f"lambda={lambda_low:g}, {d_high:.4f} at lambda={lambda_high:g}; widen the interval")
        return result
    log_low, log_high = math.log(lambda_low), math.log(lambda_high)
    for _ in range(max_iterations):
        lam = math.exp(0.5 * (log_low + log_high))
        density = float(train_and_measure(lam))
        result.evaluations.append((lam, density))
        if abs(density - target) <= tolerance:
            result.converged, result.message = True, f"within tolerance after {result.num_trainings} trainings"
            break
        if density > target:
            log_low = math.log(lam)
        else:
            log_high = math.log(lam)
    else:
        result.message = f"not within tolerance after {max_iterations} iterations"
    return result
