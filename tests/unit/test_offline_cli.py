"""The offline audit commands: ``monitor plan``, ``monitor estimate``, ``monitor offline-demo``."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import main
from monitor.offline.poolfile import read_plan, sidecar_path
from monitor.sim.simulate import calibrated_pool
from monitor.stats.falpha import falpha_exact

JSON_KEYS = {
    "estimate",
    "ci_low",
    "ci_high",
    "labels",
    "pending",
    "precision",
    "precision_ci_low",
    "precision_ci_high",
    "recall",
    "recall_ci_low",
    "recall_ci_high",
    "likelihood",
    "ess",
    "alpha",
    "level",
    "rounds",
}


def _pool(
    tmp_path: Path, n: int, rate: float, seed: int
) -> tuple[Path, dict[str, int], np.ndarray]:
    """A calibrated pool CSV and its truth (id -> label)."""
    score, label = calibrated_pool(n, rate, np.random.default_rng(seed))
    path = tmp_path / "pool.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "score"])
        writer.writerows((f"u{i}", repr(float(s))) for i, s in enumerate(score))
    truth = {f"u{i}": int(y) for i, y in enumerate(label)}
    return path, truth, score


def _fill(plan: Path, out: Path, truth: dict[str, int], keep_pending: int = 0) -> None:
    """Answer the plan from the truth, leaving the first ``keep_pending`` rows empty.

    The plan's sidecar is copied beside ``out`` under its name, as the README asks.
    """
    side = sidecar_path(plan)
    if side.exists() and side != sidecar_path(out):
        shutil.copyfile(side, sidecar_path(out))
    lines = plan.read_text().splitlines()
    done = 0
    with open(out, "w", newline="") as fh:
        for line in lines:
            if line.startswith("#") or line.startswith("id,"):
                fh.write(line + "\n")
                continue
            done += 1
            label = "" if done <= keep_pending else str(truth[line.split(",")[0]])
            fh.write(line + label + "\n")


def _num(result: dict[str, object], key: str) -> float:
    value = result[key]
    assert isinstance(value, float), (key, value)
    return value


def _estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["estimate", *args, "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object on one line
    result: dict[str, object] = json.loads(out)
    return result


def test_plan_is_deterministic_and_records_pool_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, _, score = _pool(tmp_path, 5000, 0.05, seed=1)
    args = ["plan", "--pool", str(pool), "--budget", "150", "--alpha", "0.5", "--seed", "7"]
    assert main([*args, "--out", str(tmp_path / "a.csv")]) == 0
    assert "items to audit" in capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "b.csv")]) == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    plan = read_plan(tmp_path / "a.csv")
    assert plan.meta["pool_size"] == "5000"
    assert plan.meta["pool_predicted_positives"] == str(int((score >= 0.5).sum()))
    assert plan.meta["alpha"] == "0.5" and plan.meta["design"] == "poisson"
    assert float(plan.meta["expected_labels"]) == pytest.approx(150.0)
    assert 100 <= len(plan) <= 200  # Poisson: random count around the budget
    assert not plan.labelled.any()
    np.testing.assert_allclose(plan.weight * plan.prob, 1.0)
    # another seed, another salt, another selection
    assert main([*args[:-1], "8", "--out", str(tmp_path / "c.csv")]) == 0
    assert set(read_plan(tmp_path / "c.csv").ids) != set(plan.ids)


def test_with_replacement_plan_spends_exactly_the_budget(tmp_path: Path) -> None:
    pool, _, _ = _pool(tmp_path, 3000, 0.05, seed=2)
    out = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "120", "--alpha", "0", "--out", str(out)]
    assert main([*argv, "--design", "with-replacement"]) == 0
    plan = read_plan(out)
    assert plan.design == "with-replacement"
    assert int(plan.draws.sum()) == 120
    np.testing.assert_allclose(plan.weight * plan.prob * 120, 1.0)


@pytest.mark.parametrize("design", ["poisson", "with-replacement"])
def test_round_trip_interval_contains_the_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], design: str
) -> None:
    pool, truth, score = _pool(tmp_path, 20_000, 0.05, seed=3)
    plan, labelled = tmp_path / "plan.csv", tmp_path / "labelled.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "300", "--alpha", "0.5", "--seed", "11"]
    assert main([*argv, "--design", design, "--out", str(plan)]) == 0
    _fill(plan, labelled, truth)
    result = _estimate_json(capsys, "--labels", str(labelled))
    assert set(result) >= JSON_KEYS
    pred = (score >= 0.5).astype(np.int8)
    y = np.array([truth[f"u{i}"] for i in range(len(score))])
    for key, alpha in (("estimate", 0.5), ("precision", 1.0), ("recall", 0.0)):
        low, high = (
            ("ci_low", "ci_high") if key == "estimate" else (f"{key}_ci_low", f"{key}_ci_high")
        )
        true_value = falpha_exact(pred, y, alpha)
        assert _num(result, low) <= true_value <= _num(result, high), (key, true_value, result)
    assert result["alpha"] == 0.5 and result["pending"] == 0
    assert result["labels"] == len(read_plan(plan))
    confusion = result["confusion"]
    assert isinstance(confusion, dict)
    assert confusion["tp"] + confusion["fp"] == pytest.approx(pred.sum())
    assert sum(confusion.values()) == pytest.approx(len(score))


def test_estimate_counts_pending_and_overrides_alpha(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _pool(tmp_path, 4000, 0.1, seed=4)
    plan, labelled = tmp_path / "plan.csv", tmp_path / "labelled.csv"
    assert (
        main(["plan", "--pool", str(pool), "--budget", "100", "--alpha", "1", "--out", str(plan)])
        == 0
    )
    _fill(plan, labelled, truth, keep_pending=5)
    n = len(read_plan(plan))
    result = _estimate_json(capsys, "--labels", str(labelled))
    assert (result["labels"], result["pending"]) == (n - 5, 5)
    assert result["alpha"] == 1.0 and result["estimate"] == result["precision"]
    warnings = result["warnings"]
    assert isinstance(warnings, list) and any("pending" in w for w in warnings)
    recall = _estimate_json(capsys, "--labels", str(labelled), "--alpha", "0", "--level", "0.9")
    assert recall["alpha"] == 0.0 and recall["level"] == 0.9
    assert recall["estimate"] == recall["recall"] == result["recall"]
    width_90 = _num(recall, "ci_high") - _num(recall, "ci_low")
    assert 0 < width_90 < _num(result, "recall_ci_high") - _num(result, "recall_ci_low")


def test_undefined_measures_are_null_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # only predicted negatives audited: precision is undefined, not 0
    path = tmp_path / "plan.csv"
    path.write_text(
        "# alpha=0.5\nid,score,pred,pi,weight,draws,label\n"
        "a,0.1,0,0.5,2,1,0\nb,0.2,0,0.5,2,1,1\nc,0.3,0,0.5,2,1,\n"
    )
    result = _estimate_json(capsys, "--labels", str(path))
    assert result["precision"] is None and result["precision_ci_low"] is None
    assert result["recall"] == 0.0 and result["estimate"] == 0.0
    assert result["confusion"] is None  # no pool totals recorded in this header
    only_pending = tmp_path / "pending.csv"
    only_pending.write_text("# alpha=0\nid,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,\n")
    result = _estimate_json(capsys, "--labels", str(only_pending))
    assert result["estimate"] is None and result["labels"] == 0 and result["pending"] == 1


@pytest.mark.parametrize("design", ["poisson", "with-replacement"])
def test_recall_is_undefined_while_every_predicted_negative_is_pending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], design: str
) -> None:
    """Labelling the predicted positives first read recall 1.0 [1.0, 1.0] (Poisson) or
    [0.73, 1.0] (with replacement): the pending predicted negatives were left out."""
    pool, truth, _ = _pool(tmp_path, 4000, 0.05, seed=5)
    plan, labelled = tmp_path / "plan.csv", tmp_path / "labelled.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "120", "--alpha", "0.5", "--out", str(plan)]
    assert main([*argv, "--design", design]) == 0
    _fill(plan, labelled, truth)
    rows = labelled.read_text().splitlines()
    negatives = [i for i, r in enumerate(rows) if i and r.split(",")[2] == "0"]
    for keep in (0, 1):  # no predicted negative labelled, then one
        cleared = set(negatives[keep:])
        labelled.write_text(
            "".join(
                (r[: r.rfind(",") + 1] if i in cleared else r) + "\n" for i, r in enumerate(rows)
            )
        )
        result = _estimate_json(capsys, "--labels", str(labelled))
        warnings = result["warnings"]
        assert isinstance(warnings, list) and isinstance(result["precision"], float)
        silent = [w for w in warnings if "no predicted-negative row is labelled" in w]
        if keep:
            assert isinstance(result["recall"], float) and isinstance(result["estimate"], float)
            assert not silent
        else:
            assert result["recall"] is None and result["estimate"] is None
            assert result["recall_ci_low"] is None and len(silent) == 1
            confusion = result["confusion"]
            assert isinstance(confusion, dict) and confusion["fn"] is None


def test_table_format_is_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.csv"
    path.write_text(
        "# alpha=0.5\n# pool_size=10\n# pool_predicted_positives=4\n"
        "id,score,pred,pi,weight,draws,label\n"
        "a,0.9,1,0.5,2,1,1\nb,0.6,1,0.5,2,1,0\nc,0.3,0,0.5,2,1,1\nd,0.1,0,0.25,4,1,0\n"
    )
    assert main(["estimate", "--labels", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 labels used, 0 pending" in out
    assert "F1 (alpha=0.5)" in out and "precision" in out and "recall" in out
    assert "95% interval" in out and "confusion over the pool: tp 2.0  fp 2.0" in out


@pytest.mark.parametrize(
    ("argv_tail", "content", "match"),
    [
        (
            [],
            "# alpha=0.5\nid,score,pred,pi,weight,draws,label\n"
            "a,0.1,0,0.5,2,1,1\nb,0.2,0,0.5,2,1,x\n",
            r"^monitor estimate: error: .*plan\.csv, line 4, column 'label': "
            r"expected a label 0 or 1 \(or empty while pending\), got 'x'\n$",
        ),
        (
            [],
            "id,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,1\n",
            r"plan\.csv: no alpha recorded for this plan \(no plan\.meta\.json beside it\); "
            r"pass --alpha\n$",
        ),
        (  # said before the pool is read (a pool of millions of rows takes seconds)
            ["--pool", "/nonexistent/pool.csv"],
            "id,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,1\n",
            r"plan\.csv: no alpha recorded for this plan \(no plan\.meta\.json beside it\); "
            r"pass --alpha\n$",
        ),
        (
            [],
            "# alpha=2\nid,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,1\n",
            r"plan\.csv: plan meta 'alpha=2': expected a number in \[0, 1\]\n$",
        ),
        (
            [],
            "# alpha=0\n# pool_size=many\nid,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,1\n",
            r"plan\.csv: plan meta 'pool_size=many': expected a whole number >= 0\n$",
        ),
    ],
)
def test_estimate_input_errors_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv_tail: list[str],
    content: str,
    match: str,
) -> None:
    path = tmp_path / "plan.csv"
    path.write_text(content)
    assert main(["estimate", "--labels", str(path), *argv_tail]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.search(match, captured.err), captured.err


def test_plan_input_error_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = tmp_path / "pool.csv"
    pool.write_text("id,score\na,0.5\nb,NaN\n")
    out = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "1", "--alpha", "0.5", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("monitor plan: error: ")
    assert err.endswith("pool.csv, line 3, column 'score': expected a score in [0, 1], got 'NaN'\n")
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["plan", "--pool", "p.csv", "--budget", "0", "--alpha", "0.5", "--out", "o.csv"],
            "--budget: expected a whole number >= 1, got '0'",
        ),
        (
            ["plan", "--pool", "p.csv", "--budget", "5", "--alpha", "1.5", "--out", "o.csv"],
            "--alpha: expected a number in [0, 1], got '1.5'",
        ),
        (
            ["plan", "--pool", "p.csv", "--budget", "5", "--alpha", "0.5"],
            "the following arguments are required: --out",
        ),
        (
            ["estimate", "--labels", "l.csv", "--level", "1"],
            "--level: expected a number strictly between 0 and 1",
        ),
        (
            ["estimate", "--labels", "l.csv", "--level", "95"],
            "--level: expected a number strictly between 0 and 1, got '95' (a percentage? 0.95)",
        ),
        (["estimate", "--labels", "l.csv", "--format", "xml"], "--format: invalid choice"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert match in capsys.readouterr().err


def test_offline_demo_is_quick_and_compares_with_uniform(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.perf_counter()
    assert main(["offline-demo", "--seed", "3", "--out-dir", str(tmp_path / "demo")]) == 0
    assert time.perf_counter() - start < 5.0
    out = capsys.readouterr().out
    assert "pool of 20000 items" in out and "budget 200 labels" in out
    for name in ("F1", "precision", "recall"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert "active:" in out and "uniform:" in out
    labelled = tmp_path / "demo" / "plan_labelled.csv"
    result = _estimate_json(capsys, "--labels", str(labelled))
    assert result["pending"] == 0 and result["labels"] == len(read_plan(labelled))
    f1_line = next(line for line in out.splitlines() if line.startswith("F1"))
    assert f"{result['estimate']:.3f}" in f1_line
    # the unlabelled plan and the pool are valid inputs as well
    assert read_plan(tmp_path / "demo" / "plan.csv").labelled.sum() == 0
    assert (
        main(
            [
                "plan",
                "--pool",
                str(tmp_path / "demo" / "pool.csv"),
                "--budget",
                "10",
                "--alpha",
                "0",
                "--out",
                str(tmp_path / "p.csv"),
            ]
        )
        == 0
    )


def test_plan_falls_back_to_uniform_when_intrinsic_f_is_undefined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # precision of a pool without a predicted positive: q* has no mass anywhere
    pool = tmp_path / "pool.csv"
    pool.write_text("id,score\n" + "".join(f"n{i},0.{i}\n" for i in range(1, 5)))
    out = tmp_path / "plan.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "4", "--alpha", "1", "--out", str(out)]
    assert main(argv) == 0
    assert "items were selected uniformly" in capsys.readouterr().out
    plan = read_plan(out)
    assert plan.meta["selection"].startswith("uniform")
    assert plan.prob.tolist() == [1.0] * 4  # a budget covering the pool is a census


def test_plan_refuses_to_write_over_its_inputs_or_into_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _pool(tmp_path, 3000, 0.05, seed=12)
    base = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0.5"]
    one, done = tmp_path / "r1.csv", tmp_path / "r1-done.csv"
    assert main([*base, "--out", str(one)]) == 0
    _fill(one, done, truth)
    before = (pool.read_bytes(), done.read_bytes(), sidecar_path(done).read_bytes())
    assert main([*base, "--out", str(pool)]) == 2
    assert f"--out {pool} is the pool: writing the plan there would replace it" in (
        capsys.readouterr().err
    )
    assert main([*base, "--labelled", str(done), "--out", str(done)]) == 2
    assert "is a labelled plan given to --labelled" in capsys.readouterr().err
    assert main([*base, "--out", f"{tmp_path}/"]) == 2
    assert f"--out {tmp_path}/: a directory; give the plan's file name" in capsys.readouterr().err
    assert (pool.read_bytes(), done.read_bytes(), sidecar_path(done).read_bytes()) == before


def test_a_plan_that_draws_nothing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A budget of 1 draws no item with probability about e^-1: refused, not an unreadable file."""
    pool, _, _ = _pool(tmp_path, 500, 0.05, seed=13)
    statuses = []
    for seed in range(12):
        out = tmp_path / f"p{seed}.csv"
        argv = ["plan", "--pool", str(pool), "--budget", "1", "--alpha", "0.5"]
        statuses.append(main([*argv, "--seed", str(seed), "--out", str(out)]))
        assert out.exists() == (statuses[-1] == 0)
    assert set(statuses) == {0, 2}, statuses
    assert "error: no item drawn (expected 1): raise --budget" in capsys.readouterr().err


