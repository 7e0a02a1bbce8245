"""One log line a minute for the batches processed: their counts, the slowest, the offsets.

Every poll that returns records is a batch. A line per batch at INFO made ~530 lines a minute
(200 MB a day) of live traffic at ten records a second, nearly all of one record. Each batch is
logged at DEBUG (``batch_processed``); at INFO one ``batches_processed`` line sums the batches
since the previous one: the first batch at once (the daemon is processing), then at most one line
every ``every_s`` seconds, due ones also between batches (``tick``), and the rest at shutdown
(``flush``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping

from monitor.runtime.ports import TP

log = logging.getLogger(__name__)


def _offsets(offsets: Mapping[TP, int]) -> dict[str, int]:
    """``{"topic/partition": next offset}`` in (topic, partition) order."""
    return {f"{t}/{p}": o for (t, p), o in sorted(offsets.items())}


class BatchLog:
    """Per-batch DEBUG lines and rate-limited INFO summaries (see the module docstring).

    Args:
        every_s: At most one summary this often.
        clock: Seconds of a monotonic clock (injected by tests).
    """

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._last = -math.inf  # when the last summary was logged
        self._batches = 0
        self._counts: dict[str, int] = {}
        self._slowest_s = 0.0
        self._offsets: dict[TP, int] = {}

    def note(self, seconds: float, offsets: Mapping[TP, int], **counts: int) -> None:
        """Log one batch at DEBUG, add it to the summary, and log the summary if it is due.

        Args:
            seconds: How long the batch took.
            offsets: The next offset of every partition the batch read.
            counts: What the batch counted (records, requests, rejected ...); summed.
        """
        log.debug(
            "batch processed",
            extra={"event": "batch_processed", **counts, "seconds": round(seconds, 3),
                   "offsets": _offsets(offsets)},
        )  # fmt: skip
        self._batches += 1
        for name, n in counts.items():
            self._counts[name] = self._counts.get(name, 0) + n
        self._slowest_s = max(self._slowest_s, seconds)
        self._offsets.update(offsets)
        self.tick()

    def tick(self) -> None:
        """Log the pending summary if ``every_s`` has passed since the last one."""
        if self._batches and self.clock() - self._last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Log the pending summary now (at shutdown); nothing when no batch is pending."""
        if not self._batches:
            return
        log.info(
            "batches processed",
            extra={"event": "batches_processed", "batches": self._batches, **self._counts,
                   "slowest_s": round(self._slowest_s, 3), "offsets": _offsets(self._offsets)},
        )  # fmt: skip
        self._last = self.clock()
        self._batches, self._counts, self._slowest_s, self._offsets = 0, {}, 0.0, {}
