"""Design-weighted Platt recalibration with a ridge toward the identity, and calibration error."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy import optimize

from monitor.stats import calibration
from monitor.stats.calibration import (
    IDENTITY,
    PlattMap,
    calibration_error,
    expit,
    fit_platt,
    logit,
)


def _platt_pool(
    rng: np.random.Generator, n: int, a: float, b: float
) -> tuple[np.ndarray, np.ndarray]:
    """Scores s whose true probability is expit(a + b logit(s)) (logits inside the clip)."""
    x = rng.normal(-2.0, 2.5, n)
    y = (rng.random(n) < expit(a + b * x)).astype(np.int8)
    return expit(x), y


def test_docstring_examples() -> None:
    assert doctest.testmod(calibration).failed == 0


def test_no_labels_gives_the_identity_map() -> None:
    m = fit_platt([], [], [])
    assert m == IDENTITY and m.is_identity
    s = np.array([0.0, 1e-20, 0.3, 1.0])
    assert np.array_equal(m.apply(s), s)


@pytest.mark.parametrize(("a", "b"), [(0.0, 1.0), (0.5, 1 / 3), (-1.0, 0.1), (0.3, 2.0)])
def test_recovers_a_platt_form_miscalibration(rng: np.random.Generator, a: float, b: float) -> None:
    score, label = _platt_pool(rng, 40_000, a, b)
    m = fit_platt(score, label, np.ones(score.size))
    assert m.a == pytest.approx(a, abs=0.06)
    assert m.b == pytest.approx(b, abs=0.04)
    assert m.n_labels == score.size and m.ess == pytest.approx(score.size)


def test_is_the_minimiser_of_the_penalised_objective(rng: np.random.Generator) -> None:
    score, label = _platt_pool(rng, 300, 0.4, 0.4)
    v = 1.0 / rng.uniform(0.01, 1.0, score.size)
    tau = 3.0
    m = fit_platt(score, label, v, tau=tau)
    x = logit(score)
    w = v * (v.sum() / (v @ v)) * 1.0  # ESS / sum(v) = sum(v) / sum(v^2)

    def objective(theta: np.ndarray) -> float:
        eta = theta[0] + theta[1] * x
        nll = np.logaddexp(0.0, eta) - label * eta
        return float(w @ nll + tau * (theta[0] ** 2 + (theta[1] - 1.0) ** 2))

    ref = optimize.minimize(objective, np.array([0.0, 1.0]), method="BFGS", tol=1e-12)
    assert (m.a, m.b) == pytest.approx(tuple(ref.x), abs=1e-5)


def test_design_weights_undo_a_selection_that_depends_on_the_score(
    rng: np.random.Generator,
) -> None:
    # census: true map (0.5, 0.4); audit favours high scores (pi grows with s)
    score, label = _platt_pool(rng, 200_000, 0.5, 0.4)
    pi = np.clip(0.02 + 0.3 * score, 0.0, 1.0)
    # labels depend on s beyond the Platt form: a kink, so that an unweighted fit is biased
    label = np.where(score > 0.5, (rng.random(score.size) < 0.95), label).astype(np.int8)
    census = fit_platt(score, label, np.ones(score.size))
    take = rng.random(score.size) < pi
    weighted = fit_platt(score[take], label[take], 1.0 / pi[take], tau=1e-3)
    unweighted = fit_platt(score[take], label[take], np.ones(int(take.sum())), tau=1e-3)
    err_w = abs(weighted.a - census.a) + abs(weighted.b - census.b)
    err_u = abs(unweighted.a - census.a) + abs(unweighted.b - census.b)
    assert err_w < 0.08 and err_u > 0.25


def test_the_ridge_pulls_few_labels_toward_the_identity(rng: np.random.Generator) -> None:
    score, label = _platt_pool(rng, 20, 0.0, 0.2)
    loose = fit_platt(score, label, np.ones(20), tau=1e-3)
    tight = fit_platt(score, label, np.ones(20), tau=1e6)
    middle = fit_platt(score, label, np.ones(20), tau=5.0)
    assert tight.a == pytest.approx(0.0, abs=1e-4) and tight.b == pytest.approx(1.0, abs=1e-4)
    assert loose.b < middle.b < tight.b


def test_the_ridge_is_in_pseudo_labels_whatever_the_scale_of_v(rng: np.random.Generator) -> None:
    score, label = _platt_pool(rng, 200, 0.3, 0.5)
    v = 1.0 / rng.uniform(0.05, 1.0, 200)
    one = fit_platt(score, label, v)
    many = fit_platt(score, label, 1000.0 * v)
    assert (one.a, one.b) == pytest.approx((many.a, many.b), abs=1e-9)


def test_separable_labels_give_a_finite_steep_monotone_map() -> None:
    score = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
    label = np.array([0, 0, 0, 1, 1, 1])
    m = fit_platt(score, label, np.ones(6), tau=0.01)
    assert np.isfinite([m.a, m.b]).all() and m.b > 1.0
    p = m.apply(np.linspace(0, 1, 101))
    assert np.all(np.diff(p) >= 0.0)


def test_anti_correlated_scores_give_a_flat_map_not_a_decreasing_one(
    rng: np.random.Generator,
) -> None:
    score = rng.random(2000)
    label = (rng.random(2000) < 1.0 - score).astype(np.int8)
    m = fit_platt(score, label, np.ones(2000), tau=1e-3)
    assert m.b == 0.0
    assert m.apply([0.01, 0.99]).tolist() == pytest.approx([label.mean()] * 2, abs=0.02)


def test_extreme_scores_are_clipped_not_infinite() -> None:
    m = PlattMap(a=0.0, b=0.1)
    p = m.apply([0.0, 1.0])
    assert np.isfinite(p).all() and 0.0 < p[0] < 0.04 and 0.96 < p[1] < 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([0.5], [1], [0.0]), "v must be finite and > 0"),
        (([0.5, 0.2], [1], [1.0]), "same length"),
    ],
)
def test_bad_input_is_refused(args: tuple[list[float], ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit_platt(*args)
    with pytest.raises(ValueError, match="tau"):
        fit_platt([0.5], [1], [1.0], tau=0.0)


def test_codec_round_trip_and_refusals() -> None:
    m = PlattMap(0.25, 0.5, 17, 12.5)
    assert PlattMap.from_list(m.to_list()) == m
    for bad, message in [
        ([0.0, 1.0, 1], "list"),
        ([0.0, -1.0, 1, 1.0], "b >= 0"),
        ([float("nan"), 1.0, 1, 1.0], "finite"),
        ([0.0, 1.0, 1.5, 1.0], "n_labels"),
    ]:
        with pytest.raises(ValueError, match=message):
            PlattMap.from_list(bad)


def test_calibration_error_equals_a_direct_computation(rng: np.random.Generator) -> None:
    p = rng.random(100)
    y = (rng.random(100) < p**2).astype(np.int8)
    v = rng.uniform(1.0, 5.0, 100)
    got = calibration_error(p, y, v, labels_per_bin=25, max_bins=10)
    order = np.argsort(p)  # no ties in continuous draws
    cum = np.cumsum(v[order])
    share = (cum - v[order] / 2) / v.sum()
    want = 0.0
    for k in range(4):
        sel = order[(share >= k / 4) & (share < (k + 1) / 4)]
        want += abs(float(v[sel] @ y[sel]) - float(v[sel] @ p[sel]))
    assert got == pytest.approx(want / v.sum(), rel=1e-12)


def test_calibration_error_is_small_for_calibrated_and_large_for_overconfident(
    rng: np.random.Generator,
) -> None:
    x = rng.normal(-1.0, 2.0, 50_000)
    y = (rng.random(x.size) < expit(x)).astype(np.int8)
    ones = np.ones(x.size)
    assert calibration_error(expit(x), y, ones) < 0.01
    assert calibration_error(expit(3 * x), y, ones) > 0.05
    fitted = fit_platt(expit(3 * x), y, ones)
    assert calibration_error(fitted.apply(expit(3 * x)), y, ones) < 0.01


def test_calibration_error_without_labels_is_missing() -> None:
    assert np.isnan(calibration_error([], [], []))
