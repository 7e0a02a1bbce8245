"""Designs that learn from their own labels: recalibrate, then choose (DESIGN.md, round 2).

From the labels so far (a :class:`~monitor.stats.sample.LabeledSample`, v = 1/pi):

1. fit the Platt map p_hat = m(s) (``monitor.stats.calibration``), or the beta map where a
   likelihood-ratio test rejects the Platt form and the beta map trusts the low scores no more than
   the high ones (``monitor.stats.beta_calibration``), each label counted once (:func:`recalibrate`
   says why not weighted by v); in the daemon, keep the scores themselves (the identity) where a
   likelihood-ratio test of the fit against them does not reject them (:func:`recalibrate`);
2. judge p_hat on the same labels: design-weighted model likelihood L (seed 002, Sec. 4.1) and
   calibration error;
3. evaluate q* (seed 000, Cor. 2-4) at p_hat, with G the recalibrated intrinsic F of the
   traffic, ``G = sum(f p_hat) / (alpha N1 + (1 - alpha) sum(p_hat))`` (never a label-based
   estimate of G: at 1% positives it can be 0), and mix it with uniform with the defensive
   share of ``selection.defensive_share``: ``lam0``, grown when L is below 0.6 or the ECE is
   large, and, under a fitted map, near 0.5 while the labels have seen few of the model's
   mistakes.

Each record's pi is fixed before its label is seen (from labels of earlier rounds or buckets), so
the Horvitz-Thompson sums stay unbiased given the earlier labels (Zrnic and Candes, Active
Statistical Inference, 2024; Marchant and Rubinstein, OASIS, 2017). Rounds of a fixed pool are
estimated by :func:`rounds_mixture`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from monitor.stats.beta_calibration import CalibrationMap, choose_map
from monitor.stats.calibration import (
    DEFAULT_TAU,
    IDENTITY,
    calibration_error,
    fit_platt,
    log_loss,
)
from monitor.stats.falpha import intrinsic_falpha
from monitor.stats.likelihood import model_likelihood
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, defensive_share, q_star_falpha

FloatArray = npt.NDArray[np.float64]

#: G used when the recalibrated intrinsic F is undefined (no predicted positive, p_hat = 0).
G_PRIOR = 0.5


@dataclass(frozen=True)
class Recalibration:
    """A fitted map and the labels' verdict on the probabilities before and after it.

    ``likelihood``/``calibration_error`` judge p_hat = m(s); ``raw_*`` judge the scores s
    themselves. All NaN without labels (and then the map is the identity). ``errors`` counts
    the model's mistakes (f != y) among the labels. ``scores_kept``: the labels did not reject the
    scores' calibration, so the map is the identity (:func:`recalibrate`).
    """

    cal_map: CalibrationMap
    likelihood: float
    calibration_error: float
    raw_likelihood: float
    raw_calibration_error: float
    errors: int = 0
    scores_kept: bool = False

    def defensive(self, lam0: float) -> float:
        """The defensive share for a design at p_hat (``selection.defensive_share``).

        The evidence term (few mistakes seen) guards a fitted map; with the scores kept the design
        is the one at the raw scores, whose share is ``lam0`` grown by L and the ECE alone.
        """
        errors = math.inf if self.scores_kept else self.errors
        return defensive_share(lam0, self.likelihood, self.calibration_error, errors)


def recalibrate(
    sample: LabeledSample,
    tau: float = DEFAULT_TAU,
    *,
    beta: bool = True,
    scores_level: float | None = None,
) -> Recalibration:
    """Fit the map on ``sample`` and measure likelihood and calibration error (weights v).

    The map is the Platt fit, or with ``beta`` the beta fit where ``beta_calibration.choose_map``
    takes it (likelihood-ratio test, a <= b; ``beta=False``: Platt only, for comparison), with each
    label counted once (unit weights), not weighted by v = 1/pi. The audit chose each item by its
    score and prediction alone (pi is a function of s, f = 1[s >= threshold] and a control fixed
    before the label), so the selection is ignorable for the conditional model p(y | s): the audited
    items' likelihood of the map is the traffic's, and the unweighted fit is consistent for it while
    the Platt form holds (informative-sampling theory: Pfeffermann, "The role of sampling weights
    when modeling survey data", Int. Stat. Rev. 1993; Pfeffermann and Sverchkov 1999 weight by ``v /
    E[v | s]``, which is 1 here). Weighted by v the fit has the same target, but at low prevalence
    it hands the labels that carry the slope (the positives, audited near pi = 1 around the decision
    boundary) almost no weight against the heavy predicted negatives at the defensive floor (v ~
    100, all y = 0): measured on the last two buckets' 300 labels of an over-confident (x3) model at
    1% positives, the 34 positives held 1.6 of 147 normalised weights, so the ridge of ``tau`` = 2
    pseudo-labels toward the identity held the slope at 0.41-0.46 against the true 1/3, q* at p_hat
    stayed over-confident where the false negatives hide, and the streaming controller's 95%
    intervals covered 0.86-0.88 (``python -m benchmarks.efficiency --stream-daemon``;
    benchmarks/README.md, "Efficiency"). Counted once, the slope was 0.35. The cost: when the
    Platt form is wrong, the unweighted fit is the best Platt map for the audited mix rather than
    the traffic (``tests/unit/stats/test_stats_calibration.py``), which is one reason to offer the
    beta form where the test finds Platt's wrong; the likelihood and calibration error that judge
    the map stay design-weighted (traffic estimates), so such a misfit still grows the defensive
    share.

    With ``scores_level`` (the daemon's refits, ``monitor.core.recalibration``) the fit is then
    tested against the scores themselves: ``LR = 2 [NLL(s) - NLL(m(s))]`` of the same labels,
    against the chi-square quantile at ``1 - scores_level`` with as many degrees of freedom as the
    map has parameters. Where it does not reject, the identity is kept (``scores_kept``). None (the
    offline rounds): no test.
    """
    if len(sample) == 0:
        nan = math.nan
        return Recalibration(IDENTITY, nan, nan, nan, nan)
    cal_map: CalibrationMap = (
        choose_map(sample.score, sample.label, tau=tau)
        if beta
        else fit_platt(sample.score, sample.label, np.ones(len(sample)), tau=tau)
    )
    kept = scores_level is not None and likelihood_ratio_to_scores(
        sample.score, sample.label, cal_map
    ) <= float(stats.chi2.ppf(1.0 - scores_level, df=len(cal_map.params())))
    if kept:
        cal_map = IDENTITY
    p_hat = cal_map.apply(sample.score)
    return Recalibration(
        cal_map=cal_map,
        likelihood=model_likelihood(p_hat, sample.label, sample.v),
        calibration_error=calibration_error(p_hat, sample.label, sample.v),
        raw_likelihood=model_likelihood(sample.score, sample.label, sample.v),
        raw_calibration_error=calibration_error(sample.score, sample.label, sample.v),
        errors=int(np.count_nonzero(sample.pred != sample.label)),
        scores_kept=kept,
    )


def likelihood_ratio_to_scores(
    score: npt.ArrayLike, label: npt.ArrayLike, cal_map: CalibrationMap
) -> float:
    """``2 [NLL(s) - NLL(m(s))]`` of the labels: how much better the map fits than the scores.

    Examples:
        >>> from monitor.stats.calibration import PlattMap
        >>> likelihood_ratio_to_scores([0.2, 0.8], [0, 1], PlattMap(0.0, 1.0))
        0.0
    """
    return 2.0 * (log_loss(score, label) - log_loss(cal_map.apply(score), label))


def recalibrated_g(p_hat: npt.ArrayLike, pred: npt.ArrayLike, alpha: float) -> float:
    """G from recalibrated expected counts: sum(f p_hat) / (alpha N1 + (1 - alpha) sum p_hat).

    Seed 000 Sec. 2.2 with the model's score replaced by p_hat; ``G_PRIOR`` when undefined.
    """
    g = intrinsic_falpha(p_hat, pred, alpha)
    return g if math.isfinite(g) else G_PRIOR


def recalibrated_weights(
    score: npt.ArrayLike,
    pred: npt.ArrayLike,
    alpha: float,
    recal: Recalibration,
    lam0: float,
) -> FloatArray:
    """Selection weights over a pool: q = (1 - lam) q*(p_hat)/mean + lam (mean 1 over the pool).

    q* of seed 000 Cor. 2 at p_hat = m(s) and G = :func:`recalibrated_g` of the pool; lam from
    :meth:`Recalibration.defensive`. With the identity map and no labels this is today's design
    (q* at the raw scores; the share is then 0.5, as no mistake has been seen).
    """
    p_hat = recal.cal_map.apply(score)
    g = recalibrated_g(p_hat, pred, alpha)
    qstar = q_star_falpha(p_hat, pred, alpha, g)
    return defensive_mix(qstar, recal.defensive(lam0))


def rounds_mixture(rounds: Sequence[LabeledSample], shares: Sequence[float]) -> LabeledSample:
    """The sample that estimates a pool audited in rounds: a fixed mixture of the rounds' sums.

    Round r is a Poisson sample of the items not labelled before it, its pi fixed given the
    earlier labels, so ``T_r = sum_{known before r} z + sum_{round r} z / pi`` is unbiased for the
    pool total ``T = sum z`` given the earlier rounds: ``E[T_r - T | rounds < r] = 0``. With fixed
    ``shares`` w_r (normalised to sum to 1) the mixture ``T_w = sum_r w_r T_r`` is unbiased and its
    errors ``w_r (T_r - T)`` are martingale differences, uncorrelated, so ``Var(T_w) = sum_r w_r^2
    E[Var(T_r | rounds < r)]`` (the argument of Zrnic and Candes, Active Statistical Inference,
    2024, for sequentially chosen designs). An item labelled in round r is counted by its
    own round's sum with weight ``w_r / pi_i`` and exactly by every later one, so it carries

        v_i = w_r / pi_i + sum_{s > r} w_s,    fpc_i = (1 - pi_i) (w_r / pi_i)^2 / v_i^2,

    the fpc making ``fpc v^2 z^2`` its term of the variance (``monitor.stats.interval``). A round of
    share 0 is counted exactly by the later rounds and adds no variance; the latest's share must be
    positive (no later round counts its labels). With every share but the latest 0 this is the
    earlier rounds counted exactly and the latest by Horvitz-Thompson over the rest.

    ``monitor.offline.rounds`` gives the first round (drawn before any label, at the raw scores,
    half uniform) share 0 and every later round its expected number of labels, so the later rounds'
    labels estimate the whole pool instead of only counting themselves: on the pool benchmark
    (``python -m benchmarks.efficiency --designs``, rounds of 10%, 15% and 75%;
    benchmarks/README.md, "Efficiency") the calibrated cells kept 61-93% of the raw design's
    savings against 51-79% with the latest round alone. Giving the first round its share too
    saved more again but, where the scores are over-confident, its few heavily weighted finds
    made the intervals cover less (logits x3 at 1% positives, F1 from 100 labels: 0.887 against
    0.910, a scratch run of 300 repetitions).

    Examples:
        >>> k = LabeledSample.poisson([0.2], [0], [0], [0.5])
        >>> late = LabeledSample.poisson([0.9], [1], [1], [0.25])
        >>> both = rounds_mixture([k, late], [0.0, 1.0])
        >>> both.v.tolist(), both.fpc.tolist()
        ([1.0, 4.0], [0.0, 0.75])
        >>> half = rounds_mixture([k, late], [1.0, 1.0])
        >>> half.v.tolist(), half.fpc.tolist()
        ([1.5, 2.0], [0.2222222222222222, 0.75])
    """
    w = np.asarray(shares, dtype=np.float64)
    if not len(rounds) == len(w) > 0 or not (w >= 0.0).all() or not w[-1] > 0.0:
        msg = (
            f"shares {w.tolist()} for {len(rounds)} rounds: one per round, each >= 0 and the "
            "latest > 0 (no later round counts its labels)"
        )
        raise ValueError(msg)
    # sum_{s >= r} w_s; normalised by its first element, so a first round of share 0 leaves
    # exactly 1 to the later ones (normalising the shares first left 1 - 2^-53 with numpy 2.4.6)
    tail = np.cumsum(w[::-1])[::-1]
    later = np.append(tail[1:], 0.0) / tail[0]
    w = w / tail[0]
    parts = []
    for sample, share, rest in zip(rounds, w, later, strict=True):
        own = share * sample.v
        v = own + rest
        fpc = sample.fpc * (own / v) ** 2
        # a round counted exactly by the later ones (share 0) estimates none of the rest
        silent = sample.unanswered_strata if share > 0.0 else frozenset()
        parts.append(LabeledSample(sample.score, sample.pred, sample.label, v, fpc, None, silent))
    return LabeledSample.concat(parts)
