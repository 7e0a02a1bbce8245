"""Alert decisions over Snapshots: firing, clearing, hysteresis, looks, references, config."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config.load import parse_config
from monitor.config.schema import AlertConfig, Config, ModelConfig
from monitor.core.alerts import AlertEvaluator, AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate
from monitor.daemon import _alert_hook
from monitor.errors import ConfigError
from monitor.io.alertmanager import AlertmanagerPusher
from monitor.io.exporter import Exporter
from monitor.io.store import Store
from monitor.stats.alerting import drop_bound, likelihood_upper_bound, look_error, upper_bound
from monitor.stats.estimate import Confusion, Estimate

HOUR = 3600.0
CONFIG = Config(models={"m": ModelConfig(name="m")}, default_model="m")


def _est(value: float, se: float, n: int = 200) -> Estimate:
    return Estimate(value, se, value - 2 * se, value + 2 * se, n, n * 0.6, 0.95)


def _window(
    f: Estimate,
    *,
    window: str = "24h",
    intrinsic: float = math.nan,
    likelihood: float = math.nan,
    precision: Estimate | None = None,
) -> WindowEstimate:
    return WindowEstimate(
        model="m",
        segment="",
        window=window,
        alpha=0.5,
        f=f,
        precision=precision if precision is not None else Estimate.missing(0.95),
        recall=Estimate.missing(0.95),
        intrinsic_f=intrinsic,
        likelihood=likelihood,
        ess=f.ess,
        confusion=Confusion(1.0, 1.0, 1.0, 1.0),
        records=10_000,
        requests=f.n_labels + 10,
        labels=f.n_labels,
        pending=10,
        missing=0,
        psi=math.nan,
    )


def _snap(hour: int, *windows: WindowEstimate) -> Snapshot:
    return Snapshot(windows=windows, watermarks={"m": hour * HOUR + 10.0}, created_at=0.0)


def _evaluator(**settings: object) -> AlertEvaluator:
    settings.setdefault("looks_per_window", 0)  # one look per hour unless a test says otherwise
    cfg = AlertConfig(**settings)  # type: ignore[arg-type]
    return AlertEvaluator(CONFIG, {"m": cfg})


def _by_alert(statuses: list[AlertStatus]) -> dict[str, AlertStatus]:
    return {s.alert: s for s in statuses}


def test_below_floor_fires_on_the_strict_upper_bound() -> None:
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    est = _est(0.55, 0.02)
    (status,) = ev.evaluate(_snap(1, _window(est)))
    error = look_error(0.05 / 3, 1, "horizon", 720)  # one alert on each of 3 reported windows
    assert status.alert == "f_below_floor"
    assert status.severity == "critical"
    assert status.bound == pytest.approx(upper_bound(est, error))
    assert status.threshold == 0.7
    assert status.active
    assert status.since == HOUR + 10.0
    assert "floor 0.700" in status.description
    # a bound above the floor does not fire
    ev2 = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    (quiet,) = ev2.evaluate(_snap(1, _window(_est(0.66, 0.03))))
    assert not quiet.active
    assert quiet.bound > 0.7
    assert math.isnan(quiet.since)


def test_point_estimate_below_floor_inside_the_interval_does_not_page() -> None:
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    est = _est(0.64, 0.03)  # nominal 95% upper bound ~0.70: noise, not evidence
    for hour in range(1, 50):
        (status,) = ev.evaluate(_snap(hour, _window(est)))
        assert not status.active


def test_too_few_labels_decide_nothing_and_keep_the_state() -> None:
    ev = _evaluator(floor=0.7, min_labels=30, check_calibration=False, likelihood_floor=None)
    (status,) = ev.evaluate(_snap(1, _window(_est(0.3, 0.05, n=29))))
    assert not status.active
    assert math.isnan(status.bound)
    (status,) = ev.evaluate(_snap(2, _window(_est(0.5, 0.02))))
    assert status.active
    (status,) = ev.evaluate(_snap(3, _window(_est(0.9, 0.01, n=5))))  # a fresh window, few labels
    assert status.active
    assert status.since == 2 * HOUR + 10.0


def test_one_decision_per_check_interval() -> None:
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    first = ev.evaluate(_snap(1, _window(_est(0.66, 0.03))))
    # later in the same hour, even a damning estimate is not a new look
    same_hour = Snapshot(
        windows=(_window(_est(0.4, 0.01)),), watermarks={"m": HOUR + 3000.0}, created_at=0.0
    )
    assert ev.evaluate(same_hour) == first
    (next_hour,) = ev.evaluate(_snap(2, _window(_est(0.4, 0.01))))
    assert next_hour.active


def test_a_look_that_decides_nothing_leaves_the_check_open() -> None:
    """Too few labels at the interval's first estimate: the labels that arrive later in the
    same interval are judged then (they once waited for the next interval's traffic, forever
    when the traffic stopped)."""
    ev = _evaluator(floor=0.7, min_labels=30, check_calibration=False, likelihood_floor=None)
    (early,) = ev.evaluate(_snap(1, _window(_est(0.4, 0.02, n=10))))
    assert not early.active and math.isnan(early.bound)
    later = Snapshot(
        windows=(_window(_est(0.4, 0.02)),), watermarks={"m": HOUR + 3000.0}, created_at=0.0
    )
    (status,) = ev.evaluate(later)
    assert status.active and status.since == HOUR + 3000.0
    # that look was the interval's: a later, healthy estimate of it changes nothing
    healthy = Snapshot(
        windows=(_window(_est(0.95, 0.01)),), watermarks={"m": HOUR + 3500.0}, created_at=0.0
    )
    assert ev.evaluate(healthy) == [status]


def test_a_window_is_retested_when_an_eighth_of_it_is_new() -> None:
    cfg = AlertConfig(floor=0.7, check_calibration=False, likelihood_floor=None)
    assert (cfg.interval_s(86_400), cfg.horizon_looks(86_400)) == (10_800, 240)
    assert (cfg.interval_s(604_800), cfg.horizon_looks(604_800)) == (75_600, 34)
    assert cfg.interval_s(3600) == 3600  # never more often than check_interval_s
    ev = AlertEvaluator(CONFIG, {"m": cfg})
    est = _est(0.72, 0.02)
    first = ev.evaluate(_snap(3, _window(est)))[0]
    assert first.bound == pytest.approx(upper_bound(est, 0.05 / 3 / 240))
    # hours 4 and 5 are in the same 3 h interval: no new look, even on damning evidence
    assert ev.evaluate(_snap(5, _window(_est(0.4, 0.01))))[0] is first
    assert ev.evaluate(_snap(6, _window(_est(0.4, 0.01))))[0].active


def test_hysteresis_keeps_an_alert_until_the_relaxed_bound_reaches_the_floor() -> None:
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    assert ev.evaluate(_snap(1, _window(_est(0.55, 0.02))))[0].active
    # between the strict and the relaxed bound: neither fires nor clears -> stays active
    band = _est(0.655, 0.02)
    strict = upper_bound(band, look_error(0.05 / 3, 2, "horizon", 720))
    relaxed = upper_bound(band, 0.05)
    assert relaxed < 0.7 < strict
    (held,) = ev.evaluate(_snap(2, _window(band)))
    assert held.active
    assert held.since == HOUR + 10.0
    (cleared,) = ev.evaluate(_snap(3, _window(_est(0.69, 0.02))))
    assert not cleared.active
    assert math.isnan(cleared.since)
    # and the same in-between estimate does not re-fire an inactive alert
    (quiet,) = ev.evaluate(_snap(4, _window(band)))
    assert not quiet.active


def test_anytime_spending_widens_the_bound_with_each_look() -> None:
    ev = _evaluator(floor=0.5, spending="anytime", check_calibration=False, likelihood_floor=None)
    est = _est(0.7, 0.03)
    bounds = [ev.evaluate(_snap(h, _window(est)))[0].bound for h in range(1, 6)]
    assert bounds == sorted(bounds)
    assert bounds[0] < bounds[-1]
    assert bounds[4] == pytest.approx(upper_bound(est, 0.05 / 3 * 6 / (math.pi**2 * 25)))


def test_dropped_against_a_configured_baseline() -> None:
    ev = _evaluator(baseline=0.8, baseline_se=0.01, drop_tolerance=0.02, check_calibration=False)
    est = _est(0.66, 0.025)
    statuses = _by_alert(ev.evaluate(_snap(1, _window(est))))
    assert set(statuses) == {"f_dropped", "model_untrustworthy"}
    dropped = statuses["f_dropped"]
    assert dropped.severity == "warning"
    assert dropped.active
    assert dropped.threshold == pytest.approx(0.78)
    error = look_error(0.05 / 6, 1, "horizon", 720)  # 2 alerts x 3 windows share the rate
    assert dropped.bound == pytest.approx(drop_bound(est, 0.8, 0.01, error))
    ev2 = _evaluator(baseline=0.8, baseline_se=0.01, check_calibration=False)
    assert not _by_alert(ev2.evaluate(_snap(1, _window(_est(0.76, 0.025)))))["f_dropped"].active


def test_dropped_against_the_same_window_a_lag_earlier() -> None:
    ev = _evaluator(reference_lag_s=86_400, check_calibration=False, likelihood_floor=None)
    healthy, degraded = _est(0.8, 0.02), _est(0.6, 0.02)
    for hour in range(0, 24):
        (status,) = ev.evaluate(_snap(hour, _window(healthy)))
        assert status.alert == "f_dropped"
        assert math.isnan(status.bound)  # no reference 24 h back yet
    (status,) = ev.evaluate(_snap(24, _window(healthy)))
    assert not status.active
    assert status.threshold == pytest.approx(0.8)
    (status,) = ev.evaluate(_snap(25, _window(degraded)))
    assert status.active
    # a lag shorter than the window would compare overlapping data: no f_dropped for it
    short = _evaluator(reference_lag_s=3600, check_calibration=False, likelihood_floor=None)
    assert short.evaluate(_snap(1, _window(healthy))) == []


def test_a_reference_of_another_measure_is_no_reference(caplog: pytest.LogCaptureFixture) -> None:
    """Monitoring switched from recall (0.90) to precision (0.60): f_dropped read "precision
    0.600 vs reference 0.900" and fired, though the model had not changed."""
    settings = {"reference_lag_s": 86_400, "check_calibration": False, "likelihood_floor": None}
    ev = _evaluator(measure="recall", **settings)
    window = _window(Estimate.missing(0.95), precision=_est(0.6, 0.02))
    window = dataclasses.replace(window, recall=_est(0.9, 0.02))
    for hour in range(0, 30):
        ev.evaluate(_snap(hour, window))
    saved = json.loads(json.dumps(ev.state(), allow_nan=False))
    now = _evaluator(measure="precision", **settings)
    now.restore(saved)
    (status,) = now.evaluate(_snap(30, window))
    assert not status.active and math.isnan(status.threshold)
    same = _evaluator(measure="recall", **settings)
    same.restore(saved)
    dropped = dataclasses.replace(window, recall=_est(0.6, 0.02))
    (status,) = same.evaluate(_snap(30, dropped))
    assert status.active and status.threshold == pytest.approx(0.9)
    # a state of the earlier format (no measure in the key) is read without its history
    earlier = {
        **saved,
        "version": 1,
        "history": [{**h, "key": h["key"][:3]} for h in saved["history"]],
    }
    again = _evaluator(measure="recall", **settings)
    with caplog.at_level(logging.WARNING):
        again.restore(earlier)
    (status,) = again.evaluate(_snap(30, dropped))
    assert not status.active and math.isnan(status.threshold)
    # and says so (an upgrade switched f_dropped off for a reference lag without a word)
    (line,) = [r for r in caplog.records if getattr(r, "event", "") == "alert_history_dropped"]
    assert "reference_lag_s" in line.getMessage()


