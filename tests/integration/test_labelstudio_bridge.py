"""The Label Studio bridge against a real Label Studio and the real Kafka-protocol broker.

Label Studio starts once per session (fixture ``labelstudio``); each test has its own topics,
projects (unique titles), consumer group and state file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import (
    LabelStudioAuthError,
    LabelStudioClient,
    LabelStudioUnavailable,
)
from monitor.bridges.ls_config import LabelStudioConfig
from monitor.bridges.ls_server import LabelStudioServer
from monitor.bridges.ls_tasks import label_config, project_fields, task_body
from monitor.config.schema import Config, KafkaConfig, TopicsConfig
from monitor.errors import MonitorError
from monitor.free_ports import free_port
from monitor.io.kafka_io import ensure_topics
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.kafka_broker import KafkaBroker
from tests.integration.ls_helpers import (
    FAST_GROUP,
    T0,
    annotate,
    edit,
    http_status,
    ls_config,
    metric,
    produce,
    project_tasks,
    read_labels,
    request,
    section,
    wait_for,
    yaml_config,
)

pytestmark = pytest.mark.integration

# ready this soon after Kafka is back: its clients reconnect, and the bridge retries, at most
# 10 s apart each (after a 20 s outage 10-21 s; 9-27 s when the bridge backed off to 60 s, up
# to 70 s after a longer outage)
KAFKA_BACK_S = 30.0


class Bridges:
    """The bridges a test makes, with the tests' group timings (``FAST_GROUP``)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.made: list[LabelStudioBridge] = []

    def new(self, config: Config, ls: LabelStudioConfig, state: Path) -> LabelStudioBridge:
        """A bridge not started yet, stopped after the test."""
        bridge = LabelStudioBridge(config, ls, state, self.token, consumer_config=FAST_GROUP)
        self.made.append(bridge)
        return bridge

    def start(self, config: Config, ls: LabelStudioConfig, state: Path) -> LabelStudioBridge:
        """A bridge started, stopped after the test."""
        return self.new(config, ls, state).start()


@pytest.fixture
def bridges(labelstudio: LabelStudioServer) -> Iterator[Bridges]:
    made = Bridges(labelstudio.token)
    yield made
    for b in made.made:
        b.stop()


def _config(broker: EmbeddedBroker, topics: TopicsConfig) -> Config:
    return Config(kafka=KafkaConfig(bootstrap_servers=(broker.bootstrap,), topics=topics))


