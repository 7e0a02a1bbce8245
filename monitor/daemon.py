"""``monitor run`` and ``monitor check-config``: the streaming daemon's wiring and main loop.

One poll is one step, in a fixed order::

    poll -> decode -> sampler -> estimator (requests, labels, parked)
         -> produce requests + dead letters, flush
         -> ONE store transaction (state + next offsets) -> Kafka commit -> metrics

Nothing is committed before it is durable: requests and dead letters are acknowledged before
the transaction, and the transaction before the Kafka commit. If the broker fails mid-step, the
in-memory state is reloaded from the store and the consumer seeks back to the stored offsets;
the deterministic decisions then reproduce the same requests (idempotent by key and bytes).
A broker outage is retried with capped exponential backoff, logged once per state change;
``/readyz`` is 503 meanwhile, also while a step is blocked on the broker (a watchdog thread
notices an iteration that does not finish within the poll and probe timeouts + 3 s).
SIGTERM/SIGINT: finish the step, close, exit 0.

Roles (``--role``): ``all`` (default) runs all of the above in one process; ``estimator`` reads
the samplers' bucket states from the aggregates topic instead of the scored topic
(``monitor.aggregates``); ``sampler`` is ``monitor.sampler_role``, driven by the same ``Daemon``.

Test hook: ``MONITOR_FAILPOINT="stage:n"`` (read once at start-up) SIGKILLs the process the
n-th time a step reaches ``stage`` (see ``Failpoint``); crash tests use it to kill the daemon
between any two effects. Unset (the default), it costs one ``is None`` test per stage.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import hmac
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from monitor import aggregates
from monitor.aggregates import BucketState, TrafficFeed
from monitor.config import Config, load_config
from monitor.errors import BrokerUnavailable, ConfigError, RejectReason, StoreError
from monitor.estimator import EstimatorService
from monitor.logs import setup_logging
from monitor.records import RawRecord, Reject, deadletter_value, decode_labels, decode_scored
from monitor.sampler import (
    AuditRequest,
    PartKey,
    SamplerService,
    request_id_for,
    request_token,
)
from monitor.snapshot import Snapshot
from monitor.store import Store

if TYPE_CHECKING:
    from monitor.alertmanager import AlertmanagerPusher
    from monitor.exporter import Exporter

log = logging.getLogger(__name__)

TP = tuple[str, int]
_TOPIC_PARTITION = attrgetter("topic", "partition")
ROLES = ("all", "sampler", "estimator")
SNAPSHOT_EVERY_S = 1.0  # snapshots at most this often...
SNAPSHOT_LABELS_S = 0.2  # ...or this often when labels arrived
FLUSH_TIMEOUT_S = 30.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
PROBE_EVERY_S = 2.0  # how often the broker is asked for end offsets (liveness, lag)
PROBE_TIMEOUT_S = 2.0
STALL_S = 3.0  # an iteration longer than poll + probe timeouts + this is a stall (not ready)
WATCH_EVERY_S = 1.0


class Source(Protocol):
    """What the loop needs from a consumer (``monitor.kafka_io``)."""

    def poll(self, max_records: int, timeout_s: float) -> list[RawRecord]: ...  # noqa: D102
    def commit(self, offsets: Mapping[TP, int]) -> None: ...  # noqa: D102
    def seek(self, offsets: Mapping[TP, int]) -> None: ...  # noqa: D102
    def committed(self) -> dict[TP, int]: ...  # noqa: D102
    def lag(self) -> dict[TP, int]: ...  # noqa: D102
    def assigned(self) -> bool: ...  # noqa: D102
    def caught_up(self, topics: Collection[str]) -> bool: ...  # noqa: D102
    def partitions_for(self, topic: str) -> int: ...  # noqa: D102
    def probe(self, timeout_s: float) -> None: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


class Sink(Protocol):
    """What the loop needs from a producer (``monitor.kafka_io``)."""

    def produce(  # noqa: D102
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None: ...
    def flush(self, timeout_s: float) -> None: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102


class Metrics(Protocol):
    """The exporter facade (``monitor.exporter.Exporter``) as the loop uses it."""

    def publish(self, snapshot: Snapshot) -> None: ...  # noqa: D102
    def count_records(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_requests(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def count_labels(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def observe_label_latency(self, per_model: Mapping[str, Sequence[float]]) -> None: ...  # noqa: D102
    def count_rejects(self, per_reason: Mapping[RejectReason, int]) -> None: ...  # noqa: D102
    def count_segments_folded(self, per_model: Mapping[str, int]) -> None: ...  # noqa: D102
    def observe_batch(self, seconds: float) -> None: ...  # noqa: D102
    def set_lag(self, topic: str, partition: int, lag: int) -> None: ...  # noqa: D102
    def set_ready(self, ready: bool) -> None: ...  # noqa: D102


class Failpoint:
    """Test hook: run ``action`` (default: SIGKILL this process) at the n-th hit of a stage.

    Stages of a step, in order: ``decode`` (records polled, nothing done), ``produce``
    (requests and dead letters queued, not flushed), ``flush`` (acknowledged by the broker,
    state not written), ``store`` (inside the store transaction, before COMMIT) and ``commit``
    (after the Kafka offset commit). Only steps that consumed or changed something count.
    """

    ENV = "MONITOR_FAILPOINT"
    STAGES = ("decode", "produce", "flush", "store", "commit")

    def __init__(self, stage: str, n: int, action: Callable[[], None] | None = None) -> None:
        if stage not in self.STAGES or n < 1:
            msg = f"{self.ENV}: expected STAGE:N with STAGE in {', '.join(self.STAGES)} and N >= 1"
            raise ConfigError(msg)
        self.stage = stage
        self.n = n
        self.count = 0
        self.action = action or (lambda: os.kill(os.getpid(), signal.SIGKILL))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Failpoint | None:
        """The failpoint named by ``MONITOR_FAILPOINT`` ("stage:n"), None when unset."""
        spec = environ.get(cls.ENV, "")
        if not spec:
            return None
        stage, _, n = spec.partition(":")
        try:
            count = int(n or "1")
        except ValueError:
            count = 0
        return cls(stage, count)

    def hit(self, stage: str) -> None:
        """Count one passage through ``stage``; act on the n-th."""
        if stage == self.stage:
            self.count += 1
            if self.count == self.n:
                self.action()


Connect = Callable[[Callable[[], Mapping[TP, int]]], tuple[Source, Sink]]


def split_poll(
    raw: Sequence[RawRecord],
) -> tuple[dict[str, list[RawRecord]], dict[TP, int], dict[TP, int]]:
    """A poll's records by topic, and per topic-partition its first and its next offset.

    A poll holds runs of records of one topic-partition in offset order: grouped by run, not
    by record.
    """
    by_topic: dict[str, list[RawRecord]] = collections.defaultdict(list)
    first: dict[TP, int] = {}
    nxt: dict[TP, int] = {}
    for (t, p), run in itertools.groupby(raw, _TOPIC_PARTITION):
        recs = list(run)
        by_topic[t].extend(recs)
        first.setdefault((t, p), recs[0].offset)
        nxt[(t, p)] = max(nxt.get((t, p), 0), recs[-1].offset + 1)
    return by_topic, first, nxt


def count_step(
    metrics: Metrics,
    records: Mapping[str, int],
    requested: Mapping[str, int],
    labels: Mapping[str, int],
    rejects: Sequence[Reject],
) -> None:
    """Add one step's scored records, requests, accepted labels and rejects to the counters."""
    if records:
        metrics.count_records(records)
    if requested:
        metrics.count_requests(requested)
    if labels:
        metrics.count_labels(labels)
    if rejects:
        metrics.count_rejects(collections.Counter(r.reason for r in rejects))


