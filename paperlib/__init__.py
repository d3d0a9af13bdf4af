"""paperlib: a small library reproducing "Controlled Sparsity via Constrained
Optimization" (Gallego-Posada et al., NeurIPS 2022).

It provides L0 (hard-concrete) stochastic gates, gated layers, and the
constrained (Lagrangian) training used by the notebooks in ``book/``.
"""

__version__ = "0.1.0"
