"""Kafka in and out through confluent-kafka (librdkafka): ``kafka.client_library: confluent-kafka``.

The same source and sink as ``monitor.io.kafka_io`` (same semantics, same contract tests), for the
optional extra ``activeaudit-monitor[confluent]``: librdkafka fetches and parses in C threads, so
a poll costs a fraction of kafka-python's CPU (``benchmarks/throughput.py``). ``kafka.client``
keeps kafka-python's names; ``monitor.config.confluent_client_options`` translates them. Topic
creation and the samplers' read-back of the aggregates topic stay on kafka-python (low volume).

Settings librdkafka refuses when a client is made (a misspelt ``security_protocol``, SASL without
a user) are a ``ConfigError``, as with kafka-python. Each client's errors (``error_cb``: a refused
login, an untrusted certificate) are named in the ``BrokerUnavailable`` that follows
(``monitor.io.client_errors``); librdkafka's own log lines go through the JSON log, each
distinct line at most once a minute (it logs every failed attempt, up to ~20 a second).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from monitor.config.kafka_client import (
    COMMIT_TIMEOUT_S,
    METADATA_MAX_AGE_MS,
    RECONNECT_BACKOFF_MAX_MS,
    REQUEST_TIMEOUT_MS,
    confluent_client_options,
)
from monitor.config.schema import Config
from monitor.core.messages import RawRecord
from monitor.errors import BrokerUnavailable, ConfigError, TopicsNotReady
from monitor.io.client_errors import RecentErrors, unavailable
from monitor.io.fallback import FallbackSink
from monitor.io.positions import note_beyond_end, note_rewind
from monitor.io.topics import FLUSH_CHECK_S, Queued, missing_topics, refused_topics
from monitor.runtime.ports import TP, Assigned
from monitor.runtime.skips import Skips

log = logging.getLogger(__name__)

_SECOND = operator.itemgetter(1)
_NEXT = functools.partial(operator.add, 1)
METADATA_TIMEOUT_S = 5.0
REPEAT_S = 60.0  # a librdkafka log line repeated within this is dropped
_NUMBERS = re.compile(r"\d+")


class _Repeats(logging.Filter):
    """Drops a line logged within ``REPEAT_S`` before (lines differing only in numbers: one)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record is new, or last passed ``REPEAT_S`` ago."""
        now = time.monotonic()
        key = _NUMBERS.sub("N", record.getMessage())
        if now - self._last.get(key, -REPEAT_S) < REPEAT_S:
            return False
        if len(self._last) > 1000:  # forget the lines too old to hold anything back
            self._last = {k: t for k, t in self._last.items() if now - t < REPEAT_S}
        self._last[key] = now
        return True


_LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
_LIBRDKAFKA_LOG.addFilter(_Repeats())

_Client = TypeVar("_Client", Consumer, Producer)


def _client(
    factory: Callable[[dict[str, Any]], _Client], settings: dict[str, Any], what: str
) -> _Client:
    """``factory(settings)``; settings librdkafka refuses are a ``ConfigError`` (exit 2).

    A new client does not connect yet: an invalid value is the only thing it reports, and
    retrying it as a broker outage would never end.
    """
    try:
        return factory(settings)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError._INVALID_ARG:
            msg = f"kafka.client: librdkafka refused the {what} settings: {err.str()}"
            raise ConfigError(msg) from exc
        raise


_UNKNOWN = frozenset(
    (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)
)


_REFUSED = KafkaError.TOPIC_AUTHORIZATION_FAILED


def _unknown(exc: KafkaException | KafkaError) -> bool:
    """Whether librdkafka failed on a partition or topic it does not know (maybe deleted)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    return isinstance(err, KafkaError) and err.code() in _UNKNOWN


def _partition_count(found: Any) -> int:
    """The partitions of a ``TopicMetadata`` (1 when there is none, or it has none)."""
    return len(found.partitions) if found is not None and found.partitions else 1


