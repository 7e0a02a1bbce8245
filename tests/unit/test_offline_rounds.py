"""Offline audits in rounds: ``monitor plan --labelled`` and ``monitor estimate`` over rounds."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import main
from monitor.errors import InputFileError
from monitor.offline.estimate import estimate_plan
from monitor.offline.plan import make_plan
from monitor.offline.poolfile import Plan, Pool, ids_digest, read_plan, sidecar_path
from monitor.offline.rounds import known_labels, rounds_sample
from monitor.sim.simulate import calibrated_pool
from monitor.stats.falpha import falpha_exact
from tests.unit.test_offline_cli import _estimate_json, _fill, _num


def _overconfident_pool(tmp_path: Path, n: int, seed: int) -> tuple[Path, dict[str, int], float]:
    """The pool file, each item's true label and the pool's true F1 (pred = score >= 0.5)."""
    score, label = calibrated_pool(n, 0.05, np.random.default_rng(seed), overconfidence=3.0)
    path = tmp_path / "pool.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "score"])
        writer.writerows((f"u{i}", repr(float(s))) for i, s in enumerate(score))
    true_f1 = falpha_exact((score >= 0.5).astype(np.int8), label, 0.5)
    return path, {f"u{i}": int(y) for i, y in enumerate(label)}, true_f1


def _two_rounds(
    tmp_path: Path, pool: Path, truth: dict[str, int], budgets: tuple[int, int], pending: int = 0
) -> tuple[Path, Path, Path]:
    """Plan round 1, answer it (the first ``pending`` rows left empty), plan round 2 from it;
    returns round 1's answered file, round 2's plan and the file to answer it into."""
    one, one_done = tmp_path / "r1.csv", tmp_path / "r1-done.csv"
    two, two_done = tmp_path / "r2.csv", tmp_path / "r2-done.csv"
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    assert main([*base, "--budget", str(budgets[0]), "--out", str(one)]) == 0
    _fill(one, one_done, truth, keep_pending=pending)
    again = [*base, "--budget", str(budgets[1]), "--labelled", str(one_done), "--out", str(two)]
    assert main(again) == 0
    return one_done, two, two_done


def test_two_rounds_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, true_f1 = _overconfident_pool(tmp_path, 20_000, seed=1)
    one_done, two, two_done = _two_rounds(tmp_path, pool, truth, (100, 200))
    first, second = read_plan(one_done), read_plan(two)
    assert not set(first.ids) & set(second.ids)  # already labelled items are not chosen again
    assert second.meta["round"] == "2" and second.meta["known_labels"] == str(len(first))
    family, *params = second.meta["calibration_map"].split(" ")
    slopes = dict(p.split("=") for p in params)
    assert family in ("platt", "beta")
    assert float(slopes["b"]) < 0.7  # the over-confidence was seen (b: the upper side's slope)
    _fill(two, two_done, truth)
    result = _estimate_json(capsys, "--labels", str(one_done), str(two_done))
    assert result["labels"] == len(first) + len(second)
    assert result["draws"] == result["labels"] and result["pending"] == 0  # every round's
    assert _num(result, "ci_low") <= true_f1 <= _num(result, "ci_high")
    # the files of the rounds must all be given, one plan per round
    assert main(["estimate", "--labels", str(two_done)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"planned with \d+ labelled items of earlier rounds", err), err
    # a next round is drawn from the pool of the earlier ones (another pool was taken)
    rows = pool.read_text().splitlines()
    other = tmp_path / "other.csv"
    other.write_text("\n".join([*rows, "u_new,0.5"]) + "\n")
    again = ["plan", "--pool", str(other), "--alpha", "0.5", "--budget", "200"]
    assert main([*again, "--labelled", str(one_done), "--out", str(tmp_path / "r2b.csv")]) == 2
    assert "but " + str(one_done) + " was planned from a pool" in capsys.readouterr().err


def test_three_rounds_as_the_readme_schedules_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """10%, 15% and 75% of the labels: each round skips every earlier round's labelled items."""
    pool, truth, true_f1 = _overconfident_pool(tmp_path, 20_000, seed=3)
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    done: list[Path] = []
    for r, budget in enumerate((40, 60, 300), start=1):
        out, filled = tmp_path / f"r{r}.csv", tmp_path / f"r{r}-done.csv"
        extra = ["--labelled", *map(str, done)] if done else ["--defensive", "0.5"]
        assert main([*base, "--budget", str(budget), *extra, "--out", str(out)]) == 0
        plan = read_plan(out)
        assert plan.meta.get("round", "1") == str(r)
        earlier = [read_plan(d) for d in done]
        assert plan.meta.get("known_labels", "0") == str(
            sum(int(e.labelled.sum()) for e in earlier)
        )
        assert not any(set(plan.ids) & set(e.ids) for e in earlier)
        _fill(out, filled, truth)
        done.append(filled)
    # one draw: its 99.9% interval (the 95% one misses one draw in twenty; coverage is measured
    # over hundreds in tests/statistical/test_offline_assisted_coverage.py)
    result = _estimate_json(capsys, "--labels", *map(str, done), "--level", "0.999")
    assert result["labels"] == sum(int(read_plan(d).labelled.sum()) for d in done)
    assert _num(result, "ci_low") <= true_f1 <= _num(result, "ci_high")
    # how the rounds enter: round 1 exactly, rounds 2 and 3 by their expected labels
    planned = [float(read_plan(d).meta["expected_labels"]) for d in done[1:]]
    assert result["rounds"] == [
        {"file": str(d), "round": r, "labels": int(read_plan(d).labelled.sum()), "share": w}
        for r, d, w in zip(
            (1, 2, 3), done, [0.0, *(p / sum(planned) for p in planned)], strict=True
        )
    ]
    capsys.readouterr()
    assert main(["estimate", "--labels", *map(str, done)]) == 0
    table = capsys.readouterr().out
    assert f"round 1: {done[0]}, " in table and "counted exactly" in table
    assert re.search(r"round 3: .*r3-done\.csv, \d+ labels, 0\.\d{3} of the estimate", table)
    # round 3 was planned from rounds 1 and 2: round 2's file cannot be left out
    assert main(["estimate", "--labels", str(done[0]), str(done[2])]) == 2
    err = capsys.readouterr().err
    assert "planned with" in err and "(rounds given: 1, 3; missing: 2)" in err, err
    assert main(["estimate", "--labels", str(done[1]), str(done[2])]) == 2
    assert "(rounds given: 2, 3; missing: 1)" in capsys.readouterr().err


