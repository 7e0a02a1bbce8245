"""A label is judged against its deadline once the traffic written before it has been read.

Whether a label was written after the scored stream passed its request's deadline is a fact of
the written data; the records read so far are not, when the scored and labels topics are read in
an order other than the one they were written in (a backlog, a rebuilt data directory, a
client's fetch order). These tests feed the estimator the same records in both orders.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from monitor.config.schema import Config, ModelConfig
from monitor.core.estimator import EstimatorService
from monitor.core.messages import AuditRequest, LabelResult, RawRecord, Reject
from monitor.core.records import ScoredBatch
from monitor.core.sampler import SamplerResult, SamplerService
from monitor.errors import RejectReason
from monitor.io.store import Store
from tests.unit.engine_streams import make_stream

CFG = Config(
    models={
        "default": ModelConfig(
            name="default", labels_per_hour=200.0, expected_records_per_hour=3000.0
        )
    },
    label_deadline_s=2 * 3600.0,
    label_park_grace_s=5.0,
    label_park_max=1000,
)
OLD_MS, LATER_MS = 1_000, 3_000  # when the old records and the one 3 h after them were written


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclasses.dataclass
class Input:
    """Old traffic, its requests, one record past their deadlines, and labels for them."""

    old: ScoredBatch
    old_res: SamplerResult
    later: ScoredBatch
    later_res: SamplerResult
    labels: list[LabelResult]


def _label(req: AuditRequest, y: int, offset: int, written_ms: int) -> LabelResult:
    src = RawRecord("labels", 0, offset, written_ms, None, b"{}")
    return LabelResult(req.request_id, None, y, None, None, None, src)


def _input(rng: np.random.Generator, cfg: Config = CFG) -> Input:
    s = make_stream(rng, 3000, span_s=3000.0)
    old = dataclasses.replace(
        s.batch(slice(None)), written_ms=np.full(len(s), OLD_MS, dtype=np.int64)
    )
    later_s = make_stream(rng, 5, start=float(s.ts.max()) + 3 * 3600.0, span_s=1.0)
    later_s.ids = np.array([f"later{i}" for i in range(5)])
    later = dataclasses.replace(
        later_s.batch(slice(None)), written_ms=np.full(5, LATER_MS, dtype=np.int64)
    )
    sampler = SamplerService(cfg)
    old_res = sampler.process(old)
    later_res = sampler.process(later)
    reqs = old_res.requests[:40]
    assert len(reqs) == 40
    # the first half written before the record past their deadlines (on time), the rest after
    labels = [_label(r, i % 2, i, 2_000 if i < 20 else 4_000) for i, r in enumerate(reqs)]
    return Input(old, old_res, later, later_res, labels)


def _read_scored(est: EstimatorService, batch: ScoredBatch, res: SamplerResult) -> list[Reject]:
    """What the engine does with a poll of scored records (role all)."""
    est.apply_traffic(res.traffic)
    est.note_scored(batch)
    return est.upsert_requests(res.requests)


def _decisions(rejects: Sequence[Reject]) -> list[tuple[int, RejectReason]]:
    return sorted((r.record.offset, r.reason) for r in rejects)


def _scored_first(inp: Input, cfg: Config = CFG) -> tuple[EstimatorService, list[Reject]]:
    est = EstimatorService(cfg, Clock())
    out = _read_scored(est, inp.old, inp.old_res)
    out += _read_scored(est, inp.later, inp.later_res)
    est.set_read_through(math.inf)  # the scored topic read to its end
    out += est.handle_labels(inp.labels) + est.judge_waiting()
    return est, out


def test_both_read_orders_make_the_same_decisions_and_estimates(rng: np.random.Generator) -> None:
    inp = _input(rng)
    ref, ref_rejects = _scored_first(inp)
    expired = _decisions(ref_rejects)
    assert expired == [(i, RejectReason.EXPIRED_REQUEST) for i in range(20, 40)]

    est = EstimatorService(CFG, Clock())
    rejects = _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(OLD_MS)  # the old records read, the later one not yet
    rejects += est.handle_labels(inp.labels) + est.judge_waiting()
    assert rejects == [] and est.n_parked == 40  # every one waits for its judgement
    rejects += _read_scored(est, inp.later, inp.later_res)
    est.set_read_through(LATER_MS)  # read up to the later record, not to the end
    rejects += est.judge_waiting()
    assert rejects == [] and est.n_parked == 20  # those written before it: accepted
    assert est.take_label_counts() == {"default": 20}
    est.set_read_through(math.inf)
    rejects += est.judge_waiting()
    assert _decisions(rejects) == expired and est.n_parked == 0
    assert est.snapshot().windows == ref.snapshot().windows


def test_labels_read_before_their_requests_are_judged_alike(rng: np.random.Generator) -> None:
    """Parked for an unknown request, then waiting for the traffic written before them."""
    inp = _input(rng)
    ref, ref_rejects = _scored_first(inp)
    est = EstimatorService(CFG, Clock())
    est.set_read_through(-math.inf)  # nothing of the scored topic read
    rejects = est.handle_labels(inp.labels)
    est.set_read_through(OLD_MS)
    rejects += _read_scored(est, inp.old, inp.old_res) + est.judge_waiting()
    assert rejects == [] and est.n_parked == 40
    rejects += _read_scored(est, inp.later, inp.later_res)
    est.set_read_through(math.inf)
    rejects += est.judge_waiting()
    assert _decisions(rejects) == _decisions(ref_rejects) and est.n_parked == 0
    assert est.snapshot().windows == ref.snapshot().windows


def test_a_label_waiting_for_its_judgement_does_not_expire_as_unknown(
    rng: np.random.Generator,
) -> None:
    inp = _input(rng)
    clock = Clock()
    est = EstimatorService(CFG, clock)
    _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(OLD_MS)
    assert est.handle_labels(inp.labels) == []
    clock.t += 3600.0  # far past labels.park_grace_s: its request is known, it is not unknown
    assert est.expire_parked() == [] and est.n_parked == 40


def test_a_waiting_label_survives_a_store_round_trip(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    inp = _input(rng)
    _, ref_rejects = _scored_first(inp)
    sampler, est = SamplerService(CFG), EstimatorService(CFG, Clock())
    res = sampler.process(inp.old)
    est.apply_traffic(res.traffic)
    est.note_scored(inp.old)
    est.upsert_requests(res.requests)
    est.set_read_through(OLD_MS)
    assert est.handle_labels(inp.labels) == []
    store = Store(tmp_path)
    store.commit(sampler.take_changes(), est.take_changes(), {("scored", 0): len(inp.old)})
    store.close()

    store = Store(tmp_path)
    st = store.load()
    restored = EstimatorService(
        CFG,
        Clock(),
        traffic=st.segment_traffic,
        requests=st.requests,
        parked=st.parked,
        watermarks=st.watermarks,
        first_written=est.first_written,
    )
    store.close()
    assert restored.n_parked == 40
    rejects = _read_scored(restored, inp.later, inp.later_res)
    restored.set_read_through(math.inf)
    rejects += restored.judge_waiting()
    assert _decisions(rejects) == _decisions(ref_rejects) and restored.n_parked == 0


def test_a_scored_stream_read_to_its_end_judges_at_once(rng: np.random.Generator) -> None:
    """An idle scored topic holds nothing back: read to its end, every label is judged."""
    inp = _input(rng)
    _, ref_rejects = _scored_first(inp)
    est = EstimatorService(CFG, Clock())
    rejects = _read_scored(est, inp.old, inp.old_res) + _read_scored(est, inp.later, inp.later_res)
    est.set_read_through(math.inf)
    rejects += est.handle_labels(inp.labels)  # no judge_waiting: judged as they are read
    assert _decisions(rejects) == _decisions(ref_rejects) and est.n_parked == 0


def test_labels_without_a_timestamp_are_judged_by_the_watermark_at_once(
    rng: np.random.Generator,
) -> None:
    inp = _input(rng)
    est = EstimatorService(CFG, Clock())
    _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(-math.inf)  # nothing known of the scored topic's progress
    untimed = [dataclasses.replace(x, source=x.source._replace(timestamp_ms=0)) for x in inp.labels]
    assert est.handle_labels(untimed[:20]) == [] and est.n_parked == 0  # before the deadline
    _read_scored(est, inp.later, inp.later_res)
    rejects = est.handle_labels(untimed[20:])
    assert _decisions(rejects) == [(i, RejectReason.EXPIRED_REQUEST) for i in range(20, 40)]


def test_a_second_label_waits_behind_the_first_of_its_request(rng: np.random.Generator) -> None:
    """The first label read stands, whichever was judgeable first."""
    inp = _input(rng)
    req = inp.old_res.requests[0]
    first, second = _label(req, 1, 100, 2_000), _label(req, 0, 101, 0)  # the second: no time
    ref = EstimatorService(CFG, Clock())
    _read_scored(ref, inp.old, inp.old_res)
    _read_scored(ref, inp.later, inp.later_res)
    ref_rejects = ref.handle_labels([first, second])
    assert _decisions(ref_rejects) == [(101, RejectReason.CONFLICTING_LABEL)]

    est = EstimatorService(CFG, Clock())
    _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(OLD_MS)
    assert est.handle_labels([first, second]) == [] and est.n_parked == 2
    _read_scored(est, inp.later, inp.later_res)
    est.set_read_through(math.inf)
    assert _decisions(est.judge_waiting()) == _decisions(ref_rejects)
    state = est.request(req.request_id)
    assert state is not None and state.label == 1


def test_over_the_park_limit_a_waiting_label_is_judged_on_what_was_read(
    rng: np.random.Generator,
) -> None:
    """Bounded: the oldest goes, judged (not ``unknown_request``: its request is known)."""
    cfg = dataclasses.replace(CFG, label_park_max=10)
    inp = _input(rng, cfg)
    est = EstimatorService(cfg, Clock())
    _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(OLD_MS)
    assert est.handle_labels(inp.labels[:10]) == [] and est.n_parked == 10
    assert est.handle_labels(inp.labels[10:12]) == [] and est.n_parked == 10
    assert est.take_label_counts() == {"default": 2}  # the two oldest, before any deadline


@pytest.mark.parametrize("through", [-math.inf, OLD_MS])
def test_a_request_with_a_waiting_label_is_not_pruned(
    rng: np.random.Generator, through: float
) -> None:
    inp = _input(rng)
    est = EstimatorService(CFG, Clock())
    _read_scored(est, inp.old, inp.old_res)
    est.set_read_through(through)
    assert est.handle_labels(inp.labels[30:31]) == []
    far = make_stream(rng, 5, start=float(inp.old.ts.max()) + 30 * 86_400.0, span_s=1.0)
    far.ids = np.array([f"far{i}" for i in range(5)])
    est.apply_traffic(SamplerService(CFG).process(far.batch(slice(None))).traffic)
    removed = est.take_changes().requests_removed
    assert removed and inp.labels[30].request_id not in removed
    est.set_read_through(math.inf)
    (rej,) = est.judge_waiting()
    assert rej.reason == RejectReason.EXPIRED_REQUEST
