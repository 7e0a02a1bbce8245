"""Interval-based alert decisions with control of false alarms over repeated looks (pure).

Degradation is judged on confidence bounds, not on point estimates (DESIGN.md, "Alerts").
Every check of a window is a *look*; with hourly looks an unadjusted 5% test would raise a false
alarm on most healthy streams within days. Each look ``k`` is therefore tested at a small error
``e_k`` chosen by a spending rule, and a union bound gives the guarantee:

- ``horizon`` (default): ``e_k = rate / H`` with H the number of looks in a horizon (e.g. 720
  hourly looks in 30 days). In any horizon-long stretch, P(at least one false alarm) <= rate for
  each (alert, model, segment, window). The level does not tighten as the daemon ages: the
  guarantee is a false-alarm *rate* (at most ``rate`` false pages per horizon per series).
- ``anytime``: ``e_k = rate * 6 / (pi^2 k^2)`` (sum over k >= 1 is ``rate``): P(ever a false
  alarm) <= rate over an unbounded run, at the price of bounds that widen as looks accumulate.

The union bound is not very wasteful here: successive rolling-window estimates are correlated
like a moving sum, whose maximum over T looks behaves like ~T/w * c^2 independent tests at high
thresholds c, so exploiting the correlation would gain little over Bonferroni.

One-sided bounds are the estimator's own interval (logit scale, Wilson fallback, Student t with
n - 1 degrees of freedom, as :func:`monitor.stats.interval.interval_from_se`): the upper bound
with error e is the upper end of the two-sided interval at level 1 - 2e.

Model, not window. "The model degraded" (a floor, a drop) is a question about the model, not
about this window's draw of traffic: its bounds use the estimate's super-population standard
error and effective size (``Estimate.se_model``, ``Estimate.n_eff_model``: no finite-population
correction; DESIGN.md, "Labels that arrive late or never"). With the design se a window audited
almost as a census has a near-zero se and any unlucky window would page. The Wilson fallback
(estimate exactly 0 or 1) uses the estimator's own effective size, which counts the pseudo
events of unseen false negatives (:mod:`monitor.stats.interval`), not the Kish ESS of the
labels' weights: recall = 1 from 30 true positives at pi = 1 and 300 predicted negatives at
pi = 0.01 had the estimator interval [0.011, 1] but an alerting lower bound of 0.878 on the ESS.
The calibration check compares the intrinsic F with *this window's* realised F, so it keeps the
design se (plus the intrinsic F's own spread). Estimates without these fields (NaN, e.g. the
stratified estimator's) fall back to ``se`` and the Kish ESS.

The likelihood check is a test too (:func:`likelihood_upper_bound`): it fires when the upper
confidence bound of the model likelihood, at the look's error, is below its floor, so it spends
its share of the false-alarm budget like the others instead of comparing a point estimate.

The t quantile comes from the ``scipy.special.stdtrit`` ufunc (~3 us, against ~250 us for
``scipy.stats.t.ppf``), since alerting evaluates several bounds per window per look.
"""

from __future__ import annotations

import math

from scipy import special

from monitor.stats.estimate import Estimate
from monitor.stats.interval import strictly_inside, t_quantile, wilson_interval

SPENDING_RULES = ("horizon", "anytime")


def look_error(rate: float, look: int, rule: str, horizon_looks: int) -> float:
    """Error spent on look ``k``: ``rate / H`` (horizon) or ``rate 6 / (pi^2 k^2)`` (anytime).

    Args:
        rate: False-alarm rate to control, in (0, 1).
        look: 1-based index of the look (only used by ``anytime``).
        rule: ``"horizon"`` or ``"anytime"``.
        horizon_looks: H, the number of looks in one horizon (only used by ``horizon``).

    Returns:
        The one-sided error of this look.

    Examples:
        >>> look_error(0.05, 3, "horizon", 720)
        6.944444444444444e-05
        >>> round(look_error(0.05, 1, "anytime", 720), 5)
        0.0304
    """
    if not 0.0 < rate < 1.0:
        msg = f"rate must be in (0, 1), got {rate}"
        raise ValueError(msg)
    if rule == "horizon":
        return rate / max(horizon_looks, 1)
    if rule == "anytime":
        k = max(look, 1)
        return rate * 6.0 / (math.pi**2 * k * k)
    msg = f"spending rule must be one of {SPENDING_RULES}, got {rule!r}"
    raise ValueError(msg)


def _interval(est: Estimate, se: float, level: float, *, model: bool = True) -> tuple[float, float]:
    """``interval_from_se`` of the estimator with standard error ``se`` (see module docstring).

    Logit scale ``expit(logit(G) -+ t se / (G (1 - G)))`` when 0 < G < 1 (by more than rounding,
    as the exported interval: ``strictly_inside``) and se > 0, else the
    Wilson interval on the estimator's effective sample size (super-population ``n_eff_model``
    when ``model``, else the design ``n_eff``; the Kish ESS when the estimate has neither).
    """
    value = est.value
    t = t_quantile(level, est.n_labels)
    if strictly_inside(value) and se > 0.0 and math.isfinite(se):
        centre = math.log(value / (1.0 - value))
        half = t * se / (value * (1.0 - value))
        lower = float(special.expit(centre - half))  # no overflow for a huge se
        upper = float(special.expit(centre + half))
        return min(max(lower, 0.0), value), max(min(upper, 1.0), value)
    n_eff = est.n_eff_model if model else est.n_eff
    if math.isnan(n_eff):
        n_eff = est.ess if est.ess > 0.0 else math.inf
    return wilson_interval(value, n_eff, t)


