"""Lagrange multipliers: projected gradient ascent (eq. 5) and dual restarts (eq. 6, App. G); nuPI and the
augmented Lagrangian beyond the paper.

Includes oracle tests against Cooper 1.0 (the authors' library) on a toy
problem with a known KKT point.
"""

import math

import numpy as np
import pytest
import torch

from paperlib.method.lagrangian import (AugmentedLagrangian, GradientAscent, LagrangeMultipliers, NuPI,
                                       NuPIMultipliers, dual_optimizer)
from paperlib.method.objective import augmented_lagrangian_term, linear_term


# ---------------------------------------------------------------------------
# Single updates
# ---------------------------------------------------------------------------
def test_initialised_at_zero():
    m = LagrangeMultipliers(3, lr=0.1)
    assert torch.equal(m.value, torch.zeros(3))


@pytest.mark.parametrize("restarts", [True, False])
def test_grows_by_exactly_lr_times_violation_while_infeasible(restarts):
    # dyadic numbers: float32 arithmetic is exact, so equality can be asserted
    m = LagrangeMultipliers(3, lr=0.5, dual_restarts=restarts)
    violations = [torch.tensor([0.25, 1.0, 0.125]), torch.tensor([0.5, 0.0625, 2.0]), torch.tensor([1.0, 1.0, 1.0])]
    expected = torch.zeros(3)
    for v in violations:
        expected = expected + 0.5 * v
        out = m.step(v)
        assert torch.equal(m.value, expected)
        assert torch.equal(out, expected)
    # non-dyadic learning rate
    m = LagrangeMultipliers(2, lr=7e-4, dual_restarts=restarts)
    ref = torch.zeros(2, dtype=torch.float64)
    for t in range(50):
        v = torch.tensor([0.3 + 0.01 * t, 0.05], dtype=torch.float64)
        ref = ref + 7e-4 * v
        m.step(v)
    torch.testing.assert_close(m.value.double(), ref, rtol=1e-5, atol=1e-9)


def test_projection_at_zero_without_restarts():
    m = LagrangeMultipliers(2, lr=1.0, dual_restarts=False)
    m.step(torch.tensor([2.0, 0.5]))
    assert torch.equal(m.value, torch.tensor([2.0, 0.5]))
    # a negative violation lowers the multiplier by lr * |violation| ...
    m.step(torch.tensor([-0.75, -0.25]))
    assert torch.equal(m.value, torch.tensor([1.25, 0.25]))
    # ... but never below zero
    m.step(torch.tensor([-0.75, -1.0]))
    assert torch.equal(m.value, torch.tensor([0.5, 0.0]))
    m.step(torch.tensor([-10.0, -10.0]))
    assert torch.equal(m.value, torch.zeros(2))
    # a zero violation leaves it unchanged
    m.step(torch.tensor([3.0, 1.0]))
    m.step(torch.tensor([0.0, 0.0]))
    assert torch.equal(m.value, torch.tensor([3.0, 1.0]))
    assert (m.value >= 0).all()


def test_dual_restart_resets_as_soon_as_feasible():
    m = LagrangeMultipliers(3, lr=1.0, dual_restarts=True)
    m.step(torch.tensor([2.0, 2.0, 2.0]))
    assert torch.equal(m.value, torch.tensor([2.0, 2.0, 2.0]))
    # tiny negative, exactly zero and positive violations
    m.step(torch.tensor([-1e-6, 0.0, 0.5]))
    assert torch.equal(m.value, torch.tensor([0.0, 0.0, 2.5])), "eq. 6: lambda = 0 whenever g <= eps"
    m.step(torch.tensor([0.25, 0.25, -3.0]))
    assert torch.equal(m.value, torch.tensor([0.25, 0.25, 0.0]))


def test_no_restart_keeps_accumulated_multiplier():
    m = LagrangeMultipliers(2, lr=1.0, dual_restarts=False)
    m.step(torch.tensor([2.0, 2.0]))
    m.step(torch.tensor([-1e-6, 0.0]))
    assert m.value[0].item() == pytest.approx(2.0 - 1e-6)
    assert m.value[1].item() == 2.0


def test_state_dict_round_trip():
    m = LagrangeMultipliers(3, lr=0.25, dual_restarts=False)
    m.step(torch.tensor([1.0, 2.0, 3.0]))
    state = m.state_dict()
    m.step(torch.tensor([1.0, 1.0, 1.0]))  # must not alter the saved state
    assert torch.equal(state["value"], torch.tensor([0.25, 0.5, 0.75]))
    other = LagrangeMultipliers(3, lr=99.0, dual_restarts=True)
    other.load_state_dict(state)
    assert torch.equal(other.value, state["value"])
    assert other.lr == 0.25 and other.dual_restarts is False
    # same behaviour afterwards
    ref = LagrangeMultipliers(3, lr=0.25, dual_restarts=False)
    ref.load_state_dict(m.state_dict())
    other.load_state_dict(m.state_dict())
    for v in (torch.tensor([-1.0, 0.5, -4.0]), torch.tensor([2.0, -0.5, 0.0])):
        assert torch.equal(other.step(v), ref.step(v))


