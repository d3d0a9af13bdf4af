"""The paper's CI convention, Student's t, and the interval a difference of ours from the paper's falls in by chance."""

import math
import statistics

import numpy as np
import pytest

from analysis import intervals


@pytest.mark.parametrize("values, quantile", [([1.0, 2.0, 4.0], 4.303), ([1.0, 2.0, 4.0, 0.5, 3.0], 2.776),
                                               ([1.0, 2.0], 12.706)])
def test_our_mean_ci_uses_student_t_with_n_minus_1_degrees_of_freedom(values, quantile):
    """Quantiles from the printed t table (t_{0.975, 1} = 12.706, t_{0.975, 2} = 4.303, t_{0.975, 4} = 2.776)."""
    mean, ci = intervals.mean_ci(values)
    assert mean == pytest.approx(statistics.fmean(values))
    assert ci == pytest.approx(quantile * statistics.stdev(values) / math.sqrt(len(values)), rel=2e-4)
    assert ci > intervals.paper_ci(values)  # wider than the authors' 1.96 at every n
    assert intervals.mean_ci([1.5]) == (1.5, None)


def test_the_papers_ci_is_the_authors_convention_and_gives_back_its_spread():
    ci = intervals.paper_ci([1.0, 2.0, 4.0])
    assert ci == pytest.approx(1.96 * statistics.stdev([1.0, 2.0, 4.0]) / math.sqrt(3))
    assert intervals.spread_from_ci(ci, 3) == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert intervals.paper_ci([1.5]) is None


def test_our_ci_covers_the_mean_95_percent_of_the_time_with_three_seeds():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(4000):
        values = list(rng.normal(0.0, 1.0, 3))
        mean, ci = intervals.mean_ci(values)
        covered += abs(mean) <= ci
    assert covered / 4000 == pytest.approx(0.95, abs=0.012)  # 1.96 would cover about 80%


@pytest.mark.parametrize("dof, quantile", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (30, 2.0423),
                                           (1e6, 1.9600)])
def test_t_quantiles_match_the_printed_tables(dof, quantile):
    assert intervals.student_t_quantile(0.975, dof) == pytest.approx(quantile, abs=2e-4)
    assert intervals.student_t_quantile(0.025, dof) == pytest.approx(-quantile, abs=2e-4)


def test_t_cdf_against_closed_forms():
    """dof 1 is Cauchy, dof 2 has F(x) = 1/2 + x / (2 sqrt(x² + 2))."""
    for x in (-30.0, -1.3, 0.0, 0.4, 7.0):
        assert intervals.student_t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, abs=1e-9)
        assert intervals.student_t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(x * x + 2)), abs=1e-9)


def coverage(rng, our_runs, shift=0.0, trials=3000, paper_runs=5):
    """How often ours − the paper's mean falls inside the interval, over simulated tables."""
    inside = 0
    for _ in range(trials):
        paper = rng.normal(1.0, 0.1, paper_runs)
        ours = list(rng.normal(1.0 + shift, 0.1, our_runs))
        ci = intervals.paper_ci(list(paper))
        half = intervals.difference_interval(ci, paper_runs, ours)
        inside += abs(statistics.fmean(ours) - paper.mean()) <= half
    return inside / trials


def test_difference_interval_covers_95_percent_when_ours_and_the_papers_share_a_distribution():
    rng = np.random.default_rng(0)
    # One run of ours: the prediction interval is exact. Three: Welch's is close to exact.
    assert coverage(rng, 1) == pytest.approx(0.95, abs=0.012)
    assert coverage(rng, 3) == pytest.approx(0.95, abs=0.015)
    # The paper's CI itself is no such interval: one run of ours falls outside it far more often than 5%.
    outside_ci = sum(abs(rng.normal(1.0, 0.1) - (paper := rng.normal(1.0, 0.1, 5)).mean())
                     > intervals.paper_ci(list(paper)) for _ in range(3000)) / 3000
    assert outside_ci > 0.4
    # A real difference is caught: at three run-to-run standard deviations about half the time with one
    # run of ours against five of the paper's, at six nearly always.
    assert 0.3 < coverage(rng, 1, shift=0.3, trials=1000) < 0.6
    assert coverage(rng, 1, shift=0.6, trials=1000) < 0.1


def test_difference_interval_rejects_what_it_cannot_compute():
    with pytest.raises(ValueError, match="at least 2 runs"):
        intervals.difference_interval(0.1, 1, [1.0])
    with pytest.raises(ValueError, match="no runs"):
        intervals.difference_interval(0.1, 5, [])
    with pytest.raises(ValueError, match="p must be"):
        intervals.student_t_quantile(1.0, 3)
