"""Per-segment calibration maps: the test that grants them, their codec, p_hat and materiality."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.core import recalibration
from monitor.stats.beta_calibration import BetaMap, CalibrationMap
from monitor.stats.budget import NO_CALIBRATION, Calibration
from monitor.stats.calibration import IDENTITY, PlattMap, expit
from monitor.stats.map_change import is_material
from monitor.stats.sample import LabeledSample
from monitor.stats.segment_maps import segment_maps

Arrays = tuple[
    npt.NDArray[np.float64], npt.NDArray[np.int8], npt.NDArray[np.str_], npt.NDArray[np.int8]
]


def _labels(rng: np.random.Generator, scale: dict[str, float], per_segment: int) -> Arrays:
    """Labelled items of each segment: true logits z ~ N(-3, 3^2), y ~ Bernoulli(expit(z)),
    scores expit(c z) with the segment's over-confidence c (1: calibrated)."""
    segment = np.repeat(np.array(list(scale), dtype=np.str_), per_segment)
    z = rng.normal(-3.0, 3.0, segment.size)
    label = (rng.random(segment.size) < expit(z)).astype(np.int8)
    c = np.array([scale[str(g)] for g in segment])
    score = expit(c * z)
    return score, label, segment, (score >= 0.5).astype(np.int8)


def _model_map(score: npt.NDArray[np.float64], label: npt.NDArray[np.int8]) -> CalibrationMap:
    sample = LabeledSample.poisson(
        score, (score >= 0.5).astype(np.int8), label, np.ones(len(score))
    )
    return recalibration.refit(NO_CALIBRATION, sample, 0.1).cal_map


def test_calibrated_segments_rarely_get_a_map_of_their_own() -> None:
    """Level 0.001 per segment and refit: 3 calibrated segments x 200 fits of 300 labels each."""
    rng = np.random.default_rng(11)
    granted = 0
    for _ in range(200):
        score, label, segment, _ = _labels(rng, {"a": 1.0, "b": 1.0, "c": 1.0}, 300)
        granted += len(segment_maps(_model_map(score, label), score, label, segment))
    assert granted <= 3  # expected about 0.6 of 600 tests; every one at level 1 would be 600


def _slope(m: CalibrationMap) -> float:
    """The map's slope on the logit (beta: the mean of its two slopes)."""
    return m.b if isinstance(m, PlattMap) else 0.5 * (m.a + m.b)


@pytest.mark.parametrize(("c", "n", "least"), [(10.0, 150, 43), (3.0, 600, 47)])
def test_segments_that_disagree_get_maps(c: float, n: int, least: int) -> None:
    """Half the labels calibrated ("a"), half over-confident by ``c`` ("b"), ``n`` each: the
    model's map is a compromise that both may reject; whichever get their own, each segment's
    records then take a map near its truth (slope 1 for "a", 1/c for "b"). Measured: 45 of 50
    fits at x10 from 150 labels; at x3 16, 33 and 49 of 50 from 150, 300 and 600 (the test's
    power: about 10 positives per 150 labels here)."""
    rng = np.random.default_rng(12)
    separated = 0
    for _ in range(50):
        score, label, segment, _ = _labels(rng, {"a": 1.0, "b": c}, n)
        model_map = _model_map(score, label)
        maps = dict(segment_maps(model_map, score, label, segment))
        a, b = (_slope(maps.get(g, model_map)) for g in ("a", "b"))
        separated += bool(maps) and b < 0.6 < a
    assert separated >= least


def test_no_segment_none_and_too_few_labels_take_the_models_map() -> None:
    rng = np.random.default_rng(13)
    score, label, segment, _ = _labels(rng, {"": 10.0, "few": 10.0, "b": 10.0}, 99)
    assert segment_maps(IDENTITY, score, label, segment) == ()  # "" never, 99 < 100 labels
    score, label, segment, _ = _labels(rng, {"b": 10.0}, 400)
    (name, m), *rest = segment_maps(IDENTITY, score, label, segment, beta=False)
    assert (name, rest, type(m)) == ("b", [], PlattMap)


