"""What ``python -m pytest --nbval`` validates, and how.

Without ``--nbval`` pytest runs ``tests/`` only. With it, nbval also collects
the notebooks under ``book/`` and ``runs/`` (``testpaths`` in pyproject.toml),
re-executes each in a fresh kernel and compares every code cell's outputs with
the committed ones, after the substitutions of ``tests/nbval_sanitize.cfg``
(timings, progress bars, memory addresses, absolute paths, git commits):

- teaching notebooks committed with outputs (``book/*.ipynb`` that were run);
- the executed notebook of every committed run
  (``runs/<experiment>/<run name>/notebook.ipynb``). Re-executing it only
  loads its record: ``run_experiment`` returns a complete record without
  training. Its ``run_experiment`` cell holds the training log (epochs,
  progress bars), which loading does not print again, so that one cell's
  output is not compared, exactly as an ``nbval-ignore-output`` tag would do
  (committed records are never edited); every other cell is;
- the executed notebook of every committed bisection search
  (``runs/bisection/search-.../notebook.ipynb``), whose re-execution loads the
  records of the trainings its search record lists;
- NOT the experiment templates ``book/<experiment>.ipynb`` (committed without
  outputs: nbval would train with them). ``tests/test_notebooks.py`` runs those
  in smoke mode.

Kernels get a fixed environment, whatever the shell exported: no
``PAPERLIB_SMOKE`` (smoke parameters name other runs, which would then train),
no ``MPLBACKEND`` (figures must come out as the inline backend's display data,
as when the notebooks ran), ``PAPERLIB_RUNS`` pointing at the notebook's own
``runs/`` folder, and an absolute ``PAPERLIB_DATA`` (kernels run in the
notebook's folder, where the README's relative ``../shared/data`` points
nowhere).

A run notebook whose record no longer matches what its parameters resolve to
(a preset changed since it ran, or its record is not complete) cannot be
re-executed without training or failing: its cells are reported as xfail,
NOT RUN, once per notebook with the reason (its other cells are deselected),
instead of being executed.
"""

import ast
import json
import os
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
RUNS = ROOT / "runs"


def _has_outputs(notebook: Path) -> bool:
    """Whether any code cell of ``notebook`` was executed (a template has none)."""
    cells = json.loads(notebook.read_text())["cells"]
    return any(c.get("execution_count") is not None or c.get("outputs") for c in cells if c["cell_type"] == "code")


# Experiment templates (no outputs) are never collected by nbval.
collect_ignore = [str(p) for p in sorted((ROOT / "book").glob("*.ipynb")) if not _has_outputs(p)]
collect_ignore_glob = ["out*.ipynb", "_build/*"]


def _is_run_notebook(path: Path) -> bool:
    path = Path(path)
    return path.name == "notebook.ipynb" and len(path.parts) >= 3 and path.parents[2].name == "runs"


