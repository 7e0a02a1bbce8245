"""The label-budget controller: the frozen per-bucket control of the audit decisions.

Stream version of seed 000 (Sawade et al., Cor. 2) with Poisson sampling: record i is audited
with probability ``pi_i = min(1, kappa q_i)`` where
``q_i = (1 - lam) q*_i / mean_q* + lam`` (defensive mixing, seed 002 Sec. 4.1) and q* is the
variance-optimal F_alpha proposal evaluated at ``g``, the intrinsic F of earlier traffic.

For bucket b on one partition the control is computed once, from that partition's aggregate of
the latest earlier bucket only (so it depends on the stream, not on batch boundaries):

- ``g = G_theta = sum(f s) / (alpha sum(f) + (1 - alpha) sum(s))`` of that bucket,
- ``mean_qstar`` = mean of q* over that bucket,
- ``kappa = (labels_per_hour * bucket_s / 3600 / n_partitions) / N_hat`` where ``N_hat`` is the
  bucket's record count scaled to a whole bucket when the partition only started during it
  (``N_hat = n * bucket_s / max(covered_s, bucket_s / 4)``), divided by that bucket's share of
  uncapped requests when caps at pi = 1 bound there (``cap_ratio``).

Without history (first bucket of a partition) q = 1 (uniform) and
``kappa = labels_per_hour / expected_records_per_hour``. Any kappa keeps the Horvitz-Thompson
estimate unbiased; the controller only decides how many labels are spent.

Recalibration (DESIGN.md, "Learning from the labels"): a control may carry a versioned
calibration map (:class:`Calibration`: the Platt map of ``monitor.stats.calibration`` fitted
from labels, and the defensive share the labels ask for, ``selection.defensive_share``). Then
q* is evaluated at p_hat = m(s) instead of s, ``g`` comes from the earlier bucket's recalibrated
expected counts ``sum(f p_hat) / (alpha N1 + (1 - alpha) sum(p_hat))`` (p_hat under the map that
was in force there), and ``lam`` is the calibration's. The map is not a function of the scored
stream, so the control records it: a replay reads the stored control and decides the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.stats.calibration import IDENTITY, PlattMap
from monitor.stats.falpha import intrinsic_falpha_from_sums
from monitor.stats.selection import defensive_mix, inclusion_from_kappa, q_star_falpha

# G used to accumulate q* while no intrinsic F is known yet (first bucket of a partition)
G_PRIOR = 0.5
# a partially observed bucket is extrapolated from at least this share of the bucket
MIN_COVERAGE = 0.25
# cap ratios this close to 1 are rounding, not caps; kappa is raised at most 1 / MIN_CAP_RATIO
CAP_TOLERANCE = 1e-3
MIN_CAP_RATIO = 0.01


@dataclass(frozen=True)
class Calibration:
    """A versioned calibration map and the defensive share to use with it.

    ``version`` 0 is "no map" (the identity; the configured defensive share applies); every
    map fitted from labels gets the next version of its model.
    """

    version: int = 0
    cal_map: PlattMap = IDENTITY
    lam: float = math.nan

    def to_list(self) -> list[object]:
        """``[version, a, b, lam]`` (``from_list`` reads it back)."""
        return [self.version, self.cal_map.a, self.cal_map.b, self.lam]

    @classmethod
    def from_list(cls, v: object) -> Calibration:
        """The calibration written by ``to_list``; ``ValueError`` when ``v`` is not one."""
        if not isinstance(v, list | tuple) or len(v) != 4 or type(v[0]) is not int:
            msg = "a control's calibration is [version, a, b, lam]"
            raise ValueError(msg)
        a, b, lam = (float(x) for x in v[1:])
        if v[0] < 0 or not (math.isfinite(a) and b >= 0.0 and 0.0 < lam <= 1.0):
            msg = "a control's calibration needs version >= 0, finite a, b >= 0, lam in (0, 1]"
            raise ValueError(msg)
        return cls(v[0], PlattMap(a, b), lam)


NO_CALIBRATION = Calibration()


@dataclass(frozen=True)
class Control:
    """The inputs of every audit decision in one (model, partition, bucket).

    ``mean_qstar`` is NaN for the uniform control (no history): then q = 1 for every record.
    ``calibration`` is the map q* is evaluated at (version 0: the raw scores).
    """

    g: float
    kappa: float
    mean_qstar: float
    calibration: Calibration = NO_CALIBRATION

    @property
    def uniform(self) -> bool:
        """Whether this control samples uniformly (no earlier bucket to learn from)."""
        return math.isnan(self.mean_qstar)


def uniform_control(labels_per_hour: float, expected_records_per_hour: float) -> Control:
    """The control of a partition's first bucket: q = 1, kappa = budget rate / traffic rate."""
    kappa = labels_per_hour / expected_records_per_hour if expected_records_per_hour > 0 else 1.0
    return Control(g=G_PRIOR, kappa=kappa, mean_qstar=math.nan)


