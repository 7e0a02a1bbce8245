"""Streams whose model turns over-confident or misses new positives, through the controller.

Run: ``.venv/bin/python -m benchmarks.efficiency --stream [--reps R] [--quick]``.

The daemon's own sampler (``monitor.core.sampler.SamplerService``: per-bucket controls, q* at
the control's map, Poisson decisions by hashed ids) decides a simulated stream bucket by bucket.
Records have true logits z ~ Normal(mu, 3^2) with labels y ~ Bernoulli(expit(z)) (``mu`` for
the positive rate); the model reports s = expit(z) for the first ``DRIFT`` buckets and
s = expit(c z) after (over-confident by c = 3 or 10; with ``--scenario one-sided`` only the
negative logits are scaled, s = expit(c z) for z < 0 and expit(z) otherwise: the low scores are
far too low, the high ones right, so the true map of s is asymmetric and no Platt map fits it,
while the beta map's a = 1/c, b = 1 nearly does; with ``hidden`` h > 0 the scores stay calibrated
and from bucket ``DRIFT`` on a share h of the records turns positive whatever its score: new
positives that the scores do not show, which the score-shift rule cannot see and only the labels
reveal). Every request is answered from the truth at the end of its bucket. With recalibration on,
the map of the next controls is refitted from the labels of the last ``StreamCase.fit_buckets``
(default ``FIT_BUCKETS`` = 2: the ~300 labels the daemon fits on at 150 labels an hour,
``monitor.core.recalibration.label_window_buckets``) buckets and tested for positives it does
not expect on those of the last ``LONGEST`` = 24 (``monitor.core.recalibration.refit``, as the
engine does), so a control frozen at a bucket's first record uses labels of earlier buckets only.
A stream has ``StreamCase.buckets`` buckets (``BUCKETS`` = 10; ``--buckets`` on the daemon path).

Per bucket the F_alpha of the bucket's traffic is estimated from the bucket's labels by:

* ``uniform``: Poisson sampling with pi = n / N (same expected labels); the ratio estimate;
* ``raw``: today's controller (q* at the raw scores, defensive 0.1); the ratio estimate;
* ``recal-platt``: the recalibrating controller restricted to Platt maps; the ratio estimate;
* ``recal``: the recalibrating controller (Platt, or beta where
  ``monitor.stats.beta_calibration.choose_map`` takes it); the ratio estimate (seed 000, Eq. 4);
* ``recal+GREG``: the same labels; the model-assisted estimate (``monitor.stats.greg``) with
  the bucket's recalibrated sums from the sampler's traffic aggregates, each label's p_hat the
  one its request recorded (what the aggregates summed for it: a bucket's records may be
  decided under two maps, the earlier one while the newer is pending).

Reported separately: the buckets before the drift (bucket 0, the cold start, left out), the
first bucket after it (no label of the drifted model exists yet when its control freezes) and
the later ones; ``--scenario calibrated`` keeps the scores calibrated throughout (the same phases,
all healthy). Per case, the share of controls (a bucket's first and its refreshes) whose
defensive share the score shift raised (``monitor.stats.budget``, "Score shift"). Savings here
are (MAE of uniform / MAE of the design)^2 at the same expected number of labels (the 1/sqrt(n)
law), not the interpolated factor of ``benchmarks.efficiency``; ``spend`` is each bucket's
expected labels (the sum of its pi) over its budget, mean and largest over the buckets of the
phase (the daemon path: over its windows), so a design that spends more than its budget does not
pass for a saving.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from monitor.config.schema import Config, ModelConfig, WindowsConfig
from monitor.core import recalibration
from monitor.core.estimator import EstimatorService
from monitor.core.messages import LabelResult, RawRecord
from monitor.core.records import ScoredBatch
from monitor.core.sampler import SamplerService
from monitor.core.snapshot import WindowEstimate
from monitor.core.windows import TrafficAggregate
from monitor.sim.simulate import LOGIT_SD, logit_mean_for_rate
from monitor.stats.budget import NO_CALIBRATION, Control
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import estimate_falpha, falpha_exact
from monitor.stats.greg import StratumTraffic, greg_falpha
from monitor.stats.sample import LabeledSample

DESIGNS = ("uniform", "raw", "recal-platt", "recal", "recal+GREG")
BUCKETS = 10
DRIFT = 3  # first over-confident bucket
FIT_BUCKETS = 2
LONGEST = recalibration.label_window_buckets(3600)  # buckets of labels the maps are tested on
CHUNKS = 5  # steps per bucket of the daemon-path run (labels and a refit after each)
LEVEL = 0.95
START = 1_800_000_000.0


@dataclass(frozen=True)
class StreamCase:
    """A simulated stream: records and labels per bucket, positive rate, drift, alpha."""

    name: str
    overconfidence: float
    positive_rate: float
    alpha: float
    records_per_bucket: int
    labels_per_bucket: float
    one_sided: bool = False  # only the negative logits are scaled by ``overconfidence``
    segmented: bool = False  # records in segments "a" and "b" at random; only "b" drifts
    hidden: float = 0.0  # from the drift on, this share of records turn positive, scores unchanged
    defensive: float = 0.1  # the model's configured defensive share
    fit_buckets: int = FIT_BUCKETS  # buckets of labels a map is fitted on
    buckets: int = BUCKETS  # the stream's length

    @property
    def drifts(self) -> bool:
        """Whether the stream changes at bucket ``DRIFT`` (its scores or its labels)."""
        return self.overconfidence != 1.0 or self.hidden > 0.0


@dataclass
class Tally:
    """Errors, coverage and label spend of one design over a set of buckets."""

    errors: list[float]
    covered: int = 0
    undefined: int = 0
    spend: list[float] = field(default_factory=list)
    buckets: int = 0
    beta: int = 0  # buckets decided under a beta map
    stages: int = 0  # controls (a bucket's first and its refreshes)
    raised: int = 0  # ... whose defensive share the score shift raised

    def add(
        self,
        est: Estimate,
        truth: float,
        spend: float = math.nan,
        family: str = "",
        raised: tuple[int, int] = (0, 0),
    ) -> None:
        """Count one bucket's estimate, spend (expected labels / budget), map family and
        ``(raised, stages)``: its controls whose share the score shift raised, of all."""
        self.spend.append(spend)
        self.buckets += 1
        self.beta += family == "beta"
        self.raised += raised[0]
        self.stages += raised[1]
        if not est.defined or math.isnan(truth):
            self.undefined += 1
            return
        self.errors.append(abs(est.value - truth))
        self.covered += est.lower <= truth <= est.upper

    @property
    def coverage(self) -> float:
        """Share of defined estimates whose interval holds the truth."""
        return self.covered / len(self.errors) if self.errors else math.nan

    @property
    def mae(self) -> float:
        """Mean absolute error of the defined estimates."""
        return float(np.mean(self.errors)) if self.errors else math.nan

    @property
    def mean_spend(self) -> float:
        """Mean over the buckets of expected labels / budget."""
        return float(np.mean(self.spend)) if self.spend else math.nan

    @property
    def max_spend(self) -> float:
        """Largest expected labels / budget of a bucket."""
        return float(np.max(self.spend)) if self.spend else math.nan


PHASES = ("before", "first after", "later")


def _config(case: StreamCase, recalibrate: bool, estimator: str = "ratio") -> Config:
    model = ModelConfig(
        name="default",
        alpha=case.alpha,
        labels_per_hour=case.labels_per_bucket,
        expected_records_per_hour=float(case.records_per_bucket),
        recalibrate=recalibrate,
        estimator=estimator,
        defensive=case.defensive,
    )
    return Config(models={"default": model}, windows=WindowsConfig(3600, (("1h", 3600),)))


def _bucket_batch(
    rng: np.random.Generator, case: StreamCase, bucket: int, rep: int, offset: int
) -> tuple[ScoredBatch, npt.NDArray[np.int8]]:
    n = case.records_per_bucket
    mu = logit_mean_for_rate(case.positive_rate, LOGIT_SD)
    z = rng.normal(mu, LOGIT_SD, n)
    label = (rng.random(n) < 0.5 * (1.0 + np.tanh(0.5 * z))).astype(np.int8)
    if case.hidden > 0.0 and bucket >= DRIFT:  # positives the model scores like any record
        label |= (rng.random(n) < case.hidden).astype(np.int8)
    segment = np.full(n, "")
    c = np.full(n, case.overconfidence if bucket >= DRIFT else 1.0)
    if case.segmented:
        segment = np.where(rng.random(n) < 0.5, "a", "b")
        c[segment == "a"] = 1.0
    scaled = np.where(z < 0.0, c * z, z) if case.one_sided else c * z
    score = 0.5 * (1.0 + np.tanh(0.5 * scaled))
    batch = ScoredBatch(
        ids=np.array([f"{rep}-{bucket}-{i}" for i in range(n)], dtype=np.str_),
        score=score,
        pred=(score >= 0.5).astype(np.int8),
        ts=START + bucket * 3600.0 + np.sort(rng.random(n)) * 3599.0,
        model=np.full(n, "default"),
        segment=segment,
        payload=[None] * n,
        partition=np.zeros(n, dtype=np.int32),
        offset=np.arange(offset, offset + n, dtype=np.int64),
    )
    return batch, label


def _phase(bucket: int) -> str | None:
    if bucket == 0:
        return None  # the cold start
    if bucket < DRIFT:
        return "before"
    return "first after" if bucket == DRIFT else "later"


#: (design, phase) -> (estimate, truth, expected labels / budget, family of the control's map,
#: "" without recalibration, (controls whose share the score shift raised, controls)) per bucket
Rows = dict[tuple[str, str], list[tuple[Estimate, float, float, str, tuple[int, int]]]]


def _raised(ctl: Control, lam0: float) -> tuple[int, int]:
    """Of a bucket's controls (its first and its refreshes): how many the score shift raised
    above the calibration's defensive share, and how many there are."""
    stages = [ctl, *(r.control for r in ctl.refreshes)]
    up = sum(s.share(lam0) > replace(s, shift=0.0).share(lam0) for s in stages)
    return up, len(stages)


