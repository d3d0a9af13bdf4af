"""paperlib.method.constrained.ConstrainedStep: one object owns the step (eq. 4-6), on any model with gated layers."""

import copy
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import paperlib
from paperlib.harness import methods, records, training
from paperlib.harness.data import load_dataset
from paperlib.method.constrained import ConstrainedStep, gate_parameters, weight_parameters
from paperlib.method.gate_pass import ModelGates
from paperlib.method.lagrangian import AugmentedLagrangian, GradientAscent, LagrangeMultipliers, NuPI, dual_optimizer
from paperlib.method.layers import ConvBN, L0Layer
from paperlib.paper.models import LayerFactory, layer_densities, memory_format, model_density
from paperlib.method.objective import ConstrainedObjective, PenalizedObjective, augmented_lagrangian_term, parameter_groups
from paperlib.harness.presets import resolve_config


class Toy(nn.Module):
    """Not a zoo model: a gated convolution with its batch norm, and a gated linear layer deeper in a dict."""

    def __init__(self):
        super().__init__()
        layers = LayerFactory(rho_init=0.5)
        self.features = nn.Sequential(ConvBN(layers.conv(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)), nn.ReLU())
        self.head = nn.ModuleDict({"fc": layers.linear(8 * 6 * 6, 5)})

    def forward(self, x):
        return self.head["fc"](self.features(x).flatten(1))


def _toy():
    torch.manual_seed(0)
    return Toy()


def _data(n=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 6, 6, generator=g), torch.randint(0, 5, (n,), generator=g)


def _sgd(model, lr=0.1):
    return torch.optim.SGD(weight_parameters(model), lr=lr)


# ---------------------------------------------------------------------------
# The runner's step is the step it took before this object existed, bit for bit
# ---------------------------------------------------------------------------
def _reference_step(method, model, optimizer, gates_optimizer, gates, objective, x, y):
    """The runner's gated step as it was written out before :class:`ConstrainedStep` (methods._Gated.step,
    Method._descend and Constrained.step), from the same building blocks."""
    gate_pass = gates.sample(objective.term, objective.term_args())
    with gates.installed(gate_pass):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    lagrangian = loss + gate_pass.l2_penalty + gate_pass.density_term
    optimizer.zero_grad(set_to_none=True)
    gates_optimizer.zero_grad(set_to_none=True)
    lagrangian.backward()
    optimizer.step()
    gates_optimizer.step()
    if method.config.clamp_log_alpha:
        for layer in gates.layers:
            layer.clamp_log_alpha_()
    objective.dual_step(gate_pass.densities)
    return loss, lagrangian