def _small_audit(
    tmp_path: Path, seed: int, keep_pending: int = 0
) -> tuple[Path, dict[str, int], Path, Path]:
    """A 3,000-item pool, a plan of 60 labels for F1, its filled copy: pool, truth, plan, done."""
    pool, truth, _ = _pool(tmp_path, 3000, 0.05, seed=seed)
    plan, done = tmp_path / "plan.csv", tmp_path / "done.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0.5", "--out", str(plan)]
    assert main(argv) == 0
    _fill(plan, done, truth, keep_pending=keep_pending)
    return pool, truth, plan, done


def test_labels_written_back_by_pandas_read_as_labels(tmp_path: Path) -> None:
    """pandas writes a label column with empty (pending) cells as 1.0 / 0.0."""
    _, truth, plan, done = _small_audit(tmp_path, seed=14, keep_pending=3)
    text = done.read_text().splitlines()
    floated = [text[0]] + [
        line[:-1] + ("1.0" if line.endswith("1") else "0.0") if line[-1:] in "01" else line
        for line in text[1:]
    ]
    done.write_text("\n".join(floated) + "\n")
    a, b = read_plan(done), read_plan(plan)
    assert int(a.labelled.sum()) == len(b) - 3
    assert [truth[i] for i in a.ids[a.labelled].tolist()] == a.label[a.labelled].tolist()


