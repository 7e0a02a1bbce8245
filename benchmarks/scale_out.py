"""Scale-out benchmark: records per second of one ``--role sampler`` process against two.

One command, its own broker (Tansu on 127.0.0.1, ``monitor.sim.embedded_broker``)::

    .venv/bin/python -m benchmarks.scale_out              # 1M records, ~70 s
    .venv/bin/python -m benchmarks.scale_out --quick      # 60k records
    .venv/bin/python -m benchmarks.scale_out --pin        # sampler i on core i (taskset -c)

The goal it checks: two samplers process at least 1.6x the records per second of one. The
default size keeps one sampler busy for well over 10 s (13-14 s on the reference machine; 400k
records took 7.6 s, too close to the seconds a join or a rebalance takes).

Phases:

1. **Produce**: ``--records`` N records (``monitor.sim.workload``: event times over 24 hours, four
   segments, about 135 bytes of JSON each) to a scored topic with 4 partitions, record ``i`` to
   partition ``i % 4``, all BEFORE any sampler starts: the runs measure consumption only.
2. **Runs**, one per ``--samplers`` entry (default ``1,2``): that many ``python -m monitor run
   --role sampler`` processes, launched together, in a fresh consumer group with fresh
   requests, labels, dead-letter and aggregates topics (aggregates: 4 partitions) over the same
   scored topic. Config: ``max_poll_records`` 5000 (the shipped default), ``poll_timeout_ms``
   200, one model ``default`` (40 labels per hour, N / 24 expected records per hour). The
   consumer timeouts are the test values (session 2 s, heartbeat 0.5 s) so that joins and
   rebalances take seconds on Tansu; they do not change the steady rate.

   While a run lasts, this process reads every sampler's JSON log (stderr) and samples the CPU
   time (``utime + stime`` of ``/proc/PID/stat``) of each sampler and of the broker every
   0.1 s. The samplers run with ``--log-level DEBUG``, which logs each batch (``batch_processed``;
   INFO has one summary a minute). The run ends when the samplers have committed every
   partition's end offset (their ``batch_processed`` events; confirmed afterwards by reading the
   group's committed offsets); then each sampler gets SIGTERM and must exit 0.

**Clock**: from the moment every sampler owns its final share of the partitions (the last
``sampler_rebuilt`` event of the run) to the ``batch_processed`` event that committed the last
end offset; its records are those of the batches logged inside that window: nearly all N when
the samplers join in one generation (as they do on Tansu when launched together; the first to
rebuild its state may finish a batch or two before the other), fewer when one consumed alone
until a rebalance gave the other its share. CPU seconds are interpolated over the same window.
Two more clocks are printed below the tables: from the first ``sampler_rebuilt`` (a sampler
can consume) to the same end, N records, which includes the start-up stagger and any rebalance
pause; and "while every sampler had records left", from the same start to the first sampler's
last batch, the rate of the samplers running side by side. On Tansu the second member of a
group is sometimes assigned about 1 s after the first (same generation): the first then
finishes about 1 s early and the clock's window ends with one sampler working alone, which
lowers the main clock's rate but not the side-by-side one.

The broker runs on the same cores as the samplers (2 on the reference machine), so "each
sampler has a core" cannot hold while the broker also needs CPU: the first table reports the
broker's CPU seconds in each window and a second one where all the machine's CPU went
(``os.cpu_count()`` cores: each sampler, the broker, everything else, idle, and steal from
``/proc/stat``). Absolute rates move +/-20-40% between runs on a shared machine; compare the
ratio inside one run, and run it more than once before quoting it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.throughput import bulk_producer, create_topics, write_daemon_config
from monitor.free_ports import free_port
from monitor.sim.embedded_broker import EmbeddedBroker

PARTITIONS = 4
HOURS = 24.0  # event time covered by the scored records
SEGMENTS = ("web", "mobile", "store", "partner")
LABELS_PER_HOUR = 40
GOAL = 1.6  # two samplers must reach this multiple of one sampler's records per second
SAMPLE_S = 0.1  # how often CPU times and logs are read while a run lasts
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- processes
def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) of a live process; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # fields after the command name (which may contain spaces): state is field 3, utime 14
    fields = text.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu() -> dict[str, float]:
    """Cumulative CPU seconds of the whole machine (all cores) from ``/proc/stat``.

    ``busy`` (user, nice, system, irq, softirq), ``idle`` (idle, iowait) and ``steal`` (taken by
    the hypervisor from this virtual machine).
    """
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    return {
        "busy": (user + nice + system + irq + softirq) / CLK_TCK,
        "idle": (idle + iowait) / CLK_TCK,
        "steal": steal / CLK_TCK,
    }


def _log_time(stamp: str) -> float:
    """Epoch seconds of a log line's ``ts`` (``2026-01-01T00:00:00.123Z``)."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


