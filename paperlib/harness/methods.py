"""Training methods, one class each behind one interface (§3, §5.5, App. B, App. J.7, App. L): :class:`Constrained` (the
Lagrangian of eq. 4 by simultaneous GDA, eq. 5, with dual restarts, eq. 6), :class:`Penalized` (loss + lambda_pen *
L0-density), :class:`Dense` (the baseline) and :class:`MagnitudePruning` (train dense, prune, fine-tune).

A method owns its model and optimisers. The runner (:mod:`paperlib.harness.training`) calls :meth:`Method.build_model`,
:meth:`Method.attach`, then per phase and epoch :meth:`Method.step` on every batch and :meth:`Method.end_epoch`; it
evaluates :meth:`Method.test_time_model`. Under several processes the training forward goes through
:attr:`Method.forward_model` (the model wrapped for data parallelism); gates, masks, purging and counting use the bare
:attr:`Method.model`.
"""

import contextlib
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..paper import pruning
from ..method.gates import median_gates
from ..method.layers import L0Layer
from ..method.constrained import ConstrainedStep
from ..method.lagrangian import dual_optimizer
from ..paper.models import build_model, from_torchvision_resnet, layer_densities, memory_format, model_density
from ..method.objective import parameter_groups
from .presets import ExperimentConfig
from ..paper.purge import pruned_architecture, purge


@dataclass
class Step:
    """What one training step leaves for the runner's logs."""

    loss: torch.Tensor       # cross-entropy of the mini-batch
    objective: torch.Tensor  # what the primal step minimised (the Lagrangian, for the constrained method)
    logits: torch.Tensor
    density: torch.Tensor | None = None  # the constrained or penalized densities (eq. 3), gated methods only


def _optimizer(kind: str, params, lr: float, momentum: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """Adam or SGD with momentum, in their fused implementations (the same update, one kernel for all tensors)."""
    if kind == "adam":  # PyTorch's default betas (0.9, 0.999); App. J.3 prints (0.9, 0.99) "as by default"
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, fused=True)


def torchvision_resnet50_weights() -> dict:
    """torchvision's ImageNet ResNet50 weights (IMAGENET1K_V1, 76.1% top-1); downloaded on first use."""
    import torchvision

    return torchvision.models.ResNet50_Weights.IMAGENET1K_V1.get_state_dict(progress=False)


