"""Scale-out for real: 2 ``--role sampler`` processes + 1 ``--role estimator`` on a 4-partition
topic equal one ``--role all`` process, even when a sampler is SIGKILLed mid-stream.

The killed sampler dies either right after a flush (its bucket states are on the aggregates
topic, its offsets are not committed) or right after queueing a step (the producer may have sent
part of it): the survivor takes its partitions over, decides those records again and must
neither lose nor double count them.

With ``recalibrate: true`` the estimator refits the calibration map from a simulated audit
team's labels while the stream arrives in chunks, and the samplers take each map it publishes;
a map depends on when labels arrived, so that run is checked as the in-process one is
(tests/unit/test_scale_out_recalibration.py): one byte string per request id across the kill and
the hand-overs, every control records a map the estimator published, and the whole scored
topic decided again from the published controls alone gives exactly the requests on the topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.core import aggregates
from monitor.core.records import decode_scored
from monitor.core.sampler import PartKey, SamplerService
from monitor.free_ports import free_port
from monitor.io.kafka_io import read_topic
from monitor.runtime.failpoint import Failpoint
from monitor.sim.auditors import AuditPolicy, SimulatedAuditTeam
from monitor.sim.workload import Workload, WorkloadSpec, generate
from monitor.stats.budget import NO_CALIBRATION, Calibration, Control
from monitor.testing.fakes import FakeLog, FakeSource
from tests.conftest import Broker
from tests.integration.test_daemon_kafka import Run, _labels, _produce, _yaml

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka"), pytest.mark.timeout(300)]

PARTITIONS = 4
TIMEOUT_S = 90.0


class Proc(Run):
    """A ``monitor run`` child with a role (and its own metrics port, ``port``)."""

    port = 0

    def launch(self, role: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "monitor", "run", "--config", str(self.config_path)]
        cmd += ["--role", role, "--metrics-port", str(self.port)]
        with self.log_path.open("ab") as err:
            self.proc = subprocess.Popen(
                cmd,
                stderr=err,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )


@pytest.fixture
def deploy(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., Callable[[str], Proc]]]:
    """``deploy(topics, name, group)(who)``: a process of that deployment (killed at the end).

    ``group`` is the consumer group's prefix; each deployment gets a fresh group.
    """
    procs: list[Proc] = []

    def _deploy(
        topics: TopicsConfig,
        name: str,
        group: str,
        library: str = "kafka-python",
        *,
        recalibrate: bool = False,
        keep_scores: bool = True,
    ) -> Callable[[str], Proc]:
        path = tmp_path / f"{name}.yaml"
        text = _yaml(
            broker,
            topics,
            tmp_path / f"data-{name}",
            # a group of its own: the session broker outlives the test, and when the two cases
            # of a test shared one group the second's samplers got no partition in 90 s
            f"{group}-{uuid.uuid4().hex[:8]}",
            library,
            max_poll_records=150,
            labels_per_hour=60,
            records_per_hour=1000,
            refresh_records=40,  # ~250 records per partition-hour: refreshes at 40, 80, 160
            recalibrate=recalibrate,
            keep_scores=keep_scores,
            extra="sampling:\n  max_segments_per_model: 8\n",
        )
        path.write_text(text)
        config = load_config(path)

        def make(who: str) -> Proc:
            procs.append(Proc(path, config, tmp_path / f"{name}-{who}.log"))
            return procs[-1]

        return make

    yield _deploy
    for p in procs:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()


def _produce_scored(broker: Broker, topic: str, w: Workload) -> dict[int, int]:
    """Record i to partition i % 4, in order; returns the records per partition."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    counts = dict.fromkeys(range(PARTITIONS), 0)
    for i, rec in enumerate(w.records()):
        producer.send(topic, json.dumps(rec).encode(), partition=i % PARTITIONS)
        counts[i % PARTITIONS] += 1
    producer.flush()
    producer.close()
    return counts


def _wait(what: str, done: Callable[[], bool], procs: list[Proc]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        for p in procs:
            assert p.proc is not None and p.proc.poll() is None, p.log_tail()
        if time.monotonic() > deadline:
            tails = "\n".join(p.log_tail()[-1500:] for p in procs)
            msg = f"timed out waiting for {what}\n{tails}"
            raise AssertionError(msg)
        time.sleep(0.2)


def _group_offsets(broker: Broker, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets (read by a consumer that does not join it)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _labels_caught_up(broker: Broker, estimator: Run, team: SimulatedAuditTeam) -> bool:
    """The team read every request and holds no answer back, and the estimator committed every
    label on the topic (it refits after the step that takes them, ``Engine._recalibrate``)."""
    stats = team.stats
    if stats.waiting or stats.requests < len(_requests(estimator)[0]):
        return False
    topic = estimator.config.kafka.topics.labels
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or ())  # one, unlike the scored topic
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in parts])
    finally:
        consumer.close()
    done = _group_offsets(broker, estimator.config.kafka.group_id, topic)
    return all((done[tp.partition] or 0) >= end for tp, end in ends.items())


