"""Start a local Label Studio server on 127.0.0.1, for the tests and the demo.

Label Studio is never a dependency of the monitor: it lives in a virtualenv of its own (it pins
many packages), made by ``scripts/bootstrap.sh test`` at
``$MONITOR_LABELSTUDIO_VENV`` (default ``~/.cache/activeaudit-monitor/labelstudio-venv``).
The server runs offline with SQLite in ``data_dir``. The database migrations take ~70-90 s on
a loaded 2-core machine, so they run once per machine and Label Studio version into a template
(``~/.cache/activeaudit-monitor/labelstudio-data-VERSION``) that every fresh ``data_dir`` starts
as a copy of (a start then takes ~15-25 s). The user and its legacy API token are created from
the environment; webhooks to loopback addresses are allowed (``USE_DEFAULT_BANNED_SUBNETS=false``)
so that a bridge on 127.0.0.1 can be called.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

from monitor.errors import MonitorError
from monitor.free_ports import free_port

DEFAULT_VENV = Path.home() / ".cache" / "activeaudit-monitor" / "labelstudio-venv"
_DATABASE = "label_studio.sqlite3"
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


def template_dir(exe: Path) -> Path:
    """The migrated data directory fresh servers start from, one per Label Studio version."""
    found = sorted(exe.parent.parent.glob("lib/python*/site-packages/label_studio-*.dist-info"))
    version = (
        found[-1].name.removeprefix("label_studio-").removesuffix(".dist-info") if found else "x"
    )
    return DEFAULT_VENV.parent / f"labelstudio-data-{version}"


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
        self._migrating: Path | None = None  # the template being made by ``launch``

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300.0) -> LabelStudioServer:
        """Start and wait until ``GET /health`` says UP (raises MonitorError on timeout)."""
        self.launch()
        return self.wait(timeout_s)

    def _env(self, data_dir: Path) -> dict[str, str]:
        return {
            **os.environ,
            "LATEST_VERSION_CHECK": "false",
            "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
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

    def _fresh(self) -> bool:
        return not (self.data_dir / _DATABASE).exists()

    def launch(self) -> None:
        """Start the process without waiting for it (``wait`` then waits).

        A fresh data directory starts as a copy of the migrated template; without a template,
        the migrations run first into a new one (``label-studio version`` applies them and
        exits), so only the first start on a machine pays for them.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.owned = True
        self._log = self.log_path.open("ab")
        template = template_dir(self.exe)
        if self._fresh() and not (template / _DATABASE).exists():
            template.parent.mkdir(parents=True, exist_ok=True)
            self._migrating = Path(tempfile.mkdtemp(prefix=".migrating-", dir=template.parent))
            self._proc = subprocess.Popen(
                [str(self.exe), "version"],
                env=self._env(self._migrating),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            return
        self._serve()

    def _serve(self) -> None:
        template = template_dir(self.exe)
        if self._fresh() and (template / _DATABASE).exists():
            shutil.copytree(template, self.data_dir, dirs_exist_ok=True)
        cmd = [str(self.exe), "start", "--no-browser", "--internal-host", "127.0.0.1"]
        cmd += ["-p", str(self.port)]
        self._proc = subprocess.Popen(
            cmd,
            env=self._env(self.data_dir),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _finish_migrations(self, timeout_s: float) -> None:
        assert self._proc is not None and self._migrating is not None
        try:
            code = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            msg = f"label-studio's migrations took over {timeout_s:.0f} s; see {self.log_path}"
            raise MonitorError(msg) from None
        if code != 0:
            msg = f"label-studio's migrations failed ({code}); see {self.log_path}"
            raise MonitorError(msg)
        try:
            self._migrating.rename(template_dir(self.exe))
        except OSError:  # another process made the template meanwhile
            shutil.rmtree(self._migrating, ignore_errors=True)
        self._migrating = None
        self._serve()

    def wait(self, timeout_s: float = 300.0) -> LabelStudioServer:
        """Wait until the launched server is healthy (raises MonitorError on exit or timeout)."""
        if self._proc is None:
            msg = "label-studio was not launched"
            raise MonitorError(msg)
        deadline = time.monotonic() + timeout_s
        if self._migrating is not None:
            self._finish_migrations(timeout_s)
        assert self._proc is not None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                msg = f"label-studio exited with {self._proc.returncode}; see {self.log_path}"
                raise MonitorError(msg)
            if self.healthy():
                return self
            time.sleep(0.5)
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
