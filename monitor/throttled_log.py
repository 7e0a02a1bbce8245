"""Warning lines rate-limited per kind: the first at once, then one per interval with a count.

A stream of one fault (a bad record a second, an unreadable answer at every poll) must be seen
in the log without flooding it. Per kind the first is logged at once; later ones are counted and
the latest is held back. A kind held back is logged, with how many it stands for, once its
interval has passed: at its next :meth:`ThrottledLog.note`, at the next :meth:`ThrottledLog.tick`
even if no other of its kind comes (a short burst used to stay out of the log for good), and at
stop (:meth:`ThrottledLog.flush`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable, Mapping
from typing import Any


class ThrottledLog:
    """One ``logger.warning(message)`` line per kind and ``every_s`` (see the module docstring).

    Each line carries ``event``, the held-back fields of its kind and, under ``count_field``, how
    many of that kind it stands for since the previous line.
    """

    def __init__(
        self,
        logger: logging.Logger,
        message: str,
        event: str,
        *,
        count_field: str = "count",
        every_s: float = 60.0,
    ) -> None:
        self.logger, self.message, self.event = logger, message, event
        self.count_field, self.every_s = count_field, every_s
        self._last: dict[Hashable, float] = {}
        self._since: dict[Hashable, int] = {}
        self._held: dict[Hashable, Mapping[str, Any]] = {}

    def note(
        self, kind: Hashable, fields: Mapping[str, Any], now: float | None = None, count: int = 1
    ) -> None:
        """Count ``count`` of ``kind``, hold ``fields`` as its latest; log what is due."""
        self._since[kind] = self._since.get(kind, 0) + count
        self._held[kind] = fields
        self.tick(now)

    def tick(self, now: float | None = None) -> None:
        """Log every kind held back whose interval has passed."""
        now = time.monotonic() if now is None else now
        for kind in list(self._held):
            if now - self._last.get(kind, -math.inf) >= self.every_s:
                self._line(kind, now)

    def flush(self) -> None:
        """Log every kind held back, whatever its interval (at stop)."""
        now = time.monotonic()
        for kind in list(self._held):
            self._line(kind, now)

    def _line(self, kind: Hashable, now: float) -> None:
        fields = self._held.pop(kind)
        self.logger.warning(
            self.message,
            extra={"event": self.event, **fields, self.count_field: self._since[kind]},
        )
        self._last[kind] = now
        self._since[kind] = 0
