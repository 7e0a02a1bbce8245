"""The score-type interval of F_alpha and recall, and where a window's interval takes it.

The ratio's interval (``monitor.stats.interval``) takes the false negatives' variance from the
ones the design sampled: the Wald interval of a count. With few of them sampled that variance is
small exactly when the estimate is high, and the interval misses on the optimistic side: in
calibrated windows of 100 labels it covered 0.912-0.930 (F1 and recall at 20% positives, F1 at
5% with alpha 0.5; ``benchmarks/small_windows.py``, column ``shipped``), and by the number of
false negatives sampled at pi < 1 (F1 at 20% positives, 3,000 windows) 0.754 with two, 0.839
with three and 0.95 from five on, every miss with the truth below the interval. When the scores
are wrong (an over-confident model after a drift) the false negatives hide among heavily
weighted, rarely audited predicted negatives, a window samples few of them, and the same
happens at any window size.

``score_type_bounds`` inverts the ratio's test instead, with the false negatives' variance taken
at the count each tested value implies (Wilson's idea for a rare-event total; Fieller's interval
for the rest). On the Horvitz-Thompson totals (seed 000, Eq. 4; alpha < 1):

    U(g) = TP (1 - g) - g (alpha FP + (1 - alpha) FN)
    V(g) = P(g) + (1 - alpha)^2 g^2 kappa FN_open(g)
    interval = {g : U(g)^2 <= t^2 V(g)}

with P(g) the ratio's own design variance of the predicted positives' residuals ``v w (l - g)``
(``sum_{f=1} fpc v^2 w^2 (l - g)^2`` in one phase; with answers as a second phase the two-phase
variance of ``monitor.stats.interval``, whose Poisson approximation ``fpc = 1 - pi r`` alone
widened recall and F1 on the delayed-label grid to 0.971-0.978 in cells the ratio covers at
0.952-0.969). ``FN_open(g) = (TP (1/g - 1) - alpha FP) / (1 - alpha) - FN_cert`` is the total
of false negatives with pi < 1 that g implies (those audited with certainty are known), and
``kappa = (sum_{FN, pi<1} fpc v^2 + c m2) / (sum_{FN, pi<1} v + c m1)`` their variance per unit
of total, from the sampled ones plus c pseudo events at the means ``m2 = mean(fpc v^2)`` and
``m1 = mean(v)`` of the sampled predicted negatives with pi < 1: placed by the design, not by
the scores. t is the interval's Student quantile on the labels.

F_alpha and recall take the hull of the ratio's interval and these bounds, which can only widen
it. How many pseudo events:

- Always (:func:`monitor.stats.measures.measure_all`), c = max(2 - k, 0) for k sampled false
  negatives at pi < 1, the floor of the ratio's interval: the bounds correct the Wald interval
  of a small count and cost little where the count is large. Calibrated windows at 100 labels
  cover 0.938-0.977 (were 0.912-0.973), none below 0.93, at most 0.01 wider on average; no
  cell of the 24 (20-100 labels, 1-20% positives, recall and F1), calibrated, drifted or
  over-confident, covers less than with the ratio's interval alone (column ``daemon``).
- Where the window's own labels reject the scores (``scores_disagree``: the label-free F of the
  raw scores over the window's traffic lies outside the audited interval at level
  ``DISAGREE_ERROR``, the test of the ``model_untrustworthy`` alert at a fixed level), also
  with c = 2 always (:class:`Widening`): false negatives may hide among the heavily weighted
  predicted negatives as if they were spread like those. On calibrated windows that allowance
  would cover 0.99-1.00 at up to twice the width, so it is kept for the windows whose labels
  call for it.

The scores can only widen the interval, never narrow it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from scipy import optimize

from monitor.stats.alerting import disagreement
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import falpha_weight
from monitor.stats.interval import sampled_variance, t_quantile
from monitor.stats.sample import AnswerGroups, LabeledSample

FloatArray = npt.NDArray[np.float64]
G = TypeVar("G", float, FloatArray)  # a tested value, or a grid of them

#: Error of the test that the raw scores' label-free F agrees with the audit: beyond it the
#: window's interval takes the score-type bounds too. Measured on the daemon's 1 h windows
#: (``benchmarks.efficiency --stream-daemon``): at 0.05 calibrated 5% windows covered 0.975
#: (buckets 4-9 of 100 streams, seed 14; out of 0.93-0.97; 0.953 at 0.01); at 1e-3 the second
#: bucket after a drift at 1% positives 0.883 (logits x3, 600 streams; 0.917 at 0.01).
DISAGREE_ERROR = 0.01
#: Pseudo false negatives in ``kappa`` (the design's mean weight): always where the scores are
#: rejected, else as a floor (the module docstring)
PSEUDO_EVENTS = 2.0
_GRID = 2001


def score_type_bounds(
    sample: LabeledSample, alpha: float, est: Estimate, *, floor: bool = False
) -> tuple[float, float]:
    """The score-type interval of F_alpha (module docstring); it contains ``est.value``.

    ``est`` is the ratio estimate of the same sample (``estimate_falpha``): its level and label
    count give t; its interval is returned as is when it is undefined, when alpha = 1 (no false
    negative enters) or when no true positive carries weight (the test has no root).
    ``floor``: credit the two pseudo false negatives only while fewer than two were sampled at
    pi < 1 (the ratio's floor, :func:`monitor.stats.measures.measure_all`); otherwise always
    (the windows whose labels reject their scores, :class:`Widening`).
    """
    if not est.defined or alpha >= 1.0:
        return est.lower, est.upper
    f, y, v, fpc = sample.pred == 1, sample.label == 1, sample.v, sample.fpc
    tp, fp = float(v[f & y].sum()), float(v[f & ~y].sum())
    if not tp > 0.0:
        return est.lower, est.upper
    fn, fn_open = ~f & y, ~f & y & (fpc > 0.0)
    fn_cert, fn_total = float(v[fn & (fpc == 0.0)].sum()), float(v[fn].sum())
    frame = ~f & (fpc > 0.0)
    kappa = 0.0
    if frame.any():
        m2, m1 = float(np.mean(fpc[frame] * v[frame] ** 2)), float(np.mean(v[frame]))
        fn_var = float(np.dot(fpc[fn_open], v[fn_open] ** 2))
        c = max(PSEUDO_EVENTS - int(fn_open.sum()), 0.0) if floor else PSEUDO_EVENTS
        kappa = (fn_var + c * m2) / (float(v[fn_open].sum()) + c * m1)
    positives = _positives_variance(sample, alpha)
    t2 = t_quantile(est.level, est.n_labels) ** 2

    def excess(g: G) -> G:  # U(g)^2 - t^2 V(g): <= 0 inside the interval
        u = tp * (1.0 - g) - g * (alpha * fp + (1.0 - alpha) * fn_total)
        implied = (tp * (1.0 / g - 1.0) - alpha * fp) / (1.0 - alpha) - fn_cert
        var = positives(g) + (1.0 - alpha) ** 2 * g * g * kappa * np.maximum(implied, 0.0)
        out: G = u * u - t2 * var
        return out

    def one(g: float) -> float:  # plain floats: brentq calls it a dozen times per bound
        return float(excess(g))

    def root(outside: float, inside: float) -> float:  # the inside end when no sign change
        if not one(outside) * one(inside) < 0.0:
            return inside
        return float(optimize.brentq(one, min(outside, inside), max(outside, inside)))

    centre = tp / (tp + alpha * fp + (1.0 - alpha) * fn_total)
    grid = np.linspace(1e-9, 1.0, _GRID)
    outside = excess(grid) > 0.0
    below, above = grid[(grid < centre) & outside], grid[(grid > centre) & outside]
    step = grid[1] - grid[0]
    lower = root(below[-1], min(below[-1] + step, centre)) if below.size else 0.0
    upper = root(above[0], max(above[0] - step, centre)) if above.size else 1.0
    return min(lower, est.value), max(upper, est.value)


def _positives_variance(sample: LabeledSample, alpha: float) -> Callable[[G], G]:
    """The predicted positives' part of V(g), as a function of g.

    The ratio's own design variance of their residuals ``v w (l - g)``
    (:func:`monitor.stats.interval.sampled_variance`, the answers' second phase included): a
    quadratic in g, so exact from its values at 0, 1/2 and 1.
    """
    f = sample.pred == 1
    vw = (sample.v * falpha_weight(sample.pred, sample.label, alpha))[f]
    gain = sample.label[f].astype(np.float64)  # 1[f = y] where f = 1
    a = sample.answers
    answers = None if a is None else AnswerGroups(a.group[f], a.rate[f])
    v, fpc = sample.v[f], sample.fpc[f]
    v0, vh, v1 = (sampled_variance(vw * (gain - g), v, fpc, answers) for g in (0.0, 0.5, 1.0))
    c1, c2 = 4.0 * vh - 3.0 * v0 - v1, 2.0 * (v0 + v1) - 4.0 * vh

    def at(g: G) -> G:
        out: G = v0 + c1 * g + c2 * g * g
        return out

    return at


def scores_disagree(f: Estimate, intrinsic: float, intrinsic_se: float) -> bool:
    """Whether the raw scores' label-free F lies outside ``f``'s interval at ``DISAGREE_ERROR``."""
    return disagreement(f, intrinsic, DISAGREE_ERROR, intrinsic_se)[0]


def widened(est: Estimate, bounds: tuple[float, float]) -> Estimate:
    """``est`` with its interval stretched to contain ``bounds`` (value and se unchanged)."""
    lower, upper = bounds
    if math.isnan(lower) or math.isnan(upper):
        return est
    return replace(est, lower=min(est.lower, lower), upper=max(est.upper, upper))


@dataclass(frozen=True)
class Widening:
    """The score-type bounds of F_alpha and recall of one sample."""

    f: tuple[float, float]
    recall: tuple[float, float]

    @classmethod
    def of(
        cls, sample: LabeledSample, alpha: float, ratio_f: Estimate, ratio_recall: Estimate
    ) -> Widening:
        """The bounds of ``sample`` from its ratio estimates of F_alpha and recall."""
        return cls(
            score_type_bounds(sample, alpha, ratio_f), score_type_bounds(sample, 0.0, ratio_recall)
        )

    def apply(self, f: Estimate, recall: Estimate) -> tuple[Estimate, Estimate]:
        """``f`` and ``recall`` (ratio or model-assisted, same sample) with the bounds added."""
        return widened(f, self.f), widened(recall, self.recall)
