"""The Prometheus facade: values read back from an injected registry, and the HTTP endpoints."""

from __future__ import annotations

import math
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from monitor import __version__
from monitor.config.schema import Config, MetricsConfig, ModelConfig
from monitor.core.alerts import AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate, WorstCase
from monitor.errors import ConfigError, RejectReason
from monitor.io.exporter import Exporter, alpha_label
from monitor.stats.estimate import Confusion, Estimate

W = {"model": "fraud", "segment": "eu", "window": "24h"}
WA = {**W, "alpha": "0.5"}


def _config(port: int = 0) -> Config:
    return Config(
        metrics=MetricsConfig(listen_address="127.0.0.1", port=port),
        models={
            "fraud": ModelConfig(name="fraud", labels_per_hour=12.0, expected_records_per_hour=5e4),
            "spam": ModelConfig(name="spam", alpha=1.0, labels_per_hour=3.5),
        },
        default_model="fraud",
    )


def _window(**overrides: object) -> WindowEstimate:
    fields: dict[str, object] = {
        "model": "fraud",
        "segment": "eu",
        "window": "24h",
        "alpha": 0.5,
        "f": Estimate(0.71, 0.04, 0.63, 0.79, 180, 95.5, 0.95),
        "precision": Estimate(0.82, 0.03, 0.76, 0.88, 180, 95.5, 0.95),
        "recall": Estimate(0.63, 0.05, 0.53, 0.73, 180, 95.5, 0.95),
        "intrinsic_f": 0.74,
        "likelihood": 0.91,
        "ess": 95.5,
        "confusion": Confusion(tp=410.0, fp=90.0, fn=240.0, tn=99_260.0),
        "records": 100_000,
        "requests": 240,
        "labels": 180,
        "pending": 50,
        "missing": 10,
        "psi": 0.012,
        "intrinsic_f_recalibrated": 0.52,
        "calibration_error": 0.031,
        "scores_disagree": True,
    }
    fields.update(overrides)
    return WindowEstimate(**fields)  # type: ignore[arg-type]


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    exp = Exporter(_config(), registry=CollectorRegistry())
    yield exp
    exp.stop()


def test_every_snapshot_family_is_rendered_from_the_snapshot(exporter: Exporter) -> None:
    exporter.publish(Snapshot(windows=(_window(),), watermarks={"fraud": 1_700_000_000.0}))
    get = exporter.registry.get_sample_value
    assert get("monitor_f_measure", WA) == 0.71
    assert get("monitor_f_measure_ci_lower", WA) == 0.63
    assert get("monitor_f_measure_ci_upper", WA) == 0.79
    assert get("monitor_precision", W) == 0.82
    assert get("monitor_precision_ci_lower", W) == 0.76
    assert get("monitor_precision_ci_upper", W) == 0.88
    assert get("monitor_recall", W) == 0.63
    assert get("monitor_recall_ci_lower", W) == 0.53
    assert get("monitor_recall_ci_upper", W) == 0.73
    assert get("monitor_intrinsic_f_measure", WA) == 0.74
    assert get("monitor_intrinsic_f_measure_recalibrated", WA) == 0.52
    assert get("monitor_calibration_error", W) == 0.031
    assert get("monitor_model_likelihood", W) == 0.91
    assert get("monitor_effective_sample_size", W) == 95.5
    assert get("monitor_confusion_estimate", {**W, "cell": "tp"}) == 410.0
    assert get("monitor_confusion_estimate", {**W, "cell": "fp"}) == 90.0
    assert get("monitor_confusion_estimate", {**W, "cell": "fn"}) == 240.0
    assert get("monitor_confusion_estimate", {**W, "cell": "tn"}) == 99_260.0
    assert get("monitor_window_records", W) == 100_000
    assert get("monitor_window_audit_requests", W) == 240
    assert get("monitor_window_labels", W) == 180
    assert get("monitor_labels_pending", W) == 50
    assert get("monitor_labels_missing", W) == 10
    assert get("monitor_label_completion_ratio", W) == pytest.approx(180 / 240)
    assert get("monitor_score_psi", W) == 0.012
    assert get("monitor_scores_disagree", W) == 1.0
    assert get("monitor_watermark_timestamp_seconds", {"model": "fraud"}) == 1_700_000_000.0