def _requests(run: Run) -> tuple[dict[str, bytes], int]:
    """Request id -> bytes (one id always has the same bytes), and the records in the topic."""
    records = read_topic(run.config, run.config.kafka.topics.requests, range)
    out: dict[str, bytes] = {}
    for _, key, value in records:
        assert value is not None
        assert out.setdefault((key or b"").decode(), value) == value
    return out, len(records)


def _count(run: Run, topic: str) -> dict[tuple[str, int], int]:
    """Records per partition of ``topic``, read to the end."""
    counts: dict[tuple[str, int], int] = {}
    for p, _, _ in read_topic(run.config, topic, range):
        counts[(topic, p)] = counts.get((topic, p), 0) + 1
    return counts


def _owned(run: Run) -> int:
    """Scored partitions a sampler owns, by its last rebuild."""
    rebuilt = run.events("sampler_rebuilt")
    parts = rebuilt[-1]["partitions"] if rebuilt else []
    assert isinstance(parts, list)
    return len(parts)


@pytest.mark.parametrize(
    ("kill_at", "library"),
    [("flush:1", "kafka-python"), ("produce:8", "kafka-python"), ("flush:1", "confluent-kafka")],
)
def test_two_samplers_and_an_estimator_equal_one_process_through_a_sigkill(
    kill_at: str,
    library: str,
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    deploy: Callable[..., Callable[[str], Proc]],
) -> None:
    w = generate(WorkloadSpec(n=9000, hours=9.0, seed=21, segments=("eu", "us", "apac")))

    # the reference: one process does everything
    ref_topics = make_topics(PARTITIONS)
    ref = deploy(ref_topics, "all", "g-all")("all")
    counts = _produce_scored(broker, ref_topics.scored, w)
    ref.launch("all")
    ends = {(ref_topics.scored, p): n for p, n in counts.items()}
    ref.wait_offsets(ends)
    ref_requests, _ = _requests(ref)
    labels = _labels(w, list(ref_requests.values()))
    _produce(broker, ref_topics.labels, labels)
    ref.wait_offsets({(ref_topics.labels, 0): len(labels)})
    assert ref.stop()[0] == 0, ref.log_tail()
    ref_estimates = ref.snapshot_repr()

    # two samplers and an estimator; the first sampler SIGKILLs itself at ``kill_at``
    topics = make_topics(PARTITIONS)
    make = deploy(topics, "split", "g-split", library)  # the reference runs kafka-python
    estimator, s1, s2 = make("estimator"), make("sampler-1"), make("sampler-2")
    estimator.launch("estimator")
    s1.launch("sampler", env={Failpoint.ENV: kill_at})
    s2.launch("sampler")
    _wait(
        "each sampler to own two partitions",
        lambda: _owned(s1) == _owned(s2) == 2,
        [estimator, s1, s2],
    )
    _produce_scored(broker, topics.scored, w)
    assert s1.proc is not None
    assert s1.proc.wait(TIMEOUT_S) == -signal.SIGKILL, s1.log_tail()
    group = estimator.config.kafka.sampler_group_id
    _wait(
        "the survivor to commit every partition's end",
        lambda: _group_offsets(broker, group, topics.scored) == {p: n for p, n in counts.items()},
        [estimator, s2],
    )
    assert _owned(s2) == PARTITIONS, s2.log_tail()
    # the takeover rebuilt from the aggregates topic: states as of the committed offsets, or
    # (nothing committed yet when the first sampler died) the controls published beyond them
    took = s2.events("sampler_rebuilt")[-1]
    assert took["buckets"] or took["ahead"], "took over without the state"
    estimator.wait_offsets(_count(estimator, topics.aggregates))
    requests, produced = _requests(estimator)
    assert requests == ref_requests  # same ids, same bytes
    if kill_at.startswith("flush"):  # flushed, not committed: those requests were sent twice
        assert produced > len(requests)
    estimator.wait_offsets({(topics.requests, 0): produced})
    _produce(broker, topics.labels, labels)
    estimator.wait_offsets({(topics.labels, 0): len(labels)})
    assert s2.stop()[0] == 0, s2.log_tail()
    assert estimator.stop()[0] == 0, estimator.log_tail()
    assert estimator.snapshot_repr() == ref_estimates


CHUNKS = 6


def _published(run: Run) -> tuple[list[Calibration], dict[PartKey, Control]]:
    """The maps on the aggregates topic, and each bucket's last published control."""
    maps: list[Calibration] = []
    controls: dict[PartKey, Control] = {}
    for _, key, value in read_topic(run.config, run.config.kafka.topics.aggregates, range):
        if aggregates.is_map(key):
            maps.append(aggregates.decode_map(key, value)[1])
            continue
        pk, state = aggregates.decode(key, value)
        if state is not None and state.control is not None:
            controls[pk] = state.control
    return maps, controls


