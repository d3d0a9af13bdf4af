"""The book's protocols and the one name each has, defined once.

A *protocol* is a preset's configuration for a dataset (:mod:`paperlib.harness.presets`). Prose, tables, figures and run
headers name a protocol only through :func:`protocol_name`, and a record's protocol is read from the record's own
parameters (:func:`record_protocol`): a record whose parameters are not its preset's today is of a superseded protocol
and is named so, never as today's.
"""

from . import presets

#: The short name of each (preset, dataset); ``None`` as the dataset is the preset's name for every dataset.
NAMES = {
    ("paper", None): "paper protocol",
    ("cpu2", "cifar10"): "CPU protocol",
    ("cpu", "cifar10"): "pilot protocol",
    ("cpu", None): "short protocol",
    ("gpu", "cifar10"): "GPU protocol",
}

#: What each name stands for, in a few words (a table's or a caption's definition).
DEFINITIONS = {
    "paper protocol": "the paper's models, epochs and hyper-parameters (App. J)",
    "CPU protocol": "WideResNet-16-1, 20 epochs, gates' learning rate 2",
    "pilot protocol": "WideResNet-16-1, 20 epochs, gates' learning rate 6 (superseded by the CPU protocol)",
    "short protocol": "the paper's hyper-parameters for fewer epochs (MNIST: 100 for the MLP, 40 for LeNet5)",
    "GPU protocol": "WideResNet-16-4, 20 epochs, gates' learning rate 6",
}

#: The suffix of a record made with parameters its preset no longer gives.
SUPERSEDED = "superseded settings"


def protocol_name(preset: str, dataset: str | None = None) -> str:
    """The one name of ``preset``'s protocol for ``dataset`` (``"CPU protocol"`` for ``cpu2`` on CIFAR-10)."""
    for key in ((preset, dataset), (preset, None)):
        if key in NAMES:
            return NAMES[key]
    raise KeyError(f"no protocol name for preset {preset!r} on dataset {dataset!r}; add one to NAMES")


def long_name(preset: str, dataset: str | None = None) -> str:
    """``"CPU protocol (WideResNet-16-1, 20 epochs, gates' learning rate 2)"``."""
    name = protocol_name(preset, dataset)
    return f"{name} ({DEFINITIONS[name]})"


def preset_config(preset: str, params: dict) -> dict | None:
    """The configuration ``preset`` gives a record's dataset, model, sparsity, grouping and target, or None if the
    preset has none for them."""
    try:
        return presets.ExperimentConfig(**presets.preset_values(
            preset, params["dataset"], params["model"], *(presets.parameter(params, name)
                                                          for name in ("sparsity", "grouping", "target")))).to_dict()
    except (ValueError, KeyError):
        return None


def changed_parameters(params: dict, preset: str, predated: bool = True) -> dict | None:
    """The hyper-parameters of :data:`~paperlib.harness.presets.NAMED_IF_CHANGED` that a record sets otherwise than
    ``preset`` would (None: the preset has no configuration for it); one the record predates counts at its default, or
    with ``predated`` False is left out (a run page names only what its record holds)."""
    values = preset_config(preset, params)
    if values is None:
        return None
    unused = set(presets.UNUSED_BY_METHOD[params["method"]])
    return {name: value for name in presets.NAMED_IF_CHANGED if name not in unused and (predated or name in params)
            and (value := presets.parameter(params, name)) != values[name]}


def record_preset(params: dict) -> str:
    """The preset whose protocol a record belongs to: its own, unless its own does not give its hyper-parameters and
    another preset does (a ``cpu`` run at the gates' learning rate of 2 is a run of ``cpu2``'s protocol)."""
    return next((preset for preset in (params["preset"], *presets.PRESET_TABLES)
                 if changed_parameters(params, preset) == {}), params["preset"])


def record_protocol(params: dict) -> str:
    """The protocol a record's own parameters define (:func:`record_preset`), named by :func:`protocol_name`; a record
    whose parameters are not its preset's today (:func:`~paperlib.harness.presets.current_run_name` does not give back
    its name) is of that protocol's ``superseded settings``."""
    name = protocol_name(record_preset(params), params.get("dataset"))
    current = presets.current_run_name(params)
    return name if current is not None and current == params.get("run_name") else f"{name}, {SUPERSEDED}"
