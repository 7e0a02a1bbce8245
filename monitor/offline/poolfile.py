"""CSV files of the offline audit: the pool to plan from, and the plan the auditors fill in.

A **pool** file has a header line and the columns ``id,score`` plus optionally ``pred`` (0/1;
default ``score >= threshold``); other columns are ignored. A **plan** file (written by
``monitor plan``) is a plain CSV: the header ``id,score,pred,pi,weight,draws,label`` (``q``
instead of ``pi`` for the with-replacement design), then one row per item, nothing else, so that
a spreadsheet and ``pandas.read_csv`` open it with no options. The auditors fill in ``label``
with 0 or 1; an empty label is pending, not an error.

What the estimate needs beyond the rows (design, alpha, budget, seed, pool size, predicted
positives of the pool, round, ...) is in the plan's **sidecar** ``PLAN.meta.json`` beside
``PLAN.csv`` (:func:`sidecar_path`): ``{"format": 2, "plan": "PLAN.csv", "meta": {key: value}}``.
Plans of format 1 kept these as ``# key=value`` comment lines above the header; they are still
read (the sidecar, when both exist, wins).

Every problem is raised as ``InputFileError`` naming the file, the line (1-based, physical,
comment lines included), the column and what was expected: the first problem in file order,
and, when other lines have problems too, how many and the line numbers of the next few (a column
filled the wrong way is then fixed in one pass, not one run per line). Files are read as UTF-8
(a byte-order mark, as spreadsheets write, is accepted); comment lines may carry trailing empty
cells (a spreadsheet round trip adds them).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.errors import InputFileError

PLAN_FORMAT = 2
SIDECAR_SUFFIX = ".meta.json"
DESIGNS = ("poisson", "with-replacement")
_MAX_SHOWN = 40  # characters of a bad cell quoted in an error message
_MAX_LINES_SHOWN = 5  # line numbers of further problems named in an error message
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Pool:
    """The unlabelled pool: one row per item, in file order."""

    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    pred_given: bool

    def __len__(self) -> int:
        return int(self.score.shape[0])


@dataclass(frozen=True)
class Plan:
    """A plan: the selected items with their selection probability, and the labels so far.

    ``prob`` is the inclusion probability pi (design ``poisson``) or the per-draw probability q
    (design ``with-replacement``, sums to 1 over the pool). ``labelled`` marks rows whose label
    is filled in; ``label`` is 0 on pending rows. ``meta`` holds the sidecar's ``meta`` (or a
    format-1 plan's ``# key=value`` lines); empty when the plan has neither.
    """

    design: str
    ids: npt.NDArray[np.str_]
    score: npt.NDArray[np.float64]
    pred: npt.NDArray[np.int8]
    prob: npt.NDArray[np.float64]
    weight: npt.NDArray[np.float64]
    draws: npt.NDArray[np.int64]
    label: npt.NDArray[np.int8]
    labelled: npt.NDArray[np.bool_]
    meta: Mapping[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.score.shape[0])


def cell_error(
    path: str | os.PathLike[str], line: int, column: str, expected: str, got: str
) -> str:
    """The message for one bad cell: file, line, column, what was expected and what was there."""
    shown = got if len(got) <= _MAX_SHOWN else got[:_MAX_SHOWN] + "..."
    return f"{path}, line {line}, column '{column}': expected {expected}, got '{shown}'"


@dataclass
class _Table:
    """The raw cells of a CSV file: header, data rows as columns of strings, line numbers."""

    path: str
    header: list[str]
    header_line: int
    columns: dict[str, list[str]]
    lines: list[int]
    meta: dict[str, str]


def _rows(path: str) -> Iterator[tuple[int, list[str]]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            try:
                for row in reader:
                    yield reader.line_num, row
            except csv.Error as exc:
                msg = f"{path}, line {reader.line_num}: not valid CSV ({exc})"
                raise InputFileError(msg) from exc
    except UnicodeDecodeError as exc:
        msg = (
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as "
            '"CSV UTF-8" (a spreadsheet\'s plain CSV may use another encoding)'
        )
        raise InputFileError(msg) from exc
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}"
        raise InputFileError(msg) from exc


def _read_table(path: str, required: Sequence[str], expected_header: str) -> _Table:
    header: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    meta: dict[str, str] = {}
    width = 0
    for line, row in _rows(path):
        first = row[0].lstrip() if row else ""
        if len(row) == width and header is not None and first and not first.startswith("#"):
            rows.append(row)  # the common case first: a data row of the right width
            lines.append(line)
            continue
        if not any(cell.strip() for cell in row):
            continue  # a blank line, or a row of empty cells (spreadsheets add them)
        if first.startswith("#") and not any(cell.strip() for cell in row[1:]):
            key, sep, value = first.lstrip("#").partition("=")
            if sep and _KEY.fullmatch(key.strip()):
                meta[key.strip()] = value.strip()
            continue
        if header is None:
            header, header_line = [cell.strip().lower() for cell in row], line
            for i, name in enumerate(header):
                if name and name in header[:i]:  # unnamed (empty) columns: spreadsheets add them
                    msg = f"{path}, line {line}: duplicate column '{name}' in the header"
                    raise InputFileError(msg)
            for name in required:
                if name not in header:
                    got = ",".join(header)
                    msg = (
                        f"{path}, line {line}: missing column '{name}' "
                        f"(expected a header with columns {expected_header}, got '{got}')"
                    )
                    if ";" in got and "," not in got:
                        msg += (
                            "; the file looks separated by semicolons: save it as comma-separated"
                        )
                    raise InputFileError(msg)
            width = len(header)
            continue
        if len(row) != width:
            msg = f"{path}, line {line}: expected {width} fields as in the header, got {len(row)}"
            raise InputFileError(msg)
        rows.append(row)
        lines.append(line)
    if header is None:
        msg = f"{path}: empty file (expected a header line with columns {expected_header})"
        raise InputFileError(msg)
    if not lines:
        msg = f"{path}, line {header_line}: no data rows after the header"
        raise InputFileError(msg)
    columns = {
        name: [cell.strip() for cell in cells]
        for name, cells in zip(header, zip(*rows, strict=True), strict=True)
    }
    return _Table(path, header, header_line, columns, lines, meta)


class _Checker:
    """Converts columns and finds the first problem in file order across all checks."""

    def __init__(self, table: _Table) -> None:
        self.table = table
        self.first: tuple[int, int, str] | None = None  # (row, order, message)
        self._order = 0
        self._bad = np.zeros(len(table.lines), dtype=np.bool_)  # rows with any problem

    def flag(self, bad: npt.NDArray[np.bool_], column: str, expected: str) -> None:
        """Record the first row where ``bad`` holds, if it precedes the current first problem."""
        self._order += 1
        hits = np.flatnonzero(bad)
        if hits.size == 0:
            return
        self._bad[hits] = True
        row = int(hits[0])
        if self.first is None or row < self.first[0]:
            got = self.table.columns[column][row]
            msg = cell_error(self.table.path, self.table.lines[row], column, expected, got)
            self.first = (row, self._order, msg)

    def flag_message(self, rows: npt.NDArray[np.intp], msg: str) -> None:
        """Record a problem at ``rows`` (increasing) with a ready message for the first."""
        self._bad[rows] = True
        row = int(rows[0])
        if self.first is None or row < self.first[0]:
            self.first = (row, 0, msg)

    def raise_first(self) -> None:
        """Raise the earliest problem found, if any, saying how many other lines have one."""
        if self.first is None:
            return
        others = np.flatnonzero(self._bad)
        others = others[others != self.first[0]]
        msg = self.first[2]
        if others.size:
            lines = ", ".join(str(self.table.lines[int(r)]) for r in others[:_MAX_LINES_SHOWN])
            more = ", ..." if others.size > _MAX_LINES_SHOWN else ""
            lines_word = "line has" if others.size == 1 else "lines have"
            msg += f" ({others.size} more {lines_word} a problem: {lines}{more})"
        raise InputFileError(msg)

    def numbers(self, column: str, expected: str) -> npt.NDArray[np.float64]:
        """The column as float64; unparsable cells become NaN and are flagged."""
        cells = self.table.columns[column]
        try:
            return np.asarray(cells, dtype=np.float64)
        except ValueError:
            out = np.empty(len(cells), dtype=np.float64)
            bad = np.zeros(len(cells), dtype=np.bool_)
            for i, cell in enumerate(cells):
                try:
                    out[i] = float(cell)
                except ValueError:
                    out[i], bad[i] = math.nan, True
            self.flag(bad, column, expected)
            return out

    def choice(
        self, column: str, allowed: Mapping[str, int], expected: str
    ) -> npt.NDArray[np.int8]:
        """The column mapped through ``allowed`` (cell text -> code); other cells are flagged."""
        cells = np.asarray(self.table.columns[column], dtype=np.str_)
        out = np.full(cells.shape, -1, dtype=np.int8)
        for text, code in allowed.items():
            out[cells == text] = code
        self.flag(out < 0, column, expected)
        return out

    def unique_ids(self) -> npt.NDArray[np.str_]:
        """The ``id`` column; empty and duplicate ids are flagged."""
        ids = np.asarray(self.table.columns["id"], dtype=np.str_)
        self.flag(ids == "", "id", "a non-empty id")
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        dup = np.flatnonzero(first[inverse] != np.arange(ids.size))
        if dup.size:
            row = int(dup[0])
            earlier = self.table.lines[int(first[inverse[row]])]
            msg = cell_error(
                self.table.path,
                self.table.lines[row],
                "id",
                f"a unique id (already on line {earlier})",
                str(ids[row]),
            )
            self.flag_message(dup, msg)
        return ids


# 0/1 as spreadsheets and data-frame libraries write them too: a checkbox (TRUE/FALSE), a
# boolean column (True/False), a number column with empty cells (0.0/1.0)
_BINARY = {
    **dict.fromkeys(("0", "0.0", "false", "False", "FALSE"), 0),
    **dict.fromkeys(("1", "1.0", "true", "True", "TRUE"), 1),
}
# what R and pandas write for a missing value, read as an empty cell (pending)
_MISSING = ("NA", "NaN", "nan")
_SCORE = "a score in [0, 1]"


def _scores(check: _Checker) -> npt.NDArray[np.float64]:
    score = check.numbers("score", _SCORE)
    with np.errstate(invalid="ignore"):
        check.flag(~((score >= 0.0) & (score <= 1.0)), "score", _SCORE)
    return score


def read_pool(path: str | os.PathLike[str], threshold: float = 0.5) -> Pool:
    """Read a pool CSV (``id,score[,pred]``); ``pred`` defaults to ``score >= threshold``."""
    table = _read_table(os.fspath(path), ("id", "score"), "id,score[,pred]")
    check = _Checker(table)
    ids = check.unique_ids()
    score = _scores(check)
    given = "pred" in table.columns
    pred = check.choice("pred", _BINARY, "a prediction 0 or 1") if given else None
    check.raise_first()
    if pred is None:
        pred = (score >= threshold).astype(np.int8)
    return Pool(ids, score, pred, given)


def read_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a (partly) labelled plan written by ``write_plan``; empty labels are pending."""
    spath = os.fspath(path)
    table = _read_table(spath, ("id", "score", "pred", "weight", "label"), PLAN_COLUMNS_DOC)
    table.meta.update(read_sidecar(sidecar_path(spath)))
    design = _plan_design(table)
    check = _Checker(table)
    ids = check.unique_ids()
    score = _scores(check)
    pred = check.choice("pred", _BINARY, "a prediction 0 or 1")
    threshold = _json_value(table.meta.get("threshold", "pred column"))
    if isinstance(threshold, float):  # the plan's pred came from its threshold: not edited since
        expected = f"score >= {threshold!r} (the plan's threshold) as pred"
        check.flag((pred >= 0) & (pred != (score >= threshold)), "pred", expected)
    pcol = "pi" if design == "poisson" else "q"
    pexp = "a probability in (0, 1]"
    prob = check.numbers(pcol, pexp)
    with np.errstate(invalid="ignore"):
        check.flag(~((prob > 0.0) & (prob <= 1.0)), pcol, pexp)
    wexp = "a positive finite weight"
    weight = check.numbers("weight", wexp)
    with np.errstate(invalid="ignore"):
        check.flag(~(np.isfinite(weight) & (weight > 0.0)), "weight", wexp)
    if "draws" in table.columns:
        dexp = "a positive whole number of draws"
        draws_f = check.numbers("draws", dexp)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(draws_f) & (draws_f >= 1.0) & (draws_f == np.round(draws_f))
        check.flag(~ok, "draws", dexp)
        draws = np.where(ok, draws_f, 1.0).astype(np.int64)
    else:
        draws = np.ones(len(table.lines), dtype=np.int64)
    _check_weights(check, design, prob, weight, table.meta.get("budget"))
    _check_rows(spath, ids, table.meta)
    label_code = check.choice(
        "label",
        {**_BINARY, "": 2, **dict.fromkeys(_MISSING, 2)},
        "a label 0 or 1 (or empty while pending)",
    )
    check.raise_first()
    _check_values(table, design, ids, prob, draws)
    labelled = label_code != 2
    label = np.where(labelled, label_code, 0).astype(np.int8)
    return Plan(design, ids, score, pred, prob, weight, draws, label, labelled, table.meta)


