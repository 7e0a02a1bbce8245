"""What the daemon says when a Kafka client cannot connect, and what it refuses at start-up.

Measured against Apache Kafka over SASL_SSL and over SSL with client certificates
(``tests/integration/test_kafka_secured.py``): both
clients learn why a connection failed in their network threads, then raise an error that does not
say ("Unable to bootstrap", "Broker transport failure"), and the daemon logs one line per state
change, so that line has to carry the cause.
"""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import KafkaError
from kafka import KafkaProducer
from kafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)

from monitor.config.load import parse_config
from monitor.errors import ConfigError
from monitor.free_ports import free_port
from monitor.io import client_errors, confluent_io, kafka_io
from monitor.io.client_errors import RecentErrors, connection_hint, describe, unavailable
from monitor.io.confluent_io import ConfluentSink, ConfluentSource

SASL_SSL = {"security_protocol": "SASL_SSL"}
# what each client reported, against Apache Kafka 4.1.1
KAFKA_PYTHON_LOGIN = SaslAuthenticationFailedError(
    "SaslAuthenticationFailedError: Authentication failed: Invalid username or password"
)
KAFKA_PYTHON_CA = KafkaConnectionError(
    "Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to "
    "get local issuer certificate (_ssl.c:1006)"
)
LIBRDKAFKA_LOGIN = (
    "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed: "
    "Invalid username or password (after 301ms in state AUTH_REQ)"
)
LIBRDKAFKA_CA = (
    "sasl_ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL "
    "routines::certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured (after 4ms in state SSL_HANDSHAKE)"
)
# the broker's TLS alert (ssl.client.auth=required): no client certificate, then one of another CA
KAFKA_PYTHON_CLIENT_CERTS = [
    KafkaConnectionError(f"[SSL: SSLV3_ALERT_{code}] sslv3 alert {text} (_ssl.c:2580)")
    for code, text in (
        ("BAD_CERTIFICATE", "bad certificate"),
        ("CERTIFICATE_UNKNOWN", "certificate unknown"),
    )
]
LIBRDKAFKA_CLIENT_CERTS = [
    "ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert "
    "bad certificate: SSL alert number 42 (after 1ms in state APIVERSION_QUERY)",
    "ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000416:SSL routines::ssl/tls alert "
    "certificate unknown: SSL alert number 46 (after 2ms in state APIVERSION_QUERY)",
]


def test_the_type_of_an_error_is_named_once() -> None:
    assert describe(KafkaTimeoutError("Unable to bootstrap")) == (
        "KafkaTimeoutError: Unable to bootstrap"  # was "KafkaTimeoutError: KafkaTimeoutError: ..."
    )
    assert describe(TimeoutError("3 records after 10 s")) == "TimeoutError: 3 records after 10 s"


@pytest.mark.parametrize("login", [describe(KAFKA_PYTHON_LOGIN), LIBRDKAFKA_LOGIN])
def test_a_refused_login_points_at_the_sasl_settings(login: str) -> None:
    assert connection_hint(login, SASL_SSL) == (
        "SASL authentication failed: check kafka.client.sasl_mechanism, sasl_plain_username and "
        "sasl_plain_password (the broker's log gives its reason)"
    )


@pytest.mark.parametrize("handshake", [describe(KAFKA_PYTHON_CA), LIBRDKAFKA_CA])
def test_an_untrusted_certificate_points_at_the_ca_file(handshake: str) -> None:
    assert connection_hint(handshake, SASL_SSL).startswith(
        "the broker's TLS certificate was not accepted: kafka.client.ssl_cafile must be the CA "
        "certificate (PEM) that signed it"
    )


@pytest.mark.parametrize(
    "alert", [*map(describe, KAFKA_PYTHON_CLIENT_CERTS), *LIBRDKAFKA_CLIENT_CERTS]
)
def test_a_refused_client_certificate_points_at_the_certificate_and_key(alert: str) -> None:
    """It pointed at ssl_cafile, as if the client had refused the broker's certificate."""
    client = {"security_protocol": "SSL", "ssl_certfile": "client.crt", "ssl_keyfile": "c.key"}
    assert connection_hint(alert, client).startswith(
        "the broker did not accept this client's certificate: check kafka.client.ssl_certfile "
        "and ssl_keyfile"
    )
    assert connection_hint(alert, {"security_protocol": "SSL"}).startswith(
        "the broker did not accept this client's certificate: it requires one; set "
        "kafka.client.ssl_certfile and ssl_keyfile"
    )


