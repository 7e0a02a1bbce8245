"""The small-window benchmark's count intervals match their definitions; a cell runs end to end."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from benchmarks import small_windows as sw
from monitor.stats.interval import t_quantile
from monitor.stats.sample import LabeledSample


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
    assert len(cells) == 2 * len(sw.VARIANTS)
    for coverage, width in zip(cells[::2], cells[1::2], strict=True):
        assert 0.0 <= float(coverage) <= 1.0
        assert 0.0 <= float(width) <= 1.0


def test_score_type_recall_solves_its_quadratic_and_a_census_is_a_point() -> None:
    # 30 true positives audited with certainty; 25 predicted negatives at pi = 0.05, 5 of them
    # false negatives: TP = 30, FN = 100, kappa = (1 - pi) / pi = 19 (sampled and pseudo events
    # alike), so U(g) = 30 - 130 g and V(g) = 19 g^2 FN(g) = 570 g (1 - g) with FN(g) = 30/g - 30.
    pred = np.r_[np.ones(30), np.zeros(25)].astype(np.int8)
    label = np.r_[np.ones(35), np.zeros(20)].astype(np.int8)
    pi = np.r_[np.ones(30), np.full(25, 0.05)]
    sample = LabeledSample.poisson(np.full(55, 0.5), pred, label, pi)
    bounds = sw.score_type(sample, 0.0)
    assert bounds is not None
    t2 = t_quantile(sw.LEVEL, 35) ** 2
    roots = np.sort(np.roots([16900.0 + 570.0 * t2, -(7800.0 + 570.0 * t2), 900.0]).real)
    assert bounds == pytest.approx(tuple(roots), rel=1e-6)
    assert roots[0] < 30 / 130 < roots[1]
    census = LabeledSample.poisson(np.full(55, 0.5), pred, label, np.ones(55))
    assert sw.score_type(census, 0.5) == pytest.approx((60 / 65, 60 / 65))  # 2 TP / (2 TP + FN)
