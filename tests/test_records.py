"""Records: where a run's record lives, how it is written, and how records of earlier versions load."""

import json

import pytest

from paperlib import records
from paperlib.presets import resolve_config

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


def test_a_legacy_metric_name_loads_under_the_current_one(tmp_path):
    """metrics.json called the target 'target_density' before it took the parameter's name."""
    _write(tmp_path, "complete", target_density=[0.5, 0.3])
    assert "target_density" in json.loads((tmp_path / "metrics.json").read_text())
    record = records.load_record(tmp_path)
    assert record["metrics"]["target"] == [0.5, 0.3] and "target_density" not in record["metrics"]
    assert record["history"] == [{"epoch": "0", "val_error": "9.5"}] and record["steps"] is None


def test_find_records_lists_run_folders(tmp_path):
    for name in ("a", "b"):
        _write(tmp_path / "exp" / name, "complete")
    assert records.find_records("exp", root=tmp_path) == [tmp_path / "exp" / "a", tmp_path / "exp" / "b"]
