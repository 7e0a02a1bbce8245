"""Coverage of the daemon's model-assisted estimate through the streaming controller.

``benchmarks.stream.run_daemon_rep``: the daemon's own sampler (recalibrating, map refitted after
each fifth of a bucket, so a bucket's p_hat mixes maps) and estimator (``estimator:
model_assisted``) over 10 hourly buckets of 5,000 records and 150 labels an hour, calibrated
throughout or over-confident (logits x3, x10) from bucket 3 on. Each bucket's "1h" window is
scored against the bucket's true F1: the exported estimate (GREG where ``greg.choose`` allows,
else the ratio) and the ratio beside it, on the same labels. Windows: every bucket but the cold
start (calibrated), the buckets from the second after the drift on (over-confident).

Measured with 60 streams per cell (``python -m benchmarks.efficiency --stream-daemon --reps 60
--seed 14``): coverage of the exported estimate / of the ratio,
savings (MAE of the ratio / MAE of the exported)^2, share of windows whose F is model-assisted,
and in brackets the exported coverage when a measure was model-assisted only where its standard
error came out below the ratio's (the rule before ``greg.choose`` chose by design alone, measured
before the exact cap re-solve, the scores test of ``monitor.core.recalibration``, the logit
bins of ``monitor.stats.drift`` and the maps' reference histograms of ``monitor.stats.budget``):

    calibrated 5%, F1            0.943 / 0.943   1.32x   1.00   (0.922)
    calibrated 1%, F1            0.928 / 0.928   1.02x   0.14   (0.909)
    x3 5%, F1                    0.936 / 0.936   1.30x   0.93   (0.925)
    x10 5%, F1                   0.939 / 0.944   1.22x   0.81   (0.925)
    x3 1%, F1                    0.906 / 0.908   1.00x   0.09   (0.911)
    x10 1%, F1                   0.956 / 0.956   1.01x   0.02   (0.939)
    x10 5%, recall               0.944 / 0.956   1.13x   0.58   (0.931)
    x3 5%, F1, 70% answered      0.953 / 0.953   1.18x   0.72   (0.942)

The calibrated cells over 800 streams (seeds 14-21, 100 each, ``--cells calibrated``): 0.946
and 0.934, standard error 0.003 (benchmarks/README.md, "The calibrated cells over 800
streams"); 0.951 and 0.939
since windows whose labels reject the scores take the score-type bounds
(``monitor.stats.score_interval``), which lift the over-confident cells to 0.95-0.98 over 100
streams (benchmarks/README.md, "The interval where the scores disagree").

Each window now spends 0.97-1.01x its budget on average (at most 1.43x). Before a new map was
pending until records had q* summed under it (``monitor.stats.budget``, "Map changes") the
over-confident cells spent 1.11-1.76x on average (up to 14x in one bucket) and read 0.939, 0.943,
0.914, 0.936, 0.922, 0.947, 0.942, 0.931.

At 1% positives a bucket rarely has 20 labelled predicted positives, so the ratio is kept. The
1% over-confident cells covered 0.864 (x3) and 0.881 (x10) while the map was fitted weighted by
1/pi (``monitor.stats.design.recalibrate`` says why it no longer is).

The last cell keeps the scores calibrated and from bucket 3 on adds as many positives again at
random, which the scores do not show (``StreamCase.hidden``): 0.928 over 300 streams at 5%
positives (seeds 14-16, 100 each; 0.917 before the day's test below); at 1% it reads 0.831 in
buckets 4-9 (0.811 before it), below the goal (benchmarks/README.md,
"Positives the scores do not show"). There the day's labels find the new positives among the low
scores after some hours and the design then audits them more (``monitor.stats.hidden_positives``):
``test_new_positives_the_scores_do_not_show_are_found_within_hours`` checks buckets 10-19 of
20-bucket streams at 1% positives, where 100 streams cover 0.912 (0.821 without the test;
``--cells "hidden 1%" --buckets 20 --from-bucket 10``).

Here 30 streams per cell (the suite's budget, about 80 CPU seconds in all, and 45 for the 20-bucket
streams of the hidden 1% test): coverage at least the
issue's 0.90 less two binomial standard errors on that many windows (0.855-0.863), not more than
0.03 below the ratio's on the same windows, and an MAE at most 2% above the ratio's.
"""