def _run_experiment_calls(source: str) -> int:
    """How many calls of ``run_experiment`` a cell's source makes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    return sum(isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run_experiment"
               for node in ast.walk(tree))


def _stale_reason(notebook: Path) -> str | None:
    """Why re-executing this run notebook would not simply load its record, or None if it would."""
    from paperlib.harness import records, sweeps, training

    nb = json.loads(notebook.read_text())
    if sum(_run_experiment_calls("".join(cell["source"])) for cell in nb["cells"] if cell["cell_type"] == "code") != 1:
        return None  # not a single-run notebook: nothing to check here
    run_dir = notebook.parent
    if records.record_status(run_dir) != "complete":
        return f"its record is {records.record_status(run_dir) or 'missing'}, not complete"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if metrics.get("kind") == "bisection search":
        return _stale_search_reason(run_dir, metrics)
    params = nb["metadata"].get("papermill", {}).get("parameters", {})
    recorded = records.load_record(run_dir)["params"]
    # The dataset is the notebook's (its run_experiment call names it), and the record says which it is.
    config = sweeps.run_config(params, recorded["dataset"], sweeps.notebook_defaults(str(notebook)))
    if (config.experiment, config.run_name) != (run_dir.parent.name, run_dir.name):
        return f"its parameters now resolve to the run {config.experiment}/{config.run_name}"
    try:
        training.check_record_matches(recorded, config)
    except RuntimeError as error:
        differing = re.findall(r"(\w+): recorded", str(error))
        return f"made with other {', '.join(differing) or 'parameters'} than its preset now gives"
    return None


def _stale_search_reason(run_dir: Path, metrics: dict) -> str | None:
    """Why re-executing a bisection search would not simply load its trainings, or None if it would."""
    from paperlib.harness import bisection, records, training
    from paperlib.harness.presets import resolve_config

    search = bisection.Search.from_parameters(metrics)
    for evaluation in metrics["evaluations"]:
        config = resolve_config(**search.training(evaluation["lmbda"]))
        if config.run_name != evaluation["run"]:
            return f"its training {evaluation['run']} now resolves to the run {config.run_name}"
        if records.record_status(run_dir.parent / config.run_name) != "complete":
            return f"its training {config.run_name} has no complete record"
        try:
            training.check_record_matches(records.load_record(run_dir.parent / config.run_name)["params"], config)
        except RuntimeError:
            return f"its training {config.run_name} was made with other parameters than its preset now gives"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Keep each notebook's cells together on one pytest-xdist worker; leave the training log of run notebooks
    unchecked; report a stale run notebook once, as xfail."""
    stale: dict[Path, str | None] = {}
    kept, deselected = [], []
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's IPyNbCell
        if cell is not None:  # one kernel runs a notebook's cells in order (pyproject.toml: --dist loadgroup)
            item.add_marker(pytest.mark.xdist_group(item.parent.nodeid))
        if cell is None or not _is_run_notebook(item.path):
            kept.append(item)
            continue
        first = item.path not in stale
        if first:
            stale[item.path] = _stale_reason(item.path)
        if stale[item.path]:
            if first:  # one line per notebook in the summary; its other cells are deselected
                item.add_marker(pytest.mark.xfail(run=False, reason=f"stale run record: {stale[item.path]}"))
                kept.append(item)
            else:
                deselected.append(item)
            continue
        if _run_experiment_calls(cell.source):
            item.options["check"] = False  # the training log; see the module docstring
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _kernel_environment(notebook: Path) -> dict[str, str | None]:
    """Variables to set (None: to remove) while nbval starts the kernel of ``notebook``."""
    env: dict[str, str | None] = {"PAPERLIB_SMOKE": None, "MPLBACKEND": None}
    data = os.environ.get("PAPERLIB_DATA")
    if data:
        env["PAPERLIB_DATA"] = str(Path(data).expanduser().resolve())
    if _is_run_notebook(notebook):
        env["PAPERLIB_RUNS"] = str(Path(notebook).parents[2])
    return env


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Start each nbval kernel (in the setup of a notebook's first cell) with a fixed environment."""
    if getattr(item, "cell", None) is None or getattr(item.parent, "kernel", None) is not None:
        return (yield)
    saved = dict(os.environ)
    for name, value in _kernel_environment(item.path).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        return (yield)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def starting_again_once(start):
    """``start`` (nbval's ``start_new_kernel``), tried a second time if the kernel dies before it answers.

    Under ``-n 2``, with trainings running beside it, one kernel in a full run has died before replying to
    ``kernel_info``; nbval then errored every cell of that notebook, which passed when run again alone. A
    kernel that dies on every start still fails, on its second try.
    """
    def start_new_kernel(*args, **kwargs):
        try:
            return start(*args, **kwargs)
        except RuntimeError as error:
            warnings.warn(f"nbval's kernel did not start ({error}); starting it once more", stacklevel=2)
            return start(*args, **kwargs)
    return start_new_kernel


def pytest_configure(config):
    """Read the sanitisation file named in addopts relative to the repository, wherever pytest starts; start
    each nbval kernel a second time if it dies on starting (:func:`starting_again_once`)."""
    sanitize = getattr(config.option, "nbval_sanitize_with", None)
    if sanitize and not Path(sanitize).is_absolute() and not Path(sanitize).exists():
        config.option.nbval_sanitize_with = str(config.rootpath / sanitize)
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        import nbval.kernel
        nbval.kernel.start_new_kernel = starting_again_once(nbval.kernel.start_new_kernel)