def test_offline_demo_names_an_out_dir_it_cannot_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    argv = ["offline-demo", "--pool-size", "2000", "--budget", "50", "--out-dir"]
    assert main([*argv, str(afile)]) == 2
    assert f"--out-dir {afile}: cannot create the directory: File exists" in (
        capsys.readouterr().err
    )
    assert main([*argv, str(afile / "sub")]) == 2
    assert "cannot create the directory: Not a directory" in capsys.readouterr().err


def test_a_reader_that_leaves_early_ends_estimate_quietly(tmp_path: Path) -> None:
    """``monitor estimate ... | head``: no BrokenPipeError traceback when the reader is gone."""
    pool, _, _, done = _small_audit(tmp_path, seed=15)
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)  # reads nothing, exits
    reader.wait(timeout=10)
    estimate = subprocess.run(
        [sys.executable, "-m", "monitor", "estimate", "--labels", str(done), "--pool", str(pool)],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=60,
    )
    assert reader.stdin is not None
    reader.stdin.close()
    assert estimate.stderr == "" and estimate.returncode == 0, estimate.stderr


def test_a_sidecar_count_written_as_a_float_is_the_same_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, _, plan, done = _small_audit(tmp_path, seed=16)
    side = sidecar_path(done)
    doc = json.loads(side.read_text())
    doc["meta"]["pool_size"] = 3000.0  # as a tool that reads JSON numbers as floats writes it
    side.write_text(json.dumps(doc))
    assert _estimate_json(capsys, "--labels", str(done), "--pool", str(pool))["labels"] == len(
        read_plan(plan)
    )
    doc["meta"]["pool_size"] = 2999
    side.write_text(json.dumps(doc))
    assert main(["estimate", "--labels", str(done), "--pool", str(pool)]) == 2
    assert "has pool_size=3000, but" in capsys.readouterr().err


