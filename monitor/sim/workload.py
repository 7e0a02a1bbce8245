"""A simulated scored stream with known truth, for the demo and end-to-end tests (pure numpy).

The stream models a rare-event classifier (fraud, abuse) scoring traffic over a period of event
time. Each item has a latent feature ``x | y ~ N(d y, 1)`` with ``y ~ Bernoulli(positive_rate)``;
the model publishes the Bayes posterior

    s(x) = sigmoid( log(prior / (1 - prior)) + d x - d^2 / 2 ),

which is calibrated by construction (P(y = 1 | s) = s), the assumption under which the
variance-optimal sampling of seed 000 (Sawade et al., Cor. 2) uses s for p(y | x).

Half-way (``degrade_at``) the world changes and the model does not: positives learn to look
harmless (their feature moves by ``-drift_shift``) and the feature gets noisier (``drift_noise``),
while the model keeps the same formula. Its scores lose discrimination *and* calibration, so the
true F_alpha drops (F1 about 0.83 -> 0.66 with the defaults), which the audited estimate must show
and the label-free intrinsic F (computed from the scores alone) does not fully see.

Event times follow a diurnal traffic curve ``rate(t) ∝ 1 + diurnal sin(2 pi t / 24 h)`` over
``hours`` of event time from ``start_ts``. Truth per tumbling bucket and per window (buckets
``(W_b - k, W_b]``, the daemon's anchoring, see CONTRACTS "Stream design") comes from
``bucket_truth`` and ``window_truth``: F_alpha = tp / (alpha (tp + fp) + (1 - alpha)(tp + fn))
(seed 000, Cor. 1), NaN when the denominator is 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

HOUR_S = 3600.0


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of a simulated stream; the same spec and seed give the same stream."""

    n: int = 96_000  # records over the whole period
    hours: float = 48.0  # event-time length of the period
    start_ts: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z (aligned to the hour)
    positive_rate: float = 0.03  # prior P(y = 1)
    separation: float = 3.5  # d: class separation of the latent feature
    degrade_at: float = 0.5  # fraction of the period after which the drift applies
    drift_shift: float = 0.6  # positives' feature moves by -drift_shift after the change
    drift_noise: float = 0.3  # extra N(0, drift_noise^2) noise on the feature after the change
    diurnal: float = 0.3  # relative amplitude of the daily traffic cycle, in [0, 1)
    model: str = "default"
    segments: tuple[str, ...] = ()  # empty: records carry no segment
    threshold: float = 0.5  # pred = score >= threshold
    seed: int = 0

    @property
    def end_ts(self) -> float:
        """End of the period (exclusive)."""
        return self.start_ts + self.hours * HOUR_S

    @property
    def degrade_ts(self) -> float:
        """Event time at which the degradation starts."""
        return self.start_ts + self.degrade_at * self.hours * HOUR_S


@dataclass(frozen=True)
class Workload:
    """A generated stream sorted by event time: one row per record, plus the truth."""

    spec: WorkloadSpec
    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    ts: npt.NDArray[np.float64]
    label: npt.NDArray[np.int8]  # ground truth, never sent on the scored topic
    segment: npt.NDArray[np.str_]  # "" when the spec has no segments
    degraded: npt.NDArray[np.bool_]  # True for records after the change point
    amount: npt.NDArray[np.float64]  # a payload field shown to auditors

    def __len__(self) -> int:
        return int(self.score.shape[0])

    @property
    def pred(self) -> npt.NDArray[np.int8]:
        """The model's decisions, ``1[score >= threshold]``."""
        return (self.score >= self.spec.threshold).astype(np.int8)

    def record(self, i: int) -> dict[str, Any]:
        """The scored-topic JSON object of record ``i`` (schema in DESIGN.md, "Messages")."""
        rec: dict[str, Any] = {
            "id": str(self.ids[i]),
            "score": float(self.score[i]),
            "ts": float(self.ts[i]),
            "model": self.spec.model,
            "payload": {"amount": float(self.amount[i])},
        }
        if self.segment[i]:
            rec["segment"] = str(self.segment[i])
        return rec

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
        """Scored-topic objects for rows ``start .. stop`` in event-time order."""
        for i in range(start, len(self) if stop is None else min(stop, len(self))):
            yield self.record(i)

    def truth_rows(self) -> Iterator[tuple[str, int]]:
        """``(id, label)`` pairs of the ground truth (what the audit team knows)."""
        for rid, lab in zip(self.ids.tolist(), self.label.tolist(), strict=True):
            yield str(rid), int(lab)


