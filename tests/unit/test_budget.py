import json
import math
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest

from monitor.stats.beta_calibration import BetaMap
from monitor.stats.budget import (
    G_PRIOR,
    Calibration,
    Control,
    cap_ratio,
    control_for_bucket,
    selection_weights,
    uniform_control,
)
from monitor.stats.calibration import PlattMap
from monitor.stats.drift import SCORE_BINS
from monitor.stats.falpha import intrinsic_falpha
from monitor.stats.selection import q_star_falpha


def test_uniform_control_spends_budget_rate() -> None:
    c = uniform_control(labels_per_hour=10, expected_records_per_hour=1000)
    assert c.uniform and c.kappa == 0.01 and c.g == G_PRIOR
    q, pi, _, _ = selection_weights(
        np.array([0.1, 0.9]), np.array([0, 1], dtype=np.int8), 0.5, 0.1, c
    )
    assert pi.tolist() == [0.01, 0.01]
    assert np.all(q > 0)


def _control(
    score: npt.NDArray[np.float64],
    pred: npt.NDArray[np.int8],
    alpha: float,
    *,
    ts_min: float,
    prev_bucket: int = 10,
    n_partitions: int = 1,
    lph: float = 20.0,
) -> Control:
    qstar = q_star_falpha(score, pred, alpha, 0.5)
    return control_for_bucket(
        n=len(score),
        n_pred=int(pred.sum()),
        pred_score_total=float((score * pred).sum()),
        score_total=float(score.sum()),
        mean_qstar=float(qstar.mean()),
        ts_min=ts_min,
        prev_bucket=prev_bucket,
        alpha=alpha,
        labels_per_hour=lph,
        bucket_s=3600,
        n_partitions=n_partitions,
    )


def test_control_from_previous_bucket(rng: np.random.Generator) -> None:
    score = rng.random(5000)
    pred = (score > 0.5).astype(np.int8)
    c = _control(score, pred, 0.5, ts_min=36_000.0, n_partitions=2)
    assert math.isclose(c.g, intrinsic_falpha(score, pred, 0.5))
    assert math.isclose(c.kappa, (20.0 / 2) / 5000)
    assert not c.uniform
    # a partition that started 15 min before the end of its first bucket: extrapolated x4
    late = _control(score, pred, 0.5, ts_min=36_000.0 + 2700.0)
    assert math.isclose(late.kappa, 20.0 / (5000 * 4))


def test_pi_is_min_one_kappa_q_and_mean_q_is_one(rng: np.random.Generator) -> None:
    score = rng.random(20_000)
    pred = (score > 0.7).astype(np.int8)
    c = _control(score, pred, 0.5, ts_min=36_000.0)
    q = q_star_falpha(score, pred, 0.5, c.g)
    c = Control(c.g, c.kappa, float(q.mean()))
    qstar, pi, p_hat, _ = selection_weights(score, pred, 0.5, 0.2, c)
    assert np.array_equal(p_hat, score)  # no calibration map: the raw scores
    qmix = 0.8 * qstar / qstar.mean() + 0.2
    assert np.allclose(pi, np.minimum(1.0, c.kappa * qmix))
    assert math.isclose(pi.sum(), 20.0, rel_tol=0.02)  # expected requests = the budget
    assert pi.min() >= 0.2 * c.kappa  # defensive share keeps every record possible


def test_a_control_with_a_calibration_map_selects_at_p_hat(rng: np.random.Generator) -> None:
    score = rng.random(2000) ** 4
    pred = (score > 0.5).astype(np.int8)
    cal = Calibration(version=3, cal_map=PlattMap(0.2, 0.3), lam=0.25)
    c = Control(0.4, 0.01, 0.8, calibration=cal)
    qstar, pi, p_hat, _ = selection_weights(score, pred, 0.5, 0.1, c)
    assert np.allclose(p_hat, cal.cal_map.apply(score))
    assert np.allclose(qstar, q_star_falpha(p_hat, pred, 0.5, 0.4))
    # the calibration's defensive share, not the configured one
    assert np.allclose(pi, np.minimum(1.0, 0.01 * (0.75 * qstar / 0.8 + 0.25)))
    assert Calibration.from_list(cal.to_list()) == cal
    for bad in ([1, 0.0, 1.0], [1.5, 0.0, 1.0, 0.1], [1, 0.0, -1.0, 0.1], [1, 0.0, 1.0, 0.0]):
        with pytest.raises(ValueError, match="calibration"):
            Calibration.from_list(bad)


def test_calibrations_round_trip_beta_maps_and_still_read_platt_records() -> None:
    beta = Calibration(4, BetaMap(a=0.3, b=1.2, c=-0.4), 0.2)
    assert beta.to_list() == [4, -0.4, 0.3, 1.2, 0.2]  # [version, c, a, b, lam]
    assert Calibration.from_list(beta.to_list()) == beta
    assert Calibration.from_list(json.loads(json.dumps(beta.to_list()))) == beta
    # a record written before beta maps existed: [version, a, b, lam], a Platt map
    old = Calibration.from_list([3, 0.2, 0.3, 0.25])
    assert old == Calibration(3, PlattMap(0.2, 0.3), 0.25) and old.to_list() == [3, 0.2, 0.3, 0.25]
    # the Platt list [v, a, b, lam] and the beta list [v, a, b, b, lam] are the same map
    same = Calibration.from_list([3, 0.2, 0.3, 0.3, 0.25])
    s = np.linspace(0.0, 1.0, 101)
    assert np.allclose(same.cal_map.apply(s), old.cal_map.apply(s), atol=1e-14)


