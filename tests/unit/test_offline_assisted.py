"""Offline plans as plain CSV with a sidecar, and ``monitor estimate --pool`` (model-assisted)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import main
from monitor.offline.plan import make_plan
from monitor.offline.poolfile import Pool, read_plan, sidecar_path
from monitor.offline.rounds import known_labels
from monitor.sim.simulate import calibrated_pool
from monitor.stats.falpha import falpha_exact
from tests.unit.test_offline_cli import _estimate_json, _fill
from tests.unit.test_offline_rounds import _answer

PLAN_HEADER = ["id", "score", "pred", "pi", "weight", "draws", "label"]


def _pool_file(
    tmp_path: Path, n: int, rate: float, seed: int, overconfidence: float = 1.0
) -> tuple[Path, dict[str, int], dict[str, float]]:
    """A pool CSV, its truth (id -> label) and the true F1, precision, recall."""
    rng = np.random.default_rng(seed)
    score, label = calibrated_pool(n, rate, rng, overconfidence=overconfidence)
    path = tmp_path / "pool.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "score"])
        writer.writerows((f"u{i}", repr(float(s))) for i, s in enumerate(score))
    pred = (score >= 0.5).astype(np.int8)
    truth = {"estimate": falpha_exact(pred, label, 0.5)}
    truth["precision"] = falpha_exact(pred, label, 1.0)
    truth["recall"] = falpha_exact(pred, label, 0.0)
    return path, {f"u{i}": int(y) for i, y in enumerate(label)}, truth


def _estimates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overconfidence: float
) -> tuple[dict[str, object], dict[str, object], dict[str, float]]:
    """A labelled plan of 400 for F1 on a pool of 20,000 at 5% positives: its JSON estimate
    without and with ``--pool``, and the true measures."""
    pool, truth, true = _pool_file(tmp_path, 20_000, 0.05, seed=5, overconfidence=overconfidence)
    plan = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "400", "--alpha", "0.5", "--seed", "2"]
    assert main([*argv, "--out", str(plan)]) == 0
    _fill(plan, plan, truth)
    without = _estimate_json(capsys, "--labels", str(plan))
    return without, _estimate_json(capsys, "--labels", str(plan), "--pool", str(pool)), true


def _assert_plain_csv(path: Path, header: list[str]) -> int:
    """What ``pandas.read_csv`` with no options needs: header first, every row as wide."""
    text = path.read_text(encoding="utf-8")
    assert "#" not in text
    rows = list(csv.reader(text.splitlines(), strict=True))
    assert rows[0] == header
    assert all(len(row) == len(header) for row in rows[1:]), "a row is not as wide as the header"
    return len(rows) - 1


def test_plan_is_a_plain_csv_with_a_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _pool_file(tmp_path, 3000, 0.05, seed=1)
    one, two = tmp_path / "r1.csv", tmp_path / "r2.csv"
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    assert main([*base, "--budget", "80", "--seed", "3", "--out", str(one)]) == 0
    assert "r1.meta.json" in capsys.readouterr().out
    rows = _assert_plain_csv(one, PLAN_HEADER)
    side = json.loads(sidecar_path(one).read_text())
    assert sidecar_path(one) == tmp_path / "r1.meta.json"
    assert side["format"] == 2 and side["plan"] == "r1.csv"
    meta = side["meta"]
    assert meta["alpha"] == 0.5 and meta["budget"] == 80 and meta["seed"] == 3
    assert meta["pool_size"] == 3000 and meta["design"] == "poisson"
    assert len(read_plan(one)) == rows
    # a labelled round 1 and a round-2 plan: plain as well, the round in the sidecar
    _fill(one, one, truth)
    assert main([*base, "--budget", "100", "--labelled", str(one), "--out", str(two)]) == 0
    _assert_plain_csv(two, PLAN_HEADER)
    meta2 = json.loads(sidecar_path(two).read_text())["meta"]
    assert meta2["round"] == 2 and meta2["known_labels"] == rows


def test_labelled_plan_without_its_sidecar_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _pool_file(tmp_path, 2000, 0.1, seed=2)
    plan = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0", "--out", str(plan)]
    assert main(argv) == 0
    _fill(plan, plan, truth)
    sidecar_path(plan).unlink()
    result = _estimate_json(capsys, "--labels", str(plan), "--alpha", "0")
    warnings = result["warnings"]
    assert isinstance(warnings, list)
    assert any("no sidecar" in w and "plan.meta.json" in w for w in warnings), warnings
    assert main(["estimate", "--labels", str(plan)]) == 2  # no alpha anywhere: refused
    assert "pass --alpha" in capsys.readouterr().err


@pytest.mark.parametrize("overconfidence", [1.0, 3.0])
def test_estimate_with_pool_gives_ratio_and_model_assisted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overconfidence: float
) -> None:
    without, result, true = _estimates(tmp_path, capsys, overconfidence)
    plan, pool = tmp_path / "plan.csv", tmp_path / "pool.csv"
    assert without["model_assisted"] is None
    ratio, greg = result["ratio"], result["model_assisted"]
    assert isinstance(ratio, dict) and isinstance(greg, dict)
    assert ratio["estimator"].startswith("Horvitz-Thompson") and greg["estimator"].startswith(
        "GREG"
    )
    # one round: the raw scores
    assert greg["calibration_map"] == {"family": "platt", "a": 0.0, "b": 1.0, "labels": 0}
    assert ratio["estimate"] == result["estimate"] == without["estimate"]
    for est in (ratio, greg):
        for key, low, high in (
            ("estimate", "ci_low", "ci_high"),
            ("precision", "precision_ci_low", "precision_ci_high"),
            ("recall", "recall_ci_low", "recall_ci_high"),
        ):
            assert abs(est[key] - true[key]) < 0.1, (key, est, true)
            assert est[low] <= true[key] <= est[high], (key, est, true)
    assert greg["estimate"] != ratio["estimate"]  # the pool's scores did enter
    assert greg["used"] == {"estimate": True, "precision": True, "recall": True}
    assert greg["ratio_kept_because"] is None
    # the table says which is which
    assert main(["estimate", "--labels", str(plan), "--pool", str(pool)]) == 0
    out = capsys.readouterr().out
    assert "ratio (Horvitz-Thompson) estimate" in out
    assert "model-assisted (GREG) estimate on the pool's raw scores" in out


def test_too_few_labels_in_a_stratum_keep_the_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon's rule offline: fewer than 20 labels among the predicted positives."""
    pool, truth, _ = _pool_file(tmp_path, 20_000, 0.05, seed=5, overconfidence=1.0)
    plan = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "30", "--alpha", "0.5", "--seed", "2"]
    assert main([*argv, "--out", str(plan)]) == 0
    _fill(plan, plan, truth)
    rows = read_plan(plan)
    assert int(rows.pred.sum()) < 20 or int((rows.pred == 0).sum()) < 20
    result = _estimate_json(capsys, "--labels", str(plan), "--pool", str(pool))
    ratio, greg = result["ratio"], result["model_assisted"]
    assert isinstance(ratio, dict) and isinstance(greg, dict)
    assert greg["used"] == {"estimate": False, "precision": False, "recall": False}
    assert re.fullmatch(
        r"\d+ labels among the predicted \w+ \(fewer than 20\)", str(greg["ratio_kept_because"])
    )
    for key in ("estimate", "ci_low", "ci_high", "precision", "recall_ci_low"):
        assert greg[key] == ratio[key]
    assert main(["estimate", "--labels", str(plan), "--pool", str(pool)]) == 0
    out = capsys.readouterr().out
    assert "(ratio kept)" in out and "ratio kept: " in out