def test_untrustworthy_on_low_likelihood_or_intrinsic_disagreement() -> None:
    ev = _evaluator(likelihood_floor=0.6)
    ok = _window(_est(0.7, 0.03), intrinsic=0.72, likelihood=0.8)
    (status,) = ev.evaluate(_snap(1, ok))
    assert status.alert == "model_untrustworthy"
    assert not status.active
    assert status.bound == 0.8  # the likelihood is the evidence while it is checkable
    (status,) = ev.evaluate(_snap(2, _window(_est(0.7, 0.03), intrinsic=0.72, likelihood=0.5)))
    assert status.active
    assert (status.bound, status.threshold) == (0.5, 0.6)
    # likelihood back inside the floor's band is not enough to clear...
    (status,) = ev.evaluate(_snap(3, _window(_est(0.7, 0.03), intrinsic=0.72, likelihood=0.61)))
    assert status.active
    (status,) = ev.evaluate(_snap(4, ok))
    assert not status.active
    # the scores claim 0.9 while the audit says 0.6: calibration drifted
    ev2 = _evaluator(likelihood_floor=None)
    (status,) = ev2.evaluate(_snap(1, _window(_est(0.6, 0.02), intrinsic=0.9)))
    assert status.active
    assert status.threshold == 0.9
    assert 0.6 < status.bound < 0.9
    assert "intrinsic" in status.description