def run_rep(case: StreamCase, rep: int, seed: int) -> Rows:
    """One stream through the raw and the recalibrating controllers: estimates per phase."""
    out: Rows = {}
    samplers = {
        "raw": SamplerService(_config(case, recalibrate=False)),
        "recal-platt": SamplerService(_config(case, recalibrate=True)),
        "recal": SamplerService(_config(case, recalibrate=True)),
    }
    labelled: dict[str, list[LabeledSample]] = {"recal-platt": [], "recal": []}
    hists: dict[str, list[npt.NDArray[np.int64]]] = {"recal-platt": [], "recal": []}
    rng = np.random.default_rng([seed, rep])
    u_rng = np.random.default_rng([seed, rep, 1])
    lam0 = _config(case, True).model("default").defensive
    for b in range(case.buckets):
        batch, label = _bucket_batch(rng, case, b, rep, b * case.records_per_bucket)
        truth = falpha_exact(batch.pred, label, case.alpha)
        phase = _phase(b)
        truth_of = dict(zip(batch.ids.tolist(), label.tolist(), strict=True))
        pi_u = np.full(len(batch), min(1.0, case.labels_per_bucket / len(batch)))
        take = u_rng.random(len(batch)) < pi_u
        uni = LabeledSample.poisson(batch.score[take], batch.pred[take], label[take], pi_u[take])
        ests = {"uniform": estimate_falpha(uni, case.alpha, LEVEL)}
        spend = {"uniform": float(pi_u.sum()) / case.labels_per_bucket}
        family = dict.fromkeys(DESIGNS, "")
        raised = dict.fromkeys(DESIGNS, (0, 0))
        for name, sampler in samplers.items():
            res = sampler.process(batch)
            reqs = res.requests
            pi_total = sum(a.pi_total for a in res.traffic.values())
            spend[name] = spend[f"{name}+GREG"] = pi_total / case.labels_per_bucket
            sample = LabeledSample.poisson(
                [r.score for r in reqs],
                [r.pred for r in reqs],
                [truth_of[r.id] for r in reqs],
                [r.pi for r in reqs],
            )
            ests[name] = estimate_falpha(sample, case.alpha, LEVEL)
            ctl = sampler.control("default", 0, int(START // 3600) + b)
            if ctl is None:
                msg = f"no control for bucket {b}"
                raise RuntimeError(msg)
            raised[name] = _raised(ctl, lam0)
            if name in labelled:
                family[name] = ctl.calibration.cal_map.family
                labelled[name].append(sample)
                hists[name].append(sum(res.traffic.values(), TrafficAggregate.zero()).hist)
                recent = LabeledSample.concat(labelled[name][-case.fit_buckets :])
                previous = sampler.calibration.get("default", NO_CALIBRATION)
                reference = np.sum(hists[name][-case.fit_buckets :], axis=0).tolist()
                sampler.calibration = {
                    "default": recalibration.refit(
                        previous,
                        recent,
                        lam0,
                        beta=name == "recal",
                        reference=reference,
                        history=LabeledSample.concat(labelled[name][-LONGEST:]),
                    )
                }
            if name == "recal":
                family["recal+GREG"] = family["recal"]
                raised["recal+GREG"] = raised["recal"]
                agg = sum(res.traffic.values(), TrafficAggregate.zero())
                neg = StratumTraffic(
                    float(agg.n - agg.n_pred), agg.phat_total - agg.pred_phat_total
                )
                pos = StratumTraffic(float(agg.n_pred), agg.pred_phat_total)
                ests["recal+GREG"] = greg_falpha(
                    sample,
                    np.array([r.phat for r in reqs], dtype=np.float64),
                    neg,
                    pos,
                    alpha=case.alpha,
                    level=LEVEL,
                )
        if phase is not None:
            for d in DESIGNS:
                row = (ests[d], truth, spend[d], family[d], raised[d])
                out.setdefault((d, phase), []).append(row)
    return out


#: (bucket, a 1h window: the model's (segment "") or a segment's, its true F_alpha, the bucket's
#: expected labels / budget)
DaemonRows = list[tuple[int, WindowEstimate, float, float]]


def run_daemon_rep(
    case: StreamCase,
    rep: int,
    seed: int,
    answer_rate: float = 1.0,
    recalibrate: bool = True,
    *,
    segment_maps: bool = True,
) -> DaemonRows:
    """One stream through the daemon's own sampler and estimator (``estimator: model_assisted``).

    Per bucket the sampler's requests and traffic go to an ``EstimatorService`` as the engine
    passes them, in ``CHUNKS`` steps; after each step its requests are answered with probability
    ``answer_rate`` (at random: the rest stay pending), labels as ``LabelResult`` records, and
    the map new controls take is refitted from the estimator's labels of the last
    ``case.fit_buckets`` buckets, so the refreshes inside a bucket (record 1000, 2000, 4000,
    and by age) take maps fitted on labels of the same bucket and the bucket's p_hat mixes
    several maps. The
    window "1h" of the snapshot after each bucket is that bucket: its exported (model-assisted
    where usable) and ratio estimates against the bucket's true F_alpha. With ``recalibrate``
    False the model is configured ``recalibrate: false`` and no map is fitted: q* at the raw
    scores, the configured defensive share (the design without the map machinery). The
    refit gives segments their own maps as the engine does (``monitor.stats.segment_maps``;
    ``segment_maps`` False: the model's map alone). Every window of the snapshot is returned:
    the model's and, for a ``segmented`` case, each segment's.
    """
    config = _config(case, recalibrate=recalibrate, estimator="model_assisted")
    sampler = SamplerService(config)
    estimator = EstimatorService(config, clock=lambda: 0.0)
    rng = np.random.default_rng([seed, rep])
    a_rng = np.random.default_rng([seed, rep, 2])
    lam0 = config.model("default").defensive
    first = int(START // 3600)
    out: DaemonRows = []
    for b in range(case.buckets):
        batch, label = _bucket_batch(rng, case, b, rep, b * case.records_per_bucket)
        truth_of = dict(zip(batch.ids.tolist(), label.tolist(), strict=True))
        src = RawRecord("labels", 0, 0, 0, None, None)
        spent = 0.0
        for part in np.array_split(np.arange(len(batch)), CHUNKS):
            res = sampler.process(batch.rows(part))
            spent += sum(a.pi_total for a in res.traffic.values())
            estimator.apply_traffic(res.traffic)
            estimator.upsert_requests(res.requests)
            answered = a_rng.random(len(res.requests)) < answer_rate
            estimator.handle_labels(
                [
                    LabelResult(r.request_id, None, truth_of[r.id], None, None, None, src)
                    for r, ok in zip(res.requests, answered, strict=True)
                    if ok
                ]
            )
            if not recalibrate:
                continue
            since = first + b - case.fit_buckets + 1
            recent, segment = estimator.labelled("default", since)
            history, h_segment = estimator.labelled("default", first + b - LONGEST + 1)
            previous = sampler.calibration.get("default", NO_CALIBRATION)
            sampler.calibration = {
                "default": recalibration.refit(
                    previous,
                    recent,
                    lam0,
                    segment=segment if segment_maps else None,
                    reference=estimator.score_histogram("default", since),
                    history=history,
                    history_segment=h_segment if segment_maps else None,
                )
            }
        for w in estimator.snapshot().windows:
            own = batch.segment == w.segment if w.segment else slice(None)
            truth = falpha_exact(batch.pred[own], label[own], case.alpha)
            out.append((b, w, truth, spent / case.labels_per_bucket))
    return out


@dataclass
class DaemonTally:
    """The daemon path over a set of windows: exported and ratio estimates, assisted share."""

    exported: Tally
    ratio: Tally
    assisted: int = 0
    widths: list[float] = field(default_factory=list)  # the exported interval's, where defined
    disagree: int = 0  # windows whose labels reject the scores (``monitor_scores_disagree``)

    @property
    def savings(self) -> float:
        """(MAE of the ratio / MAE of the exported estimate)^2: labels the ratio needs more."""
        e, r = self.exported.mae, self.ratio.mae
        return (r / e) ** 2 if e > 0 else math.nan


def evaluate_daemon(
    case: StreamCase,
    reps: int,
    seed: int,
    answer_rate: float = 1.0,
    recalibrate: bool = True,
    *,
    bucket: int | None = None,
    from_bucket: int | None = None,
) -> DaemonTally:
    """The daemon path's windows after the drift's first bucket (every bucket but the cold
    start when the stream does not drift), over ``reps`` streams; with ``bucket``
    that bucket's windows alone (``DRIFT``: the first after the drift); with ``from_bucket``
    the windows of that bucket and the later ones."""
    first = from_bucket if from_bucket is not None else DRIFT + 1 if case.drifts else 1
    out = DaemonTally(Tally([]), Tally([]))
    for rep in range(reps):
        for b, w, truth, spend in run_daemon_rep(case, rep, seed, answer_rate, recalibrate):
            wanted = b >= first if bucket is None else b == bucket
            if not wanted or w.ratio is None or w.segment:
                continue
            out.exported.add(w.f, truth, spend)
            out.ratio.add(w.ratio[0], truth)
            out.assisted += w.assisted[0]
            out.disagree += w.scores_disagree
            if w.f.defined:
                out.widths.append(w.f.upper - w.f.lower)
    return out


def evaluate(case: StreamCase, reps: int, seed: int) -> dict[tuple[str, str], Tally]:
    """Tallies per (design, phase) over ``reps`` streams."""
    tallies = {(d, p): Tally([]) for d in DESIGNS for p in PHASES}
    for rep in range(reps):
        for key, rows in run_rep(case, rep, seed).items():
            for est, truth, spend, family, raised in rows:
                tallies[key].add(est, truth, spend, family, raised)
    return tallies


def cases(quick: bool, scenario: str = "over-confident") -> list[StreamCase]:
    """x3 and x10 over-confidence after the drift (both sides, or the negative logits only with
    ``scenario`` "one-sided"), 5% positives, recall and F1; ``scenario`` "calibrated": no drift
    (every phase healthy), 5% and 1% positives."""
    n, labels = (5_000, 150.0) if quick else (20_000, 200.0)
    metrics = (("recall", 0.0), ("F1", 0.5))
    if scenario == "calibrated":
        return [
            StreamCase(f"calibrated {r:.0%} pos, {name}", 1.0, r, alpha, n, labels)
            for r in (0.05, 0.01)
            for name, alpha in metrics
        ]
    one_sided = scenario == "one-sided"
    prefix = "neg " if one_sided else ""
    return [
        StreamCase(f"{prefix}x{c:g} 5% pos, {name}", c, 0.05, alpha, n, labels, one_sided)
        for c in (3.0, 10.0)
        for name, alpha in metrics
    ]


def report(rows: Sequence[tuple[StreamCase, dict[tuple[str, str], Tally]]]) -> list[str]:
    """Coverage, MAE, savings and spend per (case, design, phase); the buckets under beta maps.

    Spend: mean / largest expected labels over the budget of a bucket.
    """
    head = "".join(f"{p + ' cov/mae/sav/spend mean,max':>38}" for p in PHASES)
    lines = [f"  {'case':<24} {'design':<11}" + head]
    for case, t in rows:
        for d in DESIGNS:
            cells = ""
            for p in PHASES:
                cell = t[(d, p)]
                uni = t[("uniform", p)].mae
                sav = (uni / cell.mae) ** 2 if cell.mae > 0 else math.nan
                cells += f"{cell.coverage:>10.3f} {cell.mae:>7.4f} {sav:>6.2f}x"
                cells += f" {cell.mean_spend:>5.2f},{cell.max_spend:>5.2f}"
            lines.append(f"  {case.name:<24} {d:<11}{cells}")
        shares = [t[("recal", p)].beta / max(1, t[("recal", p)].buckets) for p in PHASES]
        lines.append(
            f"  {case.name:<24} recal: buckets under a beta map "
            + ", ".join(f"{p} {share:.0%}" for p, share in zip(PHASES, shares, strict=True))
        )
        lines.append(
            f"  {case.name:<24} controls whose share the score shift raised: "
            + "; ".join(
                f"{d} "
                + ", ".join(f"{t[(d, p)].raised / max(1, t[(d, p)].stages):.1%}" for p in PHASES)
                for d in ("raw", "recal")
            )
        )
    return lines


def main(
    reps: int,
    quick: bool,
    seed: int,
    echo: Callable[[str], None],
    scenario: str = "over-confident",
) -> int:
    """Run the streaming benchmark and print the table."""
    rows = [(c, evaluate(c, reps, seed)) for c in cases(quick, scenario)]
    c0 = rows[0][0]
    drift = (
        "no drift (phases as if drifted at bucket"
        if scenario == "calibrated"
        else f"drift to {scenario} scores at bucket"
    )
    echo(
        f"Streaming controller: {reps} streams per case, {BUCKETS} buckets of "
        f"{c0.records_per_bucket} records, {c0.labels_per_bucket:g} labels per bucket, {drift} "
        f"{DRIFT}{')' if scenario == 'calibrated' else ''}, map fitted on the last "
        f"{c0.fit_buckets} buckets"
    )
    for line in report(rows):
        echo(line)
    return 0


#: (name, over-confidence, positive rate, alpha, answer rate, hidden) of the daemon-path table;
#: "hidden": from the drift on, as many new positives as before, which the scores do not show
DAEMON_CELLS = (
    ("calibrated 5%, F1", 1.0, 0.05, 0.5, 1.0, 0.0),
    ("calibrated 1%, F1", 1.0, 0.01, 0.5, 1.0, 0.0),
    ("x3 5%, F1", 3.0, 0.05, 0.5, 1.0, 0.0),
    ("x10 5%, F1", 10.0, 0.05, 0.5, 1.0, 0.0),
    ("x3 1%, F1", 3.0, 0.01, 0.5, 1.0, 0.0),
    ("x10 1%, F1", 10.0, 0.01, 0.5, 1.0, 0.0),
    ("x10 5%, recall", 10.0, 0.05, 0.0, 1.0, 0.0),
    ("x3 5%, F1, 70% answered", 3.0, 0.05, 0.5, 0.7, 0.0),
    ("hidden 5%, F1", 1.0, 0.05, 0.5, 1.0, 0.05),
    ("hidden 1%, F1", 1.0, 0.01, 0.5, 1.0, 0.01),
)


def main_daemon(
    reps: int,
    seed: int,
    echo: Callable[[str], None],
    cells: str = "",
    recalibrate: bool = True,
    *,
    bucket: int | None = None,
    defensive: float = 0.1,
    fit_buckets: int = FIT_BUCKETS,
    buckets: int = BUCKETS,
    from_bucket: int | None = None,
) -> int:
    """The daemon path (``run_daemon_rep``) per cell: coverage, MAE, savings against the ratio.

    Only the cells whose name contains ``cells`` (all of them when it is empty); with
    ``recalibrate`` False the model does not recalibrate (``run_daemon_rep``); with ``bucket``
    only that bucket's windows (``evaluate_daemon``); ``defensive``: the model's configured
    defensive share; ``fit_buckets``: the buckets of labels each map is fitted on; ``buckets``:
    the streams' length; ``from_bucket``: the windows from that bucket on (``evaluate_daemon``).
    """
    chosen = [c for c in DAEMON_CELLS if cells in c[0]]
    if not chosen:
        names = ", ".join(c[0] for c in DAEMON_CELLS)
        echo(f"no daemon-path cell's name contains {cells!r}; the cells are: {names}")
        return 2
    echo(
        f"Daemon path, estimator: model_assisted{'' if recalibrate else ', recalibrate: false'}"
        f", defensive {defensive:g}, maps fitted on {fit_buckets} buckets of labels: "
        f"{reps} streams per cell, {buckets} buckets of "
        f"5000 records, 150 labels per bucket, drifting from bucket {DRIFT} (windows: "
        + (
            f"bucket {bucket} alone)"
            if bucket is not None
            else f"from bucket {from_bucket} on)"
            if from_bucket is not None
            else f"every bucket but the first without drift, from bucket {DRIFT + 1} on otherwise)"
        )
    )
    echo(
        f"  {'cell':<26} {'windows':>7} {'coverage':>9} {'ratio':>7} {'MAE':>8} {'ratio':>8}"
        f" {'savings':>8} {'assisted':>9} {'spend mean':>10} {'max':>5} {'width':>6}"
        f" {'widened':>8}"
    )
    for name, over, rate, alpha, answer, hidden in chosen:
        case = StreamCase(
            name,
            over,
            rate,
            alpha,
            5_000,
            150.0,
            hidden=hidden,
            defensive=defensive,
            fit_buckets=fit_buckets,
            buckets=buckets,
        )
        t = evaluate_daemon(
            case, reps, seed, answer, recalibrate, bucket=bucket, from_bucket=from_bucket
        )
        n = len(t.exported.errors)
        echo(
            f"  {name:<26} {n:>7} {t.exported.coverage:>9.3f} {t.ratio.coverage:>7.3f}"
            f" {t.exported.mae:>8.4f} {t.ratio.mae:>8.4f} {t.savings:>7.2f}x"
            f" {t.assisted / max(n, 1):>9.2f} {t.exported.mean_spend:>10.2f}"
            f" {t.exported.max_spend:>5.2f} {np.mean(t.widths):>6.3f}"
            f" {t.disagree / max(n, 1):>8.2f}"
        )
    return 0
