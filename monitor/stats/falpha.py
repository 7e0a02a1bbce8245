"""F_alpha as a generalized risk, its intrinsic (label-free) value, and its weighted estimate.

Seed 000, Corollary 1: with weight ``w = alpha f + (1 - alpha) y`` and gain ``l = 1[f = y]``,

    F_alpha = sum(l w) / sum(w) = n_tp / (alpha (n_tp + n_fp) + (1 - alpha)(n_tp + n_fn)),

alpha = 1 is precision, alpha = 0 recall, alpha = 0.5 F1; F_beta has alpha = 1 / (1 + beta^2).
Undefined values (zero denominator) are NaN, never 0.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.stats.estimate import Estimate
from monitor.stats.interval import PSEUDO_EVENTS, ratio_estimate
from monitor.stats.sample import LabeledSample

FloatArray = npt.NDArray[np.float64]


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        msg = f"alpha must be in [0, 1], got {alpha}"
        raise ValueError(msg)


def alpha_from_beta(beta: float) -> float:
    """Convert F_beta to F_alpha: alpha = 1 / (1 + beta^2) (seed 000 Eq. 1; seed 004).

    Examples:
        >>> alpha_from_beta(1.0)
        0.5
    """
    if not beta >= 0.0:
        msg = f"beta must be >= 0, got {beta}"
        raise ValueError(msg)
    if math.isinf(beta):
        return 0.0
    return 1.0 / (1.0 + beta * beta)


def falpha_weight(pred: npt.ArrayLike, label: npt.ArrayLike, alpha: float) -> FloatArray:
    """Weight w = alpha f + (1 - alpha) y of seed 000, Corollary 1."""
    _check_alpha(alpha)
    f = np.asarray(pred, dtype=np.float64)
    y = np.asarray(label, dtype=np.float64)
    return alpha * f + (1.0 - alpha) * y


def falpha_gain(pred: npt.ArrayLike, label: npt.ArrayLike) -> FloatArray:
    """Gain l = 1 - l_{0/1}(f, y) = 1[f = y] of seed 000, Corollary 1."""
    gain: FloatArray = (np.asarray(pred) == np.asarray(label)).astype(np.float64)
    return gain


def falpha_exact(pred: npt.ArrayLike, label: npt.ArrayLike, alpha: float) -> float:
    """F_alpha of fully labeled data: n_tp / (alpha (n_tp + n_fp) + (1 - alpha)(n_tp + n_fn)).

    Seed 000 Eq. 1. NaN when the denominator is 0 (e.g. precision without predicted positives).

    Examples:
        >>> falpha_exact([1, 1, 0, 0], [1, 0, 1, 0], 0.5)
        0.5
    """
    w = falpha_weight(pred, label, alpha)
    total = float(w.sum())
    if not total > 0.0:
        return math.nan
    return float(np.dot(falpha_gain(pred, label), w)) / total


def intrinsic_falpha_from_sums(
    sum_pred_score: float, sum_pred: float, sum_score: float, alpha: float
) -> float:
    """Intrinsic F from traffic aggregates: sum(f s) / (alpha sum(f) + (1 - alpha) sum(s)).

    Seed 000 Sec. 2.2 (Eq. 2 with p(x) = 1/m and p(y|x) replaced by the model's score s):
    the expected numbers of true positives, predicted positives and positives under the model.
    NaN when the denominator is 0.

    Args:
        sum_pred_score: sum of f s over the traffic (expected true positives).
        sum_pred: sum of f (predicted positives).
        sum_score: sum of s (expected positives).
        alpha: The F_alpha trade-off in [0, 1].

    Returns:
        G_theta in [0, 1], or NaN.
    """
    _check_alpha(alpha)
    denominator = alpha * sum_pred + (1.0 - alpha) * sum_score
    if not denominator > 0.0:
        return math.nan
    return min(max(sum_pred_score / denominator, 0.0), 1.0)


def intrinsic_falpha_se_from_sums(
    sum_pred_score: float, sum_pred: float, sum_score: float, n: float, alpha: float
) -> float:
    """Upper bound on the sd of the realised F_alpha around the intrinsic G_theta.

    If the scores are calibrated, each label is y ~ Bernoulli(s), and the F_alpha the traffic
    really has (N / D with N = sum(f y), D = alpha sum(f) + (1 - alpha) sum(y)) scatters around
    G_theta. The delta method gives ``dF = sum((f - G (1 - alpha)) (y - s)) / D``, so
    ``Var = sum((f - G (1 - alpha))^2 s (1 - s)) / D^2``. The aggregates keep sum(s), not
    sum(s^2), so ``sum s (1 - s)`` is bounded per prediction stratum by
    ``min(sum s, sum (1 - s))`` (each term is at most min(s, 1 - s)): an upper bound, so a test
    that uses it alarms less, never more.

    Args:
        sum_pred_score: sum of f s over the traffic.
        sum_pred: sum of f (predicted positives).
        sum_score: sum of s.
        n: number of records.
        alpha: The F_alpha trade-off in [0, 1].

    Returns:
        The bound on the standard deviation, NaN when G_theta is undefined.
    """
    g = intrinsic_falpha_from_sums(sum_pred_score, sum_pred, sum_score, alpha)
    if math.isnan(g):
        return math.nan
    denominator = alpha * sum_pred + (1.0 - alpha) * sum_score
    var_pos = min(sum_pred_score, sum_pred - sum_pred_score)  # f = 1 stratum
    neg_score = sum_score - sum_pred_score
    var_neg = min(neg_score, (n - sum_pred) - neg_score)  # f = 0 stratum
    c = g * (1.0 - alpha)
    var = (1.0 - c) ** 2 * max(var_pos, 0.0) + c**2 * max(var_neg, 0.0)
    return math.sqrt(var) / denominator


def intrinsic_falpha(score: npt.ArrayLike, pred: npt.ArrayLike, alpha: float) -> float:
    """Intrinsic F_alpha G_theta = sum(f s) / (alpha sum(f) + (1 - alpha) sum(s)).

    Seed 000 Sec. 2.2 (Eq. 2 over the traffic with p(y|x) replaced by the score).

    What the model believes its F_alpha is on this traffic; NaN when undefined.

    Examples:
        >>> intrinsic_falpha([0.9, 0.6, 0.2], [1, 1, 0], 1.0)
        0.75
    """
    s = np.asarray(score, dtype=np.float64)
    f = np.asarray(pred, dtype=np.float64)
    return intrinsic_falpha_from_sums(float(np.dot(f, s)), float(f.sum()), float(s.sum()), alpha)


def intrinsic_falpha_se(score: npt.ArrayLike, pred: npt.ArrayLike, alpha: float) -> float:
    """How far the real F_alpha of these items may stray from ``intrinsic_falpha`` by chance.

    ``intrinsic_falpha_se_from_sums`` over ``score`` and ``pred`` (if the scores are calibrated).
    """
    s = np.asarray(score, dtype=np.float64)
    f = np.asarray(pred, dtype=np.float64)
    sums = (float(np.dot(f, s)), float(f.sum()), float(s.sum()))
    return intrinsic_falpha_se_from_sums(*sums, float(s.size), alpha)


def intrinsic_zero_one_risk(score: npt.ArrayLike, pred: npt.ArrayLike) -> float:
    """Intrinsic zero-one risk R_theta = mean(1 - p(f|x; theta)) (seed 002, Derivation 1).

    p(f|x) = s when f = 1 and 1 - s when f = 0. NaN on empty input.
    """
    s = np.asarray(score, dtype=np.float64)
    f = np.asarray(pred, dtype=np.float64)
    if s.size == 0:
        return math.nan
    return float(np.mean(f * (1.0 - s) + (1.0 - f) * s))


def estimate_falpha(
    sample: LabeledSample,
    alpha: float,
    level: float,
    *,
    bias_correction: bool = True,
    pseudo_events: float = PSEUDO_EVENTS,
) -> Estimate:
    """Active estimate of F_alpha: G = sum(v l w) / sum(v w) (seed 000, Eq. 4 / Algorithm 1).

    Minus its jackknife bias ``sum(fpc v^2 w^2 (G_(-i) - l)) / (sum v w)^2`` (G_(-i): the ratio
    without item i), with the delta-method interval around it; see :mod:`monitor.stats.interval`
    for the formulas and the measured coverage and bias. The predicted negatives are the frame of
    unseen false negatives (weight 1 - alpha, gain 0): while fewer than ``pseudo_events`` false
    negatives were sampled with pi < 1, the variance is topped up to that many (module docstring
    of :mod:`monitor.stats.interval`, "Unseen events"), so the interval does not collapse when
    every predicted positive was audited with certainty. Equals ``falpha_exact`` (scikit-learn's
    F_beta) when every item is labeled with pi = 1. Missing (NaN) when no labeled item has a
    weight, e.g. precision before any predicted positive was audited, and when a stratum it
    counts has requests but no answer to stand for them (``sample.unanswered_strata``: the
    predicted positives, or the predicted negatives for alpha < 1, whose false negatives they
    hold), e.g. recall while every predicted negative's request is pending, which read 1.

    Args:
        sample: The labeled sample.
        alpha: F_alpha trade-off in [0, 1].
        level: Confidence level in (0, 1).
        bias_correction: Subtract the jackknife bias (default); False gives Eq. 4 exactly.
        pseudo_events: Floor on the false negatives credited in the variance (default
            :data:`monitor.stats.interval.PSEUDO_EVENTS`); 0 gives the plain delta method.

    Returns:
        The estimate.
    """
    weight = falpha_weight(sample.pred, sample.label, alpha)
    if 1 in sample.unanswered_strata or (alpha < 1.0 and 0 in sample.unanswered_strata):
        return Estimate.missing(level, n_labels=int(np.count_nonzero(weight > 0.0)))
    return ratio_estimate(
        falpha_gain(sample.pred, sample.label),
        weight,
        sample.v,
        sample.fpc,
        level,
        bias_correction=bias_correction,
        frame=sample.pred == 0,
        event_weight=1.0 - alpha,
        event_gain=0.0,
        pseudo_events=pseudo_events,
        answers=sample.answers,
    )
