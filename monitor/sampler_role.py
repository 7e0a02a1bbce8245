"""``monitor run --role sampler``: audit decisions for a share of the scored topic's partitions.

Samplers join the consumer group ``<kafka.group_id>-sampler`` over the scored topic and keep no
local state. One poll is one step::

    poll -> decode -> sampler -> produce requests, bucket states (monitor.aggregates),
         dead letters -> flush -> Kafka commit -> metrics

On every assignment the sampler reads the latest state of its partitions' buckets back from the
aggregates topic and resumes at the group's committed offsets: the controls in force, the traffic
that later controls learn from and, per bucket, the offset below which records are counted
(``SamplerLog``). Decisions are deterministic, so a partition handed from one sampler to another,
even by a SIGKILL between the flush and the commit, yields the same requests (some twice, with
the same key and bytes, which the estimator ignores) and the same aggregates as one ``--role all``
process. A failed step (broker down) rebuilds the same way and seeks back to the last offsets
whose state was flushed.
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
from collections.abc import Callable, Collection, Sequence
from operator import attrgetter

from monitor.aggregates import SamplerLog, latest
from monitor.config import Config
from monitor.daemon import FLUSH_TIMEOUT_S, TP, Failpoint, Metrics, Sink, Source
from monitor.errors import BrokerUnavailable
from monitor.records import RawRecord, deadletter_value, decode_scored

log = logging.getLogger(__name__)

_TOPIC_PARTITION = attrgetter("topic", "partition")
_OFFSET = attrgetter("offset")

Entry = tuple[int, bytes | None, bytes | None]  # (partition, key, value)
# reads the given partitions (a function of the partition count) of the aggregates topic
ReadAggregates = Callable[[Callable[[int], Collection[int]]], list[Entry]]


class SamplerEngine:
    """The decisions of the scored partitions this process is assigned, one poll at a time."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        read_aggregates: ReadAggregates,
        *,
        failpoint: Failpoint | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.read_aggregates = read_aggregates
        self.failpoint = failpoint
        self.n_partitions = 1
        self._assigned: set[int] = set()  # scored partitions
        self._durable: dict[TP, int] = {}  # next offsets whose state is on the aggregates topic
        self._n_aggregates = 1
        self._stale = False  # the last rebuild failed: the next step must not use the state
        self.log = SamplerLog()
        self.sampler = self.log.service(config, self.n_partitions)

    # ------------------------------------------------------------ assignment
    def offsets(self) -> dict[TP, int]:
        """Next offsets whose state is on the aggregates topic (since the last assignment)."""
        return dict(self._durable)

    def on_assigned(self, assigned: Sequence[TP]) -> None:
        """A new assignment: rebuild the state of its partitions (called inside ``poll``).

        The partitions resume at the group's committed offsets. A failure is remembered: the
        next step fails instead, and its rollback rebuilds again.
        """
        scored = self.config.kafka.topics.scored
        self._assigned = {p for (t, p) in assigned if t == scored}
        self._durable = {}
        try:
            self._rebuild()
        except BrokerUnavailable as exc:
            self._failed_rebuild(exc)

    def _failed_rebuild(self, exc: BrokerUnavailable) -> None:
        self._stale = True
        log.warning(
            "cannot rebuild the sampler state yet",
            extra={"event": "sampler_rebuild_failed", "error": str(exc)},
        )

    def _rebuild(self) -> None:
        started = time.monotonic()
        assigned = set(self._assigned)

        def select(n: int) -> set[int]:
            self._n_aggregates = max(1, n)
            return {p % self._n_aggregates for p in assigned}

        records = self.read_aggregates(select)
        states = latest((k, v) for _, k, v in records)
        self.log = SamplerLog({k: s for k, s in states.items() if s.partition in assigned})
        self.sampler = self.log.service(self.config, self.n_partitions)
        self._stale = False
        log.info(
            "sampler state rebuilt",
            extra={
                "event": "sampler_rebuilt",
                "partitions": sorted(assigned),
                "buckets": len(self.log.states),
                "records_read": len(records),
                "seconds": round(time.monotonic() - started, 3),
            },
        )

    def set_partitions(self, n: int) -> None:
        """The scored topic's partition count (the budget is split evenly across them)."""
        self.n_partitions = max(1, n)
        self.sampler.n_partitions = self.n_partitions

    def rollback(self, source: Source) -> None:
        """Rebuild from the aggregates topic; rewind to the last offsets it reflects.

        Those are this process's flushed offsets, else the group's committed ones. Never
        raises: with the broker still away, the next step fails and rolls back again.
        """
        try:
            self._rebuild()
            committed = source.committed()
        except BrokerUnavailable as exc:
            self._failed_rebuild(exc)
            return
        source.seek({**committed, **self._durable})

    def maybe_publish(self, force: bool = False) -> None:
        """Nothing to publish: estimates belong to the estimator."""

    # ------------------------------------------------------------------ step
    def step(self, source: Source, sink: Sink) -> int:
        """Poll once and process; return the number of records consumed."""
        cfg = self.config
        topics = cfg.kafka.topics
        raw = source.poll(cfg.kafka.max_poll_records, cfg.kafka.poll_timeout_ms / 1000.0)
        if self._stale:
            msg = "sampler state not rebuilt after the last assignment"
            raise BrokerUnavailable(msg)
        for (t, p), v in source.lag().items():
            self.metrics.set_lag(t, p, v)
        if not raw:
            return 0
        started = time.monotonic()
        fp = self.failpoint
        if fp is not None:
            fp.hit("decode")
        offsets: dict[TP, int] = {}
        scored: list[RawRecord] = []
        for (t, p), run in itertools.groupby(raw, _TOPIC_PARTITION):
            recs = list(run)
            scored.extend(recs)
            offsets[(t, p)] = max(offsets.get((t, p), 0), max(map(_OFFSET, recs)) + 1)
        batch, rejects = decode_scored(scored, cfg, now=time.time())
        res = self.sampler.process(batch)
        ends = {p: o for (t, p), o in offsets.items() if t == topics.scored}
        messages = self.log.record(res.traffic, self.sampler.take_changes(), ends)
        for req in res.requests:
            sink.produce(topics.requests, req.key, req.to_json())
        for p, key, value in messages:
            sink.produce(topics.aggregates, key, value, p % self._n_aggregates)
        for rej in rejects:
            sink.produce(topics.deadletter, rej.record.key, deadletter_value(rej))
        if fp is not None:
            fp.hit("produce")
        sink.flush(FLUSH_TIMEOUT_S)
        if fp is not None:
            fp.hit("flush")
        self._durable.update(offsets)
        try:
            source.commit(offsets)
        except BrokerUnavailable as exc:
            # the aggregates topic holds the state: a replay re-decides without recounting
            log.warning("offset commit failed", extra={"event": "commit_failed", "error": str(exc)})
        if fp is not None:
            fp.hit("commit")
        if res.records:
            self.metrics.count_records(res.records)
        if res.requested:
            self.metrics.count_requests(res.requested)
        if res.folded:
            self.metrics.count_segments_folded(res.folded)
        if rejects:
            self.metrics.count_rejects(collections.Counter(r.reason for r in rejects))
        self.metrics.observe_batch(time.monotonic() - started)
        log.info(
            "batch processed",
            extra={
                "event": "batch_processed",
                "records": len(raw),
                "requests": len(res.requests),
                "states": len(messages),
                "rejected": len(rejects),
                "offsets": {f"{t}/{p}": o for (t, p), o in sorted(offsets.items())},
            },
        )
        return len(raw)
