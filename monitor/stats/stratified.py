"""Two-stratum F_alpha with propagation of error (seed 003, generalised from F1 to F_alpha).

Strata are the predicted positives (size N1, known) and predicted negatives (N0, known), each
sampled without replacement. With r_h positives among the n_h labeled items of stratum h,
R1 = N1 r1/n1 estimates the true positives and R0 = N0 r0/n0 the false negatives; then

    F_alpha = R1 / (alpha N1 + (1 - alpha)(R1 + R0))        (seed 003 Eq. 2 at alpha = 1/2),

and by propagation of error (seed 003 Eq. 4, 19) with D = alpha N1 + (1 - alpha)(R1 + R0),

    dF/dR1 = (alpha N1 + (1 - alpha) R0) / D^2,   dF/dR0 = -(1 - alpha) R1 / D^2,
    Var(F) = (dF/dR1)^2 Var(R1) + (dF/dR0)^2 Var(R0),
    Var(R_h) = N_h^2 (r_h/n_h)(1 - r_h/n_h) / n_h * (1 - n_h/N_h)         (seed 003 Eq. 21).

Bias correction. F is a ratio with R1 in both numerator and denominator, biased to order 1/n like
the general estimator. The reported value subtracts the stratified delete-one jackknife bias
(Quenouille; Wolter, *Introduction to Variance Estimation*, ch. 4, with the finite-population
correction of each stratum),

    bias_J = sum_h (1 - n_h/N_h)(n_h - 1)(mean_i F_(hi) - F),

where F_(hi) recomputes F with item i left out of stratum h (its p_h becomes (r_h - y_i)/(n_h - 1);
only two distinct values per stratum, so it costs O(1)). It is 0 for precision (alpha = 1: F is
linear in r1) and for a census. The general estimator's correction is the same jackknife for a
Poisson design; the two agree exactly without correction (``bias_correction=False``) and to a
small fraction of the se with it (tests/unit/stats/test_stats_stratified.py).

Unseen false negatives. When fewer than c positives were seen among the n0 sampled predicted
negatives and that stratum was sampled (1 - n0/N0 > 0), the plug-in Var(R0) is 0 (none seen) or
far too small for a count interval, although the number of false negatives is uncertain; as in
the general estimator (:mod:`monitor.stats.interval`, "Unseen events", c = 2) the stratum is then
credited with c false negatives in the variance only (the estimate keeps r0):

    Var(R0) = N0^2 p0 (1 - p0) / n0 * (1 - n0/N0),   p0 = c / n0,

which is c v0^2 (1 - pi0) with v0 = N0/n0 up to the binomial factor (1 - p0), the general
estimator's floor on equal weights. The effective n of the Wilson fallback (recall = 1 when no
false negative was seen) is then at most the general estimator's Kish n_eff with the pseudo
events, D^2 / sum_h (1 - n_h/N_h)(N_h/n_h)^2 (sum_{i in h} w_i^2 + [h = 0](c - k0)(1 - alpha)^2).
Not applied to precision (alpha = 1), which does not depend on R0.

The interval is built from this se exactly as for the general estimator, around the corrected
value (logit scale, Wilson fallback; :func:`monitor.stats.interval.interval_from_se`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from monitor.stats.estimate import Estimate
from monitor.stats.interval import PSEUDO_EVENTS, interval_from_se, jackknife_bounded
from monitor.stats.sample import LabeledSample


def _stratum(labels: npt.NDArray[np.float64], size: int) -> tuple[float, float, int, float]:
    """(R_hat, Var(R_hat), n, fpc) of one stratum, seed 003 Eq. 20-21."""
    n = int(labels.shape[0])
    if n == 0:
        return 0.0, 0.0, 0, 1.0
    p = float(labels.mean())
    fpc = max(1.0 - n / size, 0.0) if size > 0 else 0.0
    return size * p, size * size * p * (1.0 - p) / n * fpc, n, fpc


def _falpha_of(p1: float, p0: float, big_n1: int, big_n0: int, alpha: float) -> float:
    """F = R1 / (alpha N1 + (1 - alpha)(R1 + R0)) with R_h = N_h p_h; NaN when undefined."""
    r1 = big_n1 * p1
    denominator = alpha * big_n1 + (1.0 - alpha) * (r1 + big_n0 * p0)
    return r1 / denominator if denominator > 0.0 else math.nan


def _jackknife_term(
    positives: float,
    n: int,
    fpc: float,
    value: float,
    refit: Callable[[float], float],
    *,
    replicates: list[float],
) -> float:
    """(1 - f_h)(n_h - 1)(mean_i F_(hi) - F) for one stratum; 0 when it cannot be formed.

    The stratum's delete-one values F_(hi) are appended to ``replicates``.
    """
    if n < 2 or fpc <= 0.0:
        return 0.0
    drop_pos = refit((positives - 1.0) / (n - 1)) if positives > 0.0 else 0.0
    drop_neg = refit(positives / (n - 1)) if positives < n else 0.0
    mean = (positives * drop_pos + (n - positives) * drop_neg) / n
    if math.isnan(mean):
        return 0.0
    replicates.extend(
        f for f, kept in ((drop_pos, positives > 0.0), (drop_neg, positives < n)) if kept
    )
    return fpc * (n - 1) * (mean - value)


def stratified_falpha(
    sample: LabeledSample,
    n_pos_pred: int,
    n_neg_pred: int,
    alpha: float,
    level: float,
    *,
    bias_correction: bool = True,
    pseudo_events: float = PSEUDO_EVENTS,
) -> Estimate:
    """F_alpha from a sample stratified by the prediction, with known stratum sizes (seed 003).

    Only ``sample.pred`` and ``sample.label`` are used (the design is a simple random sample in
    each stratum; ``sample.v`` is ignored).

    Args:
        sample: Labeled items of both strata.
        n_pos_pred: N1, number of predicted positives in the population.
        n_neg_pred: N0, number of predicted negatives in the population.
        alpha: F_alpha trade-off in [0, 1].
        level: Confidence level.
        bias_correction: Subtract the stratified jackknife bias (default; see the module
            docstring); False gives seed 003's plug-in estimate exactly.
        pseudo_events: c, the false negatives the predicted-negative stratum is credited with in
            Var(R0) when none was seen there (0 restores seed 003's variance exactly).

    Returns:
        The estimate; missing (NaN) when a stratum the measure needs was not sampled, or the
        denominator is 0.
    """
    if not 0.0 <= alpha <= 1.0:
        msg = f"alpha must be in [0, 1], got {alpha}"
        raise ValueError(msg)
    f = sample.pred.astype(bool)
    y = sample.label.astype(np.float64)
    r1, var1, n1, fpc1 = _stratum(y[f], n_pos_pred)
    r0, var0, n0, fpc0 = _stratum(y[~f], n_neg_pred)
    k0 = float(y[~f].sum())
    floored = k0 < pseudo_events and n0 > 0 and fpc0 > 0.0 and alpha < 1.0
    if floored:
        # fewer than c false negatives seen in a sampled stratum: floor of c events (module doc)
        p0 = min(pseudo_events / n0, 1.0)
        var0 = n_neg_pred * n_neg_pred * p0 * (1.0 - p0) / n0 * fpc0
    n0_used = n0 if alpha < 1.0 else 0
    n_used = n1 + n0_used
    needs_neg = alpha < 1.0 and n_neg_pred > 0
    if (n_pos_pred > 0 and n1 == 0) or (needs_neg and n0 == 0):
        return Estimate.missing(level, n_labels=n_used)
    denominator = alpha * n_pos_pred + (1.0 - alpha) * (r1 + r0)
    if not denominator > 0.0:
        return Estimate.missing(level, n_labels=n_used)
    value = min(max(r1 / denominator, 0.0), 1.0)
    # divided twice, not by denominator**2: a tiny alpha N1 with r1 + r0 = 0 must not underflow
    d1 = (alpha * n_pos_pred + (1.0 - alpha) * r0) / denominator / denominator
    d0 = -(1.0 - alpha) * r1 / denominator / denominator
    se = math.hypot(d1 * math.sqrt(var1), d0 * math.sqrt(var0))
    # Effective n for the Wilson fallback: n over the (label-weighted) finite-population
    # correction, as Var(p) = p(1-p)/n (1 - n/N); a census of every stratum used is exact.
    mean_fpc = (n1 * fpc1 + n0_used * fpc0) / n_used
    n_eff = math.inf if mean_fpc <= 0.0 else n_used / mean_fpc
    if floored:
        # the pseudo events shrink it as in the general estimator: Kish's (sum v w)^2 / design
        # with design = sum_h fpc_h v_h^2 (sum_{i in h} w_i^2 (+ (c - k0)(1 - alpha)^2 in h = 0))
        w = alpha * f + (1.0 - alpha) * y
        v1 = n_pos_pred / n1 if n1 else 0.0
        v0 = n_neg_pred / n0
        design = fpc1 * v1 * v1 * float(np.dot(w[f], w[f])) + fpc0 * v0 * v0 * (
            float(np.dot(w[~f], w[~f])) + (pseudo_events - k0) * (1.0 - alpha) ** 2
        )
        n_eff = min(n_eff, denominator * denominator / design)
    corrected = value
    if bias_correction and alpha < 1.0:  # precision (alpha = 1) is linear in r1: unbiased
        k1 = float(y[f].sum())
        k0 = float(y[~f].sum())
        p1 = k1 / n1 if n1 else 0.0
        p0 = k0 / n0 if n0 else 0.0
        replicates: list[float] = []
        bias = _jackknife_term(
            k1,
            n1,
            fpc1,
            value,
            lambda p: _falpha_of(p, p0, n_pos_pred, n_neg_pred, alpha),
            replicates=replicates,
        ) + _jackknife_term(
            k0,
            n0,
            fpc0,
            value,
            lambda p: _falpha_of(p1, p, n_pos_pred, n_neg_pred, alpha),
            replicates=replicates,
        )
        corrected = jackknife_bounded(value, bias, np.array(replicates))
    lower, upper = interval_from_se(corrected, se, n_used, n_eff, level)
    return Estimate(corrected, se, lower, upper, n_used, float(n_used), level)
