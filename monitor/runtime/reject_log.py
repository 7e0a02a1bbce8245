"""One log line per kind of rejected record and minute: what, where, and why.

Every rejected record goes to the dead-letter topic and its counter; the log says so too, but a
stream of bad records must not flood it: per (input, reason) the first reject is logged at once
with its topic, partition, offset and detail (which names the fix where there is one), and then
at most one line every ``every_s`` seconds, counting the rejects of that kind since the last line.
Rejects held back are logged once their interval has passed even if no other reject of their
kind comes (each step notes its rejects, none included), and at shutdown (:meth:`flush`): a
short burst used to stay out of the log for good.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

from monitor.config.schema import TopicsConfig
from monitor.core.messages import Reject

log = logging.getLogger(__name__)


class RejectLog:
    """Rate-limited ``record_rejected`` log lines (see the module docstring)."""

    def __init__(self, topics: TopicsConfig, every_s: float = 60.0) -> None:
        self.topics = topics
        self.every_s = every_s
        self._last: dict[tuple[str, str], float] = {}
        self._since: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], Reject] = {}  # the latest batch's first, not logged

    def note(self, rejects: Sequence[Reject], now: float | None = None) -> None:
        """Count ``rejects``; log each kind held back whose interval has passed."""
        now = time.monotonic() if now is None else now
        first: dict[tuple[str, str], Reject] = {}
        for rej in rejects:
            key = (self.topics.input_of(rej.record.topic), rej.reason.value)
            self._since[key] = self._since.get(key, 0) + 1
            first.setdefault(key, rej)
        self._held.update(first)
        for key in list(self._held):
            if now - self._last.get(key, -math.inf) >= self.every_s:
                self._line(key, now)

    def flush(self) -> None:
        """Log every kind held back, whatever its interval (at shutdown)."""
        now = time.monotonic()
        for key in list(self._held):
            self._line(key, now)

    def _line(self, key: tuple[str, str], now: float) -> None:
        rej = self._held.pop(key)
        rec = rej.record
        log.warning(
            "record rejected to the dead-letter topic",
            extra={
                "event": "record_rejected",
                "input": key[0],
                "reason": key[1],
                "topic": rec.topic,
                "partition": rec.partition,
                "offset": rec.offset,
                "detail": rej.detail,
                "rejected": self._since[key],  # of this kind since the last such line
            },
        )
        self._last[key] = now
        self._since[key] = 0
