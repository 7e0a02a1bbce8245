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

with variance by linearisation from the residuals e_i = y_i - a_h - b_h p_hat_i, each scaled by
its GREG calibration weight g_i and its leverage h_ii:

    u_i = g_i e_i / sqrt(1 - h_ii),
    g_i = N_h / sum v + (p_hat_i - pbar)(S_h - N_h pbar) / sxx,
    h_ii = v_i (1 / sum v + (p_hat_i - pbar)^2 / sxx),
    Var(Y_h) = sum_{s_h} fpc_i v_i^2 u_i^2,
    se^2 = (dF/dT)^2 Var(Y_1) + (dF/dM)^2 Var(Y_0),
    dF/dT = (D - (1 - alpha) T) / D^2,  dF/dM = -(1 - alpha) T / D^2,

pbar = sum v p_hat / sum v and sxx = sum v (p_hat - pbar)^2 over the stratum's labels (without
the slope the terms in sxx are 0: g = N_h / sum v, h_ii = v_i / sum v). The g-weighted residual
form is Saerndal, Swensson and Wretman 1992, Sec. 6.6 (w_i = v_i g_i are the weights that
reproduce N_h and S_h, and Y_h = sum w y); the plain ``sum fpc v^2 e^2`` ignores them
(g is far from 1 when the Poisson sample's sum v misses N_h). Dividing by sqrt(1 - h_ii) undoes
the shrinkage of in-sample residuals (E e_i^2 = (1 - h_ii) sigma_i^2 under the working model;
sum h_ii = 2, or 1 without the slope): the leverage-adjusted robust variance ("v_H", Valliant,
Dorfman and Royall 2000, Ch. 5; HC2 of MacKinnon and White 1985), equal to the small-sample
factor n / (n - k) when every leverage is k / n. Measured on a fixed pool (Poisson samples of
24-60 expected labels, pi uneven, ``tests/unit/stats/test_stats_greg.py``): the plain form gave
0.83-0.98 of the empirical variance of Y_h, this one 0.99-1.06; the delete-one jackknife's
residual e_i / (1 - h_ii) (with g) over-estimated by 7-12%, the n / (n - k) factor alone and g
alone stayed at 0.89-0.95 in the smaller samples. In the daemon's windows (75 or more labels
per stratum, g near 1) the terms are small: coverage moved by at most 2 windows of 360 but at
logits x10, 5% positives, F1 (0.911 to 0.925; ``tests/statistical/test_stream_greg.py``). The
same u enter the two-phase variance and ``se_model`` below. To se^2 the estimate adds the
unseen-event floor of ``monitor.stats.interval`` on the false negatives (fewer than 2 sampled
with pi < 1: pseudo events of the stratum's mean ``fpc v^2``), and takes the interval of
``interval.interval_from_se`` (logit scale, t with n - 1 degrees of freedom; at F = 0 or 1 the
Wilson interval on the ratio estimate's Kish effective size, the unseen events included, as
``interval.ratio_estimate`` has it). Until this was so, the Kish size of every labelled item
without the unseen events made recall 1 (no false negative seen) read [0.73-0.93, 1] where the
ratio's interval reads [0.02-0.3, 1], and the model-assisted recall covered 0.823 on the digits
shift at n = 100 (``benchmarks/designs.py``). ``se_model`` is
the same without the finite-population correction (every fpc 1: the super-population variance
the alerts about the model use).

Labels that arrive late or never (``monitor.stats.response``): with a two-phase sample (v =
1/(pi r_c), fpc = 1 - pi r_c, answer classes within a prediction stratum) the regression runs on
those weights (the response homogeneity group model, Saerndal, Swensson and Wretman 1992,
Sec. 15.6-15.7), g and h use those weights, and the variance is the two-phase one of
``interval.ratio_estimate`` applied to the linearised residuals z_i = dF/dY_h v_i u_i:
``sum((1 - pi) r z^2) + sum_c (1 - r_c) m_c S_c^2``.

The map comes from earlier labels (it chose these items; in the daemon each record's p_hat is
under the map of the control it was decided with, fixed before its decision, so for a fixed slope
the correction ``(1 - I_i / pi_i)(y_i - b p_hat_i)`` has mean 0 given the past, as the
Horvitz-Thompson terms do), the regression coefficients from these labels: the estimator is
approximately design-unbiased (bias O(1/n)), and its coverage is measured
(``benchmarks/efficiency.py``, ``tests/statistical/test_stream_greg.py``) rather than assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.stats.estimate import Estimate
from monitor.stats.interval import (
    PSEUDO_EVENTS,
    interval_from_se,
    kish_sizes,
    second_phase_variance,
    unseen_event_design,
)
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
    """A stratum's regression estimate of its positives, its variance and coefficients.

    ``resid`` holds the variance residuals u_i of its labelled items (module docstring).
    """

    total: float
    var: float
    a: float
    b: float
    resid: FloatArray


def fit_stratum(
    y: FloatArray, p: FloatArray, v: FloatArray, fpc: FloatArray, traffic: StratumTraffic
) -> StratumFit:
    """The regression estimate Y_h of one stratum (module docstring); Y_h = 0 without labels."""
    if y.size == 0:
        return StratumFit(0.0, 0.0, 0.0, 0.0, np.zeros(0))
    sv = float(v.sum())
    positives = int(np.count_nonzero(y > 0.5))
    fitted = (
        y.size >= MIN_LABELS
        and min(positives, y.size - positives) >= MIN_EVENTS
        and float(np.ptp(p)) > 0.0
    )
    pm = float(np.dot(v, p)) / sv
    dp = p - pm
    sxx = float(np.dot(v, dp * dp)) if fitted else 0.0
    a, b = float(np.dot(v, y)) / sv, 0.0
    if sxx > 0.0:
        b = float(np.dot(v, dp * (y - a))) / sxx
        a = a - b * pm
    e = y - a - b * p
    total = float(np.dot(v, y)) + a * (traffic.n - sv) + b * (traffic.sum_p - float(np.dot(v, p)))
    u = variance_residuals(e, v, dp, sxx, traffic.n, traffic.sum_p - traffic.n * pm)
    return StratumFit(total, float(np.dot(fpc, (v * u) ** 2)), a, b, u)


def variance_residuals(  # noqa: PLR0917  (the fit's parts, named as in the docstring)
    e: FloatArray, v: FloatArray, dp: FloatArray, sxx: float, n_h: float, s_dp: float
) -> FloatArray:
    """The residuals ``u_i = g_i e_i / sqrt(1 - h_ii)`` of the variance (module docstring).

    Args:
        e: Regression residuals ``y - a - b p_hat`` of the stratum's labelled items.
        v: Their weights (1/pi, or 1/(pi r_c) with late labels).
        dp: ``p_hat - pbar``, pbar the v-weighted mean of p_hat over them.
        sxx: ``sum v dp^2``; 0 when the slope is not fitted (a regression on the intercept).
        n_h: The stratum's records N_h.
        s_dp: ``S_h - N_h pbar``, the traffic total of dp.

    Returns:
        u, one per item; where a leverage is 1 the residual is 0 and so is u.
    """
    sv = float(v.sum())
    # (1, dp) is orthogonal under v, T = diag(sv, sxx): g and h without a solve
    slope = dp / sxx if sxx > 0.0 else np.zeros_like(dp)
    g = n_h / sv + slope * s_dp
    h = v * (1.0 / sv + slope * dp)
    rest = 1.0 - h
    safe = np.sqrt(np.where(rest > 0.0, rest, 1.0))
    return np.where(rest > 0.0, g * e / safe, 0.0)


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
    # linearised residual of F per labelled item: dF/dY_h v u (the strata are sampled apart)
    u = np.empty_like(y)
    u[~f1], u[f1] = neg.resid, pos.resid
    z = np.where(f1, d_t, d_m) * sample.v * u
    answers = sample.answers
    if answers is None:
        sampled = float(np.dot(sample.fpc, z * z))
    else:  # phase one, (1 - pi) r = r - (1 - fpc), then the answers (interval.ratio_estimate)
        phase1 = np.maximum(answers.rate - 1.0 + sample.fpc, 0.0)
        sampled = float(np.dot(phase1, z * z)) + second_phase_variance(z, sample.v, answers)
    frame = ~f1
    unseen = unseen_event_design(y, sample.v, sample.fpc, frame, PSEUDO_EVENTS)
    unseen_model = unseen_event_design(y, sample.v, np.ones_like(y), frame, PSEUDO_EVENTS)
    se = math.sqrt(sampled + d_m * d_m * unseen)
    se_model = math.sqrt(float(np.dot(z, z)) + d_m * d_m * unseen_model)
    # the ratio estimate's Kish sizes (recall 1 when no false negative was seen rests on them)
    w_e2 = (1.0 - alpha) ** 2  # the unseen events' weight: a false negative's
    ess, n_eff, n_eff_model = kish_sizes(
        sample.v * weight, sample.fpc, w_e2 * unseen, w_e2 * unseen_model
    )
    lower, upper = interval_from_se(value, se, n, n_eff, level)
    return Estimate(value, se, lower, upper, n, ess, level, n_eff, se_model, n_eff_model)


def fallback_reason(sample: LabeledSample, p_hat: npt.ArrayLike) -> str | None:
    """Why a window keeps the ratio estimate instead of this one (None: it need not).

    The model-assisted estimate is used only when every labelled item has its p_hat (requests
    written before it was recorded have none: NaN) and each prediction stratum has at least
    ``MIN_LABELS`` labels (with fewer, the stratum's Y_h rests on a handful of weights and the
    linearised variance is not trusted).
    """
    p = np.asarray(p_hat, dtype=np.float64)
    if bool(np.isnan(p).any()):
        return "labels without a recorded p_hat"
    for k, name in ((1, "predicted positives"), (0, "predicted negatives")):
        got = int(np.count_nonzero(sample.pred == k))
        if got < MIN_LABELS:
            return f"{got} labels among the {name} (fewer than {MIN_LABELS})"
    return None


@dataclass(frozen=True)
class Choice:
    """F_alpha, precision and recall as exported, which are model-assisted, and why not."""

    f: Estimate
    precision: Estimate
    recall: Estimate
    assisted: tuple[bool, bool, bool]
    reason: str  # why the ratio was kept ("" when every measure is model-assisted)


def choose(  # noqa: PLR0917  (the two estimates' inputs side by side)
    sample: LabeledSample,
    p_hat: npt.ArrayLike,
    negatives: StratumTraffic,
    positives: StratumTraffic,
    ratio: tuple[Estimate, Estimate, Estimate],
    alpha: float,
    level: float,
) -> Choice:
    """The model-assisted F_alpha, precision and recall where usable, else the ratio ones.

    The rule: the ratio estimate (``ratio``: F_alpha, precision, recall) is kept for every
    measure when :func:`fallback_reason` gives a reason, and for one measure when the
    model-assisted estimate of it is undefined. The choice rests on the design (labels per
    stratum, p_hat recorded), never on the two standard errors a window happens to draw: taking
    the model-assisted estimate where its own se came out the smaller exported it most where
    that se was low by chance, and cost 0.8-1.4 points of coverage against the ratio where it was
    used most (``benchmarks.efficiency --stream-daemon``, 60 streams; benchmarks/README.md,
    "The daemon's model-assisted estimate"), with lower savings in every cell.
    """
    reason = fallback_reason(sample, p_hat)
    if reason is not None:
        return Choice(*ratio, assisted=(False, False, False), reason=reason)
    out: list[Estimate] = []
    used: list[bool] = []
    for a, r in zip((alpha, 1.0, 0.0), ratio, strict=True):
        g = greg_falpha(sample, p_hat, negatives, positives, alpha=a, level=level)
        out.append(g if g.defined else r)
        used.append(g.defined)
    why = "" if all(used) else "model-assisted estimate undefined"
    return Choice(out[0], out[1], out[2], assisted=(used[0], used[1], used[2]), reason=why)
