"""What a consumer's positions say about a partition that changed under it (both clients).

The store keeps each partition's next offset. If the topic is deleted and recreated, or its log
truncated, that offset can lie beyond the partition's new end. Apache Kafka refuses the fetch
and the client resets to the partition's start (``auto.offset.reset=earliest``): the records
come back from an offset below the stored one. A broker that does not refuse it (Tansu) returns
nothing and the monitor waits at its stored offset. Neither says so on its own; these log it,
one line per partition and event (README, runbook "The scored topic was recreated"). A next
offset beyond the end is logged only once it has lasted ``BEYOND_GRACE_S``: a broker restarting
reports a stale end for a moment (seen on Apache Kafka 4.1.1: an end 1,590 records short, read
past within a second), and the hint would have an operator throw the data directory away.
Records deleted before they were read: ``monitor.runtime.skips``.
"""

from __future__ import annotations

import logging
import math
import time

from monitor.runtime.ports import TP

log = logging.getLogger(__name__)

_REWIND_HINT = (
    "the topic was recreated or its log truncated: its records from this offset on are counted "
    "as new traffic"
)
_BEYOND_HINT = (
    "the topic was recreated or its log truncated. Apache Kafka starts the partition over by "
    "itself once records come (offset_reset follows); a broker that does not (Tansu) leaves "
    "the monitor here: to start it over, stop the monitor and move its data directory aside "
    "(a new store reads every partition from its start)"
)
_RESET_HINT = (
    "the topic was recreated or its log truncated, and the broker reset this consumer to the "
    "partition's start: its records are read from there as they come, counted as new traffic "
    "(offset_reset); nothing to do"
)


def note_rewind(key: TP, first: int, expected: int | None) -> None:
    """Log a batch of ``key`` that starts below the next offset the monitor expected."""
    if expected is not None and first < expected:
        log.warning(
            "records came back from an earlier offset",
            extra={
                "event": "offset_reset",
                "topic": key[0],
                "partition": key[1],
                "expected_offset": expected,
                "first_offset": first,
                "hint": _REWIND_HINT,
            },
        )


BEYOND_GRACE_S = 30.0


def note_beyond_end(
    key: TP,
    end: int,
    nxt: int,
    since: dict[TP, float],
    *,
    position: int | None = None,
    now: float | None = None,
) -> None:
    """Log, once until it clears, a next offset beyond the end that lasted ``BEYOND_GRACE_S``.

    ``since``: per partition, when ``nxt`` was first seen beyond ``end`` (``inf`` once logged);
    ``position``: the client's own, when known: at or below ``end`` the broker has reset it
    (Apache Kafka, a recreated empty topic), so the records are read as they come and the hint
    says so rather than have an operator move the data directory aside (kafka-python tells;
    librdkafka reports no position before its first record, and the hint says both); ``now``:
    ``time.monotonic()`` by default.
    """
    if nxt <= end:
        since.pop(key, None)
        return
    now = time.monotonic() if now is None else now
    if now - since.setdefault(key, now) >= BEYOND_GRACE_S:
        since[key] = math.inf
        log.warning(
            "the next offset has been beyond the partition's end for a while: nothing below it "
            "is read",
            extra={
                "event": "position_beyond_end",
                "topic": key[0],
                "partition": key[1],
                "next_offset": nxt,
                "end_offset": end,
                "for_s": BEYOND_GRACE_S,
                "hint": _RESET_HINT
                if position is not None and 0 <= position <= end
                else _BEYOND_HINT,
            },
        )
