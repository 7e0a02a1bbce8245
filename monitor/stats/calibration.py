"""Online recalibration of the model's scores from the audited labels, and calibration error.

DESIGN.md, "Learning from the labels (round 2)": fit a monotone map p_hat = m(s) from the
audited labels, design-weighted (v = 1/pi), and shrunk toward the identity while labels are few.
The map is Platt scaling on the logit (Platt 1999):

    eta = a + b logit(s),  p_hat = expit(eta),

fitted by penalised, design-weighted maximum likelihood

    min_{a, b}  sum_i v~_i [log(1 + e^{eta_i}) - y_i eta_i] + tau (a^2 + (b - 1)^2),

where v~ = v * ESS / sum(v) are the Horvitz-Thompson weights rescaled to sum to Kish's effective
sample size ESS = (sum v)^2 / sum v^2: the weighted log-likelihood then carries about as much
information as ESS unweighted labels, so ``tau`` reads as "tau pseudo-labels' worth of belief in
the identity" whatever the traffic volume. (a, b) = (0, 1) is the identity map, so with no labels
the map is the identity and as labels accrue the fit converges to the design-weighted (census)
Platt fit, which estimates the best logistic recalibration for the whole traffic, not for the
audited items (the weights undo the selection; Zrnic and Candes, Active Statistical Inference,
2024, Sec. 3). The controllers fit with unit weights v = 1 (then v~ = 1, tau is in labels):
their selection depends on the score alone, which the map conditions on, and at low prevalence
the design weights leave the positives almost no say (``monitor.stats.design.recalibrate``).

The fit is a few damped Newton steps in numpy (the objective is strictly convex for tau > 0),
shared with the beta map of ``monitor.stats.beta_calibration`` (the alternative where the Platt
form fits badly): :func:`fit_penalised_logistic`.

Calibration error: the design-weighted expected calibration error with equal-weight bins of the
predicted probability,

    ECE = sum_k (W_k / W) |ybar_k - pbar_k|,  ybar_k = sum_{i in k} v_i y_i / W_k,  pbar_k likewise,

(Naeini et al. 2015; weighted by v so that it estimates the traffic's ECE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from monitor.stats.likelihood import effective_sample_size

FloatArray = npt.NDArray[np.float64]

#: Scores are clipped to [LOGIT_EPS, 1 - LOGIT_EPS] before the logit (|logit| <= 34.5): finite,
#: and wide enough to keep the order of the scores of a model over-confident by x10.
LOGIT_EPS = 1e-15
#: Default ridge toward the identity, in pseudo-labels (see the module docstring).
DEFAULT_TAU = 2.0
#: Newton steps at most; the fit stops earlier when a step moves (a, b) by < NEWTON_TOL.
NEWTON_STEPS = 50
NEWTON_TOL = 1e-10
#: Labels per bin of the calibration error, and its largest number of bins.
ECE_LABELS_PER_BIN = 25
ECE_MAX_BINS = 10


def logit(score: npt.ArrayLike) -> FloatArray:
    """The log-odds log(s) - log(1 - s), with s clipped to [LOGIT_EPS, 1 - LOGIT_EPS].

    Examples:
        >>> float(logit([0.5])[0])
        0.0
    """
    s = np.clip(np.asarray(score, dtype=np.float64), LOGIT_EPS, 1.0 - LOGIT_EPS)
    out: FloatArray = np.log(s) - np.log1p(-s)
    return out


def expit(x: npt.ArrayLike) -> FloatArray:
    """The logistic function 1 / (1 + e^{-x}), overflow-free."""
    z = np.asarray(x, dtype=np.float64)
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * z))
    return out


@dataclass(frozen=True)
class PlattMap:
    """The map p_hat = expit(a + b logit(s)); (0, 1) is the identity.

    ``n_labels`` and ``ess`` record how many labels (and their effective number) it was fitted
    on; they do not change the map.

    Examples:
        >>> m = PlattMap(a=0.0, b=0.5)
        >>> round(float(m.apply([0.9])[0]), 4)
        0.75
    """

    a: float = 0.0
    b: float = 1.0
    n_labels: int = 0
    ess: float = 0.0

    family: ClassVar[str] = "platt"

    @property
    def is_identity(self) -> bool:
        """Whether the map leaves every score as it is."""
        return self.a == 0.0 and self.b == 1.0

    def params(self) -> dict[str, float]:
        """The map's parameters by name (a: intercept, b: slope on the logit)."""
        return {"a": self.a, "b": self.b}

    def log_odds(self, score: npt.ArrayLike) -> FloatArray:
        """The log-odds of p_hat, a + b logit(s), without rounding through p_hat."""
        out: FloatArray = self.a + self.b * logit(score)
        return out

    def apply(self, score: npt.ArrayLike) -> FloatArray:
        """The recalibrated probabilities p_hat = expit(a + b logit(s)); the identity is exact."""
        s = np.asarray(score, dtype=np.float64)
        if self.is_identity:
            return s.copy()
        return expit(self.log_odds(s))

    def to_list(self) -> list[Any]:
        """A JSON-ready list of the fields (``from_list`` reads it back)."""
        return [self.a, self.b, self.n_labels, self.ess]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> PlattMap:
        """The map written by ``to_list``; ``ValueError`` when ``v`` is not one."""
        if not isinstance(v, list | tuple) or len(v) != 4:
            msg = "a calibration map is a list [a, b, n_labels, ess]"
            raise ValueError(msg)
        a, b, n, ess = v
        if type(n) is not int or n < 0:
            msg = "a calibration map's n_labels must be an integer >= 0"
            raise ValueError(msg)
        vals = [float(x) for x in (a, b, ess)]
        if not all(math.isfinite(x) for x in vals) or vals[1] < 0.0 or vals[2] < 0.0:
            msg = "a calibration map needs finite a, b >= 0 and ess >= 0"
            raise ValueError(msg)
        return cls(vals[0], vals[1], n, vals[2])


