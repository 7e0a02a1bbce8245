"""The bridge's durable memory: which request became which task, and what was published.

One SQLite file (WAL, synchronous=FULL) with three tables:

``tasks``: one row per request id ever seen: model, project and task id, token, pi, event
time ``ts`` and ``deadline``, when the task was created (wall clock), its ``status`` (open,
answered, expired, deleted) and the label last published for it (NULL: none yet; an open task
may have one, when its answer was deleted in Label Studio after the label was published).

``annotations``: one row per Label Studio annotation read: its request, kind (``answer`` or
``declined``) and label, so each annotation is counted once across restarts.

``marks``: per task, what the last poll that read its annotations saw of it (``updated_at`` and
the answer counts), so a restart reads back only the tasks that changed since.

A request id present here is never imported again (a replayed request or a restart after the
offsets were reset); the start-up reconciliation also adds tasks that Label Studio has but this
file lacks (a crash between the import and the write).

A failed read or write (a full volume: "database or disk is full") raises ``StoreError`` naming
the file; each write is one statement or one transaction, so a failed one changed nothing.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from monitor.errors import StoreError

OPEN, ANSWERED, EXPIRED, DELETED = "open", "answered", "expired", "deleted"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    request_id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    project_id INTEGER NOT NULL,
    task_id INTEGER NOT NULL,
    token TEXT,
    pi REAL,
    ts REAL NOT NULL,
    deadline REAL NOT NULL,
    created_wall REAL NOT NULL,
    status TEXT NOT NULL,
    published INTEGER
);
CREATE INDEX IF NOT EXISTS tasks_by_task ON tasks (task_id);
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (status);
CREATE TABLE IF NOT EXISTS annotations (
    annotation_id INTEGER PRIMARY KEY,
    request_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    label INTEGER
);
CREATE TABLE IF NOT EXISTS marks (
    task_id INTEGER PRIMARY KEY,
    mark TEXT NOT NULL
);
"""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _stored(
    method: Callable[Concatenate[BridgeState, _P], _R],
) -> Callable[Concatenate[BridgeState, _P], _R]:
    """``sqlite3.Error`` from ``method`` as ``StoreError`` naming the state file."""

    def call(state: BridgeState, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(state, *args, **kwargs)
        except sqlite3.Error as exc:
            msg = f"{state.path}: the bridge's state file failed: {exc}"
            raise StoreError(msg) from exc

    call.__doc__ = method.__doc__
    return call


@dataclass(frozen=True)
class TaskRow:
    """One request and its task."""

    request_id: str
    model: str
    project_id: int
    task_id: int
    token: str | None
    pi: float | None
    ts: float
    deadline: float
    created_wall: float
    status: str
    published: int | None


class BridgeState:
    """The SQLite file; every method commits before it returns."""

    def __init__(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self.instance = self._instance()
        except (OSError, sqlite3.Error) as exc:
            msg = f"{path}: cannot open the bridge's state file: {exc}"
            if type(exc) is sqlite3.DatabaseError:  # the file's content, not its access
                msg += (
                    "; the file is damaged: restore it from a backup, or move it aside (the"
                    " bridge rebuilds it from the tasks in Label Studio and publishes the"
                    " answered ones again, which the daemon counts as duplicate labels)"
                )
            raise StoreError(msg) from exc
        self.path = path

    def _instance(self) -> str | None:
        """This bridge's id, made once per state file (its tasks carry it: ``meta.bridge``).

        A task of the bridge's project with another id was imported by another bridge (one
        with its own state file on the same project). Its table is made with the id, not with
        the schema: a state file of an earlier release on a full volume opens without a write
        and the bridge comes up not ready as before, with no id for this run (None: its tasks
        carry none and no other bridge is looked for), where the schema's new table stopped
        it with "database or disk is full".
        """
        known = self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'bridge'").fetchone()
        if known is not None:
            found = self._db.execute("SELECT instance FROM bridge").fetchone()
            if found is not None:
                return str(found[0])
        made = uuid.uuid4().hex[:16]
        try:  # an empty table (the insert failed) is filled at the next start
            self._db.execute("CREATE TABLE IF NOT EXISTS bridge (instance TEXT NOT NULL)")
            self._db.execute("INSERT INTO bridge VALUES (?)", (made,))
        except sqlite3.OperationalError:  # a full volume; the next start makes it
            return None
        return made

    def close(self) -> None:
        """Close the file."""
        self._db.close()

    @_stored
    def add_tasks(self, rows: list[TaskRow]) -> None:
        """Record new tasks (a request id already present is left as it is)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR IGNORE INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        r.request_id,
                        r.model,
                        r.project_id,
                        r.task_id,
                        r.token,
                        r.pi,
                        r.ts,
                        r.deadline,
                        r.created_wall,
                        r.status,
                        r.published,
                    )
                    for r in rows
                ],
            )

    @_stored
    def known(self, request_ids: list[str]) -> set[str]:
        """Which of ``request_ids`` already have a task (or had one)."""
        out: set[str] = set()
        for start in range(0, len(request_ids), 500):
            chunk = request_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            cur = self._db.execute(
                f"SELECT request_id FROM tasks WHERE request_id IN ({marks})",
                chunk,
            )
            out.update(r[0] for r in cur)
        return out

    @_stored
    def by_task(self, task_id: int) -> list[TaskRow]:
        """The requests recorded with a task id.

        More than one after Label Studio started afresh and numbered its tasks from 1 again;
        the task's ``meta`` tells which is its.
        """
        cur = self._db.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,))
        return [TaskRow(*row) for row in cur.fetchall()]

    @_stored
    def by_request(self, request_id: str) -> TaskRow | None:
        """The task of a request id."""
        cur = self._db.execute("SELECT * FROM tasks WHERE request_id = ?", (request_id,))
        row = cur.fetchone()
        return None if row is None else TaskRow(*row)

    @_stored
    def with_status(self, *statuses: str) -> list[TaskRow]:
        """Every task in one of ``statuses``."""
        marks = ",".join("?" * len(statuses))
        cur = self._db.execute(
            f"SELECT * FROM tasks WHERE status IN ({marks}) ORDER BY task_id",
            statuses,
        )
        return [TaskRow(*row) for row in cur.fetchall()]

    @_stored
    def set_status(self, request_id: str, status: str) -> None:
        """Mark a task expired or deleted, or open again (its answer deleted)."""
        self._db.execute("UPDATE tasks SET status = ? WHERE request_id = ?", (status, request_id))

    @_stored
    def set_task(self, request_id: str, task_id: int) -> None:
        """The request's task is now ``task_id`` (a second task of it held the answer)."""
        self._db.execute("UPDATE tasks SET task_id = ? WHERE request_id = ?", (task_id, request_id))

    @_stored
    def set_published(self, request_id: str, label: int) -> None:
        """The label now published for the request (the task is answered)."""
        self._db.execute(
            "UPDATE tasks SET status = ?, published = ? WHERE request_id = ?",
            (ANSWERED, label, request_id),
        )

    @_stored
    def annotation_seen(self, annotation_id: int, request_id: str) -> tuple[str, int | None] | None:
        """(kind, label) of an annotation of ``request_id`` already read, or None.

        Annotation ids start from 1 again in a Label Studio started afresh.
        """
        cur = self._db.execute(
            "SELECT kind, label FROM annotations WHERE annotation_id = ? AND request_id = ?",
            (annotation_id, request_id),
        )
        row = cur.fetchone()
        return None if row is None else (str(row[0]), row[1])

    @_stored
    def record_annotation(
        self, annotation_id: int, request_id: str, kind: str, label: int | None
    ) -> None:
        """Remember an annotation (or its new kind/label after an edit)."""
        self._db.execute(
            "INSERT OR REPLACE INTO annotations VALUES (?,?,?,?)",
            (annotation_id, request_id, kind, label),
        )

    @_stored
    def marks(self) -> dict[int, str]:
        """Per task id, the mark ``set_mark`` saved last."""
        return {int(t): str(m) for t, m in self._db.execute("SELECT task_id, mark FROM marks")}

    @_stored
    def set_mark(self, task_id: int, mark: str) -> None:
        """What a poll saw of a task whose annotations it has read (``marks``)."""
        self._db.execute("INSERT OR REPLACE INTO marks VALUES (?, ?)", (task_id, mark))

    @_stored
    def watermarks(self) -> dict[str, float]:
        """Per model, the newest event time of any request seen (the bridge's watermark)."""
        cur = self._db.execute("SELECT model, MAX(ts) FROM tasks GROUP BY model")
        return {str(m): float(t) for m, t in cur}

    @_stored
    def depth(self) -> dict[str, int]:
        """Per model, the open tasks (the queue depth)."""
        cur = self._db.execute(
            "SELECT model, COUNT(*) FROM tasks WHERE status = ? GROUP BY model", (OPEN,)
        )
        return {str(m): int(n) for m, n in cur}