def test_offline_demo_says_when_items_could_not_be_chosen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["offline-demo", "--pool-size", "3000", "--alpha", "1", "--defensive", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"note: \d+ pool items had no chance of selection \(--defensive 0\)", out)
    assert sum(line.startswith("precision ") for line in out.splitlines()) == 1


def test_plan_refuses_an_out_whose_sidecar_is_an_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out r1`` writes its sidecar to r1.meta.json: that of the labelled r1.csv."""
    pool, truth, _ = _pool(tmp_path, 3000, 0.05, seed=17)
    base = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0.5"]
    one = tmp_path / "r1.csv"
    assert main([*base, "--out", str(one)]) == 0
    _fill(one, one, truth)
    before = (one.read_bytes(), sidecar_path(one).read_bytes())
    capsys.readouterr()
    again = [*base, "--labelled", str(one), "--out"]
    assert main([*again, str(tmp_path / "r1")]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'r1'}: its sidecar {sidecar_path(one)} would replace" in err
    assert f"the sidecar of {one} (a labelled plan given to --labelled)" in err
    assert main([*again, str(sidecar_path(one))]) == 2  # the plan over r1's sidecar
    assert f"would replace the sidecar of {one}" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "pool")]) == 2  # pool.meta.json: harmless, but
    assert "the sidecar of" in capsys.readouterr().err  # a plan named after its pool confuses
    assert (one.read_bytes(), sidecar_path(one).read_bytes()) == before
    assert main([*again, str(tmp_path / "r2.csv")]) == 0


def test_plan_refuses_to_erase_the_labels_of_an_existing_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Planning again with the same ``--out`` wiped the labels the auditors had filled in."""
    pool, truth, _ = _pool(tmp_path, 3000, 0.05, seed=18)
    one = tmp_path / "r1.csv"
    argv = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0.5", "--out", str(one)]
    assert main(argv) == 0
    assert main(argv) == 0  # no label yet: written again
    _fill(one, one, truth, keep_pending=5)
    before = one.read_bytes()
    labels = len(read_plan(one)) - 5
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--out {one}: holds {labels} labels already" in err
    assert "pick another --out, or move the file away first" in err
    assert one.read_bytes() == before


