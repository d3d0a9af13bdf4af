"""Budgets on parameters and MACs (issue 51, item 1): paperlib.method.budget.ExpectedCost and
ConstrainedStep(measure=...). The expectation is the purged model's count where every gate is open or closed, its
Monte Carlo mean where gates are random, differentiable in the gates, and a step under it trains towards it."""

import importlib.util
import math
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import paperlib
from paperlib.method.budget import ExpectedCost
from paperlib.method.constrained import ConstrainedStep
from paperlib.method.gates import sample_gates
from paperlib.method.layers import L0Layer

SHAPE = (3, 8, 8)
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "macs_budget.py"


class Branches(nn.Module):
    """Every way a gate reaches a count: a gated stem read by two gated branches, concatenated; an expansion run
    whose depthwise convolution is gated; a gated convolution read by a gated linear layer through a flatten (16
    features per channel); two gated linear layers in a row."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.a, self.b = nn.Conv2d(8, 6, 3, padding=1), nn.Conv2d(8, 5, 1)
        self.expand, self.bn2 = nn.Conv2d(11, 12, 1), nn.BatchNorm2d(12)
        self.dw, self.bn3 = nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False), nn.BatchNorm2d(12)
        self.project = nn.Conv2d(12, 7, 1)
        self.fc1, self.fc2 = nn.Linear(7 * 4 * 4, 16), nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = torch.cat([F.relu(self.a(x)), F.relu(self.b(x))], 1)
        x = F.relu(self.bn3(self.dw(F.relu(self.bn2(self.expand(x))))))
        x = F.adaptive_avg_pool2d(self.project(x), 4).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def _model(name: str) -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    if name == "branches":
        model, shape = paperlib.sparsify(Branches()), SHAPE
    else:
        model, shape = paperlib.sparsify(getattr(torchvision.models, name)(num_classes=10)), (3, 32, 32)
    assert sum(isinstance(m, L0Layer) for m in model.modules()) >= 7
    return model, shape


def _gated(model):
    return [m for m in model.modules() if isinstance(m, L0Layer)]


def _set_gates(model, closed: float, seed: int = 0) -> None:
    """Each gate open (median 1, P(z != 0) = 1 to float precision) or, with probability ``closed``, closed."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in _gated(model):
            shut = torch.rand(layer.weight_log_alpha.shape, generator=generator) < closed
            layer.weight_log_alpha.copy_(torch.where(shut, -60.0, 60.0))


def _count(model, measure, shape):
    return paperlib.count_params(model) if measure == "params" else paperlib.count_macs(model, shape, "plain")