@dataclass
class Batch:
    """One ``batch_processed`` event of a sampler."""

    ts: float
    records: int
    requests: int
    rejected: int
    offsets: dict[int, int]  # scored partition -> next offset committed by this step


@dataclass
class Sampler:
    """One ``monitor run --role sampler`` child and what its log said so far."""

    name: str
    log_path: Path
    proc: subprocess.Popen[bytes]
    scored: str
    rebuilt: list[tuple[float, list[int]]] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # warning and error lines
    _read: int = 0

    def follow(self) -> None:
        """Parse the log lines written since the last call (complete lines only)."""
        with self.log_path.open("rb") as fh:
            fh.seek(self._read)
            chunk = fh.read()
        end = chunk.rfind(b"\n") + 1
        self._read += end
        for line in chunk[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                if line.strip():
                    self.problems.append(line.decode(errors="replace")[:300])
                continue
            if not isinstance(event, dict):
                continue
            name = event.get("event")
            if name == "sampler_rebuilt":
                self.rebuilt.append((_log_time(event["ts"]), list(event["partitions"])))
            elif name == "batch_processed":
                offsets = {}
                for tp, off in event["offsets"].items():
                    topic, _, p = tp.rpartition("/")
                    if topic == self.scored:
                        offsets[int(p)] = int(off)
                self.batches.append(
                    Batch(
                        _log_time(event["ts"]),
                        int(event["records"]),
                        int(event["requests"]),
                        int(event["rejected"]),
                        offsets,
                    )
                )
            elif event.get("level") in ("warning", "error", "critical"):
                self.problems.append(f"{event.get('event')}: {event.get('msg')}"[:300])

    def tail(self) -> str:
        """The end of the log, for error messages."""
        return self.log_path.read_text(errors="replace")[-2000:]


def produce_scored(bootstrap: str, n: int, seed: int) -> tuple[str, dict[int, int], float, float]:
    """Create the scored topic and fill it; (topic, end offset per partition, s, mean bytes)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from monitor.sim.workload import WorkloadSpec, generate

    topic = f"predictions-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    workload = generate(WorkloadSpec(n=n, hours=HOURS, seed=seed, segments=SEGMENTS))
    producer = bulk_producer(bootstrap)
    ends = dict.fromkeys(range(PARTITIONS), 0)
    size = 0
    started = time.perf_counter()
    send = producer.send
    for i, rec in enumerate(workload.records()):
        value = json.dumps(rec).encode()
        size += len(value)
        send(topic, value=value, partition=i % PARTITIONS)
        ends[i % PARTITIONS] += 1
    producer.flush(300)
    producer.close(10)
    return topic, ends, time.perf_counter() - started, size / n


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets, read by a consumer that does not join the group."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- one run
@dataclass
class RunResult:
    """What one run (``samplers`` processes over the whole scored topic) measured."""

    samplers: int
    consumed: int  # records up to the group's committed offsets at the end (N)
    window_records: int  # records of the batches logged inside the clock's window
    wall_s: float  # the clock: every sampler owns its share -> last end offset committed
    first_wall_s: float  # first assignment -> last end offset committed
    busy_records: int  # records of the batches logged while every sampler still had work
    busy_wall_s: float  # every sampler owns its share -> the first one logs its last batch
    sampler_cpu_s: list[float]  # per sampler, inside the window
    sampler_cpu_total_s: list[float]  # per sampler, whole life (start-up, join, idle)
    broker_cpu_s: float  # inside the window (NaN when the broker's PID is unknown)
    other_cpu_s: float  # the machine's busy CPU in the window minus samplers and broker
    idle_cpu_s: float  # idle CPU of the machine (all cores) in the window
    steal_cpu_s: float  # CPU the hypervisor took from this machine in the window
    shares: list[list[int]]  # partitions each sampler owned at the end
    rebuilds: int  # sampler_rebuilt events (one per sampler and assignment)
    batches: int
    requests: int
    rejected: int
    exit_codes: list[int | None]
    problems: list[str]
    pinned: bool

    @property
    def rate(self) -> float:
        """Records per second by the clock."""
        return self.window_records / self.wall_s if self.wall_s > 0 else math.nan

    @property
    def first_rate(self) -> float:
        """Records per second from the first assignment (N records)."""
        return self.consumed / self.first_wall_s if self.first_wall_s > 0 else math.nan

    @property
    def busy_rate(self) -> float:
        """Records per second while every sampler was busy."""
        return self.busy_records / self.busy_wall_s if self.busy_wall_s > 0 else math.nan

    @property
    def per_cpu(self) -> float:
        """Records per sampler CPU-second (all samplers together) inside the window."""
        cpu = sum(self.sampler_cpu_s)
        return self.window_records / cpu if cpu > 0 else math.nan


def _interpolate(samples: Sequence[tuple[float, float]], t: float) -> float:
    """The value of a sampled, non-decreasing series at time ``t`` (linear in between)."""
    if not samples:
        return math.nan
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return samples[-1][1]


@contextlib.contextmanager
def launched(
    commands: Sequence[tuple[str, list[str], Path]],
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start the commands (stderr to their log), all as close together as possible.

    Anything still running on the way out is killed.
    """
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for _, cmd, log_path in commands:
            with log_path.open("ab") as err:
                procs.append(subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, env=env))
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def run_samplers(
    bootstrap: str,
    scored: str,
    ends: dict[int, int],
    k: int,
    work: Path,
    *,
    pin: bool,
    broker: int | None,
    timeout_s: float,
    library: str = "kafka-python",
    recalibrate: bool = False,
) -> RunResult:
    """Run ``k`` samplers over the whole scored topic; measure as the module docstring says."""
    n = sum(ends.values())
    tag = f"s{k}-{uuid.uuid4().hex[:6]}"
    topics = create_topics(bootstrap, tag, scored=scored, partitions=PARTITIONS)
    group = f"bench-{tag}"
    config = write_daemon_config(
        bootstrap,
        topics,
        work / tag,
        labels_per_hour=LABELS_PER_HOUR,
        records_per_hour=n / HOURS,
        max_poll_records=5000,
        library=library,
        poll_timeout_ms=200,
        group=group,
        recalibrate=recalibrate,
    )
    cpus = os.cpu_count() or 1
    pinned = pin and shutil.which("taskset") is not None
    commands = []
    for i in range(k):
        cmd = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
        cmd += ["--role", "sampler", "--metrics-port", str(free_port()), "--log-level", "DEBUG"]
        if pinned:
            cmd = ["taskset", "-c", str(i % cpus), *cmd]
        commands.append((f"sampler-{i + 1}", cmd, work / f"{tag}-sampler-{i + 1}.log"))
    with launched(commands) as procs:
        samplers = [
            Sampler(name, log_path, proc, scored)
            for (name, _, log_path), proc in zip(commands, procs, strict=True)
        ]
        cpu: list[list[tuple[float, float]]] = [[] for _ in samplers]
        broker_cpu: list[tuple[float, float]] = []
        machine: dict[str, list[tuple[float, float]]] = {"busy": [], "idle": [], "steal": []}

        def sample() -> None:
            now = time.time()
            for series, s in zip(cpu, samplers, strict=True):
                used = cpu_seconds(s.proc.pid)
                if used is not None:
                    series.append((now, used))
            used = cpu_seconds(broker) if broker is not None else None
            if used is not None:
                broker_cpu.append((now, used))
            for key, value in machine_cpu().items():
                machine[key].append((now, value))

        deadline = time.monotonic() + timeout_s
        while True:
            sample()
            for s in samplers:
                s.follow()
            position: dict[int, int] = {}
            for s in samplers:
                for b in s.batches:
                    for p, off in b.offsets.items():
                        position[p] = max(position.get(p, 0), off)
            if all(position.get(p, 0) >= end for p, end in ends.items()):
                break
            for s in samplers:
                if s.proc.poll() is not None:
                    msg = f"{s.name} exited with {s.proc.returncode}:\n{s.tail()}"
                    raise RuntimeError(msg)
            if time.monotonic() > deadline:
                msg = f"timed out at offsets {position} of {ends}:\n{samplers[-1].tail()}"
                raise RuntimeError(msg)
            time.sleep(SAMPLE_S)
        sample()
        # the log says every end offset was committed; the broker must say so too
        want = {p: ends[p] for p in range(PARTITIONS)}
        confirm_by = time.monotonic() + 30
        got = committed(bootstrap, config_group(group), scored)
        while got != want and time.monotonic() < confirm_by:
            time.sleep(0.5)
            got = committed(bootstrap, config_group(group), scored)
        if got != want:
            msg = f"the group's committed offsets are {got}, not {want}"
            raise RuntimeError(msg)
        totals = [series[-1][1] if series else math.nan for series in cpu]
        for s in samplers:
            s.proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for s in samplers:
            try:
                codes.append(s.proc.wait(30))
            except subprocess.TimeoutExpired:
                codes.append(None)
            s.follow()
    rebuilt = [r for s in samplers for r in s.rebuilt]
    batches = [b for s in samplers for b in s.batches]
    if not rebuilt or not batches:
        msg = "no sampler_rebuilt or batch_processed event in the samplers' logs"
        raise RuntimeError(msg)
    t_ready = max(t for t, _ in rebuilt)
    # the batch that committed the last end offset
    t_end = max(min(b.ts for b in batches if b.offsets.get(p, -1) >= e) for p, e in ends.items())
    t_first = min(t for t, _ in rebuilt)
    window = [b for b in batches if t_ready < b.ts <= t_end]
    t_busy = min(max(b.ts for b in s.batches) for s in samplers if s.batches)
    if any(not s.batches for s in samplers):
        t_busy = t_ready
    busy = [b for b in batches if t_ready < b.ts <= t_busy]

    def in_window(series: Sequence[tuple[float, float]]) -> float:
        return _interpolate(series, t_end) - _interpolate(series, t_ready)

    sampler_s = [in_window(c) for c in cpu]
    broker_s = in_window(broker_cpu) if broker_cpu else 0.0
    return RunResult(
        samplers=k,
        consumed=sum(off or 0 for off in got.values()),
        window_records=sum(b.records for b in window),
        wall_s=t_end - t_ready if t_end > t_ready else math.nan,
        first_wall_s=t_end - t_first,
        busy_records=sum(b.records for b in busy),
        busy_wall_s=t_busy - t_ready if t_busy > t_ready else math.nan,
        sampler_cpu_s=sampler_s,
        sampler_cpu_total_s=totals,
        broker_cpu_s=broker_s,
        other_cpu_s=in_window(machine["busy"]) - sum(sampler_s) - broker_s,
        idle_cpu_s=in_window(machine["idle"]),
        steal_cpu_s=in_window(machine["steal"]),
        shares=[sorted(s.rebuilt[-1][1]) if s.rebuilt else [] for s in samplers],
        rebuilds=len(rebuilt),
        batches=len(batches),
        requests=sum(b.requests for b in batches),
        rejected=sum(b.rejected for b in batches),
        exit_codes=codes,
        problems=[f"{s.name}: {p}" for s in samplers for p in s.problems],
        pinned=pinned,
    )


