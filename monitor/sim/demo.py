"""``monitor demo``: the whole system on this machine in about a minute and a half.

What runs (everything on 127.0.0.1, everything stopped at the end, even on Ctrl-C or error):

1. a Tansu Kafka-protocol broker (``EmbeddedBroker``) with the daemon's topics;
2. the real daemon, ``python -m monitor run`` in a subprocess, with a generated configuration;
3. a simulated audit team (``monitor.sim.auditors.SimulatedAuditTeam``) answering the daemon's label
   requests from the ground truth, after a delay, with a few dropped and a few wrong answers;
   With ``--queue labelstudio``, a share of the requests goes to a real Label Studio instead
   (``monitor.sim.demo_queue``), where a person can answer them in a browser;
4. a scored stream (``monitor.sim.workload``): 48 hours of event time compressed into
   ``--duration-s`` seconds of wall time, ~3% positives, calibrated scores, and a degradation
   half-way (positives start to look harmless; the true F1 falls from ~0.82 to ~0.64).

The stream stops twice: at hour 24 (just before the drift) and at hour 48 (the end). Each time
the demo waits until the daemon has consumed everything and every answer has been joined, reads
the daemon's ``/metrics`` and compares each reported window (the buckets ``(W_b - k, W_b]``
anchored at the watermark's bucket W_b, CONTRACTS "Stream design") with the true F_alpha
= tp / (alpha (tp + fp) + (1 - alpha)(tp + fn)) of the same buckets (seed 000, Cor. 1), computed
from the truth by ``monitor.sim.workload.window_truth``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from monitor.config.load import load_config
from monitor.config.schema import TopicsConfig
from monitor.errors import MonitorError
from monitor.free_ports import free_port
from monitor.sim.auditors import AuditPolicy, AuditStats, SimulatedAuditTeam, write_truth
from monitor.sim.demo_queue import LabelStudioQueue, add_arguments, team_drop_rate
from monitor.sim.embedded_broker import EmbeddedBroker
from monitor.sim.workload import (
    HOUR_S,
    Truth,
    Workload,
    WorkloadSpec,
    bucket_truth,
    generate,
    window_truth,
)

BUCKET_S = 3600
WINDOWS: tuple[tuple[str, int], ...] = (("1h", 3600), ("24h", 86_400), ("7d", 604_800))
MODEL = "default"
ALPHA = 0.5
EXIT_INTERRUPTED = 130
DEFAULT_METRICS_PORT = 9464
# reasons a label can be refused with (it then never counts as received)
# ---------------------------------------------------------------------------------------------
# reading the daemon's /metrics


Sample = tuple[str, Mapping[str, str], float]


def parse_metrics(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition: (name, labels, value).

    Read with ``prometheus_client.parser``; a text it cannot parse gives no samples.
    """
    try:
        return [
            (s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError:
        return []


@dataclass(frozen=True)
class Metrics:
    """One scrape of the daemon, with lookups by name and label subset."""

    samples: list[Sample] = field(default_factory=list)

    def get(self, name: str, **labels: str) -> float:
        """The value of the first sample matching; NaN when absent."""
        for n, lab, value in self.samples:
            if n == name and all(lab.get(k) == v for k, v in labels.items()):
                return value
        return math.nan

    def total(self, name: str, **labels: str) -> float:
        """Sum over every matching sample (0 when none)."""
        return sum(
            value
            for n, lab, value in self.samples
            if n == name and all(lab.get(k) == v for k, v in labels.items())
        )


def scrape(port: int, timeout_s: float = 2.0) -> Metrics | None:
    """GET http://127.0.0.1:port/metrics; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as resp:
            return Metrics(parse_metrics(resp.read().decode("utf-8", "replace")))
    except OSError:  # URLError is one
        return None


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1.0) as resp:
            return int(resp.status) == 200
    except OSError:  # URLError is one
        return False


# ---------------------------------------------------------------------------------------------
# the processes the demo starts


def demo_config(args: argparse.Namespace, topics: TopicsConfig, per_hour: float) -> dict[str, Any]:
    """The daemon's configuration for this run (same keys as ``config/monitor.yaml``)."""
    return {
        "kafka": {
            "group_id": "activeaudit-demo",
            "topics": {
                "scored": topics.scored,
                "requests": topics.requests,
                "labels": topics.labels,
                "deadletter": topics.deadletter,
            },
            # 6 s is the smallest session timeout a real Kafka broker accepts; the first fetch
            # of a new group takes about half of it on the embedded broker
            "client": {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1500},
        },
        "windows": {"bucket_s": BUCKET_S, "report": dict(WINDOWS)},
        "estimation": {"level": 0.95},
        # event time: 12 h of the demo's stream pass in ~15 s of wall time
        "labels": {"deadline_s": "12h"},
        "default_model": MODEL,
        "models": {
            MODEL: {
                "alpha": ALPHA,
                "threshold": 0.5,
                "labels_per_hour": args.labels_per_hour,
                "defensive": 0.1,
                "expected_records_per_hour": max(per_hour, 1.0),
            }
        },
    }


class DaemonProcess:
    """``python -m monitor run`` as a child process in its own session (Ctrl-C goes to us)."""

    def __init__(self, config_path: Path, bootstrap: str, port: int, data_dir: Path) -> None:
        self.port = port
        self.log_path = data_dir.parent / "daemon.log"
        self.cmd = [
            sys.executable,
            "-m",
            "monitor",
            "run",
            "--config",
            str(config_path),
            "--bootstrap-servers",
            bootstrap,
            "--metrics-port",
            str(port),
            "--data-dir",
            str(data_dir),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait for /readyz to answer 200."""
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while not _ready(self.port):
            self.check()
            if time.monotonic() > deadline:
                msg = f"the daemon was not ready after {timeout_s:.0f} s\n{self.tail()}"
                raise MonitorError(msg)
            time.sleep(0.2)

    def check(self) -> None:
        """Raise if the daemon has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            msg = f"the daemon exited with status {self.proc.returncode}\n{self.tail()}"
            raise MonitorError(msg)

    def tail(self, lines: int = 15) -> str:
        """The end of the daemon's log."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(f"  daemon| {line}" for line in text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM, wait (then SIGKILL); returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        status = self.proc.returncode
        self.proc = None
        return status


class Streamer:
    """Produces the workload to the scored topic, paced: event time -> wall time."""

    def __init__(self, bootstrap: str, topic: str, workload: Workload, stream_s: float) -> None:
        from kafka import KafkaProducer  # noqa: PLC0415

        self.workload = workload
        self.topic = topic
        self.sent = 0
        spec = workload.spec
        # wall-clock offset (s from the stream's start) at which each record is due
        self.due = (workload.ts - spec.start_ts) / (spec.end_ts - spec.start_ts) * stream_s
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=20, client_id="monitor-demo"
        )

    def send_due(self, wall_offset: float, stop_index: int) -> None:
        """Send every record due by ``wall_offset`` (seconds) and below ``stop_index``."""
        upto = min(int(np.searchsorted(self.due, wall_offset, side="right")), stop_index)
        for rec in self.workload.records(self.sent, upto):
            self.producer.send(
                self.topic,
                key=rec["id"].encode(),
                value=json.dumps(rec, separators=(",", ":")).encode(),
            )
        self.sent = max(self.sent, upto)

    def flush(self) -> None:
        """Wait until everything sent is acknowledged."""
        self.producer.flush(30)

    def close(self) -> None:
        """Close the producer (bounded)."""
        self.producer.close(5)


# ---------------------------------------------------------------------------------------------
# progress and result


@dataclass(frozen=True)
class Row:
    """One line of the final table: a reported window at a checkpoint, estimate and truth."""

    checkpoint: str
    window: str
    first_bucket: int
    last_bucket: int
    records: float
    labels: float
    f: tuple[float, float, float]  # estimate, lower, upper
    intrinsic: float  # label-free F the model believes it has, from its scores
    precision: float
    recall: float
    truth: Truth


def _fmt(x: float, digits: int = 3) -> str:
    return "  -  " if math.isnan(x) else f"{x:.{digits}f}"


def _est(m: Metrics, name: str, window: str) -> tuple[float, float, float]:
    sel = {"model": MODEL, "segment": "", "window": window}
    return (m.get(name, **sel), m.get(f"{name}_ci_lower", **sel), m.get(f"{name}_ci_upper", **sel))


def daemon_status(m: Metrics | None, team: AuditStats) -> str:
    """Daemon counters, the audit team's queue and the current 24 h estimate, on one line."""
    if m is None:
        return "(daemon metrics not available yet)"
    f, lo, hi = _est(m, "monitor_f_measure", "24h")
    est = "no labels yet" if math.isnan(f) else f"{f:.3f} [{lo:.3f}, {hi:.3f}]"
    return (
        f"| consumed {int(m.total('monitor_records_total')):>7,}"
        f" requests {int(m.total('monitor_audit_requests_total')):>5,}"
        f" labels {int(m.total('monitor_labels_received_total')):>5,}"
        f" (auditors hold {team.waiting}, dropped {team.dropped})"
        f" | F1 24h {est}"
    )


def checkpoint_rows(name: str, m: Metrics, workload: Workload) -> list[Row]:
    """Compare every reported window at this moment with the truth of the same buckets."""
    watermark = m.get("monitor_watermark_timestamp_seconds", model=MODEL)
    if math.isnan(watermark):
        return []
    w_b = math.floor(watermark / BUCKET_S)
    counts = bucket_truth(workload.ts, workload.pred, workload.label, BUCKET_S)
    rows = []
    for window, length in WINDOWS:
        k = length // BUCKET_S
        sel = {"model": MODEL, "segment": "", "window": window}
        rows.append(
            Row(
                checkpoint=name,
                window=window,
                first_bucket=max(w_b - k + 1, int(counts.buckets[0])),
                last_bucket=w_b,
                records=m.get("monitor_window_records", **sel),
                labels=m.get("monitor_window_labels", **sel),
                f=_est(m, "monitor_f_measure", window),
                intrinsic=m.get("monitor_intrinsic_f_measure", **sel),
                precision=m.get("monitor_precision", **sel),
                recall=m.get("monitor_recall", **sel),
                truth=window_truth(counts, w_b, k, ALPHA),
            )
        )
    return rows


def render_table(rows: list[Row]) -> str:
    """The final comparison table (plain text, about 130 columns)."""
    head = (
        f"{'checkpoint':<18}{'window':<7}{'event time (UTC)':<21}{'records':>8}{'labels':>7}"
        f"  {'F1 estimate [95% CI]':<22}{'true F1':>7}{'in CI':>6}{'believed':>9}"
        f"  {'precision':>11}  {'recall':>11}"
    )
    sub = " " * (18 + 7 + 21 + 8 + 7 + 2 + 22 + 7 + 6) + f"{'(scores)':>9}"
    sub += f"  {'est / true':>11}" * 2
    lines = [head, sub, "-" * len(head)]
    for r in rows:
        f, lo, hi = r.f
        span = (
            time.strftime("%m-%d %Hh", time.gmtime(r.first_bucket * BUCKET_S))
            + " .. "
            + time.strftime("%m-%d %Hh", time.gmtime((r.last_bucket + 1) * BUCKET_S))
        )
        est = "no labels" if math.isnan(f) else f"{f:.3f} [{lo:.3f}, {hi:.3f}]"
        covered = "" if math.isnan(f) else ("yes" if lo <= r.truth.f <= hi else "NO")
        lines.append(
            f"{r.checkpoint:<18}{r.window:<7}{span:<21}{_count(r.records):>8}"
            f"{_count(r.labels):>7}  {est:<22}{_fmt(r.truth.f):>7}{covered:>6}"
            f"{_fmt(r.intrinsic):>9}"
            f"  {_fmt(r.precision, 2):>4} / {_fmt(r.truth.precision, 2):<4}"
            f"  {_fmt(r.recall, 2):>4} / {_fmt(r.truth.recall, 2):<4}"
        )
    return "\n".join(lines)


def _count(x: float) -> str:
    return "-" if math.isnan(x) else f"{int(x):,}"


# ---------------------------------------------------------------------------------------------
# the run


@dataclass
class DemoRun:
    """Everything the demo started, so that ``close`` can stop it in order."""

    work_dir: Path
    keep: bool
    broker: EmbeddedBroker | None = None
    daemon: DaemonProcess | None = None
    team: SimulatedAuditTeam | None = None
    queue: LabelStudioQueue | None = None
    streamer: Streamer | None = None
    failed: bool = False
    finished: bool = False  # the report is printed (Ctrl-C after it is the normal way out)

    def _stop_daemon(self) -> None:
        assert self.daemon is not None
        status = self.daemon.stop()
        if status not in (0, None):
            print(f"demo: the daemon exited with status {status}\n{self.daemon.tail()}")

    def close(self) -> None:
        """Stop the stream, the daemon, the audit team and the broker, in that order."""
        steps: list[tuple[str, Callable[[], object]]] = []
        if self.streamer is not None:
            steps.append(("producer", self.streamer.close))
        if self.daemon is not None:
            steps.append(("daemon", self._stop_daemon))
        if self.team is not None:
            steps.append(("audit team", self.team.stop))
        if self.queue is not None:
            steps.append(("Label Studio", self.queue.stop))
        if self.broker is not None:
            steps.append(("broker", self.broker.stop))
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                print(f"demo: could not stop the {what} cleanly: {exc}", file=sys.stderr)
        self.streamer = self.daemon = self.team = self.broker = self.queue = None
        if self.keep or self.failed:
            print(f"demo: logs and state kept in {self.work_dir}", flush=True)
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def _wait_drained(
    run: DemoRun, port: int, sent: int, timeout_s: float, started: float
) -> Metrics | None:
    """Wait until the daemon consumed ``sent`` records and joined every answer, then scrape.

    Drained means: records consumed = sent; the audit team has read every request the daemon
    produced and holds none back; every answer it produced was joined; and the widest window
    reports as many labels as were joined (the published snapshot is up to date).
    """
    assert run.daemon is not None and run.team is not None
    deadline = time.monotonic() + timeout_s
    last_print = 0.0
    m: Metrics | None = None
    while time.monotonic() < deadline:
        run.daemon.check()
        m = scrape(port)
        team = run.team.stats
        if m is not None:
            labels = m.total("monitor_labels_received_total")
            rejected = m.total("monitor_invalid_records_total", input="labels")
            widest = m.get("monitor_window_labels", model=MODEL, segment="", window=WINDOWS[-1][0])
            if (
                m.total("monitor_records_total") >= sent
                and team.requests >= m.total("monitor_audit_requests_total")
                and team.waiting == 0
                and labels + rejected >= team.answered
                and widest == labels
            ):
                return m
        if time.monotonic() - last_print > 3.0:
            last_print = time.monotonic()
            print(
                f"[{time.monotonic() - started:5.1f}s] waiting for the daemon: "
                + daemon_status(m, team),
                flush=True,
            )
        time.sleep(0.3)
    print(f"demo: the daemon had not caught up after {timeout_s:.0f} s; showing what it has")
    return m


def run_demo(args: argparse.Namespace) -> int:
    """Handler of ``monitor demo``."""
    for name, value in (("--records", args.records), ("--duration-s", args.duration_s)):
        if value <= 0:
            print(f"monitor demo: error: {name} must be > 0", file=sys.stderr)
            return 2
    started = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="monitor-demo-"))
    run = DemoRun(work_dir=work_dir, keep=args.keep)
    previous = signal.getsignal(signal.SIGTERM)

    def _on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_term)
    status = 0
    try:
        _run(args, run, started)
    except KeyboardInterrupt:
        if not run.finished:
            status = EXIT_INTERRUPTED
        print("\ndemo: interrupted; stopping everything it started", flush=True)
    except MonitorError as exc:
        run.failed = True
        status = 1
        print(f"monitor demo: error: {exc}", file=sys.stderr, flush=True)
    except BaseException:
        run.failed = True
        raise
    finally:
        # a second Ctrl-C must not cut the clean-up short
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            run.close()
        finally:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous)
    print(
        f"demo: {'finished' if status == 0 else 'stopped'} after "
        f"{time.monotonic() - started:.0f} s; everything it started is stopped",
        flush=True,
    )
    return status


