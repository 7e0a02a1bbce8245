"""Invariants of the statistical core (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from monitor.stats.design import rounds_mixture
from monitor.stats.falpha import estimate_falpha
from monitor.stats.interval import strictly_inside
from monitor.stats.measures import measure_all
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import (
    defensive_mix,
    hash_uniform,
    inclusion_for_budget,
    q_star_falpha,
)
from monitor.stats.stratified import stratified_falpha

SETTINGS = settings(max_examples=60, deadline=None)
unit = st.floats(0.0, 1.0, allow_nan=False)
alphas = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]) | unit
levels = st.sampled_from([0.8, 0.9, 0.95, 0.99])


@st.composite
def samples(draw: st.DrawFn, min_size: int = 0) -> LabeledSample:
    n = draw(st.integers(min_size, 60))
    score = draw(hnp.arrays(np.float64, n, elements=unit))
    pred = draw(hnp.arrays(np.int8, n, elements=st.integers(0, 1)))
    label = draw(hnp.arrays(np.int8, n, elements=st.integers(0, 1)))
    pi = draw(hnp.arrays(np.float64, n, elements=st.floats(1e-4, 1.0)))
    return LabeledSample.poisson(score, pred, label, pi)


def _check_bounds(value: float, lower: float, upper: float) -> None:
    if math.isnan(value):
        assert math.isnan(lower) and math.isnan(upper)
    else:
        assert 0.0 <= lower <= value <= upper <= 1.0


@SETTINGS
@given(samples(), alphas, levels)
def test_interval_is_ordered_and_in_range(
    sample: LabeledSample, alpha: float, level: float
) -> None:
    m = measure_all(sample, alpha, level)
    for est in (m.f, m.precision, m.recall):
        _check_bounds(est.value, est.lower, est.upper)
        if est.defined:
            assert est.se >= 0.0
            assert est.n_labels >= 1
            assert est.ess > 0.0


@SETTINGS
@given(samples(), alphas)
def test_the_bias_correction_never_reads_0_or_1_where_the_ratio_does_not(
    sample: LabeledSample, alpha: float
) -> None:
    """F (or recall) 0 says no true positive anywhere, which a sample holding one refutes; the
    jackknife correction once reached it on tiny samples with one heavy false negative."""
    sizes = (5 * sample.label.size + 1, 20 * sample.label.size + 1)
    for corrected, plain in (
        (
            estimate_falpha(sample, alpha, 0.95),
            estimate_falpha(sample, alpha, 0.95, bias_correction=False),
        ),
        (
            stratified_falpha(sample, *sizes, alpha, 0.95),
            stratified_falpha(sample, *sizes, alpha, 0.95, bias_correction=False),
        ),
    ):
        if plain.defined and strictly_inside(plain.value):  # inside by more than rounding
            assert 0.0 < corrected.value < 1.0


@SETTINGS
@given(samples(min_size=1), alphas, st.randoms(use_true_random=False))
def test_invariant_to_row_order(sample: LabeledSample, alpha: float, rnd: object) -> None:
    order = np.random.default_rng(len(sample)).permutation(len(sample))
    shuffled = LabeledSample(
        sample.score[order],
        sample.pred[order],
        sample.label[order],
        sample.v[order],
        sample.fpc[order],
    )
    a = estimate_falpha(sample, alpha, 0.95)
    b = estimate_falpha(shuffled, alpha, 0.95)
    if not a.defined:
        assert not b.defined
        return
    for x, y in ((a.value, b.value), (a.se, b.se), (a.lower, b.lower), (a.upper, b.upper)):
        assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(samples(), st.floats(0.0, 1.0))
def test_precision_without_predicted_positives_is_nan(sample: LabeledSample, alpha: float) -> None:
    negatives = sample.pred == 0
    only_neg = LabeledSample(
        sample.score[negatives],
        sample.pred[negatives],
        sample.label[negatives],
        sample.v[negatives],
        sample.fpc[negatives],
    )
    assert math.isnan(estimate_falpha(only_neg, 1.0, 0.95).value)


@SETTINGS
@given(
    hnp.arrays(np.float64, st.integers(1, 300), elements=unit),
    st.floats(0.0, 1.0),
    st.floats(0.01, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.5, 400.0),
)
def test_pi_positive_whenever_lambda_positive(
    score: np.ndarray, alpha: float, lam: float, g: float, budget: float
) -> None:
    pred = (score >= 0.5).astype(np.int8)
    q = defensive_mix(q_star_falpha(score, pred, alpha, g), lam)
    assert np.all(q >= lam * (1 - 1e-12))
    pi, kappa = inclusion_for_budget(q, budget)
    assert np.all(pi > 0.0) and np.all(pi <= 1.0)
    assert math.isclose(pi.sum(), min(budget, score.size), rel_tol=1e-9)
    assert kappa > 0.0


@SETTINGS
@given(
    hnp.arrays(
        np.float64, st.integers(1, 300), elements=st.floats(0.0, 1e6, allow_subnormal=False)
    ),
    st.just(0.0) | st.floats(1e-6, 500.0),
)
def test_inclusion_meets_budget(q: np.ndarray, budget: float) -> None:
    pi, kappa = inclusion_for_budget(q, budget)
    assert np.all((pi >= 0.0) & (pi <= 1.0))
    positive = int(np.count_nonzero(q > 0))
    assert math.isclose(pi.sum(), min(budget, positive), rel_tol=1e-9, abs_tol=1e-9)
    assert np.all(pi[q == 0] == 0.0)
    if math.isfinite(kappa) and float(kappa) * float(q.max()) < 1e300:
        np.testing.assert_allclose(pi, np.minimum(1.0, kappa * q), rtol=1e-9, atol=1e-300)


@SETTINGS
@given(st.lists(st.text(max_size=40), max_size=50), st.text(max_size=20))
def test_hash_is_deterministic_and_in_range(ids: list[str], salt: str) -> None:
    a = hash_uniform(ids, salt)
    b = hash_uniform(list(reversed(ids)), salt)[::-1]
    np.testing.assert_array_equal(a, b)  # each id's number does not depend on the batch
    assert np.all((a >= 0.0) & (a < 1.0))
    if ids:
        single = np.array([hash_uniform([i], salt)[0] for i in ids])
        np.testing.assert_array_equal(a, single)


@SETTINGS
@given(st.integers(2, 40), st.integers(2, 40), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_general_equals_stratified_point_estimate(
    n1: int, n0: int, alpha: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    big_n1, big_n0 = n1 * 5, n0 * 20
    label = np.concatenate([rng.integers(0, 2, n1), (rng.random(n0) < 0.1).astype(int)])
    pred = np.concatenate([np.ones(n1, int), np.zeros(n0, int)])
    pi = np.concatenate([np.full(n1, n1 / big_n1), np.full(n0, n0 / big_n0)])
    sample = LabeledSample.poisson(rng.random(n1 + n0), pred, label, pi)
    general = estimate_falpha(sample, alpha, 0.95, bias_correction=False)
    strat = stratified_falpha(sample, big_n1, big_n0, alpha, 0.95, bias_correction=False)
    assert general.defined == strat.defined
    if general.defined:
        assert math.isclose(general.value, strat.value, rel_tol=1e-9, abs_tol=1e-12)
        _check_bounds(strat.value, strat.lower, strat.upper)
    # bias-corrected (default): defined alike, in range, inside their own intervals
    general_j = estimate_falpha(sample, alpha, 0.95)
    strat_j = stratified_falpha(sample, big_n1, big_n0, alpha, 0.95)
    assert general_j.defined == strat_j.defined == general.defined
    if general_j.defined:
        _check_bounds(general_j.value, general_j.lower, general_j.upper)
        _check_bounds(strat_j.value, strat_j.lower, strat_j.upper)


@SETTINGS
@given(
    st.lists(samples(), min_size=1, max_size=4),
    st.data(),
    st.floats(0.01, 100.0),
)
def test_rounds_mixture_weights_and_variance_terms(
    rounds: list[LabeledSample], data: st.DataObject, scale: float
) -> None:
    """Each label's weight is its own round's share / pi plus the later rounds' shares, its
    variance term ``fpc v^2`` the own part's ``(1 - pi) (w / pi)^2``; scaling the shares changes
    nothing; with only the latest round's share the earlier rounds count exactly."""
    earlier = st.lists(st.floats(0.0, 10.0), min_size=len(rounds) - 1, max_size=len(rounds) - 1)
    shares = [*data.draw(earlier), data.draw(st.floats(1e-300, 10.0))]
    mix = rounds_mixture(rounds, shares)
    again = rounds_mixture(rounds, [scale * s for s in shares])
    np.testing.assert_allclose(again.v, mix.v, rtol=1e-12)
    # absolute: a subnormal share (5e-324) is quantised, so scaling it moves a fpc of 1e-229 by
    # 78% of itself, and nothing that fpc could change
    np.testing.assert_allclose(again.fpc, mix.fpc, rtol=1e-12, atol=1e-15)
    w = np.asarray(shares) / sum(shares)
    own = np.concatenate([np.full(len(r), w[i]) * r.v for i, r in enumerate(rounds)])
    later = np.concatenate([np.full(len(r), w[i + 1 :].sum()) for i, r in enumerate(rounds)])
    pi = np.concatenate([1.0 / r.v for r in rounds])
    np.testing.assert_allclose(mix.v, own + later, rtol=1e-12)
    np.testing.assert_allclose(mix.fpc * mix.v**2, (1.0 - pi) * own**2, rtol=1e-9, atol=1e-12)
    assert ((mix.fpc >= 0.0) & (mix.fpc <= 1.0)).all()
    last = rounds_mixture(rounds, [0.0] * (len(rounds) - 1) + [1.0])
    n_early = sum(len(r) for r in rounds[:-1])
    np.testing.assert_array_equal(last.v[:n_early], 1.0)
    np.testing.assert_array_equal(last.fpc[:n_early], 0.0)
    np.testing.assert_allclose(last.v[n_early:], rounds[-1].v)