def test_answer_rates_pending_weight_and_worst_case_bounds(exporter: Exporter) -> None:
    worst = WorstCase(f=(0.5, 0.8), precision=(0.7, 0.9), recall=(0.4, 0.75))
    w = _window(answer_rate=(0.5, 0.9), pending_weight=0.3, missing_weight=0.1, worst=worst)
    exporter.publish(Snapshot(windows=(w,)))
    get = exporter.registry.get_sample_value
    assert get("monitor_answer_rate", {**W, "pred": "0"}) == 0.5
    assert get("monitor_answer_rate", {**W, "pred": "1"}) == 0.9
    assert get("monitor_pending_weight_ratio", W) == 0.3
    assert get("monitor_missing_weight_ratio", W) == 0.1
    assert get("monitor_f_measure_worst_case_lower", WA) == 0.5
    assert get("monitor_f_measure_worst_case_upper", WA) == 0.8
    assert get("monitor_precision_worst_case_lower", W) == 0.7
    assert get("monitor_recall_worst_case_upper", W) == 0.75
    exporter.publish(Snapshot(windows=(_window(),)))  # unknown (NaN): omitted
    assert get("monitor_answer_rate", {**W, "pred": "0"}) is None
    assert get("monitor_recall_worst_case_upper", W) is None


def test_label_latency_histogram(exporter: Exporter) -> None:
    exporter.observe_label_latency({"fraud": [30.0, 4000.0, 90_000.0], "spam": []})
    get = exporter.registry.get_sample_value
    fraud = {"model": "fraud"}
    assert get("monitor_label_latency_seconds_count", fraud) == 3
    assert get("monitor_label_latency_seconds_bucket", {**fraud, "le": "60.0"}) == 1
    assert get("monitor_label_latency_seconds_bucket", {**fraud, "le": "7200.0"}) == 2
    assert get("monitor_label_latency_seconds_sum", fraud) == pytest.approx(94_030.0)


def test_nan_estimates_are_omitted_never_zero(exporter: Exporter) -> None:
    level = 0.95
    empty = _window(
        window="1h",
        f=Estimate.missing(level),
        precision=Estimate.missing(level),
        recall=Estimate(0.5, 0.2, math.nan, math.nan, 3, 2.0, level),
        likelihood=math.nan,
        ess=math.nan,
        psi=math.nan,
        requests=0,
        labels=0,
        confusion=Confusion(math.nan, math.nan, math.nan, math.nan),
    )
    exporter.publish(Snapshot(windows=(empty,)))
    get = exporter.registry.get_sample_value
    w1 = {**W, "window": "1h"}
    for name in (
        "monitor_precision",
        "monitor_precision_ci_lower",
        "monitor_recall_ci_upper",
        "monitor_model_likelihood",
        "monitor_effective_sample_size",
        "monitor_score_psi",
        "monitor_label_completion_ratio",
    ):
        assert get(name, w1) is None, name
    assert get("monitor_f_measure", {**w1, "alpha": "0.5"}) is None
    assert get("monitor_confusion_estimate", {**w1, "cell": "tp"}) is None
    assert get("monitor_recall", w1) == 0.5  # defined value kept, undefined bounds dropped
    assert get("monitor_intrinsic_f_measure", {**w1, "alpha": "0.5"}) == 0.74
    assert get("monitor_window_audit_requests", w1) == 0  # counts are real zeros
    text = _scrape_text(exporter)
    assert "monitor_f_measure{" not in text
    assert "NaN" not in text


def test_publish_swaps_the_whole_snapshot(exporter: Exporter) -> None:
    exporter.publish(Snapshot(windows=(_window(), _window(window="7d"))))
    get = exporter.registry.get_sample_value
    assert get("monitor_f_measure", {**WA, "window": "7d"}) == 0.71
    exporter.publish(Snapshot(windows=(_window(f=Estimate(0.6, 0.1, 0.4, 0.8, 9, 9.0, 0.95)),)))
    assert get("monitor_f_measure", WA) == 0.6
    assert get("monitor_f_measure", {**WA, "window": "7d"}) is None  # expired window vanished


def test_alpha_and_segment_label_values(exporter: Exporter) -> None:
    assert [alpha_label(a) for a in (0.5, 1.0, 0.0, 0.2)] == ["0.5", "1", "0", "0.2"]
    exporter.publish(Snapshot(windows=(_window(model="spam", segment="", alpha=1.0),)))
    labels = {"model": "spam", "segment": "", "window": "24h", "alpha": "1"}
    assert exporter.registry.get_sample_value("monitor_f_measure", labels) == 0.71