def _reason(exc: Exception) -> RejectReason:
    """``malformed_json`` for bytes that are not JSON, else ``bad_type`` (JSON, wrong shape)."""
    if type(exc).__name__ in ("JSONDecodeError", "UnicodeDecodeError"):
        return RejectReason.MALFORMED_JSON
    return RejectReason.BAD_TYPE


def _decode_requests(
    records: Sequence[RawRecord], config: Config
) -> tuple[list[AuditRequest], list[Reject]]:
    """Requests read back from the requests topic; only those this deployment could issue.

    A request must name a configured model and carry the id ``blake2b(salt|model|id)``, and,
    with ``labels.token_secret`` set, the HMAC token of that id: a writer to the requests
    topic cannot make the estimator await (or accept labels for) requests it made up.
    """
    ok: list[AuditRequest] = []
    bad: list[Reject] = []
    secret = config.label_token_secret
    for r in records:
        try:
            req = AuditRequest.from_json(r.value or b"")
        except (ValueError, OverflowError, RecursionError) as exc:
            bad.append(Reject(_reason(exc), f"not an audit request: {exc}"[:200], r))
            continue
        if req.model not in config.models or req.request_id != request_id_for(
            config.salt, req.model, req.id
        ):
            detail = "request not issued by this deployment (model, id or salt differ)"
            bad.append(Reject(RejectReason.UNKNOWN_REQUEST, detail, r))
        elif secret and not hmac.compare_digest(
            (req.token or "").encode("utf-8", "surrogatepass"),
            request_token(secret, req.request_id).encode("ascii"),
        ):
            bad.append(Reject(RejectReason.BAD_TOKEN, "request token does not match", r))
        else:
            ok.append(req)
    return ok, bad


