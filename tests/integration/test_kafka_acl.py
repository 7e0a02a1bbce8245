"""The daemon on Apache Kafka whose ACLs do not allow it everything it needs, both client libraries.

The broker (``KafkaBroker(sasl=SaslUser())`` with the standard authorizer; its PLAINTEXT
listener, where the tests write, is a super user) allows the daemon's SASL user all it needs on
its topics and group but one thing:

- Read on the labels topic: the group assigned nothing of it and the daemon stayed ready with
  no label ever arriving (kafka-python said nothing, librdkafka one warning). It is now not
  ready, logs ``topics_not_ready`` once with the ``kafka-acls.sh`` command, reads the scored
  traffic on, and is ready by itself once the ACL is granted;
- the dead-letter topic, or the consumer group: not ready (as before), its ``broker_down`` line
  now names the principal and the ACLs to grant (the group's refusal was a librdkafka warning
  only).
"""

from __future__ import annotations

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

from monitor.config.schema import Config
from monitor.io.kafka_io import ensure_topics
from monitor.sim.kafka_broker import KafkaBroker, SaslUser
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import started
from tests.integration.test_daemon_kafka import _produce, _scored
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_kafka_real import _wait_for
from tests.integration.test_kafka_secured import USER_ENV, secured_on
from tests.integration.test_scale_out import Proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


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


def _allow(admin: KafkaAdminClient, user: str, kind: ResourceType, name: str) -> None:
    pattern = ResourcePattern(kind, name, ACLResourcePatternType.LITERAL)
    admin.create_acls([ACL(user, "*", ACLOperation.ALL, ACLPermissionType.ALLOW, pattern)])


Deployed = tuple[Proc, Config, KafkaAdminClient]


@pytest.fixture
def deploy(
    acl_kafka: KafkaBroker, procs: list[Proc], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[[str, str], Deployed]:
    """Start a daemon over SASL_SSL allowed all but ``denied`` (a topic's field, or "group")."""
    secured = secured_on(acl_kafka, procs, monkeypatch)
    user = f"User:{secured.env[USER_ENV]}"

    def _deploy(library: str, denied: str) -> Deployed:
        path = secured.config_file(tmp_path / f"{library}-{denied}.yaml", library)
        config = secured.load(path)
        topics = config.kafka.topics
        ensure_topics(acl_kafka.bootstrap, topics)
        admin = KafkaAdminClient(bootstrap_servers=acl_kafka.bootstrap)
        for field in ("scored", "requests", "labels", "deadletter", "aggregates"):
            if field != denied:
                _allow(admin, user, ResourceType.TOPIC, getattr(topics, field))
        if denied != "group":
            _allow(admin, user, ResourceType.GROUP, config.kafka.group_id)
        w = generate(WorkloadSpec(n=300, hours=1.0, seed=3))
        _produce(acl_kafka, topics.scored, [b"not json", *_scored(w)])
        return secured.start(path), config, admin

    return _deploy


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_a_labels_topic_the_acls_refuse_is_not_ready_until_granted(
    library: str, deploy: Callable[[str, str], Deployed]
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
    library: str, denied: str, deploy: Callable[[str, str], Deployed]
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
