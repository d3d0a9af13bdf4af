"""Hard-concrete gates (paper §2, App. A): closed forms against Monte Carlo.

Derivations used below (eq. 7, with L = log u - log(1 - u) ~ Logistic(0, 1)):

    s = sigmoid((L + log_alpha) / beta),   z = clamp(s (zeta - gamma) + gamma, 0, 1)

    z <= t  <=>  s <= (t - gamma) / (zeta - gamma) =: q
            <=>  L <= beta * logit(q) - log_alpha
    so  P(z <= t) = sigmoid(beta * logit(q_t) - log_alpha)          for 0 <= t < 1.

    t = 0:  q = -gamma / (zeta - gamma), logit(q) = log(-gamma / zeta)
            P(z = 0) = 1 - sigmoid(log_alpha - beta log(-gamma / zeta))    (eq. 8)
    z = 1:  s >= (1 - gamma) / (zeta - gamma), logit = log((1 - gamma) / (zeta - 1))
            P(z = 1) = sigmoid(log_alpha - beta log((1 - gamma) / (zeta - 1)))

With gamma = -0.1 and zeta = 1.1 both logs equal ln 11 (up to sign), so
P(z != 0) = sigmoid(log_alpha + beta ln 11) and P(z = 1) = sigmoid(log_alpha - beta ln 11).
The median of L is 0, hence the median gate of eq. 9.
"""

import math

import pytest
import torch

from paperlib.method import gates
from paperlib.method.gates import BETA, GAMMA, ZETA

LN11 = math.log(11.0)
LOG_ALPHAS = torch.tensor([-3.0, -2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0])
N_MC = 200_000


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def p_zero(log_alpha: float) -> float:
    return 1.0 - _sigmoid(log_alpha - BETA * math.log(-GAMMA / ZETA))


def p_one(log_alpha: float) -> float:
    return _sigmoid(log_alpha - BETA * math.log((1.0 - GAMMA) / (ZETA - 1.0)))


def cdf(t: float, log_alpha: float) -> float:
    """P(z <= t) for 0 <= t < 1."""
    q = (t - GAMMA) / (ZETA - GAMMA)
    return _sigmoid(BETA * _logit(q) - log_alpha)


def _binomial_tol(p: float, n: int, k: float = 5.0) -> float:
    # k standard errors, plus a floor for p close to 0 or 1 and the EPS clipping of u.
    return k * math.sqrt(max(p * (1.0 - p), 1e-4) / n) + 1e-5


@pytest.fixture(scope="module")
def mc_samples():
    """N_MC gate samples for each of LOG_ALPHAS, shape (len(LOG_ALPHAS), N_MC)."""
    gen = torch.Generator().manual_seed(1234)
    log_alpha = LOG_ALPHAS[:, None].expand(-1, N_MC).contiguous()
    with torch.no_grad():
        return gates.sample_gates(log_alpha, generator=gen)


def test_hyperparameters_match_table_4():
    assert (GAMMA, ZETA, BETA) == (-0.1, 1.1, 2.0 / 3.0)
    # The two logs of the derivation coincide for these values.
    assert math.log(-GAMMA / ZETA) == pytest.approx(-LN11)
    assert math.log((1 - GAMMA) / (ZETA - 1)) == pytest.approx(LN11)


def test_samples_lie_in_unit_interval(mc_samples):
    assert mc_samples.min() >= 0.0
    assert mc_samples.max() <= 1.0
    assert mc_samples.shape == (len(LOG_ALPHAS), N_MC)


