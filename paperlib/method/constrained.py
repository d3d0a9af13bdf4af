"""One object owns a training step under sparsity constraints (§3, eq. 4-6): :class:`ConstrainedStep`.

The problem is min f_obj(theta, phi) s.t. d_g(phi) <= eps_g, with d_g the expected L0-density (eq. 3) of the whole model
or of each gated layer. One :meth:`ConstrainedStep.roll` is one step of simultaneous gradient descent-ascent on its
Lagrangian (eq. 4, 5): zero the gradients; sample every gate once (:mod:`paperlib.method.gate_pass`) and compute the
loss under them; backward through f_obj + sum_g lambda_g (d_g - eps_g), f_obj the loss plus, when asked, the expected
L2 norm of the gated weights (eq. 13); the weights' step, then the gates' (and the clamp of log_alpha); the dual step
from the densities of the sampled gates (:mod:`paperlib.method.lagrangian`). With ``penalty`` instead of ``target`` it
minimises f_obj + sum_g lambda_pen_g d_g (§2, App. B, C), with no dual step. It works on any ``nn.Module`` holding
:class:`~paperlib.method.layers.L0Layer` layers; Cooper's ``roll()`` is the model of the interface.
"""

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from .budget import ExpectedCost
from .gate_pass import ModelGates, compiles
from .lagrangian import AugmentedLagrangian, DualOptimizer, GradientAscent, NuPI
from .layers import L0Layer
from .objective import ConstrainedObjective, PenalizedObjective
from .vocabulary import COMPILE_GATES, GROUPINGS, MEASURES


@dataclass
class StepRecord:
    """What one :meth:`ConstrainedStep.roll` did."""

    #: The task loss (the first value ``loss_fn`` returned), with its graph.
    loss: torch.Tensor
    #: What the primal step minimised: the loss, the expected L2 term (eq. 13) and the Lagrangian's (or the penalty's)
    #: term in the densities, with its graph.
    objective: torch.Tensor
    #: The constrained (or penalized) densities d_g at the step's gates, before the primal step: shape (1,) for a
    #: model-wise target, (layers,) for per-layer ones.
    densities: torch.Tensor
    #: d_g - eps_g, the violations the dual step used (None for a penalty).
    violations: torch.Tensor | None
    #: lambda_g after the dual step (for a penalty: the fixed lambda_pen_g).
    multipliers: torch.Tensor
    #: Whatever ``loss_fn`` returned (e.g. ``(loss, logits)``).
    output: Any


def gated_modules(model: nn.Module) -> list[tuple[str, L0Layer]]:
    """(name, layer) of every gated layer of ``model``, in ``model.modules()`` order: one constraint group each."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, L0Layer)]


def weight_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every parameter of ``model`` but the gates' ``log_alpha``: what the weights' optimiser takes.

    Example::

        optimizer = torch.optim.Adam(paperlib.weight_parameters(model), lr=1e-3)
    """
    gates = {id(p) for p in gate_parameters(model)}  # which checks that model is a module
    return [p for p in model.parameters() if id(p) not in gates]


def gate_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Every gate's ``log_alpha`` in ``model``, layer by layer: for a ``gates_optimizer`` of one's own."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module; got {type(model).__name__}")
    return [p for _, layer in gated_modules(model) for p in layer.gate_parameters()]


