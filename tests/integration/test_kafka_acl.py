"""The daemon and the Label Studio bridge on Apache Kafka whose ACLs do not allow them everything.

The broker (``KafkaBroker(sasl=SaslUser())`` with the standard authorizer; its PLAINTEXT
listener, where the tests write, is a super user) allows the daemon's SASL user all it needs on
its topics and group but one thing, or all it needs but to write:

- Read on the labels topic: the group assigned nothing of it and the daemon stayed ready with
  no label ever arriving (kafka-python said nothing, librdkafka one warning). It is now not
  ready, logs ``topics_not_ready`` once with the ``kafka-acls.sh`` command, reads the scored
  traffic on, and is ready by itself once the ACL is granted;
- the dead-letter topic, or the consumer group: not ready (as before), its ``broker_down`` line
  now names the principal and the ACLs to grant (the group's refusal was a librdkafka warning
  only);
- every Write, the topics it reads allowed Read and Describe only: ``broker_down`` naming the
  ACLs, and ready once they are granted (kafka-python's producer, refused an id at the start,
  never wrote again until it was replaced).

The bridge's user starts with its group alone: the requests topic, then the labels topic, are
granted while it runs.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourceType,
)

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_client import LabelStudioClient
from monitor.bridges.ls_server import LabelStudioServer
from monitor.config.schema import Config
from monitor.io.kafka_io import ensure_topics
from monitor.sim.kafka_broker import KafkaBroker, SaslUser
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import started
from tests.integration.ls_helpers import (
    annotate,
    http_status,
    ls_config,
    produce,
    project_tasks,
    read_labels,
    request,
    wait_for,
)
from tests.integration.test_daemon_kafka import _predict, _produce, _read_all, _scored
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_kafka_real import _wait_for
from tests.integration.test_kafka_secured import USER_ENV, Secured, secured_on
from tests.integration.test_scale_out import Proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
WORKLOAD = WorkloadSpec(n=300, hours=1.0, seed=3)  # after one malformed record
READ = (ACLOperation.READ, ACLOperation.DESCRIBE)


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka with ACLs: only the PLAINTEXT listener's ANONYMOUS is a super user."""
    home = tmp_path_factory.mktemp("kafka-acl")
    secured = started(
        lambda: KafkaBroker(
            log_path=home / "kafka.log",
            data_dir=home / "data",
            sasl=SaslUser(),
            settings={"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"},
        ),
        "Apache Kafka broker with ACLs",
    )
    yield secured
    secured.close()


def _allow(
    admin: KafkaAdminClient,
    user: str,
    kind: ResourceType,
    name: str,
    ops: tuple[ACLOperation, ...] = (ACLOperation.ALL,),
) -> None:
    pattern = ResourcePattern(kind, name, ACLResourcePatternType.LITERAL)
    admin.create_acls([ACL(user, "*", op, ACLPermissionType.ALLOW, pattern) for op in ops])


Deployed = tuple[Proc, Config, KafkaAdminClient]


@pytest.fixture
def secured(acl_kafka: KafkaBroker, procs: list[Proc], monkeypatch: pytest.MonkeyPatch) -> Secured:
    """The module's broker with ACLs, its SASL user (``secured_on``)."""
    return secured_on(acl_kafka, procs, monkeypatch)


