"""A refit tests its map on the day's labels: positives among the low scores raise the share."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.config.schema import Config
from monitor.core import recalibration
from monitor.sim.workload import WorkloadSpec, generate
from monitor.stats.budget import NO_CALIBRATION
from monitor.stats.hidden_positives import HIDDEN_SHARE
from monitor.stats.sample import LabeledSample
from monitor.testing.fakes import FakeLog
from tests.unit import test_daemon_loop as loop
from tests.unit.test_daemon_loop import Harness, _answer, _fill


def _calibrated(rng: np.random.Generator, n: int, floor: float = 0.0) -> LabeledSample:
    """Audited records of a calibrated model at 1% positives, plus positives at rate ``floor``."""
    score = 1.0 / (1.0 + np.exp(-rng.normal(-7.0, 3.0, n)))
    label = (rng.random(n) < score) | (rng.random(n) < floor)
    pred = (score >= 0.5).astype(np.int8)
    return LabeledSample.poisson(score, pred, label.astype(np.int8), np.full(n, 0.05))


def test_positives_the_map_does_not_expect_raise_the_share_until_they_stop() -> None:
    rng = np.random.default_rng(11)
    recent = _calibrated(rng, 300)
    day = LabeledSample.concat([_calibrated(rng, 3000, floor=0.01), recent])
    healthy_day = LabeledSample.concat([_calibrated(rng, 3000), recent])
    plain = recalibration.refit(NO_CALIBRATION, recent, 0.1)
    raised = recalibration.refit(NO_CALIBRATION, recent, 0.1, history=day)
    assert raised.lam == HIDDEN_SHARE > plain.lam
    assert dataclasses.replace(raised, lam=plain.lam) == plain  # the same map, the share alone
    assert recalibration.refit(NO_CALIBRATION, recent, 0.1, history=healthy_day) == plain
    # a later refit whose day no longer rejects the map lowers the share again (a new version)
    later = recalibration.refit(raised, recent, 0.1, history=healthy_day)
    assert later.version == raised.version + 1 and later.lam == plain.lam


def test_the_engine_fits_on_its_window_and_tests_on_the_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 150 labels an hour: maps fitted on the last two hours, tested on the last 24
    model = dataclasses.replace(loop._config(tmp_path).models["default"], labels_per_hour=150.0)
    monkeypatch.setattr(
        loop,
        "_config",
        lambda d: dataclasses.replace(Config(data_dir=d), models={"default": model}),
    )
    seen: list[tuple[int, int]] = []
    refit = recalibration.refit

    def spy(previous: Any, sample: LabeledSample, *a: Any, **k: Any) -> Any:
        seen.append((len(sample), len(k["history"])))
        return refit(previous, sample, *a, **k)

    monkeypatch.setattr(recalibration, "refit", spy)
    w = generate(WorkloadSpec(n=4000, hours=8.0, seed=3))
    log = FakeLog()
    _fill(log, w)
    h = Harness(log, tmp_path / "d")
    h.drain()
    answered = _answer(log, w)
    h.drain()
    h.close()
    fit, day = seen[-1]
    assert day == answered > fit > 0  # every label of the 8 h, of which the last 2 h's fitted
