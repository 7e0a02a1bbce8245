"""The sampler: decides which scored records are sent to audit, and aggregates all traffic.

Per model the decisions of a batch are vectorised: q* (seed 000, Cor. 2) at the frozen control
of the record's (partition, bucket), defensive mixing, ``pi = min(1, kappa q)`` and the
deterministic decision ``hash_uniform(id, salt + "|" + model) < pi`` (see
``monitor.stats.budget``). A record's request id is ``blake2b(f"{salt}|{model}|{id}", 16)``, so
a replay makes the same decisions and produces byte-identical requests. A request records the
record's p_hat under the map of the control in force (on the aggregates' fixed-point grid), so
the estimator can pair each label with what the traffic aggregates summed for it.

Controls are frozen at the first record of a bucket on a partition from that partition's
aggregate of earlier buckets, and refreshed inside the bucket at its ``N``-th, ``2N``-th,
``4N``-th ... record on the partition (``refresh_records``; ``_next_refresh``; ``N`` records
after a stage with a pending map, below), and at the record after its event time passes a
quarter of a bucket beyond the latest stage (``budget.stage_due``), from the latest earlier
bucket plus the bucket's records so far. A batch is cut at those records, so the
aggregate used is exactly the traffic that preceded the record on its partition, wherever
batches were cut. A refresh is stored with the bucket's control (``Control.refreshes``, each
with the offset it is in force from): a sampler rebuilt from the state at committed offset C
decides the records after C under the refresh in force there (by offset), and its bucket
aggregate counts exactly the records below C, so the later refresh points and controls come out
the same as without the crash.
A sampler rebuilt from published bucket states (``monitor.core.aggregates``) is given, per bucket,
the offset below which the bucket's records are already counted: records a replay brings again
are decided again (the same requests) but not aggregated twice.
Records older than the retention horizon (``2 k`` buckets behind the partition's newest bucket,
``k`` the longest reported window) are counted but never audited, and so are those further behind
it than both ``k`` and the label deadline (``audit_span``): no label could come back in time.

``calibration`` holds, per model, the newest durable calibration map (DESIGN.md, "Learning
from the labels"). It is fitted from labels, so the caller sets it only once it is durable; a
control records the map it took, and a control read back from the store is used as it is. A
new map is first pending: the next control keeps deciding with the map its records were
normalised under and sums q* under the new one, and the control after it (the next refresh, now
``refresh_records`` records later, or the next bucket) takes the new map with ``mean_q*`` of the
records summed under it (``_next_stage``; ``monitor.stats.budget``, "Map changes"), so a map
change does not make a bucket overspend its budget. Each refresh records the bucket's
``(n, sum q*, sum pi)`` before it (its base), so the records summed under a map are known after
a restart too.
Every control also records the defensive share a shift of the score distribution asks for
(``monitor.stats.budget``, "Score shift"): the histogram of the records it learns from against
the earlier bucket's, kept while the map it was raised under stays (``_shift``).
A sampler rebuilt from published bucket states is also given the controls a run that did not
commit published beyond its resume point (``published``): a control frozen again at the same
record (a bucket's first, or a refresh point) is taken from there, map included, not computed
with the map this sampler happens to hold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from monitor.config.schema import Config, ModelConfig
from monitor.core.messages import AuditRequest, request_id_for, request_token
from monitor.core.records import ScoredBatch
from monitor.core.windows import (
    FIXED_ONE,
    GroupKey,
    TrafficAggregate,
    bucket_of,
    group_traffic,
    to_fixed,
)
from monitor.stats.budget import (
    MIN_COVERAGE,
    MIN_EXTRAPOLATED_RECORDS,
    NO_CALIBRATION,
    OTHER_MAP_CAP_RATIO,
    Base,
    Calibration,
    Control,
    Pace,
    Refresh,
    cap_ratio,
    control_for_bucket,
    most_budget,
    overspend_point,
    pace_change,
    rate_origin,
    selection_weights,
    stage_bases,
    stage_due,
    uniform_control,
)
from monitor.stats.drift import SHIFT_MAX, shift_share
from monitor.stats.selection import hash_uniform

OTHER_SEGMENT = "__other__"

PartKey = tuple[str, int, int]  # (model, partition, bucket)
Hist = npt.NDArray[np.int64]  # a score histogram (``monitor.stats.drift.score_histogram``)


def retention_buckets(config: Config) -> int:
    """Buckets kept behind the newest: twice the longest window (window + PSI reference)."""
    return 2 * _longest_window(config)


def _longest_window(config: Config) -> int:
    bucket_s = config.windows.bucket_s
    return max([math.ceil(w / bucket_s) for _, w in config.windows.report] + [1])


def audit_span(config: Config) -> int:
    """Buckets behind the newest whose records are still audited.

    Beyond both the longest window and the label deadline a request could never be answered
    in time (its deadline is behind the newest record, so the estimator counts it missing at
    once) and no window would count its label: a backfill of records 8 days old made 159
    requests whose labels were all refused (``expired_request``) and no metric showed them.
    """
    deadline = math.ceil(config.label_deadline_s / config.windows.bucket_s)
    return max(deadline, _longest_window(config))


def _earliest(
    best: tuple[int, int] | None, sel: npt.NDArray[np.intp], j: int, bucket: int
) -> tuple[int, int] | None:
    """``best`` or (``sel[j]``, ``bucket``), whichever comes first in the chunk.

    ``j`` beyond ``sel``: the bucket has no point in this chunk.
    """
    if j < len(sel) and (best is None or int(sel[j]) < best[0]):
        return int(sel[j]), bucket
    return best


@dataclass
class SamplerChanges:
    """State changed since the last ``take_changes`` (what the store must persist)."""

    traffic: dict[PartKey, TrafficAggregate] = field(default_factory=dict)
    controls: dict[PartKey, Control] = field(default_factory=dict)
    segments: set[tuple[str, str]] = field(default_factory=set)  # admitted
    dropped: set[tuple[str, str]] = field(default_factory=set)  # slots freed (``_expire``)
    prune: dict[tuple[str, int], int] = field(default_factory=dict)  # (model, partition) -> min


@dataclass
class SamplerResult:
    """What one scored batch produced."""

    requests: list[AuditRequest]
    traffic: dict[GroupKey, TrafficAggregate]  # deltas per (model, segment, bucket, partition)
    records: dict[str, int]
    requested: dict[str, int]
    folded: dict[str, int]  # records whose segment was folded into "__other__"


class SamplerService:
    """Audit decisions and traffic aggregates for scored batches (state: controls + aggregates)."""

    def __init__(
        self,
        config: Config,
        n_partitions: int = 1,
        *,
        traffic: Mapping[PartKey, TrafficAggregate] | None = None,
        controls: Mapping[PartKey, Control] | None = None,
        segments: Mapping[str, Mapping[str, int]] | None = None,
        counted: Mapping[PartKey, int] | None = None,
        published: Mapping[PartKey, Control] | None = None,
    ) -> None:
        self.config = config
        self.n_partitions = max(1, n_partitions)
        self.retention = retention_buckets(config)
        self._traffic: dict[tuple[str, int], dict[int, TrafficAggregate]] = {}
        for (m, p, b), agg in (traffic or {}).items():
            self._traffic.setdefault((m, p), {})[b] = agg
        self._controls: dict[PartKey, Control] = dict(controls or {})
        self._max_bucket: dict[tuple[str, int], int] = {}
        for m, p, b in self._controls:
            self._max_bucket[(m, p)] = max(b, self._max_bucket.get((m, p), b))
        # per model: each admitted segment's latest bucket (``_fold_segments``)
        self._segments: dict[str, dict[str, int]] = {
            m: dict(s) for m, s in (segments or {}).items()
        }
        # per (model, partition): bucket -> offset below which its records are already counted
        self._counted: dict[tuple[str, int], dict[int, int]] = {}
        for (m, p, b), through in (counted or {}).items():
            self._counted.setdefault((m, p), {})[b] = through
        # per key: the control published beyond the resume point (the stored control wins)
        self._published: dict[PartKey, Control] = dict(published or {})
        self._changes = SamplerChanges()
        # per model: the latest durable calibration map; new controls record it
        self.calibration: dict[str, Calibration] = {}

    def _newest_map(self, model: str) -> Calibration:
        """The newest durable map of ``model``; none where it is ``recalibrate: false``.

        A map stored before then keeps no say: the next controls take the raw scores as they
        take any new map (``_next_stage``).
        """
        if not self.model_config(model).recalibrate:
            return NO_CALIBRATION
        return self.calibration.get(model, NO_CALIBRATION)

    def model_config(self, model: str) -> ModelConfig:
        """The settings of ``model`` (defaults for a model not in the configuration)."""
        return self.config.model(model)

    def control(self, model: str, partition: int, bucket: int) -> Control | None:
        """The frozen control of a (model, partition, bucket), if any."""
        return self._controls.get((model, partition, bucket))

    def take_changes(self) -> SamplerChanges:
        """Return and reset the changes since the last call."""
        out, self._changes = self._changes, SamplerChanges()
        return out

    # ---------------------------------------------------------------- decisions
    def _fold_segments(
        self, model: str, segment: npt.NDArray[np.str_], bucket: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.str_], int]:
        """The records' segments with those beyond ``max_segments_per_model`` as ``__other__``.

        Segments are admitted in the order they first appear. A segment holds its slot while it
        has traffic inside the retention: when the cap binds, the segments whose latest bucket
        is behind the retention horizon of the new segment's first record give theirs up
        (``_expire``), so a deployment whose segments come and go (a campaign a week) keeps
        tracking the live ones instead of folding every new one for good.
        """
        uniq, first, inv = np.unique(segment, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        latest = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, inv, bucket)
        admitted = self._segments.setdefault(model, {})
        names = uniq.tolist()
        for j, seg in enumerate(names):  # seen in this batch: not expired by it
            if seg in admitted:
                admitted[seg] = max(admitted[seg], int(latest[j]))
        cap = self.config.max_segments_per_model
        mapping = [""] * len(uniq)
        for j in np.argsort(first, kind="stable").tolist():
            seg = names[j]
            if seg == "" or seg in admitted:
                mapping[j] = seg
                continue
            if len(admitted) >= cap:
                self._expire(model, int(bucket[first[j]]) - self.retention + 1)
            if len(admitted) < cap:
                admitted[seg] = int(latest[j])
                self._changes.segments.add((model, seg))
                self._changes.dropped.discard((model, seg))
                mapping[j] = seg
            else:
                mapping[j] = OTHER_SEGMENT
        out = np.asarray(mapping, dtype=np.str_)[inv]
        folded = np.count_nonzero(out == OTHER_SEGMENT) - np.count_nonzero(segment == OTHER_SEGMENT)
        return out, max(0, int(folded))

    def _expire(self, model: str, horizon: int) -> None:
        """Free the slots of ``model``'s segments whose latest bucket is before ``horizon``."""
        admitted = self._segments[model]
        for seg in [s for s, b in admitted.items() if b < horizon]:
            del admitted[seg]
            self._changes.segments.discard((model, seg))
            self._changes.dropped.add((model, seg))

    def _stored(self, key: PartKey, offset: int | None) -> Control | Refresh | None:
        """The control of ``key`` published beyond the resume point, if any.

        The one frozen at the bucket's start (``offset`` None) or the refresh in force from
        ``offset`` on.
        """
        pub = self._published.get(key)
        if pub is None:
            return None
        if offset is None:
            return replace(pub, refreshes=())
        return next((r for r in pub.refreshes if r.offset == offset), None)

    def _new_control(self, model: str, partition: int, bucket: int, horizon: int) -> Control:
        stored = self._stored((model, partition, bucket), None)
        if isinstance(stored, Control):
            return stored
        cfg = self.model_config(model)
        history = self._traffic.get((model, partition), {})
        earlier = [b for b in history if horizon <= b < bucket]
        if not earlier:
            ctl = uniform_control(cfg.labels_per_hour, cfg.expected_records_per_hour)
            newest = self._newest_map(model)
            return replace(ctl, accumulate=newest) if newest.version > 0 else ctl
        prev = max(earlier)
        agg = history[prev]
        before = self._controls.get((model, partition, prev))
        older = [b for b in earlier if b < prev]
        hists = (history[max(older)].hist, agg.hist) if older else None
        return self._next_stage(model, cfg, agg, [(before, agg)], prev_bucket=prev, hists=hists)

    def _next_stage(
        self,
        model: str,
        cfg: ModelConfig,
        window: TrafficAggregate,
        segs: Sequence[tuple[Control | None, TrafficAggregate]],
        *,
        prev_bucket: int,
        covered_s: float | None = None,
        hists: tuple[Hist, Hist] | None = None,
        pace: Pace | None = None,
    ) -> Control:
        """The control that follows the latest stage of ``segs`` (traffic ``window``).

        ``segs`` are the buckets of ``window`` with their controls, latest first (the bucket
        being refreshed, then the earlier one); g and kappa come from ``window``. The map the
        latest stage summed q* under is adopted when the records summed under it are the whole
        window or at least ``refresh_records`` (then ``mean_q*`` is theirs); otherwise the
        latest stage's map, g and ``mean_q*`` stay (module docstring). An adopted map that is
        older than the newest durable one leaves the newest pending (``accumulate``). The cap
        re-solve of kappa counts the records decided and summed under the adopted map, and
        the largest kappa they were decided at (``cap_kappa``). ``hists`` (reference, current score
        histograms) give the score shift's share (:func:`_shift`). ``pace``: a refresh in a
        surge or a lull (``budget.pace_change``).
        """
        newest = self._newest_map(model)
        head = segs[0][0]
        if head is None:  # the earlier bucket's control is gone: no map to match
            new = self._control_from(
                model,
                cfg,
                window,
                newest,
                window.mean_qstar,
                prev_bucket=prev_bucket,
                ratio=1.0,
                covered_s=covered_s,
                pace=pace,
            )
            return replace(new, shift=_shift(cfg.defensive, hists, newest, None))
        latest = head.latest
        summed = latest.summed
        run = _trailing(segs, lambda c: c.summed.version == summed.version)
        adopt = run is None or run.whole or run.n >= max(1, cfg.refresh_records)
        chosen = summed if adopt else latest.calibration
        decided = latest.calibration.version
        cap = _trailing(segs[:1], lambda c: c.calibration.version == decided)
        if cap is None:  # a store without refresh bases: the whole bucket, as it was
            agg = segs[0][1]
            most = max(c.kappa for c, _ in stage_bases(head))
            cap = _Run(agg.n, agg.sum_qstar, agg.sum_pi, agg.sum_uncapped, True, most)
        ratio = cap_ratio(cap.sum_pi / FIXED_ONE, cap.sum_uncapped / FIXED_ONE)
        if chosen.version != decided:  # measured under the map being replaced
            ratio = max(ratio, OTHER_MAP_CAP_RATIO)
        if not adopt:
            mq = latest.mean_qstar
        elif run is None or run.whole:
            mq = window.mean_qstar
        else:
            mq = run.sum_qstar / FIXED_ONE / run.n
        new = self._control_from(
            model,
            cfg,
            window,
            chosen,
            mq,
            prev_bucket=prev_bucket,
            ratio=ratio,
            cap_kappa=cap.kappa,
            covered_s=covered_s,
            pace=pace,
        )
        new = replace(new, shift=_shift(cfg.defensive, hists, chosen, latest))
        if not adopt:
            return replace(
                new, g=latest.g, mean_qstar=latest.mean_qstar, accumulate=latest.accumulate
            )
        return replace(new, accumulate=newest) if newest.version != chosen.version else new

    def _control_from(
        self,
        model: str,
        cfg: ModelConfig,
        agg: TrafficAggregate,
        calibration: Calibration,
        mean_qstar: float,
        *,
        prev_bucket: int,
        ratio: float,
        covered_s: float | None,
        pace: Pace | None = None,
        cap_kappa: float | None = None,
    ) -> Control:
        """``control_for_bucket`` from the traffic ``agg`` (``covered_s``: the time it spans)."""
        return control_for_bucket(
            n=agg.n,
            n_pred=agg.n_pred,
            pred_score_total=agg.pred_phat_total,
            score_total=agg.phat_total,
            mean_qstar=mean_qstar,
            ts_min=agg.ts_min,
            prev_bucket=prev_bucket,
            alpha=cfg.alpha,
            labels_per_hour=cfg.labels_per_hour,
            bucket_s=self.config.windows.bucket_s,
            n_partitions=self.n_partitions,
            calibration=calibration,
            cap_ratio=ratio,
            cap_kappa=cap_kappa,
            covered_s=covered_s,
            expected_records_per_hour=cfg.expected_records_per_hour,
            pace=pace,
        )

    def _prune(self, model: str, partition: int, horizon: int) -> None:
        hist = self._traffic.get((model, partition), {})
        for b in [b for b in hist if b < horizon]:
            del hist[b]
        for key in [k for k in self._controls if k[0] == model and k[1] == partition]:
            if key[2] < horizon:
                del self._controls[key]
        self._changes.prune[(model, partition)] = horizon

    def process(self, batch: ScoredBatch) -> SamplerResult:
        """Decide audits for a validated batch and aggregate its traffic."""
        result = SamplerResult([], {}, {}, {}, {})
        if len(batch) == 0:
            return result
        order = np.lexsort((batch.offset, batch.partition))
        for model in np.unique(batch.model).tolist():
            idx_m = order[batch.model[order] == model]
            self._process_model(str(model), batch, idx_m, result)
        return result

    def _process_model(
        self, model: str, batch: ScoredBatch, idx: npt.NDArray[np.intp], result: SamplerResult
    ) -> None:
        cfg = self.model_config(model)
        ts = batch.ts[idx]
        bucket = bucket_of(ts, self.config.windows.bucket_s)
        segment, folded = self._fold_segments(model, batch.segment[idx], bucket)
        n = len(idx)
        cols = _Cols(
            ids=batch.ids[idx],
            offset=batch.offset[idx],
            score=batch.score[idx],
            pred=batch.pred[idx],
            ts=ts,
            segment=segment,
            bucket=bucket,
            u=hash_uniform(batch.ids[idx], f"{self.config.salt}|{model}"),
            qstar=np.zeros(n, dtype=np.float64),
            pi=np.zeros(n, dtype=np.float64),
            phat=batch.score[idx].astype(np.float64),
            uncapped=np.zeros(n, dtype=np.float64),
        )
        part = batch.partition[idx]
        for p in np.unique(part).tolist():
            rows = np.flatnonzero(part == p)  # already in offset order
            self._decide_partition(model, int(p), cfg, cols, rows, result=result)
        requested = cols.u < cols.pi
        result.records[model] = result.records.get(model, 0) + n
        result.requested[model] = result.requested.get(model, 0) + int(np.count_nonzero(requested))
        if folded:
            result.folded[model] = result.folded.get(model, 0) + folded
        secret = self.config.label_token_secret
        phat = to_fixed(cols.phat) / FIXED_ONE  # each request's p_hat as its aggregate summed it
        for j in np.flatnonzero(requested).tolist():
            rid = request_id_for(self.config.salt, model, str(cols.ids[j]))
            t = float(cols.ts[j])
            result.requests.append(
                AuditRequest(
                    request_id=rid,
                    id=str(cols.ids[j]),
                    model=model,
                    segment=str(cols.segment[j]),
                    score=float(cols.score[j]),
                    pred=int(cols.pred[j]),
                    pi=float(cols.pi[j]),
                    ts=t,
                    bucket=int(cols.bucket[j]),
                    deadline=t + self.config.label_deadline_s,
                    payload=batch.payload[int(idx[j])],
                    token=request_token(secret, rid) if secret else None,
                    phat=float(phat[j]),
                )
            )

    def _decide_partition(
        self,
        model: str,
        p: int,
        cfg: ModelConfig,
        cols: _Cols,
        rows: npt.NDArray[np.intp],
        *,
        result: SamplerResult,
    ) -> None:
        b = cols.bucket[rows]
        uniq, first = np.unique(b, return_index=True)
        cuts = sorted(
            int(first[j])
            for j in range(len(uniq))
            if (model, p, int(uniq[j])) not in self._controls
        )
        bounds = [0, *[c for c in cuts if c > 0], len(rows)]
        running = self._max_bucket.get((model, p))
        for lo, hi in itertools.pairwise(bounds):
            head = int(b[lo])
            running = head if running is None else max(running, head)
            horizon = running - self.retention + 1
            audited = max(horizon, running - audit_span(self.config))
            if (model, p, head) not in self._controls and head >= horizon:
                ctl = self._new_control(model, p, head, horizon)
                self._controls[(model, p, head)] = ctl
                self._changes.controls[(model, p, head)] = ctl
            pos = lo
            while pos < hi:  # cut again at the refresh points inside the chunk
                cut = self._next_refresh(
                    model, p, cols, rows[pos:hi], cfg=cfg, cb=b[pos:hi], horizon=horizon
                )
                stop = hi if cut is None else pos + cut[0]
                overspent = False
                if stop > pos:
                    self._decide(
                        model, p, cols, rows[pos:stop], cfg=cfg, cb=b[pos:stop], horizon=audited
                    )
                    over = self._overspend_cut(
                        model, p, cols, rows[pos:stop], cfg=cfg, cb=b[pos:stop], horizon=horizon
                    )
                    if over is not None:  # decided again after the refresh
                        cut, stop, overspent = over, pos + over[0], True
                if stop > pos:
                    self._aggregate(model, p, cols, rows[pos:stop], horizon, result=result)
                if cut is not None:
                    at = int(cols.offset[rows[stop]])
                    self._refresh(
                        model, p, cut[1], cfg=cfg, offset=at, horizon=horizon, force=overspent
                    )
                pos = stop
            if self._max_bucket.get((model, p)) != running:
                self._max_bucket[(model, p)] = running
                if any(b_ < horizon for b_ in self._traffic.get((model, p), {})):
                    self._prune(model, p, horizon)

    def _decide(
        self,
        model: str,
        p: int,
        cols: _Cols,
        chunk: npt.NDArray[np.intp],
        *,
        cfg: ModelConfig,
        cb: npt.NDArray[np.int64],
        horizon: int,
    ) -> None:
        """q*, pi and p_hat of ``chunk`` under the control in force at each record."""
        for bk in np.unique(cb).tolist():
            ctl = self._controls.get((model, p, int(bk)))
            if bk < horizon or ctl is None:
                continue  # too old: counted, never audited
            sel = chunk[cb == bk]
            stage = ctl.in_force(cols.offset[sel])
            for j in np.unique(stage).tolist():
                part = sel[stage == j]
                sel_j = selection_weights(
                    cols.score[part],
                    cols.pred[part],
                    cfg.alpha,
                    cfg.defensive,
                    ctl.stage(j),
                    segment=cols.segment[part],
                )
                cols.qstar[part] = sel_j.qstar
                cols.pi[part] = sel_j.pi
                cols.phat[part] = sel_j.p_hat
                cols.uncapped[part] = sel_j.uncapped

    def _next_refresh(
        self,
        model: str,
        p: int,
        cols: _Cols,
        chunk: npt.NDArray[np.intp],
        *,
        cfg: ModelConfig,
        cb: npt.NDArray[np.int64],
        horizon: int,
    ) -> tuple[int, int] | None:
        """The first refresh point in ``chunk``: (position in the chunk, bucket), if any.

        Refreshes are at the bucket's record numbers ``N``, ``2N``, ``4N`` ... (0-based,
        counting the records aggregated in the bucket on this partition), ``N =
        refresh_records``: the first power-of-two multiple of ``N`` beyond the latest stage's
        base; after a stage with a pending map, ``N`` records after its base instead. A refresh
        stored without its base counts refreshes (the r-th at ``N 2^(r-1)``); a bucket already
        past its point (a store written before refreshes existed) takes the next power-of-two
        point beyond its count.

        Also at the record after the bucket's event time (its counted records' latest ``ts``)
        passes the latest stage's due time (``budget.stage_due``: a quarter of a bucket after
        it), once ``MIN_EXTRAPOLATED_RECORDS`` records have come since that stage: a bucket
        too quiet to reach its next record point is refreshed as it goes. ``N`` 0: neither.
        """
        n_ref = cfg.refresh_records
        if n_ref <= 0:
            return None
        bucket_s = self.config.windows.bucket_s
        best: tuple[int, int] | None = None
        for bk, ctl, sel, agg in self._counted_parts(model, p, cols, chunk, cb=cb, horizon=horizon):
            n = 0 if agg is None else agg.n
            last, base = stage_bases(ctl)[-1]
            if base is None:  # a refresh stored without its base
                threshold = n_ref << len(ctl.refreshes)
            elif last.pending:
                threshold = base[0] + n_ref
            else:
                threshold = n_ref << (base[0] // n_ref).bit_length()
            if threshold < n:
                threshold = n_ref << max(len(ctl.refreshes), (n // n_ref).bit_length())
            best = _earliest(best, sel, threshold - n, bk)
            due = stage_due(ctl, float(bk * bucket_s), bucket_s)
            if due is not None and base is not None and len(sel):
                reached = np.maximum.accumulate(cols.ts[chunk[sel]])  # through each record
                before = np.concatenate(([-math.inf if agg is None else agg.ts_max], reached[:-1]))
                since = n - base[0] + np.arange(len(sel))  # counted since the stage, before each
                ok = (before > due) & (since >= MIN_EXTRAPOLATED_RECORDS)
                best = _earliest(best, sel, int(np.argmax(ok)) if ok.any() else len(sel), bk)
        return best

    def _counted_parts(
        self,
        model: str,
        p: int,
        cols: _Cols,
        chunk: npt.NDArray[np.intp],
        *,
        cb: npt.NDArray[np.int64],
        horizon: int,
    ) -> Iterator[tuple[int, Control, npt.NDArray[np.intp], TrafficAggregate | None]]:
        """The buckets of ``chunk`` a refresh point can fall in (``_next_refresh``, overspend).

        Per bucket within the horizon with a control: the bucket, its control, the positions in
        ``chunk`` of its records the aggregate will count (not those a replay brings again) and
        its aggregate so far.
        """
        hist = self._traffic.get((model, p), {})
        counted = self._counted.get((model, p))
        for bk in np.unique(cb).tolist():
            ctl = self._controls.get((model, p, int(bk)))
            if bk < horizon or ctl is None:
                continue
            sel = np.flatnonzero(cb == bk)
            if counted:  # records a replay brings again are not counted again
                sel = sel[cols.offset[chunk[sel]] >= counted.get(int(bk), -1)]
            yield int(bk), ctl, sel, hist.get(int(bk))

    def _overspend_cut(
        self,
        model: str,
        p: int,
        cols: _Cols,
        chunk: npt.NDArray[np.intp],
        *,
        cfg: ModelConfig,
        cb: npt.NDArray[np.int64],
        horizon: int,
    ) -> tuple[int, int] | None:
        """The first record of ``chunk`` (decided) after its bucket's spend crossed a point.

        ``budget.overspend_point`` above the latest stage's base: (position in the chunk,
        bucket) of the bucket's next record once ``sum pi`` (fixed point, so exact whatever the
        batches) reaches it, or of its first record here when an earlier chunk's last record
        did. None when no bucket of the chunk crosses one, or a stage has no base (an old store).
        """
        most = most_budget(
            cfg.labels_per_hour,
            self.config.windows.bucket_s,
            self.n_partitions,
            cfg.expected_records_per_hour,
        )
        best: tuple[int, int] | None = None
        for bk, ctl, sel, agg in self._counted_parts(model, p, cols, chunk, cb=cb, horizon=horizon):
            base = stage_bases(ctl)[-1][1]
            if base is None:
                continue
            spent = 0 if agg is None else agg.sum_pi
            point = overspend_point(most * FIXED_ONE, float(base[2]))
            if spent >= point:  # crossed by the last record counted: refresh at the next
                j = 0
            else:
                total = spent + np.cumsum(to_fixed(cols.pi[chunk[sel]]))
                j = int(np.searchsorted(total, point, side="left")) + 1
            best = _earliest(best, sel, j, bk)
        return best

    def _refresh(
        self,
        model: str,
        p: int,
        bucket: int,
        *,
        cfg: ModelConfig,
        offset: int,
        horizon: int,
        force: bool = False,
    ) -> None:
        """Refresh the control of (model, p, bucket) from the record at ``offset`` on.

        From the latest earlier bucket within the horizon plus the bucket's records so far, over
        the time they span (``control_for_bucket`` with ``covered_s``; ``_next_stage`` for the
        map and ``mean_q*``); kappa re-solved from the share of uncapped requests so far in the
        bucket under the map in force. In a surge or a lull (``budget.pace_change``: the bucket's
        current rate, since the latest refresh, ``budget.rate_origin``, is off that blend) kappa
        spreads the bucket's budget left over the records that rate expects in the rest of it. The
        refresh records the bucket's ``(n, sum q*, sum pi)`` so far as its base and the event
        time the bucket has reached as its ``at``. A refresh published beyond the resume point
        at ``offset`` is taken as it is. ``force``: at an overspend point
        (``_overspend_cut``), the budget left is spread whatever the rate.
        """
        key = (model, p, bucket)
        ctl = self._controls[key]
        history = self._traffic.get((model, p), {})
        cur = history.get(bucket, TrafficAggregate.zero())
        base: Base = (cur.n, cur.sum_qstar, cur.sum_pi, cur.sum_uncapped)
        stored = self._stored(key, offset)
        if isinstance(stored, Refresh):
            taken = ctl.refreshed(offset, stored.control, stored.base or base, stored.at)
            self._controls[key] = taken
            self._changes.controls[key] = taken
            return
        bucket_s = self.config.windows.bucket_s
        start = float(bucket * bucket_s)
        now = min(max(cur.ts_max, start), start + bucket_s)
        opened = max(start, cur.ts_min)
        span = max(0.0, now - opened)
        agg = cur
        segs: list[tuple[Control | None, TrafficAggregate]] = [(ctl, cur)]
        earlier = [b for b in history if horizon <= b < bucket]
        hists = None
        pace = None
        if earlier:
            prev = max(earlier)
            pagg = history[prev]
            p_start = float(prev * bucket_s)
            p_cov = p_start + bucket_s - max(p_start, pagg.ts_min)
            span += max(p_cov, MIN_COVERAGE * bucket_s)
            agg = pagg + cur
            segs.append((self._controls.get((model, p, prev)), pagg))
            hists = (pagg.hist, cur.hist)
            n0, t0 = rate_origin(ctl, offset, opened=opened, now=now)
            pace = pace_change(
                n=cur.n - n0,
                covered_s=max(0.0, now - t0),
                blended_n=agg.n,
                blended_s=span,
                spent=cur.pi_total,
                remaining_s=start + bucket_s - now,
                bucket_s=bucket_s,
                force=force,
            )
        new = self._next_stage(
            model, cfg, agg, segs, prev_bucket=bucket, covered_s=span, hists=hists, pace=pace
        )
        self._controls[key] = ctl.refreshed(offset, new, base, now)
        self._changes.controls[key] = self._controls[key]

    def _aggregate(
        self,
        model: str,
        p: int,
        cols: _Cols,
        chunk: npt.NDArray[np.intp],
        horizon: int,
        *,
        result: SamplerResult,
    ) -> None:
        counted = self._counted.get((model, p))
        if counted:  # replaying after a hand-over: count only what the aggregates lack
            ub, inv = np.unique(cols.bucket[chunk], return_inverse=True)
            through = np.array([counted.get(int(x), -1) for x in ub.tolist()], dtype=np.int64)
            offs = cols.offset[chunk]
            if int(offs.max()) >= max(counted.values()):
                del self._counted[(model, p)]  # past every recorded state: nothing more to skip
            chunk = chunk[offs >= through[inv.reshape(-1)]]
            if len(chunk) == 0:
                return
        n = len(chunk)
        groups = group_traffic(
            np.full(n, model),
            cols.segment[chunk],
            cols.bucket[chunk],
            np.full(n, p, dtype=np.int32),
            cols.score[chunk],
            cols.pred[chunk],
            cols.qstar[chunk],
            cols.u[chunk] < cols.pi[chunk],
            cols.pi[chunk],
            cols.ts[chunk],
            cols.phat[chunk],
            cols.uncapped[chunk],
        )
        hist = self._traffic.setdefault((model, p), {})
        for key, agg in groups.items():
            result.traffic[key] = result.traffic.get(key, TrafficAggregate.zero()) + agg
            if key.bucket < horizon:
                continue  # beyond retention: counted in the batch, not kept
            total = hist.get(key.bucket, TrafficAggregate.zero()) + agg
            hist[key.bucket] = total
            self._changes.traffic[(model, p, key.bucket)] = total


@dataclass
class _Cols:
    """The columns of one model's records in a batch, plus the decision arrays being filled."""

    ids: npt.NDArray[np.str_]
    offset: npt.NDArray[np.int64]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    ts: npt.NDArray[np.float64]
    segment: npt.NDArray[np.str_]
    bucket: npt.NDArray[np.int64]
    u: npt.NDArray[np.float64]
    qstar: npt.NDArray[np.float64]
    pi: npt.NDArray[np.float64]
    phat: npt.NDArray[np.float64]
    uncapped: npt.NDArray[np.float64]


def _shift(
    lam0: float,
    hists: tuple[Hist, Hist] | None,
    chosen: Calibration,
    latest: Control | None,
) -> float:
    """The score shift's defensive share for a new control that decides with ``chosen``.

    ``monitor.stats.drift.shift_share`` of the current scores against the earlier ones
    (``hists``: earlier, current) and against the traffic ``chosen`` was fitted on
    (``Calibration.reference``, when known), the larger, up to ``SHIFT_MAX``; kept at least at
    the latest stage's while the map stays the one it was raised under (a map version > 0: the
    shift is over when a map fitted on traffic like the current is taken; without a map only
    consecutive traffic is compared). 0 when it does not exceed ``lam0``.
    """
    asked = lam0 if hists is None else shift_share(hists[0], hists[1], lam0, SHIFT_MAX)
    if hists is not None and chosen.version > 0 and chosen.reference:
        asked = max(asked, shift_share(chosen.reference, hists[1], lam0, SHIFT_MAX))
    if latest is not None and chosen.version > 0 and latest.calibration.version == chosen.version:
        asked = max(asked, latest.shift)
    return asked if asked > lam0 else 0.0


class _Run(NamedTuple):
    """The sums of a run of trailing records (:func:`_trailing`), as in ``Base``."""

    n: int
    sum_qstar: int
    sum_pi: int
    sum_uncapped: int
    whole: bool
    kappa: float  # the largest kappa the records were decided at


def _trailing(
    segs: Sequence[tuple[Control | None, TrafficAggregate]], keep: Callable[[Control], bool]
) -> _Run | None:
    """The sums of the trailing records decided in stages ``keep``-ing.

    ``segs`` are buckets, latest first, each with its control and aggregate. ``whole``: every
    stage of every bucket kept. None when a stage boundary the run needs has no stored base (a
    store written before bases existed) or a bucket's control is unknown.
    """
    n = q = pi = kq = 0
    kappa = 0.0
    for ctl, agg in segs:
        if ctl is None:
            return None
        stages = stage_bases(ctl)
        cut = next((j for j in range(len(stages) - 1, -1, -1) if not keep(stages[j][0])), None)
        kappa = max([kappa, *(c.kappa for c, _ in stages[0 if cut is None else cut + 1 :])])
        if cut is None:
            n, q, pi = n + agg.n, q + agg.sum_qstar, pi + agg.sum_pi
            kq += agg.sum_uncapped
            continue
        if cut < len(stages) - 1:
            base = stages[cut + 1][1]
            if base is None:
                return None
            n, q, pi = n + agg.n - base[0], q + agg.sum_qstar - base[1], pi + agg.sum_pi - base[2]
            kq += agg.sum_uncapped - base[3]
        return _Run(n, q, pi, kq, whole=False, kappa=kappa)
    return _Run(n, q, pi, kq, whole=True, kappa=kappa)
