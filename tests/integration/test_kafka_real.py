"""What only a broker that keeps its data can show, on Apache Kafka (``monitor.sim.kafka_broker``).

- the broker stopped mid-stream (SIGTERM, and SIGKILL) and started again on the same log
  directory: the daemon waits, reports not ready, resumes, and its requests and estimates equal
  the engine's undisturbed run;
- a standby sampler (given no partition) reports the stopped broker as not ready, as its owner;
- a topic the daemon reads (labels) or writes to (dead letters, requests) deleted under it: not
  ready, the topic and the command creating it logged once, ready once it exists again; and
  ``--create-topics`` makes the five at start without a report that one is missing;
- the exported consumer lag equals the broker's end offsets minus the group's committed offsets,
  and a transaction's commit marker (an offset that is never a record) is not lag;
- the aggregates topic really is compacted, and a sampler that rebuilds from the compacted topic
  decides exactly what one ``--role all`` process decides;
- a crash loop (SIGKILL three times a second apart): how long until the daemon consumes again,
  with dynamic and with static group membership (``kafka.client.group_instance_id``);
- the audit-request producer is idempotent (the broker's own log: producer ids, no sequence
  stored twice), so a retry never writes a request twice. A daemon that crashes between its
  flush and its store commit does produce the same requests again after its restart (same key,
  same bytes, a new producer id): consumers deduplicate by ``request_id``, which is the contract.

The broker restarts use the session's broker (``own_kafka``); they are skipped against a cluster
named by ``MONITOR_TEST_KAFKA_BOOTSTRAP``.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import astuple
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from monitor.config.load import load_config
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.io.kafka_io import read_topic
from monitor.sim.kafka_broker import KafkaBroker
from monitor.sim.workload import Workload, WorkloadSpec, generate
from tests.conftest import Broker
from tests.contract.test_kafka_io import CLASSES, KAFKA_TEST_CLIENT, _drain
from tests.integration import test_daemon_kafka as kafka_tests
from tests.integration.test_daemon_kafka import (
    Run,
    _answer_and_stop,
    _labels,
    _predict,
    _produce,
    _read_all,
    _scored,
    _yaml,
)
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_scale_out import (
    PARTITIONS,
    Proc,
    _count,
    _group_offsets,
    _owned,
    _requests,
    _wait,
)

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka"), pytest.mark.timeout(300)]

deploy = kafka_tests.deploy  # the daemon-as-a-subprocess fixture

TP = tuple[str, int]


def _small_polls(run: Run) -> None:
    """50 records per poll: a stream of a few thousand records lasts several seconds."""
    text = run.config_path.read_text()
    run.config_path.write_text(
        text.replace("poll_timeout_ms: 200", "poll_timeout_ms: 200\n  max_poll_records: 50")
    )
    run.config = load_config(run.config_path)


def _wait_for(what: str, done: Callable[[], bool], run: Run, timeout_s: float) -> float:
    """Seconds until ``done()``; fails if the daemon exits or time runs out."""
    t0 = time.monotonic()
    while not done():
        assert run.proc is not None and run.proc.poll() is None, run.log_tail()
        if time.monotonic() - t0 > timeout_s:
            msg = f"timed out after {timeout_s:.0f} s waiting for {what}\n{run.log_tail()}"
            raise AssertionError(msg)
        time.sleep(0.2)
    return time.monotonic() - t0


# ---------------------------------------------------------------------------- broker restart


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_broker_restart_mid_stream_equals_the_undisturbed_run(
    how: str, own_kafka: KafkaBroker, deploy: Callable[..., Run], tmp_path: Path
) -> None:
    run = deploy(name=f"restart-{how}")
    _small_polls(run)
    topics = run.config.kafka.topics
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=6000, hours=6.0, seed=23))
    expected, predicted = _predict(run.config, w, tmp_path)
    _produce(own_kafka, topics.scored, _scored(w))
    run.start()
    run.wait_offsets({(topics.scored, 0): len(w) // 5})

    if how == "SIGTERM":
        own_kafka.stop()
    else:
        own_kafka.kill()
    offset_at_stop = run.offsets().get((topics.scored, 0), 0)
    not_ready_after = _wait_for("/readyz 503", lambda: _readyz(port) == 503, run, 30)
    time.sleep(3.0)  # down for a while longer: the daemon must stay up, idle, not ready
    assert _readyz(port) == 503
    own_kafka.start()
    broker_start_s = own_kafka.start_seconds[-1]
    ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 90)

    requests = _answer_and_stop(run, own_kafka, w, expected, 90)
    print(
        f"\nbroker {how} at offset {offset_at_stop}/{len(w)}; daemon not ready after "
        f"{not_ready_after:.1f} s; broker restarted in {broker_start_s:.1f} s; daemon ready "
        f"{ready_after:.1f} s after that; requests {len(requests)} ({len(set(requests))} distinct)"
    )
    assert offset_at_stop < len(w), "the stream was done before the broker stopped"
    assert run.events("broker_down") and run.events("broker_up")
    # nothing lost, nothing invented: every request (a replay repeats the same bytes) ...
    assert set(requests) == set(expected)
    # ... and the estimates of the undisturbed run
    assert run.snapshot_repr() == predicted
    # the requests producer is idempotent: every batch the broker stored carries a producer id,
    # and no (producer, epoch, sequence) was stored twice, so a retry across the restart did not
    # write a request twice (a replay after a crash does, with the same bytes: see the module doc)
    batches = [b for b in own_kafka.log_batches(topics.requests, 0) if b["isControl"] == "false"]
    assert batches and all(int(b["producerId"]) >= 0 for b in batches), batches[:3]
    stored = [
        (b["producerId"], b["producerEpoch"], seq)
        for b in batches
        for seq in range(int(b["baseSequence"]), int(b["lastSequence"]) + 1)
    ]
    assert len(stored) == len(set(stored)) >= len(set(requests))


# ---------------------------------------------------------------------------- topic deleted


@pytest.mark.parametrize("client_library", ["kafka-python", "confluent-kafka"])
def test_a_deleted_labels_topic_is_not_ready_until_it_is_recreated(
    client_library: str, broker: Broker, deploy: Callable[..., Run], tmp_path: Path
) -> None:
    """The labels topic deleted under a running daemon: it stayed ready and logged nothing while
    no label could arrive. It is now not ready and logs ``topics_not_ready`` once, naming the
    topic and how to create it; the topic recreated, it is ready again, its estimates those of
    the undisturbed run."""
    run = deploy(name=f"labels-gone-{client_library}")
    topics = run.config.kafka.topics
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=600, hours=1.0, seed=29))
    expected, predicted = _predict(run.config, w, tmp_path)
    _produce(broker, topics.scored, _scored(w))
    run.start()
    run.wait_offsets({(topics.scored, 0): len(w)})
    labels = _labels(w, expected)
    _produce(broker, topics.labels, labels)
    run.wait_offsets({(topics.labels, 0): len(labels)})
    _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 30)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_topics([topics.labels])
        not_ready_after = _wait_for("/readyz 503", lambda: _readyz(port) == 503, run, 30)
        time.sleep(3.0)  # retried meanwhile: still not ready, logged once
        assert _readyz(port) == 503
        (event,) = run.events("topics_not_ready")
        admin.create_topics([NewTopic(topics.labels, 1, 1)])
        ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 60)
    finally:
        admin.close()
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    print(
        f"\n{client_library}: not ready {not_ready_after:.1f} s after the labels topic was "
        f"deleted, ready {ready_after:.1f} s after it was created again\n{json.dumps(event)}"
    )
    assert event["level"] == "error"
    assert f"--topic {topics.labels} --partitions 1 --config retention.ms=" in str(event["error"])
    assert topics.scored not in str(event["error"])
    assert not run.events("broker_down")  # not an outage: the broker answered all along
    text = run.log_path.read_text()  # connected again after it: broker_up, the state change
    assert text.rindex('"event": "broker_up"') > text.index('"event": "topics_not_ready"')
    assert run.snapshot_repr() == predicted


@pytest.mark.parametrize("client_library", ["kafka-python", "confluent-kafka"])
def test_topics_created_at_start_are_not_reported_missing(
    client_library: str, broker: Broker, tmp_path: Path
) -> None:
    """``monitor run --create-topics`` on a broker without the topics: the five are created and
    the daemon is ready without a ``topics_not_ready`` report (a topic just created whose
    leader the first probe does not yet know could have read as missing)."""
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    path = tmp_path / "created.yaml"
    group = f"g-{uuid.uuid4().hex[:8]}"
    path.write_text(_yaml(broker, topics, tmp_path / "data", group, client_library))
    run = Run(path, load_config(path), tmp_path / "created.log", args=("--create-topics",))
    run.start()
    port = run.config.metrics.port
    _wait_for("/metrics served", lambda: bool(run.events("metrics_http_started")), run, 30)
    ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 60)
    time.sleep(2.0)  # probed again meanwhile
    assert _readyz(port) == 200
    code, _ = run.stop()
    assert code == 0, run.log_tail()
    print(f"\n{client_library}: ready {ready_after:.1f} s after the start")
    (created,) = run.events("topics_ready")
    assert sorted(cast(list[str], created["new_topics"])) == sorted(astuple(topics))
    assert not run.events("topics_not_ready") and not run.events("broker_down")


@pytest.mark.parametrize(
    ("client_library", "gone"),
    [
        ("kafka-python", "deadletter"),  # a send waits for the topic's metadata
        ("kafka-python", "requests"),  # a flush waits for records the producer retries
        ("confluent-kafka", "deadletter"),  # librdkafka holds the records in its queue
    ],
)
def test_a_deleted_topic_the_daemon_writes_to_is_not_ready_until_it_is_recreated(
    client_library: str, gone: str, broker: Broker, deploy: Callable[..., Run], tmp_path: Path
) -> None:
    """The dead-letter or requests topic deleted under a running daemon: its next write waited
    until it timed out, logged as ``broker_down`` ("no step completed for 6 s"), each retry
    the same, and a SIGTERM took more than 15 s with kafka-python. It is now not ready and
    logs ``topics_not_ready`` once, naming the topic and how to create it; the topic
    recreated, every record is written and the estimates are those of the undisturbed run."""
    run = deploy(name=f"{gone}-gone-{client_library}")
    topics = run.config.kafka.topics
    topic = getattr(topics, gone)
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=600, hours=1.0, seed=29))
    expected, predicted = _predict(run.config, w, tmp_path)
    scored = _scored(w)
    _produce(broker, topics.scored, scored[:300])
    run.start()
    run.wait_offsets({(topics.scored, 0): 300})
    _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 30)
    before = set(_read_all(run.config, topics.requests))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_topics([topic])
        _produce(broker, topics.scored, [b"not json", *scored[300:]])
        not_ready_after = _wait_for("/readyz 503", lambda: _readyz(port) == 503, run, 30)
        time.sleep(3.0)  # retried meanwhile: still not ready, logged once
        assert _readyz(port) == 503
        (event,) = run.events("topics_not_ready")
        admin.create_topics([NewTopic(topic, 1, 1)])
        ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, 60)
    finally:
        admin.close()
    run.wait_offsets({(topics.scored, 0): len(scored) + 1})
    labels = _labels(w, expected)
    _produce(broker, topics.labels, labels)
    run.wait_offsets({(topics.labels, 0): len(labels)})
    code, took = run.stop()
    assert code == 0, run.log_tail()
    dead = [json.loads(v)["reason"] for v in _read_all(run.config, topics.deadletter)]
    requests = _read_all(run.config, topics.requests)
    print(
        f"\n{client_library}, {gone} deleted: not ready {not_ready_after:.1f} s after the bad "
        f"record, ready {ready_after:.1f} s after the topic was created again, "
        f"SIGTERM {took:.1f} s; dead letters {dead}, requests {len(requests)} "
        f"({len(set(requests))} distinct, {len(before)} before)\n{json.dumps(event)}"
    )
    assert event["level"] == "error"
    assert str(event["error"]).startswith(f"topics written to missing: {topic} (")
    assert f"--topic {topic} --partitions 1" in str(event["error"])
    assert not run.events("broker_down")  # not an outage: the broker answered all along
    # the records of the step that found the topic missing are written again once when it is
    # retried (consumers deduplicate by request_id), not at every retry while it is missing
    assert set(dead) == {"malformed_json"} and len(dead) <= 2
    assert max(Counter(requests).values()) <= 2
    # the requests written before the deletion went with the topic; every later one is there
    assert set(requests) == set(expected) - (before if gone == "requests" else set())
    assert run.snapshot_repr() == predicted


# ---------------------------------------------------------------------------- consumer lag


def _metric_lag(port: int) -> dict[TP, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        text = bytes(resp.read()).decode()
    out: dict[TP, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "monitor_consumer_lag":
            for s in family.samples:
                out[(s.labels["topic"], int(s.labels["partition"]))] = int(s.value)
    return out


def _broker_lag(broker: Broker, group: str, tps: list[TP]) -> tuple[dict[TP, int], dict[TP, int]]:
    """(end offsets, the group's committed offsets) as the broker reports them."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        parts = [TopicPartition(t, p) for t, p in tps]
        ends = {(tp.topic, tp.partition): int(o) for tp, o in consumer.end_offsets(parts).items()}
        committed = {(tp.topic, tp.partition): consumer.committed(tp) or 0 for tp in parts}
    finally:
        consumer.close()
    return ends, committed


def test_exported_lag_is_the_brokers_end_minus_committed_offsets(
    broker: Broker, deploy: Callable[..., Run], make_topics: Callable[..., TopicsConfig]
) -> None:
    topics = make_topics(PARTITIONS)
    run = deploy(topics, name="lag")
    w = generate(WorkloadSpec(n=3000, hours=3.0, seed=31))
    values = _scored(w)
    sizes = {p: 0 for p in range(PARTITIONS)}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    for i, v in enumerate(values):
        p = min(i % 7, PARTITIONS - 1)  # uneven partitions: 1/7, 1/7, 1/7, 4/7 of the records
        producer.send(topics.scored, v, partition=p)
        sizes[p] += 1
    producer.flush()
    producer.close()
    run.start()
    run.wait_offsets({(topics.scored, p): n for p, n in sizes.items()})
    tps = [(topics.scored, p) for p in range(PARTITIONS)]
    tps.append((topics.labels, 0))
    group = run.config.kafka.group_id

    def agrees() -> bool:
        exported = _metric_lag(run.config.metrics.port)
        ends, committed = _broker_lag(broker, group, tps)
        return all(exported.get(tp) == ends[tp] - committed[tp] for tp in tps)

    took = _wait_for("the exported lag to equal end - committed", agrees, run, 30)
    ends, committed = _broker_lag(broker, group, tps)
    print(f"\nagreed after {took:.1f} s; end offsets {ends}")
    assert committed == ends  # idle: everything read is committed to Kafka, nothing left over
    assert ends[(topics.scored, PARTITIONS - 1)] == sizes[PARTITIONS - 1]
    assert run.stop()[0] == 0, run.log_tail()


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_transactions_commit_marker_is_not_lag(
    library: str, broker: Broker, make_topics: Callable[..., TopicsConfig]
) -> None:
    """Upstream producers that write in transactions leave a marker after each transaction."""
    topics = make_topics()
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(10)
    for batch in range(2):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topics.labels, f"v{batch}{i}".encode())
        producer.commit_transaction(10)
    config = Config(
        kafka=KafkaConfig(
            bootstrap_servers=(broker.bootstrap,),
            group_id=f"tx-{uuid.uuid4().hex[:8]}",
            topics=topics,
            client=KAFKA_TEST_CLIENT,
            client_library=library,
        )
    )
    src = CLASSES[library][0](config, dict)
    try:
        got = _drain(src, 10, topics.labels)
        # offsets 5 and 11 are the two commit markers: taken, never delivered
        assert [r.offset for r in got] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
        deadline = time.monotonic() + 15
        while not src.caught_up([topics.labels]) and time.monotonic() < deadline:
            src.poll(100, 0.2)
            src.probe(2.0)
        assert src.lag().get((topics.labels, 0)) == 0, src.lag()
        assert src.caught_up([topics.labels])
    finally:
        src.close()


