"""Coverage and bias with labels that arrive late or never (issue 11), read while windows fill.

Each case simulates windows of WINDOW_HOURS hourly buckets of RECORDS_PER_HOUR scored records
(``monitor.sim.simulate.calibrated_pool``; 1%, 5% or 20% positives; calibrated scores, or
over-confident ones with the reported logits x3). The truth is the window's realised measure
over all its records (the estimate's design-based target). A window is audited for F1 with
BUDGET expected requests by one of two designs:

- ``raw q*``: q* at the reported scores mixed with 10% uniform (``inclusion_for_budget``), what
  ``models.NAME.recalibrate: false`` runs;
- ``recal q*``: what ``recalibrate: true`` (the default) runs. The map (``monitor.stats.design``)
  is fitted on the answers of the day before that arrived by the window's start (that day
  audited with raw q*: the first day after switching it on; v = 1/pi as ``Estimator.labelled``
  gives them) and, as the daemon's refits do (``keep_calibrated_scores``, on by default), kept
  as the identity where it does not beat the scores at ``SCORES_LEVEL``; the window's pi is q*
  at the recalibrated scores with the map's defensive share (``recalibrated_weights``). The
  daemon refits after every poll with labels; one map per window, fitted before any of its
  answers, is the more conservative version of that.

The audit team answers a request of a predicted positive with probability ``answers[1]`` and
one of a predicted negative with ``answers[0]`` (skips: never answered), independently of its
label; an answer arrives an Exponential(MEAN_DELAY_H) number of hours after its record. The
window is read when its last bucket closes, so its recent buckets are still mostly pending.
Each case simulates ``windows`` windows and audits each ``reps // windows`` times (a new Poisson
sample, new skips and delays); bias is the mean of (estimate - that window's truth) in units
of the mean se. Many windows, not one: a single window's chance excess of positives in its
recent, still pending buckets showed as a bias of -0.22 se. The estimate is the shipped one
(``monitor.stats.response.response_sample`` + ``measure_all``), once per value of
``min_answers`` on the same samples (paired), and once with every label in (no delay, no
skip) for reference.

    .venv/bin/python -m benchmarks.delays                               # the test's grid
    .venv/bin/python -m benchmarks.delays --reps 3000 --windows 150 --min-answers 3,5,10,20
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.core.recalibration import SCORES_LEVEL
from monitor.sim.simulate import calibrated_pool
from monitor.stats.design import recalibrate, recalibrated_weights
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import falpha_exact, intrinsic_falpha
from monitor.stats.measures import measure_all
from monitor.stats.response import MIN_ANSWERS, response_sample
from monitor.stats.sample import LabeledSample
from monitor.stats.selection import defensive_mix, inclusion_for_budget, q_star_falpha

SEED = 20261123
WINDOW_HOURS = 24
RECORDS_PER_HOUR = 1000
BUDGET = 200
DEFENSIVE = 0.1
MEAN_DELAY_H = 6.0
LEVEL = 0.95
RATES = (0.01, 0.05, 0.2)
CONFIDENCE = (1.0, 3.0)
RAW, RECAL = "raw q*", "recal q*"
# (answer rate of predicted negatives, of predicted positives)
ANSWERS = ((0.5, 0.9), (1.0, 0.5))
MEASURES = (("recall", 0.0), ("F1", 0.5), ("precision", 1.0))
NAMES = tuple(name for name, _ in MEASURES)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Case:
    """One row of the grid: positive rate, over-confidence, answer rates, design."""

    rate: float
    confidence: float
    answers: tuple[float, float]
    design: str


@dataclass(frozen=True)
class Cell:
    """Coverage, bias and width of one measure of one case at one ``min_answers``."""

    case: Case
    measure: str
    min_answers: int
    truth: float  # mean over the case's windows
    coverage: float
    bias_se: float  # mean (estimate - truth) / mean se
    bias_mc: float  # its Monte Carlo standard error (sd / mean se / sqrt(n))
    width: float
    answered: float  # mean share of requests answered at reading time
    undefined: int
    ref_coverage: float  # the same samples with every label in (no delay, no skip)
    ref_bias_se: float


@dataclass
class _Acc:
    """Rows (estimate - truth, se, covered, width) per (measure, min_answers or 0 = all in)."""

    rows: dict[tuple[str, int], list[tuple[float, float, float, float]]] = field(
        default_factory=dict
    )
    undefined: dict[tuple[str, int], int] = field(default_factory=dict)
    answered: list[float] = field(default_factory=list)
    truth: dict[str, list[float]] = field(default_factory=lambda: {n: [] for n in NAMES})


def cases() -> list[Case]:
    """Calibrated rows with raw q* (it is the recalibrated design there); over-confident both."""
    out = []
    for rate in RATES:
        for conf in CONFIDENCE:
            for answers in ANSWERS:
                for design in (RAW, RECAL) if conf != 1.0 else (RAW,):
                    out.append(Case(rate, conf, answers, design))
    return out


def _answered(
    ts: FloatArray,
    pred: npt.NDArray[np.int8],
    answers: tuple[float, float],
    rng: np.random.Generator,
) -> npt.NDArray[np.bool_]:
    """Which requests (event times ts in hours) are answered when the window closes."""
    willing = rng.random(ts.size) < np.asarray(answers)[pred]
    arrives = ts + rng.exponential(MEAN_DELAY_H, ts.size)
    out: npt.NDArray[np.bool_] = willing & (arrives <= WINDOW_HOURS)
    return out


def _raw_design(score: FloatArray, pred: npt.NDArray[np.int8]) -> FloatArray:
    g = intrinsic_falpha(score, pred, 0.5)
    pi, _ = inclusion_for_budget(
        defensive_mix(q_star_falpha(score, pred, 0.5, g), DEFENSIVE), BUDGET
    )
    return pi


def window_design(
    case: Case, score: FloatArray, pred: npt.NDArray[np.int8], rng: np.random.Generator
) -> FloatArray:
    """The window's inclusion probabilities under the case's design (module docstring)."""
    if case.design == RAW:
        return _raw_design(score, pred)
    n = score.size  # the day before: same model, same traffic, audited with raw q*
    prev_score, prev_label = calibrated_pool(n, case.rate, rng, case.confidence)
    prev_pred = (prev_score >= 0.5).astype(np.int8)
    prev_pi = _raw_design(prev_score, prev_pred)
    take = np.flatnonzero(rng.random(n) < prev_pi)
    got = _answered(rng.uniform(0.0, WINDOW_HOURS, take.size), prev_pred[take], case.answers, rng)
    a = take[got]
    recal = recalibrate(
        LabeledSample.poisson(prev_score[a], prev_pred[a], prev_label[a], prev_pi[a]),
        scores_level=SCORES_LEVEL,
    )
    q = recalibrated_weights(score, pred, 0.5, recal, DEFENSIVE)
    pi, _ = inclusion_for_budget(q, BUDGET)
    return pi


def _add(acc: _Acc, key: tuple[str, int], est: Estimate, truth: float) -> None:
    row = (est.value - truth, est.se, float(est.lower <= truth <= est.upper), est.upper - est.lower)
    acc.rows.setdefault(key, []).append(row)


def one_window(
    case: Case, audits: int, min_answers: Sequence[int], rng: np.random.Generator, acc: _Acc
) -> None:
    """Audit one simulated window ``audits`` times; append (estimate - truth) rows."""
    n = WINDOW_HOURS * RECORDS_PER_HOUR
    score, label = calibrated_pool(n, case.rate, rng, case.confidence)
    pred = (score >= 0.5).astype(np.int8)
    ts = rng.uniform(0.0, WINDOW_HOURS, n)  # event time in hours
    bucket = np.floor(ts).astype(np.int64)
    pi = window_design(case, score, pred, rng)
    truths = {name: falpha_exact(pred, label, a) for name, a in MEASURES}
    for name, t in truths.items():
        acc.truth[name].append(t)
    for _ in range(audits):
        take = np.flatnonzero(rng.random(n) < pi)
        answered = _answered(ts[take], pred[take], case.answers, rng)
        acc.answered.append(float(answered.mean()) if take.size else 0.0)
        y = np.where(answered, label[take], -1)
        full = measure_all(
            LabeledSample.poisson(score[take], pred[take], label[take], pi[take]), 0.5, LEVEL
        )
        ref = dict(zip(NAMES, (full.recall, full.f, full.precision), strict=True))
        for k in min_answers:
            sample = response_sample(
                score[take], pred[take], y, pi[take], bucket[take], min_answers=k
            )
            m = measure_all(sample, 0.5, LEVEL)
            for name, est in zip(NAMES, (m.recall, m.f, m.precision), strict=True):
                if not (est.defined and ref[name].defined):
                    acc.undefined[name, k] = acc.undefined.get((name, k), 0) + 1
                    continue
                _add(acc, (name, k), est, truths[name])
        for name, est in ref.items():
            if est.defined:
                _add(acc, (name, 0), est, truths[name])


def _columns(acc: _Acc, key: tuple[str, int]) -> FloatArray:
    """The rows of ``key`` as 4 columns (one NaN row when every estimate was undefined)."""
    rows = acc.rows.get(key) or [(np.nan,) * 4]
    out: FloatArray = np.array(rows, dtype=np.float64).T
    return out


def run_case(
    case: Case, reps: int, windows: int, min_answers: Sequence[int], rng: np.random.Generator
) -> list[Cell]:
    """``windows`` windows, ``reps // windows`` audits of each; one Cell per measure and k."""
    acc = _Acc()
    for _ in range(windows):
        one_window(case, reps // windows, min_answers, rng, acc)
    out = []
    for name in NAMES:
        ref = _columns(acc, (name, 0))
        for k in min_answers:
            err, se, cov, width = _columns(acc, (name, k))
            out.append(
                Cell(
                    case,
                    name,
                    k,
                    float(np.mean(acc.truth[name])),
                    float(cov.mean()),
                    float(err.mean() / se.mean()),
                    float(err.std() / se.mean() / np.sqrt(err.size)),
                    float(width.mean()),
                    float(np.mean(acc.answered)),
                    acc.undefined.get((name, k), 0),
                    float(ref[2].mean()),
                    float(ref[0].mean() / ref[1].mean()),
                )
            )
    return out


def grid(
    reps: int, windows: int, min_answers: Sequence[int] = (MIN_ANSWERS,), seed: int = SEED
) -> list[Cell]:
    """Every case of :func:`cases`, each with its own fixed seed (independent of the others)."""
    out = []
    for i, case in enumerate(cases()):
        rng = np.random.default_rng([seed, i])
        out.extend(run_case(case, reps, windows, min_answers, rng))
    return out


def report(cells: Sequence[Cell]) -> list[str]:
    """The table: one line per cell."""
    lines = [
        " rate conf design   answer(f=0,f=1) measure   k  truth answered | cover  bias/se (mc)"
        "  width | undef | all labels: cover bias/se"
    ]
    for c in cells:
        cs = c.case
        lines.append(
            f"{cs.rate:5.0%}  x{cs.confidence:g}  {cs.design:8s} "
            f"{cs.answers[0]:.1f},{cs.answers[1]:.1f}"
            f"         {c.measure:9s} {c.min_answers:2d} {c.truth:.3f}  {c.answered:.2f}   |"
            f" {c.coverage:.3f}  {c.bias_se:+.3f} ({c.bias_mc:.3f})  {c.width:.3f}"
            f" | {c.undefined:5d}"
            f" |             {c.ref_coverage:.3f} {c.ref_bias_se:+.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the grid's table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1200, help="audits per case")
    parser.add_argument("--windows", type=int, default=60, help="simulated windows per case")
    parser.add_argument("--min-answers", default=str(MIN_ANSWERS), help="comma-separated values")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    ks = [int(k) for k in str(args.min_answers).split(",")]
    started = time.perf_counter()
    print(
        f"delayed labels: {args.reps} audits over {args.windows} windows per case, "
        f"{BUDGET} requests per {WINDOW_HOURS} h window, mean delay {MEAN_DELAY_H:g} h, "
        "read at the window's end"
    )
    header, *_ = report([])
    print(header, flush=True)
    for i, case in enumerate(cases()):
        cells = run_case(case, args.reps, args.windows, ks, np.random.default_rng([args.seed, i]))
        print("\n".join(report(cells)[1:]), flush=True)
    print(f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