@pytest.fixture
def deploy(secured: Secured, tmp_path: Path) -> Callable[..., Deployed]:
    """Start a daemon over SASL_SSL allowed ``ops`` on its topics and its group, but nothing
    on ``denied`` (topics' fields, or "group"), on the workload of ``WORKLOAD``."""
    acl_kafka = secured.broker
    user = f"User:{secured.env[USER_ENV]}"

    def _deploy(
        library: str, *denied: str, ops: tuple[ACLOperation, ...] = (ACLOperation.ALL,)
    ) -> Deployed:
        path = secured.config_file(tmp_path / f"{library}-{'-'.join(denied)}.yaml", library)
        config = secured.load(path)
        topics = config.kafka.topics
        ensure_topics(acl_kafka.bootstrap, topics)
        admin = KafkaAdminClient(bootstrap_servers=acl_kafka.bootstrap)
        for field in ("scored", "requests", "labels", "deadletter", "aggregates"):
            if field not in denied:
                _allow(admin, user, ResourceType.TOPIC, getattr(topics, field), ops)
        if "group" not in denied:
            _allow(admin, user, ResourceType.GROUP, config.kafka.group_id)
        _produce(acl_kafka, topics.scored, [b"not json", *_scored(generate(WORKLOAD))])
        return secured.start(path), config, admin

    return _deploy


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_labels_topic_the_acls_refuse_is_not_ready_until_granted(
    library: str, deploy: Callable[..., Deployed]
) -> None:
    proc, config, admin = deploy(library, "labels")
    topics = config.kafka.topics
    port = config.metrics.port
    try:
        proc.wait_offsets({(topics.scored, 0): 301})  # the scored traffic is read on
        _wait_for("topics_not_ready", lambda: bool(proc.events("topics_not_ready")), proc, 30)
        assert _readyz(port) == 503
        (event,) = proc.events("topics_not_ready")
        user = f"User:{config.kafka.client['sasl_plain_username']}"
        _allow(admin, user, ResourceType.TOPIC, topics.labels)
        ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, proc, 60)
    finally:
        admin.close()
    code, _ = proc.stop()
    assert code == 0, proc.log_tail()
    print(f"\n{library}: ready {ready_after:.1f} s after the ACL was granted\n{event['error']}")
    error = str(event["error"])
    assert error.startswith(f"subscribed topics refused: {topics.labels} (")
    user = config.kafka.client["sasl_plain_username"]
    assert f"--allow-principal User:{user} --operation Read --operation Describe --topic" in error
    assert not proc.events("broker_down")


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
@pytest.mark.parametrize("denied", ["deadletter", "group"])
def test_a_topic_written_to_or_a_group_the_acls_refuse_names_the_acls(
    library: str, denied: str, deploy: Callable[..., Deployed]
) -> None:
    proc, config, admin = deploy(library, denied)
    admin.close()
    _wait_for("broker_down", lambda: bool(proc.events("broker_down")), proc, 30)
    assert _readyz(config.metrics.port) == 503
    code, _ = proc.stop()
    assert code == 0, proc.log_tail()
    (event,) = proc.events("broker_down")
    error = str(event["error"])
    print(f"\n{library}, {denied} refused: {error}")
    assert (config.kafka.group_id if denied == "group" else config.kafka.topics.deadletter) in error
    assert "the broker's ACLs do not allow this client's principal (User:" in error
    assert not proc.events("topics_not_ready")


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_writes_granted_after_the_start_are_made_once_granted(
    library: str, deploy: Callable[..., Deployed], tmp_path: Path
) -> None:
    """The daemon allowed to read its topics, not yet to write any (ACLs applied after the
    deployment). With kafka-python it never wrote once they were granted: the broker had
    refused its idempotent producer an id, and such a producer stays failed for good. Now
    the producer is replaced after a failed flush, and every request is written."""
    proc, config, admin = deploy(library, "deadletter", "aggregates", ops=READ)
    topics = config.kafka.topics
    port = config.metrics.port
    user = f"User:{config.kafka.client['sasl_plain_username']}"
    expected, _ = _predict(config, generate(WORKLOAD), tmp_path)
    try:
        _wait_for("broker_down", lambda: bool(proc.events("broker_down")), proc, 30)
        assert _readyz(port) == 503
        for field in ("requests", "deadletter", "aggregates"):
            _allow(admin, user, ResourceType.TOPIC, getattr(topics, field))
        ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, proc, 60)
        proc.wait_offsets({(topics.scored, 0): 1 + WORKLOAD.n})
    finally:
        admin.close()
    requests = _read_all(config, topics.requests)
    deadletters = _read_all(config, topics.deadletter)
    code, _ = proc.stop()
    assert code == 0, proc.log_tail()
    (down,) = proc.events("broker_down")
    print(f"\n{library}: ready {ready_after:.1f} s after the ACLs were granted\n{down['error']}")
    assert f"the broker's ACLs do not allow this client's principal ({user})" in str(down["error"])
    assert set(requests) == set(expected)  # a retried step writes its requests again
    assert {(json.loads(d)["topic"], json.loads(d)["offset"]) for d in deadletters} == {
        (topics.scored, 0)
    }