def test_one_task_per_request_across_restart_replay_and_lost_state(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    topics = make_topics()
    tag = uuid.uuid4().hex[:8]
    ls = ls_config(labelstudio, tag)
    config = _config(broker, topics)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    title = ls.title("default")
    first = [request(i) for i in range(6)]

    def start(state: Path, group: str = ls.group_id) -> LabelStudioBridge:
        return bridges.start(config, ls_config(labelstudio, tag, group_id=group), state)

    def count() -> int:
        return len(project_tasks(client, title))

    bridge = start(tmp_path / "state.sqlite")
    produce(broker.bootstrap, topics.requests, first)
    wait_for("6 tasks", lambda: count() == 6)
    assert metric(bridge, "labelstudio_bridge_tasks_created_total", model="default") == 6
    tasks = project_tasks(client, title)
    task = next(t for t in tasks if t["meta"]["request_id"] == first[0]["request_id"])
    assert task["meta"] == {
        "request_id": first[0]["request_id"],
        "token": "tok-0",
        "pi": 0.05,
        "model": "default",
        "ts": T0,
        "deadline": T0 + 86_400,
        "bridge": bridge.state.instance,
    }
    assert task["data"]["record_id"] == "rec-0"
    assert "Fraud" in task["data"]["context"] and "score 0.75 " in task["data"]["context"]
    assert '"amount": 0' in task["data"]["payload"]
    bridge.stop()

    # restart (same group, same state) and a replay of every request plus two new ones
    bridge = start(tmp_path / "state.sqlite")
    produce(broker.bootstrap, topics.requests, [*first, request(100), request(101)])
    wait_for("8 tasks", lambda: count() == 8)
    wait_for(
        "replays counted", lambda: metric(bridge, "labelstudio_bridge_requests_repeated_total") == 6
    )
    bridge.stop()

    # a new consumer group reads the topic from the start; the state file says all exist
    bridge = start(tmp_path / "state.sqlite", group=f"{ls.group_id}-b")
    wait_for(
        "all 14 records read as repeats",
        lambda: metric(bridge, "labelstudio_bridge_requests_repeated_total") == 14,
    )
    assert count() == 8
    bridge.stop()

    # state file lost: the tasks' meta.request_id rebuilds it at start-up
    bridge = start(tmp_path / "fresh.sqlite", group=f"{ls.group_id}-c")
    wait_for(
        "all 14 records read as repeats",
        lambda: metric(bridge, "labelstudio_bridge_requests_repeated_total") == 14,
    )
    assert count() == 8
    assert metric(bridge, "labelstudio_bridge_tasks_adopted_total", model="default") == 8
    assert metric(bridge, "labelstudio_bridge_tasks_created_total", model="default") == 0
    assert metric(bridge, "labelstudio_bridge_queue_depth", model="default") == 8


def test_answers_declines_edits_and_expiry(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """Webhook path (polling every hour): answers, a skip, an edit, a deletion, an expiry."""
    topics = make_topics()
    tag = uuid.uuid4().hex[:8]
    ls = ls_config(labelstudio, tag, poll_interval_s=3600.0)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "state.sqlite")
    assert bridge.webhooks_on
    assert http_status(bridge.port, "/healthz") == http_status(bridge.port, "/readyz") == 200
    assert http_status(bridge.port, "/nothing") == 404
    reqs = [request(i) for i in range(5)]
    produce(broker.bootstrap, topics.requests, reqs)
    title = ls.title("default")
    wait_for("5 tasks", lambda: len(project_tasks(client, title)) == 5)
    by_rid = {t["meta"]["request_id"]: t["id"] for t in project_tasks(client, title)}
    task = [by_rid[r["request_id"]] for r in reqs]

    a0 = annotate(client, task[0], 1)
    a1 = annotate(client, task[1], 0)
    annotate(client, task[2], None)  # skipped
    labels = read_labels(broker.bootstrap, topics.labels, 2)
    assert sorted((x["request_id"], x["label"]) for x in labels) == sorted(
        [(reqs[0]["request_id"], 1), (reqs[1]["request_id"], 0)]
    )
    assert {x["token"] for x in labels} == {"tok-0", "tok-1"}
    assert {x["labeler"] for x in labels} == {f"labelstudio:{labelstudio.username}"}
    wait_for(
        "a decline",
        lambda: metric(bridge, "labelstudio_bridge_declined_total", model="default") == 1,
    )
    assert metric(bridge, "labelstudio_bridge_answers_read_total", model="default") == 2
    wait_for(
        "two latencies observed",
        lambda: (
            metric(bridge, "labelstudio_bridge_answer_latency_seconds_count", model="default") == 2
        ),
    )

    edit(client, a0, 0)  # the first answer changed: a second, conflicting label
    labels = read_labels(broker.bootstrap, topics.labels, 3)
    assert [(x["request_id"], x["label"]) for x in labels[2:]] == [(reqs[0]["request_id"], 0)]
    wait_for(
        "the edit counted",
        lambda: metric(bridge, "labelstudio_bridge_edits_total", model="default") == 1,
    )

    # the published answer of task[1] deleted: the task is open again (in the queue depth)
    client.call("DELETE", f"/api/annotations/{a1}")
    assert bridge.settle()
    row = bridge.state.by_request(reqs[1]["request_id"])
    assert row is not None and (row.status, row.published) == ("open", 0)
    assert metric(bridge, "labelstudio_bridge_queue_depth", model="default") == 4

    client.delete_task(task[3])
    wait_for(
        "a deletion",
        lambda: metric(bridge, "labelstudio_bridge_tasks_deleted_total", model="default") == 1,
    )

    # a request of the same model far later moves the watermark past every deadline
    late = request(9, deadline=T0 + 10 * 86_400)
    late["ts"] = T0 + 2 * 86_400
    assert bridge.settle()  # every change read by a poll (a webhook's read keeps no mark)
    bridge.stop()
    bridge = bridges.new(_config(broker, topics), ls, tmp_path / "state.sqlite")
    reads: list[int] = []  # tasks read back one by one: none changed while it was down
    read_one = bridge.client.task

    def counted(task_id: int) -> dict[str, Any]:
        reads.append(task_id)
        return read_one(task_id)

    bridge.client.task = counted  # type: ignore[method-assign]
    bridge.start()
    produce(broker.bootstrap, topics.requests, [late])
    wait_for("6 tasks", lambda: len(bridge.state.known([late["request_id"]])) == 1)
    assert bridge.settle()  # the expiry check runs with the poll; run it now
    assert reads == []
    # open before: task[1] (its answer deleted), task[2] (skipped) and task[4]; all past their
    # deadline now
    wait_for(
        "3 expired",
        lambda: metric(bridge, "labelstudio_bridge_tasks_expired_total", model="default") == 3,
    )
    left = {t["meta"]["request_id"] for t in project_tasks(client, title)}
    assert left == {reqs[0]["request_id"], late["request_id"]}
    assert len(read_labels(broker.bootstrap, topics.labels, 4, timeout_s=3)) == 3


def test_start_up_errors_are_clear(
    labelstudio: LabelStudioServer, tmp_path: Path, broker: EmbeddedBroker
) -> None:
    config = Config(kafka=KafkaConfig(bootstrap_servers=(broker.bootstrap,)))
    wrong = LabelStudioBridge(config, ls_config(labelstudio, "x"), tmp_path / "a", "wrong-token")
    with pytest.raises(LabelStudioAuthError, match="refused the API token") as err:
        wrong.start()
    assert "wrong-token" not in str(err.value)
    nowhere = ls_config(labelstudio, "x", url=f"http://127.0.0.1:{free_port()}")
    down = LabelStudioBridge(config, nowhere, tmp_path / "b", labelstudio.token)
    with pytest.raises(LabelStudioUnavailable, match="unreachable"):
        down.start()

    path = tmp_path / "m.yaml"
    path.write_text(
        f"labelstudio:\n  url: {labelstudio.url}\n  token_env: LS_TEST_TOKEN_{uuid.uuid4().hex}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "queue", "labelstudio", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "is not set" in out.stderr and "Access Token" in out.stderr

    with socket.socket() as taken:  # the bridge's port in use: a message, not a traceback
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = ls_config(labelstudio, "x", port=taken.getsockname()[1])
        with pytest.raises(MonitorError, match=r"cannot listen on 127\.0\.0\.1:\d+: .*in use"):
            LabelStudioBridge(config, busy, tmp_path / "c", labelstudio.token).start()


def test_a_bad_request_a_listing_that_skips_a_task_and_a_deleted_project_stop_nothing(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """A request Label Studio cannot store made it refuse every import (the bridge stalled);
    a task missing from one listing (pages shifting under a deletion, or a server capping the
    page size) was taken for deleted and its answer lost; a project deleted in Label Studio
    stalled every import until a restart."""
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8])
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "s.sqlite")
    title = ls.title("default")
    reqs = [request(0), {**request(1), "pi": float("nan")}, request(2)]
    produce(broker.bootstrap, topics.requests, reqs)
    wait_for("2 tasks", lambda: len(project_tasks(client, title)) == 2)
    assert metric(bridge, "labelstudio_bridge_requests_invalid_total") == 1
    assert metric(bridge, "labelstudio_bridge_labelstudio_up") == 1

    # one listing leaves a task out: it is asked for by id, not taken for deleted
    by_rid = {t["meta"]["request_id"]: t["id"] for t in project_tasks(client, title)}
    victim = by_rid[reqs[2]["request_id"]]
    listing = bridge.client.tasks

    def skipping(project_id: int, fields: str = "all") -> Iterator[dict[str, Any]]:
        return (t for t in listing(project_id, fields) if t.get("id") != victim)

    bridge.client.tasks = skipping  # type: ignore[method-assign]
    annotate(client, victim, 0)
    assert bridge.settle()
    assert metric(bridge, "labelstudio_bridge_tasks_deleted_total", model="default") == 0
    labels = read_labels(broker.bootstrap, topics.labels, 1)
    assert [(x["request_id"], x["label"]) for x in labels] == [(reqs[2]["request_id"], 0)]
    bridge.client.tasks = listing  # type: ignore[method-assign]

    # the project deleted in Label Studio: the next import finds none and creates it again
    old = next(p["id"] for p in client.projects() if p["title"] == title)
    client.call("DELETE", f"/api/projects/{old}")
    produce(broker.bootstrap, topics.requests, [request(3)])
    wait_for("a task in a new project", lambda: len(project_tasks(client, title)) == 1, 90)
    assert [p["id"] for p in client.projects() if p["title"] == title] != [old]