CASES = {
    "layer-wise, restarts": dict(dataset="mnist", model="mlp", grouping="layer", target=[0.3, 0.3, 0.3], dual_lr=0.05),
    "model-wise, no restarts": dict(dataset="mnist", model="lenet5", target=0.5, dual_lr=0.05, dual_restarts=False),
    "nupi": dict(dataset="mnist", model="mlp", target=0.5, dual_lr=0.05, dual_restarts=False, dual_optimizer="nupi",
                 nupi_kp=2.0, nupi_ema=0.3),
    "augmented Lagrangian": dict(dataset="mnist", model="mlp", target=0.5, dual_lr=0.05, dual_restarts=False,
                                 dual_optimizer="augmented_lagrangian"),
    "penalized": dict(dataset="mnist", model="mlp", method="penalized", grouping="layer", lmbda=[0.5, 0.1, 1.0]),
    "batch norm, weight decay": dict(dataset="cifar10", model="wrn-16-1", target=0.5, dual_lr=0.05),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_runners_step_is_the_step_written_out_before_it_bit_for_bit(case):
    params = {"method": "constrained", "preset": "cpu", "gates_lr": 0.05, **CASES[case]}
    config = resolve_config(**params)
    method = methods.build_method(config)
    torch.manual_seed(0)
    model = method.build_model(10)
    model.to(memory_format=memory_format(model))
    reference = copy.deepcopy(model)
    initial_density = model_density(reference)
    method.attach(model)
    # the reference's optimisers, gate pass and objective, built as the runner built them
    twin = methods.build_method(config)
    twin.model = reference
    methods.Method._build_optimizers(twin, "train")
    gates = ModelGates(reference, config.grouping, config.weight_decay, config.detach_gates)
    if config.method == "constrained":
        objective = ConstrainedObjective(reference, config.target, config.grouping, dual_optimizer(
            config.dual_optimizer, config.dual_lr, config.dual_restarts, config.nupi_kp, config.nupi_ema))
    else:
        objective = PenalizedObjective(reference, config.lmbda, config.grouping)
    shape = (1, 28, 28) if config.dataset == "mnist" else (3, 32, 32)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, *shape, generator=g).contiguous(memory_format=memory_format(model))
        y = torch.randint(0, 10, (4,), generator=g)
        torch.manual_seed(5)
        step = method.step(x, y)
        torch.manual_seed(5)
        loss, lagrangian = _reference_step(method, reference, twin.optimizer, twin.gates_optimizer, gates, objective,
                                           x, y)
        assert torch.equal(step.loss, loss) and torch.equal(step.objective, lagrangian)
        for (name, ours), theirs in zip(model.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(ours, theirs), name
        if config.method == "constrained":
            assert torch.equal(method.objective.multipliers.value, objective.multipliers.value)
    assert not torch.equal(model_density(model), initial_density)  # the gates trained
    if config.method == "constrained":
        assert (objective.multipliers.value > 0).any()  # the dense start violates every target


#: A committed record whose first logged steps the runner's step must give again (MLP, layer-wise, restarts).
RECORD = Path(__file__).resolve().parents[1] / "runs" / "mlp_control" / "mlp-constrained-layer-t0.65-s1-paper"


def test_the_runners_step_gives_a_committed_records_first_logged_steps_again(tmp_path, monkeypatch):
    """The first three rows of the record's steps log (steps 0, 23 and 46 on real MNIST), recomputed with
    today's step, agree to the six significant digits the log keeps. Float sums differ across CPUs'
    instruction sets (:func:`paperlib.harness.training.device_name`), so the test runs on a CPU like the record's."""
    metrics = json.loads((RECORD / "metrics.json").read_text())
    if metrics["device_name"] != training.device_name(torch.device("cpu")):
        pytest.skip(f"record made on {metrics['device_name']}")
    params = {k: v for k, v in json.loads((RECORD / "params.json").read_text()).items() if k != "smoke"}
    try:
        load_dataset("mnist")
    except FileNotFoundError:
        pytest.skip("no MNIST under $PAPERLIB_DATA")
    monkeypatch.setenv("PAPERLIB_RUNS", str(tmp_path))
    runner = training.Runner(resolve_config(**params), progress=False)
    rows = records.load_record(RECORD)["steps"][:3]
    at = [round(float(row["epoch"]) * len(runner.train_loader)) for row in rows]
    assert at == [0, 23, 46]
    runner.method.model.train()
    for index, (x, y) in zip(range(at[-1] + 1), runner.train_loader):
        step = runner.method.step(x, y)
        if index in at:
            row = rows[at.index(index)]
            ours = {"loss": step.loss, **runner.method.step_log(step)}
            assert set(ours) == set(row) - {"epoch"}
            for name, value in ours.items():
                assert f"{value.item():.6g}" == row[name] or value.item() == pytest.approx(float(row[name]), rel=5e-6), \
                    (index, name)


# ---------------------------------------------------------------------------
# The step on anyone's model
# ---------------------------------------------------------------------------
def test_a_model_wise_target_is_reached_in_a_few_hundred_steps():
    model = _toy()
    x, y = _data()
    assert model_density(model).item() > 0.8
    step = ConstrainedStep(model, torch.optim.Adam(weight_parameters(model), lr=1e-2), target=0.4, gates_lr=0.05,
                           dual_lr=0.5)
    rolled = [step.roll(lambda: F.cross_entropy(model(x), y)) for _ in range(300)]
    assert max(r.multipliers.item() for r in rolled) > 1.0  # the constraint bound on the way
    final = model_density(model).item()
    assert abs(final - 0.4) < 0.02, final
    assert rolled[-1].loss.item() < 0.5 * rolled[0].loss.item()  # and the task was learnt meanwhile


def test_per_layer_targets_give_one_multiplier_per_gated_layer_in_module_order():
    model = _toy()
    step = ConstrainedStep(model, _sgd(model), target=[0.9, 0.2], gates_lr=0.1, dual_lr=0.5)
    x, y = _data(8)
    before = layer_densities(model).detach()
    record = step.roll(lambda: F.cross_entropy(model(x), y))
    assert torch.equal(record.violations, before - torch.tensor([0.9, 0.2]))
    assert record.violations[0] < 0 < record.violations[1]
    assert record.multipliers[0] == 0 and record.multipliers[1] == pytest.approx(0.5 * float(record.violations[1]))


def test_the_dual_step_uses_the_densities_measured_before_the_primal_step():
    """Simultaneous GDA (eq. 5): the primal step uses the current lambda, the dual step the violation at the
    iterate the primal step started from."""
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, None, target=0.5, gates_optimizer=torch.optim.SGD(
        [p for m in model.modules() if isinstance(m, L0Layer) for p in m.gate_parameters()], lr=100.0),
        dual_optimizer=GradientAscent(0.5, restarts=False), clamp_log_alpha=False)
    step.objective.multipliers.value = torch.tensor([2.0])
    before = copy.deepcopy(model)
    density = model_density(before)
    gates = [p for m in before.modules() if isinstance(m, L0Layer) for p in m.gate_parameters()]
    grads = torch.autograd.grad(2.0 * density, gates)  # the loss below does not reach the gates

    record = step.roll(lambda: 0.0 * F.cross_entropy(model(x), y))

    after = [p for m in model.modules() if isinstance(m, L0Layer) for p in m.gate_parameters()]
    for p, p0, g in zip(after, gates, grads):
        torch.testing.assert_close(p, p0 - 100.0 * g)  # descent with lambda = 2, the value before the dual step
    assert torch.equal(record.violations, density.detach().reshape(1) - 0.5)
    assert record.multipliers.item() == pytest.approx(2.0 + 0.5 * (density.item() - 0.5), abs=1e-6)
    assert model_density(model).item() < density.item() - 0.01  # the density moved: the order shows
    assert record.multipliers.item() != pytest.approx(2.0 + 0.5 * (model_density(model).item() - 0.5), abs=1e-3)


