"""Coverage through the streaming controller when the model turns over-confident (issue 14).

The daemon's own sampler decides a simulated stream (``benchmarks.stream``: 10 hourly buckets
of 5,000 records, 150 labels an hour, 5% positives, calibrated scores for 3 buckets, then logits
multiplied by 3 or 10). With ``recalibrate`` the map of each new control is refitted from the
labels of the last two buckets. Checked on the buckets from the second after the drift on (the
first is decided before any label of the drifted model exists), over REPS streams with a fixed
seed: the 95% interval of the ratio estimate covers the bucket's true F1 at least 0.90 of the
time (the issue's goal), and so does the model-assisted estimate of the benchmark (the
daemon's is tested in ``test_stream_greg.py``). Measured here (3 min on 2 shared cores): ratio
0.940 (x3) and 0.935 (x10) against the raw controller's 0.821 and 0.526; model-assisted 0.944
and 0.925; every bucket within 1.09x of its budget. Before a new map was pending until records
had q* summed under it (``monitor.stats.budget``, "Map changes"), when these buckets spent up to
2-6x their budget, 0.929 and 0.929, model-assisted 0.932 and 0.917. With the map fitted weighted
by 1/pi (``monitor.stats.design.recalibrate``) the ratio covered 0.938 and 0.907 and the
model-assisted estimate 0.938 and 0.894 (x10 below the goal).
The first bucket after the drift is decided with the map fitted before it; the score shift
(``monitor.stats.budget``, "Score shift") moves its refreshes toward uniform, so it must not be
less accurate than uniform sampling and cover 0.85: measured 0.900 (x3) and 0.917 (x10), savings
2.12x and 1.70x, against 0.800 and 0.600, 1.84x and 0.53x without the rule (0.850 and 0.792,
2.34x and 1.44x with the raise capped at 0.5 instead of 0.8). These figures predate the exact
cap re-solve and the scores test of ``monitor.core.recalibration`` (the drift tables of
benchmarks/README.md have the figures with them); the test passes with both.
Here the truth has the Platt form after the drift, so the controller that may choose a beta map
(``monitor.stats.beta_calibration``) must do as well as the one kept to Platt maps, run beside it.
"""

from __future__ import annotations

import pytest

from benchmarks import stream

REPS = 120
SEED = 14


@pytest.mark.slow
@pytest.mark.parametrize("overconfidence", [3.0, 10.0])
def test_recalibrating_controller_covers_after_a_drift(overconfidence: float) -> None:
    case = stream.StreamCase(f"x{overconfidence:g}", overconfidence, 0.05, 0.5, 5_000, 150.0)
    tallies = stream.evaluate(case, REPS, SEED)
    for line in stream.report([(case, tallies)]):
        print(line)
    later = {d: tallies[(d, "later")] for d in stream.DESIGNS}
    assert len(later["recal"].errors) >= 0.95 * REPS * (stream.BUCKETS - stream.DRIFT - 1)
    assert later["recal"].coverage >= 0.90
    assert later["recal+GREG"].coverage >= 0.90
    # the first bucket after the drift: no worse than uniform sampling on the same labels
    first, uniform = tallies[("recal", "first after")], tallies[("uniform", "first after")]
    assert first.coverage >= 0.85
    assert first.mae <= uniform.mae
    # and the recalibrating controller is at least as accurate as today's
    assert later["recal"].mae <= later["raw"].mae
    # where Platt is right, allowing beta maps costs nothing: few buckets under one, same error
    assert later["recal"].beta <= 0.05 * later["recal"].buckets
    assert later["recal"].mae <= 1.02 * later["recal-platt"].mae
    assert later["recal"].coverage >= later["recal-platt"].coverage - 0.01