@pytest.mark.parametrize("make, named", [
    (lambda v: GradientAscent(v), "lr"), (lambda v: NuPI(v, kp=1.0), "lr"), (lambda v: AugmentedLagrangian(v), "rho"),
    (lambda v: dual_optimizer("augmented_lagrangian", v, restarts=False), "rho")])
@pytest.mark.parametrize("value", [0, -1e-3, float("nan"), float("inf")])
def test_a_dual_optimizer_refuses_a_step_that_is_not_positive_and_finite(make, named, value):
    with pytest.raises(ValueError, match=named + " must be a step size > 0"):
        make(value)


def test_the_configurations_words_make_the_dual_optimizers_that_build_the_multipliers():
    made = dual_optimizer("gradient_ascent", np.float32(0.5), restarts=False)
    assert made == GradientAscent(0.5, restarts=False) and isinstance(made.lr, float)
    m = made.multipliers(3)
    assert isinstance(m, LagrangeMultipliers) and (m.lr, m.dual_restarts) == (0.5, False)
    n = dual_optimizer("nupi", 0.1, restarts=False, kp=2.0, ema=0.5).multipliers(2)
    assert isinstance(n, NuPIMultipliers) and (n.lr, n.kp, n.ema_nu) == (0.1, 2.0, 0.5)
    a = dual_optimizer("augmented_lagrangian", 2.0, restarts=False).multipliers(1)
    assert not a.dual_restarts and a.lr == 2.0


def test_zero_constraints_raises():
    with pytest.raises(ValueError):
        LagrangeMultipliers(0, lr=0.1)


@pytest.mark.parametrize("shape", [(2,), (4,), (1, 3), (3, 1)])
def test_wrong_violation_shape_raises(shape):
    m = LagrangeMultipliers(3, lr=0.1)
    with pytest.raises(ValueError, match="3"):
        m.step(torch.ones(shape))
    assert torch.equal(m.value, torch.zeros(3))


def test_step_ignores_autograd_history():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    m = LagrangeMultipliers(2, lr=0.5)
    m.step(x * 2 - 1)
    assert not m.value.requires_grad
    assert torch.equal(m.value, torch.tensor([0.5, 1.5]))


# ---------------------------------------------------------------------------
# Toy problem with a known KKT point:
#   min ||x - a||^2  s.t.  A x <= b,   a = (1, 1, 1),  A = [[1, 1, 1], [1, 0, 0]],  b = (1, 0)
# Both constraints are active: lambda* = 2 (A A^T)^-1 (A a - b) = (1, 1),
# x* = a - A^T lambda* / 2 = (0, 0.5, 0.5).
# ---------------------------------------------------------------------------
A_MAT = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
B_VEC = torch.tensor([1.0, 0.0])
A_VEC = torch.tensor([1.0, 1.0, 1.0])
X_STAR = torch.tensor([0.0, 0.5, 0.5])
LAMBDA_STAR = torch.tensor([1.0, 1.0])
X0 = torch.tensor([-1.0, -1.0, -1.0])  # feasible start: the projection at 0 is exercised
PRIMAL_LR, DUAL_LR, STEPS = 0.05, 0.05, 1500


def _loss(x):
    return (x - A_VEC).pow(2).sum()


def _violation(x):
    return A_MAT @ x - B_VEC


def test_toy_kkt_point_is_correct():
    assert torch.allclose(_violation(X_STAR), torch.zeros(2))
    grad = 2 * (X_STAR - A_VEC) + A_MAT.T @ LAMBDA_STAR  # stationarity
    assert torch.allclose(grad, torch.zeros(3))
    assert (LAMBDA_STAR > 0).all()


def run_ours(steps=STEPS):
    x = X0.clone().requires_grad_()
    opt = torch.optim.SGD([x], lr=PRIMAL_LR)
    mult = LagrangeMultipliers(2, lr=DUAL_LR, dual_restarts=False)
    xs, lams, unprojected = [], [], []
    for _ in range(steps):
        opt.zero_grad()
        g = _violation(x)
        lagrangian = _loss(x) + torch.sum(mult.value * g)
        lagrangian.backward()
        unprojected.append(mult.value + DUAL_LR * g.detach())
        opt.step()  # primal step with lambda_t
        mult.step(g.detach())  # dual step with g(x_t): simultaneous GDA
        xs.append(x.detach().clone())
        lams.append(mult.value.clone())
    return torch.stack(xs), torch.stack(lams), torch.stack(unprojected)


