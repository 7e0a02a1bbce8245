"""Pool and plan CSV files: parsing, exact error messages, plan round trip."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from monitor.errors import InputFileError
from monitor.offline.poolfile import (
    Plan,
    ids_digest,
    read_plan,
    read_pool,
    sidecar_path,
    values_digest,
    write_plan,
)


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_read_pool_defaults_pred_from_threshold(tmp_path: Path) -> None:
    path = _write(tmp_path, "pool.csv", "id,score\na,0.1\nb,0.5\nc,0.9\n")
    pool = read_pool(path)
    assert pool.ids.tolist() == ["a", "b", "c"]
    np.testing.assert_array_equal(pool.score, [0.1, 0.5, 0.9])
    np.testing.assert_array_equal(pool.pred, [0, 1, 1])
    assert not pool.pred_given
    assert read_pool(path, threshold=0.8).pred.tolist() == [0, 0, 1]


def test_read_pool_uses_given_pred_and_ignores_extra_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "pool.csv", "score,note,pred,id\n0.9,x,0,a\n0.2,y,1,b\n")
    pool = read_pool(path)
    assert pool.pred_given
    assert pool.ids.tolist() == ["a", "b"]
    assert pool.pred.tolist() == [0, 1]


def test_read_pool_accepts_spreadsheet_csv(tmp_path: Path) -> None:
    # byte-order mark, CRLF, header case and spaces, quoted id with a comma, blank last line
    raw = b'\xef\xbb\xbf ID , Score \r\n"x,1",0.25\r\ny,1\r\n\r\n'
    pool = read_pool(_write(tmp_path, "pool.csv", raw))
    assert pool.ids.tolist() == ["x,1", "y"]
    np.testing.assert_array_equal(pool.score, [0.25, 1.0])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "id,score\na,0.1\nb,1.5\n",
            r"^.*pool\.csv, line 3, column 'score': expected a score in \[0, 1\], got '1\.5'$",
        ),
        (
            "id,score\na,-0.01\n",
            r"line 2, column 'score': expected a score in \[0, 1\], got '-0\.01'",
        ),
        ("id,score\na,nan\n", r"line 2, column 'score': expected a score in \[0, 1\], got 'nan'"),
        ("id,score\na,inf\n", r"line 2, column 'score': expected a score in \[0, 1\], got 'inf'"),
        ("id,score\na,0,5\n", r"line 2: expected 2 fields as in the header, got 3"),
        ("id,score\na,\n", r"line 2, column 'score': expected a score in \[0, 1\], got ''"),
        ("id,score\na,high\n", r"line 2, column 'score': expected a score in \[0, 1\], got 'high'"),
        (
            "id,score\na,0.1\nb,0.2\na,0.3\n",
            r"line 4, column 'id': expected a unique id \(already on line 2\), got 'a'",
        ),
        ("id,score\n,0.3\n", r"line 2, column 'id': expected a non-empty id, got ''"),
        (
            "id,scor\na,0.1\n",
            r"pool\.csv, line 1: missing column 'score' \(expected a header with columns "
            r"id,score\[,pred\], got 'id,scor'\)",
        ),
        ("id,score,id\na,0.1,b\n", r"line 1: duplicate column 'id' in the header"),
        (
            "id;score\na;0,9\n",
            r"got 'id;score'\); the file looks separated by semicolons: save it as comma-separated",
        ),
        (
            b"id,score\ncaf\xe9,0.1\n",
            r"pool\.csv: not UTF-8 text \(byte 12: .*\); save it as \"CSV UTF-8\"",
        ),
        (
            "id,score,pred\na,0.1,0\nb,0.9,yes\n",
            r"line 3, column 'pred': expected a prediction 0 or 1, got 'yes'",
        ),
        ("", r"pool\.csv: empty file \(expected a header line with columns id,score\[,pred\]\)"),
        ("# only a comment\n\n", r"pool\.csv: empty file"),
        ("id,score\n", r"pool\.csv, line 1: no data rows after the header"),
    ],
)
def test_read_pool_errors_name_file_line_column(
    tmp_path: Path, text: str | bytes, match: str
) -> None:
    path = _write(tmp_path, "pool.csv", text)
    with pytest.raises(InputFileError, match=match):
        read_pool(path)


def test_unnamed_empty_columns_of_a_spreadsheet_are_ignored(tmp_path: Path) -> None:
    pool = read_pool(_write(tmp_path, "pool.csv", "id,score,,\na,0.1,,\nb,0.7,,\n"))
    assert pool.ids.tolist() == ["a", "b"] and pool.score.tolist() == [0.1, 0.7]


def test_first_error_in_file_order_wins_across_columns(tmp_path: Path) -> None:
    # the pred error (line 3) comes before the score error (line 4), though score is checked first
    path = _write(tmp_path, "pool.csv", "id,score,pred\na,0.1,0\nb,0.2,2\nc,7,1\n")
    with pytest.raises(InputFileError, match=r"line 3, column 'pred'"):
        read_pool(path)


def test_the_error_counts_the_other_lines_with_a_problem(tmp_path: Path) -> None:
    # score out of range on line 3 (and a bad pred on the same line), then lines 5, 6, 7 (a
    # duplicate id, a bad pred, a bad score): one message, the first problem and where the rest are
    rows = ["a,0.1,0", "b,2,x", "c,0.2,1", "a,0.3,0", "d,0.4,2", "e,-1,0", "f,0.5,1"]
    path = _write(tmp_path, "pool.csv", "id,score,pred\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputFileError) as err:
        read_pool(path)
    assert str(err.value).endswith(
        "line 3, column 'score': expected a score in [0, 1], got '2'"
        " (3 more lines have a problem: 5, 6, 7)"
    )
    # a column filled the wrong way: how many lines, the first five named
    labels = "".join(f"i{k},0.1,0,0.5,2.0,1,{'yes' if k % 2 else 'no'}\n" for k in range(9))
    plan = _write(tmp_path, "plan.csv", _plan_text(labels))
    with pytest.raises(InputFileError) as err:
        read_plan(plan)
    assert str(err.value).endswith("got 'no' (8 more lines have a problem: 5, 6, 7, 8, 9, ...)")
    # one problem: the message as before
    one = _write(tmp_path, "one.csv", "id,score\na,0.1\nb,1.5\n")
    with pytest.raises(InputFileError, match=r"got '1\.5'$"):
        read_pool(one)


def test_line_numbers_count_comments_and_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, "pool.csv", "# exported today\n\nid,score\na,0.1\n\nb,2\n")
    with pytest.raises(InputFileError, match=r"line 6, column 'score'"):
        read_pool(path)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"missing\.csv: cannot read: No such file"):
        read_pool(tmp_path / "missing.csv")
    path = _write(tmp_path, "latin.csv", b"id,score\n\xe9t\xe9,0.5\n")
    with pytest.raises(InputFileError, match=r"latin\.csv: not UTF-8 text \(byte 9"):
        read_pool(path)


def test_long_bad_cells_are_shortened(tmp_path: Path) -> None:
    path = _write(tmp_path, "pool.csv", "id,score\na," + "9" * 100 + "\n")
    with pytest.raises(InputFileError, match=r"got '9{40}\.\.\.'$"):
        read_pool(path)


def _plan(design: str = "poisson") -> Plan:
    prob = np.array([0.5, 0.25, 1.0]) if design == "poisson" else np.array([0.1, 0.2, 0.3])
    weight = 1.0 / prob if design == "poisson" else 1.0 / (10 * prob)
    return Plan(
        design=design,
        ids=np.array(["a", "b,2", "c"]),
        score=np.array([0.1, 0.7, 0.123456789012345]),
        pred=np.array([0, 1, 0], dtype=np.int8),
        prob=prob,
        weight=weight,
        draws=np.array([1, 3, 6], dtype=np.int64),
        label=np.array([0, 1, 0], dtype=np.int8),
        labelled=np.array([False, True, True]),
        meta={"design": design, "alpha": "0.5", "budget": "10", "pool_size": "100"},
    )


@pytest.mark.parametrize("design", ["poisson", "with-replacement"])
def test_plan_round_trip_is_exact(tmp_path: Path, design: str) -> None:
    plan = _plan(design)
    path = tmp_path / "plan.csv"
    write_plan(path, plan)
    back = read_plan(path)
    assert back.design == design
    for name in ("ids", "score", "pred", "prob", "weight", "label", "labelled"):
        np.testing.assert_array_equal(getattr(back, name), getattr(plan, name), err_msg=name)
    if design == "with-replacement":
        np.testing.assert_array_equal(back.draws, plan.draws)
    rows = {
        "planned_rows": str(len(plan)),
        "planned_ids_sha256": ids_digest(plan.ids),
        "planned_values_sha256": values_digest(plan.ids, plan.prob, plan.draws),
    }
    assert dict(back.meta) == {"format": "2", "plan": "plan.csv", **plan.meta, **rows}
    text = path.read_text()
    header = text.splitlines()[0]  # a plain CSV: the header first, no comment line
    assert "#" not in text
    column = "pi" if design == "poisson" else "q"
    assert header == f"id,score,pred,{column},weight,draws,label"
    assert "\na,0.1,0," in text and text.rstrip("\n").splitlines()[-1].startswith("c,")


def test_rows_deleted_added_or_edited_after_planning_are_refused(tmp_path: Path) -> None:
    """A deleted row vanished from the estimate and an added one counted with a weight never
    drawn; the sidecar records which rows were planned (in any order: sorting is fine)."""
    path = tmp_path / "plan.csv"
    write_plan(path, _plan())
    header, *rows = path.read_text().splitlines()
    edits = {
        "held 2 rows": [header, *rows[1:]],
        "held 4 rows": [header, *rows, rows[0].replace("a,", "z,", 1)],
        "other ids": [header, rows[0].replace("a,", "A,", 1), *rows[1:]],
    }
    for why, lines in edits.items():
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(InputFileError, match=r"plan\.csv: holds ") as err:
            read_plan(path)
        assert ("holds 2 rows, but 3" in str(err.value)) == (why == "held 2 rows")
        assert "may belong to" not in str(err.value)  # its own sidecar
    path.write_text("\n".join([header, *reversed(rows)]) + "\n")
    assert sorted(read_plan(path).ids.tolist()) == sorted(_plan().ids.tolist())


def test_plan_survives_a_spreadsheet(tmp_path: Path) -> None:
    path = tmp_path / "plan.csv"
    write_plan(path, _plan())
    # what a spreadsheet writes back: BOM, CRLF, padded comment rows, labels typed in
    lines = path.read_text().splitlines()
    padded = [line + ",,,,,," if line.startswith("#") else line for line in lines]
    assert padded[-3].startswith("a,") and padded[-3].endswith(",")  # row a: pending
    padded[-3] += "1"
    raw = ("\r\n".join(padded) + "\r\n").encode("utf-8-sig")
    path.write_bytes(raw)  # saved in place: the sidecar plan.meta.json still belongs to it
    back = read_plan(path)
    assert back.meta["alpha"] == "0.5"
    assert back.labelled.tolist() == [True, True, True]
    assert back.label.tolist() == [1, 1, 0]
    # and the rows of empty cells some spreadsheets add at the end
    path.write_bytes(raw + b",,,,,,\r\n,,,,,,\r\n")
    assert read_plan(path).ids.tolist() == back.ids.tolist()


def _plan_text(rows: str, head: str = "# design=poisson\n# budget=4\n") -> str:
    return head + "id,score,pred,pi,weight,draws,label\n" + rows


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            "a,0.1,0,0.5,2.0,1,yes\n",
            r"line 4, column 'label': "
            r"expected a label 0 or 1 \(or empty while pending\), got 'yes'",
        ),
        ("a,0.1,0,0.5,2.0,1,2\n", r"line 4, column 'label': expected a label 0 or 1"),
        (
            "a,0.1,0,0,2.0,1,1\n",
            r"line 4, column 'pi': expected a probability in \(0, 1\], got '0'",
        ),
        (
            "a,0.1,0,1.2,2.0,1,1\n",
            r"line 4, column 'pi': expected a probability in \(0, 1\], got '1\.2'",
        ),
        (
            "a,0.1,0,0.5,-2,1,1\n",
            r"line 4, column 'weight': expected a positive finite weight, got '-2'",
        ),
        (
            "a,0.1,0,0.5,3.0,1,1\n",
            r"line 4, column 'weight': expected 1/pi = 2\.0 \(from column 'pi'\), got '3\.0'",
        ),
        ("a,0.1,0,0.5,2.0,0,1\n", r"line 4, column 'draws': expected a positive whole number"),
        ("a,0.1,0,0.5,2.0,1.5,1\n", r"line 4, column 'draws': expected a positive whole number"),
        (
            "a,0.1,-1,0.5,2.0,1,1\n",
            r"line 4, column 'pred': expected a prediction 0 or 1, got '-1'",
        ),
        ("a,0.1,0,0.5,2.0,1,1\na,0.2,0,0.5,2.0,1,\n", r"line 5, column 'id': expected a unique id"),
    ],
)
def test_read_plan_errors(tmp_path: Path, rows: str, match: str) -> None:
    path = _write(tmp_path, "plan.csv", _plan_text(rows))
    with pytest.raises(InputFileError, match=match):
        read_plan(path)


def test_a_pred_edited_against_the_plans_threshold_is_refused(tmp_path: Path) -> None:
    head = "# design=poisson\n# budget=4\n# threshold=0.5\n"
    rows = "a,0.5,1,0.5,2.0,1,1\nb,2e-06,1,0.5,2.0,1,1\n"
    expected = r"line 6, column 'pred': expected score >= 0\.5 \(the plan's threshold\) as pred"
    with pytest.raises(InputFileError, match=expected + r", got '1'$"):
        read_plan(_write(tmp_path, "plan.csv", _plan_text(rows, head)))
    # a pool with its own pred column: the plan's pred is the pool's, anything goes
    read_plan(_write(tmp_path, "p.csv", _plan_text(rows, head.replace("0.5", "pred column"))))


def test_plan_with_replacement_weight_check_uses_budget(tmp_path: Path) -> None:
    head = "# design=with-replacement\n# budget=4\n"
    text = head + "id,score,pred,q,weight,draws,label\na,0.1,0,0.5,0.6,2,1\n"
    with pytest.raises(InputFileError, match=r"expected 1/\(4 q\) = 0\.5 \(from column 'q'\)"):
        read_plan(_write(tmp_path, "plan.csv", text))


def test_plan_design_must_match_columns(tmp_path: Path) -> None:
    text = "# design=with-replacement\nid,score,pred,pi,weight,draws,label\na,0.1,0,0.5,2,1,\n"
    with pytest.raises(InputFileError, match=r"line 2: the header says design=with-replacement"):
        read_plan(_write(tmp_path, "a.csv", text))
    text = "id,score,pred,pi,q,weight,label\na,0.1,0,0.5,0.5,2,\n"
    with pytest.raises(InputFileError, match=r"exactly one of the columns 'pi'.*got both"):
        read_plan(_write(tmp_path, "b.csv", text))
    text = "# design=stratified\nid,score,pred,pi,weight,label\na,0.1,0,0.5,2,\n"
    with pytest.raises(InputFileError, match=r"plan meta 'design=stratified': expected one of"):
        read_plan(_write(tmp_path, "c.csv", text))
    text = "id,score,pred,pi,label\na,0.1,0,0.5,\n"
    with pytest.raises(InputFileError, match=r"line 1: missing column 'weight'"):
        read_plan(_write(tmp_path, "d.csv", text))


def test_empty_labels_are_pending_not_errors(tmp_path: Path) -> None:
    path = _write(tmp_path, "plan.csv", _plan_text("a,0.1,0,0.5,2,1,\nb,0.9,1,0.5,2,1, 1 \n"))
    plan = read_plan(path)
    assert plan.labelled.tolist() == [False, True]
    assert plan.label.tolist() == [0, 1]
    assert plan.draws.tolist() == [1, 1]


def test_labels_as_spreadsheets_and_data_frames_write_them(tmp_path: Path) -> None:
    """A checkbox column (TRUE/FALSE), a boolean one (True/False), and R's or pandas' missing
    value (NA, NaN) for a row still pending were refused."""
    rows = "".join(
        f"r{i},0.7,True,0.5,2.0,1,{label}\n"
        for i, label in enumerate(["TRUE", "FALSE", "True", "false", "NA", "NaN", "1.0", ""])
    )
    plan = read_plan(_write(tmp_path, "plan.csv", _plan_text(rows)))
    assert plan.label[plan.labelled].tolist() == [1, 0, 1, 0, 1]
    assert plan.labelled.tolist() == [True] * 4 + [False, False, True, False]
    assert plan.pred.tolist() == [1] * 8


@pytest.mark.parametrize(
    ("fmt", "why"),
    [
        (
            3,
            "written by a later release of monitor plan (this one reads format 2); "
            "use that release",
        ),
        ("2", "expected 2, as monitor plan writes"),
        (1, "expected 2, as monitor plan writes"),
    ],
)
def test_a_sidecar_of_another_format_is_refused(tmp_path: Path, fmt: object, why: str) -> None:
    """A plan of a later release (or a hand-edited format) was read as if it were this one's."""
    path = tmp_path / "plan.csv"
    write_plan(path, _plan())
    doc = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    sidecar_path(path).write_text(json.dumps({**doc, "format": fmt}), encoding="utf-8")
    with pytest.raises(InputFileError) as err:
        read_plan(path)
    assert str(err.value) == f'{sidecar_path(path)}: "format": {json.dumps(fmt)}: {why}'


