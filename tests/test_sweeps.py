"""Sweeps: grid expansion, record folders, several grid files in one command, and the cluster path."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import yaml
from fake_data import make_mnist

from paperlib.harness import records, run_pages, sweeps
from paperlib.harness.vocabulary import PRESETS


def test_sweep_grid_expansion_and_record_folders(workspace):
    spec = {"base": {"experiment": "grid", "model": "mlp", "preset": "cpu"},
            "grid": {"target": [0.2, 0.5], "seed": [0, 1]},
            "runs": [{"grouping": "layer", "target": [0.3, 0.3, 0.3]}, {"target": 0.2, "seed": 0}]}
    sets = sweeps.expand_grid(spec)
    assert len(sets) == 5  # the last explicit run duplicates a grid point
    folders = {sweeps.run_folder(params, "mnist") for params in sets}
    assert len(folders) == 5
    assert workspace / "runs" / "grid" / "mlp-constrained-model-t0.2-s1-cpu" in folders


def test_sweep_uses_the_notebooks_defaults(workspace):
    defaults = sweeps.notebook_defaults(str(records.project_root() / "book" / "mnist.ipynb"))
    assert defaults["target"] == 0.33 and defaults["epochs"] == 0
    folder = sweeps.run_folder({}, "mnist", defaults)
    assert folder.parent == workspace / "runs" / "mnist"
    assert folder.name.startswith("mlp-constrained-model-t0.33-s0-")


def test_a_run_is_claimed_by_one_live_process_only(tmp_path):
    import os
    import subprocess
    import sys

    lock = tmp_path / "running.pid"
    lock.write_text(str(os.getpid()))  # held by a live process (this one)
    assert not sweeps._claim(lock)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(finished.stdout.strip())  # held by a process that has exited
    assert sweeps._claim(lock) and lock.read_text() == str(os.getpid())


def test_several_grids_are_listed_in_order_with_their_record_status(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    grids = []
    for name, targets in (("a", [0.2, 0.4]), ("b", [0.6])):
        grid = tmp_path / f"{name}.yaml"
        grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist",
                                        "base": {"experiment": name, "model": "mlp", "preset": "cpu"},
                                        "grid": {"target": targets}}))
        grids.append(str(grid))
    done = sweeps.run_folder({"experiment": "a", "model": "mlp", "preset": "cpu", "target": 0.4}, "mnist",
                             sweeps.notebook_defaults(notebook))
    records.write_json(done / "metrics.json", {"status": "complete"})

    assert sweeps.main([*grids, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["missing", "complete", "missing"]
    assert [line.split()[1].split("/runs/")[1].split("-")[0] for line in lines] == ["a/mlp", "a/mlp", "b/mlp"]
    assert "t0.2" in lines[0] and "t0.4" in lines[1] and "t0.6" in lines[2]


def test_a_grid_parameter_the_notebook_does_not_declare_stops_the_sweep_before_any_run(tmp_path, monkeypatch):
    """papermill would only warn, and the notebook would train its default under the grid's run name."""
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path / "runs"))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"notebook": "book/mnist.ipynb", "dataset": "mnist",
                                    "base": {"experiment": "x", "preset": "cpu", "target": 0.5},
                                    "runs": [{"seed": 1}, {"gates_learning_rate": 0.1}]}))
    with pytest.raises(ValueError, match=r"\['gates_learning_rate'\], which its parameters cell does not declare"):
        sweeps.main([str(grid), "--dry-run"])
    assert not (tmp_path / "runs").exists()


def test_every_grid_gives_its_notebook_only_parameters_it_declares_and_names_its_preset():
    for grid in sorted((records.project_root() / "grids").glob("*.yaml")):
        spec = yaml.safe_load(grid.read_text())
        sets = sweeps.expand_grid(spec)
        sweeps.check_parameters(grid.name, spec["notebook"], sets, sweeps.notebook_defaults(spec["notebook"]))
        assert all(params.get("preset") in PRESETS and params["preset"] != "auto" for params in sets), \
            f"{grid.name} leaves the preset to auto"


