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
notices an iteration that does not finish within the poll and probe timeouts + 3 s). A state
store that cannot be written (a full volume) is retried the same way: the step's transaction
rolled back, nothing is committed to Kafka past it, and the replay once it can be written makes
the same requests (the step's requests are sent again at each attempt, the same bytes). A store
that cannot be opened or read at start-up is an error of the command (exit 2).
SIGTERM/SIGINT: finish the step, close, exit 0.

Roles (``--role``): ``all`` (default) runs all of the above in one process; ``estimator`` reads
the samplers' bucket states from the aggregates topic instead of the scored topic
(``monitor.core.aggregates``); ``sampler`` is ``monitor.runtime.sampler_role``, driven by the
same ``Daemon``.

Test hook: ``MONITOR_FAILPOINT="stage:n"`` (read once at start-up) SIGKILLs the process the
n-th time a step reaches ``stage`` (see ``Failpoint``); crash tests use it to kill the daemon
between any two effects. Unset (the default), it costs one ``is None`` test per stage.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import yaml

from monitor.bridges.ls_config import parse_labelstudio
from monitor.config.kafka_client import unused_security_settings
from monitor.config.load import OVERRIDES, load_config
from monitor.config.schema import Config
from monitor.core.snapshot import Snapshot
from monitor.errors import BrokerUnavailable, ConfigError, StoreError, TopicsNotReady
from monitor.io.store import Store, data_dir_problem, pin_mismatches
from monitor.logs import LOG_LEVELS, log_level, setup_logging
from monitor.runtime.engine import Engine, store_pins
from monitor.runtime.failpoint import Failpoint
from monitor.runtime.ports import TP, Connect, Loop, Sink, Source
from monitor.runtime.sampler_role import SamplerEngine

if TYPE_CHECKING:
    from monitor.io.alertmanager import AlertmanagerPusher
    from monitor.io.exporter import Exporter

log = logging.getLogger(__name__)

ROLES = ("all", "sampler", "estimator")
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
PROBE_EVERY_S = 2.0  # how often the broker is asked for end offsets (liveness, lag)
PROBE_TIMEOUT_S = 2.0
STALL_S = 3.0  # an iteration longer than poll + probe timeouts + this is a stall (not ready)
WATCH_EVERY_S = 1.0
UNASSIGNED_WARN_S = 60.0  # connected but given no partition this long: say so (once)


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


class Daemon:
    """Connection management around an engine: retry, backoff, readiness, shutdown."""

    def __init__(self, engine: Loop, connect: Connect, stop: threading.Event | None = None) -> None:
        self.engine = engine
        self.connect = connect
        self.stop = stop or threading.Event()
        self._state = "starting"
        self._beat = time.monotonic()  # end of the last successful iteration
        self._unassigned_since: float | None = None  # start of the current unassigned spell
        self._warned_unassigned = False
        self._shared_since: float | None = None  # start of the current spell of shared topics
        self._shared: list[str] = []  # reported: the topics another consumer shares
        self._stalled = False  # "down" logged by the watchdog: the step's own error not yet
        # a step blocked on the broker (e.g. a flush waiting FLUSH_TIMEOUT_S) is not ready
        self.stall_s = engine.config.kafka.poll_timeout_ms / 1000.0 + PROBE_TIMEOUT_S + STALL_S

    def _watch(self) -> None:
        """Watchdog thread: not ready (logged once) while no iteration completes in time."""
        while not self.stop.wait(WATCH_EVERY_S):
            stalled = time.monotonic() - self._beat
            if self._state == "up" and stalled > self.stall_s:
                self.engine.metrics.set_ready(False)
                self._set_state("down", f"no step completed for {stalled:.0f} s")
                self._stalled = True

    def _set_state(self, state: str, error: str = "") -> None:
        """Log a change of state: ``up``, ``down``, ``topics`` or ``store``.

        ``down``: the broker (``BrokerUnavailable``); ``topics``: ``TopicsNotReady``; ``store``:
        the state store refused a write or a read (``StoreError``).
        """
        if state == self._state:
            return
        was, self._state = self._state, state
        extra: dict[str, Any] = {"error": error} if error else {}
        if state == "up" and was == "store":
            log.info("state store written again", extra={"event": "store_available", **extra})
        elif state == "up":
            log.info("broker connected", extra={"event": "broker_up", **extra})
        elif state == "topics":
            log.error(
                "the topics need an operator's fix, retrying with backoff",
                extra={"event": "topics_not_ready", **extra},
            )
        elif state == "store":
            fix = (
                "a full volume: free space on it or grow it; a read-only or vanished data "
                "directory: make it writable again; the daemon resumes by itself from the last "
                "stored step"
            )
            log.error(
                "the state store failed, retrying with backoff",
                extra={"event": "store_unavailable", **extra, "fix": fix},
            )
        else:
            log.warning(
                "broker unavailable, retrying with backoff", extra={"event": "broker_down", **extra}
            )

    def _note_assignment(self, assigned: bool) -> None:
        """Log once when the group has given this process no partition for a while.

        While unassigned (joining the group, or a standby when the group has more members than
        the topics have partitions) the probe still asks the broker for an end offset, so an
        outage is noticed as when assigned; this warning says why ``/readyz`` stays 503
        meanwhile. A sampler is then a standby: ready while the broker answers (a rolling update
        waits for its new pods' readiness, which a standby would never reach), and the message
        is information, not a warning.
        """
        if assigned:
            self._unassigned_since, self._warned_unassigned = None, False
        elif self._unassigned_since is None:
            self._unassigned_since = time.monotonic()
        elif (
            not self._warned_unassigned
            and time.monotonic() - self._unassigned_since > UNASSIGNED_WARN_S
        ):
            self._warned_unassigned = True
            log.log(
                logging.INFO if self.engine.standby_ok else logging.WARNING,
                "no partition assigned",
                extra={
                    "event": "unassigned",
                    "after_s": UNASSIGNED_WARN_S,
                    "hint": "the consumer group gave this process none of its topics' partitions: "
                    "normal for a sampler when the group has more samplers than the scored topic "
                    "has partitions (a standby); otherwise another process may consume with the "
                    "same group id: describe the group (kafka-consumer-groups.sh --describe "
                    "--group GROUP) and read the broker's log",
                },
            )

    def _note_shared(self, source: Source) -> None:
        """Report once when the group shares this engine's topics with another consumer.

        An engine (``--role all`` or ``estimator``) must read every partition of its topics:
        a second process started with the same group id took some of them, and each then
        estimated from part of the traffic, issued requests the other cannot join and
        dead-lettered its labels, both ready. A topic of which this process holds some
        partitions but not all for ``UNASSIGNED_WARN_S`` (a rebalance after partitions were
        added passes sooner) is logged as an error and ``/readyz`` says not ready until the
        group gives it every partition again. A topic of which it holds none is not seen here
        (the range assignor gives whole single-partition topics to one member: the other is
        ``unassigned``, above).
        """
        held = collections.Counter(t for t, _ in source.assignment())
        shared = sorted(
            f"{t} ({n} of {total} partitions)"
            for t, n in held.items()
            if n < (total := source.partitions_for(t))
        )
        if not shared:
            if self._shared:
                log.info("every partition assigned again", extra={"event": "partitions_whole"})
            self._shared_since, self._shared = None, []
            return
        if self._shared_since is None:
            self._shared_since = time.monotonic()
        if not self._shared and time.monotonic() - self._shared_since > UNASSIGNED_WARN_S:
            self._shared = shared
            log.error(
                "another consumer shares this monitor's partitions",
                extra={
                    "event": "partitions_shared",
                    "topics": shared,
                    "hint": "--role all and --role estimator read every partition of their "
                    "topics: another process consumes with the same group id (describe it: "
                    "kafka-consumer-groups.sh --describe --group GROUP); stop it, or give it its "
                    "own kafka.group_id; to split the scored traffic over processes run them as "
                    "--role sampler beside one --role estimator",
                },
            )

    @staticmethod
    def _probe(source: Source) -> TopicsNotReady | None:
        """Probe the broker; a subscribed topic it lacks or refuses is returned, not raised.

        Raised, it rolled back the step that had just gone through and held every later one
        for a backoff of up to 10 s: a deleted labels topic held up the scored traffic too.
        """
        try:
            source.probe(PROBE_TIMEOUT_S)
        except TopicsNotReady as exc:
            return exc
        return None

    def run(self) -> None:
        """Loop until ``stop`` is set; never exits on broker or state store errors."""
        engine = self.engine
        source: Source | None = None
        sink: Sink | None = None
        backoff = BACKOFF_MIN_S
        last_probe = -1e18
        missing: TopicsNotReady | None = None  # a topic the last probe found missing or refused
        # a step failed and the state it changed in memory could not be read back from the store
        rollback_due = False
        self._beat = time.monotonic()
        watchdog = threading.Thread(target=self._watch, name="monitor-watchdog", daemon=True)
        watchdog.start()
        while not self.stop.is_set():
            try:
                if rollback_due and source is not None:
                    engine.rollback(source)
                    rollback_due = False
                if source is None or sink is None:
                    source, sink = self.connect(engine.offsets)
                    engine.set_partitions(source.partitions_for(engine.config.kafka.topics.scored))
                engine.step(source, sink)
                now = time.monotonic()
                if self._state != "up" or now - last_probe >= PROBE_EVERY_S:
                    # an idle consumer does not notice a lost broker: ask it something
                    missing = self._probe(source)
                    engine.set_partitions(source.partitions_for(engine.config.kafka.topics.scored))
                    if not engine.standby_ok:
                        self._note_shared(source)
                    last_probe = now
                self._beat = time.monotonic()
                assigned = source.assigned()
                if missing is None:
                    self._set_state("up")
                    self._note_assignment(assigned)
                else:  # the step went through: the topics that exist are read on, not retried
                    self._set_state("topics", str(missing))
                whole = assigned and not self._shared
                engine.metrics.set_ready(missing is None and (whole or engine.standby_ok))
                backoff = BACKOFF_MIN_S
            except (BrokerUnavailable, StoreError) as exc:
                if self._stalled and self._state == "down":
                    # the watchdog said only that the step hung; this says why (once)
                    log.warning(
                        "the stalled step failed", extra={"event": "step_failed", "error": str(exc)}
                    )
                self._stalled = False
                self._set_state(_state_of(exc), str(exc))
                engine.metrics.set_ready(False)
                if source is not None:
                    try:
                        engine.rollback(source)
                        rollback_due = False
                    except StoreError:  # a refit due on reload cannot be stored either
                        rollback_due = True
                self.stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
        if not rollback_due:  # never publish what a step that was not stored changed
            engine.shutdown(source, sink)
        engine.metrics.set_ready(False)
        if sink is not None:
            sink.close()
        if source is not None:
            source.close()
        log.info("stopped", extra={"event": "stopped"})


def _state_of(exc: BrokerUnavailable | StoreError) -> str:
    """The daemon's state after a failed step: ``store``, ``topics`` or ``down``."""
    if isinstance(exc, StoreError):
        return "store"
    return "topics" if isinstance(exc, TopicsNotReady) else "down"


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
            from monitor.io.confluent_io import ConfluentSink, ConfluentSource  # noqa: PLC0415

            source_class, sink_class = ConfluentSource, ConfluentSink
        else:
            from monitor.io.kafka_io import KafkaSink, KafkaSource  # noqa: PLC0415 - shell only

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
    _add_config_arguments(run)
    run.add_argument("--log-level", default="INFO", type=log_level, help=", ".join(LOG_LEVELS))
    run.add_argument(
        "--create-topics",
        action="store_true",
        help="create missing topics at start-up (the requests and labels topics keep their "
        "records 30 days, or twice the label deadline if longer)",
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
    check = sub.add_parser(
        "check-config",
        help="validate a configuration file and exit",
        description="Validate the configuration as `monitor run` with the same flags reads it, "
        "and the data directory's pinned settings against it.",
    )
    _add_config_arguments(check)
    check.set_defaults(func=_check)


def _add_config_arguments(parser: Any) -> None:
    """``--config`` and the flags that win over the file (``run`` and ``check-config``)."""
    parser.add_argument("--config", type=Path, required=True, help="YAML configuration file")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers, comma-separated")
    parser.add_argument("--metrics-port", type=int, help="port of /metrics, /healthz, /readyz")
    parser.add_argument(
        "--metrics-address", help="address /metrics listens on (metrics.listen_address)"
    )
    parser.add_argument("--data-dir", type=Path, help="directory of the state store")
    parser.add_argument(
        "--group-instance-id",
        help="static group membership (kafka.client.group_instance_id): a stable id per process, "
        "e.g. the StatefulSet pod name; not for the samplers of a Deployment",
    )


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags that win over the file (``load_config``; run, check-config)."""
    return {key: getattr(args, key) for key in OVERRIDES}  # each one a flag of both commands


def _check(args: argparse.Namespace) -> int:
    config = load_config(args.config, config_overrides(args))
    models = ", ".join(sorted(config.models))
    queue = ""
    data = yaml.safe_load(args.config.read_text(encoding="utf-8"))  # valid YAML: loaded above
    if isinstance(data, Mapping) and data.get("labelstudio") is not None:
        parse_labelstudio(data, str(args.config))  # read by ``monitor queue labelstudio``
        queue = "; labelstudio: OK"
    key = "storage.data_dir" if args.data_dir is None else "--data-dir"
    if (unusable := data_dir_problem(config.data_dir, key)) is not None:
        # ``monitor run`` would stop on it; read-only, the pins said "cannot be read"
        print(f"{args.config}: error: {unusable}", file=sys.stderr)
        return 2
    stale = pin_mismatches(config.data_dir, store_pins(config))
    for problem in stale:
        print(f"{args.config}: error: {problem}", file=sys.stderr)
    if stale:
        return 2
    print(f"{args.config}: OK (models: {models}{queue})")
    if (unused := unused_security_settings(config.kafka.client)) is not None:
        print(f"{args.config}: warning: {unused}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    config = load_config(args.config, config_overrides(args))
    if args.create_topics:  # an error for a missing topic then says what this process does
        config = dataclasses.replace(
            config, kafka=dataclasses.replace(config.kafka, create_topics=True)
        )
    if (unused := unused_security_settings(config.kafka.client)) is not None:
        log.warning(unused, extra={"event": "client_settings_unused"})
    from monitor.io.exporter import Exporter  # noqa: PLC0415 - prometheus only in the shell

    failpoint = Failpoint.from_env(os.environ)  # test hook, see the module docstring
    stop = _stop_on_signals()
    exporter = Exporter(config)
    with contextlib.ExitStack() as cleanup:  # closes in reverse: pusher, store, metrics
        cleanup.callback(exporter.stop)
        wire = _sampler_wiring if args.role == "sampler" else _estimator_wiring
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
            raise  # one clear line from the command line (exit 2): a store it cannot open
        except Exception:
            log.critical("crashed", exc_info=True, extra={"event": "crashed"})
            return 1
    return 0


Wiring = tuple[Loop, Connect, dict[str, Any]]  # the engine, its connection, what to log


def _estimator_wiring(
    config: Config,
    exporter: Exporter,
    failpoint: Failpoint | None,
    role: str,
    cleanup: contextlib.ExitStack,
) -> Wiring:
    """``--role all`` and ``estimator``: the state store, alerts and the optional push."""
    store = Store(config.data_dir)
    cleanup.callback(store.close)
    reader = None
    if role == "estimator":  # the map versions published before (``Engine._recover``)
        from monitor.io.kafka_io import KafkaTopicReader  # noqa: PLC0415 - shell only

        reader = KafkaTopicReader(config, config.kafka.topics.aggregates)
        cleanup.callback(reader.close)
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
        aggregates=reader,
    )
    # the stored estimates and alert states at once: restarted while the broker is down, the
    # process must not leave them out of /metrics (Prometheus would resolve firing alerts)
    engine.maybe_publish()
    about = {"data_dir": str(config.data_dir), "models": sorted(config.models)}
    return engine, kafka_connect(config, engine.topics), about


def _sampler_wiring(
    config: Config,
    exporter: Exporter,
    failpoint: Failpoint | None,
    role: str,
    cleanup: contextlib.ExitStack,
) -> Wiring:
    """``--role sampler``: no data directory, no estimates; state on the aggregates topic."""
    from monitor.io.kafka_io import KafkaTopicReader  # noqa: PLC0415 - shell only

    topics = config.kafka.topics
    reader = KafkaTopicReader(config, topics.aggregates)
    cleanup.callback(reader.close)
    engine = SamplerEngine(config, exporter, reader, failpoint=failpoint)
    group = config.kafka.sampler_group_id
    connect = kafka_connect(config, [topics.scored], group, engine.on_assigned)
    return engine, connect, {"group_id": group}


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM, SIGINT or SIGHUP: the loop finishes its step, closes, exits 0.

    SIGHUP (a closed terminal; no configuration reload) ended the process at once otherwise.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    return stop


def _alertmanager_pusher(config: Config, exporter: Exporter) -> AlertmanagerPusher | None:
    """The push of the daemon's own alerts to ``alertmanager.url``; None when not configured."""
    if config.alertmanager.url is None:
        return None
    from monitor.io.alertmanager import AlertmanagerPusher  # noqa: PLC0415

    return AlertmanagerPusher(
        config.alertmanager.url,
        on_error=exporter.count_alertmanager_errors,
        timeout_s=config.alertmanager.timeout_s,
    )


def _alert_hook(
    config: Config, store: Store, exporter: Exporter, pusher: AlertmanagerPusher | None = None
) -> Callable[[Snapshot], None]:
    """Evaluate alerts on each snapshot, export and store them, and push them if configured.

    The state is written only when it differs from the last one written (or read at start-up):
    snapshots come about once a second while data flows, and most change no alert state.
    ``pusher.push`` only queues the statuses for its own thread: the data path never waits
    for Alertmanager.
    """
    from monitor.core.alerts import AlertEvaluator  # noqa: PLC0415

    evaluator = AlertEvaluator(config)
    saved = store.get_json("alerts")
    if isinstance(saved, dict):
        evaluator.restore(saved)
    written = saved  # the state as the store holds it

    def hook(snapshot: Snapshot) -> None:
        nonlocal written
        statuses = evaluator.evaluate(snapshot)
        exporter.publish_alerts(statuses)
        state = evaluator.state()
        if state != written:
            store.put_json("alerts", state)
            written = state
        if pusher is not None:
            pusher.push(statuses)

    return hook


def _create_topics(config: Config, stop: threading.Event) -> None:
    """``--create-topics``: create what is missing, retrying with backoff until the broker answers.

    Logged once per change, as the loop's states: the first failure, a failure for another
    reason, the success (with the attempts it took). A broker absent at start logged a
    ``topics_retry`` line on every attempt.
    """
    from monitor.io.kafka_io import create_topics  # noqa: PLC0415 - shell only

    backoff = BACKOFF_MIN_S
    attempts = 0
    logged = ""  # the error of the last ``topics_retry`` line
    while not stop.is_set():
        attempts += 1
        try:
            created = create_topics(config)
        except BrokerUnavailable as exc:
            if str(exc) != logged:
                logged = str(exc)
                log.warning(
                    "cannot create topics yet, retrying with backoff",
                    extra={"event": "topics_retry", "error": logged, "attempts": attempts},
                )
            stop.wait(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)
            continue
        log.info(
            "topics ready",
            extra={"event": "topics_ready", "new_topics": created, "attempts": attempts},
        )
        return