class Method:
    """The interface, and what every method shares: the weights' optimiser (gated weights are decayed through the
    expected L2 norm of eq. 13 instead) and the gates' own (App. H.1), scheduled only when ``schedule_gates`` asks."""

    #: Whether the model carries hard-concrete gates.
    gated = False
    #: The phases of the history whose rows describe the sparse model (its best error is reported).
    sparse_phases = ("train",)
    #: Whether the first phase is the same for every ``target``, so that runs differing only in their target can share
    #: it (magnitude pruning's dense training; :meth:`paperlib.harness.training.Runner.run`).
    target_free_first_phase = False

    def __init__(self, config: ExperimentConfig):
        self.config = config
        self.model: nn.Module | None = None
        #: The model's data-parallel wrapper for the training forward (several processes), else None.
        self.forward_model: nn.Module | None = None

    # ----- building ------------------------------------------------------------
    def build_model(self, num_classes: int) -> nn.Module:
        """The model this method trains, freshly initialised (this draws from the global RNG)."""
        c = self.config
        return build_model(c.model, num_classes, gated=self.gated, sparsity=c.sparsity, rho_init=c.rho_init,
                           linear_init=c.linear_init)

    def attach(self, model: nn.Module) -> None:
        """Take ``model`` (already on its device) and build what trains it."""
        self.model = model
        self._build_optimizers("train")

    def _build_optimizers(self, phase: str) -> None:
        c = self.config
        gated_weights, other_weights, gate_params = parameter_groups(self.model)
        groups = [{"params": other_weights, "weight_decay": c.weight_decay}]
        if gated_weights:  # decayed through the expected L2 term of eq. 13 instead
            groups.append({"params": gated_weights, "weight_decay": 0.0})
        self.optimizer = _optimizer(c.optimizer, groups, c.lr, c.momentum)
        self.gates_optimizer = _optimizer(c.gates_optimizer, gate_params, c.gates_lr, c.momentum) if gate_params else None
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, c.lr_milestones, c.lr_gamma)
        self.gates_scheduler = None  # the gates' learning rate is constant unless asked otherwise (App. J)
        if self.gates_optimizer is not None and c.schedule_gates:
            self.gates_scheduler = torch.optim.lr_scheduler.MultiStepLR(self.gates_optimizer, c.lr_milestones,
                                                                        c.lr_gamma)

    @property
    def phases(self) -> list[tuple[str, int]]:
        """(phase, epochs) in training order; a pretrained model is not trained again (App. J.7)."""
        return [("train", 0 if self.config.pretrained else self.config.epochs)]

    def enter_phase(self, phase: str) -> str:
        """Prepare ``phase`` (any but the first); return the history label of the model it starts from."""
        raise NotImplementedError(f"{type(self).__name__} has the single phase 'train'; got {phase!r}")

    # ----- training ------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The training forward: through :attr:`forward_model` when the runner set one (it must wrap :attr:`model`)."""
        if self.forward_model is None:
            return self.model(x)
        if self.forward_model.module is not self.model:
            raise RuntimeError("the data-parallel wrapper holds another model than the method's; the runner must "
                               "wrap the model again after it changes")
        return self.forward_model(x)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> Step:
        """One gradient step of the weights on the mini-batch (x, y)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss, logits = self._loss_and_logits(x, y)
        loss.backward()
        self.optimizer.step()
        return Step(loss, loss, logits)

    def _loss_and_logits(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy and logits of the mini-batch; with ``autocast_bf16`` the forward runs under bfloat16 autocast
        (CUDA only), the loss, the densities and everything after stay in float32."""
        autocast = torch.autocast(x.device.type, dtype=torch.bfloat16) if self.config.autocast_bf16 \
            else contextlib.nullcontext()
        with autocast:
            logits = self.forward(x)
            loss = F.cross_entropy(logits, y)
        return loss, logits

    def end_epoch(self) -> None:
        """Advance the learning-rate schedules by one epoch."""
        for scheduler in (self.scheduler, self.gates_scheduler):
            if scheduler is not None:
                scheduler.step()

    def learning_rates(self) -> dict:
        rates = {"lr": self.optimizer.param_groups[0]["lr"]}
        if self.gates_optimizer is not None:
            rates["gates_lr"] = self.gates_optimizer.param_groups[0]["lr"]
        return rates

    # ----- evaluation and logs -------------------------------------------------
    def test_time_model(self) -> nn.Module:
        """The deterministic model that is evaluated and counted (App. D)."""
        return self.model

    def step_log(self, step: Step) -> dict[str, torch.Tensor] | None:
        """Densities and multipliers at a logged step as 0-d tensors left on the device; None: nothing to log."""
        return None

    def evaluation_log(self) -> dict:
        """What a history row adds to the test-time model's error and counts."""
        return {}

    def gate_medians(self) -> dict | None:
        """Test-time gate medians per layer (App. I); None for a model without gates."""
        return None

    def record_fields(self) -> dict:
        """What ``metrics.json`` adds for this method."""
        return {}

    def replicated(self) -> dict[str, torch.Tensor]:
        """State outside the model that every process must hold identically (checked after each epoch)."""
        return {}

    # ----- checkpoints -----------------------------------------------------------
    #: The optimisers and schedulers a checkpoint holds (None where the phase has none).
    CHECKPOINTED = ("optimizer", "gates_optimizer", "scheduler", "gates_scheduler")

    def state_dict(self) -> dict:
        """Optimisers and schedulers (the model is checkpointed whole by the runner)."""
        parts = {name: getattr(self, name) for name in self.CHECKPOINTED}
        return {name: None if part is None else part.state_dict() for name, part in parts.items()}

    def load_state_dict(self, state: dict, model: nn.Module, phase: str) -> None:
        """Resume: take the checkpointed ``model``, rebuild the optimisers of ``phase`` and load their states."""
        self.model = model
        self._build_optimizers(phase)
        for name in self.CHECKPOINTED:
            if getattr(self, name) is not None:
                getattr(self, name).load_state_dict(state[name])