def test_measure_windows_filter_and_disabled_alerts() -> None:
    ev = _evaluator(measure="precision", floor=0.9, windows=("7d",), check_calibration=False)
    precise = _est(0.5, 0.02)
    w7 = _window(_est(0.95, 0.01), window="7d", precision=precise, likelihood=0.9)
    w24 = _window(_est(0.95, 0.01), window="24h", precision=precise, likelihood=0.9)
    statuses = ev.evaluate(_snap(1, w7, w24))
    assert {(s.alert, s.window) for s in statuses} == {
        ("f_below_floor", "7d"),
        ("model_untrustworthy", "7d"),
    }
    assert _by_alert(statuses)["f_below_floor"].active  # precision 0.5, not F 0.95
    nothing = AlertEvaluator(
        CONFIG, {"m": AlertConfig(likelihood_floor=None, check_calibration=False)}
    )
    assert nothing.evaluate(_snap(1, w7)) == []


def test_false_alarm_rate_is_shared_by_the_alerts_and_windows_of_a_series() -> None:
    assert AlertConfig().tests(3) == 3  # model_untrustworthy only, on 3 windows
    assert AlertConfig(floor=0.5, baseline=0.8).tests(3) == 9
    assert AlertConfig(floor=0.5, reference_lag_s=86_400, windows=("7d",)).tests(3) == 3
    off = AlertConfig(likelihood_floor=None, check_calibration=False)
    assert off.tests(3) == 1


