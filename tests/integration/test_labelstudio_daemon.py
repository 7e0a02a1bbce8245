"""Label Studio in the loop: the daemon's requests become tasks, answers become joined labels.

The daemon (``monitor run``, a subprocess), the bridge and a real Label Studio share one
configuration file. Answers given through Label Studio's API must give exactly the estimates an
in-memory engine gives for the same labels; a skip and an edit must change no estimate.
Also: Label Studio stopped and restarted mid-stream, and answers given while the bridge was
down, lose nothing and duplicate nothing.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.schema import Config, TopicsConfig
from monitor.core.estimator import EstimatorService
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.runtime.engine import Engine
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import Workload
from monitor.testing.fakes import FakeLog, FakeSink, FakeSource
from tests.integration.ls_helpers import (
    DaemonRun,
    annotate,
    bridge_from_file,
    edit,
    http_status,
    metric,
    produce,
    project_tasks,
    read_labels,
    request,
    section,
    stream_into_labelstudio,
    wait_for,
    wait_snapshot_labels,
    yaml_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cleanup() -> Iterator[list[LabelStudioBridge | DaemonRun]]:
    made: list[LabelStudioBridge | DaemonRun] = []
    yield made
    for thing in made:
        thing.stop()


def _expected(config: Config, w: Workload, labels: list[bytes], tmp: Path) -> str:
    """Estimates of an in-memory engine given the scored stream, then these labels."""
    topics = config.kafka.topics
    log = FakeLog()
    for t in (topics.scored, topics.requests, topics.labels, topics.deadletter):
        log.create(t)
    for r in w.records():
        log.append(topics.scored, json.dumps(r).encode())
    store = Store(tmp)
    engine = Engine(config, store, Exporter(config, CollectorRegistry()))
    source = FakeSource(log, [topics.scored, topics.requests, topics.labels], store.offsets)
    sink = FakeSink(log)
    while engine.step(source, sink):
        pass
    for v in labels:
        log.append(topics.labels, v)
    while engine.step(source, sink):
        pass
    out = repr(engine.estimator.snapshot().windows)
    store.close()
    return out


def _snapshot(config: Config) -> str:
    store = Store(config.data_dir)
    try:
        st = store.load()
    finally:
        store.close()
    est = EstimatorService(
        config,
        traffic=st.segment_traffic,
        requests=st.requests,
        parked=st.parked,
        watermarks=st.watermarks,
    )
    return repr(est.snapshot().windows)


def _f_lines(run: DaemonRun) -> list[str]:
    return sorted(
        line for line in run.metrics_text().splitlines() if re.match(r"monitor_f_measure\{", line)
    )


def _unmoved(run: DaemonRun, lines: list[str], for_s: float = 5.0) -> None:
    """The F lines stay ``lines`` for ``for_s`` seconds (any snapshot published meanwhile)."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        assert _f_lines(run) == lines
        time.sleep(0.5)


