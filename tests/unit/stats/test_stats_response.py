"""Answers as a second phase of sampling (monitor.stats.response)."""

import math

import numpy as np
import pytest

from monitor.sim.simulate import calibrated_pool
from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.interval import second_phase_variance
from monitor.stats.measures import measure_all
from monitor.stats.response import (
    answer_classes,
    answer_rates,
    pending_share,
    response_sample,
    worst_case_bounds,
)
from monitor.stats.sample import AnswerGroups, LabeledSample


def _classes(bucket: list[int], pred: list[int], pi: list[float], ans: list[bool]) -> list[int]:
    return [int(c) for c in answer_classes(bucket, pred, pi, ans, min_answers=2)]


def test_dense_cells_are_classes_of_their_own() -> None:
    # two bands of predicted positives with two answers each: two classes, and the negatives
    got = _classes([0] * 6, [1, 1, 1, 1, 0, 0], [1.0] * 2 + [0.6] * 2 + [0.05] * 2, [True] * 6)
    assert got[0] == got[1] != got[2] == got[3] != got[4] == got[5]
    assert len(set(got)) == 3


def test_sparse_cells_pool_within_bucket_then_over_the_window_never_across_predictions() -> None:
    bucket = [0, 0, 0, 1, 1, 1]
    pred = [1, 1, 1, 1, 1, 0]
    pi = [1.0, 0.6, 0.6, 1.0, 0.6, 0.05]
    ans = [True, True, False, True, False, True]
    got = _classes(bucket, pred, pi, ans)
    # bucket 0's bands have 1 answer each but 2 together: (bucket 0, f=1) is a class;
    # bucket 1's positives have 1 answer: they pool with nothing left -> the f=1 stratum
    assert got[5] not in got[:5]
    assert len(set(got[:5])) == 1  # rule 4: the whole predicted-positive stratum


def test_rule_three_pools_the_rest_over_buckets() -> None:
    bucket = [0, 0, 1, 2]
    pred = [1, 1, 1, 1]
    pi = [1.0, 1.0, 1.0, 0.6]
    ans = [True, True, True, True]
    got = _classes(bucket, pred, pi, ans)
    assert got[0] == got[1] != got[2] == got[3]


def test_answer_rates_count_pending_and_missing_as_not_answered() -> None:
    rate = answer_rates([0, 0, 0, 0, 1, 1], [True, True, True, False, True, False], [1.0] * 6)
    assert rate.tolist() == [0.75] * 4 + [0.5] * 2
    # weighted by 1/pi: the unanswered request carries 4 of the class's 5 units of weight
    rate = answer_rates([0, 0], [True, False], [1.0, 0.25])
    assert rate.tolist() == [0.2, 0.2]


def test_reweighted_estimate_lies_within_the_worst_case_bounds(
    rng: np.random.Generator,
) -> None:
    """Weighted rates keep each class's weight: the plain ratio imputes each class's mean."""
    score, label = calibrated_pool(3000, 0.1, rng)
    pred = (score >= 0.5).astype(np.int8)
    pi = np.clip(0.02 + score, 0.0, 1.0)
    y = np.where(rng.random(3000) < np.where(pred == 1, 0.6, 0.9), label, -1)
    s = response_sample(score, pred, y, pi, rng.integers(0, 3, 3000))
    for alpha in (0.0, 0.5, 1.0):
        est = estimate_falpha(s, alpha, 0.95, bias_correction=False)
        lo, hi = worst_case_bounds(pred, y, pi, alpha)
        assert lo <= est.value <= hi


def test_everything_answered_gives_the_one_phase_estimate(rng: np.random.Generator) -> None:
    score, label = calibrated_pool(4000, 0.05, rng)
    pred = (score >= 0.5).astype(np.int8)
    pi = np.clip(0.05 + 0.9 * score, 0.0, 1.0)
    take = np.flatnonzero(rng.random(4000) < pi)
    two = response_sample(score[take], pred[take], label[take], pi[take], np.zeros(take.size))
    one = LabeledSample.poisson(score[take], pred[take], label[take], pi[take])
    for alpha in (0.0, 0.5, 1.0):
        a, b = estimate_falpha(two, alpha, 0.95), estimate_falpha(one, alpha, 0.95)
        assert a.value == pytest.approx(b.value, rel=1e-12)
        assert a.se == pytest.approx(b.se, rel=1e-12)


