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