IDENTITY = PlattMap()


def _objective(
    theta: FloatArray,
    x: FloatArray,
    y: FloatArray,
    w: FloatArray,
    *,
    tau: float,
    anchor: FloatArray,
) -> float:
    eta = x @ theta
    # log(1 + e^eta) - y eta, stably
    nll = np.logaddexp(0.0, eta) - y * eta
    return float(np.dot(w, nll) + tau * np.sum((theta - anchor) ** 2))


def fit_penalised_logistic(
    features: FloatArray,
    label: npt.ArrayLike,
    v: npt.ArrayLike,
    anchor: Sequence[float],
    *,
    tau: float,
) -> tuple[FloatArray, float]:
    """Penalised, design-weighted logistic regression with slopes >= 0: (theta, ESS).

    Minimises ``sum_i v~_i [log(1 + e^{eta_i}) - y_i eta_i] + tau |theta - anchor|^2`` with
    ``eta = X theta``, ``X = [1, features]`` and v~ as in the module docstring, by Newton's
    method (gradient ``X^T v~ (p - y) + 2 tau (theta - anchor)``, Hessian
    ``X^T diag(v~ p (1 - p)) X + 2 tau I``), each step halved until the objective does not
    increase and every slope (all but the intercept) clipped at 0, so the map is monotone
    non-decreasing in each feature. ``theta = anchor`` without labels (ESS 0).

    Args:
        features: One row per label, one column per slope (shape (n, k)).
        label: The labels (0/1).
        v: Their design weights 1/pi (> 0).
        anchor: The (k + 1) parameters the ridge pulls toward (intercept first).
        tau: Ridge toward ``anchor``, in pseudo-labels; > 0.
    """
    if not tau > 0.0 or not math.isfinite(tau):
        msg = f"tau must be finite and > 0, got {tau}"
        raise ValueError(msg)
    y = np.asarray(label, dtype=np.float64).reshape(-1)
    vv = np.asarray(v, dtype=np.float64).reshape(-1)
    if not (features.shape[0] == y.shape[0] == vv.shape[0]):
        msg = "score, label and v must have the same length"
        raise ValueError(msg)
    target = np.asarray(anchor, dtype=np.float64)
    if y.size == 0:
        return target.copy(), 0.0
    if not (np.isfinite(vv).all() and (vv > 0.0).all()):
        msg = "v must be finite and > 0"
        raise ValueError(msg)
    ess = effective_sample_size(vv)
    w = vv * (ess / float(vv.sum()))
    x = np.column_stack([np.ones(y.size), features])
    ridge = 2.0 * tau * np.eye(target.size)
    theta = target.copy()
    current = _objective(theta, x, y, w, tau=tau, anchor=target)
    for _ in range(NEWTON_STEPS):
        p = expit(x @ theta)
        grad = x.T @ (w * (p - y)) + 2.0 * tau * (theta - target)
        hess = (x.T * (w * p * (1.0 - p))) @ x + ridge
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while True:
            cand = theta - scale * step
            cand[1:] = np.maximum(cand[1:], 0.0)
            value = _objective(cand, x, y, w, tau=tau, anchor=target)
            if value <= current or scale < 1e-6:
                break
            scale *= 0.5
        moved = float(np.max(np.abs(cand - theta)))
        if value > current:
            break  # no descent left at machine precision
        theta, current = cand, value
        if moved < NEWTON_TOL:
            break
    return theta, float(ess)