def test_pending_certainty_stratum_is_a_sample_not_a_census() -> None:
    """100 predicted positives at pi = 1, 20 pending: the SRS variance (1 - m/n) S^2 / m."""
    y = np.array([1] * 64 + [0] * 16 + [1] * 20)
    label = y.copy()
    label[80:] = -1
    s = response_sample(np.full(100, 0.9), np.ones(100), label, np.ones(100), np.zeros(100))
    est = estimate_falpha(s, 1.0, 0.95)
    labelled = y[:80].astype(np.float64)
    srs = math.sqrt((1 - 0.8) * labelled.var(ddof=1) / 80)
    assert est.value == pytest.approx(0.8)
    assert est.se == pytest.approx(srs, rel=1e-9)
    assert est.lower < 0.8 < est.upper
    assert s.v.tolist() == [1.25] * 80 and s.fpc == pytest.approx(np.full(80, 0.2))
    # the old estimate (labelled items as a census) is a point
    census = estimate_falpha(
        LabeledSample.poisson(np.full(80, 0.9), np.ones(80), y[:80], np.ones(80)), 1.0, 0.95
    )
    assert census.lower == census.upper


@pytest.mark.parametrize("answered_negatives", [0, 1])
def test_a_stratum_with_every_request_pending_is_missing_not_left_out(
    answered_negatives: int,
) -> None:
    """30 predicted positives answered (24 true), 100 predicted negatives at pi = 0.05 pending:
    recall and F1 read 1.0 and 0.889 with a point interval, the predicted negatives' weight
    simply gone; they are missing (NaN) until one predicted negative is answered, precision is
    not, and the confusion counts of the predicted negatives are NaN, not 0."""
    pred = np.array([1] * 30 + [0] * 100)
    label = np.array([1] * 24 + [0] * 6 + [-1] * 100)
    label[30 : 30 + answered_negatives] = 1
    pi = np.where(pred == 1, 1.0, 0.05)
    s = response_sample(np.where(pred == 1, 0.9, 0.05), pred, label, pi, np.zeros(130))
    m = measure_all(s, 0.5, 0.95)
    assert m.precision.value == pytest.approx(0.8)
    if answered_negatives:
        assert s.unanswered_strata == frozenset()
        assert m.recall.defined and m.f.defined
        assert m.recall.upper < 1.0  # the one false negative stands for the 99 pending
        assert m.confusion.fn > 0.0
    else:
        assert s.unanswered_strata == frozenset({0})
        assert not m.recall.defined and not m.f.defined
        assert m.recall.n_labels == 24  # the labels it has, as before any answer
        assert math.isnan(m.confusion.fn) and math.isnan(m.confusion.tn)
        assert m.confusion.tp == pytest.approx(24.0)
    # the mirror: every predicted positive pending, so every measure counts a silent stratum
    mirror = np.where(pred == 1, -1, 0)
    mirror[30:35] = 1
    m = measure_all(response_sample(np.full(130, 0.5), pred, mirror, pi, np.zeros(130)), 0.5, 0.95)
    assert not (m.f.defined or m.precision.defined or m.recall.defined)
    assert math.isnan(m.confusion.tp) and m.confusion.fn > 0.0


def test_second_phase_variance_single_answer_uses_its_square() -> None:
    resid = np.array([1.0, 3.0, 2.0])
    answers = AnswerGroups(np.array([0, 0, 1]), np.array([0.5, 0.5, 0.25]))
    # class 0: (1 - 0.5) * 2 * var([1, 3]) = 0.5 * 2 * 2 = 2; class 1: 0.75 * 4 = 3
    assert second_phase_variance(resid, np.ones(3), answers) == pytest.approx(5.0)


