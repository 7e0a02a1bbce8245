"""A partition leader is lost mid-stream on a three-node Apache Kafka cluster (``KafkaCluster``).

The daemon creates its topics itself (``create_topics``, ``kafka.replication_factor: 3``; the
cluster has ``min.insync.replicas=2``). One node is made the leader of every partition the daemon
reads and writes (it led the audit-requests partition; the others are moved to it) and the
coordinator of the daemon's consumer group (by the choice of the group id). A fifth of the way
through the scored stream it is SIGKILLed, or frozen (SIGSTOP: its connections stay open and
nothing answers, as on a hung host), and the run finishes on the two nodes left:

- the audit requests are the undisturbed run's (the engine over in-memory fakes), byte for byte,
  in the same order, each exactly once: a producer's retry after NOT_LEADER writes nothing twice;
- no dead letter; the estimates, and the exported estimates and counters, are the undisturbed
  run's;
- ``/readyz`` answers 200 again (the times are printed), after a freeze within
  ``FROZEN_READY_S``. The daemon's offset commits, produce requests and probes each waited 30-60
  s for the frozen node (the libraries' defaults): ready for good 31 s (kafka-python) and 125 s
  (confluent-kafka) after the freeze, the stream finished after 32 s and 123 s. Now 18 s and
  21-22 s, 19 s and 23 s (a 10 s request timeout, a 5 s bound on the commit), against 6-9 s
  after a kill;
- the lost node restarts (a frozen one goes on) and rejoins the in-sync replicas of every
  partition.

The Label Studio bridge is put through the same loss of its leader and group coordinator
(``test_the_bridge_goes_on_when_its_leader_is_lost``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.load import load_config
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.io.kafka_io import create_topics, ensure_topics
from monitor.sim.kafka_broker import KafkaCluster
from monitor.sim.workload import WorkloadSpec, generate
from tests.integration.ls_helpers import (
    annotate,
    http_status,
    ls_config,
    metric,
    produce,
    project_tasks,
    read_labels,
    request,
    wait_for,
)
from tests.integration.test_daemon_kafka import (
    Run,
    _labels,
    _predict,
    _produce,
    _read_all,
    _scored,
    _yaml,
)
from tests.integration.test_kafka_real import _status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FROZEN_READY_S = 40.0
# the bridge: ready for good this soon after the loss (a send that fails on the frozen node
# replaces the producer, whose bootstrap may pick that node again: 5 s each), watched this long
# (past the 30 s request timeout of kafka-python's clients) and at least 15 s past the new
# request's task
BRIDGE_READY_S = 60.0
BRIDGE_WATCH_S = 35.0

REPLICAS = 3
OFFSETS = "__consumer_offsets"  # its partition's leader coordinates the groups placed on it
# the exported series that must equal the undisturbed run's: every estimate of every window (not
# the alerts: the daemon's snapshot hook decides those, the engine alone does not), and the
# counters of what was consumed, requested, joined and rejected
COUNTERS = {
    "monitor_records",
    "monitor_audit_requests",
    "monitor_labels_received",
    "monitor_invalid_records",
}


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (ASCII text): Kafka places a group by it."""
    h = 0
    for c in text:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _coordinator_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group``."""
    h = _java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Cluster:
    """Admin views of the cluster: leaders, in-sync replicas, group coordinators."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)

    def partitions(self, topics: list[str]) -> dict[tuple[str, int], Any]:
        """(topic, partition) -> leader_id, replica_nodes, isr_nodes, as metadata says."""
        return {
            (t["name"], p["partition_index"]): p
            for t in self.admin.describe_topics(topics)
            for p in t["partitions"]
        }

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        return {tp: int(p["leader_id"]) for tp, p in self.partitions(topics).items()}

    def created(self, topics: list[str], timeout_s: float = 15.0) -> dict[tuple[str, int], Any]:
        """The partitions of ``topics`` once every topic has some and each has a leader: a
        node the admin asks may not know a topic the controller just created."""
        deadline = time.monotonic() + timeout_s
        while True:
            parts = self.partitions(topics)
            known = {t for t, _ in parts}
            if known == set(topics) and all(p["leader_id"] >= 0 for p in parts.values()):
                return parts
            assert time.monotonic() < deadline, (topics, parts)
            time.sleep(0.25)

    def offsets_partitions(self, timeout_s: float = 15.0) -> int:
        """How many partitions ``__consumer_offsets`` has, once each has a leader (a group
        lookup creates the topic)."""
        deadline = time.monotonic() + timeout_s
        while True:
            # COORDINATOR_NOT_AVAILABLE while the topic is being created
            with contextlib.suppress(KafkaError):
                self.admin.describe_groups(["probe"])
            found = self.leaders([OFFSETS])
            if found and all(leader >= 0 for leader in found.values()):
                return len(found)
            assert time.monotonic() < deadline, "__consumer_offsets has no leaders"
            time.sleep(0.25)

    def lead(self, node: int, tps: list[tuple[str, int]]) -> None:
        """Make ``node`` the leader of the partitions ``tps`` (same replicas, ``node`` first)."""
        topics = sorted({t for t, _ in tps})
        info = self.partitions(topics)
        moves = {
            TopicPartition(t, p): [node, *(r for r in info[(t, p)]["replica_nodes"] if r != node)]
            for t, p in tps
            if info[(t, p)]["leader_id"] != node
        }
        if not moves:
            return
        self.admin.alter_partition_reassignments(moves)
        elect: dict[str, list[int]] = {}
        for tp in moves:
            elect.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + 15
        while any(self.leaders(topics)[tp] != node for tp in tps):
            assert time.monotonic() < deadline, self.partitions(topics)
            # the preferred replica, ``node``, once it is in sync (an error until then)
            self.admin.elect_leaders(0, elect, raise_errors=False)
            time.sleep(0.25)

    def controller(self) -> int:
        """The node leading the KRaft quorum (the active controller)."""
        quorum = self.admin.describe_metadata_quorum()
        return int(quorum["topics"][0]["partitions"][0]["leader_id"])

    def close(self) -> None:
        self.admin.close()