def label_count(path: str | os.PathLike[str]) -> int:
    """How many labels the plan file at ``path`` holds (0: no such file, or no label column).

    Lenient on purpose, for ``monitor plan``'s ``--out``: a file that does not read as a plan
    (a bad row, another encoding) still counts the labels of its readable rows.
    """
    if not Path(path).is_file():
        return 0
    column = -1
    count = 0
    try:
        for _, row in _rows(os.fspath(path)):
            first = row[0].lstrip() if row else ""
            if not any(cell.strip() for cell in row) or first.startswith("#"):
                continue
            if column < 0:
                header = [cell.strip().lower() for cell in row]
                if "label" not in header:
                    return 0
                column = header.index("label")
            elif len(row) > column and row[column].strip() not in ("", *_MISSING):
                count += 1
    except InputFileError:
        pass  # unreadable from here on: the labels counted so far
    return count


def ids_digest(ids: npt.NDArray[np.str_]) -> str:
    """SHA-256 of a plan's sorted ids, one per line: which rows it holds, in any order."""
    return hashlib.sha256("\n".join(sorted(ids.tolist())).encode("utf-8")).hexdigest()


def _check_rows(path: str, ids: npt.NDArray[np.str_], meta: Mapping[str, str]) -> None:
    """Refuse a plan whose rows are not those it was written with (sidecar ``planned_rows``).

    A deleted row would vanish from the estimate unnoticed (a pending row is one with an empty
    label, never a missing one) and an added one would count with a weight never drawn.
    """
    want = meta.get("planned_ids_sha256")
    if want is None or ids_digest(ids) == want:
        return
    rows = meta.get("planned_rows", "?")
    what = (
        f"holds {len(ids)} rows, but {rows} were planned"
        if rows != str(len(ids))
        else "holds other ids than those planned (an edited id, or a row replaced)"
    )
    msg = (
        f"{path}: {what}; {_other_plan(path, meta)}restore the plan's rows as monitor plan wrote "
        "them (leave a row's label empty while it is pending, never delete it; ids must keep "
        "their exact text, leading zeros included)"
    )
    raise InputFileError(msg)


