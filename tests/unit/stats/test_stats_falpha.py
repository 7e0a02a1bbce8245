"""F_alpha as a generalized risk (seed 000, Corollary 1) against scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import fbeta_score, precision_score, recall_score

from monitor.stats.falpha import (
    alpha_from_beta,
    estimate_falpha,
    falpha_exact,
    falpha_gain,
    falpha_weight,
    intrinsic_falpha,
    intrinsic_falpha_from_sums,
    intrinsic_zero_one_risk,
)
from monitor.stats.sample import LabeledSample


def _labelled(rng: np.random.Generator, n: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    score = rng.random(n)
    pred = (score >= 0.6).astype(np.int8)
    label = (rng.random(n) < score).astype(np.int8)
    return score, pred, label


@pytest.mark.parametrize("beta", [0.25, 0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("fpc", [0.0, 0.3, 1.0])
def test_estimate_equals_sklearn_fbeta_with_unit_weights(
    rng: np.random.Generator, beta: float, fpc: float
) -> None:
    score, pred, label = _labelled(rng)
    n = len(score)
    sample = LabeledSample.create(score, pred, label, np.ones(n), np.full(n, fpc))
    sk = fbeta_score(label, pred, beta=beta)
    plain = estimate_falpha(sample, alpha_from_beta(beta), 0.95, bias_correction=False)
    assert plain.value == pytest.approx(sk, abs=1e-12)
    assert falpha_exact(pred, label, alpha_from_beta(beta)) == pytest.approx(plain.value, abs=1e-12)
    est = estimate_falpha(sample, alpha_from_beta(beta), 0.95)
    if fpc == 0.0:  # every item labeled with certainty: the bias correction vanishes exactly
        assert est == plain
    else:  # a sample (fpc > 0): the O(1/n) jackknife correction, far inside the interval
        assert abs(est.value - sk) < 0.05 * est.se
        assert est.value != sk


@pytest.mark.parametrize("fpc", [0.0, 1.0])
def test_precision_and_recall_equal_sklearn(rng: np.random.Generator, fpc: float) -> None:
    score, pred, label = _labelled(rng)
    n = len(score)
    sample = LabeledSample.create(score, pred, label, np.ones(n), np.full(n, fpc))
    precision = estimate_falpha(sample, 1.0, 0.95)
    recall = estimate_falpha(sample, 0.0, 0.95)
    assert precision.value == pytest.approx(precision_score(label, pred), abs=1e-12)
    assert recall.value == pytest.approx(recall_score(label, pred), abs=1e-12)
    assert precision.n_labels == int(pred.sum())
    assert recall.n_labels == int(label.sum())


def test_census_gives_point_interval(rng: np.random.Generator) -> None:
    score, pred, label = _labelled(rng)
    sample = LabeledSample.poisson(score, pred, label, np.ones(len(score)))
    est = estimate_falpha(sample, 0.5, 0.95)
    assert est.se == 0.0
    assert est.lower == est.value == est.upper


def test_scale_of_weights_does_not_matter(rng: np.random.Generator) -> None:
    score, pred, label = _labelled(rng)
    pi = rng.uniform(0.05, 1.0, len(score))
    a = estimate_falpha(LabeledSample.poisson(score, pred, label, pi), 0.5, 0.95)
    b = LabeledSample.create(score, pred, label, 7.0 / pi, 1.0 - pi)
    est_b = estimate_falpha(b, 0.5, 0.95)
    assert est_b.value == pytest.approx(a.value)
    assert est_b.se == pytest.approx(a.se)


def test_weighted_estimate_is_eq4(rng: np.random.Generator) -> None:
    score, pred, label = _labelled(rng, 50)
    pi = rng.uniform(0.05, 1.0, 50)
    alpha = 0.3
    sample = LabeledSample.poisson(score, pred, label, pi)
    plain = estimate_falpha(sample, alpha, 0.95, bias_correction=False)
    v = 1.0 / pi
    tp = np.sum(v * pred * label)
    fp = np.sum(v * pred * (1 - label))
    fn = np.sum(v * (1 - pred) * label)
    g = tp / (alpha * (tp + fp) + (1 - alpha) * (tp + fn))
    assert plain.value == pytest.approx(g)
    # default: Eq. 4 minus the jackknife bias, recomputed here by leaving each item out
    w = alpha * pred + (1 - alpha) * label
    gain = (pred == label).astype(float)
    b = v * w
    loo = np.array(
        [np.sum(np.delete(b * gain, i)) / np.sum(np.delete(b, i)) for i in range(len(b))]
    )
    bias = np.sum((1 - pi) * b**2 * (loo - gain)) / np.sum(b) ** 2
    est = estimate_falpha(sample, alpha, 0.95)
    assert est.value == pytest.approx(g - bias)
    assert est.se == plain.se
    assert est.lower <= est.value <= est.upper


def test_undefined_is_nan_never_zero() -> None:
    sample = LabeledSample.poisson([0.1, 0.2], [0, 0], [0, 1], [0.5, 0.5])
    precision = estimate_falpha(sample, 1.0, 0.95)
    assert math.isnan(precision.value)
    assert math.isnan(precision.lower) and math.isnan(precision.upper)
    assert not precision.defined
    assert math.isnan(falpha_exact([0, 0], [0, 0], 0.5))
    assert math.isnan(falpha_exact([], [], 0.5))
    empty = LabeledSample.concat([])
    assert math.isnan(estimate_falpha(empty, 0.5, 0.95).value)
    assert math.isnan(intrinsic_falpha([0.2, 0.3], [0, 0], 1.0))
    assert math.isnan(intrinsic_falpha_from_sums(0.0, 0.0, 0.0, 0.5))
    assert math.isnan(intrinsic_zero_one_risk([], []))


def test_recall_zero_is_a_value_not_missing() -> None:
    sample = LabeledSample.poisson([0.1, 0.2], [0, 0], [1, 1], [0.5, 0.5])
    recall = estimate_falpha(sample, 0.0, 0.95)
    assert recall.value == 0.0
    assert recall.lower == 0.0
    assert recall.upper > 0.0  # small-sample fallback, not a point


def test_alpha_beta_conversion() -> None:
    assert alpha_from_beta(1.0) == 0.5
    assert alpha_from_beta(2.0) == pytest.approx(0.2)
    assert alpha_from_beta(0.0) == 1.0
    assert alpha_from_beta(math.inf) == 0.0
    with pytest.raises(ValueError, match="beta"):
        alpha_from_beta(-1.0)


def test_weight_and_gain() -> None:
    pred = np.array([1, 1, 0, 0])
    label = np.array([1, 0, 1, 0])
    np.testing.assert_allclose(falpha_weight(pred, label, 0.25), [1.0, 0.25, 0.75, 0.0])
    np.testing.assert_array_equal(falpha_gain(pred, label), [1.0, 0.0, 0.0, 1.0])


def test_intrinsic_falpha(rng: np.random.Generator) -> None:
    score = rng.random(1000)
    pred = (score >= 0.5).astype(np.int8)
    for alpha in (0.0, 0.5, 1.0):
        expected = np.sum(pred * score) / (alpha * pred.sum() + (1 - alpha) * score.sum())
        assert intrinsic_falpha(score, pred, alpha) == pytest.approx(expected)
        assert intrinsic_falpha_from_sums(
            float(np.sum(pred * score)), float(pred.sum()), float(score.sum()), alpha
        ) == pytest.approx(expected)
    # the intrinsic F is the expected F of labels drawn from calibrated scores (large pool)
    big = rng.random(400_000)
    big_pred = (big >= 0.5).astype(np.int8)
    labels = (rng.random(big.size) < big).astype(np.int8)
    assert intrinsic_falpha(big, big_pred, 0.5) == pytest.approx(
        falpha_exact(big_pred, labels, 0.5), abs=0.005
    )


def test_intrinsic_zero_one_risk(rng: np.random.Generator) -> None:
    score, pred, _ = _labelled(rng)
    assert intrinsic_zero_one_risk(score, pred) == pytest.approx(
        np.mean(np.where(pred == 1, 1 - score, score))
    )
