"""Selection from recalibrated probabilities, and rounds combined without bias."""

from __future__ import annotations

import dataclasses
import doctest
import itertools
import math

import numpy as np
import pytest

from monitor.sim.simulate import calibrated_pool
from monitor.stats import design, selection
from monitor.stats.calibration import IDENTITY, PlattMap, fit_platt
from monitor.stats.design import (
    Recalibration,
    recalibrate,
    recalibrated_g,
    recalibrated_weights,
    rounds_mixture,
)
from monitor.stats.falpha import intrinsic_falpha
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import (
    defensive_mix,
    defensive_share,
    inclusion_for_budget,
    q_star_falpha,
)


def test_docstring_examples() -> None:
    assert doctest.testmod(design).failed == 0
    assert doctest.testmod(selection).failed == 0


def test_defensive_share_is_bounded_and_never_zero() -> None:
    assert defensive_share(0.1, math.nan, math.nan) == 0.1
    assert defensive_share(0.1, 0.95, 0.0) == 0.1
    assert defensive_share(0.1, 0.5, 0.0) == pytest.approx(0.2)
    assert defensive_share(0.1, 0.0, 1.0) == 0.5
    assert defensive_share(0.7, 0.0, 1.0) == 0.7  # a configured share above the cap stays
    # the fewer of the model's mistakes the labels saw, the closer to uniform
    shares = [defensive_share(0.1, 0.95, 0.0, k) for k in (0, 5, 10, 100, 1000)]
    assert shares[0] == 0.5 and shares == sorted(shares, reverse=True) and shares[-1] < 0.11
    with pytest.raises(ValueError, match="lam0"):
        defensive_share(0.0, 0.9)


