"""When a refitted calibration is a new one: only when it changes the decisions materially.

The daemon refits a model's map after every step that brought labels
(``monitor.core.recalibration.refit``). With labels trickling in every poll, the fitted
parameters move a little at every step, and each new map version is pending and then taken at a
control refresh ``refresh_records`` records later (``monitor.stats.budget``, "Map changes"): a
bucket's refresh list, stored and published in full whenever it changes, would grow with the
traffic. So a refit keeps the calibration in force unless the candidate differs from it
materially, by one of:

1. **the map**: the largest difference of the log-odds of p_hat between the two maps over a
   fixed grid of scores,

       D = max_j | clip(eta_new(s_j), -E, E) - clip(eta_old(s_j), -E, E) |,
       eta(s) = logit(m(s)),  s_j = expit(t_j),  t_j = -T, -T + h, ..., T,

   with T = 34.5 (the scores' whole clipped logit range, ``calibration.LOGIT_EPS``: the map of an
   over-confident model decides at raw logits far beyond +-8), h = 1/8, E = ``SATURATED`` = 8;
   material when ``D > LOGIT_TOLERANCE`` = 0.1. Where both maps put p_hat beyond E (within
   3.4e-4 of 0 or 1) their differences do not count: q* there is at most sqrt(3.4e-4) = 1.8% of
   its largest value and the record is decided by the defensive share;
2. **the defensive share**: ``S = max(|ln(lam_new / lam_old)|, |ln((1 - lam_new) / (1 -
   lam_old))|) > SHARE_TOLERANCE`` = 0.1 (``lam_old`` is the configured share ``lam0`` while no
   map is in force, version 0); or
3. **the family**: a Platt map and a beta map (``monitor.stats.beta_calibration``): the
   likelihood-ratio test's verdict on the shape of the labels is taken when it changes. As labels
   accumulate from one truth its statistic grows with their number, so it crosses its critical
   value once rather than flip at every poll; or
4. **a segment's map** (``monitor.stats.segment_maps``): for every segment with a map in either
   calibration, D between the maps its records are recalibrated by (its own, else the model's)
   exceeds ``LOGIT_TOLERANCE``. A segment map that appears or vanishes is material only when it
   moves that segment's p_hat by more than the tolerance.

Why 0.1: within it every decision moves by a few percent at most. ``|d eta| <= 0.1`` moves p_hat
and 1 - p_hat by factors within e^{+-0.1}, so q* (seed 000, Cor. 2: the square root of a
positive combination of p_hat and 1 - p_hat, at a fixed G) moves by a factor within e^{+-0.05},
5%; the normalised ``q*/mean q*`` within e^{+-0.1}. ``S <= 0.1`` scales both terms of
``q = (1 - lam) q*/mean q* + lam`` by factors within e^{+-0.1}. The Poisson design's variance
at a fixed budget, ``(sum q)(sum h^2 / q)`` (unchanged by a common scale of q), is at most
``(r + 1/r)^2 / 4 = cosh^2(ln r)`` times its minimum when q is within a factor [1/r, r] of the
minimiser q ∝ |h| (Kantorovich's inequality), so keeping the old calibration costs at most
cosh^2(0.05) - 1 = 0.25% of the variance for the map alone, cosh^2(0.2) - 1 = 4% were the map
and the share both just under their tolerances (q within e^{+-0.2}) and the new map exactly
right. It is not: a refit's log-odds are noisier than the tolerance.
Measured (100 fits per size, labels at 5% positives of a model over-confident by x3, the test's
truth in ``tests/unit/stats/test_stats_map_change.py``): the standard deviation of eta at raw
logits 0, -9 and -15 (p_hat about 0.5, 0.045 and 0.006) is 0.23, 0.56 and 0.93 from 300 labels,
0.10, 0.12 and 0.20 from 3,000. So moves under 0.1 are the fit's noise rather than a drift,
while a drift that matters (logits x3 or x10: eta's slope 1/3 or 1/10 instead of 1, differences
of several units in log-odds) is taken at the first refit that sees it, and a slow drift once it
has added up to the tolerance (the comparison is against the map in force, not the previous
candidate). The price of a tolerance at the noise of a large fit: 1% more labels from the same
truth move a 3,000-label fit by D = 0.03 (median of 20 seeds) and make a new map in 2 of 20,
3% more in 8 of 20, so a model whose labels keep adding up still gets a new map now and then.
Measured in an engine-like loop (``tests/unit/test_sampler_map_churn.py``: 500-record polls,
100k records per hour bucket, 1,000 labels per hour, a refit from all labels after every poll):
98 map versions in 599 refits, control refreshes per bucket 35, 14, 9 over three buckets (7
without map changes; 599 versions and 99 refreshes per bucket when every changed fit was a new
map), the largest stored refresh list 8.6 KB instead of 26 KB (0.85 KB without map changes).

Deterministic: a function of the two calibrations and ``lam0``.
"""

