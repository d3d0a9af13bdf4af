"""Run one experiment from a parameter set and write its record (App. J).

:func:`run_experiment`, which every notebook calls, resolves the parameters, returns the record if it is complete, and
otherwise lets the method (:mod:`paperlib.harness.methods`) build its model and train it; after every epoch it evaluates
the test-time model (App. D), counts it, checkpoints and rewrites the record. A killed run started again resumes after
its last finished epoch and, on the CPU, ends with the numbers of an uninterrupted run: the checkpoint holds the model,
optimisers, schedulers, multipliers, loader position and RNG states. Several processes (``torchrun``) run the same loop
on their shards of every global batch (:mod:`paperlib.harness.distributed`).
"""

import math
import os
import pickle
import platform
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from .. import __version__
from ..method import counting
from ..method.layers import L0Layer
from ..paper.models import build_model, memory_format
from . import distributed, records
from .data import load_dataset
from .methods import build_method
from .presets import NOT_COMPARED, ExperimentConfig, config_differences, resolve_config

#: Smoke mode (CI): this many examples per split, batches of at most this size, a few batches per epoch.
SMOKE_EXAMPLES = 64
SMOKE_BATCHES = 2
SMOKE_EPOCHS = 1
SMOKE_BATCH_SIZE = 16


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite (found by :meth:`Runner._read`); the run is recorded as failed."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


#: This process's scheduling group under Linux's autogroup scheduling (one group per session).
AUTOGROUP = Path("/proc/self/autogroup")


def keep_nice_in_own_session() -> None:
    """Give this process's autogroup its own nice value, so that ``nice`` on a sweep lowers its runs' CPU share:
    papermill starts each kernel in a session of its own, and autogroup scheduling shares the CPU equally between
    sessions whatever their nice values. Only a session leader (a kernel) changes its group; without autogroup,
    nothing."""
    if os.getsid(0) != os.getpid():
        return
    try:
        AUTOGROUP.write_text(str(os.nice(0)))
    except OSError:  # no such file, or not ours to write: the process keeps the scheduling it has
        pass


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model with the vector instructions torch uses: oneDNN sums in other orders with
    AVX-512 than with AVX2, so the same run on two CPUs agrees only up to float rounding, which training amplifies."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model} ({torch.backends.cpu.get_cpu_capability()})"


#: The most rows a run's steps log holds, about (:func:`steps_log_interval`).
STEPS_LOG_ROWS = 1000