def test_the_label_studio_bridge_names_a_requests_or_labels_topic_the_acls_refuse(
    secured: Secured,
    labelstudio: LabelStudioServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bridge's SASL user allowed its group only. The refused requests topic was logged as
    a Kafka outage (``kafka_down``, "Kafka did not answer") with no word of the ACLs, and once
    the labels topic was granted too the answer was never published: the broker had refused the
    idempotent producer an id at the start (no Write on any topic yet), and kafka-python's
    producer stays failed for good after that. Now the requests topic is ``topics_not_ready``
    with the ``kafka-acls.sh`` command, the labels topic ``kafka_down`` naming the principal and
    what to grant; each is ready by itself once granted, and the answer is published once
    (the request imported: in 4 of 18 runs the bridge, ready, was assigned nothing until it
    subscribed again on the topic's return)."""
    caplog.set_level(logging.INFO, logger="monitor.bridges.labelstudio")
    acl_kafka = secured.broker
    config = secured.load(secured.config_file(tmp_path / "bridge.yaml", "kafka-python"))
    topics = config.kafka.topics
    ensure_topics(acl_kafka.bootstrap, topics)
    user = f"User:{secured.env[USER_ENV]}"
    ls = ls_config(labelstudio, uuid.uuid4().hex[:8], poll_interval_s=1.0)
    admin = KafkaAdminClient(bootstrap_servers=acl_kafka.bootstrap)
    _allow(admin, user, ResourceType.GROUP, ls.group_id)
    bridge = LabelStudioBridge(config, ls, tmp_path / "s.sqlite", labelstudio.token)
    bridge.start()

    def logged(event: str) -> list[str]:
        return [
            str(getattr(r, "error", ""))
            for r in caplog.records
            if getattr(r, "event", None) == event
        ]

    def ready() -> bool:
        return http_status(bridge.port, "/readyz") == 200

    try:
        wait_for("topics_not_ready", lambda: bool(logged("topics_not_ready")), 30)
        assert not ready()
        (refused,) = logged("topics_not_ready")
        assert refused.startswith(f"subscribed topics refused: {topics.requests} (")
        assert f"--allow-principal {user} --operation Read" in refused
        assert not logged("kafka_down")
        _allow(admin, user, ResourceType.TOPIC, topics.requests)
        granted = time.monotonic()
        wait_for("/readyz 200", ready, 60)
        ready_after = time.monotonic() - granted
        req = request(0)
        produce(acl_kafka.bootstrap, topics.requests, [req])  # the super user's listener
        client = LabelStudioClient(labelstudio.url, labelstudio.token)
        title = ls.title("default")
        wait_for("1 task", lambda: len(project_tasks(client, title)) == 1, 60)
        (task,) = project_tasks(client, title)
        annotate(client, task["id"], 1)
        wait_for("kafka_down", lambda: bool(logged("kafka_down")), 60)
        assert not ready()
        (down,) = logged("kafka_down")
        assert f"TopicAuthorizationFailedError: {topics.labels}" in down, down
        assert f"the broker's ACLs do not allow this client's principal ({user})" in down, down
        _allow(admin, user, ResourceType.TOPIC, topics.labels)
        granted = time.monotonic()
        labels = read_labels(acl_kafka.bootstrap, topics.labels, 1, timeout_s=90)
        published_after = time.monotonic() - granted
        assert [(x["request_id"], x["label"]) for x in labels] == [(req["request_id"], 1)]
        wait_for("/readyz 200", ready, 60)
        assert bridge.settle()
        assert len(read_labels(acl_kafka.bootstrap, topics.labels, 2, timeout_s=3)) == 1
    finally:
        bridge.stop()
        admin.close()
    print(
        f"\nrequests topic granted: ready after {ready_after:.1f} s; labels topic granted: the "
        f"answer published after {published_after:.1f} s\n{refused}\n{down}"
    )