def test_process_counters_histogram_and_gauges(exporter: Exporter) -> None:
    get = exporter.registry.get_sample_value
    for reason in RejectReason:  # every reason of both inputs exists at 0 before any reject
        for source in ("scored", "labels"):
            labels = {"input": source, "reason": reason.value}
            assert get("monitor_invalid_records_total", labels) == 0.0
    for name in ("monitor_records_total", "monitor_audit_requests_total"):
        assert get(name, {"model": "spam"}) == 0.0
    exporter.count_records({"fraud": 500, "spam": 20})
    exporter.count_records({"fraud": 250})
    exporter.count_requests({"fraud": 3})
    exporter.count_labels({"fraud": 2, "spam": 0})
    exporter.count_rejects(
        {("scored", RejectReason.MALFORMED_JSON): 2, ("labels", RejectReason.DUPLICATE_LABEL): 1}
    )
    exporter.count_alertmanager_errors()
    assert get("monitor_segments_folded_total", {"model": "spam"}) == 0
    exporter.count_segments_folded({"spam": 4})
    exporter.observe_batch(0.02)
    exporter.observe_batch(3.0)
    exporter.set_lags({("predictions", 1): 5, ("predictions", 2): 1234})
    exporter.set_lags({("predictions", 2): 1234})  # partition 1 moved to another process
    assert get("monitor_records_total", {"model": "fraud"}) == 750
    assert get("monitor_records_total", {"model": "spam"}) == 20
    assert get("monitor_audit_requests_total", {"model": "fraud"}) == 3
    assert get("monitor_labels_received_total", {"model": "fraud"}) == 2
    assert get("monitor_labels_received_total", {"model": "spam"}) == 0
    assert (
        get("monitor_invalid_records_total", {"input": "scored", "reason": "malformed_json"}) == 2
    )
    assert (
        get("monitor_invalid_records_total", {"input": "labels", "reason": "malformed_json"}) == 0
    )
    assert (
        get("monitor_invalid_records_total", {"input": "labels", "reason": "duplicate_label"}) == 1
    )
    assert (
        get("monitor_invalid_records_total", {"input": "labels", "reason": "unknown_request"}) == 0
    )
    assert get("monitor_alertmanager_errors_total") == 1
    assert get("monitor_segments_folded_total", {"model": "spam"}) == 4
    assert get("monitor_batch_seconds_count") == 2
    assert get("monitor_batch_seconds_sum") == pytest.approx(3.02)
    assert get("monitor_batch_seconds_bucket", {"le": "0.025"}) == 1
    assert get("monitor_batch_seconds_bucket", {"le": "+Inf"}) == 2
    assert get("monitor_consumer_lag", {"topic": "predictions", "partition": "2"}) == 1234
    assert get("monitor_consumer_lag", {"topic": "predictions", "partition": "1"}) is None
    assert get("monitor_label_budget_per_hour", {"model": "fraud"}) == 12.0
    assert get("monitor_label_budget_per_hour", {"model": "spam"}) == 3.5
    assert get("monitor_expected_records_per_hour", {"model": "fraud"}) == 5e4
    assert get("monitor_expected_records_per_hour", {"model": "spam"}) == 1e5  # the default
    assert get("monitor_build_info", {"version": __version__}) == 1
    assert get("monitor_ready") == 0
    exporter.set_ready(True)
    assert get("monitor_ready") == 1
    with pytest.raises(ValueError, match="negative"):
        exporter.count_records({"fraud": -1})


def test_alert_families(exporter: Exporter) -> None:
    alerts = [
        AlertStatus("f_below_floor", "fraud", "eu", "24h", True, 0.58, 0.6, 1.7e9),
        AlertStatus("f_dropped", "fraud", "eu", "24h", False, 0.75, 0.7),
        AlertStatus("model_untrustworthy", "fraud", "eu", "24h", False),  # nothing decided yet
    ]
    exporter.publish_alerts(alerts)
    get = exporter.registry.get_sample_value
    below = {"alert": "f_below_floor", **W}
    dropped = {"alert": "f_dropped", **W}
    untrusted = {"alert": "model_untrustworthy", **W}
    assert get("monitor_alert_active", below) == 1
    assert get("monitor_alert_bound", below) == 0.58
    assert get("monitor_alert_threshold", below) == 0.6
    assert get("monitor_alert_active", dropped) == 0
    assert get("monitor_alert_bound", dropped) == 0.75
    assert get("monitor_alert_active", untrusted) == 0
    assert get("monitor_alert_bound", untrusted) is None
    exporter.publish_alerts([])
    assert get("monitor_alert_active", below) is None


