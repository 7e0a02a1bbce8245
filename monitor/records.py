"""Input records: raw Kafka records in, validated column arrays (or rejects) out.

Pure: no Kafka, no I/O. ``decode_scored`` and ``decode_labels`` turn a polled batch into
column arrays for the vectorised core plus a list of ``Reject`` for the dead-letter topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.errors import RejectReason


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as polled from Kafka (or an in-memory fake)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Reject:
    """A record that failed validation: it goes to the dead-letter topic with its reason."""

    reason: RejectReason
    detail: str
    record: RawRecord


@dataclass(frozen=True)
class ScoredBatch:
    """Validated scored records of one poll, as parallel column arrays (one row per record).

    ``ids``, ``model`` and ``segment`` are numpy unicode arrays; ``segment`` is "" when absent.
    ``ts`` is the event time in seconds since the Unix epoch (the Kafka timestamp when absent).
    ``payload`` holds the optional JSON payload passed through to auditors (None when absent).
    """

    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    ts: npt.NDArray[np.float64]
    model: npt.NDArray[np.str_]
    segment: npt.NDArray[np.str_]
    payload: list[Any]
    partition: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.score.shape[0])


@dataclass(frozen=True, slots=True)
class LabelResult:
    """One validated auditor answer: the request it answers and the 0/1 label."""

    request_id: str | None
    record_id: str | None
    label: int
    labeler: str | None
    ts: float | None
    token: str | None
    source: RawRecord
