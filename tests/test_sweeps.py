"""Sweeps: grid files expand to parameter sets, each located by the record folder of its notebook run."""

from paperlib import records, sweeps


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
