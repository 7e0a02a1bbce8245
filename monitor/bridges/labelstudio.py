"""The Label Studio bridge: label requests become tasks, annotations become labels.

One Label Studio project per model (title ``labelstudio.project_title`` with ``{model}``),
created with a two-choice interface when missing (``monitor.bridges.ls_tasks``). The loop:

1. consume the request topic (consumer group ``labelstudio.group_id``); every request whose id
   the state file does not hold becomes one task (``POST /api/projects/{id}/import``); the
   offsets are committed only after the tasks exist and the state file says so. A replayed
   request, or any request after a restart, is found in the state file and not imported again;
   after a failed import the project's tasks are read back first (by ``meta.request_id``), so
   an import whose answer was lost is not repeated either;
2. read annotations: every task id a webhook names at once, and every task of every project
   each ``poll_interval_s`` (the fallback that catches what happened while the bridge was
   down). Each task's answers give a label by the annotators policy (``ls_tasks.decide``),
   published to the label topic as ``{"request_id", "label", "labeler", "ts"[, "token"]}``
   with key ``request_id``; skipped annotations are counted as declined;
3. open tasks whose deadline is behind the bridge's watermark (the newest event time of the
   model's requests) are deleted from Label Studio right after a poll has read their answers
   ("expired"); open tasks missing from Label Studio are marked deleted and counted (expired
   when past their deadline: an expiry whose write failed).

When Label Studio goes away, the loop keeps its unsent requests, pauses consumption and
retries with exponential backoff (1 s doubling to 60 s); nothing is committed meanwhile. A
project that refuses its imports (HTTP 400: a labeling config edited by hand) holds back only
its model's requests, retried with the same backoff, while the others' are read and imported;
each partition is committed up to its first request still held (``_commit``), and past
``_MAX_HELD`` held requests consumption waits. A Kafka outage is retried the same way, at most
``_KAFKA_BACKOFF_MAX_S`` apart, but told apart: an idle consumer's poll never fails, so the loop
asks the broker for end offsets every ``_PROBE_EVERY_S``, and a broker error leaves
``labelstudio_up`` and the Label Studio error counter alone (``kafka_up`` says it instead).
A requests or labels topic the broker lacks is ``topics_not_ready`` (``_note_topics``); the
clients never ask the broker to create one (``monitor.io.kafka_io.new_client``). A state file
that fails (a full volume) is retried the same way (``_store_away``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from monitor.bridges.ls_client import (
    LabelStudioClient,
    LabelStudioError,
    LabelStudioNotFound,
    LabelStudioUnavailable,
)
from monitor.bridges.ls_config import LabelStudioConfig, Wording
from monitor.bridges.ls_http import BridgeMetrics, BridgeServer
from monitor.bridges.ls_state import ANSWERED, DELETED, EXPIRED, OPEN, BridgeState, TaskRow
from monitor.bridges.ls_tasks import (
    FROM_NAME,
    interface_problem,
    label_config,
    project_fields,
    read_answer,
    task_body,
)
from monitor.bridges.ls_tasks import decide as decide_label
from monitor.config.kafka_client import (
    COMMIT_TIMEOUT_S,
    RECONNECT_BACKOFF_MAX_MS,
    kafka_client_options,
)
from monitor.config.schema import Config
from monitor.core.messages import AuditRequest
from monitor.core.records import MAX_TS
from monitor.errors import MonitorError, StoreError, TopicsNotReady
from monitor.io.client_errors import unavailable
from monitor.io.kafka_io import (
    CLIENT_OPTIONS,
    CONNECTION_ERRORS,
    absent_topics,
    new_client,
    unauthorized_topics,
)
from monitor.io.topics import missing_topics, refused_topics
from monitor.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

WEBHOOK_ACTIONS = (
    "ANNOTATION_CREATED",
    "ANNOTATION_UPDATED",
    "ANNOTATIONS_DELETED",
    "TASKS_DELETED",
)
_REQUIRED = {"request_id": str, "id": str, "model": str, "segment": str}
_NUMBERS = ("score", "pi", "ts", "deadline")
_BACKOFF_MAX_S = 60.0
# a broker is retried at most this far apart, as its clients reconnect (with 60 s, the bridge
# could stay unready for a minute after a long outage ended)
_KAFKA_BACKOFF_MAX_S = RECONNECT_BACKOFF_MAX_MS / 1000
# Requests read and not imported (a project refusing its imports): past this many, the loop
# stops reading requests until the project takes them (each is a few hundred bytes in memory).
_MAX_HELD = 10_000
# An idle consumer's poll never fails when the broker goes away: ask it for end offsets this
# often (as the daemon does, ``KafkaSource.probe``), so /readyz says 503 within seconds.
_PROBE_EVERY_S = 2.0
_PROBE_TIMEOUT_MS = 2_000
# A label's send: kafka-python waits 60 s for metadata and retries a record for 120 s by default,
# which stalled the loop past /healthz's limit. The get outlasts the delivery timeout, so a send
# that failed is never delivered later (and then published twice by the retry).
_MAX_BLOCK_MS = 5_000
_DELIVERY_TIMEOUT_MS = 15_000


def _one(_topic: str) -> int:
    """The requests and labels topics' partitions as ``--create-topics`` makes them."""
    return 1


# A deadline is the request's event time plus the model's label deadline (days); a year past the
# daemon's last event time is room enough for any label deadline.
_MAX_DEADLINE = MAX_TS + 366 * 86_400.0


@dataclasses.dataclass(frozen=True)
class Invalid:
    """Why a request record is not one: ``reason`` a short kind (log key), ``detail`` the text."""

    reason: str
    detail: str


