"""Confidence interval of a weighted ratio estimate (seed 000 Eq. 4 and Sec. 2.3).

The estimate is the ratio of two Horvitz-Thompson sums over the labeled items,

    G = sum(v_i l_i w_i) / sum(v_i w_i),

with gain ``l``, measure weight ``w`` and sampling weight ``v = 1/pi`` (seed 000, Eq. 4 with
p/q replaced by 1/pi). Its standard error is the delta method for a ratio (seed 000, proof of
Lemma 2), with the finite-population correction ``fpc = 1 - pi`` of Poisson sampling (compare
seed 003, Eq. 21) and *with* the division by the squared total weight that the paper's
``S_{n,q}^2 / n`` leaves out (DESIGN.md, "The confidence interval"):

    se^2 = sum(fpc_i v_i^2 w_i^2 (l_i - G)^2) / (sum(v_i w_i))^2,

plus, for F_alpha with alpha < 1, a floor on the false negatives' share of it ("Unseen events"
below: without it the interval collapsed to a point when every weighted item was audited with
certainty and no false negative was sampled).

Bias correction. The ratio is biased to order 1/n (seed 000, Lemma 1 is only asymptotic): with
rare positives the false negatives are few items of large weight, the estimated denominator is
right-skewed and recall was measured 0.44 standard errors too high at 1% positives with 100
labels. The reported value is the ratio minus its jackknife bias estimate (see
:func:`ratio_jackknife_bias`), clipped to [0, 1] (but never to 0 or 1 from a ratio strictly
between them, :func:`jackknife_bounded`):

    G_J = G - sum(fpc_i v_i^2 w_i^2 (G_(-i) - l_i)) / (sum v_i w_i)^2,

with G_(-i) the ratio without item i. It vanishes when every fpc is 0 (a census is exact) and when
all gains are equal, and is consistent (the correction is O(1/n)).

The interval is built on the logit scale around the reported value, where the sampling
distribution of a proportion-like ratio is much closer to normal when G is near 0 or 1
(measured: 0.94-0.96 coverage at 1-2% positives against 0.89-0.93 on the raw scale, DESIGN.md):

    se_logit = se / (G_J (1 - G_J)),   [expit(logit(G_J) -+ t se_logit)],

with t the ``(1 + level) / 2`` quantile of Student's t with n - 1 degrees of freedom, n the number
of labeled items with a non-zero weight (seed 000 Sec. 2.3, seed 002 Sec. 3.2). Measured in
``tests/statistical/test_coverage.py`` (Poisson samples from q* mixed with 10% uniform, calibrated
pools of 200,000 with 1-50% positives, alpha 0/0.5/1, 2,000 repetitions): coverage 0.941-0.966
at 400 labels and at 100 labels with >= 5% positives, 0.954-0.987 at 1% positives with 100 labels
(0.941-0.977 before the unseen-event term);
|bias| <= 0.06 se in every case (the plain ratio: up to +0.47 se).

Measured choice of centre (same simulation, 4,000-10,000 repetitions per case, bias in units of the
mean se): the plain ratio covers in band but its bias reaches +0.44 se (1% positives, recall, 100
labels), +0.20 se at 400 labels; the second-order Taylor correction (:func:`ratio_bias`) and
Beale's estimator leave +0.15/+0.18 se there, because G in ``(G - l_i)`` is pulled towards the
heavy item's own gain; the jackknife (leave-one-out ``G_(-i)``) leaves at most 0.06 se in every
case. Centring the interval on G_J with the delta se of the ratio keeps coverage in 0.940-0.963
at 400 labels and at 100 labels with >= 5% positives (0.944-0.970 at 1% with 100 labels);
recomputing the se at G_J instead drops it to 0.929 (1% positives, F1, 400 labels), and
leverage-inflated (HC2/HC3) standard errors over-cover (0.98 at 100 labels). Keeping the plain
ratio's interval and reporting G_J inside it also covers, but then the interval cannot be rebuilt
from (value, se) as :mod:`monitor.stats.alerting` does. ``bias_correction=False`` gives seed 000
Eq. 4 unchanged.

Unseen events. The delta se only sums over labeled items with w > 0. For F_alpha with alpha < 1
the items that *could* carry weight but were not seen doing so are the predicted negatives: a
false negative has w = 1 - alpha and l = 0, a sampled predicted negative with y = 0 has w = 0 and
adds nothing. When every item with w > 0 was audited with pi = 1 (fpc = 0; the streaming design
gives predicted positives pi near 1 in small windows) and no false negative was sampled among the
predicted negatives (pi << 1), every term of se^2 is 0 and the interval collapsed to a point
(seen: F1 0.889 [0.889, 0.889] against a true 0.800), although the number of false negatives
among the unsampled predicted negatives is uncertain. The plug-in variance of a rare domain's
Horvitz-Thompson total, sum over its k sampled events of fpc v^2, is unbiased but 0 with
probability e^-mu (mu: expected number of sampled events), and with one or two events it is far
below what a count interval needs (the score interval of a Poisson count k reaches
k + t^2/2 + t sqrt(k + t^2/4): 3.8 at k = 0, 5.6 at k = 1). The domain is therefore credited with at
least c pseudo events in the variance (Agresti and Coull's "add z^2/2 ~ 2 events" rule, applied as
a floor so that well-observed domains keep the plain delta method):

    se^2 = [ sum(fpc v^2 w^2 (l - G)^2) + max(c - k, 0) m w_e^2 (l_e - G)^2 ] / (sum v w)^2,
    m = mean(fpc_i v_i^2) over the sampled frame items with fpc_i > 0,

with the frame the predicted negatives, k the false negatives among them with fpc > 0, event
weight w_e = 1 - alpha and gain l_e = 0, c = :data:`PSEUDO_EVENTS` = 2. m is the design weight of
a sampled false negative if being one does not depend on pi (the scores are not trusted for this:
weighting m by the score changed no measured coverage by more than 0.01). The same term enters the
Kish n_eff of the Wilson fallback (recall = 1 when no false negative was seen). It vanishes for
precision (w_e = 0: a census of the predicted positives is exact), for a census of the frame
(every fpc = 0), and when G = l_e = 0. The estimate itself is unchanged. ``pseudo_events=0``
gives the plain delta method.

Measured (``tests/statistical/test_coverage.py``, small windows: a fresh calibrated window of
0.35 budget / rate records per repetition, 20-50 labels, 1-5% positives, alpha 0 and 0.5, the
product's design, 1,000 windows per case; predicted positives get pi = 1 in 60-97% of the
cases, no false negative is sampled in 1-35% of the windows): coverage 0.938-0.999 (without the
term 0.698-0.962, with up to 26% of the intervals collapsed to a point), never a point interval.
It is conservative at 20-30 labels (0.98-0.999, mean width 0.55-0.94: a pseudo false negative
of a heavily weighted predicted negative moves F far beyond the reach of the linearisation, and
the logit interval then spans most of [0, 1]); with 50 labels 0.938-0.993. c = 1/2 (Jeffreys,
k + 1/2) left 0.910 (F1, 5%, 50 labels: one or two seen false negatives undercover); c = 2
brings every case to >= 0.938. The required cells (200,000 pools, 100/400 labels) are unchanged
but for 1% positives with 100 labels, where k is small: recall 0.977 -> 0.987, F1 0.941 ->
0.966 (in the documented [0.90, 0.99] band).

Measured choice of interval shape (issue 11, ``benchmarks/small_windows.py``: 20-100 labels,
1-20% positives, recall and F1, 1,000 windows per cell, all on the same samples). The logit-t
interval above was kept. Intervals on the effective counts of the same se, n* = G (1 - G) / se^2
and x* = G n* (Korn and Graubard 1998), were 0.01-0.03 narrower (mid-p Clopper-Pearson, Jeffreys'
Beta(x* + 1/2, n* - x* + 1/2) quantiles of Brown, Cai and DasGupta 2001, Wilson's score
interval on n* with the t quantile) and brought 7-8 of the 24 cells into 0.93-0.97 against 6,
but none at 20-30 labels (0.981-0.997), and they under-cover elsewhere: on the delayed-label grid
(``tests/statistical/test_coverage_delays.py``) Jeffreys left three calibrated cells at
0.925-0.928 and Wilson one at 0.927 (logit >= 0.935); in the tails the alerts rely on
(``benchmarks/tails.py`` setting, 50,000 windows) Wilson's lower bound missed its 1e-3 error 140
times for 50 allowed (F1, 1% positives; logit 72) and the mid-p upper bound, which pages, 76
times (recall; logit 8).
Clopper-Pearson on the counts is wider everywhere. A pseudo-event count from the scores (the
false negatives they expect among the sampled predicted negatives) narrows the 20-30 label
cells only while the scores are right: with over-confident scores it covered 0.83 where c = 2
covers 0.96 (1% positives, 30 labels). With 20-30 labels the design samples 0.8-2.6 false
negatives on average; an interval from the design alone must allow for many unseen ones among
the rarely audited predicted negatives and covered 0.98-0.999 there with every shape tried (one
pseudo event instead of two reaches 0.935-0.979 at 20% positives but leaves six cells at
50-100 labels at 0.876-0.927). Where two to four false negatives were sampled the interval
misses on the optimistic side (a Wald interval of a small count): the product reports F_alpha
and recall widened to the score-type bounds (:func:`monitor.stats.measures.measure_all`,
:mod:`monitor.stats.score_interval`), which this module's interval is also a part of.

Small-sample fallback. When every gain is equal (G = 0 or 1) the delta se is 0 and the interval
would collapse to a point. Then the Wilson score interval is used, with the sample size replaced
by the Kish effective sample size of the weights including the finite-population correction,

    n_eff = (sum v_i w_i)^2 / sum(fpc_i v_i^2 w_i^2),

which is the n at which a simple random sample has the same variance ``G(1-G)/n`` as this design
would for a proportion G (Kish's design effect). A census (every ``fpc = 0``) gives n_eff = inf
and, correctly, a point interval. The Wilson interval uses the same t quantile, so with a single
label it is very wide rather than falsely tight. Every bound is clipped to [0, 1].
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import special

from monitor.stats.estimate import Estimate
from monitor.stats.sample import AnswerGroups
from monitor.stats.two_phase import two_phase_jackknife_bias

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Pseudo events added to a domain in which no event was seen (Jeffreys: k + 1/2 at k = 0).
PSEUDO_EVENTS = 2.0


def kish_sizes(
    vw: FloatArray, fpc: FloatArray, unseen: float, unseen_model: float
) -> tuple[float, float, float]:
    """Kish effective sizes ``(ess, n_eff, n_eff_model)`` of a ratio's weights ``vw = v w``.

    ``ess = (sum vw)^2 / sum vw^2``; ``n_eff = (sum vw)^2 / (sum fpc vw^2 + unseen)`` (inf for a
    census); ``n_eff_model`` the same with every fpc 1 and ``unseen_model``. ``unseen`` and
    ``unseen_model`` are the variances of the unseen events (:func:`unseen_event_design`, event
    weight included) in the units of ``vw`` squared; the Wilson interval at G = 0 or 1 rests on
    these sizes (module docstring, "Small-sample fallback").
    """
    total = float(vw.sum())
    vw2 = vw * vw
    plain = float(vw2.sum())
    design = float(np.dot(fpc, vw2)) + unseen
    n_eff = math.inf if design <= 0.0 else total * total / design
    return total * total / plain, n_eff, total * total / (plain + unseen_model)


def unseen_event_design(
    weight: FloatArray, v: FloatArray, fpc: FloatArray, frame: BoolArray, pseudo_events: float
) -> float:
    """Design variance ``max(c - k, 0) * mean(fpc v^2)`` of pseudo events of an unseen domain.

    The mean runs over the sampled frame items that carry sampling error (``frame & fpc > 0``),
    k counts those observed as events (``weight > 0``) and c is ``pseudo_events``; 0 when no frame
    item carries sampling error (a census of the frame). Units: those of ``v`` squared, for an
    event of unit weight (see the module docstring, "Unseen events").

    Args:
        weight: Measure weights ``w_i >= 0`` (an observed event has ``w > 0``).
        v: Sampling weights ``1/pi_i`` (any common scale).
        fpc: Finite-population corrections ``1 - pi_i``.
        frame: Items that would carry the event weight had they been an event.
        pseudo_events: c, the number of events the domain is credited with when none was seen.

    Returns:
        The design variance of the missing pseudo events (>= 0).
    """
    open_ = np.asarray(frame, dtype=bool) & (fpc > 0.0)
    count = int(np.count_nonzero(open_))
    if count == 0:
        return 0.0
    missing = max(pseudo_events - int(np.count_nonzero(open_ & (weight > 0.0))), 0.0)
    if missing <= 0.0:
        return 0.0
    with np.errstate(over="ignore"):  # an overflow is an infinite variance: say so
        return missing * float(np.dot(fpc[open_], v[open_] ** 2)) / count


def second_phase_variance(resid: FloatArray, v: FloatArray, answers: AnswerGroups) -> float:
    """Variance that the answers (second phase) add: ``sum_c (1 - r_c) m_c S_c^2(d)``.

    Within each answer class c the answered requests are taken as a simple random sample of
    m_c of the class's n_c requests (response homogeneity groups, Saerndal, Swensson and
    Wretman 1992, Model Assisted Survey Sampling, Sec. 15.6; two-phase variance, Result 9.3.1:
    V = V1 + E[V2], V2 = sum_c n_c^2 (1 - m_c/n_c) S_c^2 / m_c). The class's share of the
    estimate is not the count expansion ``(n_c / m_c) sum(z / pi)`` but, with the weighted
    rate r_c of :func:`monitor.stats.response.answer_rates`, its total weight times the weighted
    mean of its answers, ``A_c sum(z / pi) / sum(1 / pi)`` (z = w (l - G), A_c = sum(1/pi) over
    the class's requests): a ratio within the class, whose linearised second-phase variable is
    the residual from that mean (Taylor linearisation of a ratio, Saerndal et al. Ch. 5, applied
    to each class's weighted mean of its answers),

        d_i = (z_i - zbar_c) / (pi_i r_c),   zbar_c = sum_c(z / pi) / sum_c(1 / pi) (answered),

    i.e. ``d = e - v sum_c(e) / sum_c(v)`` in units of the expanded residuals
    ``e_i = z_i / (pi_i r_c)`` and weights ``v_i = 1 / (pi_i r_c)``, and ``S_c^2`` is the sample
    variance of d within the class (``ddof=1``). Centring e on its plain mean instead (the
    count-rate form) left out the answers' effect on r_c: when a class pools bands of pi and
    its z do not average 0 (the false negatives of a pooled predicted-negative class for
    recall), whether a heavy request (small pi) is answered moves r_c and with it the weight
    of every answer of the class. Measured on the grid of
    ``benchmarks.delays`` (recall at 20% positives, half the predicted negatives answered) the
    plain mean gave a second-phase se 0.82 of the empirical one and coverage 0.927, the class
    mean 0.92 and 0.946. When pi is the same within the class the two agree. A class with one
    answer has no S_c^2 (its d is 0); its ``e^2`` is used (the uncentred, larger value of the
    Poisson approximation with fpc ``1 - pi r``).

    Args:
        resid: Expanded residuals e_i of the labeled items (any common scale).
        v: Their weights ``1/(pi_i r_c)`` (any common scale).
        answers: Class and answer rate of each labeled item.

    Returns:
        The second-phase variance (>= 0), in the units of ``resid`` squared.
    """
    _, inv = np.unique(answers.group, return_inverse=True)
    inv = inv.reshape(-1)
    m = np.bincount(inv).astype(np.float64)
    weight = np.bincount(inv, weights=v)
    mean = np.divide(
        np.bincount(inv, weights=resid), weight, out=np.zeros_like(weight), where=weight > 0.0
    )
    d = resid - v * mean[inv]
    s1 = np.bincount(inv, weights=d)  # 0 up to rounding: d sums to 0 within a class
    s2 = np.bincount(inv, weights=d * d)
    rate = np.ones_like(m)
    rate[inv] = answers.rate
    several = m >= 2.0
    spread = np.bincount(inv, weights=resid * resid)  # one answer: its e^2 (d is 0)
    spread[several] = (s2 - s1 * s1 / m)[several] * m[several] / (m[several] - 1.0)
    return float(np.dot(1.0 - rate, np.maximum(spread, 0.0)))


def sampled_variance(
    resid: FloatArray, v: FloatArray, fpc: FloatArray, answers: AnswerGroups | None
) -> float:
    """Design variance of a total of residuals ``resid`` (one phase, or answers as a second).

    One phase: ``sum(fpc e^2)``. Two phases (``v = 1/(pi r)``, ``fpc = 1 - pi r``): phase one
    ``sum((1 - pi) r e^2)``, with ``(1 - pi) r = r - (1 - fpc)``, plus the answers'
    :func:`second_phase_variance`. Units: those of ``resid`` squared.
    """
    if answers is None:
        return float(np.dot(fpc, resid * resid))
    phase1 = np.maximum(answers.rate - 1.0 + fpc, 0.0)
    return float(np.dot(phase1, resid * resid)) + second_phase_variance(resid, v, answers)


def t_quantile(level: float, n: int) -> float:
    """Two-sided Student t quantile ``t_{n-1}((1 + level) / 2)`` (seed 000 Sec. 2.3).

    Uses at least one degree of freedom, so a single label still gets a (very wide) interval.

    Args:
        level: Confidence level in (0, 1), e.g. 0.95.
        n: Number of labeled items that carry weight.

    Returns:
        The quantile, e.g. 1.984 for level 0.95 and n = 100.
    """
    if not 0.0 < level < 1.0:
        msg = f"level must be in (0, 1), got {level}"
        raise ValueError(msg)
    return float(special.stdtrit(max(n - 1, 1), 0.5 + level / 2.0))


def wilson_interval(p: float, n_eff: float, t: float) -> tuple[float, float]:
    """Wilson score interval for a proportion ``p`` observed on ``n_eff`` effective trials.

    lower, upper = (p + t^2/(2n) -+ t sqrt(p(1-p)/n + t^2/(4n^2))) / (1 + t^2/n).

    Args:
        p: The observed proportion in [0, 1].
        n_eff: Effective sample size (``inf`` for a census: the point ``[p, p]``).
        t: The critical value.

    Returns:
        ``(lower, upper)``, clipped to [0, 1] and containing ``p``.
    """
    if math.isinf(n_eff):
        return p, p
    if n_eff <= 0.0 or math.isnan(n_eff):
        return 0.0, 1.0
    # times n / n: no t^2 / n to overflow when n_eff is tiny (the interval tends to [0, 1])
    t2 = t * t
    centre = (n_eff * p + t2 / 2.0) / (n_eff + t2)
    half = t * math.sqrt(n_eff * p * (1.0 - p) + t2 / 4.0) / (n_eff + t2)
    lower = min(max(centre - half, 0.0), p)
    upper = max(min(centre + half, 1.0), p)
    return lower, upper


_ROUNDING = 1e-9  # a ratio this close to 0 or 1 is that bound up to rounding (tiny weights)


def strictly_inside(value: float) -> bool:
    """``value`` is in (0, 1) by more than rounding (1e-9): its logit interval is meaningful.

    A ratio of a weight of 2e-16 (alpha that small) read 1 - 1e-16 in one row order and exactly
    1 in another; the two must take the same interval (and alert bound).
    """
    return _ROUNDING < value < 1.0 - _ROUNDING


def interval_from_se(
    value: float, se: float, n: int, n_eff: float, level: float
) -> tuple[float, float]:
    """Interval for a ratio in [0, 1] from its delta-method standard error.

    Logit scale when ``0 < value < 1`` and ``se > 0``:
    ``expit(logit(G) +- t se / (G (1 - G)))``; otherwise the Wilson score interval with the
    effective sample size ``n_eff`` (see the module docstring). Shared by the general ratio
    estimator and the stratified estimator (seed 003). A value within 1e-9 of 0 or 1 is taken
    as that bound: the ratio of a weight of 2e-16 (alpha that small) read 1 - 1e-16 in one row
    order, with the logit interval [1 - 4e-16, 1], and exactly 1 in another, with Wilson's
    [0.52, 1].

    Args:
        value: The point estimate G in [0, 1].
        se: Its delta-method standard error.
        n: Number of labeled items carrying weight (degrees of freedom n - 1).
        n_eff: Kish effective sample size with finite-population correction.
        level: Confidence level in (0, 1).

    Returns:
        ``(lower, upper)`` with ``0 <= lower <= value <= upper <= 1``.
    """
    t = t_quantile(level, n)
    if strictly_inside(value) and se > 0.0 and math.isfinite(se):
        centre = float(special.logit(value))
        half = t * se / (value * (1.0 - value))
        lower = float(special.expit(centre - half))
        upper = float(special.expit(centre + half))
        return min(max(lower, 0.0), value), max(min(upper, 1.0), value)
    return wilson_interval(value, n_eff, t)


def _leave_one_out(gain: FloatArray, vw: FloatArray, total: float) -> FloatArray:
    """The delete-one ratios ``G_(-i)`` for scale-free ``vw`` (``l_i`` where nothing is left)."""
    rest = total - vw
    numerator = float(np.dot(vw, gain))
    loo = np.divide(numerator - vw * gain, rest, out=gain.copy(), where=rest > 0.0)
    return np.clip(loo, 0.0, 1.0)  # a ratio of non-negative sums: rounding only


def _jackknife_bias(
    loo: FloatArray, gain: FloatArray, vw: FloatArray, fpc: FloatArray, total: float
) -> float:
    """``sum(fpc vw^2 (G_(-i) - l)) / total^2`` for scale-free ``vw`` (ratio_jackknife_bias).

    ``loo`` holds the ``G_(-i)`` of :func:`_leave_one_out`.
    """
    return float(np.dot(fpc * vw * vw, loo - gain)) / (total * total)


def jackknife_bounded(value: float, bias: float, replicates: FloatArray) -> float:
    """``value - bias`` in [0, 1], but never 0 or 1 when ``value`` is strictly inside.

    Strictly inside: by more than rounding (:func:`strictly_inside`); a ratio within 1e-9 of a
    bound is that bound.

    A value of exactly 0 (or 1) says the population holds no gain (no loss), which the sample
    refutes when its ratio is strictly inside (0, 1). Where the correction would reach or cross
    such a bound (a sample so small that one heavy item dominates: 2 true positives of weight 3
    and a false negative of weight 41 read recall 0, the ratio 0.118), the value is kept within
    the range of ``value`` and the delete-one replicates strictly inside (0, 1) (the ratio is a
    weighted mean of its replicates, ``sum (W - b_i) G_(-i) = (n - 1) G W``). Elsewhere the
    correction is unchanged.
    """
    corrected = value - bias
    if 0.0 < corrected < 1.0 or not strictly_inside(value):
        return min(max(corrected, 0.0), 1.0)
    inner = replicates[(replicates > _ROUNDING) & (replicates < 1.0 - _ROUNDING)]
    lo, hi = (float(inner.min()), float(inner.max())) if inner.size else (value, value)
    return min(max(corrected, min(lo, value)), max(hi, value))


def ratio_jackknife_bias(
    gain: FloatArray, weight: FloatArray, v: FloatArray, fpc: FloatArray
) -> float:
    """Jackknife estimate of the ratio estimator's bias E[G_hat] - G under Poisson sampling.

    With b_i = v_i w_i, W = sum b, G = sum(b l) / W and the leave-one-out ratio
    G_(-i) = (sum(b l) - b_i l_i) / (W - b_i):

        bias_J = sum( fpc_i b_i^2 (G_(-i) - l_i) ) / W^2
               = sum_i fpc_i [ (G_(-i) - G) - b_i (G - l_i) / W ].

    The second form is Quenouille's delete-one jackknife (each deletion weighted by its
    finite-population correction ``1 - pi_i``, in the spirit of Berger and Skinner's jackknife for
    unequal-probability designs) minus its linear part, which sums to 0 when the fpc is constant;
    for draws with replacement (fpc = 1) it is n/(n-1) times the classical jackknife bias. It
    equals the second-order Taylor bias (:func:`ratio_bias`) with G replaced by G_(-i), which keeps
    a heavily weighted item from pulling G towards its own gain (DESIGN.md, "The estimate"; seed
    000, Lemma 1 for the O(1/n) order). Every term is bounded by fpc_i b_i^2 / W^2; an item
    carrying all the weight contributes 0. Zero for a census (every fpc = 0) and when all gains
    are equal.

    Args:
        gain: Gains ``l_i`` in [0, 1].
        weight: Measure weights ``w_i >= 0``.
        v: Sampling weights ``1/pi_i > 0``.
        fpc: Finite-population corrections ``1 - pi_i``.

    Returns:
        The estimated bias; NaN when ``sum(v w) = 0``.
    """
    vw = np.asarray(v, dtype=np.float64) * np.asarray(weight, dtype=np.float64)
    top = float(vw.max()) if vw.size else 0.0
    if not top > 0.0:
        return math.nan
    vw = vw / top
    gain = np.asarray(gain, dtype=np.float64)
    fpc = np.asarray(fpc, dtype=np.float64)
    total = float(vw.sum())
    return _jackknife_bias(_leave_one_out(gain, vw, total), gain, vw, fpc, total)


def ratio_estimate(
    gain: FloatArray,
    weight: FloatArray,
    v: FloatArray,
    fpc: FloatArray,
    level: float,
    *,
    bias_correction: bool = True,
    frame: BoolArray | None = None,
    event_weight: float = 0.0,
    event_gain: float = 0.0,
    pseudo_events: float = PSEUDO_EVENTS,
    answers: AnswerGroups | None = None,
) -> Estimate:
    """Jackknife bias-corrected ratio estimate of sum(l w) / sum(w) with its interval.

    Seed 000 Eq. 4 (v = 1/pi for Poisson samples, 1/q per draw with replacement),
    ``G = sum(v l w) / sum(v w)``, minus its jackknife bias (:func:`ratio_jackknife_bias`),
    clipped to [0, 1] (:func:`jackknife_bounded`): ``value = G - bias_J``. Standard error: the
    delta method of the ratio, ``se^2 = sum(fpc v^2 w^2 (l - G)^2) / (sum v w)^2`` (seed 000
    Lemma 2, with the finite-population correction of seed 003 Eq. 21), plus
    ``max(c - k, 0) m w_e^2 (l_e - G)^2 / (sum v w)^2`` for the unseen events of ``frame``
    (module docstring, "Unseen events"); interval :func:`interval_from_se` of ``(value, se)``,
    so ``lower <= value <= upper`` and anyone holding ``value`` and ``se`` can rebuild it at
    another level. The module docstring gives the measured coverage and bias.

    Args:
        gain: Gains ``l_i`` in [0, 1] (e.g. 1[f = y]).
        weight: Measure weights ``w_i >= 0`` (e.g. alpha f + (1 - alpha) y).
        v: Sampling weights ``1/pi_i > 0``.
        fpc: Finite-population corrections ``1 - pi_i`` in [0, 1] (1 for draws with replacement).
        level: Confidence level in (0, 1).
        bias_correction: Subtract the jackknife bias (default). False gives Eq. 4 exactly.
        frame: Items that would carry weight ``event_weight`` with gain ``event_gain`` had they
            been an event (for F_alpha: the predicted negatives; an event is a false negative).
            None (default): no unseen-event term.
        event_weight: Weight w_e of an event of the frame (1 - alpha for F_alpha).
        event_gain: Gain l_e of an event of the frame (0 for a false negative).
        pseudo_events: c, the floor on the number of events of the frame in the variance (module
            docstring, "Unseen events"); 0 gives the plain delta method.
        answers: For a two-phase sample (answers as a second phase, ``v = 1/(pi r)`` and
            ``fpc = 1 - pi r``), each item's answer class and rate: the variance is then the
            two-phase one, ``sum((1 - pi) r e^2) + sum_c (1 - r_c) m_c S_c^2(d)`` with
            ``e = v w (l - G)`` and d its residual from the answer class's weighted mean (phase
            one, then :func:`second_phase_variance`), and the jackknife
            bias re-estimates the rates in each replicate
            (:func:`monitor.stats.two_phase.two_phase_jackknife_bias`; the one-phase form when
            every request was answered). None: one phase.

    Returns:
        The :class:`Estimate`; ``Estimate.missing`` (NaN, never 0) when ``sum(v w) = 0``.
        ``n_labels`` counts the labeled items with ``w > 0``; ``ess`` is the Kish effective sample
        size ``(sum v w)^2 / sum (v w)^2``; ``n_eff`` the same with the fpc,
        ``(sum v w)^2 / (sum fpc (v w)^2 + unseen)``. ``se_model`` and ``n_eff_model`` are the
        super-population standard error and effective size (every fpc taken as 1:
        ``sum e^2 / (sum v w)^2``, the with-replacement variance estimator, which estimates the
        design variance plus the variance of the window's realised value around the model's).

    Examples:
        >>> import numpy as np
        >>> one = np.ones(4)
        >>> e = ratio_estimate(np.array([1.0, 1, 0, 1]), one, one, np.zeros(4), 0.95)
        >>> (e.value, e.se, e.lower, e.upper)
        (0.75, 0.0, 0.75, 0.75)
    """
    gain = np.asarray(gain, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    fpc = np.asarray(fpc, dtype=np.float64)
    if not gain.shape == weight.shape == v.shape == fpc.shape:
        msg = (
            "gain, weight, v and fpc must have one shape, got "
            f"{gain.shape}, {weight.shape}, {v.shape}, {fpc.shape}"
        )
        raise ValueError(msg)
    vw = v * weight
    n = int(np.count_nonzero(weight > 0.0))
    top = float(vw.max()) if vw.size else 0.0
    if not top > 0.0:
        return Estimate.missing(level, n_labels=n)
    vw = vw / top  # every quantity below is scale-free; this avoids under/overflow
    total = float(vw.sum())
    bearing = gain[vw > 0.0]
    if bool((bearing == bearing[0]).all()):
        value = float(bearing[0])  # all gains equal: exact, whatever the rounding of the sums
        corrected = value  # all gains equal: no bias to remove
    else:
        value = min(max(float(np.dot(vw, gain)) / total, 0.0), 1.0)
        corrected = value
        if bias_correction:
            loo = _leave_one_out(gain, vw, total)  # an item without weight: G itself
            if answers is None or answers.complete:
                bias = _jackknife_bias(loo, gain, vw, fpc, total)
            else:  # the answer rates are estimated too: both phases' replicates
                bias = two_phase_jackknife_bias(gain, weight, v, answers)
            corrected = jackknife_bounded(value, bias, loo)
    resid = vw * (gain - value)
    unseen = 0.0
    if frame is not None and event_weight > 0.0:
        # event_weight folded into v before squaring: tiny weights (alpha ~ 0) must not overflow
        unseen = unseen_event_design(weight, v * (event_weight / top), fpc, frame, pseudo_events)
    gap = event_gain - value  # unseen events at the estimate's own gain add no variance
    resid2 = resid * resid
    sampled = sampled_variance(resid, v, fpc, answers)
    se = math.sqrt(sampled + (unseen * gap * gap if gap else 0.0)) / total
    unseen_model = 0.0
    if frame is not None and event_weight > 0.0:
        ones = np.ones_like(fpc)
        unseen_model = unseen_event_design(
            weight, v * (event_weight / top), ones, frame, pseudo_events
        )
    se_model = math.sqrt(float(resid2.sum()) + (unseen_model * gap * gap if gap else 0.0)) / total
    ess, n_eff, n_eff_model = kish_sizes(vw, fpc, unseen, unseen_model)
    lower, upper = interval_from_se(corrected, se, n, n_eff, level)
    return Estimate(corrected, se, lower, upper, n, ess, level, n_eff, se_model, n_eff_model)


def ratio_bias(gain: FloatArray, weight: FloatArray, v: FloatArray, fpc: FloatArray) -> float:
    """Second-order (Taylor) estimate of the ratio estimator's bias, E[G_hat] - G.

    Expanding N/W to second order around the totals (N = sum v l w, W = sum v w):
    ``E[N/W] - G ~ (G Var(W) - Cov(N, W)) / W^2``; with the Poisson-sampling variance
    estimates ``Var(W) = sum fpc v^2 w^2`` and ``Cov(N, W) = sum fpc v^2 w^2 l``:

        bias = sum( fpc v^2 w^2 (G - l) ) / (sum v w)^2,

    of order 1/n (seed 000, Lemma 1). Kept for comparison: :func:`ratio_estimate` subtracts the
    jackknife form :func:`ratio_jackknife_bias` (G replaced by G_(-i)), which was measured to
    remove the bias where this Taylor form leaves 0.15 se (``tests/statistical/test_coverage.py``).

    Returns:
        The estimated bias; NaN when ``sum(v w) = 0``.
    """
    vw = np.asarray(v, dtype=np.float64) * np.asarray(weight, dtype=np.float64)
    top = float(vw.max()) if vw.size else 0.0
    if not top > 0.0:
        return math.nan
    vw = vw / top
    total = float(vw.sum())
    gain = np.asarray(gain, dtype=np.float64)
    value = float(np.dot(vw, gain)) / total
    return float(np.dot(np.asarray(fpc, dtype=np.float64) * vw * vw, value - gain)) / total**2
