"""The aggregates topic: the samplers' per-(model, partition, bucket) state, for the estimator.

With ``monitor run --role sampler`` several samplers share the scored topic's partitions as one
consumer group and keep no local state. After each step a sampler produces, for every
(model, partition, bucket) the step touched, ONE record holding that bucket's cumulative state::

    key   = ["model", partition, bucket]                        (JSON)
    value = {"v": 1, "model": ..., "partition": p, "bucket": b, "through": T, "opened": O,
             "control": [g, kappa, mean_q*(, calibration)] | null,
             ("refresh": [[offset, g, kappa, mean_q*(, calibration)], ...],
              "refresh_at": [event time | null, ...],)
             "segments": {segment: aggregate}}

``through`` is the partition's next offset after the step: the aggregates count every record of
the bucket at offsets below ``T`` and none above; ``opened`` is the first offset of the step that
created the state. ``control`` is the bucket's frozen sampling
control (seed 000, Cor. 2 via ``monitor.stats.budget``), with a fourth element
``[version, a, b, lam]`` when it took a calibration map fitted from labels. ``refresh`` (present
only when the bucket has one) lists the controls that replaced it inside the bucket, each in
force from the record at ``offset`` on (``monitor.core.sampler``), and ``refresh_at`` the event
time the bucket had reached at each (``monitor.stats.budget.Refresh``; beside the list, so that
an estimator of an earlier release, which ignores it, still reads the state); an aggregate is
``TrafficAggregate.to_list``. A record goes to the aggregates partition of its scored
partition's number (the topic has at least as many), so one scored partition's history is read
from one place. The topic is compacted (a key keeps its
latest state) and a bucket the sampler prunes gets a tombstone (null value).

The estimator publishes each calibration map it fits from a model's labels
(``monitor.core.recalibration``) on the same topic, to EVERY partition, so a sampler finds it in
the partitions it reads anyway::

    key   = {"calibration": "model"}                             (JSON object: not a state key)
    value = {"v": 1, "model": ..., "calibration": [version, a, b, lam]}

Compaction keeps a model's latest map per partition, so the topic is also the durable record of
the versions published: an estimator that lost its data directory continues from the highest
one on it (``newest_maps``, ``monitor.core.recalibration.recover``). A sampler takes, for new
controls of a model with ``recalibrate: true``, the newest version it has read (``as_of`` at a
rebuild, then the records that follow); the control records it. The map is not a function of
the scored stream, so a sampler flushes the states of a step that froze a control of such a
model before it produces that step's requests, and a sampler rebuilt at C takes, for a control
it freezes again at the same record, the control published beyond C (``Rebuild.ahead``) rather
than its own newest map: the stored control wins, and the requests are the same, byte for byte.

Two readers:

- a sampler assigned scored partitions resumes at the group's committed offset C of each and
  rebuilds their controls and aggregates as of C (``as_of``): a partition's records are read in
  log order up to the first state with ``through > C``. Steps are produced in order and a commit
  follows the flush of everything before it, so that prefix is exactly the state after offset C,
  whatever a crash left after it (a prefix of later steps, flushed or not). Replaying from C
  makes the same decisions (the same requests, byte for byte) and the same cumulative states.
  Should compaction have removed a state's version at or below C (all samplers down for longer
  than the segment time right after a crash), the first later version is taken instead, and
  records below its ``through`` are decided again but not counted again.
- the estimator (``TrafficFeed``) keeps the last state per key and adds the difference from the
  previous one. The sums are fixed-point integers, so differences are exact and its aggregates
  equal those one ``--role all`` process computes from the same stream. A state whose
  ``through`` is not beyond the one applied (a replay, a sampler that lost its partitions but
  did not know yet) changes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from monitor.config.schema import Config
from monitor.core.messages import RawRecord, Reject, decode_reason
from monitor.core.records import MAX_FUTURE_S, MIN_TS
from monitor.core.sampler import OTHER_SEGMENT, PartKey, SamplerChanges, SamplerService
from monitor.core.windows import GroupKey, TrafficAggregate, bucket_of
from monitor.errors import RejectReason
from monitor.stats.budget import (
    NO_CALIBRATION,
    Calibration,
    Control,
    control_from_list,
    control_to_list,
    refresh_times,
    refreshes_to_list,
    with_refreshes,
)

#: The value format of this release's states and maps. Raise it when a change is one an earlier
#: release cannot read, so that its samplers say so (``LaterFormat``) instead of calling the
#: record malformed.
FORMAT_VERSION = 1


class LaterFormat(ValueError):
    """A record of the aggregates topic in a later release's format (``v`` above ours)."""

    def __init__(self, what: str, v: int, model: str | None = None) -> None:
        self.model = model
        super().__init__(
            f"{what} is in the format of a later release (v={v}; this release reads "
            f"v={FORMAT_VERSION}): upgrade the samplers before the estimator"
        )


