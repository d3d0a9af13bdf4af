"""Run one experiment from a parameter set and write its record (App. J).

:func:`run_experiment` is the single entry point that every notebook calls:

1. resolve and validate the parameters (:mod:`paperlib.presets`);
2. load the data (:mod:`paperlib.data`) and build the model;
3. train epoch by epoch: constrained (Lagrangian + dual ascent with restarts),
   penalized, dense, or dense-then-magnitude-pruned-then-fine-tuned;
4. after every epoch, purge the model (App. D), evaluate the purged test-time
   model, count its parameters and MACs, checkpoint, and rewrite the record.

Checkpoints live outside the work tree (:func:`paperlib.records.checkpoints_dir`). A killed run started again
with the same parameters resumes after its last finished epoch and, on the CPU,
ends with the same numbers as an uninterrupted run: the checkpoint holds the
model, optimisers, scheduler, multipliers, data-loader position and RNG states.
"""

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

from . import __version__, counting, pruning, records
from .data import load_dataset
from .gates import median_gates
from .layers import L0Layer
from .models import build_model, from_torchvision_resnet, gated_layers, layer_densities, memory_format, model_density
from .objective import ConstrainedObjective, PenalizedObjective, expected_l2_penalty, parameter_groups
from .presets import ExperimentConfig, resolve_config
from .purge import pruned_architecture, purge

