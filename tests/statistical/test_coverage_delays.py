"""Coverage with labels that arrive late or never (issue 11), read while the window fills.

The grid is ``benchmarks.delays`` (its docstring has the simulation): 1%, 5% and 20% positives,
calibrated and over-confident (logits x3) scores, 50% / 90% or 100% / 50% of predicted
negatives' / positives' requests ever answered, answers arriving after an exponential delay of
mean 6 h, every window read when it closes; REPS audits over WINDOWS simulated windows per case
at the shipped ``MIN_ANSWERS``. The over-confident rows run twice: with the design of
``models.NAME.recalibrate: true`` (``recal q*``: q* at the recalibrated scores, the map fitted
on the day before's answers and kept as the identity where it does not beat the scores, as the
daemon's refits do), the design to run on a model known to be over-confident,
and with q* at the raw scores (``raw q*``, the known failure of issue 14), for comparison.

Goals (issue 11): coverage of the 95% interval in [0.93, 0.97] (>= 0.90 over-confident),
|bias| < 0.1 mean se. A cell that misses is printed and asserted at its measured level with a
documented reason (module constants), never dropped. Same command, more repetitions:
``python -m benchmarks.delays --reps 1500 --windows 75``.

Also here: the measured case of the issue (100 predicted positives at pi = 1 with 20% pending),
against the labelled-only estimate.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from benchmarks import delays
from monitor.stats.falpha import estimate_falpha
from monitor.stats.response import response_sample
from monitor.stats.sample import LabeledSample

# the grid (the module fixture, ~200 s on 2 shared cores) runs inside the first test
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPS = 1200
WINDOWS = 60
LEVEL = delays.LEVEL
Key = tuple[float, float, tuple[float, float], str, str]  # rate, x, answers, design, measure
RAW, RECAL = delays.RAW, delays.RECAL


@pytest.fixture(scope="module")
def grid() -> dict[Key, delays.Cell]:
    started = time.perf_counter()
    cells = delays.grid(REPS, WINDOWS)
    print(
        f"\ndelayed labels: {REPS} audits over {WINDOWS} windows per case, "
        f"{time.perf_counter() - started:.0f} s"
    )
    for line in delays.report(cells):
        print(line)
    return {
        (c.case.rate, c.case.confidence, c.case.answers, c.case.design, c.measure): c for c in cells
    }


KEYS: list[Key] = [
    (c.rate, c.confidence, c.answers, c.design, m) for c in delays.cases() for m in delays.NAMES
]
CALIBRATED = [k for k in KEYS if k[1] == 1.0]
RECALIBRATED = [k for k in KEYS if k[3] == RECAL]

#: Calibrated cells measured above the 0.97 goal (seeded run of this module; Monte Carlo error
#: of a coverage about 0.005), asserted at their level + 0.005. Not the two-phase variance:
#: per cell, the mean reported variance matches the empirical one within 4% in se, phase one
#: and phase two alike (``benchmarks.delays`` samples, 1,200 audits). Precision: the logit-t
#: interval on the 14-37 answered predicted positives covers as it does for a binomial
#: proportion of that n (exactly: 0.979-0.985 at n = 14, 0.973-0.975 at 21, 0.966-0.970 at 31
#: for p 0.6-0.75; with every label in, n = 36-82, 0.948-0.968); a raw-scale t interval on the
#: same (value, se) covers 0.922-0.944. Recall / F1 at 1%: fewer than two false negatives
#: answered in 14% of the audits, where the pseudo events of ``interval.unseen_event_design``
#: make the interval about [0, 1]; the other audits cover 0.983 / 0.978.
#: The levels are this seed's: the calibrated cells sit at the band's upper edge. At a second
#: seed (``delays.SEED`` 20261124, 2026-11-29) they read 0.956-0.982, seven above 0.97: four of
#: the six below and three asserted in band here, recall at 1% with half the positives answered
#: (0.976) and recall and F1 at 5% with half the negatives answered (0.973, 0.972).
CONSERVATIVE: dict[Key, float] = {
    (0.01, 1.0, (0.5, 0.9), RAW, "recall"): 0.983,  # 0.955 with every label in
    (0.01, 1.0, (0.5, 0.9), RAW, "F1"): 0.979,  # 0.934
    (0.01, 1.0, (1.0, 0.5), RAW, "precision"): 0.982,  # 0.968
    (0.05, 1.0, (0.5, 0.9), RAW, "precision"): 0.973,  # 0.960
    (0.05, 1.0, (1.0, 0.5), RAW, "precision"): 0.975,  # 0.957
    (0.2, 1.0, (1.0, 0.5), RAW, "precision"): 0.972,  # 0.948
}

#: Calibrated cells measured below 0.93, asserted at their level - 0.01: none since the second
#: phase's residuals are centred on the answer class's weighted mean (recall at 20% positives
#: with half of the predicted negatives answered was 0.927, now 0.946).
LOW: dict[Key, float] = {}

#: Recalibrated over-confident cells measured below the 0.90 goal, asserted at their level -
#: 0.03: none (0.946-0.985 since the calibration map counts each label once).
KNOWN_MISSES: dict[Key, float] = {}

#: Over-confident cells measured with |bias| above 0.1 se, asserted at their level + 0.05: none
#: with the recalibrated design (raw q* reads recall / F1 at 1% up to +0.59 se).
KNOWN_BIAS: dict[Key, float] = {}


@pytest.mark.parametrize("key", CALIBRATED)
def test_delayed_labels_cover_calibrated(grid: dict[Key, delays.Cell], key: Key) -> None:
    """Goal 0.93-0.97; the cells that miss are in CONSERVATIVE and LOW."""
    cell = grid[key]
    upper = CONSERVATIVE[key] + 0.005 if key in CONSERVATIVE else 0.97
    lower = LOW[key] - 0.01 if key in LOW else 0.93
    assert lower <= cell.coverage <= upper, cell


@pytest.mark.parametrize("key", CALIBRATED)
def test_delayed_labels_bias_calibrated(grid: dict[Key, delays.Cell], key: Key) -> None:
    cell = grid[key]
    assert abs(cell.bias_se) < 0.1, cell


@pytest.mark.parametrize("key", RECALIBRATED)
def test_delayed_labels_cover_overconfident_with_recalibration(
    grid: dict[Key, delays.Cell], key: Key
) -> None:
    """Goal >= 0.90; at most 0.99; no worse than raw q* on the same cell (by 0.02)."""
    cell = grid[key]
    lower = KNOWN_MISSES[key] - 0.03 if key in KNOWN_MISSES else 0.90
    assert lower <= cell.coverage <= 0.99, cell
    raw = grid[(*key[:3], RAW, key[4])]
    assert cell.coverage >= raw.coverage - 0.02, (cell, raw)
    bound = abs(KNOWN_BIAS[key]) + 0.05 if key in KNOWN_BIAS else 0.1
    assert abs(cell.bias_se) < bound, cell


def test_certainty_stratum_with_pending_labels_covers() -> None:
    """Issue 11: 100 predicted positives at pi = 1, 20% pending: was 0.8%, goal >= 0.93."""
    rng = np.random.default_rng([delays.SEED, 99])
    reps, covered, covered_old = 4000, 0, 0
    y = (rng.random(100) < 0.8).astype(np.int8)  # one window; its precision is the truth
    truth = float(y.mean())
    for _ in range(reps):
        label = y.astype(np.int64)
        label[rng.permutation(100)[:20]] = -1
        s = response_sample(np.full(100, 0.9), np.ones(100), label, np.ones(100), np.zeros(100))
        est = estimate_falpha(s, 1.0, LEVEL)
        covered += est.lower <= truth <= est.upper
        a = label >= 0
        old = LabeledSample.poisson(np.full(80, 0.9), np.ones(80), y[a], np.ones(80))
        e_old = estimate_falpha(old, 1.0, LEVEL)
        covered_old += e_old.lower <= truth <= e_old.upper
    print(
        f"\npi = 1 with 20% pending: coverage {covered / reps:.3f} "
        f"(labelled only: {covered_old / reps:.3f})"
    )
    assert covered / reps >= 0.93
    assert covered_old / reps < 0.1
