"""Our constrained training step against the authors' one, timed side by side in one process (issue 6).

    python benchmarks/authors_side_by_side.py [AUTHORS_DIR] [--repeats 3] [--steps 50] [--threads 1]

AUTHORS_DIR (default /tmp/authors) is an unpacked copy of the authors' public
code; nothing of it is part of this repository. Their package cannot be
imported as is (``utils/__init__.py`` pulls in wandb and an old Cooper), so
``sparse/l0_layers.py`` and ``sparse/models.py`` are loaded from that folder
with a stub ``utils`` module that provides the one function ``models.py``
uses (``utils.basic_utils.get_final_features``).

Both sides run the MNIST setting of Table 1 with structured gates and
layer-wise constraints, batch 128, one thread:

* ours: :class:`paperlib.harness.benchmark.TrainStep` (the runner's step: fused Adam on
  weights and gates, channels_last for LeNet5, multipliers updated outside autograd);
* theirs, written out from ``core_exp.py``, ``utils/exp_utils.train``,
  ``utils/cmp_utils.py`` and Cooper's Lagrangian formulation: forward,
  cross-entropy, ``model.regularization()`` (expected L0 per layer and the L2
  term, here with weight decay 0 as in their MNIST config), Lagrangian
  ``loss + sum(lambda * (l0_layer - target))`` with the multipliers as a leaf
  tensor that receives its gradient from the same backward, one non-fused Adam
  (their default: PyTorch's per-tensor loop on the CPU) with the weights and
  the gates as two parameter groups, then gradient ascent with SGD on the
  multipliers, dual restart of the satisfied constraints and projection onto
  lambda >= 0.

Neither side clamps ``log_alpha``: their clamp is skipped under
DistributedDataParallel, with which the paper's runs were launched, and our
paper preset leaves it off. Per-step bookkeeping (``loss.item()``, accuracy) is
left out on both sides. Before timing, the script checks that the two models
have the same parameter shapes and, with our parameters copied from theirs and
the same gate noise, the same logits and layer densities.
"""

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paperlib.harness.benchmark import (WORKLOADS, TrainStep, config_for, medians_ms, random_batch,  # noqa: E402
                                time_interleaved)
from paperlib.paper.models import layer_densities  # noqa: E402
from paperlib.harness.training import device_name  # noqa: E402


def _load_their_files(root: Path, folder: str, names: tuple[str, ...], stubs: dict) -> dict[str, types.ModuleType]:
    """Their ``root/folder/<name>.py`` files, executed in order as modules of a package of their own, with
    ``stubs`` (module name -> stand-in) in place of the imports we do not load; sys.modules is restored."""
    package = types.ModuleType(f"authors_{folder}")
    package.__path__ = [str(root / folder)]
    saved = {name: sys.modules.get(name) for name in (*stubs, package.__name__)}
    sys.modules.update(stubs)
    sys.modules[package.__name__] = package
    try:
        loaded = {}
        for name in names:
            spec = importlib.util.spec_from_file_location(f"{package.__name__}.{name}", root / folder / f"{name}.py")
            loaded[name] = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = loaded[name]
            spec.loader.exec_module(loaded[name])
        return loaded
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load_authors(root: Path) -> types.ModuleType:
    """Their ``sparse.models`` module, loaded from ``root`` with a stub ``utils``; sys.modules is restored."""

    def get_final_features(in_size, module, verbose=False):  # as their utils/basic_utils.py
        module.eval()
        return module(torch.ones(1, *in_size)).size()[1:]

    utils = types.ModuleType("utils")
    utils.basic_utils = types.SimpleNamespace(get_final_features=get_final_features)
    return _load_their_files(root, "sparse", ("l0_layers", "models"), {"utils": utils})["models"]


def their_model(models: types.ModuleType, name: str, weight_decay: float) -> torch.nn.Module:
    """Their MNIST model as core_exp.prepare_model builds it (structured, droprate_init 0.5, gates detached in L2)."""
    common = dict(sparsity_type="structured", weight_decay=weight_decay, l2_detach_gates=True, droprate_init=0.5)
    if name == "mlp":
        return models.L0MLP(784, 10, layer_dims=(300, 100), **common)
    return models.L0LeNet5(10, input_shape=(1, 28, 28), conv_dims=(20, 50), fc_dims=500, **common)


