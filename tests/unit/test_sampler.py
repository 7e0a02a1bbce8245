import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from monitor.config.schema import Config, ModelConfig, WindowsConfig
from monitor.core.messages import AuditRequest, request_id_for
from monitor.core.sampler import OTHER_SEGMENT, SamplerService
from monitor.core.windows import GroupKey, TrafficAggregate, bucket_of
from monitor.stats.budget import MIN_EXTRAPOLATED_RECORDS
from monitor.stats.selection import hash_uniform
from tests.unit.engine_streams import Stream, make_stream, random_cuts


def _config(**kw: Any) -> Config:
    model = ModelConfig(name="default", labels_per_hour=40.0, expected_records_per_hour=3000.0)
    return Config(models={"default": model}, **kw)


def _run(
    config: Config,
    stream: Stream,
    cuts: Sequence[slice | npt.NDArray[np.intp]],
    n_partitions: int = 1,
) -> tuple[SamplerService, list[AuditRequest], dict[GroupKey, TrafficAggregate]]:
    sampler = SamplerService(config, n_partitions=n_partitions)
    requests: list[AuditRequest] = []
    traffic: dict[GroupKey, TrafficAggregate] = {}
    for cut in cuts:
        res = sampler.process(stream.batch(cut))
        requests.extend(res.requests)
        for k, a in res.traffic.items():
            traffic[k] = traffic.get(k, TrafficAggregate.zero()) + a
    return sampler, requests, traffic


