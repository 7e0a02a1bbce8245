"""One contract for the in-memory fakes and both Kafka clients' source and sink, on Tansu and on
Apache Kafka."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import InvalidTimestampError

from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.core.messages import RawRecord
from monitor.core.records import decode_scored
from monitor.errors import BrokerUnavailable, RejectReason, TopicsNotReady
from monitor.io.confluent_io import ConfluentSink, ConfluentSource
from monitor.io.kafka_io import (
    KafkaSink,
    KafkaSource,
    KafkaTopicReader,
    create_topics,
    ensure_topics,
    read_topic,
)
from monitor.runtime.ports import Sink, Source, TopicReader
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.kafka_broker import KafkaBroker
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource, FakeTopicReader
from tests.conftest import Broker, started

TP = tuple[str, int]
TEST_CLIENT = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
# Apache Kafka joins a group at once whatever the session (Tansu takes half of it), and does expire
# a 2 s session when a loaded machine starves the heartbeat thread. Under CI's load a 6 s session
# once saw a rebalance mid-test (cause not logged; an expired session is one), whose rejoin resumed
# at the stored offsets: 15 s leaves a starved heartbeat more room. These tests detect no failures
KAFKA_TEST_CLIENT = {"session_timeout_ms": 15000, "heartbeat_interval_ms": 1000}


def _client_for(broker: Broker) -> dict[str, int]:
    """Consumer timeouts for source-level tests on ``broker``."""
    return TEST_CLIENT if isinstance(broker, EmbeddedBroker) else KAFKA_TEST_CLIENT


CLASSES: dict[str, tuple[type[KafkaSource | ConfluentSource], type[KafkaSink | ConfluentSink]]] = {
    "kafka-python": (KafkaSource, KafkaSink),
    "confluent-kafka": (ConfluentSource, ConfluentSink),
}


@dataclass
class Bus:
    """A way to make sources and sinks over one set of topics."""

    topics: TopicsConfig
    make_source: Callable[[Callable[[], Mapping[TP, int]], TopicsConfig], Source]
    make_sink: Callable[[], Sink]
    make_reader: Callable[[str], TopicReader]
    closers: list[Callable[[], None]]

    def source(
        self, stored: Mapping[TP, int] | None = None, topics: TopicsConfig | None = None
    ) -> Source:
        src = self.make_source(lambda: dict(stored or {}), topics or self.topics)
        self.closers.append(src.close)
        return src

    def reader(self, topic: str) -> TopicReader:
        rdr = self.make_reader(topic)
        self.closers.append(rdr.close)
        return rdr

    def sink(self) -> Sink:
        snk = self.make_sink()
        self.closers.append(snk.close)
        return snk

    def produce(self, topic: str, values: list[bytes]) -> None:
        snk = self.sink()
        for i, v in enumerate(values):
            snk.produce(topic, f"k{i}".encode(), v)
        snk.flush(10.0)


@pytest.fixture(
    params=[
        "fake",
        *(
            pytest.param(f"{library}@{kind}", marks=pytest.mark.integration)
            for kind in ("tansu", "kafka")
            for library in CLASSES
        ),
    ]
)
def bus(request: pytest.FixtureRequest) -> Iterator[Bus]:
    closers: list[Callable[[], None]] = []
    if request.param == "fake":
        log = FakeLog()
        topics = TopicsConfig("s", "r", "l", "d", "a")
        for t in ("s", "r", "l", "d", "a"):
            log.create(t)
        yield Bus(
            topics,
            lambda stored, t: FakeSource(
                log, list(dict.fromkeys([t.scored, t.requests, t.labels])), stored
            ),
            lambda: FakeSink(log),
            lambda topic: FakeTopicReader(log, topic),
            closers,
        )
    else:
        library, kind = request.param.split("@")
        broker = request.getfixturevalue(f"{kind}_broker")
        topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
        ensure_topics(broker.bootstrap, topics)
        config = _config(broker.bootstrap, topics, library, _client_for(broker))
        source_class, sink_class = CLASSES[library]

        def make_source(stored: Callable[[], Mapping[TP, int]], t: TopicsConfig) -> Source:
            # a fresh group each time: the store, not the group, decides where to start
            kafka = replace(config.kafka, group_id=uuid.uuid4().hex[:8], topics=t)
            cfg = replace(config, kafka=kafka)
            return source_class(cfg, stored)

        yield Bus(
            topics,
            make_source,
            lambda: sink_class(config),
            lambda topic: KafkaTopicReader(config, topic),  # kafka-python whatever the library
            closers,
        )
    for close in reversed(closers):
        close()


def _config(
    bootstrap: str, topics: TopicsConfig, library: str, client: dict[str, int] = TEST_CLIENT
) -> Config:
    return Config(
        kafka=KafkaConfig(
            bootstrap_servers=(bootstrap,),
            group_id=f"contract-{uuid.uuid4().hex[:8]}",
            topics=topics,
            client=client,
            client_library=library,
        )
    )


def _drain(src: Source, n: int, *topics: str, timeout_s: float = 20.0) -> list[RawRecord]:
    out: list[RawRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(r for r in src.poll(100, 0.2) if r.topic in topics)
    return out


def test_polls_from_the_stored_offsets_in_order(bus: Bus) -> None:
    values = [f"v{i}".encode() for i in range(30)]
    bus.produce(bus.topics.scored, values)
    src = bus.source({(bus.topics.scored, 0): 10})
    got = _drain(src, 20, bus.topics.scored)
    assert [r.offset for r in got] == list(range(10, 30))
    assert [r.value for r in got] == values[10:]
    assert [r.key for r in got] == [f"k{i}".encode() for i in range(10, 30)]
    assert _drain(src, 1, bus.topics.scored, timeout_s=0.5) == []


def test_without_stored_offsets_it_replays_from_the_beginning(bus: Bus) -> None:
    bus.produce(bus.topics.labels, [b"a", b"b", b"c"])
    first = bus.source()
    assert [r.value for r in _drain(first, 3, bus.topics.labels)] == [b"a", b"b", b"c"]
    first.commit({(bus.topics.labels, 0): 3})
    again = bus.source()  # committed to Kafka, but the store has nothing: rebuild by replay
    assert [r.offset for r in _drain(again, 3, bus.topics.labels)] == [0, 1, 2]


def test_seek_rewinds_and_lag_counts_what_is_left(bus: Bus) -> None:
    bus.produce(bus.topics.requests, [f"r{i}".encode() for i in range(12)])
    # The store follows the reads and the seek, as the daemon's does: a rebalance mid-test (one
    # came under CI's load, KAFKA_TEST_CLIENT) resumes where the store says
    stored: dict[TP, int] = {}
    src = bus.source(stored)
    assert not src.caught_up([bus.topics.requests])  # nothing read (or not even assigned) yet
    assert len(_drain(src, 12, bus.topics.requests)) == 12
    stored[(bus.topics.requests, 0)] = 12
    assert src.lag().get((bus.topics.requests, 0)) == 0
    assert src.caught_up([bus.topics.requests])
    stored[(bus.topics.requests, 0)] = 7
    src.seek({(bus.topics.requests, 0): 7})
    assert src.lag().get((bus.topics.requests, 0)) == 5
    assert not src.caught_up([bus.topics.requests])
    assert [r.offset for r in _drain(src, 5, bus.topics.requests)] == [7, 8, 9, 10, 11]
    assert src.assigned()
    t = bus.topics
    assert {(t.scored, 0), (t.requests, 0), (t.labels, 0)} <= set(src.assignment())
    assert src.partitions_for(bus.topics.scored) == 1


def test_sink_delivers_on_flush(bus: Bus) -> None:
    snk = bus.sink()
    snk.produce(bus.topics.deadletter, b"key", b'{"reason": "x"}')
    snk.flush(10.0)
    d = bus.topics.deadletter
    reader = bus.source(topics=TopicsConfig(scored=d, requests=d, labels=d, deadletter=d))
    got = _drain(reader, 1, d)
    assert [(r.key, r.value) for r in got] == [(b"key", b'{"reason": "x"}')]


def test_sink_writes_to_a_partition_and_writes_tombstones(bus: Bus) -> None:
    snk = bus.sink()
    a = bus.topics.aggregates
    snk.produce(a, b"k1", b"state", 0)
    snk.produce(a, b"k1", None, 0)  # a tombstone
    snk.flush(10.0)
    reader = bus.source(topics=TopicsConfig(scored=a, requests=a, labels=a, deadletter=a))
    got = _drain(reader, 2, a)
    assert [(r.partition, r.key, r.value) for r in got] == [(0, b"k1", b"state"), (0, b"k1", None)]


def test_a_topic_reader_reads_partitions_whole_then_follows_what_is_appended(bus: Bus) -> None:
    a = bus.topics.aggregates
    bus.produce(a, [b"x", b"y"])
    reader = bus.reader(a)
    assert reader.read(range) == [(0, b"k0", b"x"), (0, b"k1", b"y")]
    bus.produce(a, [b"z"])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 20.0
    while not got and time.monotonic() < deadline:
        got = reader.follow()  # never waits
        time.sleep(0.05)
    assert got == [(0, b"k0", b"z")]
    assert reader.follow() == []
    assert reader.read(lambda n: [n]) == []  # no such partition: nothing, and nothing follows
    assert reader.follow() == []


def _ten_records(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig], kind: str
) -> tuple[TopicsConfig, Config, Any]:
    """Fresh topics with records v0..v9 on the ``kind`` topic; its config and source class."""
    topics = make_topics()
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    source_class, sink_class = CLASSES[library]
    snk = sink_class(config)
    for i in range(10):
        snk.produce(getattr(topics, kind), None, f"v{i}".encode())
    snk.flush(10.0)
    snk.close()
    return topics, config, source_class


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_group_member_with_on_assigned_resumes_at_the_committed_offset(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """The samplers' mode: no seek to stored offsets; the callback hears every assignment."""
    topics, config, source_class = _ten_records(library, broker, make_topics, "labels")
    first = source_class(config, dict, topics=[topics.labels])
    assert len(_drain(first, 10, topics.labels)) == 10
    first.commit({(topics.labels, 0): 6})
    assert first.committed() == {(topics.labels, 0): 6}
    first.close()
    heard: list[Sequence[TP]] = []
    again = source_class(
        config, lambda: {(topics.labels, 0): 0}, topics=[topics.labels], on_assigned=heard.append
    )
    try:
        assert [r.offset for r in _drain(again, 4, topics.labels)] == [6, 7, 8, 9]
        # a group may rebalance more than once before it settles (on Apache Kafka a join can
        # outrun a client's metadata): the callback hears every assignment, the last one counts
        assert heard[-1] == [(topics.labels, 0)]
        assert all(set(h) <= {(topics.labels, 0)} for h in heard), heard
        again.seek({(topics.labels, 0): 8})
        assert [r.offset for r in _drain(again, 2, topics.labels)] == [8, 9]
    finally:
        again.close()


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
def test_the_aggregates_topic_gets_the_scored_topics_partitions(broker: Broker) -> None:
    """``--create-topics`` on a scored topic that exists: as many aggregates partitions."""
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topics.scored, 3, 1)])
        created = ensure_topics(broker.bootstrap, topics)  # 1 partition unless told otherwise
        assert topics.scored not in created and topics.aggregates in created
        described = admin.describe_topics([topics.scored, topics.aggregates, topics.requests])
        counts = {d["name"]: len(d["partitions"]) for d in described}
    finally:
        admin.close()
    assert counts == {topics.scored: 3, topics.aggregates: 3, topics.requests: 1}


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
def test_created_topics_get_the_configured_replicas_else_the_brokers_default(
    broker: Broker,
) -> None:
    """``--create-topics`` created every topic with one replica whatever the cluster: a broker
    lost for good took the audit requests with it. ``kafka.replication_factor`` now sets it,
    unset the broker's ``default.replication.factor`` does (a three-node cluster:
    ``tests/integration/test_kafka_failover.py``)."""
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    kafka = KafkaConfig(bootstrap_servers=(broker.bootstrap,), topics=topics)
    assert sorted(create_topics(Config(kafka=kafka))) == sorted(vars(topics).values())
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_topics(list(vars(topics).values()))
    finally:
        admin.close()
    assert {len(p["replica_nodes"]) for d in described for p in d["partitions"]} == {1}
    if isinstance(broker, EmbeddedBroker):
        return  # Tansu keeps one copy whatever it is asked for
    more = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    two = replace(kafka, topics=more, replication_factor=2)  # more than the one node
    with pytest.raises(BrokerUnavailable, match="InvalidReplicationFactor"):
        create_topics(Config(kafka=two))