def test_default_settings_come_from_the_model_config() -> None:
    ev = AlertEvaluator(CONFIG)
    assert ev.settings("m") == AlertConfig()
    assert ev.settings("unknown") == AlertConfig()


def test_state_survives_a_restart_through_json() -> None:
    ev = _evaluator(floor=0.7, reference_lag_s=86_400, check_calibration=False)
    for hour in range(0, 30):
        ev.evaluate(_snap(hour, _window(_est(0.5, 0.02), likelihood=0.9)))
    saved = json.loads(json.dumps(ev.state(), allow_nan=False))
    again = _evaluator(floor=0.7, reference_lag_s=86_400, check_calibration=False)
    again.restore(saved)
    after = _by_alert(again.evaluate(_snap(30, _window(_est(0.5, 0.02), likelihood=0.9))))
    before = _by_alert(ev.evaluate(_snap(30, _window(_est(0.5, 0.02), likelihood=0.9))))
    assert repr(after) == repr(before)  # repr: NaN fields compare equal
    assert after["f_below_floor"].since == before["f_below_floor"].since == 10.0


def _alerts(block: object) -> AlertConfig:
    config = parse_config({"models": {"fraud": {"alerts": block}}}, "test.yaml")
    return config.models["fraud"].alerts


def test_alert_config_from_yaml_mapping() -> None:
    cfg = _alerts(
        {"floor": 0.7, "baseline": 0.82, "baseline_se": 0.01, "min_labels": 50,
         "windows": ["24h", "7d"], "false_alarm_rate": 0.01, "spending": "anytime",
         "likelihood_floor": None}
    )  # fmt: skip
    assert cfg.floor == 0.7
    assert cfg.windows == ("24h", "7d")
    assert cfg.spending == "anytime"
    assert cfg.likelihood_floor is None  # an explicit null turns the check off
    assert _alerts(None) == AlertConfig()
    with pytest.raises(ConfigError) as info:
        _alerts({"flor": 0.7, "floor": 1.5, "min_labels": True, "measure": "auc", "spending": "x",
                 "windows": ["24h", "30d"], "horizon_s": 60})  # fmt: skip
    text = str(info.value)
    assert "test.yaml: 7 problems" in text
    assert "models.fraud.alerts.flor: unknown key (did you mean 'floor'?)" in text
    assert "models.fraud.alerts.min_labels: expected an integer, got true (a boolean)" in text
    assert "models.fraud.alerts.floor: must be in [0, 1], got 1.5" in text
    assert "models.fraud.alerts.measure: expected one of f, precision, recall, got 'auc'" in text
    assert "models.fraud.alerts.spending: expected one of horizon, anytime, got 'x'" in text
    assert "models.fraud.alerts.horizon_s: must be >= check_interval_s (3600), got 60" in text
    assert "models.fraud.alerts.windows: unknown window '30d' (reported: 1h, 24h, 7d)" in text
    with pytest.raises(ConfigError, match=r"models.fraud.alerts: expected a mapping, got a list"):
        _alerts([1])


