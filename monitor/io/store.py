"""Durable state in one SQLite file per data directory.

WAL journal (``synchronous=NORMAL``, see ``Store.__init__``); an exclusive ``flock`` on
``monitor.lock`` keeps a second daemon out of the same directory. Each poll writes ONE
transaction holding every state change and the next offset of each topic-partition it
consumed, so state and offsets can never disagree: after a crash the consumer seeks to the
stored offsets and replays, and the deterministic decisions and idempotent upserts reproduce
the lost work exactly.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from monitor.core import aggregates
from monitor.core.aggregates import BucketState, FeedChanges
from monitor.core.estimator import EstimatorChanges, ParkedLabel, RequestState
from monitor.core.messages import AuditRequest, LabelResult
from monitor.core.sampler import PartKey, SamplerChanges
from monitor.core.windows import TrafficAggregate
from monitor.errors import StoreError
from monitor.stats.budget import (
    Control,
    maps_to_list,
    refresh_times,
    refreshes_to_list,
    with_maps,
    with_refreshes,
)

#: What the store's contents are written in; raised whenever a stored format changes, so that a
#: release refuses a directory a later release wrote rather than misread it (releases before 2
#: did not check). 2: the alert history names its measure; maps carry their reference scores.
SCHEMA_VERSION = 2
DB_NAME = "monitor.sqlite"
# what to do with a store that cannot be read
_START_OVER = (
    "restore the data directory from a backup, or move it aside to start over (the monitor then "
    "reads every partition from its start; its windows and labels restart)"
)
LOCK_NAME = "monitor.lock"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS sampler_traffic (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL, agg TEXT NOT NULL,
    PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS controls (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL,
    g REAL NOT NULL, kappa REAL NOT NULL, mean_qstar REAL,
    PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS control_maps (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL,
    calibration TEXT NOT NULL, PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS control_refreshes (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL,
    refreshes TEXT NOT NULL, PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS control_refresh_times (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL,
    times TEXT NOT NULL, PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS segments (
    model TEXT NOT NULL, segment TEXT NOT NULL, PRIMARY KEY (model, segment));
CREATE TABLE IF NOT EXISTS segment_traffic (
    model TEXT NOT NULL, segment TEXT NOT NULL, bucket INTEGER NOT NULL, agg TEXT NOT NULL,
    PRIMARY KEY (model, segment, bucket));
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY, model TEXT NOT NULL, bucket INTEGER NOT NULL,
    body TEXT NOT NULL, label INTEGER, labeler TEXT, label_ts REAL);
CREATE TABLE IF NOT EXISTS parked (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    request_id TEXT NOT NULL, parked_at REAL NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (topic, partition, offset));
CREATE TABLE IF NOT EXISTS watermarks (model TEXT PRIMARY KEY, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS feed (
    model TEXT NOT NULL, partition INTEGER NOT NULL, bucket INTEGER NOT NULL, state BLOB NOT NULL,
    PRIMARY KEY (model, partition, bucket));
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# tables renamed since a store was written: (old, new), renamed in place when found
_TABLE_RENAMES = (("ptraffic", "sampler_traffic"), ("straffic", "segment_traffic"))


@dataclass
class LoadedState:
    """Everything read back at start-up."""

    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    sampler_traffic: dict[PartKey, TrafficAggregate] = field(default_factory=dict)
    controls: dict[PartKey, Control] = field(default_factory=dict)
    segments: dict[str, dict[str, int]] = field(default_factory=dict)  # latest bucket each
    segment_traffic: dict[tuple[str, str, int], TrafficAggregate] = field(default_factory=dict)
    requests: list[RequestState] = field(default_factory=list)
    parked: list[ParkedLabel] = field(default_factory=list)
    watermarks: dict[str, float] = field(default_factory=dict)
    feed: list[BucketState] = field(default_factory=list)


def _pin_mismatch(data_dir: Path, key: str, stored: str, value: str, hint: str) -> str:
    return (
        f"data directory {data_dir} was written with {key} {stored}, the configuration says "
        f"{value}: {hint}"
    )


def _file_in_the_way(data_dir: Path) -> Path | None:
    """``data_dir``, or the first of its parents, that exists and is not a directory."""
    for path in (*reversed(data_dir.absolute().parents), data_dir.absolute()):
        try:
            if not path.is_dir():
                return path if path.exists() else None
        except OSError:  # a parent this user may not search: nothing to say of what is in it
            return None
    return None


def data_dir_problem(data_dir: Path, key: str = "storage.data_dir") -> str | None:
    """Why ``Store`` could not keep its state in ``data_dir``, read without writing; or None.

    For ``monitor check-config`` (``key``: the setting that named it): a file where the
    directory, or one of its parents, should be; or a directory that exists and that this user
    cannot write (permissions, an immutable directory, a read-only file system). A directory not
    there yet is made by ``monitor run``.
    """
    data_dir = Path(data_dir)
    blocker = _file_in_the_way(data_dir)
    if blocker == data_dir.absolute():
        return (
            f"{key}: {data_dir} is a file, not a directory: the state store needs a directory; "
            f"point {key} at one (it is created if missing), or move the file away"
        )
    if blocker is not None:
        return (
            f"{key}: {data_dir} cannot be created: {blocker} is a file, not a directory; point "
            f"{key} at a directory path, or move the file away"
        )
    if data_dir.is_dir() and not os.access(data_dir, os.W_OK | os.X_OK):
        return (
            f"{key}: the data directory {data_dir} cannot be written (its permissions, an "
            "immutable directory or a read-only file system): make it writable by the user "
            f"that runs monitor run, or point {key} at another directory"
        )
    return None


def pin_mismatches(data_dir: Path, pins: Sequence[tuple[str, str, str]]) -> list[str]:
    """What ``Store.pin`` would refuse of ``pins`` ``(key, value, hint)``, read without a lock.

    For ``monitor check-config``: the store is opened read-only (a running daemon keeps its
    lock and its transactions); none when ``data_dir`` holds no store yet. Raises
    ``StoreError`` when it cannot be read.
    """
    path = Path(data_dir) / DB_NAME
    if not path.exists():
        return []
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            stored = dict(db.execute("SELECT key, value FROM meta").fetchall())
        finally:
            db.close()
    except sqlite3.Error as exc:
        msg = f"the state store {path} cannot be read: {exc}"
        raise StoreError(msg) from exc
    return [
        _pin_mismatch(Path(data_dir), key, str(stored[key]), value, hint)
        for key, value, hint in pins
        if key in stored and str(stored[key]) != value
    ]


class Store:
    """The SQLite state of one daemon; ``commit`` is one transaction per poll."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._lock: IO[bytes] | None = None
        # test hook (``monitor.runtime.failpoint``): called inside the transaction, before COMMIT
        self.before_commit: Callable[[], None] | None = None
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._lock = (self.data_dir / LOCK_NAME).open("ab")
        except OSError as exc:
            blocker = _file_in_the_way(self.data_dir)
            if blocker == self.data_dir.absolute():
                msg = (
                    f"data directory {self.data_dir} is a file, not a directory: point "
                    "storage.data_dir (or --data-dir) at a directory, or move the file away"
                )
            elif blocker is not None:
                msg = (
                    f"data directory {self.data_dir} is not writable: {blocker} is a file, not "
                    "a directory"
                )
            else:
                msg = f"data directory {self.data_dir} is not writable: {exc.strerror or exc}"
            raise StoreError(msg) from exc
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            self._lock = None
            msg = f"data directory {self.data_dir} is in use by another monitor process"
            raise StoreError(msg) from exc
        if not os.access(self.data_dir, os.W_OK):
            self.close()
            msg = f"data directory {self.data_dir} is not writable"
            raise StoreError(msg)
        try:
            self._db = sqlite3.connect(self.data_dir / DB_NAME, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a process crash loses nothing; a power loss may lose the
            # last transactions, which is safe here because the consumer resumes from the
            # offsets stored in this same database and replays (decisions are deterministic)
            self._db.execute("PRAGMA synchronous=NORMAL")
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
            written = self._check_schema() if "meta" in tables else None
            for old, new in _TABLE_RENAMES:
                if old in tables and new not in tables:
                    self._db.execute(f"ALTER TABLE {old} RENAME TO {new}")
            self._db.executescript(_SCHEMA)
            if written != SCHEMA_VERSION:  # nothing written otherwise: a full volume opens
                self._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            rows = self._db.execute("SELECT topic, partition, next_offset FROM offsets")
            self._offsets = {(t, int(p)): int(o) for t, p, o in rows}
        except sqlite3.Error as exc:
            self.close()
            msg = f"cannot open the state store in {self.data_dir}: {exc}"
            if type(exc) is sqlite3.DatabaseError:  # the file's content, not its access
                msg += f"; {DB_NAME} is damaged: {_START_OVER}"
            raise StoreError(msg) from exc
        except StoreError:
            self.close()
            raise

    def _check_schema(self) -> int:
        """The store's schema version; ``StoreError`` when a later release wrote it."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        written = str(row[0]) if row is not None else "1"
        if written.isdigit() and int(written) <= SCHEMA_VERSION:
            return int(written)
        msg = (
            f"the state store in {self.data_dir} was written by a later release (store schema "
            f"{written}; this release reads {SCHEMA_VERSION} and earlier): run that release, or "
            "restore the copy of the data directory taken before the upgrade (README, Deploying)"
        )
        raise StoreError(msg)

    def pin(self, key: str, value: str, hint: str) -> None:
        """Record a setting the stored state depends on, or check it against the recorded one.

        Raises:
            StoreError: The directory was written under another ``value`` of ``key``; ``hint``
                says what that would do and how to proceed.
        """
        try:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from exc
        if row[0] != value:
            raise StoreError(_pin_mismatch(self.data_dir, key, str(row[0]), value, hint))

    def close(self) -> None:
        """Close the database and release the directory lock."""
        db: sqlite3.Connection | None = getattr(self, "_db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            del self._db
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    # ------------------------------------------------------------------- read
    def offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to consume per (topic, partition), as last committed.

        Served from memory: safe to call from the consumer's rebalance thread.
        """
        return dict(self._offsets)

    def load(self) -> LoadedState:
        """Read the whole state back; ``StoreError`` naming the fix when a row is unreadable."""
        try:
            return self._load()
        except (ValueError, TypeError, KeyError, OverflowError, sqlite3.Error) as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: BaseException) -> StoreError:
        msg = (
            f"the state store {self.data_dir / DB_NAME} holds a record that cannot be read "
            f"({type(exc).__name__}: {str(exc)[:200]}); {_START_OVER}"
        )
        return StoreError(msg)

    def _load(self) -> LoadedState:
        st = LoadedState(offsets=self.offsets())
        db = self._db
        for m, p, b, agg in db.execute("SELECT model, partition, bucket, agg FROM sampler_traffic"):
            st.sampler_traffic[(m, int(p), int(b))] = TrafficAggregate.from_list(json.loads(agg))
        maps = {
            (m, int(p), int(b)): json.loads(c)
            for m, p, b, c in db.execute("SELECT * FROM control_maps")
        }
        for m, p, b, g, k, mq in db.execute("SELECT * FROM controls"):
            key = (m, int(p), int(b))
            ctl = Control(float(g), float(k), math.nan if mq is None else float(mq))
            st.controls[key] = ctl if key not in maps else with_maps(ctl, maps[key])
        times = {
            (m, int(p), int(b)): json.loads(t)
            for m, p, b, t in db.execute("SELECT * FROM control_refresh_times")
        }
        for m, p, b, r in db.execute("SELECT * FROM control_refreshes"):
            key = (m, int(p), int(b))
            if key in st.controls:
                st.controls[key] = with_refreshes(st.controls[key], json.loads(r), times.get(key))
        for m, s, b, agg in db.execute("SELECT model, segment, bucket, agg FROM segment_traffic"):
            st.segment_traffic[(m, s, int(b))] = TrafficAggregate.from_list(json.loads(agg))
        latest: dict[tuple[str, str], int] = {}
        for m, s, b in st.segment_traffic:
            latest[(m, s)] = max(b, latest.get((m, s), b))
        for m, s in db.execute("SELECT model, segment FROM segments"):
            # a segment without traffic held is behind any retention horizon (bucket -1)
            st.segments.setdefault(m, {})[s] = latest.get((m, s), -1)
        for body, label, labeler, label_ts in db.execute(
            "SELECT body, label, labeler, label_ts FROM requests ORDER BY rowid"
        ):
            req = AuditRequest.from_json(body.encode("utf-8"))
            st.requests.append(RequestState(req, label, labeler, label_ts))
        for rid, at, body in db.execute(
            "SELECT request_id, parked_at, body FROM parked ORDER BY parked_at, rowid"
        ):
            st.parked.append(ParkedLabel(rid, LabelResult.from_json(body), float(at)))
        for m, ts in db.execute("SELECT model, ts FROM watermarks"):
            st.watermarks[m] = float(ts)
        for m, p, b, state in db.execute("SELECT model, partition, bucket, state FROM feed"):
            _, bucket_state = aggregates.decode(aggregates.encode_key((m, int(p), int(b))), state)
            if bucket_state is not None:
                st.feed.append(bucket_state)
        return st

    def get_json(self, key: str) -> Any:
        """A JSON document saved with ``put_json`` (None when absent)."""
        try:
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
            return None if row is None else json.loads(row[0])
        except (ValueError, TypeError, sqlite3.Error) as exc:
            raise self._unreadable(exc) from exc

    # ------------------------------------------------------------------ write
    def put_json(self, key: str, value: Any) -> None:
        """Save a small JSON document (e.g. alert state) in its own transaction."""
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, json.dumps(value, sort_keys=True))
            )
        except sqlite3.Error as exc:
            msg = f"cannot write the state store in {self.data_dir}: {exc}"
            raise StoreError(msg) from exc

    def commit(
        self,
        sampler: SamplerChanges,
        estimator: EstimatorChanges,
        offsets: Mapping[tuple[str, int], int],
        feed: FeedChanges | None = None,
        documents: Mapping[str, Any] | None = None,
    ) -> None:
        """Write every change and the next offsets in one transaction (all or nothing).

        ``documents``: JSON documents (as ``put_json`` saves them) written in the same
        transaction.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            self._write(db, sampler, estimator, offsets)
            db.executemany(
                "INSERT OR REPLACE INTO kv VALUES (?, ?)",
                [(k, json.dumps(v, sort_keys=True)) for k, v in (documents or {}).items()],
            )
            if feed is not None:
                db.executemany(
                    "INSERT OR REPLACE INTO feed VALUES (?, ?, ?, ?)",
                    [(*k, aggregates.encode(s)) for k, s in feed.upserts.items()],
                )
                db.executemany(
                    "DELETE FROM feed WHERE model=? AND partition=? AND bucket=?",
                    sorted(feed.deletes),
                )
            if self.before_commit is not None:
                self.before_commit()
            db.execute("COMMIT")
            self._offsets = {**self._offsets, **offsets}
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            msg = f"cannot write the state store in {self.data_dir}: {exc}"
            raise StoreError(msg) from exc

    @staticmethod
    def _write(
        db: sqlite3.Connection,
        sampler: SamplerChanges,
        estimator: EstimatorChanges,
        offsets: Mapping[tuple[str, int], int],
    ) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO sampler_traffic VALUES (?, ?, ?, ?)",
            [(m, p, b, json.dumps(a.to_list())) for (m, p, b), a in sampler.traffic.items()],
        )
        db.executemany(
            "INSERT OR REPLACE INTO controls VALUES (?, ?, ?, ?, ?, ?)",
            [
                (m, p, b, c.g, c.kappa, None if math.isnan(c.mean_qstar) else c.mean_qstar)
                for (m, p, b), c in sampler.controls.items()
            ],
        )
        db.executemany(
            "INSERT OR REPLACE INTO control_maps VALUES (?, ?, ?, ?)",
            [
                (m, p, b, json.dumps(maps))
                for (m, p, b), c in sampler.controls.items()
                if (maps := maps_to_list(c)) is not None
            ],
        )
        refreshed = [(k, c) for k, c in sampler.controls.items() if c.refreshes]
        db.executemany(
            "INSERT OR REPLACE INTO control_refreshes VALUES (?, ?, ?, ?)",
            [(m, p, b, json.dumps(refreshes_to_list(c))) for (m, p, b), c in refreshed],
        )
        db.executemany(  # beside the refreshes: an earlier release reads those without them
            "INSERT OR REPLACE INTO control_refresh_times VALUES (?, ?, ?, ?)",
            [(m, p, b, json.dumps(refresh_times(c))) for (m, p, b), c in refreshed],
        )
        db.executemany("DELETE FROM segments WHERE model=? AND segment=?", sorted(sampler.dropped))
        db.executemany("INSERT OR IGNORE INTO segments VALUES (?, ?)", sorted(sampler.segments))
        for (m, p), horizon in sampler.prune.items():
            args = (m, p, horizon)
            db.execute(
                "DELETE FROM sampler_traffic WHERE model=? AND partition=? AND bucket<?", args
            )
            db.execute("DELETE FROM controls WHERE model=? AND partition=? AND bucket<?", args)
            db.execute("DELETE FROM control_maps WHERE model=? AND partition=? AND bucket<?", args)
            db.execute(
                "DELETE FROM control_refreshes WHERE model=? AND partition=? AND bucket<?", args
            )
            db.execute(
                "DELETE FROM control_refresh_times WHERE model=? AND partition=? AND bucket<?", args
            )
        db.executemany(
            "INSERT OR REPLACE INTO segment_traffic VALUES (?, ?, ?, ?)",
            [(m, s, b, json.dumps(a.to_list())) for (m, s, b), a in estimator.traffic.items()],
        )
        rows: list[tuple[Any, ...]] = []
        for rid, s in estimator.requests.items():
            body = s.request.to_json().decode("utf-8")
            rows.append((rid, s.request.model, s.request.bucket, body))
        db.executemany("INSERT OR IGNORE INTO requests VALUES (?, ?, ?, ?, NULL, NULL, NULL)", rows)
        db.executemany(
            "UPDATE requests SET label=?, labeler=?, label_ts=? WHERE request_id=?",
            [
                (s.label, s.labeler, s.label_ts, rid)
                for rid, s in estimator.requests.items()
                if s.label is not None
            ],
        )
        db.executemany(
            "INSERT OR REPLACE INTO parked VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    i.label.source.topic,
                    i.label.source.partition,
                    i.label.source.offset,
                    i.request_id,
                    i.parked_at,
                    i.label.to_json().decode("utf-8"),
                )
                for i in estimator.parked_added
            ],
        )
        db.executemany(
            "DELETE FROM parked WHERE topic=? AND partition=? AND offset=?",
            [
                (i.label.source.topic, i.label.source.partition, i.label.source.offset)
                for i in estimator.parked_removed
            ],
        )
        db.executemany(
            "INSERT OR REPLACE INTO watermarks VALUES (?, ?)", list(estimator.watermarks.items())
        )
        for m, horizon in estimator.prune.items():
            db.execute("DELETE FROM segment_traffic WHERE model=? AND bucket<?", (m, horizon))
        db.executemany(
            "DELETE FROM requests WHERE request_id=?", [(r,) for r in estimator.requests_removed]
        )
        db.executemany(
            "INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)",
            [(t, p, o) for (t, p), o in offsets.items()],
        )
