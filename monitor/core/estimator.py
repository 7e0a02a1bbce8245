"""The estimator: joins labels to requests and turns windows of them into a ``Snapshot``.

Requests are upserted idempotently (from the requests topic, and directly from the sampler in
the same process). A label is matched to its request by request id (or by record id, which
gives ``blake2b(f"{salt}|{model}|{id}")``): the first valid label stands; the same value again
is ``duplicate_label``, another value ``conflicting_label``; a label for a request whose deadline
the model's watermark has passed, and written after the scored stream passed it
(``_written_late``), is ``expired_request``; a label whose request is not known yet
waits (parked, bounded) and becomes ``unknown_request`` after ``label_park_grace_s``. A label
with a Kafka timestamp is judged against its deadline only once every scored record written
before it has been read (``set_read_through``; until then it waits parked too), so the judgement
does not depend on the order the topics were read in. A label
naming a record id or model other than its request's is ``unknown_request`` too, and with
``labels.token_secret`` set a label must echo the request's HMAC token (``bad_token``, judged
before a label is parked, so forged labels never take a parked one's place).

Per (model, segment, window) the estimate is the Horvitz-Thompson ratio of seed 000 Eq. 4 with
``v = 1/pi`` (``monitor.stats.measures.measure_all``) over the labelled requests of the window's
buckets; the intrinsic F ``sum(f s) / (alpha sum(f) + (1 - alpha) sum(s))`` and the PSI of the
score histogram against the preceding window come from the label-free traffic aggregates.
Segment "" aggregates all the model's traffic; other rows are per segment.

With ``models.NAME.estimator: model_assisted`` the exported (and alerted) F_alpha, precision
and recall are the regression (GREG) estimates of ``monitor.stats.greg`` where usable
(``greg.choose``): each labelled request's p_hat as its request recorded it, the strata's N_h and
S_h = sum p_hat from the window's traffic aggregates (under the map of the control each record was
decided with, the same p_hat), and the same two-phase weights v = 1/(pi r_c) as the ratio. The
ratio estimates are kept beside them (``WindowEstimate.ratio``).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.schema import Config, ModelConfig
from monitor.core.messages import AuditRequest, LabelResult, Reject, request_id_for, token_matches
from monitor.core.recalibration import label_window_buckets
from monitor.core.records import ScoredBatch
from monitor.core.sampler import retention_buckets
from monitor.core.snapshot import Snapshot, WindowEstimate, WorstCase
from monitor.core.windows import (
    GroupKey,
    TrafficAggregate,
    bucket_of,
    preceding_buckets,
    window_buckets,
)
from monitor.errors import RejectReason
from monitor.stats.calibration import calibration_error
from monitor.stats.drift import SCORE_BINS, psi
from monitor.stats.estimate import Confusion, Estimate
from monitor.stats.falpha import intrinsic_falpha_from_sums, intrinsic_falpha_se_from_sums
from monitor.stats.greg import StratumTraffic, choose
from monitor.stats.measures import measure_all
from monitor.stats.response import pending_share, response_sample, worst_case_bounds
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import Widening, scores_disagree

SegKey = tuple[str, str, int]  # (model, segment, bucket)
_REQUEST_ID = attrgetter("request.request_id")


@dataclass
class RequestState:
    """A request and, once answered, its label."""

    request: AuditRequest
    label: int | None = None
    labeler: str | None = None
    label_ts: float | None = None


@dataclass(frozen=True)
class ParkedLabel:
    """A label waiting for its request, or for its judgement; ``parked_at`` is wall-clock seconds.

    Whether it waits for its request or for its judgement is whether its request is known
    (``EstimatorService.handle_labels``): the store keeps both alike.
    """

    request_id: str
    label: LabelResult
    parked_at: float


@dataclass
class EstimatorChanges:
    """State changed since the last ``take_changes`` (what the store must persist)."""

    traffic: dict[SegKey, TrafficAggregate] = field(default_factory=dict)
    requests: dict[str, RequestState] = field(default_factory=dict)
    parked_added: list[ParkedLabel] = field(default_factory=list)
    parked_removed: list[ParkedLabel] = field(default_factory=list)
    watermarks: dict[str, float] = field(default_factory=dict)
    prune: dict[str, int] = field(default_factory=dict)  # model -> first bucket kept
    requests_removed: list[str] = field(default_factory=list)  # past the horizon and deadline
    first_written: bool = False  # ``EstimatorService.first_written`` changed


def _record_of(req: AuditRequest) -> tuple[float, float, str]:
    """What a request holds of its scored record beyond its id: score, event time, segment."""
    return req.score, req.ts, req.segment


class EstimatorService:
    """Labels joined to requests, per-window estimates (state: aggregates, requests, parked)."""

    def __init__(
        self,
        config: Config,
        clock: Callable[[], float] = time.time,
        *,
        traffic: Mapping[SegKey, TrafficAggregate] | None = None,
        requests: Iterable[RequestState] = (),
        parked: Iterable[ParkedLabel] = (),
        watermarks: Mapping[str, float] | None = None,
        first_written: Iterable[Sequence[Any]] = (),
    ) -> None:
        self.config = config
        self.clock = clock
        # the reported windows and their PSI reference, and the labels (with their traffic's
        # score histogram) that the calibration maps are fitted on, however short the windows
        self.retention = max(
            retention_buckets(config), label_window_buckets(config.windows.bucket_s)
        )
        self._traffic: dict[SegKey, TrafficAggregate] = dict(traffic or {})
        self._requests: dict[str, RequestState] = {s.request.request_id: s for s in requests}
        self._parked: dict[str, list[ParkedLabel]] = {}
        self._n_parked = 0
        for item in parked:
            self._parked.setdefault(item.request_id, []).append(item)
            self._n_parked += 1
        # every scored record (role estimator: aggregates state) written before this Kafka time
        # (ms) has been read (``set_read_through``; +inf: all of it, as for a caller that gives
        # none); and a heap of (Kafka ms, request id) of the first label waiting for judgement
        # of each known request, stale entries skipped when popped
        self._read_through = math.inf
        self._judging: list[tuple[int, str]] = []
        for rid, items in self._parked.items():
            if rid in self._requests:
                self._judging.append((items[0].label.source.timestamp_ms, rid))
        heapq.heapify(self._judging)
        self._watermarks: dict[str, float] = dict(watermarks or {})
        # (model, bucket) -> earliest Kafka timestamp (ms) of a scored record of the bucket
        self._first_written: dict[tuple[str, int], int] = {
            (str(m), int(b)): int(ms) for m, b, ms in first_written
        }
        self._pruned: dict[str, int] = {}  # model -> horizon last pruned to
        # model -> requests whose record id came again with other content (``upsert_requests``)
        self._duplicate_ids: dict[str, int] = {}
        self._changes = EstimatorChanges()
        self.labels_accepted: dict[str, int] = {}
        self.label_latencies: dict[str, list[float]] = {}

    # ------------------------------------------------------------------ state
    def take_changes(self) -> EstimatorChanges:
        """Return and reset the changes since the last call."""
        out, self._changes = self._changes, EstimatorChanges()
        return out

    def take_label_counts(self) -> dict[str, int]:
        """Labels accepted per model since the last call."""
        out, self.labels_accepted = self.labels_accepted, {}
        return out

    def take_label_latencies(self) -> dict[str, list[float]]:
        """Event-time latencies of the labels accepted per model since the last call.

        A label's latency is the model's watermark when it was accepted minus its record's
        event time (seconds of the scored stream's clock, like the deadlines).
        """
        out, self.label_latencies = self.label_latencies, {}
        return out

    @property
    def n_parked(self) -> int:
        """Labels waiting for their request or for their judgement."""
        return self._n_parked

    def request(self, request_id: str) -> RequestState | None:
        """The state of one request, if known."""
        return self._requests.get(request_id)

    def unconfigured_models(self) -> list[str]:
        """Models with stored state that the configuration no longer has (not estimated)."""
        return sorted(set(self._watermarks) - set(self.config.models))

    def watermark(self, model: str) -> float:
        """The largest event time seen on the scored stream for ``model`` (-inf if none)."""
        return self._watermarks.get(model, -math.inf)

    def _model(self, model: str) -> ModelConfig:
        return self.config.model(model)

    def labelled(self, model: str, since_bucket: int) -> tuple[LabeledSample, npt.NDArray[np.str_]]:
        """The answered requests of ``model`` from ``since_bucket`` on, in request-id order.

        For the calibration maps (``monitor.core.recalibration``): each with the pi it was drawn
        with (v = 1/pi), whatever the order the labels arrived in; and each one's segment.
        """
        rows = sorted(
            (
                s
                for s in self._requests.values()
                if s.request.model == model
                and s.label is not None
                and s.request.bucket >= since_bucket
            ),
            key=_REQUEST_ID,
        )
        sample = LabeledSample.poisson(
            [s.request.score for s in rows],
            [s.request.pred for s in rows],
            [s.label or 0 for s in rows],
            [s.request.pi for s in rows],
        )
        return sample, np.array([s.request.segment for s in rows], dtype=np.str_)

    def score_histogram(self, model: str, since_bucket: int) -> list[int]:
        """The score counts of ``model``'s traffic from ``since_bucket`` on.

        In the bins of ``monitor.stats.drift.score_bins``: the traffic the requests of
        ``labelled(model, since_bucket)`` were drawn from.
        """
        total = np.zeros(SCORE_BINS, dtype=np.int64)
        for (m, _, bucket), agg in self._traffic.items():
            if m == model and bucket >= since_bucket:
                total += agg.hist
        return [int(c) for c in total]

    def _horizon(self, model: str) -> int | None:
        wm = self._watermarks.get(model)
        if wm is None:
            return None
        return int(bucket_of(np.array([wm]), self.config.windows.bucket_s)[0]) - self.retention + 1

    @property
    def first_written(self) -> list[list[Any]]:
        """``[model, bucket, ms]`` rows of ``_note_written`` (for the store), sorted."""
        return [[m, b, ms] for (m, b), ms in sorted(self._first_written.items())]

    def _note_written(
        self,
        model: npt.NDArray[Any],
        bucket: npt.NDArray[np.int64],
        written_ms: npt.NDArray[np.int64],
    ) -> None:
        """Per (model, bucket), the earliest Kafka timestamp at which its traffic was written.

        What ``_written_late`` compares a label's own Kafka timestamp with: one entry per scored
        record (role ``all`` and ``sampler``), or per aggregates state in role ``estimator``,
        whose state records a sampler writes once it has read the bucket's records (later by
        its lag, so there a label is late only once a sampler had passed its deadline). A
        minimum over the entries, so it does not depend on how polls cut them; entries without
        a timestamp (``written_ms <= 0``) are left out.
        """
        ok = written_ms > 0
        if not ok.any():
            return
        bucket, written, models = bucket[ok], written_ms[ok], model[ok]
        for name in np.unique(models).tolist():
            sel = models == name
            order = np.argsort(bucket[sel], kind="stable")
            b_sorted = bucket[sel][order]
            starts = np.flatnonzero(np.r_[True, b_sorted[1:] != b_sorted[:-1]])
            firsts = np.minimum.reduceat(written[sel][order], starts)
            for b, ms in zip(b_sorted[starts].tolist(), firsts.tolist(), strict=True):
                key = (str(name), int(b))
                if ms < self._first_written.get(key, ms + 1):
                    self._first_written[key] = int(ms)
                    self._changes.first_written = True

    def note_scored(self, batch: ScoredBatch) -> None:
        """``_note_written`` for the scored records of ``batch`` (none without timestamps)."""
        if batch.written_ms is not None:
            bucket = bucket_of(batch.ts, self.config.windows.bucket_s)
            self._note_written(batch.model, bucket, batch.written_ms)

    def note_published(self, written: Sequence[tuple[str, int, int]]) -> None:
        """``_note_written`` for a sampler's aggregates states: ``(model, bucket, Kafka ms)``."""
        if written:
            model, bucket, ms = zip(*written, strict=True)
            self._note_written(np.array(model), np.array(bucket, np.int64), np.array(ms, np.int64))

    def _written_late(self, req: AuditRequest, lab: LabelResult) -> bool:
        """Whether ``lab`` was written after the scored stream passed ``req``'s deadline.

        The watermark passing the deadline says so only when the topics are read in the order
        they were written; after an outage or with lag, scored records written after the label
        can be read before it (and all its on-time labels would expire). So where Kafka
        timestamps are known, a label is late only if a scored record of a bucket after the
        deadline's was written before it (``_note_written``; in role ``estimator``: a sampler's
        state of such a bucket): within the deadline's own bucket a label is on time. Such a
        label is judged only once every record written before it has been read
        (``_judgeable``): the records read so far would otherwise decide, and they depend on the
        order the topics were read in. Without a label timestamp, or without any written time of
        the model's traffic, the watermark alone decides.
        """
        written = lab.source.timestamp_ms
        known = [(b, ms) for (m, b), ms in self._first_written.items() if m == req.model]
        if written <= 0 or not known:
            return True
        after = int(bucket_of(np.array([req.deadline]), self.config.windows.bucket_s)[0])
        return any(b > after and ms <= written for b, ms in known)

    # ---------------------------------------------------------------- traffic
    def apply_traffic(self, deltas: Mapping[GroupKey, TrafficAggregate]) -> None:
        """Add per-(model, segment, bucket, partition) deltas; advance watermarks; prune."""
        moved: set[str] = set()
        for key, agg in deltas.items():
            if agg.ts_max > self._watermarks.get(key.model, -math.inf):
                self._watermarks[key.model] = agg.ts_max
                self._changes.watermarks[key.model] = agg.ts_max
                moved.add(key.model)
        for key, agg in deltas.items():
            horizon = self._horizon(key.model)
            if horizon is not None and key.bucket < horizon:
                continue
            k = (key.model, key.segment, key.bucket)
            total = self._traffic.get(k, TrafficAggregate.zero()) + agg
            self._traffic[k] = total
            self._changes.traffic[k] = total
        for model in moved:
            self._prune(model)

    def _prune(self, model: str) -> None:
        horizon = self._horizon(model)
        if horizon is None or self._pruned.get(model) == horizon:
            return
        self._pruned[model] = horizon
        old = [k for k in self._traffic if k[0] == model and k[2] < horizon]
        # a request stays until its deadline too: a label may come for it until then
        wm = self.watermark(model)
        stale = [
            r
            for r, s in self._requests.items()
            if s.request.model == model
            and s.request.bucket < horizon
            and s.request.deadline < wm
            and r not in self._parked  # labels wait for their judgement against it
        ]
        if not old and not stale:
            return
        for k in old:
            del self._traffic[k]
            self._changes.traffic.pop(k, None)
        for key in [k for k in self._first_written if k[0] == model and k[1] < horizon]:
            del self._first_written[key]
            self._changes.first_written = True
        for r in stale:
            del self._requests[r]
            self._changes.requests.pop(r, None)
        self._changes.requests_removed.extend(stale)
        self._changes.prune[model] = horizon

    # ---------------------------------------------------------------- requests
    def upsert_requests(
        self, requests: Iterable[AuditRequest], *, count_duplicates: bool = True
    ) -> list[Reject]:
        """Insert requests not known yet (idempotent); match labels parked for them.

        A request already known stands. A replay brings it again unchanged; one whose record
        (the same id and model, so the same request id) came again with another score, event
        time or segment is counted (``take_duplicate_ids``; not with ``count_duplicates`` False,
        for a process reading back the requests it made and counted): a producer re-sending a
        record it changed, or ids reused upstream. The later record is in the traffic but never
        audited under its id, and audit queues deduplicate by request id.
        """
        rejects: list[Reject] = []
        for req in requests:
            known = self._requests.get(req.request_id)
            if known is not None:
                if count_duplicates and _record_of(known.request) != _record_of(req):
                    self._duplicate_ids[req.model] = self._duplicate_ids.get(req.model, 0) + 1
                continue
            horizon = self._horizon(req.model)
            if horizon is not None and req.bucket < horizon:
                continue
            state = RequestState(req)
            self._requests[req.request_id] = state
            self._changes.requests[req.request_id] = state
            if req.request_id in self._parked:
                rejects.extend(self._release(req.request_id))
        return rejects

    def take_duplicate_ids(self) -> dict[str, int]:
        """Requests whose record id came again with other content since the last call, per model."""
        out, self._duplicate_ids = self._duplicate_ids, {}
        return out

    # ------------------------------------------------------------------ labels
    def _request_id(self, lab: LabelResult) -> str:
        if lab.request_id:
            return lab.request_id
        model = lab.model or self.config.default_model
        return request_id_for(self.config.salt, model, lab.record_id or "")

    def handle_labels(self, labels: Sequence[LabelResult]) -> list[Reject]:
        """Join labels to requests; return the rejects (the parked ones are not rejects yet)."""
        rejects: list[Reject] = []
        now = self.clock()
        for lab in labels:
            rid = self._request_id(lab)
            state = self._requests.get(rid)
            if state is None:
                bad = self._bad_token(rid, lab)
                if bad is not None:  # judged before parking: a forged label takes no place
                    rejects.append(bad)
                    continue
                rejects.extend(self._park(ParkedLabel(rid, lab, now), judging=False))
                continue
            waits = rid in self._parked or not self._judgeable(lab)
            if waits and self._screen(state, lab) is None:
                # judged once the scored records written before it are read, and after the
                # labels of its request read before it
                rejects.extend(self._park(ParkedLabel(rid, lab, now), judging=True))
                continue
            rej = self._apply(state, lab)
            if rej is not None:
                rejects.append(rej)
        return rejects

    def _park(self, item: ParkedLabel, judging: bool) -> list[Reject]:
        """Park ``item`` (for its request, or with ``judging`` for its judgement); the evicted."""
        items = self._parked.setdefault(item.request_id, [])
        items.append(item)
        if judging and len(items) == 1:
            heapq.heappush(self._judging, (item.label.source.timestamp_ms, item.request_id))
        self._n_parked += 1
        self._changes.parked_added.append(item)
        return self._evict_overflow()

    def set_read_through(self, written_ms: float) -> None:
        """Every scored record written (Kafka time, ms) before ``written_ms`` has been read.

        Role ``estimator``: every aggregates state (what ``note_published`` is fed). The caller
        (``monitor.runtime.engine``) gives, over the partitions it reads, the least of each one's
        newest Kafka timestamp read, or +inf for a partition read to its end. A label with a
        Kafka timestamp is judged against its deadline only once it is before this
        (``_judgeable``); ``judge_waiting`` then judges the labels that waited for it.
        """
        self._read_through = float(written_ms)

    def _judgeable(self, lab: LabelResult) -> bool:
        """Whether every scored record written at or before ``lab`` has been read.

        Then ``_written_late`` knows every record that can make ``lab`` late, whatever order
        the topics were read in. A label without a Kafka timestamp is judged at once (by the
        watermark).
        """
        written = lab.source.timestamp_ms
        return written <= 0 or written < self._read_through

    def judge_waiting(self) -> list[Reject]:
        """Judge the labels of known requests that waited for ``set_read_through`` to pass them.

        In the order they were read, per request (the first valid label stands).
        """
        out: list[Reject] = []
        while self._judging and self._judging[0][0] < self._read_through:
            _, rid = heapq.heappop(self._judging)
            if rid in self._parked and rid in self._requests:
                out.extend(self._release(rid))
        return out

    def _release(self, request_id: str) -> list[Reject]:
        """Judge the labels parked for a known request, in order, up to one that must wait."""
        state = self._requests[request_id]
        items = self._parked[request_id]
        out: list[Reject] = []
        while items:
            item = items[0]
            if self._screen(state, item.label) is None and not self._judgeable(item.label):
                heapq.heappush(self._judging, (item.label.source.timestamp_ms, request_id))
                break
            items.pop(0)
            self._n_parked -= 1
            self._changes.parked_removed.append(item)
            rej = self._apply(state, item.label)
            if rej is not None:
                out.append(rej)
        if not items:
            del self._parked[request_id]
        return out

    def _evict_overflow(self) -> list[Reject]:
        """Past ``label_park_max``, the oldest parked label goes.

        Waiting for its request it is ``unknown_request``; waiting for its judgement, it is
        judged on what has been read.
        """
        out: list[Reject] = []
        while self._n_parked > max(0, self.config.label_park_max):
            rid = next(iter(self._parked))
            items = self._parked[rid]
            item = items.pop(0)
            if not items:
                del self._parked[rid]
            self._n_parked -= 1
            self._changes.parked_removed.append(item)
            state = self._requests.get(rid)
            if state is None:
                out.append(self._unknown(item, "parked labels over the limit"))
                continue
            rej = self._apply(state, item.label)
            if rej is not None:
                out.append(rej)
            if items:  # the next one's turn to be judged
                heapq.heappush(self._judging, (items[0].label.source.timestamp_ms, rid))
        return out

    def _unknown(self, item: ParkedLabel, why: str) -> Reject:
        """``unknown_request`` for a parked label whose request never came, ``why`` it went.

        A label sent by record id names that id and model, as sent: the request id is a hash
        of them (``request_id_for``) that its sender never saw.
        """
        lab = item.label
        if lab.request_id:
            detail = f"no request {item.request_id} ({why})"
        else:
            model = lab.model or self.config.default_model
            if lab.model is None:
                named = f"model {model!r} (the default model: the label names none)"
            elif model not in self.config.models:
                named = f"model {model!r} (not a model this monitor audits)"
            else:
                named = f"model {model!r}"
            detail = (
                f"no request for id {lab.record_id!r} of {named}: request id "
                f"{item.request_id} ({why})"
            )
        return Reject(RejectReason.UNKNOWN_REQUEST, detail, lab.source)

    def expire_parked(self, requests_caught_up: bool = True) -> list[Reject]:
        """Reject labels parked longer than the grace once the requests topic is caught up.

        Only labels waiting for their request: one whose request is known waits for its
        judgement (``judge_waiting``), however long.
        """
        if not self._parked or not requests_caught_up:
            return []
        now = self.clock()
        grace = self.config.label_park_grace_s
        out: list[Reject] = []
        for rid in list(self._parked):
            if rid in self._requests:
                continue
            items = self._parked[rid]
            keep = [i for i in items if now - i.parked_at < grace]
            for item in items:
                if now - item.parked_at >= grace:
                    self._changes.parked_removed.append(item)
                    self._n_parked -= 1
                    out.append(self._unknown(item, f"waited {grace:g} s"))
            if keep:
                self._parked[rid] = keep
            else:
                del self._parked[rid]
        return out

    def _bad_token(self, request_id: str, lab: LabelResult) -> Reject | None:
        """``bad_token`` when a token secret is set and the label's token is wrong.

        The token is the HMAC of ``request_id`` alone, so it is judged before the request is known.
        """
        secret = self.config.label_token_secret
        if secret and not token_matches(secret, request_id, lab.token):
            return Reject(RejectReason.BAD_TOKEN, "token does not match", lab.source)
        return None

    def _screen(self, state: RequestState, lab: LabelResult) -> Reject | None:
        """The reject of ``lab`` that does not depend on when it is judged, if any.

        A wrong token, another record or model than the request's, or a request already
        labelled (``duplicate_label``, ``conflicting_label``).
        """
        req = state.request
        bad = self._bad_token(req.request_id, lab)
        if bad is not None:
            return bad
        if (lab.record_id is not None and lab.record_id != req.id) or (
            lab.model is not None and lab.model != req.model
        ):
            # e.g. a label of another model's request replayed with this request id
            detail = f"request {req.request_id} is for another record or model"
            return Reject(RejectReason.UNKNOWN_REQUEST, detail, lab.source)
        if state.label is not None:
            if state.label == lab.label:
                detail = f"request {req.request_id} already labelled"
                return Reject(RejectReason.DUPLICATE_LABEL, detail, lab.source)
            detail = f"request {req.request_id} already labelled {state.label}, got {lab.label}"
            return Reject(RejectReason.CONFLICTING_LABEL, detail, lab.source)
        return None

    def _apply(self, state: RequestState, lab: LabelResult) -> Reject | None:
        """Judge ``lab`` now: a reject, or None when it is accepted."""
        req = state.request
        rej = self._screen(state, lab)
        if rej is not None:
            return rej
        if self.watermark(req.model) > req.deadline and self._written_late(req, lab):
            detail = f"request {req.request_id} passed its deadline"
            return Reject(RejectReason.EXPIRED_REQUEST, detail, lab.source)
        state.label = int(lab.label)
        state.labeler = lab.labeler
        state.label_ts = lab.ts
        self._changes.requests[req.request_id] = state
        self.labels_accepted[req.model] = self.labels_accepted.get(req.model, 0) + 1
        latency = max(self.watermark(req.model) - req.ts, 0.0)
        self.label_latencies.setdefault(req.model, []).append(latency)
        return None

    # ---------------------------------------------------------------- snapshot
    def snapshot(self) -> Snapshot:
        """Every (model, segment, window) estimate at this moment, of the configured models.

        State stored for a model since removed from the configuration is kept but not estimated
        (it once was, with the default settings: other measures, other alerts).
        """
        out: list[WindowEstimate] = []
        bucket_s = self.config.windows.bucket_s
        watermarks = {m: t for m, t in self._watermarks.items() if m in self.config.models}
        for model in sorted(watermarks):
            w_bucket = int(bucket_of(np.array([watermarks[model]]), bucket_s)[0])
            out.extend(self._model_windows(model, w_bucket))
        return Snapshot(windows=tuple(out), watermarks=watermarks, created_at=self.clock())

    def _model_windows(self, model: str, w_bucket: int) -> list[WindowEstimate]:
        cfg = self._model(model)
        bucket_s = self.config.windows.bucket_s
        level = self.config.level
        traffic = _TrafficTable({k: v for k, v in self._traffic.items() if k[0] == model})
        segments = sorted(set(traffic.segment.tolist()) - {""})
        # in request-id order: the sums (and so the estimates) do not depend on arrival order
        reqs = sorted(
            (s for s in self._requests.values() if s.request.model == model),
            key=_REQUEST_ID,
        )
        r_bucket = np.array([s.request.bucket for s in reqs], dtype=np.int64)
        r_seg = np.array([s.request.segment for s in reqs], dtype=np.str_)
        r_score = np.array([s.request.score for s in reqs], dtype=np.float64)
        r_pred = np.array([s.request.pred for s in reqs], dtype=np.int8)
        r_pi = np.array([s.request.pi for s in reqs], dtype=np.float64)
        r_label = np.array([-1 if s.label is None else s.label for s in reqs], dtype=np.int8)
        r_dead = np.array([s.request.deadline for s in reqs], dtype=np.float64)
        r_phat = np.array(
            [math.nan if s.request.phat is None else s.request.phat for s in reqs],
            dtype=np.float64,
        )
        assisted = cfg.estimator == "model_assisted"
        wm = self._watermarks[model]
        rows: list[WindowEstimate] = []
        for seg in ["", *segments]:
            seg_mask = np.ones(len(reqs), dtype=bool) if seg == "" else r_seg == seg
            for name, window_s in self.config.windows.report:
                cur = window_buckets(w_bucket, window_s, bucket_s)
                ref = preceding_buckets(w_bucket, window_s, bucket_s)
                agg = traffic.total(seg, cur)
                ref_agg = traffic.total(seg, ref)
                ratio: tuple[Estimate, Estimate, Estimate] | None = None
                used, why = (False, False, False), ""
                in_win = seg_mask & (r_bucket >= cur.start) & (r_bucket < cur.stop)
                labelled = in_win & (r_label >= 0)
                unlabelled = in_win & (r_label < 0)
                dead = unlabelled & (r_dead < wm)  # past the deadline without a label
                missing = int(np.count_nonzero(dead))
                n_lab = int(np.count_nonzero(labelled))
                intrinsic = intrinsic_falpha_from_sums(
                    agg.pred_score_total, float(agg.n_pred), agg.score_total, cfg.alpha
                )
                intrinsic_se = intrinsic_falpha_se_from_sums(
                    agg.pred_score_total,
                    float(agg.n_pred),
                    agg.score_total,
                    float(agg.n),
                    cfg.alpha,
                )
                disagree = False
                if n_lab:
                    # answers as a second phase of sampling (monitor.stats.response)
                    sample = response_sample(
                        r_score[in_win],
                        r_pred[in_win],
                        r_label[in_win],
                        r_pi[in_win],
                        r_bucket[in_win],
                    )
                    m = measure_all(sample, cfg.alpha, level)
                    f, prec, rec = m.f, m.precision, m.recall
                    conf, lik, ess = m.confusion, m.likelihood, m.ess
                    lik_se = m.likelihood_log_se
                    if assisted:
                        ratio = (f, prec, rec)
                        choice = choose(
                            sample, r_phat[labelled], *_strata(agg), ratio, cfg.alpha, level
                        )
                        f, prec, rec = choice.f, choice.precision, choice.recall
                        used, why = choice.assisted, choice.reason
                    # the design may have missed false negatives the scores hid
                    disagree = scores_disagree(f, intrinsic, intrinsic_se)
                    if disagree:
                        wide = Widening.of(sample, cfg.alpha, m.f, m.recall)
                        f, rec = wide.apply(f, rec)
                        if ratio is not None:
                            r_f, r_rec = wide.apply(ratio[0], ratio[2])
                            ratio = (r_f, ratio[1], r_rec)
                else:
                    f = prec = rec = Estimate.missing(level)
                    conf = Confusion(math.nan, math.nan, math.nan, math.nan)
                    lik, ess, lik_se = math.nan, 0.0, math.nan
                    ratio = (f, prec, rec) if assisted else None
                    used, why = (False, False, False), "no labels" if assisted else ""
                drift = psi(ref_agg.hist, agg.hist) if ref_agg.n and agg.n else math.nan
                labels_in = (r_pred[in_win], r_label[in_win], r_pi[in_win])
                n_req = int(np.count_nonzero(in_win))
                recal_f = intrinsic_falpha_from_sums(
                    agg.pred_phat_total, float(agg.n_pred), agg.phat_total, cfg.alpha
                )
                ece = (
                    calibration_error(r_score[labelled], r_label[labelled], 1.0 / r_pi[labelled])
                    if n_lab
                    else math.nan
                )
                rows.append(
                    WindowEstimate(
                        model=model,
                        segment=seg,
                        window=name,
                        alpha=cfg.alpha,
                        f=f,
                        precision=prec,
                        recall=rec,
                        intrinsic_f=intrinsic,
                        intrinsic_se=intrinsic_se,
                        likelihood=lik,
                        ess=ess,
                        confusion=conf,
                        records=agg.n,
                        requests=n_req,
                        labels=n_lab,
                        pending=int(np.count_nonzero(unlabelled)) - missing,
                        missing=missing,
                        psi=float(drift),
                        likelihood_log_se=lik_se,
                        answer_rate=_answer_rates(r_pred[in_win], r_label[in_win]),
                        pending_weight=pending_share(r_pi[in_win], (unlabelled & ~dead)[in_win]),
                        missing_weight=pending_share(r_pi[in_win], dead[in_win]),
                        worst=_worst_case(*labels_in, cfg.alpha),
                        intrinsic_f_recalibrated=recal_f,
                        calibration_error=ece,
                        ratio=ratio,
                        assisted=used,
                        fallback=why,
                        scores_disagree=disagree,
                    )
                )
        return rows


