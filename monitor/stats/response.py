"""Labels that arrive late or never: answers as a second phase of sampling (pure).

DESIGN.md, "Labels that arrive late or never". The audit requests of a window are a Poisson
sample with inclusion probabilities pi_i. Only some are answered so far: some are pending, some
passed their deadline (missing), some were skipped. The answered requests are taken as a second
phase of sampling, Bernoulli at an answer rate r_c that is the same for every request of a class
c (the response homogeneity group model: Saerndal, Swensson and Wretman 1992, Model Assisted
Survey Sampling, Sec. 15.6), estimated by

    r_c = sum(1/pi_i, answered i in c) / sum(1/pi_i, issued i in c)

(:func:`answer_rates`; m_c / n_c, answered over issued requests, when pi is the same in the
class; pending and missing requests count in the denominator: a pending request is not
answered *yet*, a missing one never will be). A label then carries the weight
1 / (pi_i r_c) and the finite-population correction 1 - pi_i r_c
(:meth:`monitor.stats.sample.LabeledSample.two_phase`), the variance is the two-phase
one (:func:`monitor.stats.interval.second_phase_variance`), and the ratio's jackknife bias
correction re-estimates r_c in every replicate and deletes unanswered requests too
(:mod:`monitor.stats.two_phase`; with the rates held fixed it over-corrected recall by 0.05 to
0.08 se). A request audited with certainty
(pi = 1) whose label is pending no longer looks like a census: with 20% of a pi = 1 stratum
pending, its labels are a sample of 80% of it, not all of it.

Classes and pooling. A class is a cell of bucket x prediction x band of pi (:func:`pi_band`:
certainty, [1/2, 1), [1/4, 1/2), ...). The band is a score band drawn by the design: pi is a
monotone function of the score within a prediction and a bucket, and a class of nearly equal pi
keeps the reweighted estimate an imputation of each unanswered label by its class's mean, so it
stays within the worst-case bounds (with fixed score bands 0.1/0.5/0.9 the end-to-end test saw a
recall of 0.776 above its worst-case upper bound of 0.759). Answer speed differs between
predicted positives and negatives (auditors skip the hard ones) and between recent and old
buckets (answers trickle in). Sparse cells are
pooled (DESIGN.md: "pooled when sparse"); a cell needs :data:`MIN_ANSWERS` answers to stand on
its own, because the weight 1 / r_c of a cell with one or two answers is mostly noise (the usual
rule of collapsing weighting-adjustment cells with few respondents, Kalton and Kasprzyk 1986,
"The treatment of missing survey data", Survey Methodology 12, Sec. 4). MIN_ANSWERS = 10 was
chosen by simulation (``python -m benchmarks.delays --reps 1500 --windows 75 --min-answers
3,5,10,20``: 200 requests per 24 h window, answers 50% / 90% or 100% / 50% by prediction
arriving after 6 h on average, 1-20% positives, calibrated and over-confident scores, the same
samples for every value; 18 calibrated cells). With 3, classes of 3-4 answers biased recall
and F1 by +0.10 to +0.19 se in 6 cells and coverage fell to 0.90-0.93 in 6; 5 gave coverage
0.930-0.982 and |bias| <= 0.055 se; 10 gave 0.932-0.982 and |bias| <= 0.058 se, within 0.005
of 5's or closer to 0 in all 18 cells, and covered better where the scores are over-confident
(recall and F1 at 1% and 5% positives: 0.68-0.93 at 5, 0.76-0.93 at 10 with the recalibrated
design; 0.64-0.83 and 0.68-0.88 with raw q*); 20 changed nothing further (at 200 requests a
day few cells reach 10 answers, and those that do behave alike). The grid has no drift of
the positive rate inside a window, the case that pooling across buckets would bias: a class
pools buckets only when they are sparse, and 10 answers keep hourly classes from a few
hundred requests a day on. The alert benchmark agrees (``benchmarks/alerts.py --streams 30
--budgets 40 --rules horizon --answer-rates 0.5,0.9 --mean-delay-hours 6``, a month of hourly
checks with a drift on day 10): with 10, 1 of 30 healthy streams alerted and drifts were
detected after a median 97 h; with 5, 4 of 30 and 139 h. The rule, applied in order:

1. a cell (bucket, prediction, band) with at least MIN_ANSWERS answers is a class;
2. the rest of a (bucket, prediction) -- its cells that are not classes -- is one class if it
   has at least MIN_ANSWERS answers;
3. the rest of a prediction over the window -- its requests in no class yet -- is one class if
   it has at least MIN_ANSWERS answers;
4. otherwise the prediction stratum of the window is one class (all its requests).

The prediction is never pooled away: the two strata's answer rates are what biased the ratio
(a true recall of 0.60 read 0.73 with 90% of predicted positives and 50% of predicted negatives
answered). A stratum without any answer has no label to carry its weight; measures that need it
are missing (NaN), as without labels.

The assumption. The estimate is unbiased if, within a class, whether a request is answered does
not depend on its label (missing at random given the class). Auditors who skip the items they
find hard break it when hardness is tied to the label beyond the band of pi. The answer rate per
window, the pending share of the window's weight and the worst-case bounds
(:func:`worst_case_bounds`) show when it is doubtful: a low answer rate or a large pending share
with wide worst-case bounds means the estimate rests on the assumption.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from monitor.stats.falpha import falpha_gain, falpha_weight
from monitor.stats.sample import LabeledSample

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Bands of pi in the answer classes: one per factor of 2 down to 2^-MAX_BAND, the rest pooled.
MAX_BAND = 12
#: Answers a class needs to keep its own answer rate (see the module docstring for the pooling).
MIN_ANSWERS = 10


def pi_band(pi: npt.ArrayLike) -> IntArray:
    """Band of each inclusion probability: 0 for pi = 1, k for 2^-k <= pi < 2^-(k-1).

    Bands stop at :data:`MAX_BAND` (pi < 2^-11 share the last).

    Examples:
        >>> pi_band([1.0, 0.7, 0.5, 0.3, 1e-9]).tolist()
        [0, 1, 1, 2, 12]
    """
    p = np.asarray(pi, dtype=np.float64).reshape(-1)
    band = np.ceil(-np.log2(np.clip(p, 1e-300, 1.0)))
    out: IntArray = np.minimum(band, MAX_BAND).astype(np.int64)
    return out


def answer_classes(
    bucket: npt.ArrayLike,
    pred: npt.ArrayLike,
    pi: npt.ArrayLike,
    answered: npt.ArrayLike,
    min_answers: int = MIN_ANSWERS,
) -> IntArray:
    """Class id of each request by the pooling rule of the module docstring.

    Args:
        bucket: Bucket (time) of each request.
        pred: Prediction 0/1 of each request.
        pi: Inclusion probability of each request (banded by :func:`pi_band`).
        answered: Whether each request has a label.
        min_answers: Answers a class needs (rules 1-3).

    Returns:
        int64 class ids (dense, 0-based, in no particular order).

    Examples:
        >>> c = answer_classes([0, 0, 0], [1, 1, 0], [1.0, 1.0, 0.1], [True, False, True], 1)
        >>> bool(c[0] == c[1] != c[2])
        True
    """
    b = np.asarray(bucket, dtype=np.int64).reshape(-1)
    f = np.asarray(pred, dtype=np.int64).reshape(-1)
    band = pi_band(pi)
    ans = np.asarray(answered, dtype=bool).reshape(-1)
    n = b.shape[0]
    key = np.full(n, -1, dtype=np.int64)
    free = np.ones(n, dtype=bool)
    levels = (np.stack([b, f, band.reshape(-1)]), np.stack([b, f]), f[None, :])
    next_id = 0
    for cols in levels:
        if not free.any():
            break
        _, cell = np.unique(cols[:, free], axis=1, return_inverse=True)
        cell = cell.reshape(-1)
        counts = np.bincount(cell, weights=ans[free].astype(np.float64))
        keep = counts[cell] >= min_answers
        idx = np.flatnonzero(free)[keep]
        key[idx] = next_id + cell[keep]
        next_id += int(cell.max()) + 1 if cell.size else 0
        free[idx] = False
    for stratum in np.unique(f[free]):  # rule 4: the whole prediction stratum
        key[f == stratum] = next_id
        next_id += 1
    _, dense = np.unique(key, return_inverse=True)
    out: IntArray = dense.reshape(-1).astype(np.int64)
    return out


def answer_rates(group: npt.ArrayLike, answered: npt.ArrayLike, pi: npt.ArrayLike) -> FloatArray:
    """Answer rate of each request's class: its answered share of the class's weight.

    ``r_c = sum(1/pi over answered) / sum(1/pi over issued)`` (0 where none is answered), the
    weighting-class adjustment for non-response with base weights 1/pi (Kalton and
    Flores-Cervantes 2003, "Weighting methods", J. Official Statistics 19, Sec. 2.1); within a
    band of pi it is close to the count rate ``m_c / n_c`` of the response homogeneity group
    model. It keeps each class's total weight exactly, so the reweighted ratio is the estimate
    with every unanswered label imputed by its class's weighted mean and lies within the
    worst-case bounds (:func:`worst_case_bounds`); the count rate put a recall of 0.792 above
    its worst-case upper bound of 0.759 in the end-to-end test. Measured on score bands (classes
    mixing pi over a factor of 10 and more) the weighted rate doubled the bias of recall at 1%
    positives (-0.42 against -0.21 se): a heavy false negative, once answered, raised its own
    class's rate. Bands of pi keep a class's weights within a factor of 2, which removes that.
    """
    g = np.asarray(group, dtype=np.int64).reshape(-1)
    ans = np.asarray(answered, dtype=bool).reshape(-1)
    if g.size == 0:
        return np.zeros(0)
    v = 1.0 / np.asarray(pi, dtype=np.float64).reshape(-1)
    m = np.bincount(g, weights=np.where(ans, v, 0.0))
    n = np.bincount(g, weights=v)
    rate: FloatArray = (m / n)[g]
    return rate


def response_sample(
    score: npt.ArrayLike,
    pred: npt.ArrayLike,
    label: npt.ArrayLike,
    pi: npt.ArrayLike,
    bucket: npt.ArrayLike,
    *,
    min_answers: int = MIN_ANSWERS,
) -> LabeledSample:
    """The two-phase labeled sample of a window's requests (label < 0: not answered).

    Answer classes by :func:`answer_classes`, rates by :func:`answer_rates`, then
    :meth:`LabeledSample.two_phase` over the answered requests: v = 1/(pi r_c),
    fpc = 1 - pi r_c. Pending and missing requests enter through r_c and the jackknife of
    :mod:`monitor.stats.two_phase` (their classes and 1/pi are kept in the sample's answers).

    Args:
        score: Scores of every request of the window.
        pred: Predictions.
        label: Labels, negative for a request without one.
        pi: Inclusion probabilities.
        bucket: Buckets.
        min_answers: See :func:`answer_classes`.

    Returns:
        The sample of the answered requests (empty when none is), with the predictions of the
        classes none of whose requests is answered as its ``unanswered_strata``.
    """
    y = np.asarray(label).reshape(-1)
    answered = y >= 0
    group = answer_classes(bucket, pred, pi, answered, min_answers)
    rate = answer_rates(group, answered, pi)
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    f = np.asarray(pred).reshape(-1)
    p = np.asarray(pi, dtype=np.float64).reshape(-1)
    silent = ~answered & ~np.isin(group, group[answered])  # in a class without an answer
    return LabeledSample.two_phase(
        s[answered],
        f[answered],
        y[answered],
        p[answered],
        rate=rate[answered],
        group=group[answered],
        unanswered_pi=p[~answered],
        unanswered_group=group[~answered],
        unanswered_strata=frozenset(np.unique(f[silent]).tolist()),
    )


def worst_case_bounds(
    pred: npt.ArrayLike, label: npt.ArrayLike, pi: npt.ArrayLike, alpha: float
) -> tuple[float, float]:
    """Range of the Horvitz-Thompson F_alpha over every value the unanswered labels could take.

    ``F = sum(v l w) / sum(v w)`` with v = 1/pi over all requests (seed 000, Eq. 4), the
    unanswered labels (label < 0) filled in. F_alpha does not decrease with a predicted positive's
    label (a true instead of a false positive) and does not increase with a predicted negative's
    (a false negative), so the lowest value has every unanswered predicted positive 0 and every
    unanswered predicted negative 1, the highest the reverse (for precision: pending all 0 / all
    1). No assumption on why labels are missing (bounds in the sense of Manski 1989,
    "Anatomy of the selection problem"). For a stratum audited with certainty (pi = 1) this is
    exactly how far the pending labels can still move the realised value; with pi < 1 the
    unanswered requests' large weights make the range wide, which is the point. The reported
    estimate without its jackknife correction lies within the bounds (:func:`answer_rates`).

    Args:
        pred: Predictions of every request of the window.
        label: Their labels, negative where not answered.
        pi: Their inclusion probabilities.
        alpha: The F_alpha trade-off.

    Returns:
        ``(lowest, highest)``; NaN where the measure is undefined for that filling.
    """
    f = np.asarray(pred, dtype=np.int64).reshape(-1)
    y = np.asarray(label, dtype=np.int64).reshape(-1)
    v = 1.0 / np.asarray(pi, dtype=np.float64).reshape(-1)
    open_ = y < 0
    out = []
    for fill_pos, fill_neg in ((0, 1), (1, 0)):
        filled = np.where(open_, np.where(f == 1, fill_pos, fill_neg), y)
        w = falpha_weight(f, filled, alpha)
        total = float(np.dot(v, w))
        out.append(float(np.dot(v * w, falpha_gain(f, filled))) / total if total > 0 else math.nan)
    return out[0], out[1]


def pending_share(pi: npt.ArrayLike, pending: npt.ArrayLike) -> float:
    """Share of the window's sampling weight ``sum(1/pi)`` carried by pending requests.

    NaN without requests. The weight, not the count, is what an unanswered request withholds
    from the estimate: one pending predicted negative at pi = 0.01 weighs as much as a hundred
    predicted positives at pi = 1.
    """
    v = 1.0 / np.asarray(pi, dtype=np.float64).reshape(-1)
    total = float(v.sum())
    if not total > 0.0:
        return math.nan
    return float(v[np.asarray(pending, dtype=bool).reshape(-1)].sum()) / total