def test_prob_active_matches_eq7_closed_form():
    la = torch.linspace(-6, 6, 25, dtype=torch.float64)
    expected = torch.sigmoid(la + BETA * LN11)
    torch.testing.assert_close(gates.prob_active(la), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("i", range(len(LOG_ALPHAS)))
def test_prob_active_against_monte_carlo(mc_samples, i):
    la = float(LOG_ALPHAS[i])
    p = float(gates.prob_active(torch.tensor(la, dtype=torch.float64)))
    assert p == pytest.approx(1.0 - p_zero(la), abs=1e-12)
    freq = (mc_samples[i] != 0).double().mean().item()
    assert abs(freq - p) <= _binomial_tol(p, N_MC), f"log_alpha={la}: MC P(z!=0)={freq}, eq. 8 gives {p}"


@pytest.mark.parametrize("i", range(len(LOG_ALPHAS)))
def test_point_masses_at_zero_and_one(mc_samples, i):
    la = float(LOG_ALPHAS[i])
    z = mc_samples[i]
    f0 = (z == 0).double().mean().item()
    f1 = (z == 1).double().mean().item()
    assert abs(f0 - p_zero(la)) <= _binomial_tol(p_zero(la), N_MC), (la, f0, p_zero(la))
    assert abs(f1 - p_one(la)) <= _binomial_tol(p_one(la), N_MC), (la, f1, p_one(la))
    # With these hyper-parameters P(z = 1) = sigmoid(log_alpha - beta ln 11).
    assert p_one(la) == pytest.approx(_sigmoid(la - BETA * LN11), rel=1e-12)
    # Both atoms carry real mass and there is a continuous part in between.
    assert f0 > 0.005 and f1 > 0.005
    assert 0.0 < 1.0 - f0 - f1 < 1.0


@pytest.mark.parametrize("i", [0, 3, 7])
def test_continuous_part_cdf(mc_samples, i):
    la = float(LOG_ALPHAS[i])
    z = mc_samples[i]
    for t in (0.1, 0.25, 0.5, 0.75, 0.9):
        freq = (z <= t).double().mean().item()
        expected = cdf(t, la)
        assert abs(freq - expected) <= _binomial_tol(expected, N_MC), (la, t, freq, expected)


@pytest.mark.parametrize("i", range(len(LOG_ALPHAS)))
def test_median_gate_is_empirical_median(mc_samples, i):
    la = LOG_ALPHAS[i]
    z = mc_samples[i]
    m = float(gates.median_gates(la))
    emp = z.median().item()
    assert abs(emp - m) <= 0.01, f"log_alpha={float(la)}: empirical median {emp}, eq. 9 gives {m}"
    # Defining property of a median, with binomial tolerance.
    tol = _binomial_tol(0.5, N_MC)
    assert (z <= m).double().mean().item() >= 0.5 - tol
    assert (z >= m).double().mean().item() >= 0.5 - tol


def test_median_gate_closed_form_divides_by_beta():
    la = torch.linspace(-3, 3, 13, dtype=torch.float64)
    expected = torch.clamp(torch.sigmoid(la / BETA) * (ZETA - GAMMA) + GAMMA, 0, 1)
    torch.testing.assert_close(gates.median_gates(la), expected)
    # Louizos et al.'s eq. 13 (no division by beta) is a different function.
    louizos = torch.clamp(torch.sigmoid(la) * (ZETA - GAMMA) + GAMMA, 0, 1)
    assert not torch.allclose(gates.median_gates(la), louizos)


@pytest.mark.parametrize("dtype,delta", [(torch.float64, 1e-6), (torch.float32, 1e-3)])
def test_median_exact_zero_one_thresholds(dtype, delta):
    thr = BETA * LN11
    med = lambda v: float(gates.median_gates(torch.tensor(v, dtype=dtype)))  # noqa: E731
    # 0 iff log_alpha <= -beta ln 11
    assert med(-thr - delta) == 0.0
    assert med(-thr - 5.0) == 0.0
    assert med(-thr + delta) > 0.0
    # 1 iff log_alpha >= beta ln 11
    assert med(thr + delta) == 1.0
    assert med(thr + 5.0) == 1.0
    assert med(thr - delta) < 1.0
    # Fractional strictly in between.
    for v in torch.linspace(-thr + 10 * delta, thr - 10 * delta, 21):
        assert 0.0 < med(float(v)) < 1.0
    if dtype == torch.float64:
        assert med(-thr) <= 1e-12
        assert med(thr) >= 1.0 - 1e-12


def test_reparametrised_gradient_flows_to_log_alpha():
    la = torch.linspace(-2.0, 2.0, 64, dtype=torch.float64).requires_grad_()
    z = gates.sample_gates(la, generator=torch.Generator().manual_seed(7))
    z.sum().backward()
    assert la.grad is not None and la.grad.abs().sum() > 0
    # Reproduce the same noise and compare with the analytic derivative
    # dz/dlog_alpha = (zeta - gamma) s (1 - s) / beta on the unclamped part, 0 elsewhere.
    u = torch.rand(la.shape, dtype=la.dtype, generator=torch.Generator().manual_seed(7))
    u = gates.EPS + (1 - 2 * gates.EPS) * u
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + la.detach()) / BETA)
    pre = s * (ZETA - GAMMA) + GAMMA
    inside = (pre > 0) & (pre < 1)
    expected = torch.where(inside, (ZETA - GAMMA) * s * (1 - s) / BETA, torch.zeros_like(s))
    torch.testing.assert_close(z.detach(), pre.clamp(0, 1))
    torch.testing.assert_close(la.grad, expected)
    assert inside.any() and (~inside).any()