def run_cooper(dual_optimizer="gradient_ascent", steps=STEPS, kp=0.5, ema_nu=0.3):
    """Cooper 1.0's simultaneous updates: SGD ascent on a Lagrangian, its nuPI (init_type ZEROS) on a
    Lagrangian, or SGD ascent on its AugmentedLagrangian formulation (penalty coefficient = the dual lr)."""
    cooper = pytest.importorskip("cooper")
    augmented = dual_optimizer == "augmented_lagrangian"

    class Toy(cooper.ConstrainedMinimizationProblem):
        def __init__(self):
            super().__init__()
            self.ineq = cooper.Constraint(
                constraint_type=cooper.ConstraintType.INEQUALITY,
                formulation_type=cooper.formulations.AugmentedLagrangian if augmented else cooper.formulations.Lagrangian,
                multiplier=cooper.multipliers.DenseMultiplier(num_constraints=2),
                penalty_coefficient=cooper.penalty_coefficients.DensePenaltyCoefficient(torch.full((2,), DUAL_LR))
                if augmented else None,
            )

        def compute_cmp_state(self, x):
            return cooper.CMPState(
                loss=_loss(x), observed_constraints={self.ineq: cooper.ConstraintState(violation=_violation(x))}
            )

    cmp = Toy()
    x = X0.clone().requires_grad_()
    primal = torch.optim.SGD([x], lr=PRIMAL_LR)
    if dual_optimizer == "nupi":
        dual = cooper.optim.nuPI(cmp.dual_parameters(), lr=DUAL_LR, Kp=kp, Ki=1.0, ema_nu=ema_nu,
                                 init_type=cooper.optim.nuPIInitType.ZEROS, maximize=True)
    else:
        dual = torch.optim.SGD(cmp.dual_parameters(), lr=DUAL_LR, maximize=True)
    optimizer = cooper.optim.SimultaneousOptimizer(cmp=cmp, primal_optimizers=primal, dual_optimizers=dual)
    xs, lams = [], []
    for _ in range(steps):
        optimizer.roll(compute_cmp_state_kwargs={"x": x})
        xs.append(x.detach().clone())
        lams.append(cmp.ineq.multiplier().detach().clone())
    return torch.stack(xs), torch.stack(lams), cooper.__version__


def run_ours_beyond(dual_optimizer, steps=STEPS, kp=0.5, ema_nu=0.3):
    """Simultaneous updates with nuPI multipliers or on the augmented Lagrangian (rho = the dual lr)."""
    x = X0.clone().requires_grad_()
    opt = torch.optim.SGD([x], lr=PRIMAL_LR)
    if dual_optimizer == "nupi":
        mult = NuPIMultipliers(2, lr=DUAL_LR, kp=kp, ema_nu=ema_nu)
    else:
        mult = LagrangeMultipliers(2, lr=DUAL_LR, dual_restarts=False)
    xs, lams = [], []
    for _ in range(steps):
        opt.zero_grad()
        g = _violation(x)
        term = (augmented_lagrangian_term(g, mult.value, torch.zeros(2), DUAL_LR) if dual_optimizer != "nupi"
                else linear_term(g, mult.value, torch.zeros(2)))
        (_loss(x) + term).backward()
        opt.step()
        mult.step(g.detach())
        xs.append(x.detach().clone())
        lams.append(mult.value.clone())
    return torch.stack(xs), torch.stack(lams)


@pytest.mark.parametrize("dual_optimizer", ["nupi", "augmented_lagrangian"])
def test_beyond_the_paper_matches_cooper_and_converges_to_kkt(dual_optimizer):
    """nuPI and the augmented Lagrangian: Cooper 1.0's updates to 1e-6 at every step, ending at the KKT point."""
    ox, olam = run_ours_beyond(dual_optimizer)
    cx, clam, _ = run_cooper(dual_optimizer)
    torch.testing.assert_close(olam, clam, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ox, cx, rtol=1e-6, atol=1e-6)
    assert (olam[:50] == 0).any() and (olam[-1] > 0).all()  # the projection acted, the multipliers left 0
    torch.testing.assert_close(ox[-1], X_STAR, atol=1e-4, rtol=0)
    torch.testing.assert_close(olam[-1], LAMBDA_STAR, atol=1e-4, rtol=0)


