"""Controls refreshed inside a bucket, and the budget under caps and unequal partitions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config.load import parse_config
from monitor.config.schema import Config, ModelConfig
from monitor.core.estimator import EstimatorService
from monitor.core.messages import AuditRequest
from monitor.core.sampler import PartKey, SamplerService
from monitor.core.windows import GroupKey, TrafficAggregate, bucket_of
from monitor.errors import ConfigError
from monitor.io.store import Store
from monitor.stats.budget import (
    MIN_REFRESH_SPAN_S,
    Control,
    Pace,
    control_for_bucket,
    refresh_times,
    refreshes_to_list,
    with_refreshes,
)
from tests.unit.engine_streams import Stream, make_stream

HOUR0 = 1_700_000_000 - 1_700_000_000 % 3600


def _config(refresh: int, labels: float = 40.0, expected: float = 3000.0) -> Config:
    model = ModelConfig(
        name="default",
        labels_per_hour=labels,
        expected_records_per_hour=expected,
        refresh_records=refresh,
    )
    return Config(models={"default": model})


def _run(
    config: Config, s: Stream, cuts: Sequence[npt.NDArray[np.intp]], n_partitions: int = 1
) -> tuple[SamplerService, list[AuditRequest], dict[GroupKey, TrafficAggregate]]:
    sampler = SamplerService(config, n_partitions=n_partitions)
    requests: list[AuditRequest] = []
    traffic: dict[GroupKey, TrafficAggregate] = {}
    for cut in cuts:
        res = sampler.process(s.batch(cut))
        requests.extend(res.requests)
        for k, a in res.traffic.items():
            traffic[k] = traffic.get(k, TrafficAggregate.zero()) + a
    return sampler, requests, traffic


def _skewed(
    rng: np.random.Generator, n: int, hours: int, shares: Sequence[float], positives: float = 0.05
) -> Stream:
    """A stream whose records fall on partition p with probability ``shares[p]``."""
    s = make_stream(rng, n, start=HOUR0, span_s=hours * 3600.0, positive_rate=positives)
    s.partition = rng.choice(len(shares), size=n, p=list(shares)).astype(np.int32)
    for p in range(len(shares)):
        s.offset[s.partition == p] = np.arange(int(np.count_nonzero(s.partition == p)))
    return s


def test_a_fresh_stream_leaves_uniform_sampling_after_n_records(
    rng: np.random.Generator,
) -> None:
    n_ref = 500
    s = make_stream(rng, 3000, start=HOUR0, span_s=3000.0)  # all in the first bucket
    cfg = _config(n_ref, labels=600.0, expected=3600.0)
    sampler, reqs, _ = _run(cfg, s, [np.arange(len(s))])
    ctl = sampler.control("default", 0, int(bucket_of(s.ts[:1], 3600)[0]))
    assert ctl is not None and ctl.uniform
    # refreshes at records 500, 1000, 2000 of the bucket, and at the record after the bucket's
    # event time passes a stage's time (its ``at``) by a quarter of an hour, each no longer uniform
    offsets = [r.offset for r in ctl.refreshes]
    start, ages = float(bucket_of(s.ts[:1], 3600)[0] * 3600), []
    stage_at = [start, *(r.at for r in ctl.refreshes)]
    for at, r in zip(stage_at, ctl.refreshes, strict=False):
        if r.offset not in (n_ref, 2 * n_ref, 4 * n_ref):
            assert at is not None
            assert float(s.ts[: r.offset].max()) > at + 900.0 >= float(s.ts[: r.offset - 1].max())
            ages.append(r.offset)
    assert offsets == sorted([n_ref, 2 * n_ref, 4 * n_ref, *ages]) and len(ages) == 2
    assert all(not r.control.uniform for r in ctl.refreshes)
    offset = {r.id: int(s.offset[int(r.id[1:])]) for r in reqs}
    before = {r.pi for r in reqs if offset[r.id] < n_ref}
    after = {r.pi for r in reqs if offset[r.id] >= n_ref}
    assert before == {ctl.kappa}  # uniform: one pi for every record
    assert len(after) > 10  # q*: pi follows the score
    # the first refresh measured the rate (3000 records in 3000 s) and keeps the budget
    first = ctl.refreshes[0].control
    assert 0.5 < first.kappa * len(s) / 600.0 / (3000.0 / 3600.0) < 2.0


def test_a_partition_that_starts_late_in_an_hour_spends_the_next_hours_budget(
    rng: np.random.Generator,
) -> None:
    """1,000 records an hour from minute 57: the first full hour took its rate from 50 records
    in 3 minutes extrapolated over a quarter of an hour (200 an hour) and spent 4.8x its budget
    (refreshes at the 1,000th record of the hour come too late at this rate)."""
    hours = 4
    start = HOUR0 + 57 * 60
    s = make_stream(rng, 1000 * hours, start=start, span_s=hours * 3600.0)
    cfg = _config(1000, labels=100.0, expected=1000.0)
    _, _, traffic = _run(cfg, s, [np.arange(len(s))])
    spent = _spent(traffic)
    first = int(bucket_of(np.array([start]), 3600)[0])
    assert [round(spent[first + h] / 100.0, 2) for h in (1, 2, 3)] == pytest.approx(
        [1.0, 1.0, 1.0], abs=0.3
    )


@settings(max_examples=30, deadline=None)
@given(polls=st.lists(st.integers(1, 700), min_size=1, max_size=40), seed=st.integers(0, 3))
def test_refresh_points_do_not_depend_on_poll_boundaries(polls: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = _skewed(rng, 4000, 3, (0.7, 0.3))
    cfg = _config(60, labels=200.0)
    order = np.argsort(s.ts, kind="stable")  # the log's interleaving of the partitions
    whole_s, whole, t_whole = _run(cfg, s, [order], n_partitions=2)
    bounds = np.cumsum(polls)
    cuts = [c for c in np.split(order, bounds[bounds < len(s)]) if len(c)]
    cut_s, cut, t_cut = _run(cfg, s, cuts, n_partitions=2)
    assert [r.to_json() for r in sorted(whole, key=lambda r: r.request_id)] == [
        r.to_json() for r in sorted(cut, key=lambda r: r.request_id)
    ]
    assert t_whole == t_cut
    keys = sorted(set(zip(s.partition.tolist(), bucket_of(s.ts, 3600).tolist(), strict=True)))
    controls = [whole_s.control("default", p, b) for p, b in keys]
    assert controls == [cut_s.control("default", p, b) for p, b in keys]  # the refreshes too
    assert all(c is not None and c.refreshes for c in controls)


def _spent(traffic: dict[GroupKey, TrafficAggregate]) -> dict[int, float]:
    """Expected requests (sum pi) per bucket over all partitions."""
    out: dict[int, float] = {}
    for k, a in traffic.items():
        out[k.bucket] = out.get(k.bucket, 0.0) + a.pi_total
    return out


def _surge(
    rng: np.random.Generator, minute: int, partitions: int = 1, *, one_hour: bool = False
) -> Stream:
    """Three hours of 2,000 records, then 45 times as many from minute ``minute`` of the fourth
    hour to the end of the fifth (``one_hour``: of the fourth), in event-time order."""
    base, factor, hours = 2000, 45, 5
    after = [base] * 60 if one_hour else [base * factor] * 60
    rates = [base] * (3 * 60 + minute) + [base * factor] * (60 - minute) + after  # per hour
    counts = [r // 60 for r in rates]  # records per minute
    s = make_stream(rng, sum(counts), start=HOUR0, span_s=hours * 3600.0, partitions=partitions)
    minutes = np.repeat(np.arange(len(counts)), counts)
    s.ts = HOUR0 + 60.0 * np.sort(minutes + rng.random(len(minutes)))
    return s


SURGE_CONFIG = _config(1000, labels=100.0, expected=2000.0)


@pytest.mark.parametrize(
    ("minute", "partitions", "most"),
    [(0, 1, 1.1), (30, 1, 1.5), (45, 1, 1.5), (55, 1, 1.6), (0, 4, 0.0)],
)
def test_a_surge_spends_about_its_hours_budget(
    rng: np.random.Generator, minute: int, partitions: int, most: float
) -> None:
    """Three hours of 2,000 records, then 45 times as many from minute ``minute`` of the fourth
    hour on. A refresh extrapolated the rate of the earlier hour and the hour so far together,
    which lagged the surge: each doubling of the hour's records spent about its budget again,
    6.0x the hour's budget from minute 0, 6.4x from minute 30 (and 1.6x in the hour after), 3.6x
    from minute 55 (and 3.6x after), 19.6x over four partitions. Then the hour's own rate, once
    it outran the blend, and the budget it had left set kappa: 1.0x from minute 0, but a surge
    late in the hour raised the hour's own rate late too: 1.74x from minute 30, 2.76x from
    minute 45, 2.47x from minute 55. Then the rate of the records since the latest refresh:
    1.29x, 1.33x and 2.04x (the stage the surge starts in is decided at the earlier rate, hence
    ``most``); now also a refresh once the hour has spent 1.25x its budget
    (``budget.overspend_point``): 1.29x, 1.33x, 1.46x. (Four partitions then spend 4x in every
    hour of the new traffic, the surge's
    too: each one's share is its traffic against ``expected_records_per_hour``, at most 1, and
    2,000 is no longer the model's traffic.)"""
    hours = 5
    s = _surge(rng, minute, partitions)
    order = np.argsort(s.ts, kind="stable")
    _, requests, traffic = _run(SURGE_CONFIG, s, [order], n_partitions=partitions)
    spent = _spent(traffic)
    first = int(bucket_of(np.array([HOUR0]), 3600)[0])
    hourly = [spent[first + h] / 100.0 for h in range(hours)]
    assert hourly[:3] == pytest.approx([1.0] * 3, abs=0.15)  # steady: as before
    if partitions == 1:
        assert 0.9 < hourly[3] < most, hourly
        assert hourly[4] == pytest.approx(1.0, abs=0.1), hourly
    else:  # no more than the steady hour after it
        assert hourly[3] < 1.05 * hourly[4], hourly
    # a function of the stream: other batch boundaries make the same requests
    _, again, _ = _run(SURGE_CONFIG, s, np.array_split(order, 37), n_partitions=partitions)
    assert sorted(r.to_json() for r in again) == sorted(r.to_json() for r in requests)


def _hourly(rng: np.random.Generator, rates: Sequence[int]) -> Stream:
    """One partition, ``rates[h]`` records (Poisson per minute) in hour h, in event-time order."""
    counts = rng.poisson([r / 60 for r in rates for _ in range(60)])
    s = make_stream(rng, int(counts.sum()), start=HOUR0, span_s=len(rates) * 3600.0)
    minutes = np.repeat(np.arange(len(counts)), counts)
    s.ts = HOUR0 + 60.0 * np.sort(minutes + rng.random(len(minutes)))
    return s


@pytest.mark.parametrize(
    ("rates", "labels", "most"),
    [
        ((5000, 200, 20000, 20000), 100.0, 1.7),
        ((5000, 100, 20000, 20000), 200.0, 1.7),
        ((300, 300, 3000, 3000), 100.0, 1.6),
        ((500, 500, 1000, 1000), 100.0, 1.5),
    ],
)
def test_an_hour_busier_than_the_one_before_it_spends_about_its_budget(
    rng: np.random.Generator, rates: tuple[int, ...], labels: float, most: float
) -> None:
    """An hour starts at the rate of the hour before it, and refreshes at its 1,000th record:
    after a quiet hour (200 records, then 20,000; 100 then 20,000 at 200 labels; 300 then
    3,000; 500 then 1,000) that many records were decided at the quiet hour's rate and the hour
    spent 4.63x, 4.78x, 3.72x and 1.89x its budget. Its spend crossing 1.25x the budget now
    refreshes the control at the next record, which spreads what is left
    (``budget.overspend_point``): 1.51x, 1.61x, 1.42x, 1.35x; with the refreshes by a stage's
    age too (``budget.REFRESH_AGE``), 1.52x, 1.52x, 1.44x and 1.00x. The quiet hour of 100
    records then ends at a kappa far above 1 (every record audited), and the busy hour, whose
    kappa that hour's cap ratio divided, spent 3.48x until a ratio measured at a far larger
    kappa counted as a guess (``budget.control_for_bucket``'s ``cap_kappa``)."""
    s = _hourly(rng, rates)
    cfg = _config(1000, labels=labels, expected=float(rates[0]))
    order = np.argsort(s.ts, kind="stable")
    sampler, requests, traffic = _run(cfg, s, [order])
    first = int(bucket_of(np.array([HOUR0]), 3600)[0])
    hourly = [_spent(traffic)[first + h] / labels for h in range(len(rates))]
    assert hourly[0] == pytest.approx(1.0, abs=0.1), hourly
    assert 0.9 < hourly[2] < most, hourly
    assert hourly[3] == pytest.approx(1.0, abs=0.1), hourly
    ctl = sampler.control("default", 0, first + 2)
    assert ctl is not None and ctl.refreshes
    crossed = ctl.refreshes[0].offset  # the record after the one that crossed the point
    opened = int(s.offset[bucket_of(s.ts, 3600) == first + 2].min())
    assert crossed - opened < 1000  # before the first refresh point by count
    # batches cut right after the crossing record, or anywhere: the same requests
    at = int(np.flatnonzero(s.offset[order] == crossed)[0])
    for cuts in ([order[:at], order[at:]], np.array_split(order, 29)):
        _, again, _ = _run(cfg, s, cuts)
        assert sorted(r.to_json() for r in again) == sorted(r.to_json() for r in requests)


@pytest.mark.parametrize(
    "rates",
    [(5000, 1000, 1000), (2000, 500, 500), (20000, 200, 200), (3000, 900, 3000, 900)],
)
def test_an_hour_quieter_than_the_one_before_it_spends_about_its_budget(
    rng: np.random.Generator, rates: tuple[int, ...]
) -> None:
    """An hour starts at the rate of the hour before it; one too quiet to reach its first
    refresh point (1,000 records) was decided at the busier hour's rate throughout and spent
    0.18x, 0.23x, 0.01x and 0.27x its budget. Its control is now refreshed a quarter of an
    hour after each stage (``budget.stage_due``), which finds the lull (``budget.pace_change``)
    and spreads what is left: 0.98x, 0.99x, 0.88x, 0.97x."""
    s = _hourly(rng, rates)
    cfg = _config(1000, labels=100.0, expected=float(rates[0]))
    order = np.argsort(s.ts, kind="stable")
    _, requests, traffic = _run(cfg, s, [order])
    first = int(bucket_of(np.array([HOUR0]), 3600)[0])
    hourly = [_spent(traffic)[first + h] / 100.0 for h in range(len(rates))]
    assert all(0.75 < h < 1.3 for h in hourly), hourly
    _, again, _ = _run(cfg, s, np.array_split(order, 31))
    assert sorted(r.to_json() for r in again) == sorted(r.to_json() for r in requests)


@pytest.mark.parametrize("minute", [0, 40])
def test_the_hour_after_a_surge_spends_about_its_budget(
    rng: np.random.Generator, minute: int
) -> None:
    """An hour of 45 times the traffic from minute ``minute`` on, then the traffic before it:
    the hour after it began at the surge's rate, and its refreshes blended that hour in, so
    they saw no surge and it spent 0.03x (from minute 0) and 0.08x (from minute 40) its budget.
    A lull (the current rate below the blend's ``1 / PACE_RATIO``) now spreads the budget left
    as a surge does: 1.02x."""
    s = _surge(rng, minute, one_hour=True)
    _, requests, traffic = _run(SURGE_CONFIG, s, [np.arange(len(s))])
    first = int(bucket_of(np.array([HOUR0]), 3600)[0])
    hourly = [_spent(traffic)[first + h] / 100.0 for h in range(5)]
    assert hourly[4] == pytest.approx(1.0, abs=0.1), hourly
    assert hourly[3] < 1.5, hourly
    _, again, _ = _run(SURGE_CONFIG, s, np.array_split(np.arange(len(s)), 29))
    assert [r.to_json() for r in again] == [r.to_json() for r in requests]


def test_a_sampler_resumed_from_its_store_in_a_surge_decides_the_same(
    rng: np.random.Generator, tmp_path: Path
) -> None:
    """Stopped between two refreshes of a surge's hour and resumed from its store, a sampler
    measures the surge's rate from the time the latest refresh recorded (``Refresh.at``) and
    makes the requests of a run without the stop; read back without those times it measured
    the hour's own rate and made other requests."""
    s = _surge(rng, 45)
    whole = SamplerService(SURGE_CONFIG).process(s.batch(slice(None))).requests
    hour = int(bucket_of(np.array([HOUR0]), 3600)[0]) + 3
    start = int(np.searchsorted(bucket_of(s.ts, 3600), hour))
    cut = start + 5000  # between the hour's refreshes at its 4,000th and 8,000th records
    first = SamplerService(SURGE_CONFIG)
    got = first.process(s.batch(slice(0, cut))).requests
    store = Store(tmp_path)
    store.commit(first.take_changes(), EstimatorService(SURGE_CONFIG).take_changes(), {})
    st = store.load()
    store.close()
    ctl = st.controls[("default", 0, hour)]
    offsets = [r.offset - start for r in ctl.refreshes]  # by count, and by age (a quarter hour)
    assert {1000, 2000, 4000} <= set(offsets) and max(offsets) < 5000
    assert all(r.at is not None for r in ctl.refreshes)

    def resumed(controls: dict[PartKey, Control]) -> list[bytes]:
        sampler = SamplerService(SURGE_CONFIG, traffic=st.sampler_traffic, controls=controls)
        rest = sampler.process(s.batch(slice(cut, None))).requests
        return [r.to_json() for r in [*got, *rest]]

    assert resumed(st.controls) == [r.to_json() for r in whole]
    untimed = replace(ctl, refreshes=tuple(replace(r, at=None) for r in ctl.refreshes))
    assert resumed({**st.controls, ("default", 0, hour): untimed}) != [r.to_json() for r in whole]


def test_budget_is_spent_when_partitions_have_unequal_traffic(rng: np.random.Generator) -> None:
    hours, per_hour = 6, 4000
    s = _skewed(rng, hours * per_hour, hours, (0.85, 0.05, 0.05, 0.05))
    cfg = _config(1000, labels=300.0, expected=float(per_hour))
    sampler, _, traffic = _run(cfg, s, [np.argsort(s.ts, kind="stable")], n_partitions=4)
    spent = _spent(traffic)
    # every bucket (the first too) within 10% of the budget
    for b in sorted(spent):
        assert abs(spent[b] - 300.0) < 0.10 * 300.0, (b, spent[b])
    # one kappa for all partitions (within the noise of their measured rates), not the
    # 17x larger kappa an equal split gives the cold partitions
    b = sorted(spent)[2]
    kappas = [sampler.control("default", p, b).kappa for p in range(4)]  # type: ignore[union-attr]
    assert max(kappas) / min(kappas) < 1.5, kappas


def test_budget_is_spent_when_caps_bind(rng: np.random.Generator) -> None:
    hours, per_hour = 6, 2000
    # a fifth of the records audited: q* puts over a tenth of the requests at pi = 1
    s = _skewed(rng, hours * per_hour, hours, (1.0,), positives=0.05)
    cfg = _config(500, labels=400.0, expected=float(per_hour))
    _, reqs, traffic = _run(cfg, s, [np.arange(len(s))])
    assert sum(r.pi == 1.0 for r in reqs) > 0.1 * len(reqs)
    spent = _spent(traffic)
    for b in sorted(spent):
        assert abs(spent[b] - 400.0) < 0.10 * 400.0, (b, spent[b])


def test_refresh_records_is_read_and_checked() -> None:
    cfg = parse_config({"models": {"m": {"refresh_records": 250}}}, "t.yaml")
    assert cfg.model("m").refresh_records == 250
    assert parse_config({}, "t.yaml").model("default").refresh_records == 1000
    with pytest.raises(ConfigError, match="refresh_records"):
        parse_config({"models": {"m": {"refresh_records": -1}}}, "t.yaml")


def test_refreshes_off_keep_one_control_per_bucket(rng: np.random.Generator) -> None:
    s = make_stream(rng, 3000, start=HOUR0, span_s=3000.0)
    sampler, reqs, _ = _run(_config(0, labels=600.0, expected=3600.0), s, [np.arange(len(s))])
    ctl = sampler.control("default", 0, int(bucket_of(s.ts[:1], 3600)[0]))
    assert ctl is not None and ctl.uniform and not ctl.refreshes
    assert {r.pi for r in reqs} == {ctl.kappa}


@pytest.mark.parametrize(
    ("n", "partitions", "expected", "kappa"),
    [
        (5000, 1, 1e6, 20.0 / 5000),  # one partition: the measured rate alone, E unused
        (5000, 4, 20_000.0, 20.0 / 20_000),  # a quarter of E: a quarter of the budget
        (1000, 4, 20_000.0, 20.0 / 20_000),  # a quiet partition: the same kappa
        (50_000, 4, 20_000.0, 20.0 / 50_000),  # busier than all of E: the whole budget
    ],
)
def test_budget_share_is_the_measured_traffic_against_expected(
    n: int, partitions: int, expected: float, kappa: float
) -> None:
    ctl = control_for_bucket(
        n=n,
        n_pred=n // 10,
        pred_score_total=n / 15,
        score_total=n / 10,
        mean_qstar=0.3,
        ts_min=0.0,
        prev_bucket=0,
        alpha=0.5,
        labels_per_hour=20.0,
        bucket_s=3600,
        n_partitions=partitions,
        expected_records_per_hour=expected,
    )
    assert math.isclose(ctl.kappa, kappa)


def test_a_refresh_extrapolates_from_the_span_of_its_records() -> None:
    kw: dict[str, Any] = {
        "n": 1000,
        "n_pred": 100,
        "pred_score_total": 70.0,
        "score_total": 100.0,
        "mean_qstar": 0.3,
        "ts_min": 0.0,
        "prev_bucket": 0,
        "alpha": 0.5,
        "labels_per_hour": 20.0,
        "bucket_s": 3600,
        "n_partitions": 1,
    }
    # 1000 records in 60 s: 60,000 an hour
    assert math.isclose(control_for_bucket(**kw, covered_s=60.0).kappa, 20.0 / 60_000)
    # no span (identical timestamps): at least MIN_REFRESH_SPAN_S
    assert math.isclose(
        control_for_bucket(**kw, covered_s=0.0).kappa, 20.0 / (1000 * 3600 / MIN_REFRESH_SPAN_S)
    )
    # a surge: the budget left (20 - 5) over the records of the half hour left at 60,000 an hour
    surge = Pace(n_hat=60_000.0, spent=5.0, remaining_s=1800.0)
    assert math.isclose(control_for_bucket(**kw, covered_s=60.0, pace=surge).kappa, 15 / 30_000)
    # overspent already: a tenth of the budget
    spent = surge._replace(spent=25.0)
    assert math.isclose(control_for_bucket(**kw, covered_s=60.0, pace=spent).kappa, 2 / 30_000)


def test_a_log_that_restarts_mid_bucket_keeps_the_refreshes_in_order(
    rng: np.random.Generator,
) -> None:
    """The scored topic deleted and recreated mid-bucket: its offsets start at 0 again. The
    refreshes were appended below the earlier ones and the stored control could not be read
    back ("refreshes must be in increasing offset order": every restart exited 1)."""
    s = make_stream(rng, 4500, start=HOUR0, span_s=3000.0)  # one bucket
    s.offset[3000:] = np.arange(1500)  # the recreated topic's records
    polls = [np.arange(3000), np.arange(3000, 4500)]  # the old log, then the new one
    sampler, _, _ = _run(_config(100, labels=600.0, expected=3600.0), s, polls)
    ctl = sampler.control("default", 0, int(bucket_of(s.ts[:1], 3600)[0]))
    assert ctl is not None
    # refreshes at 100, 200, 400, 800, 1600 of the old log; the new log's at 200 replaces
    # those from 200 on (was appended after 1600)
    assert [r.offset for r in ctl.refreshes] == [100, 200]
    # a store written before, with the new log's refresh after the old ones, reads the same
    stored = [*refreshes_to_list(replace(ctl, refreshes=ctl.refreshes[:1])), [400, 0.5, 0.1, 1.0]]
    stored.append(refreshes_to_list(ctl)[1])
    at = refresh_times(ctl)
    assert with_refreshes(replace(ctl, refreshes=()), stored, [at[0], None, at[1]]) == ctl
    assert with_refreshes(replace(ctl, refreshes=()), refreshes_to_list(ctl), at) == ctl


def test_scores_of_exactly_0_and_1_are_sampled_uniformly_at_the_budget(
    rng: np.random.Generator,
) -> None:
    """A rules engine or a thresholded model: every score is its prediction. G is 1 and q* 0
    for every record, so q* mixed with the defensive share left q = lam: about a tenth of the
    budget (10 and 7 requests an hour against 60). Uniform sampling spends it."""
    s = make_stream(rng, 12_000, start=HOUR0, span_s=12 * 3600.0)
    s.score = (s.score >= 0.5).astype(np.float64)
    s.pred = s.score.astype(np.int8)
    _, reqs, _ = _run(_config(0, labels=60.0, expected=1000.0), s, [np.arange(len(s))])
    hours = np.bincount([r.bucket - int(bucket_of(s.ts[:1], 3600)[0]) for r in reqs])
    assert 40 <= hours[1:].mean() <= 80, hours.tolist()
    assert control_for_bucket(  # G = 1: a uniform control
        n=1000, n_pred=50, pred_score_total=50.0, score_total=50.0, mean_qstar=0.01,
        ts_min=HOUR0, prev_bucket=HOUR0 // 3600, alpha=0.5, labels_per_hour=60.0,
        bucket_s=3600, n_partitions=1,
    ).uniform  # fmt: skip


def test_refresh_times_are_read_and_checked() -> None:
    plain = Control(g=0.5, kappa=0.01, mean_qstar=0.2)
    ctl = plain.refreshed(1000, plain, (1000, 0, 0, 0), at=5.0)
    written = refreshes_to_list(ctl)
    assert with_refreshes(plain, written, refresh_times(ctl)) == ctl
    assert with_refreshes(plain, written).refreshes[0].at is None  # written before they were
    for bad in ([], [5.0, 6.0], ["5"], [math.inf], [True], {"at": 5.0}):
        with pytest.raises(ValueError, match="refresh times are a list of 1 numbers or nulls"):
            with_refreshes(plain, written, bad)
