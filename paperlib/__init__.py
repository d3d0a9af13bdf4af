"""paperlib: a small library reproducing "Controlled Sparsity via Constrained
Optimization" (Gallego-Posada et al., NeurIPS 2022).

It provides L0 (hard-concrete) stochastic gates, gated layers, and the
constrained (Lagrangian) training used by the notebooks in ``book/``.

>>> import torch, torchvision, paperlib
>>> model = paperlib.sparsify(torchvision.models.resnet18(num_classes=10))
>>> paperlib.count_macs(model, (3, 32, 32), "plain", gates="expected") < paperlib.count_macs(model, (3, 32, 32), "plain")
True
>>> small = paperlib.purge(model.eval(), torch.randn(1, 3, 32, 32))
"""

__version__ = "0.1.0"

# The method, for any model (torch only). ``purge`` and ``sparsify`` are also the names of modules: binding the
# functions here, after their modules were imported, makes ``paperlib.purge`` and ``paperlib.sparsify`` the functions,
# while ``from paperlib.purge import keep_first`` still reads the module.
from .counting import count_macs, count_params
from .purge import purge
from .sparsify import sparsify

__all__ = ["count_macs", "count_params", "purge", "sparsify"]