def test_a_calibrations_reference_round_trips_before_its_segment_maps() -> None:
    counts = tuple(range(SCORE_BINS))
    cal = Calibration(5, PlattMap(0.1, 0.4), 0.3, (("eu", PlattMap(0.0, 0.5)),), counts)
    doc = cal.to_list()
    assert doc == [5, 0.1, 0.4, 0.3, list(counts), {"eu": [0.0, 0.5]}]
    assert Calibration.from_list(json.loads(json.dumps(doc))) == cal
    bare = replace(cal, segments=())
    assert Calibration.from_list(bare.to_list()) == bare
    # without a reference (a map written before it was recorded) the list is as it was
    assert replace(cal, reference=()).to_list() == [5, 0.1, 0.4, 0.3, {"eu": [0.0, 0.5]}]
    for bad in ([1] * (SCORE_BINS - 1), [1.0] * SCORE_BINS, [-1] + [0] * (SCORE_BINS - 1)):
        with pytest.raises(ValueError, match=f"reference is {SCORE_BINS} score counts"):
            Calibration.from_list([5, 0.1, 0.4, 0.3, bad])


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (
            [1, 0.0, 1.0, 1.0, 0.1, 0.0],
            r"is \[version, a, b, lam\] \(Platt\) or \[version, c, a, b",
        ),
        ([1, 0.0, -0.5, 1.0, 0.1], r"finite slopes >= 0 .*got \[1, 0.0, -0.5, 1.0, 0.1\]"),
        ([1, 0.0, 1.0, float("inf"), 0.1], "finite slopes >= 0"),
        ([1, float("nan"), 1.0, 1.0, 0.1], "a finite intercept"),
        ([1, 0.0, 1.0, 1.0, 1.5], r"lam in \(0, 1\]"),
        ([-1, 0.0, 1.0, 1.0, 0.1], "version >= 0"),
        ([1.0, 0.0, 1.0, 1.0, 0.1], r"is \[version, a, b, lam\]"),
        ([1, "x", 1.0, 1.0, 0.1], "could not convert"),
    ],
)
def test_malformed_beta_calibrations_are_refused_precisely(bad: list[object], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Calibration.from_list(bad)


def test_g_of_a_calibrated_control_is_given_by_the_recalibrated_sums() -> None:
    kw = dict(n=100, n_pred=10, mean_qstar=1.0, ts_min=0.0, prev_bucket=0, alpha=0.5)
    c = control_for_bucket(
        pred_score_total=4.0,
        score_total=12.0,
        labels_per_hour=10.0,
        bucket_s=3600,
        n_partitions=1,
        calibration=Calibration(1, PlattMap(0.0, 0.5), 0.2),
        **kw,  # type: ignore[arg-type]
    )
    assert c.g == pytest.approx(4.0 / (0.5 * 10 + 0.5 * 12.0))
    assert c.calibration.version == 1


def test_kappa_is_re_solved_when_caps_at_one_bind(rng: np.random.Generator) -> None:
    """A budget of half the traffic: many pi hit 1; the next buckets spend the budget anyway."""
    from monitor.config.schema import Config, ModelConfig
    from monitor.core.sampler import SamplerService
    from tests.unit.engine_streams import make_stream

    s = make_stream(rng, 12_000, span_s=6 * 3600, positive_rate=0.05)
    model = ModelConfig(name="default", labels_per_hour=1000.0, expected_records_per_hour=2000.0)
    sampler = SamplerService(Config(models={"default": model}))
    res = sampler.process(s.batch(slice(None)))
    spent = {k.bucket: a.pi_total for k, a in res.traffic.items()}
    buckets = sorted(spent)
    full = buckets[2:-1]  # whole buckets after the first two controls
    assert full
    for b in full:
        assert spent[b] > 0.9 * 1000.0, (b, spent[b])  # measured 934-1062 (800-833 before)
    # without the re-solve kappa would be lower by the earlier bucket's share of capped mass
    ctl = sampler.control("default", 0, full[0])
    assert ctl is not None
    prev = next(a for k, a in res.traffic.items() if k.bucket == full[0] - 1)
    naive = ctl.kappa * cap_ratio(prev.pi_total, prev.uncapped_total)
    assert naive < 0.9 * ctl.kappa


def test_kappa_is_re_solved_while_the_map_changes_every_few_hundred_records(
    rng: np.random.Generator,
) -> None:
    """Caps bind as above while a refitted map arrives every 500 records, so nearly every control
    adopts a map no record was decided under yet: the caps measured under the map it replaces
    still re-solve kappa. Mean spend of the whole buckets after the first two controls, over this
    fixture and seeds 0-2: 0.96-1.02 of the budget (0.79-0.81 when the re-solve needed a control
    decided under the map it takes)."""
    from monitor.config.schema import Config, ModelConfig
    from monitor.core.sampler import SamplerService
    from monitor.stats.calibration import PlattMap
    from tests.unit.engine_streams import make_stream

    s = make_stream(rng, 12_000, span_s=6 * 3600, positive_rate=0.05)
    model = ModelConfig(name="default", labels_per_hour=1000.0, expected_records_per_hour=2000.0)
    sampler = SamplerService(Config(models={"default": model}))
    spent: dict[int, float] = {}
    for k, lo in enumerate(range(0, len(s), 500)):
        near_identity = PlattMap(0.0, 1.0 + 1e-6 * (k + 1))
        sampler.calibration = {"default": Calibration(k + 1, near_identity, 0.1)}
        for key, agg in sampler.process(s.batch(slice(lo, lo + 500))).traffic.items():
            spent[key.bucket] = spent.get(key.bucket, 0.0) + agg.pi_total
    full = [spent[b] for b in sorted(spent)[2:-1]]
    assert np.mean(full) > 0.9 * 1000.0, full