def _held(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


class ConstrainedStep:
    """A training step of ``model`` with its expected L0-density constrained (or penalized): one :meth:`roll`.

    Example: a model with two gated layers, trained to keep at most 30% of its weights' groups::

        import torch, torch.nn as nn, torch.nn.functional as F
        from paperlib import ConstrainedStep, weight_parameters
        from paperlib.method.layers import GatedLinear

        layers = [nn.Flatten(), GatedLinear(nn.Linear(784, 300)), nn.ReLU(), GatedLinear(nn.Linear(300, 10))]
        model = nn.Sequential(*layers)
        step = ConstrainedStep(model, torch.optim.Adam(weight_parameters(model), lr=1e-3),
                               target=0.3, gates_lr=0.1, dual_lr=0.05)
        x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))  # in practice, a loader's batches
        for _ in range(10):
            record = step.roll(lambda: F.cross_entropy(model(x), y))
        print(record.loss.item(), record.densities, record.violations, record.multipliers)

    Arguments:

    * ``optimizer``: the weights' optimiser (every parameter but the gates: :func:`weight_parameters`), or None to train
      the gates alone.
    * ``target``: the target density eps, a float for the whole model or a list with one float per gated layer (in
      ``model.modules()`` order). Or, instead, ``penalty``: the fixed lambda_pen of the penalized objective, a float or
      one per layer.
    * ``grouping``: ``"model"`` or ``"layer"``; by default ``"layer"`` for a list, ``"model"`` for a float (a float with
      ``"layer"`` is every layer's).
    * ``measure`` (beyond the paper): what the target bounds. ``"density"``, the paper's expected L0-density of the
      gated groups; ``"params"`` or ``"macs"``, the expected parameters or MACs (``"plain"``) of the whole purged model,
      the ungated parts included (:class:`~paperlib.method.budget.ExpectedCost`), model-wise, with a target in (0, 1] (a
      share of the dense model's) or a number of them (e.g. ``2e6``). They read the model's graph on one example of
      ``input_shape`` (default ``model.input_shape``; ``leaves`` as for :func:`~paperlib.method.sparsify.sparsify`).
      :attr:`StepRecord.densities` is then that share.
    * ``gates_optimizer``: the gates' optimiser over every ``log_alpha`` (:func:`gate_parameters`), or ``gates_lr``:
      the learning rate of Adam on them (their own, App. H.1). No default: ``benchmarks/settings_study.py`` found no
      setting that lands on both resnet18 and mobilenet_v2 (the README says more).
    * ``dual_lr``: the multipliers' step size for the paper's projected gradient ascent with dual restarts, or, instead,
      ``dual_optimizer``: :class:`~paperlib.method.lagrangian.GradientAscent` ``(lr, restarts=False)``,
      :class:`~paperlib.method.lagrangian.NuPI` ``(lr, kp, ema)`` or
      :class:`~paperlib.method.lagrangian.AugmentedLagrangian` ``(rho)`` (also ``paperlib.GradientAscent``, ...).
    * ``weight_decay``: adds 0.5 * weight_decay * the expected L2 norm of the gated layers' weights (eq. 13) to the
      objective, with the gate probabilities detached when ``detach_gates`` (App. H.2); give the weights' optimiser no
      weight decay of its own on those weights.
    * ``clamp_log_alpha``: clamp every ``log_alpha`` after the gates' step (:mod:`paperlib.method.gates`).
    * ``compile_gates``: run the gate pass through ``torch.compile``: ``"auto"`` (on CUDA), ``"always"``, ``"never"``,
      or a bool.
    * ``stall_steps``, ``stall_margin``: a constraint whose multiplier has been 0 while its density (or share) was more
      than ``stall_margin`` under its target for ``stall_steps`` steps (read every 50 steps) does not bind: a warning
      says so, once per constraint, and what to change. None: never.

    Numbers may be Python, numpy or 0-d torch numbers, a list one per layer a 1-d tensor or array; one out of its range
    (a target in (0, 1], a penalty and ``weight_decay`` >= 0, learning rates > 0, finite) is an error naming it.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *,
                 target: float | Sequence[float] | None = None, penalty: float | Sequence[float] | None = None,
                 grouping: str | None = None, gates_optimizer: torch.optim.Optimizer | None = None,
                 gates_lr: float | None = None, dual_lr: float | None = None,
                 dual_optimizer: DualOptimizer | None = None, weight_decay: float = 0.0,
                 detach_gates: bool = True, clamp_log_alpha: bool = True, compile_gates: bool | str = "auto",
                 measure: str = "density", input_shape: Sequence[int] | None = None, leaves=None,
                 stall_steps: int | None = 200, stall_margin: float = 0.03):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module with gated layers; got {type(model).__name__}")
        layers = gated_modules(model)
        if not layers:
            raise ValueError(f"{type(model).__name__} has no gated layers (paperlib.method.layers.L0Layer modules, such as "
                             f"GatedLinear and GatedConv2d): put gates on it first")
        if (target is None) == (penalty is None):
            raise ValueError("pass either target (constrained densities) or penalty (a fixed lambda_pen), not "
                             + ("both" if target is not None else "neither"))
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")
        if target is not None:
            target = _numbers(target, "target", "in (0, 1], a density" if measure == "density" else
                              f"in (0, 1], a share of the dense model's {measure}, or a number of them",
                              lambda v: 0 < v <= 1 or measure != "density")
        else:
            penalty = _numbers(penalty, "penalty", "a coefficient >= 0", lambda v: v >= 0)
        values, what = (target, "target") if target is not None else (penalty, "penalty")
        for name, optim in (("optimizer", optimizer), ("gates_optimizer", gates_optimizer)):
            if optim is not None and not hasattr(optim, "param_groups"):
                raise TypeError(f"{name} must be a torch.optim.Optimizer (or None); got {type(optim).__name__}")
        weight_decay = _number(weight_decay, "weight_decay", ">= 0", lambda v: v >= 0)
        grouping = grouping or ("model" if isinstance(values, float) else "layer")
        if grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}; got {grouping!r}")
        if measure != "density" and (grouping != "model" or not isinstance(values, float)):
            raise ValueError(f"measure={measure!r} is model-wise only: one {what} on the whole model's expected "
                             f"{measure}; pass one number with grouping='model', or measure='density' per layer")
        if measure == "density" and (input_shape is not None or leaves is not None):
            raise ValueError("input_shape and leaves are for measure='params' or 'macs'; the density needs neither")
        _check_per_layer(values, what, grouping, [name for name, _ in layers])
        cost = None if measure == "density" else ExpectedCost(model, measure, input_shape, leaves)
        target = _share(target, cost) if cost is not None and target is not None else target
        if stall_steps is not None and (type(stall_steps) is not int or stall_steps < 1):
            raise ValueError(f"stall_steps must be a number of steps >= 1, or None; got {stall_steps!r}")
        self.stall_steps, self.stall_margin = stall_steps, _number(stall_margin, "stall_margin", ">= 0",
                                                                   lambda v: v >= 0)
        self.measure, self._names, self._steps, self._warned = measure, [name for name, _ in layers], 0, set()
        self.model = model
        self.optimizer = optimizer
        self.gates_optimizer = _gates_optimizer(layers, optimizer, gates_optimizer, gates_lr)
        self.clamp_log_alpha = bool(clamp_log_alpha)
        if target is not None:
            self.objective = ConstrainedObjective(model, target, grouping, _dual(dual_lr, dual_optimizer))
        else:
            extra = [k for k, v in dict(dual_lr=dual_lr, dual_optimizer=dual_optimizer).items() if v is not None]
            if extra:
                raise ValueError(f"a penalty has no multipliers to update; drop {' and '.join(extra)} or pass a "
                                 f"target instead")
            self.objective = PenalizedObjective(model, penalty, grouping)
        if isinstance(compile_gates, str):
            if compile_gates not in COMPILE_GATES:
                raise ValueError(f"compile_gates must be a bool or one of {COMPILE_GATES}; got {compile_gates!r}")
            compile_gates = compiles(compile_gates, layers[0][1].weight_log_alpha.device)
        self.gates = ModelGates(model, grouping, weight_decay, detach_gates, bool(compile_gates), cost)
        self._stalled, self._peaks = torch.zeros(len(self.multipliers), dtype=torch.long), None

    @property
    def constrained(self) -> bool:
        """Whether the densities are constrained (multipliers updated) rather than penalized."""
        return isinstance(self.objective, ConstrainedObjective)

    @property
    def multipliers(self) -> torch.Tensor:
        """The current lambda_g (for a penalty, the fixed lambda_pen_g)."""
        return self.objective.multipliers.value if self.constrained else self.objective.lambdas

    def zero_grad(self) -> None:
        for optimizer in (self.optimizer, self.gates_optimizer):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)

    def roll(self, loss_fn: Callable[[], torch.Tensor | tuple]) -> StepRecord:
        """One step: gates sampled, ``loss_fn()`` under them, backward, the primal steps, then the dual step.

        ``loss_fn`` runs the model's forward and returns the task loss, or a tuple whose first element is the loss (the
        whole tuple is kept in :attr:`StepRecord.output`), e.g. ``step.roll(lambda: F.cross_entropy(model(x), y))``. The
        model must be in training mode (in eval mode the gated layers use their median gates).
        """
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be a function of no arguments returning the loss; got "
                            f"{type(loss_fn).__name__}")
        evaluating = [name for name, layer in gated_modules(self.model) if not layer.training]
        if evaluating:
            raise RuntimeError(f"the model is in eval mode (gated layers {', '.join(evaluating[:3])}"
                               f"{', ...' if len(evaluating) > 3 else ''} use their median gates, which a step "
                               f"cannot train): call model.train() before step.roll()")
        self.zero_grad()
        gate_pass = self.gates.sample(self.objective.term, self.objective.term_args())
        with self.gates.installed(gate_pass):
            output = loss_fn()
        loss = output[0] if isinstance(output, tuple) else output
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise ValueError(f"loss_fn must return a 0-d loss tensor (or a tuple starting with one); "
                             f"got {type(loss).__name__}{'' if not isinstance(loss, torch.Tensor) else tuple(loss.shape)}")
        objective = loss + gate_pass.l2_penalty + gate_pass.density_term
        objective.backward()
        if self.optimizer is not None:
            self.optimizer.step()
        self.gates_optimizer.step()
        if self.clamp_log_alpha:
            for layer in self.gates.layers:
                layer.clamp_log_alpha_()
        densities, violations = gate_pass.densities, None
        if self.constrained:  # simultaneous GDA (eq. 5): the dual step from the densities before the primal one
            violations = densities.detach() - self.objective.target
            self.objective.multipliers.step(violations)
            self._watch(densities.detach(), violations)
        return StepRecord(loss, objective, densities, violations, self.multipliers, output)

    def _watch(self, densities: torch.Tensor, violations: torch.Tensor) -> None:
        """Keep each constraint's largest violation and multiplier over a window of 50 steps (two operations a step, no
        wait for the GPU); at the window's end, count the steps in a row that it has not bound, and warn once where they
        reach ``stall_steps``."""
        if self.stall_steps is None:
            return
        now = (violations, self.objective.multipliers.value)
        self._peaks = [x.clone() for x in now] if self._peaks is None else \
            [torch.maximum(peak, x, out=peak) for peak, x in zip(self._peaks, now)]
        self._steps, window = self._steps + 1, min(50, self.stall_steps)
        if self._steps % window == 0:
            idle = (self._peaks[0].cpu() < -self.stall_margin) & (self._peaks[1].cpu() == 0)
            self._stalled, self._peaks = torch.where(idle, self._stalled + window, 0), None
            for k in sorted(set((self._stalled >= self.stall_steps).nonzero().flatten().tolist()) - self._warned):
                self._warned.add(k)
                d, t = float(densities[k]), float(self.objective.target[k])
                warnings.warn(
                    f"the constraint on {'the model' if len(idle) == 1 else 'layer ' + self._names[k]} has not bound "
                    f"for {int(self._stalled[k])} steps: its multiplier is 0 and its {self.measure} ({d:.1%}) is "
                    f"more than {self.stall_margin:.0%} under its target ({t:.1%}), so the gates close by themselves. "
                    f"To make it bind: a smaller gates' learning rate (gates_lr), a target at or below {d:.0%}"
                    + (", or measure='params' or 'macs' to bound what the purged model costs"
                       if self.measure == "density" else ""), stacklevel=3)

    def state_dict(self) -> dict:
        """The optimisers' states and the multipliers (the model's parameters are the model's)."""
        state = {"optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
                 "gates_optimizer": self.gates_optimizer.state_dict()}
        if self.constrained:
            state["objective"] = self.objective.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.gates_optimizer.load_state_dict(state["gates_optimizer"])
        if self.constrained:
            self.objective.load_state_dict(state["objective"])