@pytest.mark.integration
@pytest.mark.brokers("kafka")  # Tansu describes no topic configuration
def test_created_requests_and_labels_topics_keep_their_records_past_the_deadline(
    broker: Broker,
) -> None:
    """``--create-topics`` gives the requests and labels topics the retention asked for (the
    broker's default, often 7 days, is the label deadline itself)."""
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    ensure_topics(broker.bootstrap, topics, retention_ms=5_184_000_000)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kept = {
            name: _topic_config(admin, name).get("retention.ms")
            for name in (topics.requests, topics.labels, topics.deadletter)
        }
    finally:
        admin.close()
    assert kept[topics.requests] == kept[topics.labels] == "5184000000"
    assert kept[topics.deadletter] is None  # the broker's default


def _topic_config(admin: KafkaAdminClient, topic: str) -> dict[str, str]:
    """The keys of a topic's configuration that differ from the broker's defaults."""
    found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {k: str(v["value"]) for k, v in found["topic"][topic].items()}


def _until_positions_logged(
    src: Source, topic: str, caplog: pytest.LogCaptureFixture
) -> tuple[list[logging.LogRecord], list[int]]:
    """Poll ``src`` (and its lags) until ``monitor.io.positions`` logs, 20 s at most, then close
    it: those log records and the offsets of ``topic`` read meanwhile."""
    ours: list[logging.LogRecord] = []
    offsets: list[int] = []
    try:
        with caplog.at_level(logging.WARNING, logger="monitor.io.positions"):
            deadline = time.monotonic() + 20.0
            while not ours and time.monotonic() < deadline:
                offsets += [r.offset for r in src.poll(100, 0.3) if r.topic == topic]
                src.lag()
                ours = [r for r in caplog.records if r.name == "monitor.io.positions"]
    finally:
        src.close()
    return ours, offsets


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_stored_offset_beyond_the_partitions_end_is_logged(
    library: str,
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recreated topic: Kafka resets to its start, Tansu returns nothing; each is logged."""
    monkeypatch.setattr("monitor.io.positions.BEYOND_GRACE_S", 1.0)
    topics, config, source_class = _ten_records(library, broker, make_topics, "scored")
    tp = (topics.scored, 0)
    src = source_class(config, lambda: {tp: 1000}, topics=[topics.scored])
    ours, offsets = _until_positions_logged(src, topics.scored, caplog)
    events = [getattr(r, "event", "") for r in ours]
    record = ours[0]
    assert events in (["offset_reset"], ["position_beyond_end"]), events
    assert (record.topic, record.partition) == tp  # type: ignore[attr-defined]
    if events == ["offset_reset"]:  # the broker refused the fetch: read again from the start
        assert offsets[0] == 0 and record.expected_offset == 1000  # type: ignore[attr-defined]
        assert "counted as new traffic" in record.hint  # type: ignore[attr-defined]
    else:  # nothing below the stored offset is read
        assert "move its data directory aside" in record.hint  # type: ignore[attr-defined]
        assert offsets == [] and record.next_offset == 1000  # type: ignore[attr-defined]
        assert record.end_offset == 10  # type: ignore[attr-defined]


@pytest.mark.integration
@pytest.mark.brokers("kafka")  # Tansu deletes no records
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_records_deleted_before_they_were_read_are_logged_and_counted(
    library: str,
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retention (here delete-records) took records 2-5 before the monitor read them: Kafka
    refuses the fetch at 2 and the client resumes at 6; that used to pass without a word."""
    topics, config, source_class = _ten_records(library, broker, make_topics, "scored")
    tp = (topics.scored, 0)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_records({KafkaTopicPartition(topics.scored, 0): 6})
    finally:
        admin.close()
    src = source_class(config, lambda: {tp: 2}, topics=[topics.scored])
    try:
        with caplog.at_level(logging.WARNING, logger="monitor.runtime.skips"):
            got = [r.offset for r in _drain(src, 4, topics.scored)]
        skipped = src.skipped()
    finally:
        src.close()
    assert got == [6, 7, 8, 9]
    assert skipped == {tp: 4}
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "records_skipped"]
    assert (record.expected_offset, record.records) == (2, 4)  # type: ignore[attr-defined]


