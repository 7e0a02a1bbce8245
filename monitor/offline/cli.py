"""The offline audit's command line: ``monitor plan``, ``monitor estimate``, ``offline-demo``.

Arguments, files and printing only; the planning is ``offline.plan``, the estimates
``offline.estimate`` and ``offline.assisted``, the demo ``offline.demo``, the files
``offline.poolfile``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import InputFileError
from monitor.offline.assisted import assisted_estimate, check_pool
from monitor.offline.demo import demo_report, run_offline_demo
from monitor.offline.estimate import (
    estimate_json,
    estimate_plan,
    estimate_table,
    plan_alpha,
    plan_sample,
    scores_checked,
)
from monitor.offline.plan import DEFAULT_DEFENSIVE, make_plan, measure_name
from monitor.offline.poolfile import (
    DESIGNS,
    SIDECAR_SUFFIX,
    Plan,
    Pool,
    label_count,
    read_plan,
    read_pool,
    sidecar_path,
    write_plan,
)
from monitor.offline.rounds import (
    check_earlier_rounds,
    known_labels,
    planned_known,
    rounds_sample,
)
from monitor.stats.beta_calibration import CalibrationMap
from monitor.stats.calibration import IDENTITY
from monitor.stats.design import recalibrate


def _same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file (the same inode where both exist, else resolved text).

    ``normcase`` and ``samefile`` make ``R1.CSV`` and ``r1.csv`` one file where the filesystem
    says so (Windows, macOS).
    """
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.normcase(a.resolve()) == os.path.normcase(b.resolve())


def _check_out(out: str, inputs: dict[str, str]) -> None:
    """Refuse an ``--out`` that names a directory, or whose plan or sidecar is an input's file.

    ``--out r1`` writes its sidecar to ``r1.meta.json``, the sidecar of ``r1.csv``: the plan and
    its sidecar are compared with each input file and its sidecar, and with any other plan of
    that sidecar (an ``r1.csv`` being filled in lost its sidecar to ``--out r1``). A sidecar's
    name, or a plan holding labels, is refused too.
    """
    if out.endswith(("/", os.sep)) or Path(out).is_dir():
        msg = f"--out {out}: a directory; give the plan's file name, e.g. {Path(out) / 'plan.csv'}"
        raise InputFileError(msg)
    for path, what in inputs.items():
        if _same_path(Path(path), Path(out)):
            msg = f"--out {out} is {what}: writing the plan there would replace it; pick a new file"
            raise InputFileError(msg)
        mine = {"the plan": Path(out), "its sidecar": sidecar_path(out)}
        theirs = {path: Path(path), f"the sidecar of {path}": sidecar_path(path)}
        for name, a in mine.items():
            for other, b in theirs.items():
                if _same_path(a, b):
                    msg = (
                        f"--out {out}: {name} {a} would replace {other} ({what}); pick "
                        "another --out"
                    )
                    raise InputFileError(msg)
    if out.lower().endswith(SIDECAR_SUFFIX):
        plan = out[: -len(SIDECAR_SUFFIX)] + ".csv"
        msg = f"--out {out}: the name of a plan's sidecar; give the plan's name, e.g. {plan}"
        raise InputFileError(msg)
    labels = label_count(out)
    if labels:
        msg = (
            f"--out {out}: holds {labels} label{'' if labels == 1 else 's'} already (a plan "
            "being filled in); writing the plan there would erase them: pick another --out, "
            "or move the file away first"
        )
        raise InputFileError(msg)
    side = sidecar_path(out)
    for sibling in _sharing_sidecar(side):
        if not _same_path(sibling, Path(out)):
            msg = (
                f"--out {out}: its sidecar {side} is that of the plan {sibling} too, which would "
                "be left with another plan's sidecar: pick another --out"
            )
            raise InputFileError(msg)


def _sharing_sidecar(side: Path) -> list[Path]:
    """The files whose sidecar is ``side``: ``NAME`` and ``NAME.csv`` (``.CSV`` ...)."""
    name = side.name[: -len(SIDECAR_SUFFIX)]
    if not side.parent.is_dir():
        return []
    return [
        p
        for p in side.parent.iterdir()
        if p.is_file() and (p.name == name or (p.stem == name and p.suffix.lower() == ".csv"))
    ]


#: Draws a with-replacement plan makes at most (one uniform each: 10 million is 160 MB); a budget
#: of 10 billion ended in a MemoryError, one of 1e20 in "Maximum allowed dimension exceeded"
MAX_DRAWS = 10_000_000