def read_request(value: bytes | None) -> dict[str, Any] | Invalid:
    """A request record's JSON, or why it is not a request the monitor could have written.

    The fields a task shows must have their types, and the request must pass the daemon's own
    check (``AuditRequest.from_json``: pi in (0, 1], score in [0, 1], finite times): a value Label
    Studio cannot store (NaN, Infinity) or show would otherwise make it refuse the whole import,
    again at every retry, and stop the bridge. No string, key or value, payload included, may
    hold a NUL or an unpaired surrogate (the daemon refuses them in its ids too): Label Studio
    1.23.2 stores such a task and then answers every listing of its project with HTTP 500. Event
    times are the daemon's (``ts`` before 2100, ``MAX_TS``) and ``deadline`` is not before ``ts``
    and at most a year past that bound: a request dated in year 9999 moved its model's watermark
    there, and every open task of the model was expired at once.
    """
    try:
        req = json.loads(value or b"")
    except (ValueError, RecursionError):
        return Invalid("not_json", "not JSON")
    if not isinstance(req, dict):
        return Invalid("not_object", "not a JSON object")
    bad = _bad_string(req)
    if bad is not None:
        return Invalid("bad_text", f"{bad} holds a NUL character or an unpaired surrogate")
    for name, kind in _REQUIRED.items():
        if not isinstance(req.get(name), kind):
            return Invalid("missing_field", f"field {name!r}: missing or not a string")
    for name in _NUMBERS:
        if isinstance(req.get(name), bool) or not isinstance(req.get(name), int | float):
            return Invalid("missing_field", f"field {name!r}: missing or not a number")
    if req.get("pred") not in (0, 1):
        return Invalid("bad_value", "field 'pred': not 0 or 1")
    if not req["request_id"]:
        return Invalid("bad_value", "field 'request_id': empty")
    if req.get("token") is not None and not isinstance(req["token"], str):
        return Invalid("bad_value", "field 'token': not a string")
    try:
        AuditRequest.from_json(value or b"")
    except (ValueError, OverflowError, RecursionError) as exc:
        return Invalid("bad_value", _clip(str(exc)))
    ts, deadline = float(req["ts"]), float(req["deadline"])
    if not (math.isfinite(ts) and 0.0 <= ts < MAX_TS):
        return Invalid("bad_time", f"field 'ts': {ts!r} is not an event time before 2100")
    if not (math.isfinite(deadline) and ts <= deadline < _MAX_DEADLINE):
        return Invalid("bad_time", f"field 'deadline': {deadline!r} is before 'ts' or past 2101")
    return req