def test_model_assisted_over_rounds_uses_the_earlier_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, true = _pool_file(tmp_path, 20_000, 0.05, seed=7, overconfidence=3.0)
    one, two = tmp_path / "r1.csv", tmp_path / "r2.csv"
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    assert main([*base, "--budget", "150", "--defensive", "0.5", "--out", str(one)]) == 0
    _fill(one, one, truth)
    assert main([*base, "--budget", "300", "--labelled", str(one), "--out", str(two)]) == 0
    _fill(two, two, truth)
    result = _estimate_json(capsys, "--labels", str(one), str(two), "--pool", str(pool))
    greg = result["model_assisted"]
    assert isinstance(greg, dict)
    cmap = greg["calibration_map"]
    assert cmap["labels"] == len(read_plan(one)) and cmap["b"] < 0.7  # over-confidence seen
    assert abs(greg["estimate"] - true["estimate"]) < 0.1
    assert greg["ci_low"] <= true["estimate"] <= greg["ci_high"]


def test_estimate_refuses_another_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool, truth, _ = _pool_file(tmp_path, 2000, 0.05, seed=3)
    plan = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "50", "--alpha", "0.5", "--out", str(plan)]
    assert main(argv) == 0
    _fill(plan, plan, truth)
    other = tmp_path / "other.csv"
    other.write_text(pool.read_text() + "extra,0.5\n")
    assert main(["estimate", "--labels", str(plan), "--pool", str(other)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"other\.csv: has pool_size=2001, but .*plan\.csv was planned from", err)
    lines = pool.read_text().splitlines()
    first = next(r for r in read_plan(plan).ids.tolist())
    changed = [
        f"{first},0.001" if line.startswith(f"{first},") else line for line in lines
    ]  # same size, one score edited
    other.write_text("\n".join(changed) + "\n")
    assert main(["estimate", "--labels", str(plan), "--pool", str(other)]) == 2
    assert f"item '{first}' has score" in capsys.readouterr().err


def test_labelled_items_are_never_chosen_again_even_when_the_budget_covers_the_rest() -> None:
    score, label = calibrated_pool(500, 0.1, np.random.default_rng(8), overconfidence=3.0)
    ids = np.array([f"i{k}" for k in range(500)], dtype=np.str_)
    pool = Pool(ids, score, (score >= 0.5).astype(np.int8), False)
    truth = dict(zip(ids.tolist(), label.tolist(), strict=True))
    r1 = _answer(make_plan(pool, alpha=0.0, budget=300, seed=1, defensive=0.5), truth)
    known = known_labels([("r1.csv", r1)])
    r2 = make_plan(pool, alpha=0.0, budget=500, seed=2, known=known)  # more than is left
    assert not set(r2.ids.tolist()) & set(r1.ids.tolist())
    assert set(r2.ids.tolist()) == set(ids.tolist()) - set(r1.ids.tolist())  # the rest, all
    np.testing.assert_array_equal(r2.prob, 1.0)


@pytest.mark.parametrize("overconfidence", [1.0, 10.0])
def test_labels_that_reject_the_pools_scores_widen_f_and_recall(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overconfidence: float
) -> None:
    without, result, true = _estimates(tmp_path, capsys, overconfidence)
    ratio, warnings = result["ratio"], result["warnings"]
    assert isinstance(ratio, dict) and isinstance(warnings, list)
    rejected = overconfidence > 1.0  # logits x10: the scores promise far more than the labels
    assert ratio["scores_disagree"] is rejected
    assert any("reject the pool's scores" in w for w in warnings) is rejected
    for key, low, high in (
        ("estimate", "ci_low", "ci_high"),
        ("precision", "precision_ci_low", "precision_ci_high"),
        ("recall", "recall_ci_low", "recall_ci_high"),
    ):
        assert ratio[key] == without[key]  # the value never moves
        widened = rejected and key != "precision"  # no false negative enters precision
        if widened:
            assert ratio[low] <= without[low] and ratio[high] >= without[high], key
        else:
            assert (ratio[low], ratio[high]) == (without[low], without[high]), key
        assert ratio[low] <= true[key] <= ratio[high], (key, ratio, true)
    recall = ("recall_ci_low", "recall_ci_high")
    assert ([ratio[k] for k in recall] != [without[k] for k in recall]) is rejected
