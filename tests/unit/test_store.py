import fcntl
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from monitor.config.schema import Config, ModelConfig
from monitor.core.estimator import EstimatorService
from monitor.core.messages import LabelResult, RawRecord
from monitor.core.sampler import SamplerChanges, SamplerService
from monitor.core.windows import bucket_of
from monitor.errors import StoreError
from monitor.io.store import SCHEMA_VERSION, Store
from tests.unit.engine_streams import make_stream

CFG = Config(
    models={
        "default": ModelConfig(
            name="default", labels_per_hour=100.0, expected_records_per_hour=2000.0
        )
    }
)


def _label(rid: str, y: int, offset: int) -> LabelResult:
    src = RawRecord("labels", 0, offset, 7, b"k", b"\xff{}")
    return LabelResult(rid, None, y, "ann", 5.0, None, src)


def test_state_round_trips_and_restored_services_continue_identically(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    s = make_stream(rng, 8000, span_s=4 * 3600)
    half = len(s) // 2
    sampler, est = SamplerService(CFG), EstimatorService(CFG)
    store = Store(tmp_path)
    res = sampler.process(s.batch(slice(0, half)))
    est.apply_traffic(res.traffic)
    est.upsert_requests(res.requests)
    est.handle_labels([_label(r.request_id, 1, i) for i, r in enumerate(res.requests[:5])])
    est.handle_labels([_label("unknown", 0, 99)])
    store.commit(sampler.take_changes(), est.take_changes(), {("scored", 0): half})
    store.close()

    store = Store(tmp_path)
    st = store.load()
    assert st.offsets == {("scored", 0): half}
    # the controls come back with the refreshes inside their buckets
    assert any(c.refreshes for c in st.controls.values())
    assert st.controls == {k: sampler.control(*k) for k in st.controls}
    sampler2 = SamplerService(
        CFG, traffic=st.sampler_traffic, controls=st.controls, segments=st.segments
    )
    est2 = EstimatorService(
        CFG,
        traffic=st.segment_traffic,
        requests=st.requests,
        parked=st.parked,
        watermarks=st.watermarks,
    )
    assert est2.n_parked == 1 and st.parked[0].label.source.value == b"\xff{}"
    assert est2.snapshot().windows == est.snapshot().windows
    rest = s.batch(slice(half, None))
    a, b = sampler.process(rest), sampler2.process(rest)
    assert [r.to_json() for r in a.requests] == [r.to_json() for r in b.requests]
    assert a.traffic == b.traffic
    store.close()


def test_second_daemon_on_same_directory_is_refused(tmp_path: Path) -> None:
    first = Store(tmp_path)
    with pytest.raises(StoreError, match="in use by another monitor"):
        Store(tmp_path)
    first.close()
    Store(tmp_path).close()  # released on close


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            Store(ro / "data")
    finally:
        ro.chmod(0o700)


def test_pruned_rows_leave_the_store(tmp_path: Path, rng: np.random.Generator) -> None:
    cfg = Config(models=CFG.models)
    s = make_stream(rng, 3000, span_s=3600)
    sampler, est, store = SamplerService(cfg), EstimatorService(cfg), Store(tmp_path)
    res = sampler.process(s.batch(slice(None)))
    est.apply_traffic(res.traffic)
    store.commit(sampler.take_changes(), est.take_changes(), {})
    later = make_stream(rng, 100, start=float(s.ts[-1]) + 15 * 86_400, span_s=60)
    later.ids = np.array([f"l{i}" for i in range(100)])
    later.offset += 3000
    est.apply_traffic(sampler.process(later.batch(slice(None))).traffic)
    store.commit(sampler.take_changes(), est.take_changes(), {})
    st = store.load()
    assert (
        {k[2] for k in st.segment_traffic}
        == {k[2] for k in st.sampler_traffic}
        == {int(later.ts[0] // 3600)}
    )
    store.close()


def test_a_store_with_the_old_table_names_opens_with_its_traffic(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    import sqlite3

    s = make_stream(rng, 2000, span_s=2 * 3600)
    sampler, est = SamplerService(CFG), EstimatorService(CFG)
    res = sampler.process(s.batch(slice(0, None)))
    est.apply_traffic(res.traffic)
    store = Store(tmp_path)
    store.commit(sampler.take_changes(), est.take_changes(), {("scored", 0): len(s)})
    before = store.load()
    store.close()
    with sqlite3.connect(tmp_path / "monitor.sqlite") as db:  # as a store of an older release
        db.execute("ALTER TABLE sampler_traffic RENAME TO ptraffic")
        db.execute("ALTER TABLE segment_traffic RENAME TO straffic")
    store = Store(tmp_path)
    after = store.load()
    store.close()
    assert before.sampler_traffic and after.sampler_traffic == before.sampler_traffic
    assert before.segment_traffic and after.segment_traffic == before.segment_traffic


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("requests", "body", "{"),
        ("requests", "body", '{"a": 1}'),
        ("sampler_traffic", "agg", "[1, 2]"),
        ("kv", "value", "{"),
    ],
)
def test_an_unreadable_row_is_a_store_error_naming_the_fix(
    tmp_path: Path, rng: np.random.Generator, table: str, column: str, value: str
) -> None:
    """A row damaged on disk gave a traceback and exit 1 at every start (JSONDecodeError,
    KeyError); the store now says which file and what to do (exit 2 from the command line)."""
    s = make_stream(rng, 2000, span_s=3600)
    sampler, est = SamplerService(CFG), EstimatorService(CFG)
    store = Store(tmp_path)
    res = sampler.process(s.batch(slice(0, None)))
    est.apply_traffic(res.traffic)
    est.upsert_requests(res.requests)
    store.commit(sampler.take_changes(), est.take_changes(), {("scored", 0): len(s)})
    store.put_json("alerts", {"ok": 1})
    store._db.execute(f"UPDATE {table} SET {column} = ?", (value,))
    with pytest.raises(StoreError, match=r"monitor\.sqlite holds a record that cannot be read"):
        store.load()
        store.get_json("alerts")
    store.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_database_file_is_a_store_error_naming_the_fix(
    tmp_path: Path, damage: str
) -> None:
    """It said "file is not a database" or "database disk image is malformed", and no more."""
    Store(tmp_path / "good").close()
    written = (tmp_path / "good" / "monitor.sqlite").read_bytes()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "monitor.sqlite").write_bytes(
        b"not a database " * 100 if damage == "garbage" else written[: len(written) // 2]
    )
    with pytest.raises(StoreError, match=r"monitor\.sqlite is damaged: restore the data dir"):
        Store(tmp_path / "bad")


def test_a_store_written_by_a_later_release_is_refused_before_it_is_touched(
    tmp_path: Path,
) -> None:
    """A rollback used to read a later release's alert history and maps and stop with a
    traceback at every start (``ValueError: too many values to unpack``)."""
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"written by a later release .*restore the copy"):
        Store(tmp_path)
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    (written,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert written == str(SCHEMA_VERSION + 1)  # left as it was
    with (tmp_path / "monitor.lock").open("ab") as lock:  # and released
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_store_of_an_earlier_schema_opens_and_is_marked_current(tmp_path: Path) -> None:
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "monitor.sqlite")
    (written,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert written == str(SCHEMA_VERSION)


def test_opening_a_store_of_this_release_writes_nothing(tmp_path: Path) -> None:
    """Opening wrote the schema version every time, so a daemon restarted while its volume was
    full exited with code 2 ("database or disk is full") instead of waiting for room."""
    Store(tmp_path).close()
    store = Store(tmp_path)
    try:
        assert store._db.total_changes == 0
    finally:
        store.close()


def test_segments_come_back_with_their_latest_bucket_and_freed_slots_leave(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    """Each admitted segment is loaded with the latest bucket of its traffic held (the slot
    it holds expires with it); one with none held (pruned, or written by an earlier release
    that kept every segment for ever) is behind any horizon; a freed slot leaves the table."""
    s = make_stream(rng, 2000, span_s=3 * 3600, segments=("a", "b"))
    sampler, est = SamplerService(CFG), EstimatorService(CFG)
    store = Store(tmp_path)
    est.apply_traffic(sampler.process(s.batch(slice(None))).traffic)
    store.commit(sampler.take_changes(), est.take_changes(), {("scored", 0): len(s)})
    store._db.execute("INSERT INTO segments VALUES ('default', 'gone')")
    st = store.load()
    newest = {seg: int(bucket_of(s.ts[s.segment == seg], 3600).max()) for seg in ("a", "b")}
    assert st.segments == {"default": {**newest, "gone": -1}}
    changes = SamplerChanges(dropped={("default", "gone"), ("default", "a")})
    store.commit(changes, est.take_changes(), {("scored", 0): len(s)})
    assert store.load().segments == {"default": {"b": newest["b"]}}
    store.close()