def test_nupi_without_proportional_term_is_gradient_ascent_and_its_first_step_kicks():
    e = [torch.tensor([0.4, -0.2]), torch.tensor([0.1, 0.3]), torch.tensor([-0.5, 0.2])]
    plain, pi0 = LagrangeMultipliers(2, lr=0.1, dual_restarts=False), NuPIMultipliers(2, lr=0.1, kp=0.0)
    for v in e:
        assert torch.equal(plain.step(v), pi0.step(v))
    pi = NuPIMultipliers(2, lr=0.1, kp=2.0, ema_nu=0.5)
    torch.testing.assert_close(pi.step(e[0]), torch.clamp(0.1 * (1 + 2.0 * 0.5) * e[0], min=0))  # xi_{-1} = 0
    restored = NuPIMultipliers(2, lr=0.5, kp=0.0)
    restored.load_state_dict(pi.state_dict())
    torch.testing.assert_close(restored.step(e[1]), pi.step(e[1]))
    with pytest.raises(ValueError, match="kp"):
        NuPI(0.1, kp=-1.0)
    with pytest.raises(ValueError, match="ema"):
        NuPI(0.1, kp=1.0, ema=1.0)


def test_matches_cooper_simultaneous_gda_and_converges_to_kkt():
    cx, clam, version = run_cooper()
    assert version.startswith("1.0"), f"oracle expects Cooper 1.0.x, found {version}"
    ox, olam, unprojected = run_ours()
    # the projection max(0, .) was actually active at some step (and multipliers did leave 0)
    assert (unprojected < 0).any()
    assert (olam[:50] == 0).any() and (olam[-1] > 0).all()
    torch.testing.assert_close(olam, clam, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ox, cx, rtol=1e-6, atol=1e-6)
    for x_T, lam_T in ((ox[-1], olam[-1]), (cx[-1], clam[-1])):
        torch.testing.assert_close(x_T, X_STAR, atol=1e-4, rtol=0)
        torch.testing.assert_close(lam_T, LAMBDA_STAR, atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------
# Dual restarts (§3.3, App. G): a 1-D "density" x with a weak pull towards
# being dense, f(x) = kappa/2 (x - 1)^2, and the constraint x <= eps, started
# infeasible at x0 = 0.9 > eps = 0.3. KKT: x* = eps, lambda* = kappa (1 - eps).
# Without restarts the multiplier accumulated while infeasible keeps pushing
# after feasibility is reached and x overshoots deep into the interior; with
# restarts lambda drops to 0 at once and x settles at the boundary.
# ---------------------------------------------------------------------------
EPS_TARGET, KAPPA, X_INIT = 0.3, 0.1, 0.9


def run_1d(restarts, steps=3000, primal_lr=1e-3, dual_lr=0.3):
    x = torch.tensor([X_INIT], requires_grad=True)
    opt = torch.optim.SGD([x], lr=primal_lr)
    mult = LagrangeMultipliers(1, lr=dual_lr, dual_restarts=restarts)
    xs, lams = [], []
    for _ in range(steps):
        opt.zero_grad()
        g = x - EPS_TARGET
        (0.5 * KAPPA * (x - 1).pow(2) + mult.value * g).sum().backward()
        opt.step()
        mult.step(g.detach())
        xs.append(x.item())
        lams.append(mult.value.item())
    return xs, lams


def test_dual_restarts_keep_iterate_at_boundary_without_them_it_overshoots():
    xr, lr_ = run_1d(True)
    xn, ln_ = run_1d(False)
    first_r = next(i for i, v in enumerate(xr) if v <= EPS_TARGET)
    first_n = next(i for i, v in enumerate(xn) if v <= EPS_TARGET)
    # identical while infeasible: restarts only act on satisfied constraints
    assert first_r == first_n
    assert xr[: first_r + 1] == xn[: first_n + 1]

    # with restarts: only a slight overshoot, and the end of training sits at the boundary
    assert min(xr[first_r:]) >= EPS_TARGET - 0.015
    tail = xr[-1000:]
    assert max(tail) - EPS_TARGET <= 0.005, "approximately feasible at the end"
    assert min(tail) >= EPS_TARGET - 0.005, "near the boundary, not in the interior"
    assert abs(xr[-1] - EPS_TARGET) <= 0.005
    # lambda is 0 right after every feasible iterate
    for t in range(1, len(xr)):
        if xr[t - 1] <= EPS_TARGET:
            assert lr_[t] == 0.0

    # without restarts: the accumulated multiplier pushes x deep into the interior
    assert min(xn[first_n:]) <= EPS_TARGET - 0.5
    assert xn[-1] <= EPS_TARGET - 0.2, "still over-sparsified at the end of training"
    feasible_but_pushing = sum(1 for t in range(1, len(xn)) if xn[t - 1] < EPS_TARGET and ln_[t] > 0)
    assert feasible_but_pushing >= 50
    assert max(ln_) > 10 * KAPPA * (1 - EPS_TARGET)  # far above lambda*
    assert math.isfinite(xn[-1])
