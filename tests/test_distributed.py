"""Several processes (paperlib.harness.distributed, paperlib.harness.run): two CPU processes over gloo.

(a) two processes with half of every batch each train the same model as one
process with the whole batch (shared gate noise; the MLP has no batch norm);
(b) a two-process run killed after its first epoch's checkpoint resumes to the
numbers of an uninterrupted one; (c) the check that the Lagrange multipliers
agree across processes fails when one process's multipliers are perturbed.
"""

import json
import math
import os
import signal
import socket

import pytest
import torch
from fake_data import make_cifar10_batches, make_mnist

from paperlib.harness import distributed, methods, records, training
from paperlib.method import counting
from paperlib.harness.data import DeviceLoader, TensorLoader
from paperlib.paper.models import build_model
from paperlib.harness.presets import resolve_config
from paperlib.harness import run
from paperlib.harness.run import parse

RUN = dict(experiment="ddp", dataset="mnist", model="mlp", preset="cpu", grouping="layer", target=[0.3, 0.3, 0.3],
           epochs=2, batch_size=16, dual_lr=0.05, gates_lr=0.05, seed=0, device="cpu")  # gloo, on any machine
ATOL = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, argv: list[str], env: dict) -> None:
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    run.main(argv)


def launch_local(world_size: int, argv: list[str], env: dict | None = None, worker=_worker) -> None:
    """Run ``python -m paperlib.harness.run *argv`` in ``world_size`` spawned processes here, as ``torchrun`` would
    (with this process's environment plus ``env``); raises if any fails. ``worker`` replaces :func:`_worker`."""
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(world_size, free_port(), list(argv), dict(env or {})), nprocs=world_size, join=True)


def _argv(**params) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in params.items()]


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """A tiny MNIST (56 training examples: the last batch of 16 is 8), a tiny CIFAR-10, folders for the runs."""
    root = tmp_path_factory.mktemp("ddp")
    make_mnist(root / "data", n_train=56, n_test=24)
    make_cifar10_batches(root / "data", per_batch=8, n_test=8)
    env = {"PAPERLIB_DATA": str(root / "data"), "PAPERLIB_RUNS": str(root / "runs"),
           "PAPERLIB_CHECKPOINTS": str(root / "checkpoints"), "OMP_NUM_THREADS": "1"}
    saved = {key: os.environ.get(key) for key in [*env, "PAPERLIB_SMOKE"]}
    os.environ.pop("PAPERLIB_SMOKE", None)
    os.environ.update(env)
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def two_processes(space):
    """The record of an uninterrupted two-process run."""
    launch_local(2, _argv(**RUN, run_name="two", progress=False))
    return _record("two")


def _record(run_name):
    return records.load_record(records.run_folder(resolve_config(**RUN, run_name=run_name)))


def _checkpoint(run_name):
    return torch.load(records.checkpoint_path(resolve_config(**RUN, run_name=run_name)), weights_only=False)


def _close(a, b, where=""):
    """Equal structures, numbers to ATOL (timings and commits aside)."""
    if isinstance(a, dict):
        keys = set(a) - {"wall_time_s", "git_commit", "run_name", "distributed", "device_name", "path"}
        assert keys == set(b) - {"wall_time_s", "git_commit", "run_name", "distributed", "device_name", "path"}, where
        for key in keys:
            _close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=ATOL) or (math.isnan(a) and math.isnan(b)), (where, a, b)
    else:
        assert a == b, (where, a, b)


def test_the_command_line_reads_yaml_values():
    assert parse(["dataset=mnist", "target=[0.3, 0.3]", "--lr", "1e-3", "--dual-restarts=false", "--rerun",
                  "epochs=2"]) == {"dataset": "mnist", "target": [0.3, 0.3], "lr": 1e-3, "dual_restarts": False,
                                   "rerun": True, "epochs": 2}