def control_for_bucket(
    *,
    n: int,
    n_pred: int,
    pred_score_total: float,
    score_total: float,
    mean_qstar: float,
    ts_min: float,
    prev_bucket: int,
    alpha: float,
    labels_per_hour: float,
    bucket_s: int,
    n_partitions: int,
    calibration: Calibration = NO_CALIBRATION,
    cap_ratio: float = 1.0,
) -> Control:
    """The control of the next bucket from the aggregate of the latest earlier bucket.

    ``g`` falls back to ``G_PRIOR`` when the intrinsic F is undefined (e.g. no predicted
    positive and zero scores); ``mean_qstar`` to 1 when it is not positive. With a calibration
    map, pass the recalibrated sums (``sum f p_hat``, ``sum p_hat``) as ``pred_score_total`` and
    ``score_total``.

    ``cap_ratio`` re-solves kappa when caps at pi = 1 bind: the earlier bucket's expected
    requests ``sum min(1, kappa q)`` over its uncapped ``kappa sum q`` (:func:`cap_ratio`).
    kappa is divided by it, so the budget the caps left unspent is spread over the uncapped
    records; a feedback step per bucket (deterministic: a function of the stream and the
    stored controls). Ratios above ``1 - CAP_TOLERANCE`` count as 1 (no cap bound).
    """
    g = intrinsic_falpha_from_sums(pred_score_total, float(n_pred), score_total, alpha)
    if not math.isfinite(g):
        g = G_PRIOR
    mq = mean_qstar if math.isfinite(mean_qstar) and mean_qstar > 0 else 1.0
    start = prev_bucket * bucket_s
    covered = start + bucket_s - max(float(start), ts_min)
    covered = max(covered, MIN_COVERAGE * bucket_s)
    n_hat = n * bucket_s / covered
    budget = labels_per_hour * bucket_s / 3600.0 / max(1, n_partitions)
    kappa = budget / n_hat if n_hat > 0 else 1.0
    if math.isfinite(cap_ratio) and 0.0 < cap_ratio < 1.0 - CAP_TOLERANCE:
        kappa /= max(cap_ratio, MIN_CAP_RATIO)
    return Control(g=float(g), kappa=float(kappa), mean_qstar=float(mq), calibration=calibration)


def cap_ratio(previous: Control, n: int, qstar_total: float, pi_total: float, lam: float) -> float:
    """Expected requests over uncapped ones in a bucket decided under ``previous``.

    ``sum(pi) / (kappa sum(q))`` with ``sum(q) = (1 - lam) sum(q*) / mean_q* + lam n`` (n for
    the uniform control); ``lam`` is the share the control used. 1 when nothing was expected.
    """
    if previous.uniform:
        total_q = float(n)
    else:
        share = previous.calibration.lam if previous.calibration.version > 0 else lam
        total_q = (1.0 - share) * qstar_total / previous.mean_qstar + share * n
    uncapped = previous.kappa * total_q
    return min(1.0, pi_total / uncapped) if uncapped > 0.0 else 1.0


def selection_weights(
    score: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    alpha: float,
    lam: float,
    control: Control,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Return ``(q*, pi, p_hat)`` for records under one control.

    ``p_hat`` is the control's calibration map applied to the scores (the scores themselves
    without a map); ``q*`` (undefended, seed 000 Cor. 2 at p_hat and ``g``) feeds the aggregate
    of this bucket; ``pi = min(1, kappa q)`` with ``q = defensive_mix(q*, lam, mean_qstar)``
    (``lam`` the calibration's share when it has one), or q = 1 when uniform.
    """
    cal = control.calibration
    p_hat = cal.cal_map.apply(score)
    qstar = np.asarray(q_star_falpha(p_hat, pred, alpha, control.g), dtype=np.float64)
    if control.uniform:
        q = np.ones_like(score, dtype=np.float64)
    else:
        share = cal.lam if cal.version > 0 else lam
        q = np.asarray(defensive_mix(qstar, share, control.mean_qstar), dtype=np.float64)
    pi = np.asarray(inclusion_from_kappa(q, control.kappa), dtype=np.float64)
    return qstar, pi, p_hat
