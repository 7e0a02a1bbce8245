"""The interval that does not trust the design where the scores disagree with the audit.

The ratio's interval (``monitor.stats.interval``) takes the false negatives' variance from the
ones the design sampled. That is right while the scores put the labels where the false negatives
are. When the scores are wrong (an over-confident model after a drift) the false negatives hide
among heavily weighted, rarely audited predicted negatives, a window samples few of them, and the
variance from those few is too small: the interval misses, and on the optimistic side.

``score_type_bounds`` inverts the ratio's test instead, with the false negatives' variance taken
at the count each tested value implies (Wilson's idea for a rare-event total; Fieller's interval
for the rest). On the Horvitz-Thompson totals (seed 000, Eq. 4; alpha < 1):

    U(g) = TP (1 - g) - g (alpha FP + (1 - alpha) FN)
    V(g) = sum_{f=1} fpc v^2 w^2 (l - g)^2 + (1 - alpha)^2 g^2 kappa FN_open(g)
    interval = {g : U(g)^2 <= t^2 V(g)}

``FN_open(g) = (TP (1/g - 1) - alpha FP) / (1 - alpha) - FN_cert`` is the total of false
negatives with pi < 1 that g implies (those audited with certainty are known), and
``kappa = (sum_{FN, pi<1} fpc v^2 + c m2) / (sum_{FN, pi<1} v + c m1)`` their variance per unit
of total, from the sampled ones plus c = 2 pseudo events at the means ``m2 = mean(fpc v^2)`` and
``m1 = mean(v)`` of the sampled predicted negatives with pi < 1: placed by the design, not by
the scores. t is the interval's Student quantile on the labels.

It pays where the scores are right: on calibrated windows it covers 0.99-1.00 at up to twice the
width (``benchmarks/small_windows.py``, column ``score-type``). So the window's interval becomes
the hull of the two only where the window's own labels reject the scores
(``scores_disagree``): the label-free F of the raw scores over the window's traffic lies outside
the audited interval at level ``DISAGREE_ERROR`` (``monitor.stats.alerting.disagreement``, the
test of the ``model_untrustworthy`` alert at a fixed level). The scores can only widen the
interval, never narrow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy import optimize

from monitor.stats.alerting import disagreement
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import falpha_weight
from monitor.stats.interval import t_quantile
from monitor.stats.sample import LabeledSample

FloatArray = npt.NDArray[np.float64]

#: Error of the test that the raw scores' label-free F agrees with the audit: beyond it the
#: window's interval takes the score-type bounds too. Measured on the daemon's 1 h windows
#: (``benchmarks.efficiency --stream-daemon``): at 0.05 calibrated 5% windows covered 0.975
#: (buckets 4-9 of 100 streams, seed 14; out of 0.93-0.97; 0.953 at 0.01); at 1e-3 the second
#: bucket after a drift at 1% positives 0.883 (logits x3, 600 streams; 0.917 at 0.01).
DISAGREE_ERROR = 0.01
#: Pseudo false negatives in ``kappa`` (the design's mean weight, as the ratio's interval's floor)
PSEUDO_EVENTS = 2.0
_GRID = 2001


def score_type_bounds(sample: LabeledSample, alpha: float, est: Estimate) -> tuple[float, float]:
    """The score-type interval of F_alpha (module docstring); it contains ``est.value``.

    ``est`` is the ratio estimate of the same sample (``estimate_falpha``): its level and label
    count give t; its interval is returned as is when it is undefined, when alpha = 1 (no false
    negative enters) or when no true positive carries weight (the test has no root).
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
        kappa = (fn_var + PSEUDO_EVENTS * m2) / (float(v[fn_open].sum()) + PSEUDO_EVENTS * m1)
    a = (fpc * (v * falpha_weight(sample.pred, sample.label, alpha)) ** 2)[f]
    a1, a2 = float(np.dot(a, y[f])), float(a.sum())  # sum a l^2 = sum a l: l is 0 or 1
    t2 = t_quantile(est.level, est.n_labels) ** 2

    def excess(g: FloatArray) -> FloatArray:  # U(g)^2 - t^2 V(g): <= 0 inside the interval
        u = tp * (1.0 - g) - g * (alpha * fp + (1.0 - alpha) * fn_total)
        implied = (tp * (1.0 / g - 1.0) - alpha * fp) / (1.0 - alpha) - fn_cert
        var = a1 - 2.0 * a1 * g + a2 * g * g + (1.0 - alpha) ** 2 * g * g * kappa * implied.clip(0)
        out: FloatArray = u * u - t2 * var
        return out

    def one(g: float) -> float:
        return float(excess(np.array([g]))[0])

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
