"""The score-type interval, and the rule that widens a window's interval to it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit, logit

from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_weight
from monitor.stats.interval import sampled_variance, t_quantile
from monitor.stats.sample import AnswerGroups, LabeledSample
from monitor.stats.score_interval import (
    DISAGREE_ERROR,
    _positives_variance,
    score_type_bounds,
    scores_disagree,
    widened,
)

LEVEL = 0.95


def _window() -> LabeledSample:
    """30 true positives audited with certainty; 25 predicted negatives at pi = 0.05, 5 positive."""
    pred = np.r_[np.ones(30), np.zeros(25)].astype(np.int8)
    label = np.r_[np.ones(35), np.zeros(20)].astype(np.int8)
    pi = np.r_[np.ones(30), np.full(25, 0.05)]
    return LabeledSample.poisson(np.full(55, 0.5), pred, label, pi)


def test_recall_solves_its_quadratic() -> None:
    # TP = 30, FN = 100, kappa = (1 - pi) / pi = 19 (sampled and pseudo events alike), so
    # U(g) = 30 - 130 g and V(g) = 19 g^2 FN(g) = 570 g (1 - g) with FN(g) = 30/g - 30.
    sample = _window()
    est = estimate_falpha(sample, 0.0, LEVEL)
    lower, upper = score_type_bounds(sample, 0.0, est)
    t2 = t_quantile(LEVEL, 35) ** 2
    roots = np.sort(np.roots([16900.0 + 570.0 * t2, -(7800.0 + 570.0 * t2), 900.0]).real)
    assert (lower, upper) == pytest.approx(tuple(roots), rel=1e-6)
    assert roots[0] < 30 / 130 < roots[1]


def test_a_census_is_a_point_and_precision_keeps_its_interval() -> None:
    pred = _window().pred
    label = _window().label
    census = LabeledSample.poisson(np.full(55, 0.5), pred, label, np.ones(55))
    est = estimate_falpha(census, 0.5, LEVEL)
    assert score_type_bounds(census, 0.5, est) == pytest.approx((60 / 65, 60 / 65))
    precision = estimate_falpha(_window(), 1.0, LEVEL)
    assert score_type_bounds(_window(), 1.0, precision) == (precision.lower, precision.upper)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    alpha=st.sampled_from([0.0, 0.5, 0.8]),
    pi_neg=st.floats(0.005, 0.5),
)
def test_bounds_are_ordered_in_the_unit_interval_and_hold_the_estimate(
    seed: int, alpha: float, pi_neg: float
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 80))
    pred = (rng.random(n) < 0.4).astype(np.int8)
    label = (rng.random(n) < np.where(pred == 1, 0.7, 0.1)).astype(np.int8)
    pi = np.where(pred == 1, 1.0, pi_neg)
    sample = LabeledSample.poisson(rng.random(n), pred, label, pi)
    est = estimate_falpha(sample, alpha, LEVEL)
    lower, upper = score_type_bounds(sample, alpha, est)
    if not est.defined:
        assert math.isnan(lower) and math.isnan(upper)
        return
    assert 0.0 <= lower <= est.value <= upper <= 1.0


def test_the_scores_disagree_when_their_label_free_f_is_outside_the_interval() -> None:
    est = Estimate(0.40, 0.05, 0.30, 0.50, 200, 150.0, LEVEL, n_eff=150.0)
    # the estimator's logit-t interval at level 1 - DISAGREE_ERROR = 0.99
    half = t_quantile(1.0 - DISAGREE_ERROR, 200) * 0.05 / (0.40 * 0.60)
    lower, upper = (float(expit(logit(0.40) + s * half)) for s in (-1.0, 1.0))
    assert not scores_disagree(est, upper - 1e-4, 0.0)
    assert scores_disagree(est, upper + 1e-4, 0.0)
    assert not scores_disagree(est, lower + 1e-4, 0.0)
    assert scores_disagree(est, lower - 1e-4, 0.0)
    # the label-free F's own chance error widens the test
    assert not scores_disagree(est, upper + 1e-4, 0.05)
    assert not scores_disagree(Estimate.missing(LEVEL), 0.9, 0.0)


def test_widening_stretches_the_interval_and_nothing_else() -> None:
    est = Estimate(0.40, 0.05, 0.30, 0.50, 200, 150.0, LEVEL, n_eff=150.0)
    wide = widened(est, (0.10, 0.45))
    assert (wide.lower, wide.upper) == (0.10, 0.50)
    assert wide == replace(est, lower=0.10)
    assert widened(est, (math.nan, math.nan)) == est


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.0, 0.5]), g=st.floats(0.0, 1.0))
def test_the_predicted_positives_variance_is_the_ratios_own_at_every_value(
    seed: int, alpha: float, g: float
) -> None:
    """Two phases: the Poisson approximation fpc = 1 - pi r alone over-stated the answers' part
    (four calibrated delayed-label cells at 0.971-0.975 where the ratio covers 0.952-0.969)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 60))
    pred = (rng.random(n) < 0.5).astype(np.int8)
    label = (rng.random(n) < 0.6).astype(np.int8)
    group = rng.integers(0, 3, n) + 3 * pred
    rate = np.array([0.4, 0.7, 1.0, 0.5, 0.9, 1.0])[group]
    sample = LabeledSample.two_phase(
        rng.random(n), pred, label, rng.uniform(0.2, 1.0, n), rate=rate, group=group
    )
    f = sample.pred == 1
    assert sample.answers is not None
    answers = AnswerGroups(sample.answers.group[f], sample.answers.rate[f])
    vw = (sample.v * falpha_weight(sample.pred, sample.label, alpha))[f]
    resid = vw * (sample.label[f] - g)
    want = sampled_variance(resid, sample.v[f], sample.fpc[f], answers)
    assert _positives_variance(sample, alpha)(g) == pytest.approx(want, rel=1e-9, abs=1e-9)
