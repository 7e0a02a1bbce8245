import dataclasses
import math

import numpy as np
import pytest

from monitor.config.schema import Config, ModelConfig, WindowsConfig
from monitor.core.estimator import EstimatorService, _TrafficTable
from monitor.core.messages import AuditRequest, LabelResult, RawRecord, request_id_for
from monitor.core.recalibration import label_window_buckets
from monitor.core.sampler import SamplerResult, SamplerService
from monitor.core.snapshot import WindowEstimate
from monitor.core.windows import TrafficAggregate
from monitor.errors import RejectReason
from monitor.stats.measures import measure_all
from monitor.stats.response import response_sample, worst_case_bounds
from monitor.stats.sample import LabeledSample
from monitor.stats.score_interval import score_type_bounds
from tests.unit.engine_streams import Stream, make_stream

CFG = Config(
    models={
        "default": ModelConfig(
            name="default", labels_per_hour=200.0, expected_records_per_hour=3000.0
        )
    },
    label_park_grace_s=5.0,
    label_park_max=3,
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _label(rid: str | None, y: int, offset: int = 0, record_id: str | None = None) -> LabelResult:
    src = RawRecord("labels", 0, offset, 0, None, b"{}")
    return LabelResult(rid, record_id, y, None, None, None, src)


def _setup(
    rng: np.random.Generator, n: int = 6000, hours: int = 3
) -> tuple[Stream, SamplerResult, EstimatorService, Clock]:
    s = make_stream(rng, n, span_s=hours * 3600)
    sampler = SamplerService(CFG)
    res = sampler.process(s.batch(slice(None)))
    clock = Clock()
    est = EstimatorService(CFG, clock)
    est.apply_traffic(res.traffic)
    return s, res, est, clock


def _answered(reqs: list[AuditRequest], label_of: dict[str, int]) -> LabeledSample:
    """The sample of requests (in the estimator's request-id order) all answered as given."""
    return LabeledSample.poisson(
        np.array([r.score for r in reqs]),
        np.array([r.pred for r in reqs]),
        np.array([label_of[r.request_id] for r in reqs]),
        np.array([r.pi for r in reqs]),
    )


def test_window_estimate_equals_direct_computation(rng: np.random.Generator) -> None:
    s, res, est, _ = _setup(rng)
    assert est.upsert_requests(res.requests) == []
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    labels = [_label(r.request_id, truth[r.id], i) for i, r in enumerate(res.requests)]
    assert est.handle_labels(labels) == []
    snap = est.snapshot()
    row = next(w for w in snap.windows if w.window == "24h" and w.segment == "")
    reqs = sorted(res.requests, key=lambda r: r.request_id)  # the estimator's summation order
    sample = _answered(reqs, {r.request_id: truth[r.id] for r in reqs})
    direct = measure_all(sample, 0.5, 0.95)
    assert row.f == direct.f and row.labels == len(reqs) == row.requests
    assert not row.scores_disagree  # calibrated scores: the interval is the ratio's own
    assert row.records == len(s) and row.pending == 0 and row.missing == 0
    assert math.isnan(row.psi)  # no preceding window yet
    one_h = next(w for w in snap.windows if w.window == "1h")
    assert one_h.records < len(s) and not math.isnan(one_h.psi)
    assert snap.watermarks["default"] == s.ts.max()


def test_a_request_of_a_record_sent_again_with_other_content_is_counted_not_taken(
    rng: np.random.Generator,
) -> None:
    _, res, est, _ = _setup(rng, n=600)
    est.upsert_requests(res.requests)
    first = res.requests[0]
    est.upsert_requests(res.requests)  # a replay: the same requests
    assert est.take_duplicate_ids() == {}
    changed = [
        dataclasses.replace(first, score=1.0 - first.score),
        dataclasses.replace(first, ts=first.ts + 1.0),
        dataclasses.replace(first, segment="other"),
        dataclasses.replace(first, pi=1.0, payload={"x": 1}),  # the record's own content alike
    ]
    est.upsert_requests(changed)
    assert est.take_duplicate_ids() == {first.model: 3} and est.take_duplicate_ids() == {}
    assert est.request(first.request_id).request == first  # type: ignore[union-attr]
    est.upsert_requests(changed, count_duplicates=False)  # read back by the process that made it
    assert est.take_duplicate_ids() == {}


def test_no_labels_means_missing_not_zero(rng: np.random.Generator) -> None:
    _, res, est, _ = _setup(rng)
    est.upsert_requests(res.requests)
    row = est.snapshot().windows[0]
    assert math.isnan(row.f.value) and row.labels == 0 and row.pending == row.requests > 0


def test_recall_is_missing_while_every_predicted_negative_is_pending(
    rng: np.random.Generator,
) -> None:
    """Auditors answer the predicted positives first: with every predicted negative's request
    still pending, the window read recall 1.0 [1.0, 1.0] (their false negatives left out); it is
    missing until one is answered, while precision and the worst-case bounds stay."""
    s, res, est, _ = _setup(rng)
    est.upsert_requests(res.requests)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    positives = [r for r in res.requests if r.pred == 1]
    est.handle_labels([_label(r.request_id, truth[r.id], i) for i, r in enumerate(positives)])

    def day() -> WindowEstimate:
        return next(w for w in est.snapshot().windows if w.window == "24h" and w.segment == "")

    row = day()
    assert row.precision.defined and not row.recall.defined and not row.f.defined
    assert row.labels == len(positives) and math.isnan(row.confusion.fn)
    lo, hi = row.worst.recall
    assert 0.0 <= lo < hi == 1.0  # what the pending labels could still make of it
    negative = next(r for r in res.requests if r.pred == 0)
    est.handle_labels([_label(negative.request_id, truth[negative.id], len(positives))])
    assert day().recall.defined and day().f.defined


def test_duplicate_conflicting_unknown_and_expired(rng: np.random.Generator) -> None:
    _, res, est, clock = _setup(rng)
    est.upsert_requests(res.requests)
    r0, r1 = res.requests[0], res.requests[1]
    assert est.handle_labels([_label(r0.request_id, 1, 1)]) == []
    before = est.snapshot()
    rej = est.handle_labels(
        [_label(r0.request_id, 1, 2), _label(r0.request_id, 0, 3), _label("nope", 1, 4)]
    )
    assert [r.reason for r in rej] == [
        RejectReason.DUPLICATE_LABEL,
        RejectReason.CONFLICTING_LABEL,
    ]
    assert est.n_parked == 1 and est.expire_parked() == []
    clock.t += 6.0
    assert est.expire_parked(requests_caught_up=False) == []
    (unknown,) = est.expire_parked()
    assert unknown.reason == RejectReason.UNKNOWN_REQUEST and unknown.record.offset == 4
    assert est.snapshot().windows == before.windows  # rejects change no estimate
    # a request whose deadline the watermark passed is missing; its label expires
    late = CFG.label_deadline_s
    s2 = make_stream(rng, 10, start=r1.ts + late + 1.0, span_s=1.0)
    s2.ids = np.array([f"late{i}" for i in range(10)])
    est.apply_traffic(SamplerService(CFG).process(s2.batch(slice(None))).traffic)
    (exp,) = est.handle_labels([_label(r1.request_id, 0, 5)])
    assert exp.reason == RejectReason.EXPIRED_REQUEST


def test_an_unknown_label_sent_by_record_id_names_the_id_and_model_it_was_sent_with() -> None:
    """The dead letter said only ``no request 0ce977e4... (waited 5 s)``: a hash of the salt,
    model and id that the sender of an ``id`` never saw."""
    clock = Clock()
    est = EstimatorService(CFG, clock)
    src = RawRecord("labels", 0, 0, 0, None, b"{}")
    sent = [
        LabelResult(None, "rec-7", 1, None, None, None, src),
        LabelResult(None, "rec-8", 1, None, None, None, src, model="default"),
        LabelResult(None, "rec-9", 0, None, None, None, src, model="fraud"),
    ]
    assert est.handle_labels(sent) == []
    clock.t += 6.0
    details = [r.detail for r in est.expire_parked()]
    rid = [
        request_id_for(CFG.salt, m, i)
        for m, i in [("default", "rec-7"), ("default", "rec-8"), ("fraud", "rec-9")]
    ]
    assert details == [
        f"no request for id 'rec-7' of model 'default' (the default model: the label names "
        f"none): request id {rid[0]} (waited 5 s)",
        f"no request for id 'rec-8' of model 'default': request id {rid[1]} (waited 5 s)",
        f"no request for id 'rec-9' of model 'fraud' (not a model this monitor audits): "
        f"request id {rid[2]} (waited 5 s)",
    ]
    # evicted past the limit (3) too; sent by request id, the request id as before
    labels = [LabelResult(None, f"r{i}", 1, None, None, None, src) for i in range(4)]
    (over,) = est.handle_labels(labels)
    assert over.detail == (
        f"no request for id 'r0' of model 'default' (the default model: the label names none): "
        f"request id {request_id_for(CFG.salt, 'default', 'r0')} (parked labels over the limit)"
    )
    est.handle_labels([LabelResult("0" * 32, None, 1, None, None, None, src)])
    clock.t += 6.0
    assert est.expire_parked()[-1].detail == f"no request {'0' * 32} (waited 5 s)"


def test_a_request_past_the_windows_waits_for_its_label_until_its_deadline(
    rng: np.random.Generator,
) -> None:
    """Windows of 1 h and 24 h keep 48 h of requests, the deadline is 7 days: a label 50 h
    after its record was unknown_request; it counts until the deadline, then expires."""
    cfg = dataclasses.replace(
        CFG, windows=WindowsConfig(3600, (("1h", 3600), ("24h", 86_400))), label_park_max=100
    )
    est = EstimatorService(cfg, Clock())

    def traffic(start: float) -> SamplerResult:
        s = make_stream(rng, 300, start=start, span_s=600.0)
        s.ids = np.array([f"{start:.0f}-{i}" for i in range(300)])
        res = SamplerService(cfg).process(s.batch(slice(None)))
        est.apply_traffic(res.traffic)
        return res

    first = traffic(1_700_000_000.0).requests
    est.upsert_requests(first)
    traffic(first[0].ts + 50 * 3600.0)  # the watermark 50 h later: past every window
    assert est.request(first[0].request_id) is not None
    assert est.handle_labels([_label(first[0].request_id, 1, 0)]) == []
    assert est.take_label_counts() == {"default": 1}
    traffic(first[-1].deadline + 3600.0)  # every deadline passed: the requests are gone
    assert est.request(first[1].request_id) is None
    assert est.take_changes().requests_removed  # the store deletes them too


def test_early_labels_park_then_match_and_overflow_is_bounded(rng: np.random.Generator) -> None:
    _, res, est, _ = _setup(rng)
    r = res.requests[:5]
    assert est.handle_labels([_label(x.request_id, 1, i) for i, x in enumerate(r[:3])]) == []
    assert est.n_parked == 3
    (over,) = est.handle_labels([_label(r[3].request_id, 1, 9)])  # limit 3: the oldest goes
    assert over.reason == RejectReason.UNKNOWN_REQUEST and over.record.offset == 0
    assert est.upsert_requests(r) == []
    assert est.n_parked == 0
    states = [est.request(x.request_id) for x in r]
    assert [None if x is None else x.label for x in states] == [None, 1, 1, 1, None]
    assert est.take_label_counts() == {"default": 3}


def test_forged_labels_are_refused_by_their_token_before_they_can_evict_a_parked_one(
    rng: np.random.Generator,
) -> None:
    cfg = dataclasses.replace(CFG, label_token_secret="k" * 16)
    s = make_stream(rng, 3000, span_s=3600)
    res = SamplerService(cfg).process(s.batch(slice(None)))
    est = EstimatorService(cfg, Clock())
    est.apply_traffic(res.traffic)
    genuine = res.requests[0]
    src = RawRecord("labels", 0, 0, 0, None, b"{}")
    early = LabelResult(genuine.request_id, None, 1, None, None, genuine.token, src)
    assert est.handle_labels([early]) == [] and est.n_parked == 1  # its request comes later
    forged = [_label(f"{i:032x}", 1, i + 1) for i in range(10)]  # no token; park limit 3
    assert [r.reason for r in est.handle_labels(forged)] == [RejectReason.BAD_TOKEN] * 10
    assert est.n_parked == 1
    assert est.upsert_requests([genuine]) == []
    state = est.request(genuine.request_id)
    assert state is not None and state.label == 1


def test_label_by_record_id(rng: np.random.Generator) -> None:
    _s, res, est, _ = _setup(rng)
    est.upsert_requests(res.requests)
    r = res.requests[0]
    assert est.handle_labels([_label(None, 0, 0, record_id=r.id)]) == []
    state = est.request(r.request_id)
    assert state is not None and state.label == 0


def test_pending_labels_are_a_second_phase_not_a_smaller_census(rng: np.random.Generator) -> None:
    """Answered requests are weighted 1 / (pi r_c); pending ones show in rate, share and bounds."""
    s, res, est, _ = _setup(rng)
    est.upsert_requests(res.requests)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    # answer every predicted negative's request, skip a third of the predicted positives'
    answered = [r for i, r in enumerate(res.requests) if r.pred == 0 or i % 3]
    est.handle_labels([_label(r.request_id, truth[r.id], i) for i, r in enumerate(answered)])
    row = next(w for w in est.snapshot().windows if w.window == "24h" and w.segment == "")
    reqs = sorted(res.requests, key=lambda r: r.request_id)
    got = {r.request_id for r in answered}
    label = np.array([truth[r.id] if r.request_id in got else -1 for r in reqs])
    pred = np.array([r.pred for r in reqs])
    pi = np.array([r.pi for r in reqs])
    sample = response_sample(
        np.array([r.score for r in reqs]), pred, label, pi, np.array([r.bucket for r in reqs])
    )
    assert row.f == measure_all(sample, 0.5, 0.95).f
    n_pos = sum(r.pred for r in reqs)
    answered_pos = sum(r.pred for r in answered)
    assert row.answer_rate[0] == 1.0
    assert row.answer_rate[1] == pytest.approx(answered_pos / n_pos)
    assert 0.6 < row.answer_rate[1] < 0.7
    latencies = est.take_label_latencies()["default"]
    assert len(latencies) == len(answered) and min(latencies) >= 0.0
    assert est.take_label_latencies() == {}
    assert row.pending == len(reqs) - len(answered) and row.missing == 0
    assert row.pending_weight == pytest.approx(float((1 / pi)[label < 0].sum() / (1 / pi).sum()))
    lo, hi = row.worst.precision
    assert lo < row.precision.value < hi
    assert (lo, hi) == worst_case_bounds(pred, label, pi, 1.0)
    # the labelled-only estimate differs: predicted positives would be under-weighted
    a = label >= 0
    naive = measure_all(
        LabeledSample.poisson(np.array([r.score for r in reqs])[a], pred[a], label[a], pi[a]),
        0.5,
        0.95,
    )
    assert naive.recall.value != row.recall.value


def test_the_maps_label_window_is_kept_however_short_the_reported_windows(
    rng: np.random.Generator,
) -> None:
    # one reported window of 1 h keeps 2 h of windows' state; the maps are fitted on up to 24 h
    # of labels (monitor.core.recalibration.label_window_buckets: 300 labels at the budget) and
    # their traffic's histogram
    cfg = Config(models=CFG.models, windows=WindowsConfig(3600, (("1h", 3600),)))
    s = make_stream(rng, 9000, span_s=30 * 3600)
    res = SamplerService(cfg).process(s.batch(slice(None)))
    est = EstimatorService(cfg, Clock())
    est.apply_traffic(res.traffic)
    est.upsert_requests(res.requests)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    est.handle_labels([_label(r.request_id, truth[r.id], i) for i, r in enumerate(res.requests)])
    last = int(s.ts.max() // 3600)
    since = last - label_window_buckets(3600) + 1
    sample, _ = est.labelled("default", since)
    assert len(sample) == sum(r.bucket >= since for r in res.requests) > 0
    assert sum(r.bucket >= last - 1 for r in res.requests) < len(sample)  # more than 2 h
    in_window = sum(int(t // 3600) >= since for t in s.ts)
    assert sum(est.score_histogram("default", since)) == in_window


def test_a_window_whose_labels_reject_the_scores_widens_f_and_recall(
    rng: np.random.Generator,
) -> None:
    s, res, est, _ = _setup(rng)
    est.upsert_requests(res.requests)
    truth = dict(zip(s.ids.tolist(), s.label.tolist(), strict=True))
    # a model worse than its scores say: 30% of the audited predicted negatives are positive
    label_of = {
        r.request_id: 1 if r.pred == 0 and rng.random() < 0.3 else truth[r.id] for r in res.requests
    }
    est.handle_labels([_label(rid, y, i) for i, (rid, y) in enumerate(label_of.items())])
    row = next(w for w in est.snapshot().windows if w.window == "24h" and w.segment == "")
    sample = _answered(sorted(res.requests, key=lambda r: r.request_id), label_of)
    direct = measure_all(sample, 0.5, 0.95)
    assert row.intrinsic_f > direct.f.upper and row.scores_disagree
    for got, own, alpha in ((row.f, direct.f, 0.5), (row.recall, direct.recall, 0.0)):
        lower, upper = score_type_bounds(sample, alpha, own)
        assert (got.value, got.se) == (own.value, own.se)
        assert (got.lower, got.upper) == (min(own.lower, lower), max(own.upper, upper))
        assert got.lower < own.lower  # the false negatives the design may have missed
    assert row.precision == direct.precision  # no false negative enters precision


def test_a_model_without_traffic_sums_to_nothing() -> None:
    """Every bucket of a model pruned: the snapshot crashed on the empty table's reshape."""
    assert _TrafficTable({}).total("", range(0, 5)) == TrafficAggregate.zero()


def test_a_model_removed_from_the_configuration_is_neither_estimated_nor_exported(
    rng: np.random.Generator,
) -> None:
    """Its stored state was estimated with the default settings (F1 where precision was
    configured, the default alerts), and alerted on after a restart."""
    _, _, est, _ = _setup(rng, n=2000, hours=2)
    assert {w.model for w in est.snapshot().windows} == {"default"}
    other = dataclasses.replace(
        CFG, models={"other": ModelConfig(name="other")}, default_model="other"
    )
    restarted = EstimatorService(
        other,
        traffic=est._traffic,
        requests=est._requests.values(),
        watermarks={"default": est.watermark("default")},
    )
    snap = restarted.snapshot()
    assert snap.windows == () and snap.watermarks == {}
    assert restarted.unconfigured_models() == ["default"]  # the engine warns of it at start
    assert restarted.watermark("default") == est.watermark("default")  # kept, not dropped


def test_requests_past_their_deadline_show_as_missing_weight(rng: np.random.Generator) -> None:
    """Skipped requests left the pending share at their deadline and no metric showed the
    weight the estimate had lost (a drill: 9.5% of a window's weight, pending share 0.007)."""
    cfg = dataclasses.replace(CFG, label_deadline_s=3600.0)
    s = make_stream(rng, 6000, span_s=3 * 3600)
    res = SamplerService(cfg).process(s.batch(slice(None)))
    est = EstimatorService(cfg, Clock())
    est.apply_traffic(res.traffic)
    est.upsert_requests(res.requests)
    watermark = float(s.ts.max())
    dead = [r for r in res.requests if r.deadline < watermark]  # the first two hours'
    open_ = [r for r in res.requests if r.deadline >= watermark]
    assert est.handle_labels([_label(r.request_id, 0, i) for i, r in enumerate(open_[::2])]) == []
    waiting = open_[1::2]
    row = next(w for w in est.snapshot().windows if w.window == "24h" and w.segment == "")
    weight = {r.request_id: 1.0 / r.pi for r in res.requests}
    total = sum(weight.values())
    assert row.missing == len(dead) > 0 and row.pending == len(waiting)
    assert row.missing_weight == pytest.approx(sum(weight[r.request_id] for r in dead) / total)
    assert row.pending_weight == pytest.approx(sum(weight[r.request_id] for r in waiting) / total)
