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
    look_error,
    lower_bound,
    upper_bound,
)
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_exact
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
    sample, _ = _sample(rng)
    est95 = estimate_falpha(sample, 0.5, 0.95)
    est90 = estimate_falpha(sample, 0.5, 0.90)
    est99 = estimate_falpha(sample, 0.5, 0.99)
    assert upper_bound(est95, 0.05) == pytest.approx(est90.upper, rel=1e-12)
    assert lower_bound(est95, 0.05) == pytest.approx(est90.lower, rel=1e-12)
    assert upper_bound(est95, 0.005) == pytest.approx(est99.upper, rel=1e-12)
    strict = upper_bound(est95, 1e-5)
    assert est99.upper < strict <= 1.0
    assert lower_bound(est95, 1e-5) < est99.lower


def test_undefined_estimates_give_nan_bounds() -> None:
    missing = Estimate.missing(0.95)
    assert math.isnan(upper_bound(missing, 0.01))
    assert math.isnan(lower_bound(missing, 0.01))
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
    from monitor.stats.alerting import t_quantile

    for level in (0.9, 0.95, 0.9999, 1 - 2e-7):
        for n in (1, 2, 30, 1000):
            assert t_quantile(level, n) == pytest.approx(estimator_t_quantile(level, n), rel=1e-9)