class _Gated(Method):
    """What the two methods with hard-concrete gates share: the step
    (:class:`~paperlib.method.constrained.ConstrainedStep`), the logs of gates and densities."""

    gated = True

    def _constraint(self) -> dict:
        """The step's constraint (target and dual optimiser) or penalty."""
        raise NotImplementedError

    def _build_optimizers(self, phase: str) -> None:
        super()._build_optimizers(phase)
        c = self.config  # the step owns the optimisers, the gates' pass and the multipliers
        self.trainer = ConstrainedStep(self.model, self.optimizer, gates_optimizer=self.gates_optimizer,
                                       grouping=c.grouping, weight_decay=c.weight_decay, detach_gates=c.detach_gates,
                                       clamp_log_alpha=c.clamp_log_alpha, compile_gates=c.compile_gates,
                                       stall_steps=None,  # the runner's logs show a stalled constraint; no host sync
                                       **self._constraint())

    @property
    def objective(self):
        """The step's objective: its multipliers (constrained) or penalties (:mod:`paperlib.method.objective`)."""
        return self.trainer.objective

    def test_time_model(self) -> nn.Module:
        """The purged model: median gates folded into the weights, closed groups removed (App. D, eq. 9)."""
        return purge(self.model).to(memory_format=memory_format(self.model))

    def step(self, x: torch.Tensor, y: torch.Tensor) -> Step:
        """One step of :class:`~paperlib.method.constrained.ConstrainedStep`: the primal step on f_obj (the loss plus
        the expected L2 norm of eq. 13) plus the term in the densities, then a constrained method's dual step."""
        record = self.trainer.roll(lambda: self._loss_and_logits(x, y))
        return Step(record.loss, record.objective, record.output[1], record.densities)

    def step_log(self, step: Step) -> dict[str, torch.Tensor]:
        row = {"l0_density": model_density(self.model).detach()}
        row.update({f"constrained_density_{i}": d for i, d in enumerate(step.density.detach().unbind())})
        return row

    def evaluation_log(self) -> dict:
        row = {"l0_density": float(model_density(self.model))}
        names = [name for name, module in self.model.named_modules() if isinstance(module, L0Layer)]
        row.update({f"density[{name}]": d for name, d in zip(names, layer_densities(self.model).tolist())})
        return row

    def gate_medians(self) -> dict:
        """Structured layers list every median; unstructured ones as 0/1/20-bin counts (App. I)."""
        medians = {}
        for name, layer in self.model.named_modules():
            if not isinstance(layer, L0Layer):
                continue
            values = median_gates(layer.weight_log_alpha.detach()).flatten().cpu()
            if self.config.sparsity == "structured":
                medians[name] = [round(v, 4) for v in values.tolist()]
            else:
                counts = torch.histc(values, bins=20, min=0.0, max=1.0)
                medians[name] = {"zero": int((values == 0).sum()), "one": int((values == 1).sum()),
                                 "histogram_20_bins": counts.int().tolist()}
        return medians

    def record_fields(self) -> dict:
        if self.config.sparsity == "structured":
            return {"pruned_architecture": pruned_architecture(self.model)}
        return {}


class Constrained(_Gated):
    """min f_obj s.t. L0-density_g <= eps_g, a min-max game on the Lagrangian (eq. 3, 4) played by simultaneous gradient
    descent-ascent (eq. 5) with dual restarts (eq. 6)."""

    def _constraint(self) -> dict:
        c = self.config
        return dict(target=c.target, dual_optimizer=dual_optimizer(c.dual_optimizer, c.dual_lr, c.dual_restarts,
                                                                   c.nupi_kp, c.nupi_ema))

    def _multipliers(self) -> dict:
        return {f"lambda_{i}": lam for i, lam in enumerate(self.objective.multipliers.value.tolist())}

    def step_log(self, step: Step) -> dict[str, torch.Tensor]:
        multipliers = self.objective.multipliers.value.unbind()
        return {**super().step_log(step), **{f"lambda_{i}": lam for i, lam in enumerate(multipliers)}}

    def evaluation_log(self) -> dict:
        return {**super().evaluation_log(), **self._multipliers()}

    def record_fields(self) -> dict:
        return {**super().record_fields(), "multipliers_final": self.objective.multipliers.value.tolist()}

    def replicated(self) -> dict[str, torch.Tensor]:
        return {"Lagrange multipliers": self.objective.multipliers.value}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "objective": self.objective.state_dict()}

    def load_state_dict(self, state: dict, model: nn.Module, phase: str) -> None:
        super().load_state_dict(state, model, phase)
        self.objective.load_state_dict(state["objective"])