# --- HTTP --------------------------------------------------------------------------------


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _scrape_text(exporter: Exporter) -> str:
    from prometheus_client import generate_latest

    return generate_latest(exporter.registry).decode()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_endpoints_on_loopback() -> None:
    exp = Exporter(_config(port=_free_port()), registry=CollectorRegistry())
    try:
        exp.start_http()
        base = f"http://127.0.0.1:{exp.port}"
        assert exp.port == exp.config.metrics.port
        exp.publish(Snapshot(windows=(_window(),)))
        status, body = _get(f"{base}/metrics")
        assert status == 200
        assert 'monitor_f_measure{alpha="0.5",model="fraud",segment="eu",window="24h"} 0.71' in body
        assert "monitor_invalid_records_total" in body
        assert _get(f"{base}/healthz") == (200, "ok\n")
        assert _get(f"{base}/readyz")[0] == 503
        exp.set_ready(True)
        assert _get(f"{base}/readyz") == (200, "ready\n")
        exp.set_ready(False)
        assert _get(f"{base}/readyz")[0] == 503
        assert _get(f"{base}/nothing-here")[0] == 404
    finally:
        exp.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)
    exp.stop()  # idempotent


def test_port_in_use_is_a_config_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        exp = Exporter(_config(port=port), registry=CollectorRegistry())
        with pytest.raises(ConfigError, match=rf"metrics\.port.*127\.0\.0\.1:{port}"):
            exp.start_http()
        exp.stop()


def test_port_zero_binds_a_free_port() -> None:
    assert Exporter(_config(port=0), registry=CollectorRegistry()).port is None
    exp = Exporter(_config(port=0), registry=CollectorRegistry())
    try:
        exp.start_http()
        bound = exp.port
        assert bound is not None
        assert bound > 0
        assert _get(f"http://127.0.0.1:{bound}/healthz")[0] == 200
    finally:
        exp.stop()


def test_model_assisted_windows_export_the_ratio_estimates_beside(exporter: Exporter) -> None:
    ratio = (
        Estimate(0.69, 0.05, 0.59, 0.78, 180, 95.5, 0.95),
        Estimate(0.81, 0.04, 0.73, 0.88, 180, 95.5, 0.95),
        Estimate(0.61, 0.06, 0.49, 0.72, 180, 95.5, 0.95),
    )
    exporter.publish(Snapshot(windows=(_window(ratio=ratio, assisted=(True, False, True)),)))
    get = exporter.registry.get_sample_value
    assert get("monitor_f_measure", WA) == 0.71  # the exported (model-assisted) one
    assert get("monitor_f_measure_ratio", WA) == 0.69
    assert get("monitor_f_measure_ratio_ci_lower", WA) == 0.59
    assert get("monitor_f_measure_ratio_ci_upper", WA) == 0.78
    assert get("monitor_precision_ratio", W) == 0.81
    assert get("monitor_recall_ratio_ci_upper", W) == 0.72
    assisted = "monitor_estimate_model_assisted"
    assert get(assisted, {**W, "measure": "f_measure"}) == 1.0
    assert get(assisted, {**W, "measure": "precision"}) == 0.0
    assert get(assisted, {**W, "measure": "recall"}) == 1.0
    exporter.publish(Snapshot(windows=(_window(),)))  # the ratio estimator: nothing beside
    assert get("monitor_f_measure_ratio", WA) is None
    assert get(assisted, {**W, "measure": "f_measure"}) is None


def test_calibration_version_and_segment_maps(exporter: Exporter) -> None:
    from monitor.stats.budget import Calibration
    from monitor.stats.calibration import PlattMap

    get = exporter.registry.get_sample_value
    assert get("monitor_calibration_version", {"model": "fraud"}) == 0.0  # none yet
    share = "monitor_calibration_defensive_share"
    assert get(share, {"model": "fraud"}) == exporter.config.models["fraud"].defensive
    both = (("eu", PlattMap(0.1, 0.2)), ("us", PlattMap(0.0, 0.5)))
    exporter.set_calibration("fraud", Calibration(3, PlattMap(0.0, 0.4), 0.8, both), 0.1)
    assert get("monitor_calibration_version", {"model": "fraud"}) == 3.0
    assert get(share, {"model": "fraud"}) == 0.8
    # the configuration raised the share above the map's since it was fitted: in force at once
    exporter.set_calibration("fraud", Calibration(3, PlattMap(0.0, 0.4), 0.3, both), 0.5)
    assert get(share, {"model": "fraud"}) == 0.5
    for g in ("eu", "us"):
        assert get("monitor_calibration_segment_map", {"model": "fraud", "segment": g}) == 1.0
    exporter.set_calibration("fraud", Calibration(4, PlattMap(0.0, 0.4), 0.2, both[1:]), 0.1)
    assert get("monitor_calibration_version", {"model": "fraud"}) == 4.0
    assert get("monitor_calibration_segment_map", {"model": "fraud", "segment": "eu"}) is None
    assert get("monitor_calibration_segment_map", {"model": "fraud", "segment": "us"}) == 1.0
