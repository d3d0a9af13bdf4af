"""paperlib: a small library reproducing "Controlled Sparsity via Constrained
Optimization" (Gallego-Posada et al., NeurIPS 2022).

It provides L0 (hard-concrete) stochastic gates, gated layers, and the
constrained (Lagrangian) training used by the notebooks in ``book/``.

A training step under a sparsity constraint, on any model with gated layers, is
:class:`ConstrainedStep` (its docstring has a complete training loop).
"""

__version__ = "0.1.0"

from .constrained import ConstrainedStep, StepRecord, weight_parameters  # noqa: E402  (after __version__)

__all__ = ["ConstrainedStep", "StepRecord", "weight_parameters", "__version__"]