# ---------------------------------------------------------------------------- compaction


def _aggregates_appended(broker: Broker, topic: str) -> int:
    """Records ever appended to ``topic`` (the sum of its partitions' end offsets)."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return sum(int(o) for o in consumer.end_offsets(parts).values())
    finally:
        consumer.close()


def _compact_fast(broker: Broker, topic: str) -> None:
    """Roll a segment every second and clean any dirty log (the kit's topic rolls hourly)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    topic,
                    configs={
                        "cleanup.policy": "compact",
                        "segment.ms": "1000",
                        "min.cleanable.dirty.ratio": "0.01",
                        "delete.retention.ms": "1000",
                    },
                )
            ]
        )
    finally:
        admin.close()


def _produce_range(broker: Broker, topic: str, w: Workload, lo: int, hi: int) -> None:
    """Records ``lo`` <= i < ``hi`` of ``w``, record i to partition i % PARTITIONS."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    for i, rec in enumerate(w.records()):
        if lo <= i < hi:
            producer.send(topic, json.dumps(rec).encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()


@pytest.fixture
def roles(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``roles(topics, group, who[, library])``: a ``monitor run`` process of one deployment."""
    procs: list[Proc] = []

    def make(topics: TopicsConfig, group: str, who: str, library: str = "kafka-python") -> Proc:
        path = tmp_path / f"{group}.yaml"
        if not path.exists():
            path.write_text(
                _yaml(
                    broker,
                    topics,
                    tmp_path / f"data-{group}",
                    group,
                    library,
                    max_poll_records=150,
                    labels_per_hour=60,
                    records_per_hour=1000,
                    extra="sampling:\n  max_segments_per_model: 8\n",
                )
            )
        procs.append(Proc(path, load_config(path), tmp_path / f"{group}-{who}.log"))
        return procs[-1]

    yield make
    for p in procs:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def test_a_sampler_rebuilt_from_the_compacted_topic_decides_as_one_process(
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    roles: Callable[..., Proc],
) -> None:
    w = generate(WorkloadSpec(n=8000, hours=8.0, seed=41, segments=("eu", "us", "apac")))
    half = len(w) // 2
    counts = {p: sum(1 for i in range(len(w)) if i % PARTITIONS == p) for p in range(PARTITIONS)}

    # the reference: one process does everything
    ref_topics = make_topics(PARTITIONS)
    ref = roles(ref_topics, "g-all", "all")
    _produce_range(broker, ref_topics.scored, w, 0, len(w))
    ref.launch("all")
    ref.wait_offsets({(ref_topics.scored, p): n for p, n in counts.items()})
    ref_requests, _ = _requests(ref)
    labels = _labels(w, list(ref_requests.values()))
    _produce(broker, ref_topics.labels, labels)
    ref.wait_offsets({(ref_topics.labels, 0): len(labels)})
    assert ref.stop()[0] == 0, ref.log_tail()
    ref_estimates = ref.snapshot_repr()

    # a sampler decides the first half and stops; the aggregates topic is compacted
    topics = make_topics(PARTITIONS)
    _compact_fast(broker, topics.aggregates)
    estimator, first = roles(topics, "g-split", "estimator"), roles(topics, "g-split", "first")
    estimator.launch("estimator")
    first.launch("sampler")
    _wait("the sampler to own every partition", lambda: _owned(first) == PARTITIONS, [first])
    group = estimator.config.kafka.sampler_group_id
    for lo in range(0, half, 500):  # in slices, so its states span many segments
        _produce_range(broker, topics.scored, w, lo, min(lo + 500, half))
        time.sleep(0.5)
    half_counts = {p: sum(1 for i in range(half) if i % PARTITIONS == p) for p in counts}
    _wait(
        "the first half committed",
        lambda: _group_offsets(broker, group, topics.scored) == half_counts,
        [estimator, first],
    )
    assert first.stop()[0] == 0, first.log_tail()
    appended = _aggregates_appended(broker, topics.aggregates)

    def compacted() -> bool:
        return len(read_topic(estimator.config, topics.aggregates, range)) < appended

    t0 = time.monotonic()
    _wait("the cleaner to compact the aggregates topic", compacted, [estimator])
    kept = len(read_topic(estimator.config, topics.aggregates, range))
    print(f"\naggregates: {appended} appended, {kept} kept after {time.monotonic() - t0:.1f} s")

    # a new sampler rebuilds from the compacted topic, then decides the second half
    second = roles(topics, "g-split", "second")
    second.launch("sampler")
    _wait("the new sampler to own every partition", lambda: _owned(second) == PARTITIONS, [second])
    assert second.events("sampler_rebuilt")[-1]["buckets"], "rebuilt without the states"
    _produce_range(broker, topics.scored, w, half, len(w))
    _wait(
        "the second half committed",
        lambda: _group_offsets(broker, group, topics.scored) == counts,
        [estimator, second],
    )
    estimator.wait_offsets(_count(estimator, topics.aggregates))
    requests, produced = _requests(estimator)
    assert requests == ref_requests  # same ids, same bytes
    estimator.wait_offsets({(topics.requests, 0): produced})
    _produce(broker, topics.labels, labels)
    estimator.wait_offsets({(topics.labels, 0): len(labels)})
    assert second.stop()[0] == 0, second.log_tail()
    assert estimator.stop()[0] == 0, estimator.log_tail()
    assert estimator.snapshot_repr() == ref_estimates


