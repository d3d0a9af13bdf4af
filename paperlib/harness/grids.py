"""Grid files: the runs a grid asks for, their configurations and where their records go.

A grid file (YAML) names a notebook, a dataset, a ``base`` of parameters and either a ``grid`` (a cartesian product) or
a list of ``runs`` (:mod:`paperlib.harness.sweeps` has the format). Everything that reads grids without running them
(the sweeps, the run pages' citations, the result pages) asks here.
"""

import ast
import itertools
from pathlib import Path

import papermill
import yaml

from . import bisection, index, records
from .presets import DEFAULTS, ExperimentConfig, resolve_config


def expand_grid(spec: dict) -> list[dict]:
    """All parameter sets of a grid file: base x product(grid) plus base x runs, in order, without duplicates."""
    base = dict(spec.get("base") or {})
    grid = spec.get("grid") or {}
    sets = []
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            sets.append({**base, **dict(zip(keys, values))})
    sets += [{**base, **extra} for extra in spec.get("runs") or []]
    if not sets:
        sets = [base]
    unique = []
    for params in sets:
        if params not in unique:
            unique.append(params)
    return unique


def notebook_defaults(notebook: str) -> dict:
    """The default values of a notebook's parameters cell."""
    return {name: ast.literal_eval(info["default"]) for name, info in papermill.inspect_notebook(notebook).items()}


def config_parameters(params: dict, dataset: str, defaults: dict | None = None) -> dict:
    """The configuration fields among a notebook run's parameters over its ``defaults`` (what a training notebook passes
    to :func:`~paperlib.harness.training.run_experiment`)."""
    merged = {**(defaults or {}), "dataset": dataset, **params}  # the grid's dataset over the notebook's default
    return {k: v for k, v in merged.items() if k in DEFAULTS}


def run_config(params: dict, dataset: str, defaults: dict | None = None) -> ExperimentConfig:
    """The resolved configuration of a notebook run with these parameters over its ``defaults``."""
    return resolve_config(**config_parameters(params, dataset, defaults))


def run_folder(params: dict, dataset: str, defaults: dict | None = None) -> Path:
    """The record folder a notebook run with these parameters (over its ``defaults``) writes to."""
    return records.run_folder(run_config(params, dataset, defaults))


def record_folder(notebook: str, params: dict, dataset: str, defaults: dict | None = None) -> Path:
    """Where a notebook run's record goes, whose status says whether the run is done: its run's (:func:`run_folder`), or
    for the bisection notebook its search's (:class:`paperlib.harness.bisection.Search`), whatever ``$PAPERLIB_SMOKE``
    says."""
    if Path(notebook).stem == "bisection":
        search = bisection.Search.from_parameters({**(defaults or {}), **params})
        return search.record_folder(smoke=bool(params.get("smoke", False)))
    return run_folder(params, dataset, defaults)


def grid_runs(grid_file: str | Path) -> list[tuple[object, Path]]:
    """(resolved configuration, record folder it writes to) of every run a grid file asks for, in grid order; a record
    there may be of other parameters (:func:`grid_records` finds records by their parameters)."""
    root = records.project_root()
    spec = yaml.safe_load((root / grid_file).read_text())
    defaults = notebook_defaults(str(root / spec["notebook"]))
    runs = []
    for params in expand_grid(spec):
        config = run_config(params, spec["dataset"], defaults)
        runs.append((config, record_folder(spec["notebook"], params, spec["dataset"], defaults)))
    return runs


#: Configuration fields of a grid cell that say where and under what name a run is executed: never matched.
EXECUTION = ("threads", "device", "smoke", "run_name")
#: What a cell that does not say runs with (the code's defaults, not a preset's or a notebook's).
CELL_DEFAULTS = {"seed": 0, "compile_gates": "auto"}


def cell_parameters(params: dict, dataset: str) -> dict:
    """The parameters a grid cell sets (``base`` and the cell's own, with the grid's dataset): its configuration fields
    but :data:`EXECUTION` and those it leaves to its preset (None, 0 epochs), over :data:`CELL_DEFAULTS`."""
    cell = {name: value for name, value in {"dataset": dataset, **params}.items() if name in DEFAULTS
            and name not in EXECUTION and value is not None and not (name.endswith("epochs") and value == 0)}
    return {**CELL_DEFAULTS, **cell}


def cell_records(frame, params: dict, dataset: str):
    """The rows of the record index ``frame`` made with a grid cell's parameters (:func:`cell_parameters`) and nothing
    else changed from that preset's configuration today (:func:`paperlib.harness.index.changes`): never by folder name,
    never by resolving the cell."""
    cell = cell_parameters(params, dataset)
    rows = index.select(frame, **cell) if len(frame) else frame
    own = rows.apply(lambda row: set(index.changes(row[list(DEFAULTS)].to_dict(), row["preset"])) <= set(cell), axis=1)
    return rows[own.astype(bool)] if len(rows) else rows


def grid_records(grid_file: str | Path) -> list[tuple[object, Path | None]]:
    """(resolved configuration, folder of its complete record or None) of every run of a grid, in grid order, found by
    the parameters its cell sets (:func:`cell_records`: never a record of an earlier preset); a bisection search's is
    its search folder."""
    root = records.project_root()
    spec = yaml.safe_load((root / grid_file).read_text())
    runs = grid_runs(grid_file)
    if Path(spec["notebook"]).stem == "bisection":
        return [(config, folder if records.record_status(folder) == "complete" else None) for config, folder in runs]
    frame, base = index.record_index(), records.runs_dir().parent
    found = []
    for params, (config, _) in zip(expand_grid(spec), runs):
        rows = cell_records(frame, params, spec["dataset"])
        found.append((config, base / rows["folder"].iloc[0] if len(rows) else None))
    return found


def complete_records(grid_file: str | Path) -> list[dict]:
    """The complete records of a grid's runs, made with the parameters the grid gives today, in grid order
    (:func:`grid_records`)."""
    return [records.load_record(run_dir) for _, run_dir in grid_records(grid_file) if run_dir is not None]
