"""The runner: resumption (also of checkpoints written before the methods were split), failure handling, records."""

import json
import math

import pytest
import torch

from paperlib.harness import methods, records, training
from paperlib.method import gates
from paperlib.harness.presets import resolve_config

RUN = dict(experiment="unit", dataset="mnist", model="mlp", target=0.5, epochs=3, batch_size=16, preset="cpu",
           dual_lr=0.05, gates_lr=0.05)


def _numbers(record):
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in record["history"]]


def _run_killed_after_epoch(monkeypatch, epoch: int, **params) -> None:
    """Run ``params`` until epoch ``epoch`` is written (record and checkpoint), then kill it."""
    original = training.Runner._finish_epoch

    def killed(self, phase, train, started):
        original(self, phase, train, started)
        if self.state.epoch == epoch:
            raise KeyboardInterrupt("simulated kill")

    with monkeypatch.context() as patch:
        patch.setattr(training.Runner, "_finish_epoch", killed)
        with pytest.raises(KeyboardInterrupt):
            training.run_experiment(progress=False, **params)


def test_interrupted_run_resumes_to_identical_numbers(workspace, monkeypatch):
    reference = training.run_experiment(progress=False, **RUN, run_name="uninterrupted")

    _run_killed_after_epoch(monkeypatch, 2, **RUN, run_name="resumed")
    run_dir = workspace / "runs" / "unit" / "resumed"
    assert records.record_status(run_dir) == "partial"
    assert json.loads((run_dir / "metrics.json").read_text())["epochs_completed"] == 2

    resumed = training.run_experiment(progress=False, **RUN, run_name="resumed")
    assert resumed["metrics"]["status"] == "complete"
    assert _numbers(resumed) == _numbers(reference)
    assert resumed["steps"] == reference["steps"]
    assert resumed["metrics"]["multipliers_final"] == reference["metrics"]["multipliers_final"]


def test_record_contents(workspace):
    record = training.run_experiment(progress=False, **RUN)
    metrics = record["metrics"]
    assert metrics["status"] == "complete" and metrics["epochs_completed"] == 3
    assert [row["epoch"] for row in record["history"]] == ["0", "1", "2", "3"]
    assert metrics["data_source"] == "torchvision-mnist-idx"
    assert metrics["params"] == int(record["history"][-1]["params"])
    assert metrics["params_pct"] == pytest.approx(100 * metrics["params"] / metrics["dense_params"])
    assert set(metrics["l0_density_per_layer"]) == {"fc1", "fc2", "fc3"}
    assert len(metrics["pruned_architecture"]) == 3
    assert record["gate_medians"] and set(record["gate_medians"]["0"]) == {"fc1", "fc2", "fc3"}
    assert len(record["gate_medians"]["0"]["fc1"]) == 784
    params = json.loads((workspace / "runs" / "unit" / record["params"]["run_name"] / "params.json").read_text())
    assert params == resolve_config(**RUN).to_dict() == record["params"]
    # metrics.json holds results only: of the parameters' names, only what the run had (device, torch's threads)
    assert set(metrics) & set(params) == {"device", "threads"}
    # Where it ran, down to the vector instructions that decide float rounding on a CPU.
    cpu_model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), None)
    assert metrics["device"] == "cpu"
    assert metrics["device_name"].endswith(f"({torch.backends.cpu.get_cpu_capability()})")
    assert cpu_model is None or metrics["device_name"].startswith(cpu_model)


def test_complete_record_is_reused_and_never_overwritten_by_a_failure(workspace, monkeypatch):
    first = training.run_experiment(progress=False, **RUN)
    run_dir = workspace / "runs" / "unit" / first["params"]["run_name"]
    before = (run_dir / "metrics.json").read_text()

    again = training.run_experiment(progress=False, **RUN)  # no training: the record is complete
    assert again["metrics"] == first["metrics"]

    calls = {"n": 0}
    real_loss = torch.nn.functional.cross_entropy

    def nan_on_third_call(logits, y):
        calls["n"] += 1
        loss = real_loss(logits, y)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(methods.F, "cross_entropy", nan_on_third_call)
    with pytest.raises(training.NonFiniteLossError, match="non-finite"):
        training.run_experiment(progress=False, rerun=True, **RUN)
    assert (run_dir / "metrics.json").read_text() == before