def test_prob_active_and_median_are_differentiable():
    la = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    gates.prob_active(la).sum().backward()
    p = torch.sigmoid(la.detach() + BETA * LN11)
    torch.testing.assert_close(la.grad, p * (1 - p))


def test_sample_uses_fresh_noise():
    la = torch.zeros(1000)
    assert not torch.equal(gates.sample_gates(la), gates.sample_gates(la))


def test_initial_density_values_from_app_j4():
    assert round(100 * gates.initial_density(0.3), 2) == 92.03
    assert round(100 * gates.initial_density(0.05), 2) == 98.95


@pytest.mark.parametrize("rho", [0.05, 0.1, 0.3, 0.5, 0.7, 0.9])
def test_initial_density_equals_eq11(rho):
    psi = (-GAMMA / ZETA) ** BETA
    assert gates.initial_density(rho) == pytest.approx((1 - rho) / (1 - (1 - psi) * rho), rel=1e-10)
    assert gates.initial_log_alpha(rho) == pytest.approx(math.log((1 - rho) / rho))


@pytest.mark.parametrize("rho", [0.0, 1.0, -0.2, 1.5])
def test_initial_log_alpha_rejects_rho_outside_open_interval(rho):
    with pytest.raises(ValueError, match="rho_init"):
        gates.initial_log_alpha(rho)


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.5])
def test_init_log_alpha_mean_and_std(rho):
    torch.manual_seed(0)
    n = 100_000
    t = torch.empty(n, dtype=torch.float64)
    out = gates.init_log_alpha_(t, rho)
    assert out.data_ptr() == t.data_ptr()  # in place
    mean, std = t.mean().item(), t.std().item()
    assert abs(mean - math.log((1 - rho) / rho)) <= 5 * 1e-2 / math.sqrt(n)
    assert std == pytest.approx(1e-2, rel=0.02)
    t2 = torch.empty(n, dtype=torch.float64)
    gates.init_log_alpha_(t2, rho, std=0.5)
    assert t2.std().item() == pytest.approx(0.5, rel=0.02)


def test_clamp_log_alpha_bounds():
    assert gates.LOG_ALPHA_MIN == pytest.approx(math.log(0.01))
    assert gates.LOG_ALPHA_MAX == pytest.approx(math.log(100.0))
    t = torch.tensor([-50.0, -4.7, -4.0, 0.0, 4.0, 4.7, 50.0])
    gates.clamp_log_alpha_(t)
    expected = torch.tensor([math.log(0.01), math.log(0.01), -4.0, 0.0, 4.0, math.log(100.0), math.log(100.0)])
    torch.testing.assert_close(t, expected)
    p = torch.nn.Parameter(torch.tensor([10.0, -10.0]))
    gates.clamp_log_alpha_(p)  # works on leaf parameters (no autograd error)
    torch.testing.assert_close(p.data, torch.tensor([math.log(100.0), math.log(0.01)]))
