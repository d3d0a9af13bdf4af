"""paperlib: a small library reproducing "Controlled Sparsity via Constrained
Optimization" (Gallego-Posada et al., NeurIPS 2022).

It provides L0 (hard-concrete) stochastic gates, gated layers, and the
constrained (Lagrangian) training used by the notebooks in ``book/``.
On any model: :func:`sparsify` gates its layers, :class:`ConstrainedStep` trains it under a
density constraint (its docstring has a complete training loop), :func:`purge` returns the smaller
dense model, and :func:`count_params` / :func:`count_macs` count the gated, test-time or purged model.
``ConstrainedStep(measure="params" | "macs")`` bounds the purged model's expected parameters or MACs instead of the
density, and :func:`report` says per layer what is gated, what is not and why, and what purging leaves.
:func:`load_dense_state_dict` loads a checkpoint of the model before ``sparsify`` into the sparsified one, and
:func:`dense_state_dict` gives the stock architecture's state dict back, the gates folded in at their test-time values.

>>> import torch, torchvision, paperlib
>>> model = paperlib.sparsify(torchvision.models.resnet18(num_classes=10))
>>> step = paperlib.ConstrainedStep(model, torch.optim.SGD(paperlib.weight_parameters(model), lr=0.01),
...                                 target=0.5, gates_lr=0.1, dual_lr=1.0)
>>> x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
>>> record = step.roll(lambda: torch.nn.functional.cross_entropy(model(x), y))
>>> paperlib.count_macs(model, (3, 32, 32), "plain", gates="expected") < paperlib.count_macs(model, (3, 32, 32), "plain")
True
>>> small = paperlib.purge(model.eval(), torch.randn(1, 3, 32, 32))
"""

__version__ = "0.1.0"

# The method, for any model (torch only). ``purge`` and ``sparsify`` are also the names of modules: binding the
# functions here, after their modules were imported, makes ``paperlib.purge`` and ``paperlib.sparsify`` the functions,
# while ``from paperlib.paper.purge import keep_first`` still reads the module.
from .method.constrained import (ConstrainedStep, StepRecord, gate_parameters,  # noqa: E402  (after __version__)
                                 weight_parameters)
from .method.counting import count_macs, count_params  # noqa: E402
from .method.graph_purge import dense_state_dict, load_dense_state_dict  # noqa: E402
from .method.lagrangian import AugmentedLagrangian, GradientAscent, NuPI  # noqa: E402
from .paper.purge import purge  # noqa: E402
from .method.sparsify import sparsify  # noqa: E402
from .method import budget as _budget  # noqa: E402


def report(model, input_shape=None, leaves=None):
    """Coverage and density of a gated model, one row per convolution and linear layer: gated or not and why not,
    its expected and test-time densities, its parameters and MACs dense and after purging
    (:func:`paperlib.method.budget.report`). A pandas DataFrame indexed by layer; a list of dicts without pandas."""
    rows = _budget.report(model, input_shape, leaves)
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows).set_index("layer")


__all__ = ["AugmentedLagrangian", "ConstrainedStep", "GradientAscent", "NuPI", "StepRecord", "count_macs",
           "count_params", "dense_state_dict", "gate_parameters", "load_dense_state_dict", "purge", "report",
           "sparsify", "weight_parameters", "__version__"]
