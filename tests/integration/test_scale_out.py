"""Scale-out for real: 2 ``--role sampler`` processes + 1 ``--role estimator`` on a 4-partition
topic equal one ``--role all`` process, even when a sampler is SIGKILLed mid-stream.

The killed sampler dies either right after a flush (its bucket states are on the aggregates
topic, its offsets are not committed) or right after queueing a step (the producer may have sent
part of it): the survivor takes its partitions over, decides those records again and must
neither lose nor double count them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.io.kafka_io import read_topic
from monitor.runtime.failpoint import Failpoint
from monitor.sim.embedded_broker import free_port
from monitor.sim.workload import Workload, WorkloadSpec, generate
from tests.conftest import Broker
from tests.integration.test_daemon_kafka import Run, _labels, _produce, _yaml

pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka"), pytest.mark.timeout(300)]

PARTITIONS = 4
TIMEOUT_S = 90.0


class Proc(Run):
    """A ``monitor run`` child with a role (and its own metrics port)."""

    def launch(self, role: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "monitor", "run", "--config", str(self.config_path)]
        cmd += ["--role", role, "--metrics-port", str(free_port())]
        with self.log_path.open("ab") as err:
            self.proc = subprocess.Popen(
                cmd,
                stderr=err,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )


@pytest.fixture
def deploy(broker: Broker, tmp_path: Path) -> Iterator[Callable[..., Callable[[str], Proc]]]:
    """``deploy(topics, name, group)(who)``: a process of that deployment (killed at the end)."""
    procs: list[Proc] = []

    def _deploy(
        topics: TopicsConfig, name: str, group: str, library: str = "kafka-python"
    ) -> Callable[[str], Proc]:
        path = tmp_path / f"{name}.yaml"
        text = _yaml(
            broker,
            topics,
            tmp_path / f"data-{name}",
            group,
            library,
            max_poll_records=150,
            labels_per_hour=60,
            records_per_hour=1000,
            refresh_records=40,  # ~250 records per partition-hour: refreshes at 40, 80, 160
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
    assert s2.events("sampler_rebuilt")[-1]["buckets"], "took over without the state"
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
