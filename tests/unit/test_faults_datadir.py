"""The data directory: committed state survives a SIGKILL and a torn WAL write.

A child process commits transactions (each one records a next offset, as every poll does) and
SIGKILLs itself without closing anything. The directory lock dies with it, the next open
succeeds and finds every committed transaction. Cutting the WAL in the middle of its last
frame and appending garbage (a write torn by the crash) loses exactly that last transaction,
which the daemon replays from the offsets stored with the state; everything before it is
intact and the store keeps working. (Two daemons on one directory:
tests/integration/test_faults_deploy.py and tests/unit/test_store.py.)
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from monitor.core.estimator import EstimatorChanges
from monitor.core.sampler import SamplerChanges
from monitor.io.store import DB_NAME, Store

CHILD = """
import os, signal, sys
from pathlib import Path
from monitor.core.estimator import EstimatorChanges
from monitor.core.sampler import SamplerChanges
from monitor.io.store import Store
store = Store(Path(sys.argv[1]))
for i in range(1, int(sys.argv[2]) + 1):
    store.commit(SamplerChanges(), EstimatorChanges(), {("scored", 0): i, ("labels", 0): 2 * i})
os.kill(os.getpid(), signal.SIGKILL)
"""
N = 40


def _killed_writer(data_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(data_dir), str(N)], check=False)
    assert done.returncode == -signal.SIGKILL
    assert (data_dir / f"{DB_NAME}-wal").stat().st_size > 0  # nothing was checkpointed


def test_committed_state_survives_sigkill(tmp_path: Path) -> None:
    _killed_writer(tmp_path)
    for _ in range(2):  # and a clean restart after the recovery
        store = Store(tmp_path)
        assert store.offsets() == {("scored", 0): N, ("labels", 0): 2 * N}
        store.close()


def test_torn_wal_loses_only_the_torn_transaction(tmp_path: Path) -> None:
    _killed_writer(tmp_path)
    wal = tmp_path / f"{DB_NAME}-wal"
    size = wal.stat().st_size
    with wal.open("r+b") as f:
        f.truncate(size - 100)
        f.seek(0, 2)
        f.write(b"\xa5" * 57)
    store = Store(tmp_path)
    try:
        assert store.offsets() == {("scored", 0): N - 1, ("labels", 0): 2 * (N - 1)}
        store.load()  # every table readable
        store.commit(SamplerChanges(), EstimatorChanges(), {("scored", 0): N})
    finally:
        store.close()
    store = Store(tmp_path)
    assert store.offsets()[("scored", 0)] == N
    store.close()