#: Smoke mode (CI): this many examples per split, batches of at most this size, a few batches per epoch.
SMOKE_EXAMPLES = 64
SMOKE_BATCHES = 2
SMOKE_EPOCHS = 1
SMOKE_BATCH_SIZE = 16


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the run is recorded as failed."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _optimizer(kind: str, params, lr: float, momentum: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """Adam or SGD with momentum, in their fused implementations (the same update, one kernel for all tensors)."""
    if kind == "adam":  # PyTorch's default betas (0.9, 0.999); App. J.2 prints (0.9, 0.99) "as by default"
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=True)


@dataclass
class _State:
    """Everything that changes during a run and goes into a checkpoint."""

    epoch: int = 0                      # epochs finished
    phase: str = "train"               # train | finetune (magnitude pruning)
    history: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    gate_medians: dict = field(default_factory=dict)
    weight_masks: dict = field(default_factory=dict)  # unstructured magnitude pruning: zeros stay zero
    git_commits: list = field(default_factory=list)  # HEAD at the start and at every resumption
    wall_time: float = 0.0


class Experiment:
    """The objects of one run; built from a resolved :class:`ExperimentConfig`."""

    def __init__(self, config: ExperimentConfig, progress: bool = True):
        self.config = config
        self.progress = progress
        self.device = resolve_device(config.device)
        if self.device.type == "cpu":
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        subset = SMOKE_EXAMPLES if config.smoke else None
        self.data = load_dataset(config.dataset, subset=subset)
        self.gated = config.method in ("constrained", "penalized")
        self.model = build_model(config.model, self.data.num_classes, gated=self.gated, sparsity=config.sparsity,
                                 rho_init=config.rho_init)
        if config.pretrained:  # the paper prunes torchvision's trained ResNet50 (App. J.6)
            self.model.load_state_dict(from_torchvision_resnet(torchvision_resnet50_weights()))
        self.memory_format = memory_format(self.model)
        self.model.to(self.device, memory_format=self.memory_format)
        max_batches = SMOKE_BATCHES if config.smoke else None
        batch_size = min(config.batch_size, SMOKE_BATCH_SIZE) if config.smoke else config.batch_size
        self.train_loader = self.data.loader("train", batch_size, seed=config.seed, device=self.device,
                                             max_batches=max_batches, memory_format=self.memory_format)
        self.val_loader = self.data.loader("val", batch_size if config.smoke else 500, device=self.device,
                                           max_batches=max_batches, memory_format=self.memory_format)
        dense = build_model(config.model, self.data.num_classes, gated=False)
        self.dense_params = counting.count_params(dense)
        self.dense_macs = {c: counting.count_macs(dense, self.data.input_shape, c) for c in counting.CONVENTIONS}
        self.objective = None
        if config.method == "constrained":
            self.objective = ConstrainedObjective(self.model, config.target, config.grouping, config.dual_lr,
                                                  config.dual_restarts)
        elif config.method == "penalized":
            self.objective = PenalizedObjective(self.model, config.lmbda, config.grouping)
        self.layer_names = [name for name, m in self.model.named_modules() if isinstance(m, L0Layer)]
        self._build_optimizers(finetune=False)
        self.state = _State()
        self.epochs_total = min(config.epochs, SMOKE_EPOCHS) if config.smoke else config.epochs
        if config.pretrained:
            self.epochs_total = 0  # already trained
        self.finetune_total = 0
        if config.method == "magnitude_pruning":
            self.finetune_total = min(config.finetune_epochs, 1) if config.smoke else config.finetune_epochs

    # ----- optimisation --------------------------------------------------------
    def _build_optimizers(self, finetune: bool) -> None:
        c = self.config
        gated_weights, other_weights, gate_params = parameter_groups(self.model)
        if finetune:  # App. J.6: constant learning rate
            self.optimizer = _optimizer(c.optimizer, self.model.parameters(), c.finetune_lr, c.momentum,
                                        c.weight_decay)
            self.scheduler = self.gates_scheduler = None
            self.gates_optimizer = None
            return
        groups = [{"params": other_weights, "weight_decay": c.weight_decay}]
        if gated_weights:  # decayed through the expected L2 term of eq. 9 instead
            groups.append({"params": gated_weights, "weight_decay": 0.0})
        self.optimizer = _optimizer(c.optimizer, groups, c.lr, c.momentum)
        self.gates_optimizer = _optimizer(c.gates_optimizer, gate_params, c.gates_lr, c.momentum) if gate_params else None
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, c.lr_milestones, c.lr_gamma)
        self.gates_scheduler = None  # the gates' learning rate is constant unless asked otherwise (App. J)
        if self.gates_optimizer is not None and c.schedule_gates:
            self.gates_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.gates_optimizer, c.lr_milestones,
                                                                        c.lr_gamma)

    def train_epoch(self) -> dict:
        """One pass over the training data; returns mean loss, error and (gated) Lagrangian."""
        c, model = self.config, self.model
        model.train()
        total_loss = total_objective = 0.0
        correct = seen = 0
        log_every = max(1, len(self.train_loader) // 20)
        batches = tqdm(self.train_loader, desc=f"epoch {self.state.epoch + 1}", mininterval=10, leave=False,
                       disable=not self.progress)
        for step, (x, y) in enumerate(batches):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if not torch.isfinite(loss):
                raise NonFiniteLossError(f"non-finite training loss {loss.item()} at epoch {self.state.epoch + 1}, "
                                         f"step {step}")
            objective, density = loss, None
            if self.gated:
                objective = loss + expected_l2_penalty(model, c.weight_decay, c.detach_gates)
                objective, density = self.objective(model, objective)
            self.optimizer.zero_grad(set_to_none=True)
            if self.gates_optimizer is not None:
                self.gates_optimizer.zero_grad(set_to_none=True)
            objective.backward()
            self.optimizer.step()
            if self.gates_optimizer is not None:
                self.gates_optimizer.step()
                if c.clamp_log_alpha:
                    for layer in gated_layers(model):
                        layer.clamp_log_alpha_()
            if self.objective is not None:
                self.objective.dual_step(density)  # same iterate as the primal step (eq. 5)
            if self.state.weight_masks:
                pruning.apply_weight_masks_(model, self.state.weight_masks)
            total_loss += loss.item() * len(y)
            total_objective += objective.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            if self.gated and step % log_every == 0:
                self.state.steps.append(self._step_row(step, loss.item(), density))
        return {"train_loss": total_loss / seen, "train_error": 100.0 * (1 - correct / seen),
                "train_objective": total_objective / seen}

    def _step_row(self, step: int, loss: float, density: torch.Tensor) -> dict:
        row = {"epoch": self.state.epoch + step / len(self.train_loader), "loss": loss,
               "l0_density": model_density(self.model).item()}
        for i, d in enumerate(density.detach().tolist()):
            row[f"constrained_density_{i}"] = d
        if isinstance(self.objective, ConstrainedObjective):
            for i, lam in enumerate(self.objective.multipliers.value.tolist()):
                row[f"lambda_{i}"] = lam
        return row

    # ----- evaluation ----------------------------------------------------------
    def test_time_model(self) -> nn.Module:
        """The deterministic model that is evaluated and counted (App. D)."""
        return purge(self.model).to(memory_format=self.memory_format) if self.gated else self.model

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Validation error of the purged model, its parameter/MAC counts and the L0-densities."""
        test_model = self.test_time_model().to(self.device).eval()
        correct = seen = 0
        for x, y in self.val_loader:
            correct += (test_model(x).argmax(1) == y).sum().item()
            seen += len(y)
        sparse = self.config.sparsity == "unstructured"
        params = counting.count_params(test_model, sparse_weights=sparse)
        row = {"val_error": 100.0 * (1 - correct / seen), "params": params,
               "params_pct": 100.0 * params / self.dense_params}
        for convention in counting.CONVENTIONS:
            macs = counting.count_macs(test_model, self.data.input_shape, convention, sparse_weights=sparse)
            suffix = "" if convention == "paper" else f"_{convention}"
            row[f"macs{suffix}"] = macs
            row[f"macs{suffix}_pct"] = 100.0 * macs / self.dense_macs[convention]
        if self.gated:
            row["l0_density"] = float(model_density(self.model))
            for name, density in zip(self.layer_names, layer_densities(self.model).tolist()):
                row[f"density[{name}]"] = density
        if isinstance(self.objective, ConstrainedObjective):
            for i, lam in enumerate(self.objective.multipliers.value.tolist()):
                row[f"lambda_{i}"] = lam
        return row

    def save_gate_medians(self, epoch: int) -> None:
        """Test-time gate medians per layer (App. I histograms); unstructured layers as 0/1/fraction counts."""
        if not self.gated or epoch not in self._histogram_epochs():
            return
        medians = {}
        for name, layer in zip(self.layer_names, gated_layers(self.model)):
            values = median_gates(layer.weight_log_alpha.detach()).flatten().cpu()
            if self.config.sparsity == "structured":
                medians[name] = [round(v, 4) for v in values.tolist()]
            else:
                counts = torch.histc(values, bins=20, min=0.0, max=1.0)
                medians[name] = {"zero": int((values == 0).sum()), "one": int((values == 1).sum()),
                                 "histogram_20_bins": counts.int().tolist()}
        self.state.gate_medians[str(epoch)] = medians

    def _histogram_epochs(self) -> set[int]:
        chosen = set(self.config.histogram_epochs)
        return chosen or {0, 1, self.epochs_total // 2, self.epochs_total}

    # ----- checkpoints --------------------------------------------------------
    def checkpoint_path(self) -> Path:
        return records.checkpoints_dir() / self.config.experiment / self.config.run_name / "last.pt"

    def save_checkpoint(self) -> None:
        path = self.checkpoint_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": self.config.to_dict(), "state": self.state, "model": self.model,
            "optimizer": self.optimizer.state_dict(),
            "gates_optimizer": None if self.gates_optimizer is None else self.gates_optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "gates_scheduler": None if self.gates_scheduler is None else self.gates_scheduler.state_dict(),
            "objective": None if self.objective is None else self.objective.state_dict(),
            "loader": self.train_loader.state_dict(), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }
        tmp = path.with_suffix(".tmp")
        torch.save(payload, tmp)
        tmp.replace(path)

    def load_checkpoint(self) -> bool:
        """Resume from the last finished epoch if a checkpoint of the same parameters exists."""
        path = self.checkpoint_path()
        if not path.exists():
            return False
        payload = torch.load(path, map_location=self.device, weights_only=False)
        if payload["config"] != self.config.to_dict():
            raise RuntimeError(f"checkpoint {path} was made with different parameters; delete it to start afresh")
        self.state, self.model = payload["state"], payload["model"].to(self.device)
        self._build_optimizers(finetune=self.state.phase == "finetune")
        self.optimizer.load_state_dict(payload["optimizer"])
        if self.gates_optimizer is not None:
            self.gates_optimizer.load_state_dict(payload["gates_optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(payload["scheduler"])
        if self.gates_scheduler is not None:
            self.gates_scheduler.load_state_dict(payload["gates_scheduler"])
        if self.objective is not None:
            self.objective.load_state_dict(payload["objective"])
        self.train_loader.load_state_dict(payload["loader"])
        torch.set_rng_state(payload["rng"])
        if payload["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["cuda_rng"])
        return True

    # ----- the run -------------------------------------------------------------
    def run_dir(self) -> Path:
        root = records.runs_dir()
        if self.config.smoke and "PAPERLIB_RUNS" not in os.environ:
            root = records.checkpoints_dir() / "smoke-runs"  # smoke records never land in runs/
        return root / self.config.experiment / self.config.run_name

    def metrics(self, status: str) -> dict:
        c, history = self.config, self.state.history
        last = history[-1] if history else {}
        # Best error of the sparse model: after pruning for magnitude pruning, over training otherwise.
        sparse_phases = ("pruned", "finetune") if c.method == "magnitude_pruning" else ("train",)
        errors = [row["val_error"] for row in history if row["phase"] in sparse_phases]
        errors = errors or [row["val_error"] for row in history]  # e.g. a pretrained model, evaluated only
        metrics = {
            "status": status, "experiment": c.experiment, "run_name": c.run_name, "preset": c.preset,
            "method": c.method, "model": c.model, "dataset": c.dataset, "sparsity": c.sparsity,
            "grouping": c.grouping, "target_density": c.target, "lmbda": c.lmbda,
            "l0_density": last.get("l0_density"),
            "l0_density_per_layer": {n: last.get(f"density[{n}]") for n in self.layer_names} or None,
            "params": last.get("params"), "params_pct": last.get("params_pct"),
            "macs": last.get("macs"), "macs_pct": last.get("macs_pct"),
            "macs_plain": last.get("macs_plain"), "macs_plain_pct": last.get("macs_plain_pct"),
            "dense_params": self.dense_params, "dense_macs": self.dense_macs["paper"],
            "dense_macs_plain": self.dense_macs["plain"],
            "val_error_best": min(errors) if errors else None, "val_error_final": last.get("val_error"),
            "val_split": self.data.val_split,
            "epochs_completed": self.state.epoch, "epochs_planned": self.epochs_total + self.finetune_total,
            "wall_time_s": round(self.state.wall_time, 1), "device": str(self.device),
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(), "data_source": self.data.source, "data": self.data.describe(),
            "seed": c.seed, "git_commit": self.state.git_commits[0], "paperlib_version": __version__,
            "torch_version": torch.__version__,
        }
        if self.gated and c.sparsity == "structured":
            metrics["pruned_architecture"] = pruned_architecture(self.model)
        if isinstance(self.objective, ConstrainedObjective):
            metrics["multipliers_final"] = self.objective.multipliers.value.tolist()
        if len(self.state.git_commits) > 1:
            metrics["git_commits_resumed_at"] = self.state.git_commits[1:]
        return metrics

    def write(self, status: str) -> None:
        run_dir = self.run_dir()
        if status != "complete" and records.record_status(run_dir) == "complete":
            return  # never replace a complete record by an unfinished one
        records.write_record(run_dir, self.config.to_dict(), self.metrics(status), self.state.history,
                             self.state.steps, self.state.gate_medians)

    def _finish_epoch(self, phase: str, train: dict, started: float) -> None:
        row = {"epoch": self.state.epoch, "phase": phase, **train, "lr": self.optimizer.param_groups[0]["lr"]}
        if self.gates_optimizer is not None:
            row["gates_lr"] = self.gates_optimizer.param_groups[0]["lr"]
        row.update(self.evaluate())
        self.state.wall_time += time.time() - started
        row["wall_time_s"] = round(self.state.wall_time, 1)
        self.state.history.append(row)
        self.save_gate_medians(self.state.epoch)
        self.save_checkpoint()
        self.write("partial")
        if self.progress:
            shown = {k: row[k] for k in ("epoch", "train_loss", "val_error", "l0_density", "params_pct") if k in row}
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()),
                  flush=True)

    def run(self) -> dict:
        """Train (or resume) to the end and return the loaded record."""
        resumed = self.load_checkpoint()
        commit = records.git_commit()  # the code that runs from here on
        if commit not in self.state.git_commits[-1:]:
            self.state.git_commits.append(commit)
        if not resumed:
            started = time.time()
            self._finish_epoch("init", {}, started)  # epoch 0: the initial model
        try:
            while self.state.epoch < self.epochs_total + self.finetune_total:
                started = time.time()
                if self.state.epoch == self.epochs_total and self.state.phase == "train":
                    self._prune_for_finetuning()
                train = self.train_epoch()
                for scheduler in (self.scheduler, self.gates_scheduler):
                    if scheduler is not None:
                        scheduler.step()
                self.state.epoch += 1
                self._finish_epoch(self.state.phase, train, started)
        except NonFiniteLossError:
            self.write("failed")
            raise
        self.write("complete")
        return records.load_record(self.run_dir())

    def _prune_for_finetuning(self) -> None:
        """Magnitude pruning after dense training (§5.4, App. J.6, App. L), evaluated before fine-tuning."""
        c = self.config
        started = time.time()
        if c.sparsity == "structured":
            self.model = pruning.l1_filter_prune(self.model, c.target, c.model)
        else:
            self.model = pruning.magnitude_prune_unstructured(self.model, c.target, c.model)
        self.model.to(self.device, memory_format=self.memory_format)
        if c.sparsity == "unstructured":
            self.state.weight_masks = pruning.weight_masks(self.model, c.model)
        self.state.phase = "finetune"
        self._build_optimizers(finetune=True)
        self._finish_epoch("pruned", {}, started)


def torchvision_resnet50_weights() -> dict:
    """torchvision's ImageNet ResNet50 weights (IMAGENET1K_V1, 76.1% top-1); downloaded on first use."""
    import torchvision

    return torchvision.models.ResNet50_Weights.IMAGENET1K_V1.get_state_dict(progress=False)


#: Parameters that do not change what a run computes (up to float rounding).
NOT_COMPARED = ("device", "threads")


def check_record_matches(recorded: dict, config: ExperimentConfig) -> None:
    """Raise if a record under this run name was made with other parameters.

    A run name spells only what differs from the preset, so a preset that
    changed since a record was made gives an old record the new name.
    Parameters a record predates take their defaults.
    """
    defaults = ExperimentConfig().to_dict()
    wanted = config.to_dict()
    differences = [f"{name}: recorded {recorded.get(name, defaults[name])!r}, now {value!r}"
                   for name, value in wanted.items()
                   if name not in NOT_COMPARED and recorded.get(name, defaults[name]) != value]
    if differences:
        raise RuntimeError(f"the record of run {config.experiment}/{config.run_name} was made with other parameters "
                           f"({'; '.join(differences)}), probably by an earlier version of the preset; pass "
                           f"run_name='...' to run these parameters under another name, or rerun=True to replace it")


def run_experiment(progress: bool = True, **params) -> dict:
    """Resolve ``params`` (see :class:`~paperlib.presets.ExperimentConfig`), run, return the record.

    If the record of these parameters is already complete it is returned
    without training; pass ``rerun=True`` to train again (the old record is
    replaced only when the new run completes).
    """
    rerun = bool(params.pop("rerun", False))
    if "smoke" not in params and os.environ.get("PAPERLIB_SMOKE") == "1":
        params["smoke"] = True
    config = resolve_config(**params)
    experiment = Experiment(config, progress)
    if progress:
        print(f"preset={config.preset} device={experiment.device} threads={torch.get_num_threads()} "
              f"run={config.experiment}/{config.run_name} data={experiment.data.source}", flush=True)
    run_dir = experiment.run_dir()
    if not rerun and records.record_status(run_dir) == "complete":
        record = records.load_record(run_dir)
        check_record_matches(record["params"], config)
        if progress:
            print(f"complete record found in {run_dir}; not training (pass rerun=True to train again)")
        return record
    if rerun and records.record_status(run_dir) == "complete":
        experiment.checkpoint_path().unlink(missing_ok=True)
    return experiment.run()