def test_ascent_raises_the_multiplier_of_a_violated_constraint_and_lowers_it_when_it_holds():
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), target=0.5, gates_lr=1e-3, dual_optimizer=GradientAscent(0.5, restarts=False))
    first = step.roll(lambda: F.cross_entropy(model(x), y))
    assert first.violations.item() > 0 and first.multipliers.item() == pytest.approx(0.5 * first.violations.item())
    step.objective.target = torch.tensor([0.99])  # now the constraint holds
    second = step.roll(lambda: F.cross_entropy(model(x), y))
    assert second.violations.item() < 0
    assert second.multipliers.item() == pytest.approx(first.multipliers.item() + 0.5 * second.violations.item())
    assert 0 < second.multipliers.item() < first.multipliers.item()


@pytest.mark.parametrize("restarts", [True, False])
def test_a_dual_restart_resets_the_multiplier_once_its_constraint_holds(restarts):
    """Eq. 6: with restarts lambda goes to zero as soon as g <= eps; without, it only decreases."""
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), target=0.99, gates_lr=0.1, dual_optimizer=GradientAscent(0.01, restarts=restarts))
    step.objective.multipliers.value = torch.tensor([3.0])
    record = step.roll(lambda: F.cross_entropy(model(x), y))
    assert record.violations.item() < 0
    assert record.multipliers.item() == (0.0 if restarts else pytest.approx(3.0 + 0.01 * record.violations.item()))


def test_nupi_runs_through_the_same_step():
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), target=0.3, gates_lr=0.01, dual_optimizer=NuPI(0.2, kp=3.0, ema=0.5))
    lam, xi = torch.zeros(1), torch.zeros(1)
    for _ in range(3):  # lambda <- max(0, lambda + lr (e_t + kp (xi_t - xi_{t-1}))), xi_t = nu xi_{t-1} + (1 - nu) e_t
        record = step.roll(lambda: F.cross_entropy(model(x), y))
        e = record.violations
        xi_next = 0.5 * xi + 0.5 * e
        lam, xi = torch.clamp(lam + 0.2 * (e + 3.0 * (xi_next - xi)), min=0), xi_next
        torch.testing.assert_close(record.multipliers, lam)
    assert lam.item() > 0