def test_second_phase_variance_centres_on_the_weighted_class_mean() -> None:
    """A class pooling pi from 0.02 to 1 whose z do not average 0 (true positives for recall).

    The class's share of the estimate is A sum(z/pi) / sum(1/pi) over its answers (weighted
    answer rate); its variance over the answering (Bernoulli, rate 1/2, the requests fixed) is
    matched by the residuals from the weighted class mean, not by those from the plain mean of
    e = z / (pi r) (the count-rate form), which misses the answers' effect on r: here it is
    about twice the variance (on the delay grid it was below it; the sign depends on the class).
    """
    rng = np.random.default_rng(11)
    n, reps = 400, 4000
    pi = np.exp(rng.uniform(np.log(0.02), 0.0, n))
    z = (rng.random(n) < 0.7).astype(np.float64)
    a_total = float((1.0 / pi).sum())
    shares, weighted, plain = [], [], []
    for _ in range(reps):
        ans = rng.random(n) < 0.5
        r = float((1.0 / pi[ans]).sum()) / a_total
        v = 1.0 / (pi[ans] * r)
        shares.append(float((z[ans] * v).sum()))
        groups = AnswerGroups(np.zeros(int(ans.sum()), np.int64), np.full(int(ans.sum()), r))
        weighted.append(second_phase_variance(z[ans] * v, v, groups))
        plain.append(second_phase_variance(z[ans] * v, np.ones_like(v), groups))
    empirical = float(np.var(shares))
    assert np.mean(weighted) == pytest.approx(empirical, rel=0.1)
    assert np.mean(plain) > 1.5 * empirical


def test_per_stratum_answer_rates_no_longer_bias_recall(rng: np.random.Generator) -> None:
    """90% of predicted positives and 50% of predicted negatives answered (issue 11)."""
    score, label = calibrated_pool(20_000, 0.05, rng)
    pred = (score >= 0.5).astype(np.int8)
    truth = falpha_exact(pred, label, 0.0)
    pi = np.where(pred == 1, 1.0, np.clip(0.02 + 0.5 * score, 0.0, 1.0))
    new, old = [], []
    for _ in range(200):
        take = np.flatnonzero(rng.random(pi.size) < pi)
        ans = rng.random(take.size) < np.where(pred[take] == 1, 0.9, 0.5)
        lab = np.where(ans, label[take], -1)
        s = response_sample(score[take], pred[take], lab, pi[take], np.zeros(take.size))
        new.append(estimate_falpha(s, 0.0, 0.95))
        a = take[ans]
        old.append(
            estimate_falpha(LabeledSample.poisson(score[a], pred[a], label[a], pi[a]), 0.0, 0.95)
        )
    se = float(np.mean([e.se for e in new]))
    mc = float(np.std([e.value for e in new])) / math.sqrt(len(new))
    assert abs(np.mean([e.value for e in new]) - truth) < 4 * mc
    assert np.mean([e.value for e in old]) - truth > 2.5 * se  # issue 11: ~3 se here


def test_worst_case_bounds_fill_the_unanswered_labels() -> None:
    pred = np.array([1, 1, 1, 1, 0, 0])
    label = np.array([1, 0, -1, -1, 1, -1])
    pi = np.ones(6)
    lo, hi = worst_case_bounds(pred, label, pi, 1.0)
    assert (lo, hi) == (0.25, 0.75)  # precision: pending all 0 / all 1
    lo, hi = worst_case_bounds(pred, label, pi, 0.0)
    # recall: lowest with positives' pending 0 and the negative's pending 1 -> 1 / 3
    assert lo == pytest.approx(1 / 3) and hi == pytest.approx(3 / 4)
    full = np.array([1, 0, 1, 0, 1, 0])
    assert worst_case_bounds(pred, full, pi, 0.5) == (falpha_exact(pred, full, 0.5),) * 2


def test_pending_share_is_a_share_of_weight() -> None:
    pi = np.array([1.0, 1.0, 0.01])
    assert pending_share(pi, [False, False, True]) == pytest.approx(100 / 102)
    assert math.isnan(pending_share([], []))
