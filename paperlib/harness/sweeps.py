"""Run a grid of notebook executions: ``python -m paperlib.harness.sweeps grids/<name>.yaml``.

A study's name (:mod:`paperlib.harness.studies`) stands for its grid files, those of one preset with ``--preset``.

A grid file (YAML) names one notebook and the runs of one paper table or figure::

    notebook: book/mnist.ipynb
    dataset: mnist            # the dataset the notebook trains on (to locate records)
    workers: 2                # parallel processes
    threads: 1                # torch threads per process
    base: {experiment: mnist_mlp, model: mlp}
    grid:                     # cartesian product over these lists
      target: [0.2, 0.35, 0.5]
      seed: [0, 1]
    runs:                     # optional extra parameter sets (merged with base)
      - {grouping: layer, target: [0.3, 0.3, 0.3]}

Each run executes the notebook with papermill in its own process; runs whose record is complete are skipped, partial
ones resume from their checkpoint. A run of the bisection notebook is a whole search (:func:`record_folder`). The
executed notebook is moved into the run folder only when the record is complete, so a failed run never overwrites
anything in ``runs/``; ``--commit`` commits each record as soon as it finishes. A run's output goes to the
``papermill.log`` named when it starts.

``--executor slurm`` submits one job per run whose record is not complete through submitit (``--gpus``, ``--cpus``,
``--timeout-min``, ``--partition``); a job stopped at its time limit is requeued and resumes. ``--executor local`` runs
the same jobs as local processes (the tests). On a machine without Jupyter, ``--commands`` prints one ``python -m
paperlib.harness.run`` command per missing run; their records get their notebooks from the next sweep here.
"""

import argparse
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import papermill
import yaml
import zmq
from traitlets.config import Config

from . import records, run_pages, studies
from .grids import (config_parameters, expand_grid, notebook_defaults, record_folder,  # noqa: F401 (read as sweeps')
                    run_config, run_folder)
from .presets import resolve_config
from .vocabulary import PRESETS


def check_parameters(grid: str, notebook: str, sets: list[dict], defaults: dict) -> None:
    """Raise if a grid gives a notebook a parameter its parameters cell does not declare: papermill only warns, and the
    run would train the notebook's default under the grid's record folder's name."""
    unknown = sorted({name for params in sets for name in params} - set(defaults))
    if unknown:
        raise ValueError(f"grid file {grid} gives {notebook} the parameter(s) {unknown}, which its parameters cell "
                         f"does not declare (it declares {sorted(defaults)}); add them to the notebook first")


def kernel_config() -> Config:
    """The kernel manager's configuration: CurveZMQ keys for the kernel's connection, without which ipykernel (>= 7.4)
    warns "Kernel is running over TCP without encryption"; jupyter_client (>= 8.9) writes them when asked ("auto")."""
    return Config({"KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"}})


def execute_notebook(notebook: str, output: str | Path, params: dict, log_output: bool = True) -> None:
    """Execute ``notebook`` into ``output`` with papermill; ``log_output`` prints its outputs as they come."""
    papermill.execute_notebook(notebook, str(output), parameters=params, progress_bar=False, log_output=log_output,
                               config=kernel_config())


def _execute_from_argv(argv: list[str]) -> None:
    """``python -c`` entry of one run: NOTEBOOK OUTPUT PARAMETERS_YAML."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    notebook, output, params = argv
    execute_notebook(notebook, output, yaml.safe_load(params))


def _papermill_command(notebook: str, output: Path, params: dict) -> list[str]:
    return [sys.executable, "-c", "import sys; from paperlib.harness.sweeps import _execute_from_argv; "
            "_execute_from_argv(sys.argv[1:])", notebook, str(output), yaml.safe_dump(params, default_flow_style=True)]


def record_folders(run_dir: Path) -> list[Path]:
    """The folders that make up one finished record: the run's, and for a bisection search also those of the trainings
    its record lists (their records are what its notebook and the book load)."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if metrics.get("kind") != "bisection search":
        return [run_dir]
    return [run_dir, *(run_dir.parent / evaluation["run"] for evaluation in metrics["evaluations"])]


def _commit(folders: list[Path]) -> None:
    """Commit one finished record (all its folders); retries while another git process holds the index."""
    root = records.project_root()
    paths = [str(folder) for folder in folders]
    for _ in range(20):
        added = subprocess.run(["git", "add", *paths], cwd=root, capture_output=True, text=True)
        if added.returncode == 0:
            done = subprocess.run(["git", "commit", "-q", "-m", f"runs: {folders[0].relative_to(root)}", "--",
                                   *paths], cwd=root, capture_output=True, text=True)
            if done.returncode == 0 or "nothing to commit" in done.stdout:
                return
        time.sleep(3)
    print(f"could not commit {folders[0]}", flush=True)


