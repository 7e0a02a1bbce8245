"""Small synthetic scored streams for the engine's unit tests (built directly as batches)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.records import ScoredBatch


@dataclass
class Stream:
    """A scored stream with its true labels, in partition/offset order."""

    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    label: npt.NDArray[np.int8]
    ts: npt.NDArray[np.float64]
    segment: npt.NDArray[np.str_]
    partition: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]
    model: str = "default"

    def __len__(self) -> int:
        return len(self.score)

    def batch(self, rows: npt.NDArray[np.intp] | slice) -> ScoredBatch:
        idx = np.arange(len(self))[rows]
        return ScoredBatch(
            ids=self.ids[idx],
            score=self.score[idx],
            pred=self.pred[idx],
            ts=self.ts[idx],
            model=np.full(len(idx), self.model),
            segment=self.segment[idx],
            payload=[None] * len(idx),
            partition=self.partition[idx],
            offset=self.offset[idx],
        )


def hourly_batch(
    score: npt.NDArray[np.float64], within: npt.NDArray[np.float64], start: float
) -> ScoredBatch:
    """One partition's records, ``len(within)`` an hour, offsets and ids ``r0, r1, ...``.

    The j-th record of hour h is at ``start + 3600 h + 3599 within[j]``; pred = score >= 0.5.
    """
    n, per_hour = len(score), len(within)
    hour = np.repeat(np.arange(n // per_hour), per_hour)
    return ScoredBatch(
        ids=np.array([f"r{i}" for i in range(n)], dtype=np.str_),
        score=score,
        pred=(score >= 0.5).astype(np.int8),
        ts=start + hour * 3600.0 + np.tile(within, n // per_hour) * 3599.0,
        model=np.full(n, "default"),
        segment=np.full(n, ""),
        payload=[None] * n,
        partition=np.zeros(n, dtype=np.int32),
        offset=np.arange(n, dtype=np.int64),
    )


def make_stream(
    rng: np.random.Generator,
    n: int,
    *,
    start: float = 1_700_000_000.0,
    span_s: float = 4 * 3600.0,
    partitions: int = 1,
    segments: tuple[str, ...] = ("",),
    positive_rate: float = 0.1,
) -> Stream:
    """Calibrated scores, in event-time order, round-robin over partitions."""
    label_logit = rng.normal(np.log(positive_rate / (1 - positive_rate)), 2.0, n)
    score = 1.0 / (1.0 + np.exp(-label_logit))
    label = (rng.random(n) < score).astype(np.int8)
    ts = start + np.sort(rng.random(n)) * span_s
    part = (np.arange(n) % partitions).astype(np.int32)
    offset = np.zeros(n, dtype=np.int64)
    for p in range(partitions):
        offset[part == p] = np.arange(int(np.count_nonzero(part == p)))
    return Stream(
        ids=np.array([f"r{i:07d}" for i in range(n)], dtype=np.str_),
        score=score,
        pred=(score >= 0.5).astype(np.int8),
        label=label,
        ts=ts,
        segment=np.array(rng.choice(list(segments), n), dtype=np.str_),
        partition=part,
        offset=offset,
    )


def random_cuts(rng: np.random.Generator, n: int, k: int) -> list[slice]:
    """Cut ``range(n)`` into ``k`` random contiguous batches."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    bounds = [0, *cuts.tolist(), n]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]
