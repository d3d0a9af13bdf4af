"""Bisection search on log(lambda_pen) for a target density (App. E): how many full trainings the penalized method needs
to land within 1% of a target. :func:`bisect_lambda` takes any callable that trains at a penalty and returns the density
(a toy function in tests, MLP trainings in the book). A search of ``book/bisection.ipynb`` is a :class:`Search`; its
record, ``runs/<experiment>/search-.../metrics.json``, lists every training it asked for (each a record of its own).
"""

import dataclasses
import json
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import records


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
    """Search lambda in [lambda_low, lambda_high] (log scale) until |density - target| <= tolerance. Both endpoints are
    trained first and must enclose the target (density falls as lambda grows); if not, the search stops there,
    unconverged, and ``message`` says why."""
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


@dataclass(frozen=True)
class Search:
    """A bisection search of the book (App. E): an MLP on MNIST, penalized, for a target density; the fields are
    ``book/bisection.ipynb``'s parameters (``epochs=0``: the preset's)."""

    grouping: str
    target: float
    tolerance: float
    lambda_low: float
    lambda_high: float
    max_iterations: int
    epochs: int
    seed: int
    preset: str
    experiment: str

    @classmethod
    def from_parameters(cls, parameters: dict) -> "Search":
        """The search a notebook run with these parameters makes (parameters it does not use are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in parameters.items() if k in names})

    def training(self, lmbda: float, **overrides) -> dict:
        """The arguments of ``run_experiment`` for the training at ``lmbda``."""
        return dict(experiment=self.experiment, dataset="mnist", model="mlp", method="penalized",
                    grouping=self.grouping, lmbda=lmbda, epochs=self.epochs, preset=self.preset, seed=self.seed,
                    **overrides)

    def record_folder(self, smoke: bool) -> Path:
        """The search's record folder, beside its trainings: ``<runs>/<experiment>/search-.../`` (``search-...-smoke``,
        among the smoke runs, for a search of smoke trainings)."""
        from .presets import resolve_config

        config = resolve_config(**self.training(self.lambda_low, smoke=smoke))
        name = (f"search-mlp-{self.grouping}-t{self.target:g}-tol{self.tolerance:g}-"
                f"l{self.lambda_low:g}_{self.lambda_high:g}-epochs{config.epochs}-s{self.seed}-"
                + config.preset + ("-smoke" if config.smoke else ""))
        return records.run_folder(types.SimpleNamespace(smoke=config.smoke, experiment=self.experiment,
                                                        run_name=name))

    @property
    def folder(self) -> Path:
        """The record folder of this search run now: of smoke trainings if ``$PAPERLIB_SMOKE`` is 1, as
        ``run_experiment`` makes them."""
        from .training import resolve_run_config

        return self.record_folder(resolve_run_config(**self.training(self.lambda_low)).smoke)


def write_search(search: Search, result: BisectionResult, trainings: dict[float, str]) -> Path:
    """Write the record of a finished search: its parameters, outcome and every training (``trainings``: lambda -> run
    name). An identical record is left untouched (re-executing the notebook, as nbval does, changes no file)."""
    folder = search.folder
    metrics = {"status": "complete", "kind": "bisection search", "run_name": folder.name,
               **dataclasses.asdict(search),
               "converged": result.converged, "message": result.message, "num_trainings": result.num_trainings,
               "evaluations": [{"iteration": max(0, i - 1), "lmbda": lam, "l0_density": density,
                                "run": trainings[lam]} for i, (lam, density) in enumerate(result.evaluations)]}
    path = folder / "metrics.json"
    if not path.exists() or json.loads(path.read_text()) != json.loads(json.dumps(metrics)):
        records.write_json(path, metrics)
    return folder
