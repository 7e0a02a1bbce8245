"""The daemon's ``/metrics`` server and the bridge's server on 127.0.0.1 with clients that
misbehave: a connection reset half-way through a request is one DEBUG log event (it printed a
15-line traceback on stderr each time), and a client that stalls is let go after the request
timeout (it held its thread for good)."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor.bridges import ls_http
from monitor.bridges.ls_http import BridgeMetrics, BridgeServer
from monitor.config.schema import Config, MetricsConfig, ModelConfig
from monitor.io import exporter as exporter_module
from monitor.io.exporter import Exporter
from monitor.io.http_server import OneLineErrors

TIMEOUT_S = 0.3
# the daemon's metrics server on a free port of 127.0.0.1
CONFIG = Config(
    metrics=MetricsConfig(listen_address="127.0.0.1", port=0),
    models={"fraud": ModelConfig(name="fraud")},
    default_model="fraud",
)


@pytest.fixture(params=["metrics", "bridge"])
def port(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The port of the daemon's metrics server or of the bridge's, with a short timeout."""
    monkeypatch.setattr(exporter_module._QuietHandler, "timeout", TIMEOUT_S)
    monkeypatch.setattr(ls_http, "REQUEST_TIMEOUT_S", TIMEOUT_S)
    if request.param == "metrics":
        exp = Exporter(CONFIG, registry=CollectorRegistry())
        exp.start_http()
        assert exp.port is not None
        yield exp.port
        exp.stop()
    else:
        srv = BridgeServer("127.0.0.1", 0, BridgeMetrics(), lambda: True, lambda: True).start()
        yield srv.port
        srv.stop()


def _healthz(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply.partition(b"\r\n")[0]


def _events(caplog: pytest.LogCaptureFixture, n: int) -> list[logging.LogRecord]:
    """The server threads' ``http_request_failed`` events, once there are ``n`` (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        out = [r for r in caplog.records if getattr(r, "event", "") == "http_request_failed"]
        if len(out) >= n or time.monotonic() > deadline:
            return out
        time.sleep(0.02)


@pytest.mark.parametrize(
    "sent",
    [b"GET /metr", b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"],
    ids=["in the request line", "in the headers"],
)
def test_a_reset_connection_is_one_debug_event(
    port: int, sent: bytes, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="monitor.io.http_server")
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn.sendall(sent)
    time.sleep(0.05)  # read by the server before the reset
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()  # SO_LINGER 0: the close sends a reset
    (event,) = _events(caplog, 1)
    assert event.levelno == logging.DEBUG
    assert getattr(event, "error", "").startswith("ConnectionResetError")
    assert capfd.readouterr().err == ""
    assert _healthz(port) == b"HTTP/1.0 200 OK"


def test_a_client_that_stalls_is_let_go(port: int, capfd: pytest.CaptureFixture[str]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127")
        started = time.monotonic()
        assert conn.recv(65536) == b""  # closed by the server, without an answer
        assert time.monotonic() - started < 5
    assert capfd.readouterr().err == ""
    assert _healthz(port) == b"HTTP/1.0 200 OK"


def test_a_server_fault_is_a_warning_with_its_traceback_inside(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        int("not a number")
    except ValueError:
        OneLineErrors().handle_error(None, ("127.0.0.1", 40000))
    (event,) = caplog.records
    assert event.levelno == logging.WARNING
    assert getattr(event, "error", "").startswith("ValueError")
    assert event.exc_info is not None  # the formatter writes it into the event's "exc" field


class _Broken(Collector):
    def collect(self) -> Iterable[Metric]:
        msg = "a collector's bug"
        raise ValueError(msg)


def test_a_collector_that_raises_is_a_500_and_one_log_event(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """wsgiref answered 500 too, but printed the traceback on stderr at every scrape."""
    registry = CollectorRegistry()
    exp = Exporter(CONFIG, registry=registry)
    registry.register(_Broken())
    exp.start_http()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/healthz", timeout=5) as ok:
            assert ok.status == 200
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=5)
        assert failed.value.code == 500
        assert failed.value.read() == b"metrics not rendered\n"
    finally:
        exp.stop()
    (event,) = [r for r in caplog.records if getattr(r, "event", "") == "metrics_render_failed"]
    assert event.exc_info is not None
    assert "a collector's bug" in str(event.exc_info[1])
    assert capfd.readouterr().err == ""
