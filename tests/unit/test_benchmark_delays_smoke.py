"""The delayed-labels grid runs end to end (tiny repetitions), pairing min_answers values."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import delays


def test_cases_run_recalibration_only_where_the_scores_are_over_confident() -> None:
    cases = delays.cases()
    assert {c.design for c in cases if c.confidence == 1.0} == {delays.RAW}
    assert {c.design for c in cases if c.confidence != 1.0} == {delays.RAW, delays.RECAL}
    assert len(cases) == 18


def test_a_recalibrated_case_pairs_min_answers_on_the_same_samples() -> None:
    case = delays.Case(0.2, 3.0, (0.5, 0.9), delays.RECAL)
    cells = delays.run_case(case, 6, 2, (3, 10), np.random.default_rng(1))
    assert [(c.measure, c.min_answers) for c in cells] == [
        (m, k) for m in delays.NAMES for k in (3, 10)
    ]
    for a, b in zip(cells[::2], cells[1::2], strict=True):
        assert a.truth == b.truth and a.answered == b.answered  # the same windows and answers
        assert a.ref_coverage == b.ref_coverage
        assert 0.0 <= a.coverage <= 1.0 and a.width > 0.0
        assert 0.0 < a.answered < 1.0
    lines = delays.report(cells)
    assert len(lines) == 1 + len(cells) and "recal q*" in lines[1]


def test_main_prints_a_row_per_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert delays.main(["--reps", "2", "--windows", "1", "--min-answers", "10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(1 for line in out if "%  x" in line) == 18 * 3