def _number(value, name: str, accepts: str, ok: Callable[[float], bool]) -> float:
    """``value`` (a Python, numpy or 0-d torch number) as a float, finite and ``ok``; else an error naming ``name`` that
    says what it ``accepts``."""
    number = value.item() if getattr(value, "shape", None) == () and hasattr(value, "item") else value
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise TypeError(f"{name} must be a number {accepts}; got {value!r} ({type(value).__name__})")
    if not (math.isfinite(number) and ok(number)):
        raise ValueError(f"{name} must be {accepts}; got {number!r}")
    return float(number)


def _numbers(values, name: str, accepts: str, ok: Callable[[float], bool]) -> float | list[float]:
    """A number (:func:`_number`), or a list of them from any sequence, 1-d tensor or array, each checked."""
    if isinstance(values, numbers.Number) or getattr(values, "shape", None) == ():
        return _number(values, name, accepts, ok)
    if hasattr(values, "tolist") and getattr(values, "ndim", 1) == 1:
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a number {accepts}, or a sequence of them, one per gated layer; got "
                        f"{type(values).__name__}")
    return [_number(v, f"{name}[{i}]", accepts, ok) for i, v in enumerate(values)]


def _check_per_layer(values, what: str, grouping: str, names: list[str]) -> None:
    if isinstance(values, float):
        return
    if grouping == "model":
        raise ValueError(f"a model-wise {what} is one float; got {len(values)} values (pass grouping='layer' "
                         f"for one per gated layer)")
    if len(values) != len(names):
        raise ValueError(f"{what} has {len(values)} values but the model has {len(names)} gated layers "
                         f"({', '.join(names)}): give one per gated layer, in this order, or one float")


