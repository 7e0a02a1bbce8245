"""Invariants of the recalibration map (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from monitor.stats.calibration import PlattMap, calibration_error, fit_platt

SETTINGS = settings(max_examples=80, deadline=None)
unit = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def labelled(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 60))
    score = draw(hnp.arrays(np.float64, n, elements=unit))
    label = draw(hnp.arrays(np.int8, n, elements=st.integers(0, 1)))
    v = draw(hnp.arrays(np.float64, n, elements=st.floats(1.0, 1e4)))
    return score, label, v


@SETTINGS
@given(labelled(), st.floats(1e-3, 1e3))
def test_the_fit_is_finite_monotone_and_a_probability(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], tau: float
) -> None:
    score, label, v = data
    m = fit_platt(score, label, v, tau=tau)
    assert math.isfinite(m.a) and math.isfinite(m.b) and m.b >= 0.0
    grid = np.linspace(0.0, 1.0, 51)
    p = m.apply(grid)
    assert np.all((p >= 0.0) & (p <= 1.0)) and np.all(np.diff(p) >= 0.0)
    assert PlattMap.from_list(m.to_list()) == m


@SETTINGS
@given(labelled())
def test_the_fit_and_its_error_ignore_the_order_of_the_labels(
    data: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    score, label, v = data
    perm = np.random.default_rng(len(score)).permutation(len(score))
    one = fit_platt(score, label, v)
    two = fit_platt(score[perm], label[perm], v[perm])
    assert math.isclose(one.a, two.a, abs_tol=1e-7) and math.isclose(one.b, two.b, abs_tol=1e-7)
    e1, e2 = (
        calibration_error(score, label, v),
        calibration_error(score[perm], label[perm], v[perm]),
    )
    assert 0.0 <= e1 <= 1.0
    assert math.isclose(e1, e2, abs_tol=1e-9)
