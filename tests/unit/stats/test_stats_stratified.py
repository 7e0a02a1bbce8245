"""The two-stratum estimator of seed 003 and its agreement with the general estimator."""

from __future__ import annotations

import math

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
    general = estimate_falpha(sample, alpha, 0.95)
    strat = stratified_falpha(sample, big_n1, big_n0, alpha, 0.95)
    assert general.value == pytest.approx(strat.value, rel=1e-12)
    # Both are delta-method standard errors of the same estimate; the general one treats the
    # stratum sizes as estimated (Poisson design), so it can only be somewhat larger.
    assert general.se == pytest.approx(strat.se, rel=0.35)
    if alpha == 1.0:  # one stratum: identical up to the n/(n-1) convention
        assert general.se == pytest.approx(strat.se, rel=1e-9)


def test_f1_is_webber_eq_19(rng: np.random.Generator) -> None:
    sample, big_n1, big_n0, _, _ = _stratified_sample(rng, 150, 250)
    est = stratified_falpha(sample, big_n1, big_n0, 0.5, 0.95)
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
