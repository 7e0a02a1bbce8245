"""Beta calibration with a ridge toward the identity, and its choice over Platt by an LR test."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from monitor.stats import beta_calibration
from monitor.stats.beta_calibration import (
    BETA_LEVEL,
    BetaMap,
    choose_map,
    fit_beta,
    likelihood_ratio,
)
from monitor.stats.calibration import PlattMap, expit, fit_platt, logit


def _beta_pool(
    rng: np.random.Generator, n: int, truth: BetaMap | PlattMap
) -> tuple[np.ndarray, np.ndarray]:
    """Scores s (logits ~ Normal(-1, 2.5^2)) with labels y ~ Bernoulli(truth(s))."""
    s = expit(rng.normal(-1.0, 2.5, n))
    y = (rng.random(n) < truth.apply(s)).astype(np.int8)
    return s, y


def test_docstring_examples() -> None:
    assert doctest.testmod(beta_calibration).failed == 0


def test_no_labels_gives_the_identity_map() -> None:
    m = fit_beta([], [], [])
    assert m == BetaMap() and m.is_identity
    s = np.array([0.0, 1e-20, 0.3, 1.0])
    assert np.array_equal(m.apply(s), s)
    assert choose_map([], []) == fit_platt([], [], [])


def test_platt_is_the_special_case_a_equals_b(rng: np.random.Generator) -> None:
    s = rng.random(1000)
    assert np.allclose(BetaMap(0.4, 0.4, -0.3).apply(s), PlattMap(-0.3, 0.4).apply(s), atol=1e-14)
    assert np.allclose(BetaMap(1.0, 1.0, 1e-300).apply(s), s)  # not exact, but the identity


@pytest.mark.parametrize(
    ("a", "b", "c"), [(1 / 3, 1.0, 0.0), (1.0, 0.3, 0.5), (2.0, 0.5, -1.0), (0.7, 0.7, 0.2)]
)
def test_recovers_a_beta_form_miscalibration(
    rng: np.random.Generator, a: float, b: float, c: float
) -> None:
    score, label = _beta_pool(rng, 60_000, BetaMap(a, b, c))
    m = fit_beta(score, label, np.ones(score.size))
    assert (m.a, m.b, m.c) == pytest.approx((a, b, c), abs=0.06)
    assert m.n_labels == score.size and m.ess == pytest.approx(score.size)


def test_is_the_minimiser_of_the_penalised_objective(rng: np.random.Generator) -> None:
    score, label = _beta_pool(rng, 300, BetaMap(0.4, 1.5, 0.3))
    v = 1.0 / rng.uniform(0.01, 1.0, score.size)
    tau = 3.0
    m = fit_beta(score, label, v, tau=tau)
    x1, x2 = np.log(score), -np.log1p(-score)
    w = v * (v.sum() / (v @ v))  # rescaled to sum to Kish's ESS

    def objective(theta: np.ndarray) -> float:
        eta = theta[0] + theta[1] * x1 + theta[2] * x2
        nll = np.logaddexp(0.0, eta) - label * eta
        return float(w @ nll + tau * (theta[0] ** 2 + (theta[1] - 1) ** 2 + (theta[2] - 1) ** 2))

    ref = optimize.minimize(objective, np.array([0.0, 1.0, 1.0]), method="BFGS", tol=1e-12)
    assert (m.c, m.a, m.b) == pytest.approx(tuple(ref.x), abs=1e-5)


def test_the_ridge_pulls_few_labels_toward_the_identity(rng: np.random.Generator) -> None:
    score, label = _beta_pool(rng, 20, BetaMap(0.2, 1.0, 0.0))
    loose = fit_beta(score, label, np.ones(20), tau=1e-3)
    middle = fit_beta(score, label, np.ones(20), tau=5.0)
    tight = fit_beta(score, label, np.ones(20), tau=1e6)
    assert (tight.a, tight.b, tight.c) == pytest.approx((1.0, 1.0, 0.0), abs=1e-4)

    def dist(m: BetaMap) -> float:
        return float(np.hypot(np.hypot(m.a - 1.0, m.b - 1.0), m.c))

    assert dist(tight) < dist(middle) < dist(loose)


def test_a_decreasing_relation_gives_slopes_at_zero_not_negative(
    rng: np.random.Generator,
) -> None:
    score = rng.random(3000)
    label = (rng.random(3000) < 1.0 - score).astype(np.int8)
    m = fit_beta(score, label, np.ones(3000), tau=1e-3)
    assert m.a >= 0.0 and m.b >= 0.0 and min(m.a, m.b) == 0.0
    assert np.all(np.diff(m.apply(np.linspace(0.0, 1.0, 201))) >= 0.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="v must be finite and > 0"):
        fit_beta([0.5], [1], [0.0])
    with pytest.raises(ValueError, match="same length"):
        fit_beta([0.5, 0.2], [1], [1.0])
    with pytest.raises(ValueError, match="tau"):
        fit_beta([0.5], [1], [1.0], tau=0.0)


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(0.0, 50.0),
    b=st.floats(0.0, 50.0),
    c=st.floats(-50.0, 50.0),
    s=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50),
)
def test_every_beta_map_is_monotone_bounded_and_finite(
    a: float, b: float, c: float, s: list[float]
) -> None:
    score = np.sort(np.array(s))
    p = BetaMap(a, b, c).apply(score)
    assert np.isfinite(p).all() and (p >= 0.0).all() and (p <= 1.0).all()
    assert np.all(np.diff(p) >= 0.0)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 200),
    slope=st.floats(0.0, 3.0),
    skew=st.floats(-3.0, 3.0),
)
def test_fitted_and_chosen_maps_are_monotone_bounded_finite_and_deterministic(
    seed: int, n: int, slope: float, skew: float
) -> None:
    rng = np.random.default_rng(seed)
    score = np.concatenate([[0.0, 1.0], expit(rng.normal(skew, 4.0, n))])
    label = (rng.random(score.size) < expit(slope * logit(score))).astype(np.int8)
    chosen = choose_map(score, label)
    assert choose_map(score.copy(), label.copy()) == chosen  # a function of the labels only
    grid = np.linspace(0.0, 1.0, 101)
    for m in (chosen, fit_beta(score, label, np.ones(score.size))):
        p = m.apply(grid)
        assert np.isfinite(p).all() and (p >= 0.0).all() and (p <= 1.0).all()
        assert np.all(np.diff(p) >= 0.0)


@pytest.mark.parametrize("n", [100, 1000])
def test_platt_is_kept_when_the_truth_is_platt_shaped_at_the_stated_rate(
    rng: np.random.Generator, n: int
) -> None:
    # an over-confident model (true slope 1/3 on the logit): the Platt form holds exactly
    reps = 400
    chose_beta = 0
    for _ in range(reps):
        score, label = _beta_pool(rng, n, PlattMap(0.3, 1.0 / 3.0))
        chose_beta += choose_map(score, label).family == "beta"
    # expected 4 of 400 at level 0.01; P(X >= 12) < 0.001 for Binomial(400, 0.01)
    assert chose_beta / reps <= 3 * BETA_LEVEL, chose_beta


def test_the_test_statistic_is_chi_square_one_under_platt(rng: np.random.Generator) -> None:
    stats = []
    for _ in range(300):
        score, label = _beta_pool(rng, 500, PlattMap(-0.2, 0.5))
        ones = np.ones(score.size)
        platt, beta = fit_platt(score, label, ones), fit_beta(score, label, ones)
        stats.append(likelihood_ratio(score, label, platt, beta))
    lr = np.array(stats)
    # chi-square(1): mean 1, 90% quantile 2.71 (the ridge shrinks both fits a little)
    assert 0.6 < lr.mean() < 1.4
    assert 0.85 < float(np.mean(lr < 2.706)) < 0.95


def test_beta_is_chosen_where_the_miscalibration_is_one_sided(rng: np.random.Generator) -> None:
    # low scores far too low (a = 1/5), high scores right (b = 1): no Platt map fits
    truth = BetaMap(0.2, 1.0, 0.0)
    # measured power: 17% at 200 labels, 64% at 500, 96% at 1000, 100% at 2000
    chosen = [choose_map(*_beta_pool(rng, 1000, truth)) for _ in range(50)]
    assert sum(m.family == "beta" for m in chosen) >= 44
    few = [choose_map(*_beta_pool(rng, 15, truth)) for _ in range(50)]
    assert sum(m.family == "platt" for m in few) >= 40  # with few labels Platt stays


def test_beta_is_not_chosen_where_it_trusts_the_low_scores_more_than_the_high_ones(
    rng: np.random.Generator,
) -> None:
    # high scores too high (b = 1/5), low scores right (a = 1): the LR test rejects Platt, but
    # the beta map would trust the low scores (the predicted negatives) more than Platt does
    score, label = _beta_pool(rng, 3000, BetaMap(1.0, 0.2, 0.0))
    ones = np.ones(score.size)
    platt, beta = fit_platt(score, label, ones), fit_beta(score, label, ones)
    assert likelihood_ratio(score, label, platt, beta) > 6.63 and beta.a > beta.b
    low = np.array([1e-9, 1e-6, 1e-3])
    assert np.all(beta.apply(low) < platt.apply(low))  # surer that these are negatives
    assert choose_map(score, label) == platt
    # the mirror image (scores 1 - s, labels 1 - y) is the other one-sided case: beta is taken
    flipped = choose_map(1.0 - score, 1 - label)
    assert flipped.family == "beta"
    assert isinstance(flipped, BetaMap) and flipped.a < flipped.b