def _cmd_plan(args: argparse.Namespace) -> int:
    if args.design == "with-replacement" and args.budget > MAX_DRAWS:
        msg = (
            f"--budget {args.budget}: a with-replacement plan makes one draw per label, at most "
            f"{MAX_DRAWS:,}; for more use the Poisson design (the default), which labels each "
            "item at most once"
        )
        raise InputFileError(msg)
    if args.labelled and args.defensive == 0.0:
        msg = (
            "--defensive 0 with --labelled: a later round raises the share of uniform sampling "
            "from it where its labels reject the scores, so it must be above 0 (default "
            f"{DEFAULT_DEFENSIVE}); only a first round can leave items no chance"
        )
        raise InputFileError(msg)
    inputs = {p: "a labelled plan given to --labelled" for p in args.labelled}
    _check_out(args.out, {**inputs, args.pool: "the pool"})
    pool = read_pool(args.pool, args.threshold)
    earlier = [(p, read_plan(p)) for p in args.labelled]
    if earlier:
        check_earlier_rounds(earlier)  # every round, of this audit, as estimate will need them
    known = known_labels(earlier) if earlier else None
    plan = make_plan(
        pool,
        alpha=args.alpha,
        budget=args.budget,
        seed=args.seed,
        defensive=args.defensive,
        design=args.design,
        threshold=args.threshold,
        known=known,
        pool_path=args.pool,
    )
    check_pool(pool, earlier, args.pool)  # a next round is drawn from the earlier ones' pool
    write_plan(args.out, plan)
    if plan.design == "poisson":
        expected = float(plan.meta["expected_labels"])  # below the budget when the pool is small
        what = f"{len(plan)} item{'' if len(plan) == 1 else 's'} to audit (expected {expected:g})"
    else:
        what = f"{len(plan)} distinct items to audit for {args.budget} draws"
    print(f"{args.out}: {what} out of {len(pool)} in {args.pool}")
    print(
        f"fill in its label column with 0 or 1 (empty = pending); {sidecar_path(args.out)} "
        "records what monitor estimate needs: keep it beside the plan under the same name"
    )
    if plan.meta["selection"] != "active":
        print(
            f"note: the intrinsic {measure_name(args.alpha)} of the pool is undefined; "
            "items were selected uniformly"
        )
    return 0


def _read_estimate_pool(path: str, plans: list[tuple[str, Plan]]) -> Pool:
    """The ``--pool`` of ``estimate``, pred as the plans had it, checked against them."""
    text = plans[-1][1].meta.get("threshold", "0.5")
    try:
        threshold = float(text)
    except ValueError:  # "pred column": the pool file gives pred
        threshold = 0.5
    pool = read_pool(path, threshold)
    check_pool(pool, plans, path)
    return pool


def _cmd_estimate(args: argparse.Namespace) -> int:
    plans = [(p, read_plan(p)) for p in args.labels]
    if args.alpha is None and not any("alpha" in plan.meta for _, plan in plans):
        plan_alpha(plans[-1][1], None, plans[-1][0])  # refused before a pool of millions is read
    pool = None if args.pool is None else _read_estimate_pool(args.pool, plans)
    if len(plans) == 1 and planned_known(plans[0][1], plans[0][0]) == 0:
        path, plan = plans[0]
        sample = plan_sample(plan)
        cal_map: CalibrationMap = IDENTITY  # no earlier labels to fit a map on
        result = estimate_plan(plan, path, args.alpha, args.level, sample)
    else:  # rounds; a later round alone is refused (its earlier labels are part of the total)
        rounds = rounds_sample(plans)
        sample, plan, path = rounds.sample, rounds.latest, rounds.path
        cal_map = recalibrate(rounds.earlier.sample).cal_map  # the map that chose it
        result = estimate_plan(plan, path, args.alpha, args.level, sample)
        done = {i for _, p in plans for i in p.ids[p.labelled].tolist()}
        pending = len({i for _, p in plans for i in p.ids[~p.labelled].tolist()} - done)
        result = replace(
            result,
            rounds=rounds.shares,
            warnings=result.warnings + rounds.warnings,
            pending=pending,
        )
    missing = [p for p, pl in plans if not pl.meta]
    if missing:
        result.warnings.append(
            f"no sidecar {sidecar_path(missing[0])} (written by monitor plan beside the plan): "
            "alpha, pool totals and round are unknown; copy it beside the labelled file"
        )
    if pool is not None:
        m = result.measures
        ratio = (m.f, m.precision, m.recall)
        assisted = assisted_estimate(sample, pool, result.alpha, args.level, ratio, cal_map)
        result, assisted = scores_checked(result, sample, pool, assisted)
        result = replace(result, assisted=assisted)
    if args.format == "json":
        print(json.dumps(estimate_json(result, plan), allow_nan=False))
    else:
        print(estimate_table(result, plan, path))
    return 0


def _write_pool(path: Path, pool: Pool) -> None:
    try:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["id", "score"])
            writer.writerows(zip(pool.ids.tolist(), map(repr, pool.score.tolist()), strict=True))
    except OSError as exc:
        msg = f"{path}: cannot write: {exc.strerror or exc}"
        raise InputFileError(msg) from exc