def test_a_project_refusing_its_imports_holds_back_its_own_requests_only(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """Model b's labeling config edited by hand (HTTP 400 on import): the bridge stopped
    reading requests, so model a's new requests never reached Label Studio either. Now b's
    are held, a's go on, and the offset commit stops at b's first held request: a bridge
    restarted after the fix imports it, and nothing of a's twice."""
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], poll_interval_s=1.0)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    state = tmp_path / "s.sqlite"

    def start() -> LabelStudioBridge:
        return bridges.start(_config(broker, topics), ls, state)

    def tasks(model: str) -> list[dict[str, Any]]:
        return project_tasks(client, ls.title(model))

    first = start()
    produce(broker.bootstrap, topics.requests, [request(0, model="a"), request(1, model="b")])
    wait_for("a task each", lambda: len(tasks("a")) == 1 and len(tasks("b")) == 1)
    project_b = first.projects["b"]
    label_config = client.call("GET", f"/api/projects/{project_b}")["label_config"]
    broken = label_config.replace('value="$payload"', 'value="$text"')
    assert broken != label_config
    client.update_project(project_b, {"label_config": broken})

    later = [request(10, model="b"), request(11, model="a"), request(12, model="a")]
    produce(broker.bootstrap, topics.requests, later)
    wait_for("a's new tasks", lambda: len(tasks("a")) == 3)
    time.sleep(2)  # b's import refused, and retried
    produce(broker.bootstrap, topics.requests, [request(13, model="a")])  # read after the hold
    wait_for("a's request after the hold", lambda: len(tasks("a")) == 4)
    assert metric(first, "labelstudio_bridge_requests_held", model="b") == 1
    assert len(tasks("b")) == 1
    assert http_status(first.port, "/readyz") == 200
    assert metric(first, "labelstudio_bridge_labelstudio_up") == 1
    task = next(t for t in tasks("a") if t["meta"]["request_id"] == later[1]["request_id"])
    annotate(client, task["id"], 1)
    labels = read_labels(broker.bootstrap, topics.labels, 1)
    assert [(x["request_id"], x["label"]) for x in labels] == [(later[1]["request_id"], 1)]
    first.stop()

    client.update_project(project_b, {"label_config": label_config})
    second = start()
    wait_for("b's held request imported", lambda: len(tasks("b")) == 2)
    assert later[0]["request_id"] in {t["meta"]["request_id"] for t in tasks("b")}
    assert len(tasks("a")) == 4
    assert metric(second, "labelstudio_bridge_requests_repeated_total") == 3  # a's, read again
    assert metric(second, "labelstudio_bridge_tasks_created_total", model="a") == 0