def test_answers_in_labelstudio_are_joined_by_the_daemon(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    cleanup: list[LabelStudioBridge | DaemonRun],
) -> None:
    topics = make_topics()
    run = stream_into_labelstudio(
        broker, topics, labelstudio, tmp_path, cleanup, labels_per_hour=6, seed=5
    )
    daemon, bridge, truth, client, tasks = run.daemon, run.bridge, run.truth, run.client, run.tasks
    w = run.workload
    n_requests = len(tasks)
    assert daemon.sample("monitor_labels_received_total", model="default") == 0
    assert _f_lines(daemon) == [] or all(line.endswith("NaN") for line in _f_lines(daemon))

    skipped, open_, answered = tasks[0], tasks[1], tasks[2:]
    first_annotation = 0
    labels: list[bytes] = []
    for t in answered:
        label = truth[t["data"]["record_id"]]
        ann = annotate(client, t["id"], label)
        first_annotation = first_annotation or ann
        labels.append(json.dumps({"request_id": t["meta"]["request_id"], "label": label}).encode())
    annotate(client, skipped["id"], None)
    wait_for(
        "every answer joined",
        lambda: daemon.sample("monitor_labels_received_total", model="default") == len(answered),
    )
    wait_for(
        "the skip counted",
        lambda: metric(bridge, "labelstudio_bridge_declined_total", model="default") == 1,
    )
    wait_snapshot_labels(daemon, len(answered))
    before = _f_lines(daemon)
    assert before and not all(line.endswith("NaN") for line in before)

    # an edit flips the first answer: published, dead-lettered as a conflict, no estimate moves
    edit(client, first_annotation, 1 - truth[answered[0]["data"]["record_id"]])
    wait_for(
        "the conflict counted by the daemon",
        lambda: (
            daemon.sample(
                "monitor_invalid_records_total", input="labels", reason="conflicting_label"
            )
            == 1
        ),
    )
    wait_for(
        "the edit counted",
        lambda: metric(bridge, "labelstudio_bridge_edits_total", model="default") == 1,
    )
    assert daemon.sample("monitor_labels_received_total", model="default") == len(answered)
    _unmoved(daemon, before)
    assert metric(bridge, "labelstudio_bridge_queue_depth", model="default") == 2  # skip + open
    assert open_["id"] not in {t["id"] for t in answered}

    daemon.stop()
    assert _snapshot(daemon.config) == _expected(daemon.config, w, labels, tmp_path / "expected")
    assert n_requests == len(read_labels(broker.bootstrap, topics.requests, n_requests + 1, 3))


def test_labelstudio_or_bridge_down_mid_stream_loses_nothing(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    cleanup: list[LabelStudioBridge | DaemonRun],
) -> None:
    if not labelstudio.owned:
        pytest.skip("the session's Label Studio was not started by the tests: not restarted")
    tag = uuid.uuid4().hex[:8]
    topics = make_topics()
    path = tmp_path / "monitor.yaml"
    path.write_text(yaml_config(broker, topics, tmp_path / "data", section(labelstudio, tag, 1)))
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    title = f"Audit {tag}: default"
    bridge = bridge_from_file(path, labelstudio.token).start()
    cleanup.append(bridge)
    batch_a = [request(i) for i in range(3)]
    produce(broker.bootstrap, topics.requests, batch_a)
    wait_for("3 tasks", lambda: len(project_tasks(client, title)) == 3)

    labelstudio.stop()
    try:  # the session's Label Studio comes back for the tests after this one whatever happens
        batch_b = [request(i) for i in range(10, 13)]
        produce(broker.bootstrap, topics.requests, batch_b)
        wait_for(
            "the bridge to see the outage",
            lambda: metric(bridge, "labelstudio_bridge_labelstudio_up") == 0,
        )
        assert http_status(bridge.port, "/readyz") == 503
        assert http_status(bridge.port, "/healthz") == 200
    finally:
        labelstudio.start()
    wait_for("6 tasks after the restart", lambda: len(project_tasks(client, title)) == 6, 120)
    wait_for("the bridge back", lambda: metric(bridge, "labelstudio_bridge_labelstudio_up") == 1)
    assert http_status(bridge.port, "/readyz") == 200
    assert metric(bridge, "labelstudio_bridge_tasks_created_total", model="default") == 6

    # answers given while the bridge is down are read when it comes back (polling)
    bridge.stop()
    tasks = project_tasks(client, title)
    for t in tasks:
        annotate(client, t["id"], t["id"] % 2)
    bridge = bridge_from_file(path, labelstudio.token).start()
    cleanup.append(bridge)
    labels = read_labels(broker.bootstrap, topics.labels, 6)
    assert sorted((x["request_id"], x["label"]) for x in labels) == sorted(
        (t["meta"]["request_id"], t["id"] % 2) for t in tasks
    )
    assert len(read_labels(broker.bootstrap, topics.labels, 7, timeout_s=4)) == 6
    assert len(project_tasks(client, title)) == 6