def test_submitit_local_executor_runs_each_missing_run_once_and_skips_complete_ones(tmp_path, monkeypatch):
    """``--executor local --wait``: one job per missing run (a job array), a complete record is not resubmitted."""
    make_mnist(tmp_path / "data", n_train=32, n_test=16)
    for name, value in {"PAPERLIB_DATA": tmp_path / "data", "PAPERLIB_RUNS": tmp_path / "runs",
                        "PAPERLIB_CHECKPOINTS": tmp_path / "checkpoints", "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("PAPERLIB_SMOKE", raising=False)  # smoke records take another name than the grid's
    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    grid = tmp_path / "grid.yaml"
    base = {"experiment": "cluster", "model": "mlp", "preset": "cpu", "epochs": 1}
    grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist", "base": base,
                                    "grid": {"target": [0.3, 0.6]}}))
    folders = [sweeps.run_folder({**base, "target": t}, "mnist", sweeps.notebook_defaults(notebook))
               for t in (0.3, 0.6)]
    records.write_json(folders[1] / "metrics.json", {"status": "complete", "marker": "not rerun"})
    logs = tmp_path / "submitit"

    assert sweeps.main([str(grid), "--executor", "local", "--wait", "--log-folder", str(logs), "--gpus", "0",
                        "--cpus", "1", "--timeout-min", "10"]) == 0
    assert records.record_status(folders[0]) == "complete"
    assert (folders[0] / "notebook.ipynb").exists()
    assert json.loads((folders[1] / "metrics.json").read_text())["marker"] == "not rerun"
    assert len(list(logs.glob("*_submitted.pkl"))) == 1  # one job: the complete run was not submitted


def test_a_requeued_cluster_job_runs_the_same_run_again():
    """At a time limit or preemption submitit calls ``checkpoint``; the resubmission has the same arguments,
    so the run resumes from its last checkpoint (resumption itself: tests/test_training.py)."""
    args = ("book/mnist.ipynb", "mnist", {"target": 0.3}, 1, False)
    again = sweeps.ClusterRun().checkpoint(*args)
    assert isinstance(again.function, sweeps.ClusterRun)
    assert again.args == args and again.kwargs == {}


def test_a_run_command_writes_the_record_the_notebook_would(workspace):
    """``--commands``: each command, parsed as ``python -m paperlib.harness.run`` parses it, resolves to the
    notebook's record folder, lists and small floats included; unset (None) parameters are left out."""
    from paperlib.harness import run
    from paperlib.harness.training import resolve_run_config

    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    for params in ({"experiment": "x", "model": "lenet5", "grouping": "layer", "target": [0.5, 0.3, 0.7, 0.1]},
                   {"experiment": "x", "method": "penalized", "lmbda": 0.0001, "seed": 3},
                   {"experiment": "x", "linear_init": "fan_out", "dual_lr": 1e-3, "target": 0.1}):
        command = sweeps.run_commands(notebook, "mnist", params, threads=1)
        words = shlex.split(command)
        assert words[:3] == ["python", "-m", "paperlib.harness.run"]
        assert not any(word.endswith("=null") for word in words)
        parsed = run.parse(words[3:])
        assert records.run_folder(resolve_run_config(**parsed)) == sweeps.record_folder(
            notebook, params, "mnist", sweeps.notebook_defaults(notebook))
    with pytest.raises(ValueError, match="bisection"):
        sweeps.run_commands(str(records.project_root() / "book" / "bisection.ipynb"), "mnist", {}, 1)