def _check_format(obj: object, what: str, model: str | None = None) -> None:
    """``ValueError`` unless ``obj`` is a JSON object of ``FORMAT_VERSION``."""
    v = obj.get("v") if isinstance(obj, dict) else None
    if type(v) is int and v > FORMAT_VERSION:
        raise LaterFormat(what, v, model)
    if v != FORMAT_VERSION:
        msg = f"{what} must be a JSON object with v={FORMAT_VERSION}"
        raise ValueError(msg)


@dataclass
class BucketState:
    """The cumulative state of one (model, scored partition, bucket) after offset ``through``."""

    model: str
    partition: int
    bucket: int
    through: int
    opened: int  # first offset of the step that created the state (where its control froze)
    control: Control | None
    segments: dict[str, TrafficAggregate]

    @property
    def key(self) -> PartKey:
        """(model, partition, bucket)."""
        return (self.model, self.partition, self.bucket)

    def total(self) -> TrafficAggregate:
        """The bucket's traffic over all segments."""
        out = TrafficAggregate.zero()
        for agg in self.segments.values():
            out += agg
        return out


def encode_key(key: PartKey) -> bytes:
    """The Kafka key of a (model, partition, bucket): compact JSON ``["model", p, b]``."""
    return json.dumps(list(key), separators=(",", ":")).encode("utf-8")


def encode(state: BucketState) -> bytes:
    """The record value of a state (deterministic JSON, see the module docstring)."""
    ctl = state.control
    body = {
        "v": FORMAT_VERSION,
        "model": state.model,
        "partition": state.partition,
        "bucket": state.bucket,
        "through": state.through,
        "opened": state.opened,
        "control": None if ctl is None else control_to_list(ctl),
        "segments": {s: a.to_list() for s, a in sorted(state.segments.items())},
    }
    if ctl is not None and ctl.refreshes:
        body["refresh"] = refreshes_to_list(ctl)
        body["refresh_at"] = refresh_times(ctl)
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _int(v: object, what: str) -> int:
    if type(v) is not int:
        msg = f"{what} must be an integer"
        raise ValueError(msg)
    return v


