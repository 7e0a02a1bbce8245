"""Start a local Label Studio server on 127.0.0.1, for the tests and the demo.

Label Studio is never a dependency of the monitor: it lives in a virtualenv of its own (it pins
many packages), made by ``scripts/bootstrap.sh test`` at
``$MONITOR_LABELSTUDIO_VENV`` (default ``~/.cache/activeaudit-monitor/labelstudio-venv``).
The server runs offline with SQLite in ``data_dir``; the first start applies the database
migrations (~70-80 s on a loaded 2-core machine), later starts on the same directory are
faster. The user and its legacy API token are created from the environment; webhooks to
loopback addresses are allowed (``USE_DEFAULT_BANNED_SUBNETS=false``) so that a bridge on
127.0.0.1 can be called.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import IO

from monitor.errors import MonitorError

DEFAULT_VENV = Path.home() / ".cache" / "activeaudit-monitor" / "labelstudio-venv"
USERNAME = "auditor@example.com"
PASSWORD = "audit-demo-pass"
TOKEN = "a0d1t0a0d1t0a0d1t0a0d1t0a0d1t0a0d1t0a0d1"


def executable() -> Path | None:
    """The ``label-studio`` command: ``$MONITOR_LABELSTUDIO_VENV/bin``, else on PATH."""
    venv = Path(os.environ.get("MONITOR_LABELSTUDIO_VENV", str(DEFAULT_VENV)))
    exe = venv / "bin" / "label-studio"
    if exe.is_file():
        return exe
    found = shutil.which("label-studio")
    return Path(found) if found else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LabelStudioServer:
    """One ``label-studio start`` process on 127.0.0.1 (``start``, ``stop``, ``restart``)."""

    def __init__(self, data_dir: Path, port: int | None = None, log_path: Path | None = None):
        exe = executable()
        if exe is None:
            msg = (
                "label-studio is not installed: run `bash scripts/bootstrap.sh test` (it makes "
                f"{DEFAULT_VENV}) or set MONITOR_LABELSTUDIO_VENV"
            )
            raise MonitorError(msg)
        self.exe = exe
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log_path = log_path or data_dir / "label-studio.log"
        self.username, self.password, self.token = USERNAME, PASSWORD, TOKEN
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.owned = False  # True once this object started the server (it may stop it)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300.0) -> LabelStudioServer:
        """Start and wait until ``GET /health`` says UP (raises MonitorError on timeout)."""
        self.launch()
        return self.wait(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it (``wait`` then waits)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.owned = True
        env = {
            **os.environ,
            "LATEST_VERSION_CHECK": "false",
            "LABEL_STUDIO_BASE_DATA_DIR": str(self.data_dir),
            "LABEL_STUDIO_USERNAME": self.username,
            "LABEL_STUDIO_PASSWORD": self.password,
            "LABEL_STUDIO_USER_TOKEN": self.token,
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
            "USE_DEFAULT_BANNED_SUBNETS": "false",
            "SENTRY_DSN": "",
            "FRONTEND_SENTRY_DSN": "",
            "COLLECT_ANALYTICS": "false",
        }
        cmd = [str(self.exe), "start", "--no-browser", "--internal-host", "127.0.0.1"]
        cmd += ["-p", str(self.port)]
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait(self, timeout_s: float = 300.0) -> LabelStudioServer:
        """Wait until the launched server is healthy (raises MonitorError on exit or timeout)."""
        if self._proc is None:
            msg = "label-studio was not launched"
            raise MonitorError(msg)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                msg = f"label-studio exited with {self._proc.returncode}; see {self.log_path}"
                raise MonitorError(msg)
            if self.healthy():
                return self
            time.sleep(1.0)
        self.stop()
        msg = f"label-studio did not become healthy in {timeout_s:.0f} s; see {self.log_path}"
        raise MonitorError(msg)

    def healthy(self) -> bool:
        """``GET /health`` answers ``{"status": "UP"}``."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("status") == "UP")
        except (OSError, ValueError):
            return False

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the server's process group (SIGKILL after ``timeout_s``)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout_s)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, timeout_s: float = 300.0) -> LabelStudioServer:
        """Stop and start again on the same port and data."""
        self.stop()
        return self.start(timeout_s)
