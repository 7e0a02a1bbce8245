"""A simulated audit team: answers the daemon's label requests from a ground-truth file.

``monitor auditors --truth FILE --bootstrap-servers HOST:PORT`` consumes the request topic
(schema in CONTRACTS "Stream design": ``request_id``, ``id``, ``model`` ...), looks the record id
up in the truth file and, after ``--delay-s`` seconds of wall time, produces a label result

    key = request_id (UTF-8), value = {"request_id", "label", "labeler", "ts"[, "token"]}

to the label topic (``ts`` = wall-clock seconds when the answer was sent; ``token`` echoes the
request's token when it carries one, as an audit tool must when labels are authenticated).
Real audit queues are imperfect, so a fraction of requests is never answered (``--drop-rate``)
and a fraction of answers is wrong (``--error-rate``: the true label flipped). Auditors skip
some kinds of items more than others: ``--drop-rate-by-pred D0,D1`` drops requests of
predicted negatives at D0 and of predicted positives at D1 instead (the request's ``pred``).
Both are decided per request, not at random: with
u(purpose) = int(blake2b(f"{seed}|{purpose}|{request_id}")[:8]) / 2^64,

    dropped iff u("drop") < drop rate of its stratum,   flipped iff u("error") < error_rate,

so a rerun with the same seed answers exactly the same requests the same way (the daemon's own
decisions are hash-based for the same reason, DESIGN "Deterministic decisions"). A request id
seen twice (a replayed request) is answered once. Requests whose record id is not in the truth
file are skipped and counted, as are requests that are not valid JSON objects with an ``id``.

Truth file formats (chosen by content): CSV with columns ``id,label`` (a header line is
optional) or JSON lines ``{"id": "...", "label": 0|1}``; blank lines and lines starting with
``#`` are ignored. A bad line stops start-up with the file name and line number.

Answers still waiting for their delay when the team stops are abandoned (counted), like work
left in an inbox: with a consumer group the request offsets are already committed, so they are
not answered after a restart either.

``SimulatedAuditTeam`` is the same thing as a library (a background thread with a stop event)
for the demo and tests.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import heapq
import io
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from monitor.errors import InputFileError, MonitorError
from monitor.logs import LOG_LEVELS, log_level, setup_logging

log = logging.getLogger(__name__)

_DEFAULT_GROUP = "simulated-audit-team"


# ---------------------------------------------------------------------------------------------
# ground truth


def load_truth(path: Path) -> dict[str, int]:
    """Read ``id -> label`` from a CSV (``id,label``) or JSON-lines file.

    Raises:
        InputFileError: unreadable file, or a line without a string id and a 0/1 label.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{path}: cannot read the truth file: {exc}"
        raise InputFileError(msg) from exc
    lines = [
        (n, line.strip())
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    truth: dict[str, int] = {}
    is_json = bool(lines) and lines[0][1].startswith("{")
    for n, line in lines:
        if is_json:
            rid, label = _json_row(path, n, line)
        else:
            row = next(csv.reader(io.StringIO(line)))
            if n == lines[0][0] and [c.strip().lower() for c in row[:2]] == ["id", "label"]:
                continue  # header
            rid, label = _csv_row(path, n, row)
        truth[rid] = label
    return truth


def _json_row(path: Path, n: int, line: str) -> tuple[str, int]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        msg = f"{path}:{n}: not valid JSON: {exc.msg}"
        raise InputFileError(msg) from exc
    if not isinstance(obj, dict):
        msg = f"{path}:{n}: expected a JSON object with 'id' and 'label'"
        raise InputFileError(msg)
    return _check_row(path, n, obj.get("id"), obj.get("label"))


def _csv_row(path: Path, n: int, row: list[str]) -> tuple[str, int]:
    if len(row) != 2:
        msg = f"{path}:{n}: expected 2 columns 'id,label', got {len(row)}"
        raise InputFileError(msg)
    raw = row[1].strip()
    label: object = int(raw) if raw in {"0", "1"} else raw
    return _check_row(path, n, row[0].strip(), label)


def _check_row(path: Path, n: int, rid: object, label: object) -> tuple[str, int]:
    if not isinstance(rid, str) or not rid:
        msg = f"{path}:{n}: 'id' must be a non-empty string, got {rid!r}"
        raise InputFileError(msg)
    if isinstance(label, bool) or label not in (0, 1):
        msg = f"{path}:{n}: 'label' must be 0 or 1, got {label!r}"
        raise InputFileError(msg)
    return rid, int(label)


def write_truth(path: Path, rows: Iterable[tuple[str, int]]) -> int:
    """Write ``(id, label)`` rows as a CSV truth file with a header; returns the row count."""
    count = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "label"])
        for rid, label in rows:
            writer.writerow([rid, label])
            count += 1
    return count


