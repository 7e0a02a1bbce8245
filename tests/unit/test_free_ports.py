"""Free ports: distinct, below the kernel's ephemeral range, and never one something holds."""

from __future__ import annotations

import os
import socket

from monitor import free_ports
from monitor.free_ports import PORTS, free_port


def test_ports_are_distinct_below_the_ephemeral_range_and_skip_a_held_one() -> None:
    got = [free_port() for _ in range(50)]
    assert len(set(got)) == 50 and all(p in PORTS and p < 32768 for p in got)
    pid = os.getpid()
    walk_next = PORTS.start + (pid * 2_654_435_761 + free_ports._tried[pid]) % len(PORTS)
    with socket.socket() as held:
        held.bind(("127.0.0.1", walk_next))
        held.listen()
        assert free_port() not in {walk_next, *got}
