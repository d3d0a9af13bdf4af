"""Every complete record of ``runs/`` in one table, read from the records themselves.

:func:`record_index` has one row per complete training record: its folder, every parameter of
:class:`~paperlib.harness.presets.ExperimentConfig` (one a record predates at its default, the only value the code had
before it existed), its protocol (:func:`~paperlib.harness.protocols.record_protocol`), what it changes from it
(``variant``), where it ran, its commit and its results. Pages select their evidence from it by parameters
(:func:`select`), never by folder name and never by resolving a grid against today's presets.

Example::

    >>> frame = record_index()
    >>> select(frame, protocol="paper protocol", model="mlp", method="constrained", variant="")  # doctest: +SKIP
"""

import functools
import json
from pathlib import Path

import pandas as pd

from . import presets, protocols, records

#: Results copied from ``metrics.json`` into the index (absent ones are NaN).
RESULTS = ("l0_density", "l0_density_per_layer", "params_pct", "macs_pct", "val_error_best", "val_error_final",
           "epochs_completed", "wall_time_s", "multipliers_final")


def device_kind(device: str | None) -> str:
    """How the book names a record's device: ``GPU`` for a CUDA device (``cuda``, ``cuda:0``, or already ``GPU``), else
    ``CPU`` (a record without a device ran on a CPU)."""
    return "GPU" if str(device).startswith("cuda") or device == "GPU" else "CPU"


def where_ran(devices, seeds=None, mixed: str = "CPU, {gpu} of {runs} on GPU") -> str:
    """Where runs trained (:func:`device_kind`): ``CPU`` or ``GPU`` when all ran on one, ``–`` for none; runs on both
    are ``mixed`` with the counts filled in, or, given their seeds, which seeds ran where (``CPU: seed 0; GPU: seeds 1,
    2``: a mean over them confounds device with seed)."""
    kinds = [device_kind(device) for device in devices]
    if len(set(kinds)) <= 1:
        return kinds[0] if kinds else "–"
    if seeds is not None:
        where: dict[str, set] = {}
        for kind, seed in zip(kinds, seeds):
            where.setdefault(kind, set()).add(seed)
        return "; ".join(f"{kind}: seed{'s' if len(found) > 1 else ''} {', '.join(map(str, sorted(found)))}"
                         for kind, found in sorted(where.items()))
    gpu = kinds.count("GPU")
    return mixed.format(cpu=len(kinds) - gpu, gpu=gpu, runs=len(kinds))


#: The method's switches and the dual optimiser: a record names them where they differ from the code's defaults.
SWITCHES = ("dual_optimizer", "dual_restarts", "detach_gates", "pretrained", "autocast_bf16")


def changes(params: dict, preset: str | None = None) -> dict:
    """What a record changes from a preset's configuration (by default its protocol's), by name: the hyper-parameters of
    :func:`~paperlib.harness.protocols.changed_parameters`, then the :data:`SWITCHES` set otherwise than by default."""
    unused = set(presets.UNUSED_BY_METHOD[params["method"]])
    found = protocols.changed_parameters(params, preset or protocols.record_preset(params)) or {}
    return {**found, **{name: params.get(name) for name in SWITCHES
                        if name not in unused and presets.parameter(params, name) != presets.DEFAULTS[name]}}


def variant(params: dict) -> str:
    """What a record changes from its protocol's configuration (:func:`changes`), in the words of its run name
    (``dual_lr 0.0007``; empty for the protocol's own runs)."""
    return ", ".join(f"{name} {presets.short_number(value) if isinstance(value, float) else value}"
                     for name, value in changes(params).items())


def _row(folder: Path, params: dict, metrics: dict, root: Path) -> dict:
    return {"folder": folder.relative_to(root).as_posix(), **presets.ExperimentConfig(**params).to_dict(),
            "protocol": protocols.record_protocol(params), "variant": variant(params),
            "device": device_kind(metrics.get("device")),
            "device_name": metrics.get("device_name"), "commit": (metrics.get("git_commit") or "")[:8],
            **{name: metrics.get(name) for name in RESULTS}}


@functools.lru_cache(maxsize=8)
def _index(root: str, stamp: tuple) -> pd.DataFrame:
    rows = []
    base = Path(root)
    for metrics_file in sorted(base.glob("*/*/metrics.json")):
        folder = metrics_file.parent
        metrics = json.loads(metrics_file.read_text())
        params_file = folder / "params.json"
        if metrics.get("status") != "complete" or not params_file.exists():
            continue  # partial and failed runs, and bisection searches (no params.json: their trainings are records)
        rows.append(_row(folder, json.loads(params_file.read_text()), metrics, base.parent))
    return pd.DataFrame(rows)


def _stamp(base: Path) -> tuple:
    """What changes when any record is written or edited: every metrics and params file's modification time and size."""
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size)
                 for p in sorted([*base.glob("*/*/metrics.json"), *base.glob("*/*/params.json")]))


def record_index(runs: Path | None = None) -> pd.DataFrame:
    """One row per complete training record under ``runs`` (default ``runs/``): see the module's docstring. Cached until
    a record changes; every call returns a new frame."""
    base = Path(runs or records.runs_dir())
    return _index(str(base), _stamp(base)).copy()


def select(frame: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows of ``frame`` whose columns have the values ``where`` (a list or tuple value: any of them; a per-layer
    target is compared as its list)."""
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        if column not in frame:
            raise KeyError(f"the record index has no column {column!r}; it has {list(frame.columns)}")
        if isinstance(value, tuple):
            mask &= frame[column].isin(value)
        else:
            mask &= frame[column].map(lambda cell, v=value: cell == v)
    return frame[mask]


def load(frame: pd.DataFrame) -> list[dict]:
    """The whole records (:func:`~paperlib.harness.records.load_record`) of ``frame``'s rows, in order."""
    root = records.runs_dir().parent
    return [records.load_record(root / folder) for folder in frame["folder"]]