# ---------------------------------------------------------------------------------------------
# deterministic behaviour of the team


def request_uniform(seed: int, purpose: str, request_id: str) -> float:
    """Uniform in [0, 1): int(blake2b(f"{seed}|{purpose}|{request_id}", 8 bytes)) / 2^64."""
    digest = hashlib.blake2b(f"{seed}|{purpose}|{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass(frozen=True)
class AuditPolicy:
    """How the simulated team behaves: answer delay, drop and error rates, seed."""

    delay_s: float = 1.0
    drop_rate: float = 0.0
    error_rate: float = 0.0
    seed: int = 0
    labeler: str = "simulated-auditor"
    # drop rates of predicted negatives' and positives' requests (None: drop_rate for all)
    drop_rate_by_pred: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        rates = [("drop_rate", self.drop_rate), ("error_rate", self.error_rate)]
        if self.drop_rate_by_pred is not None:
            rates += [(f"drop_rate_by_pred[{i}]", r) for i, r in enumerate(self.drop_rate_by_pred)]
        problems = [
            f"{name} must be in [0, 1], got {value}"
            for name, value in rates
            if not 0.0 <= value <= 1.0
        ]
        if self.delay_s < 0:
            problems.append(f"delay_s must be >= 0, got {self.delay_s}")
        if problems:
            msg = "; ".join(problems)
            raise ValueError(msg)

    def drops(self, request_id: str, pred: int | None = None) -> bool:
        """The request is never answered: u("drop") < the drop rate of its stratum."""
        rate = self.drop_rate
        if self.drop_rate_by_pred is not None and pred in (0, 1):
            rate = self.drop_rate_by_pred[int(pred or 0)]
        return request_uniform(self.seed, "drop", request_id) < rate

    def errs(self, request_id: str) -> bool:
        """The answer is the flipped truth: u("error") < error_rate."""
        return request_uniform(self.seed, "error", request_id) < self.error_rate

    def answer(self, request_id: str, true_label: int, pred: int | None = None) -> int | None:
        """The label the team gives, or None when it drops the request."""
        if self.drops(request_id, pred):
            return None
        return 1 - true_label if self.errs(request_id) else true_label


@dataclass
class AuditStats:
    """Counters of what the team did (a copy is returned by ``SimulatedAuditTeam.stats``)."""

    requests: int = 0  # distinct requests read
    answered: int = 0  # labels produced
    flipped: int = 0  # of which wrong on purpose
    dropped: int = 0  # never to be answered
    waiting: int = 0  # answers held back by the delay right now
    unknown_id: int = 0  # record id not in the truth file
    repeated: int = 0  # request id seen before (replayed request)
    malformed: int = 0  # not a JSON object with string 'request_id' and 'id'
    abandoned: int = 0  # still waiting when the team stopped


# ---------------------------------------------------------------------------------------------
# the team as a Kafka client


class SimulatedAuditTeam:
    """Answers label requests from Kafka with labels from the truth, in a background thread.

    Without ``group_id`` the team reads every partition of the request topic from the beginning
    (manual assignment: no group join, starts at once). With a ``group_id`` it joins that
    consumer group and commits what it has read after each poll.
    """

    def __init__(
        self,
        truth: Mapping[str, int],
        bootstrap_servers: str,
        requests_topic: str = "audit-requests",
        labels_topic: str = "audit-labels",
        *,
        policy: AuditPolicy | None = None,
        group_id: str | None = None,
        consumer_config: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.truth = truth
        self.bootstrap_servers = bootstrap_servers
        self.requests_topic = requests_topic
        self.labels_topic = labels_topic
        self.policy = policy or AuditPolicy()
        self.group_id = group_id
        self.consumer_config = dict(consumer_config or {})
        self._clock = clock
        self._stats = AuditStats()
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        # (due, seq, request_id, label, token)
        self._waiting: list[tuple[float, int, str, int, str | None]] = []
        self._seq = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, ready_timeout_s: float = 30.0) -> SimulatedAuditTeam:
        """Run in a background thread; returns once connected (or raises MonitorError)."""
        self._thread = threading.Thread(target=self._thread_main, name="audit-team", daemon=True)
        self._thread.start()
        if not self._ready.wait(ready_timeout_s) or self.error is not None:
            self.stop()
            msg = f"the audit team could not connect to {self.bootstrap_servers}: {self.error}"
            raise MonitorError(msg)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the thread to finish and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> SimulatedAuditTeam:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def stats(self) -> AuditStats:
        """A consistent copy of the counters."""
        with self._lock:
            return AuditStats(**asdict(self._stats))

    @property
    def alive(self) -> bool:
        """True while the background thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _thread_main(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as exc:  # reported through .error and the log
            self.error = exc
            log.exception("audit team failed", extra={"event": "auditors_failed"})
        finally:
            self._ready.set()

    # -- the loop -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume requests and produce answers until ``stop`` is set (blocking)."""
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: PLC0415
        from kafka.errors import KafkaError  # noqa: PLC0415

        config: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "group_id": self.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "client_id": "simulated-audit-team",
        }
        config.update(self.consumer_config)
        consumer = KafkaConsumer(**config)
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap_servers,
            linger_ms=5,
            client_id="simulated-audit-team",
            max_block_ms=5000,  # a send in an outage waits 5 s, not 60: a stop is served
        )
        try:
            if self.group_id is None:
                parts = _wait_partitions(consumer, self.requests_topic, stop)
                consumer.assign([TopicPartition(self.requests_topic, p) for p in parts])
            else:
                consumer.subscribe([self.requests_topic])
            self._ready.set()
            outage = False  # the broker stopped answering: answers wait in the producer
            while not stop.is_set():
                polled = consumer.poll(timeout_ms=100, max_records=500)
                for messages in polled.values():
                    for message in messages:
                        self._take(message.value)
                try:
                    if self._release(producer) or polled or outage:
                        producer.flush(10)
                    if polled and self.group_id is not None:
                        consumer.commit()
                except KafkaError as exc:  # a broker outage: the team waits, as auditors do
                    if not outage:
                        log.warning(
                            "the broker does not answer: answers wait until it is back",
                            extra={"event": "auditors_waiting", "error": str(exc)},
                        )
                    outage = True
                    continue
                if outage:
                    log.info("the broker answers again", extra={"event": "auditors_resumed"})
                    outage = False
        finally:
            with self._lock:
                self._stats.abandoned += len(self._waiting)
                self._stats.waiting = 0
                self._waiting.clear()
            try:
                producer.close(5)
            except KafkaError as exc:  # answers the broker never took: said, not raised
                log.warning(
                    "answers not delivered at stop",
                    extra={"event": "auditors_undelivered", "error": str(exc)},
                )
            consumer.close()

    def _take(self, value: bytes | None) -> None:
        """Read one request: decide now what and when to answer."""
        try:
            req = json.loads(value or b"")
            request_id, record_id = req["request_id"], req["id"]
            token = req.get("token")
            if not isinstance(request_id, str) or not isinstance(record_id, str):
                raise TypeError(request_id, record_id)
            if token is not None and not isinstance(token, str):
                raise TypeError(token)
        except (ValueError, TypeError, KeyError):
            with self._lock:
                self._stats.malformed += 1
            return
        with self._lock:
            if request_id in self._seen:
                self._stats.repeated += 1
                return
            self._seen.add(request_id)
            self._stats.requests += 1
            if record_id not in self.truth:
                self._stats.unknown_id += 1
                return
            pred = req.get("pred")
            label = self.policy.answer(
                request_id, self.truth[record_id], pred if isinstance(pred, int) else None
            )
            if label is None:
                self._stats.dropped += 1
                return
            if label != self.truth[record_id]:
                self._stats.flipped += 1
            self._seq += 1
            due = self._clock() + self.policy.delay_s
            heapq.heappush(self._waiting, (due, self._seq, request_id, label, token))
            self._stats.waiting = len(self._waiting)

    def _release(self, producer: Any) -> int:
        """Produce every answer whose delay has passed; returns how many."""
        now = self._clock()
        sent = 0
        while True:
            with self._lock:
                if not self._waiting or self._waiting[0][0] > now:
                    self._stats.waiting = len(self._waiting)
                    return sent
                item = heapq.heappop(self._waiting)
            _, _, request_id, label, token = item
            value: dict[str, Any] = {
                "request_id": request_id,
                "label": label,
                "labeler": self.policy.labeler,
                "ts": round(time.time(), 3),
            }
            if token is not None:
                value["token"] = token
            try:
                producer.send(
                    self.labels_topic,
                    key=request_id.encode(),
                    value=json.dumps(value, sort_keys=True, separators=(",", ":")).encode(),
                )
            except Exception:  # not taken (a broker outage): answered later, not lost
                with self._lock:
                    heapq.heappush(self._waiting, item)
                raise
            sent += 1
            with self._lock:
                self._stats.answered += 1


