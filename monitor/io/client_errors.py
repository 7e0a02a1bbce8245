"""Why a Kafka client cannot reach the broker, in the daemon's one line per state change.

Both client libraries learn the cause of a failed connection (a refused SASL login, a broker
certificate the CA file does not vouch for, a client certificate the broker refuses) in their
network threads, and then raise something that does not say: kafka-python "Unable to
bootstrap", librdkafka "Broker transport failure".
Each source and sink notes its client's connection errors in a ``RecentErrors`` and raises
``unavailable(...)``: the error, the most telling connection error of the last minute, and
which ``kafka.client`` settings to check for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from monitor.errors import BrokerUnavailable

RECENT_S = 60.0  # a connection error older than this is not named as the cause
# words of errors that name their cause (a later bare "socket disconnected" says less)
_TELLING = ("authentication", "certificate", "handshake", "alert", "sasl", "security.protocol")
# a SASL handshake the listener does not take: one without SASL (kafka-python raises
# IllegalSaslStateError, librdkafka "Request not valid in current SASL state")
_SASL_STATE = ("illegalsaslstate", "sasl state", "sasl_state", "saslhandshake", "sasl handshake")
_SASL_MECHANISM = ("unsupportedsaslmechanism", "unsupported sasl mechanism")
# a TLS handshake with a listener that does not speak TLS, or a TLS listener spoken to in clear
_TLS_MISMATCH = (
    "wrong version number",
    "ssl handshake",
    "ssl_handshake",
    "tls handshake",
    "handshake failed",
    "handshake failure",
    "unexpected eof",
    "eof occurred in violation of protocol",
    "record layer failure",
    "packet length too long",
    "security.protocol",
    "plaintext broker listener",
)


def describe(exc: BaseException) -> str:
    """``Type: message``, the type once (kafka-python's messages often start with it already)."""
    text = str(exc)
    name = type(exc).__name__
    return text if name in text else f"{name}: {text}"


def _telling(error: str) -> bool:
    return any(word in error.lower() for word in _TELLING)


class RecentErrors:
    """The most telling connection error of the last ``RECENT_S`` seconds (any thread notes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, str] | None = None

    def note(self, error: str) -> None:
        """Remember ``error``, unless a more telling one is recent.

        A refused login is followed by the closed connection, which says less.
        """
        now = time.monotonic()
        with self._lock:
            last = self._last
            fresh = last is not None and now - last[0] <= RECENT_S
            if fresh and last is not None and _telling(last[1]) and not _telling(error):
                return
            self._last = (now, error)

    def recent(self) -> str | None:
        """The error noted in the last ``RECENT_S`` seconds, if any."""
        with self._lock:
            last = self._last
        if last is None or time.monotonic() - last[0] > RECENT_S:
            return None
        return last[1]


def principal(client: Mapping[str, Any]) -> str:
    """The principal the broker's ACLs know this client as, from ``kafka.client``."""
    if client.get("sasl_plain_username"):
        return f"User:{client['sasl_plain_username']}"
    if client.get("ssl_certfile"):
        return "User:<the subject of kafka.client.ssl_certfile>"
    return "User:ANONYMOUS"


def connection_hint(cause: str, client: Mapping[str, Any]) -> str:
    """Which ``kafka.client`` settings to check for a client error (empty when none fits).

    ``client``: the ``kafka.client`` settings (kafka-python's names). kafka-python 3.0.12 at
    times reports a login the broker refused only as a closed connection: the broker sends its
    answer and closes at once, and the client drops what it read with the close. So a client
    that could not bootstrap because each connection was closed points at SASL too (a broker
    going away later closes connections as well: that says nothing about the login).

    A TLS alert about a certificate comes from the broker, refusing this client's certificate
    (``ssl.client.auth=required``; Apache Kafka 4.1.1 sends "bad certificate" for none, and
    "certificate unknown" for one its trust store does not vouch for); the client's own check of
    the broker's certificate fails with "certificate verify failed" instead.

    A client whose ``security_protocol`` is not the listener's fails its handshake: SASL with a
    listener without it (the broker answers the SASL handshake with ILLEGAL_SASL_STATE), TLS
    with a listener without it or the other way round (a TLS handshake error, or a closed
    connection that librdkafka says may be the wrong ``security.protocol``). Each client
    retried it as an outage with nothing to say which setting to check.
    """
    text = cause.lower()
    if "authorization" in text:  # TOPIC_ / GROUP_AUTHORIZATION_FAILED: logged in, not allowed
        return (
            f"the broker's ACLs do not allow this client's principal ({principal(client)}) "
            "what it asked: grant it Read and Describe on the topics the monitor reads, Write "
            "and Describe on those it writes and Read on its consumer group (kafka-acls.sh --add)"
        )
    protocol = str(client.get("security_protocol") or "PLAINTEXT").upper()
    listener = (
        f"kafka.client.security_protocol is {protocol}: it must be the protocol of the broker "
        "listener kafka.bootstrap_servers names"
    )
    if any(word in text for word in _SASL_MECHANISM):
        return (
            "the broker's listener does not enable kafka.client.sasl_mechanism: set it to one "
            "the listener enables (the broker's sasl.enabled.mechanisms)"
        )
    if any(word in text for word in _SASL_STATE):
        return (
            f"the broker's listener did not take the SASL handshake: {listener} (PLAINTEXT or "
            "SSL, without the kafka.client.sasl_* keys, for a listener without SASL; "
            "SASL_PLAINTEXT or SASL_SSL, with kafka.client.sasl_mechanism, sasl_plain_username "
            "and sasl_plain_password, for one with SASL)"
        )
    if "authentication" in text:
        return (
            "SASL authentication failed: check kafka.client.sasl_mechanism, sasl_plain_username "
            "and sasl_plain_password (the broker's log gives its reason)"
        )
    if "alert" in text and ("certificate" in text or "unknown ca" in text):
        if not client.get("ssl_certfile"):
            return (
                "the broker did not accept this client's certificate: it requires one; set "
                "kafka.client.ssl_certfile and ssl_keyfile (a certificate signed by a CA the "
                "broker trusts, and its key)"
            )
        return (
            "the broker did not accept this client's certificate: check "
            "kafka.client.ssl_certfile and ssl_keyfile (a certificate signed by a CA the broker "
            "trusts, valid now, and its key; the broker's log gives its reason)"
        )
    if "certificate" in text:
        return (
            "the broker's TLS certificate was not accepted: kafka.client.ssl_cafile must be the "
            "CA certificate (PEM) that signed it, and the certificate must be valid for the host "
            "in kafka.bootstrap_servers"
        )
    if any(word in text for word in _TLS_MISMATCH):
        return (
            f"the TLS handshake failed: {listener} (SSL or SASL_SSL, with the kafka.client.ssl_* "
            "keys, for a TLS listener; PLAINTEXT or SASL_PLAINTEXT for one without TLS)"
        )
    if protocol.startswith("SASL") and "unable to bootstrap" in text and "disconnected" in text:
        return (
            "the broker closed each new connection: check kafka.client.security_protocol, "
            "sasl_mechanism, sasl_plain_username and sasl_plain_password (kafka-python reports "
            "a refused SASL login so at times; the broker's log says)"
        )
    return ""


def unavailable(
    what: str, exc: BaseException, errors: RecentErrors, client: Mapping[str, Any]
) -> BrokerUnavailable:
    """``what`` failed on ``exc``; with the recent connection error and what to check for it."""
    error = describe(exc)
    cause = errors.recent()
    if cause is not None and cause not in error:
        error += f" (last connection error: {cause})"
    hint = connection_hint(error, client)
    return BrokerUnavailable(f"{what}: {error}; {hint}" if hint else f"{what}: {error}")