class TheirStep:
    """Their constrained step (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, targets: list[float], lr: float, gates_lr: float, dual_lr: float,
                 grouping: str = "layer"):
        self.model = model.train()
        self.target = torch.tensor(targets)
        self.grouping = grouping  # layer: one constraint per layer (reg.l0_layer); model: one on reg.l0_model
        self.l0_model = torch.tensor(float("nan"))  # the model density at the last step, as their logs hold it
        net, gates = model.params_dict["net"], model.params_dict["gates"]
        self.primal = torch.optim.Adam([{"params": net, "lr": lr}, {"params": gates, "lr": gates_lr}])
        self.multipliers = torch.zeros(len(targets), requires_grad=True)
        self.dual = torch.optim.SGD([self.multipliers], lr=dual_lr)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.primal.zero_grad()
        self.dual.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        reg = self.model.regularization()
        loss = loss + reg.l2_model
        self.l0_model = reg.l0_model.detach()
        defect = (reg.l0_layer if self.grouping == "layer" else reg.l0_model.reshape(1)) - self.target
        lagrangian = loss + torch.sum(self.multipliers * defect)
        lagrangian.backward()
        self.primal.step()
        self.multipliers.grad.mul_(-1)  # ascent on the multipliers
        self.dual.step()
        with torch.no_grad():
            self.multipliers[defect.detach() <= 0] = 0.0  # dual restart
            self.multipliers.clamp_(min=0.0)  # projection
        return lagrangian.detach()


class TheirPenalizedStep:
    """Their penalized step, written out from ``utils/cmp_utils.PenalizedL0Problem.closure`` and
    ``compute_penalty``: cross-entropy plus the L2 term plus ``dot(lambdas, l0_layer)`` layer-wise (one
    lambda_pen per layer) or ``lambda * l0_model`` model-wise, minimised by the same Adam as
    :class:`TheirStep`; there are no multipliers.

    Their class cannot be used as published: its ``__init__`` calls ``super(ConstrainedL0Problem, self)``
    on an object that is not a ``ConstrainedL0Problem``, which raises ``TypeError`` before any training
    (:func:`their_penalized_class_error` constructs it). This is the closure that class would run.
    """

    def __init__(self, model: torch.nn.Module, lambdas: list[float], lr: float, gates_lr: float,
                 grouping: str = "layer"):
        self.model = model.train()
        self.lambdas = torch.tensor(lambdas)
        self.grouping = grouping
        self.l0_model = torch.tensor(float("nan"))
        net, gates = model.params_dict["net"], model.params_dict["gates"]
        self.primal = torch.optim.Adam([{"params": net, "lr": lr}, {"params": gates, "lr": gates_lr}])

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.primal.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        reg = self.model.regularization()
        loss = loss + reg.l2_model
        self.l0_model = reg.l0_model.detach()
        penalty = torch.dot(self.lambdas, reg.l0_layer) if self.grouping == "layer" else self.lambdas[0] * reg.l0_model
        loss = loss + penalty
        loss.backward()
        self.primal.step()
        return loss.detach()


def their_penalized_class_error(root: Path) -> str:
    """What constructing their ``PenalizedL0Problem`` raises: their ``utils/cmp_utils.py`` loaded from ``root``
    with a stub ``cooper`` whose problem class takes ``is_constrained`` (as every Cooper version's did), so
    that only their own code is tried. ``"none"`` if it constructs."""
    cooper = types.ModuleType("cooper")
    cooper.ConstrainedMinimizationProblem = type("ConstrainedMinimizationProblem", (), {
        "__init__": lambda self, is_constrained=False: setattr(self, "is_constrained", is_constrained)})
    cooper.CMPState = dict
    problems = _load_their_files(root, "utils", ("constraints", "cmp_utils"), {"cooper": cooper})["cmp_utils"]
    problems.ConstrainedL0Problem(torch.nn.CrossEntropyLoss())  # theirs for constraints constructs
    try:
        problems.PenalizedL0Problem(torch.nn.CrossEntropyLoss())
    except TypeError as error:
        return f"TypeError: {error}"
    return "none"


def check_comparable(name: str, ours: TrainStep, theirs: TheirStep, x: torch.Tensor) -> None:
    """Same parameter shapes; with our parameters copied from theirs, same logits and layer densities."""
    ours_params = [p for layer in ours.model.modules() if hasattr(layer, "weight_log_alpha")
                   for p in (layer.weight, layer.bias, layer.weight_log_alpha)]
    their_params = [p for layer in theirs.model.layers_dict["l0"]
                    for p in (layer.weight, layer.bias, layer.weight_log_alpha)]
    assert [tuple(p.shape) for p in ours_params] == [tuple(p.shape) for p in their_params], name
    twin = TrainStep(ours.config)  # a copy, so that the timed models keep their own initialisation
    twin_params = [p for layer in twin.model.modules() if hasattr(layer, "weight_log_alpha")
                   for p in (layer.weight, layer.bias, layer.weight_log_alpha)]
    with torch.no_grad():
        for mine, theirs_p in zip(twin_params, their_params):
            mine.copy_(theirs_p)
    torch.manual_seed(1)
    our_logits = twin.model(x)
    torch.manual_seed(1)
    their_logits = theirs.model(x.contiguous())
    torch.testing.assert_close(our_logits, their_logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(layer_densities(twin.model), theirs.model.regularization().l0_layer)
    sizes = [tuple(p.shape) for p in their_params[::3]]
    print(f"{name}: same parameter shapes (weights {sizes}), logits and layer densities agree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("authors", nargs="?", default="/tmp/authors", type=Path)
    parser.add_argument("--models", nargs="+", default=["mlp", "lenet5"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = load_authors(args.authors)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU: {device_name(torch.device('cpu'))}")
    rows = []
    for name in args.models:
        config = config_for(name, "constrained")
        torch.manual_seed(0)
        ours = TrainStep(config)
        theirs = TheirStep(their_model(models, name, config.weight_decay), config.target, config.lr,
                           config.gates_lr, config.dual_lr)
        x, y = random_batch(WORKLOADS[name], config.batch_size, ours.memory_format)
        check_comparable(name, ours, theirs, x)
        x_theirs = x.contiguous()  # their code feeds NCHW batches
        samples = time_interleaved({"ours": lambda: ours(x, y), "theirs": lambda: theirs(x_theirs, y)},
                                   args.repeats, args.steps)
        ms = medians_ms(samples)
        ratios = [o / t for o, t in zip(samples["ours"], samples["theirs"])]
        rows.append(f"{name:<7} {config.batch_size:>5} {ms['ours']:>8.1f} {ms['theirs']:>8.1f} "
                    f"{ms['ours'] / ms['theirs']:>10.2f}   {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"constrained step, ms (median of {args.repeats} interleaved repetitions x {args.steps} steps)")
    print(f"{'model':<7} {'batch':>5} {'ours':>8} {'theirs':>8} {'ours/theirs':>10}   per repetition")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