# what each client reported when the broker's ACLs refused a topic or the group (4.1.1)
REFUSALS = [
    "produce not acknowledged: [Error 29] TopicAuthorizationFailedError: {'dead'}",
    "poll failed: [Error 30] GroupAuthorizationFailedError: g-1",
    'KafkaError{code=TOPIC_AUTHORIZATION_FAILED,val=29,str="Broker: Topic authorization failed"}',
    'KafkaError{code=GROUP_AUTHORIZATION_FAILED,val=30,str="FindCoordinator response error: '
    'Group authorization failed."}',
]


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refusal_of_the_acls_names_the_principal_and_what_to_grant(refusal: str) -> None:
    user = {**SASL_SSL, "sasl_plain_username": "monitor"}
    hint = connection_hint(refusal, user)
    assert hint.startswith("the broker's ACLs do not allow this client's principal (User:monitor)")
    assert "Write and Describe on those it writes and Read on its consumer group" in hint
    mtls = {"security_protocol": "SSL", "ssl_certfile": "c.pem"}
    assert "(User:<the subject of kafka.client.ssl_certfile>)" in connection_hint(refusal, mtls)
    assert "(User:ANONYMOUS)" in connection_hint(refusal, {})


def test_closed_connections_at_bootstrap_point_at_the_sasl_settings_only_with_sasl() -> None:
    """kafka-python 3.0.12 at times reports a refused login as a closed connection only."""
    closed = (
        "KafkaTimeoutError: Unable to bootstrap from ['127.0.0.1:9093'] (last connection error: "
        "KafkaConnectionError: socket disconnected)"
    )
    assert "sasl_plain_password" in connection_hint(closed, SASL_SSL)
    assert connection_hint(closed, {"security_protocol": "SSL"}) == ""
    assert connection_hint(closed, {}) == ""
    refused = closed.replace("socket disconnected", "111 ECONNREFUSED")
    assert connection_hint(refused, SASL_SSL) == ""  # nothing listens: no login was tried
    # a broker that goes away closes the connections of a client that had logged in
    later = (
        "KafkaTimeoutError: Failed to get offsets by times in 2000 ms (last connection error: "
        "KafkaConnectionError: socket disconnected)"
    )
    assert connection_hint(later, SASL_SSL) == ""


# a client whose security_protocol is not its listener's: SASL_PLAINTEXT against PLAINTEXT (the
# broker answers the SASL handshake with ILLEGAL_SASL_STATE; librdkafka names it as below)
SASL_TO_PLAINTEXT = [
    "KafkaTimeoutError: Unable to bootstrap from ['127.0.0.1:9092'] (last connection error: "
    f"{describe(IllegalSaslStateError())})",
    "sasl_plaintext://127.0.0.1:9092/bootstrap: SASL authentication error: SaslHandshake "
    f"failed: {KafkaError(34).str()} (after 1ms in state AUTH_HANDSHAKE)",
]
# SSL against a listener without TLS, and PLAINTEXT against a TLS listener
TLS_MISMATCHES = [
    KafkaConnectionError(
        "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol (_ssl.c:1006)"
    ),
    "ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: connecting to a "
    "PLAINTEXT broker listener? (after 2ms in state SSL_HANDSHAKE)",
    "127.0.0.1:9093/bootstrap: Disconnected while requesting ApiVersion: might be caused by "
    "incorrect security.protocol configuration (connecting to a SSL listener?) or broker version "
    "is < 0.10 (see api.version.request) (after 2ms in state APIVERSION_QUERY)",
]


@pytest.mark.parametrize("error", SASL_TO_PLAINTEXT)
def test_a_sasl_handshake_the_listener_refuses_points_at_the_security_protocol(error: str) -> None:
    """SASL_PLAINTEXT against a PLAINTEXT listener was retried as broker_down with
    IllegalSaslStateError and no word of which setting to check."""
    hint = connection_hint(error, {"security_protocol": "SASL_PLAINTEXT"})
    assert hint == (
        "the broker's listener did not take the SASL handshake: kafka.client.security_protocol "
        "is SASL_PLAINTEXT: it must be the protocol of the broker listener "
        "kafka.bootstrap_servers names (PLAINTEXT or SSL, without the kafka.client.sasl_* keys, "
        "for a listener without SASL; SASL_PLAINTEXT or SASL_SSL, with "
        "kafka.client.sasl_mechanism, sasl_plain_username and sasl_plain_password, for one "
        "with SASL)"
    )


@pytest.mark.parametrize(
    ("error", "protocol"),
    list(zip(map(str, TLS_MISMATCHES), ["SSL", "SSL", "PLAINTEXT"], strict=True)),
)
def test_a_tls_handshake_of_another_protocol_points_at_the_security_protocol(
    error: str, protocol: str
) -> None:
    client = {"security_protocol": protocol} if protocol != "PLAINTEXT" else {}
    assert connection_hint(error, client) == (
        f"the TLS handshake failed: kafka.client.security_protocol is {protocol}: it must be the "
        "protocol of the broker listener kafka.bootstrap_servers names (SSL or SASL_SSL, with "
        "the kafka.client.ssl_* keys, for a TLS listener; PLAINTEXT or SASL_PLAINTEXT for one "
        "without TLS)"
    )


