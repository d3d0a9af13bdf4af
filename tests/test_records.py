"""Records: where a run's record lives, how it is written, and how records of earlier versions load."""

import base64
import io
import json

import numpy as np
import pandas as pd
import pytest
from tqdm import tqdm

from paperlib.harness import records
from paperlib.harness.presets import resolve_config

CONFIG = dict(experiment="unit", dataset="mnist", model="mlp", target=0.5, preset="cpu")


def _write(run_dir, status, **metrics):
    records.write_record(run_dir, {"target": 0.5}, {"status": status, **metrics}, [{"epoch": 0, "val_error": 9.5}],
                         [], {})


def test_the_record_folder_is_experiment_and_run_name_under_runs(workspace):
    config = resolve_config(**CONFIG)
    assert records.run_folder(config) == workspace / "runs" / "unit" / config.run_name
    assert records.checkpoint_path(config) == workspace / "checkpoints" / "unit" / config.run_name / "last.pt"


def test_smoke_records_never_land_in_runs(workspace, monkeypatch):
    config = resolve_config(**CONFIG, smoke=True)
    assert records.run_folder(config).parent.parent == workspace / "runs"  # PAPERLIB_RUNS names a folder: use it
    monkeypatch.delenv("PAPERLIB_RUNS")
    assert records.run_folder(config) == workspace / "checkpoints" / "smoke-runs" / "unit" / config.run_name


def test_a_complete_record_is_never_replaced_by_an_unfinished_one(tmp_path):
    _write(tmp_path, "complete", val_error_best=9.5)
    with pytest.raises(RuntimeError, match="refusing to overwrite the complete record"):
        _write(tmp_path, "partial")
    assert records.record_status(tmp_path) == "complete"
    with pytest.raises(ValueError, match="status must be one of"):
        _write(tmp_path / "other", "running")


def _migration():
    """benchmarks/migrate_records.py, loaded as a module (benchmarks/ is not a package)."""
    import importlib.util

    path = records.project_root() / "benchmarks" / "migrate_records.py"
    spec = importlib.util.spec_from_file_location("migrate_records", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_moves_repeated_parameters_out_of_metrics_and_keeps_disagreements(tmp_path):
    """metrics.json repeated the parameters (the oldest under 'target_density'); the migration removes each
    repeat that equals params.json's, keeps the results and the actual device, and is idempotent. A repeat that
    differs is reported and the record left as it is."""
    migration = _migration()
    params = {"run_name": "r", "model": "mlp", "target": [0.5, 0.3], "seed": 0, "device": "auto"}
    records.write_record(tmp_path / "old", params, {"status": "complete", "run_name": "r", "model": "mlp",
                                                    "target_density": [0.5, 0.3], "seed": 0, "device": "cpu",
                                                    "l0_density": 0.4}, [{"epoch": 0}], [], {})
    assert migration.migrate(tmp_path / "old") == (["metrics.json: -run_name, -model, -target_density, -seed"], [])
    record = records.load_record(tmp_path / "old")
    assert record["metrics"] == {"status": "complete", "device": "cpu", "l0_density": 0.4}
    assert record["params"] == params
    assert migration.migrate(tmp_path / "old") == ([], [])
    records.write_record(tmp_path / "odd", params, {"status": "complete", "model": "lenet5", "seed": 0},
                         [{"epoch": 0}], [], {})
    before = (tmp_path / "odd" / "metrics.json").read_text()
    changed, disagree = migration.migrate(tmp_path / "odd")
    assert changed == [] and disagree == ["model: metrics 'lenet5', params 'mlp'"]
    assert (tmp_path / "odd" / "metrics.json").read_text() == before


def test_the_migration_leaves_a_record_in_progress_alone(tmp_path):
    migration = _migration()
    records.write_record(tmp_path, {"model": "mlp"}, {"status": "partial", "model": "mlp"}, [{"epoch": 0}], [], {})
    assert migration.migrate(tmp_path) == ([], [])
    assert "model" in records.load_record(tmp_path)["metrics"]


def test_find_records_lists_run_folders(tmp_path):
    for name in ("a", "b"):
        _write(tmp_path / "exp" / name, "complete")
    assert records.find_records("exp", root=tmp_path) == [tmp_path / "exp" / "a", tmp_path / "exp" / "b"]


def test_git_commit_is_marked_dirty_when_the_package_has_uncommitted_changes(tmp_path):
    import importlib.util
    import shutil
    import subprocess

    package = tmp_path / "repo" / "paperlib"
    (package / "harness").mkdir(parents=True)
    shutil.copy(records.__file__, package / "harness" / "records.py")
    (package / "method").mkdir()
    (package / "method" / "gates.py").write_text("# another layer\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=package.parent, check=True)
    subprocess.run([*git, "add", "."], cwd=package.parent, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=package.parent, check=True)
    spec = importlib.util.spec_from_file_location("copied_records", package / "harness" / "records.py")
    copied = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copied)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=package.parent, capture_output=True, text=True).stdout
    assert copied.git_commit() == head.strip()
    (package / "method" / "gates.py").write_text("# edited in another layer than records.py's\n")
    assert copied.git_commit() == head.strip() + "-dirty"
    (package.parent / "notes.txt").write_text("outside the package")  # not the code that ran
    subprocess.run(["git", "checkout", "-q", "--", "paperlib"], cwd=package.parent, check=True)
    assert copied.git_commit() == head.strip()