from __future__ import annotations

import math

import pytest

from benchmarks import stream

REPS = 30
SEED = 14

CELLS = [
    # (over-confidence, positive rate, answer rate, hidden: new positives the scores do not show)
    (1.0, 0.05, 1.0, 0.0),
    (1.0, 0.01, 1.0, 0.0),
    (3.0, 0.05, 1.0, 0.0),
    (10.0, 0.05, 1.0, 0.0),
    (3.0, 0.01, 1.0, 0.0),
    (10.0, 0.01, 1.0, 0.0),
    (3.0, 0.05, 0.7, 0.0),
    (1.0, 0.05, 1.0, 0.05),
]


@pytest.mark.slow
@pytest.mark.parametrize(("over", "rate", "answer", "hidden"), CELLS)
def test_daemon_model_assisted_estimate_covers(
    over: float, rate: float, answer: float, hidden: float
) -> None:
    name = f"x{over:g} {rate:.0%} pos, {answer:.0%} answered, {hidden:.0%} hidden"
    case = stream.StreamCase(name, over, rate, 0.5, 5_000, 150.0, hidden=hidden)
    t = stream.evaluate_daemon(case, REPS, SEED, answer)
    n = len(t.exported.errors)
    print(
        f"{name}: {n} windows, coverage {t.exported.coverage:.3f} (ratio {t.ratio.coverage:.3f}),"
        f" MAE {t.exported.mae:.4f} (ratio {t.ratio.mae:.4f}), savings {t.savings:.2f}x,"
        f" model-assisted in {t.assisted / n:.2f}"
    )
    assert n >= 0.95 * REPS * (stream.BUCKETS - (stream.DRIFT + 1 if case.drifts else 1))
    # the goal of 0.90, less two binomial standard errors of a coverage on n windows
    assert t.exported.coverage >= 0.90 - 2.0 * math.sqrt(0.90 * 0.10 / n)
    assert t.exported.coverage >= t.ratio.coverage - 0.03
    assert t.exported.mae <= 1.02 * t.ratio.mae


@pytest.mark.slow
def test_new_positives_the_scores_do_not_show_are_found_within_hours() -> None:
    case = stream.StreamCase("hidden 1%", 1.0, 0.01, 0.5, 5_000, 150.0, hidden=0.01, buckets=20)
    t = stream.evaluate_daemon(case, REPS, SEED, from_bucket=10)
    n = len(t.exported.errors)
    print(f"hidden 1%, buckets 10-19: {n} windows, coverage {t.exported.coverage:.3f}")
    assert n >= 0.95 * REPS * 10
    assert t.exported.coverage >= 0.90 - 2.0 * math.sqrt(0.90 * 0.10 / n)


@pytest.mark.slow
def test_the_second_bucket_after_a_drift_at_one_percent_covers() -> None:
    """Logits x3 at 1% positives, the second bucket after the drift (its map fitted on the last
    healthy and the first drifted bucket). 200 streams (seed 14) cover 0.905 with the score-type
    interval where the labels reject the scores (``monitor.stats.score_interval``), 0.860
    without it; the threshold is the goal of 0.90 less one binomial standard error (0.879)."""
    reps = 200
    case = stream.StreamCase("x3 1%", 3.0, 0.01, 0.5, 5_000, 150.0, buckets=stream.DRIFT + 2)
    t = stream.evaluate_daemon(case, reps, SEED, bucket=stream.DRIFT + 1)
    n = len(t.exported.errors)
    print(f"x3 1%, second bucket after the drift: {n} windows, coverage {t.exported.coverage:.3f}")
    assert n >= 0.95 * reps
    assert t.exported.coverage >= 0.90 - math.sqrt(0.90 * 0.10 / n)