def test_the_augmented_lagrangian_runs_through_the_same_step():
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), target=0.3, gates_lr=0.01, dual_optimizer=AugmentedLagrangian(rho=2.0))
    step.objective.multipliers.value = torch.tensor([0.5])
    before = copy.deepcopy(model)
    record = step.roll(lambda: F.cross_entropy(model(x), y))
    density = model_density(before).reshape(1)
    term = augmented_lagrangian_term(density, torch.tensor([0.5]), torch.tensor([0.3]), 2.0)
    torch.testing.assert_close(record.objective - record.loss, term)  # no weight decay: the loss and the AL term
    torch.testing.assert_close(record.multipliers, torch.clamp(0.5 + 2.0 * (density.detach() - 0.3), min=0))


def test_a_penalty_never_changes_its_lambda():
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), penalty=[0.5, 2.0], gates_lr=0.1)
    for _ in range(5):
        before = layer_densities(model).detach()
        record = step.roll(lambda: F.cross_entropy(model(x), y))
        assert torch.equal(record.multipliers, torch.tensor([0.5, 2.0])) and record.violations is None
        torch.testing.assert_close(record.objective - record.loss, (torch.tensor([0.5, 2.0]) * before).sum())
    assert "objective" not in step.state_dict()  # nothing to resume but the optimisers
    assert (layer_densities(model) < before).all()  # the penalty lowered every density


def test_weight_decay_is_the_expected_l2_term_and_the_loss_fn_may_return_more_than_the_loss():
    model = _toy()
    x, y = _data(8)
    step = ConstrainedStep(model, _sgd(model), penalty=0.0, gates_lr=0.1, weight_decay=0.1)
    expected_l2 = ModelGates(model, "model", 0.1).sample(lambda d: d.sum(), ()).l2_penalty  # deterministic in theta
    record = step.roll(lambda: (F.cross_entropy(logits := model(x), y), logits))
    torch.testing.assert_close(record.objective - record.loss, expected_l2)
    assert record.output[0] is record.loss and record.output[1].shape == (8, 5)


def test_state_dict_resumes_the_multipliers_and_the_optimisers():
    model = _toy()
    x, y = _data(8)
    make = lambda m: ConstrainedStep(m, torch.optim.Adam(weight_parameters(m), lr=1e-2), target=0.4, gates_lr=0.05,
                                     dual_lr=0.5)
    step = make(model)
    for _ in range(3):
        step.roll(lambda: F.cross_entropy(model(x), y))
    twin_model = copy.deepcopy(model)
    twin = make(twin_model)
    twin.load_state_dict(copy.deepcopy(step.state_dict()))  # as from a checkpoint: no tensor shared
    assert torch.equal(twin.multipliers, step.multipliers) and twin.multipliers.item() > 0
    torch.manual_seed(3)
    ours = step.roll(lambda: F.cross_entropy(model(x), y))
    torch.manual_seed(3)
    theirs = twin.roll(lambda: F.cross_entropy(twin_model(x), y))
    assert torch.equal(ours.multipliers, theirs.multipliers)
    for a, b in zip(model.parameters(), twin_model.parameters()):
        assert torch.equal(a, b)


def test_the_gate_pass_is_compiled_where_asked():
    model = _toy()
    make = lambda compile_gates: ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1,
                                                 compile_gates=compile_gates)
    eager = make("auto").gates._pass  # on the CPU, auto is eager
    assert make("never").gates._pass is eager and make(False).gates._pass is eager
    assert make("always").gates._pass is not eager and make(True).gates._pass is not eager


def test_the_docstring_example_runs():
    """The training loop of ConstrainedStep's docstring, as written there."""
    source = re.search(r"::\n\n(.*?)\n\n    Arguments", ConstrainedStep.__doc__, re.S).group(1)
    code = "\n".join(line[8:] for line in source.splitlines())
    namespace = {}
    exec(compile(code, "<ConstrainedStep docstring>", "exec"), namespace)
    assert namespace["record"].multipliers.item() > 0 and paperlib.ConstrainedStep is ConstrainedStep


