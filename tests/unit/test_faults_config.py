"""Bad configuration and bad deployments: one clear message naming the problem, exit status 2.

Through ``monitor.cli.main(["run", ...])``: an unreadable file, an unknown key, a negative
budget, alpha outside [0, 1], a metrics port already taken, a data directory that cannot be
created, is read-only, or sits on a full filesystem. Tests run as root, so permissions are
not a way to make a directory read-only: the read-only and full cases mount a small tmpfs
(skipped where mounting is not permitted). An unreachable broker is not a configuration
error: see tests/integration/test_faults_deploy.py (waits, not ready, does not exit).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.free_ports import free_port
from monitor.io import exporter as exporter_module
from monitor.io.store import Store

GOOD = """
kafka: {{bootstrap_servers: ["127.0.0.1:1"], poll_timeout_ms: 100}}
metrics: {{port: {port}}}
storage: {{data_dir: "{data}"}}
models: {{default: {{alpha: 0.5, labels_per_hour: 10}}}}
"""


def _run_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, *extra: str
) -> tuple[int, str]:
    path = tmp_path / "monitor.yaml"
    if text is not None:
        path.write_text(text)
    code = main(["run", "--config", str(path), *extra])
    err = capsys.readouterr().err
    assert err.count("monitor run: error:") == (1 if code == 2 else 0), err  # one message
    return code, err


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("kafka: {bootstrap: x}\n", "kafka.bootstrap"),
        ("models: {default: {labels_per_hour: -5}}\n", "models.default.labels_per_hour"),
        ("models: {default: {labels_per_day: -1}}\n", "models.default.labels_per_day"),
        ("models: {default: {alpha: 1.5}}\n", "models.default.alpha"),
        ("models: {default: {alpha: -0.1}}\n", "models.default.alpha"),
        ("metrics: {port: 70000}\n", "metrics.port"),
        ("kafka: [\n", "line"),
    ],
)
def test_bad_configuration_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, wanted: str
) -> None:
    code, line = _run_cli(tmp_path, capsys, text)
    assert code == 2 and wanted in line, line


def test_unreadable_or_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "monitor.yaml").mkdir()  # a directory where the file should be
    code, line = _run_cli(tmp_path, capsys, None)
    assert code == 2 and "monitor.yaml" in line, line
    code = main(["run", "--config", str(tmp_path / "absent.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "absent.yaml" in err, err


def test_metrics_port_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        text = GOOD.format(port=free_port(), data=tmp_path / "data")
        code, line = _run_cli(tmp_path, capsys, text, "--metrics-port", str(port))
    assert code == 2 and f"127.0.0.1:{port}" in line and "metrics.port" in line, line


def test_a_listen_address_of_no_interface_names_that_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bind's own error (EADDRNOTAVAIL) blamed metrics.port and asked about other processes."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")

    monkeypatch.setattr(exporter_module, "make_server", refuse)
    text = GOOD.format(port=free_port(), data=tmp_path / "data")
    code, line = _run_cli(tmp_path, capsys, text)
    assert code == 2 and line.startswith("monitor run: error: metrics.listen_address: "), line
    assert "use an address of this machine, or 0.0.0.0" in line, line


def test_data_dir_that_cannot_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, line = _run_cli(tmp_path, capsys, GOOD.format(port=free_port(), data=blocker / "data"))
    assert code == 2 and "not writable" in line and str(blocker) in line, line


def _check_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Path, *extra: str
) -> tuple[int, str]:
    path = tmp_path / "monitor.yaml"
    path.write_text(GOOD.format(port=free_port(), data=data))
    code = main(["check-config", "--config", str(path), *extra])
    captured = capsys.readouterr()
    assert ("OK" in captured.out) == (code == 0), captured
    return code, captured.err


def test_a_data_dir_that_is_a_file_is_refused_by_check_config_as_by_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """check-config said OK, then run stopped on "not writable: File exists"."""
    a_file = tmp_path / "state"
    a_file.write_text("")
    code, err = _check_config(tmp_path, capsys, a_file)
    assert code == 2, err
    assert f"error: storage.data_dir: {a_file} is a file, not a directory: the state store " in err
    assert "point storage.data_dir at one (it is created if missing), or move the file away" in err
    code, err = _check_config(tmp_path, capsys, tmp_path / "data", "--data-dir", str(a_file))
    assert code == 2 and f"error: --data-dir: {a_file} is a file, not a directory" in err, err
    code, err = _check_config(tmp_path, capsys, a_file / "data")  # under a file
    assert code == 2, err
    assert f"storage.data_dir: {a_file / 'data'} cannot be created: {a_file} is a file" in err
    code, line = _run_cli(tmp_path, capsys, GOOD.format(port=free_port(), data=a_file))
    assert code == 2, line
    assert f"data directory {a_file} is a file, not a directory: point storage.data_dir" in line
    assert _check_config(tmp_path, capsys, tmp_path / "new" / "data")[0] == 0  # run makes it


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_check_config_says_a_data_dir_it_may_not_write_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    Store(data).close()
    data.chmod(0o500)
    try:
        code, err = _check_config(tmp_path, capsys, data)
    finally:
        data.chmod(0o700)
    assert code == 2 and "cannot be read" not in err, err
    assert f"storage.data_dir: the data directory {data} cannot be written" in err, err


def test_check_config_says_a_read_only_data_dir_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store on a file system remounted read-only: check-config said it "cannot be read"."""
    with _tmpfs(tmp_path / "ro", "1m") as ro:
        Store(ro / "data").close()
        done = subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=False)
        if done.returncode != 0:
            pytest.skip("remounting a tmpfs read-only is not permitted here")
        code, err = _check_config(tmp_path, capsys, ro / "data")
    assert code == 2 and "cannot be read" not in err, err
    assert f"storage.data_dir: the data directory {ro / 'data'} cannot be written" in err, err
    assert "make it writable by the user that runs monitor run" in err


@contextlib.contextmanager
def _tmpfs(where: Path, size: str, *options: str) -> Iterator[Path]:
    where.mkdir()
    opts = ",".join([f"size={size}", *options])
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], check=False)
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here (needs root in a privileged container)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_read_only_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _tmpfs(tmp_path / "ro", "1m", "ro") as ro:
        code, line = _run_cli(tmp_path, capsys, GOOD.format(port=free_port(), data=ro / "data"))
    assert code == 2 and "not writable" in line and "Read-only file system" in line, line


def test_full_filesystem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _tmpfs(tmp_path / "full", "64k") as full:
        with contextlib.suppress(OSError), (full / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        code, line = _run_cli(tmp_path, capsys, GOOD.format(port=free_port(), data=full / "data"))
    assert code == 2 and "full" in line and str(full) in line, line


def test_an_unknown_log_level_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a traceback and exit 1 once the configuration had loaded."""
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--config", str(tmp_path / "m.yaml"), "--log-level", "verbose"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert "'verbose' is not a log level: use one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in err