def _decided_again(run: Run, controls: dict[PartKey, Control]) -> dict[str, bytes]:
    """The whole scored topic decided from scratch by a sampler holding only ``controls``."""
    config = run.config
    log = FakeLog()
    log.create(config.kafka.topics.scored, PARTITIONS)
    for p, _, value in read_topic(config, config.kafka.topics.scored, range):
        log.append(config.kafka.topics.scored, value, partition=p)
    source = FakeSource(log, [config.kafka.topics.scored], lambda: {})
    batch, bad = decode_scored(source.poll(10**9, 0.0), config)
    assert not bad
    sampler = SamplerService(config, PARTITIONS, controls=controls)
    return {r.request_id: r.to_json() for r in sampler.process(batch).requests}


@pytest.mark.parametrize("kill_at", ["flush:12", "produce:10"])
def test_samplers_take_the_estimators_maps_and_replay_them_byte_for_byte_through_a_sigkill(
    kill_at: str,
    broker: Broker,
    make_topics: Callable[..., TopicsConfig],
    deploy: Callable[..., Callable[[str], Proc]],
) -> None:
    w = generate(WorkloadSpec(n=6000, hours=6.0, seed=5, segments=("eu", "us")))
    topics = make_topics(PARTITIONS)
    make = deploy(topics, "recal", "g-recal", recalibrate=True, keep_scores=False)
    estimator, s1, s2 = make("estimator"), make("sampler-1"), make("sampler-2")
    assert estimator.config.model("default").recalibrate
    estimator.launch("estimator")
    s1.launch("sampler", env={Failpoint.ENV: kill_at})
    s2.launch("sampler")
    _wait("each sampler to own two partitions", lambda: _owned(s1) == _owned(s2) == 2, [s1, s2])
    team = SimulatedAuditTeam(
        dict(w.truth_rows()),
        broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=AuditPolicy(delay_s=0.0, seed=3),
    ).start()
    group = estimator.config.kafka.sampler_group_id
    records = [json.dumps(r).encode() for r in w.records()]
    sent = dict.fromkeys(range(PARTITIONS), 0)
    size = len(records) // CHUNKS
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
    killed_at = -1  # the chunk before which the first sampler was found SIGKILLed
    try:
        for c in range(CHUNKS):
            published = len(estimator.events("calibration_published"))
            assert s1.proc is not None
            if killed_at < 0 and s1.proc.poll() is not None:
                assert s1.proc.returncode == -signal.SIGKILL, s1.log_tail()
                killed_at = c
                rebuilt = len(s1.events("sampler_rebuilt"))
                s1.launch("sampler")  # back without the failpoint: partitions move again

                def back(n: int = rebuilt) -> bool:
                    return len(s1.events("sampler_rebuilt")) > n

                _wait("the restarted sampler to take partitions", back, [estimator, s2, s1])
            for i in range(c * size, len(records) if c == CHUNKS - 1 else (c + 1) * size):
                producer.send(topics.scored, records[i], partition=i % PARTITIONS)
                sent[i % PARTITIONS] += 1
            producer.flush()
            live = [estimator, s2] + ([s1] if killed_at >= 0 else [])
            _wait(
                f"the samplers to commit chunk {c}",
                lambda: _group_offsets(broker, group, topics.scored) == sent,
                live,
            )
            if c < CHUNKS - 1:  # the labels of the chunk come back and the map is refitted

                def refitted(n: int = published) -> bool:
                    if len(estimator.events("calibration_published")) > n:
                        return True
                    # a refit that changes no decision materially publishes nothing
                    return _labels_caught_up(broker, estimator, team)

                _wait(f"a refit on the labels of chunk {c}", refitted, live)
    finally:
        producer.close()
        team.stop()
    assert 0 < killed_at < CHUNKS, f"{kill_at} did not kill the sampler mid-stream"
    if kill_at.startswith("flush"):  # flushed, not committed: the survivor took those controls
        assert any(e["ahead"] for e in s2.events("sampler_rebuilt")), s2.log_tail()
    for run in (s1, s2, estimator):
        assert run.stop()[0] == 0, run.log_tail()

    requests, _ = _requests(estimator)  # one byte string per request id
    maps, controls = _published(estimator)
    assert len({m.version for m in maps}) >= 3
    used = [
        s.calibration for c in controls.values() for s in (c, *(r.control for r in c.refreshes))
    ]
    assert all(c == NO_CALIBRATION or c in maps for c in used)
    assert len({c.version for c in used} - {0}) >= 2, "the map did not change mid-stream"
    assert _decided_again(estimator, controls) == requests
    taken = [e["version"] for r in (s1, s2) for e in r.events("calibration_taken")]
    assert len(set(taken)) >= 2
    assert not read_topic(estimator.config, topics.deadletter, range)
