"""Hard-concrete stochastic gates (paper §2 and App. A; Louizos et al., 2018).

A gate ``z`` in [0, 1] stretches a binary-concrete sample ``s`` to (gamma, zeta) and clamps it back to [0, 1] (eq. 7):

    s = sigmoid((log u - log(1 - u) + log_alpha) / beta),   u ~ Unif(0, 1)
    z = clamp(s * (zeta - gamma) + gamma, 0, 1)

The clamp puts point masses at exactly 0 and 1, so the L0-"norm" of the gated parameters counts active gates only. The
paper's ``log phi`` is called ``log_alpha`` here, as by Louizos et al. and the authors' code. Everything here is a pure
function of ``log_alpha``, testable against Monte Carlo estimates without a layer.
"""

import math

import torch

#: Fixed hard-concrete hyper-parameters (App. A, Table 4).
GAMMA = -0.1
ZETA = 1.1
BETA = 2.0 / 3.0

#: Uniform noise is drawn from [EPS, 1 - EPS] to keep log(u / (1 - u)) finite, as in the authors' code.
EPS = 1e-6

#: Bounds for the optional clamp of ``log_alpha`` after each optimiser step (``clamp_log_alpha`` in the experiment
#: configuration, off by default). The paper is silent on it. The authors' code asks for [ln 0.01, ln 100], but its
#: clamp runs only when the model is not wrapped in DistributedDataParallel (``utils/exp_utils.py``), and every
#: published launch script uses ``torchrun``. Several of the paper's MNIST cells nevertheless match clamped runs better
#: (book/results_mnist_why.md, book/errata.md). The bounds put a floor of P(z != 0) = 0.047 under every gate (eq. 8),
#: which makes the App. L targets of 1% unreachable.
LOG_ALPHA_MIN = math.log(1e-2)
LOG_ALPHA_MAX = math.log(1e2)


def sample_gates(log_alpha: torch.Tensor, generator: torch.Generator | None = None,
                 uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One reparametrised gate sample per entry of ``log_alpha`` (eq. 7), differentiable, used for a whole minibatch
    as in the authors' code; from the noise ``uniform`` (u ~ Unif(0, 1), shaped like ``log_alpha``) when given
    (:mod:`paperlib.method.gate_pass` draws it once for all layers)."""
    u = uniform if uniform is not None else torch.rand(log_alpha.shape, dtype=log_alpha.dtype,
                                                       device=log_alpha.device, generator=generator)
    u = EPS + (1.0 - 2.0 * EPS) * u
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
    return torch.clamp(s * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def prob_active(log_alpha: torch.Tensor) -> torch.Tensor:
    """Closed-form P(z != 0) of each gate (eq. 8), differentiable; its sum is the expected L0-norm."""
    return torch.sigmoid(log_alpha - BETA * math.log(-GAMMA / ZETA))


def median_gates(log_alpha: torch.Tensor) -> torch.Tensor:
    """Deterministic test-time gates: the median of each gate's distribution (eq. 9), with the division by beta that
    Louizos et al.'s eq. 13 omits (App. A.1). Exactly 0 for log_alpha <= -beta ln 11, exactly 1 for >= beta ln 11."""
    s = torch.sigmoid(log_alpha / BETA)
    return torch.clamp(s * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


#: The ``rho_init`` of every gated layer unless told otherwise (``sparsify``, the paper's models): the paper's for
#: CIFAR-10 and TinyImageNet (Tables 6, 7), an initial density of 92% (eq. 11); MNIST's is 0.5, ImageNet's 0.05.
RHO_INIT = 0.3


def initial_log_alpha(rho_init: float) -> float:
    """Mean of the initial ``log_alpha`` (App. A.2): a larger ``rho_init`` starts from a sparser model."""
    if not 0.0 < rho_init < 1.0:
        raise ValueError(f"rho_init must be in the open interval (0, 1); got {rho_init!r}")
    return math.log((1.0 - rho_init) / rho_init)


def init_log_alpha_(log_alpha: torch.Tensor, rho_init: float, std: float = 1e-2) -> torch.Tensor:
    """Initialise ``log_alpha`` in place as N(log((1 - rho)/rho), std) (App. A.2; the paper writes N(0, 10^-2), the
    authors' code uses a standard deviation of 1e-2, as here)."""
    with torch.no_grad():
        return log_alpha.normal_(initial_log_alpha(rho_init), std)


def initial_density(rho_init: float) -> float:
    """Expected L0-density of a freshly initialised model, without the init noise (eq. 11): (1 - rho) / (1 - (1 - psi)
    rho), psi = (-gamma / zeta) ** beta; 92.03% for rho = 0.3, 98.95% for rho = 0.05 (App. J.6)."""
    return float(prob_active(torch.tensor(initial_log_alpha(rho_init), dtype=torch.float64)))


def clamp_log_alpha_(log_alpha: torch.Tensor) -> None:
    """Clamp ``log_alpha`` in place to [ln 0.01, ln 100] (the authors' code, when it runs on one process)."""
    with torch.no_grad():
        log_alpha.clamp_(LOG_ALPHA_MIN, LOG_ALPHA_MAX)
