"""The tails benchmark runs end to end; its calibration check tells healthy from miscalibrated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

try:
    from benchmarks import tails
except ImportError:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import tails


def test_table_has_every_case_and_the_check_fires_only_on_miscalibrated_scores(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert tails.main(["--reps", "300", "--pool", "20000", "--seed", "3"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if "|" in line][1:]
    assert len(rows) == 2 * 2 * len(tails.MEASURES)
    for row in rows:
        # "1%" "x1" measure truth labels | up calib. (Re) | ...: the 1e-3 cell's counts
        up, calib = int(row[6]), int(row[7])
        if row[1] == "x1":  # calibrated: about R e = 0.3 expected, far from 300
            assert up <= 5 and calib <= 5, row
        elif row[2] != "precision":  # logits x3: recall and F1 found in most windows
            assert calib > 150, row