def test_a_complete_record_without_its_notebook_gets_it_without_training_again(workspace):
    """A record trained by ``python -m paperlib.harness.run`` (no notebook) is completed by a sweep: the notebook
    is executed over the complete record, which it shows without training (the record is unchanged)."""
    from paperlib.harness.training import run_experiment

    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    params = {"experiment": "attach", "model": "mlp", "preset": "cpu", "epochs": 1, "target": 0.5}
    record = run_experiment(dataset="mnist", progress=False, **params)
    run_dir = sweeps.record_folder(notebook, params, "mnist", sweeps.notebook_defaults(notebook))
    assert record["path"] == str(run_dir) and not (run_dir / "notebook.ipynb").exists()
    before = (run_dir / "metrics.json").read_text()

    line = sweeps.execute(notebook, "mnist", params, threads=1, commit=False)
    assert line.startswith("done"), line
    assert (run_dir / "metrics.json").read_text() == before
    executed = json.loads((run_dir / "notebook.ipynb").read_text())
    assert "complete record found" in json.dumps(executed["cells"])
    assert "".join(executed["cells"][0]["source"]).startswith(f"# {run_pages.run_title(record['params'])}\n")
    assert not any({"papermill", "execution"} & set(cell["metadata"]) for cell in executed["cells"])
    assert sweeps.execute(notebook, "mnist", params, threads=1, commit=False).startswith("skip (complete)")
    assert sweeps.execute(notebook, "mnist", params, threads=1, commit=False, renew=True).startswith("done")
    assert (run_dir / "metrics.json").read_text() == before


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (Linux /proc)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_stopping_a_sweep_stops_its_runs_and_starts_no_other(workspace, tmp_path):
    """`kill` (SIGTERM) of a sweep ends its notebook processes and their kernels too, and the queued run never
    starts; the stopped runs resume from their checkpoints next time."""
    notebook = str(records.project_root() / "book" / "mnist.ipynb")
    grid = tmp_path / "grid.yaml"
    base = {"experiment": "stopped", "model": "mlp", "preset": "cpu", "epochs": 100000}
    grid.write_text(yaml.safe_dump({"notebook": notebook, "dataset": "mnist", "base": base,
                                    "grid": {"target": [0.3, 0.5, 0.7]}}))
    sweep = subprocess.Popen([sys.executable, "-m", "paperlib.harness.sweeps", str(grid), "--workers", "2"],
                             cwd=records.project_root(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.time() + 120
    while time.time() < deadline and sum("ipykernel" in _command_line(p) for p in _descendants(sweep.pid)) < 2:
        time.sleep(0.5)
    below = _descendants(sweep.pid)
    assert sum("ipykernel" in _command_line(p) for p in below) == 2, "two kernels should be training"

    sweep.terminate()
    output, _ = sweep.communicate(timeout=60)
    assert sweep.returncode == 128 + signal.SIGTERM, output
    deadline = time.time() + 60
    while time.time() < deadline and any(map(_alive, below)):
        time.sleep(0.5)
    assert not [(p, _command_line(p)) for p in below if _alive(p)]
    assert output.count("start ") == 2, output  # the third run was cancelled, not started


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_bisection_search_is_committed_with_the_trainings_its_record_lists(tmp_path):
    """The search's notebook and the book load its trainings' records, so they are part of the record."""
    search = tmp_path / "search-mlp-model-t0.5"
    search.mkdir()
    records.write_json(search / "metrics.json", {"kind": "bisection search", "evaluations": [
        {"lmbda": 0.001, "run": "mlp-penalized-model-l0.001"}, {"lmbda": 1.0, "run": "mlp-penalized-model-l1"}]})
    assert sweeps.record_folders(search) == [search, tmp_path / "mlp-penalized-model-l0.001",
                                             tmp_path / "mlp-penalized-model-l1"]
    run = tmp_path / "mlp-constrained-model-t0.3"
    run.mkdir()
    records.write_json(run / "metrics.json", {"status": "complete", "run_name": run.name})
    assert sweeps.record_folders(run) == [run]


def test_a_study_name_stands_for_its_grids(capsys):
    """The compiled-gates study's one grid resolves to its committed record; an unknown name is refused."""
    assert sweeps.main(["compiled_gates", "--dry-run"]) == 0
    assert capsys.readouterr().out.split() == ["complete", str(records.runs_dir() / "compiled_gates" /
                                                              "mlp-constrained-model-t0.33-s0-paper")]
    assert sweeps.main(["tab:cifar10_control", "--preset", "cpu", "--dry-run"]) == 0
    folders = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert folders and all(folder.endswith("-cpu") for folder in folders)  # not the paper's WRN-28-10 grid
    with pytest.raises(SystemExit):
        sweeps.main(["tab:nothing", "--dry-run"])
    assert "no study is called 'tab:nothing'" in capsys.readouterr().err