@pytest.mark.parametrize("partitions", [1, 3])
def test_decisions_do_not_depend_on_batch_cuts(rng: np.random.Generator, partitions: int) -> None:
    s = make_stream(rng, 12_000, span_s=4 * 3600, partitions=partitions)
    cfg = _config()
    _, whole, t_whole = _run(cfg, s, [slice(None)], partitions)
    _, cut, t_cut = _run(cfg, s, random_cuts(rng, len(s), 40), partitions)
    assert sorted(r.to_json() for r in whole) == sorted(r.to_json() for r in cut)
    assert len(whole) > 50
    assert t_whole == t_cut
    # interleaving the partitions differently changes nothing either
    order = np.lexsort((s.offset, s.partition))
    _, grouped, _ = _run(cfg, s, [order[: len(s) // 2], order[len(s) // 2 :]], partitions)
    assert sorted(r.to_json() for r in grouped) == sorted(r.to_json() for r in whole)


def test_decision_is_the_hash_against_pi(rng: np.random.Generator) -> None:
    s = make_stream(rng, 4000, span_s=2 * 3600)
    cfg = _config()
    sampler, reqs, _ = _run(cfg, s, [slice(None)])
    u = hash_uniform(s.ids, "activeaudit|default")
    chosen = {r.id for r in reqs}
    for r in reqs:
        i = int(r.id[1:])
        assert u[i] < r.pi <= 1.0
        assert r.request_id == request_id_for("activeaudit", "default", r.id)
        assert r.bucket == int(bucket_of(np.array([r.ts]), 3600)[0])
        assert r.deadline == r.ts + cfg.label_deadline_s
    # a record not chosen in the first bucket before its first refresh had u >= kappa
    # (uniform control there)
    ctl = sampler.control("default", 0, int(bucket_of(s.ts[:1], 3600)[0]))
    assert ctl is not None and ctl.uniform and ctl.refreshes
    first = bucket_of(s.ts, 3600) == bucket_of(s.ts[:1], 3600)[0]
    first &= s.offset < ctl.refreshes[0].offset
    assert np.count_nonzero(first) >= MIN_EXTRAPOLATED_RECORDS
    for j in np.flatnonzero(first).tolist():
        assert (s.ids[j] in chosen) == (u[j] < ctl.kappa)


def test_requests_track_the_budget(rng: np.random.Generator) -> None:
    hours = 8
    s = make_stream(
        rng, 3000 * hours, span_s=hours * 3600, start=1_700_000_000 - 1_700_000_000 % 3600
    )
    cfg = _config()
    _, reqs, traffic = _run(cfg, s, random_cuts(rng, len(s), 30))
    per_bucket = np.bincount([r.bucket - reqs[0].bucket for r in reqs])
    expected = {k.bucket: a.pi_total for k, a in traffic.items()}
    # expected requests per bucket (sum pi) is within 15% of the budget from the 2nd bucket on
    for b in sorted(expected)[1:]:
        assert abs(expected[b] - 40.0) < 0.15 * 40.0, (b, expected[b])
    assert abs(per_bucket.sum() - 40.0 * hours) < 0.15 * 40.0 * hours


def test_request_json_is_deterministic_and_round_trips() -> None:
    r = AuditRequest("ab", "x", "m", "", 0.25, 1, 0.5, 10.0, 0, 20.0, {"k": [1, 2]})
    raw = r.to_json()
    assert raw == json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    assert list(json.loads(raw)) == sorted(json.loads(raw))
    assert AuditRequest.from_json(raw) == r
    with pytest.raises(ValueError, match="request"):
        AuditRequest.from_json(b'{"id": 1}')


def test_request_p_hat_round_trips_and_old_requests_have_none() -> None:
    r = AuditRequest("ab", "x", "m", "", 0.25, 1, 0.5, 10.0, 0, 20.0, phat=0.125)
    assert json.loads(r.to_json())["phat"] == 0.125
    assert AuditRequest.from_json(r.to_json()) == r
    old = dataclasses.replace(r, phat=None)
    assert "phat" not in json.loads(old.to_json())  # what requests looked like before
    assert AuditRequest.from_json(old.to_json()).phat is None
    body = json.loads(r.to_json())
    body["phat"] = 1.5
    with pytest.raises(ValueError, match="out of range"):
        AuditRequest.from_json(json.dumps(body).encode())


def test_segment_cap_folds_new_segments_into_other(rng: np.random.Generator) -> None:
    s = make_stream(rng, 600, segments=("a", "b", "c", "d"))
    cfg = _config(max_segments_per_model=2)
    sampler = SamplerService(cfg)
    res = sampler.process(s.batch(slice(None)))
    segs = {k.segment for k in res.traffic}
    assert OTHER_SEGMENT in segs and len(segs - {OTHER_SEGMENT}) == 2
    kept = segs - {OTHER_SEGMENT}
    assert res.folded["default"] == int(np.isin(s.segment, list(kept), invert=True).sum())
    assert sampler.take_changes().segments == {("default", x) for x in kept}


def test_a_segment_without_traffic_for_the_retention_gives_up_its_slot(
    rng: np.random.Generator,
) -> None:
    """Segments used to hold their slot for ever: once ``max_segments_per_model`` names had
    been seen, every later segment (a campaign a week) was folded into ``__other__`` for good.
    Retention here is 2 buckets (one 1 h window)."""
    cfg = _config(
        max_segments_per_model=2,
        windows=WindowsConfig(bucket_s=3600, report=(("1h", 3600),)),
    )
    sampler = SamplerService(cfg)
    start = 1_700_000_000 - 1_700_000_000 % 3600  # on an hour: bucket h is hour h
    first = make_stream(rng, 400, start=start, span_s=3000.0, segments=("live", "campaign-1"))
    sampler.process(first.batch(slice(None)))
    assert sampler.take_changes().segments == {("default", "live"), ("default", "campaign-1")}

    def hour(h: int, segments: tuple[str, ...], offset: int) -> Stream:
        s = make_stream(rng, 200, start=start + h * 3600.0, span_s=3000.0, segments=segments)
        s.offset += offset
        return s

    # an hour later campaign-1 is still inside the retention: campaign-2 is folded
    res = sampler.process(hour(1, ("live", "campaign-2"), 400).batch(slice(None)))
    assert {k.segment for k in res.traffic} == {"live", OTHER_SEGMENT}
    assert not sampler.take_changes().dropped
    # two hours after its last records campaign-1 is behind the horizon: campaign-2 takes its
    # slot, live (seen every hour) keeps its own
    res = sampler.process(hour(2, ("live", "campaign-2"), 600).batch(slice(None)))
    assert {k.segment for k in res.traffic} == {"live", "campaign-2"}
    changes = sampler.take_changes()
    assert changes.dropped == {("default", "campaign-1")}
    assert changes.segments == {("default", "campaign-2")}
    assert res.folded == {}


def test_records_beyond_retention_are_counted_not_audited(rng: np.random.Generator) -> None:
    cfg = _config(windows=WindowsConfig(bucket_s=3600, report=(("1h", 3600),)))
    s = make_stream(rng, 1000, span_s=600)
    sampler = SamplerService(cfg)
    sampler.process(s.batch(slice(None)))
    old = make_stream(rng, 200, start=float(s.ts[0]) - 5 * 3600, span_s=60)
    old.offset += 1000
    res = sampler.process(old.batch(slice(None)))
    assert res.records["default"] == 200 and res.requested["default"] == 0
    assert res.requests == []


@pytest.mark.parametrize(("days", "audited"), [(8, False), (6, True)])
def test_records_whose_labels_could_never_count_are_not_audited(
    rng: np.random.Generator, days: int, audited: bool
) -> None:
    """A backfill 8 days behind the newest records (windows up to 7 d, label deadline 7 d):
    its requests were past their deadline when issued, so every label was refused
    (``expired_request``) and no window counted them; counted now, never audited. 6 days
    behind, inside the 7 d window and the deadline: audited as ever."""
    cfg = _config()
    s = make_stream(rng, 1000, span_s=600)
    sampler = SamplerService(cfg)
    sampler.process(s.batch(slice(None)))
    old = make_stream(rng, 300, start=float(s.ts[0]) - days * 86_400, span_s=600)
    old.offset += 1000
    res = sampler.process(old.batch(slice(None)))
    assert res.records["default"] == 300
    assert (res.requested["default"] > 0) is audited
    assert sum(a.n for a in res.traffic.values()) == 300  # counted either way