def test_evaluator_output_is_what_the_exporter_renders() -> None:
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    exporter = Exporter(CONFIG, registry=CollectorRegistry())
    exporter.publish_alerts(ev.evaluate(_snap(1, _window(_est(0.5, 0.02)))))
    labels = {"alert": "f_below_floor", "model": "m", "segment": "", "window": "24h"}
    get = exporter.registry.get_sample_value
    assert get("monitor_alert_active", labels) == 1
    assert get("monitor_alert_threshold", labels) == 0.7
    assert 0.5 < (get("monitor_alert_bound", labels) or 0) < 0.7


def test_push_failures_are_counted_without_blocking_the_caller() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    errors: list[int] = []
    pusher = AlertmanagerPusher(
        f"http://127.0.0.1:{port}", on_error=errors.append, retries=2, backoff_s=0.2
    )
    firing = AlertStatus("f_below_floor", "m", "", "24h", True, 0.5, 0.7, 1.0)
    start = time.monotonic()
    pusher.push([firing])
    assert time.monotonic() - start < 0.3  # pushing inline would wait 0.2 + 0.4 s of back-off
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    pusher.close()
    assert errors == [1]
    assert pusher.delivered == 0


def test_a_peer_that_does_not_answer_http_is_a_push_failure() -> None:
    """An alertmanager_url pointing at another service: BadStatusLine ended the push thread
    (a traceback on stderr, then no alert was ever pushed or counted as failed)."""

    def serve(listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
        errors: list[int] = []
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        pusher = AlertmanagerPusher(url, on_error=errors.append, retries=1, backoff_s=0.05)
        for pushes in (1, 2):  # the second push is tried too: the thread lives on
            pusher.push([AlertStatus("f_below_floor", "m", "", "24h", pushes == 1, 0.5, 0.7, 1.0)])
            deadline = time.monotonic() + 10
            while len(errors) < pushes and time.monotonic() < deadline:
                time.sleep(0.01)
            assert errors == [1] * pushes
        pusher.close()


def test_likelihood_alert_is_a_test_inside_the_false_alarm_budget() -> None:
    """A likelihood below its floor fires only when its upper bound at the look's error is."""
    error = look_error(0.05 / 3, 1, "horizon", 720)
    noisy = dataclasses.replace(_window(_est(0.7, 0.03), likelihood=0.55), likelihood_log_se=0.1)
    ev = _evaluator(likelihood_floor=0.6, check_calibration=False)
    (status,) = ev.evaluate(_snap(1, noisy))
    assert not status.active  # 0.55 < 0.6, but not significantly
    assert status.bound == pytest.approx(likelihood_upper_bound(0.55, 0.1, noisy.labels, error))
    sure = dataclasses.replace(noisy, likelihood_log_se=0.005)
    ev = _evaluator(likelihood_floor=0.6, check_calibration=False)
    (status,) = ev.evaluate(_snap(1, sure))
    assert status.active and status.bound < 0.6


def _keys(ev: AlertEvaluator) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]]:
    """The (alert, model, segment, window) keys and (model, segment, window) histories kept."""
    state = ev.state()
    keys = {tuple(k["key"]) for k in state["keys"]}
    return keys, {tuple(h["key"][:3]) for h in state["history"]}


