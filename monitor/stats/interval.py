"""Confidence interval of a weighted ratio estimate (seed 000 Eq. 4 and Sec. 2.3).

The estimate is the ratio of two Horvitz-Thompson sums over the labeled items,

    G = sum(v_i l_i w_i) / sum(v_i w_i),

with gain ``l``, measure weight ``w`` and sampling weight ``v = 1/pi`` (seed 000, Eq. 4 with
p/q replaced by 1/pi). Its standard error is the delta method for a ratio (seed 000, proof of
Lemma 2), with the finite-population correction ``fpc = 1 - pi`` of Poisson sampling (compare
seed 003, Eq. 21) and *with* the division by the squared total weight that the paper's
``S_{n,q}^2 / n`` leaves out (DESIGN.md, "The confidence interval"):

    se^2 = sum(fpc_i v_i^2 w_i^2 (l_i - G)^2) / (sum(v_i w_i))^2.

The interval is built on the logit scale, where the sampling distribution of a proportion-like
ratio is much closer to normal when G is near 0 or 1 (measured: 0.94-0.96 coverage at 1-2%
positives against 0.89-0.93 on the raw scale, DESIGN.md):

    se_logit = se / (G (1 - G)),   [expit(logit(G) - t se_logit), expit(logit(G) + t se_logit)],

with t the ``(1 + level) / 2`` quantile of Student's t with n - 1 degrees of freedom, n the number
of labeled items with a non-zero weight (seed 000 Sec. 2.3, seed 002 Sec. 3.2). Measured in
``tests/statistical/test_coverage.py`` (Poisson samples from q* mixed with 10% uniform, calibrated
pools of 200,000 with 1-50% positives, alpha 0/0.5/1, 2,000 repetitions): 0.933-0.967 at 100 and
400 labels, 0.933-0.964 at 1% positives with 100 labels. Leverage (HC2) and second-order bias
corrections of the interval were measured too and over-covered (up to 0.98) at 100 labels.

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
from scipy import special, stats

from monitor.stats.estimate import Estimate

FloatArray = npt.NDArray[np.float64]


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
    return float(stats.t.ppf(0.5 + level / 2.0, max(n - 1, 1)))


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
    t2n = t * t / n_eff
    centre = (p + t2n / 2.0) / (1.0 + t2n)
    half = t / (1.0 + t2n) * math.sqrt(p * (1.0 - p) / n_eff + t2n / (4.0 * n_eff))
    lower = min(max(centre - half, 0.0), p)
    upper = max(min(centre + half, 1.0), p)
    return lower, upper


def interval_from_se(
    value: float, se: float, n: int, n_eff: float, level: float
) -> tuple[float, float]:
    """Interval for a ratio in [0, 1] from its delta-method standard error.

    Logit scale when ``0 < value < 1`` and ``se > 0``:
    ``expit(logit(G) +- t se / (G (1 - G)))``; otherwise the Wilson score interval with the
    effective sample size ``n_eff`` (see the module docstring). Shared by the general ratio
    estimator and the stratified estimator (seed 003).

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
    if 0.0 < value < 1.0 and se > 0.0 and math.isfinite(se):
        centre = float(special.logit(value))
        half = t * se / (value * (1.0 - value))
        lower = float(special.expit(centre - half))
        upper = float(special.expit(centre + half))
        return min(max(lower, 0.0), value), max(min(upper, 1.0), value)
    return wilson_interval(value, n_eff, t)


def ratio_estimate(
    gain: FloatArray,
    weight: FloatArray,
    v: FloatArray,
    fpc: FloatArray,
    level: float,
) -> Estimate:
    """Weighted ratio estimate G = sum(v l w) / sum(v w) with its confidence interval.

    Seed 000 Eq. 4 (v = 1/pi for Poisson samples, 1/q per draw with replacement) and the
    delta-method variance ``se^2 = sum(fpc v^2 w^2 (l - G)^2) / (sum v w)^2`` (seed 000 Lemma 2,
    with the finite-population correction of seed 003 Eq. 21); interval as in
    :func:`interval_from_se`.

    Args:
        gain: Gains ``l_i`` in [0, 1] (e.g. 1[f = y]).
        weight: Measure weights ``w_i >= 0`` (e.g. alpha f + (1 - alpha) y).
        v: Sampling weights ``1/pi_i > 0``.
        fpc: Finite-population corrections ``1 - pi_i`` in [0, 1] (1 for draws with replacement).
        level: Confidence level in (0, 1).

    Returns:
        The :class:`Estimate`; ``Estimate.missing`` (NaN, never 0) when ``sum(v w) = 0``.
        ``n_labels`` counts the labeled items with ``w > 0``; ``ess`` is the Kish effective sample
        size ``(sum v w)^2 / sum (v w)^2``.

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
    else:
        value = min(max(float(np.dot(vw, gain)) / total, 0.0), 1.0)
    resid = vw * (gain - value)
    se = math.sqrt(float(np.dot(fpc, resid * resid))) / total
    vw2 = vw * vw
    ess = total * total / float(vw2.sum())
    design = float(np.dot(fpc, vw2))
    n_eff = math.inf if design <= 0.0 else total * total / design
    lower, upper = interval_from_se(value, se, n, n_eff, level)
    return Estimate(value, se, lower, upper, n, ess, level)


def ratio_bias(gain: FloatArray, weight: FloatArray, v: FloatArray, fpc: FloatArray) -> float:
    """Second-order (Taylor) estimate of the ratio estimator's bias, E[G_hat] - G.

    Expanding N/W to second order around the totals (N = sum v l w, W = sum v w):
    ``E[N/W] - G ~ (G Var(W) - Cov(N, W)) / W^2``; with the Poisson-sampling variance
    estimates ``Var(W) = sum fpc v^2 w^2`` and ``Cov(N, W) = sum fpc v^2 w^2 l``:

        bias = sum( fpc v^2 w^2 (G - l) ) / (sum v w)^2,

    of order 1/n (seed 000, Lemma 1). ``G - bias`` is the bias-corrected ratio. Not applied by
    :func:`ratio_estimate` (which returns seed 000 Eq. 4 exactly); exposed so the bias can be
    reported and compared (measured in ``tests/statistical/test_coverage.py``).

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
