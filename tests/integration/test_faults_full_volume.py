"""A full data volume: the daemon rides it out, not ready, and resumes when there is room.

The data directory is a small tmpfs of its own (mounting one needs root, as CI runs; a
laptop without it skips). Half the stream is read, the volume is filled to the last byte with a
file beside the store, and the other half is produced: SQLite's transactions fail with
"database or disk is full". The daemon used to exit 2 there and take its exported estimates and
alert states with it. It must stay up, answer 503 on ``/readyz``, keep the estimates of the
first half on ``/metrics``, log the state once; and once the file is removed, be ready again and
end as the engine's undisturbed run: the same requests (the failed attempts send their step's
requests again, the same bytes) and estimates.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.sim.workload import WorkloadSpec, generate
from tests.conftest import Broker, missing_component
from tests.integration.test_daemon_kafka import (
    Run,
    _answer_and_stop,
    _predict,
    _produce,
    _scored,
    _scrape,
    _yaml,
)
from tests.integration.test_faults_outage import _readyz
from tests.integration.test_kafka_real import _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VOLUME = "16m"
FAIL_S = 30.0  # the second half's first commit fails within this
READY_S = 25.0  # after the room is made: backoff capped at 10 s


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of ``VOLUME`` bytes mounted for this test, unmounted after it."""
    path = tmp_path / "volume"
    path.mkdir()
    if os.geteuid() != 0:
        missing_component("a tmpfs to fill: mounting one needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={VOLUME},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing_component(f"a tmpfs to fill: mount failed: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(path: Path) -> int:
    """Write ``path`` until the volume refuses a byte more (ENOSPC); the bytes written."""
    chunk = b"\0" * 65536
    written = 0
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]


def test_a_full_data_volume_is_ridden_out_and_loses_nothing(
    broker: Broker, make_topics: Callable[..., TopicsConfig], volume: Path, tmp_path: Path
) -> None:
    topics = make_topics()
    path = tmp_path / "full.yaml"
    path.write_text(
        _yaml(broker, topics, volume / "data", f"g-{topics.scored}", max_poll_records=50)
    )
    run = Run(path, load_config(path), tmp_path / "full.log")
    port = run.config.metrics.port
    w = generate(WorkloadSpec(n=8000, hours=8.0, seed=23))
    expected, predicted = _predict(run.config, w, tmp_path)
    scored = _scored(w)
    half = len(scored) // 2
    _produce(broker, topics.scored, scored[:half])
    run.start()
    run.wait_offsets({(topics.scored, 0): half})
    filler = volume / "filler"
    filled = _fill(filler)
    _produce(broker, topics.scored, scored[half:])

    _wait_for(
        "the store to refuse a write", lambda: bool(run.events("store_unavailable")), run, FAIL_S
    )
    (failed,) = run.events("store_unavailable")
    time.sleep(3.0)  # retried meanwhile; it does not exit
    metrics = _scrape(run, "monitor_ready 0.0")
    status = _readyz(port)
    stored_while_full = run.offsets()[(topics.scored, 0)]

    filler.unlink()
    ready_after = _wait_for("/readyz 200", lambda: _readyz(port) == 200, run, READY_S)
    requests = _answer_and_stop(run, broker, w, expected)
    print(
        f"filled {filled} bytes at offset {half}/{len(w)}; stored {stored_while_full} while full; "
        f"error {failed['error']!r}; ready {ready_after:.1f} s after the room was made; "
        f"{len(requests)} requests written for {len(expected)}"
    )

    assert "database or disk is full" in str(failed["error"]), failed
    assert str(volume / "data") in str(failed["error"]), failed
    assert status == 503
    # the first half's estimates are still exported (no label yet: the label-free ones)
    assert re.search(r'monitor_window_records\{[^}]*window="24h"[^}]*\} [1-9]', metrics), metrics
    assert half <= stored_while_full < len(w)
    assert len(run.events("store_available")) == 1
    assert not run.events("crashed") and not run.events("broker_down")
    # nothing lost: every request (replays repeat bytes), estimates as uninterrupted
    assert set(requests) == set(expected)
    assert run.snapshot_repr() == predicted