def test_the_state_of_a_segment_gone_from_the_snapshots_is_forgotten() -> None:
    ev = _evaluator(floor=0.7, reference_lag_s=86_400, check_calibration=False)
    healthy = _window(_est(0.9, 0.02), likelihood=0.9)
    campaign = dataclasses.replace(healthy, segment="campaign")
    for hour in range(30):
        ev.evaluate(_snap(hour, healthy, campaign))
    keys, history = _keys(ev)
    assert ("f_dropped", "m", "campaign", "24h") in keys and ("m", "campaign", "24h") in history
    statuses = ev.evaluate(_snap(30, healthy))  # the campaign's traffic has aged out
    assert {s.segment for s in statuses} == {""}
    keys, history = _keys(ev)
    assert {k[2] for k in keys} == {""} and len(keys) == 3
    assert history == {("m", "", "24h")}


class _RecordingPusher(AlertmanagerPusher):
    """Keeps the alert lists it would POST instead of sending them."""

    def __init__(self, resend_s: float = 3600.0) -> None:
        self.sent: list[list[dict[str, Any]]] = []
        super().__init__("http://127.0.0.1:9", resend_s=resend_s)

    def _send(self, alerts: list[dict[str, Any]]) -> None:
        self.sent.append(alerts)


def test_a_firing_alert_of_a_vanished_segment_is_kept_until_it_clears() -> None:
    """Its state stays (and holds if the segment returns); Alertmanager is told it resolved."""
    ev = _evaluator(floor=0.7, check_calibration=False, likelihood_floor=None)
    overall = _window(_est(0.9, 0.02))
    bad = dataclasses.replace(_window(_est(0.5, 0.02)), segment="campaign")
    key = ("f_below_floor", "m", "campaign", "24h")
    pusher = _RecordingPusher()
    pusher.push(ev.evaluate(_snap(1, overall, bad)), now=100.0)
    pusher.push(ev.evaluate(_snap(2, overall)), now=101.0)  # the campaign ended
    pusher.close()
    assert key in _keys(ev)[0]
    ((resolved,),) = pusher.sent[-1:]  # the segment's alert, sent resolved (endsAt = now)
    assert resolved["labels"]["segment"] == "campaign"
    assert resolved["endsAt"] == "1970-01-01T00:01:41.000Z"
    (status,) = [s for s in ev.evaluate(_snap(3, overall, bad)) if s.segment == "campaign"]
    assert status.active and status.since == 1 * HOUR + 10.0  # back: still firing
    healed = dataclasses.replace(bad, f=_est(0.9, 0.02))
    (status,) = [s for s in ev.evaluate(_snap(4, overall, healed)) if s.segment == "campaign"]
    assert not status.active
    ev.evaluate(_snap(5, overall))
    assert key not in _keys(ev)[0]  # resolved, then gone: forgotten