def values_digest(
    ids: npt.NDArray[np.str_], prob: npt.NDArray[np.float64], draws: npt.NDArray[np.int64]
) -> str:
    """SHA-256 of a plan's rows' id, pi (or q) and draws, in id order.

    pi to 4 significant digits: what the estimate uses is unchanged by a spreadsheet that saves
    the numbers rounded (Excel keeps 15 digits, LibreOffice what the cell shows), and an edited
    pi changes it (an edit below 5e-5 of pi changes no estimate).
    """
    rows = sorted(
        zip(ids.tolist(), (f"{float(p):.3e}" for p in prob), map(int, draws), strict=True)
    )
    text = "\n".join(json.dumps(row) for row in rows)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_values(
    table: _Table,
    design: str,
    ids: npt.NDArray[np.str_],
    prob: npt.NDArray[np.float64],
    draws: npt.NDArray[np.int64],
) -> None:
    """Refuse a plan whose pi (q), weight or draws are not those it was written with.

    The weight is checked against pi row by row (``_check_weights``); pi and weight edited
    together, or a with-replacement draws count, changed the estimate unnoticed. The draws of a
    with-replacement plan must sum to its budget; the sidecar's ``planned_values_sha256``, where
    recorded, must be the rows' ``values_digest``.
    """
    path, meta = table.path, table.meta  # another plan's sidecar: its ids differ (_check_rows)
    budget = whole_number(meta.get("budget", ""))
    total = int(draws.sum())
    if design == "with-replacement" and "draws" in table.columns and budget not in (None, total):
        msg = (
            f"{path}: its draws sum to {total}, but the plan drew {budget} (the budget in its "
            "sidecar); restore the draws as monitor plan wrote them "
            "(an item drawn twice is labelled once: its label counts for each draw)"
        )
        raise InputFileError(msg)
    want = meta.get("planned_values_sha256")
    if want is None or values_digest(ids, prob, draws) == want:
        return
    pcol = "pi" if design == "poisson" else "q"
    msg = (
        f"{path}: the columns '{pcol}', 'weight' or 'draws' hold other values than the plan was "
        f"written with (its sidecar records a digest of every row's id, {pcol} and draws); "
        "restore them as monitor plan wrote them (only the label "
        "column is to be filled in)"
    )
    raise InputFileError(msg)