class Readiness:
    """``/readyz`` every 0.1 s in a thread: each change of status with its time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.changes: list[tuple[float, int]] = [(time.monotonic(), _status(port))]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            code = _status(self.port)
            if self.changes[-1][1] != code:
                self.changes.append((time.monotonic(), code))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def after(self, t0: float) -> list[tuple[float, int]]:
        """The changes since ``t0``, as (seconds after ``t0``, status)."""
        return [(round(t - t0, 1), code) for t, code in self.changes if t >= t0]


def _estimates(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    """Every estimate series (those with a ``window``) and the ``COUNTERS``, values as text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            estimate = "window" in s.labels and not family.name.startswith("monitor_alert")
            if estimate or family.name in COUNTERS:
                out[(s.name, tuple(sorted(s.labels.items())))] = repr(s.value)
    return out


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        return bytes(resp.read()).decode()


@pytest.fixture
def admin(kafka_cluster: KafkaCluster) -> Iterator[Cluster]:
    kafka_cluster.start()  # a node an earlier case killed comes back
    view = Cluster(kafka_cluster)
    yield view
    view.close()


@pytest.mark.parametrize("how", ["killed", "frozen"])
@pytest.mark.parametrize("client_library", ["kafka-python", "confluent-kafka"])
def test_the_leader_lost_mid_stream_equals_the_undisturbed_run(
    client_library: str, how: str, kafka_cluster: KafkaCluster, admin: Cluster, tmp_path: Path
) -> None:
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    names = [topics.scored, topics.requests, topics.labels, topics.deadletter]

    # the daemon creates its topics with three replicas
    text = _yaml(kafka_cluster, topics, tmp_path / "data", "g", client_library, max_poll_records=50)
    text = text.replace(f'["{kafka_cluster.bootstrap}"]', f'"{kafka_cluster.bootstrap}"')
    text = text.replace("  client_library:", f"  replication_factor: {REPLICAS}\n  client_library:")
    probe = load_config(_write(tmp_path / "probe.yaml", text))
    create_topics(probe)
    parts = admin.created(names)
    assert all(len(p["replica_nodes"]) == REPLICAS for p in parts.values()), parts

    # one node leads every partition of the daemon and coordinates its group
    victim = admin.leaders([topics.requests])[(topics.requests, 0)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    coordinator = (OFFSETS, _coordinator_partition(group, admin.offsets_partitions()))
    admin.lead(victim, [*((name, 0) for name in names), coordinator])
    path = _write(tmp_path / "failover.yaml", text.replace("group_id: g\n", f"group_id: {group}\n"))
    run = Run(path, load_config(path), tmp_path / "daemon.log")

    w = generate(WorkloadSpec(n=6000, hours=6.0, seed=23))
    registry = CollectorRegistry()
    expected, predicted = _predict(run.config, w, tmp_path, registry)
    want_metrics = _estimates(generate_latest(registry).decode())
    _produce(kafka_cluster, topics.scored, _scored(w))
    run.start()
    port = run.config.metrics.port
    try:
        run.wait_offsets({(topics.scored, 0): len(w) // 5})
        coordinated = {g["group_id"] for g in admin.admin.list_groups(broker_ids=[victim])}
        assert group in coordinated, coordinated
        controller = admin.controller()
        ready = Readiness(port)
        assert ready.changes[0][1] == 200, run.log_tail()

        node = kafka_cluster.node(victim)
        node.kill() if how == "killed" else node.pause()
        killed = time.monotonic()
        at_kill = run.offsets().get((topics.scored, 0), 0)
        try:
            run.wait_offsets({(topics.scored, 0): len(w)}, 90)
        finally:
            node.resume()  # fenced by the cluster, it goes on as a follower
        streamed = time.monotonic() - killed
        # a frozen node served its stream by the others; resumed, it answers metadata requests
        # from its view before the freeze until it catches up, so only a killed one is asked
        after = admin.partitions(names) if how == "killed" else {}
        assert all(p["leader_id"] not in (victim, -1) for p in after.values()), after
        assert all(victim not in p["isr_nodes"] for p in after.values()), after

        labels = _labels(w, expected)
        _produce(kafka_cluster, topics.labels, labels)
        run.wait_offsets({(topics.labels, 0): len(labels)}, 60)
        deadline = time.monotonic() + 20  # published within a second of the last labels
        got_metrics = _estimates(_scrape(port))
        while (got_metrics != want_metrics or _status(port) != 200) and time.monotonic() < deadline:
            time.sleep(0.2)
            got_metrics = _estimates(_scrape(port))
        ready.stop()
        requests = _read_all(run.config, topics.requests)
        dead = _read_all(run.config, topics.deadletter)
        code, _ = run.stop()
    finally:
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
    assert code == 0, run.log_tail()

    # the lost node comes back and catches up
    restarted = 0.0
    if how == "killed":
        kafka_cluster.node(victim).start()
        restarted = kafka_cluster.node(victim).start_seconds[-1]
    t0 = time.monotonic()
    every = [*names, OFFSETS]
    while not all(victim in p["isr_nodes"] for p in admin.partitions(every).values()):
        assert time.monotonic() - t0 < 30, admin.partitions(every)
        time.sleep(0.2)
    in_sync = time.monotonic() - t0

    changes = ready.after(killed)  # (seconds after the kill, /readyz status)
    ready_again = changes[-1][0] if changes else 0.0
    print(
        f"\n{client_library}: node {victim} (leader of the daemon's {len(names)} partitions, "
        f"its group's coordinator{', the active controller' if controller == victim else ''}) "
        f"{how} at offset {at_kill}/{len(w)}; new leaders "
        f"{sorted({int(p['leader_id']) for p in after.values()}) or 'not asked'}; the stream "
        f"finished "
        f"{streamed:.1f} s after; /readyz {changes or 'stayed 200'} (ready for good "
        f"{ready_again:.1f} s after); requests {len(requests)} ({len(set(requests))} "
        f"distinct); the node {f'restarted in {restarted:.1f} s, ' if restarted else ''}in "
        f"sync {in_sync:.1f} s later"
    )
    assert at_kill < len(w) // 2, "the stream was half done before the kill"
    assert requests == expected  # the same bytes in the same order, none twice, none lost
    assert dead == []
    assert run.snapshot_repr() == predicted
    assert got_metrics == want_metrics
    assert ready.changes[-1][1] == 200
    if how == "frozen":
        assert ready_again < FROZEN_READY_S, changes


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_the_bridge_goes_on_when_its_leader_is_lost(
    how: str,
    kafka_cluster: KafkaCluster,
    admin: Cluster,
    labelstudio: LabelStudioServer,
    tmp_path: Path,
) -> None:
    """The Label Studio bridge on the cluster, one node leading its requests and labels
    partitions and coordinating its group: an answer given after that node is lost is
    published once and a request written after it becomes a task while the node is down, and
    ``/readyz`` is 200 for good within ``BRIDGE_READY_S`` and never 503 after the new request
    is a task (the bridge works on the new leaders and coordinator).

    Measured: killed, the answer published 3.4-7.8 s after, ready throughout; frozen, 10.4-13.8
    s, ready again after 10.7-13.7 s. Frozen, the bridge's consumer kept kafka-python's 30 s request
    timeout: its offset commits waited for the frozen coordinator until a heartbeat gave up at
    30 s, and ``/readyz`` said 503 again from 21 s to 34 s after the freeze, after the new
    request had become a task. Once in a run of the suite the answer's send failed on the frozen
    node and the replaced producer's bootstrap picked it, twice, for kafka-python's 30 s each:
    published 73 s after the freeze (now 5 s per bootstrap).
    """
    tag = uuid.uuid4().hex[:8]
    topics = TopicsConfig().tagged(tag)
    ensure_topics(kafka_cluster.bootstrap, topics, 1, replication_factor=REPLICAS)
    admin.created([topics.requests, topics.labels])
    ls = ls_config(labelstudio, tag, poll_interval_s=1.0)
    victim = admin.leaders([topics.requests])[(topics.requests, 0)]
    coordinator = (OFFSETS, _coordinator_partition(ls.group_id, admin.offsets_partitions()))
    admin.lead(victim, [(topics.requests, 0), (topics.labels, 0), coordinator])
    servers = tuple(kafka_cluster.bootstrap.split(","))
    config = Config(kafka=KafkaConfig(bootstrap_servers=servers, topics=topics))
    bridge = LabelStudioBridge(config, ls, tmp_path / "state.sqlite", labelstudio.token)
    bridge.start()
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    title = ls.title("default")
    first, second = request(0), request(1)
    node = kafka_cluster.node(victim)
    try:
        produce(kafka_cluster.bootstrap, topics.requests, [first])
        wait_for("1 task", lambda: len(project_tasks(client, title)) == 1)
        wait_for("ready", lambda: http_status(bridge.port, "/readyz") == 200)
        ready = Readiness(bridge.port)
        node.kill() if how == "killed" else node.pause()
        lost = time.monotonic()
        try:
            annotate(client, project_tasks(client, title)[0]["id"], 1)
            published = "labelstudio_bridge_labels_published_total"
            wait_for(
                "the answer published", lambda: metric(bridge, published, model="default") > 0, 90
            )
            answered = time.monotonic() - lost
            # the test's own client is given the nodes left (bootstrapped on the lost one,
            # kafka-python gives up after its 30 s request timeout)
            others = [b.bootstrap for b in kafka_cluster.brokers if b is not node]
            producer = KafkaProducer(bootstrap_servers=others)
            producer.send(topics.requests, key=b"k", value=json.dumps(second).encode())
            producer.flush(90)
            producer.close(5)
            wait_for("2 tasks", lambda: len(project_tasks(client, title)) == 2, 90)
            tasked = time.monotonic() - lost
            wait_for("ready", lambda: http_status(bridge.port, "/readyz") == 200, 60)
            time.sleep(max(0.0, lost + max(BRIDGE_WATCH_S, tasked + 15) - time.monotonic()))
            ready.stop()
        finally:
            node.resume()
        if how == "killed":
            node.start()
        labels = read_labels(kafka_cluster.bootstrap, topics.labels, 2, timeout_s=10)
        assert bridge.settle()
    finally:
        bridge.stop()
    changes = ready.after(lost)
    print(
        f"\nthe bridge's leader {how}: the answer published {answered:.1f} s after, a new "
        f"request a task {tasked:.1f} s after; /readyz {changes or 'stayed 200'}"
    )
    assert [(x["request_id"], x["label"]) for x in labels] == [(first["request_id"], 1)]
    assert sorted(t["meta"]["request_id"] for t in project_tasks(client, title)) == sorted(
        [first["request_id"], second["request_id"]]
    )
    assert bridge.error is None
    ready_again = changes[-1][0] if changes else 0.0
    assert not changes or changes[-1][1] == 200, changes
    assert ready_again < BRIDGE_READY_S, changes
    assert all(code == 200 for t, code in changes if t > tasked), changes
