"""Everything users expect beside the chosen F_alpha, from one labeled sample.

Precision (alpha = 1) and recall (alpha = 0) are always reported next to F_alpha (seed 000
Corollary 1), with the Horvitz-Thompson confusion counts sum(v 1[cell]), the model likelihood
(seed 002 Sec. 4.1) and the Kish effective sample size of v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.stats.estimate import Confusion, Estimate
from monitor.stats.falpha import estimate_falpha
from monitor.stats.likelihood import effective_sample_size, log_likelihood_se, model_likelihood
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import score_type_bounds, widened


@dataclass(frozen=True)
class Measures:
    """F_alpha, precision and recall with intervals, and the sample's diagnostics."""

    f: Estimate
    precision: Estimate
    recall: Estimate
    confusion: Confusion
    likelihood: float
    ess: float
    n_labels: int
    likelihood_log_se: float = math.nan  # super-population se of log(likelihood)


def confusion_estimate(sample: LabeledSample) -> Confusion:
    """Horvitz-Thompson confusion counts: tp = sum(v f y), fp = sum(v f (1-y)), ... .

    NaN for the cells of a stratum whose requests have no answer to stand for them
    (``sample.unanswered_strata``), not 0.
    """
    f = sample.pred.astype(bool)
    y = sample.label.astype(bool)
    v = sample.v

    def cell(mask: npt.NDArray[np.bool_], stratum: int) -> float:
        return math.nan if stratum in sample.unanswered_strata else float(v[mask].sum())

    return Confusion(tp=cell(f & y, 1), fp=cell(f & ~y, 1), fn=cell(~f & y, 0), tn=cell(~f & ~y, 0))


def measure_all(
    sample: LabeledSample, alpha: float, level: float, *, bias_correction: bool = True
) -> Measures:
    """F_alpha, precision, recall, confusion counts, likelihood and ESS of one sample.

    Each of F_alpha, precision (alpha = 1) and recall (alpha = 0) is the jackknife bias-corrected
    ratio of :func:`monitor.stats.falpha.estimate_falpha` (seed 000, Eq. 4 and Corollary 1).
    The intervals of F_alpha and recall are the hull of the ratio's and the score-type bounds
    with the ratio's floor of pseudo false negatives (:mod:`monitor.stats.score_interval`: the
    ratio's Wald interval misses on the optimistic side when few false negatives were sampled);
    value and se are the ratio's.

    Args:
        sample: The labeled sample of a window.
        alpha: F_alpha trade-off in [0, 1].
        level: Confidence level of every interval.
        bias_correction: Subtract the jackknife bias of each ratio (default).

    Returns:
        The :class:`Measures`; undefined estimates are missing (NaN), never 0.
    """

    def hull(a: float) -> Estimate:
        est = estimate_falpha(sample, a, level, bias_correction=bias_correction)
        return widened(est, score_type_bounds(sample, a, est, floor=True))

    return Measures(
        f=hull(alpha),
        precision=estimate_falpha(sample, 1.0, level, bias_correction=bias_correction),
        recall=hull(0.0),
        confusion=confusion_estimate(sample),
        likelihood=model_likelihood(sample.score, sample.label, sample.v),
        ess=effective_sample_size(sample.v),
        n_labels=len(sample),
        likelihood_log_se=log_likelihood_se(sample.score, sample.label, sample.v),
    )