SEG = Calibration(
    3, PlattMap(-0.5, 0.4), 0.25, (("eu", PlattMap(0.2, 0.1)), ("us", BetaMap(0.3, 1.2, -0.4)))
)


def test_p_hat_takes_each_records_segment_map() -> None:
    score = np.array([0.01, 0.2, 0.9, 0.99])
    segment = np.array(["eu", "us", "", "other"])
    got = SEG.p_hat(score, segment)
    want = [SEG.map_of(str(g)).apply(np.array([s]))[0] for s, g in zip(score, segment, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_allclose(got[2:], SEG.cal_map.apply(score[2:]), rtol=1e-15)
    np.testing.assert_allclose(SEG.p_hat(score), SEG.cal_map.apply(score), rtol=1e-15)
    assert SEG.map_of("eu") == PlattMap(0.2, 0.1) and SEG.map_of("x") == SEG.cal_map


def test_segment_maps_round_trip_and_leave_the_old_format_alone() -> None:
    assert SEG.to_list() == [3, -0.5, 0.4, 0.25, {"eu": [0.2, 0.1], "us": [-0.4, 0.3, 1.2]}]
    assert Calibration.from_list(SEG.to_list()) == SEG
    plain = Calibration(3, PlattMap(-0.5, 0.4), 0.25)
    assert plain.to_list() == [3, -0.5, 0.4, 0.25]
    with pytest.raises(ValueError, match=r"finite slopes >= 0 in segment 'eu'"):
        Calibration.from_list([3, -0.5, 0.4, 0.25, {"eu": [0.2, -0.1]}])
    with pytest.raises(ValueError, match=r"\[a, b\] \(Platt\) or \[c, a, b\] \(beta\) in segment"):
        Calibration.from_list([3, -0.5, 0.4, 0.25, {"eu": [0.2]}])


_finite = st.floats(-20.0, 20.0, allow_nan=False)
_slopes = st.floats(0.0, 20.0, allow_nan=False)
_maps = st.one_of(
    st.builds(PlattMap, _finite, _slopes), st.builds(BetaMap, _slopes, _slopes, _finite)
)


@given(
    st.integers(0, 10**6),
    _maps,
    st.floats(1e-6, 1.0),
    st.dictionaries(st.text(min_size=1, max_size=8), _maps, max_size=4),
)
def test_any_calibration_round_trips(
    version: int, model_map: CalibrationMap, lam: float, segs: dict[str, CalibrationMap]
) -> None:
    cal = Calibration(version, model_map, lam, tuple(sorted(segs.items())))
    assert Calibration.from_list(cal.to_list()) == cal


def test_a_segment_map_is_material_only_where_it_moves_the_segments_p_hat() -> None:
    base = Calibration(3, PlattMap(-0.5, 0.4), 0.25)
    same = Calibration(4, base.cal_map, 0.25, (("eu", PlattMap(-0.5, 0.401)),))
    moved = Calibration(4, base.cal_map, 0.25, (("eu", PlattMap(-0.5, 0.1)),))
    assert not is_material(base, same, 0.1)
    assert is_material(base, moved, 0.1)
    assert is_material(moved, base, 0.1)  # a map that vanishes moves its segment back


def test_refit_gives_the_drifted_segment_its_map(rng: np.random.Generator) -> None:
    score, label, segment, pred = _labels(rng, {"a": 1.0, "b": 10.0}, 300)
    sample = LabeledSample.poisson(score, pred, label, np.full(score.size, 0.3))
    cal = recalibration.refit(NO_CALIBRATION, sample, 0.1, segment=segment)
    assert cal.segments
    assert _slope(cal.map_of("b")) < 0.5 and _slope(cal.map_of("a")) > 0.7
    assert all(m.n_labels == 0 for _, m in cal.segments)  # recorded as the model's map is
    assert recalibration.refit(NO_CALIBRATION, sample, 0.1).segments == ()
    assert recalibration.refit(cal, sample, 0.1, segment=segment) is cal  # same labels
    doc = recalibration.encode({"m": cal})
    assert recalibration.decode(doc) == {"m": cal}
