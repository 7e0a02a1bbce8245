"""Label-free drift of the score distribution against a reference window: the PSI.

Scores are summarised by ``SCORE_BINS`` bins of one unit on the logit scale (additive, so buckets
merge; :func:`score_bins`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import special

SCORE_BINS = 20
#: Bin shares are floored at this value in the PSI so an empty bin does not give infinity.
PSI_FLOOR = 1e-4


def score_bins(score: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """The bin of each score in [0, 1]: ``b = clip(floor(logit s) + 10, 0, 19)``.

    One logit unit per bin from -9 to 9, the first and the last bin open (s < 1.2e-4, s >= 0.99988).
    Not equal-width bins on [0, 1]: a model that turns over-confident moves its low scores by
    orders of magnitude, all inside [0, 0.05), the first of 20 equal-width bins, so at 1%
    positives logits x3 moved the PSI by about 0.1 and the score shift
    (:func:`shift_share`) raised the daemon's defensive share only to 0.13-0.29 by the first
    drifted bucket's 1,000th record. On the logit bins the daemon's first bucket after that drift
    covers 0.950 (x3) and 0.937 (x10) where it covered 0.787 and 0.910 (``python -m
    benchmarks.efficiency --stream-daemon --reps 100 --seed S --cells 1% --bucket 3``, S = 14,
    15, 16; benchmarks/README.md, "Efficiency"), its estimate less accurate (MAE 0.199 against
    0.167 at x3) as the design moves toward uniform; on calibrated streams no control was raised.

    Examples:
        >>> score_bins(np.array([0.0, 1e-5, 0.5, 0.7, 1.0])).tolist()
        [0, 0, 10, 10, 19]
    """
    logit = np.clip(special.logit(score), -10.0, 9.5)  # -inf / inf at 0 / 1: the open end bins
    bins: npt.NDArray[np.int64] = (np.floor(logit) + 10.0).astype(np.int64)
    return bins


def score_histogram(score: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Counts of scores in the ``SCORE_BINS`` bins of :func:`score_bins`.

    Examples:
        >>> score_histogram([0.0, 0.5, 0.5, 1.0]).tolist()[9:12], int(score_histogram([1.0])[-1])
        ([0, 2, 0], 1)
    """
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    if s.size and not ((s >= 0.0) & (s <= 1.0)).all():
        msg = "scores must be in [0, 1]"
        raise ValueError(msg)
    return np.bincount(score_bins(s), minlength=SCORE_BINS).astype(np.int64)


def _shares(counts: npt.ArrayLike) -> npt.NDArray[np.float64] | None:
    c = np.asarray(counts, dtype=np.float64)
    total = float(c.sum())
    return None if not total > 0.0 else c / total


def psi(ref_counts: npt.ArrayLike, cur_counts: npt.ArrayLike) -> float:
    """Population stability index sum((c_b - r_b) ln(c_b / r_b)) over bin shares r, c.

    Shares are floored at PSI_FLOOR. NaN when either histogram is empty. Rule of thumb: < 0.1
    stable, 0.1-0.25 moderate shift, > 0.25 large shift.
    """
    r = _shares(ref_counts)
    c = _shares(cur_counts)
    if r is None or c is None:
        return math.nan
    r = np.maximum(r, PSI_FLOOR)
    c = np.maximum(c, PSI_FLOOR)
    return float(np.sum((c - r) * np.log(c / r)))


#: Largest defensive share a score shift asks for: q keeps a fifth of q*'s shape, so no record
#: is drawn with less than 0.8 times the mean pi (the labels' ``selection.MAX_DEFENSIVE`` is 0.5;
#: right after a drift nothing is known of the map yet; in the first drifted bucket of
#: ``tests/statistical/test_stream_recalibration.py`` 0.5 covered 0.85 / 0.79 at logits x3 / x10,
#: 0.8 covers 0.90 / 0.92)
SHIFT_MAX = 0.8
#: PSI above the sampling noise at which the score shift asks for the largest defensive share
#: (the rule of thumb's "moderate shift", ``psi``)
SHIFT_FULL = 0.1
#: The noise allowance in units of the PSI two samples of one distribution show on average
SHIFT_NOISE = 3.0


def psi_noise(n_ref: float, n_cur: float, bins: int = SCORE_BINS) -> float:
    """The mean PSI of two samples of one distribution: ``(bins - 1) (1 / n_ref + 1 / n_cur)``.

    The PSI is the symmetric Kullback-Leibler divergence of the bin shares; for two multinomial
    samples of sizes n, m from one distribution ``PSI / (1/n + 1/m)`` is asymptotically
    chi-square with ``bins - 1`` degrees of freedom. Infinity when either sample is empty.

    Examples:
        >>> round(psi_noise(5000, 1000), 4)
        0.0228
    """
    if not (n_ref > 0 and n_cur > 0):
        return math.inf
    return (bins - 1) * (1.0 / n_ref + 1.0 / n_cur)


def shift_share(
    ref_counts: npt.ArrayLike,
    cur_counts: npt.ArrayLike,
    lam0: float,
    lam_max: float,
    *,
    full: float = SHIFT_FULL,
    noise: float = SHIFT_NOISE,
) -> float:
    """The defensive share a shift of the score distribution asks for, before any label.

        lam = lam0 + (lam_max - lam0) clip((PSI - noise psi_noise(n_ref, n_cur)) / full, 0, 1)

    with PSI the index of the current scores against the reference ones (``psi``). A
    calibration map is fitted on the labels of earlier traffic; when the scores it is applied to
    no longer look like that traffic's, the map (and q* at it) is suspect, so the design moves
    toward uniform (seed 002, Sec. 4.1: defensive mixing bounds the weights) until labels of
    the new traffic arrive. A function of the scored stream only. Blind to a concept drift that
    leaves the score distribution unchanged (p(y | s) moves, the scores do not), and to changes
    inside one of the ``SCORE_BINS`` bins (one logit unit each, :func:`score_bins`).
    Bounded: ``lam0 <= lam <= max(lam0, lam_max)``; ``lam0`` when either histogram is empty.

    Examples:
        >>> shift_share([50] * 20, [10] * 20, 0.1, 0.5)
        0.1
        >>> shift_share([100] * 20, [1000] + [0] * 19, 0.1, 0.5)
        0.5
    """
    if not 0.0 < lam0 <= 1.0:
        msg = f"lam0 must be in (0, 1], got {lam0}"
        raise ValueError(msg)
    ref = np.asarray(ref_counts, dtype=np.float64)
    cur = np.asarray(cur_counts, dtype=np.float64)
    index = psi(ref, cur)
    if math.isnan(index):
        return lam0
    excess = index - noise * psi_noise(float(ref.sum()), float(cur.sum()), ref.size)
    grow = min(1.0, max(0.0, excess / full))
    return min(max(lam0, lam_max), max(lam0, lam0 + (lam_max - lam0) * grow))