def _other_plan(path: str, meta: Mapping[str, str]) -> str:
    """A hint when the sidecar names another plan than ``path`` ("" when it names this one).

    A sidecar copied from another plan disagrees with the rows; so does a plan's own sidecar
    beside a copy under a new name (as the README asks), hence "may".
    """
    name = meta.get("plan")
    if name is None or name == Path(path).name:
        return ""
    return (
        f"its sidecar {sidecar_path(path)} was written for the plan '{name}' and may belong to "
        "that plan (put this plan's own sidecar beside it); else "
    )


PLAN_COLUMNS_DOC = "id,score,pred,pi|q,weight[,draws],label"
#: A weight may differ from 1/pi by this share: pi and weight each rounded to the 4 significant
#: digits the sidecar's digest keeps (``values_digest``) differ by up to 1e-3.
_WEIGHT_RTOL = 2e-3


def _check_weights(
    check: _Checker,
    design: str,
    prob: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64],
    budget_text: str | None,
) -> None:
    """Flag weights that disagree with the probabilities (an edited plan): v = 1/pi or 1/(n q)."""
    if design == "poisson":
        with np.errstate(divide="ignore"):
            expected, formula = 1.0 / prob, "1/pi"
    else:
        try:
            n = float(budget_text) if budget_text is not None else math.nan
        except ValueError:
            n = math.nan
        if not (math.isfinite(n) and n > 0):
            return
        with np.errstate(divide="ignore"):
            expected, formula = 1.0 / (n * prob), f"1/({budget_text} q)"
    with np.errstate(invalid="ignore", divide="ignore"):
        off = np.abs(weight - expected) > _WEIGHT_RTOL * np.abs(expected)
    hits = np.flatnonzero(off & np.isfinite(expected) & np.isfinite(weight))
    if hits.size:
        row = int(hits[0])
        pcol = "pi" if design == "poisson" else "q"
        t = check.table
        want = f"{formula} = {float(expected[row])!r} (from column '{pcol}')"
        check.flag_message(
            hits, cell_error(t.path, t.lines[row], "weight", want, t.columns["weight"][row])
        )