def model_se(est: Estimate) -> float:
    """The super-population standard error of ``est`` (its design se when it has none)."""
    return est.se if math.isnan(est.se_model) else est.se_model


def upper_bound(est: Estimate, error: float) -> float:
    """One-sided upper confidence bound on the model's value: P(true > bound) <= ``error``.

    The upper end of the estimator's two-sided interval at level ``1 - 2 error`` with the
    super-population se (:func:`model_se`). NaN if undefined.
    """
    if not est.defined or math.isnan(est.se):
        return math.nan
    return _interval(est, model_se(est), 1.0 - 2.0 * error)[1]


def likelihood_upper_bound(likelihood: float, log_se: float, n: int, error: float) -> float:
    """One-sided upper bound of the likelihood: ``min(1, exp(log L + t_{n-1}(1 - error) se))``.

    ``log L`` is the weighted mean log-likelihood (seed 002, Sec. 4.1) and ``log_se`` its
    super-population standard error (:func:`monitor.stats.likelihood.log_likelihood_se`).
    ``bound < floor`` rejects "the likelihood is at least the floor" at error ``error``. With an
    unknown se (NaN) the point estimate itself is returned (the old, untested comparison). A
    geometric mean of probabilities is at most 1, and so is its bound (a healthy model's read
    1.005 in the alert's evidence).

    Examples:
        >>> round(likelihood_upper_bound(0.5, 0.0, 10, 1e-4), 6)
        0.5
        >>> likelihood_upper_bound(0.99, 0.05, 10, 1e-4)
        1.0
    """
    if math.isnan(likelihood) or not likelihood > 0.0:
        return math.nan
    if math.isnan(log_se):
        return likelihood
    t = t_quantile(1.0 - 2.0 * error, n)
    return min(1.0, math.exp(math.log(likelihood) + t * log_se))


def drop_bound(current: Estimate, ref_value: float, ref_se: float, error: float) -> float:
    """Upper bound of the current measure allowing for the reference's uncertainty.

    Test of the difference of two independent estimates on the logit scale (where the interval
    of a ratio in [0, 1] is closest to normal): with c the current and r the reference value,

        se_D^2 = (se_c / (c (1 - c)))^2 + (se_r / (r (1 - r)))^2,
        bound  = expit(logit(c) + t_{n-1}(1 - error) se_D).

    ``bound < r - tolerance`` rejects "no drop beyond the tolerance" at error ``error``. Expressed
    through the current estimate's interval with the combined raw-scale error
    ``c (1 - c) se_D``. A reference value at 0 or 1 has no logit: its se enters on the raw scale.
    ``se_c`` is the current estimate's super-population se (:func:`model_se`): the question is
    whether the model dropped. If the current estimate is degenerate (0 or 1, se 0), its Wilson
    bound (on the estimator's super-population effective size) is widened by ``t se_r`` on the
    raw scale.

    Args:
        current: The estimate of the current window.
        ref_value: Reference value r (configured baseline or an earlier window).
        ref_se: Standard error of r (0 for a known constant).
        error: One-sided error of this look.

    Returns:
        The bound, NaN when the current estimate is undefined.
    """
    if not current.defined or math.isnan(current.se) or math.isnan(ref_value):
        return math.nan
    c, se_r = current.value, max(ref_se, 0.0)
    se_c = model_se(current)
    if strictly_inside(c) and se_c > 0.0:
        scale = (
            c * (1.0 - c) / (ref_value * (1.0 - ref_value)) if strictly_inside(ref_value) else 1.0
        )
        se = math.hypot(se_c, se_r * scale)
        return _interval(current, se, 1.0 - 2.0 * error)[1]
    t = t_quantile(1.0 - 2.0 * error, max(current.n_labels, 1))
    return min(1.0, upper_bound(current, error) + t * se_r)


def disagreement(
    est: Estimate, value: float, error: float, value_se: float = 0.0
) -> tuple[bool, float]:
    """Whether a reference ``value`` (e.g. the intrinsic F) lies outside the two-sided interval.

    The interval is the estimator's own at level ``1 - error`` (``error / 2`` in each tail),
    with standard error ``sqrt(se^2 + value_se^2)``: ``value_se`` is the reference's own
    uncertainty (for the intrinsic F, how far the real F may stray from it by chance when the
    scores are calibrated), independent of the audit sample.

    Returns:
        ``(outside, bound)``: ``bound`` is the interval end on the side of ``value`` (the upper
        end if ``value`` is above the estimate), NaN when the estimate is undefined.
    """
    if not est.defined or math.isnan(est.se) or math.isnan(value):
        return False, math.nan
    extra = value_se if math.isfinite(value_se) else 0.0
    lower, upper = _interval(est, math.hypot(est.se, extra), 1.0 - error, model=False)
    if value > est.value:
        return value > upper, upper
    return value < lower, lower
