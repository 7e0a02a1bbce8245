"""What a consumer's positions say about a partition that changed under it (both clients).

The store keeps each partition's next offset. If the topic is deleted and recreated, or its log
truncated, that offset can lie beyond the partition's new end. Apache Kafka refuses the fetch
and the client resets to the partition's start (``auto.offset.reset=earliest``): the records
come back from an offset below the stored one. A broker that does not refuse it (Tansu) returns
nothing and the monitor waits at its stored offset. Neither says so on its own; these log it,
one line per partition and event (README, runbook "The scored topic was recreated").
"""

from __future__ import annotations

import logging

from monitor.runtime.ports import TP

log = logging.getLogger(__name__)

_REWIND_HINT = (
    "the topic was recreated or its log truncated: its records from this offset on are counted "
    "as new traffic"
)
_BEYOND_HINT = (
    "the topic was recreated or its log truncated; to start it over, stop the monitor and move "
    "its data directory aside (a new store reads every partition from its start)"
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


def note_beyond_end(key: TP, end: int, nxt: int, seen: set[TP]) -> None:
    """Log, once until it clears, a next offset ``nxt`` beyond the partition's ``end``."""
    if nxt <= end:
        seen.discard(key)
        return
    if key not in seen:
        seen.add(key)
        log.warning(
            "the next offset is beyond the partition's end: nothing below it is read",
            extra={
                "event": "position_beyond_end",
                "topic": key[0],
                "partition": key[1],
                "next_offset": nxt,
                "end_offset": end,
                "hint": _BEYOND_HINT,
            },
        )