def test_a_sidecar_of_another_plan_is_named(tmp_path: Path) -> None:
    """A sidecar copied over from another plan disagrees with the rows: the message says it
    may belong to that plan, named in the sidecar, not only that rows were edited."""
    path, other = tmp_path / "r1.csv", tmp_path / "other.csv"
    write_plan(path, _plan())
    more = _plan()
    write_plan(other, replace(more, ids=np.array(["x", "y", "z"])))
    shutil.copyfile(sidecar_path(other), sidecar_path(path))
    with pytest.raises(InputFileError) as err:
        read_plan(path)
    assert str(err.value).startswith(
        f"{path}: holds other ids than those planned (an edited id, or a row replaced); its "
        f"sidecar {sidecar_path(path)} was written for the plan 'other.csv' and may belong to "
        "that plan (put this plan's own sidecar beside it); else restore the plan's rows"
    )
    two = slice(0, 2)  # another plan of two rows
    fewer = replace(
        more,
        ids=np.array(["x", "y"]),
        score=more.score[two],
        pred=more.pred[two],
        prob=more.prob[two],
        weight=more.weight[two],
        draws=more.draws[two],
        label=more.label[two],
        labelled=more.labelled[two],
    )
    write_plan(other, fewer)
    shutil.copyfile(sidecar_path(other), sidecar_path(path))
    with pytest.raises(InputFileError, match="holds 3 rows, but 2 were planned; its sidecar"):
        read_plan(path)