from __future__ import annotations

import math

import numpy as np

from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.budget import Calibration
from monitor.stats.calibration import expit

#: Largest log-odds difference of p_hat between two maps that is not material.
LOGIT_TOLERANCE = 0.1
#: Largest log-ratio of the defensive share (and of one minus it) that is not material.
SHARE_TOLERANCE = 0.1
#: Log-odds beyond which p_hat counts as saturated (within 3.4e-4 of 0 or 1).
SATURATED = 8.0
#: The scores the maps are compared at: s = expit(t), t = -34.5, -34.375, ..., 34.5.
GRID = expit(np.linspace(-34.5, 34.5, 553))


def map_distance(old: Calibration, new: Calibration) -> float:
    """D: the largest difference of the clipped log-odds of p_hat over ``GRID`` (module doc).

    Examples:
        >>> from monitor.stats.calibration import PlattMap
        >>> a, b = Calibration(1, PlattMap(0.0, 1.0)), Calibration(2, PlattMap(0.05, 1.0))
        >>> round(map_distance(a, b), 12)
        0.05
    """
    return _distance(old.cal_map, new.cal_map)


def _distance(old: CalibrationMap, new: CalibrationMap) -> float:
    eta_old = np.clip(old.log_odds(GRID), -SATURATED, SATURATED)
    eta_new = np.clip(new.log_odds(GRID), -SATURATED, SATURATED)
    return float(np.max(np.abs(eta_new - eta_old)))


def share_distance(old: float, new: float) -> float:
    """S: ``max(|ln(new / old)|, |ln((1 - new) / (1 - old))|)``; 0 when equal, inf at 0 vs not.

    Examples:
        >>> round(share_distance(0.1, 0.11), 4)
        0.0953
        >>> share_distance(1.0, 1.0)
        0.0
    """
    if old == new:
        return 0.0
    parts = ((old, new), (1.0 - old, 1.0 - new))
    if any(x <= 0.0 or y <= 0.0 for x, y in parts):
        return math.inf
    return max(abs(math.log(y / x)) for x, y in parts)


def is_material(old: Calibration, new: Calibration, lam0: float) -> bool:
    """Whether ``new`` differs from ``old`` (in force) materially (the module's four tests).

    ``old`` of version 0 (no map) is the identity with the configured share ``lam0``.

    Examples:
        >>> from monitor.stats.budget import NO_CALIBRATION
        >>> from monitor.stats.calibration import PlattMap
        >>> is_material(NO_CALIBRATION, Calibration(1, PlattMap(0.0, 1.01), 0.1), 0.1)
        False
        >>> is_material(NO_CALIBRATION, Calibration(1, PlattMap(0.0, 0.1), 0.1), 0.1)
        True
    """
    if type(old.cal_map) is not type(new.cal_map):
        return True
    lam_old = lam0 if old.version == 0 else old.lam
    if share_distance(lam_old, new.lam) > SHARE_TOLERANCE:
        return True
    if map_distance(old, new) > LOGIT_TOLERANCE:
        return True
    names = {g for g, _ in old.segments} | {g for g, _ in new.segments}
    return any(_distance(old.map_of(g), new.map_of(g)) > LOGIT_TOLERANCE for g in sorted(names))