def _plan_design(table: _Table) -> str:
    has_pi, has_q = "pi" in table.columns, "q" in table.columns
    design = table.meta.get("design")
    line = table.header_line
    if design is not None and design not in DESIGNS:
        msg = f"{table.path}: plan meta 'design={design}': expected one of {', '.join(DESIGNS)}"
        raise InputFileError(msg)
    if has_pi == has_q:
        which = "both" if has_pi else "neither"
        msg = (
            f"{table.path}, line {line}: expected exactly one of the columns 'pi' (poisson design) "
            f"or 'q' (with-replacement design), got {which}"
        )
        raise InputFileError(msg)
    inferred = "poisson" if has_pi else "with-replacement"
    if design is not None and design != inferred:
        col = "pi" if has_pi else "q"
        msg = (
            f"{table.path}, line {line}: the header says design={design} "
            f"but the plan has a '{col}' column (design {inferred})"
        )
        raise InputFileError(msg)
    return inferred


def _fmt(x: float) -> str:
    return repr(float(x))


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """The sidecar of a plan: ``PLAN.csv`` -> ``PLAN.meta.json`` (other names: + ``.meta.json``)."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return p.with_suffix(SIDECAR_SUFFIX)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def _json_value(text: str) -> int | float | str:
    """A meta value as JSON: whole numbers and finite floats as numbers (exact round trip)."""
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", text):
        return int(text)
    try:
        x = float(text)
    except ValueError:
        return text
    return x if math.isfinite(x) and repr(x) == text else text


def whole_number(text: str) -> int | None:
    """A count of the plan's meta: "3000", or "3000.0" as a JSON tool may write it; else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and value >= 0.0 else None


