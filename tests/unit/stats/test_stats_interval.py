"""The ratio estimate's delta-method standard error and its intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from monitor.stats.alerting import upper_bound
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha
from monitor.stats.interval import (
    PSEUDO_EVENTS,
    interval_from_se,
    ratio_bias,
    ratio_estimate,
    ratio_jackknife_bias,
    t_quantile,
    unseen_event_design,
    wilson_interval,
)
from monitor.stats.measures import measure_all
from monitor.stats.sample import LabeledSample


def _random_design(rng: np.random.Generator, n: int = 80) -> tuple[np.ndarray, ...]:
    gain = (rng.random(n) < 0.6).astype(np.float64)
    weight = rng.choice([0.0, 0.5, 1.0], size=n)
    pi = rng.uniform(0.01, 1.0, n)
    return gain, weight, 1.0 / pi, 1.0 - pi


def test_se_is_the_delta_method_with_fpc(rng: np.random.Generator) -> None:
    gain, weight, v, fpc = _random_design(rng)
    est = ratio_estimate(gain, weight, v, fpc, 0.95, bias_correction=False)
    g = np.sum(v * weight * gain) / np.sum(v * weight)
    se = math.sqrt(np.sum(fpc * v**2 * weight**2 * (gain - g) ** 2)) / np.sum(v * weight)
    assert est.value == pytest.approx(g)
    assert est.se == pytest.approx(se)
    n = int(np.count_nonzero(weight))
    assert est.n_labels == n
    assert est.ess == pytest.approx(np.sum(v * weight) ** 2 / np.sum((v * weight) ** 2))
    # logit-scale t interval
    t = stats.t.ppf(0.975, n - 1)
    half = t * se / (g * (1 - g))
    assert est.lower == pytest.approx(special.expit(special.logit(g) - half))
    assert est.upper == pytest.approx(special.expit(special.logit(g) + half))
    assert est.level == 0.95
    # default: the same se, the interval around the jackknife-corrected value G_J
    corrected = ratio_estimate(gain, weight, v, fpc, 0.95)
    g_j = g - ratio_jackknife_bias(gain, weight, v, fpc)
    assert corrected.value == pytest.approx(g_j)
    assert corrected.se == est.se
    half_j = t * se / (g_j * (1 - g_j))
    assert corrected.lower == pytest.approx(special.expit(special.logit(g_j) - half_j))
    assert corrected.upper == pytest.approx(special.expit(special.logit(g_j) + half_j))


def test_items_audited_with_certainty_add_no_error(rng: np.random.Generator) -> None:
    gain, weight, v, fpc = _random_design(rng)
    base = ratio_estimate(gain, weight, v, fpc, 0.95)
    fpc2 = fpc.copy()
    fpc2[:40] = 0.0
    v2 = v.copy()
    v2[:40] = 1.0
    certain = ratio_estimate(gain, weight, v2, fpc2, 0.95, bias_correction=False)
    g = certain.value
    vw = v2 * weight
    expected = math.sqrt(np.sum((fpc2 * (vw * (gain - g)) ** 2)[40:])) / vw.sum()
    assert certain.se == pytest.approx(expected)
    assert base.se > 0.0


def test_higher_level_gives_wider_interval(rng: np.random.Generator) -> None:
    gain, weight, v, fpc = _random_design(rng)
    narrow = ratio_estimate(gain, weight, v, fpc, 0.8)
    wide = ratio_estimate(gain, weight, v, fpc, 0.99)
    assert wide.lower < narrow.lower < narrow.value < narrow.upper < wide.upper


def test_all_gains_equal_uses_wilson_with_kish_n() -> None:
    n = 30
    gain = np.ones(n)
    weight = np.ones(n)
    pi = np.full(n, 0.1)
    est = ratio_estimate(gain, weight, 1 / pi, 1 - pi, 0.95)
    assert est.value == 1.0 and est.se == 0.0
    n_eff = n / 0.9  # (sum v)^2 / sum((1 - pi) v^2) with equal weights
    t = t_quantile(0.95, n)
    assert est.upper == 1.0
    assert est.lower == pytest.approx(n_eff / (n_eff + t * t))
    zero = ratio_estimate(np.zeros(n), weight, 1 / pi, 1 - pi, 0.95)
    assert zero.value == 0.0 and zero.lower == 0.0
    assert zero.upper == pytest.approx(t * t / (n_eff + t * t))


def test_single_label_gets_a_wide_interval() -> None:
    est = ratio_estimate(np.ones(1), np.ones(1), np.array([50.0]), np.array([0.98]), 0.95)
    assert est.value == 1.0
    assert est.lower < 0.1
    assert est.upper == 1.0


def test_missing_when_no_weight() -> None:
    est = ratio_estimate(np.ones(3), np.zeros(3), np.ones(3), np.ones(3), 0.9)
    assert math.isnan(est.value) and math.isnan(est.se)
    assert est.level == 0.9
    assert est.n_labels == 0


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="one shape"):
        ratio_estimate(np.ones(3), np.ones(2), np.ones(3), np.ones(3), 0.95)


def test_t_quantile() -> None:
    assert t_quantile(0.95, 101) == pytest.approx(stats.t.ppf(0.975, 100))
    assert t_quantile(0.95, 1) == pytest.approx(stats.t.ppf(0.975, 1))
    assert t_quantile(0.95, 0) == pytest.approx(stats.t.ppf(0.975, 1))
    with pytest.raises(ValueError, match="level"):
        t_quantile(1.0, 10)


def test_wilson_interval_matches_textbook() -> None:
    # Wilson (1927) for 8 successes in 20 trials at z = 1.96: [0.2188, 0.6134]
    lower, upper = wilson_interval(0.4, 20.0, 1.959963984540054)
    assert lower == pytest.approx(0.2188, abs=1e-4)
    assert upper == pytest.approx(0.6134, abs=1e-4)
    assert wilson_interval(0.3, math.inf, 2.0) == (0.3, 0.3)
    assert wilson_interval(0.3, 0.0, 2.0) == (0.0, 1.0)
    # an effective size so small that t^2 / n overflows (F_alpha with alpha ~ 1e-153 and no
    # positive labelled: found by hypothesis) tends to [0, 1], not NaN
    for p in (0.0, 0.3, 1.0):
        assert wilson_interval(p, 5e-307, 12.7) == (0.0, 1.0)


def test_interval_from_se_is_in_range() -> None:
    for value, se in [(0.5, 0.1), (0.01, 0.5), (0.999, 0.2), (0.0, 0.0), (1.0, 0.0)]:
        lower, upper = interval_from_se(value, se, 20, 15.0, 0.95)
        assert 0.0 <= lower <= value <= upper <= 1.0


def test_ratio_bias_is_the_second_order_term(rng: np.random.Generator) -> None:
    gain, weight, v, fpc = _random_design(rng)
    g = np.sum(v * weight * gain) / np.sum(v * weight)
    expected = np.sum(fpc * (v * weight) ** 2 * (g - gain)) / np.sum(v * weight) ** 2
    assert ratio_bias(gain, weight, v, fpc) == pytest.approx(expected)
    # precision/recall weights (0/1) with equal sampling weights: no ratio bias
    ones = np.ones(40)
    binary = (rng.random(40) < 0.5).astype(float)
    assert ratio_bias(binary, (rng.random(40) < 0.7).astype(float), ones, ones) == pytest.approx(
        0.0, abs=1e-15
    )
    assert ratio_bias(gain, weight, v, np.zeros_like(fpc)) == 0.0  # a census has no bias
    assert math.isnan(ratio_bias(gain, np.zeros_like(weight), v, fpc))


def test_ratio_bias_predicts_the_simulated_bias() -> None:
    """Recall with rare, heavily weighted false negatives: E[G_hat] - G matches the estimate."""
    rng = np.random.default_rng(11)
    n_pool = 20_000
    pred = (rng.random(n_pool) < 0.05).astype(np.int8)
    label = np.where(pred == 1, rng.random(n_pool) < 0.7, rng.random(n_pool) < 0.01)
    pi = np.where(pred == 1, 0.2, 0.01)
    truth = np.sum(pred * label) / np.sum(label)
    values, biases, jack, corrected, ses = [], [], [], [], []
    for _ in range(1500):
        take = rng.random(n_pool) < pi
        w = label[take].astype(float)
        gain = (pred[take] == label[take]).astype(float)
        v, fpc = 1 / pi[take], 1 - pi[take]
        est = ratio_estimate(gain, w, v, fpc, 0.95, bias_correction=False)
        values.append(est.value)
        ses.append(est.se)
        biases.append(ratio_bias(gain, w, v, fpc))
        jack.append(ratio_jackknife_bias(gain, w, v, fpc))
        corrected.append(ratio_estimate(gain, w, v, fpc, 0.95).value)
    observed = np.mean(values) - truth
    assert observed > 0.1 * np.mean(ses)  # a real bias of the plain ratio (0.18 se here)
    assert np.mean(biases) == pytest.approx(observed, rel=0.5)
    assert np.mean(jack) == pytest.approx(observed, rel=0.5)
    # Monte Carlo error of the mean is 0.03 se; measured 0.01 se: the jackknife removes the bias
    assert abs(np.mean(corrected) - truth) < 0.1 * np.mean(ses)


def test_jackknife_bias_is_leave_one_out(rng: np.random.Generator) -> None:
    gain, weight, v, fpc = _random_design(rng, 30)
    b = v * weight
    g = np.sum(b * gain) / np.sum(b)
    loo = np.array([np.sum(np.delete(b * gain, i)) / np.sum(np.delete(b, i)) for i in range(30)])
    expected = np.sum(fpc * b**2 * (loo - gain)) / np.sum(b) ** 2
    assert ratio_jackknife_bias(gain, weight, v, fpc) == pytest.approx(expected)
    # the same as the fpc-weighted delete-one jackknife minus its linear part
    linear = b * (g - gain) / np.sum(b)
    assert np.sum(fpc * (loo - g - linear)) == pytest.approx(expected)
    # with replacement (fpc = 1): n/(n-1) times Quenouille's (n-1)(mean G_(-i) - G)
    ones = np.ones(30)
    n = int(np.count_nonzero(weight))
    kept = weight > 0
    quenouille = (n - 1) * (np.mean(loo[kept]) - g)
    assert ratio_jackknife_bias(gain, weight, v, ones) == pytest.approx(quenouille * n / (n - 1))
    # a census, equal gains, and an item carrying all the weight: nothing to correct
    assert ratio_jackknife_bias(gain, weight, v, np.zeros(30)) == 0.0
    assert ratio_jackknife_bias(ones, weight, v, fpc) == pytest.approx(0.0, abs=1e-15)
    assert (
        ratio_jackknife_bias(np.array([1.0, 0.0]), np.array([1.0, 0.0]), ones[:2], ones[:2]) == 0.0
    )
    assert math.isnan(ratio_jackknife_bias(gain, np.zeros(30), v, fpc))


def test_corrected_value_stays_in_its_interval_and_in_range(rng: np.random.Generator) -> None:
    for _ in range(200):
        n = int(rng.integers(2, 12))
        gain = (rng.random(n) < 0.5).astype(np.float64)
        weight = rng.choice([0.0, 0.3, 1.0], size=n)
        pi = rng.uniform(1e-4, 1.0, n)
        est = ratio_estimate(gain, weight, 1 / pi, 1 - pi, 0.95)
        if est.defined:
            assert 0.0 <= est.lower <= est.value <= est.upper <= 1.0


def _streaming_window() -> LabeledSample:
    """The streaming demo's window: every predicted positive audited (pi = 1), no FN seen.

    4 true and 1 false positive with pi = 1, and 25 predicted negatives with y = 0 sampled with
    0.02 <= pi <= 0.3. Seen: F1 = 8/9 = 0.889 and recall 1; had one false negative been missed
    among the unsampled predicted negatives (true F1 = 8/10 = 0.8), no label could show it.
    """
    pi_neg = np.linspace(0.02, 0.3, 25)
    pi = np.concatenate([np.ones(5), pi_neg])
    pred = np.concatenate([np.ones(5), np.zeros(25)])
    label = np.concatenate([[1, 1, 1, 1, 0], np.zeros(25)])
    score = np.concatenate([np.full(5, 0.8), np.full(25, 0.05)])
    return LabeledSample.poisson(score, pred, label, pi)


def test_no_false_negative_seen_does_not_collapse_the_interval() -> None:
    """Regression: F1 was reported as 0.889 [0.889, 0.889] against a true 0.8."""
    sample = _streaming_window()
    old = estimate_falpha(sample, 0.5, 0.95, pseudo_events=0.0)
    assert (old.value, old.se, old.lower, old.upper) == pytest.approx((8 / 9, 0.0, 8 / 9, 8 / 9))
    f1 = estimate_falpha(sample, 0.5, 0.95)
    assert f1.value == pytest.approx(8 / 9)  # the estimate itself is unchanged
    assert f1.lower < 0.8 < f1.upper
    # se^2 = c mean(fpc v^2 | sampled predicted negatives) ((1 - alpha) G)^2 / (sum v w)^2
    neg = sample.pred == 0
    design = PSEUDO_EVENTS * float(np.mean(sample.fpc[neg] * sample.v[neg] ** 2))
    assert f1.se == pytest.approx(math.sqrt(design) * 0.5 * (8 / 9) / 4.5)
    recall = estimate_falpha(sample, 0.0, 0.95)
    assert recall.value == 1.0 and recall.upper == 1.0
    assert recall.lower < 0.8  # true recall 4/5
    # precision depends on the predicted positives only: a census of them is exact
    precision = estimate_falpha(sample, 1.0, 0.95)
    assert (precision.value, precision.lower, precision.upper) == (0.8, 0.8, 0.8)
    m = measure_all(sample, 0.5, 0.95)
    assert (m.f, m.recall, m.precision) == (f1, recall, precision)


def test_census_of_everything_stays_a_point() -> None:
    """Every fpc = 0: the measure is determined, no pseudo event is added."""
    s = _streaming_window()
    census = LabeledSample(s.score, s.pred, s.label, np.ones(len(s)), np.zeros(len(s)))
    for alpha in (0.0, 0.5, 1.0):
        est = estimate_falpha(census, alpha, 0.95)
        assert est.lower == est.value == est.upper


def test_an_observed_false_negative_replaces_the_pseudo_event() -> None:
    s = _streaming_window()
    label = s.label.copy()
    label[-1] = 1  # one false negative seen with pi = 0.3
    seen = LabeledSample(s.score, s.pred, label, s.v, s.fpc)
    # with a floor of one event the observed one is enough: the plain delta method
    assert estimate_falpha(seen, 0.5, 0.95, pseudo_events=1.0) == estimate_falpha(
        seen, 0.5, 0.95, pseudo_events=0.0
    )
    plain = estimate_falpha(seen, 0.5, 0.95, pseudo_events=0.0)
    assert plain.se > 0.0
    # the default floor (two events) tops up the missing one with the mean design weight
    floor = estimate_falpha(seen, 0.5, 0.95)
    neg = s.pred == 0
    extra = (PSEUDO_EVENTS - 1.0) * float(np.mean(s.fpc[neg] * s.v[neg] ** 2))
    total = float(np.sum(s.v * (0.5 * s.pred + 0.5 * label)))
    g = float(np.sum(s.v * (0.5 * s.pred + 0.5 * label) * (s.pred == label)) / total)
    expected = math.sqrt(plain.se**2 + extra * (0.5 * g) ** 2 / total**2)
    assert floor.se == pytest.approx(expected)
    assert floor.value == plain.value


def test_unseen_event_design() -> None:
    weight = np.array([1.0, 0.0, 0.0, 0.0])
    v = np.array([1.0, 10.0, 5.0, 2.0])
    fpc = np.array([0.0, 0.9, 0.8, 0.0])
    frame = np.array([False, True, True, True])
    # mean over the sampled frame items with fpc > 0 (the certain one carries no error)
    assert unseen_event_design(weight, v, fpc, frame, 0.5) == pytest.approx(
        0.5 * (0.9 * 100 + 0.8 * 25) / 2
    )
    assert unseen_event_design(weight, v, fpc, frame, 0.0) == 0.0
    assert unseen_event_design(weight, v, np.zeros(4), frame, 0.5) == 0.0  # census
    seen = np.array([1.0, 0.0, 1.0, 0.0])  # one event observed with sampling error
    assert unseen_event_design(seen, v, fpc, frame, 0.5) == 0.0
    assert unseen_event_design(seen, v, fpc, frame, 2.0) == pytest.approx(1.0 * 55.0)


def test_a_tiny_sample_with_true_positives_never_reads_recall_0() -> None:
    """2 true positives of weight 3 and a false negative of weight 41: the ratio 0.118, and the
    jackknife correction (bias 0.15) once reported recall 0 beside them."""
    gain = np.array([1.0, 1, 0, 0, 0])
    v = np.array([3.0, 3, 41, 2, 2])
    est = ratio_estimate(gain, np.ones(5), v, 1.0 - 1.0 / v, 0.95)
    plain = ratio_estimate(gain, np.ones(5), v, 1.0 - 1.0 / v, 0.95, bias_correction=False)
    assert plain.value == pytest.approx(6 / 51)
    assert est.value == pytest.approx(3 / 48)  # the smallest delete-one ratio inside (0, 1)
    assert 0.0 < est.lower < est.value < est.upper < 1.0


def test_a_ratio_within_rounding_of_1_takes_the_interval_of_1() -> None:
    """alpha = 2e-16 gives a false positive a weight of 2e-16: the ratio read 1 - 1e-16 in one
    row order, with the logit interval [1 - 4e-16, 1], and exactly 1 in another, with Wilson's
    [0.52, 1] (found by the row-order property test)."""
    near = interval_from_se(1.0 - 1e-16, 5e-17, 5, 8.3, 0.95)
    exact = interval_from_se(1.0, 4e-17, 5, 8.3, 0.95)
    assert near == pytest.approx(exact)
    assert near[0] < 0.6
    # and the alert bounds, which rebuild the interval, agree with it
    for value in (1e-16, 0.0):
        est = Estimate(value, 5e-17, 0.0, 0.48, 30, 20.0, 0.95, 20.0, 5e-17, 20.0)
        assert upper_bound(est, 0.01) == pytest.approx(0.2326, abs=1e-4)
