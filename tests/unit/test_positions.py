"""Positions beyond a partition's end are logged once they last, not for a stale end."""

from __future__ import annotations

import logging

import pytest

from monitor.io.positions import BEYOND_GRACE_S, note_beyond_end

TP = ("predictions", 0)


def _events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records if r.name == "monitor.io.positions"]


def test_a_stale_end_after_a_broker_restart_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker restarting reported an end 1,590 records short for a moment; the warning told
    the operator to move the data directory aside although nothing was lost."""
    since: dict[tuple[str, int], float] = {}
    with caplog.at_level(logging.WARNING, logger="monitor.io.positions"):
        note_beyond_end(TP, 53_033, 54_623, since, now=100.0)
        note_beyond_end(TP, 53_033, 54_623, since, now=100.0 + BEYOND_GRACE_S / 2)
        note_beyond_end(TP, 59_033, 54_623, since, now=101.0 + BEYOND_GRACE_S / 2)  # caught up
        note_beyond_end(TP, 53_033, 54_623, since, now=100.0 + BEYOND_GRACE_S)  # a new episode
    assert _events(caplog) == []


def test_a_position_beyond_the_end_that_lasts_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    since: dict[tuple[str, int], float] = {}
    with caplog.at_level(logging.WARNING, logger="monitor.io.positions"):
        for t in range(0, 3 * int(BEYOND_GRACE_S), 5):
            note_beyond_end(TP, 0, 1000, since, now=float(t))
    assert _events(caplog) == ["position_beyond_end"]
    (record,) = caplog.records
    assert (record.next_offset, record.end_offset) == (1000, 0)  # type: ignore[attr-defined]
    note_beyond_end(TP, 1000, 1000, since, now=1e6)  # cleared: a later episode is logged again
    assert since == {}


def test_a_consumer_the_broker_reset_is_told_its_records_come_as_they_come(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A topic deleted and recreated empty on Apache Kafka: the broker reset the consumer to
    offset 0 and the records were read by themselves once they came (offset_reset), but the
    warning told the operator to move the data directory aside, all estimates and labels with
    it. A client whose own position stayed beyond the end (Tansu) still gets that hint."""
    for position, says in ((0, "nothing to do"), (1000, "move its data directory aside")):
        since: dict[tuple[str, int], float] = {}
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="monitor.io.positions"):
            note_beyond_end(TP, 0, 1000, since, position=position, now=0.0)
            note_beyond_end(TP, 0, 1000, since, position=position, now=BEYOND_GRACE_S)
        (record,) = caplog.records
        assert says in record.hint  # type: ignore[attr-defined]
