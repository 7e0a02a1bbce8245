"""The bridge's HTTP server on 127.0.0.1: a webhook it cannot read gets a 400, never a traceback.

A Content-Length that is not a byte count and a body nested too deep for ``json`` raised out of
the handler: the client got no answer and the server printed a multi-line traceback among the
bridge's one-line log events.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from monitor.bridges.ls_http import BridgeMetrics, BridgeServer
from monitor.free_ports import free_port


@pytest.fixture
def server() -> Iterator[BridgeServer]:
    srv = BridgeServer("127.0.0.1", free_port(), BridgeMetrics(), lambda: True, lambda: True)
    srv.start()
    yield srv
    srv.stop()


def post(port: int, body: bytes, length: str | None = None) -> tuple[str, bytes]:
    """The status line and body of a POST /webhook sent as raw bytes."""
    head = f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length or len(body)}"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    status, _, rest = reply.partition(b"\r\n")
    return status.decode(), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(
    ("body", "length", "answer"),
    [
        (b"{}", "abc", b"Content-Length 'abc' is not a byte count\n"),
        (b"{}", "-5", b"Content-Length '-5' is not a byte count\n"),
        (b"[" * 100_000 + b"]" * 100_000, None, b"not JSON\n"),
        (b"\xff\xfe", None, b"not JSON\n"),
        (b'{"task": ', None, b"not JSON\n"),
    ],
)
def test_an_unreadable_webhook_gets_a_400_and_no_traceback(
    server: BridgeServer,
    capfd: pytest.CaptureFixture[str],
    body: bytes,
    length: str | None,
    answer: bytes,
) -> None:
    assert post(server.port, body, length) == ("HTTP/1.0 400 Bad Request", answer)
    assert capfd.readouterr().err == ""
    assert server.hints.empty()


def test_a_webhook_names_its_task(server: BridgeServer) -> None:
    assert post(server.port, b'{"action": "ANNOTATION_CREATED", "task": {"id": 7}}') == (
        "HTTP/1.0 200 OK",
        b"ok\n",
    )
    assert server.hints.get(timeout=5) == 7