def test_non_finite_loss_marks_the_record_failed(workspace, monkeypatch):
    monkeypatch.setattr(methods.F, "cross_entropy", lambda logits, y: logits.sum() * float("inf"))
    with pytest.raises(training.NonFiniteLossError):
        training.run_experiment(progress=False, **RUN)
    run_dir = workspace / "runs" / "unit" / resolve_config(**RUN).run_name
    assert records.record_status(run_dir) == "failed"


def test_smoke_mode_from_the_environment_keeps_runs_clean(workspace, monkeypatch):
    monkeypatch.setenv("PAPERLIB_SMOKE", "1")
    monkeypatch.delenv("PAPERLIB_RUNS")
    monkeypatch.chdir(workspace)
    record = training.run_experiment(progress=False, **{**RUN, "epochs": 50})
    assert record["params"]["run_name"].endswith("-smoke")
    assert record["metrics"]["epochs_completed"] == training.SMOKE_EPOCHS
    assert "checkpoints" in record["path"] and "smoke-runs" in record["path"]


@pytest.mark.parametrize("method", ["dense", "penalized", "magnitude_pruning"])
def test_other_methods_complete(workspace, method):
    params = {**RUN, "method": method, "epochs": 2, "finetune_epochs": 1, "finetune_lr": 1e-3, "lmbda": 0.1}
    record = training.run_experiment(progress=False, **params)
    phases = [row["phase"] for row in record["history"]]
    if method == "magnitude_pruning":
        assert phases == ["init", "train", "train", "pruned", "finetune"]
        assert record["metrics"]["params_pct"] < 60  # half of the gated layers' groups are gone
    else:
        assert phases == ["init", "train", "train"]
    assert record["metrics"]["status"] == "complete"


@pytest.mark.parametrize("schedule_gates, final_gates_lr", [(False, 0.05), (True, 0.05 * 0.1 ** 2)])
def test_gates_learning_rate_is_scheduled_only_on_request(workspace, schedule_gates, final_gates_lr):
    params = {**RUN, "lr_milestones": [1, 2], "lr_gamma": 0.1, "schedule_gates": schedule_gates}
    record = training.run_experiment(progress=False, **params)
    last = record["history"][-1]
    assert float(last["lr"]) == pytest.approx(RUN.get("lr", 7e-4) * 0.1 ** 2)
    assert float(last["gates_lr"]) == pytest.approx(final_gates_lr)


def test_pretrained_resnet50_is_pruned_without_dense_training(tmp_path, monkeypatch):
    """Table 2's baseline: torchvision's trained ResNet50, L1-filter pruned, then fine-tuned."""
    import torchvision
    from fake_data import make_imagenet

    make_imagenet(tmp_path / "data")
    for key, value in {"PAPERLIB_DATA": tmp_path / "data", "PAPERLIB_RUNS": tmp_path / "runs",
                       "PAPERLIB_CHECKPOINTS": tmp_path / "checkpoints", "PAPERLIB_SMOKE": "1"}.items():
        monkeypatch.setenv(key, str(value))
    weights = torchvision.models.resnet50(weights=None, num_classes=2).state_dict()  # no download here
    monkeypatch.setattr(methods, "torchvision_resnet50_weights", lambda: weights)
    record = training.run_experiment(progress=False, experiment="mp", dataset="imagenet", model="resnet50",
                                     method="magnitude_pruning", target=0.5, pretrained=True, preset="paper")
    assert [row["phase"] for row in record["history"]] == ["init", "pruned", "finetune"]
    assert record["params"]["run_name"].startswith("resnet50-magnitude_pruning-t0.5-pretrained")
    assert 30 < record["metrics"]["params_pct"] < 70


@pytest.mark.parametrize("clamp", [True, False])
def test_a_one_percent_unstructured_target_is_reachable_only_without_the_clamp(workspace, clamp):
    """The clamp [ln 0.01, ln 100] puts a floor of P(z != 0) = 0.047 under every gate (eq. 8)."""
    params = {**RUN, "sparsity": "unstructured", "target": 0.01, "epochs": 6, "gates_lr": 1.0, "dual_lr": 1e5,
              "clamp_log_alpha": clamp}
    density = training.run_experiment(progress=False, **params)["metrics"]["l0_density"]
    floor = 1 / (1 + math.exp(-(math.log(1e-2) - gates.BETA * math.log(-gates.GAMMA / gates.ZETA))))
    assert floor == pytest.approx(0.0471, abs=1e-4)
    if clamp:
        assert density == pytest.approx(floor, abs=1e-4)
    else:
        assert density < 0.025