class Penalized(_Gated):
    """min f_obj + lambda_pen * L0-density (model-wise) or + sum_g lambda_pen_g * density_g (App. B, C)."""

    def _constraint(self) -> dict:
        return dict(penalty=self.config.lmbda)


class Dense(Method):
    """The dense baseline: plain layers, cross-entropy and the optimiser's weight decay."""

    def build_model(self, num_classes: int) -> nn.Module:
        model = super().build_model(num_classes)
        if self.config.pretrained:  # the paper prunes torchvision's trained ResNet50 (App. J.7)
            model.load_state_dict(from_torchvision_resnet(torchvision_resnet50_weights()))
        return model


class MagnitudePruning(Dense):
    """Train dense, prune to the target density, fine-tune (§5.5, App. J.7, App. L): structured, L1-filter pruning (Li
    et al., 2017) of the layers the gated model gates; unstructured, their smallest weights, kept at zero by masks.
    Fine-tuning has a constant learning rate (App. J.7) and one optimiser group."""

    sparse_phases = ("pruned", "finetune")
    target_free_first_phase = True  # App. L: one dense model, pruned at each target

    def __init__(self, config: ExperimentConfig):
        super().__init__(config)
        self.weight_masks: dict = {}

    @property
    def phases(self) -> list[tuple[str, int]]:
        return [*super().phases, ("finetune", self.config.finetune_epochs)]

    def _build_optimizers(self, phase: str) -> None:
        if phase == "train":
            super()._build_optimizers(phase)
            return
        c = self.config  # App. J.7: constant learning rate
        self.optimizer = _optimizer(c.optimizer, self.model.parameters(), c.finetune_lr, c.momentum, c.weight_decay)
        self.gates_optimizer = self.scheduler = self.gates_scheduler = None

    def enter_phase(self, phase: str) -> str:
        """Prune the trained dense model (App. D's purge with ranking-and-thresholding as step 1)."""
        if phase != "finetune":
            return super().enter_phase(phase)
        c = self.config
        device, layout = next(self.model.parameters()).device, memory_format(self.model)
        if c.sparsity == "structured":
            self.model = pruning.l1_filter_prune(self.model, c.target, c.model)
        else:
            self.model = pruning.magnitude_prune_unstructured(self.model, c.target, c.model)
        self.model.to(device, memory_format=layout)
        if c.sparsity == "unstructured":
            self.weight_masks = pruning.weight_masks(self.model, c.model)
        self._build_optimizers(phase)
        return "pruned"

    def step(self, x: torch.Tensor, y: torch.Tensor) -> Step:
        step = super().step(x, y)
        if self.weight_masks:  # pruned weights stay zero (App. L)
            pruning.apply_weight_masks_(self.model, self.weight_masks)
        return step

    def state_dict(self) -> dict:
        return {**super().state_dict(), "weight_masks": self.weight_masks}

    def load_state_dict(self, state: dict, model: nn.Module, phase: str) -> None:
        super().load_state_dict(state, model, phase)
        self.weight_masks = state["weight_masks"]


#: One class per ``method`` of :class:`~paperlib.harness.presets.ExperimentConfig`.
METHODS: dict[str, type[Method]] = {"constrained": Constrained, "penalized": Penalized, "dense": Dense,
                                    "magnitude_pruning": MagnitudePruning}


def build_method(config: ExperimentConfig) -> Method:
    """The method a resolved configuration names."""
    return METHODS[config.method](config)
