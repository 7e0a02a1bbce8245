"""A refit makes a new calibration only when it changes the decisions materially."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from monitor.core import recalibration
from monitor.stats import map_change
from monitor.stats.beta_calibration import BetaMap
from monitor.stats.budget import NO_CALIBRATION, Calibration
from monitor.stats.calibration import PlattMap, expit
from monitor.stats.map_change import (
    LOGIT_TOLERANCE,
    is_material,
    map_distance,
    share_distance,
)
from monitor.stats.sample import LabeledSample


def _labels(rng: np.random.Generator, n: int, scale: float) -> LabeledSample:
    """Labels y ~ Bernoulli(expit(z)) at 5% positives of a model reporting s = expit(scale z)."""
    z = rng.normal(-5.0, 3.0, n)
    y = (rng.random(n) < expit(z)).astype(np.int8)
    s = expit(scale * z)
    return LabeledSample.poisson(s, (s >= 0.5).astype(np.int8), y, np.full(n, 0.5))


def test_doctests() -> None:
    assert doctest.testmod(map_change).failed == 0


def test_more_labels_from_the_same_truth_keep_the_version_and_a_drift_makes_a_new_one(
    rng: np.random.Generator,
) -> None:
    """1% more labels move the fit by D = 0.03 (median of 20 seeds; 2 of 20 exceed 0.1)."""
    first = _labels(rng, 3000, 3.0)
    one = recalibration.refit(NO_CALIBRATION, first, 0.1)
    assert one.version == 1  # the first map is taken: it undoes the x3
    more = LabeledSample.concat([first, _labels(rng, 30, 3.0)])
    fitted = recalibration.refit(one, more, 0.1)
    assert fitted is one
    # the fit did move, by less than the tolerance: the old rule (any change) made a version
    cand = recalibration.refit(NO_CALIBRATION, more, 0.1)
    assert cand.cal_map != one.cal_map
    assert 0.0 < map_distance(one, cand) <= LOGIT_TOLERANCE
    # the model turns over-confident by x10: the labels of the window now mostly say so
    drifted = LabeledSample.concat([_labels(rng, 600, 3.0), _labels(rng, 2400, 30.0)])
    two = recalibration.refit(one, drifted, 0.1)
    assert two.version == 2 and map_distance(one, two) > 1.0


def test_the_first_map_is_taken_only_when_material() -> None:
    near = Calibration(1, PlattMap(0.02, 1.0), 0.1)
    assert not is_material(NO_CALIBRATION, near, 0.1)  # the identity at the configured share
    assert is_material(NO_CALIBRATION, near, 0.2)  # the configured share is 0.2: moves to 0.1
    assert is_material(NO_CALIBRATION, Calibration(1, PlattMap(0.2, 1.0), 0.1), 0.1)


def test_a_slow_drift_is_taken_once_it_adds_up_to_the_tolerance() -> None:
    """Compared with the map in force, not the previous candidate: no creeping by small steps."""
    in_force = Calibration(1, PlattMap(0.0, 1.0), 0.2)
    taken = []
    for step in range(1, 8):
        cand = Calibration(in_force.version + 1, PlattMap(0.04 * step, 1.0), 0.2)
        if is_material(in_force, cand, 0.1):
            in_force = cand
            taken.append(step)
    assert taken == [3, 6]  # 0.12 and then 0.24: each 0.12 > 0.1 from the one in force


def test_the_grid_reaches_the_raw_logits_of_an_over_confident_model() -> None:
    """A map of logits x10 decides at raw logits of +-30; beyond +-8 of p_hat nothing counts."""
    old = Calibration(1, PlattMap(0.0, 0.1), 0.1)
    new = Calibration(2, PlattMap(0.0, 0.11), 0.1)
    # eta = 0.1 t vs 0.11 t: 0.3 apart at t = 30, 0.08 at t = 8
    assert map_distance(old, new) == pytest.approx(0.345, abs=1e-3)  # at t = 34.5
    steep = Calibration(1, PlattMap(0.0, 3.0), 0.1)
    steeper = Calibration(2, PlattMap(0.0, 4.0), 0.1)
    # 3t vs 4t differ by |t| until 4t saturates at |t| = 2: then by 8 - 3|t| <= 2, then by 0
    assert map_distance(steep, steeper) == pytest.approx(2.0)


def test_a_change_of_family_is_material_and_beta_maps_compare_by_their_log_odds() -> None:
    platt = Calibration(1, PlattMap(0.0, 0.5), 0.1)
    same_as_platt = Calibration(2, BetaMap(0.5, 0.5, 0.0), 0.1)  # a = b: the same map
    assert map_distance(platt, same_as_platt) == pytest.approx(0.0, abs=1e-9)
    assert is_material(platt, same_as_platt, 0.1)
    beta = Calibration(2, BetaMap(0.5, 0.5, 0.0), 0.1)
    assert not is_material(beta, Calibration(3, BetaMap(0.5, 0.505, 0.0), 0.1), 0.1)
    assert is_material(beta, Calibration(3, BetaMap(0.2, 0.5, 0.0), 0.1), 0.1)


def test_the_share_is_material_by_its_log_ratio_and_its_complement() -> None:
    assert share_distance(0.1, 0.1) == 0.0
    assert share_distance(0.1, 0.11) == pytest.approx(math.log(1.1))
    assert share_distance(0.5, 0.45) == pytest.approx(math.log(0.5 / 0.45))
    assert share_distance(1.0, 0.9) == math.inf
    m = PlattMap(0.3, 0.4)
    assert not is_material(Calibration(1, m, 0.3), Calibration(2, m, 0.3 * 1.1), 0.1)
    assert is_material(Calibration(1, m, 0.3), Calibration(2, m, 0.3 * 1.12), 0.1)