def _share(target: float, cost: ExpectedCost) -> float:
    """A target of ``cost.measure``, checked, as a share of the dense model's count."""
    name, dense, share = cost.measure, cost.dense, target if target <= 1 else target / cost.dense
    with torch.no_grad():
        floor = float(cost([torch.zeros_like(layer.weight_log_alpha) for layer in cost.layers])) / dense
    if not floor <= share <= 1:
        raise ValueError(f"target={target:g} is {share:.1%} of the dense model's {dense:,} {name}: pass at most them "
                         f"(or a share in (0, 1]), and more than what closing every gate leaves ({floor:.1%})")
    return share


def _gates_optimizer(layers, optimizer, gates_optimizer, gates_lr) -> torch.optim.Optimizer:
    """The gates' optimiser, checked to hold every ``log_alpha`` and nothing the weights' optimiser holds."""
    gate_params = [p for _, layer in layers for p in layer.gate_parameters()]
    gates = {id(p) for p in gate_params}
    if optimizer is not None and _held(optimizer) & gates:
        raise ValueError("the weights' optimiser holds gate parameters (log_alpha): build it over "
                         "paperlib.weight_parameters(model), and give the gates gates_optimizer or gates_lr")
    if (gates_optimizer is None) == (gates_lr is None):
        raise ValueError("the gates need their own optimiser: pass gates_lr (Adam at that learning rate) or "
                         "gates_optimizer, " + ("not both" if gates_lr is not None else "one of them"))
    if gates_optimizer is None:
        return torch.optim.Adam(gate_params, lr=_number(gates_lr, "gates_lr", "a learning rate > 0", lambda v: v > 0))
    held = _held(gates_optimizer)
    missing = [name for name, layer in layers if any(id(p) not in held for p in layer.gate_parameters())]
    if missing:
        raise ValueError(f"gates_optimizer lacks the log_alpha of the gated layers {', '.join(missing)}")
    if held - gates:
        raise ValueError(f"gates_optimizer holds {len(held - gates)} parameters that are not gates' log_alpha; "
                         f"give those to the weights' optimiser")
    return gates_optimizer


def _dual(dual_lr, dual_optimizer) -> DualOptimizer:
    """The dual optimiser: gradient ascent with restarts at ``dual_lr``, or ``dual_optimizer``, not both."""
    if (dual_lr is None) == (dual_optimizer is None):
        raise ValueError("a target needs its multipliers' optimiser: pass dual_lr (the paper's gradient ascent with "
                         "dual restarts at that step size) or dual_optimizer, " +
                         ("not both" if dual_lr is not None else "one of them"))
    if dual_optimizer is None:
        return GradientAscent(_number(dual_lr, "dual_lr", "a step size > 0", lambda v: v > 0))
    if not isinstance(dual_optimizer, (GradientAscent, NuPI, AugmentedLagrangian)):
        raise TypeError(f"dual_optimizer must be paperlib.GradientAscent(lr, restarts), paperlib.NuPI(lr, kp, ema) or "
                        f"paperlib.AugmentedLagrangian(rho); got {dual_optimizer!r}")
    return dual_optimizer