def _answer_a_pending_row(
    done: Path, later: Plan, truth: dict[str, int], *, chosen_again: bool
) -> str:
    """Answer a pending row of ``done`` (a late label) that ``later`` chose again or did not."""
    rows = list(csv.reader(done.open()))
    chosen = set(later.ids.tolist())
    late = next(r for r in rows[1:] if r[-1] == "" and (r[0] in chosen) == chosen_again)
    late[-1] = str(truth[late[0]])
    with open(done, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return late[0]


def test_a_label_added_to_an_earlier_round_later_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _overconfident_pool(tmp_path, 20_000, seed=3)
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    one, one_done, two = tmp_path / "r1.csv", tmp_path / "r1-done.csv", tmp_path / "r2.csv"
    assert main([*base, "--budget", "60", "--out", str(one)]) == 0
    _fill(one, one_done, truth, keep_pending=10)
    assert main([*base, "--budget", "60", "--labelled", str(one_done), "--out", str(two)]) == 0
    two_done = tmp_path / "r2-done.csv"
    _fill(two, two_done, truth)
    kept = one_done.read_bytes()
    _answer_a_pending_row(one_done, read_plan(two), truth, chosen_again=False)
    assert main(["estimate", "--labels", str(one_done), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert "planned with" in err and "a label added to an earlier round after" in err, err
    # and a label cleared: the message said only "pass exactly the files it was planned from"
    rows = kept.decode().splitlines()
    cleared = next(i for i, r in enumerate(rows) if i and not r.endswith(","))
    rows[cleared] = rows[cleared][: rows[cleared].rfind(",") + 1]
    one_done.write_text("\n".join(rows) + "\n")
    assert main(["estimate", "--labels", str(one_done), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert "(a label cleared from an earlier round since it was planned, or a round left" in err


def test_a_label_added_before_a_middle_round_counts_that_round_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 2 planned, then a pending row of round 1 answered, then round 3 from all labels.

    Round 2's sum over the rest of the pool no longer matches the files (its known set changed), so
    it is counted exactly and the estimate says so; round 3, the latest, was planned from them all.
    """
    pool, truth, _ = _overconfident_pool(tmp_path, 20_000, seed=5)
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    paths = {r: (tmp_path / f"r{r}.csv", tmp_path / f"r{r}-done.csv") for r in (1, 2, 3)}
    assert main([*base, "--budget", "60", "--out", str(paths[1][0])]) == 0
    _fill(paths[1][0], paths[1][1], truth, keep_pending=10)
    assert (
        main([*base, "--budget", "60", "--labelled", str(paths[1][1]), "--out", str(paths[2][0])])
        == 0
    )
    _fill(paths[2][0], paths[2][1], truth)
    _answer_a_pending_row(paths[1][1], read_plan(paths[2][0]), truth, chosen_again=False)
    done = [str(paths[1][1]), str(paths[2][1])]
    assert main([*base, "--budget", "200", "--labelled", *done, "--out", str(paths[3][0])]) == 0
    _fill(paths[3][0], paths[3][1], truth)
    result = _estimate_json(capsys, "--labels", *done, str(paths[3][1]))
    warnings = result["warnings"]
    assert isinstance(warnings, list)
    assert any("r2-done.csv" in w and "counted exactly" in w for w in warnings), warnings
    sample = rounds_sample([(p, read_plan(p)) for p in [*done, str(paths[3][1])]]).sample
    n1 = int(read_plan(done[0]).labelled.sum()) + int(read_plan(done[1]).labelled.sum())
    np.testing.assert_array_equal(sample.v[:n1], 1.0)  # rounds 1 and 2 exact
    np.testing.assert_array_equal(sample.fpc[:n1], 0.0)


def test_rounds_after_the_first_estimate_the_rest_by_their_expected_labels() -> None:
    """Rounds 1, 2, 3: round 1 exact, rounds 2 and 3 mixed by their expected labels."""
    pool, label = _pool(6000, seed=6)
    truth = dict(zip(pool.ids.tolist(), label.tolist(), strict=True))
    done = [("r1", _answer(make_plan(pool, alpha=0.5, budget=30, seed=1, defensive=0.5), truth))]
    for r, budget in ((2, 40), (3, 120)):
        nxt = make_plan(pool, alpha=0.5, budget=budget, seed=r, known=known_labels(done))
        done.append((f"r{r}", _answer(nxt, truth)))
    rounds = rounds_sample(done[::-1])  # any order
    sample = rounds.sample
    assert (rounds.path, rounds.warnings) == ("r3", [])
    w2, w3 = (float(p.meta["expected_labels"]) for _, p in done[1:])
    w2, w3 = w2 / (w2 + w3), w3 / (w2 + w3)
    sizes = [len(p) for _, p in done]
    v1, v2, v3 = np.split(sample.v, np.cumsum(sizes)[:2])
    fpc2 = np.split(sample.fpc, np.cumsum(sizes)[:2])[1]
    p2, p3 = done[1][1].prob, done[2][1].prob
    np.testing.assert_array_equal(v1, 1.0)
    np.testing.assert_allclose(v2, w2 / p2 + w3)
    np.testing.assert_allclose(v3, w3 / p3)
    np.testing.assert_allclose(fpc2 * v2**2, (1 - p2) * (w2 / p2) ** 2)
    with pytest.raises(InputFileError, match="two plans of the same round 2"):
        rounds_sample([*done, ("again", done[1][1])])


def _pool(n: int, seed: int) -> tuple[Pool, np.ndarray]:
    score, label = calibrated_pool(n, 0.05, np.random.default_rng(seed), overconfidence=10.0)
    ids = np.array([f"p{i}" for i in range(n)], dtype=np.str_)
    return Pool(ids, score, (score >= 0.5).astype(np.int8), False), label


def _answer(plan: Plan, truth: dict[str, int]) -> Plan:
    label = np.array([truth[i] for i in plan.ids.tolist()], dtype=np.int8)
    return Plan(
        plan.design,
        plan.ids,
        plan.score,
        plan.pred,
        plan.prob,
        plan.weight,
        plan.draws,
        label,
        np.ones(len(plan), dtype=np.bool_),
        plan.meta,
    )


def test_two_rounds_are_unbiased_and_cover() -> None:
    """Round 2's pi depend on round 1's labels; the estimate stays unbiased (fixed seeds)."""
    pool, label = _pool(6000, seed=4)
    truth = dict(zip(pool.ids.tolist(), label.tolist(), strict=True))
    true_recall = falpha_exact(pool.pred, label, 0.0)
    values, covered, reps = [], 0, 150
    for seed in range(reps):
        r1 = _answer(make_plan(pool, alpha=0.0, budget=60, seed=seed, defensive=0.5), truth)
        known = known_labels([("r1", r1)])
        r2 = make_plan(pool, alpha=0.0, budget=140, seed=1000 + seed, known=known)
        r2 = _answer(r2, truth)
        rounds = rounds_sample([("r1", r1), ("r2", r2)])
        sample, plan, path = rounds.sample, rounds.latest, rounds.path
        est = estimate_plan(plan, path, None, 0.95, sample).measures.f
        values.append(est.value)
        covered += est.lower <= true_recall <= est.upper
    arr = np.asarray(values)
    se = arr.std(ddof=1) / math.sqrt(reps)
    assert abs(arr.mean() - true_recall) < 3.5 * se + 0.01, (arr.mean(), true_recall)
    assert covered / reps >= 0.88, covered / reps


def test_rounds_refuse_with_replacement_and_duplicates(tmp_path: Path) -> None:
    pool, label = _pool(2000, seed=2)
    truth = dict(zip(pool.ids.tolist(), label.tolist(), strict=True))
    r1 = _answer(make_plan(pool, alpha=0.5, budget=50, design="with-replacement"), truth)
    with pytest.raises(InputFileError, match="rounds need Poisson plans"):
        known_labels([("r1.csv", r1)])
    p1 = _answer(make_plan(pool, alpha=0.5, budget=50), truth)
    with pytest.raises(InputFileError, match="labelled in two of the given plans"):
        known_labels([("a.csv", p1), ("b.csv", p1)])
    known = known_labels([("a.csv", p1)])
    with pytest.raises(InputFileError, match="needs the poisson design"):
        make_plan(pool, alpha=0.5, budget=50, design="with-replacement", known=known)
    with pytest.raises(InputFileError, match="two plans of the same round"):
        rounds_sample([("a.csv", p1), ("b.csv", p1)])


def test_a_pool_of_a_plans_rows_draws_its_own_uniforms() -> None:
    """A plan's rows taken as the pool of a new plan with the same seed: its items were chosen
    by u < pi_1, so with the same uniforms each was chosen again with probability
    min(1, pi / pi_1) instead of pi (about 3x the budget, a biased estimate)."""
    pool, _ = _pool(20_000, seed=9)
    first = make_plan(pool, alpha=0.5, budget=2000)
    sub = Pool(first.ids, first.score, first.pred, pred_given=True)
    again = make_plan(sub, alpha=0.5, budget=100)
    expected = float(again.meta["expected_labels"])
    assert abs(len(again) - expected) < 4 * math.sqrt(expected), (len(again), expected)
    assert again.meta["salt"] != first.meta["salt"]


def test_each_round_draws_its_own_uniforms_whatever_the_seed() -> None:
    """Rounds planned with the same --seed: round 2 draws as many items as its pi say.

    With round 1's uniforms, an item round 1 skipped (u >= pi_1) would be drawn with probability
    (pi_2 - pi_1) / (1 - pi_1) instead of pi_2: about a third of the labels, and a biased
    estimate.
    """
    pool, label = _pool(20_000, seed=7)
    truth = dict(zip(pool.ids.tolist(), label.tolist(), strict=True))
    r1 = _answer(make_plan(pool, alpha=0.5, budget=2000, defensive=1.0), truth)  # uniform
    r2 = make_plan(pool, alpha=0.5, budget=2000, known=known_labels([("r1", r1)]))
    pool_salt = f"plan:0:pool:{ids_digest(pool.ids)[:16]}"
    assert (r1.meta["salt"], r2.meta["salt"]) == (pool_salt, f"{pool_salt}:round:2")
    expected = float(r2.meta["expected_labels"])
    sd = math.sqrt(expected)  # of a Poisson-sampling count: variance sum pi (1 - pi) <= mean
    assert abs(len(r2) - expected) < 4 * sd, (len(r2), expected)


def test_rounds_need_each_plans_sidecar_and_one_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, truth, _ = _overconfident_pool(tmp_path, 5000, seed=8)
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    one, one_done, two = tmp_path / "r1.csv", tmp_path / "r1-done.csv", tmp_path / "r2.csv"
    assert main([*base, "--budget", "60", "--out", str(one)]) == 0
    _fill(one, one_done, truth)
    # saved under a new name without its sidecar: refused, naming the sidecar it needs
    bare = tmp_path / "saved.csv"
    bare.write_text(one_done.read_text())
    assert main([*base, "--budget", "60", "--labelled", str(bare), "--out", str(two)]) == 2
    err = capsys.readouterr().err
    assert f"{bare}: no sidecar {tmp_path / 'saved.meta.json'} beside it" in err, err
    assert not two.exists()
    # another --threshold than round 1's: refused (the rounds would mix two predictions)
    argv = [*base, "--budget", "60", "--labelled", str(one_done), "--threshold", "0.3"]
    assert main([*argv, "--out", str(two)]) == 2
    err = capsys.readouterr().err
    assert "the earlier rounds were planned with threshold 0.5, this one with 0.3" in err, err
    assert main([*base, "--budget", "60", "--labelled", str(one_done), "--out", str(two)]) == 0
    two_done = tmp_path / "r2-done.csv"
    _fill(two, two_done, truth)
    assert main(["estimate", "--labels", str(bare), str(two_done)]) == 2
    assert "saved.csv: no sidecar" in capsys.readouterr().err
    other = tmp_path / "t.csv"  # a round 1 of the same pool at another threshold
    assert main([*base, "--budget", "60", "--threshold", "0.3", "--out", str(other)]) == 0
    assert main(["estimate", "--labels", str(other), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert "planned with threshold 0.3 and 0.5; every round of an audit needs" in err, err


def test_a_late_label_of_an_item_chosen_again_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 2 may choose an item pending in round 1; its late label there must be cleared."""
    pool, truth, _ = _overconfident_pool(tmp_path, 2000, seed=9)
    base = ["plan", "--pool", str(pool), "--alpha", "0.5"]
    one, one_done, two = tmp_path / "r1.csv", tmp_path / "r1-done.csv", tmp_path / "r2.csv"
    assert main([*base, "--budget", "100", "--defensive", "0.5", "--out", str(one)]) == 0
    _fill(one, one_done, truth, keep_pending=60)
    assert main([*base, "--budget", "600", "--labelled", str(one_done), "--out", str(two)]) == 0
    two_done = tmp_path / "r2-done.csv"
    _fill(two, two_done, truth)
    late = _answer_a_pending_row(one_done, read_plan(two), truth, chosen_again=True)
    assert main(["estimate", "--labels", str(one_done), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert f"clear the late label of item '{late}': this round chose it again" in err, err


def test_pending_rows_are_a_second_phase_not_left_out() -> None:
    """Every predicted positive at pi = 1, two of four labelled: they were taken as all of them
    (precision a point interval, [0.5, 0.5]); they stand for the pending two now."""
    score = np.array([0.9, 0.8, 0.7, 0.95, 0.1, 0.2, 0.05, 0.3])
    ids = np.array(list("abcdefgh"), dtype=np.str_)
    pool = Pool(ids, score, (score >= 0.5).astype(np.int8), False)
    plan = make_plan(pool, alpha=0.5, budget=8, seed=0)
    assert (plan.prob[plan.pred == 1] == 1.0).all()
    answered = {"a": 1, "b": 0, "e": 0, "f": 1}
    done = np.array([i in answered for i in plan.ids.tolist()])
    label = np.array([answered.get(i, 0) for i in plan.ids.tolist()], dtype=np.int8)
    labelled = replace(plan, label=label, labelled=done)
    precision = estimate_plan(labelled, "plan.csv", None, 0.95).measures.precision
    assert precision.value == 0.5 and precision.lower < 0.2 and precision.upper > 0.8
    whole = replace(labelled, labelled=np.ones(len(plan), np.bool_))  # nothing pending
    assert estimate_plan(whole, "plan.csv", None, 0.95).measures.precision.se == 0.0


def test_a_latest_round_without_any_label_is_refused() -> None:
    pool, label = _pool(2000, seed=5)
    truth = dict(zip(pool.ids.tolist(), label.tolist(), strict=True))
    r1 = _answer(make_plan(pool, alpha=0.5, budget=40, seed=1, defensive=0.5), truth)
    r2 = make_plan(pool, alpha=0.5, budget=60, seed=2, known=known_labels([("r1.csv", r1)]))
    with pytest.raises(InputFileError, match=r"r2\.csv: round 2 has no label yet"):
        rounds_sample([("r1.csv", r1), ("r2.csv", r2)])


def test_pending_counts_each_item_once_over_the_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An item pending in round 1 and labelled in round 2 is not pending (it was counted)."""
    pool, truth, _ = _overconfident_pool(tmp_path, 5_000, seed=3)
    one_done, two, two_done = _two_rounds(tmp_path, pool, truth, (60, 300), pending=20)
    _fill(two, two_done, truth, keep_pending=5)
    first, second = read_plan(one_done), read_plan(two_done)
    pending = set(first.ids[~first.labelled]) | set(second.ids[~second.labelled])
    pending -= set(second.ids[second.labelled])
    again = set(first.ids[~first.labelled]) & set(second.ids[second.labelled])
    assert again  # the case: round 2 drew and labelled items round 1 left pending
    result = _estimate_json(capsys, "--labels", str(one_done), str(two_done))
    assert result["pending"] == len(pending) < 25


def _edit_sidecar(plan: Path, **meta: object) -> None:
    """Set ``meta`` keys of a plan's sidecar, as a tool that rewrites the JSON would."""
    side = sidecar_path(plan)
    doc = json.loads(side.read_text())
    doc["meta"].update(meta)
    side.write_text(json.dumps(doc))


def test_round_counts_written_as_floats_are_the_same_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``"known_labels": 43.0`` or ``"round": "2.0"`` were refused (or a single plan with
    ``"known_labels": 0.0`` taken for a later round), while ``pool_size`` as 3000.0 was read."""
    pool, truth, _ = _overconfident_pool(tmp_path, 3000, seed=12)
    one_done, two, two_done = _two_rounds(tmp_path, pool, truth, (60, 90))
    _fill(two, two_done, truth)
    want = _estimate_json(capsys, "--labels", str(one_done), str(two_done))
    known = float(read_plan(two_done).meta["known_labels"])
    _edit_sidecar(two_done, known_labels=known, round="2.0")
    assert _estimate_json(capsys, "--labels", str(one_done), str(two_done)) == want
    single = _estimate_json(capsys, "--labels", str(one_done))
    _edit_sidecar(one_done, known_labels=0.0, round=1.0)
    assert _estimate_json(capsys, "--labels", str(one_done)) == single
    assert single["rounds"] is None
    _edit_sidecar(two_done, known_labels=known + 0.5)
    assert main(["estimate", "--labels", str(one_done), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert f"{two_done}: plan meta 'known_labels={known + 0.5!r}': expected a whole number" in err


def test_a_next_round_needs_every_earlier_round_of_its_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plan --labelled r2.csv`` without r1.csv was accepted, and round 3 chose items r1 had
    labelled; refused now as ``estimate`` refuses a missing round. A label added to round 1
    since round 2 was planned is fine: round 3 is planned from every label."""
    pool, truth, _ = _overconfident_pool(tmp_path, 3000, seed=13)
    one_done, two, two_done = _two_rounds(tmp_path, pool, truth, (60, 90), pending=10)
    _fill(two, two_done, truth)
    known = read_plan(two_done).meta["known_labels"]
    three = tmp_path / "r3.csv"
    base = ["plan", "--pool", str(pool), "--alpha", "0.5", "--budget", "90", "--out", str(three)]
    capsys.readouterr()
    assert main([*base, "--labelled", str(two_done)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{two_done}: planned with {known} labelled items of earlier rounds, but the other files "
        "given hold 0; pass exactly the files it was planned from (rounds given: 2; missing: 1)"
    ) in err, err
    assert not three.exists()
    _answer_a_pending_row(one_done, read_plan(two), truth, chosen_again=False)
    assert main([*base, "--labelled", str(one_done), str(two_done)]) == 0
    assert read_plan(three).meta["round"] == "3"


def test_a_round_of_another_audit_with_as_many_labels_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rounds were matched by their number of labels only: another audit's round 1 with as many
    labels passed for round 2's. The sidecar records the digest of the labelled ids a round was
    planned from (``known_ids_sha256``); a sidecar without it keeps the count check."""
    pool, truth, _ = _overconfident_pool(tmp_path, 3000, seed=14)
    one_done, two, two_done = _two_rounds(tmp_path, pool, truth, (60, 90))
    _fill(two, two_done, truth)
    labels = len(read_plan(one_done))
    other, other_done = tmp_path / "o1.csv", tmp_path / "o1-done.csv"
    argv = ["plan", "--pool", str(pool), "--alpha", "0.5", "--budget", "120", "--seed", "1"]
    assert main([*argv, "--out", str(other)]) == 0
    _fill(other, other_done, truth)
    chosen = set(read_plan(two).ids.tolist())  # labelled in o1, they would overlap round 2
    rows = list(csv.reader(other_done.open()))
    for row in [r for r in rows[1:] if r[0] in chosen] + [
        r for r in rows[1:] if r[0] not in chosen
    ][labels:]:
        row[-1] = ""  # as many labels as round 1's, none of round 2's items
    with open(other_done, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    assert int(read_plan(other_done).labelled.sum()) == labels
    capsys.readouterr()
    assert main(["estimate", "--labels", str(other_done), str(two_done)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{two_done}: planned from {labels} labelled items of earlier rounds, and the other "
        "files given hold as many but not the same items (a round of another audit"
    ) in err, err
    assert "pass exactly the files it was planned from" in err
    three = ["plan", "--pool", str(pool), "--alpha", "0.5", "--budget", "90"]
    three += ["--labelled", str(other_done), str(two_done), "--out", str(tmp_path / "r3.csv")]
    assert main(three) == 2
    assert "hold as many but not the same items" in capsys.readouterr().err
    assert main(["estimate", "--labels", str(one_done), str(two_done)]) == 0
    side = sidecar_path(two_done)  # a sidecar of an earlier version: the count alone
    doc = json.loads(side.read_text())
    del doc["meta"]["known_ids_sha256"]
    side.write_text(json.dumps(doc))
    assert main(["estimate", "--labels", str(other_done), str(two_done)]) == 0
