"""Free TCP ports on 127.0.0.1 for the local brokers, servers and daemons this package starts.

A port found free is used a moment later by another process (a broker, a daemon's metrics
server). Asking the kernel for one (binding port 0) hands out a port from its ephemeral range
(32768-60999 on Linux), the same range every outgoing connection and port-0 bind draws from, so
with many Kafka client connections in parallel (the test suite's two workers) one was taken in
that moment ("Address already in use"). :func:`free_port` therefore hands out ports below that
range, ``PORTS`` = 20000-32767, which the kernel never assigns by itself. Each process walks them
from its own offset (a hash of its pid), one after the other, so the ports it hands out are
distinct and two processes meet only if their walks cross; a port something else holds fails the
bind and is skipped.
"""

from __future__ import annotations

import os
import socket

#: The ports handed out: below Linux's default ephemeral range (``ip_local_port_range``).
PORTS = range(20_000, 32_768)

_tried: dict[int, int] = {}  # per pid (a forked child walks from its own offset): ports tried


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and outside the ephemeral range.

    Raises ``OSError`` when none of ``PORTS`` is free.
    """
    pid = os.getpid()
    offset = pid * 2_654_435_761  # Knuth's multiplicative hash spreads nearby pids apart
    for _ in PORTS:
        tried = _tried.get(pid, 0)
        _tried[pid] = tried + 1
        port = PORTS.start + (offset + tried) % len(PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    msg = f"no free TCP port on 127.0.0.1 in {PORTS.start}-{PORTS.stop - 1}"
    raise OSError(msg)