def _strata(agg: TrafficAggregate) -> tuple[StratumTraffic, StratumTraffic]:
    """(N_0, S_0) and (N_1, S_1) of a window's traffic: records and sums of p_hat per stratum."""
    n1, s1 = float(agg.n_pred), agg.pred_phat_total
    return StratumTraffic(float(agg.n) - n1, agg.phat_total - s1), StratumTraffic(n1, s1)


def _answer_rates(pred: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """Answered / issued requests of the predicted negatives and of the predicted positives."""
    rates = []
    for k in (0, 1):
        issued = pred == k
        n = int(np.count_nonzero(issued))
        rates.append(int(np.count_nonzero(issued & (label >= 0))) / n if n else math.nan)
    return rates[0], rates[1]


def _worst_case(pred: np.ndarray, label: np.ndarray, pi: np.ndarray, alpha: float) -> WorstCase:
    """Worst-case bounds of F_alpha, precision and recall over the unanswered labels."""
    return WorstCase(
        f=worst_case_bounds(pred, label, pi, alpha),
        precision=worst_case_bounds(pred, label, pi, 1.0),
        recall=worst_case_bounds(pred, label, pi, 0.0),
    )


class _TrafficTable:
    """One model's bucket aggregates as columns, for fast window sums (numpy masks)."""

    def __init__(self, traffic: Mapping[SegKey, TrafficAggregate]) -> None:
        aggs = list(traffic.values())
        self.segment = np.array([k[1] for k in traffic], dtype=np.str_)
        self.bucket = np.array([k[2] for k in traffic], dtype=np.int64)
        self.ints = np.array(
            [
                [a.n, a.n_pred, a.sum_score, a.sum_pred_score, a.sum_phat, a.sum_pred_phat]
                for a in aggs
            ],
            dtype=np.int64,
        ).reshape(-1, 6)
        self.hist = np.array([a.hist for a in aggs], dtype=np.int64).reshape(len(aggs), SCORE_BINS)

    def total(self, segment: str, buckets: range) -> TrafficAggregate:
        """Sum over ``buckets`` of one segment ("" = all segments)."""
        mask = (self.bucket >= buckets.start) & (self.bucket < buckets.stop)
        if segment:
            mask &= self.segment == segment
        if not mask.any():
            return TrafficAggregate.zero()
        n, n_pred, s_score, s_pred_score, s_phat, s_pred_phat = (
            int(x) for x in self.ints[mask].sum(axis=0)
        )
        return TrafficAggregate(
            n=n,
            n_pred=n_pred,
            sum_score=s_score,
            sum_pred_score=s_pred_score,
            hist=self.hist[mask].sum(axis=0),
            sum_phat=s_phat,
            sum_pred_phat=s_pred_phat,
        )
