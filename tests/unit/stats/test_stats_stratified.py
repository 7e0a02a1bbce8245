"""The two-stratum estimator of seed 003 and its agreement with the general estimator."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.sample import LabeledSample
from monitor.stats.stratified import stratified_falpha


def _stratified_sample(
    rng: np.random.Generator, n1: int, n0: int
) -> tuple[LabeledSample, int, int, np.ndarray, np.ndarray]:
    size = 20_000
    score = rng.beta(0.3, 3.0, size)
    pred = (score >= 0.5).astype(np.int8)
    label = (rng.random(size) < score).astype(np.int8)
    pos = np.flatnonzero(pred == 1)
    neg = np.flatnonzero(pred == 0)
    take = np.concatenate([rng.choice(pos, n1, replace=False), rng.choice(neg, n0, replace=False)])
    big_n1, big_n0 = pos.size, neg.size
    pi = np.where(pred[take] == 1, n1 / big_n1, n0 / big_n0)
    sample = LabeledSample.poisson(score[take], pred[take], label[take], pi)
    return sample, big_n1, big_n0, pred, label


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.8, 1.0])
def test_general_estimator_agrees_with_stratified(rng: np.random.Generator, alpha: float) -> None:
    sample, big_n1, big_n0, _, _ = _stratified_sample(rng, 200, 300)
    general = estimate_falpha(sample, alpha, 0.95, bias_correction=False)
    strat = stratified_falpha(sample, big_n1, big_n0, alpha, 0.95, bias_correction=False)
    assert general.value == pytest.approx(strat.value, rel=1e-12)
    # Bias-corrected (default): the Poisson jackknife and the stratified jackknife are the same
    # O(1/n) correction (0.05-0.19 se here, none for precision) up to the design's convention.
    general_j = estimate_falpha(sample, alpha, 0.95)
    strat_j = stratified_falpha(sample, big_n1, big_n0, alpha, 0.95)
    assert abs(general_j.value - strat_j.value) < 0.02 * general.se
    assert general_j.se == general.se and strat_j.se == strat.se
    if alpha == 1.0:
        assert general_j.value == pytest.approx(general.value, rel=1e-12)
        assert strat_j.value == strat.value
    else:
        assert general.value - general_j.value > 0.03 * general.se
        assert strat.value - strat_j.value > 0.03 * strat.se
    # Both are delta-method standard errors of the same estimate; the general one treats the
    # stratum sizes as estimated (Poisson design), so it can only be somewhat larger.
    assert general.se == pytest.approx(strat.se, rel=0.35)
    if alpha == 1.0:  # one stratum: identical up to the n/(n-1) convention
        assert general.se == pytest.approx(strat.se, rel=1e-9)


def test_f1_is_webber_eq_19(rng: np.random.Generator) -> None:
    sample, big_n1, big_n0, _, _ = _stratified_sample(rng, 150, 250)
    est = stratified_falpha(sample, big_n1, big_n0, 0.5, 0.95, bias_correction=False)
    y1 = sample.label[sample.pred == 1]
    y0 = sample.label[sample.pred == 0]
    r1 = big_n1 * y1.mean()
    r0 = big_n0 * y0.mean()
    var1 = big_n1**2 * y1.mean() * (1 - y1.mean()) / y1.size * (1 - y1.size / big_n1)
    var0 = big_n0**2 * y0.mean() * (1 - y0.mean()) / y0.size * (1 - y0.size / big_n0)
    denominator = r1 + r0 + big_n1
    assert est.value == pytest.approx(2 * r1 / denominator)
    var = 4 / denominator**4 * ((r0 + big_n1) ** 2 * var1 + r1**2 * var0)
    assert est.se == pytest.approx(math.sqrt(var))
    assert 0.0 <= est.lower < est.value < est.upper <= 1.0
    # stratified delete-one jackknife with fpc: item i out of stratum h,
    # p_h -> (r_h - y_i) / (n_h - 1)
    f1 = y1.size / big_n1
    f0 = y0.size / big_n0

    def f_of(r1_: float, r0_: float) -> float:
        return 2 * r1_ / (r1_ + r0_ + big_n1)

    def stratum_term(y: np.ndarray, fpc: float, refit: Callable[[np.ndarray], float]) -> float:
        loo = [refit(np.delete(y, i)) for i in range(y.size)]
        return fpc * (y.size - 1) * (float(np.mean(loo)) - est.value)

    bias = stratum_term(y1, 1 - f1, lambda y: f_of(big_n1 * y.mean(), r0)) + stratum_term(
        y0, 1 - f0, lambda y: f_of(r1, big_n0 * y.mean())
    )
    corrected = stratified_falpha(sample, big_n1, big_n0, 0.5, 0.95)
    assert corrected.value == pytest.approx(est.value - bias)
    assert corrected.se == est.se
    assert 0.0 <= corrected.lower <= corrected.value <= corrected.upper <= 1.0


def test_census_of_both_strata_is_exact(rng: np.random.Generator) -> None:
    score = rng.random(300)
    pred = (score >= 0.5).astype(np.int8)
    label = (rng.random(300) < score).astype(np.int8)
    sample = LabeledSample.poisson(score, pred, label, np.ones(300))
    est = stratified_falpha(sample, int(pred.sum()), int((1 - pred).sum()), 0.5, 0.95)
    assert est.value == pytest.approx(falpha_exact(pred, label, 0.5))
    assert est.se == 0.0
    assert est.lower == est.value == est.upper


def test_missing_stratum_is_nan() -> None:
    sample = LabeledSample.poisson([0.9, 0.8], [1, 1], [1, 0], [0.1, 0.1])
    assert math.isnan(stratified_falpha(sample, 20, 100, 0.5, 0.95).value)
    precision = stratified_falpha(sample, 20, 100, 1.0, 0.95)  # precision needs no negatives
    assert precision.value == 0.5
    with pytest.raises(ValueError, match="alpha"):
        stratified_falpha(sample, 20, 100, -0.1, 0.95)


def test_tiny_alpha_without_positives_does_not_underflow() -> None:
    """alpha N1 of 1e-177 with r1 = r0 = 0: F = 0 with a finite se, not a division by zero."""
    sample = LabeledSample.poisson([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0], [0, 0, 0, 0], [0.2] * 4)
    for correct in (False, True):
        est = stratified_falpha(sample, 10, 10, 1e-178, 0.95, bias_correction=correct)
        assert est.value == 0.0
        assert math.isfinite(est.se)
        assert 0.0 == est.lower <= est.upper <= 1.0


def test_no_false_negative_seen_does_not_collapse_the_interval() -> None:
    """Census of the predicted positives, no positive among 25 of 500 predicted negatives."""
    pred = np.concatenate([np.ones(5), np.zeros(25)])
    label = np.concatenate([[1, 1, 1, 1, 0], np.zeros(25)])
    pi = np.concatenate([np.ones(5), np.full(25, 25 / 500)])
    sample = LabeledSample.poisson(np.full(30, 0.5), pred, label, pi)
    old = stratified_falpha(sample, 5, 500, 0.5, 0.95, pseudo_events=0.0)
    assert old.se == 0.0  # seed 003's Var(R0) with r0 = 0 (the Wilson fallback kept it open)
    for alpha in (0.0, 0.5):
        est = stratified_falpha(sample, 5, 500, alpha, 0.95)
        assert est.se > 0.0 and est.lower < est.value
    # Var(R0) with p0 = c / n0 (seed 003 Eq. 21): c = 2 pseudo false negatives
    f1 = stratified_falpha(sample, 5, 500, 0.5, 0.95)
    p0 = 2.0 / 25
    var0 = 500**2 * p0 * (1 - p0) / 25 * (1 - 25 / 500)
    d0 = 0.5 * 4 / 4.5**2
    assert f1.se == pytest.approx(d0 * math.sqrt(var0))
    # precision does not depend on the predicted negatives: a census of the positives is exact
    precision = stratified_falpha(sample, 5, 500, 1.0, 0.95)
    assert precision.lower == precision.upper == precision.value == 0.8
    # the general estimator does not collapse either, with the same floor
    general = estimate_falpha(sample, 0.5, 0.95)
    assert general.lower < general.value == pytest.approx(8 / 9)