def _decode_states(
    records: Sequence[RawRecord],
) -> tuple[list[tuple[PartKey, BucketState | None]], list[Reject]]:
    """Bucket states read from the aggregates topic (malformed ones are rejected)."""
    ok: list[tuple[PartKey, BucketState | None]] = []
    bad: list[Reject] = []
    for r in records:
        try:
            ok.append(aggregates.decode(r.key, r.value))
        except (ValueError, OverflowError, RecursionError) as exc:
            bad.append(Reject(_reason(exc), f"not an aggregates state: {exc}"[:200], r))
    return ok, bad


class Engine:
    """The sampler, estimator and store of one daemon, driven one poll at a time.

    ``role="all"`` (the default) reads the scored, requests and labels topics and runs both the
    sampler and the estimator. ``role="estimator"`` reads the requests, labels and aggregates
    topics instead: the traffic comes from samplers running elsewhere (``monitor.sampler_role``)
    as bucket states, turned into exact deltas by a ``TrafficFeed`` stored with the rest.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
        on_snapshot: Sequence[Callable[[Snapshot], None]] = (),
        *,
        failpoint: Failpoint | None = None,
        role: str = "all",
    ) -> None:
        if role not in ("all", "estimator"):
            msg = f"an Engine runs the all or estimator role, not {role!r}"
            raise ValueError(msg)
        self.config = config
        self.role = role
        self.store = store
        self.failpoint = failpoint
        if failpoint is not None:
            store.before_commit = lambda: failpoint.hit("store")
        self.metrics = metrics
        self.clock = clock
        self.on_snapshot = list(on_snapshot)
        self.n_partitions = 1
        self._last_snapshot = -1e18
        self._dirty = True
        self._capped: set[str] = set()  # models whose segment limit was reported
        self._load()

    def _load(self) -> None:
        st = self.store.load()
        self.sampler = SamplerService(
            self.config,
            n_partitions=self.n_partitions,
            traffic=st.ptraffic,
            controls=st.controls,
            segments=st.segments,
        )
        self.estimator = EstimatorService(
            self.config,
            self.clock,
            traffic=st.straffic,
            requests=st.requests,
            parked=st.parked,
            watermarks=st.watermarks,
        )
        self.feed = TrafficFeed(st.feed) if self.role == "estimator" else None
        self._dirty = True

    @property
    def topics(self) -> list[str]:
        """The topics this role reads."""
        t = self.config.kafka.topics
        first = t.scored if self.feed is None else t.aggregates
        return [first, t.requests, t.labels]

    def offsets(self) -> dict[TP, int]:
        """Where each partition resumes: the offsets stored with the state."""
        return self.store.offsets()

    def set_partitions(self, n: int) -> None:
        """The scored topic's partition count (the budget is split evenly across them)."""
        self.n_partitions = max(1, n)
        self.sampler.n_partitions = self.n_partitions

    def rollback(self, source: Source) -> None:
        """Forget in-memory changes since the last transaction and rewind the consumer."""
        self._load()
        source.seek(self.store.offsets())

    def step(self, source: Source, sink: Sink) -> int:
        """Poll once and process; return the number of records consumed."""
        cfg = self.config
        topics = cfg.kafka.topics
        raw = source.poll(cfg.kafka.max_poll_records, cfg.kafka.poll_timeout_ms / 1000.0)
        started = time.monotonic()
        now = self.clock()
        fp = self.failpoint
        if fp is not None and raw:
            fp.hit("decode")
        by_topic, _, offsets = split_poll(raw)
        rejects: list[Reject] = []
        produced: list[AuditRequest] = []
        records: dict[str, int] = {}
        requested: dict[str, int] = {}
        if by_topic[topics.scored]:
            batch, bad = decode_scored(by_topic[topics.scored], cfg, now=now)
            rejects.extend(bad)
            res = self.sampler.process(batch)
            produced, records, requested = res.requests, res.records, res.requested
            if res.folded:
                self.metrics.count_segments_folded(res.folded)
            for model in sorted(set(res.folded) - self._capped):
                self._capped.add(model)
                log.warning(
                    "segment limit reached: new segments are reported as __other__",
                    extra={
                        "event": "segments_capped",
                        "model": model,
                        "limit": cfg.max_segments_per_model,
                    },
                )
            self.estimator.apply_traffic(res.traffic)
            rejects.extend(self.estimator.upsert_requests(produced))
        if self.feed is not None and by_topic[topics.aggregates]:
            states, bad = _decode_states(by_topic[topics.aggregates])
            rejects.extend(bad)
            self.estimator.apply_traffic(self.feed.apply(states))
        if by_topic[topics.requests]:
            known, bad = _decode_requests(by_topic[topics.requests], cfg)
            rejects.extend(bad)
            rejects.extend(self.estimator.upsert_requests(known))
        if by_topic[topics.labels]:
            labels, bad = decode_labels(by_topic[topics.labels], now=now)
            rejects.extend(bad)
            rejects.extend(self.estimator.handle_labels(labels))
        lag = source.lag()
        # a parked label is unknown only once every request it could match has been seen:
        # the scored topic (our own requests) and the requests topic (other samplers') are read
        caught_up = source.caught_up((topics.scored, topics.requests))
        rejects.extend(self.estimator.expire_parked(requests_caught_up=caught_up))
        sampler_changes = self.sampler.take_changes()
        estimator_changes = self.estimator.take_changes()
        feed_changes = None
        if self.feed is not None:
            for model, horizon in estimator_changes.prune.items():
                self.feed.prune(model, horizon)
            feed_changes = self.feed.take_changes()
        changed = bool(
            raw
            or rejects
            or estimator_changes.parked_removed
            or estimator_changes.requests
            or sampler_changes.controls
        )
        if changed:
            for req in produced:
                sink.produce(topics.requests, req.key, req.to_json())
            for rej in rejects:
                sink.produce(topics.deadletter, rej.record.key, deadletter_value(rej))
            if fp is not None:
                fp.hit("produce")
            sink.flush(FLUSH_TIMEOUT_S)
            if fp is not None:
                fp.hit("flush")
            self.store.commit(sampler_changes, estimator_changes, offsets, feed_changes)
            self._dirty = True
            try:
                source.commit(offsets)
            except BrokerUnavailable as exc:
                # the store holds the offsets; Kafka's copy catches up on the next commit
                log.warning(
                    "offset commit failed", extra={"event": "commit_failed", "error": str(exc)}
                )
            if fp is not None:
                fp.hit("commit")
        labels_ok = self.estimator.take_label_counts()
        count_step(self.metrics, records, requested, labels_ok, rejects)
        latencies = self.estimator.take_label_latencies()
        if latencies:
            self.metrics.observe_label_latency(latencies)
        for (t, p), v in lag.items():
            self.metrics.set_lag(t, p, v)
        if raw:
            self.metrics.observe_batch(time.monotonic() - started)
            log.info(
                "batch processed",
                extra={
                    "event": "batch_processed",
                    "records": len(raw),
                    "scored": len(by_topic[topics.scored]),
                    "requests": len(produced),
                    "labels": sum(labels_ok.values()),
                    "rejected": len(rejects),
                    "offsets": {f"{t}/{p}": o for (t, p), o in sorted(offsets.items())},
                },
            )
        self.maybe_publish(force=bool(labels_ok))
        return len(raw)

    def shutdown(self, source: Source | None, sink: Sink | None) -> None:
        """Before closing: publish the last state (skipped when nothing changed)."""
        self.maybe_publish(force=True)

    def maybe_publish(self, force: bool = False) -> Snapshot | None:
        """Publish a snapshot of changed state: every ~1 s, sooner (0.2 s) after new labels."""
        t = time.monotonic()
        wait = SNAPSHOT_LABELS_S if force else SNAPSHOT_EVERY_S
        if not self._dirty or t - self._last_snapshot < wait:
            return None
        snap = self.estimator.snapshot()
        self.metrics.publish(snap)
        for hook in self.on_snapshot:
            try:
                hook(snap)
            except Exception:  # a faulty consumer of snapshots must not stop the data path
                log.exception("snapshot hook failed", extra={"event": "snapshot_hook_failed"})
        # many segments make a snapshot costly: keep it under ~10% of the time
        self._last_snapshot = t + 9.0 * (time.monotonic() - t)
        self._dirty = False
        return snap


