"""Model likelihood of the audited labels and effective sample size of the weights.

Seed 002, Sec. 4.1: the exponentiated average log-likelihood of the test labels under the model
measures how far p(y|x; theta) can be trusted; above about 0.6 active estimation pays off.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

#: Scores are clipped to [EPS, 1 - EPS] before taking logs, so one over-confident miss costs at
#: most log(EPS) instead of -inf.
EPS = 1e-6


def _log_likelihoods(score: npt.ArrayLike, label: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Each label's log p(y|x): log s if y = 1 else log(1 - s), s clipped to [EPS, 1 - EPS]."""
    s = np.clip(np.asarray(score, dtype=np.float64), EPS, 1.0 - EPS)
    y = np.asarray(label, dtype=np.float64)
    out: npt.NDArray[np.float64] = y * np.log(s) + (1.0 - y) * np.log1p(-s)
    return out


def model_likelihood(score: npt.ArrayLike, label: npt.ArrayLike, v: npt.ArrayLike) -> float:
    """exp( sum(v log p(y|x; theta)) / sum(v) ), p(y|x) = s if y = 1 else 1 - s (seed 002 Sec. 4.1).

    The weights v = 1/pi make it an estimate for the traffic, not for the audited items.
    NaN without labels.

    Examples:
        >>> round(model_likelihood([0.8, 0.8], [1, 0], [1.0, 1.0]), 4)
        0.4
    """
    w = np.asarray(v, dtype=np.float64)
    total = float(w.sum())
    if not total > 0.0:
        return math.nan
    return math.exp(float(np.dot(w, _log_likelihoods(score, label))) / total)


def log_likelihood_se(score: npt.ArrayLike, label: npt.ArrayLike, v: npt.ArrayLike) -> float:
    """Super-population standard error of the weighted mean log-likelihood ``log L``.

    ``log L = sum(v ll) / sum(v)`` with ``ll = log p(y|x)`` is a ratio of weighted sums; the delta
    method without finite-population correction (the question is the model's likelihood, not
    the window's) gives ``se^2 = sum(v^2 (ll - log L)^2) / (sum v)^2``. NaN with fewer than two
    labels (no spread to measure).

    Examples:
        >>> round(log_likelihood_se([0.8, 0.8], [1, 0], [1.0, 1.0]), 4)
        0.4901
    """
    w = np.asarray(v, dtype=np.float64)
    total = float(w.sum())
    if w.size < 2 or not total > 0.0:
        return math.nan
    loglik = _log_likelihoods(score, label)
    resid = w * (loglik - float(np.dot(w, loglik)) / total)
    return math.sqrt(float(np.dot(resid, resid))) / total


def effective_sample_size(v: npt.ArrayLike) -> float:
    """Kish effective sample size (sum v)^2 / sum(v^2); 0 without labels.

    Examples:
        >>> effective_sample_size([1.0, 1.0, 2.0])
        2.6666666666666665
    """
    w = np.asarray(v, dtype=np.float64)
    squares = float(np.dot(w, w))
    if not squares > 0.0:
        return 0.0
    return float(w.sum()) ** 2 / squares
