"""Exposure: where metrics are served, and that a flood of label values cannot blow them up.

- The metrics server binds to 127.0.0.1 unless configured otherwise (config/monitor.yaml
  says why).
- A flood of new ``segment`` values is capped per model (the rest is reported as
  ``__other__``) and counted in ``monitor_segments_folded_total``; a flood of new ``model``
  values is rejected (``unknown_model``): only configured models ever become label values.
(Secrets and payloads in logs and /metrics: tests/integration/test_faults_deploy.py.)
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from prometheus_client import generate_latest

from monitor.config.load import load_config
from monitor.config.schema import Config
from monitor.free_ports import free_port
from monitor.io.exporter import Exporter
from monitor.sim.workload import WorkloadSpec, generate
from tests.property.test_daemon_fuzz import _run
from tests.unit.test_daemon_loop import TOPICS, _config

CAP = 20
REFERENCE = Path(__file__).resolve().parents[2] / "config" / "monitor.yaml"


def test_metrics_bind_to_loopback_by_default() -> None:
    assert Config().metrics.listen_address == "127.0.0.1"
    assert load_config(REFERENCE).metrics.listen_address == "127.0.0.1"
    cfg = Config()
    cfg = dataclasses.replace(cfg, metrics=dataclasses.replace(cfg.metrics, port=free_port()))
    exporter = Exporter(cfg)
    exporter.start_http()
    try:
        assert exporter._server is not None
        assert exporter._server.server_address[0] == "127.0.0.1"
    finally:
        exporter.stop()


def test_segment_and_model_floods_are_capped_and_counted(tmp_path: Path) -> None:
    w = generate(WorkloadSpec(n=3000, hours=4.0, seed=8))
    records = [{**r, "segment": f"seg-{i % 300}"} for i, r in enumerate(w.records())]
    models = [{**r, "id": f"m-{i}", "model": f"flood-{i}"} for i, r in enumerate(w.records(0, 500))]
    cfg = dataclasses.replace(_config(tmp_path), max_segments_per_model=CAP)
    values = [json.dumps(r).encode() for r in [*records, *models]]
    log, engine, registry = _run(cfg, values, [], [])
    snap = engine.estimator.snapshot()
    engine.store.close()
    segments = {x.segment for x in snap.windows} - {""}
    admitted = segments - {"__other__"}
    assert len(admitted) == CAP and "__other__" in segments
    folded = sum(1 for r in records if r["segment"] not in admitted)
    assert folded > 0
    assert (
        registry.get_sample_value("monitor_segments_folded_total", {"model": "default"}) == folded
    )
    assert registry.get_sample_value("monitor_records_total", {"model": "default"}) == len(records)
    unknown = registry.get_sample_value(
        "monitor_invalid_records_total", {"input": "scored", "reason": "unknown_model"}
    )
    assert unknown == len(models)
    dead = [json.loads(v)["reason"] for _, v in log.records(TOPICS.deadletter)]
    assert dead.count("unknown_model") == len(models)
    # every label value that reached the exposition is bounded by configuration
    engine.metrics.publish(snap)
    text = generate_latest(registry).decode()
    assert "flood-" not in text
    seg_values = set(re.findall(r'segment="([^"]*)"', text)) - {""}
    assert seg_values == segments and len(seg_values) <= CAP + 1
    assert set(re.findall(r'model="([^"]*)"', text)) == {"default"}