# ---------------------------------------------------------------------------
# Errors say what is wrong
# ---------------------------------------------------------------------------
def _gate_params(model):
    return parameter_groups(model)[2]


@pytest.mark.parametrize("build, message", [
    (lambda m: ConstrainedStep(nn.Sequential(nn.Linear(3, 2)), target=0.5, gates_lr=0.1, dual_lr=0.1),
     "Sequential has no gated layers"),
    (lambda m: ConstrainedStep(m, target=[0.5, 0.5, 0.5], gates_lr=0.1, dual_lr=0.1),
     "target has 3 values but the model has 2 gated layers (features.0.conv, head.fc)"),
    (lambda m: ConstrainedStep(m, target=[0.5, 0.5], grouping="model", gates_lr=0.1, dual_lr=0.1),
     "a model-wise target is one float"),
    (lambda m: ConstrainedStep(m, target=0.5, gates_lr=0.1, dual_lr=0.1, dual_optimizer=NuPI(0.1, kp=1.0)),
     "pass dual_lr (the paper's gradient ascent with dual restarts at that step size) or dual_optimizer, not both"),
    (lambda m: ConstrainedStep(m, target=0.5, gates_lr=0.1), "pass dual_lr"),
    (lambda m: ConstrainedStep(m, penalty=0.1, gates_lr=0.1, dual_optimizer=GradientAscent(0.1)),
     "a penalty has no multipliers to update; drop dual_optimizer"),
    (lambda m: ConstrainedStep(m, target=0.5, penalty=0.1, gates_lr=0.1, dual_lr=0.1), "not both"),
    (lambda m: ConstrainedStep(m, gates_lr=0.1), "not neither"),
    (lambda m: ConstrainedStep(m, penalty=0.1, gates_lr=0.1, dual_lr=0.1), "a penalty has no multipliers to update; drop dual_lr"),
    (lambda m: ConstrainedStep(m, torch.optim.SGD(m.parameters(), lr=0.1), target=0.5, gates_lr=0.1, dual_lr=0.1),
     "the weights' optimiser holds gate parameters"),
    (lambda m: ConstrainedStep(m, target=0.5, dual_lr=0.1), "pass gates_lr"),
    (lambda m: ConstrainedStep(m, target=0.5, dual_lr=0.1,
                               gates_optimizer=torch.optim.SGD(_gate_params(m)[:1], lr=0.1)),
     "gates_optimizer lacks the log_alpha of the gated layers head.fc"),
    (lambda m: ConstrainedStep(m, target=0.5, dual_lr=0.1, gates_optimizer=torch.optim.SGD(m.parameters(), lr=0.1)),
     "parameters that are not gates' log_alpha"),
])
def test_errors_say_what_is_wrong(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(_toy())


@pytest.mark.parametrize("dual", ["nupi", 0.1, LagrangeMultipliers(1, 0.1)])
def test_a_dual_optimizer_that_is_not_one_of_the_three_is_refused(dual):
    with pytest.raises(TypeError, match=re.escape("dual_optimizer must be paperlib.GradientAscent(lr, restarts)")):
        ConstrainedStep(_toy(), target=0.5, gates_lr=0.1, dual_optimizer=dual)


def test_a_loss_fn_that_returns_no_scalar_loss_is_named():
    model = _toy()
    step = ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1)
    x, _ = _data(4)
    with pytest.raises(ValueError, match=re.escape("0-d loss tensor") + ".*" + re.escape("(4, 5)")):
        step.roll(lambda: model(x))


# ---------------------------------------------------------------------------
# Every argument checked where it comes in (issue 51): the error names the argument and the value
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("target, named", [(1.5, "target"), (-0.1, "target"), (0, "target"), (float("nan"), "target"),
                                           (float("inf"), "target"), ([0.5, 1.5], "target[1]"),
                                           ([float("nan"), 0.5], "target[0]"), (torch.tensor(-0.5), "target")])
def test_a_target_outside_0_1_or_not_finite_is_refused(target, named):
    with pytest.raises(ValueError, match=re.escape(named) + r" must be in \(0, 1\].*got") as error:
        ConstrainedStep(_toy(), target=target, gates_lr=0.1, dual_lr=0.1)
    value = target[int(named[-2])] if isinstance(target, list) else getattr(target, "item", lambda: target)()
    assert str(value) in str(error.value)


