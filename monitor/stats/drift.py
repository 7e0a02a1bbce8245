"""Label-free drift of the score distribution against a reference window: the PSI.

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