def _event_times(spec: WorkloadSpec, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Sorted event times with density ∝ 1 + diurnal sin(2 pi t / 24 h) (inverse CDF on a grid)."""
    grid = np.linspace(0.0, spec.hours * HOUR_S, 4097)
    density = 1.0 + spec.diurnal * np.sin(2.0 * np.pi * grid / (24.0 * HOUR_S))
    cdf = np.concatenate(([0.0], np.cumsum((density[1:] + density[:-1]) / 2.0)))
    cdf /= cdf[-1]
    u = np.sort(rng.random(spec.n))
    offsets = np.interp(u, cdf, grid)
    # keep strictly inside the period (the last bucket must not spill over)
    return spec.start_ts + np.minimum(offsets, spec.hours * HOUR_S - 1e-3)


def generate(spec: WorkloadSpec) -> Workload:
    """Draw a stream for ``spec``; deterministic given ``spec.seed``.

    Args:
        spec: the stream's parameters.

    Returns:
        The records sorted by event time with their true labels.

    Example:
        >>> w = generate(WorkloadSpec(n=2000, seed=1))
        >>> len(w), bool(w.ts[0] >= w.spec.start_ts), bool(w.ts[-1] < w.spec.end_ts)
        (2000, True, True)
    """
    if spec.n < 1 or spec.hours <= 0 or not 0.0 < spec.positive_rate < 1.0:
        msg = f"need n >= 1, hours > 0 and 0 < positive_rate < 1, got {spec}"
        raise ValueError(msg)
    rng = np.random.default_rng(spec.seed)
    ts = _event_times(spec, rng)
    label = (rng.random(spec.n) < spec.positive_rate).astype(np.int8)
    d = spec.separation
    x = rng.standard_normal(spec.n) + d * label
    degraded = ts >= spec.degrade_ts
    noise = rng.standard_normal(spec.n)
    x = np.where(degraded, x - spec.drift_shift * label + spec.drift_noise * noise, x)
    prior = spec.positive_rate
    logit = np.log(prior / (1.0 - prior)) + d * x - d * d / 2.0
    score = np.round(1.0 / (1.0 + np.exp(-logit)), 6)
    ids = np.char.add("tx-", np.char.zfill(np.arange(spec.n).astype(np.str_), 8))
    # shuffle the id numbers so ids do not reveal the order of the stream
    ids = ids[rng.permutation(spec.n)]
    if spec.segments:
        segment = np.asarray(spec.segments, dtype=np.str_)[
            rng.integers(0, len(spec.segments), spec.n)
        ]
    else:
        segment = np.full(spec.n, "", dtype=np.str_)
    amount = np.round(rng.lognormal(3.5, 1.2, spec.n), 2)
    return Workload(spec, ids, score, ts, label, segment, degraded, amount)


@dataclass(frozen=True)
class Truth:
    """True confusion counts and measures of a set of records (NaN where undefined)."""

    records: int
    tp: int
    fp: int
    fn: int
    tn: int
    f: float  # F_alpha
    precision: float
    recall: float


def falpha_from_counts(tp: float, fp: float, fn: float, alpha: float) -> float:
    """F_alpha = tp / (alpha (tp + fp) + (1 - alpha)(tp + fn)) (seed 000, Cor. 1); NaN if 0/0."""
    denom = alpha * (tp + fp) + (1.0 - alpha) * (tp + fn)
    return float(tp / denom) if denom > 0 else float("nan")


def truth_of(pred: npt.NDArray[np.int8], label: npt.NDArray[np.int8], alpha: float) -> Truth:
    """Confusion counts and F_alpha, precision (alpha=1), recall (alpha=0) of these records."""
    p = pred.astype(bool)
    y = label.astype(bool)
    tp, fp = int(np.sum(p & y)), int(np.sum(p & ~y))
    fn, tn = int(np.sum(~p & y)), int(np.sum(~p & ~y))
    return _truth(tp, fp, fn, tn, alpha)


def _truth(tp: int, fp: int, fn: int, tn: int, alpha: float) -> Truth:
    return Truth(
        records=tp + fp + fn + tn,
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        f=falpha_from_counts(tp, fp, fn, alpha),
        precision=falpha_from_counts(tp, fp, fn, 1.0),
        recall=falpha_from_counts(tp, fp, fn, 0.0),
    )


@dataclass(frozen=True)
class BucketCounts:
    """Confusion counts per tumbling event-time bucket, bucket = floor(ts / bucket_s)."""

    bucket_s: int
    buckets: npt.NDArray[np.int64]  # sorted bucket numbers that hold at least one record
    tp: npt.NDArray[np.int64]
    fp: npt.NDArray[np.int64]
    fn: npt.NDArray[np.int64]
    tn: npt.NDArray[np.int64]

    def f(self, alpha: float) -> npt.NDArray[np.float64]:
        """True F_alpha of each bucket (NaN where undefined)."""
        cells = zip(self.tp.tolist(), self.fp.tolist(), self.fn.tolist(), strict=True)
        return np.array([falpha_from_counts(a, b, c, alpha) for a, b, c in cells], np.float64)


def bucket_truth(
    ts: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    label: npt.NDArray[np.int8],
    bucket_s: int,
) -> BucketCounts:
    """Aggregate confusion counts into tumbling buckets anchored at the Unix epoch.

    Args:
        ts: event times in seconds.
        pred: the model's 0/1 decisions.
        label: the true 0/1 labels.
        bucket_s: bucket length in seconds.
    """
    bucket = np.floor(ts / bucket_s).astype(np.int64)
    buckets, inverse = np.unique(bucket, return_inverse=True)
    cell = 2 * pred.astype(np.int64) + label.astype(np.int64)  # 0 tn, 1 fn, 2 fp, 3 tp
    counts = np.zeros((buckets.size, 4), dtype=np.int64)
    np.add.at(counts, (inverse, cell), 1)
    return BucketCounts(bucket_s, buckets, counts[:, 3], counts[:, 2], counts[:, 1], counts[:, 0])


def window_truth(counts: BucketCounts, last_bucket: int, n_buckets: int, alpha: float) -> Truth:
    """Truth over the buckets ``(last_bucket - n_buckets, last_bucket]`` (a reported window).

    The daemon anchors a window of k buckets at the bucket W_b of the model's watermark and
    covers buckets W_b - k + 1 .. W_b; pass ``last_bucket = W_b`` and ``n_buckets = k``.
    """
    sel = (counts.buckets > last_bucket - n_buckets) & (counts.buckets <= last_bucket)
    return _truth(
        int(counts.tp[sel].sum()),
        int(counts.fp[sel].sum()),
        int(counts.fn[sel].sum()),
        int(counts.tn[sel].sum()),
        alpha,
    )
