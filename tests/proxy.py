"""A loopback TCP proxy that can cut a client off from a server (broker outages in tests).

The test broker keeps its data only in memory, so an outage cannot be a broker restart.
Instead clients talk to the broker through ``TcpProxy``: ``cut()`` resets every live
connection and closes the listening socket (new connections are refused), ``restore()``
listens again on the same port. Threads, no asyncio: one acceptor, two pumps per connection.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading

from monitor.free_ports import free_port


class TcpProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target_port`` until cut."""

    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.accepted = 0
        self.cuts = 0

    def start(self) -> TcpProxy:
        """Listen (again) and forward new connections."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self._listener = sock
        self._acceptor = threading.Thread(target=self._accept, args=(sock,), daemon=True)
        self._acceptor.start()
        return self

    restore = start

    def cut(self) -> None:
        """Reset every live connection and refuse new ones until ``restore``."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._acceptor is not None:
            self._acceptor.join(2.0)
        with self._lock:
            conns, self._conns = self._conns, set()
            self.cuts += 1
        for conn in conns:
            _reset(conn)

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                ready, _, _ = select.select([listener], [], [], 0.1)
                if not ready:
                    continue
                client, _ = listener.accept()
            except (OSError, ValueError):  # closed by cut()
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 5.0)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._conns.discard(src)
            self._conns.discard(dst)
        _reset(src)
        _reset(dst)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer sees the connection dropped, not a clean close."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a pump blocked in recv() on this socket
    with contextlib.suppress(OSError):
        sock.close()
