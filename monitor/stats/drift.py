"""Label-free drift of the score distribution against a reference window: PSI and KS.

Scores are summarised by ``SCORE_BINS`` equal-width bins on [0, 1] (additive, so buckets merge).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

SCORE_BINS = 20
#: Bin shares are floored at this value in the PSI so an empty bin does not give infinity.
PSI_FLOOR = 1e-4


def score_histogram(score: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Counts of scores in SCORE_BINS equal-width bins on [0, 1]; bin b = min(floor(20 s), 19).

    Examples:
        >>> score_histogram([0.0, 0.04, 0.5, 1.0]).tolist()[:3], int(score_histogram([1.0])[-1])
        ([2, 0, 0], 1)
    """
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    if s.size and not ((s >= 0.0) & (s <= 1.0)).all():
        msg = "scores must be in [0, 1]"
        raise ValueError(msg)
    bins = np.minimum((s * SCORE_BINS).astype(np.int64), SCORE_BINS - 1)
    return np.bincount(bins, minlength=SCORE_BINS).astype(np.int64)


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


def ks_from_histograms(ref: npt.ArrayLike, cur: npt.ArrayLike) -> float:
    """Two-sample KS distance max_b |F_ref(b) - F_cur(b)| between binned CDFs; NaN if empty.

    Equals the exact KS statistic when every score lies inside its bin's closed lower edge
    grid, and is a lower bound of it otherwise (ties inside a bin are merged).
    """
    r = _shares(ref)
    c = _shares(cur)
    if r is None or c is None:
        return math.nan
    return float(np.max(np.abs(np.cumsum(r) - np.cumsum(c))))


def ks_statistic(ref_scores: npt.ArrayLike, cur_scores: npt.ArrayLike) -> float:
    """Exact two-sample Kolmogorov-Smirnov statistic sup_x |F_ref(x) - F_cur(x)|; NaN if empty.

    Evaluated at every observed value with ``searchsorted`` (same value as
    ``scipy.stats.ks_2samp(...).statistic``).
    """
    a = np.sort(np.asarray(ref_scores, dtype=np.float64).reshape(-1))
    b = np.sort(np.asarray(cur_scores, dtype=np.float64).reshape(-1))
    if a.size == 0 or b.size == 0:
        return math.nan
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / a.size
    cdf_b = np.searchsorted(b, points, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))