def execute(notebook: str, dataset: str, params: dict, threads: int, commit: bool, renew: bool = False) -> str:
    """Run one parameter set unless its record is complete; a one-line status. A complete record without its executed
    notebook (trained by :func:`run_commands`' command) gets one in seconds; ``renew`` replaces a complete record's
    notebook (``benchmarks/regenerate_run_notebooks.py``, after a template changed)."""
    run_dir = record_folder(notebook, params, dataset, notebook_defaults(notebook))
    if records.record_status(run_dir) == "complete" and (run_dir / "notebook.ipynb").exists() and not renew:
        return f"skip (complete)  {run_dir}"
    scratch = records.checkpoints_dir() / "notebooks" / run_dir.relative_to(records.runs_dir())
    scratch.mkdir(parents=True, exist_ok=True)
    if not _claim(scratch / "running.pid"):
        return f"skip (running in another process)  {run_dir}"
    try:
        return _execute(notebook, params, threads, commit, run_dir, scratch)
    finally:
        (scratch / "running.pid").unlink(missing_ok=True)


def run_commands(notebook: str, dataset: str, params: dict, threads: int) -> str:
    """The ``python -m paperlib.harness.run`` command that writes the record the notebook would with ``params`` (checked
    here), for a machine without Jupyter; a later sweep here adds the executed notebook (:func:`execute`)."""
    if Path(notebook).stem == "bisection":
        raise ValueError("a bisection search is a notebook of many trainings; run it through the notebook")
    defaults = notebook_defaults(notebook)
    merged = config_parameters({**params, "threads": threads}, dataset, defaults)
    args = {key: value for key, value in merged.items() if value is not None}  # None: the preset's value
    if records.run_folder(resolve_config(**args)) != record_folder(notebook, params, dataset, defaults):
        raise RuntimeError(f"the command for {params} would write another record than {notebook} does")
    words = [f"{key}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"
             for key, value in args.items()]
    return " ".join(["python", "-m", "paperlib.harness.run", *(shlex.quote(word) for word in words)])


def _claim(lock: Path) -> bool:
    """Take the run for this process unless a live process holds it (two sweeps may share runs)."""
    try:
        holder = int(lock.read_text())
        os.kill(holder, 0)
        return False
    except (FileNotFoundError, ValueError, ProcessLookupError):
        lock.write_text(str(os.getpid()))
        return True


#: The notebook processes this sweep has started and not seen end (several worker threads add to it).
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _run_notebook(command: list[str], env: dict, stream) -> int:
    """Run one notebook process to its end and return its exit status (none starts once the sweep stops)."""
    with _RUNNING_LOCK:
        if _STOPPING.is_set():
            return -signal.SIGTERM
        process = subprocess.Popen(command, env=env, cwd=records.project_root(), stdout=stream,
                                   stderr=subprocess.STDOUT)
        _RUNNING.add(process)
    try:
        return process.wait()
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(process)


def _stop_running() -> None:
    """Stop the notebook processes of this sweep; each run resumes from its last checkpoint next time."""
    with _RUNNING_LOCK:
        _STOPPING.set()
        for process in _RUNNING:
            process.terminate()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _execute(notebook: str, params: dict, threads: int, commit: bool, run_dir: Path, scratch: Path) -> str:
    output = scratch / "notebook.ipynb"
    log = scratch / "papermill.log"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    started = time.time()
    print(f"start  {run_dir}  (progress: {log})", flush=True)
    with open(log, "w") as stream:
        returncode = _run_notebook(_papermill_command(notebook, output, {**params, "threads": threads}), env, stream)
    minutes = (time.time() - started) / 60
    if returncode != 0 or records.record_status(run_dir) != "complete":
        return f"FAILED after {minutes:.1f} min ({log})  {run_dir}"
    shutil.move(str(output), run_dir / "notebook.ipynb")
    folders = record_folders(run_dir)
    for folder in folders:
        records.make_portable(folder)
        records.drop_progress_bars(folder)
        records.compress_notebook_figures(folder)
    records.drop_execution_metadata(run_dir)
    run_pages.write_header(run_dir)  # the page's title, its line and its links, from the record
    if commit:
        _commit(folders)
    return f"done in {minutes:.1f} min  {run_dir}"


class ClusterRun:
    """One run of a grid as a submitit job (:func:`execute` in the job's process). A job stopped at its time limit or by
    preemption is requeued with the same arguments and resumes from its checkpoint; its ``running.pid`` lock names a
    process that no longer exists, so the requeued job takes the run."""

    def __call__(self, notebook: str, dataset: str, params: dict, threads: int, commit: bool) -> str:
        return execute(notebook, dataset, params, threads, commit)

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _status(notebook: str, dataset: str, params: dict) -> str | None:
    """The status of the record a notebook run writes (None: no record)."""
    return records.record_status(record_folder(notebook, params, dataset, notebook_defaults(notebook)))


