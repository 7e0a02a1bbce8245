"""The tested Apache Kafka and the deployed one agree: version, broker settings, topic configs.

``monitor.sim.kafka_broker`` starts the broker the integration suite runs against; the compose
file runs the one users start from. Settings only a test broker may have (short session floors,
a fast log cleaner) must not leak into the deployment.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from monitor.io.topics import AGGREGATES_TOPIC_CONFIG
from monitor.sim.kafka_broker import (
    DEPLOY_SETTINGS,
    KAFKA_VERSION,
    POM,
    TEST_SETTINGS,
    KafkaBroker,
    SaslUser,
    _cluster_id,
)

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"


def _compose() -> dict[str, Any]:
    with COMPOSE.open(encoding="utf-8") as f:
        loaded: dict[str, Any] = yaml.safe_load(f)
    return loaded


def _broker_env() -> dict[str, str]:
    """The compose Kafka service's ``KAFKA_*`` settings as server.properties keys."""
    env = _compose()["services"]["kafka"]["environment"]
    return {
        k.removeprefix("KAFKA_").lower().replace("_", "."): str(v)
        for k, v in env.items()
        if k.startswith("KAFKA_")
    }


def test_compose_runs_the_kafka_version_the_suite_tests() -> None:
    images = {
        s["image"] for s in _compose()["services"].values() if "apache/kafka" in s.get("image", "")
    }
    assert images == {f"apache/kafka:{KAFKA_VERSION}"}


def test_the_pom_fetches_the_version_the_launcher_names() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    assert version is not None
    assert version.text == KAFKA_VERSION


def test_compose_sets_every_deploy_setting_of_the_test_broker() -> None:
    env = _broker_env()
    assert {k: env.get(k) for k in DEPLOY_SETTINGS} == dict(DEPLOY_SETTINGS)


def test_no_test_only_setting_reaches_the_deployment() -> None:
    env = _broker_env()
    assert not set(TEST_SETTINGS) & set(env)
    text = COMPOSE.read_text(encoding="utf-8")
    assert "group.min.session.timeout" not in text.lower().replace("_", ".")


def test_compose_creates_the_aggregates_topic_with_the_daemons_topic_config() -> None:
    script = "\n".join(_compose()["services"]["kafka-init"]["command"])
    line = next(x for x in script.splitlines() if "--topic audit-aggregates" in x)
    configs = dict(re.findall(r"--config ([\w.]+)=(\S+)", line))
    assert configs == dict(AGGREGATES_TOPIC_CONFIG)


def test_the_test_broker_listens_on_loopback_only(tmp_path: Path) -> None:
    broker = KafkaBroker(port=19092, advertised_port=19093, data_dir=tmp_path)
    props = broker.server_properties()
    endpoints = props["listeners"].split(",") + props["advertised.listeners"].split(",")
    assert {e.split("://")[1].rsplit(":", 1)[0] for e in endpoints} == {"127.0.0.1"}
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19093"
    assert props["controller.quorum.voters"] == f"1@127.0.0.1:{broker.controller_port}"
    assert props["log.dirs"] == str(tmp_path / "logs")
    assert broker.bootstrap == "127.0.0.1:19093"


def test_a_sasl_broker_adds_sasl_ssl_and_mutual_tls_listeners_beside_the_plaintext_one(
    tmp_path: Path,
) -> None:
    plain = KafkaBroker(port=19092, data_dir=tmp_path).server_properties()
    user = SaslUser(password="pw-7f3a")
    broker = KafkaBroker(port=19092, data_dir=tmp_path, sasl=user)
    props = broker.server_properties()
    secured = [f"SASL_SSL://{broker.sasl_bootstrap}", f"SSL://{broker.ssl_bootstrap}"]
    assert broker.sasl_bootstrap.startswith("127.0.0.1:")
    assert broker.ssl_bootstrap.startswith("127.0.0.1:")
    assert broker.ssl_bootstrap != broker.sasl_bootstrap
    assert props["listeners"].split(",") == [
        "PLAINTEXT://127.0.0.1:19092",
        f"CONTROLLER://127.0.0.1:{broker.controller_port}",
        *secured,
    ]
    assert props["advertised.listeners"].split(",") == ["PLAINTEXT://127.0.0.1:19092", *secured]
    assert props["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL,SSL:SSL")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # and the readiness check
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-512"
    assert props["ssl.keystore.location"] == str(broker.tls_dir / "broker.pem")
    assert 'user_monitor="pw-7f3a"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert "pw-7f3a" not in repr(user)
    # only the SSL listener asks for a client certificate, and trusts the CA's
    assert props["listener.name.ssl.ssl.client.auth"] == "required"
    assert props["listener.name.ssl.ssl.truststore.location"] == str(broker.ca_file)
    assert "ssl.client.auth" not in props
    added = {k for k in props if "sasl" in k or k.startswith(("ssl.", "listener.name.ssl."))}
    assert set(props) - set(plain) == added


def test_cluster_ids_look_like_kafkas_and_never_read_as_an_option() -> None:
    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)
