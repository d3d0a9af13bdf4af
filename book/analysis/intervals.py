"""Intervals for numbers aggregated over runs: ours, the paper's CI, and how far ours may fall from it by chance.

Ours: mean ± Student's t · std / sqrt(n) (:func:`mean_ci`). The paper's: mean ± 1.96 · std / sqrt(n), the
authors' convention (:func:`paper_ci`), narrower than t's at n = 5 (2.776) and far narrower at 2 or 3 seeds.
That CI is about the paper's *mean*: one run of ours drawn from the same distribution falls outside it far more
often than 5% of the time. Whether a difference exceeds chance needs the spread behind the CI
(:func:`spread_from_ci`): :func:`difference_interval` is the 95% interval of ours minus the paper's mean if both
are draws of one distribution (a prediction interval for one run of ours, Welch's for several).
"""

import math
import statistics

import numpy as np

#: The normal quantile of the authors' 95% CI (the paper's cells only; ours use Student's t).
PAPER_CI_Z = 1.96


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float | None]:
    """Mean and the half-width of its ``level`` confidence interval, t(n − 1) · std / sqrt(n); none for n = 1.

    >>> mean, half = mean_ci([1.0, 2.0, 3.0])  # t(0.975, 2) = 4.303, std 1
    >>> round(half, 3)
    2.484
    """
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    quantile = student_t_quantile(1 - (1 - level) / 2, len(values) - 1)
    return mean, quantile * statistics.stdev(values) / math.sqrt(len(values))


def paper_ci(values: list[float]) -> float | None:
    """The half-width of a 95% CI the authors' way, 1.96 · std / sqrt(n) (none for n = 1); never used for ours."""
    if len(values) < 2:
        return None
    return PAPER_CI_Z * statistics.stdev(values) / math.sqrt(len(values))


def spread_from_ci(ci: float, runs: int) -> float:
    """The sample standard deviation over ``runs`` runs behind a CI printed the authors' way."""
    return ci * math.sqrt(runs) / PAPER_CI_Z


def _log_t_density_norm(dof: float) -> float:
    return math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)


def student_t_density(x: float, dof: float) -> float:
    """The density of Student's t with ``dof`` degrees of freedom at ``x``."""
    return math.exp(_log_t_density_norm(dof) - (dof + 1) / 2 * math.log1p(x * x / dof))


def student_t_cdf(x: float, dof: float) -> float:
    """P(T <= x) for Student's t with ``dof`` > 0 degrees of freedom: Simpson's rule on the density over
    [0, |x|] in u = arctan(t), which maps the heavy tails onto a finite interval."""
    if dof <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {dof}")
    u = np.linspace(0.0, math.atan(abs(x)), 2001)
    t = np.tan(u)
    integrand = np.exp(_log_t_density_norm(dof) - (dof + 1) / 2 * np.log1p(t * t / dof)) * (1 + t * t)  # density · dt/du
    weights = np.ones_like(u)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    half = float(weights @ integrand) * (u[1] - u[0]) / 3
    return 0.5 + math.copysign(half, x)


def student_t_quantile(p: float, dof: float) -> float:
    """The x with P(T <= x) = p for Student's t: Newton's method from the normal quantile (for p > 1/2 the CDF is
    concave on x > 0 and the start lies below the root, so the iterates rise to it monotonically)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1 - p, dof)
    x = statistics.NormalDist().inv_cdf(p)
    for _ in range(200):
        step = (student_t_cdf(x, dof) - p) / student_t_density(x, dof)
        x -= step
        if abs(step) < 1e-10 * max(1.0, abs(x)):
            return x
    raise RuntimeError(f"the t quantile did not converge (p={p}, dof={dof})")


def difference_interval(paper_ci: float, paper_runs: int, ours: list[float], level: float = 0.95) -> float:
    """Half-width of the interval mean(ours) − the paper's mean falls in with probability ``level`` when both
    are draws of one normal distribution: Welch's for several runs of ours; for one, the prediction interval for
    one more of the paper's runs (``paper_runs − 1`` degrees of freedom)."""
    if paper_runs < 2:
        raise ValueError(f"a CI needs at least 2 runs, the paper's cell has {paper_runs}")
    if not ours:
        raise ValueError("no runs of ours to compare")
    paper_var = spread_from_ci(paper_ci, paper_runs) ** 2 / paper_runs
    if len(ours) == 1:
        our_var, dof = paper_var * paper_runs, paper_runs - 1
    else:
        our_var = statistics.variance(ours) / len(ours)
        denominator = paper_var ** 2 / (paper_runs - 1) + our_var ** 2 / (len(ours) - 1)
        dof = (paper_var + our_var) ** 2 / denominator if denominator else paper_runs + len(ours) - 2
    return student_t_quantile(1 - (1 - level) / 2, dof) * math.sqrt(paper_var + our_var)
