"""Model likelihood, effective sample size and the score-drift statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit

from monitor.stats.drift import (
    SCORE_BINS,
    psi,
    score_histogram,
)
from monitor.stats.likelihood import EPS, effective_sample_size, model_likelihood


def test_model_likelihood(rng: np.random.Generator) -> None:
    score = rng.random(100)
    label = (rng.random(100) < score).astype(np.int8)
    v = rng.uniform(1, 10, 100)
    p = np.where(label == 1, score, 1 - score)
    expected = math.exp(np.sum(v * np.log(p)) / v.sum())
    assert model_likelihood(score, label, v) == pytest.approx(expected)
    assert model_likelihood([0.5], [1], [3.0]) == pytest.approx(0.5)
    assert math.isnan(model_likelihood([], [], []))


def test_model_likelihood_clips_certain_misses() -> None:
    lik = model_likelihood([1.0, 0.0], [0, 1], [1.0, 1.0])
    assert lik == pytest.approx(EPS)
    assert lik > 0.0


def test_calibrated_model_beats_overconfident(rng: np.random.Generator) -> None:
    z = rng.normal(-1, 2, 5000)
    label = (rng.random(5000) < 1 / (1 + np.exp(-z))).astype(np.int8)
    calibrated = model_likelihood(1 / (1 + np.exp(-z)), label, np.ones(5000))
    overconfident = model_likelihood(1 / (1 + np.exp(-10 * z)), label, np.ones(5000))
    assert calibrated > 0.6 > overconfident


def test_effective_sample_size() -> None:
    assert effective_sample_size(np.ones(10)) == pytest.approx(10.0)
    assert effective_sample_size([1.0, 1.0, 2.0]) == pytest.approx(16 / 6)
    assert effective_sample_size([5.0]) == pytest.approx(1.0)
    assert effective_sample_size([]) == 0.0


def test_score_histogram_counts_one_logit_unit_per_bin() -> None:
    counts = score_histogram([0.0, 1e-6, expit(-8.5), 0.5, 0.99999, 1.0])
    assert counts.dtype == np.int64
    assert counts.shape == (SCORE_BINS,)
    assert counts.sum() == 6
    assert counts[0] == 2 and counts[1] == 1 and counts[10] == 1 and counts[-1] == 2
    logits = np.random.default_rng(3).uniform(-12.0, 12.0, 5000)
    edges = np.array([-np.inf, *np.arange(-9.0, 10.0), np.inf])
    np.testing.assert_array_equal(score_histogram(expit(logits)), np.histogram(logits, edges)[0])
    with pytest.raises(ValueError, match="scores"):
        score_histogram([1.5])


def test_psi(rng: np.random.Generator) -> None:
    ref = score_histogram(rng.beta(2, 5, 10_000))
    same = score_histogram(rng.beta(2, 5, 10_000))
    shifted = score_histogram(rng.beta(5, 2, 10_000))
    r = np.maximum(ref / ref.sum(), 1e-4)
    c = np.maximum(shifted / shifted.sum(), 1e-4)
    assert psi(ref, shifted) == pytest.approx(np.sum((c - r) * np.log(c / r)))
    assert psi(ref, same) < 0.01
    assert psi(ref, shifted) > 0.25
    assert psi(ref, ref) == 0.0
    assert math.isnan(psi(np.zeros(SCORE_BINS), ref))