def _edit_cells(path: Path, edit: dict[str, dict[str, str]]) -> None:
    """Set cells of a plan file: ``{row id: {column: text}}``."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row.update(edit.get(row["id"], {}))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_draws_must_sum_to_the_budget_of_a_with_replacement_plan(tmp_path: Path) -> None:
    """A row's draws edited (218 draws for a budget of 200) changed the estimate silently."""
    path = tmp_path / "plan.csv"
    write_plan(path, _plan("with-replacement"))  # draws 1 + 3 + 6 = budget 10
    _edit_cells(path, {"c": {"draws": "7"}})
    with pytest.raises(InputFileError) as err:
        read_plan(path)
    assert str(err.value) == (
        f"{path}: its draws sum to 11, but the plan drew 10 (the budget in its sidecar); restore "
        "the draws as monitor plan wrote them (an item drawn twice is labelled once: its label "
        "counts for each draw)"
    )
    _edit_cells(path, {"b,2": {"draws": "4"}, "c": {"draws": "5"}})  # the same sum: the digest
    with pytest.raises(InputFileError, match=r"'q', 'weight' or 'draws' hold other values"):
        read_plan(path)


def test_pi_and_weight_edited_together_are_refused(tmp_path: Path) -> None:
    """The weight is checked against pi row by row: pi and weight edited together passed."""
    path = tmp_path / "plan.csv"
    write_plan(path, _plan())
    _edit_cells(path, {"a": {"pi": "0.25", "weight": "4.0"}})
    with pytest.raises(InputFileError) as err:
        read_plan(path)
    assert str(err.value) == (
        f"{path}: the columns 'pi', 'weight' or 'draws' hold other values than the plan was "
        "written with (its sidecar records a digest of every row's id, pi and draws); restore "
        "them as monitor plan wrote them (only the label column is to be filled in)"
    )
    side = sidecar_path(path)  # a sidecar of an earlier version, without the digest: read
    doc = json.loads(side.read_text())
    del doc["meta"]["planned_values_sha256"]
    side.write_text(json.dumps(doc))
    assert read_plan(path).prob[0] == 0.25


@pytest.mark.parametrize("digits", [15, 10, 17, 6, 4])
def test_numbers_rounded_by_a_spreadsheet_keep_the_plans_digest(
    tmp_path: Path, digits: int
) -> None:
    """Excel saves 15 significant digits, LibreOffice what the cell shows; 1.0 may come back
    as 1: the digest is of the values, not of their text. Down to the digest's 4 digits (the
    weight check refused 6: its tolerance was 1e-6)."""
    plan = _plan()
    prob = np.array([1.0 / 3.0, 0.123456789012345678, 1.0])
    path = tmp_path / "plan.csv"
    write_plan(path, replace(plan, prob=prob, weight=1.0 / prob))
    _edit_cells(
        path,
        {
            i: {"pi": f"{p:.{digits}g}", "weight": f"{1.0 / p:.{digits}g}"}
            for i, p in zip(plan.ids.tolist(), prob.tolist(), strict=True)
        },
    )
    text = path.read_text()
    assert f"\na,0.1,0,{1.0 / 3.0:.{digits}g}," in text and ",0,1,1,6," in text  # pi 1 as 1
    np.testing.assert_allclose(read_plan(path).prob, prob, rtol=max(1e-9, 10.0 ** (1 - digits)))
