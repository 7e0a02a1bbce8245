"""An in-memory broker for fast tests: topics as lists, a ``Source`` and a ``Sink`` over them.

They implement ``monitor.runtime.ports`` like the Kafka adapters do, with the same contract
(``tests/contract/test_kafka_io.py`` runs both), so an engine is tested without a broker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from monitor.core.messages import RawRecord
from monitor.errors import BrokerUnavailable, TopicsNotReady
from monitor.runtime.ports import TP, Entry
from monitor.runtime.skips import Skips


@dataclass
class FakeLog:
    """Topics as lists of partitions of ``(key, value, timestamp_ms)`` records."""

    topics: dict[str, list[list[tuple[bytes | None, bytes | None, int]]]] = field(
        default_factory=dict
    )
    committed: dict[TP, int] = field(default_factory=dict)
    start: dict[TP, int] = field(default_factory=dict)  # log start offsets (records below: gone)

    def create(self, topic: str, partitions: int = 1) -> None:
        """Create a topic if absent."""
        self.topics.setdefault(topic, [[] for _ in range(partitions)])

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int = 0,
        ts_ms: int = 0,
    ) -> None:
        """Append one record."""
        self.create(topic)
        self.topics[topic][partition].append((key, value, ts_ms))

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Move the partition's log start to ``before`` (retention, delete-records)."""
        self.start[(topic, partition)] = before

    def records(self, topic: str) -> list[tuple[bytes | None, bytes]]:
        """Every (key, value) of a topic, partition by partition (tombstones left out)."""
        return [(k, v) for part in self.topics.get(topic, []) for k, v, _ in part if v is not None]


class FakeSource:
    """An in-memory consumer over a ``FakeLog``; starts at the stored offsets like the real one."""

    def __init__(
        self, log_: FakeLog, topics: Sequence[str], stored_offsets: Callable[[], Mapping[TP, int]]
    ) -> None:
        self.log = log_
        self.topics = list(topics)
        stored = stored_offsets()
        self.pos: dict[TP, int] = {}
        for t in self.topics:
            log_.create(t)
            for p in range(len(log_.topics[t])):
                self.pos[(t, p)] = stored.get((t, p), 0)
        self._skips = Skips()
        self.fail_polls = 0
        self.down = False
        self.unassigned = False
        self.shared: set[TP] = set()  # partitions the group gave another consumer
        self.missing: str | None = None  # a subscribed topic the broker lacks (deleted)

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        """Like a fetch: records from the partitions in turn, at most ``max_records`` in all."""
        if self.fail_polls:
            self.fail_polls -= 1
            msg = "fake broker down"
            raise BrokerUnavailable(msg)
        out: list[RawRecord] = []
        if self.unassigned:
            return out
        for (t, p), expected in self.pos.items():
            start = self.log.start.get((t, p), 0)
            off = max(expected, start)  # like Kafka's reset to the log start
            take = self.log.topics[t][p][off : off + max_records - len(out)]
            if take:
                self._skips.note((t, p), off, expected, functools.partial(int, start))
            out.extend(RawRecord(t, p, off + i, ts, k, v) for i, (k, v, ts) in enumerate(take))
            self.pos[(t, p)] = off + len(take) if take else expected
        return out

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Store the committed offsets in the log."""
        self.log.committed.update(offsets)

    def committed(self) -> dict[TP, int]:
        """The offsets committed for this source's partitions."""
        return {tp: o for tp, o in self.log.committed.items() if tp in self.pos}

    def seek(self, offsets: Mapping[TP, int]) -> None:
        """Rewind to stored offsets (0 where none)."""
        for tp in self.pos:
            self.pos[tp] = offsets.get(tp, 0)
            self._skips.forget(tp)

    def lag(self) -> dict[TP, int]:
        """Records left per partition."""
        return {(t, p): len(self.log.topics[t][p]) - off for (t, p), off in self.pos.items()}

    def skipped(self) -> dict[TP, int]:
        """Records below the log start the source expected to read, since the last call."""
        return self._skips.take()

    def assigned(self) -> bool:
        """Assigned every partition unless ``unassigned`` is set."""
        return not self.unassigned

    def caught_up(self, topics: Collection[str]) -> bool:
        """Every partition of ``topics`` fully read."""
        return all(v == 0 for (t, _), v in self.lag().items() if t in topics)

    def assignment(self) -> list[TP]:
        """Every partition of the topics but the ``shared`` ones, none while ``unassigned``."""
        return [] if self.unassigned else [tp for tp in self.pos if tp not in self.shared]

    def partitions_for(self, topic: str) -> int:
        """Partitions of a fake topic."""
        return len(self.log.topics.get(topic, [[]]))

    def probe(self, timeout_s: float) -> None:
        """Fails while ``down`` is set (assigned or not, like the real sources).

        While ``missing`` is set, ``TopicsNotReady`` names that topic.
        """
        if self.down:
            msg = "fake broker down"
            raise BrokerUnavailable(msg)
        if self.missing is not None:
            msg = f"subscribed topics missing: {self.missing}"
            raise TopicsNotReady(msg)

    def close(self) -> None:
        """Nothing to release."""


