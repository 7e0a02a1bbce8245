"""The defensive share a shift of the score distribution asks for (``drift.shift_share``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.sim.simulate import LOGIT_SD, logit_mean_for_rate
from monitor.stats.drift import SCORE_BINS, SHIFT_MAX, psi_noise, score_histogram, shift_share

LAM0 = 0.1
counts = st.lists(st.integers(0, 10_000), min_size=SCORE_BINS, max_size=SCORE_BINS)


@settings(max_examples=100, deadline=None)
@given(counts, counts, st.floats(0.01, 1.0), st.floats(0.0, 1.0))
def test_the_share_is_bounded(ref: list[int], cur: list[int], lam0: float, lam_max: float) -> None:
    lam = shift_share(ref, cur, lam0, lam_max)
    assert lam0 <= lam <= max(lam0, lam_max)


@settings(max_examples=100, deadline=None)
@given(counts, st.integers(1, 50))
def test_the_same_distribution_asks_for_nothing(ref: list[int], scale: int) -> None:
    # the same shares at any sample size: PSI 0
    assert shift_share(ref, [scale * c for c in ref], LAM0, SHIFT_MAX) == LAM0


@settings(max_examples=100, deadline=None)
@given(counts, counts, st.integers(2, 20))
def test_more_records_never_ask_for_less(ref: list[int], cur: list[int], k: int) -> None:
    """The same shares on more records: the same PSI, less noise."""
    small = shift_share(ref, cur, LAM0, SHIFT_MAX)
    large = shift_share([k * c for c in ref], [k * c for c in cur], LAM0, SHIFT_MAX)
    assert large >= small


def _scores(rng: np.random.Generator, n: int, rate: float, c: float = 1.0) -> np.ndarray:
    z = rng.normal(logit_mean_for_rate(rate, LOGIT_SD), LOGIT_SD, n)
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * c * z)), dtype=np.float64)


@pytest.mark.parametrize("rate", [0.01, 0.05])
@pytest.mark.parametrize("n", [250, 1000, 5000])
def test_samples_of_one_distribution_do_not_raise_it(rate: float, n: int) -> None:
    rng = np.random.default_rng(7)
    raised = sum(
        shift_share(
            score_histogram(_scores(rng, 5000, rate)),
            score_histogram(_scores(rng, n, rate)),
            LAM0,
            SHIFT_MAX,
        )
        > LAM0
        for _ in range(40)
    )
    assert raised == 0


@pytest.mark.parametrize("rate", [0.01, 0.05])
@pytest.mark.parametrize("c", [3.0, 10.0])
def test_an_over_confident_model_raises_it_fully_from_a_thousand_records(
    rate: float, c: float
) -> None:
    # On equal-width bins of [0, 1] the low scores stayed in the first bin: at 1% positives the
    # share reached 0.10-0.37 (x3) and 0.34-0.66 (x10) over seeds 0-19; on logit bins 0.8.
    rng = np.random.default_rng(8)
    before = score_histogram(_scores(rng, 5000, rate))
    after = score_histogram(_scores(rng, 1000, rate, c))
    assert shift_share(before, after, LAM0, SHIFT_MAX) == pytest.approx(SHIFT_MAX)


def test_empty_histograms_and_a_bad_share() -> None:
    assert shift_share([0] * SCORE_BINS, [5] * SCORE_BINS, LAM0, SHIFT_MAX) == LAM0
    assert psi_noise(0, 10) == float("inf")
    with pytest.raises(ValueError, match="lam0"):
        shift_share([1] * SCORE_BINS, [1] * SCORE_BINS, 0.0, SHIFT_MAX)