def _bad_string(obj: Any) -> str | None:
    """Where a string of ``obj`` (key or value, at any depth) holds a NUL or a lone surrogate."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if not _clean(item):
                return f"the value at {where or 'the top'}"
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{where}.{_ascii(key)}" if where else _ascii(key)
                if not _clean(key):
                    return f"the key {name}"
                stack.append((name, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
    return None


def _clean(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _ascii(text: str) -> str:
    """``text`` with every character outside printable ASCII as a backslash escape."""
    return _clip(text.encode("unicode_escape").decode("ascii"))


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LabelStudioBridge:
    """The bridge as a library: ``start()`` checks Label Studio, then runs in a thread."""

    def __init__(
        self,
        config: Config,
        ls: LabelStudioConfig,
        state_file: Path,
        token: str,
        *,
        accept: Callable[[str], bool] | None = None,
        consumer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.config, self.ls = config, ls
        self.client = LabelStudioClient(ls.url, token)
        self.state_file = state_file
        self.accept = accept
        self.consumer_config = dict(consumer_config or {})
        self.metrics = BridgeMetrics()
        self.metrics.ready.set_function(lambda: float(self._is_ready()))
        self.projects: dict[str, int] = {}
        self.webhooks_on = False
        self.error: BaseException | None = None
        self._state: BridgeState | None = None
        self._server: BridgeServer | None = None
        self._pending: list[dict[str, Any]] = []
        self._at: dict[str, tuple[Any, int]] = {}  # request id -> (partition, offset) read at
        self._read_to: dict[Any, int] = {}  # partition -> the offset after the last one read
        self._committed: dict[Any, int] = {}
        self._refusing: dict[str, _Refusal] = {}  # model -> its project's refusal
        self._wrong: dict[str, str] = {}  # model -> what its project's interface lacks
        self._recheck = False
        self._ls_up = False
        self._kafka_up = True
        self._next_probe = 0.0
        self._requests_missing: TopicsNotReady | None = None  # the last probe's (``_probe``)
        self._topics_error: str | None = None  # a topic found missing, until it exists
        self._store_error: str | None = None  # the state file's failure, until a step succeeds
        self._liveness: Any = None  # the request topic's partition 0 (``_probe``)
        self._subscribed_at = 0.0  # when the consumer subscribed (``time.monotonic``)
        self._send_wait_s = 20.0  # a label's send: past the producer's delivery timeout
        self._send_failed = False  # the producer is replaced before the next step (``_publish``)
        self._beat = time.monotonic()
        self._next_poll = 0.0
        self._polls = 0  # full poll-and-expire passes of the loop
        self._emails: dict[str, str] = {}  # user id -> email, for the labels' "labeler"
        self._marks: dict[int, str] = {}  # task id -> last change seen (``BridgeState.marks``)
        self._duplicates_seen: set[int] = set()  # answered second tasks already logged
        self._other_bridge_seen = False  # a task another bridge imported was logged
        self._first_listed: dict[int, int] = {}  # project -> its highest task id at first listing
        self._invalid_log = ThrottledLog(
            log,
            "not a valid label request; skipped (labelstudio_bridge_requests_invalid_total): "
            "fix the producer of the requests topic",
            "request_invalid",
        )
        self._unreadable_log = ThrottledLog(
            log,
            "an answer the bridge cannot read; never a label "
            "(labelstudio_bridge_unreadable_answers_total)",
            "answer_unreadable",
        )
        self._failing: dict[int, str] = {}  # project -> its poll's error, until it is read again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def state(self) -> BridgeState:
        """The open state file (after ``start``)."""
        if self._state is None:
            msg = "the bridge is not started"
            raise MonitorError(msg)
        return self._state

    @property
    def port(self) -> int:
        """The HTTP port bound (webhook, metrics, health)."""
        if self._server is None:
            msg = "the bridge is not started"
            raise MonitorError(msg)
        return self._server.port

    def start(self, ready_timeout_s: float = 60.0) -> LabelStudioBridge:
        """Check Label Studio and the token, set up projects, catch up, then run in a thread.

        Raises:
            LabelStudioAuthError: the token is refused.
            LabelStudioUnavailable: Label Studio cannot be reached.
            MonitorError: the HTTP port cannot be bound, or the Kafka side did not come up
                within ``ready_timeout_s``.
        """
        user = self.client.whoami()
        log.info(
            "connected to Label Studio",
            extra={"event": "labelstudio_connected", "url": self.ls.url, "user": user.get("email")},
        )
        self._ls_up = True
        self.metrics.up.set(1)
        self._state = BridgeState(self.state_file)
        self._marks = self._state.marks()
        try:
            self._server = BridgeServer(
                self.ls.listen_address, self.ls.port, self.metrics, self._healthy, self._is_ready
            ).start()
        except OSError as exc:
            self.stop()
            msg = (
                f"cannot listen on {self.ls.listen_address}:{self.ls.port}: "
                f"{exc.strerror or exc}; set labelstudio.port to a free port (0: any) or "
                "labelstudio.listen_address to an address of this host"
            )
            raise MonitorError(msg) from None
        known = set(self.config.models) | set(self.state.watermarks()) | self._titled_models()
        for model in sorted(known):
            self._project(model)
        try:
            self._poll_all()
        except StoreError as exc:  # adopting needs a write: the loop tries again, not ready
            self._store_away(exc, 1.0)
        self._thread = threading.Thread(target=self._main, name="labelstudio-bridge", daemon=True)
        self._thread.start()
        if not self._ready.wait(ready_timeout_s) or self.error is not None:
            self.stop()
            servers = ",".join(self.config.kafka.bootstrap_servers)
            msg = (
                f"the bridge could not start consuming requests from Kafka at {servers}: "
                f"{self.error} (kafka.bootstrap_servers, or --bootstrap-servers)"
            )
            raise MonitorError(msg)
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the loop, the HTTP server and close the state file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._state is not None:
            self._state.close()
            self._state = None

    def settle(self, timeout_s: float = 30.0) -> bool:
        """Run two poll-and-expire passes now and wait for them (False on timeout).

        Everything consumed before the call is then in Label Studio, every answer read and
        every task past its deadline removed.
        """
        target = self._polls + 2
        deadline = time.monotonic() + timeout_s
        while self._polls < target and time.monotonic() < deadline and self.alive:
            self._next_poll = 0.0
            time.sleep(0.1)
        return self._polls >= target

    @property
    def alive(self) -> bool:
        """True while the loop runs."""
        return self._thread is not None and self._thread.is_alive()

    def _healthy(self) -> bool:
        return self.alive and time.monotonic() - self._beat < max(60.0, 3 * self.ls.poll_interval_s)

    def _is_ready(self) -> bool:
        return (
            self._ready.is_set()
            and self._ls_up
            and self._kafka_up
            and self._topics_error is None
            and self._store_error is None
            and self.alive
        )

    def _main(self) -> None:
        """``run``; a failure is kept in ``error`` and logged as ``bridge_failed`` (a bug).

        Not the Kafka side failing to come up before the loop is ready (no broker at the
        bootstrap servers, settings the client refuses): ``start`` reports that, with what to
        fix, and exits 2; its traceback read as a bug in the runbook's terms.
        """
        try:
            self.run(self._stop)
        except BaseException as exc:  # reported through .error and the log
            self.error = exc
            if self._ready.is_set() or not isinstance(exc, KafkaError | MonitorError):
                log.exception("the bridge failed", extra={"event": "bridge_failed"})
        finally:
            self._ready.set()

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume, create, read, publish, expire until ``stop`` is set (blocking)."""
        kafka = self.config.kafka
        consumer = new_client(
            KafkaConsumer,
            {
                "bootstrap_servers": list(kafka.bootstrap_servers),
                "group_id": self.ls.group_id,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
                "client_id": "labelstudio-bridge",
                # a missing topic is reported (``_probe``), a created or granted one seen within
                # seconds; a hung node's fetches, heartbeats and commits give up (30 s before:
                # /readyz 503 again 21-34 s after a freeze), as the daemon's clients' do
                **CLIENT_OPTIONS,
                **kafka_client_options(kafka, "consumer"),
                **self.consumer_config,
            },
            "consumer",
        )
        options: dict[str, Any] = {
            "bootstrap_servers": list(kafka.bootstrap_servers),
            "client_id": "labelstudio-bridge",
            # a missing topic is reported (``_publish``); a producer replaced after a failed
            # send bootstraps again, on a hung node 30 s by default (twice in a row: an answer
            # published 73 s after a freeze), 5 s here
            **CLIENT_OPTIONS,
            "linger_ms": 5,
            "max_block_ms": _MAX_BLOCK_MS,
            **kafka_client_options(kafka, "producer"),
        }
        options.setdefault(  # kafka-python refuses one below linger_ms + request_timeout_ms
            "delivery_timeout_ms",
            max(_DELIVERY_TIMEOUT_MS, options["linger_ms"] + options["request_timeout_ms"]),
        )
        self._send_wait_s = options["delivery_timeout_ms"] / 1000 + 5.0
        producer = new_client(KafkaProducer, options, "producer")
        self._subscribe(consumer)
        self._liveness = TopicPartition(kafka.topics.requests, 0)
        self._ready.set()
        backoff = 1.0
        try:
            while not stop.is_set():
                self._beat = time.monotonic()
                try:
                    if self._send_failed:  # see ``_publish``
                        producer.close(0)
                        producer = new_client(KafkaProducer, options, "producer")
                        self._send_failed = False
                    self._step(consumer, producer)
                except (LabelStudioError, KafkaError, TopicsNotReady, StoreError) as exc:
                    ls_error = isinstance(exc, LabelStudioError)
                    wait = backoff if ls_error else min(backoff, _KAFKA_BACKOFF_MAX_S)
                    if isinstance(exc, TopicsNotReady):  # the labels topic (``_publish``)
                        self._note_topics(exc)
                    elif isinstance(exc, StoreError):
                        self._store_away(exc, wait)
                    elif isinstance(exc, KafkaError):
                        self._kafka_away(exc, wait)
                    else:
                        self._went_away(exc, wait)
                    if self._pending:
                        consumer.pause(*consumer.assignment())
                        consumer.poll(timeout_ms=0)  # keeps the group membership
                    stop.wait(wait)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
                    continue
                if self._store_error is not None:
                    log.info("state file written again", extra={"event": "store_available"})
                    self._store_error = None
                if not self._kafka_up:
                    log.info("Kafka is back", extra={"event": "kafka_back"})
                    self._kafka_up = True
                    self.metrics.kafka_up.set(1)
                if not self._ls_up:
                    log.info("Label Studio is back", extra={"event": "labelstudio_back"})
                self._ls_up = True
                self.metrics.up.set(1)
                backoff = 1.0
        finally:
            self._invalid_log.flush()
            self._unreadable_log.flush()
            producer.close(5)
            consumer.close()

    def _note_topics(self, error: TopicsNotReady | None) -> None:
        """Not ready while a topic the bridge reads or writes is missing; logged at each change.

        The requests topic (``_probe``: the rest of the loop goes on, answers are published) or
        the labels topic (``_publish``: the step is retried with backoff, its answer published
        once the topic exists). The error names the topic and the ``kafka-topics.sh`` command.
        """
        text = None if error is None else str(error)
        if text == self._topics_error:
            return
        self._topics_error = text
        if text is None:
            log.info("the bridge's topics exist", extra={"event": "topics_ready"})
        else:
            log.error(
                "a topic the bridge needs is missing or refused; retrying until it is created or "
                "granted",
                extra={"event": "topics_not_ready", "error": text},
            )

    def _kafka_away(self, exc: Exception, backoff: float) -> None:
        """A broker call failed: not ready, logged once per outage; Label Studio is not blamed.

        The error names the recent connection error and the ``kafka.client`` settings or ACLs to
        check, as the daemon's ``broker_down`` does (``monitor.io.client_errors``).
        """
        self.metrics.kafka_up.set(0)
        self._next_probe = 0.0  # every retry asks the broker first
        if not self._kafka_up:
            return
        self._kafka_up = False
        error = unavailable("a Kafka call failed", exc, CONNECTION_ERRORS, self.config.kafka.client)
        log.warning(
            "Kafka did not answer or refused; retrying with backoff (nothing is committed "
            "meanwhile)",
            extra={"event": "kafka_down", "error": str(error), "retry_in_s": backoff},
        )

    def _store_away(self, exc: StoreError, backoff: float) -> None:
        """The state file failed: not ready, logged once; the next step reads Label Studio first.

        The step stopped at the failed write, which changed nothing. Tasks an import created
        but could not record are then adopted (``_poll_all``) before anything is imported again,
        and the import's requests counted as repeated; a label published but not recorded is
        published again (the same label: the daemon keeps the first and dead-letters the other as
        ``duplicate_label``). Retried at most ``_KAFKA_BACKOFF_MAX_S`` apart, so the bridge is
        ready within that of the room made.
        """
        self._recheck = True
        if self._store_error is not None:
            return
        self._store_error = str(exc)
        log.error(
            "the bridge's state file failed; retrying with backoff (nothing is committed "
            "meanwhile)",
            extra={
                "event": "store_unavailable",
                "error": str(exc),
                "fix": "a full volume: free space on it or grow it; a read-only directory: make "
                "it writable again; the bridge resumes by itself",
                "retry_in_s": backoff,
            },
        )

    def _went_away(self, exc: Exception, backoff: float) -> None:
        """A Label Studio call failed: ``labelstudio_up`` 0, counted, logged once per outage."""
        self.metrics.errors.inc()
        self.metrics.up.set(0)
        self._recheck = True
        if not self._ls_up:
            return
        self._ls_up = False
        if type(exc) is LabelStudioError:  # answered, but refused: a retry alone will not do
            log.error(
                "Label Studio refused a call; retrying with backoff until what its answer names "
                "is fixed (e.g. a project whose labeling config lost the bridge's fields)",
                extra={"event": "labelstudio_refused", "error": str(exc), "retry_in_s": backoff},
            )
            return
        log.warning(
            "a Label Studio call failed; retrying with backoff",
            extra={"event": "labelstudio_down", "error": str(exc), "retry_in_s": backoff},
        )

    def _subscribe(self, consumer: Any) -> None:
        """Subscribe to the requests topic; missing counts from the next metadata (``_probe``)."""
        self._subscribed_at = time.monotonic()
        consumer.subscribe([self.config.kafka.topics.requests])

    def _probe(self, consumer: Any) -> TopicsNotReady | None:
        """Ask the broker for end offsets every ``_PROBE_EVERY_S`` (raises ``KafkaError``).

        The assigned partitions', or the request topic's partition 0 when none is assigned (a
        member waiting for its assignment, or one whose membership lapsed in the outage). A
        request topic the broker lacks, or its ACLs refuse, is returned instead (read from the
        consumer's metadata, no request): the group assigns nothing of it, and the end offset of
        its partition 0 failed as a broker outage. The last probe's answer is returned between
        probes. When the topic is back the consumer subscribes again: kafka-python's own rejoin
        on the metadata change at times assigned from the metadata before it, and the bridge sat
        ready with no partition for good (4 of 18 runs with a refused requests topic granted).
        """
        if time.monotonic() < self._next_probe:
            return self._requests_missing
        topic = self.config.kafka.topics.requests
        if absent_topics(consumer, [topic], self._subscribed_at):
            self._requests_missing = missing_topics(self.config, [topic], _one)
        elif unauthorized_topics(consumer, [topic]):
            self._requests_missing = refused_topics(self.config, [topic])
        else:
            if self._requests_missing is not None:  # the topic is back
                consumer.unsubscribe()
                self._subscribe(consumer)
            self._requests_missing = None
            parts = list(consumer.assignment()) or [self._liveness]
            try:
                consumer.end_offsets(parts, timeout_ms=_PROBE_TIMEOUT_MS)
            except TopicAuthorizationFailedError:  # before the metadata said so
                self._requests_missing = refused_topics(self.config, [topic])
            except KafkaTimeoutError:  # a topic the bootstrap's listing lacked, too
                if not absent_topics(consumer, [topic]):
                    raise
                self._requests_missing = missing_topics(self.config, [topic], _one)
        self._next_probe = time.monotonic() + _PROBE_EVERY_S
        return self._requests_missing

    def _step(self, consumer: Any, producer: Any) -> None:
        """Take requests, read answers, import, then commit what is imported.

        Label Studio down holds every request back; a project that refuses its imports, its
        own model's only. Neither holds back the answers.
        """
        missing = self._probe(consumer)  # before anything is read that would wait to be published
        if self._recheck:
            self._poll_all()  # tasks an unanswered import may have created
            self._recheck = False
        if len(self._pending) < _MAX_HELD:
            polled = consumer.poll(timeout_ms=200, max_records=500)
            for part, messages in polled.items():
                for message in messages:
                    self._take(message.value, (part, message.offset))
                    self._read_to[part] = message.offset + 1
        hinted = self._drain_hints()
        for task_id in sorted(hinted):
            self._refresh(task_id, producer)
        if time.monotonic() >= self._next_poll:
            self._poll_all(producer)
            self._expire()
            self._next_poll = time.monotonic() + self.ls.poll_interval_s
            self._polls += 1
        self.metrics.set_depth(self.state.depth(), self.projects)
        if self._pending:
            self._create()
            if consumer.paused():
                consumer.resume(*consumer.paused())
        self._commit(consumer)
        self._note_topics(missing)
        self._invalid_log.tick()
        self._unreadable_log.tick()

    def _commit(self, consumer: Any) -> None:
        """Commit each partition read up to its first request not imported, else all of it.

        A restart then reads the held requests again (and the ones after them, which the state
        file finds imported: counted as repeated).
        """
        waiting = {r["request_id"] for r in self._pending}
        self._at = {rid: at for rid, at in self._at.items() if rid in waiting}
        target = dict(self._read_to)
        for part, offset in self._at.values():
            target[part] = min(offset, target.get(part, offset))
        owned = consumer.assignment()
        due = {p: o for p, o in target.items() if p in owned and self._committed.get(p) != o}
        if due:
            offsets = {p: OffsetAndMetadata(o, "", -1) for p, o in due.items()}
            # kafka-python's commit otherwise retries forever while the coordinator is down
            consumer.commit(offsets, timeout_ms=int(COMMIT_TIMEOUT_S * 1000))
            self._committed.update(due)

    def _drain_hints(self) -> set[int]:
        out: set[int] = set()
        if self._server is None:
            return out
        while not self._server.hints.empty():
            out.add(self._server.hints.get_nowait())
        return out

    # -- requests -> tasks ------------------------------------------------------------------

    def _take(self, value: bytes | None, at: tuple[Any, int]) -> None:
        """Parse one request record read at ``at`` (partition, offset) and queue it."""
        req = read_request(value)
        if isinstance(req, Invalid):
            self.metrics.requests_invalid.inc()
            part, offset = at
            self._invalid_log.note(
                req.reason,
                {
                    "topic": getattr(part, "topic", self.config.kafka.topics.requests),
                    "partition": getattr(part, "partition", part),
                    "offset": offset,
                    "reason": req.reason,
                    "detail": req.detail,
                },
            )
            return
        if self.accept is not None and not self.accept(req["request_id"]):
            return
        self._pending.append(req)
        self._at.setdefault(req["request_id"], at)

    def _create(self) -> None:
        """Import the pending requests, model by model.

        A model whose project refuses its imports keeps its requests pending and is tried again
        after its backoff; the other models' are imported meanwhile. What is not imported stays
        pending, once, so that a retry counts no request as repeated.
        """
        now = time.monotonic()
        waiting = {m for m, r in self._refusing.items() if r.retry_at > now}
        due = [r for r in self._pending if r["model"] not in waiting]
        if not due:
            return
        unique: dict[str, dict[str, Any]] = {}
        for req in due:  # a request id read twice: the first copy stands, as in the monitor
            unique.setdefault(req["request_id"], req)
        known = self.state.known(list(unique))
        repeated = len(due) - len(unique) + len(known)
        if repeated:
            self.metrics.requests_repeated.inc(repeated)
        fresh = [r for rid, r in unique.items() if rid not in known]
        self._pending = [r for r in self._pending if r["model"] in waiting] + fresh
        by_model: dict[str, list[dict[str, Any]]] = {}
        for req in fresh:
            by_model.setdefault(req["model"], []).append(req)
        for model, reqs in sorted(by_model.items()):
            if model in self._wrong:  # found again: restored, renamed away, or still wrong
                self.projects.pop(model, None)
            project = self._project(model)
            if model in self._wrong:
                self._hold(model, len(reqs))
                continue
            wording = self.ls.wording_of(model)
            try:
                bodies = [task_body(r, wording, self.state.instance) for r in reqs]
                ids = self.client.import_tasks(project, bodies)
            except LabelStudioNotFound:  # the project was deleted: find or create it again
                self.projects.pop(model, None)
                raise
            except LabelStudioError as exc:
                if type(exc) is not LabelStudioError:  # down, or the token: for every project
                    raise
                self._refused(model, project, len(reqs), exc)
                continue
            self.state.add_tasks(
                [_row(r, project, tid, time.time()) for r, tid in zip(reqs, ids, strict=True)]
            )
            self._pending = [r for r in self._pending if r["model"] != model]
            self.metrics.tasks_created.labels(model).inc(len(reqs))
            log.info(
                "tasks created",
                extra={"event": "tasks_created", "model": model, "tasks": len(reqs)},
            )
            if self._refusing.pop(model, None) is not None:
                self.metrics.requests_held.labels(model).set(0)
                log.info(
                    "the project takes imports again; its held requests are imported",
                    extra={"event": "imports_accepted", "model": model, "project": project},
                )

    def _hold(self, model: str, held: int) -> bool:
        """Keep a model's requests pending, tried again after a backoff; True the first time."""
        self.metrics.requests_held.labels(model).set(held)
        before = self._refusing.get(model)
        backoff = min(2 * before.backoff, _BACKOFF_MAX_S) if before else 1.0
        self._refusing[model] = _Refusal(time.monotonic() + backoff, backoff)
        return before is None

    def _refused(self, model: str, project: int, held: int, exc: LabelStudioError) -> None:
        """One model's project refused an import: its requests wait, retried with backoff."""
        self.metrics.errors.inc()
        if self._hold(model, held):
            log.error(
                "Label Studio refused to import the model's requests into its project; they "
                "are held and retried with backoff while the other models' go on: fix the "
                "project's labeling config (it must keep the bridge's fields)",
                extra={
                    "event": "imports_refused",
                    "model": model,
                    "project": project,
                    "held": held,
                    "error": str(exc),
                },
            )

    def _titled_models(self) -> set[str]:
        """Models whose project exists in Label Studio (its title is ``project_title``'s).

        Read at start so that tasks imported just before a crash, for a model neither configured
        nor in the state file yet, are adopted rather than imported again.
        """
        head, _, tail = self.ls.project_title.partition("{model}")
        out = set()
        for project in self.client.projects():
            title = project.get("title")
            if not isinstance(title, str) or len(title) <= len(head) + len(tail):
                continue
            if title.startswith(head) and title.endswith(tail):
                model = title[len(head) : len(title) - len(tail)]
                if self.ls.title(model) == title:
                    out.add(model)
        return out

    def _project(self, model: str) -> int:
        """The project of ``model``: found by title, else created; webhook registered.

        A found project's ``maximum_annotations`` is set to what ``annotators`` needs, raised or
        lowered (the setting may have changed since the project was made).
        """
        if model in self.projects:
            return self.projects[model]
        title = self.ls.title(model)
        found = [p for p in self.client.projects() if p.get("title") == title]
        if found:
            project = min(found, key=lambda p: int(p["id"]))
            project_id = int(project["id"])
            self._check_interface(model, project_id, title, project.get("label_config"))
            asks = project.get("maximum_annotations")
            if isinstance(asks, int) and asks != self.ls.answers_needed:
                # made under the other annotators policy: asking for too few answers, majority
                # never decides; too many, decided tasks keep being served under first
                self.client.update_project(
                    project_id, {"maximum_annotations": self.ls.answers_needed}
                )
                log.info(
                    "project asks for as many answers as the annotators policy needs",
                    extra={
                        "event": "project_updated",
                        "model": model,
                        "project": project_id,
                        "maximum_annotations": self.ls.answers_needed,
                        "was": asks,
                    },
                )
        else:
            fields = project_fields(title, self.ls.wording_of(model), self.ls.answers_needed)
            project_id = int(self.client.create_project(fields)["id"])
            log.info(
                "project created",
                extra={"event": "project_created", "model": model, "project": project_id},
            )
        self._webhook(project_id)
        self.projects[model] = project_id
        return project_id

    def _check_interface(self, model: str, project: int, title: str, config: Any) -> None:
        """Note whether a found project's labeling interface is the bridge's (``_wrong``).

        A project of the configured title made for something else, or whose interface was
        edited by hand, had its model's requests imported and every answer reported as
        unreadable. Its model's requests are now held as a refusing project's are (``_create``
        finds the project again at each retry, so a restored interface or a project renamed
        away lets them through); each check that finds it wrong is counted in
        ``labelstudio_errors_total``, and logged once per problem.
        """
        problem = interface_problem(config, self.ls.wording_of(model))
        if problem is None:
            if self._wrong.pop(model, None) is not None:
                log.info(
                    "the project's labeling interface is the bridge's again",
                    extra={
                        "event": "project_interface_restored",
                        "model": model,
                        "project": project,
                    },
                )
            return
        self.metrics.errors.inc()
        if self._wrong.get(model) == problem:
            return
        self._wrong[model] = problem
        log.error(
            "a project found by its title does not have the bridge's labeling interface; its "
            "model's requests are held (not imported) until it does, the other models go on",
            extra={
                "event": "project_interface_wrong",
                "model": model,
                "project": project,
                "title": title,
                "problem": problem,
                "fix": f"in Label Studio, project {project} ({title}) > Settings > Labeling "
                "Interface > Code: paste this line's label_config and save (answers given "
                "meanwhile are read with it); or, if the project is made for something else, "
                f"rename it and the bridge makes its own {title!r}. The held requests are "
                "imported within a minute of either",
                "label_config": label_config(self.ls.wording_of(model)),
            },
        )

    def _webhook(self, project_id: int) -> None:
        if self._server is None:
            return
        url = self.ls.hook_url(self._server.port)
        if any(w.get("url") == url for w in self.client.webhooks(project_id)):
            self.webhooks_on = True
            return
        try:
            self.client.create_webhook(
                {
                    "project": project_id,
                    "url": url,
                    "send_payload": True,
                    "send_for_all_actions": False,
                    "actions": list(WEBHOOK_ACTIONS),
                    "is_active": True,
                }
            )
            self.webhooks_on = True
        except LabelStudioError as exc:
            if isinstance(exc, LabelStudioUnavailable):
                raise
            log.warning(
                "Label Studio refused the webhook; reading annotations by polling only (a "
                "Label Studio that must call a private address needs "
                "USE_DEFAULT_BANNED_SUBNETS=false)",
                extra={"event": "webhook_refused", "project": project_id, "error": str(exc)},
            )

    # -- annotations -> labels --------------------------------------------------------------

    def _poll_all(self, producer: Any = None) -> None:
        """List every task of every project; adopt, notice deletions, read what changed.

        Annotations are read for each task whose ``(updated_at, answers, skips)`` changed
        since the last look and that has any: Label Studio moves a task's ``updated_at`` on
        every new, edited or deleted annotation. The marks are kept in the state file, so a
        restart reads only the tasks that changed while the bridge was down.

        Besides each model's project (found by title), every project an open or answered task
        was imported into is read: a project renamed in Label Studio is no longer found by its
        title, and its answers were once never read (a project since deleted: its tasks are
        asked for by id, and Label Studio's 404 counts them deleted).
        """
        recorded = {(r.model, r.project_id) for r in self.state.with_status(OPEN, ANSWERED)}
        for model, project in sorted(set(self.projects.items()) | recorded):
            try:
                self._poll_project(model, project, producer)
            except LabelStudioError as exc:
                self._project_failed(model, project, exc)
                continue
            if self._failing.pop(project, None) is not None:
                log.info(
                    "the project's tasks are read again",
                    extra={"event": "project_poll_back", "model": model, "project": project},
                )

    def _project_failed(self, model: str, project: int, exc: LabelStudioError) -> None:
        """One project's poll failed: Label Studio down if it fails too, else that project only.

        Label Studio 1.23.2 answers every listing of a project holding a task it cannot show
        (an unpaired surrogate stored in its data) with HTTP 500, for good, while it serves the
        other projects: the whole poll stopped there, and no model's answers were read or its
        requests imported. Label Studio is asked who the token is; when that fails too, it is
        down (raised, as before). Otherwise the project is skipped until a poll reads it again
        (its tasks are not expired meanwhile: their answers were not read), logged once per
        change of its error and each failure counted in ``labelstudio_errors_total``.
        """
        self.client.whoami()  # raises when Label Studio itself is failing
        self.metrics.errors.inc()
        error = str(exc)
        if self._failing.get(project) == error:
            return
        self._failing[project] = error
        log.error(
            "Label Studio fails to list one project's tasks while it serves the others; that "
            "project is skipped (its answers unread, its tasks not expired) and retried at "
            "each poll: find the task Label Studio cannot show in that project (its data "
            "window or server log) and delete it",
            extra={
                "event": "project_poll_failed",
                "model": model,
                "project": project,
                "error": error,
            },
        )

    def _poll_project(self, model: str, project: int, producer: Any) -> None:
        """One project's part of ``_poll_all``."""
        listed: dict[int, dict[str, Any]] = {}
        for task in self.client.tasks(project, fields="task_only"):  # none: project gone
            if isinstance(task.get("id"), int):
                listed[task["id"]] = task
        self._adopt(model, project, listed.values())
        self._first_listed.setdefault(project, max(listed, default=0))
        self._dedupe(model, project, listed)
        for row in self.state.with_status(OPEN, ANSWERED):
            if row.project_id != project:
                continue
            current = listed.get(row.task_id)
            if current is not None and _request_of(current) != row.request_id:
                self._gone(row)  # a Label Studio started afresh gave its id to another task
                continue
            if current is None:  # or a listing that skipped it, its pages shifting under
                try:  # a deletion: only Label Studio's 404 for the task itself says gone
                    current = self.client.task(row.task_id)
                except LabelStudioNotFound:
                    self._gone(row)
                    continue
                if _request_of(current) != row.request_id:
                    self._gone(row)  # the id is another request's task now (see above)
                    continue
            answers = (current.get("total_annotations"), current.get("cancelled_annotations"))
            mark = json.dumps([current.get("updated_at"), *answers])
            if producer is None or self._marks.get(row.task_id) == mark:
                continue
            if any(answers) or row.status == ANSWERED:  # an unanswered task has nothing
                self._refresh(row.task_id, producer)  # to read, unless its answer is gone
            self._marks[row.task_id] = mark
            self.state.set_mark(row.task_id, mark)

    def _adopt(self, model: str, project: int, tasks: Iterable[dict[str, Any]]) -> None:
        """Tasks Label Studio holds with a request id the state file lacks (lost answer).

        One made since this bridge first listed the project (a higher id), by another bridge
        id, is another bridge importing the same requests, a step ahead of this one: logged as
        ``_dedupe``'s two copies are. Not the tasks found at the first listing: a state file
        rebuilt under a new id adopts its own earlier ones there.
        """
        rows: list[TaskRow] = []
        now = time.time()
        since = self._first_listed.get(project)
        for task in tasks:
            meta = task.get("meta") or {}
            rid = _request_of(task)
            if rid is None or self.state.by_request(rid) is not None:
                continue
            if since is not None and int(task["id"]) > since:
                self._note_other_bridge(model, project, [task], self.state.instance)
            req = {
                "request_id": rid,
                "model": model,
                "token": meta.get("token"),
                "pi": meta.get("pi"),
                "ts": float(meta.get("ts") or 0.0),
                "deadline": float(meta.get("deadline") or 0.0),
            }
            rows.append(_row(req, project, int(task["id"]), now))
        if rows:
            self.state.add_tasks(rows)
            self.metrics.tasks_adopted.labels(model).inc(len(rows))
            log.info("tasks adopted", extra={"event": "tasks_adopted", "tasks": len(rows)})

    def _note_other_bridge(
        self, model: str, project: int, copies: list[dict[str, Any]], ours: str | None = None
    ) -> None:
        """Log once per run copies of one request imported by two bridges (``meta.bridge``).

        Two bridges on one project, each with its own state file, each import every request:
        their duplicates are resolved alike (``_dedupe``), and each publishes the answer.
        ``ours``: this bridge's id, for a copy it was about to import (``_adopt``). A task of
        an earlier id alone is no sign of one: a state file rebuilt from the tasks (lost or
        moved aside) makes a new id, and its earlier tasks, adopted, are not imported again.
        """
        found = {m for t in copies if (m := _meta_text(t, "bridge")) is not None}
        marks = sorted(found | ({ours} if ours is not None and found else set()))
        if self._other_bridge_seen or len(marks) < 2:
            return
        self._other_bridge_seen = True
        log.warning(
            "a request has tasks imported by two bridges (each its own state file): both "
            "import every request, keep the same task of each and publish its answer once "
            "each; run one bridge per set of projects",
            extra={
                "event": "task_of_another_bridge",
                "model": model,
                "project": project,
                "tasks": [t.get("id") for t in copies],
                "bridge": self.state.instance,
                "bridges": marks,
            },
        )

    def _dedupe(self, model: str, project: int, listed: dict[int, dict[str, Any]]) -> None:
        """Keep one task per request in ``listed`` and in Label Studio: the same on any bridge.

        Two tasks carry one request when an import Label Studio committed only after the bridge
        gave up waiting for it (``IMPORT_TIMEOUT_S``) was imported again, or when two bridges
        (each its own state file) share the project. The task kept is chosen from Label
        Studio's listing alone, so that two bridges keep the same one: the lowest id among the
        answered (or skipped) tasks, else the lowest id. It becomes the request's task unless
        the recorded one is answered and its label published already; a task deleted under the
        bridge (by the other one) is replaced by it. The others nobody answered are deleted;
        one that was answered stays and is logged once. Each bridge used to delete the task the
        other had recorded, so neither task survived and the request was never audited.
        """
        by_request: dict[str, list[int]] = {}
        for task_id, task in sorted(listed.items()):
            rid = _request_of(task)
            if rid is not None:
                by_request.setdefault(rid, []).append(task_id)
        for rid, ids in sorted(by_request.items()):
            if len(ids) > 1:
                self._note_other_bridge(model, project, [listed[t] for t in ids])
            row = self.state.by_request(rid)
            if row is None or row.project_id != project or ids == [row.task_id]:
                continue
            if row.status == EXPIRED:  # the other bridge's copy expires on its own
                continue
            keep = min(ids, key=lambda t: (not _touched(listed[t]), t))
            recorded = listed.get(row.task_id)
            ours = row.task_id
            if keep != ours and (
                recorded is None or not _touched(recorded) or row.published is None
            ):
                self.state.set_task(rid, keep)
                if row.status == DELETED:
                    self.state.set_status(rid, OPEN)
                ours = keep
            for task_id in ids:
                if task_id == ours:
                    continue
                if _touched(listed[task_id]):
                    self._duplicate_answered(task_id, ours, model)
                    continue
                self.client.delete_task(task_id)
                listed.pop(task_id, None)
                self.metrics.duplicates.labels(model).inc()
                log.warning(
                    "a request had two tasks (an import Label Studio committed after the "
                    "bridge gave up on it, or a second bridge on the project); one removed",
                    extra={
                        "event": "task_duplicate_removed",
                        "task": task_id,
                        "kept": ours,
                        "model": model,
                        "project": project,
                    },
                )

    def _duplicate_answered(self, task_id: int, kept: int, model: str) -> None:
        """A second task of a request that was answered too: left, logged once, not read."""
        if task_id in self._duplicates_seen:
            return
        self._duplicates_seen.add(task_id)
        log.warning(
            "a second answered task of one request: its answer is not read",
            extra={
                "event": "task_duplicate_answered",
                "task": task_id,
                "kept": kept,
                "model": model,
            },
        )

    def _refresh(self, task_id: int, producer: Any) -> None:
        """Read one task and publish its decision for the request the task itself names.

        Never for the state file's row of the task id alone: a Label Studio redeployed with an
        empty database numbers its tasks from 1 again, and an answer was once published (with
        a valid token) for the earlier request that had the same task id. Rows of that id for
        another request are the earlier instance's: their tasks are gone. A task Label Studio
        no longer has makes the next step poll (``_poll_project`` counts it deleted, unless
        another task of its request is listed): a second bridge that deleted it as a
        duplicate keeps another task of the request, which the poll adopts (``_dedupe``).
        """
        rows = [r for r in self.state.by_task(task_id) if r.status in (OPEN, ANSWERED)]
        if not rows:
            return
        try:
            task = self.client.task(task_id)
        except LabelStudioNotFound:  # the poll run now tells deleted from replaced
            self._next_poll = 0.0
            return
        for row in rows:
            if row.request_id == _request_of(task):
                self._process(row, task, producer)
            else:
                self._gone(row)

    def _publish(self, producer: Any, request_id: str, value: Mapping[str, Any]) -> None:
        """Send one label and wait for it (raises ``KafkaError``, or ``TopicsNotReady``).

        A labels topic the broker lacks is ``TopicsNotReady`` with the command creating it: the
        send waited ``max_block_ms`` for the topic's metadata and failed as a broker outage. The
        producer never asks the broker to create it (Apache Kafka's default and Tansu would, with
        their retention rather than ``monitor.io.topics.keep_ms``).

        After a failed send the loop replaces the producer: kafka-python's idempotent producer
        stays failed for good once the broker refused it a producer id (ACLs granting this
        principal no Write on any topic when it started), and every later label failed with
        that error, the ACLs since granted.
        """
        topic = self.config.kafka.topics.labels
        since = time.monotonic()
        try:
            producer.send(
                topic,
                key=request_id.encode(),
                value=json.dumps(value, sort_keys=True, separators=(",", ":")).encode(),
            ).get(timeout=self._send_wait_s)
        except KafkaError as exc:
            self._send_failed = True
            if absent_topics(producer, [topic], since):
                raise missing_topics(self.config, [topic], _one, written=True) from exc
            raise

    def _gone(self, row: TaskRow) -> None:
        """A task Label Studio no longer has: deleted, or expired if past its deadline.

        An open task behind its model's watermark was removed by ``_expire`` and its
        ``EXPIRED`` not written (the state file failed in between), or deleted by hand when the
        next ``_expire`` would have removed it: either way it expired, and is counted so.
        """
        if row.status == OPEN and _late(row, self.state.watermarks()):
            self.state.set_status(row.request_id, EXPIRED)
            self.metrics.expired.labels(row.model).inc()
            return
        self.state.set_status(row.request_id, DELETED)
        if row.status == OPEN:
            self.metrics.deleted.labels(row.model).inc()
            log.warning(
                "task deleted in Label Studio; its request stays unanswered",
                extra={"event": "task_deleted", "task": row.task_id, "model": row.model},
            )

    def _process(self, row: TaskRow, task: Mapping[str, Any], producer: Any) -> None:
        raw = task.get("annotations")
        wording = self.ls.wording_of(row.model)
        items = raw if isinstance(raw, list) else []
        answers = [a for a in (read_answer(x, wording) for x in items) if a is not None]
        for a in answers:
            seen = self.state.annotation_seen(a.annotation_id, row.request_id)
            kind = "declined" if a.declined else "answer" if a.label is not None else "unreadable"
            if seen is not None and seen == (kind, a.label):
                continue
            if seen is None or seen[0] != kind:
                counter = {
                    "declined": self.metrics.declined,
                    "answer": self.metrics.answers_read,
                    "unreadable": self.metrics.unreadable,
                }[kind]
                counter.labels(row.model).inc()
                if kind == "unreadable":
                    self._unreadable(row, a.annotation_id, items, wording)
            self.state.record_annotation(a.annotation_id, row.request_id, kind, a.label)
        decision = decide_label(answers, self.ls.annotators, self.ls.majority_of)
        if decision.label is None:
            if row.status == ANSWERED:  # its answers were deleted: the task is open again
                self._reopen(row)
            return
        if decision.label == row.published:
            if row.status == OPEN:  # answered again as published: nothing new to publish
                self.state.set_status(row.request_id, ANSWERED)
            return
        value: dict[str, Any] = {
            "request_id": row.request_id,
            "label": decision.label,
            "labeler": self._labeler(decision.labeler),
            "ts": round(time.time(), 3),
        }
        if row.token is not None:
            value["token"] = row.token
        self._publish(producer, row.request_id, value)
        self.state.set_published(row.request_id, decision.label)
        self.metrics.labels_published.labels(row.model).inc()
        if row.published is None:
            self.metrics.latency.labels(row.model).observe(max(0.0, time.time() - row.created_wall))
        else:
            self.metrics.edits.labels(row.model).inc()
            log.info(
                "an edit changed a published answer; the new label is published and the "
                "daemon keeps the first",
                extra={"event": "label_edited", "task": row.task_id, "model": row.model},
            )

    def _unreadable(
        self, row: TaskRow, annotation_id: int, items: list[Any], wording: Wording
    ) -> None:
        """Log an answer that gives no label (once per annotation, throttled per project).

        A choice the interface does not offer (a project whose labeling config was edited, or
        made by hand with another interface) was only counted: nothing said which task, which
        value, or what to fix.
        """
        raw = next((x for x in items if isinstance(x, dict) and x.get("id") == annotation_id), {})
        result = raw.get("result")
        values = (
            [r.get("value") for r in result if isinstance(r, dict)]
            if isinstance(result, list)
            else result
        )
        self._unreadable_log.note(
            str(row.project_id),
            {
                "model": row.model,
                "project": row.project_id,
                "task": row.task_id,
                "annotation": annotation_id,
                "value": _clip(json.dumps(values, ensure_ascii=True, default=str)),
                "fix": f"the project's labeling interface must be the bridge's: one Choices "
                f'named "{FROM_NAME}" with exactly one of {wording.positive!r} (alias "1") '
                f'or {wording.negative!r} (alias "0") chosen; restore it in the project\'s '
                "settings (Labeling Interface), then edit the answer",
            },
        )

    def _reopen(self, row: TaskRow) -> None:
        """A published task whose annotations no longer decide a label goes back to open.

        Label Studio serves it again, so it counts in the queue depth and expires at its
        deadline like any open task; the row keeps its published label, so a new answer is an
        edit only when it differs.
        """
        self.state.set_status(row.request_id, OPEN)
        log.info(
            "a published task's answer was deleted in Label Studio; the task is open again",
            extra={"event": "task_reopened", "task": row.task_id, "model": row.model},
        )

    def _labeler(self, labeler: str | None) -> str | None:
        """``labelstudio:<user id>`` -> ``labelstudio:<email>`` (looked up once per user)."""
        prefix, _, user = (labeler or "").partition(":")
        if prefix != "labelstudio" or not user.isdigit():
            return labeler
        if user not in self._emails:
            try:
                email = self.client.user(int(user)).get("email")
            except LabelStudioNotFound:
                email = None
            self._emails[user] = str(email) if email else user
        return f"labelstudio:{self._emails[user]}"

    def _expire(self) -> None:
        """Delete open tasks past the watermark (answers were read by the poll just before)."""
        marks = self.state.watermarks()
        late: dict[int, list[TaskRow]] = {}
        for row in self.state.with_status(OPEN):
            if _late(row, marks) and row.project_id not in self._failing:
                late.setdefault(row.project_id, []).append(row)
        for project, rows in sorted(late.items()):
            self.client.delete_tasks(project, [r.task_id for r in rows])
            for row in rows:
                self.state.set_status(row.request_id, EXPIRED)
                self.metrics.expired.labels(row.model).inc()
            log.info(
                "tasks past their deadline removed",
                extra={"event": "tasks_expired", "project": project, "tasks": len(rows)},
            )