def test_a_models_tasks_imported_before_a_crash_are_adopted_not_imported_again(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """A crash between Label Studio's answer to an import and the state file's write, for a
    model neither configured nor in the state file yet: the restart read only those models'
    projects, and the replayed request was imported again (the first task an orphan)."""
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8])
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    req = request(0, model="fraud")
    # what the lost run did before it died: the project and the task, nothing in the state file
    made = client.create_project(project_fields(ls.title("fraud"), ls.wording_of("fraud"), 1))
    client.import_tasks(made["id"], [task_body(req, ls.wording_of("fraud"))])
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "s.sqlite")
    assert metric(bridge, "labelstudio_bridge_tasks_adopted_total", model="fraud") == 1
    produce(broker.bootstrap, topics.requests, [req])  # the replay
    wait_for(
        "the replay read", lambda: metric(bridge, "labelstudio_bridge_requests_repeated_total") == 1
    )
    assert len(project_tasks(client, ls.title("fraud"))) == 1


def test_a_second_task_of_one_request_is_removed_and_an_answer_on_it_is_read(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """An import Label Studio commits after the bridge gave up waiting (its 120 s timeout) is
    imported again, and one request has two tasks: the one the state file lacked was left
    open, and an answer given on it was never read. Made here by importing the second task
    by hand, as the late commit does."""
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], poll_interval_s=3600.0)  # polls: settle
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "s.sqlite")
    title, wording = ls.title("default"), ls.wording_of("default")
    reqs = [request(0), request(1)]
    produce(broker.bootstrap, topics.requests, reqs)
    wait_for("2 tasks", lambda: len(project_tasks(client, title)) == 2)
    recorded = {t["meta"]["request_id"]: t["id"] for t in project_tasks(client, title)}
    (project,) = [p["id"] for p in client.projects() if p.get("title") == title]
    (idle,) = client.import_tasks(project, [task_body(reqs[0], wording)])  # nobody answers it
    (answered,) = client.import_tasks(project, [task_body(reqs[1], wording)])
    annotate(client, answered, 1)  # while the recorded task of the request is still open

    assert bridge.settle()
    (label,) = read_labels(broker.bootstrap, topics.labels, 1)
    assert (label["request_id"], label["label"], label["token"]) == (
        reqs[1]["request_id"],
        1,
        "tok-1",
    )
    assert bridge.settle()
    left = {t["id"]: t["meta"]["request_id"] for t in project_tasks(client, title)}
    assert left == {
        recorded[reqs[0]["request_id"]]: reqs[0]["request_id"],
        answered: reqs[1]["request_id"],
    }
    assert idle not in left
    assert metric(bridge, "labelstudio_bridge_tasks_duplicate_total", model="default") == 2
    assert metric(bridge, "labelstudio_bridge_labels_published_total", model="default") == 1