def decode(key: bytes | None, value: bytes | None) -> tuple[PartKey, BucketState | None]:
    """The key and state of one record (None for a tombstone); ``ValueError`` if malformed."""
    try:
        k = json.loads(key or b"")
    except (ValueError, RecursionError) as exc:
        msg = f"aggregates key is not JSON: {exc}"
        raise ValueError(msg) from exc
    if not (isinstance(k, list) and len(k) == 3 and isinstance(k[0], str)):
        msg = 'aggregates key must be ["model", partition, bucket]'
        raise ValueError(msg)
    pk: PartKey = (k[0], _int(k[1], "key partition"), _int(k[2], "key bucket"))
    if value is None:
        return pk, None
    obj = json.loads(value)
    _check_format(obj, "aggregates value")
    try:
        ctl = obj["control"]
        segments = obj["segments"]
        control = None if ctl is None else control_from_list(ctl)
        if control is not None and "refresh" in obj:
            control = with_refreshes(control, obj["refresh"], obj.get("refresh_at"))
        state = BucketState(
            model=str(obj["model"]),
            partition=_int(obj["partition"], "partition"),
            bucket=_int(obj["bucket"], "bucket"),
            through=_int(obj["through"], "through"),
            opened=_int(obj["opened"], "opened"),
            control=control,
            segments={str(s): TrafficAggregate.from_list(a) for s, a in segments.items()},
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        msg = f"not an aggregates state: {exc!r}"
        raise ValueError(msg) from exc
    if state.key != pk:
        msg = "aggregates key and value name different buckets"
        raise ValueError(msg)
    return pk, state


def is_map(key: bytes | None) -> bool:
    """Whether a record of the aggregates topic is a calibration map (its key is an object)."""
    return key is not None and key[:1] == b"{"


def encode_map_key(model: str) -> bytes:
    """The Kafka key of a model's calibration map: compact JSON ``{"calibration": "model"}``."""
    return json.dumps({"calibration": model}, separators=(",", ":")).encode("utf-8")


def encode_map(model: str, calibration: Calibration) -> bytes:
    """The record value of a published calibration map (deterministic JSON)."""
    body = {"v": FORMAT_VERSION, "model": model, "calibration": calibration.to_list()}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")


def decode_map(key: bytes | None, value: bytes | None) -> tuple[str, Calibration]:
    """The model and map of one map record; ``ValueError`` (what is wrong) if malformed."""
    k = json.loads(key or b"")
    if not (
        isinstance(k, dict) and list(k) == ["calibration"] and isinstance(k["calibration"], str)
    ):
        msg = 'calibration map key must be {"calibration": "model"}'
        raise ValueError(msg)
    model = k["calibration"]
    if value is None:
        msg = f"calibration map of model {model!r} has no value (maps are never deleted)"
        raise ValueError(msg)
    obj = json.loads(value)
    _check_format(obj, f"the calibration map of model {model!r}", model)
    if obj.get("model") != model:
        msg = f"calibration map key names model {model!r}, its value {obj.get('model')!r}"
        raise ValueError(msg)
    want = (
        "[version >= 1, a finite, b >= 0, lam in (0, 1]] (Platt) or "
        "[version >= 1, c finite, a >= 0, b >= 0, lam in (0, 1]] (beta), then optionally "
        "[score counts] and {segment: map}"
    )
    try:
        cal = Calibration.from_list(obj.get("calibration"))
    except (TypeError, ValueError) as exc:
        msg = f"the map of model {model!r} must be {want} ({exc})"
        raise ValueError(msg) from exc
    if cal.version < 1:
        msg = f"the map of model {model!r} must be {want} (version 0 is no map)"
        raise ValueError(msg)
    return model, cal


def newest_maps(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, Calibration]:
    """Per model, the calibration map of the highest version among ``records`` (maps only).

    Bucket states and malformed maps are skipped (the estimator dead-letters the latter). The
    topic is compacted, never deleted (``AGGREGATES_TOPIC_CONFIG``): a model's latest map per
    partition stays, so this is the highest version ever published, whoever published it.
    """
    maps: dict[str, Calibration] = {}
    for key, value in records:
        if not is_map(key):
            continue
        try:
            model, cal = decode_map(key, value)
        except (ValueError, OverflowError, RecursionError):
            continue
        if cal.version > maps.get(model, NO_CALIBRATION).version:
            maps[model] = cal
    return maps


#: the largest count or fixed-point sum a state may carry (int64 with room to add states up)
MAX_SUM = 2**62


def state_problem(
    pk: PartKey, state: BucketState | None, config: Config, written_s: float
) -> tuple[RejectReason, str] | None:
    """Why the estimator must not apply a well-formed state (None: it may).

    ``written_s``: the state record's Kafka timestamp in Unix seconds. A sampler writes only
    states of configured models, of partitions numbered from 0, with counts and sums that are
    non-negative integers and event times inside the state's bucket, not ahead of the time the
    state was written (beyond the samplers' own allowance, twice over for clocks that differ
    between hosts; no bound when the record has no Kafka timestamp after 2000). Anything else
    would change or wipe the estimates: an event time far ahead moved the watermark and pruned
    every request. The bound is the record's own time, in the log, so a rebuild from the topic
    judges every state as the first reading did.
    """
    model, partition, bucket = pk
    if model not in config.models:
        return RejectReason.UNKNOWN_MODEL, f"a state of model {model!r}, which is not configured"
    if partition < 0:
        return RejectReason.OUT_OF_RANGE, f"a state of partition {partition}"
    if state is None:  # a sampler prunes at its own horizon, which may be within the windows
        return None
    bucket_s = config.windows.bucket_s
    for segment, agg in state.segments.items():
        ints = (
            *(agg.n, agg.n_pred, agg.sum_score, agg.sum_pred_score, agg.sum_qstar),
            *(agg.n_requested, agg.sum_pi, agg.sum_phat, agg.sum_pred_phat, agg.sum_uncapped),
        )
        if not all(0 <= x < MAX_SUM for x in ints) or bool((agg.hist < 0).any()):
            return RejectReason.OUT_OF_RANGE, f"segment {segment!r}: a count or sum out of range"
        if agg.n_pred > agg.n or agg.n_requested > agg.n or int(agg.hist.sum()) != agg.n:
            return RejectReason.OUT_OF_RANGE, f"segment {segment!r}: counts that do not add up"
        if agg.n == 0:
            continue
        times = [agg.ts_min, agg.ts_max]
        if not all(math.isfinite(t) for t in times) or agg.ts_min > agg.ts_max:
            why = "event times not finite or out of order"
            return RejectReason.BAD_TIMESTAMP, f"segment {segment!r}: {why}"
        if set(bucket_of(np.array(times), bucket_s).tolist()) != {bucket}:
            return (
                RejectReason.BAD_TIMESTAMP,
                f"segment {segment!r}: event times outside bucket {bucket}",
            )
        if written_s >= MIN_TS and agg.ts_max > written_s + 2 * MAX_FUTURE_S:
            return (
                RejectReason.BAD_TIMESTAMP,
                f"segment {segment!r}: event times ahead of the time the state was written",
            )
    return None


@dataclass
class DecodedStates:
    """What one poll of the aggregates topic holds for the estimator."""

    states: list[tuple[PartKey, BucketState | None]]  # in log order, tombstones as None
    bad: list[Reject]  # malformed or implausible records, states and maps alike
    written: list[tuple[str, int, int]]  # (model, bucket, Kafka ms) of each state record


def decode_states(records: Sequence[RawRecord], config: Config) -> DecodedStates:
    """Bucket states read from the aggregates topic (malformed or implausible ones rejected).

    Calibration maps are the estimator's own records: checked (a malformed one is rejected like
    a malformed state), never traffic. A well-formed state that ``state_problem`` finds wrong
    is rejected with its reason. ``written`` gives each state record's Kafka timestamp: when a
    sampler had read that bucket's traffic (the estimator's late-label rule).
    """
    out = DecodedStates([], [], [])
    for r in records:
        what = "a calibration map" if is_map(r.key) else "an aggregates state"
        try:
            if is_map(r.key):
                decode_map(r.key, r.value)
                continue
            pk, state = decode(r.key, r.value)
        except (ValueError, OverflowError, RecursionError) as exc:
            out.bad.append(Reject(decode_reason(exc), f"not {what}: {exc}"[:200], r))
            continue
        problem = state_problem(pk, state, config, r.timestamp_ms / 1e3)
        if problem is not None:
            out.bad.append(Reject(problem[0], f"not applied: {problem[1]}"[:200], r))
            continue
        out.states.append((pk, state))
        if state is not None:
            out.written.append((state.model, state.bucket, r.timestamp_ms))
    return out


@dataclass
class Rebuild:
    """What a sampler resuming at committed offsets reads back from the aggregates topic."""

    states: dict[PartKey, BucketState]  # each bucket's state after the committed offset
    ahead: dict[PartKey, Control]  # the latest control published beyond it, per bucket
    maps: dict[str, Calibration]  # the newest calibration map per model


def as_of(
    records: Iterable[tuple[bytes | None, bytes | None]], committed: Mapping[int, int]
) -> Rebuild:
    """The state of each bucket of the partitions in ``committed`` after their offset there.

    Args:
        records: the aggregates topic's records in log order (per aggregates partition).
        committed: scored partition -> committed next offset C (0 when none).

    Returns:
        ``states``: per key, the last state before the partition's first state with
        ``through > C`` (tombstones before it delete); for a key seen only after that point
        whose state was opened below C (its earlier version compacted away), its first state
        after it. ``ahead``: per key, the control of its last state from that point on (what a
        run that did not commit published). ``maps``: per model, the calibration map of the
        highest version. Malformed records are skipped: the estimator dead-letters them.
    """
    out: dict[PartKey, BucketState] = {}
    cut: set[int] = set()
    later: dict[PartKey, BucketState] = {}
    ahead: dict[PartKey, Control] = {}
    maps: list[tuple[bytes | None, bytes | None]] = []
    for key, value in records:
        if is_map(key):
            maps.append((key, value))
            continue
        try:
            pk, state = decode(key, value)
        except (ValueError, OverflowError, RecursionError):
            continue
        p = pk[1]
        if p not in committed:
            continue
        if state is not None and state.through > committed[p]:
            cut.add(p)
        if p in cut:
            if state is not None and state.opened < committed[p]:
                later.setdefault(pk, state)
            if state is not None and state.control is not None:
                ahead[pk] = state.control
        elif state is None:
            out.pop(pk, None)
        else:
            out[pk] = state
    for pk, state in later.items():
        out.setdefault(pk, state)
    return Rebuild(out, ahead, newest_maps(maps))


Message = tuple[int, bytes, bytes | None]  # (scored partition, key, value or None)


@dataclass
class BucketStates:
    """The sampler's side: the latest state of each of its buckets and the records to produce.

    ``ahead``: controls published beyond the resume point (``Rebuild.ahead``).
    """

    states: dict[PartKey, BucketState] = field(default_factory=dict)
    ahead: dict[PartKey, Control] = field(default_factory=dict)

    def service(self, config: Config, n_partitions: int) -> SamplerService:
        """A ``SamplerService`` resuming from these states (controls, aggregates, segments).

        It is told each bucket's ``through``, so records a replay brings again are decided
        again but not counted twice, and the controls published beyond it, which it takes
        when it freezes a control again at the same record.
        """
        segments: dict[str, dict[str, int]] = {}  # per model: each segment's latest bucket
        for st in self.states.values():
            held = segments.setdefault(st.model, {})
            for seg in st.segments.keys() - {"", OTHER_SEGMENT}:  # the slots of admitted ones
                held[seg] = max(st.bucket, held.get(seg, st.bucket))
        return SamplerService(
            config,
            n_partitions,
            traffic={k: st.total() for k, st in self.states.items()},
            controls={k: st.control for k, st in self.states.items() if st.control is not None},
            segments=segments,
            counted={k: st.through for k, st in self.states.items()},
            published=self.ahead,
        )

    def record(
        self,
        deltas: Mapping[GroupKey, TrafficAggregate],
        changes: SamplerChanges,
        starts: Mapping[int, int],
        ends: Mapping[int, int],
    ) -> list[Message]:
        """Fold one step into the states; the records to produce (touched states, tombstones).

        Args:
            deltas: the step's traffic per (model, segment, bucket, partition).
            changes: the sampler's changes of the step (kept buckets, controls, pruning).
            starts: first offset per scored partition in the step.
            ends: next offset per scored partition after the step.
        """
        touched: set[PartKey] = set()
        for g, agg in deltas.items():
            k = (g.model, g.partition, g.bucket)
            if k not in changes.traffic:
                continue  # beyond retention: counted by the step, never kept
            st = self.states.get(k)
            if st is None:
                st = self.states[k] = BucketState(
                    *k, through=0, opened=starts[k[1]], control=None, segments={}
                )
            st.segments[g.segment] = st.segments.get(g.segment, TrafficAggregate.zero()) + agg
            touched.add(k)
        for k, ctl in changes.controls.items():
            st = self.states.get(k)
            if st is not None:
                st.control = ctl
                touched.add(k)
        out: list[Message] = []
        for k in sorted(touched):
            st = self.states[k]
            st.through = max(st.through, ends.get(k[1], st.through))
            out.append((k[1], encode_key(k), encode(st)))
        for (model, p), horizon in changes.prune.items():
            for k in sorted(k for k in self.states if k[:2] == (model, p) and k[2] < horizon):
                del self.states[k]
                out.append((p, encode_key(k), None))
        return out


@dataclass
class FeedChanges:
    """Feed states changed since the last ``take_changes`` (what the store must persist)."""

    upserts: dict[PartKey, BucketState] = field(default_factory=dict)
    deletes: set[PartKey] = field(default_factory=set)


class TrafficFeed:
    """The estimator's side: the last applied state per key, and exact deltas from new ones."""

    def __init__(self, states: Iterable[BucketState] = ()) -> None:
        self._states = {s.key: s for s in states}
        self._changes = FeedChanges()

    def take_changes(self) -> FeedChanges:
        """Return and reset the changes since the last call."""
        out, self._changes = self._changes, FeedChanges()
        return out

    def __len__(self) -> int:
        return len(self._states)

    def apply(
        self, records: Sequence[tuple[PartKey, BucketState | None]]
    ) -> dict[GroupKey, TrafficAggregate]:
        """Take decoded records in log order; the traffic they add, per segment and partition.

        A state adds ``state.segments[s] - applied.segments[s]`` for every segment, when its
        ``through`` is beyond the applied one; otherwise (a replay or a stale writer) nothing.
        A tombstone forgets the key without changing any aggregate.
        """
        out: dict[GroupKey, TrafficAggregate] = {}
        for pk, state in records:
            if state is None:
                if self._states.pop(pk, None) is not None:
                    self._changes.upserts.pop(pk, None)
                    self._changes.deletes.add(pk)
                continue
            old = self._states.get(pk)
            if old is not None and state.through <= old.through:
                continue
            for seg, agg in state.segments.items():
                before = None if old is None else old.segments.get(seg)
                delta = agg if before is None else agg.since(before)
                if delta.n == 0:
                    continue
                g = GroupKey(state.model, seg, state.bucket, state.partition)
                out[g] = out.get(g, TrafficAggregate.zero()) + delta
            self._states[pk] = state
            self._changes.upserts[pk] = state
            self._changes.deletes.discard(pk)
        return out

    def prune(self, model: str, horizon: int) -> None:
        """Forget ``model``'s buckets below ``horizon`` (the estimator dropped them)."""
        for pk in [k for k in self._states if k[0] == model and k[2] < horizon]:
            del self._states[pk]
            self._changes.upserts.pop(pk, None)
            self._changes.deletes.add(pk)