@dataclasses.dataclass(frozen=True)
class _Refusal:
    """A project refusing its imports: when its model's requests are tried again."""

    retry_at: float  # time.monotonic()
    backoff: float  # seconds, doubled at each refusal up to ``_BACKOFF_MAX_S``


def _late(row: TaskRow, watermarks: Mapping[str, float]) -> bool:
    """Whether a task's deadline is behind its model's watermark (newest request event time)."""
    return row.deadline < watermarks.get(row.model, float("-inf"))


def _touched(task: Mapping[str, Any]) -> bool:
    """Whether a listed task holds an answer or a skip (its annotation counts)."""
    return bool(task.get("total_annotations") or task.get("cancelled_annotations"))


def _meta_text(task: Mapping[str, Any], key: str) -> str | None:
    """A text field of a task's ``meta`` (``task_body``), if the task has it."""
    meta = task.get("meta")
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def _request_of(task: Mapping[str, Any]) -> str | None:
    """The request id a task was imported for, if any."""
    return _meta_text(task, "request_id")


def _row(req: Mapping[str, Any], project: int, task_id: int, now: float) -> TaskRow:
    return TaskRow(
        request_id=req["request_id"],
        model=req["model"],
        project_id=project,
        task_id=task_id,
        token=req.get("token"),
        pi=req.get("pi"),
        ts=float(req["ts"]),
        deadline=float(req["deadline"]),
        created_wall=now,
        status=OPEN,
        published=None,
    )
