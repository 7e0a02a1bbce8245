"""The model-assisted (GREG) F_alpha estimate per prediction stratum."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.sim.simulate import calibrated_pool
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.greg import (
    MIN_LABELS,
    StratumFit,
    StratumTraffic,
    choose,
    fit_stratum,
    greg_falpha,
)
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha


def _traffic(p: np.ndarray, pred: np.ndarray) -> tuple[StratumTraffic, StratumTraffic]:
    neg, pos = pred == 0, pred == 1
    return (
        StratumTraffic(float(neg.sum()), float(p[neg].sum())),
        StratumTraffic(float(pos.sum()), float(p[pos].sum())),
    )


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_a_census_is_exact(rng: np.random.Generator, alpha: float) -> None:
    score, label = calibrated_pool(3000, 0.1, rng)
    pred = (score >= 0.5).astype(np.int8)
    sample = LabeledSample.poisson(score, pred, label, np.ones(score.size))
    est = greg_falpha(sample, score, *_traffic(score, pred), alpha=alpha, level=0.95)
    assert est.value == pytest.approx(falpha_exact(pred, label, alpha), abs=1e-12)
    assert est.se == pytest.approx(0.0, abs=1e-12)


def test_the_stratum_regression_is_weighted_least_squares(rng: np.random.Generator) -> None:
    n = 200
    p = rng.random(n)
    y = (rng.random(n) < p).astype(np.float64)
    v = rng.uniform(1.0, 20.0, n)
    fpc = 1.0 - 1.0 / v
    traffic = StratumTraffic(5000.0, 2400.0)
    fit = fit_stratum(y, p, v, fpc, traffic)
    x = np.column_stack([np.ones(n), p])
    a, b = np.linalg.solve(x.T @ (v[:, None] * x), x.T @ (v * y))
    assert (fit.a, fit.b) == pytest.approx((a, b), rel=1e-10)
    # with an intercept the weighted residuals sum to 0: Y = a N + b S
    assert fit.total == pytest.approx(a * 5000.0 + b * 2400.0, rel=1e-10)
    # g: the calibration weights v g reproduce the totals and give Y; h: the weighted hat matrix
    t_inv = np.linalg.inv(x.T @ (v[:, None] * x))
    g = 1.0 + x @ t_inv @ (np.array([5000.0, 2400.0]) - x.T @ v)
    assert (np.dot(v * g, np.ones(n)), np.dot(v * g, p)) == pytest.approx((5000.0, 2400.0))
    assert np.dot(v * g, y) == pytest.approx(fit.total, rel=1e-10)
    h = v * np.einsum("ij,jk,ik->i", x, t_inv, x)
    e = y - a - b * p
    assert fit.resid == pytest.approx(g * e / np.sqrt(1.0 - h), rel=1e-9)
    assert fit.var == pytest.approx(float(np.sum(fpc * (v * g * e) ** 2 / (1.0 - h))), rel=1e-9)


def _plain_var(
    y: np.ndarray, p: np.ndarray, v: np.ndarray, fpc: np.ndarray, fit: StratumFit
) -> float:
    """The in-sample residual variance ``sum fpc v^2 e^2`` (no g, no leverage)."""
    return float(np.sum(fpc * (v * (y - fit.a - fit.b * p)) ** 2))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 60),
    st.integers(0, 2**32 - 1),
    st.floats(1.0, 50.0),
)
def test_variance_is_at_least_the_plain_one_when_the_sample_hits_the_totals(
    n: int, seed: int, spread: float
) -> None:
    """With sum v = N_h and sum v p = S_h every g is 1, and 1 / (1 - h) >= 1 item by item."""
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    y = (rng.random(n) < p).astype(np.float64)
    v = rng.uniform(1.0, spread, n)
    fpc = 1.0 - 1.0 / v
    fit = fit_stratum(y, p, v, fpc, StratumTraffic(float(v.sum()), float(np.dot(v, p))))
    assert fit.var >= _plain_var(y, p, v, fpc, fit) * (1.0 - 1e-12)


@pytest.mark.parametrize("slope", [False, True])
def test_equal_leverages_give_the_small_sample_factor(slope: bool) -> None:
    """Equal weights, and p_hat at two values in equal numbers: h = k / n, Var = plain n/(n - k)."""
    n = 40 if slope else MIN_LABELS - 1  # below MIN_LABELS the slope is not fitted
    p = np.where(np.arange(n) % 2 == 0, 0.2, 0.8)
    y = np.resize([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0], n)  # P(y | p) 1/4 and 3/4
    v = np.full(n, 7.0)
    fpc = np.full(n, 1.0 - 1.0 / 7.0)
    fit = fit_stratum(y, p, v, fpc, StratumTraffic(7.0 * n, float(np.dot(v, p))))
    k = 2 if slope else 1
    assert (fit.b != 0.0) is slope
    assert fit.var == pytest.approx(_plain_var(y, p, v, fpc, fit) * n / (n - k))


def test_variance_matches_the_empirical_one_of_a_fixed_pool() -> None:
    """Repeated Poisson samples (uneven pi, about 30 labels) of one fixed stratum of 2,000.

    Measured: this variance 1.005 of the empirical variance of Y_h, the plain in-sample residual
    form 0.846 (the fit absorbs part of the noise, and g is far from 1 when sum v misses N_h).
    """
    rng = np.random.default_rng(5)
    big = 2000
    p = rng.beta(1.0, 3.0, big)
    y = (rng.random(big) < p).astype(np.float64)
    q = 0.2 + p
    pi = np.minimum(30.0 * q / q.sum(), 1.0)
    traffic = StratumTraffic(float(big), float(p.sum()))
    totals, new, plain = [], [], []
    for _ in range(3000):
        take = rng.random(big) < pi
        yt, pt, vt, ft = y[take], p[take], 1.0 / pi[take], 1.0 - pi[take]
        fit = fit_stratum(yt, pt, vt, ft, traffic)
        totals.append(fit.total)
        new.append(fit.var)
        plain.append(_plain_var(yt, pt, vt, ft, fit))
    empirical = float(np.var(totals))
    assert abs(np.mean(new) / empirical - 1.0) < 0.10
    assert np.mean(plain) / empirical < 0.90


def test_few_labels_or_events_do_not_trust_the_slope() -> None:
    p = np.linspace(0.1, 0.9, MIN_LABELS - 1)
    y = (p > 0.5).astype(np.float64)
    v = np.full(p.size, 10.0)
    fit = fit_stratum(y, p, v, np.full(p.size, 0.9), StratumTraffic(1000.0, 500.0))
    assert fit.b == 0.0
    assert fit.total == pytest.approx(1000.0 * y.mean())
    only_negatives = fit_stratum(
        np.zeros(50), np.linspace(0, 0.1, 50), np.ones(50), np.zeros(50), StratumTraffic(50.0, 2.5)
    )
    assert only_negatives.b == 0.0 and only_negatives.total == 0.0


def test_undefined_is_missing_not_zero() -> None:
    empty = LabeledSample.concat([])
    est = greg_falpha(
        empty, [], StratumTraffic(0.0, 0.0), StratumTraffic(0.0, 0.0), alpha=1.0, level=0.95
    )
    assert math.isnan(est.value)


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_no_false_negative_seen_keeps_the_ratio_estimates_width(alpha: float) -> None:
    """F = 1: 30 true positives at pi = 1, 300 clean predicted negatives at pi = 0.01.

    The estimate sits at the boundary where the interval is Wilson's on the Kish size; that size
    must count the unseen false negatives as the ratio estimate's does, or the interval shrinks
    to [0.9, 1] around a recall nothing measured.
    """
    pred = np.r_[np.ones(30), np.zeros(300)].astype(np.int8)
    label = pred.copy()
    score = np.r_[np.full(30, 0.9), np.full(300, 0.02)]
    pi = np.r_[np.ones(30), np.full(300, 0.01)]
    sample = LabeledSample.poisson(score, pred, label, pi)
    traffic = (StratumTraffic(30_000.0, 600.0), StratumTraffic(30.0, 27.0))
    est = greg_falpha(sample, score, *traffic, alpha=alpha, level=0.95)
    ratio = estimate_falpha(sample, alpha, 0.95)
    assert est.value == ratio.value == 1.0
    assert est.n_eff == pytest.approx(ratio.n_eff)
    assert est.n_eff_model == pytest.approx(ratio.n_eff_model)
    assert est.lower == pytest.approx(ratio.lower, abs=0.02)
    assert est.lower < 0.5


def test_covers_and_beats_the_ratio_estimate_with_a_good_map() -> None:
    """Calibrated scores (the map is the identity): 95% coverage, smaller error than the ratio."""
    rng = np.random.default_rng(11)
    score, label = calibrated_pool(20_000, 0.05, rng)
    pred = (score >= 0.5).astype(np.int8)
    alpha = 0.5
    truth = falpha_exact(pred, label, alpha)
    g = float(np.dot(pred, score) / (alpha * pred.sum() + (1 - alpha) * score.sum()))
    pi = inclusion_for_budget(defensive_mix(q_star_falpha(score, pred, alpha, g), 0.1), 300)[0]
    traffic = _traffic(score, pred)
    greg_err, ratio_err, covered, reps = [], [], 0, 400
    for _ in range(reps):
        take = rng.random(score.size) < pi
        s = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        est = greg_falpha(s, s.score, *traffic, alpha=alpha, level=0.95)
        greg_err.append(est.value - truth)
        covered += est.lower <= truth <= est.upper
        ratio_err.append(estimate_falpha(s, alpha, 0.95).value - truth)
    assert 0.91 <= covered / reps <= 0.98
    assert np.sqrt(np.mean(np.square(greg_err))) < np.sqrt(np.mean(np.square(ratio_err)))
    assert abs(np.mean(greg_err)) < 3 * np.std(greg_err) / math.sqrt(reps)


def _sample(rng: np.random.Generator, n: int = 400) -> tuple[LabeledSample, np.ndarray]:
    score, label = calibrated_pool(n, 0.2, rng)
    pred = (score >= 0.5).astype(np.int8)
    pi = rng.uniform(0.05, 1.0, n)
    return LabeledSample.poisson(score, pred, label, pi), pi


def test_two_phase_variance_reduces_to_one_phase_and_grows_with_pending(
    rng: np.random.Generator,
) -> None:
    one, pi = _sample(rng)
    traffic = (StratumTraffic(5000.0, 600.0), StratumTraffic(800.0, 500.0))
    base = greg_falpha(one, one.score, *traffic, alpha=0.5, level=0.95)
    group = one.pred.astype(np.int64)  # classes within the prediction strata
    every = LabeledSample.two_phase(
        one.score, one.pred, one.label, pi, rate=np.ones(len(one)), group=group
    )
    same = greg_falpha(every, every.score, *traffic, alpha=0.5, level=0.95)
    assert same.value == pytest.approx(base.value) and same.se == pytest.approx(base.se)
    half = LabeledSample.two_phase(
        one.score, one.pred, one.label, pi, rate=np.full(len(one), 0.5), group=group
    )
    pending = greg_falpha(half, half.score, *traffic, alpha=0.5, level=0.95)
    assert pending.se > base.se
    # the super-population se takes every fpc as 1
    assert base.se_model > base.se and base.n_eff_model == pytest.approx(base.ess)


def test_choose_states_why_it_keeps_the_ratio(rng: np.random.Generator) -> None:
    s, _ = _sample(rng)
    traffic = (StratumTraffic(5000.0, 600.0), StratumTraffic(800.0, 500.0))
    wide = Estimate(0.5, 1.0, 0.0, 1.0, 400, 100.0, 0.95)
    ratio = (wide, wide, wide)
    used = choose(s, s.score, *traffic, ratio, 0.5, 0.95)
    assert used.assisted == (True, True, True) and used.reason == ""
    assert used.f == greg_falpha(s, s.score, *traffic, alpha=0.5, level=0.95)
    no_phat = np.where(np.arange(len(s)) == 3, np.nan, s.score)
    kept = choose(s, no_phat, *traffic, ratio, 0.5, 0.95)
    assert kept.f is wide and kept.reason == "labels without a recorded p_hat"
    assert int(s.pred.sum()) >= MIN_LABELS  # enough predicted positives; now take most away
    keep = (s.pred == 0) | (np.cumsum(s.pred) <= MIN_LABELS - 1)
    sub = LabeledSample(s.score[keep], s.pred[keep], s.label[keep], s.v[keep], s.fpc[keep])
    kept = choose(sub, sub.score, *traffic, ratio, 0.5, 0.95)
    assert kept.reason == f"{MIN_LABELS - 1} labels among the predicted positives (fewer than 20)"
    # the choice rests on the design, not on which standard error the window drew
    tight = Estimate(0.5, 1e-9, 0.5, 0.5, 400, 100.0, 0.95)
    same = choose(s, s.score, *traffic, (tight, tight, tight), 0.5, 0.95)
    assert same == used