def steps_log_interval(steps_per_epoch: int, epochs: int) -> int:
    """Log every this many steps: 20 times an epoch, fewer in long runs (at most about :data:`STEPS_LOG_ROWS` rows)."""
    return max(1, steps_per_epoch // 20, steps_per_epoch * epochs // STEPS_LOG_ROWS)


def time_left(epochs_done: int, epochs_planned: int, wall_time_s: float) -> str:
    """`` (about N min left)`` at the mean pace of the epochs done so far; empty before the first or after the last."""
    if epochs_done < 1 or epochs_done >= epochs_planned:
        return ""
    minutes = (epochs_planned - epochs_done) * wall_time_s / epochs_done / 60
    return f" (about {minutes:.0f} min left)" if minutes >= 1 else " (under a minute left)"


@dataclass
class RunState:
    """Everything of the runner that changes during a run and goes into a checkpoint."""

    epoch: int = 0                      # epochs finished
    phase: str = "train"               # the method's phase (Method.phases) the run is in
    history: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    gate_medians: dict = field(default_factory=dict)
    git_commits: list = field(default_factory=list)  # HEAD at the start and at every resumption
    wall_time: float = 0.0
    first_phase_of: str | None = None  # the run whose first phase this one took over (records.first_phase_path)


#: The name checkpoints written before the methods were split pickled their state under.
_State = RunState


class _LayeredUnpickler(pickle.Unpickler):
    """Reads checkpoints saved before paperlib's modules moved into its three layers (``paperlib.models`` is now
    ``paperlib.paper.models``, and so on): a checkpoint pickles the model, whose classes it names by module."""

    def find_class(self, module: str, name: str):
        parts = module.split(".")
        if len(parts) == 2 and parts[0] == "paperlib":
            for layer in ("method", "paper", "harness"):
                try:
                    return super().find_class(f"paperlib.{layer}.{parts[1]}", name)
                except (ImportError, AttributeError):
                    continue
        return super().find_class(module, name)


#: ``torch.load``'s ``pickle_module`` for checkpoints of any date (:class:`_LayeredUnpickler`).
_layered_pickle = types.SimpleNamespace(Unpickler=_LayeredUnpickler, load=pickle.load, __name__="pickle")


def _upgrade_checkpoint(payload: dict) -> dict:
    """Checkpoints written before :mod:`paperlib.harness.methods` kept magnitude pruning's masks in the run state."""
    masks = payload["state"].__dict__.pop("weight_masks", None)
    if "weight_masks" not in payload:
        payload["weight_masks"] = masks or {}
    return payload


class Runner:
    """The loop of one run: data, a method (:mod:`paperlib.harness.methods`: it knows nothing of how a method trains),
    evaluation, checkpoints, the record."""

    def __init__(self, config: ExperimentConfig, progress: bool = True, sync_batchnorm: bool = False):
        self.config = config
        self.dist = distributed.current()
        self.sync_batchnorm = sync_batchnorm
        self.progress = progress and self.dist.is_main
        self.device = resolve_device(config.device)
        if self.dist.active and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        if sync_batchnorm and self.dist.active and self.device.type != "cuda":
            raise ValueError("sync_batchnorm needs CUDA: torch's SyncBatchNorm works only on GPU modules")
        if config.autocast_bf16 and self.device.type != "cuda":
            raise ValueError(f"autocast_bf16 needs CUDA; this run would train on {self.device} (CPU runs are float32)")
        if self.device.type == "cpu":
            torch.set_num_threads(config.threads)
            keep_nice_in_own_session()
        torch.manual_seed(config.seed)
        self.data = load_dataset(config.dataset, subset=SMOKE_EXAMPLES if config.smoke else None)
        self.method = build_method(config)
        model = self.method.build_model(self.data.num_classes)
        self.memory_format = memory_format(model)
        model.to(self.device, memory_format=self.memory_format)
        self.method.attach(model)
        self.layer_names = [name for name, module in model.named_modules() if isinstance(module, L0Layer)]
        max_batches = SMOKE_BATCHES if config.smoke else None
        batch_size = min(config.batch_size, SMOKE_BATCH_SIZE) if config.smoke else config.batch_size
        self.train_loader = self.data.loader("train", batch_size, seed=config.seed, device=self.device,
                                             max_batches=max_batches, memory_format=self.memory_format,
                                             rank=self.dist.rank, world_size=self.dist.world_size)
        self.val_loader = self.data.loader("val", batch_size if config.smoke else 500, device=self.device,
                                           max_batches=max_batches, memory_format=self.memory_format)
        dense = build_model(config.model, self.data.num_classes, gated=False)  # the reference of the counts
        self.dense_params = counting.count_params(dense)
        self.dense_macs = {c: counting.count_macs(dense, self.data.input_shape, c) for c in counting.CONVENTIONS}
        self.phases = [(phase, min(epochs, SMOKE_EPOCHS) if config.smoke else epochs)
                       for phase, epochs in self.method.phases]
        self.epochs_planned = sum(epochs for _, epochs in self.phases)
        self.state = RunState()

    # ----- training ------------------------------------------------------------
    def train_epoch(self) -> dict:
        """One pass over the training data, one method step per batch; mean loss, error and objective. No step waits for
        the device: what the steps leave there is read in one transfer at each logged step (:meth:`_read`)."""
        self.method.model.train()
        totals = {"loss": 0.0, "objective": 0.0, "correct": 0, "seen": 0}
        pending = []  # (step, batch size, loss, objective, correct) of the steps not read yet, on the device
        log_every = steps_log_interval(len(self.train_loader), self.epochs_planned)
        batches = tqdm(self.train_loader, desc=f"epoch {self.state.epoch + 1}", mininterval=10, leave=False,
                       disable=not self.progress)
        for index, (x, y) in enumerate(batches):
            step = self.method.step(x, y)
            pending.append((index, len(y), step.loss.detach(), step.objective.detach(),
                            (step.logits.detach().argmax(1) == y).sum()))
            if index % log_every == 0:
                logged = self.method.step_log(step)
                loss, logged = self._read(pending, totals, logged)
                if logged is not None:
                    epoch = self.state.epoch + index / len(self.train_loader)
                    self.state.steps.append({"epoch": epoch, "loss": loss, **logged})
        self._read(pending, totals)
        seen = totals["seen"]
        return {"train_loss": totals["loss"] / seen, "train_error": 100.0 * (1 - totals["correct"] / seen),
                "train_objective": totals["objective"] / seen}

    def _read(self, pending: list, totals: dict, logged: dict | None = None) -> tuple[float | None, dict | None]:
        """Bring the ``pending`` steps' numbers and the ``logged`` tensors to the host in one transfer, add them to
        ``totals`` in step order as Python floats (the sums a per-step ``.item()`` gave); the last loss and
        ``logged``."""
        if not pending:
            return None, logged
        steps, sizes, losses, objectives, correct = zip(*pending)
        pending.clear()
        parts = [torch.stack(losses), torch.stack(objectives), torch.stack(correct)]
        if logged:
            parts.append(torch.stack(list(logged.values())))
        values = torch.cat([part.double() for part in parts]).tolist()  # the one synchronisation
        n = len(steps)
        for index, size, loss, objective, right in zip(steps, sizes, values[:n], values[n:2 * n], values[2 * n:3 * n]):
            if not math.isfinite(loss):
                raise NonFiniteLossError(f"non-finite training loss {loss} at epoch {self.state.epoch + 1}, "
                                         f"step {index}")
            totals["loss"] += loss * size
            totals["objective"] += objective * size
            totals["correct"] += int(right)
            totals["seen"] += size
        if logged is not None:
            logged = dict(zip(logged, values[3 * n:]))
        return values[n - 1], logged

    def _parallel(self) -> None:
        """Several processes: the method's forward goes through DistributedDataParallel (SyncBatchNorm if asked)."""
        if not self.dist.active:
            return
        if self.sync_batchnorm:
            distributed.to_sync_batchnorm(self.method.model)
        self.method.forward_model = distributed.wrap(self.method.model, self.train_loader, self.device)

    def _serial(self) -> None:
        """Undo :meth:`_parallel`: the bare model, with plain batch norms, for evaluation and checkpoints."""
        if not self.dist.active:
            return
        self.method.forward_model = None
        if self.sync_batchnorm:
            distributed.from_sync_batchnorm(self.method.model)

    def _phase_at(self, epoch: int) -> str:
        """The phase that the epoch after ``epoch`` finished epochs belongs to."""
        end = 0
        for phase, epochs in self.phases:
            end += epochs
            if epoch < end:
                return phase
        raise ValueError(f"epoch {epoch} is past the {end} planned epochs")

    # ----- evaluation ----------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict:
        """Validation error of the test-time model, its parameter/MAC counts, and what the method logs."""
        test_model = self.method.test_time_model().to(self.device).eval()
        correct, seen = torch.zeros((), dtype=torch.int64, device=self.device), 0
        for x, y in self.val_loader:
            correct += (test_model(x).argmax(1) == y).sum()
            seen += len(y)
        correct = correct.item()
        sparse = self.config.sparsity == "unstructured"
        params = counting.count_params(test_model, sparse_weights=sparse)
        row = {"val_error": 100.0 * (1 - correct / seen), "params": params,
               "params_pct": 100.0 * params / self.dense_params}
        for convention in counting.CONVENTIONS:
            macs = counting.count_macs(test_model, self.data.input_shape, convention, sparse_weights=sparse)
            suffix = "" if convention == "paper" else f"_{convention}"
            row[f"macs{suffix}"] = macs
            row[f"macs{suffix}_pct"] = 100.0 * macs / self.dense_macs[convention]
        row.update(self.method.evaluation_log())
        return row

    def _histogram_epochs(self) -> set[int]:
        """The epochs after which gate medians are saved (App. I): the chosen ones, or 0, 1, half-way and last."""
        chosen = set(self.config.histogram_epochs)
        return chosen or {0, 1, self.epochs_planned // 2, self.epochs_planned}

    # ----- checkpoints --------------------------------------------------------
    def save_checkpoint(self, path: Path | None = None) -> None:
        """Rank 0 writes the checkpoint (every process holds the same state); by default the run's own."""
        if not self.dist.is_main:
            return
        path = path or records.checkpoint_path(self.config)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": self.config.to_dict(), "state": self.state, "model": self.method.model,
            **self.method.state_dict(),
            "loader": self.train_loader.state_dict(), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }
        if self.dist.active and self.device.type == "cuda":  # each process restores it on its own GPU
            payload["cuda_rng_device"] = torch.cuda.get_rng_state(self.device)
        tmp = path.with_suffix(".tmp")
        torch.save(payload, tmp)
        tmp.replace(path)

    def load_checkpoint(self) -> bool:
        """Resume from the last finished epoch if a checkpoint of the same parameters exists, else from the end of a
        first phase that a run of another target left
        (:attr:`~paperlib.harness.methods.Method.target_free_first_phase`)."""
        path, ignore = records.checkpoint_path(self.config), ()
        if not path.exists() and self.method.target_free_first_phase:
            path, ignore = records.first_phase_path(self.config), ("target", "run_name")
        if not path.exists():
            return False
        payload = _upgrade_checkpoint(torch.load(path, map_location=self.device, weights_only=False,
                                                 pickle_module=_layered_pickle))
        differences = config_differences(payload["config"], self.config, ignore=ignore)
        if differences:
            raise RuntimeError(f"checkpoint {path} was made with other parameters ({'; '.join(differences)}); "
                               f"delete it to start afresh")
        self.state = payload["state"]
        if ignore:
            self.state.first_phase_of = payload["config"]["run_name"]
        self.method.load_state_dict(payload, payload["model"].to(self.device), self.state.phase)
        self.train_loader.load_state_dict(payload["loader"])
        # Generator states are CPU byte tensors; map_location moved them to the run's device.
        torch.set_rng_state(payload["rng"].cpu())
        if payload["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([state.cpu() for state in payload["cuda_rng"]])
        if self.dist.active and self.device.type == "cuda" and "cuda_rng_device" in payload:
            torch.cuda.set_rng_state(payload["cuda_rng_device"].cpu(), self.device)
        return True

    # ----- the record ----------------------------------------------------------
    def metrics(self, status: str) -> dict:
        history = self.state.history
        last = history[-1] if history else {}
        # Best error of the sparse model (after pruning, for magnitude pruning).
        errors = [row["val_error"] for row in history if row["phase"] in self.method.sparse_phases]
        errors = errors or [row["val_error"] for row in history]  # e.g. a pretrained model, evaluated only
        metrics = {  # results only: the parameters are params.json's
            "status": status, "l0_density": last.get("l0_density"),
            "l0_density_per_layer": {n: last.get(f"density[{n}]") for n in self.layer_names} or None,
            "params": last.get("params"), "params_pct": last.get("params_pct"),
            "macs": last.get("macs"), "macs_pct": last.get("macs_pct"),
            "macs_plain": last.get("macs_plain"), "macs_plain_pct": last.get("macs_plain_pct"),
            "dense_params": self.dense_params, "dense_macs": self.dense_macs["paper"],
            "dense_macs_plain": self.dense_macs["plain"],
            "val_error_best": min(errors) if errors else None, "val_error_final": last.get("val_error"),
            "val_split": self.data.val_split,
            "epochs_completed": self.state.epoch, "epochs_planned": self.epochs_planned,
            "wall_time_s": round(self.state.wall_time, 1), "device": str(self.device),
            "device_name": device_name(self.device),
            "threads": torch.get_num_threads(), "data_source": self.data.source, "data": self.data.describe(),
            "git_commit": self.state.git_commits[0], "paperlib_version": __version__,
            "torch_version": torch.__version__,
            **self.method.record_fields(),
        }
        if self.dist.active:  # absent for one process, whose records are unchanged
            metrics["distributed"] = {"world_size": self.dist.world_size, "backend": self.dist.backend,
                                      "sync_batchnorm": self.sync_batchnorm, "gate_noise": "shared"}
        if len(self.state.git_commits) > 1:
            metrics["git_commits_resumed_at"] = self.state.git_commits[1:]
        if self.state.first_phase_of:  # absent when the run trained its first phase itself
            metrics["first_phase_of"] = self.state.first_phase_of
        return metrics

    def write(self, status: str) -> None:
        """Rank 0 writes the record."""
        if not self.dist.is_main:
            return
        run_dir = records.run_folder(self.config)
        if status != "complete" and records.record_status(run_dir) == "complete":
            return  # never replace a complete record by an unfinished one
        records.write_record(run_dir, self.config.to_dict(), self.metrics(status), self.state.history,
                             self.state.steps, self.state.gate_medians)

    def _finish_epoch(self, phase: str, train: dict, started: float) -> None:
        """Evaluate, log, checkpoint and rewrite the record after an epoch (or after a method changed the model)."""
        row = {"epoch": self.state.epoch, "phase": phase, **train, **self.method.learning_rates()}
        row.update(self.evaluate())
        self.state.wall_time += time.time() - started
        row["wall_time_s"] = round(self.state.wall_time, 1)
        self.state.history.append(row)
        if self.state.epoch in self._histogram_epochs():
            medians = self.method.gate_medians()
            if medians is not None:
                self.state.gate_medians[str(self.state.epoch)] = medians
        self.save_checkpoint()
        self.write("partial")
        distributed.barrier()
        if self.progress:
            shown = {k: row[k] for k in ("epoch", "train_loss", "val_error", "l0_density", "params_pct") if k in row}
            line = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
            print(f"{line}{time_left(self.state.epoch, self.epochs_planned, self.state.wall_time)}", flush=True)

    # ----- the run -------------------------------------------------------------
    def run(self) -> dict:
        """Train (or resume) to the end and return the loaded record."""
        resumed = self.load_checkpoint()
        distributed.barrier()  # every process has read the checkpoint before rank 0 writes the next
        commit = records.git_commit()  # the code that runs from here on
        if commit not in self.state.git_commits[-1:]:
            self.state.git_commits.append(commit)
        if not resumed:
            self._finish_epoch("init", {}, time.time())  # epoch 0: the initial model
        try:
            while self.state.epoch < self.epochs_planned:
                started = time.time()
                phase = self._phase_at(self.state.epoch)
                if phase != self.state.phase:  # e.g. magnitude pruning between training and fine-tuning
                    if self.state.phase == "train" and self.method.target_free_first_phase:
                        self.save_checkpoint(records.first_phase_path(self.config))  # for the other targets
                    label = self.method.enter_phase(phase)
                    self.state.phase = phase
                    self._finish_epoch(label, {}, started)
                    started = time.time()
                self._parallel()
                try:
                    train = self.train_epoch()
                finally:
                    self._serial()
                train = distributed.reduce_means(train, self.train_loader.examples_per_epoch(), self.device)
                self.method.end_epoch()
                for name, value in self.method.replicated().items():
                    distributed.assert_identical(name, value)
                self.state.epoch += 1
                self._finish_epoch(phase, train, started)
        except NonFiniteLossError:
            self.write("failed")
            raise
        self.write("complete")
        distributed.barrier()
        return records.load_record(records.run_folder(self.config))


def check_record_matches(recorded: dict, config: ExperimentConfig) -> None:
    """Raise if a record under this run name was made with other parameters: a run name spells only what differs from
    the preset, so a preset changed since gives an old record the new name."""
    differences = config_differences(recorded, config, ignore=NOT_COMPARED)
    if differences:
        raise RuntimeError(f"the record of run {config.experiment}/{config.run_name} was made with other parameters "
                           f"({'; '.join(differences)}), probably by an earlier version of the preset; pass "
                           f"run_name='...' to run these parameters under another name, or rerun=True to replace it")


def resolve_run_config(**params) -> ExperimentConfig:
    """The configuration ``run_experiment(**params)`` runs: ``params`` resolved, as a smoke run if ``$PAPERLIB_SMOKE``
    is 1 and ``params`` do not say otherwise."""
    if "smoke" not in params and os.environ.get("PAPERLIB_SMOKE") == "1":
        params["smoke"] = True
    return resolve_config(**params)


def run_experiment(progress: bool = True, **params) -> dict:
    """Resolve ``params`` (:class:`~paperlib.harness.presets.ExperimentConfig`), run, return the record; a complete
    record is returned without loading anything. ``rerun=True`` trains again (the old record is replaced when the new
    run completes); ``sync_batchnorm=True`` trains several processes with synchronised batch norm."""
    rerun = bool(params.pop("rerun", False))
    sync_batchnorm = bool(params.pop("sync_batchnorm", False))
    config = resolve_run_config(**params)
    run_dir = records.run_folder(config)
    complete = records.record_status(run_dir) == "complete"
    if complete and not rerun:
        record = records.load_record(run_dir)
        check_record_matches(record["params"], config)
        if progress and distributed.current().is_main:
            shown = run_dir.relative_to(records.runs_dir().parent)  # no machine path in an executed notebook
            print(f"complete record found in {shown}; not training (pass rerun=True to train again)")
        return record
    if complete and distributed.current().is_main:
        records.checkpoint_path(config).unlink(missing_ok=True)
    distributed.barrier()
    runner = Runner(config, progress, sync_batchnorm)
    if runner.progress:
        print(f"preset={config.preset} device={runner.device} threads={torch.get_num_threads()} "
              f"run={config.experiment}/{config.run_name} data={runner.data.source}", flush=True)
    return runner.run()
