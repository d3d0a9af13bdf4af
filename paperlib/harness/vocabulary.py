"""The names a run's configuration chooses from, defined once.

Every module that accepts one of these names imports its tuple from here; :func:`paperlib.harness.presets.validate`
checks a configuration against them.
"""

import re

from ..method.vocabulary import COMPILE_GATES, DUAL_OPTIMIZERS, GROUPINGS, LINEAR_INITS, SPARSITY_KINDS  # noqa: F401
from ..paper.models import MODEL_NAMES, WIDE_RESNET, is_model_name  # noqa: F401

#: ``auto`` resolves to ``paper`` on CUDA and to the dataset's CPU protocol otherwise
#: (:func:`paperlib.harness.presets.concrete_preset`); ``cpu2`` is CIFAR-10's CPU protocol whose targets bind, ``gpu``
#: its compressed GPU protocol.
PRESETS = ("auto", "paper", "cpu", "cpu2", "gpu")
DATASETS = ("mnist", "cifar10", "cifar100", "tinyimagenet", "imagenet")
#: Each dataset as the paper (and ``paper_results.csv``) writes it.
DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "tinyimagenet": "TinyImageNet",
                  "imagenet": "ImageNet"}
METHODS = ("constrained", "penalized", "dense", "magnitude_pruning")
OPTIMIZERS = ("adam", "sgdm")

#: The paper's metrics (``paper_results.csv``, ``metrics.json``) and the one label each has, from a run's own page to
#: the book's tables ("Val. Error" as the paper's tables head it, best and final).
METRIC_LABELS = {"l0_density": "L0-density (%)", "params_pct": "params (%)", "macs_pct": "MACs (%)",
                 "pruned_architecture": "pruned architecture", "val_error_best": "val. error best (%)",
                 "val_error_final": "val. error final (%)"}


def short_number(value: float) -> str:
    """A number as ``{:g}`` writes it, with exponents as 1e6 and 2e-05 rather than 1e+06: no '+' in a run's folder name
    or URL, and the way a reader writes a gain."""
    return re.sub(r"e\+0*", "e", f"{value:g}")