def test_plan_refuses_an_out_that_would_take_another_plans_sidecar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out r1`` (no suffix), ``--out r1.CSV`` or ``--out r1.meta.json`` wrote over the
    sidecar of ``r1.csv``, a plan being filled in, and estimate then refused it."""
    pool, truth, _ = _pool(tmp_path, 3000, 0.05, seed=19)
    one = tmp_path / "r1.csv"
    base = ["plan", "--pool", str(pool), "--budget", "60", "--alpha", "0.5"]
    assert main([*base, "--out", str(one)]) == 0
    _fill(one, one, truth, keep_pending=5)
    before = (one.read_bytes(), sidecar_path(one).read_bytes())
    for out in (tmp_path / "r1", tmp_path / "r1.CSV"):
        capsys.readouterr()
        assert main([*base, "--seed", "3", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}: its sidecar {sidecar_path(one)} is that of the plan {one} too" in err
        assert not out.exists()
    assert main([*base, "--out", str(sidecar_path(one))]) == 2
    assert "the name of a plan's sidecar; give the plan's name, e.g." in capsys.readouterr().err
    assert (one.read_bytes(), sidecar_path(one).read_bytes()) == before
    assert main([*base, "--seed", "3", "--out", str(tmp_path / "r2")]) == 0  # a name of its own
    # a later round cannot start its defensive share at 0 (a traceback before)
    later = [*base, "--labelled", str(one), "--defensive", "0", "--out", str(tmp_path / "r3.csv")]
    capsys.readouterr()
    assert main(later) == 2
    assert "--defensive 0 with --labelled: a later round raises" in capsys.readouterr().err


def test_a_sidecar_whose_pool_cannot_hold_the_plan_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-edited pool_size printed negative confusion counts (fn -0.8, tn -10.2)."""
    _, _, plan, done = _small_audit(tmp_path, seed=20)
    side = sidecar_path(done)
    original = json.loads(side.read_text())
    rows = len(read_plan(plan))
    for key, value, what in (
        ("pool_size", 10, f"cannot hold the plan's {rows} rows"),
        ("pool_predicted_positives", 5000, "cannot hold pool_predicted_positives=5000"),
    ):
        doc = json.loads(json.dumps(original))
        doc["meta"][key] = value
        side.write_text(json.dumps(doc))
        capsys.readouterr()
        assert main(["estimate", "--labels", str(done)]) == 2
        err = capsys.readouterr().err
        assert what in err and "was edited or is another plan's" in err, err


def test_a_with_replacement_budget_beyond_its_draws_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10 billion draws ended in a MemoryError (1e20: "Maximum allowed dimension exceeded")."""
    pool, _, _ = _pool(tmp_path, 100, 0.05, seed=21)
    argv = ["plan", "--pool", str(pool), "--budget", "10000000000", "--alpha", "0.5"]
    assert main([*argv, "--design", "with-replacement", "--out", str(tmp_path / "o.csv")]) == 2
    assert (
        "a with-replacement plan makes one draw per label, at most 10,000,000; for more use "
        in (capsys.readouterr().err)
    )
    assert main([*argv, "--out", str(tmp_path / "p.csv")]) == 0  # Poisson: a census
