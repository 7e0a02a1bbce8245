"""Pure alert statistics: spending over looks, one-sided bounds, the difference test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from monitor.sim.simulate import calibrated_pool
from monitor.stats.alerting import (
    disagreement,
    drop_bound,
    likelihood_upper_bound,
    look_error,
    upper_bound,
)
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.interval import interval_from_se
from monitor.stats.interval import t_quantile as estimator_t_quantile
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha


def _sample(
    rng: np.random.Generator, n_pool: int = 20_000, budget: float = 200.0
) -> tuple[LabeledSample, float]:
    score, label = calibrated_pool(n_pool, 0.1, rng)
    pred = (score >= 0.5).astype(np.int8)
    q = defensive_mix(q_star_falpha(score, pred, 0.5, 0.6), 0.1)
    pi, _ = inclusion_for_budget(q, budget)
    take = rng.random(n_pool) < pi
    sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
    return sample, falpha_exact(pred, label, 0.5)


def test_horizon_spending_is_uniform_and_anytime_sums_to_the_rate() -> None:
    assert look_error(0.05, 1, "horizon", 720) == pytest.approx(0.05 / 720)
    assert look_error(0.05, 500, "horizon", 720) == pytest.approx(0.05 / 720)
    total = sum(look_error(0.05, k, "anytime", 0) for k in range(1, 200_000))
    assert 0.0499 < total <= 0.05
    assert look_error(0.05, 10, "anytime", 0) < look_error(0.05, 9, "anytime", 0)
    with pytest.raises(ValueError, match="spending rule"):
        look_error(0.05, 1, "pocock", 10)
    with pytest.raises(ValueError, match="rate"):
        look_error(0.0, 1, "horizon", 10)


def test_one_sided_bound_is_the_estimators_own_interval_at_level_1_minus_2e(
    rng: np.random.Generator,
) -> None:
    """The estimator's interval with its super-population se and effective size."""
    sample, _ = _sample(rng)
    est = estimate_falpha(sample, 0.5, 0.95)
    assert est.se_model > est.se  # no finite-population correction: wider
    for error in (0.05, 0.005):
        hi = interval_from_se(
            est.value, est.se_model, est.n_labels, est.n_eff_model, 1 - 2 * error
        )[1]
        assert upper_bound(est, error) == pytest.approx(hi, rel=1e-12)
    design_99 = estimate_falpha(sample, 0.5, 0.99)
    assert design_99.upper < upper_bound(est, 0.005) < upper_bound(est, 1e-5) <= 1.0


def test_degenerate_estimate_uses_the_estimators_effective_size_not_the_kish_ess() -> None:
    """Issue 11: recall = 1 from 30 TPs at pi = 1 and 300 predicted negatives at pi = 0.01."""
    pred = np.array([1] * 30 + [0] * 300)
    label = pred.copy()
    pi = np.array([1.0] * 30 + [0.01] * 300)
    est = estimate_falpha(LabeledSample.poisson(np.full(330, 0.5), pred, label, pi), 0.0, 0.95)
    assert est.value == 1.0 and est.lower < 0.05
    # a healthy intrinsic recall of 0.70 is inside the calibration check's interval
    outside, lower = disagreement(est, 0.70, 0.05)
    assert not outside and lower < 0.05  # was 0.878 with Wilson on the Kish ESS of 30
    kish = Estimate(est.value, est.se, est.lower, est.upper, est.n_labels, est.ess, 0.95)
    outside, lower = disagreement(kish, 0.70, 0.05)
    assert outside and lower > 0.8  # the old behaviour, for estimates without n_eff
    # the upper bound of the model's recall is 1, whichever size the Wilson interval rests on
    assert upper_bound(est, 0.025) == upper_bound(kish, 0.025) == 1.0