def test_majority_of_three_annotators(
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], annotators="majority", majority_of=3)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "state.sqlite")
    reqs = [request(0), request(1)]
    produce(broker.bootstrap, topics.requests, reqs)
    title = ls.title("default")
    wait_for("2 tasks", lambda: len(project_tasks(client, title)) == 2)
    project = next(p for p in client.projects() if p["title"] == title)
    assert project["maximum_annotations"] == 3
    by_rid = {t["meta"]["request_id"]: t["id"] for t in project_tasks(client, title)}
    one, two = by_rid[reqs[0]["request_id"]], by_rid[reqs[1]["request_id"]]
    for label in (1, 0):
        annotate(client, one, label)
    annotate(client, two, 0)
    annotate(client, two, None)  # a skip is no vote
    wait_for(
        "4 answers read",
        lambda: (
            metric(bridge, "labelstudio_bridge_answers_read_total", model="default") == 3
            and metric(bridge, "labelstudio_bridge_declined_total", model="default") == 1
        ),
    )
    assert bridge.settle()
    assert read_labels(broker.bootstrap, topics.labels, 1, timeout_s=2) == []
    annotate(client, one, 1)  # the third vote decides: 2 of 3 say 1
    labels = read_labels(broker.bootstrap, topics.labels, 1)
    assert [(x["request_id"], x["label"], x["labeler"]) for x in labels] == [
        (reqs[0]["request_id"], 1, "labelstudio:majority-2-of-3")
    ]

    # a project made under annotators: first is asked for three answers when the bridge
    # starts with majority (else Label Studio closes each task after one)
    first = ls_config(labelstudio, uuid.uuid4().hex[:8])
    made = client.create_project(project_fields(first.title("default"), first.wording, 1))
    bridges.start(
        _config(broker, topics),
        dataclasses.replace(first, annotators="majority", majority_of=3),
        tmp_path / "again.sqlite",
    )
    assert client.call("GET", f"/api/projects/{made['id']}")["maximum_annotations"] == 3

    # and back to first: the majority project asked for 3 answers for good (only ever raised),
    # so Label Studio kept serving tasks that one answer had decided
    bridge.stop()
    bridges.start(
        _config(broker, topics),
        dataclasses.replace(ls, annotators="first"),
        tmp_path / "back.sqlite",
    )
    assert client.call("GET", f"/api/projects/{project['id']}")["maximum_annotations"] == 1


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_cli_creates_tasks_and_stops_on_a_signal(
    stop: signal.Signals,
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
) -> None:
    topics = make_topics()
    tag = uuid.uuid4().hex[:8]
    path = tmp_path / "monitor.yaml"
    path.write_text(yaml_config(broker, topics, tmp_path / "data", section(labelstudio, tag, 1)))
    env = {**os.environ, f"LS_TOKEN_{tag}": labelstudio.token, "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "bridge.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "queue", "labelstudio", "--config", str(path)],
            env=env,
            stderr=log,
            stdout=subprocess.DEVNULL,
        )
    try:
        produce(broker.bootstrap, topics.requests, [request(i) for i in range(3)])
        client = LabelStudioClient(labelstudio.url, labelstudio.token)
        wait_for("3 tasks", lambda: len(project_tasks(client, f"Audit {tag}: default")) == 3)
        proc.send_signal(stop)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    assert '"event": "labelstudio_connected"' in text and '"event": "tasks_created"' in text
    assert labelstudio.token not in text
    assert '"event": "bridge_stopped"' in text, text[-2000:]  # closed, not killed
    assert (tmp_path / "data" / "bridge.sqlite").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["stopped", "frozen"])