def test_the_daemon_stores_the_alert_state_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alerts = AlertConfig(floor=0.7, looks_per_window=0, check_calibration=False)
    config = Config(models={"m": ModelConfig(name="m", alerts=alerts)}, default_model="m")
    store = Store(tmp_path)
    writes: list[object] = []
    put = store.put_json

    def counted(key: str, value: object) -> None:
        writes.append(value)
        put(key, value)

    monkeypatch.setattr(store, "put_json", counted)
    hook = _alert_hook(config, store, Exporter(config, registry=CollectorRegistry()))
    window = _window(_est(0.9, 0.02), likelihood=0.9)
    for created in range(10):  # one look per hour: the snapshots of an hour change nothing
        hook(dataclasses.replace(_snap(1, window), created_at=float(created)))
    assert len(writes) == 1
    hook(_snap(2, window))  # the next look counts
    assert len(writes) == 2
    again = _alert_hook(config, store, Exporter(config, registry=CollectorRegistry()))
    few = dataclasses.replace(window, f=_est(0.9, 0.02, n=5), labels=5)
    again(_snap(3, few))  # after a restart: too few labels decide nothing, nothing to write
    assert len(writes) == 2
    assert store.get_json("alerts") == writes[-1]
    store.close()


def test_firing_alerts_are_sent_again_while_no_statuses_come() -> None:
    """A model whose traffic stopped publishes no snapshot, so nothing was pushed: its firing
    alerts reached their endsAt and Alertmanager resolved them three minutes later."""
    pusher = _RecordingPusher(resend_s=0.1)
    firing = AlertStatus("f_below_floor", "m", "", "24h", True, 0.5, 0.7, 1.0)
    pusher.push([firing])
    deadline = time.monotonic() + 10
    while len(pusher.sent) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    pusher.push([dataclasses.replace(firing, active=False)])
    time.sleep(0.3)
    pusher.close()
    *again, last = pusher.sent
    assert len(again) >= 4
    assert all(a["labels"]["alert"] == "f_below_floor" for (a,) in again)
    ends = [a["endsAt"] for (a,) in again]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)  # each later than the last
    assert {a["startsAt"] for (a,) in again} == {again[0][0]["startsAt"]}
    ((resolved,),) = [last]
    assert resolved["endsAt"] < ends[-1]  # sent once, resolved; nothing after it


def test_an_alert_held_by_the_calibration_check_shows_that_checks_evidence() -> None:
    """Between its firing and clearing levels the calibration check holds the alert; the
    evidence used to switch to the likelihood's bound (1.02 against a floor of 0.5), which
    reads as passing while the alert fires."""
    ev = _evaluator(likelihood_floor=0.6)
    (status,) = ev.evaluate(_snap(1, _window(_est(0.7, 0.01), intrinsic=0.8, likelihood=0.9)))
    assert status.active and status.threshold == 0.8  # fired on the calibration check
    held = _window(_est(0.7, 0.03), intrinsic=0.77, likelihood=0.9)  # 2.3 se: neither level
    (status,) = ev.evaluate(_snap(2, held))
    assert status.active
    assert status.threshold == 0.77 and status.description.startswith("intrinsic F")