def submit(runs: list[tuple], executor: str, folder: Path, gpus: int, cpus: int, timeout_min: int,
           partition: str | None) -> list:
    """Submit the runs whose record is not complete as one submitit job array; return the jobs."""
    import submitit

    missing = [run for run in runs if _status(*run[:3]) != "complete"]
    pool = submitit.AutoExecutor(folder=folder, cluster=executor)
    pool.update_parameters(name="paperlib-sweep", timeout_min=timeout_min, gpus_per_node=gpus,
                           cpus_per_task=cpus, tasks_per_node=1, nodes=1,
                           **({"slurm_partition": partition} if partition else {}))
    jobs = []
    with pool.batch():
        for notebook, dataset, params, threads, commit in missing:
            jobs.append(pool.submit(ClusterRun(), notebook, dataset, params, threads, commit))
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grids", nargs="+", metavar="grid",
                        help="grid file(s) (YAML) or study names (paperlib.harness.studies); several run in the given "
                             "order through one pool of workers")
    parser.add_argument("--preset", choices=tuple(p for p in PRESETS if p != "auto"),
                        help="for a study's name: only its grids at this preset (grid files are taken as given)")
    parser.add_argument("--workers", type=int, help="parallel processes (default: the first grid file's, else 1)")
    parser.add_argument("--threads", type=int, help="torch threads per process (default: each grid file's, else 1)")
    parser.add_argument("--commit", action="store_true", help="git-commit each record as soon as it is complete")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their status, run nothing")
    parser.add_argument("--commands", action="store_true",
                        help="print a `python -m paperlib.harness.run` command per run whose record is not complete, "
                             "run nothing (for a machine without Jupyter)")
    cluster = parser.add_argument_group("cluster (submitit)")
    cluster.add_argument("--executor", choices=("slurm", "local"),
                         help="submit one job per missing run instead of running them here")
    cluster.add_argument("--gpus", type=int, default=1, help="GPUs per job (default 1)")
    cluster.add_argument("--cpus", type=int, default=8, help="CPU cores per job (default 8)")
    cluster.add_argument("--timeout-min", type=int, default=24 * 60,
                         help="time limit per job in minutes; a job that reaches it is requeued and resumes")
    cluster.add_argument("--partition", help="SLURM partition")
    cluster.add_argument("--log-folder", type=Path, default=Path("~/.cache/paperlib/submitit").expanduser(),
                         help="where submitit writes the jobs' logs")
    cluster.add_argument("--wait", action="store_true", help="wait for the jobs and print how each ended")
    args = parser.parse_args(argv)
    try:
        args.grids = [grid for name in args.grids
                      for grid in ([name] if name.endswith(".yaml") else studies.grids(name, preset=args.preset))]
    except KeyError as error:
        parser.error(error.args[0])
    runs = []  # (notebook, dataset, params, threads) in the order they start
    for grid in args.grids:
        spec = yaml.safe_load(Path(grid).read_text())
        for key in ("notebook", "dataset"):
            if key not in spec:
                raise ValueError(f"grid file {grid} must name a {key!r}")
        sets = expand_grid(spec)
        defaults = notebook_defaults(spec["notebook"])
        check_parameters(grid, spec["notebook"], sets, defaults)
        if "dataset" in defaults:  # a notebook that can train on several datasets
            sets = [{"dataset": spec["dataset"], **params} for params in sets]
        threads = args.threads or spec.get("threads", 1)
        runs += [(spec["notebook"], spec["dataset"], params, threads) for params in sets]
        if args.dry_run:
            for params in sets:
                run_dir = record_folder(spec["notebook"], params, spec["dataset"], defaults)
                print(f"{records.record_status(run_dir) or 'missing':9s} {run_dir}")
    if args.dry_run:
        return 0
    if args.commands:
        for notebook, dataset, params, threads in runs:
            if _status(notebook, dataset, params) != "complete":
                print(run_commands(notebook, dataset, params, threads))
        return 0
    if args.executor:
        jobs = submit([(*run, args.commit) for run in runs], args.executor, args.log_folder, args.gpus, args.cpus,
                      args.timeout_min, args.partition)
        print(f"submitted {len(jobs)} job(s) for the {len(runs)} runs (the others are complete); "
              f"logs in {args.log_folder}: {' '.join(job.job_id for job in jobs)}", flush=True)
        if not args.wait:
            return 0
        lines = [job.result() for job in jobs]
        print("\n".join(lines), flush=True)
        return 1 if any(line.startswith("FAILED") for line in lines) else 0
    workers = args.workers or yaml.safe_load(Path(args.grids[0]).read_text()).get("workers", 1)
    print(f"{len(runs)} runs of {len(args.grids)} grid file(s) with {workers} workers", flush=True)
    pool = ThreadPoolExecutor(max_workers=workers)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # `kill` stops the runs too, not only this process
    try:
        jobs = [pool.submit(execute, notebook, dataset, params, threads, args.commit)
                for notebook, dataset, params, threads in runs]
        failures = 0
        for job in jobs:
            line = job.result()
            failures += line.startswith("FAILED")
            print(line, flush=True)
    except BaseException:  # SIGTERM or Ctrl-C
        _stop_running()
        raise
    finally:
        pool.shutdown(cancel_futures=True)
        signal.signal(signal.SIGTERM, previous)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