class ConfluentSource:
    """One consumer over the daemon's input topics (see ``monitor.io.kafka_io.KafkaSource``)."""

    def __init__(
        self,
        config: Config,
        stored_offsets: Callable[[], Mapping[TP, int]],
        *,
        topics: Sequence[str] | None = None,
        group_id: str | None = None,
        on_assigned: Assigned | None = None,
    ) -> None:
        kc = config.kafka
        self._config = config
        self._stored = stored_offsets
        self._on_assigned = on_assigned
        self._next: dict[TP, int] = {}
        self._ends: dict[TP, int] = {}
        self._beyond: dict[TP, float] = {}  # a next offset past the end: since when
        self._skips = Skips()
        self._committing: threading.Thread | None = None  # a commit left unanswered (``commit``)
        self._settings = kc.client
        self._errors = RecentErrors()
        settings: dict[str, Any] = {
            "bootstrap.servers": ",".join(kc.bootstrap_servers),
            "group.id": group_id or kc.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # a fetch waits at most this long for data (librdkafka: 500): requests go out a
            # few hundred ms sooner; an idle consumer sends ten fetches a second
            "fetch.wait.max.ms": 100,
            "auto.offset.reset": "earliest",
            # partitions added to a subscribed topic are consumed within this (librdkafka: 5 min)
            "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "logger": _LIBRDKAFKA_LOG,  # librdkafka's own log lines, through the JSON log
            "error_cb": self._note,
            **confluent_client_options(kc, "consumer"),
        }
        t = kc.topics
        subscribed = list(dict.fromkeys(topics or (t.scored, t.requests, t.labels)))
        self._subscribed = frozenset(subscribed)
        self._missing: set[str] = set()  # subscribed topics librdkafka reported unknown
        self._refused: set[str] = set()  # subscribed topics the broker's ACLs refused
        self._group = settings["group.id"]
        self._liveness = TopicPartition(subscribed[0], 0)
        try:
            self._consumer = _client(Consumer, settings, "consumer")
            self._consumer.subscribe(
                subscribed,
                on_assign=self._assign,
                on_revoke=self._revoke,
            )
        except KafkaException as exc:
            msg = "cannot connect the consumer"
            raise self._unavailable(msg, exc) from exc

    def _note(self, err: KafkaError) -> None:
        """The ``error_cb`` of librdkafka: a client error, e.g. a refused login."""
        self._errors.note(err.str())

    def _unavailable(self, what: str, exc: BaseException) -> BrokerUnavailable:
        return unavailable(what, exc, self._errors, self._settings)

    def _serve_errors(self) -> None:
        """Hand librdkafka's pending errors to ``error_cb`` now, while no partition is assigned.

        librdkafka queues them for the next poll, after the failed metadata or offsets request
        has raised; unassigned, a poll cannot return (and so lose) a record.
        """
        if not self._consumer.assignment():
            with contextlib.suppress(KafkaException, RuntimeError):
                event = self._consumer.poll(0)
                if event is not None and event.error() is not None:
                    self._without_errors([event])

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Rebalance callback: seek to the stored offsets, or let a sampler rebuild first."""
        if self._on_assigned is not None:
            for tp in partitions:
                self._next.pop((tp.topic, tp.partition), None)
            self._on_assigned([(tp.topic, tp.partition) for tp in partitions])
        else:
            self._place(partitions, self._stored())
        consumer.assign(partitions)
        log.info(
            "partitions assigned", extra={"event": "partitions_assigned", "n": len(partitions)}
        )

    def _place(self, partitions: list[TopicPartition], offsets: Mapping[TP, int]) -> None:
        """Set each partition's start to ``offsets`` (the beginning where absent)."""
        for tp in partitions:
            key = (tp.topic, tp.partition)
            off = offsets.get(key)
            self._skips.forget(key)
            tp.offset = OFFSET_BEGINNING if off is None else off
            if off is None:
                self._next.pop(key, None)
            else:
                self._next[key] = off

    @staticmethod
    def _revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("partitions revoked", extra={"event": "partitions_revoked", "n": len(partitions)})

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]:
        """Poll once; records in offset order per partition."""
        try:
            msgs: list[Message] = self._consumer.consume(
                num_messages=max_records, timeout=timeout_s
            )
        except KafkaException as exc:
            msg = "poll failed"
            raise self._unavailable(msg, exc) from exc
        if any(map(Message.error, msgs)):
            msgs = self._without_errors(msgs)
        if not msgs:
            return []
        # records (not error events) always carry these: typed as such for the zips below
        topics = cast("list[str]", list(map(Message.topic, msgs)))
        partitions = cast("list[int]", list(map(Message.partition, msgs)))
        offsets = cast("list[int]", list(map(Message.offset, msgs)))
        keys = list(zip(topics, partitions, strict=True))
        for key, first in dict(zip(reversed(keys), reversed(offsets), strict=True)).items():
            note_rewind(key, first, self._next.get(key))  # each partition's first offset
            self._skips.note(key, first, self._next.get(key), functools.partial(self._start, key))
        self._next.update(zip(keys, map(_NEXT, offsets), strict=True))
        return list(
            map(
                RawRecord._make,
                zip(
                    topics,
                    partitions,
                    offsets,
                    map(_SECOND, map(Message.timestamp, msgs)),
                    map(Message.key, msgs),
                    map(Message.value, msgs),
                    strict=True,
                ),
            )
        )

    def _start(self, key: TP) -> int:
        """The partition's log start offset (its first record still on the broker)."""
        try:
            low, _ = self._consumer.get_watermark_offsets(
                TopicPartition(*key), timeout=METADATA_TIMEOUT_S, cached=False
            )
        except KafkaException as exc:
            msg = "cannot fetch the log start offset"
            raise self._unavailable(msg, exc) from exc
        return int(low)

    def skipped(self) -> dict[TP, int]:
        """Records deleted before they were read, per partition, since the last call."""
        return self._skips.take()

    def _without_errors(self, msgs: list[Message]) -> list[Message]:
        """Drop error events (logged); a fatal one means the client is gone.

        A subscribed topic that does not exist is noted for ``probe`` instead of logged:
        librdkafka says so once, when its metadata (refreshed every ``METADATA_MAX_AGE_MS``)
        first lacks the topic, and the daemon logs ``topics_not_ready`` for it.
        """
        for m in msgs:
            err = m.error()
            if err is None:
                continue
            if err.fatal():
                msg = "consumer failed"
                raise self._unavailable(msg, KafkaException(err))
            topic = m.topic()
            if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and topic in self._subscribed:
                self._missing.add(topic)
            elif err.code() == _REFUSED and topic in self._subscribed:
                self._refused.add(topic)
            elif err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:  # no partition will come
                msg = f"consumer group {self._group} refused"
                raise self._unavailable(msg, KafkaException(err))
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning(
                    "consumer error event", extra={"event": "consumer_error", "error": str(err)}
                )
        return [m for m in msgs if m.error() is None]

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit next offsets to the group, waiting ``COMMIT_TIMEOUT_S`` at most.

        librdkafka's synchronous commit has no timeout, so it runs on a thread of its own; one
        left unanswered is not waited for again, and the commits after it are skipped until it
        returns (the store holds the offsets: the group's copy catches up at the next one).
        """
        if not offsets or (self._committing is not None and self._committing.is_alive()):
            return
        failed: list[KafkaException] = []

        def commit() -> None:
            try:
                self._consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                    asynchronous=False,
                )
            except KafkaException as exc:
                failed.append(exc)

        thread = threading.Thread(target=commit, name="offset-commit", daemon=True)
        thread.start()
        thread.join(COMMIT_TIMEOUT_S)
        if thread.is_alive():
            self._committing = thread
            msg = f"offset commit unanswered after {COMMIT_TIMEOUT_S:.0f} s"
            raise self._unavailable(msg, TimeoutError(msg))
        if failed:
            msg = "offset commit failed"
            raise self._unavailable(msg, failed[0]) from failed[0]

    def committed(self) -> dict[TP, int]:
        """The group's committed next offsets of the assigned partitions (where committed)."""
        parts = self._consumer.assignment()
        if not parts:
            return {}
        try:
            got = self._consumer.committed(parts, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            msg = "cannot fetch committed offsets"
            raise self._unavailable(msg, exc) from exc
        return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset >= 0}

    def seek(self, offsets: Mapping[TP, int]) -> None:
        """Rewind the assigned partitions to ``offsets`` (beginning for those absent)."""
        parts = self._consumer.assignment()
        self._place(parts, offsets)
        if parts:
            # re-assigning restarts each partition's fetch at the given offset, whatever state
            # its fetcher is in (seek() fails on a partition that has not started fetching)
            self._consumer.assign(parts)

    def lag(self) -> dict[TP, int]:
        """High watermark minus next offset, for partitions where both are known.

        The next offset is the consumer's position when that is further (past a transaction's
        commit marker, which is never returned as a record; see ``KafkaSource.lag``).
        """
        out: dict[TP, int] = {}
        assigned = self._consumer.assignment()
        positions = {(p.topic, p.partition): p.offset for p in self._consumer.position(assigned)}
        for tp in assigned:
            key = (tp.topic, tp.partition)
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
            hw = high if high >= 0 else self._ends.get(key)
            nxt = self._next.get(key)
            if hw is not None and nxt is not None:
                pos = positions.get(key)
                nxt = max(nxt, -1 if pos is None else pos)
                note_beyond_end(key, hw, nxt, self._beyond, position=pos)
                out[key] = max(0, hw - nxt)
            elif hw == 0:
                out[key] = 0
        return out

    def assigned(self) -> bool:
        """Whether the group gave this consumer any partition."""
        return bool(self._consumer.assignment())

    def caught_up(self, topics: Collection[str]) -> bool:
        """Every assigned partition of ``topics`` has a known lag of 0 (False unassigned)."""
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
        return _partition_count(self._described(topic, METADATA_TIMEOUT_S))

    def _exists(self, topic: str, timeout_s: float) -> bool:
        """Whether the broker now describes ``topic`` with partitions (one metadata request)."""
        found = self._described(topic, timeout_s)
        return found is not None and found.error is None and bool(found.partitions)

    def _refuses(self, topic: str, timeout_s: float) -> bool:
        """Whether the broker's ACLs still refuse ``topic`` to this client (one request)."""
        found = self._described(topic, timeout_s)
        return found is not None and found.error is not None and found.error.code() == _REFUSED

    def _described(self, topic: str, timeout_s: float) -> Any:
        """The broker's ``TopicMetadata`` of ``topic`` (None when it has none): one request."""
        try:
            meta = self._consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            msg = "cannot read topic metadata"
            self._serve_errors()
            raise self._unavailable(msg, exc) from exc
        return meta.topics.get(topic)

    def probe(self, timeout_s: float) -> None:
        """Ask the broker for the end offsets of the assigned partitions (refreshes the lag).

        Given no partition, the end offset of the first subscribed topic's partition 0 is asked
        instead, so that a standby notices an outage too (``KafkaSource.probe``). A subscribed
        topic that does not exist is ``TopicsNotReady``: one librdkafka reported unknown
        (``_without_errors``), or whose partition it no longer knows (deleted, still assigned
        until the next metadata refresh), until the broker describes it again. The broker is
        asked about a topic only then: librdkafka offers no cached metadata, and a request
        waits behind the consumer's fetch (about 0.1 s, ``fetch.wait.max.ms``).
        """
        self._missing = {t for t in self._missing if not self._exists(t, timeout_s)}
        if self._missing:
            raise missing_topics(self._config, self._missing, self.partitions_for)
        self._refused = {t for t in self._refused if self._refuses(t, timeout_s)}
        if self._refused:
            raise refused_topics(self._config, self._refused)
        parts = self._consumer.assignment()
        ends: dict[TP, int] = {}
        for tp in parts or [self._liveness]:
            try:
                _, high = self._consumer.get_watermark_offsets(tp, timeout=timeout_s)
            except KafkaException as exc:
                if _unknown(exc) and not self._exists(tp.topic, timeout_s):
                    self._missing.add(tp.topic)
                    raise missing_topics(self._config, self._missing, self.partitions_for) from exc
                msg = "broker did not answer"
                self._serve_errors()
                raise self._unavailable(msg, exc) from exc
            ends[(tp.topic, tp.partition)] = int(high)
        if parts:
            self._ends = ends

    def close(self) -> None:
        """Leave the group (offsets were committed explicitly).

        Not while a commit left unanswered still runs (``commit``): closing the consumer under
        it would free what it uses. The broker then drops the member after its session timeout.
        """
        if self._committing is not None:
            self._committing.join(COMMIT_TIMEOUT_S)
            if self._committing.is_alive():
                return
        with contextlib.suppress(KafkaException, RuntimeError):
            self._consumer.close()


class ConfluentSink(FallbackSink):
    """An idempotent producer with ``acks=all``; ``flush`` raises ``BrokerUnavailable``.

    A topic it writes to that the broker says does not exist is ``TopicsNotReady`` (as
    ``monitor.io.kafka_io.KafkaSink``): librdkafka would hold its records until they timed out.
    A record refused as too large is written as its ``fallback``, or is ``TopicsNotReady``
    without one (as ``KafkaSink``).
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        kc = config.kafka
        self._config = config
        self._settings = kc.client
        self._client_errors = RecentErrors()
        settings: dict[str, Any] = {
            "bootstrap.servers": ",".join(kc.bootstrap_servers),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            # librdkafka's producer asks the broker to create the topics it writes to
            "allow.auto.create.topics": False,
            "logger": _LIBRDKAFKA_LOG,
            "error_cb": self._note,
            **confluent_client_options(kc, "producer"),
        }
        try:
            self._producer = _client(Producer, settings, "producer")
        except KafkaException as exc:
            msg = "cannot connect the producer"
            raise self._unavailable(msg, exc) from exc
        self._errors: list[tuple[KafkaError, Queued]] = []  # the failed deliveries
        self._queued = 0
        self._topics: set[str] = set()  # the topics of the queued records
        self._missing: set[str] = set()  # the topics found missing, until they exist
        # a record a flush gave up on reports its fate to no later flush
        self._flushes = 0

    def _note(self, err: KafkaError) -> None:
        """The ``error_cb`` of librdkafka: a client error, e.g. a refused login."""
        self._client_errors.note(err.str())

    def _unavailable(self, what: str, exc: BaseException) -> BrokerUnavailable:
        """``BrokerUnavailable`` with the client's recent error (``flush`` serves ``error_cb``)."""
        return unavailable(what, exc, self._client_errors, self._settings)

    def _delivered(self, flush: int, sent: Queued, err: KafkaError | None, _: Message) -> None:
        """The ``on_delivery`` of the record ``sent``."""
        if err is not None and flush == self._flushes:
            self._errors.append((err, sent))

    def _described(self, topic: str) -> Any:
        """The broker's ``TopicMetadata`` of ``topic``: one request, None without an answer."""
        try:
            return self._producer.list_topics(topic, timeout=FLUSH_CHECK_S).topics.get(topic)
        except KafkaException:
            return None  # no answer: reported as the outage it is

    def _absent(self, topics: Collection[str]) -> set[str]:
        """The topics of ``topics`` the broker says it does not have (a request per topic)."""
        absent = set()
        for topic in topics:
            found = self._described(topic)
            if found is not None and _unknown(found.error):
                absent.add(topic)
        return absent

    def _partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (1 when unknown)."""
        return _partition_count(self._described(topic))

    def _missing_error(self) -> TopicsNotReady:
        """The error naming the topics found missing and how to create them."""
        return missing_topics(self._config, self._missing, self._partitions, written=True)

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

        Nothing is queued while a topic found missing still is, and a record refused as too
        large is written as ``fallback`` (``KafkaSink.produce``).
        """
        if self._missing:
            self._missing = self._absent(self._missing)
            if self._missing:
                raise self._missing_error()
        sent = Queued(topic, key, value, partition, fallback)
        delivered = functools.partial(self._delivered, self._flushes, sent)
        args: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            args["partition"] = partition
        for _ in repeat(None, 2):
            try:
                self._producer.produce(topic, **args)
                self._queued += 1
                self._topics.add(topic)
                return
            except BufferError:
                self._producer.poll(1.0)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:  # message.max.bytes
                    self._instead(sent, exc)
                    return
                msg = "produce failed"
                raise self._unavailable(msg, exc) from exc
        msg = "produce failed: the producer's queue stays full"
        raise BrokerUnavailable(msg)

    def flush(self, timeout_s: float) -> None:
        """Wait for every acknowledgement, asking every ``FLUSH_CHECK_S`` for missing topics."""
        if not self._queued:
            return
        topics, self._topics = self._topics, set()
        since = time.monotonic()
        left = self._producer.flush(min(FLUSH_CHECK_S, timeout_s))
        while left and (wait := since + timeout_s - time.monotonic()) > 0.0:
            self._missing = self._absent(topics)
            if self._missing:
                break
            left = self._producer.flush(min(FLUSH_CHECK_S, wait))
        queued, errors, self._errors, self._queued = self._queued, self._errors, [], 0
        self._flushes += 1
        if not self._missing and any(_unknown(err) for err, _ in errors):  # librdkafka gave up
            self._missing = self._absent(topics)
        if self._missing:
            raise self._missing_error()
        if left:
            msg = "produce not acknowledged"
            raise self._unavailable(msg, TimeoutError(f"{left} records after {timeout_s:.0f} s"))
        failed = [(e, s) for e, s in errors if e.code() != KafkaError.MSG_SIZE_TOO_LARGE]
        if failed:
            err, sent = failed[0]
            msg = f"produce to {sent.topic} not acknowledged"
            raise self._unavailable(msg, KafkaException(err))
        if errors:  # the broker refuses a whole batch (``monitor.io.fallback``)
            refused = [(sent, KafkaException(err)) for err, sent in errors]
            self._write_refused(refused, alone=queued == 1, timeout_s=timeout_s)

    def close(self) -> None:
        """Deliver what is queued (bounded) and release the producer."""
        with contextlib.suppress(KafkaException, RuntimeError):
            self._producer.flush(5.0)