def config_group(group: str) -> str:
    """The samplers' consumer group for ``kafka.group_id`` ``group`` (``<group>-sampler``)."""
    return f"{group}-sampler"


# ----------------------------------------------------------------------------- report
def _fmt(values: Sequence[float], digits: int = 2) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def print_table(results: Sequence[RunResult], n: int) -> None:
    """The markdown tables and the goal's verdict."""
    base = results[0]
    print(
        "| samplers | records | wall s | records/s | sampler CPU s (each) | records/CPU-s "
        "| broker CPU s | speed-up |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.samplers} | {r.window_records} | {r.wall_s:.2f} | {r.rate:.0f} "
            f"| {_fmt(r.sampler_cpu_s)} | {r.per_cpu:.0f} | {r.broker_cpu_s:.2f} "
            f"| {r.rate / base.rate:.2f}x |"
        )
    print()
    print(
        f"Where the machine's CPU went in each window, in cores (CPU s / wall s) of "
        f"{os.cpu_count()}; other = this driver and anything else running on the machine:"
    )
    print()
    print("| samplers | each sampler | broker | other | idle | steal |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        cores = [c / r.wall_s for c in r.sampler_cpu_s]
        print(
            f"| {r.samplers} | {_fmt(cores)} | {r.broker_cpu_s / r.wall_s:.2f} "
            f"| {r.other_cpu_s / r.wall_s:.2f} | {r.idle_cpu_s / r.wall_s:.2f} "
            f"| {r.steal_cpu_s / r.wall_s:.2f} |"
        )
    print()
    for r in results:
        print(
            f"- {r.samplers} sampler(s): consumed {r.consumed} of {n} (group's committed offsets); "
            f"from the first assignment {r.first_wall_s:.2f} s, {r.first_rate:.0f} records/s "
            f"({r.first_rate / base.first_rate:.2f}x), of which {r.first_wall_s - r.wall_s:.2f} s "
            f"before every sampler owned its share; while every sampler had records left "
            f"{r.busy_records} records in {r.busy_wall_s:.2f} s, {r.busy_rate:.0f} records/s "
            f"({r.busy_rate / base.busy_rate:.2f}x); partitions owned at the end {r.shares}, "
            f"{r.rebuilds} rebuild(s), {r.batches} batches, {r.requests} requests, "
            f"{r.rejected} rejected; whole-life CPU s {_fmt(r.sampler_cpu_total_s)}; exit codes "
            f"{r.exit_codes}" + ("; pinned with taskset" if r.pinned else "")
        )
        if math.isnan(r.wall_s):
            print("  - the clock is undefined: the records were consumed before every sampler")
            print("    owned its partitions (raise --records)")
        for problem in r.problems[:5]:
            print(f"  - log: {problem}")
    by_count = {r.samplers: r for r in results}
    if 1 in by_count and 2 in by_count:
        one, two = by_count[1], by_count[2]
        speedup = two.rate / one.rate
        if math.isnan(speedup):
            verdict = "cannot tell (no clock)"
        else:
            verdict = "met" if speedup >= GOAL else "NOT met"
        print(
            f"\nGoal (2 samplers >= {GOAL}x the records/s of 1): {verdict}: "
            f"{speedup:.2f}x ({two.rate:.0f} vs {one.rate:.0f} records/s); records per sampler "
            f"CPU-second {two.per_cpu:.0f} vs {one.per_cpu:.0f} "
            f"({two.per_cpu / one.per_cpu - 1:+.0%}); while both samplers had records left: "
            f"{two.busy_rate / one.busy_rate:.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the phases, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="60k records")
    parser.add_argument("--samplers", default="1,2", help="sampler counts, one run each")
    parser.add_argument(
        "--pin", action="store_true", help="pin sampler i to core i %% cpu_count (taskset -c)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--client-library",
        default="kafka-python",
        choices=["kafka-python", "confluent-kafka"],
        help="the samplers' Kafka client (kafka.client_library)",
    )
    parser.add_argument(
        "--recalibrate",
        action="store_true",
        help="recalibrate: true (the samplers follow the aggregates topic for maps and flush "
        "before the requests of a step that froze a control; no estimator, so no map)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--work-dir", type=Path, help="keep configs and sampler logs here (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 60_000)
    n = int(args.records)
    counts = [int(c) for c in args.samplers.split(",")]
    if args.pin and shutil.which("taskset") is None:
        print("warning: --pin ignored, taskset is not installed", flush=True)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        pid = broker.pid
        scored, ends, produce_s, size = produce_scored(broker.bootstrap, n, args.seed)
        print(
            f"produced {n} records ({size:.0f} bytes on average) to {PARTITIONS} partitions "
            f"in {produce_s:.1f} s ({n / produce_s:.0f}/s)",
            flush=True,
        )
        results = []
        for k in counts:
            result = run_samplers(
                broker.bootstrap,
                scored,
                ends,
                k,
                work,
                pin=args.pin,
                library=args.client_library,
                recalibrate=args.recalibrate,
                broker=pid,
                timeout_s=args.timeout,
            )
            print(f"run with {k} sampler(s): {result.rate:.0f} records/s", flush=True)
            results.append(result)
    print()
    print(
        f"Scale-out, {n} scored records on {PARTITIONS} partitions, os.cpu_count() = "
        f"{os.cpu_count()}, the broker on the same cores; clock from every sampler owning "
        "its partitions to the last end offset committed:"
    )
    print()
    print_table(results, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