def _cmd_demo(args: argparse.Namespace) -> int:
    r = run_offline_demo(
        seed=args.seed,
        budget=args.budget,
        positive_rate=args.positive_rate,
        pool_size=args.pool_size,
        alpha=args.alpha,
        defensive=args.defensive,
    )
    print(demo_report(r, args))
    if args.out_dir is not None:
        out = Path(args.out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"--out-dir {out}: cannot create the directory: {exc.strerror or exc}"
            raise InputFileError(msg) from exc
        _write_pool(out / "pool.csv", r.pool)
        unlabelled = replace(r.plan, labelled=np.zeros(len(r.plan), np.bool_))
        write_plan(out / "plan.csv", unlabelled)
        write_plan(out / "plan_labelled.csv", r.plan)
        print(f"\nwrote {out}/pool.csv, plan.csv and plan_labelled.csv; try:")
        print(f"  monitor estimate --labels {out}/plan_labelled.csv --pool {out}/pool.csv")
    return 0


def _float(text: str) -> float:
    """The number ``text`` spells, NaN when it spells none (every range check then fails)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def unit_interval(text: str) -> float:
    """Argparse type: a number in [0, 1]."""
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        msg = f"expected a number in [0, 1], got '{text}'"
        raise argparse.ArgumentTypeError(msg)
    return value


def open_unit_interval(text: str) -> float:
    """Argparse type: a number strictly between 0 and 1 (a confidence level, a rate)."""
    value = _float(text)
    if not 0.0 < value < 1.0:
        hint = f" (a percentage? {value / 100:g})" if 1.0 < value < 100.0 else ""
        msg = f"expected a number strictly between 0 and 1, got '{text}'{hint}"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive_int(text: str) -> int:
    """Argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a whole number >= 1, got '{text}'"
        raise argparse.ArgumentTypeError(msg)
    return value


def register(sub: Any) -> None:
    """Add ``plan``, ``estimate`` and ``offline-demo`` to the ``monitor`` command line."""
    p = sub.add_parser(
        "plan",
        help="choose the items of a pool to audit (active estimation)",
        description="Choose which items of a pool to send for audit so that F_alpha is "
        "estimated with the least variance (Sawade et al., Algorithm 1).",
    )
    p.add_argument("--pool", required=True, help="pool CSV with columns id,score[,pred]")
    p.add_argument("--budget", required=True, type=positive_int, help="number of labels to buy")
    p.add_argument(
        "--alpha",
        required=True,
        type=unit_interval,
        help="F_alpha to optimise for: 0 recall, 0.5 F1, 1 precision",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the selection (default 0)")
    p.add_argument(
        "--defensive",
        type=unit_interval,
        default=DEFAULT_DEFENSIVE,
        help=f"lambda of the mix with uniform sampling (default {DEFAULT_DEFENSIVE})",
    )
    p.add_argument(
        "--threshold",
        type=unit_interval,
        default=0.5,
        help="pred = score >= threshold when the pool has no pred column (default 0.5)",
    )
    p.add_argument("--design", choices=DESIGNS, default="poisson", help="default poisson")
    p.add_argument(
        "--labelled",
        nargs="+",
        default=[],
        metavar="DONE.csv",
        help="labelled plans of earlier rounds: plan the next round (not chosen again, "
        "q* at the scores recalibrated on their labels)",
    )
    p.add_argument("--out", required=True, help="plan CSV to write")
    p.set_defaults(func=_cmd_plan)

    e = sub.add_parser(
        "estimate",
        help="estimate F_alpha, precision and recall from a labelled plan",
        description="Estimate F_alpha, precision and recall with confidence intervals from "
        "the labelled plan (empty labels are pending).",
    )
    e.add_argument(
        "--labels",
        required=True,
        nargs="+",
        metavar="PLAN.csv",
        help="the plan CSV with its label column filled; for rounds, every round's plan",
    )
    e.add_argument(
        "--alpha", type=unit_interval, default=None, help="default: the alpha of the plan"
    )
    e.add_argument(
        "--level", type=open_unit_interval, default=0.95, help="confidence level (default 0.95)"
    )
    e.add_argument(
        "--pool",
        default=None,
        metavar="POOL.csv",
        help="the pool the plans were made from: adds the model-assisted (GREG) estimate",
    )
    e.add_argument("--format", choices=("table", "json"), default="table")
    e.set_defaults(func=_cmd_estimate)
    d = sub.add_parser(
        "offline-demo",
        help="plan, label from a simulated truth and estimate: active against uniform sampling",
        description="Simulate a skewed pool with known truth, plan an active audit, answer it "
        "from the truth and print the estimates beside the truth and beside uniform sampling "
        "with the same budget.",
    )
    d.add_argument("--seed", type=int, default=0, help="seed of the pool and the plan")
    d.add_argument("--budget", type=positive_int, default=200, help="labels (default 200)")
    d.add_argument(
        "--positive-rate",
        type=open_unit_interval,
        default=0.02,
        help="share of true positives in the pool (default 0.02)",
    )
    d.add_argument(
        "--pool-size", type=positive_int, default=20_000, help="pool size (default 20000)"
    )
    d.add_argument(
        "--alpha", type=unit_interval, default=0.5, help="F_alpha to plan for (default 0.5: F1)"
    )
    d.add_argument(
        "--defensive",
        type=unit_interval,
        default=DEFAULT_DEFENSIVE,
        help=f"lambda of the mix with uniform (default {DEFAULT_DEFENSIVE})",
    )
    d.add_argument(
        "--out-dir",
        default=None,
        help="also write pool.csv, plan.csv and plan_labelled.csv there (for monitor estimate)",
    )
    d.set_defaults(func=_cmd_demo)