def _wait_partitions(consumer: Any, topic: str, stop: threading.Event) -> list[int]:
    """The partitions of ``topic`` (waits up to 20 s for the topic's metadata)."""
    deadline = time.monotonic() + 20.0
    while not stop.is_set():
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    msg = f"topic {topic!r} does not exist (create it first)"
    raise MonitorError(msg)


# ---------------------------------------------------------------------------------------------
# command line


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``monitor auditors``."""
    p = sub.add_parser(
        "auditors",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="simulated audit team: answer label requests from a ground-truth file",
        description="Consume label requests, answer them from a ground-truth file after a "
        "delay; a seeded share is never answered, another answered wrongly.",
        epilog="Truth file: CSV 'id,label' (header optional) or JSON lines "
        '{"id": "...", "label": 0|1}. Answers: key request_id, value '
        '{"request_id", "label", "labeler", "ts"}.',
    )
    p.add_argument("--truth", type=Path, required=True, help="CSV 'id,label' or JSON lines")
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    p.add_argument("--requests-topic", default="audit-requests")
    p.add_argument("--labels-topic", default="audit-labels")
    p.add_argument("--delay-s", type=float, default=1.0, help="seconds before answering")
    p.add_argument("--drop-rate", type=float, default=0.0, help="share never answered")
    p.add_argument(
        "--drop-rate-by-pred",
        default=None,
        metavar="D0,D1",
        help="share never answered of predicted negatives' and positives' requests "
        "(instead of --drop-rate)",
    )
    p.add_argument("--error-rate", type=float, default=0.0, help="share answered wrongly")
    p.add_argument("--seed", type=int, default=0, help="seed of the drop/error decisions")
    p.add_argument("--labeler", default="simulated-auditor", help="'labeler' field of answers")
    p.add_argument(
        "--group-id",
        default=_DEFAULT_GROUP,
        help=f"consumer group (default {_DEFAULT_GROUP}); '' reads all partitions without one",
    )
    p.add_argument("--stats-every-s", type=float, default=10.0, help="log counters this often")
    p.add_argument("--log-level", default="INFO", type=log_level, help=", ".join(LOG_LEVELS))
    p.set_defaults(func=run_auditors)


def run_auditors(args: argparse.Namespace) -> int:
    """Handler of ``monitor auditors``: runs until SIGTERM or Ctrl-C, then exits 0."""
    try:
        by_pred = None
        if args.drop_rate_by_pred:
            d0, d1 = (float(x) for x in str(args.drop_rate_by_pred).split(","))
            by_pred = (d0, d1)
        policy = AuditPolicy(
            args.delay_s, args.drop_rate, args.error_rate, args.seed, args.labeler, by_pred
        )
    except ValueError as exc:
        msg = f"bad option: {exc}"
        raise InputFileError(msg) from exc
    truth = load_truth(args.truth)
    setup_logging(args.log_level)
    log.info(
        "truth loaded",
        extra={"event": "truth_loaded", "path": str(args.truth), "ids": len(truth)},
    )
    team = SimulatedAuditTeam(
        truth,
        args.bootstrap_servers,
        args.requests_topic,
        args.labels_topic,
        policy=policy,
        group_id=args.group_id or None,
    )
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    team.start(ready_timeout_s=60.0)
    try:
        while not stop.wait(args.stats_every_s):
            if not team.alive:
                break
            log.info("audit team", extra={"event": "auditors_stats", **asdict(team.stats)})
    finally:
        team.stop()
    log.info("audit team stopped", extra={"event": "auditors_stopped", **asdict(team.stats)})
    return 1 if team.error is not None else 0
