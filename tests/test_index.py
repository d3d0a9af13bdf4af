"""paperlib.harness.index: one table of every complete record, read from the records themselves."""

import json

import pytest

from paperlib.harness import index, presets


def _write(root, experiment, status="complete", device="cpu", **overrides):
    config = presets.resolve_config(experiment=experiment, **overrides)
    folder = root / experiment / config.run_name
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps(config.to_dict()))
    metrics = {"status": status, "l0_density": 0.5, "val_error_final": 2.0, "epochs_completed": config.epochs,
               "wall_time_s": 1.0, "device": device, "git_commit": "0123456789abcdef"}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    _write(root, "a", dataset="mnist", preset="paper", model="mlp", target=0.5)
    _write(root, "a", dataset="mnist", preset="paper", model="mlp", target=0.2, device="cuda")
    _write(root, "a", dataset="mnist", preset="paper", model="mlp", target=0.35, status="partial")
    _write(root, "b", dataset="cifar10", preset="cpu2", grouping="layer", target=0.65, dual_lr=7e-4)
    return root


def test_the_index_has_one_row_per_complete_record_with_its_protocol_variant_and_device(runs):
    frame = index.record_index(runs)
    assert len(frame) == 3  # the partial run is not a record yet
    assert set(frame["protocol"]) == {"paper protocol", "CPU protocol"}
    assert sorted(frame["device"]) == ["CPU", "CPU", "GPU"] and set(frame["commit"]) == {"01234567"}
    assert frame.loc[frame["experiment"] == "b", "variant"].item() == "dual_lr 0.0007"
    assert set(frame.loc[frame["experiment"] == "a", "variant"]) == {""}
    assert all(folder.startswith("runs/") for folder in frame["folder"])  # relative: no machine path


def test_select_takes_values_tuples_of_values_and_refuses_unknown_columns(runs):
    frame = index.record_index(runs)
    assert len(index.select(frame, experiment="a", target=0.5)) == 1
    assert len(index.select(frame, experiment=("a", "b"))) == 3
    assert len(index.select(frame, protocol="paper protocol", device="GPU")) == 1
    with pytest.raises(KeyError, match="no column 'colour'"):
        index.select(frame, colour="blue")


def test_a_changed_preset_moves_its_old_records_out_of_its_protocol(runs, monkeypatch):
    monkeypatch.setitem(presets.PAPER, ("mnist", "mlp"), dict(presets.PAPER[("mnist", "mlp")], dual_lr=5e-4))
    index._index.cache_clear()
    frame = index.record_index(runs)
    assert set(index.select(frame, experiment="a")["protocol"]) == {"paper protocol, superseded settings"}
    assert index.select(frame, protocol="paper protocol").empty


def test_where_runs_trained_is_one_device_or_says_how_they_split():
    assert index.where_ran(["cpu", "cpu"]) == "CPU" and index.where_ran(["cuda", "cuda:0", "GPU"]) == "GPU"
    assert index.where_ran([]) == "–" and index.where_ran([None]) == "CPU"  # a record without a device: a CPU run
    mixed = ["cpu", "cuda", "cuda", "CPU"]
    assert index.where_ran(mixed) == "CPU, 2 of 4 on GPU"
    assert index.where_ran(mixed, mixed="CPU {cpu}, GPU {gpu} runs") == "CPU 2, GPU 2 runs"
    assert index.where_ran(mixed, seeds=[0, 1, 2, 0]) == "CPU: seed 0; GPU: seeds 1, 2"  # seed 0 twice: one seed


def test_an_edited_params_file_is_read_again(runs):
    assert set(index.record_index(runs)["target"]) == {0.5, 0.2, 0.65}
    params_file = next(runs.glob("a/*t0.5*/params.json"))
    params = json.loads(params_file.read_text())
    params_file.write_text(json.dumps({**params, "target": 0.45}))  # a different size: seen even within one mtime tick
    assert set(index.record_index(runs)["target"]) == {0.45, 0.2, 0.65}
