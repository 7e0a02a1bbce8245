"""LabeledSample designs, measure_all and the simulated pools."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from monitor.sim.simulate import calibrated_pool, logit_mean_for_rate
from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.measures import confusion_estimate, measure_all
from monitor.stats.sample import AnswerGroups, LabeledSample
from monitor.stats.score_interval import score_type_bounds
from monitor.stats.selection import draw_with_replacement


def test_poisson_sample_weights() -> None:
    sample = LabeledSample.poisson([0.2, 0.9], [0, 1], [0, 1], [0.25, 1.0])
    np.testing.assert_allclose(sample.v, [4.0, 1.0])
    np.testing.assert_allclose(sample.fpc, [0.75, 0.0])
    assert sample.pred.dtype == np.int8 and sample.label.dtype == np.int8
    assert sample.score.dtype == np.float64
    assert len(sample) == 2


def test_with_replacement_weights_estimate_pool_totals(rng: np.random.Generator) -> None:
    score, label = calibrated_pool(5000, 0.2, rng)
    pred = (score >= 0.5).astype(np.int8)
    q = np.where(pred == 1, 3.0, 1.0)
    p = q / q.sum()
    totals = []
    for _ in range(200):
        idx = draw_with_replacement(p, 300, rng)
        sample = LabeledSample.with_replacement(score[idx], pred[idx], label[idx], p[idx])
        np.testing.assert_allclose(sample.fpc, 1.0)
        totals.append(confusion_estimate(sample).tp)
    true_tp = float(np.sum(pred * label))
    assert np.mean(totals) == pytest.approx(true_tp, rel=0.03)


def test_sample_validation() -> None:
    with pytest.raises(ValueError, match="pi"):
        LabeledSample.poisson([0.5], [1], [1], [0.0])
    with pytest.raises(ValueError, match="0/1"):
        LabeledSample.poisson([0.5], [2], [1], [0.5])
    with pytest.raises(ValueError, match="shape"):
        LabeledSample.create([0.5, 0.4], [1], [1], [1.0], [0.0])
    with pytest.raises(ValueError, match=r"v must"):
        LabeledSample.create([0.5], [1], [1], [-1.0], [0.0])
    with pytest.raises(ValueError, match="q must"):
        LabeledSample.with_replacement([0.5], [1], [1], [0.0])
    with pytest.raises(ValueError, match=r"fpc must be in \[0, 1\]"):
        LabeledSample.create([0.5], [1], [1], [1.0], [1.5])
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 1.5"):
        estimate_falpha(LabeledSample.poisson([0.5], [1], [1], [0.5]), 1.5, 0.95)


def test_two_phase_validation() -> None:
    def two_phase(**changes: Any) -> LabeledSample:
        args: dict[str, Any] = {"pi": [0.5, 0.5], "rate": [0.5, 1.0], "group": [0, 1]}
        return LabeledSample.two_phase([0.5, 0.4], [1, 0], [1, 0], **{**args, **changes})

    assert two_phase().answers is not None
    with pytest.raises(ValueError, match=r"pi must be in \(0, 1\]"):
        two_phase(pi=[0.5, 1.5])
    with pytest.raises(ValueError, match=r"pi must be in \(0, 1\]"):
        two_phase(unanswered_pi=[0.0], unanswered_group=[0])
    with pytest.raises(ValueError, match=r"rate must be in \(0, 1\]"):
        two_phase(rate=[0.0, 1.0])
    with pytest.raises(ValueError, match=r"group \(1,\) and rate \(2,\) differ"):
        two_phase(group=[0])
    with pytest.raises(ValueError, match=r"unanswered_group \(2,\) and unanswered_v \(1,\)"):
        two_phase(unanswered_pi=[0.5], unanswered_group=[0, 1])
    with pytest.raises(ValueError, match=r"rate \(3,\) and pi \(2,\) differ"):
        two_phase(rate=[0.5, 1.0, 1.0], group=[0, 1, 1])
    one = two_phase()
    three = AnswerGroups(np.zeros(3, dtype=np.int64), np.ones(3))
    with pytest.raises(ValueError, match=r"answers must have shape \(2,\), got \(3,\)"):
        LabeledSample(one.score, one.pred, one.label, one.v, one.fpc, three)


def test_concat_equals_one_sample(rng: np.random.Generator) -> None:
    score = rng.random(300)
    pred = (score > 0.5).astype(np.int8)
    label = (rng.random(300) < score).astype(np.int8)
    pi = rng.uniform(0.1, 1, 300)
    whole = LabeledSample.poisson(score, pred, label, pi)
    parts = [
        LabeledSample.poisson(score[i:j], pred[i:j], label[i:j], pi[i:j])
        for i, j in [(0, 100), (100, 101), (101, 300)]
    ]
    joined = LabeledSample.concat(parts)
    assert estimate_falpha(joined, 0.5, 0.95) == estimate_falpha(whole, 0.5, 0.95)
    assert len(LabeledSample.concat([])) == 0


def test_measure_all(rng: np.random.Generator) -> None:
    score = rng.random(400)
    pred = (score > 0.5).astype(np.int8)
    label = (rng.random(400) < score).astype(np.int8)
    pi = rng.uniform(0.1, 1, 400)
    sample = LabeledSample.poisson(score, pred, label, pi)
    m = measure_all(sample, 0.3, 0.9)
    for got, alpha in ((m.f, 0.3), (m.recall, 0.0)):  # the hull with the score-type floor
        ratio = estimate_falpha(sample, alpha, 0.9)
        lower, upper = score_type_bounds(sample, alpha, ratio, floor=True)
        assert (got.value, got.se, got.n_labels) == (ratio.value, ratio.se, ratio.n_labels)
        assert (got.lower, got.upper) == (min(ratio.lower, lower), max(ratio.upper, upper))
    assert m.precision == estimate_falpha(sample, 1.0, 0.9)
    v = 1 / pi
    assert m.confusion.tp == pytest.approx(np.sum(v * pred * label))
    assert m.confusion.fp == pytest.approx(np.sum(v * pred * (1 - label)))
    assert m.confusion.fn == pytest.approx(np.sum(v * (1 - pred) * label))
    assert m.confusion.tn == pytest.approx(np.sum(v * (1 - pred) * (1 - label)))
    c = m.confusion
    plain = measure_all(sample, 0.3, 0.9, bias_correction=False)
    assert plain.precision.value == pytest.approx(c.tp / (c.tp + c.fp))
    assert plain.recall.value == pytest.approx(c.tp / (c.tp + c.fn))
    eq4 = estimate_falpha(sample, 0.3, 0.9, bias_correction=False)
    assert (plain.f.value, plain.f.se) == (eq4.value, eq4.se)
    for corrected, ratio in (
        (m.f, plain.f),
        (m.precision, plain.precision),
        (m.recall, plain.recall),
    ):
        assert corrected.se == ratio.se
        assert abs(corrected.value - ratio.value) < 0.2 * ratio.se  # an O(1/n) correction
    assert m.n_labels == 400
    assert m.ess == pytest.approx(v.sum() ** 2 / np.sum(v**2))
    assert 0.0 < m.likelihood < 1.0


def test_measure_all_without_labels() -> None:
    m = measure_all(LabeledSample.concat([]), 0.5, 0.95)
    assert math.isnan(m.f.value) and math.isnan(m.precision.value) and math.isnan(m.recall.value)
    assert math.isnan(m.likelihood)
    assert m.ess == 0.0 and m.n_labels == 0
    assert m.confusion.tp == 0.0


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.2, 0.5])
def test_calibrated_pool(rng: np.random.Generator, rate: float) -> None:
    score, label = calibrated_pool(200_000, rate, rng)
    assert score.dtype == np.float64 and label.dtype == np.int8
    assert np.all((score >= 0) & (score <= 1))
    assert label.mean() == pytest.approx(rate, rel=0.1)
    # calibrated: within score bins the positive rate matches the mean score
    bins = np.digitize(score, [0.1, 0.3, 0.5, 0.7, 0.9])
    for b in np.unique(bins):
        inside = bins == b
        if inside.sum() > 2000:
            assert label[inside].mean() == pytest.approx(score[inside].mean(), abs=0.02)
    pred = (score >= 0.5).astype(np.int8)
    assert 0.1 < falpha_exact(pred, label, 0.5) < 0.95


def test_overconfident_pool_has_same_labels_sharper_scores() -> None:
    s1, y1 = calibrated_pool(10_000, 0.1, np.random.default_rng(5))
    s3, y3 = calibrated_pool(10_000, 0.1, np.random.default_rng(5), overconfidence=3.0)
    np.testing.assert_array_equal(y1, y3)
    np.testing.assert_array_equal(s1 >= 0.5, s3 >= 0.5)
    assert np.mean(np.abs(s3 - 0.5)) > np.mean(np.abs(s1 - 0.5))


def test_logit_mean_for_rate() -> None:
    with pytest.raises(ValueError, match="positive_rate"):
        logit_mean_for_rate(0.0)
    assert logit_mean_for_rate(0.5) == pytest.approx(0.0, abs=1e-9)