GC_GEN0_THRESHOLD = 50_000  # allocations between young-generation collections (default 700)


def tune_gc() -> None:
    """Fewer garbage collections while batches are decoded (call once, after start-up).

    A poll decodes thousands of records into dicts at once, so with the default threshold
    (a collection every 700 container allocations) the collector runs many times per poll,
    and every run walks the batch's live objects again; a full collection also walks every
    object the imports created. Freezing what start-up created and collecting the young
    generation every 50,000 allocations cuts the daemon's decode CPU by about a third
    (``benchmarks/throughput.py``); the records are acyclic (freed by reference counting),
    so memory does not grow by more than one young generation.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 10, 10)


class Loop(Protocol):
    """What ``Daemon`` drives: an ``Engine`` or a ``monitor.sampler_role.SamplerEngine``."""

    config: Config
    metrics: Metrics

    def offsets(self) -> Mapping[TP, int]: ...  # noqa: D102
    def set_partitions(self, n: int) -> None: ...  # noqa: D102
    def step(self, source: Source, sink: Sink) -> int: ...  # noqa: D102
    def rollback(self, source: Source) -> None: ...  # noqa: D102
    def shutdown(self, source: Source | None, sink: Sink | None) -> None: ...  # noqa: D102


class Daemon:
    """Connection management around an engine: retry, backoff, readiness, shutdown."""

    def __init__(self, engine: Loop, connect: Connect, stop: threading.Event | None = None) -> None:
        self.engine = engine
        self.connect = connect
        self.stop = stop or threading.Event()
        self._state = "starting"
        self._beat = time.monotonic()  # end of the last successful iteration
        # a step blocked on the broker (e.g. a flush waiting FLUSH_TIMEOUT_S) is not ready
        self.stall_s = engine.config.kafka.poll_timeout_ms / 1000.0 + PROBE_TIMEOUT_S + STALL_S

    def _watch(self) -> None:
        """Watchdog thread: not ready (logged once) while no iteration completes in time."""
        while not self.stop.wait(WATCH_EVERY_S):
            stalled = time.monotonic() - self._beat
            if self._state == "up" and stalled > self.stall_s:
                self.engine.metrics.set_ready(False)
                self._set_state("down", f"no step completed for {stalled:.0f} s")

    def _set_state(self, state: str, error: str = "") -> None:
        if state == self._state:
            return
        self._state = state
        extra: dict[str, Any] = {"event": f"broker_{state}"}
        if error:
            extra["error"] = error
        if state == "up":
            log.info("broker connected", extra=extra)
        else:
            log.warning("broker unavailable, retrying with backoff", extra=extra)

    def run(self) -> None:
        """Loop until ``stop`` is set; never exits on broker errors."""
        engine = self.engine
        source: Source | None = None
        sink: Sink | None = None
        backoff = BACKOFF_MIN_S
        last_probe = -1e18
        self._beat = time.monotonic()
        watchdog = threading.Thread(target=self._watch, name="monitor-watchdog", daemon=True)
        watchdog.start()
        while not self.stop.is_set():
            try:
                if source is None or sink is None:
                    source, sink = self.connect(engine.offsets)
                    engine.set_partitions(source.partitions_for(engine.config.kafka.topics.scored))
                engine.step(source, sink)
                now = time.monotonic()
                if self._state != "up" or now - last_probe >= PROBE_EVERY_S:
                    # an idle consumer does not notice a lost broker: ask it something
                    source.probe(PROBE_TIMEOUT_S)
                    engine.set_partitions(source.partitions_for(engine.config.kafka.topics.scored))
                    last_probe = now
                self._beat = time.monotonic()
                self._set_state("up")
                engine.metrics.set_ready(source.assigned())
                backoff = BACKOFF_MIN_S
            except BrokerUnavailable as exc:
                self._set_state("down", str(exc))
                engine.metrics.set_ready(False)
                if source is not None:
                    engine.rollback(source)
                self.stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
        engine.shutdown(source, sink)
        engine.metrics.set_ready(False)
        if sink is not None:
            sink.close()
        if source is not None:
            source.close()
        log.info("stopped", extra={"event": "stopped"})


def kafka_connect(
    config: Config,
    topics: Sequence[str] | None = None,
    group_id: str | None = None,
    on_assigned: Callable[[Sequence[TP]], None] | None = None,
) -> Connect:
    """A ``Connect`` that opens the real consumer and producer of ``kafka.client_library``."""

    def connect(stored: Callable[[], Mapping[TP, int]]) -> tuple[Source, Sink]:
        source_class: Callable[..., Source]
        sink_class: Callable[[Config], Sink]
        if config.kafka.client_library == "confluent-kafka":
            from monitor.confluent_io import ConfluentSink, ConfluentSource  # noqa: PLC0415

            source_class, sink_class = ConfluentSource, ConfluentSink
        else:
            from monitor.kafka_io import KafkaSink, KafkaSource  # noqa: PLC0415 - shell only

            source_class, sink_class = KafkaSource, KafkaSink
        sink = sink_class(config)
        try:
            source = source_class(
                config, stored, topics=topics, group_id=group_id, on_assigned=on_assigned
            )
        except BrokerUnavailable:
            sink.close()
            raise
        return source, sink

    return connect


# ---------------------------------------------------------------------- command line
def register(sub: Any) -> None:
    """Add ``run`` and ``check-config`` to the ``monitor`` command line."""
    run = sub.add_parser(
        "run",
        help="run the streaming daemon",
        description="Consume scored traffic, request audits, join labels and export estimates.",
    )
    run.add_argument("--config", type=Path, required=True, help="YAML configuration file")
    run.add_argument("--bootstrap-servers", help="Kafka bootstrap servers, comma-separated")
    run.add_argument("--metrics-port", type=int, help="port of /metrics, /healthz, /readyz")
    run.add_argument("--data-dir", type=Path, help="directory of the state store")
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    run.add_argument(
        "--create-topics", action="store_true", help="create missing topics at start-up"
    )
    run.add_argument(
        "--role",
        choices=ROLES,
        default="all",
        help="all: one process does everything (default); sampler: audit decisions for a share "
        "of the scored partitions (run several, no data directory); estimator: labels, "
        "estimates, metrics and alerts from the samplers' aggregates (run one)",
    )
    run.set_defaults(func=_run)
    check = sub.add_parser("check-config", help="validate a configuration file and exit")
    check.add_argument("--config", type=Path, required=True, help="YAML configuration file")
    check.set_defaults(func=_check)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "bootstrap_servers": getattr(args, "bootstrap_servers", None),
        "metrics_port": getattr(args, "metrics_port", None),
        "data_dir": getattr(args, "data_dir", None),
    }


def _check(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    models = ", ".join(sorted(config.models))
    print(f"{args.config}: OK (models: {models})")
    return 0


def _run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    config = load_config(args.config, _overrides(args))
    from monitor.exporter import Exporter  # noqa: PLC0415 - prometheus only in the shell

    failpoint = Failpoint.from_env(os.environ)  # test hook, see the module docstring
    stop = _stop_on_signals()
    exporter = Exporter(config)
    with contextlib.ExitStack() as cleanup:  # closes in reverse: pusher, store, metrics
        cleanup.callback(exporter.stop)
        wire = _sampler_role if args.role == "sampler" else _store_role
        engine, connect, about = wire(config, exporter, failpoint, args.role, cleanup)
        try:
            exporter.start_http()
            if args.create_topics:
                _create_topics(config, stop)
            if failpoint is not None:
                log.warning(
                    "test failpoint armed: this process will kill itself",
                    extra={"event": "failpoint_armed", "stage": failpoint.stage, "n": failpoint.n},
                )
            log.info(
                "started",
                extra={
                    "event": "started",
                    "role": args.role,
                    "metrics_port": exporter.port,
                    **about,
                },
            )
            tune_gc()
            Daemon(engine, connect, stop).run()
        except (ConfigError, StoreError):
            raise  # one clear line from the command line (exit 2), e.g. a full data directory
        except Exception:
            log.critical("crashed", exc_info=True, extra={"event": "crashed"})
            return 1
    return 0


Wiring = tuple[Loop, Connect, dict[str, Any]]  # the engine, its connection, what to log


def _store_role(
    config: Config,
    exporter: Exporter,
    failpoint: Failpoint | None,
    role: str,
    cleanup: contextlib.ExitStack,
) -> Wiring:
    """``--role all`` and ``estimator``: the state store, alerts and the optional push."""
    store = Store(config.data_dir)
    cleanup.callback(store.close)
    pusher = _alertmanager_pusher(config, exporter)
    if pusher is not None:
        cleanup.callback(pusher.close)  # delivers what is pending (bounded)
    engine = Engine(
        config,
        store,
        exporter,
        on_snapshot=[_alert_hook(config, store, exporter, pusher)],
        failpoint=failpoint,
        role=role,
    )
    about = {"data_dir": str(config.data_dir), "models": sorted(config.models)}
    return engine, kafka_connect(config, engine.topics), about


def _sampler_role(
    config: Config,
    exporter: Exporter,
    failpoint: Failpoint | None,
    role: str,
    cleanup: contextlib.ExitStack,
) -> Wiring:
    """``--role sampler``: no data directory, no estimates; state on the aggregates topic."""
    from monitor.kafka_io import read_topic  # noqa: PLC0415 - shell only
    from monitor.sampler_role import SamplerEngine  # noqa: PLC0415 - it imports this module

    topics = config.kafka.topics
    engine = SamplerEngine(
        config,
        exporter,
        lambda select: read_topic(config, topics.aggregates, select),
        failpoint=failpoint,
    )
    group = config.kafka.sampler_group_id
    connect = kafka_connect(config, [topics.scored], group, engine.on_assigned)
    return engine, connect, {"group_id": group}


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loop finishes its step, closes and exits 0."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _alertmanager_pusher(config: Config, exporter: Exporter) -> AlertmanagerPusher | None:
    """The push of the daemon's own alerts to ``alertmanager.url``; None when not configured."""
    if config.alertmanager.url is None:
        return None
    from monitor.alertmanager import AlertmanagerPusher  # noqa: PLC0415

    return AlertmanagerPusher(
        config.alertmanager.url,
        on_error=exporter.count_alertmanager_errors,
        timeout_s=config.alertmanager.timeout_s,
    )