def test_a_record_made_with_other_parameters_is_not_taken_for_this_runs(workspace):
    training.run_experiment(progress=False, **RUN)
    params = json.loads(next((workspace / "runs").glob("*/*/params.json")).read_text())
    params["dual_lr"] = 0.01  # as if the preset had changed since
    path = next((workspace / "runs").glob("*/*/params.json"))
    path.write_text(json.dumps(params))
    with pytest.raises(RuntimeError, match=r"dual_lr: recorded 0.01, now 0.05"):
        training.run_experiment(progress=False, **RUN)


def test_conv_models_train_in_channels_last(workspace, monkeypatch):
    seen = []
    original = training.Runner.train_epoch

    def spy(self):
        seen.append((self.method.model.conv1.weight.is_contiguous(memory_format=torch.channels_last),
                     next(iter(self.train_loader))[0].is_contiguous(memory_format=torch.channels_last)))
        return original(self)

    monkeypatch.setattr(training.Runner, "train_epoch", spy)
    training.run_experiment(progress=False, **{**RUN, "model": "lenet5", "epochs": 1})
    assert seen == [(True, True)]


def test_a_complete_record_is_returned_before_any_data_is_loaded(workspace, monkeypatch):
    first = training.run_experiment(progress=False, **RUN)

    def no_data(*args, **kwargs):
        raise AssertionError("load_dataset called for a complete record")

    monkeypatch.setattr(training, "load_dataset", no_data)
    assert training.run_experiment(progress=False, **RUN)["metrics"] == first["metrics"]


def test_a_complete_record_is_named_without_a_machine_path(workspace, capsys):
    training.run_experiment(progress=False, **RUN)
    training.run_experiment(progress=True, **RUN)
    said = capsys.readouterr().out
    assert "complete record found in runs/unit/" in said and str(workspace) not in said


def test_bad_input_leaves_no_record(workspace):
    with pytest.raises(ValueError, match="target"):
        training.run_experiment(progress=False, **{**RUN, "target": 1.5})
    assert not (workspace / "runs").exists()


def test_a_checkpoint_of_the_previous_layout_resumes_to_identical_numbers(workspace, monkeypatch):
    """Magnitude pruning's masks used to live in the run state (``_State.weight_masks``); they move to the method."""
    params = {**RUN, "method": "magnitude_pruning", "sparsity": "unstructured", "target": 0.3, "epochs": 1,
              "finetune_epochs": 2, "finetune_lr": 1e-3}
    reference = training.run_experiment(progress=False, **params, run_name="uninterrupted")

    _run_killed_after_epoch(monkeypatch, 2, **params, run_name="resumed")  # after the first fine-tuning epoch
    path = records.checkpoint_path(resolve_config(**params, run_name="resumed"))
    payload = torch.load(path, weights_only=False)
    legacy = training._State(**vars(payload["state"]))
    legacy.weight_masks = payload.pop("weight_masks")  # as the previous code kept them
    assert legacy.weight_masks
    torch.save({**payload, "state": legacy, "objective": None}, path)

    resumed = training.run_experiment(progress=False, **params, run_name="resumed")
    assert [row["phase"] for row in resumed["history"]] == ["init", "train", "pruned", "finetune", "finetune"]
    assert _numbers(resumed) == _numbers(reference)


def test_bf16_autocast_needs_cuda(workspace):
    """Checked before any data is loaded; the CPU numbers are float32."""
    config = resolve_config(dataset="cifar10", model="wrn-16-1", preset="cpu", target=0.5, autocast_bf16=True)
    if training.resolve_device(config.device).type == "cuda":
        pytest.skip("CUDA is present")
    with pytest.raises(ValueError, match="autocast_bf16 needs CUDA; this run would train on cpu"):
        training.Runner(config, progress=False)


