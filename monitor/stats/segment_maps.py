"""Per-segment calibration maps: a segment gets its own map where its labels reject the model's.

A model's traffic is often several populations (its records' ``segment``: a country, a client, a
product line) that drift apart: one segment's scores turn over-confident while the others stay
calibrated. One map fitted on the mixture (``monitor.stats.design.recalibrate``) is a compromise
that is wrong for both: still over-confident in the drifted segment, where q* then starves the
false negatives the audit must find, and under-confident in the healthy ones, where it spends
labels on items the model gets right (DESIGN.md, "Learning from the labels"; issue "Honest and
label-efficient when the model is miscalibrated", Build 1: "per model, and per segment once it
has enough labels").

Rule, at every refit of the model's map ``m``: each segment ``g`` (records without a segment,
``""``, always take ``m``) with at least ``SEGMENT_MIN_LABELS`` labels in the fit window gets a
map ``m_g`` fitted on its own labels exactly as the model's is (Platt on the logit, or beta where
``monitor.stats.beta_calibration.choose_map`` takes it; each label counted once; the ridge of
``tau`` pseudo-labels toward the identity), and keeps it only where a likelihood-ratio test
rejects the model's map for the segment's labels,

    LR_g = 2 [NLL_g(m) - NLL_g(m_g)] > chi2_k quantile (1 - SEGMENT_LEVEL),

with NLL_g the summed negative log-likelihood of the segment's labels given their scores (no
ridge), ``k`` the parameters of ``m_g`` (2 for Platt, 3 for beta) and ``SEGMENT_LEVEL`` = 0.001.
Under the null (the segment is calibrated like the rest, so ``m`` is right for it) LR_g is about
chi2_k (Wilks): ``m`` is fitted on a superset of the segment's labels, which only makes LR_g
smaller (the test conservative) when the segment is a large share of the model's labels. The
level is small because the test runs for every segment at every refit: a homogeneous model with
100 segments gets a spurious segment map at about 0.1 of its refits, and a segment's map
appearing or vanishing changes the calibration's version only when it moves the segment's
p_hat materially (``monitor.stats.map_change``). The price of a spurious map is small (p_hat of
that segment from a fit on fewer labels); the gain of a right one is q* where the segment's
errors are. Segments below ``SEGMENT_MIN_LABELS`` keep ``m``: the test has no power there and
the ridge would hold ``m_g`` near the identity rather than near ``m``.

Measured (``tests/unit/stats/test_stats_segment_maps.py``: two segments with equal labels at
about 5% positives, one calibrated, one over-confident): over-confidence x10 is separated
(each segment's records then take a map near its truth) in 45 of 50 fits from 150 labels per
segment, x3 in 16, 33 and 49 of 50 from 150, 300 and 600; three calibrated segments of 300
labels got no spurious map in 600 tests (the test allows 3). When the segments are about equal, the
model's map is a compromise both may reject, so the calibrated segment often gets its own
(near-identity) map and the drifted one keeps the model's, which is then near its truth.

Deterministic: a function of the labels (in the caller's order), ``m``, ``tau`` and ``beta``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import stats

from monitor.stats.beta_calibration import BetaMap, CalibrationMap, choose_map
from monitor.stats.calibration import DEFAULT_TAU, fit_platt, log_loss

#: Labels a segment needs in the fit window before it may get its own map.
SEGMENT_MIN_LABELS = 100
#: Level of the likelihood-ratio test that gives a segment its own map.
SEGMENT_LEVEL = 0.001


def segment_maps(
    model_map: CalibrationMap,
    score: npt.NDArray[np.float64],
    label: npt.NDArray[np.int8],
    segment: npt.NDArray[np.str_],
    *,
    tau: float = DEFAULT_TAU,
    beta: bool = True,
    min_labels: int = SEGMENT_MIN_LABELS,
    level: float = SEGMENT_LEVEL,
) -> tuple[tuple[str, CalibrationMap], ...]:
    """The segments whose labels reject ``model_map``, each with its own map, sorted by name.

    ``score``, ``label`` and ``segment`` are the fit window's labelled items (aligned);
    ``beta`` False keeps to Platt maps. Module docstring for the rule.

    Examples:
        >>> from monitor.stats.calibration import IDENTITY
        >>> rng = np.random.default_rng(0)
        >>> z = rng.normal(-3.0, 3.0, 400)
        >>> y = (rng.random(400) < 1 / (1 + np.exp(-z))).astype(np.int8)
        >>> s = 1 / (1 + np.exp(-np.where(np.arange(400) < 200, z, 10 * z)))  # b: x10
        >>> seg = np.where(np.arange(400) < 200, "a", "b")
        >>> [name for name, _ in segment_maps(IDENTITY, s, y, seg)]
        ['b']
    """
    out: list[tuple[str, CalibrationMap]] = []
    names, counts = np.unique(segment, return_counts=True)
    for name, n in zip(names.tolist(), counts.tolist(), strict=True):
        if name == "" or n < min_labels:
            continue
        own = segment == name
        s, y = score[own], label[own]
        fitted: CalibrationMap = (
            choose_map(s, y, tau=tau) if beta else fit_platt(s, y, np.ones(n), tau=tau)
        )
        lr = 2.0 * (log_loss(model_map.apply(s), y) - log_loss(fitted.apply(s), y))
        k = 3 if isinstance(fitted, BetaMap) else 2
        if lr > float(stats.chi2.ppf(1.0 - level, df=k)):
            out.append((str(name), fitted))
    return tuple(out)


__all__ = ["SEGMENT_LEVEL", "SEGMENT_MIN_LABELS", "segment_maps"]