def test_shards_of_every_global_batch_make_the_one_process_batches():
    images, labels = torch.randint(0, 255, (21, 1, 4, 4), dtype=torch.uint8), torch.arange(21)
    loader = lambda rank, world: TensorLoader(images, labels, 8, shuffle=True, seed=3, mean=(0.5,), std=(0.2,),
                                              rank=rank, world_size=world)
    whole, halves = loader(0, 1), [loader(r, 2) for r in range(2)]
    for _ in range(2):  # two epochs
        for (x, y), (x0, y0), (x1, y1) in zip(whole, *halves):
            assert torch.equal(torch.cat([y0, y1]), y) and torch.equal(torch.cat([x0, x1]), x)
    assert [h.examples_per_epoch() for h in halves] == [10, 11]
    assert halves[1].state_dict() == whole.state_dict()
    dataset = torch.utils.data.TensorDataset(torch.zeros(21, 1), labels)  # ImageNet's loader
    loader = lambda rank, world: DeviceLoader(dataset, 8, shuffle=True, seed=3, num_workers=0, rank=rank,
                                              world_size=world)
    whole, halves = loader(0, 1), [loader(r, 2) for r in range(2)]
    for (_, y), (_, y0), (_, y1) in zip(whole, *halves):
        assert torch.equal(torch.cat([y0, y1]), y)
    with pytest.raises(ValueError, match="cannot be shared"):
        TensorLoader(images[:17], labels[:17], 8, shuffle=True, mean=(0.5,), std=(0.2,), rank=0, world_size=2)


def test_two_processes_with_half_batches_match_one_process(space, two_processes):
    one = training.run_experiment(progress=False, **RUN, run_name="one")
    two = two_processes
    assert two["metrics"]["distributed"] == {"world_size": 2, "backend": "gloo", "sync_batchnorm": False,
                                             "gate_noise": "shared"}
    assert "distributed" not in one["metrics"]
    _close(one["params"], two["params"], "params")
    _close(one["metrics"], two["metrics"], "metrics")
    _close(one["history"], two["history"], "history")
    _close(one["gate_medians"], two["gate_medians"], "gate_medians")
    # steps.json: densities and multipliers are global; "loss" is rank 0's shard's (paperlib.harness.distributed)
    _close([{k: v for k, v in row.items() if k != "loss"} for row in one["steps"]],
           [{k: v for k, v in row.items() if k != "loss"} for row in two["steps"]], "steps")
    # Parameters: Adam divides by sqrt(v) + 1e-8, so a weight or gate whose gradients are ~1e-9 (pixels that are
    # almost always black) turns a rounding difference of its gradient into ~1e-6 of its value: a handful of the
    # MLP's first-layer weights differ by a few 1e-6 (up to 1.4e-5 on an H100 node's CPU), and on an AVX-512 CPU
    # also the input gate of pixel 284 (row 10, column 4: 1.7e-6); everything else agrees to ATOL.
    a, b = _checkpoint("one"), _checkpoint("two")
    for (name, p), (_, q) in zip(a["model"].state_dict().items(), b["model"].state_dict().items()):
        difference = (p - q).abs()
        handful = max(3, 1e-4 * p.numel())
        assert difference.max() < 50 * ATOL and (difference > ATOL).sum() <= handful, name
    lambdas = [checkpoint["objective"]["multipliers"]["value"] for checkpoint in (a, b)]
    assert torch.allclose(*lambdas, rtol=0, atol=ATOL)
    assert lambdas[1].abs().sum() > 0  # the multipliers moved


def _killed_after_first_epoch(rank, world_size, port, argv, env):
    """Rank 0 dies (SIGKILL) right after the checkpoint and record of epoch 1; spawn then ends rank 1."""
    finish = training.Runner._finish_epoch

    def finish_then_die(self, *args):
        finish(self, *args)
        if self.state.epoch == 1 and self.dist.rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    training.Runner._finish_epoch = finish_then_die
    _worker(rank, world_size, port, argv, env)


