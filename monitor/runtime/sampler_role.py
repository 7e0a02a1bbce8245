"""``monitor run --role sampler``: audit decisions for a share of the scored topic's partitions.

Samplers join the consumer group ``<kafka.group_id>-sampler`` over the scored topic and keep no
local state. One poll is one step::

    poll -> decode -> sampler -> produce requests, bucket states (monitor.core.aggregates),
         dead letters -> [every FLUSH_EVERY_S, when idle, on SIGTERM: flush -> Kafka commit]

Flushing and committing every half second rather than every poll keeps the sampler from
waiting on two broker round trips per batch (the producer sends in the background all along);
a crash replays at most that much, which the rebuild below makes harmless.

After every assignment the sampler resumes at the group's committed offsets and rebuilds its
partitions' state as of them from the aggregates topic (``monitor.core.aggregates.as_of``): the
controls in force and the traffic later controls learn from. Decisions are deterministic, so a
partition handed from one sampler to another, even by a SIGKILL mid-flush or between a flush and
its commit, yields the same requests (some twice, with the same key and bytes, which the
estimator ignores) and the same aggregates as one ``--role all`` process. A failed step (broker
down) rebuilds the same way.

Calibration maps (``models.NAME.recalibrate``): the estimator publishes each map it fits on the
aggregates topic (``monitor.core.aggregates``). The sampler takes the newest it read at the
rebuild, then follows the partitions it read for newer ones (``TopicReader.follow``, every step
while a configured model recalibrates), and new controls of a recalibrating model record the
newest it holds. Which map a control took is not a function of the scored stream, so a step that
froze such a control flushes its states before it produces its requests: no request can be out
while its control is not, and a sampler rebuilt at the committed offset takes the published
control for a control it freezes again (``as_of``'s ``ahead``), whatever maps it has read since.
The requests are then the same, byte for byte, after any crash or hand-over. A map below the
last one read on its aggregates partition (a second estimator, or one that numbered its maps
from 1 again) is not taken, and is counted and logged (``_ignore_map``) rather than ignored
silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from monitor.config.schema import Config
from monitor.core.aggregates import (
    BucketStates,
    LaterFormat,
    as_of,
    decode_map,
    is_map,
    newest_maps,
)
from monitor.core.records import (
    deadletter_key,
    deadletter_minimal,
    deadletter_value,
    decode_scored,
)
from monitor.errors import BrokerUnavailable, TopicsNotReady
from monitor.runtime.batch_log import BatchLog
from monitor.runtime.engine import FLUSH_TIMEOUT_S, count_step, split_poll
from monitor.runtime.failpoint import Failpoint
from monitor.runtime.ports import TP, Entry, Metrics, Sink, Source, TopicReader
from monitor.runtime.reject_log import RejectLog
from monitor.stats.budget import NO_CALIBRATION, Calibration

log = logging.getLogger(__name__)

FLUSH_EVERY_S = 0.5  # flush and commit at most this often while records keep coming


class SamplerEngine:
    """The decisions of the scored partitions this process is assigned, one poll at a time.

    A sampler the group gives no partition is a standby: ready, waiting to take some over.
    """

    standby_ok = True

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        aggregates: TopicReader,
        *,
        failpoint: Failpoint | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
    ) -> None:
        self.config = config
        self.flush_every_s = flush_every_s
        self.metrics = metrics
        self._reject_log = RejectLog(config.kafka.topics)
        self._batch_log = BatchLog()
        self.aggregates = aggregates
        self.failpoint = failpoint
        self.n_partitions = 1
        self._assigned: set[int] = set()  # scored partitions
        self._pending: dict[TP, int] = {}  # next offsets whose state is produced, not flushed
        self._last_flush = time.monotonic()
        self._n_aggregates = 1
        self._stale = False  # the state does not match the assignment: rebuild before a step
        self.published = BucketStates()
        self.sampler = self.published.service(config, self.n_partitions)
        # per recalibrating model: the newest calibration map read (new controls take it)
        self.maps: dict[str, Calibration] = {}
        self._follow = any(m.recalibrate for m in config.models.values())
        # per (model, aggregates partition): the last map read there (``_follow_maps``)
        self._last_map: dict[tuple[str, int], Calibration] = {}

    # ------------------------------------------------------------ assignment
    def offsets(self) -> dict[TP, int]:
        """Nothing stored locally: a sampler resumes at the group's committed offsets."""
        return {}

    def on_assigned(self, assigned: Sequence[TP]) -> None:
        """A new assignment (called inside ``poll``): the next step rebuilds the state first."""
        scored = self.config.kafka.topics.scored
        self._assigned = {p for (t, p) in assigned if t == scored}
        self._pending = {}
        self._stale = True

    def _resync(self, source: Source) -> None:
        """Rebuild the assigned partitions' state as of their committed offsets; seek there."""
        scored = self.config.kafka.topics.scored
        committed = {tp: o for tp, o in source.committed().items() if tp[0] == scored}
        at = {p: committed.get((scored, p), 0) for p in self._assigned}
        started = time.monotonic()

        def select(n: int) -> set[int]:
            self._n_aggregates = max(1, n)
            return {p % self._n_aggregates for p in at}

        records = self.aggregates.read(select)
        self._check_homes(at)
        rebuilt = as_of(((k, v) for _, k, v in records), at)
        by_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        for p, key, value in records:
            if is_map(key):
                by_partition.setdefault(p, []).append((key, value))
        self._last_map = {
            (model, p): cal
            for p, maps in by_partition.items()
            for model, cal in newest_maps(maps).items()
        }
        self.published = BucketStates(rebuilt.states, rebuilt.ahead)
        self.sampler = self.published.service(self.config, self.n_partitions)
        self.maps = {}
        for model, cal in sorted(rebuilt.maps.items()):
            self._take_map(model, cal)
        source.seek(committed)
        self._stale = False
        log.info(
            "sampler state rebuilt",
            extra={
                "event": "sampler_rebuilt",
                "partitions": sorted(at),
                "buckets": len(self.published.states),
                "ahead": len(rebuilt.ahead),
                "maps": {m: c.version for m, c in sorted(self.maps.items())},
                "records_read": len(records),
                "seconds": round(time.monotonic() - started, 3),
            },
        )

    def _check_homes(self, at: Mapping[int, int]) -> None:
        """Refuse scored partitions without an aggregates partition of their own.

        Partition ``p``'s states go to aggregates partition ``p``; one beyond the aggregates
        topic's partitions went to ``p % n``, and the topic grown to match later (as the README
        asks) put its states elsewhere: the rebuild found none and the estimator lost the
        partition's open buckets without a word. Its records now wait, unread, until the
        aggregates topic has the partitions (``TopicsNotReady``: not ready, retried).
        """
        homeless = sorted(p for p in at if p >= self._n_aggregates)
        if homeless:
            topics = self.config.kafka.topics
            msg = (
                f"the aggregates topic {topics.aggregates} has {self._n_aggregates} partitions, "
                f"fewer than the scored topic {topics.scored} (this sampler holds its partitions "
                f"{homeless}): add partitions to it, kafka-topics.sh --alter --topic "
                f"{topics.aggregates} --partitions {homeless[-1] + 1} or more (as many as the "
                "scored topic has); those records are not read until then"
            )
            raise TopicsNotReady(msg)

    def _take_map(self, model: str, cal: Calibration) -> None:
        """Use ``cal`` for new controls of ``model`` if it recalibrates and ``cal`` is newer."""
        if not self.config.model(model).recalibrate:
            return
        if cal.version <= self.maps.get(model, NO_CALIBRATION).version:
            return
        self.maps[model] = cal
        self.sampler.calibration[model] = cal
        if model in self.config.models:
            self.metrics.set_calibration(model, cal, self.config.models[model].defensive)
        log.info(
            "calibration map taken",
            extra={"event": "calibration_taken", "model": model, "version": cal.version},
        )

    def _ignore_map(self, model: str, partition: int, cal: Calibration, last: Calibration) -> None:
        """A map not above the last one on its partition: kept out, counted and logged.

        One estimator publishes increasing versions, each to every partition, so a partition's
        maps only go up (the same map comes once per partition: that is no news). One below
        the last on its partition, or as high but other, has a second writer: an estimator
        that numbered its maps from 1 again (an older release after losing its data
        directory; this one recovers the versions, ``Engine._recover``), or two estimators at
        once. Taking it would let a stale map change the decisions; ignoring it silently would
        hide that the estimator's new maps are not taken.
        """
        reason = "older" if cal.version < last.version else "conflicting"
        self.metrics.count_maps_ignored(model, reason)
        log.warning(
            "calibration map ignored: its version is not above the last one published",
            extra={
                "event": "calibration_ignored",
                "model": model,
                "partition": partition,
                "reason": reason,
                "version": cal.version,
                "last": last.version,
                "held": self.maps.get(model, NO_CALIBRATION).version,
                "fix": "run one estimator per deployment; one that lost its data directory "
                "continues from the published versions once restarted with this release",
            },
        )

    def _follow_maps(self, records: Sequence[Entry]) -> None:
        """Take the maps among records appended to the aggregates partitions since last read."""
        for p, key, value in records:
            if not is_map(key):
                continue  # a bucket state (ours or another sampler's)
            try:
                model, cal = decode_map(key, value)
            except LaterFormat as exc:
                if exc.model is not None and exc.model in self.config.models:
                    self.metrics.count_maps_ignored(exc.model, "later_format")
                log.warning(
                    "calibration map ignored: written by a later release",
                    extra={"event": "calibration_ignored", "partition": p, "error": str(exc)},
                )
                continue
            except (ValueError, RecursionError) as exc:
                log.warning(
                    "malformed calibration map skipped (the estimator dead-letters it)",
                    extra={"event": "calibration_malformed", "partition": p, "error": str(exc)},
                )
                continue
            last = self._last_map.get((model, p), NO_CALIBRATION)
            if cal.version < last.version or (cal.version == last.version and cal != last):
                if self.config.model(model).recalibrate:
                    self._ignore_map(model, p, cal, last)
                continue
            self._last_map[(model, p)] = cal
            self._take_map(model, cal)

    def set_partitions(self, n: int) -> None:
        """The scored topic's partition count (the budget is split evenly across them)."""
        self.n_partitions = max(1, n)
        self.sampler.n_partitions = self.n_partitions

    def rollback(self, source: Source) -> None:
        """After a failed step: rebuild as of the committed offsets and rewind to them.

        Never raises: with the broker still away, the next step tries again.
        """
        self._pending = {}
        self._stale = True
        try:
            self._resync(source)
        except TopicsNotReady:
            pass  # the daemon logged it once
        except BrokerUnavailable as exc:
            log.warning(
                "cannot rebuild the sampler state yet",
                extra={"event": "sampler_rebuild_failed", "error": str(exc)},
            )

    def shutdown(self, source: Source | None, sink: Sink | None) -> None:
        """Before closing: log the pending batch summary, flush and commit the last steps.

        The flush and commit need the broker: without it the next owner replays those steps.
        """
        self._batch_log.flush()
        self._reject_log.flush()
        if source is None or sink is None:
            return
        try:
            self._flush(source, sink)
        except BrokerUnavailable as exc:
            log.warning(
                "final flush failed: the next owner replays the last steps",
                extra={"event": "final_flush_failed", "error": str(exc)},
            )

    def _flush(self, source: Source, sink: Sink) -> None:
        """Wait for every record produced so far, then commit the offsets they cover."""
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        fp = self.failpoint
        sink.flush(FLUSH_TIMEOUT_S)
        if fp is not None:
            fp.hit("flush")
        offsets, self._pending = self._pending, {}
        try:
            source.commit(offsets)
        except BrokerUnavailable as exc:
            # the aggregates topic holds the state: a replay re-decides without recounting
            log.warning("offset commit failed", extra={"event": "commit_failed", "error": str(exc)})
        if fp is not None:
            fp.hit("commit")

    # ------------------------------------------------------------------ step
    def step(self, source: Source, sink: Sink) -> int:
        """Poll once and process; return the number of records consumed."""
        cfg = self.config
        topics = cfg.kafka.topics
        raw = source.poll(cfg.kafka.max_poll_records, cfg.kafka.poll_timeout_ms / 1000.0)
        if self._stale:  # assigned since the last step: these records wait for the rebuild
            self._resync(source)
            return 0
        self.metrics.set_lags(source.lag())
        self.metrics.count_skipped(source.skipped())
        self.metrics.count_deadletters_minimal(sink.fallbacks())
        if self._follow:  # only maps are wanted from what follows
            self._follow_maps(self.aggregates.follow())
        if not raw:
            self._flush(source, sink)  # idle: make everything durable now
            self._batch_log.tick()
            self._reject_log.note(())  # the rejects held back, once their minute has passed
            return 0
        started = time.monotonic()
        fp = self.failpoint
        if fp is not None:
            fp.hit("decode")
        _, first, offsets, _ = split_poll(raw)  # only the scored topic is subscribed
        batch, rejects = decode_scored(raw, cfg)
        res = self.sampler.process(batch)
        starts = {p: o for (_, p), o in first.items()}
        ends = {p: o for (_, p), o in offsets.items()}
        changes = self.sampler.take_changes()
        messages = self.published.record(res.traffic, changes, starts, ends)
        for p, key, value in messages:
            sink.produce(topics.aggregates, key, value, p % self._n_aggregates)
        if any(cfg.model(k[0]).recalibrate for k in changes.controls):
            # a control took a map the stream does not determine: out before its requests
            sink.flush(FLUSH_TIMEOUT_S)
            if fp is not None:
                fp.hit("flush")
        for req in res.requests:
            sink.produce(topics.requests, req.key, req.to_json())
        for rej in rejects:
            sink.produce(
                topics.deadletter,
                deadletter_key(rej),
                deadletter_value(rej),
                fallback=deadletter_minimal(rej),
            )
        if fp is not None:
            fp.hit("produce")
        self._pending.update(offsets)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self._flush(source, sink)
        count_step(
            self.metrics, res.records, res.requested, {}, rejects, topics=self.config.kafka.topics
        )
        self._reject_log.note(rejects)
        if res.folded:
            self.metrics.count_segments_folded(res.folded)
        took = time.monotonic() - started
        self.metrics.observe_batch(took)
        self._batch_log.note(
            took, offsets, records=len(raw), requests=len(res.requests), states=len(messages),
            rejected=len(rejects),
        )  # fmt: skip
        return len(raw)
