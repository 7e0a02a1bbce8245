"""The small-window benchmark's count intervals match their definitions; a cell runs end to end."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from benchmarks import small_windows as sw


def test_clopper_pearson_matches_scipy_exact_interval() -> None:
    ci = stats.binomtest(8, 20).proportion_ci(0.95, method="exact")
    assert sw.clopper_pearson(8.0, 20.0) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert sw.clopper_pearson(0.0, 20.0)[0] == 0.0
    assert sw.clopper_pearson(20.0, 20.0)[1] == 1.0


def test_jeffreys_is_the_beta_posterior_quantiles() -> None:
    lower, upper = sw.jeffreys(8.0, 20.0)
    assert lower == pytest.approx(stats.beta.ppf(0.025, 8.5, 12.5), rel=1e-9)
    assert upper == pytest.approx(stats.beta.ppf(0.975, 8.5, 12.5), rel=1e-9)
    assert sw.jeffreys(0.0, 20.0)[0] == 0.0


def test_mid_p_bounds_leave_half_the_observed_probability_in_each_tail() -> None:
    lower, upper = sw.mid_p(8.0, 20.0)
    low = stats.binom(20, lower)
    assert low.sf(8) + low.pmf(8) / 2 == pytest.approx(0.025, abs=1e-9)
    high = stats.binom(20, upper)
    assert high.cdf(7) + high.pmf(8) / 2 == pytest.approx(0.025, abs=1e-9)
    exact = sw.clopper_pearson(8.0, 20.0)
    assert exact[0] < lower < upper < exact[1]  # mid-p is inside the exact interval


def test_one_cell_runs_and_reports_every_variant() -> None:
    row = sw.run_cell(20, 0.2, 0.5, 5, np.random.default_rng(3), scenario="drift")
    cells = row.split("|")[1].split()
    assert len(cells) == 2 * len(sw.COLUMNS)  # the variants, their intersection, the daemon's rule
    for coverage, width in zip(cells[::2], cells[1::2], strict=True):
        assert 0.0 <= float(coverage) <= 1.0
        assert 0.0 <= float(width) <= 1.0


def test_intersect_keeps_what_both_intervals_hold() -> None:
    assert sw.intersect((0.2, 0.7), (0.4, 0.9)) == (0.4, 0.7)
    assert sw.intersect((0.2, 0.7), None) is None
    disjoint = sw.intersect((0.1, 0.2), (0.3, 0.4))  # empty: covers nothing
    assert disjoint is not None and disjoint[0] > disjoint[1]