def test_a_kafka_outage_is_reported_as_kafka_and_its_answer_published_once(
    how: str,
    own_kafka: KafkaBroker,
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
) -> None:
    """Apache Kafka stopped under an idle bridge: /readyz stayed 200 for ~70 s, an answer given
    meanwhile stalled the loop ~60 s in its send, and the outage was reported as Label Studio's
    (``labelstudio_up`` 0, its error counter, "Label Studio is back" when Kafka returned).
    Ready again within ``KAFKA_BACK_S`` of Kafka's return. Frozen (SIGSTOP: its connections
    open, nothing answered): 503 within 4 s, 200 1.4 s after it went on."""
    topics = TopicsConfig().tagged(uuid.uuid4().hex[:8])
    ensure_topics(own_kafka.bootstrap, topics, 1)
    tag = uuid.uuid4().hex[:8]
    ls = ls_config(labelstudio, tag, poll_interval_s=1.0)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    config = Config(kafka=KafkaConfig(bootstrap_servers=(own_kafka.bootstrap,), topics=topics))
    bridge = bridges.start(config, ls, tmp_path / "state.sqlite")
    req = request(0)
    produce(own_kafka.bootstrap, topics.requests, [req])
    title = ls.title("default")
    wait_for("1 task", lambda: len(project_tasks(client, title)) == 1)
    wait_for("ready", lambda: http_status(bridge.port, "/readyz") == 200)
    (task,) = project_tasks(client, title)

    own_kafka.stop() if how == "stopped" else own_kafka.pause()
    stopped = time.monotonic()
    try:
        wait_for("/readyz 503", lambda: http_status(bridge.port, "/readyz") == 503, 15)
        noticed_s = time.monotonic() - stopped
        annotate(client, task["id"], 1)
        time.sleep(10)  # ten polls read the answer; its label waits for Kafka
        assert http_status(bridge.port, "/readyz") == 503
        assert http_status(bridge.port, "/healthz") == 200  # the loop never stalls
        assert metric(bridge, "labelstudio_bridge_labelstudio_up") == 1
        assert metric(bridge, "labelstudio_bridge_labelstudio_errors_total") == 0
        assert metric(bridge, "labelstudio_bridge_kafka_up") == 0
        assert metric(bridge, "labelstudio_bridge_ready") == 0
    finally:
        own_kafka.start() if how == "stopped" else own_kafka.resume()
    back = time.monotonic()
    wait_for("/readyz 200", lambda: http_status(bridge.port, "/readyz") == 200, 90)
    ready_s = time.monotonic() - back
    assert ready_s < KAFKA_BACK_S, f"ready {ready_s:.1f} s after Kafka is back"
    labels = read_labels(own_kafka.bootstrap, topics.labels, 1, timeout_s=60)
    assert [(x["request_id"], x["label"]) for x in labels] == [(req["request_id"], 1)]
    assert bridge.settle()
    assert len(read_labels(own_kafka.bootstrap, topics.labels, 2, timeout_s=3)) == 1
    assert metric(bridge, "labelstudio_bridge_labelstudio_errors_total") == 0
    assert metric(bridge, "labelstudio_bridge_ready") == 1
    print(f"Kafka {how}: /readyz 503 after {noticed_s:.1f} s, 200 {ready_s:.1f} s after it is back")


