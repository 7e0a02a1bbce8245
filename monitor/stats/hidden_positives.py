"""Positives a calibration map does not expect among the low scores: a test on a day's labels.

A monotone map of the score (Platt, beta: ``monitor.stats.beta_calibration``) cannot put a floor
under the low scores. When a model starts to miss a new kind of positive that its scores do not
show (p(y | s) >= eps at every score, the scores as before), a map fitted on the last few hundred
labels keeps p_hat near 0 there, q* audits those records at the defensive floor alone, and the few
found carry weights of a few hundred: at 1% positives the daemon's 1 h windows covered 0.81
(benchmarks/README.md, Efficiency, "Positives the scores do not show").

The labels of a longer window can show it. The audit chooses each record by its score, its
prediction and a control fixed before its label (pi is a function of s), so given s the audited
labels are draws of p(y | s) whatever the design (``monitor.stats.design.recalibrate``; the labels
are counted once, as the map is fitted). Among the audited predicted negatives whose p_hat is at
or below the median of theirs (the low half, where a monotone map cannot follow a floor), the
number of positives O is, under the map, a sum of independent Bernoulli(p_hat_i), close to a
Poisson count of mean ``E = sum p_hat_i`` when the p_hat are small (Le Cam's inequality: total
variation at most ``sum p_hat_i^2``). The one-sided p-value is

    P = P(Poisson(E) >= O)    (1 when O = 0).

Below ``HIDDEN_LEVEL`` the labels have found positives where the map says there are almost none,
and the design takes the defensive share ``HIDDEN_SHARE`` (``monitor.core.recalibration.refit``),
so the records the map cannot rank are audited often enough for the interval to see them; it
keeps it while the day's labels reject the map (the extra uniform labels are what keeps the test
rejecting under such a drift, and what lets a false alarm clear). On the daemon path with new
positives at 1%, buckets 10-19 of 20-bucket streams, the same 50 streams covered 0.908 with a
share of 0.5 (the labels' largest, ``selection.MAX_DEFENSIVE``) and 0.932 with 0.8 (the score
shift's ``drift.SHIFT_MAX``; scratch patches of the refit); with 0.8, ``python -m
benchmarks.efficiency --stream-daemon --cells "hidden 1%" --buckets 20 --from-bucket 10`` reads
0.911 over 300 streams (seeds 14-16), 0.823 without the test (benchmarks/README.md,
Efficiency).

The day's labels are judged by the newest map, including those drawn before a change of the
scores: after a change that makes the model under-confident the newer map puts the older labels'
low scores too low, and the test can hold the share at 0.8 until those labels leave the day. That
costs labels, not honesty; a change toward over-confidence (the common one) puts them too high and
does not trigger it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import stats

#: Level of the test (a refit happens at every step that brings labels: a strict level keeps a
#: healthy model's share where it was)
HIDDEN_LEVEL = 1e-3
#: The defensive share of a calibration whose labels reject its map (module docstring)
HIDDEN_SHARE = 0.8


def hidden_positives_p(p_hat: npt.ArrayLike, pred: npt.ArrayLike, label: npt.ArrayLike) -> float:
    """``P(Poisson(E) >= O)`` over the low half of the audited predicted negatives (module doc).

    ``p_hat``: the map's probability of each audited record; ``pred``, ``label``: its prediction
    and its label (0 or 1).

    Examples:
        >>> hidden_positives_p([0.001] * 100, [0] * 100, [0] * 100)
        1.0
        >>> round(hidden_positives_p([0.001] * 100, [0] * 100, [1] * 3 + [0] * 97), 6)
        0.000155
    """
    p = np.asarray(p_hat, dtype=np.float64)
    neg = np.asarray(pred) == 0
    p, y = p[neg], np.asarray(label)[neg]
    if p.size == 0:
        return 1.0
    low = p <= np.median(p)
    observed = int(np.count_nonzero(y[low]))
    if observed == 0:
        return 1.0
    return float(stats.poisson.sf(observed - 1, float(p[low].sum())))


__all__ = ["HIDDEN_LEVEL", "HIDDEN_SHARE", "hidden_positives_p"]
