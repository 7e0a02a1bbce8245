"""The alert benchmark runs end to end on a tiny setting and prints a sane table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "alerts.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_alerts", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_tiny_benchmark_detects_the_drop_and_prints_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _load()
    argv = ["--streams", "3", "--days", "4", "--drift-day", "2", "--budgets", "60",
            "--windows", "24h", "--rules", "horizon,naive", "--pool-size", "20000"]  # fmt: skip
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 60 |")]
    assert len(rows) == 2 * 4  # 2 rules x (3 alerts + any)
    cells = {(r.split("|")[3].strip(), r.split("|")[4].strip()): r.split("|") for r in rows}
    # the drifted model still claims its old F1: the calibration check must catch a 10-point
    # drop within two days at 60 labels/h, with the strict (horizon) spending too
    untrusted = cells[("horizon", "model_untrustworthy")]
    assert untrusted[6].strip() != "0%"
    assert "F1 before" in out


def test_drift_mix_gives_the_requested_drop() -> None:
    import numpy as np

    bench = _load()
    args = bench.parse_args(["--pool-size", "20000", "--drop", "0.1"])
    pool = bench.make_pool(args, 10.0, np.random.default_rng(3))
    drifted = (1 - pool.mix) * pool.score + pool.mix * pool.score.mean()
    after = bench.expected_f1(pool.score, pool.pred, drifted)
    assert pool.f0 - after == pytest.approx(0.1, abs=1e-9)
    # the design spends the budget: records_per_hour * mean(pi) labels per hour
    assert pool.mean_pi * args.records_per_hour == pytest.approx(10.0, rel=1e-6)


def test_tiny_benchmark_with_delayed_and_skipped_labels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _load()
    argv = ["--streams", "3", "--days", "4", "--drift-day", "2", "--budgets", "60",
            "--windows", "24h", "--rules", "horizon", "--pool-size", "20000",
            "--answer-rates", "0.5,0.9", "--mean-delay-hours", "6"]  # fmt: skip
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "answers: 0.5 of predicted negatives', 0.9 of predicted positives'" in out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| 60 |")]
    assert len(rows) == 4  # 3 alerts + any
    assert {r[4].strip() for r in rows} == {*bench.ALERTS, "any"}
    with pytest.raises(SystemExit):
        bench.parse_args(["--answer-rates", "0.5"])
