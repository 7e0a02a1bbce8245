"""The engine of ``--role all`` and ``--role estimator``: one poll is one step.

In a fixed order::

    poll -> decode -> sampler -> estimator (requests, labels, parked)
         -> produce requests + dead letters, flush
         -> ONE store transaction (state + next offsets) -> Kafka commit
         -> refit of the maps the new labels are due (``_recalibrate``) -> metrics

Nothing is committed before it is durable: requests and dead letters are acknowledged before
the transaction, and the transaction before the Kafka commit. After a broker failure the
``Daemon`` calls ``rollback``: the in-memory state is reloaded from the store and the consumer
seeks back to the stored offsets; the deterministic decisions then reproduce the same requests
(idempotent by key and bytes). The models whose maps new labels are due to refit are stored in
the step's transaction (``REFIT_DUE_KEY``) and cleared by the refit, so a crash between the two
refits them at the restart, as the lost run would have.

Before the records of a poll are applied, the estimator is told how far the scored topic (role
``estimator``: the aggregates topic) has been read in Kafka time (``_read_through``): a label is
judged against its deadline only once the traffic written before it is read, whatever order the
client fetched the topics in (``EstimatorService.set_read_through``).
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from monitor.config.schema import Config, TopicsConfig
from monitor.core import aggregates, recalibration
from monitor.core.aggregates import TrafficFeed
from monitor.core.estimator import EstimatorService
from monitor.core.messages import AuditRequest, RawRecord, Reject
from monitor.core.records import (
    deadletter_key,
    deadletter_minimal,
    deadletter_value,
    decode_labels,
    decode_requests,
    decode_scored,
)
from monitor.core.sampler import SamplerService
from monitor.core.snapshot import Snapshot
from monitor.errors import BrokerUnavailable, StoreError
from monitor.runtime.batch_log import BatchLog
from monitor.runtime.failpoint import Failpoint
from monitor.runtime.ports import TP, Metrics, Sink, Source, TopicReader
from monitor.runtime.reject_log import RejectLog

if TYPE_CHECKING:
    from monitor.io.store import Store

log = logging.getLogger(__name__)

_TOPIC_PARTITION = attrgetter("topic", "partition")
SNAPSHOT_EVERY_S = 1.0  # snapshots at most this often...
SNAPSHOT_LABELS_S = 0.2  # ...or this often when labels arrived
FLUSH_TIMEOUT_S = 30.0
#: Store document: the models whose labels were committed but whose maps are not refitted yet
REFIT_DUE_KEY = "refit_due"
#: Store document: per (model, bucket) the earliest Kafka timestamp of a scored record
FIRST_WRITTEN_KEY = "first_written"


def split_poll(
    raw: Sequence[RawRecord],
) -> tuple[dict[str, list[RawRecord]], dict[TP, int], dict[TP, int], dict[TP, int]]:
    """A poll's records by topic; per topic-partition its first and next offset, last Kafka ms.

    The Kafka timestamp is that of the record before the next offset. A poll holds runs of
    records of one topic-partition in offset order: grouped by run, not by record.
    """
    by_topic: dict[str, list[RawRecord]] = collections.defaultdict(list)
    first: dict[TP, int] = {}
    nxt: dict[TP, int] = {}
    last_ms: dict[TP, int] = {}
    for (t, p), run in itertools.groupby(raw, _TOPIC_PARTITION):
        recs = list(run)
        by_topic[t].extend(recs)
        first.setdefault((t, p), recs[0].offset)
        if recs[-1].offset + 1 > nxt.get((t, p), 0):
            nxt[(t, p)] = recs[-1].offset + 1
            last_ms[(t, p)] = recs[-1].timestamp_ms
    return by_topic, first, nxt, last_ms


def count_step(
    metrics: Metrics,
    records: Mapping[str, int],
    requested: Mapping[str, int],
    labels: Mapping[str, int],
    rejects: Sequence[Reject],
    *,
    topics: TopicsConfig,
) -> None:
    """Add one step's scored records, requests, accepted labels and rejects to the counters.

    Rejects count by the input they were read from (a rule judges labels against labels).
    """
    if records:
        metrics.count_records(records)
    if requested:
        metrics.count_requests(requested)
    if labels:
        metrics.count_labels(labels)
    if rejects:
        metrics.count_rejects(
            collections.Counter((topics.input_of(r.record.topic), r.reason) for r in rejects)
        )


def store_pins(config: Config) -> list[tuple[str, str, str]]:
    """The settings a data directory is written under: ``(key, value, what to do)``.

    ``Store.pin`` refuses a store written under another value (``monitor run``, and ``monitor
    check-config`` read-only).
    """
    return [
        (
            "windows.bucket_s",
            str(config.windows.bucket_s),
            "its buckets would be read as other hours and every estimate would silently start "
            "over. Set windows.bucket_s back, or move the data directory away to start from the "
            "topics' retained data",
        ),
        (
            "sampling.salt",
            config.salt,
            "request ids are hashes of it, so the labels that name a pending request by record "
            "id would find none (unknown_request) and a replay would decide other records. Set "
            "sampling.salt back, or move the data directory away to start over",
        ),
    ]


class Engine:
    """The sampler, estimator and store of one daemon, driven one poll at a time.

    ``role="all"`` (the default) reads the scored, requests and labels topics and runs both the
    sampler and the estimator. ``role="estimator"`` reads the requests, labels and aggregates
    topics instead: the traffic comes from samplers running elsewhere
    (``monitor.runtime.sampler_role``) as bucket states, turned into exact deltas by a
    ``TrafficFeed`` stored with the rest. It refits the calibration maps as ``all`` does and
    publishes each new one on the aggregates topic for the samplers (``_publish_maps``); before
    its first step it recovers the versions published before from that topic (``aggregates``,
    ``_recover``), so a lost data directory does not restart them at 1.
    """

    standby_ok = False  # given no partition, it has nothing to do: not ready

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
        aggregates: TopicReader | None = None,
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
        self._reject_log = RejectLog(config.kafka.topics)
        self._batch_log = BatchLog()
        self.clock = clock
        self.on_snapshot = list(on_snapshot)
        self.n_partitions = 1
        self._last_snapshot = -1e18
        self._dirty = True
        self._capped: set[str] = set()  # models whose segment limit was reported
        self._duplicates_seen: set[str] = set()  # models whose duplicate record ids were reported
        self._maps_due: set[str] = set()  # role estimator: stored maps not yet on Kafka
        # records Kafka acknowledged since the last stored step: a step retried after the store
        # refused it (``rollback``) decides them again, the same bytes, and does not write them
        # again (once per attempt, every 10 s at most, for as long as a volume stayed full)
        self._acked: set[tuple[str, bytes | None, bytes, bytes | None]] = set()
        # role estimator: the aggregates topic, read once before the first step (``_recover``)
        self._recover_from = aggregates if role == "estimator" else None
        for key, value, hint in store_pins(config):
            store.pin(key, value, hint)
        self._load()
        for model in self.estimator.unconfigured_models():  # once: _load runs on each rollback
            log.warning(
                "stored state of a model not in the configuration: not estimated, exported or "
                "alerted on",
                extra={
                    "event": "model_not_configured",
                    "model": model,
                    "hint": "a model removed from `models` keeps its stored requests and "
                    "traffic; add it back (same name) to resume, or leave it: nothing reads them",
                },
            )

    def _load(self) -> None:
        st = self.store.load()
        self.sampler = SamplerService(
            self.config,
            n_partitions=self.n_partitions,
            traffic=st.sampler_traffic,
            controls=st.controls,
            segments=st.segments,
        )
        self.estimator = EstimatorService(
            self.config,
            self.clock,
            traffic=st.segment_traffic,
            requests=st.requests,
            parked=st.parked,
            watermarks=st.watermarks,
            first_written=self.store.get_json(FIRST_WRITTEN_KEY) or (),
        )
        self.feed = TrafficFeed(st.feed) if self.role == "estimator" else None
        # per partition of the topic labels are judged against, the newest Kafka time read
        # (``_read_through``); forgotten with the state it was read into
        self._read_ms: dict[TP, int] = {}
        try:
            self.sampler.calibration = recalibration.decode(
                self.store.get_json(recalibration.STORE_KEY)
            )
        except ValueError as exc:
            msg = (
                f"the stored calibration maps ({recalibration.STORE_KEY!r} in the state "
                f"store) are unreadable: {exc}; restore the data directory from a backup"
            )
            raise StoreError(msg) from exc
        if self.feed is not None:  # (again: a crash may have come between store and Kafka)
            self._maps_due = set(self.sampler.calibration)
        due = self.store.get_json(REFIT_DUE_KEY)
        if due:  # a crash came between the labels' commit and their refit: refit them now
            self._recalibrate(str(m) for m in due)
        self._dirty = True

    def _count_duplicate_ids(self) -> None:
        """Count the audited records whose id came again with other content; log once per model.

        ``EstimatorService.upsert_requests`` says what counts; the first line per model names
        the counter that keeps the rest.
        """
        duplicates = self.estimator.take_duplicate_ids()
        if not duplicates:
            return
        self.metrics.count_duplicate_ids(duplicates)
        for model in sorted(set(duplicates) - self._duplicates_seen):
            self._duplicates_seen.add(model)
            log.warning(
                "a record id came again with another score, event time or segment: its first "
                "request stands; check the producer (retries re-scoring a record, reused ids); "
                "later ones are counted in monitor_duplicate_record_ids_total",
                extra={
                    "event": "duplicate_record_ids",
                    "model": model,
                    "count": duplicates[model],
                },
            )

    def _recalibrate(self, models: Iterable[str]) -> None:
        """Refit the calibration maps of ``models`` from their labels; durable, then in use.

        DESIGN.md, "Why it stays deterministic": the maps are written to the store in their own
        transaction *before* the sampler takes them, so every control that records a map finds
        it stored, and a replay after a crash at any point reads the map the lost step used (a
        map not yet stored was never used). Role ``estimator``: the new maps are then due on
        the aggregates topic, where the samplers take them (``_publish_maps``). Each map is
        fitted on the labels of its window (``label_window_buckets``) and tested for positives
        it does not expect on those of the longest (``recalibration.refit``, ``history``).
        """
        cal = self.sampler.calibration
        bucket_s = self.config.windows.bucket_s
        new = dict(cal)
        for model in sorted(m for m in models if m in self.config.models):  # a removed one: no map
            cfg = self.config.models[model]
            if not cfg.recalibrate:
                continue
            k = recalibration.label_window_buckets(bucket_s, cfg.labels_per_hour)
            wm = self.estimator.watermark(model)
            if not math.isfinite(wm):
                continue
            since = math.floor(wm / bucket_s) - k + 1
            sample, segment = self.estimator.labelled(model, since)
            since_longest = since + k - recalibration.label_window_buckets(bucket_s)
            history, history_segment = self.estimator.labelled(model, since_longest)
            previous = cal.get(model, recalibration.NO_CALIBRATION)
            fitted = recalibration.refit(
                previous,
                sample,
                cfg.defensive,
                segment=segment if cfg.segment_maps else None,
                keep_scores=cfg.keep_calibrated_scores,
                reference=self.estimator.score_histogram(model, since),
                history=history,
                history_segment=history_segment if cfg.segment_maps else None,
            )
            if fitted.version > 0:  # labels that keep the scores before any map: still none
                new[model] = fitted
        if new != cal:
            self.store.put_json(recalibration.STORE_KEY, recalibration.encode(new))
            self.sampler.calibration = new
            for model in sorted(m for m in new if new[m] != cal.get(m)):
                c = new[model]
                log.info(
                    "calibration map refitted",
                    extra={
                        "event": "calibration_refitted",
                        "model": model,
                        "version": c.version,
                        "family": c.cal_map.family,
                        "defensive": round(c.lam, 4),
                        "segment_maps": [g for g, _ in c.segments],
                    },
                )
            if self.feed is not None:
                self._maps_due.update(m for m in new if new[m] != cal.get(m))
        self.store.put_json(REFIT_DUE_KEY, [])

    def _recover(self, reader: TopicReader) -> None:
        """Role estimator, before the first step: continue from the highest published versions.

        Samplers ignore a map whose version is at or below the one they hold, so an estimator
        that lost its data directory (a new pod without its volume, a wiped or restored state)
        and numbered its maps from 1 again would go unheard until its count caught up. The
        aggregates topic is the durable record of every version published (compacted, never
        deleted): its newest map per model wins over an older stored one
        (``monitor.core.recalibration.recover``), and is stored before any refit numbers a
        map after it, so a replay reads it back from the store (DESIGN.md, "Why it stays
        deterministic"). If the topic cannot be read, the step fails (``BrokerUnavailable``:
        the daemon retries with backoff) after one line that says so: no map is fitted,
        numbered or published until the versions are known.
        """
        topic = self.config.kafka.topics.aggregates
        started = time.monotonic()
        try:
            records = reader.read(range)  # every partition: select(n) = range(n)
        except BrokerUnavailable as exc:
            log.error(
                "cannot recover the calibration map versions: no map is fitted until it can",
                extra={
                    "event": "calibration_recovery_failed",
                    "topic": topic,
                    "bootstrap_servers": list(self.config.kafka.bootstrap_servers),
                    "error": str(exc),
                    "fix": f"make topic {topic!r} readable from this process (broker reachable, "
                    "topic present, ACLs); the estimator retries with backoff",
                },
            )
            raise
        finally:
            reader.close()
        stored = self.sampler.calibration
        published = aggregates.newest_maps((k, v) for _, k, v in records)
        merged = recalibration.recover(stored, published)
        if merged != stored:
            self.store.put_json(recalibration.STORE_KEY, recalibration.encode(merged))
            self.sampler.calibration = merged
        behind = sorted(m for m in merged if merged[m] != stored.get(m))
        extra = {
            "event": "calibration_recovered",
            "topic": topic,
            "stored": {m: c.version for m, c in sorted(stored.items())},
            "published": {m: c.version for m, c in sorted(published.items())},
            "records_read": len(records),
            "seconds": round(time.monotonic() - started, 3),
        }
        if behind:
            log.warning(
                "the state store held older calibration maps than the aggregates topic (a new "
                "or restored data directory): continuing from the published versions",
                extra={**extra, "models": behind},
            )
        else:
            log.info("calibration map versions checked against the aggregates topic", extra=extra)
        self._recover_from = None

    def _publish_maps(self, source: Source, sink: Sink) -> None:
        """Role estimator: produce the stored maps not yet on Kafka to EVERY aggregates partition.

        A sampler reads the aggregates partitions of its scored partitions (``p``), so each
        finds every map; compaction keeps a model's latest one per partition
        (``monitor.core.aggregates``). Flushed before they count as published; after a crash
        in between, ``_load`` publishes the stored maps again (a sampler ignores a map whose
        version it has).
        """
        topic = self.config.kafka.topics.aggregates
        n = max(1, source.partitions_for(topic))
        cal = self.sampler.calibration
        for model in sorted(self._maps_due):
            key, value = aggregates.encode_map_key(model), aggregates.encode_map(model, cal[model])
            for p in range(n):
                sink.produce(topic, key, value, p)
        sink.flush(FLUSH_TIMEOUT_S)
        log.info(
            "calibration maps published",
            extra={
                "event": "calibration_published",
                "maps": {m: cal[m].version for m in sorted(self._maps_due)},
                "partitions": n,
            },
        )
        self._maps_due.clear()

    def _read_through(
        self, source: Source, topic: str, last_ms: Mapping[TP, int], lag: Mapping[TP, int]
    ) -> float:
        """How far, in Kafka time, the traffic labels are judged against has been read.

        ``topic`` is the scored topic (role ``estimator``: the aggregates topic, the samplers'
        states that ``EstimatorService.note_published`` takes): every record of it written
        before the returned ms has been read. Per assigned partition that is the newest Kafka
        timestamp read from it (Kafka timestamps follow the write order), or +inf once it is
        read to its end (an idle partition holds nothing back); the least of them, -inf while
        nothing is assigned. ``last_ms``: this poll's Kafka timestamp of the last record read per
        topic-partition (``split_poll``), added first.
        """
        for tp, ms in last_ms.items():
            if tp[0] == topic and ms > self._read_ms.get(tp, 0):
                self._read_ms[tp] = ms
        parts = [tp for tp in source.assignment() if tp[0] == topic]
        return min(
            (math.inf if lag.get(tp) == 0 else self._read_ms.get(tp, -math.inf) for tp in parts),
            default=-math.inf,
        )

    @property
    def topics(self) -> list[str]:
        """The topics this role reads.

        ``all`` does not read the requests topic: it issued every request it awaits, and stored
        each in the same transaction as the offsets of the record that caused it.
        """
        t = self.config.kafka.topics
        if self.feed is None:
            return [t.scored, t.labels]
        return [t.aggregates, t.requests, t.labels]

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
        if self._recover_from is not None:
            self._recover(self._recover_from)
        cfg = self.config
        topics = cfg.kafka.topics
        raw = source.poll(cfg.kafka.max_poll_records, cfg.kafka.poll_timeout_ms / 1000.0)
        started = time.monotonic()
        fp = self.failpoint
        if fp is not None and raw:
            fp.hit("decode")
        by_topic, _, offsets, last_ms = split_poll(raw)
        lag = source.lag()
        # a label is judged against its deadline once the traffic written before it is read
        against = topics.scored if self.feed is None else topics.aggregates
        self.estimator.set_read_through(self._read_through(source, against, last_ms, lag))
        rejects: list[Reject] = []
        produced: list[AuditRequest] = []
        records: dict[str, int] = {}
        requested: dict[str, int] = {}
        if by_topic[topics.scored]:
            batch, bad = decode_scored(by_topic[topics.scored], cfg)
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
            self.estimator.note_scored(batch)
            rejects.extend(self.estimator.upsert_requests(produced))
        if self.feed is not None and by_topic[topics.aggregates]:
            got = aggregates.decode_states(by_topic[topics.aggregates], cfg)
            rejects.extend(got.bad)
            self.estimator.apply_traffic(self.feed.apply(got.states))
            self.estimator.note_published(got.written)
        if by_topic[topics.requests]:
            known, bad = decode_requests(by_topic[topics.requests], cfg)
            rejects.extend(bad)
            # role all reads back the requests it made, and counted, above
            own = self.feed is None
            rejects.extend(self.estimator.upsert_requests(known, count_duplicates=not own))
        if by_topic[topics.labels]:
            labels, bad = decode_labels(by_topic[topics.labels])
            rejects.extend(bad)
            rejects.extend(self.estimator.handle_labels(labels))
        rejects.extend(self.estimator.judge_waiting())
        # a parked label is unknown only once every request it could match has been seen: the
        # scored topic (role all: our own requests) or the requests topic (the samplers') is read
        caught_up = source.caught_up((topics.scored,) if self.feed is None else (topics.requests,))
        rejects.extend(self.estimator.expire_parked(requests_caught_up=caught_up))
        sampler_changes = self.sampler.take_changes()
        estimator_changes = self.estimator.take_changes()
        labels_ok = self.estimator.take_label_counts()
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
            out: list[tuple[str, bytes | None, bytes, bytes | None]] = [
                (topics.requests, req.key, req.to_json(), None) for req in produced
            ]
            out += [
                (topics.deadletter, deadletter_key(r), deadletter_value(r), deadletter_minimal(r))
                for r in rejects
            ]
            fresh = [record for record in out if record not in self._acked]
            for topic, key, value, fallback in fresh:
                sink.produce(topic, key, value, fallback=fallback)
            if fp is not None:
                fp.hit("produce")
            sink.flush(FLUSH_TIMEOUT_S)
            self._acked.update(fresh)
            if fp is not None:
                fp.hit("flush")
            documents: dict[str, Any] = {}
            if labels_ok:  # the models whose maps these labels are due to refit
                documents[REFIT_DUE_KEY] = sorted(labels_ok)
            if estimator_changes.first_written:
                documents[FIRST_WRITTEN_KEY] = self.estimator.first_written
            self.store.commit(sampler_changes, estimator_changes, offsets, feed_changes, documents)
            self._acked.clear()
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
        if labels_ok:
            self._recalibrate(labels_ok)
        for model, cal in self.sampler.calibration.items():
            mcfg = self.config.models.get(model)
            if mcfg is not None and mcfg.recalibrate:
                self.metrics.set_calibration(model, cal, mcfg.defensive)
        if self._maps_due:
            self._publish_maps(source, sink)
        count_step(
            self.metrics, records, requested, labels_ok, rejects, topics=self.config.kafka.topics
        )
        self._reject_log.note(rejects)
        self._count_duplicate_ids()
        latencies = self.estimator.take_label_latencies()
        if latencies:
            self.metrics.observe_label_latency(latencies)
        self.metrics.set_lags(lag)
        self.metrics.count_skipped(source.skipped())
        self.metrics.count_deadletters_minimal(sink.fallbacks())
        if raw:
            took = time.monotonic() - started
            self.metrics.observe_batch(took)
            self._batch_log.note(
                took, offsets, records=len(raw), scored=len(by_topic[topics.scored]),
                requests=len(produced), labels=sum(labels_ok.values()), rejected=len(rejects),
            )  # fmt: skip
        else:
            self._batch_log.tick()
        self.maybe_publish(force=bool(labels_ok))
        return len(raw)

    def shutdown(self, source: Source | None, sink: Sink | None) -> None:
        """Before closing: log the pending batch summary, publish the last state (if changed)."""
        self._batch_log.flush()
        self._reject_log.flush()
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
