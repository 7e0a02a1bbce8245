"""Kafka in and out: the only module that imports kafka-python.

``KafkaSource`` is ONE consumer in group ``kafka.group_id`` subscribed to the scored, requests
and labels topics, with auto-commit off. On every assignment it seeks each partition to the
next offset recorded in the state store (or to the beginning when the store has none: the
state is rebuilt by replaying), so Kafka's committed offsets are only a mirror of the store.
``KafkaSink`` produces requests and dead letters with ``acks=all`` and reports a failed flush.
``FakeLog``/``FakeSource``/``FakeSink`` are in-memory equivalents for tests of the loop.
Security settings (TLS, SASL) pass through from ``kafka.client``; the connection errors
kafka-python logs (a refused login, an untrusted certificate) are noted, never printed, and named
in the ``BrokerUnavailable`` that follows (``monitor.io.client_errors``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import Any, TypeVar

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    TopicAlreadyExistsError,
)
from kafka.structs import OffsetAndMetadata

from monitor.config.kafka_client import (
    COMMIT_TIMEOUT_S,
    METADATA_MAX_AGE_MS,
    RECONNECT_BACKOFF_MAX_MS,
    REQUEST_TIMEOUT_MS,
    kafka_client_options,
)
from monitor.config.schema import Config, TopicsConfig
from monitor.core.messages import RawRecord
from monitor.errors import BrokerUnavailable, ConfigError, TopicsNotReady
from monitor.io.client_errors import RecentErrors, describe, unavailable
from monitor.io.fallback import FallbackSink
from monitor.io.positions import note_beyond_end, note_rewind
from monitor.io.topics import (
    AGGREGATES_TOPIC_CONFIG,
    FLUSH_CHECK_S,
    Queued,
    keep_ms,
    missing_topics,
    refused_topics,
)
from monitor.runtime.ports import TP, Assigned, Entry
from monitor.runtime.skips import Skips

log = logging.getLogger(__name__)


# Consumer fetch sizes (``kafka.client`` may override them): larger fetches, fewer fetch round
# trips per record. Measured by ``benchmarks/throughput.py`` (its ceiling rows).
FETCH_OPTIONS: Mapping[str, Any] = {
    "max_partition_fetch_bytes": 4 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
}
_OFFSET = attrgetter("offset")
_TIMESTAMP = attrgetter("timestamp")
_KEY = attrgetter("key")
_VALUE = attrgetter("value")
# a client that cannot reach any broker gives up after this (kafka-python: 30 s), so the
# daemon's (and the bridge's) own loop retries with backoff and a SIGTERM is served within
# seconds; a bootstrap node that hangs holds the whole bootstrap this long, the others untried
BOOTSTRAP_TIMEOUT_MS = 5_000
# a send waiting for metadata (kafka-python: 60 s); below the daemon's stall (at least 5 s), so
# a topic the broker says is missing is reported as such, not as a step that hangs
MAX_BLOCK_MS = 3_000
# what every kafka-python client of the daemon and the bridge sets: no topic is created by
# asking for it (a broker that allows it, Apache Kafka's default and Tansu, would create it with
# its defaults, no retention or compaction settings; ``new_client`` makes kafka-python honour
# this), and the metadata refresh, reconnect, request and bootstrap bounds above
CLIENT_OPTIONS: Mapping[str, Any] = {
    "allow_auto_create_topics": False,
    "metadata_max_age_ms": METADATA_MAX_AGE_MS,
    "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
    "request_timeout_ms": REQUEST_TIMEOUT_MS,
    "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
}


# every kafka-python client of the process connects to the same brokers with the same settings
CONNECTION_ERRORS = RecentErrors()


class _NoteConnectionErrors(logging.Handler):
    """Notes the exception of each failed connection kafka-python logs (``CONNECTION_ERRORS``)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Note every exception among the record's arguments but the client's own timeout."""
        for arg in record.args if isinstance(record.args, tuple) else ():
            if isinstance(arg, BaseException) and not isinstance(arg, KafkaTimeoutError):
                CONNECTION_ERRORS.note(describe(arg))


# kafka-python (3.0.12) logs why a connection failed here, then raises "Unable to bootstrap";
# these lines only feed CONNECTION_ERRORS (the daemon logs a state change once, with the cause)
_NET_LOG = logging.getLogger("kafka.net.manager")
_NET_LOG.setLevel(logging.WARNING)
_NET_LOG.propagate = False
_NET_LOG.addHandler(_NoteConnectionErrors(logging.WARNING))


def _unavailable(what: str, exc: BaseException, client: Mapping[str, Any]) -> BrokerUnavailable:
    """``what`` failed on ``exc``, with the recent connection error and what to check for it."""
    return unavailable(what, exc, CONNECTION_ERRORS, client)


class _Seeker(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"event": "partitions_revoked", "n": len(revoked)})

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self.source.seek_assigned(assigned)


_Client = TypeVar("_Client")


def new_client(factory: Callable[..., _Client], options: Mapping[str, Any], what: str) -> _Client:
    """``factory(**options)``; settings kafka-python refuses are a ``ConfigError`` (exit 2).

    ``kafka.client`` is checked for known keys and types only: a value kafka-python refuses
    (``compression_type: zzz``, a ``request_timeout_ms`` below what another setting needs) was
    retried as a broker outage forever, or crashed the process.
    """
    try:
        client = factory(**options)
    except (KafkaConfigurationError, ValueError) as exc:
        msg = f"kafka.client: kafka-python refused the {what} settings: {exc}"
        raise ConfigError(msg) from exc
    if options.get("allow_auto_create_topics") is False:
        _never_create_topics(client)
    return client


def absent_topics(
    client: KafkaConsumer | KafkaProducer, topics: Iterable[str], since_s: float = 0.0
) -> list[str]:
    """The topics of ``topics`` that ``client``'s metadata cache says the broker lacks.

    Read with no request. kafka-python asks again within 100 ms while a topic its consumer is
    subscribed to, or its producer writes to, is unknown (else every ``metadata_max_age_ms``).
    Never one of the topics the broker refuses to describe to this client (not authorized:
    ``monitor.io.topics.refused_topics``). Empty before any metadata arrived (no broker known
    yet), and until the cache was refreshed after ``since_s`` (``time.monotonic``): for a
    consumer, when it subscribed; for a producer, when the write that failed began. An earlier
    answer listed every topic (kafka-python's bootstrap, ``partitions_for_topic``), and such a
    listing leaves out the topics the ACLs refuse without a word: a refused requests topic read
    as missing at first.
    """
    cluster = _metadata(client)
    if not cluster.brokers() or cluster._last_successful_refresh_ms < since_s * 1000.0:
        return []
    refused = cluster.unauthorized_topics
    return [t for t in topics if not cluster.partitions_for_topic(t) and t not in refused]


def unauthorized_topics(client: KafkaConsumer | KafkaProducer, topics: Iterable[str]) -> list[str]:
    """The topics of ``topics`` the broker's ACLs do not let ``client`` describe.

    Read from its metadata cache, with no request. A consumer gets no record of such a topic and
    kafka-python says nothing (``monitor.io.topics.refused_topics``).
    """
    refused = _metadata(client).unauthorized_topics
    return [t for t in topics if t in refused]


def _metadata(client: KafkaConsumer | KafkaProducer) -> Any:
    """``client``'s metadata cache (kafka-python 3.0.12 has no public accessor).

    A producer's ``_metadata``, a consumer's network client's ``cluster``.
    """
    return client._metadata if hasattr(client, "_metadata") else client._client.cluster


def _never_create_topics(client: KafkaConsumer | KafkaProducer) -> None:
    """Make the metadata requests of a new ``client`` ask the broker to create no topic.

    kafka-python (3.0.12) accepts ``allow_auto_create_topics`` but builds the metadata cache that
    makes the requests without it, so each request allowed the broker to create the topics it
    names: Apache Kafka with its default ``auto.create.topics.enable=true`` made a deleted
    labels or dead-letter topic again, with its own defaults
    (``tests/contract/test_kafka_io.py``). Set here before any request names a topic.
    """
    _metadata(client).config["allow_auto_create_topics"] = False


class KafkaSource:
    """One consumer over the daemon's input topics (see module docstring).

    ``topics`` and ``group_id`` default to the ``--role all`` ones (scored, requests, labels in
    ``kafka.group_id``). With ``on_assigned`` the source does not seek on an assignment: it
    calls ``on_assigned`` with the partitions and they resume at the group's committed offsets
    (a sampler rebuilds its state there, see ``monitor.runtime.sampler_role``).
    """

    def __init__(
        self,
        config: Config,
        stored_offsets: Callable[[], Mapping[TP, int]],
        *,
        topics: Sequence[str] | None = None,
        group_id: str | None = None,
        on_assigned: Assigned | None = None,
    ) -> None:
        self.config = config
        self._stored = stored_offsets
        self._on_assigned = on_assigned
        self._next: dict[TP, int] = {}
        self._ends: dict[TP, int] = {}  # end offsets from the last probe
        self._beyond: dict[TP, float] = {}  # a next offset past the end: since when
        self._skips = Skips()
        kc = config.kafka
        options: dict[str, Any] = {
            "bootstrap_servers": list(kc.bootstrap_servers),
            "group_id": group_id or kc.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            **FETCH_OPTIONS,
            # a topic deleted or never created stays missing (``probe``)
            **CLIENT_OPTIONS,
            "max_poll_records": kc.max_poll_records,
        }
        options.update(kafka_client_options(kc, "consumer"))
        try:
            self._consumer = new_client(KafkaConsumer, options, "consumer")
            t = kc.topics
            subscribed = list(topics or (t.scored, t.requests, t.labels))
            self._subscribed = tuple(dict.fromkeys(subscribed))
            self._liveness = TopicPartition(subscribed[0], 0)
            # Know the topics' partitions before the first JoinGroup. Apache Kafka answers that
            # join before a fresh consumer's metadata arrives, so the leader's range assignor
            # assigned nothing and the metadata then forced a second rebalance; kafka-python
            # (3.0.12) drops the assignment of such a rebalance when a poll times out during its
            # SyncGroup, and the consumer sat with no partitions (tests/contract, on Kafka).
            for topic in subscribed:
                self._consumer.partitions_for_topic(topic)
            self._subscribed_at = time.monotonic()  # ``_missing``
            self._consumer.subscribe(subscribed, listener=_Seeker(self))
        except KafkaError as exc:
            msg = "cannot connect the consumer"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc

    def _resume_pending_join(self) -> None:
        """Finish a rebalance that kafka-python (3.0.12) would otherwise abandon.

        A poll that times out during a JoinGroup/SyncGroup leaves the attempt in flight for the
        next poll, which only resumes it while the coordinator says a rejoin is needed. After a
        rebalance that a metadata change started, the group leader already counts the new
        metadata as assigned, so it says none is: the attempt is dropped and the consumer keeps
        no partitions (seen on Apache Kafka, whose joins are fast). Asking for the rejoin again
        makes the next poll complete it.
        """
        coordinator: Any = getattr(self._consumer, "_coordinator", None)
        if getattr(coordinator, "_join_task", None) is not None and not coordinator.need_rejoin():
            log.info("resuming a rebalance", extra={"event": "rebalance_resumed"})
            coordinator.request_rejoin()

    def seek_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        """Seek newly assigned partitions to the stored offsets (beginning when none)."""
        if self._on_assigned is not None:
            for tp in assigned:
                self._next.pop((tp.topic, tp.partition), None)
            self._on_assigned([(tp.topic, tp.partition) for tp in assigned])
        else:
            self._seek(assigned, self._stored())
        log.info("partitions assigned", extra={"event": "partitions_assigned", "n": len(assigned)})

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        """Poll once; records in offset order per partition."""
        self._resume_pending_join()
        try:
            polled = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except KafkaError as exc:
            msg = "poll failed"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc
        out: list[RawRecord] = []
        for tp, recs in polled.items():
            if not recs:
                continue
            # one tuple per record, built by C-level iteration (no Python loop per record)
            out.extend(
                map(
                    RawRecord._make,
                    zip(
                        repeat(tp.topic),
                        repeat(tp.partition),
                        map(_OFFSET, recs),
                        map(int, map(_TIMESTAMP, recs)),
                        map(_KEY, recs),
                        map(_VALUE, recs),
                    ),
                )
            )
            key = (tp.topic, tp.partition)
            note_rewind(key, recs[0].offset, self._next.get(key))
            self._skips.note(key, recs[0].offset, self._next.get(key), partial(self._start, tp))
            self._next[key] = recs[-1].offset + 1
        return out

    def _start(self, tp: TopicPartition) -> int:
        """The partition's log start offset (its first record still on the broker)."""
        try:
            return int(self._consumer.beginning_offsets([tp])[tp])
        except KafkaError as exc:
            msg = "cannot fetch the log start offset"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc

    def skipped(self) -> dict[TP, int]:
        """Records deleted before they were read, per partition, since the last call."""
        return self._skips.take()

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit next offsets to the group (a mirror of the store)."""
        if not offsets:
            return
        meta = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        try:
            self._consumer.commit(offsets=meta, timeout_ms=int(COMMIT_TIMEOUT_S * 1000))
        except KafkaError as exc:
            msg = "offset commit failed"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc

    def committed(self) -> dict[TP, int]:
        """The group's committed next offsets of the assigned partitions (where committed)."""
        out: dict[TP, int] = {}
        try:
            for tp in self._consumer.assignment():
                off = self._consumer.committed(tp)
                if off is not None:
                    out[(tp.topic, tp.partition)] = int(off)
        except KafkaError as exc:
            msg = "cannot fetch committed offsets"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc
        return out

    def seek(self, offsets: Mapping[TP, int]) -> None:
        """Seek assigned partitions back to ``offsets`` (beginning for those absent)."""
        self._seek(self._consumer.assignment(), offsets)

    def _seek(self, partitions: Iterable[TopicPartition], offsets: Mapping[TP, int]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            off = offsets.get(key)
            self._skips.forget(key)
            if off is None:
                self._consumer.seek_to_beginning(tp)
                self._next.pop(key, None)
            else:
                self._consumer.seek(tp, off)
                self._next[key] = off

    def lag(self) -> dict[TP, int]:
        """High watermark minus next offset, for partitions where both are known.

        The next offset is the consumer's position when that is further: a transactional
        producer's commit marker takes an offset but is never returned as a record, so after the
        last record of a transaction the next offset alone would leave a lag of 1 for good.
        """
        out: dict[TP, int] = {}
        positions = self._positions()
        for tp in self._consumer.assignment():
            hw = self._consumer.highwater(tp)
            if hw is None:
                hw = self._ends.get((tp.topic, tp.partition))
            nxt = self._next.get((tp.topic, tp.partition))
            if hw is not None and nxt is not None:
                pos = positions.get((tp.topic, tp.partition))
                nxt = max(nxt, -1 if pos is None else pos)
                note_beyond_end((tp.topic, tp.partition), int(hw), nxt, self._beyond, position=pos)
                out[(tp.topic, tp.partition)] = max(0, int(hw) - nxt)
            elif hw is not None and int(hw) == 0:
                out[(tp.topic, tp.partition)] = 0
        return out

    def _positions(self) -> dict[TP, int]:
        """The consumer's positions as they stand, with no request sent.

        ``KafkaConsumer.position`` may refresh committed offsets and validate the position
        against the leader epoch first; called once per step, fetching stalled on Apache Kafka
        (the throughput benchmark stopped mid-topic), so kafka-python's subscription state is
        read instead (empty if its layout ever changes: the lag then ignores commit markers).
        """
        try:
            consumed = self._consumer._subscription.all_consumed_offsets()
            return {(tp.topic, tp.partition): int(om.offset) for tp, om in consumed.items()}
        except Exception:  # a private structure of kafka-python
            return {}

    def assigned(self) -> bool:
        """Whether the group gave this consumer any partition."""
        return bool(self._consumer.assignment())

    def caught_up(self, topics: Collection[str]) -> bool:
        """Every assigned partition of ``topics`` has a known lag of 0.

        Not caught up while unassigned (e.g. during a rebalance) or while a lag is unknown.
        """
        parts = [(tp.topic, tp.partition) for tp in self._consumer.assignment()]
        if not parts:
            return False
        lag = self.lag()
        return all(lag.get(tp) == 0 for tp in parts if tp[0] in topics)

    def assignment(self) -> list[TP]:
        """The partitions the group assigned this consumer."""
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def partitions_for(self, topic: str) -> int:
        """Number of partitions of ``topic`` (1 when unknown)."""
        try:
            parts = self._consumer.partitions_for_topic(topic)
        except KafkaError as exc:
            msg = "cannot read topic metadata"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc
        return len(parts) if parts else 1

    def _missing(self) -> list[str]:
        """The subscribed topics that the consumer's metadata cache says do not exist.

        ``absent_topics``, with no request, whereas ``KafkaConsumer.partitions_for_topic`` fetches
        every topic's metadata, blocking, when it does not know one.
        """
        return absent_topics(self._consumer, self._subscribed, self._subscribed_at)

    def probe(self, timeout_s: float) -> None:
        """Fetch the end offsets of the assigned partitions (also refreshes the lag).

        Given no partition (a standby sampler, or a member whose membership lapsed), the end
        offset of the first subscribed topic's partition 0 is asked instead: an idle standby
        would otherwise notice no outage and stay ready through it. A subscribed topic that does
        not exist, or that the broker refuses to this client, is ``TopicsNotReady``
        (``missing_topics``, ``refused_topics``): the group just assigns nothing of it.
        """
        missing = self._missing()
        if missing:
            raise missing_topics(self.config, missing, self.partitions_for)
        refused = unauthorized_topics(self._consumer, self._subscribed)
        if refused:  # the broker's ACLs: it assigns nothing of them, and kafka-python is silent
            raise refused_topics(self.config, refused)
        parts = list(self._consumer.assignment())
        try:
            ends = self._consumer.end_offsets(
                parts or [self._liveness], timeout_ms=int(timeout_s * 1000)
            )
        except KafkaError as exc:
            msg = "broker did not answer"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc
        if parts:
            self._ends = {(tp.topic, tp.partition): int(o) for tp, o in ends.items()}

    def close(self) -> None:
        """Leave the group (no auto-commit: offsets were committed explicitly)."""
        with contextlib.suppress(KafkaError):
            self._consumer.close(autocommit=False)


class KafkaSink(FallbackSink):
    """An idempotent producer with ``acks=all``; ``flush`` raises ``BrokerUnavailable`` on failure.

    kafka-python (3.0) is idempotent by default but turns that off, with only a warning in its
    own log, when ``kafka.client`` sets ``retries: 0`` or more than 5 requests in flight; then a
    batch retried after a leader change (NOT_LEADER, a lost connection) can be written twice.
    Asked for explicitly, such a setting is refused: a ``ConfigError`` (exit 2) at the start.

    A topic it writes to that the broker says does not exist (deleted, or never created) is
    ``TopicsNotReady``, naming it and how to create it (``monitor.io.topics.missing_topics``):
    a send would wait for its metadata and a flush for records the producer retries, both
    until they timed out as a broker outage. The producer never asks the broker to create a
    topic (a broker allowing it would, with its own defaults: no retention settings).

    A record the broker refuses as too large (the topic's ``max.message.bytes``; or above the
    producer's ``max_request_size``) is written as its ``fallback`` instead (counted,
    ``fallbacks``); without one it is ``TopicsNotReady`` naming the topic and the setting
    (``monitor.io.topics.too_large``): no retry can write it, and it is no broker outage.

    Any other failure replaces the producer before the next record: kafka-python's idempotent
    producer refused a producer id (no Write on any topic yet: ACLs granted after the start)
    stays failed for good, and every later flush failed minutes after the grant. What the
    failed step had queued is dropped with it; the daemon retries the step, which queues it
    again.
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        options: dict[str, Any] = {
            "bootstrap_servers": list(config.kafka.bootstrap_servers),
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 5,
            **CLIENT_OPTIONS,
            "max_block_ms": MAX_BLOCK_MS,
        }
        options.update(kafka_client_options(config.kafka, "producer"))
        self._config = config
        self._settings = config.kafka.client
        self._options = options
        self._producer = self._connect()
        self._failed_producer = False  # replaced before the next record (``_broken``)
        self._pending: list[tuple[Any, Queued]] = []  # each record's future, and the record
        self._topics: set[str] = set()  # the topics of the pending records
        self._missing: set[str] = set()  # the topics found missing, until they exist

    def _connect(self) -> KafkaProducer:
        try:
            return new_client(KafkaProducer, self._options, "producer")
        except KafkaError as exc:
            msg = "cannot connect the producer"
            raise _unavailable(msg, exc, self._settings) from exc

    def _broken(self, error: BrokerUnavailable) -> BrokerUnavailable:
        """``error``, after which the producer is replaced.

        Not when a topic is missing: the producer's metadata cache says when it is back.
        """
        self._failed_producer = not isinstance(error, TopicsNotReady)
        return error

    def _failed(
        self, what: str, exc: BaseException, topics: Iterable[str], since_s: float
    ) -> BrokerUnavailable:
        """``TopicsNotReady`` if the broker said since ``since_s`` it lacks one of ``topics``.

        Read from the producer's metadata cache, with no request: refreshed after ``since_s``
        (monotonic; the broker answered), without partitions for the topic and not refused to
        this client. kafka-python refreshes it at once after a write to an unknown topic.
        Otherwise the ``BrokerUnavailable`` of ``exc``.
        """
        self._missing = set(absent_topics(self._producer, topics, since_s))
        if self._missing:
            return self._missing_error()
        return _unavailable(what, exc, self._settings)

    def _missing_error(self) -> TopicsNotReady:
        """The error naming the topics found missing and how to create them."""
        return missing_topics(self._config, self._missing, self._partitions, written=True)

    def _partitions(self, topic: str) -> int:
        """Partitions of ``topic`` in the producer's metadata cache (1 when unknown)."""
        return len(_metadata(self._producer).partitions_for_topic(topic) or ()) or 1

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        *,
        fallback: bytes | None = None,
    ) -> None:
        """Queue one record (to ``partition``, or by key hash when None).

        Nothing is queued while a topic found missing still is: a step retried until it is
        created would write its other records again each time. A record refused as too large
        is written as ``fallback`` (with no key) instead.
        """
        if self._missing:
            self._missing = set(absent_topics(self._producer, self._missing))
            if self._missing:
                raise self._missing_error()
        if self._failed_producer:
            self._pending, self._topics = [], set()
            with contextlib.suppress(KafkaError):
                self._producer.close(timeout=0)
            self._producer = self._connect()
            self._failed_producer = False
        since = time.monotonic()
        sent = Queued(topic, key, value, partition, fallback)
        try:
            fut = self._producer.send(topic, key=key, value=value, partition=partition)
        except MessageSizeTooLargeError as exc:  # above the producer's max_request_size
            self._instead(sent, exc)
            return
        except KafkaError as exc:
            msg = f"produce to {topic} failed"
            raise self._broken(self._failed(msg, exc, [topic], since)) from exc
        except ValueError as exc:  # a partition added since the producer's last metadata
            msg = f"produce to {topic} failed (partitions added? metadata refreshes within 10 s)"
            raise _unavailable(msg, exc, self._settings) from exc
        self._pending.append((fut, sent))
        self._topics.add(topic)

    def flush(self, timeout_s: float) -> None:
        """Wait for every acknowledgement, asking every ``FLUSH_CHECK_S`` for missing topics."""
        pending, self._pending = self._pending, []
        topics, self._topics = self._topics, set()
        if not pending:
            return  # nothing queued since the last flush: no round trip to the sender thread
        since = time.monotonic()
        while (left := since + timeout_s - time.monotonic()) > 0.0:
            try:
                self._producer.flush(timeout=min(FLUSH_CHECK_S, left))
                break
            except KafkaTimeoutError as exc:
                failed = self._failed("flush failed", exc, topics, since)
                if isinstance(failed, TopicsNotReady):
                    raise failed from exc
            except KafkaError as exc:
                msg = "flush failed"
                raise self._broken(_unavailable(msg, exc, self._settings)) from exc
        refused: list[tuple[Queued, BaseException]] = []
        for fut, sent in pending:
            if fut.is_done and isinstance(fut.exception, MessageSizeTooLargeError):
                refused.append((sent, fut.exception))
            elif not fut.is_done or fut.failed():
                cause = fut.exception or TimeoutError(f"not acknowledged in {timeout_s:.0f} s")
                msg = "produce not acknowledged"
                raise self._broken(self._failed(msg, cause, topics, since))
        if refused:
            # kafka-python (3.0.12) takes a record refused as too large for a fatal error of its
            # idempotent producer: every other record queued with it fails with the same error,
            # and so would every later one. The producer is replaced.
            self._failed_producer = True
            self._write_refused(refused, alone=len(pending) == 1, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the producer (bounded)."""
        with contextlib.suppress(KafkaError):
            self._producer.close(timeout=5)


def create_topics(config: Config, scored_partitions: int = 1) -> list[str]:
    """Create the daemon's topics if absent; returns the names created.

    The requests and labels topics keep their records for 30 days or twice the label deadline,
    whichever is longer (``monitor.io.topics.keep_ms``). Each topic gets
    ``kafka.replication_factor`` replicas (the broker's default when unset). The admin client
    gives up on a broker that does not answer as the daemon's other clients do (kafka-python's
    own 30 s held a SIGTERM at the start of ``--create-topics`` for 26 s).
    """
    timeouts = {
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
    }
    return ensure_topics(
        list(config.kafka.bootstrap_servers),
        config.kafka.topics,
        scored_partitions,
        {**timeouts, **kafka_client_options(config.kafka, "admin")},
        retention_ms=keep_ms(config),
        replication_factor=config.kafka.replication_factor,
    )


def ensure_topics(
    bootstrap: str | list[str],
    topics: TopicsConfig,
    partitions: int = 1,
    client_options: Mapping[str, Any] | None = None,
    *,
    retention_ms: int | None = None,
    replication_factor: int | None = None,
) -> list[str]:
    """Create whichever of ``topics`` is absent; returns the names created.

    The scored topic gets ``partitions`` partitions, the others one (Tansu would default to
    three), but the aggregates topic as many as the scored topic has (scored partition ``p``'s
    buckets go to aggregates partition ``p``: a sampler refuses a scored partition without its
    own, ``SamplerEngine._check_homes``); it is compacted
    (``AGGREGATES_TOPIC_CONFIG``). ``retention_ms``: the requests and labels topics' retention
    (the broker's ``log.retention.*`` when None); ``replication_factor``: every topic's replicas
    (the broker's ``default.replication.factor`` when None).
    """
    try:
        options = {"bootstrap_servers": bootstrap, **(client_options or {})}
        admin = new_client(KafkaAdminClient, options, "admin client")
    except KafkaError as exc:
        msg = "cannot connect the admin client"
        raise _unavailable(msg, exc, client_options or {}) from exc
    created: list[str] = []
    replicas = -1 if replication_factor is None else replication_factor  # -1: the broker's
    try:
        existing = set(admin.list_topics())
        scored = partitions
        if topics.scored in existing:
            (found,) = admin.describe_topics([topics.scored])
            scored = len(found["partitions"]) or partitions
        for name, parts in (
            (topics.scored, partitions),
            (topics.requests, 1),
            (topics.labels, 1),
            (topics.deadletter, 1),
            (topics.aggregates, scored),
        ):
            if name in existing:
                continue
            conf: dict[str, str] | None = None
            if name == topics.aggregates:
                conf = dict(AGGREGATES_TOPIC_CONFIG)
            elif name in (topics.requests, topics.labels) and retention_ms is not None:
                conf = {"retention.ms": str(retention_ms)}
            try:
                admin.create_topics([NewTopic(name, parts, replicas, topic_configs=conf)])
                created.append(name)
            except TopicAlreadyExistsError:
                pass
    except KafkaError as exc:
        msg = "cannot create topics"
        raise _unavailable(msg, exc, client_options or {}) from exc
    finally:
        admin.close()
    return created


READ_IDLE_S = 0.3  # a read to the end stops after a poll this long brings nothing


class KafkaTopicReader:
    """A ``TopicReader``: a consumer outside any group over some partitions of one topic.

    ``read`` assigns the partitions ``select(n)`` (n partitions), reads them from the beginning
    to the end offsets taken at the start, then until a poll brings nothing for ``READ_IDLE_S``
    (a broker may report the end of its last batch approximately); ``follow`` then returns what
    was appended since, without waiting. A broker error is ``BrokerUnavailable`` (the next
    ``read`` starts again with a new consumer).
    """

    def __init__(self, config: Config, topic: str) -> None:
        self.config = config
        self.topic = topic
        self._consumer: KafkaConsumer | None = None

    def _open(self) -> KafkaConsumer:
        options: dict[str, Any] = {
            "bootstrap_servers": list(self.config.kafka.bootstrap_servers),
            "group_id": None,
            "enable_auto_commit": False,
            **FETCH_OPTIONS,
            **CLIENT_OPTIONS,  # as KafkaSource: never a non-compacted topic
        }
        options.update(kafka_client_options(self.config.kafka, "consumer"))
        return new_client(KafkaConsumer, options, "consumer")

    def read(self, select: Callable[[int], Collection[int]]) -> list[Entry]:
        """Every record of the partitions ``select(n)`` of the topic, in log order."""
        out: list[Entry] = []
        try:
            if self._consumer is None:
                self._consumer = self._open()
            consumer = self._consumer
            n = len(consumer.partitions_for_topic(self.topic) or ())
            parts = [TopicPartition(self.topic, p) for p in sorted(select(n)) if 0 <= p < n]
            if not parts:
                self.close()
                return out
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            ends = consumer.end_offsets(parts)
            while True:
                polled = consumer.poll(timeout_ms=int(READ_IDLE_S * 1000), max_records=10_000)
                for tp, recs in polled.items():
                    out.extend((tp.partition, r.key, r.value) for r in recs)
                if not polled and all(consumer.position(tp) >= ends[tp] for tp in parts):
                    return out
        except KafkaError as exc:
            self.close()
            msg = f"cannot read {self.topic}"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc

    def follow(self) -> list[Entry]:
        """The records appended to the partitions of the last ``read`` since then."""
        if self._consumer is None:
            return []
        try:
            polled = self._consumer.poll(timeout_ms=0, max_records=10_000)
        except KafkaError as exc:
            self.close()
            msg = f"cannot read {self.topic}"
            raise _unavailable(msg, exc, self.config.kafka.client) from exc
        return [(tp.partition, r.key, r.value) for tp, recs in polled.items() for r in recs]

    def close(self) -> None:
        """Close the consumer (a later ``read`` opens a new one)."""
        if self._consumer is not None:
            with contextlib.suppress(KafkaError):
                self._consumer.close(autocommit=False)
            self._consumer = None


def read_topic(config: Config, topic: str, select: Callable[[int], Collection[int]]) -> list[Entry]:
    """Every record of the partitions ``select(n)`` of ``topic`` (n partitions), in log order.

    Returns (partition, key, value) triples (``KafkaTopicReader.read``).
    """
    reader = KafkaTopicReader(config, topic)
    try:
        return reader.read(select)
    finally:
        reader.close()