def test_a_pruning_run_of_another_target_takes_over_the_trained_dense_model(workspace):
    """App. L trains one dense model and prunes it at each target: a magnitude-pruning run starts from the dense
    phase another target's run finished, and ends with the numbers it would have had training it itself."""
    params = dict(experiment="shared", dataset="mnist", model="mlp", method="magnitude_pruning",
                  sparsity="unstructured", preset="cpu", epochs=2, finetune_epochs=2, batch_size=16)
    first = training.run_experiment(progress=False, **params, target=0.3)
    assert "first_phase_of" not in first["metrics"]
    shared = records.first_phase_path(resolve_config(**params, target=0.5))
    assert shared == records.first_phase_path(resolve_config(**params, target=0.3)) and shared.exists()

    taken_over = training.run_experiment(progress=False, **params, target=0.5)
    assert taken_over["metrics"]["first_phase_of"] == first["params"]["run_name"]
    dense_rows = [row for row in _numbers(first) if row["phase"] in ("init", "train")]
    assert [row for row in _numbers(taken_over) if row["phase"] in ("init", "train")] == dense_rows

    shared.unlink()  # the same run, training its dense phase itself
    alone = training.run_experiment(progress=False, **params, target=0.5, run_name="alone")
    assert "first_phase_of" not in alone["metrics"]
    assert _numbers(taken_over) == _numbers(alone)
    assert taken_over["metrics"]["params"] == alone["metrics"]["params"] < first["metrics"]["dense_params"]
    other = {**params, "lr": 1e-3}  # another dense phase: not shared
    assert records.first_phase_path(resolve_config(**other, target=0.5)) != shared


def test_time_left_extrapolates_the_mean_pace_of_the_epochs_done():
    assert training.time_left(5, 20, 5 * 240.0) == " (about 60 min left)"  # 15 epochs x 4 min
    assert training.time_left(19, 20, 19 * 20.0) == " (under a minute left)"
    assert training.time_left(0, 20, 10.0) == "" and training.time_left(20, 20, 4800.0) == ""


def test_the_steps_log_holds_20_rows_an_epoch_and_at_most_about_1000_a_run():
    assert training.steps_log_interval(391, 20) == 19  # CIFAR-10 at the CPU protocol: 20 rows an epoch, 400 in all
    assert training.steps_log_interval(469, 200) == 93  # MNIST at the paper's: 5 an epoch, about 1,000 in all
    for steps, epochs in ((391, 20), (469, 200), (469, 40), (10_000, 90)):
        rows = epochs * len(range(0, steps, training.steps_log_interval(steps, epochs)))
        expected = min(20 * epochs, training.STEPS_LOG_ROWS)
        assert 0.9 * expected <= rows <= 1.25 * expected, (steps, epochs, rows)
    assert training.steps_log_interval(3, 1) == 1  # an epoch of fewer than 20 steps logs every step


def test_a_run_gives_its_session_its_own_nice_value_where_linux_groups_sessions(tmp_path, monkeypatch):
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-26 nice 0\n")
    monkeypatch.setattr(training, "AUTOGROUP", autogroup)
    monkeypatch.setattr(training.os, "nice", lambda increment: 7)
    monkeypatch.setattr(training.os, "getsid", lambda pid: 4242)
    monkeypatch.setattr(training.os, "getpid", lambda: 1000)  # a run in a terminal's session: its group is shared
    training.keep_nice_in_own_session()
    assert autogroup.read_text() == "/autogroup-26 nice 0\n"
    monkeypatch.setattr(training.os, "getpid", lambda: 4242)  # a kernel leads its own session
    training.keep_nice_in_own_session()
    assert autogroup.read_text() == "7"
    monkeypatch.setattr(training, "AUTOGROUP", tmp_path / "no-proc" / "autogroup")  # not Linux: nothing to write
    training.keep_nice_in_own_session()
    assert not (tmp_path / "no-proc").exists()


def test_a_checkpoint_saved_before_the_three_layers_loads():
    # checkpoints pickle the model, naming its classes by module: one saved when the zoo was paperlib.models
    # (before paperlib.paper.models) must still resume
    import io
    import pickle

    from paperlib.harness import training as training_module
    from paperlib.paper.models import build_model

    model = build_model("mlp", gated=True)
    old = pickle.dumps({"model": model}, protocol=0).replace(b"cpaperlib.paper.models\n", b"cpaperlib.models\n")
    assert b"cpaperlib.models\n" in old
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)
    loaded = training_module._LayeredUnpickler(io.BytesIO(old)).load()["model"]
    assert type(loaded) is type(model)
    x = torch.randn(3, 784)
    assert torch.equal(loaded.eval()(x), model.eval()(x))