def test_a_sasl_mechanism_the_listener_does_not_enable_is_named() -> None:
    for error in (
        describe(
            UnsupportedSaslMechanismError("Kafka broker does not support PLAIN sasl mechanism")
        ),
        f"sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: {KafkaError(33).str()}",
    ):
        assert connection_hint(error, SASL_SSL).startswith(
            "the broker's listener does not enable kafka.client.sasl_mechanism"
        )
    # a refused SCRAM login names its mechanism: still a login to check
    scram = (
        "SaslAuthenticationFailedError: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512"
    )
    assert connection_hint(scram, SASL_SSL).startswith("SASL authentication failed: check")


def test_a_refused_sasl_handshake_is_the_cause_named_after_the_closed_connection() -> None:
    errors = RecentErrors()
    errors.note(describe(IllegalSaslStateError()))
    errors.note("KafkaConnectionError: socket disconnected")  # says less: kept out
    exc = KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:9092']")
    error = str(unavailable("poll failed", exc, errors, {"security_protocol": "SASL_PLAINTEXT"}))
    assert error.startswith(
        "poll failed: KafkaTimeoutError: Unable to bootstrap from ['127.0.0.1:9092'] (last "
        "connection error: [Error 34] IllegalSaslStateError); the broker's listener did not take "
        "the SASL handshake: kafka.client.security_protocol is SASL_PLAINTEXT"
    )


def test_the_most_telling_recent_error_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    errors = RecentErrors()
    assert errors.recent() is None
    errors.note("Connection refused")
    errors.note(LIBRDKAFKA_LOGIN)
    errors.note("1/1 brokers are down")  # after a refused login: says less, kept out
    assert errors.recent() == LIBRDKAFKA_LOGIN
    errors.note(LIBRDKAFKA_CA)  # as telling: the newer one
    assert errors.recent() == LIBRDKAFKA_CA
    now[0] += client_errors.RECENT_S + 1
    assert errors.recent() is None  # too old to be the cause of what fails now
    errors.note("Connection refused")
    assert errors.recent() == "Connection refused"


def test_unavailable_names_the_failure_its_cause_and_what_to_check() -> None:
    errors = RecentErrors()
    errors.note(describe(KAFKA_PYTHON_LOGIN))
    exc = KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:9093']")
    assert str(unavailable("cannot connect the producer", exc, errors, SASL_SSL)) == (
        "cannot connect the producer: KafkaTimeoutError: Unable to bootstrap from "
        "['127.0.0.1:9093'] (last connection error: [Error 58] SaslAuthenticationFailedError: "
        "SaslAuthenticationFailedError: Authentication failed: Invalid username or password); "
        "SASL authentication failed: check kafka.client.sasl_mechanism, sasl_plain_username and "
        "sasl_plain_password (the broker's log gives its reason)"
    )
    assert str(unavailable("poll failed", KafkaTimeoutError("x"), RecentErrors(), {})) == (
        "poll failed: KafkaTimeoutError: x"
    )


def test_kafka_python_connection_errors_are_noted() -> None:
    """kafka-python logs why a connection failed, then raises "Unable to bootstrap"."""
    port = free_port()  # nothing listens there
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", bootstrap_timeout_ms=300)
    noted = kafka_io.CONNECTION_ERRORS.recent()
    assert noted == "KafkaConnectionError: 111 ECONNREFUSED"  # not its own timeout


def test_settings_librdkafka_refuses_stop_the_start_with_a_config_error() -> None:
    """They were retried as a broker outage forever (kafka-python's refusals exit 2)."""
    kafka = {"client_library": "confluent-kafka", "client": {"security_protocol": "SASL-SSL"}}
    config = parse_config({"kafka": kafka}, "t")
    refused = 'settings: Invalid value "SASL-SSL" for configuration property "security.protocol"'
    with pytest.raises(ConfigError) as info:
        ConfluentSink(config)
    assert str(info.value) == f"kafka.client: librdkafka refused the producer {refused}"
    with pytest.raises(ConfigError) as info:
        ConfluentSource(config, dict)
    assert str(info.value) == f"kafka.client: librdkafka refused the consumer {refused}"


def test_a_librdkafka_line_repeated_within_a_minute_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka logs each failed attempt: ~20 lines a second with a wrong CA or password."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    repeats = confluent_io._Repeats()

    def passes(msg: str) -> bool:
        return repeats.filter(logging.LogRecord("x", logging.ERROR, "", 0, msg, None, None))

    assert passes("FAIL: SASL authentication error (after 301ms in state AUTH_REQ)")
    assert not passes("FAIL: SASL authentication error (after 305ms in state AUTH_REQ)")
    assert passes("FAIL: Connect to ipv4#127.0.0.1:9093 failed: Connection refused")
    now[0] += confluent_io.REPEAT_S
    assert passes("FAIL: SASL authentication error (after 302ms in state AUTH_REQ)")
