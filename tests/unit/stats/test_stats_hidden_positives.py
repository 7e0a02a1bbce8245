"""The test for positives a calibration map does not expect among the low scores."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.stats.hidden_positives import HIDDEN_LEVEL, hidden_positives_p


def _audit(rng: np.random.Generator, n: int, floor: float) -> tuple[np.ndarray, ...]:
    """Audited predicted negatives of a calibrated model at about 1% positives, plus ``floor``.

    Scores expit(z), z ~ Normal(-7, 3^2); labels from the score, or positive at rate ``floor``
    whatever the score (positives the scores do not show).
    """
    score = 1.0 / (1.0 + np.exp(-rng.normal(-7.0, 3.0, n)))
    score = score[score < 0.5][: n // 2]
    label = (rng.random(score.size) < score) | (rng.random(score.size) < floor)
    return score, np.zeros(score.size, np.int8), label.astype(np.int8)


def test_the_p_value_is_the_poisson_tail_of_the_low_half() -> None:
    p_hat = np.array([0.001, 0.002, 0.003, 0.004, 0.3, 0.4, 0.6])
    pred = np.array([0, 0, 0, 0, 0, 0, 1])
    label = np.array([1, 0, 1, 0, 1, 1, 1])
    # predicted negatives: median 0.0035, the low half the first three: O = 2, E = 0.006
    expected = stats.poisson.sf(1, 0.001 + 0.002 + 0.003)
    assert hidden_positives_p(p_hat, pred, label) == expected
    assert hidden_positives_p([], [], []) == 1.0
    assert hidden_positives_p([0.5], [1], [1]) == 1.0  # no predicted negative


def test_calibrated_labels_rarely_reject_and_a_one_percent_floor_is_found() -> None:
    rng = np.random.default_rng(5)
    healthy = [hidden_positives_p(*_audit(rng, 1600, 0.0)) for _ in range(2000)]
    few = [hidden_positives_p(*_audit(rng, 1600, 0.01)) for _ in range(200)]
    many = [hidden_positives_p(*_audit(rng, 3200, 0.01)) for _ in range(200)]
    # the level holds (the Poisson tail of a Poisson-binomial count is conservative) ...
    assert np.mean(np.array(healthy) < 0.01) <= 0.01 + 3 * np.sqrt(0.01 * 0.99 / 2000)
    assert np.mean(np.array(healthy) < HIDDEN_LEVEL) <= 0.004
    # ... and audited negatives with 1% positives nowhere in the scores reject at it: 800 in
    # 0.72 of the draws, 1,600 in 0.99 (a day at 150 labels an hour holds about 3,000)
    assert 0.6 <= np.mean(np.array(few) < HIDDEN_LEVEL) < np.mean(np.array(many) < HIDDEN_LEVEL)
    assert np.mean(np.array(many) < HIDDEN_LEVEL) >= 0.95


@given(
    st.lists(
        st.tuples(st.floats(0.0, 1.0, allow_nan=False), st.integers(0, 1), st.integers(0, 1)),
        max_size=60,
    )
)
def test_the_p_value_is_a_probability(rows: list[tuple[float, int, int]]) -> None:
    p = hidden_positives_p([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    assert 0.0 <= p <= 1.0