class FakeSink:
    """Appends produced records to a ``FakeLog`` on flush; can be told to fail.

    Delivered records carry the Kafka timestamp ``ts_ms`` (0, none, unless set). A record of
    more than ``max_bytes`` (key and value; no limit when None) is refused as too large, as a
    topic's ``max.message.bytes`` does: its fallback is queued instead.
    """

    def __init__(self, log_: FakeLog) -> None:
        self.log = log_
        self._queue: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.fail_flushes = 0
        self.ts_ms = 0
        self.max_bytes: int | None = None
        self._fallbacks = 0

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        *,
        fallback: bytes | None = None,
    ) -> None:
        """Queue one record (partition 0 unless given), or its fallback when too large.

        Too large without a fallback: ``TopicsNotReady``.
        """
        size = len(key or b"") + len(value or b"")
        if self.max_bytes is not None and size > self.max_bytes:
            if fallback is None:
                msg = f"{topic} refuses a record of about {size} bytes as too large"
                raise TopicsNotReady(msg)
            self._fallbacks += 1
            self.produce(topic, None, fallback, partition)
            return
        self._queue.append((topic, key, value, partition or 0))

    def fallbacks(self) -> int:
        """How many records were queued as their fallback since the last call."""
        n, self._fallbacks = self._fallbacks, 0
        return n

    def flush(self, timeout_s: float) -> None:
        """Deliver the queue, or fail (dropping nothing: the batch will be replayed)."""
        if self.fail_flushes:
            self.fail_flushes -= 1
            self._queue.clear()
            msg = "fake flush failed"
            raise BrokerUnavailable(msg)
        for topic, key, value, partition in self._queue:
            self.log.append(topic, value, key, partition, self.ts_ms)
        self._queue.clear()

    def close(self) -> None:
        """Nothing to release."""


class FakeTopicReader:
    """A ``TopicReader`` over one topic of a ``FakeLog``."""

    def __init__(self, log_: FakeLog, topic: str) -> None:
        self.log = log_
        self.topic = topic
        self._pos: dict[int, int] = {}  # partition -> next index to return

    def read(self, select: Callable[[int], Collection[int]]) -> list[Entry]:
        """Every record of the selected partitions; ``follow`` continues after them."""
        parts = self.log.topics.get(self.topic, [])
        self._pos = {p: 0 for p in sorted(select(len(parts))) if 0 <= p < len(parts)}
        return self.follow()

    def follow(self) -> list[Entry]:
        """The records appended to the selected partitions since the last call."""
        out: list[Entry] = []
        for p, at in self._pos.items():
            part = self.log.topics[self.topic][p]
            out.extend((p, k, v) for k, v, _ in part[at:])
            self._pos[p] = len(part)
        return out

    def close(self) -> None:
        """Nothing to release."""