def test_git_commit_outside_git_is_the_one_the_copy_was_declared_from(tmp_path, monkeypatch):
    """A copy of the tree without ``.git`` (a lent GPU machine) records ``$PAPERLIB_GIT_COMMIT``, else unknown."""
    import importlib.util
    import shutil

    package = tmp_path / "copy" / "paperlib" / "harness"
    package.mkdir(parents=True)
    shutil.copy(records.__file__, package / "records.py")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above the copy either
    spec = importlib.util.spec_from_file_location("copied_records", package / "records.py")
    copied = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copied)
    monkeypatch.delenv("PAPERLIB_GIT_COMMIT", raising=False)
    assert copied.git_commit() == "unknown"
    monkeypatch.setenv("PAPERLIB_GIT_COMMIT", "0123abc")
    assert copied.git_commit() == "0123abc"
    assert records.git_commit() != "0123abc"  # inside git the variable is not read


def test_the_data_files_are_compressed_and_old_uncompressed_ones_convert_without_a_change(tmp_path):
    steps = [{"epoch": 0.5 * i, "l0_density": 1 / (i + 1), "lambda_0": None} for i in range(50)]
    medians = {"0": {"fc1": [0.25, 1.0]}}
    records.write_record(tmp_path / "new", {}, {"status": "complete"}, [{"epoch": 1}], steps, medians)
    compressed = (tmp_path / "new" / "steps.csv.xz").read_bytes()
    assert compressed[:6] == b"\xfd7zXZ\x00" and not (tmp_path / "new" / "steps.csv").exists()
    assert sorted(path.name for path in (tmp_path / "new").iterdir()) == [
        "gate_medians.json.xz", "history.csv.xz", "metrics.json", "params.json", "steps.csv.xz"]
    assert records.load_record(tmp_path / "new")["gate_medians"] == medians
    records.write_record(tmp_path / "again", {}, {"status": "complete"}, [{"epoch": 1}], steps, {})
    assert (tmp_path / "again" / "steps.csv.xz").read_bytes() == compressed  # same rows, same bytes
    rows = records.load_record(tmp_path / "new")["steps"]
    assert [float(row["l0_density"]) for row in rows] == pytest.approx([1 / (i + 1) for i in range(50)], rel=1e-5)
    assert pd.read_csv(tmp_path / "new" / "steps.csv.xz")["l0_density"].tolist() == pytest.approx(
        [float(row["l0_density"]) for row in rows])  # pandas reads the file as it is


