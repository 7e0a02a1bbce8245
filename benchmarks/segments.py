"""Per-segment calibration maps through a drift of one segment (the daemon path).

Run: ``.venv/bin/python -m benchmarks.efficiency --stream-segments [--reps R] [--seed S]``.

The streams of ``benchmarks.stream`` (the daemon's own sampler and estimator,
``stream.run_daemon_rep``: 10 buckets of 5,000 records, 150 labels per bucket, the map refitted
after each of five steps per bucket), with every record in segment "a" or "b" at random (half
each) and only segment "b" turning over-confident (logits x3 or x10) from bucket
``stream.DRIFT``; "a" stays calibrated (in the last cell both stay calibrated: what segment
maps cost on healthy traffic). Two designs on the same streams:

* ``model map``: the model's one map, fitted on the labels of both segments;
* ``segment maps``: as the daemon refits (``monitor.stats.segment_maps``): a segment whose
  labels reject the model's map gets its own.

Per window (the model's, "a"'s and "b"'s; the buckets after the drift's first, as
``stream.evaluate_daemon``): coverage of the exported 95% interval (model-assisted where usable)
and of the ratio estimator's beside it, the exported estimate's MAE, and savings = (MAE of
the model map / MAE of segment maps)^2, the labels the model map needs more for the same error
(the 1/sqrt(n) law); spend = the bucket's expected labels over its budget (mean).
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.stream import DRIFT, DaemonTally, StreamCase, Tally, run_daemon_rep

#: (name, over-confidence of segment "b" after the drift, positive rate, alpha)
CELLS = (
    ("b x10 5%, F1", 10.0, 0.05, 0.5),
    ("b x10 5%, recall", 10.0, 0.05, 0.0),
    ("b x3 5%, F1", 3.0, 0.05, 0.5),
    ("both calibrated, F1", 1.0, 0.05, 0.5),
)
DESIGNS = ("model map", "segment maps")
WINDOWS = ("", "a", "b")


def evaluate(case: StreamCase, reps: int, seed: int) -> dict[tuple[str, str], DaemonTally]:
    """Tallies per (design, window segment) over ``reps`` streams, after the drift's first
    bucket: the exported estimate (model-assisted where usable) and the ratio beside it."""
    out = {(d, w): DaemonTally(Tally([]), Tally([])) for d in DESIGNS for w in WINDOWS}
    for design in DESIGNS:
        for rep in range(reps):
            rows = run_daemon_rep(case, rep, seed, segment_maps=design == "segment maps")
            for b, w, truth, spend in rows:
                if b > DRIFT and w.ratio is not None:
                    t = out[(design, w.segment)]
                    t.exported.add(w.f, truth, spend)
                    t.ratio.add(w.ratio[0], truth)
    return out


def main(reps: int, seed: int, echo: Callable[[str], None]) -> int:
    """Run the cells and print the table."""
    echo(
        f"Per-segment maps, daemon path: {reps} streams per cell, 10 buckets of 5000 records "
        f"(segments a and b, half each), 150 labels per bucket; segment b over-confident from "
        f"bucket {DRIFT}, a calibrated; windows from bucket {DRIFT + 1} on"
    )
    echo(
        f"  {'cell':<19} {'window':<7} {'design':<13} {'windows':>7} {'coverage':>9}"
        f" {'ratio':>6} {'MAE':>8} {'savings':>8} {'spend':>6}"
    )
    for name, over, rate, alpha in CELLS:
        case = StreamCase(name, over, rate, alpha, 5_000, 150.0, segmented=True)
        t = evaluate(case, reps, seed)
        for w in WINDOWS:
            base = t[("model map", w)].exported.mae
            for d in DESIGNS:
                cell, ratio = t[(d, w)].exported, t[(d, w)].ratio
                sav = (base / cell.mae) ** 2 if cell.mae > 0 else float("nan")
                echo(
                    f"  {name:<19} {w or 'model':<7} {d:<13} {len(cell.errors):>7}"
                    f" {cell.coverage:>9.3f} {ratio.coverage:>6.3f} {cell.mae:>8.4f}"
                    f" {sav:>7.2f}x {cell.mean_spend:>6.2f}"
                )
    return 0
