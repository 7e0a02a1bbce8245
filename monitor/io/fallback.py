"""What both sinks do with a record its topic refuses as too large (``topics.too_large``).

A record with a ``fallback`` (a dead letter: ``monitor.core.records.deadletter_minimal``) is
written as that instead, with no key, and counted (``fallbacks``); one without is
``TopicsNotReady``. The broker refuses a whole batch, and a client may fail the other records of
its flush with it, so the records refused together are written again one flush each, which
finds the one too large: it is the record refused alone in its flush.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.io.topics import Queued, too_large
from monitor.runtime.ports import Sink


class FallbackSink(Sink):
    """The fallback path shared by ``KafkaSink`` and ``ConfluentSink`` (module docstring).

    A ``Sink`` whose subclasses write the records (``produce``, ``flush``, ``close``).
    """

    def __init__(self) -> None:
        self._fallbacks = 0  # records written as their fallback since ``fallbacks``

    def fallbacks(self) -> int:
        """How many records were written as their fallback since the last call."""
        n, self._fallbacks = self._fallbacks, 0
        return n

    def _instead(self, sent: Queued, exc: BaseException) -> None:
        """Queue the fallback of ``sent``, refused as too large (``exc``), with no key.

        ``TopicsNotReady`` without one (``monitor.io.topics.too_large``).
        """
        if sent.fallback is None:
            raise too_large(sent.topic, sent.size, exc) from exc
        self._fallbacks += 1
        self.produce(sent.topic, None, sent.fallback, sent.partition)

    def _write_refused(
        self, refused: Sequence[tuple[Queued, BaseException]], *, alone: bool, timeout_s: float
    ) -> None:
        """Write again the records a flush found refused as too large, and flush them.

        The record ``alone`` in its flush is the one too large (``_instead``: its fallback); the
        others are written again one flush each, which finds the one.
        """
        if alone:
            ((sent, exc),) = refused
            self._instead(sent, exc)
            self.flush(timeout_s)
            return
        for sent, _ in refused:
            self.produce(sent.topic, sent.key, sent.value, sent.partition, fallback=sent.fallback)
            self.flush(timeout_s)