def test_a_killed_two_process_run_resumes_to_the_uninterrupted_numbers(space, two_processes):
    argv = _argv(**RUN, run_name="resumed", progress=False)
    with pytest.raises(Exception, match="signal|SIGKILL|exited"):
        launch_local(2, argv, worker=_killed_after_first_epoch)
    killed = _record("resumed")
    assert killed["metrics"]["status"] == "partial" and killed["metrics"]["epochs_completed"] == 1
    launch_local(2, argv)
    resumed = _record("resumed")
    assert resumed["metrics"]["status"] == "complete"
    _close(two_processes["history"], resumed["history"], "history")
    _close({k: v for k, v in two_processes["metrics"].items() if k != "git_commits_resumed_at"},
           {k: v for k, v in resumed["metrics"].items() if k != "git_commits_resumed_at"}, "metrics")


def _perturbed_on_rank_one(rank, world_size, port, argv, env):
    """Rank 1's multipliers move by 1e-7 at the end of the first epoch: the runner must stop on both ranks."""
    end_epoch = methods.Constrained.end_epoch

    def end_epoch_perturbed(self):
        end_epoch(self)
        if rank == 1:
            self.objective.multipliers.value = self.objective.multipliers.value + 1e-7

    methods.Constrained.end_epoch = end_epoch_perturbed
    try:
        _worker(rank, world_size, port, argv, env)
    except RuntimeError as error:
        assert "Lagrange multipliers differ across processes" in str(error), error
        return
    raise AssertionError(f"rank {rank}: perturbed multipliers went unnoticed")


def test_multipliers_that_differ_across_processes_stop_the_run(space):
    launch_local(2, _argv(**{**RUN, "epochs": 1}, run_name="perturbed", progress=False),
                             worker=_perturbed_on_rank_one)


def test_a_batch_norm_model_trains_in_two_processes(space):
    """WRN-16-1 on a tiny CIFAR-10 with the authors' batch norm under DDP: rank 0's running statistics."""
    params = dict(experiment="ddp-bn", dataset="cifar10", model="wrn-16-1", preset="cpu", target=0.5, epochs=1,
                  batch_size=16, device="cpu")
    launch_local(2, _argv(**params, progress=False))
    record = records.load_record(records.run_folder(resolve_config(**params)))
    assert record["metrics"]["status"] == "complete"
    assert record["metrics"]["distributed"]["sync_batchnorm"] is False


def test_a_process_without_a_gpu_of_its_own_is_told_so(monkeypatch):
    """Two processes on a one-GPU node: the second stops with what to do, before touching CUDA."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="LOCAL_RANK=1 has no GPU of its own: this node has 1; start at most 1"):
        distributed.setup(torch.device("cuda"))


def test_sync_batchnorm_is_undone_for_evaluation_and_checkpoints():
    """SyncBatchNorm (GPU only) for training; plain BatchNorm2d holding the same tensors for everything else."""
    model = build_model("wrn-16-1", 10, gated=True)
    tensors = {name: t for name, t in [*model.named_parameters(), *model.named_buffers()]}
    macs = counting.count_macs(model, (3, 32, 32), "paper")
    distributed.to_sync_batchnorm(model)
    assert sum(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()) > 0
    distributed.from_sync_batchnorm(model)
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert all(t is tensors[name] for name, t in [*model.named_parameters(), *model.named_buffers()])
    assert counting.count_macs(model, (3, 32, 32), "paper") == macs


@pytest.mark.parametrize("extra", [dict(method="penalized", lmbda=0.1),
                                   dict(method="magnitude_pruning", sparsity="unstructured", target=0.3,
                                        finetune_epochs=1, finetune_lr=1e-3)])
def test_the_other_methods_train_in_two_processes(space, extra):
    """The penalized method, and magnitude pruning (the model changes between phases; masks on every process)."""
    params = dict(experiment="ddp-methods", dataset="mnist", model="mlp", preset="cpu", epochs=1, batch_size=16,
                  device="cpu", **extra)
    launch_local(2, _argv(**params, progress=False))
    metrics = records.load_record(records.run_folder(resolve_config(**params)))["metrics"]
    assert metrics["status"] == "complete" and metrics["distributed"]["world_size"] == 2
    if extra["method"] == "magnitude_pruning":
        assert metrics["epochs_completed"] == 2 and metrics["params_pct"] < 35
