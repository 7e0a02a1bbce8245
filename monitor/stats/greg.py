"""Model-assisted (GREG / difference) estimate of F_alpha per prediction stratum.

DESIGN.md, "Model-assisted estimate"; Sarndal, Swensson and Wretman, Model Assisted Survey
Sampling (1992), Sec. 6.4 (the regression estimator); prediction-powered inference with a tuned
coefficient (Angelopoulos et al. 2023, PPI++) is the special case a = 0.

The traffic of a window is split by the prediction f into strata h = 1 (predicted positives) and
h = 0 (predicted negatives), with N_h records and S_h = sum of the recalibrated probabilities
p_hat over them. The positives of each stratum are estimated by a regression estimator

    Y_h = sum_{i in s_h} v_i y_i + a_h (N_h - sum_{s_h} v_i) + b_h (S_h - sum_{s_h} v_i p_hat_i),

(a_h, b_h) the least-squares fit of y on (1, p_hat) over the stratum's labelled items weighted
by v = 1/pi (which minimises the weighted residual variance: the tuned coefficient). With fewer
than ``MIN_LABELS`` labels or fewer than ``MIN_EVENTS`` of each class in a stratum the slope is
0 (post-stratified Hajek estimate ``N_h * ybar_h``): the map is not trusted there. Then

    T = Y_1 (true positives), M = Y_0 (false negatives), D = alpha N_1 + (1 - alpha)(T + M),
    F = T / D,

with variance by linearisation from the residuals e_i = y_i - a_h - b_h p_hat_i:

    Var(Y_h) = sum_{s_h} fpc_i v_i^2 e_i^2,
    se^2 = (dF/dT)^2 Var(Y_1) + (dF/dM)^2 Var(Y_0),
    dF/dT = (D - (1 - alpha) T) / D^2,  dF/dM = -(1 - alpha) T / D^2,

plus the unseen-event floor of ``monitor.stats.interval`` on the false negatives (fewer than 2
sampled with pi < 1: pseudo events of the stratum's mean ``fpc v^2``), and the interval of
``interval.interval_from_se`` (logit scale, t with n - 1 degrees of freedom). The map comes from
earlier labels (it chose these items), the regression coefficients from these: the estimator is
approximately design-unbiased (bias O(1/n)), and its coverage is measured in
``benchmarks/efficiency.py`` rather than assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.stats.estimate import Estimate
from monitor.stats.interval import PSEUDO_EVENTS, interval_from_se, unseen_event_design
from monitor.stats.sample import LabeledSample

FloatArray = npt.NDArray[np.float64]

#: Labels a stratum needs before the slope on p_hat is fitted, and events of each class.
MIN_LABELS = 20
MIN_EVENTS = 3


@dataclass(frozen=True)
class StratumTraffic:
    """Label-free totals of one prediction stratum: records N_h and S_h = sum of p_hat."""

    n: float
    sum_p: float


@dataclass(frozen=True)
class StratumFit:
    """A stratum's regression estimate of its positives, its variance and coefficients."""

    total: float
    var: float
    a: float
    b: float


def fit_stratum(
    y: FloatArray, p: FloatArray, v: FloatArray, fpc: FloatArray, traffic: StratumTraffic
) -> StratumFit:
    """The regression estimate Y_h of one stratum (module docstring); Y_h = 0 without labels."""
    if y.size == 0:
        return StratumFit(0.0, 0.0, 0.0, 0.0)
    sv = float(v.sum())
    positives = int(np.count_nonzero(y > 0.5))
    fitted = (
        y.size >= MIN_LABELS
        and min(positives, y.size - positives) >= MIN_EVENTS
        and float(np.ptp(p)) > 0.0
    )
    a, b = float(np.dot(v, y)) / sv, 0.0
    if fitted:
        pm = float(np.dot(v, p)) / sv
        dp = p - pm
        sxx = float(np.dot(v, dp * dp))
        if sxx > 0.0:
            b = float(np.dot(v, dp * (y - a))) / sxx
            a = a - b * pm
    e = y - a - b * p
    total = float(np.dot(v, y)) + a * (traffic.n - sv) + b * (traffic.sum_p - float(np.dot(v, p)))
    var = float(np.dot(fpc, (v * e) ** 2))
    return StratumFit(total, var, a, b)


def greg_falpha(
    sample: LabeledSample,
    p_hat: npt.ArrayLike,
    negatives: StratumTraffic,
    positives: StratumTraffic,
    *,
    alpha: float,
    level: float,
) -> Estimate:
    """Model-assisted F_alpha from a labelled sample and the strata's traffic totals.

    Args:
        sample: The labelled items (v = 1/pi, fpc = 1 - pi).
        p_hat: Their recalibrated probabilities (the same map as in the traffic totals).
        negatives: N_0 and S_0 of the predicted negatives of the traffic.
        positives: N_1 and S_1 of the predicted positives.
        alpha: F_alpha trade-off in [0, 1].
        level: Confidence level in (0, 1).

    Returns:
        The estimate (module docstring); missing (NaN) when D = 0 or no label carries weight.
    """
    p = np.asarray(p_hat, dtype=np.float64)
    y = sample.label.astype(np.float64)
    f1 = sample.pred == 1
    fits = []
    for sel, traffic in ((~f1, negatives), (f1, positives)):
        fits.append(fit_stratum(y[sel], p[sel], sample.v[sel], sample.fpc[sel], traffic))
    neg, pos = fits
    t, m = max(pos.total, 0.0), max(neg.total, 0.0)
    d = alpha * positives.n + (1.0 - alpha) * (t + m)
    weight = alpha * sample.pred + (1.0 - alpha) * sample.label
    n = int(np.count_nonzero(weight > 0.0))
    if not d > 0.0 or n == 0:
        return Estimate.missing(level, n_labels=n)
    value = min(max(t / d, 0.0), 1.0)
    d_t = (d - (1.0 - alpha) * t) / (d * d)
    d_m = -(1.0 - alpha) * t / (d * d)
    unseen = unseen_event_design(
        sample.label.astype(np.float64), sample.v, sample.fpc, ~f1, PSEUDO_EVENTS
    )
    var_m = neg.var + unseen
    se = math.sqrt(d_t * d_t * pos.var + d_m * d_m * var_m)
    sv = float(sample.v.sum())
    design = float(np.dot(sample.fpc, sample.v**2))
    n_eff = math.inf if design <= 0.0 else sv * sv / design
    ess = sv * sv / float(np.dot(sample.v, sample.v))
    lower, upper = interval_from_se(value, se, n, n_eff, level)
    return Estimate(value, se, lower, upper, n, ess, level)
