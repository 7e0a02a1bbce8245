"""``promtool check metrics`` accepts the exposition of realistic, populated registries: the
daemon's and the Label Studio bridge's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from monitor.bridges.ls_http import BridgeMetrics
from monitor.config.schema import Config, ModelConfig
from monitor.core.alerts import AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate
from monitor.errors import RejectReason
from monitor.io.exporter import Exporter
from monitor.stats.budget import Calibration
from monitor.stats.calibration import IDENTITY, PlattMap
from monitor.stats.estimate import Confusion, Estimate

pytestmark = pytest.mark.integration

WINDOWS = (("1h", 0.05), ("24h", 0.02), ("7d", 0.01))


def _estimate(value: float, half: float, n: int) -> Estimate:
    return Estimate(value, half / 1.96, value - half, value + half, n, n * 0.6, 0.95)


def _snapshot() -> Snapshot:
    windows = []
    for model, alpha in (("fraud", 0.5), ("spam", 1.0)):
        for segment in ("", "eu", "us"):
            for window, half in WINDOWS:
                n = int(2 / half**2 / 100)
                windows.append(
                    WindowEstimate(
                        model=model,
                        segment=segment,
                        window=window,
                        alpha=alpha,
                        f=_estimate(0.72, half, n),
                        precision=_estimate(0.81, half, n),
                        recall=_estimate(0.65, half, n),
                        intrinsic_f=0.74,
                        likelihood=0.93,
                        ess=n * 0.6,
                        confusion=Confusion(410.5, 95.2, 221.0, 99_273.3),
                        records=100_000,
                        requests=n + 20,
                        labels=n,
                        pending=15,
                        missing=5,
                        psi=0.013,
                    )
                )
    return Snapshot(
        windows=tuple(windows),
        watermarks={"fraud": 1_763_771_000.0, "spam": 1_763_770_500.5},
        created_at=1_763_771_010.0,
    )


def test_promtool_accepts_the_exposition(promtool: Path) -> None:
    config = Config(
        models={m: ModelConfig(name=m) for m in ("fraud", "spam")}, default_model="fraud"
    )
    exporter = Exporter(config, registry=CollectorRegistry())
    exporter.publish(_snapshot())
    exporter.publish_alerts(
        [
            AlertStatus("f_below_floor", "fraud", "eu", "24h", True, 0.61, 0.65, 1_763_770_000.0),
            AlertStatus("f_dropped", "fraud", "eu", "24h", False, 0.74, 0.70),
            AlertStatus("model_untrustworthy", "spam", "", "7d", False, 0.93, 0.5),
        ]
    )
    exporter.count_records({"fraud": 100_000, "spam": 5_000})
    exporter.count_requests({"fraud": 240, "spam": 12})
    exporter.count_labels({"fraud": 200, "spam": 9})
    exporter.count_rejects(
        {("scored", RejectReason.MALFORMED_JSON): 3, ("labels", RejectReason.UNKNOWN_REQUEST): 1}
    )
    exporter.count_alertmanager_errors(2)
    exporter.count_segments_folded({"spam": 7})
    cal = Calibration(2, PlattMap(0.1, 0.3), 0.2, (("eu", IDENTITY),))
    exporter.set_calibration("fraud", cal, 0.1)
    for seconds in (0.004, 0.03, 0.2):
        exporter.observe_batch(seconds)
    exporter.set_lags({("predictions", 0): 12, ("audit-labels", 0): 0})
    exporter.set_ready(True)
    text = generate_latest(exporter.registry)

    families = {
        line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE ")
    }
    expected = {
        "monitor_f_measure", "monitor_f_measure_ci_lower", "monitor_f_measure_ci_upper",
        "monitor_precision", "monitor_precision_ci_lower", "monitor_precision_ci_upper",
        "monitor_recall", "monitor_recall_ci_lower", "monitor_recall_ci_upper",
        "monitor_intrinsic_f_measure", "monitor_model_likelihood", "monitor_effective_sample_size",
        "monitor_confusion_estimate", "monitor_window_records", "monitor_window_audit_requests",
        "monitor_window_labels", "monitor_labels_pending", "monitor_labels_missing",
        "monitor_label_completion_ratio", "monitor_score_psi", "monitor_scores_disagree",
        "monitor_watermark_timestamp_seconds", "monitor_records_total",
        "monitor_audit_requests_total",
        "monitor_labels_received_total", "monitor_invalid_records_total", "monitor_batch_seconds",
        "monitor_consumer_lag", "monitor_label_budget_per_hour",
        "monitor_expected_records_per_hour", "monitor_ready",
        "monitor_build_info", "monitor_alert_active", "monitor_alert_bound",
        "monitor_alert_threshold", "monitor_alertmanager_errors_total",
        "monitor_segments_folded_total", "monitor_calibration_version",
        "monitor_calibration_segment_map", "monitor_calibration_defensive_share",
    }  # fmt: skip
    assert expected <= families, sorted(expected - families)
    _check(promtool, text)


def test_promtool_accepts_the_label_studio_bridges_exposition(promtool: Path) -> None:
    metrics = BridgeMetrics()
    metrics.ready.set(1)
    for counter in (metrics.tasks_created, metrics.answers_read, metrics.labels_published):
        counter.labels("fraud").inc(3)
    metrics.latency.labels("fraud").observe(240.0)
    metrics.set_depth({"fraud": 4}, {"fraud": 1})
    text = generate_latest(metrics.registry)
    assert b"labelstudio_bridge_ready 1.0" in text
    _check(promtool, text)


def _check(promtool: Path, text: bytes) -> None:
    """``promtool check metrics`` says nothing about ``text`` and exits 0."""
    result = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=text,
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 0, output
    assert output.strip() == "", output