def log_loss(prob: npt.ArrayLike, label: npt.ArrayLike) -> float:
    """The summed negative log-likelihood ``-sum[y log p + (1 - y) log(1 - p)]`` (p clipped).

    Examples:
        >>> round(log_loss([0.5, 0.5], [0, 1]), 4)
        1.3863
    """
    p = np.clip(np.asarray(prob, dtype=np.float64), LOGIT_EPS, 1.0 - LOGIT_EPS)
    y = np.asarray(label, dtype=np.float64)
    return float(-np.sum(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def fit_platt(
    score: npt.ArrayLike,
    label: npt.ArrayLike,
    v: npt.ArrayLike,
    *,
    tau: float = DEFAULT_TAU,
) -> PlattMap:
    """Design-weighted Platt scaling with a ridge toward the identity (module docstring).

    :func:`fit_penalised_logistic` on the feature ``logit(s)``, anchored at (a, b) = (0, 1);
    the slope is kept >= 0, so the map stays monotone non-decreasing.

    Args:
        score: Scores of the audited items.
        label: Their labels (0/1).
        v: Their design weights 1/pi (> 0).
        tau: Ridge toward (a, b) = (0, 1), in pseudo-labels; > 0.

    Returns:
        The fitted map; the identity without labels.

    Examples:
        >>> fit_platt([], [], []).is_identity
        True
    """
    x = logit(score).reshape(-1, 1)
    theta, ess = fit_penalised_logistic(x, label, v, (0.0, 1.0), tau=tau)
    if x.shape[0] == 0:
        return IDENTITY
    return PlattMap(float(theta[0]), float(theta[1]), x.shape[0], ess)


def calibration_error(
    prob: npt.ArrayLike,
    label: npt.ArrayLike,
    v: npt.ArrayLike,
    *,
    labels_per_bin: int = ECE_LABELS_PER_BIN,
    max_bins: int = ECE_MAX_BINS,
) -> float:
    """Design-weighted expected calibration error of probabilities ``prob`` (module docstring).

    Bins hold about equal shares of the total weight, ordered by ``prob`` (tied values share a
    bin); there are ``min(max_bins, n // labels_per_bin)`` of them (at least 1). NaN without
    labels.

    Examples:
        >>> p, y, v = [0.2, 0.2, 0.8, 0.8], [0, 0, 1, 1], [1, 1, 1, 1]
        >>> round(calibration_error(p, y, v, labels_per_bin=2), 12)
        0.2
    """
    p = np.asarray(prob, dtype=np.float64).reshape(-1)
    y = np.asarray(label, dtype=np.float64).reshape(-1)
    w = np.asarray(v, dtype=np.float64).reshape(-1)
    # the sums below in one order whatever the items' order: rounding differences of the sums
    # could otherwise put a value whose middle lies on a bin edge on either side of it
    order = np.lexsort((y, w, p))
    p, y, w = p[order], y[order], w[order]
    total = float(w.sum())
    if p.size == 0 or not total > 0.0:
        return math.nan
    bins = max(1, min(max_bins, p.size // max(1, labels_per_bin)))
    # tied probabilities share a bin: a bin is chosen per distinct value, by the middle of the
    # value's cumulative weight, so the error does not depend on the order of the items
    values, inv = np.unique(p, return_inverse=True)
    inv = inv.reshape(-1)
    wv = np.bincount(inv, weights=w, minlength=values.size)
    mid = (np.cumsum(wv) - 0.5 * wv) / total
    which = np.minimum((mid * bins).astype(np.int64), bins - 1)[inv]
    yk = np.bincount(which, weights=w * y, minlength=bins)
    pk = np.bincount(which, weights=w * p, minlength=bins)
    return min(1.0, float(np.abs(yk - pk).sum()) / total)  # at most 1 but for rounding
