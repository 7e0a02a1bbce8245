"""The ``kafka.client`` section: settings passed through to kafka-python or librdkafka.

Keys are kafka-python's names; they are checked against kafka-python's own defaults (type and
existence), secrets are redacted from every ``repr``, and ``CONFLUENT_OPTIONS`` translates the
supported ones for confluent-kafka. With TLS (``security_protocol`` SSL or SASL_SSL) the files the
clients will read must be readable, the CA file must hold a certificate, and a client certificate
must load with its key (decrypted with ``ssl_password`` if given).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Literal, cast

from monitor.config.schema import KafkaConfig
from monitor.config.validate import (
    Problems,
    as_mapping,
    env_ref,
    got,
    join_key,
    unknown_key,
)

_REDACTED = "<redacted>"
# every Kafka client of the project (daemon and bridge, both libraries) retries a lost broker at
# most this far apart
RECONNECT_BACKOFF_MAX_MS = 10_000
# the daemon's and the bridge's clients refresh their topics' metadata this often (both
# libraries: 5 minutes), so partitions added to a topic are consumed, from their first record,
# and a topic created or granted to the client is read or written, within about this long
METADATA_MAX_AGE_MS = 10_000
# the daemon's requests (and the bridge's sends) unanswered this long give up their connection
# (both libraries: 30 s, a librdkafka socket 60 s): a broker that hangs without closing its
# connections (a stopped process, a frozen host) loses its leadership and its groups after the
# controller's 9 s session timeout, and a retry finds the new leader or coordinator
REQUEST_TIMEOUT_MS = 10_000
# an offset commit (the daemon's and the bridge's) waits this long at most: one that fails only
# makes a restart read again what is durable already (the store, a sampler's aggregates topic,
# the bridge's state file), and a commit to a hung coordinator held the loop 24 s (kafka-python)
# to 60 s
COMMIT_TIMEOUT_S = 5.0

# kafka-python settings the monitor sets itself: not accepted under ``kafka.client``
_RESERVED_CLIENT: Mapping[str, str] = {
    "bootstrap_servers": "set it with kafka.bootstrap_servers",
    "group_id": "set it with kafka.group_id",
    "max_poll_records": "set it with kafka.max_poll_records",
    "enable_auto_commit": "the monitor commits offsets itself, after its state is durable",
    "transactional_id": "the monitor does not use Kafka transactions",
    "acks": "the monitor's producer waits for every in-sync replica (acks=all)",
    "enable_idempotence": "the monitor's producer is idempotent: a retried batch is written once",
    "consumer_timeout_ms": "the monitor polls with kafka.poll_timeout_ms",
    "key_deserializer": "the monitor decodes records itself",
    "value_deserializer": "the monitor decodes records itself",
    "key_serializer": "the monitor encodes records itself",
    "value_serializer": "the monitor encodes records itself",
    "default_offset_commit_callback": "not settable from a file",
    "partition_assignment_strategy": "not settable from a file",
    "partitioner": "not settable from a file",
    "kafka_client": "not settable from a file",
    "selector": "not settable from a file",
    "metric_reporters": "not settable from a file",
    "sasl_oauth_token_provider": "not settable from a file",
    "ssl_context": "not settable from a file",
    "socket_options": "not settable from a file",
}


# kafka-python drops idempotence (and refuses it when asked, as the monitor does) outside these
_IDEMPOTENT_RANGE: Mapping[str, tuple[int, int | None]] = {
    "retries": (1, None),
    "max_in_flight_requests_per_connection": (1, 5),
}


class ClientSettings(Mapping[str, Any]):
    """Read-only kafka-python settings whose secrets never show in ``repr`` or ``str``.

    Values read from the environment, and every key naming a password, secret or token, are
    shown as ``<redacted>``; the real values are only handed to kafka-python.
    """

    def __init__(self, values: Mapping[str, Any], secret_keys: Collection[str] = ()) -> None:
        self._values = dict(values)
        self._secret = frozenset(secret_keys) | {k for k in self._values if _secret_name(k)}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: (_REDACTED if k in self._secret else v) for k, v in self._values.items()}
        return f"ClientSettings({shown!r})"

    __str__ = __repr__


def _secret_name(key: str) -> bool:
    return any(word in key.lower() for word in ("password", "secret", "token"))


def kafka_client_options(
    kafka: KafkaConfig, role: Literal["consumer", "producer", "admin"]
) -> dict[str, Any]:
    """The ``kafka.client`` settings that apply to one kafka-python client class.

    A key valid for the consumer only (``session_timeout_ms``) is left out of the producer's
    settings and vice versa, since kafka-python rejects unknown settings. ``compression_type:
    none`` (librdkafka's word) is kafka-python's None.
    """
    return {
        k: None if (k, v) == ("compression_type", "none") else v
        for k, v in kafka.client.items()
        if k in _client_defaults(role)
    }


LIBRARIES = ("kafka-python", "confluent-kafka")
_LIBRARY = re.compile("|".join(re.escape(x) for x in LIBRARIES))


_BOTH = frozenset({"consumer", "producer"})
_CONSUMER = frozenset({"consumer"})
_PRODUCER = frozenset({"producer"})
# kafka.client key (kafka-python's name) -> (librdkafka property, the clients it applies to)
CONFLUENT_OPTIONS: Mapping[str, tuple[str, frozenset[str]]] = {
    "security_protocol": ("security.protocol", _BOTH),
    "sasl_mechanism": ("sasl.mechanism", _BOTH),
    "sasl_plain_username": ("sasl.username", _BOTH),
    "sasl_plain_password": ("sasl.password", _BOTH),
    "ssl_cafile": ("ssl.ca.location", _BOTH),
    "ssl_certfile": ("ssl.certificate.location", _BOTH),
    "ssl_keyfile": ("ssl.key.location", _BOTH),
    "ssl_password": ("ssl.key.password", _BOTH),
    "ssl_crlfile": ("ssl.crl.location", _BOTH),
    "client_id": ("client.id", _BOTH),
    "reconnect_backoff_ms": ("reconnect.backoff.ms", _BOTH),
    "reconnect_backoff_max_ms": ("reconnect.backoff.max.ms", _BOTH),
    "retry_backoff_ms": ("retry.backoff.ms", _BOTH),
    "session_timeout_ms": ("session.timeout.ms", _CONSUMER),
    "heartbeat_interval_ms": ("heartbeat.interval.ms", _CONSUMER),
    # static group membership: a restarted member with the same id takes its partitions back
    # without waiting for its old session to expire (one id per process of a group)
    "group_instance_id": ("group.instance.id", _CONSUMER),
    "max_poll_interval_ms": ("max.poll.interval.ms", _CONSUMER),
    "fetch_max_bytes": ("fetch.max.bytes", _CONSUMER),
    "max_partition_fetch_bytes": ("max.partition.fetch.bytes", _CONSUMER),
    "request_timeout_ms": ("request.timeout.ms", _PRODUCER),
    "linger_ms": ("linger.ms", _PRODUCER),
    "compression_type": ("compression.type", _PRODUCER),
}


def confluent_client_options(
    kafka: KafkaConfig, role: Literal["consumer", "producer"]
) -> dict[str, Any]:
    """The ``kafka.client`` settings as librdkafka properties, for one client kind.

    Keys are kafka-python's names (the same file serves both libraries); the configuration
    refuses a key without a translation here when ``client_library`` is confluent-kafka.
    """
    out: dict[str, Any] = {}
    for key, value in kafka.client.items():
        name, roles = CONFLUENT_OPTIONS.get(key, ("", frozenset()))
        if role in roles:
            out[name] = value
    return out


def _client_defaults(role: str) -> Mapping[str, Any]:
    if role == "consumer":
        from kafka import KafkaConsumer  # noqa: PLC0415 - kafka only when a config is loaded

        return cast(Mapping[str, Any], KafkaConsumer.DEFAULT_CONFIG)
    if role == "producer":
        from kafka import KafkaProducer  # noqa: PLC0415 - kafka only when a config is loaded

        return cast(Mapping[str, Any], KafkaProducer.DEFAULT_CONFIG)
    from kafka.admin import KafkaAdminClient  # noqa: PLC0415

    return cast(Mapping[str, Any], KafkaAdminClient.DEFAULT_CONFIG)


def client_settings(problems: Problems, value: Any) -> ClientSettings:
    """The ``kafka.client`` section checked against kafka-python's own settings and types."""
    path = "kafka.client"
    found = as_mapping(problems, value, path) or {}
    consumer, producer = _client_defaults("consumer"), _client_defaults("producer")
    known = set(consumer) | set(producer)
    out: dict[str, Any] = {}
    secret: set[str] = set()
    for key, raw in found.items():
        where = join_key(path, key)
        if key in _RESERVED_CLIENT:
            problems.add(where, f"not allowed here: {_RESERVED_CLIENT[key]}")
            continue
        if key not in known:
            problems.add(where, unknown_key(key, known - set(_RESERVED_CLIENT)))
            continue
        if raw is None:  # null: kafka-python's default
            continue
        item, from_env = env_ref(problems, raw, where)
        if from_env:
            secret.add(key)
            if item is None:
                continue
        default = consumer.get(key, producer.get(key))
        if _secret_name(key):
            default = ""  # passwords and tokens are strings
        checked = _client_value(item, default, from_env=from_env)
        if checked is _BAD:
            hidden = from_env or _secret_name(key)
            expected = _expected_client_type(default)
            problems.add(where, f"expected {expected}, {got(item, secret=hidden)}")
            continue
        if key == "compression_type" and checked not in _CODECS:
            problems.add(where, f"expected one of {', '.join(_CODECS)}, {got(checked)}")
            continue
        low, high = _IDEMPOTENT_RANGE.get(key, (None, None))
        if low is not None and (checked < low or (high is not None and checked > high)):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            problems.add(
                where,
                f"expected an integer {bound}, {got(checked)}: the monitor's producer is "
                "idempotent (a retried batch is written once), which needs it",
            )
            continue
        out[key] = checked
    _check_tls_files(problems, out, secret)
    return ClientSettings(out, secret)


# the files a client reads to connect over TLS: key -> what the file must be
TLS_FILES: Mapping[str, str] = {
    "ssl_cafile": "the CA certificate (PEM) that signed the brokers' certificates",
    "ssl_certfile": "this client's certificate (PEM)",
    "ssl_keyfile": "this client's private key (PEM)",
    "ssl_crlfile": "a certificate revocation list (PEM)",
}


def _check_tls_files(problems: Problems, settings: Mapping[str, Any], secret: set[str]) -> None:
    """With TLS, every file of ``TLS_FILES`` set must be readable, the CA file a certificate.

    Both clients read them only when they connect: kafka-python failed every connection and
    the daemon reported "Unable to bootstrap" forever; librdkafka refused to start with
    "ssl.ca.location failed: ... BIO lib". Neither named the file.
    """
    if str(settings.get("security_protocol", "")).upper() not in {"SSL", "SASL_SSL"}:
        return  # neither client reads them without TLS
    unreadable: set[str] = set()
    for key, what in TLS_FILES.items():
        path = settings.get(key)
        if not isinstance(path, str):
            continue
        where = join_key("kafka.client", key)
        shown = _shown_file(key, path, secret)
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            problems.add(where, f"cannot read {shown}: {exc.strerror}; it must be {what}")
            unreadable.add(key)
            continue
        if key in {"ssl_cafile", "ssl_certfile"} and not _holds_certificate(path):
            problems.add(where, f"{shown} holds no PEM certificate; it must be {what}")
            unreadable.add(key)
    if not unreadable & {"ssl_certfile", "ssl_keyfile"}:
        _check_client_key(problems, settings, secret)


def _shown_file(key: str, path: str, secret: Collection[str]) -> str:
    """How a problem names the file of ``key``: not at all when the environment names it."""
    return "the file named in the environment" if key in secret else repr(path)


def _holds_certificate(path: str) -> bool:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError:
        return False
    return True


def _check_client_key(problems: Problems, settings: Mapping[str, Any], secret: set[str]) -> None:
    """A client certificate must load with its key, decrypted with ``ssl_password`` if set.

    Both clients load them only when they connect, and say "PEM lib": kafka-python failed every
    connection with it and the daemon retried as a broker outage forever; librdkafka refused to
    start ("ssl.key.location failed: ... PEM lib"). Neither named the setting to fix. The key is
    ``ssl_keyfile``, or in ``ssl_certfile`` without one (kafka-python's rule); the password is
    handed over by a callback, so that an encrypted key without one never waits for a terminal.
    """
    certfile, keyfile = settings.get("ssl_certfile"), settings.get("ssl_keyfile")
    if not isinstance(certfile, str):
        return  # neither client sends a certificate
    key = "ssl_keyfile" if isinstance(keyfile, str) else "ssl_certfile"
    password = str(settings.get("ssl_password") or "")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
            certfile, keyfile if isinstance(keyfile, str) else None, password=lambda: password
        )
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            why = "is not the private key of the certificate in kafka.client.ssl_certfile"
        elif password:
            why = "holds no PEM private key that kafka.client.ssl_password decrypts"
        else:
            why = "holds no unencrypted PEM private key (an encrypted one needs ssl_password)"
        shown = _shown_file(key, certfile if key == "ssl_certfile" else str(keyfile), secret)
        problems.add(join_key("kafka.client", key), f"{shown} {why}")


_TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
_SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def unused_security_settings(settings: Mapping[str, Any]) -> str | None:
    """What ``security_protocol`` makes both clients ignore among the settings, or None.

    ``ssl_*`` keys need SSL or SASL_SSL and ``sasl_*`` keys SASL_PLAINTEXT or SASL_SSL; a file
    that sets them under another protocol (PLAINTEXT when unset) connects without the TLS or
    the authentication it names, and neither client says so. Not an error: a path left in
    place while a listener changes is harmless; the daemon and the bridge log it at start.
    """
    protocol = str(settings.get("security_protocol") or "PLAINTEXT").upper()
    unused = [
        key
        for key in settings
        if (key.startswith("ssl_") and protocol not in _TLS_PROTOCOLS)
        or (key.startswith("sasl_") and protocol not in _SASL_PROTOCOLS)
    ]
    if not unused:
        return None
    return (
        f"kafka.client sets {', '.join(unused)} but security_protocol is {protocol}, so neither "
        "client uses them (no TLS or SASL as they name): set security_protocol to SSL, "
        "SASL_PLAINTEXT or SASL_SSL as the broker's listener expects, or remove them"
    )


# the codecs both clients know (kafka-python refuses another one only once connected)
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


_BAD = object()


def _client_value(value: Any, default: Any, *, from_env: bool) -> Any:
    """The value coerced to the type of kafka-python's default, or ``_BAD``."""
    if isinstance(default, bool):
        if from_env and isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        return value if isinstance(value, bool) else _BAD
    if isinstance(default, int | float):
        if from_env and isinstance(value, str):
            try:
                return int(value) if isinstance(default, int) else float(value)
            except ValueError:
                return _BAD
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if isinstance(default, int) and not isinstance(value, int):
            return _BAD
        return value if numeric else _BAD
    if isinstance(default, str):
        return value if isinstance(value, str) else _BAD
    if isinstance(value, list):  # api_version: [2, 8, 0]
        return tuple(value) if all(isinstance(v, int) for v in value) else _BAD
    return value if value is None or isinstance(value, str | int | float) else _BAD


def _expected_client_type(default: Any) -> str:
    if isinstance(default, bool):
        return "a boolean"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    return "a string, number or list of integers"