def _status(port: int) -> int:
    """``/readyz``'s status, 0 while nothing listens yet."""
    try:
        return _readyz(port)
    except OSError:
        return 0


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_standby_sampler_is_not_ready_while_the_broker_is_down(
    library: str,
    own_kafka: KafkaBroker,
    make_topics: Callable[..., TopicsConfig],
    roles: Callable[..., Proc],
) -> None:
    """Two samplers, one partition: the standby once asked the broker nothing and stayed ready
    through an outage. Both report not ready while the broker is stopped, and ready again after
    it restarts."""
    topics = make_topics(1)
    group = f"g-standby-{library}"
    first, second = roles(topics, group, "first", library), roles(topics, group, "second", library)
    first.launch("sampler")
    _wait("the first sampler to own the partition", lambda: _owned(first) == 1, [first])
    second.launch("sampler")
    both = [first, second]
    _wait("both samplers ready", lambda: all(_status(p.port) == 200 for p in both), both)
    time.sleep(3.0)  # the join of the second settles: one owner, one standby
    assert sorted(_owned(p) for p in both) == [0, 1], [p.log_tail() for p in both]
    own_kafka.stop()
    t0 = time.monotonic()
    _wait("both samplers not ready", lambda: all(_status(p.port) == 503 for p in both), both)
    not_ready_s = time.monotonic() - t0
    own_kafka.start()
    t0 = time.monotonic()
    _wait("both samplers ready again", lambda: all(_status(p.port) == 200 for p in both), both)
    print(
        f"\n{library}: owner and standby not ready {not_ready_s:.1f} s after the broker stopped, "
        f"ready {time.monotonic() - t0:.1f} s after it started"
    )
    for p in both:
        assert p.stop()[0] == 0, p.log_tail()
        assert p.events("broker_down"), p.log_tail()