def _run(args: argparse.Namespace, run: DemoRun, started: float) -> None:
    def say(msg: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {msg}", flush=True)

    if args.queue == "labelstudio":
        run.queue = LabelStudioQueue(args, run.work_dir)
        run.queue.launch()  # its first start takes ~80 s: overlapped with what follows
        say(f"Label Studio: starting on {run.queue.url} (the first start takes ~80 s)")
    # the stream: 48 h of event time ending at the current hour
    end = math.floor(time.time() / HOUR_S) * HOUR_S
    segments = tuple(s.strip() for s in args.segments.split(",") if s.strip())
    spec = WorkloadSpec(
        n=args.records,
        hours=48.0,
        start_ts=end - 48 * HOUR_S,
        segments=segments,
        seed=args.seed,
    )
    workload = generate(spec)
    truth_path = run.work_dir / "truth.csv"
    write_truth(truth_path, workload.truth_rows())
    say(
        f"workload: {len(workload):,} records over 48 h of event time, "
        f"{workload.label.mean():.1%} positives, drift at hour 24; truth in {truth_path}"
    )

    run.broker = EmbeddedBroker(log_path=run.work_dir / "tansu.log")
    _start_broker(run.broker)
    topics = TopicsConfig()
    from monitor.io.kafka_io import ensure_topics  # noqa: PLC0415 - kafka only once it is needed

    ensure_topics(run.broker.bootstrap, topics, args.partitions)
    say(
        f"broker: Tansu on {run.broker.bootstrap} (in memory); topics {topics.scored} "
        f"({args.partitions} partitions), {topics.requests}, {topics.labels}, {topics.deadletter}"
    )

    config_path = run.work_dir / "monitor.yaml"
    config = demo_config(args, topics, args.records / 48.0)
    config_path.write_text(
        "# generated by `monitor demo`\n" + yaml.safe_dump(config, sort_keys=False)
    )
    _validate_config(config_path)
    port = _metrics_port(args.metrics_port)
    run.daemon = DaemonProcess(config_path, run.broker.bootstrap, port, run.work_dir / "data")
    run.daemon.start()
    say(
        f"daemon: pid {run.daemon.proc.pid if run.daemon.proc else '?'}, ready; "
        f"metrics on http://127.0.0.1:{port}/metrics; log {run.daemon.log_path}"
    )

    drop_rate = args.drop_rate
    if run.queue is not None:
        drop_rate = team_drop_rate(run.queue.share, args.drop_rate)
        bridge = run.queue.start_bridge(
            load_config(config_path, {"bootstrap_servers": run.broker.bootstrap})
        )
        say(
            f"Label Studio bridge: {run.queue.share:.0%} of the requests go to {run.queue.url} "
            f"(projects {sorted(bridge.projects.values())}); the simulated team answers the rest"
        )
    policy = AuditPolicy(
        delay_s=args.delay_s, drop_rate=drop_rate, error_rate=args.error_rate, seed=args.seed
    )
    run.team = SimulatedAuditTeam(
        dict(workload.truth_rows()),
        run.broker.bootstrap,
        topics.requests,
        topics.labels,
        policy=policy,
    ).start()
    say(
        f"audit team: answers after {policy.delay_s:g} s, drops {policy.drop_rate:.0%}, "
        f"answers {policy.error_rate:.0%} wrongly"
    )

    run.streamer = Streamer(run.broker.bootstrap, topics.scored, workload, args.duration_s)
    half = int(np.searchsorted(workload.ts, spec.degrade_ts, side="left"))
    rows: list[Row] = []
    offset = 0.0  # wall seconds of the stream already played (pauses excluded)
    for name, stop_index in (
        ("h24, before drift", half),
        ("h48, after drift", len(workload)),
    ):
        offset = _play(run, port, stop_index, offset, args=args, started=started)
        say(f"stream paused at {name}: waiting until every answer is joined")
        m = _wait_drained(run, port, run.streamer.sent, args.drain_timeout_s, started)
        if m is not None:
            rows += checkpoint_rows(name, m, workload)
    _report(run, port, rows, workload, args)
    run.finished = True
    if run.queue is not None:
        print("\n".join(run.queue.describe()), flush=True)
    if args.keep:
        say("--keep: everything keeps running; press Ctrl-C to stop")
        while True:
            run.daemon.check()
            if run.queue is not None:
                run.queue.check()
            time.sleep(1.0)


def _start_broker(broker: EmbeddedBroker) -> None:
    """Start Tansu with SIGINT blocked, so a Ctrl-C reaches the demo, which stops it last."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        broker.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _metrics_port(asked: int | None) -> int:
    """The port asked for; 0 -> any free port; None -> 9464 if free, else any free port."""
    if asked is None:
        return DEFAULT_METRICS_PORT if _port_free(DEFAULT_METRICS_PORT) else free_port()
    return asked or free_port()


def _validate_config(path: Path) -> None:
    load_config(path)


def _play(
    run: DemoRun,
    port: int,
    stop_index: int,
    offset: float,
    *,
    args: argparse.Namespace,
    started: float,
) -> float:
    """Stream records until ``stop_index``, printing progress; returns the stream offset."""
    assert run.streamer is not None and run.team is not None and run.daemon is not None
    streamer = run.streamer
    workload = streamer.workload
    t0 = time.monotonic() - offset
    last_print = time.monotonic()
    while streamer.sent < stop_index:
        now = time.monotonic()
        streamer.send_due(now - t0, stop_index)
        if now - last_print >= args.progress_every_s:
            last_print = now
            run.daemon.check()
            hours = (workload.ts[max(streamer.sent - 1, 0)] - workload.spec.start_ts) / HOUR_S
            print(
                f"[{now - started:5.1f}s] event hour {hours:4.1f}/48"
                f" sent {streamer.sent:>7,}/{len(workload):,} "
                + daemon_status(scrape(port), run.team.stats),
                flush=True,
            )
        time.sleep(0.05)
    streamer.flush()
    return time.monotonic() - t0


def _report(
    run: DemoRun, port: int, rows: list[Row], workload: Workload, args: argparse.Namespace
) -> None:
    assert run.team is not None
    m = scrape(port) or Metrics()
    team = run.team.stats
    records = len(workload)
    labels = int(m.total("monitor_labels_received_total"))
    requests = int(m.total("monitor_audit_requests_total"))
    print()
    print(f'Estimated vs true F1 (alpha = {ALPHA}) of model "{MODEL}", 95% intervals.')
    print("Windows are anchored at the bucket of the watermark (latest event time) and")
    print("cover the whole hours shown; the truth is computed from the same records.")
    print("'believed' is the label-free F the model's own scores imply (intrinsic F).")
    print()
    print(render_table(rows))
    for r in rows:
        if not math.isnan(r.records) and int(r.records) != r.truth.records:
            print(
                f"warning: {r.checkpoint} {r.window}: the daemon counted {int(r.records):,} "
                f"records, the stream had {r.truth.records:,} in those hours"
            )
    print()
    print(
        f"labels used: {labels:,} for {records:,} records ({labels / records:.2%}); "
        f"audit requests {requests:,}; the audit team dropped {team.dropped:,} and answered "
        f"{team.flipped:,} wrongly on purpose"
    )
    missing = m.total("monitor_labels_missing", window=WINDOWS[-1][0], segment="")
    rejected = m.total("monitor_invalid_records_total")
    print(
        f"requests past their deadline without a label: {int(missing):,}; "
        f"records rejected: {int(rejected)}"
    )
    alerts = [
        f"{lab.get('alert')}({lab.get('window')})"
        for n, lab, v in m.samples
        if n == "monitor_alert_active" and v == 1.0
    ]
    if alerts:
        print("alerts active at the end: " + ", ".join(sorted(alerts)))
    url = f"http://127.0.0.1:{port}/metrics"
    if args.keep:
        print(f"metrics: {url} (kept running; Ctrl-C stops everything)")
    else:
        print(f"metrics: {url} (served while the demo ran; --keep keeps it up)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``monitor demo``."""
    p = sub.add_parser(
        "demo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="run everything locally: broker, daemon, audit team, a drifting stream",
        description="Start a local Kafka-protocol broker, the daemon and a simulated audit "
        "team on 127.0.0.1, stream 48 h of scored traffic (compressed) with a degradation "
        "half-way, and compare the estimated F1 with the truth. Stops everything at the end.",
    )
    p.add_argument("--records", type=int, default=96_000, help="records streamed")
    p.add_argument(
        "--duration-s",
        type=float,
        default=60.0,
        help="wall time over which the 48 h stream is played (the demo adds start-up and "
        "two waits for the last answers)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help=f"port of the daemon's /metrics (default {DEFAULT_METRICS_PORT} when free, else "
        "any free port; 0: any free port)",
    )
    p.add_argument("--keep", action="store_true", help="keep everything running at the end")
    p.add_argument("--labels-per-hour", type=float, default=30.0, help="label budget per hour")
    p.add_argument("--partitions", type=int, default=2, help="partitions of the scored topic")
    p.add_argument("--delay-s", type=float, default=1.0, help="auditors' answer delay (wall s)")
    p.add_argument("--drop-rate", type=float, default=0.05, help="share of requests unanswered")
    p.add_argument("--error-rate", type=float, default=0.0, help="share of wrong answers")
    p.add_argument("--seed", type=int, default=1, help="seed of the workload and auditors")
    p.add_argument(
        "--segments",
        default="",
        help="comma-separated segment names spread over the records (e.g. web,app); the "
        "table shows all segments together, /metrics each one too",
    )
    add_arguments(p)
    p.add_argument("--progress-every-s", type=float, default=4.0)
    p.add_argument("--drain-timeout-s", type=float, default=45.0)
    p.set_defaults(func=run_demo)
