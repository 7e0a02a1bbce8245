"""One log line per kind of rejected record and minute: what, where, and why.

Every rejected record goes to the dead-letter topic and its counter; the log says so too, but a
stream of bad records must not flood it: per (input, reason) the first reject is logged at once
with its topic, partition, offset and detail (which names the fix where there is one), and then
at most one line every ``every_s`` seconds, naming the first reject of the latest batch of that
kind and counting the rejects of that kind since the last line (:class:`ThrottledLog`). Each
step notes its rejects, none included, so rejects held back are logged once their interval has
passed, and at shutdown (:meth:`RejectLog.flush`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from monitor.config.schema import TopicsConfig
from monitor.core.messages import Reject
from monitor.throttled_log import ThrottledLog

log = logging.getLogger(__name__)


class RejectLog:
    """Rate-limited ``record_rejected`` log lines (see the module docstring)."""

    def __init__(self, topics: TopicsConfig, every_s: float = 60.0) -> None:
        self.topics = topics
        self._lines = ThrottledLog(
            log,
            "record rejected to the dead-letter topic",
            "record_rejected",
            count_field="rejected",  # of this kind since the last such line
            every_s=every_s,
        )

    def note(self, rejects: Sequence[Reject], now: float | None = None) -> None:
        """Count ``rejects``; log each kind held back whose interval has passed."""
        counts: Counter[tuple[str, str]] = Counter()
        first: dict[tuple[str, str], Reject] = {}
        for rej in rejects:
            key = (self.topics.input_of(rej.record.topic), rej.reason.value)
            counts[key] += 1
            first.setdefault(key, rej)
        for key, rej in first.items():
            rec = rej.record
            fields = {
                "input": key[0],
                "reason": key[1],
                "topic": rec.topic,
                "partition": rec.partition,
                "offset": rec.offset,
                "detail": rej.detail,
            }
            self._lines.note(key, fields, now, count=counts[key])
        self._lines.tick(now)

    def flush(self) -> None:
        """Log every kind held back, whatever its interval (at shutdown)."""
        self._lines.flush()