def read_sidecar(path: Path) -> dict[str, str]:
    """The ``meta`` of a plan's sidecar as strings; empty when there is no sidecar.

    With its ``format`` and, under ``plan``, the name of the plan it was written for.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{path}: cannot read the plan's sidecar: {exc}"
        raise InputFileError(msg) from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{path}, line {exc.lineno}: not valid JSON ({exc.msg})"
        raise InputFileError(msg) from exc
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        msg = f'{path}: expected a JSON object with a "meta" object (written by monitor plan)'
        raise InputFileError(msg)
    fmt = doc.get("format", PLAN_FORMAT)
    if type(fmt) is int and fmt > PLAN_FORMAT:
        msg = (
            f'{path}: "format": {fmt}: written by a later release of monitor plan (this one '
            f"reads format {PLAN_FORMAT}); use that release"
        )
        raise InputFileError(msg)
    if type(fmt) is not int or fmt != PLAN_FORMAT:  # format 1 kept its meta in the plan
        msg = f'{path}: "format": {json.dumps(fmt)}: expected {PLAN_FORMAT}, as monitor plan writes'
        raise InputFileError(msg)
    out = {"format": str(fmt)}
    if isinstance(doc.get("plan"), str):
        out["plan"] = doc["plan"]  # the name of the plan it was written for
    for key, value in meta.items():
        if isinstance(value, str):
            out[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = str(value)
        elif isinstance(value, float):
            out[key] = repr(value)
        else:
            msg = f'{path}: "meta.{key}": expected a string or a number, got {json.dumps(value)}'
            raise InputFileError(msg)
    return out


def _replace_atomically(target: Path, write: Callable[[Path], object]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        msg = f"{target}: cannot write: {exc.strerror or exc}"
        raise InputFileError(msg) from exc


def write_plan(path: str | os.PathLike[str], plan: Plan) -> None:
    """Write ``plan`` as a plain CSV and its ``meta`` to the sidecar; each file atomically.

    The sidecar is written first, so a plan file never sits beside a sidecar older than it.
    Labels are written as given for labelled rows and empty for pending ones.
    """
    target = Path(path)
    meta = {k: _json_value(v) for k, v in plan.meta.items() if k not in ("format", "plan")}
    meta["planned_rows"] = len(plan)
    meta["planned_ids_sha256"] = ids_digest(plan.ids)
    meta["planned_values_sha256"] = values_digest(plan.ids, plan.prob, plan.draws)
    doc = {
        "about": "activeaudit-monitor audit plan: what monitor estimate needs beyond the rows",
        "format": PLAN_FORMAT,
        "plan": target.name,
        "meta": meta,
    }
    side = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    _replace_atomically(sidecar_path(target), lambda tmp: tmp.write_text(side, encoding="utf-8"))
    _replace_atomically(target, lambda tmp: _write_rows(tmp, plan))


def _write_rows(path: Path, plan: Plan) -> None:
    pcol = "pi" if plan.design == "poisson" else "q"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "score", "pred", pcol, "weight", "draws", "label"])
        fmt: Callable[[float], str] = _fmt
        for i in range(len(plan)):
            label = str(int(plan.label[i])) if plan.labelled[i] else ""
            writer.writerow(
                [
                    str(plan.ids[i]),
                    fmt(plan.score[i]),
                    int(plan.pred[i]),
                    fmt(plan.prob[i]),
                    fmt(plan.weight[i]),
                    int(plan.draws[i]),
                    label,
                ]
            )
