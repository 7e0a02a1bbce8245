"""Tumbling event-time buckets and the additive traffic aggregates kept per bucket.

Pure: numpy only. Time is event time: a record with event time ``ts`` (seconds since the Unix
epoch) falls in bucket ``floor(ts / bucket_s)`` (buckets are anchored at the epoch, not at the
start of the process). A reported window of ``window_s`` seconds covers the ``k = ceil(window_s /
bucket_s)`` buckets ``(W - k, W]`` where ``W`` is the bucket of the model's watermark (the
largest event time seen), so a replay of last week shows last week's windows.

Sums of real numbers are kept in fixed point (integers in units of ``2**-24``): integer addition
is associative, so an aggregate does not depend on how the stream was cut into batches, and the
decisions derived from it (seed 000, Cor. 2 via ``monitor.stats.budget``) replay bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from monitor.stats.drift import SCORE_BINS, score_bins

FIXED_ONE = 1 << 24  # fixed-point unit of the real-valued sums


def to_fixed(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Round values to the fixed-point grid (returned as integral float64, exact below 2**53)."""
    return np.rint(np.asarray(x, dtype=np.float64) * FIXED_ONE)


def _zero_hist() -> npt.NDArray[np.int64]:
    return np.zeros(SCORE_BINS, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class TrafficAggregate:
    """Additive label-free sums over the scored records of one group (e.g. one bucket).

    ``sum_*`` fields are integers in units of ``2**-24`` (see ``FIXED_ONE``); the ``*_total``
    properties give them as floats. ``sum_qstar`` sums the undefended q* of seed 000 Cor. 2 under
    the control in force, ``sum_pi`` the inclusion probabilities (expected requests),
    ``hist`` counts scores in the ``SCORE_BINS`` logit bins of ``drift.score_bins``.
    ``ts_min``/``ts_max`` are the extreme event times (``inf``/``-inf`` when empty).
    ``sum_phat``/``sum_pred_phat`` sum the recalibrated probabilities p_hat = m(s) and f p_hat
    under the calibration map of the control in force (``monitor.stats.calibration``; the raw
    sums while the map is the identity): the recalibrated expected counts that G of the next
    control comes from.
    ``sum_uncapped`` sums ``kappa q`` before the cap at 1 (``sum_pi`` after it): their ratio is
    the share of the expected requests the caps left (``monitor.stats.budget.cap_ratio``).

    Examples:
        >>> a = TrafficAggregate.zero()
        >>> (a + a).n
        0
    """

    n: int = 0
    n_pred: int = 0
    sum_score: int = 0
    sum_pred_score: int = 0
    sum_qstar: int = 0
    n_requested: int = 0
    sum_pi: int = 0
    hist: npt.NDArray[np.int64] = field(default_factory=_zero_hist)
    ts_min: float = math.inf
    ts_max: float = -math.inf
    sum_phat: int = 0
    sum_pred_phat: int = 0
    sum_uncapped: int = 0

    @classmethod
    def zero(cls) -> TrafficAggregate:
        """The neutral element of ``+``."""
        return cls()

    def __add__(self, other: TrafficAggregate) -> TrafficAggregate:
        return TrafficAggregate(
            n=self.n + other.n,
            n_pred=self.n_pred + other.n_pred,
            sum_score=self.sum_score + other.sum_score,
            sum_pred_score=self.sum_pred_score + other.sum_pred_score,
            sum_qstar=self.sum_qstar + other.sum_qstar,
            n_requested=self.n_requested + other.n_requested,
            sum_pi=self.sum_pi + other.sum_pi,
            hist=self.hist + other.hist,
            ts_min=min(self.ts_min, other.ts_min),
            ts_max=max(self.ts_max, other.ts_max),
            sum_phat=self.sum_phat + other.sum_phat,
            sum_pred_phat=self.sum_pred_phat + other.sum_pred_phat,
            sum_uncapped=self.sum_uncapped + other.sum_uncapped,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TrafficAggregate):
            return NotImplemented
        return (
            self.n == other.n
            and self.n_pred == other.n_pred
            and self.sum_score == other.sum_score
            and self.sum_pred_score == other.sum_pred_score
            and self.sum_qstar == other.sum_qstar
            and self.n_requested == other.n_requested
            and self.sum_pi == other.sum_pi
            and bool(np.array_equal(self.hist, other.hist))
            and self.ts_min == other.ts_min
            and self.ts_max == other.ts_max
            and self.sum_phat == other.sum_phat
            and self.sum_pred_phat == other.sum_pred_phat
            and self.sum_uncapped == other.sum_uncapped
        )

    __hash__ = None  # type: ignore[assignment]

    def since(self, earlier: TrafficAggregate) -> TrafficAggregate:
        """The growth from ``earlier``, a previous state of the same group: ``earlier + d == self``.

        Exact, as the sums are integers; ``ts_min``/``ts_max`` are this state's own (min and max
        are idempotent, so adding them to ``earlier`` again gives this state's extremes).
        """
        return TrafficAggregate(
            n=self.n - earlier.n,
            n_pred=self.n_pred - earlier.n_pred,
            sum_score=self.sum_score - earlier.sum_score,
            sum_pred_score=self.sum_pred_score - earlier.sum_pred_score,
            sum_qstar=self.sum_qstar - earlier.sum_qstar,
            n_requested=self.n_requested - earlier.n_requested,
            sum_pi=self.sum_pi - earlier.sum_pi,
            hist=self.hist - earlier.hist,
            ts_min=self.ts_min,
            ts_max=self.ts_max,
            sum_phat=self.sum_phat - earlier.sum_phat,
            sum_pred_phat=self.sum_pred_phat - earlier.sum_pred_phat,
            sum_uncapped=self.sum_uncapped - earlier.sum_uncapped,
        )

    def to_list(self) -> list[Any]:
        """A JSON-ready list of the fields (``from_list`` reads it back).

        Ten fields while the recalibrated sums equal the raw ones (as every aggregate written
        before recalibration) and no cap bound (``sum_uncapped == sum_pi``, as every aggregate
        written before it was summed), twelve while only the first holds, thirteen otherwise.
        """
        out = [
            *(self.n, self.n_pred, self.sum_score, self.sum_pred_score, self.sum_qstar),
            *(self.n_requested, self.sum_pi, self.hist.tolist(), self.ts_min, self.ts_max),
        ]
        capped = self.sum_uncapped != self.sum_pi
        if capped or (self.sum_phat, self.sum_pred_phat) != (self.sum_score, self.sum_pred_score):
            out += [self.sum_phat, self.sum_pred_phat]
        if capped:
            out.append(self.sum_uncapped)
        return out

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> TrafficAggregate:
        """The aggregate written by ``to_list``; ``ValueError`` when ``v`` is not one."""
        if not isinstance(v, list | tuple) or len(v) not in (10, 12, 13):
            msg = "an aggregate is a list of ten (or twelve, or thirteen) fields"
            raise ValueError(msg)
        phat = v[10:12] if len(v) >= 12 else v[2:4]
        uncapped = v[12:] if len(v) == 13 else v[6:7]
        if not all(type(x) is int for x in (*phat, *uncapped)):
            msg = "aggregate counts and sums must be integers"
            raise ValueError(msg)
        n, n_pred, s_score, s_pred_score, s_qstar, n_requested, s_pi = v[:7]
        if not all(type(x) is int for x in v[:7]):
            msg = "aggregate counts and sums must be integers"
            raise ValueError(msg)
        hist = np.asarray(v[7], dtype=np.int64)
        if hist.shape != (SCORE_BINS,):
            msg = f"an aggregate histogram has {SCORE_BINS} bins"
            raise ValueError(msg)
        return cls(
            n=n,
            n_pred=n_pred,
            sum_score=s_score,
            sum_pred_score=s_pred_score,
            sum_qstar=s_qstar,
            n_requested=n_requested,
            sum_pi=s_pi,
            hist=hist,
            ts_min=float(v[8]),
            ts_max=float(v[9]),
            sum_phat=phat[0],
            sum_pred_phat=phat[1],
            sum_uncapped=uncapped[0],
        )

    @property
    def score_total(self) -> float:
        """Sum of the scores s."""
        return self.sum_score / FIXED_ONE

    @property
    def pred_score_total(self) -> float:
        """Sum of f * s (expected true positives under calibration)."""
        return self.sum_pred_score / FIXED_ONE

    @property
    def phat_total(self) -> float:
        """Sum of the recalibrated probabilities p_hat (expected positives after recalibration)."""
        return self.sum_phat / FIXED_ONE

    @property
    def pred_phat_total(self) -> float:
        """Sum of f * p_hat (expected true positives after recalibration)."""
        return self.sum_pred_phat / FIXED_ONE

    @property
    def qstar_total(self) -> float:
        """Sum of the undefended q* values."""
        return self.sum_qstar / FIXED_ONE

    @property
    def pi_total(self) -> float:
        """Sum of the inclusion probabilities (the expected number of requests)."""
        return self.sum_pi / FIXED_ONE

    @property
    def uncapped_total(self) -> float:
        """Sum of ``kappa q`` before the cap at 1 (the expected requests had no cap bound)."""
        return self.sum_uncapped / FIXED_ONE

    @property
    def mean_qstar(self) -> float:
        """Mean q* over the records (NaN when empty)."""
        return self.qstar_total / self.n if self.n else math.nan


def bucket_of(ts: npt.NDArray[np.float64], bucket_s: int) -> npt.NDArray[np.int64]:
    """Bucket index ``floor(ts / bucket_s)`` of event times (epoch-anchored tumbling buckets).

    Examples:
        >>> bucket_of(np.array([0.0, 3599.9, 3600.0, -1.0]), 3600).tolist()
        [0, 0, 1, -1]
    """
    return np.floor(np.asarray(ts, dtype=np.float64) / bucket_s).astype(np.int64)


def window_buckets(watermark_bucket: int, window_s: int, bucket_s: int) -> range:
    """The buckets ``(W - k, W]`` of a reported window, ``k = ceil(window_s / bucket_s)``.

    Examples:
        >>> list(window_buckets(10, 7200, 3600))
        [9, 10]
    """
    k = max(1, math.ceil(window_s / bucket_s))
    return range(watermark_bucket - k + 1, watermark_bucket + 1)


def preceding_buckets(watermark_bucket: int, window_s: int, bucket_s: int) -> range:
    """The window of the same length just before ``window_buckets`` (the PSI reference)."""
    k = max(1, math.ceil(window_s / bucket_s))
    return range(watermark_bucket - 2 * k + 1, watermark_bucket - k + 1)


class GroupKey(NamedTuple):
    """The finest grouping of traffic: (model, segment, bucket, partition)."""

    model: str
    segment: str
    bucket: int
    partition: int


def group_traffic(  # noqa: PLR0917  (parallel columns of one batch)
    model: npt.NDArray[np.str_],
    segment: npt.NDArray[np.str_],
    bucket: npt.NDArray[np.int64],
    partition: npt.NDArray[np.int32],
    score: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    qstar: npt.NDArray[np.float64],
    requested: npt.NDArray[np.bool_],
    pi: npt.NDArray[np.float64],
    ts: npt.NDArray[np.float64],
    phat: npt.NDArray[np.float64] | None = None,
    uncapped: npt.NDArray[np.float64] | None = None,
) -> dict[GroupKey, TrafficAggregate]:
    """Sum one batch into aggregates per (model, segment, bucket, partition), vectorised.

    ``phat`` holds the recalibrated probabilities (None: the scores themselves), ``uncapped``
    each record's ``kappa q`` before the cap at 1 (None: ``pi``, no cap bound).

    One ``np.unique`` over the composite key and one ``np.bincount`` per sum: no Python loop
    over records (only over the few distinct groups).
    """
    n = int(score.shape[0])
    if n == 0:
        return {}
    m_u, m_i = np.unique(model, return_inverse=True)
    s_u, s_i = np.unique(segment, return_inverse=True)
    b_u, b_i = np.unique(bucket, return_inverse=True)
    p_u, p_i = np.unique(partition, return_inverse=True)
    code = ((m_i.astype(np.int64) * len(s_u) + s_i) * len(b_u) + b_i) * len(p_u) + p_i
    keys, inv = np.unique(code, return_inverse=True)
    inv = inv.reshape(-1)
    g = len(keys)
    fpred = pred.astype(np.float64)

    def fsum(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        return np.bincount(inv, weights=values, minlength=g).astype(np.int64)

    counts = np.bincount(inv, minlength=g)
    n_pred = np.bincount(inv, weights=fpred, minlength=g).astype(np.int64)
    fx_score = to_fixed(score)
    sum_score = fsum(fx_score)
    sum_pred_score = fsum(fx_score * fpred)
    if phat is None:
        sum_phat, sum_pred_phat = sum_score, sum_pred_score
    else:
        fx_phat = to_fixed(phat)
        sum_phat, sum_pred_phat = fsum(fx_phat), fsum(fx_phat * fpred)
    sum_qstar = fsum(to_fixed(qstar))
    n_req = np.bincount(inv, weights=requested.astype(np.float64), minlength=g).astype(np.int64)
    sum_pi = fsum(to_fixed(pi))
    sum_uncapped = sum_pi if uncapped is None else fsum(to_fixed(uncapped))
    bins = score_bins(score)
    hist = np.bincount(inv * SCORE_BINS + bins, minlength=g * SCORE_BINS).reshape(g, SCORE_BINS)
    ts_min = np.full(g, np.inf)
    np.minimum.at(ts_min, inv, ts)
    ts_max = np.full(g, -np.inf)
    np.maximum.at(ts_max, inv, ts)
    out: dict[GroupKey, TrafficAggregate] = {}
    for j, code_j in enumerate(keys.tolist()):
        rest, pj = divmod(code_j, len(p_u))
        rest, bj = divmod(rest, len(b_u))
        mj, sj = divmod(rest, len(s_u))
        key = GroupKey(str(m_u[mj]), str(s_u[sj]), int(b_u[bj]), int(p_u[pj]))
        out[key] = TrafficAggregate(
            n=int(counts[j]),
            n_pred=int(n_pred[j]),
            sum_score=int(sum_score[j]),
            sum_pred_score=int(sum_pred_score[j]),
            sum_qstar=int(sum_qstar[j]),
            n_requested=int(n_req[j]),
            sum_pi=int(sum_pi[j]),
            hist=hist[j].astype(np.int64),
            ts_min=float(ts_min[j]),
            ts_max=float(ts_max[j]),
            sum_phat=int(sum_phat[j]),
            sum_pred_phat=int(sum_pred_phat[j]),
            sum_uncapped=int(sum_uncapped[j]),
        )
    return out