@pytest.mark.integration
@pytest.mark.brokers("kafka")  # Tansu keeps no topic configuration
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_producer_clock_ahead_is_refused_by_kafka_or_judged_by_the_brokers_clock(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """What the README's advice on producer clocks rests on (event times are judged against each
    record's Kafka timestamp). Kafka 4 refuses a record its producer stamped 2 hours ahead
    (``message.timestamp.after.max.ms``, 1 hour by default). Stamped 30 minutes ahead, with
    ``ts`` from the same clock: on a CreateTime topic (Kafka's default) the record's Kafka
    timestamp is that clock's and the record passes; on a LogAppendTime topic it is the
    broker's, and the record is refused as ``bad_timestamp``."""
    topics = make_topics()
    appended = f"{topics.scored}-appended"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        by_broker = {"message.timestamp.type": "LogAppendTime"}
        admin.create_topics([NewTopic(appended, 1, 1, topic_configs=by_broker)])
    finally:
        admin.close()

    def stamped(ahead_s: float) -> tuple[bytes, int]:
        ahead = time.time() + ahead_s
        return json.dumps({"id": "a", "score": 0.5, "ts": ahead}).encode(), int(ahead * 1000)

    value, ms = stamped(7200.0)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(InvalidTimestampError):
            producer.send(topics.scored, value, timestamp_ms=ms).get(timeout=30)
    finally:
        producer.close()  # here, a producer whose first record was refused refused the next
    value, ms = stamped(1800.0)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        before = time.time()
        for topic in (topics.scored, appended):
            producer.send(topic, value, timestamp_ms=ms).get(timeout=30)
        after = time.time()
    finally:
        producer.close()
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    src = CLASSES[library][0](config, dict, topics=[topics.scored, appended])
    try:
        records = {r.topic: r for r in _drain(src, 2, topics.scored, appended)}
    finally:
        src.close()
    assert records[topics.scored].timestamp_ms == ms  # the producer's clock
    assert before - 1 <= records[appended].timestamp_ms / 1000 <= after + 1  # the broker's
    batch, rejects = decode_scored([records[topics.scored], records[appended]], config)
    assert batch.offset.tolist() == [0] and batch.ts.tolist() == [json.loads(value)["ts"]]
    assert [(r.record.topic, r.reason) for r in rejects] == [(appended, RejectReason.BAD_TIMESTAMP)]
    assert "more than 5 minutes after the record's Kafka timestamp" in rejects[0].detail


@pytest.mark.integration
@pytest.mark.brokers("kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_partition_added_to_a_subscribed_topic_is_read_from_its_first_record(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """``create_partitions`` while the monitor runs: both clients refreshed their metadata every
    5 minutes, so the new partition waited that long (measured: 299 s on Apache Kafka 4.1.1)."""
    topics, config, source_class = _ten_records(library, broker, make_topics, "scored")
    src = source_class(config, dict, topics=[topics.scored])
    try:
        assert len(_drain(src, 10, topics.scored)) == 10
        _drain(src, 1, topics.scored, timeout_s=3.0)  # settled: past the join's metadata
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_partitions({topics.scored: NewPartitions(total_count=2)})
        finally:
            admin.close()
        snk = CLASSES[library][1](config)
        for i in range(3):
            snk.produce(topics.scored, None, f"new{i}".encode(), partition=1)
        snk.flush(10.0)
        snk.close()
        started = time.monotonic()
        got: list[RawRecord] = []
        while len(got) < 3 and time.monotonic() - started < 25.0:
            # the rebalance puts partition 0 back at its stored offset: none here, the start
            got += [r for r in src.poll(100, 0.2) if r.partition == 1]
        took = time.monotonic() - started
    finally:
        src.close()
    assert [r.offset for r in got] == [0, 1, 2], took


@pytest.mark.integration
@pytest.mark.brokers("kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_send_to_a_partition_the_producer_does_not_know_is_an_outage(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """A sampler writing the states of a scored partition added since the producer's last
    metadata: kafka-python raised ``ValueError: Unrecognized partition`` out of the loop (the
    process died); an outage is retried, and the metadata refreshes within 10 s."""
    topics = make_topics()
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    snk = CLASSES[library][1](config)
    try:
        snk.produce(topics.scored, None, b"known", partition=0)
        snk.flush(10.0)  # the producer knows the topic: one partition
        with pytest.raises(
            BrokerUnavailable, match=topics.scored if library == "kafka-python" else None
        ):
            snk.produce(topics.scored, None, b"unknown", partition=3)
            snk.flush(10.0)
    finally:
        snk.close()


def _missing_reported(src: Source, timeout_s: float = 15.0) -> str:
    """The ``TopicsNotReady`` message of ``src``'s probe, polled meanwhile ("" if none came)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        src.poll(100, 0.2)
        try:
            src.probe(2.0)
        except TopicsNotReady as exc:
            return str(exc)
    return ""


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_subscribed_topic_that_does_not_exist_is_reported_until_it_is_created(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """A labels topic never created (or deleted): the group assigned nothing of it and the
    source said nothing, so the daemon stayed ready while no label could arrive. The probe now
    names it and the command creating it, and passes once it exists. Neither library asks the
    broker to create it (``test_no_client_asks_a_broker_that_allows_it_to_create_a_topic``):
    until kafka-python's request said so, Tansu created it (4 partitions) and it was never
    reported."""
    topics = replace(make_topics(), labels=f"absent-{uuid.uuid4().hex[:8]}")
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    src = CLASSES[library][0](config, dict)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        error = _missing_reported(src)
        assert f"--topic {topics.labels} --partitions 1 --config retention.ms=" in error, error
        assert topics.scored not in error and topics.requests not in error
        assert topics.labels not in admin.list_topics()
        ensure_topics(broker.bootstrap, topics)  # creates the one missing
        started = time.monotonic()
        passed = False
        while not passed and time.monotonic() - started < 20.0:
            src.poll(100, 0.2)
            try:
                src.probe(2.0)
                passed = True
            except TopicsNotReady:
                pass
        took = time.monotonic() - started
        assert passed, f"still reported {took:.1f} s after the topic was created"
    finally:
        admin.close()
        src.close()


def _write(sink: Sink, topic: str) -> None:
    """Write one record to ``topic`` and flush (raising what the sink raises)."""
    sink.produce(topic, b"k", b"v")
    sink.flush(10.0)


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_topic_written_to_that_does_not_exist_is_reported_until_it_is_created(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """A dead-letter topic never created (or deleted): a send waited for its metadata and a
    flush for its records until they timed out, as if the broker were down. The sink now names
    it and the command creating it within seconds, writes nothing while it is missing (a step
    retried meanwhile wrote its other records again each time) and writes once it exists."""
    topics = replace(make_topics(), deadletter=f"absent-{uuid.uuid4().hex[:8]}")
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    sink = CLASSES[library][1](config)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        _write(sink, topics.requests)
        with pytest.raises(TopicsNotReady) as caught:
            _write(sink, topics.deadletter)
        error = str(caught.value)
        assert error.startswith(f"topics written to missing: {topics.deadletter} ("), error
        assert f"--topic {topics.deadletter} --partitions 1)" in error
        with pytest.raises(TopicsNotReady):  # nothing written while it is missing
            sink.produce(topics.requests, b"k", b"again")
        assert topics.deadletter not in admin.list_topics()
        ensure_topics(broker.bootstrap, topics)  # creates the one missing
        started = time.monotonic()
        written = False
        while not written and time.monotonic() - started < 20.0:
            with contextlib.suppress(TopicsNotReady):
                _write(sink, topics.deadletter)
                written = True
        assert written, f"still reported {time.monotonic() - started:.1f} s after it was created"
    finally:
        admin.close()
        sink.close()
    values = [v for _, _, v in read_topic(config, topics.requests, range)]
    assert values == [b"v"]  # "again" never written


@pytest.mark.integration
@pytest.mark.brokers("kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_record_the_topic_refuses_as_too_large_is_written_as_its_fallback(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """A record over its topic's ``max.message.bytes`` failed the flush as a broker outage, at
    every retry. With a fallback, that is written instead (no key) and counted; without one,
    the error is ``TopicsNotReady`` naming the topic and the setting. Records around it are
    written as usual."""
    topics = replace(make_topics(), deadletter=f"small-{uuid.uuid4().hex[:8]}")
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        small = {"max.message.bytes": "20000"}
        admin.create_topics([NewTopic(topics.deadletter, 1, 1, topic_configs=small)])
    finally:
        admin.close()
    sink = CLASSES[library][1](config)
    try:
        sink.produce(topics.deadletter, b"k1", b"a", fallback=b"unused")
        sink.produce(topics.deadletter, b"k2", b"x" * 30_000, fallback=b"minimal")
        sink.produce(topics.deadletter, b"k3", b"c", fallback=b"unused")
        sink.flush(10.0)
        assert sink.fallbacks() == 1 and sink.fallbacks() == 0
        with pytest.raises(TopicsNotReady) as caught:
            sink.produce(topics.deadletter, b"k4", b"y" * 30_000)
            sink.flush(10.0)
        assert str(caught.value).startswith(f"{topics.deadletter} refuses a record of about")
        assert "max.message.bytes" in str(caught.value)
        sink.produce(topics.deadletter, b"k5", b"e")
        sink.flush(10.0)
    finally:
        sink.close()
    got = [(k, v) for _, k, v in read_topic(config, topics.deadletter, range)]
    assert got == [(b"k1", b"a"), (None, b"minimal"), (b"k3", b"c"), (b"k5", b"e")]


@pytest.fixture(scope="module")
def auto_create_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka with its default ``auto.create.topics.enable=true`` (the test broker and
    ``deploy/compose.yaml`` set false); always started here, one per module."""
    home = tmp_path_factory.mktemp("kafka-auto-create")
    real = started(
        lambda: KafkaBroker(
            log_path=home / "kafka.log",
            data_dir=home / "data",
            settings={"auto.create.topics.enable": "true"},
        ),
        "Apache Kafka broker that creates topics on request",
    )
    yield real
    real.stop()


@pytest.mark.integration
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_no_client_asks_a_broker_that_allows_it_to_create_a_topic(
    library: str, auto_create_kafka: KafkaBroker
) -> None:
    """Apache Kafka creates a topic that a metadata request names when the request allows it,
    as both libraries' producers do by default: a deleted requests or dead-letter topic came
    back at the next write, with the broker's defaults (one partition, its retention, not the
    30 days of ``--create-topics``), and nothing said so. The daemon's producer and consumer
    both report such a topic missing and the broker still lacks it."""
    bootstrap = auto_create_kafka.bootstrap
    made = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    ensure_topics(bootstrap, made)
    tag = uuid.uuid4().hex[:8]
    topics = replace(made, labels=f"absent-labels-{tag}", deadletter=f"absent-dead-{tag}")
    config = _config(bootstrap, topics, library, KAFKA_TEST_CLIENT)
    source_class, sink_class = CLASSES[library]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    control = KafkaProducer(bootstrap_servers=bootstrap)  # the library's defaults
    src = source_class(config, dict)
    sink = sink_class(config)
    try:
        control.send(f"created-{tag}", b"v").get(timeout=20)
        assert f"created-{tag}" in admin.list_topics()  # this broker creates what it is asked
        with pytest.raises(TopicsNotReady, match=f"--topic {topics.deadletter} "):
            _write(sink, topics.deadletter)
        error = _missing_reported(src)
        assert f"--topic {topics.labels} " in error, error
        assert not {topics.labels, topics.deadletter} & set(admin.list_topics())
    finally:
        control.close()
        sink.close()
        src.close()
        admin.close()


@pytest.mark.integration
@pytest.mark.brokers("tansu", "kafka")
@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_stored_offset_beyond_an_empty_partition_says_what_to_do(
    library: str,
    broker: Broker,
    *,
    make_topics: Callable[..., TopicsConfig],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """A topic recreated and still empty: Kafka resets the consumer to its start and reads the
    records by itself once they come, so the warning must not tell the operator only to move
    the data directory aside (as it did); Tansu keeps the consumer at its stored offset."""
    monkeypatch.setattr("monitor.io.positions.BEYOND_GRACE_S", 1.0)
    topics = make_topics()
    config = _config(broker.bootstrap, topics, library, _client_for(broker))
    source_class, _ = CLASSES[library]
    tp = (topics.scored, 0)
    src = source_class(config, lambda: {tp: 1000}, topics=[topics.scored])
    ours, offsets = _until_positions_logged(src, topics.scored, caplog)
    assert offsets == []
    assert [getattr(r, "event", "") for r in ours] == ["position_beyond_end"]
    hint = str(getattr(ours[0], "hint", ""))
    if request.node.callspec.params["broker"] == "tansu":
        assert "move its data directory aside" in hint
    elif library == "kafka-python":  # it knows its position went back to the start
        assert "nothing to do" in hint
    else:  # librdkafka reports no position before a record: the hint says both
        assert "starts the partition over by itself" in hint