def test_without_labels_it_is_todays_design_at_half_uniform(rng: np.random.Generator) -> None:
    score, _ = calibrated_pool(5000, 0.05, rng)
    pred = (score >= 0.5).astype(np.int8)
    recal = recalibrate(LabeledSample.concat([]))
    assert recal.cal_map == IDENTITY and math.isnan(recal.likelihood)
    got = recalibrated_weights(score, pred, 0.5, recal, 0.1)
    g = intrinsic_falpha(score, pred, 0.5)
    want = defensive_mix(q_star_falpha(score, pred, 0.5, g), 0.5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.mean() == pytest.approx(1.0)


def test_recalibrated_g_uses_expected_counts_and_has_a_prior() -> None:
    p_hat = np.array([0.8, 0.4, 0.1, 0.1])
    pred = np.array([1, 1, 0, 0])
    # sum f p = 1.2; alpha N1 + (1 - alpha) sum p = 0.5 * 2 + 0.5 * 1.4
    assert recalibrated_g(p_hat, pred, 0.5) == pytest.approx(1.2 / 1.7)
    assert recalibrated_g(np.zeros(3), np.zeros(3), 0.0) == design.G_PRIOR


def test_an_overconfident_model_is_recalibrated_and_its_misses_get_weight(
    rng: np.random.Generator,
) -> None:
    score, label = calibrated_pool(50_000, 0.05, rng, overconfidence=10.0)
    pred = (score >= 0.5).astype(np.int8)
    pi = inclusion_for_budget(np.ones(score.size), 400)[0]
    take = rng.random(score.size) < pi
    sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
    recal = recalibrate(sample)
    assert 0.05 < recal.cal_map.b < 0.25  # the true slope is 1/10
    assert recal.likelihood > recal.raw_likelihood
    assert recal.calibration_error < recal.raw_calibration_error
    fn = (pred == 0) & (label == 1)
    for alpha in (0.0, 0.5):
        g = intrinsic_falpha(score, pred, alpha)
        raw = defensive_mix(q_star_falpha(score, pred, alpha, g), 0.1)  # today's design
        new = recalibrated_weights(score, pred, alpha, recal, 0.1)
        # the confidently missed positives no longer sit at the defensive floor with the
        # largest weights (1/q, q of mean 1)
        assert np.quantile(1.0 / new[fn], 0.9) < 0.5 * np.quantile(1.0 / raw[fn], 0.9)


def test_the_map_counts_each_label_once_so_rare_positives_set_the_slope(
    rng: np.random.Generator,
) -> None:
    # 1% positives, logits x3 (true slope 1/3), 300 labels drawn by q* at the raw scores with a
    # 20% uniform share: the positives sit near pi = 1, the predicted negatives at the floor
    unit, weighted = [], []
    for _ in range(20):
        score, label = calibrated_pool(10_000, 0.01, rng, overconfidence=3.0)
        pred = (score >= 0.5).astype(np.int8)
        g = intrinsic_falpha(score, pred, 0.5)
        pi = inclusion_for_budget(defensive_mix(q_star_falpha(score, pred, 0.5, g), 0.2), 300)[0]
        take = rng.random(score.size) < pi
        sample = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
        unit.append(recalibrate(sample).cal_map.b)
        weighted.append(fit_platt(sample.score, sample.label, sample.v).b)
    err_unit = float(np.mean(np.abs(np.array(unit) - 1.0 / 3.0)))
    err_weighted = float(np.mean(np.abs(np.array(weighted) - 1.0 / 3.0)))
    # measured 0.04 against 0.13: weighted by 1/pi, the ridge toward the identity wins
    assert err_unit < 0.07 and err_unit < 0.5 * err_weighted
    assert float(np.mean(weighted)) > float(np.mean(unit))  # held toward the identity's slope 1


def test_defensive_grows_when_the_probabilities_are_poor() -> None:
    good = Recalibration(PlattMap(), 0.9, 0.01, 0.9, 0.01, errors=390)
    poor = Recalibration(PlattMap(), 0.4, 0.1, 0.3, 0.2, errors=390)
    unseen = Recalibration(PlattMap(), 0.9, 0.01, 0.9, 0.01, errors=0)
    assert good.defensive(0.1) == pytest.approx(0.11)
    assert poor.defensive(0.1) == pytest.approx(0.4)
    assert unseen.defensive(0.1) == pytest.approx(0.5)


def test_known_rows_count_exactly_and_the_latest_round_as_drawn() -> None:
    """Share 0 for the earlier rounds: they are counted exactly, the latest by Horvitz-Thompson."""
    known = LabeledSample.poisson([0.2, 0.7], [0, 1], [0, 1], [0.5, 0.25])
    latest = LabeledSample.poisson([0.9], [1], [1], [0.1])
    both = rounds_mixture([known, latest], [0.0, 1.0])
    np.testing.assert_allclose(both.v, [1.0, 1.0, 10.0])
    np.testing.assert_allclose(both.fpc, [0.0, 0.0, 0.9])
    assert both.label.tolist() == [0, 1, 1]


def test_a_round_that_estimates_the_rest_keeps_its_silent_strata() -> None:
    """A round whose predicted negatives are all pending cannot estimate the rest of the pool's
    (recall missing); a round counted exactly by a later one (share 0) can leave them pending."""
    silent = dataclasses.replace(
        LabeledSample.poisson([0.9], [1], [1], [0.5]), unanswered_strata=frozenset({0})
    )
    other = LabeledSample.poisson([0.2, 0.8], [0, 1], [0, 1], [0.5, 0.5])
    assert rounds_mixture([silent, other], [0.0, 1.0]).unanswered_strata == frozenset()
    assert rounds_mixture([other, silent], [0.0, 1.0]).unanswered_strata == frozenset({0})
    assert rounds_mixture([silent, other], [1.0, 1.0]).unanswered_strata == frozenset({0})


def test_rounds_mixture_refuses_shares_that_do_not_fit() -> None:
    one = LabeledSample.poisson([0.2], [0], [0], [0.5])
    for shares in ([1.0], [0.0, 0.0], [1.0, 0.0], [-1.0, 2.0]):
        with pytest.raises(ValueError, match="one per round"):
            rounds_mixture([one, one], shares)
    with pytest.raises(ValueError, match="one per round"):
        rounds_mixture([], [])


def _subsets(items: list[int], pi: dict[int, float]) -> list[tuple[frozenset[int], float]]:
    """Every Poisson outcome over ``items`` with its probability."""
    out = []
    for took in itertools.product((False, True), repeat=len(items)):
        prob = math.prod(pi[i] if t else 1.0 - pi[i] for i, t in zip(items, took, strict=True))
        out.append((frozenset(i for i, t in zip(items, took, strict=True) if t), prob))
    return out


def test_the_mixture_and_its_variance_are_exactly_unbiased_over_adaptive_rounds() -> None:
    """Enumerate every outcome of three rounds, each round's pi a function of the earlier draws.

    ``E[sum v z] = sum z`` and ``E[sum fpc v^2 z^2] = Var(sum v z)`` exactly (no simulation): the
    martingale argument of ``rounds_mixture``, with shares 0, 1 and 3 as ``monitor estimate``
    gives rounds of 0, 10 and 30 expected labels.
    """
    z = [3.0, -1.0, 0.5, 2.0, 4.0]
    items = list(range(len(z)))

    def pi_after(known: frozenset[int]) -> dict[int, float]:
        # adaptive: the earlier draws (their values) move the next round's probabilities
        tilt = sum(z[i] for i in known)
        return {i: 0.2 + 0.6 * ((i + tilt) % 3) / 3 for i in items if i not in known}

    def sample(took: frozenset[int], pi: dict[int, float]) -> LabeledSample:
        idx = sorted(took)
        return LabeledSample.poisson(
            [i / 10 for i in idx], [0] * len(idx), [0] * len(idx), [pi[i] for i in idx]
        )

    mean = second = var_hat = 0.0
    pi1 = dict.fromkeys(items, 0.5)
    for s1, p1 in _subsets(items, pi1):
        pi2 = pi_after(s1)
        for s2, p2 in _subsets(sorted(pi2), pi2):
            pi3 = pi_after(s1 | s2)
            for s3, p3 in _subsets(sorted(pi3), pi3):
                mix = rounds_mixture(
                    [sample(s1, pi1), sample(s2, pi2), sample(s3, pi3)], [0.0, 1.0, 3.0]
                )
                zs = np.array([z[round(10 * s)] for s in mix.score])
                total = float(np.dot(mix.v, zs))
                prob = p1 * p2 * p3
                mean += prob * total
                second += prob * total * total
                var_hat += prob * float(np.dot(mix.fpc * mix.v**2, zs**2))
    assert mean == pytest.approx(sum(z), rel=1e-12)
    assert var_hat == pytest.approx(second - mean * mean, rel=1e-12)


def test_rounds_with_a_map_fitted_on_the_earlier_labels_are_unbiased() -> None:
    """Round 2's pi depend on round 1's labels and skip its items; the estimate stays unbiased."""
    rng = np.random.default_rng(7)
    score, label = calibrated_pool(4000, 0.05, rng, overconfidence=10.0)
    pred = (score >= 0.5).astype(np.int8)
    truth_fn = float(((pred == 0) & (label == 1)).sum())
    raw = recalibrate(LabeledSample.concat([]))
    pi1 = inclusion_for_budget(recalibrated_weights(score, pred, 0.0, raw, 0.5), 40)[0]
    totals = []
    for _ in range(1500):
        t1 = rng.random(score.size) < pi1
        s1 = LabeledSample.poisson(score[t1], pred[t1], label[t1], pi1[t1])
        q2 = np.where(t1, 0.0, recalibrated_weights(score, pred, 0.0, recalibrate(s1), 0.1))
        pi2 = inclusion_for_budget(q2, 120)[0]
        t2 = rng.random(score.size) < pi2
        assert not (t1 & t2).any()
        s2 = LabeledSample.poisson(score[t2], pred[t2], label[t2], pi2[t2])
        both = rounds_mixture([s1, s2], [1.0, 3.0])
        totals.append(float(both.v[(both.pred == 0) & (both.label == 1)].sum()))
    arr = np.asarray(totals)
    se = arr.std(ddof=1) / math.sqrt(arr.size)
    assert abs(arr.mean() - truth_fn) < 3.5 * se, (arr.mean(), truth_fn, se)


def _audited(rng: np.random.Generator, overconfidence: float, n: int = 300) -> LabeledSample:
    """``n`` labels of a 5%-positive model, audited with pi 0.5 above score 0.2, else 0.05."""
    score, label = calibrated_pool(20_000, 0.05, rng, overconfidence)
    pi = np.where(score >= 0.2, 0.5, 0.05)
    pick = rng.choice(len(score), n, replace=False, p=pi / pi.sum())
    pred = (score[pick] >= 0.5).astype(np.int8)
    return LabeledSample.poisson(score[pick], pred, label[pick], pi[pick])


def test_the_daemons_refit_keeps_calibrated_scores_and_their_share() -> None:
    """Labels of calibrated scores rarely reject them (99 of these 100 fits keep the identity and
    the configured share without the evidence term: the ridge toward the identity makes the test
    conservative); over-confident ones (logits x3) always do."""
    rng = np.random.default_rng(7)
    kept = 0
    for _ in range(100):
        recal = recalibrate(_audited(rng, 1.0), scores_level=0.05)
        if recal.scores_kept:
            kept += 1
            assert recal.cal_map == IDENTITY
            assert recal.defensive(0.1) == defensive_share(
                0.1, recal.likelihood, recal.calibration_error
            )
            assert recal.defensive(0.1) < defensive_share(
                0.1, recal.likelihood, recal.calibration_error, recal.errors
            )
    assert 85 <= kept <= 100, kept
    for _ in range(20):
        sample = _audited(rng, 3.0)
        tested = recalibrate(sample, scores_level=0.05)
        assert not tested.scores_kept and tested == recalibrate(sample)  # the map, as offline
        assert tested.cal_map.params()["b"] < 0.6  # the over-confidence undone
        assert not recalibrate(_audited(rng, 1.0)).scores_kept  # offline: no test