def _purged(model, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # closed channels purge keeps: none here, but a random draw may close a layer
        small = paperlib.purge(model.eval(), torch.zeros(1, *shape))
    model.train()
    return small


@pytest.mark.parametrize("name", ["branches", "resnet18", "mobilenet_v2"])
def test_with_every_gate_open_the_expected_count_is_the_dense_models(name):
    model, shape = _model(name)
    _set_gates(model, closed=0.0)
    for measure in ("params", "macs"):
        cost = ExpectedCost(model, measure, shape)
        dense = paperlib.count_params(model, gates="dense") if measure == "params" else \
            paperlib.count_macs(model, shape, "plain", gates="dense")
        assert cost.dense == dense
        with torch.no_grad():
            assert cost().item() == pytest.approx(dense, rel=1e-6)
            closed = cost([torch.zeros_like(layer.weight_log_alpha) for layer in _gated(model)]).item()
        assert closed < 0.9 * dense  # and the gates do count: closing them all removes a tenth or more


@pytest.mark.parametrize("name", ["branches", "resnet18", "mobilenet_v2"])
def test_where_gates_are_open_or_closed_the_expected_count_is_the_purged_models(name):
    """Double sparsification included: a closed channel also removes the next layer's inputs (App. D)."""
    model, shape = _model(name)
    costs = {measure: ExpectedCost(model, measure, shape) for measure in ("params", "macs")}
    for seed in range(2):
        _set_gates(model, closed=0.4, seed=seed)
        small = _purged(model, shape)
        for measure, cost in costs.items():
            with torch.no_grad():
                assert cost().item() == pytest.approx(_count(small, measure, shape), rel=1e-6), (measure, seed)
        assert _count(small, "macs", shape) < 0.8 * costs["macs"].dense


def test_the_expected_count_is_the_mean_of_the_counts_at_sampled_gates():
    """Formula against Monte Carlo: 3,000 draws of every gate (eq. 7) at random log_alpha; the count at each draw
    (a gate counts when it is non-zero) is the purged model's count at those gates, checked on the first 20."""
    model, shape = _model("branches")
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in _gated(model):
            layer.weight_log_alpha.copy_(torch.rand(layer.weight_log_alpha.shape, generator=generator) * 3.5 - 0.5)
    log_alphas = [layer.weight_log_alpha.detach().clone() for layer in _gated(model)]
    for measure in ("params", "macs"):
        cost = ExpectedCost(model, measure, shape)
        with torch.no_grad():
            expected = cost().item()
            draws = [[sample_gates(a, generator) for a in log_alphas] for _ in range(3000)]
            counts = torch.tensor([cost([z.ne(0).float() for z in zs]).item() for zs in draws], dtype=torch.float64)
        error = counts.std().item() / math.sqrt(len(counts))
        assert abs(counts.mean().item() - expected) < 4 * error, (measure, expected, counts.mean().item(), error)
        assert 0.2 * expected > counts.std().item() > 0.01 * expected  # the draws do differ
        checked = 0
        for zs in draws[:20]:
            if not all(z.any() for z in zs):  # purge keeps one channel of a layer whose gates all close
                continue
            _set_for_draw(model, zs)
            assert cost([z.ne(0).float() for z in zs]).item() == pytest.approx(
                _count(_purged(model, shape), measure, shape), rel=1e-6)
            checked += 1
        assert checked >= 15
        with torch.no_grad():
            for layer, a in zip(_gated(model), log_alphas):
                layer.weight_log_alpha.copy_(a)


def _set_for_draw(model, zs):
    with torch.no_grad():
        for layer, z in zip(_gated(model), zs):
            layer.weight_log_alpha.copy_(torch.where(z > 0, 60.0, -60.0))


def test_the_expected_count_is_differentiable_in_every_layers_gates():
    model, shape = _model("branches")
    cost = ExpectedCost(model, "macs", shape)
    probs = [torch.rand(layer.weight_log_alpha.shape, dtype=torch.float64, requires_grad=True)
             for layer in _gated(model)]
    assert torch.autograd.gradcheck(lambda *p: cost(list(p)), probs)
    cost().backward()  # through P(z != 0) (eq. 8) to every layer's log_alpha
    assert all(layer.weight_log_alpha.grad.gt(0).all() for layer in _gated(model))


# ---------------------------------------------------------------------------
# ConstrainedStep(measure=...)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("measure", ["params", "macs"])
def test_a_step_constrains_the_expected_share_of_the_dense_count(measure):
    model, shape = _model("branches")
    cost = ExpectedCost(model, measure, shape)
    target = 0.6 * cost.dense  # a number of parameters or MACs: the share 0.6
    step = ConstrainedStep(model, torch.optim.SGD(paperlib.weight_parameters(model), lr=0.01), target=target,
                           gates_lr=0.1, dual_lr=1.0, measure=measure, input_shape=shape)
    assert step.objective.target.tolist() == [pytest.approx(0.6)]
    x, y = torch.randn(8, *shape), torch.randint(0, 10, (8,))
    for _ in range(3):
        with torch.no_grad():
            before = cost().item() / cost.dense
        record = step.roll(lambda: F.cross_entropy(model(x), y))
        assert record.densities.shape == (1,) and record.densities.item() == pytest.approx(before, rel=1e-6)
        assert record.violations.item() == pytest.approx(before - 0.6, rel=1e-5)
    assert record.multipliers.item() > 0  # the dense start violates the budget


@pytest.mark.parametrize("arguments, named", [
    (dict(measure="flops"), "measure"),
    (dict(measure="macs", grouping="layer"), "measure"),
    (dict(measure="macs", target=[0.5] * 6), "measure"),
    (dict(measure="params", target=1e9), "target"),  # more than the dense model has
    (dict(measure="macs", target=0.1), "target"),  # under what closing every gate leaves: the stem's 21%
    (dict(measure="macs", input_shape=None), "input_shape"),
    (dict(input_shape=SHAPE), "input_shape"),  # the density reads no graph
])
def test_budgets_refuse_what_they_cannot_count(arguments, named):
    model = paperlib.sparsify(Branches(), exclude="stem")
    settings = {**dict(target=0.5, gates_lr=0.1, dual_lr=0.1, input_shape=SHAPE), **arguments}
    with pytest.raises(ValueError, match=re.escape(named)):
        ConstrainedStep(model, **settings)


def test_a_budget_refuses_a_model_whose_own_forward_fx_cannot_trace():
    class Switched(nn.Module):  # its children are traced apart (leaves="auto"): no one graph holds the whole cost
        def __init__(self):
            super().__init__()
            self.branches = Branches()

        def forward(self, x):
            return self.branches(x) if x.mean() > 0 else -self.branches(x)

    with pytest.warns(UserWarning, match="Switched's forward"):
        model = paperlib.sparsify(Switched(), leaves="auto")
    assert any(isinstance(m, L0Layer) for m in model.modules())
    with pytest.raises(ValueError, match="measure='macs'.*measure='density'"), pytest.warns(UserWarning):
        ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1, measure="macs", input_shape=SHAPE, leaves="auto")
    ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1)  # the density needs no graph


def test_unstructured_gates_have_no_channels_to_count():
    model = paperlib.sparsify(Branches(), sparsity="unstructured")
    with pytest.raises(ValueError, match="measure"):
        ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1, measure="params", input_shape=SHAPE)


def test_a_macs_budget_on_resnet18_ends_with_a_purged_model_near_it():
    """resnet18 on real CIFAR-10 (5,000 training images at random, batch 32, 400 steps on one thread, about two
    minutes) under half the dense model's MACs, the gates' momentum damped (benchmarks/macs_budget.py, which runs
    the longer version and the book's settings): the purged model's MACs end within 2 points of the target."""
    from paperlib.harness.data import load_dataset
    try:
        train = load_dataset("cifar10").train
    except FileNotFoundError:
        pytest.skip("no CIFAR-10 under $PAPERLIB_DATA")
    spec = importlib.util.spec_from_file_location("macs_budget", SCRIPT)
    macs_budget = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(macs_budget)
    keep = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(0))[:5000]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        row = macs_budget.run("resnet18", "macs", 0.5, 400, train.images[keep], train.labels[keep], "damped")
    finally:
        torch.set_num_threads(threads)
    assert abs(row["gap (points)"]) < 2 and abs(row["expected (%)"] - 50) < 2, row
    assert row["purged params (%)"] < 90  # the budget on MACs removed parameters too