@pytest.mark.brokers("tansu", "kafka")
def test_a_missing_requests_or_labels_topic_is_reported_and_never_created(
    broker: EmbeddedBroker,
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a broker that creates a topic a client asks for (Tansu; Apache Kafka's default), the
    bridge made a missing requests topic at its start, with the broker's retention instead of
    ``--create-topics``' 30 days, and stayed ready. On Apache Kafka with topic creation off (as
    deployed) it read as a Kafka outage: ``kafka_down``, "Kafka did not answer". Now a missing
    requests or labels topic is ``topics_not_ready`` naming it with the command creating it,
    ``/readyz`` 503 until it exists, and the answer read meanwhile is published once."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    tag = uuid.uuid4().hex[:8]
    topics = TopicsConfig().tagged(tag)  # none of them created
    ls = ls_config(labelstudio, tag, poll_interval_s=1.0)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "s.sqlite")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    t: dict[str, float] = {"start": time.monotonic()}

    def reported(topic: str) -> list[str]:
        errors = [str(getattr(r, "error", "")) for r in caplog.records]
        return [e for e in errors if f"--topic {topic} " in e]

    def created(topic: str) -> None:
        admin.create_topics([NewTopic(topic, 1, 1)])
        t[topic] = time.monotonic()

    try:
        wait_for("the requests topic reported missing", lambda: bool(reported(topics.requests)), 20)
        t["requests missing"] = time.monotonic()
        assert reported(topics.requests)[0].startswith(
            f"subscribed topics missing: {topics.requests}"
        )
        assert "or restart monitor run with --create-topics" in reported(topics.requests)[0]
        assert http_status(bridge.port, "/readyz") == 503
        assert metric(bridge, "labelstudio_bridge_kafka_up") == 1  # the broker answered
        assert topics.requests not in admin.list_topics()
        assert not any(getattr(r, "event", None) == "kafka_down" for r in caplog.records)
        created(topics.requests)
        req = request(0)
        produce(broker.bootstrap, topics.requests, [req])
        title = ls.title("default")
        wait_for("1 task", lambda: len(project_tasks(client, title)) == 1)
        wait_for("/readyz 200", lambda: http_status(bridge.port, "/readyz") == 200, 20)
        t["requests ready"] = time.monotonic()

        (task,) = project_tasks(client, title)
        annotate(client, task["id"], 1)
        t["answer"] = time.monotonic()
        wait_for("the labels topic reported missing", lambda: bool(reported(topics.labels)), 30)
        t["labels missing"] = time.monotonic()
        assert reported(topics.labels)[0].startswith(f"topics written to missing: {topics.labels}")
        assert http_status(bridge.port, "/readyz") == 503
        assert topics.labels not in admin.list_topics()
        created(topics.labels)
        labels = read_labels(broker.bootstrap, topics.labels, 1, timeout_s=90)
        assert [(x["request_id"], x["label"]) for x in labels] == [(req["request_id"], 1)]
        t["published"] = time.monotonic()
        wait_for("/readyz 200", lambda: http_status(bridge.port, "/readyz") == 200, 20)
        assert bridge.settle()
        assert len(read_labels(broker.bootstrap, topics.labels, 2, timeout_s=3)) == 1
    finally:
        admin.close()
    events = [r.event for r in caplog.records if hasattr(r, "event")]
    assert events.count("topics_ready") == 2, events
    print(
        f"requests topic missing reported {t['requests missing'] - t['start']:.1f} s after the "
        f"start, ready {t['requests ready'] - t[topics.requests]:.1f} s after it was created; "
        f"labels topic missing reported {t['labels missing'] - t['answer']:.1f} s after the "
        f"answer, published {t['published'] - t[topics.labels]:.1f} s after it was created"
    )


def test_a_found_project_with_another_interface_holds_back_its_own_requests_only(
    *,
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A project of model b's title made by hand for something else (its choices not the
    bridge's): it was not checked at start, b's requests became tasks there, and every answer
    was only reported as unreadable. Now the start logs what is wrong and the fix once, b's
    requests are held while a's go on, and once the interface is restored they are imported."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    topics = make_topics()
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], poll_interval_s=1.0)
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    other = (
        '<View><Text name="record" value="$payload"/><Choices name="label" toName="record">'
        '<Choice value="Spam"/><Choice value="Ham"/></Choices></View>'
    )
    made = client.create_project({"title": ls.title("b"), "label_config": other})
    bridge = bridges.start(_config(broker, topics), ls, tmp_path / "s.sqlite")
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "project_interface_wrong"]
    assert (line.project, line.title, line.model) == (made["id"], ls.title("b"), "b")  # type: ignore[attr-defined]
    assert "Spam" in line.problem and "Labeling Interface" in line.fix  # type: ignore[attr-defined]
    assert http_status(bridge.port, "/readyz") == 200

    produce(broker.bootstrap, topics.requests, [request(0, model="a"), request(1, model="b")])
    wait_for("a's task", lambda: len(project_tasks(client, ls.title("a"))) == 1)
    wait_for(
        "b's request held",
        lambda: metric(bridge, "labelstudio_bridge_requests_held", model="b") == 1,
    )
    assert project_tasks(client, ls.title("b")) == []

    client.update_project(made["id"], {"label_config": label_config(ls.wording_of("b"))})
    wait_for("b's task", lambda: len(project_tasks(client, ls.title("b"))) == 1, 90)
    assert metric(bridge, "labelstudio_bridge_requests_held", model="b") == 0
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("project_interface_wrong") == 1
    assert "imports_accepted" in events