def test_likelihood_upper_bound_is_a_t_bound_on_the_log_scale() -> None:
    t = estimator_t_quantile(1 - 2e-4, 50)
    assert likelihood_upper_bound(0.4, 0.1, 50, 1e-4) == pytest.approx(0.4 * math.exp(t * 0.1))
    assert likelihood_upper_bound(0.4, math.nan, 50, 1e-4) == 0.4  # no se: the point estimate
    assert math.isnan(likelihood_upper_bound(math.nan, 0.1, 50, 1e-4))


def test_undefined_estimates_give_nan_bounds() -> None:
    missing = Estimate.missing(0.95)
    assert math.isnan(upper_bound(missing, 0.01))
    assert math.isnan(drop_bound(missing, 0.8, 0.01, 0.01))
    outside, bound = disagreement(missing, 0.8, 0.01)
    assert outside is False
    assert math.isnan(bound)


def test_drop_bound_combines_both_errors_on_the_logit_scale() -> None:
    cur = Estimate(0.62, 0.03, 0.56, 0.68, 200, 120.0, 0.95)
    error = 1e-4
    assert drop_bound(cur, 0.8, 0.0, error) == pytest.approx(upper_bound(cur, error))
    t = estimator_t_quantile(1 - 2 * error, 200)
    se_logit = math.hypot(0.03 / (0.62 * 0.38), 0.02 / (0.8 * 0.2))
    expected = float(special.expit(special.logit(0.62) + t * se_logit))
    assert drop_bound(cur, 0.8, 0.02, error) == pytest.approx(expected, rel=1e-9)
    assert drop_bound(cur, 0.8, 0.02, error) > drop_bound(cur, 0.8, 0.0, error)
    # a degenerate current estimate (all gains equal) widens its Wilson bound on the raw scale
    perfect = Estimate(1.0, 0.0, 0.9, 1.0, 40, 40.0, 0.95)
    assert drop_bound(perfect, 0.9, 0.05, 0.01) == 1.0


def test_disagreement_is_two_sided() -> None:
    est = Estimate(0.6, 0.03, 0.54, 0.66, 250, 150.0, 0.95)
    assert disagreement(est, 0.62, 0.01)[0] is False
    outside, bound = disagreement(est, 0.85, 0.01)
    assert outside is True
    assert 0.6 < bound < 0.85
    outside, bound = disagreement(est, 0.30, 0.01)
    assert outside is True
    assert 0.30 < bound < 0.6


def test_strict_upper_bound_keeps_its_error_by_simulation(rng: np.random.Generator) -> None:
    # P(upper bound at error e < truth) should be about e or less; seeded, 600 repetitions
    score, label = calibrated_pool(20_000, 0.1, rng)
    pred = (score >= 0.5).astype(np.int8)
    truth = falpha_exact(pred, label, 0.5)
    q = defensive_mix(q_star_falpha(score, pred, 0.5, truth), 0.1)
    pi, _ = inclusion_for_budget(q, 250.0)
    misses_05 = misses_001 = 0
    reps = 600
    for _ in range(reps):
        take = rng.random(score.size) < pi
        est = estimate_falpha(
            LabeledSample.poisson(score[take], pred[take], label[take], pi[take]), 0.5, 0.95
        )
        misses_05 += upper_bound(est, 0.05) < truth
        misses_001 += upper_bound(est, 0.001) < truth
    assert misses_05 / reps < 0.08
    assert misses_001 / reps < 0.01


def test_fast_t_quantile_matches_the_estimators() -> None:
    from monitor.stats.interval import t_quantile

    for level in (0.9, 0.95, 0.9999, 1 - 2e-7):
        for n in (1, 2, 30, 1000):
            assert t_quantile(level, n) == pytest.approx(estimator_t_quantile(level, n), rel=1e-9)


def test_huge_standard_error_gives_the_whole_range_not_an_overflow() -> None:
    est = Estimate(0.5, 1e3, 0.0, 1.0, 40, 2.0, 0.95, 2.0, 1e3, 2.0)
    assert upper_bound(est, 1e-5) == 1.0
    assert disagreement(est, 1e-9, 1e-5) == (False, 0.0)
