"""Rejected records are logged once per kind and minute, with where they are and why."""

from __future__ import annotations

import logging

import pytest

from monitor.config.schema import TopicsConfig
from monitor.core.messages import RawRecord, Reject
from monitor.errors import RejectReason
from monitor.runtime.reject_log import RejectLog

TOPICS = TopicsConfig()


def _reject(offset: int, reason: RejectReason = RejectReason.OUT_OF_RANGE) -> Reject:
    record = RawRecord(TOPICS.scored, 0, offset, 0, None, b"{}")
    return Reject(reason, f"score 1.5 at offset {offset} is outside [0, 1]", record)


def test_a_flood_of_bad_records_is_one_line_a_minute_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="monitor.runtime.reject_log")
    log = RejectLog(TOPICS, every_s=60.0)
    log.note([_reject(i) for i in range(1000)], now=0.0)
    log.note([_reject(1000 + i) for i in range(500)], now=30.0)
    log.note([_reject(2000, RejectReason.MALFORMED_JSON)], now=31.0)  # another kind: at once
    log.note([_reject(3000)], now=61.0)
    lines = [(r.reason, r.offset, r.rejected) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [
        ("out_of_range", 0, 1000),
        ("malformed_json", 2000, 1),
        ("out_of_range", 3000, 501),
    ]
    first = caplog.records[0]
    assert first.input == "scored" and "outside [0, 1]" in first.detail  # type: ignore[attr-defined]


def test_rejects_held_back_are_logged_when_their_minute_has_passed_or_at_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bad label, then three more within the minute and nothing else: the three were never
    logged (only the next reject of their kind wrote the count held back)."""
    caplog.set_level(logging.WARNING, logger="monitor.runtime.reject_log")
    log = RejectLog(TOPICS, every_s=60.0)
    log.note([_reject(0)], now=0.0)
    log.note([_reject(1), _reject(2), _reject(3)], now=10.0)
    log.note([], now=59.0)  # steps without rejects: still within the minute
    log.note([_reject(4, RejectReason.MALFORMED_JSON)], now=59.5)
    log.note([], now=61.0)
    lines = [(r.reason, r.offset, r.rejected) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [("out_of_range", 0, 1), ("malformed_json", 4, 1), ("out_of_range", 1, 3)]
    log.note([_reject(5), _reject(6)], now=62.0)
    log.flush()  # at shutdown: whatever its interval
    assert [(r.offset, r.rejected) for r in caplog.records[3:]] == [(5, 2)]  # type: ignore[attr-defined]
    log.flush()
    assert len(caplog.records) == 4