def test_numpy_and_torch_numbers_are_numbers_and_1d_arrays_per_layer_lists():
    np = pytest.importorskip("numpy")
    expected = ConstrainedStep(_toy(), target=0.5, gates_lr=0.1, dual_lr=0.1)
    for target in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5), np.array(0.5)):
        step = ConstrainedStep(_toy(), target=target, gates_lr=np.float32(0.1), dual_lr=torch.tensor(0.1).item())
        assert step.objective.grouping == "model" and torch.equal(step.objective.target, expected.objective.target)
    for target in (torch.tensor([0.5, 0.25]), np.array([0.5, 0.25])):
        step = ConstrainedStep(_toy(), target=target, gates_lr=0.1, dual_lr=np.float64(0.1))
        assert step.objective.grouping == "layer" and step.objective.target.tolist() == [0.5, 0.25]
    step = ConstrainedStep(_toy(), penalty=np.float32(0.25), gates_lr=torch.tensor(0.1))
    assert step.multipliers.tolist() == [0.25]
    for bad in ("0.5", True, np.ones((1, 2))):
        with pytest.raises(TypeError, match="target must be a number"):
            ConstrainedStep(_toy(), target=bad, gates_lr=0.1, dual_lr=0.1)


@pytest.mark.parametrize("arguments, named", [
    (dict(gates_lr=0), "gates_lr"), (dict(gates_lr=-0.1), "gates_lr"), (dict(gates_lr=float("nan")), "gates_lr"),
    (dict(dual_lr=0), "dual_lr"), (dict(dual_lr=-1.0), "dual_lr"), (dict(dual_lr=float("inf")), "dual_lr"),
    (dict(weight_decay=-1e-4), "weight_decay"), (dict(weight_decay=float("nan")), "weight_decay"),
    (dict(target=None, penalty=-0.1, dual_lr=None), "penalty"),
    (dict(target=None, penalty=[0.1, -0.1], dual_lr=None), "penalty[1]"),
])
def test_non_positive_learning_rates_and_negative_coefficients_are_refused(arguments, named):
    with pytest.raises(ValueError, match=re.escape(named) + " must be"):
        ConstrainedStep(_toy(), **{**dict(target=0.5, gates_lr=0.1, dual_lr=0.1), **arguments})


def test_what_is_no_model_or_optimiser_is_named():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        ConstrainedStep([nn.Linear(2, 2)], target=0.5, gates_lr=0.1, dual_lr=0.1)
    model = _toy()
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        ConstrainedStep(model, weight_parameters(model), target=0.5, gates_lr=0.1, dual_lr=0.1)
    with pytest.raises(TypeError, match="model must be an nn.Module; got list"):
        weight_parameters(list(model.parameters()))


def test_the_weights_and_the_gates_split_the_parameters_and_a_gates_optimizer_of_ones_own_is_taken():
    model = _toy()
    weights, gates = weight_parameters(model), gate_parameters(model)
    assert {id(p) for p in weights}.isdisjoint(id(p) for p in gates)
    assert len(weights) + len(gates) == len(list(model.parameters()))
    assert all(p is layer.weight_log_alpha for p, layer in zip(gates, (m for m in model.modules()
                                                                       if isinstance(m, L0Layer))))
    own = torch.optim.Adam(gate_parameters(model), lr=0.1, betas=(0.5, 0.999))
    step = ConstrainedStep(model, torch.optim.SGD(weights, lr=0.1), target=0.5, gates_optimizer=own, dual_lr=0.1)
    assert step.gates_optimizer is own


def test_a_step_on_a_model_in_eval_mode_is_refused():
    model = _toy()
    step = ConstrainedStep(model, target=0.5, gates_lr=0.1, dual_lr=0.1)
    x, y = _data(4)
    before = [p.clone() for p in model.parameters()]
    model.eval()
    with pytest.raises(RuntimeError, match=r"eval mode.*model\.train\(\)"):
        step.roll(lambda: F.cross_entropy(model(x), y))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(TypeError, match="loss_fn"):
        step.roll(F.cross_entropy(model(x), y))
    model.train()
    assert step.roll(lambda: F.cross_entropy(model(x), y)).loss.isfinite()
