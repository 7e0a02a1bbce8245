"""Records deleted before the monitor read them (both clients and the fakes).

Retention or ``kafka-delete-records`` can remove records the monitor has not read (it was down
or behind): its next offset then lies below the partition's log start, the broker refuses the
fetch and the client resets to the log start, so the records come back from a later offset
without a word. ``Skips`` asks for the log start when a batch starts beyond the next offset
expected, and logs and counts the records that are gone (a gap above the log start is a
transaction marker or a compacted record, not a loss); the engines export the count as
``monitor_records_skipped_total`` (README, "Alert MonitorRecordsSkipped").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from monitor.runtime.ports import TP

log = logging.getLogger(__name__)

_SKIPPED_HINT = (
    "these records were deleted (retention or delete-records) before the monitor read them: they "
    "are in no traffic count or estimate; keep the scored topic's retention.ms longer than any "
    "outage"
)


class Skips:
    """Per partition, the records deleted before they were read (logged, then ``take``-n)."""

    def __init__(self) -> None:
        self._pending: dict[TP, int] = {}

    def note(self, key: TP, first: int, expected: int | None, log_start: Callable[[], int]) -> None:
        """A batch of ``key`` starts at ``first``; ``expected`` was the next offset.

        Beyond it, ``log_start()`` (the partition's first offset on the broker) tells the
        deleted records from a gap of markers or compacted records.
        """
        if expected is None or first <= expected:
            return
        gone = min(first, log_start()) - expected
        if gone <= 0:
            return
        self._pending[key] = self._pending.get(key, 0) + gone
        log.warning(
            "records were deleted before the monitor read them",
            extra={
                "event": "records_skipped",
                "topic": key[0],
                "partition": key[1],
                "expected_offset": expected,
                "first_offset": first,
                "records": gone,
                "hint": _SKIPPED_HINT,
            },
        )

    def forget(self, key: TP) -> None:
        """Drop what was noted for ``key``: a rollback reads it again from the stored offset."""
        self._pending.pop(key, None)

    def take(self) -> dict[TP, int]:
        """The records skipped per partition since the last call."""
        out, self._pending = self._pending, {}
        return out
