"""The names a run's configuration chooses from, defined once.

Every module that accepts one of these names imports its tuple from here;
:func:`paperlib.presets.validate` checks a configuration against them.
"""

import re

#: ``auto`` resolves to ``paper`` on CUDA and to the dataset's CPU protocol otherwise
#: (:func:`paperlib.presets.concrete_preset`); ``cpu2`` is CIFAR-10's CPU protocol whose targets bind, ``gpu``
#: its compressed GPU protocol.
PRESETS = ("auto", "paper", "cpu", "cpu2", "gpu")
DATASETS = ("mnist", "cifar10", "cifar100", "tinyimagenet", "imagenet")
#: The paper's models (App. J); any ``wrn-DEPTH-WIDTH`` is a model too (:func:`is_model_name`).
MODEL_NAMES = ("mlp", "lenet5", "wrn-28-10", "resnet18", "resnet50")
METHODS = ("constrained", "penalized", "dense", "magnitude_pruning")
#: One constraint (or penalty) for the whole model, or one per gated layer (App. B).
GROUPINGS = ("model", "layer")
#: Gates on groups (§2) or on single weights (App. L).
SPARSITY_KINDS = ("structured", "unstructured")
OPTIMIZERS = ("adam", "sgdm")
#: He-normal initialisation of gated linear weights: by fan-in (intended), or by fan-out (what the authors' code runs).
LINEAR_INITS = ("fan_in", "fan_out")
#: How the constrained method updates its Lagrange multipliers: the paper's projected gradient ascent (with or
#: without dual restarts), the nuPI controller, or the augmented Lagrangian's method of multipliers (beyond the paper).
DUAL_OPTIMIZERS = ("gradient_ascent", "nupi", "augmented_lagrangian")
#: Whether the gates' pass of a training step runs through ``torch.compile``: on CUDA only, always, never
#: (:mod:`paperlib.gate_pass`).
COMPILE_GATES = ("auto", "always", "never")  # not on/off, which YAML and papermill read as booleans

#: The paper's metrics (``paper_results.csv``, ``metrics.json``) and the one label each has, from a run's
#: own page to the book's tables ("Val. Error" as the paper's tables head it, best and final).
METRIC_LABELS = {"l0_density": "L0-density (%)", "params_pct": "params (%)", "macs_pct": "MACs (%)",
                 "pruned_architecture": "pruned architecture", "val_error_best": "val. error best (%)",
                 "val_error_final": "val. error final (%)"}

WIDE_RESNET = re.compile(r"wrn-(\d+)-(\d+)")


def is_model_name(name: str) -> bool:
    """One of :data:`MODEL_NAMES` or ``wrn-DEPTH-WIDTH``."""
    return name in MODEL_NAMES or WIDE_RESNET.fullmatch(str(name)) is not None


def short_number(value: float) -> str:
    """A number as ``{:g}`` writes it, with exponents as 1e6 and 2e-05 rather than 1e+06: no '+' in a run's
    folder name or URL, and the way a reader writes a gain."""
    return re.sub(r"e\+0*", "e", f"{value:g}")