def _figure_png(dpi: int = 80) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    for k in range(6):
        ax.plot(range(50), [((i * (k + 1)) % 17) / 17 for i in range(50)], label=f"layer {k}")
    ax.legend()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


def test_notebook_figures_become_palette_pngs_of_the_same_picture_and_nothing_else_changes(tmp_path):
    from PIL import Image

    original = _figure_png()
    cells = [{"cell_type": "code", "source": "plot()", "outputs": [
        {"output_type": "display_data", "metadata": {}, "data": {
            "image/png": base64.b64encode(original).decode() + "\n", "text/plain": "<Figure size 480x240>"}},
        {"output_type": "stream", "name": "stdout", "text": "epoch=1 val_error=7.25\n"}]}]
    notebook = tmp_path / "notebook.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert records.compress_notebook_figures(tmp_path) == 1
    assert records.compress_notebook_figures(tmp_path) == 0  # a palette image is left as it is
    after = json.loads(notebook.read_text())["cells"][0]["outputs"]
    assert after[1] == cells[0]["outputs"][1] and after[0]["data"]["text/plain"] == "<Figure size 480x240>"
    smaller = base64.b64decode(after[0]["data"]["image/png"])
    assert len(smaller) < 0.6 * len(original)
    before, now = Image.open(io.BytesIO(original)).convert("RGB"), Image.open(io.BytesIO(smaller)).convert("RGB")
    assert now.size == before.size
    # the same picture: under one level of 255 on average; only anti-aliased edge pixels differ by more
    difference = np.abs(np.asarray(before, dtype=int) - np.asarray(now, dtype=int))
    assert difference.mean() < 1.0 and np.percentile(difference, 99.9) < 32


def test_a_transparent_figure_is_left_as_it_is():
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGBA", (40, 20), (255, 0, 0, 0)).save(buffer, "PNG")
    assert records.palette_png(buffer.getvalue()) == buffer.getvalue()


def test_progress_bars_leave_a_record_notebook_and_everything_else_stays(tmp_path):
    stream = io.StringIO()  # what the runner's bar writes to stderr in one epoch (training.Runner.train_epoch)
    for _ in tqdm(range(469), desc="epoch 117", mininterval=0, leave=False, file=stream):
        pass
    bars = stream.getvalue()
    assert bars.count("it/s]") > 100
    cut = bars.index("\r", 200)  # a warning arrives between two updates of the bar
    warning = "/x/torch/nn/functional.py:12: UserWarning: something\n  warnings.warn(\n"
    epoch_line = "epoch=117 train_loss=0.002 val_error=0.88 l0_density=0.1999 params_pct=19.5\n"
    cells = [{"cell_type": "code", "source": "run()", "metadata": {}, "execution_count": 1, "outputs": [
                 {"output_type": "stream", "name": "stderr", "text": bars},
                 {"output_type": "stream", "name": "stdout", "text": [epoch_line, bars]},
                 {"output_type": "stream", "name": "stderr", "text": [bars[:cut], warning, bars[cut:]]},
                 {"output_type": "display_data", "data": {"text/plain": "<Figure>"}, "metadata": {}}]},
             {"cell_type": "markdown", "source": "# title", "metadata": {}}]
    notebook = tmp_path / "notebook.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))

    assert records.drop_progress_bars(tmp_path) == 2
    outputs = json.loads(notebook.read_text())["cells"][0]["outputs"]
    assert outputs == [cells[0]["outputs"][1],  # stdout is never touched, even where it looks like a bar
                       {"output_type": "stream", "name": "stderr", "text": warning},
                       cells[0]["outputs"][3]]
    assert json.loads(notebook.read_text())["cells"][1] == cells[1]
    before = notebook.read_bytes()
    assert records.drop_progress_bars(tmp_path) == 0 and notebook.read_bytes() == before
    assert records.drop_progress_bars(tmp_path / "no record") == 0