def _alert_hook(
    config: Config, store: Store, exporter: Exporter, pusher: AlertmanagerPusher | None = None
) -> Callable[[Snapshot], None]:
    """Evaluate alerts on each snapshot, export and store them, and push them if configured.

    ``pusher.push`` only queues the statuses for its own thread: the data path never waits
    for Alertmanager.
    """
    from monitor.alerts import AlertEvaluator  # noqa: PLC0415

    evaluator = AlertEvaluator(config)
    saved = store.get_json("alerts")
    if isinstance(saved, dict):
        evaluator.restore(saved)

    def hook(snapshot: Snapshot) -> None:
        statuses = evaluator.evaluate(snapshot)
        exporter.publish_alerts(statuses)
        store.put_json("alerts", evaluator.state())
        if pusher is not None:
            pusher.push(statuses)

    return hook


def _create_topics(config: Config, stop: threading.Event) -> None:
    from monitor.kafka_io import create_topics  # noqa: PLC0415 - shell only

    backoff = BACKOFF_MIN_S
    while not stop.is_set():
        try:
            created = create_topics(config)
        except BrokerUnavailable as exc:
            log.warning(
                "cannot create topics yet", extra={"event": "topics_retry", "error": str(exc)}
            )
            stop.wait(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)
            continue
        log.info("topics ready", extra={"event": "topics_ready", "new_topics": created})
        return