# ---------------------------------------------------------------------------- crash loop

SESSION_MS = 15_000  # a session long enough to tell waiting for it from not waiting
STATIC_BOUND_S = 10.0  # static membership: start-up and one join, no wait for a dead session


@pytest.mark.parametrize("membership", ["dynamic", "static"])
def test_crash_loop_then_the_daemon_consumes_again(
    membership: str, broker: Broker, deploy: Callable[..., Run]
) -> None:
    run = deploy(name=f"loop-{membership}")
    client = f"session_timeout_ms: {SESSION_MS}\n    heartbeat_interval_ms: 3000"
    if membership == "static":
        client += "\n    group_instance_id: monitor-0"
    text = run.config_path.read_text()
    run.config_path.write_text(
        text.replace("session_timeout_ms: 2000\n    heartbeat_interval_ms: 500", client)
    )
    run.config = load_config(run.config_path)
    topics = run.config.kafka.topics
    w = generate(WorkloadSpec(n=10_000, hours=10.0, seed=43))
    values = _scored(w)
    _produce(broker, topics.scored, values[:5000])
    run.start()
    run.wait_offsets({(topics.scored, 0): 1})
    for _ in range(3):
        assert run.proc is not None
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait()
        time.sleep(1.0)
        run.start()
    assert run.proc is not None
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    before = run.offsets().get((topics.scored, 0), 0)
    _produce(broker, topics.scored, values[5000:])  # 5,000 records or more wait
    starts = len(run.events("started"))
    t0 = time.monotonic()
    run.start()
    started = _wait_for("the start-up", lambda: len(run.events("started")) > starts, run, 60)
    took = _wait_for(
        "consumption", lambda: run.offsets().get((topics.scored, 0), 0) > before, run, 120
    )
    waited = time.monotonic() - t0
    assert run.stop()[0] == 0, run.log_tail()
    print(
        f"\n{membership} membership, session {SESSION_MS / 1000:.0f} s: consumed again "
        f"{waited:.1f} s after the restart (process start-up {started:.1f} s, then {took:.1f} s)"
    )
    if membership == "static":
        assert waited < STATIC_BOUND_S
    else:
        assert waited < SESSION_MS / 1000 + 30.0