def _two_bridges(
    bridges: Bridges, labelstudio: LabelStudioServer, tmp_path: Path, first: Config, second: Config
) -> tuple[LabelStudioBridge, LabelStudioBridge]:
    """Two bridges on one project (each its own state file and group), started, each having
    listed the project once; neither lists it again until settled (polls an hour apart)."""
    tag = uuid.uuid4().hex[:8]
    made = [
        bridges.new(
            config,
            ls_config(labelstudio, tag, group_id=f"g{n}-{tag}", poll_interval_s=3600.0),
            tmp_path / f"{n}.sqlite",
        ).start()
        for n, config in ((1, first), (2, second))
    ]
    assert all(b.settle() for b in made)
    return made[0], made[1]


def test_two_bridges_on_one_project_keep_one_task_per_request(
    *,
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two bridges (each its own state file and group) on one project: each imported the
    request, and each deleted the other's task as a duplicate, so nobody could audit it. Now
    both keep the lowest task id, and each publishes its answer once."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    topics = make_topics()
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    config = _config(broker, topics)
    # each bridge lists the project before the request exists: otherwise the later one may
    # list the earlier one's task first and adopt it, one task and no duplicate to remove
    # (the next test's case)
    one, two = _two_bridges(bridges, labelstudio, tmp_path, config, config)
    title = one.ls.title("default")
    req = request(0)
    produce(broker.bootstrap, topics.requests, [req])
    wait_for("each bridge's task", lambda: len(project_tasks(client, title)) == 2)
    assert one.settle() and two.settle()
    assert one.settle() and two.settle()
    left = project_tasks(client, title)
    assert [t["meta"]["request_id"] for t in left] == [req["request_id"]]
    annotate(client, left[0]["id"], 1)
    assert one.settle() and two.settle()
    assert one.settle() and two.settle()
    labels = read_labels(broker.bootstrap, topics.labels, 3, timeout_s=5)
    assert [(x["request_id"], x["label"]) for x in labels] == [(req["request_id"], 1)] * 2
    for b in (one, two):
        assert metric(b, "labelstudio_bridge_labels_published_total", model="default") == 1
    others = [r for r in caplog.records if getattr(r, "event", None) == "task_of_another_bridge"]
    assert 1 <= len(others) <= 2  # at most once per bridge


def test_a_task_another_bridge_imports_while_this_one_runs_is_reported_when_adopted(
    *,
    broker: EmbeddedBroker,
    make_topics: Callable[..., TopicsConfig],
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    bridges: Bridges,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second bridge a step ahead: its task was listed before this bridge read the request,
    so this one adopted it, made no copy, and nobody was told two bridges share the project.
    (The second bridge here reads another requests topic: its listing alone finds the task.)"""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    topics = make_topics()
    client = LabelStudioClient(labelstudio.url, labelstudio.token)
    elsewhere = dataclasses.replace(topics, requests=make_topics().requests)
    ahead, behind = _two_bridges(
        bridges, labelstudio, tmp_path, _config(broker, topics), _config(broker, elsewhere)
    )
    title = ahead.ls.title("default")
    produce(broker.bootstrap, topics.requests, [request(0)])
    wait_for("the task", lambda: len(project_tasks(client, title)) == 1)
    assert behind.settle()
    assert metric(behind, "labelstudio_bridge_tasks_adopted_total", model="default") == 1
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "task_of_another_bridge"]
    marks = sorted([str(ahead.state.instance), str(behind.state.instance)])
    assert (line.bridge, line.bridges) == (behind.state.instance, marks)  # type: ignore[attr-defined]
