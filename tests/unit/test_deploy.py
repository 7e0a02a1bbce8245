"""The deploy/ kit: every file loads, the pieces are wired to each other, and every metric a rule
or a dashboard panel queries is one the daemon really exports.

The exported names are collected from ``monitor.io.exporter.Exporter`` itself (a realistic Snapshot
and alert list rendered through its registry), so a renamed metric breaks this test, not the
on-call person's dashboard. Binaries (promtool, amtool) are exercised in
tests/integration/test_prometheus_rules.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from monitor.bridges.ls_http import BridgeMetrics
from monitor.cli import build_parser
from monitor.cli import main as cli_main
from monitor.config.load import load_config
from monitor.config.schema import Config, ModelConfig
from monitor.core.alerts import ALERT_SEVERITY, AlertStatus
from monitor.core.snapshot import Snapshot, WindowEstimate, WorstCase
from monitor.daemon import config_overrides
from monitor.io.alertmanager import RULE_NAMES
from monitor.io.exporter import Exporter
from monitor.runtime.engine import FLUSH_TIMEOUT_S
from monitor.stats.estimate import Confusion, Estimate

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "rules"
PROMTOOL_TESTS = DEPLOY / "prometheus" / "tests"
K8S = DEPLOY / "kubernetes"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "activeaudit-monitor.json"
JOB = "activeaudit-monitor"
BRIDGE_JOB = "activeaudit-labelstudio-bridge"  # README, Audit queue: Label Studio
RUNBOOK = "https://github.com/activeaudit/activeaudit-monitor/blob/main/README.md#alert-"
SEVERITIES = {"critical", "warning", "info"}
EXPECTED_ALERTS = {
    "MonitorDown": "critical",
    "MonitorNotReady": "warning",
    "MonitorAuditBridgeDown": "warning",
    "MonitorAuditBridgeNotReady": "warning",
    "MonitorConsumerLagGrowing": "warning",
    "MonitorNoLabelsArriving": "warning",
    "MonitorLabelBudgetExhausted": "warning",
    "MonitorInvalidRecords": "warning",
    "MonitorRecordsSkipped": "warning",
    "MonitorLabelsRejected": "warning",
    "MonitorCalibrationMapsIgnored": "warning",
    "MonitorFMeasureBelowFloor": "critical",
    "MonitorFMeasureDropped": "warning",
    "MonitorModelUntrustworthy": "warning",
}
# Series Prometheus itself provides, not the daemon.
PROMETHEUS_BUILTINS = {"up", "ALERTS"}
# Shutdown budget of the daemon on SIGTERM, in seconds, besides the poll and the flush of the
# audit requests (monitor.daemon.FLUSH_TIMEOUT_S): the producer close (5 s), the consumer close
# and the store close.
CLOSE_BUDGET_S = 10.0


# ---------------------------------------------------------------- helpers


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def deploy_yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yaml", ".yml"})


def k8s_objects() -> dict[str, dict[str, Any]]:
    """Kubernetes manifests by kind (one object per kind in deploy/kubernetes and its base)."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted([*K8S.glob("*.yaml"), *(K8S / "base").glob("*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") != "Kustomization":
                assert doc["kind"] not in objects, f"two {doc['kind']} objects"
                objects[doc["kind"]] = doc
    return objects


def alert_rules() -> list[dict[str, Any]]:
    groups = load_yaml(RULES / "alerts.yaml")["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def recording_rules() -> list[dict[str, Any]]:
    groups = load_yaml(RULES / "recording.yaml")["groups"]
    return [rule for group in groups for rule in group["rules"]]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "dashboard_generator", DEPLOY / "grafana" / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard_panels(board["panels"]) for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VAR = re.compile(r"\$\{?\w+\}?")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan", "Inf", "NaN"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression (or Grafana label_values query) selects."""
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VAR.sub("1", text)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = _LABEL_LIST.sub(" ", text)
    text = re.sub(r"\blabel_values\s*\(([^,()]*),[^)]*\)", r"\1", text)  # Grafana: label arg
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call is None and name not in _KEYWORDS:
            names.add(name)
    return names


def _window(model: str, segment: str, window: str) -> WindowEstimate:
    est = Estimate(0.71, 0.04, 0.63, 0.79, 180, 95.5, 0.95)
    return WindowEstimate(
        model=model,
        segment=segment,
        window=window,
        alpha=0.5,
        f=est,
        precision=Estimate(0.82, 0.03, 0.76, 0.88, 180, 95.5, 0.95),
        recall=Estimate(0.63, 0.05, 0.53, 0.73, 180, 95.5, 0.95),
        intrinsic_f=0.74,
        likelihood=0.91,
        ess=95.5,
        confusion=Confusion(tp=410.0, fp=90.0, fn=240.0, tn=99_260.0),
        records=100_000,
        requests=240,
        labels=180,
        pending=50,
        missing=10,
        answer_rate=(0.5, 0.9),
        pending_weight=0.2,
        missing_weight=0.05,
        worst=WorstCase((0.6, 0.8), (0.7, 0.9), (0.5, 0.75)),
        psi=0.012,
        ratio=(est, est, est),  # as with estimator: model_assisted
        assisted=(True, True, False),
    )


def exported_metric_names() -> set[str]:
    """Every sample name the daemon's exporter renders, from a realistic state."""
    config = Config(
        models={
            "fraud": ModelConfig(name="fraud", labels_per_hour=12.0),
            "spam": ModelConfig(name="spam", alpha=1.0, labels_per_hour=3.5),
        },
        default_model="fraud",
    )
    registry = CollectorRegistry()
    exporter = Exporter(config, registry=registry)
    exporter.publish(
        Snapshot(
            windows=(_window("fraud", "eu", "24h"), _window("spam", "", "1h")),
            watermarks={"fraud": 1_700_000_000.0, "spam": 1_700_000_100.0},
            created_at=1_700_000_200.0,
        )
    )
    exporter.publish_alerts(
        [
            AlertStatus("f_below_floor", "fraud", "eu", "24h", True, 0.62, 0.7),
            AlertStatus("f_dropped", "fraud", "eu", "24h", False, 0.01, 0.05),
            AlertStatus("model_untrustworthy", "spam", "", "1h", False, 0.93, 0.8),
        ]
    )
    exporter.count_records({"fraud": 1000})
    exporter.count_requests({"fraud": 3})
    exporter.count_labels({"fraud": 2})
    exporter.observe_label_latency({"fraud": [600.0]})
    exporter.observe_batch(0.02)
    exporter.set_lags({("predictions", 0): 12})
    exporter.count_skipped({("predictions", 0): 500})
    exporter.set_ready(True)
    return {sample.name for family in registry.collect() for sample in family.samples}


def bridge_metric_names() -> set[str]:
    """The Label Studio bridge's unlabelled sample names (its labelled ones need a model)."""
    registry = BridgeMetrics().registry
    return {sample.name for family in registry.collect() for sample in family.samples}


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_metric_names() | bridge_metric_names()


# ---------------------------------------------------------------- every file loads


@pytest.mark.parametrize("path", deploy_yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_loads(path: Path) -> None:
    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert docs and all(isinstance(d, dict) for d in docs), f"{path}: empty or not a mapping"


def test_the_kit_is_complete() -> None:
    for rel in (
        "prometheus/prometheus.yml",
        "prometheus/rules/recording.yaml",
        "prometheus/rules/alerts.yaml",
        "alertmanager/alertmanager.yml",
        "grafana/generate.py",
        "grafana/provisioning/dashboards/dashboards.yaml",
        "grafana/provisioning/datasources/prometheus.yaml",
        "grafana/dashboards/activeaudit-monitor.json",
        "compose.yaml",
        "config/monitor.compose.yaml",
        "kubernetes/base/kustomization.yaml",
        "kubernetes/base/statefulset.yaml",
        "kubernetes/base/configmap.yaml",
        "kubernetes/base/service.yaml",
        "kubernetes/secret.example.yaml",
        "kubernetes/labelstudio/kustomization.yaml",
        "kubernetes/labelstudio/statefulset.yaml",
        "kubernetes/labelstudio/service.yaml",
        "kubernetes/labelstudio/podmonitor.yaml",
        "kubernetes/labelstudio/secret.example.yaml",
    ):
        assert (DEPLOY / rel).is_file(), rel
    assert (ROOT / "Dockerfile").is_file()
    assert sorted(PROMTOOL_TESTS.glob("*.yaml")), "no promtool test files"


# ---------------------------------------------------------------- metric names


def test_metric_names_extracts_selectors_only() -> None:
    expr = (
        'sum by (job, model) (rate(monitor_audit_requests_total{model="$model",job=~"a|b"}'
        "[1h] offset 24h)) / on (job, model) group_left () max by (job, model) "
        "(monitor_label_budget_per_hour) > 1.5e0 unless time() - up == bool 0 "
        "or histogram_quantile(0.99, sum by (le) "
        "(rate(monitor_batch_seconds_bucket[$__rate_interval])))"
    )
    assert metric_names(expr) == {
        "monitor_audit_requests_total",
        "monitor_label_budget_per_hour",
        "up",
        "monitor_batch_seconds_bucket",
    }
    assert metric_names('label_values(monitor_window_records{model="$model"}, window)') == {
        "monitor_window_records"
    }
    assert metric_names("job_model:monitor_records:rate5m") == {"job_model:monitor_records:rate5m"}


def test_exporter_renders_the_contract_metrics(exported: set[str]) -> None:
    # the names the team contract promises, as they appear on /metrics
    for name in (
        "monitor_f_measure",
        "monitor_f_measure_ci_lower",
        "monitor_f_measure_ci_upper",
        "monitor_precision_ci_upper",
        "monitor_recall_ci_lower",
        "monitor_intrinsic_f_measure",
        "monitor_model_likelihood",
        "monitor_labels_pending",
        "monitor_labels_missing",
        "monitor_answer_rate",
        "monitor_pending_weight_ratio",
        "monitor_missing_weight_ratio",
        "monitor_f_measure_worst_case_lower",
        "monitor_f_measure_worst_case_upper",
        "monitor_label_latency_seconds_bucket",
        "monitor_records_total",
        "monitor_audit_requests_total",
        "monitor_labels_received_total",
        "monitor_invalid_records_total",
        "monitor_batch_seconds_bucket",
        "monitor_consumer_lag",
        "monitor_label_budget_per_hour",
        "monitor_ready",
        "monitor_alert_active",
        "monitor_alert_bound",
        "monitor_alert_threshold",
        "monitor_watermark_timestamp_seconds",
    ):
        assert name in exported, name


def test_rules_use_only_exported_metrics(exported: set[str]) -> None:
    recorded = {rule["record"] for rule in recording_rules()}
    known = exported | recorded | PROMETHEUS_BUILTINS
    for rule in recording_rules() + alert_rules():
        unknown = metric_names(rule["expr"]) - known
        assert not unknown, f"{rule.get('alert') or rule['record']}: not exported: {unknown}"
    # alert rules stand on raw metrics (no evaluation-order dependency on recording rules)
    for rule in alert_rules():
        assert not metric_names(rule["expr"]) & recorded, rule["alert"]


def test_dashboard_uses_only_exported_metrics(exported: set[str]) -> None:
    recorded = {rule["record"] for rule in recording_rules()}
    known = exported | recorded | PROMETHEUS_BUILTINS
    used: set[str] = set()
    for expr in dashboard_exprs():
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        unknown = names - known
        assert not unknown, f"{expr!r} uses metrics the daemon does not export: {unknown}"
        used |= names
    # the dashboard shows what the issue asks for
    for name in (
        "monitor_f_measure_ci_lower",
        "monitor_f_measure_ci_upper",
        "monitor_precision",
        "monitor_recall",
        "monitor_intrinsic_f_measure",
        "monitor_model_likelihood",
        "monitor_label_budget_per_hour",
        "monitor_labels_pending",
        "monitor_labels_missing",
        "monitor_window_labels",
        "job_model:monitor_records:rate5m",
        "job_topic:monitor_consumer_lag:sum",
        "monitor_invalid_records_total",
        "monitor_alert_active",
        "ALERTS",
    ):
        assert name in used, name


# ---------------------------------------------------------------- alert rules


def test_alert_rules_are_the_documented_set_with_metadata() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert sorted(names) == sorted(EXPECTED_ALERTS)
    header = (RULES / "alerts.yaml").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for severity in ("critical", "warning", "info"):
        assert re.search(rf"^#\s+{severity}\s+\S", header, re.MULTILINE), severity
    for rule in rules:
        name = rule["alert"]
        assert rule["labels"]["severity"] == EXPECTED_ALERTS[name], name
        assert rule["labels"]["severity"] in SEVERITIES
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == RUNBOOK + name.lower(), name
        assert f"\n### Alert {name}\n" in readme, f"{name}: no runbook section in README.md"
        assert re.fullmatch(r"\d+[smh]", rule["for"]), f"{name}: sensible 'for' expected"
    # the bridge is optional: its job, and no absent() for it
    (bridge_down,) = [r for r in rules if r["alert"] == "MonitorAuditBridgeDown"]
    assert bridge_down["expr"].strip() == f'up{{job="{BRIDGE_JOB}"}} == 0'


def test_quality_alerts_mirror_the_daemon_decisions() -> None:
    """Each decision has its rule, and the daemon's own push names it as the rule does (one
    Alertmanager group, the same routing and inhibitions)."""
    by_name = {rule["alert"]: rule for rule in alert_rules()}
    assert set(RULE_NAMES) == set(ALERT_SEVERITY)
    for alert, name in RULE_NAMES.items():
        assert f'monitor_alert_active{{alert="{alert}"}}' in by_name[name]["expr"], name
        assert by_name[name]["labels"]["severity"] == ALERT_SEVERITY[alert], name
    assert f'up{{job="{JOB}"}}' in by_name["MonitorDown"]["expr"]
    assert "absent(" in by_name["MonitorDown"]["expr"]


def test_every_alert_has_named_firing_and_silent_promtool_cases() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in sorted(PROMTOOL_TESTS.glob("*.yaml")):
        doc = load_yaml(path)
        for rule_file in doc["rule_files"]:
            assert (path.parent / rule_file).resolve().is_file(), rule_file
        for group in doc["tests"]:
            assert group.get("name"), f"{path.name}: unnamed test group"
            for case in group.get("alert_rule_test", []):
                (firing if case["exp_alerts"] else silent).add(case["alertname"])
    assert firing >= set(EXPECTED_ALERTS), set(EXPECTED_ALERTS) - firing
    assert silent >= set(EXPECTED_ALERTS), set(EXPECTED_ALERTS) - silent


def test_prometheus_scrapes_the_job_the_rules_select() -> None:
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    monitor = jobs[JOB]
    compose_config = load_config(DEPLOY / "config" / "monitor.compose.yaml")
    target = monitor["static_configs"][0]["targets"][0]
    assert target == f"monitor:{compose_config.metrics.port}"
    assert monitor.get("metrics_path", "/metrics") == "/metrics"
    listed = {(DEPLOY / "prometheus" / f).resolve() for f in config["rule_files"]}
    assert listed == {p.resolve() for p in RULES.glob("*.yaml")}
    am = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]


# ---------------------------------------------------------------- Grafana


def test_dashboard_json_is_the_generator_output() -> None:
    generator = load_generator()
    assert DASHBOARD.read_text(encoding="utf-8") == generator.render(), (
        "stale dashboard: run python deploy/grafana/generate.py"
    )


def test_dashboard_structure_is_loadable() -> None:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert board["schemaVersion"] >= 39
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "model", "segment", "window"} <= set(variables)
    assert variables["window"]["multi"] is True
    panels = list(dashboard_panels(board["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]
        if panel.get("repeat"):
            assert panel["repeat"] in variables
            assert all("$window" in t["expr"] for t in panel["targets"]), panel["title"]
    # no two panels overlap on the grid
    boxes = [p["gridPos"] for p in panels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["x"] + a["w"] <= b["x"]
                or b["x"] + b["w"] <= a["x"]
                or a["y"] + a["h"] <= b["y"]
                or b["y"] + b["h"] <= a["y"]
            )
            assert apart, (a, b)
    # the interval bands: each upper series fills down to its lower series
    band = next(p for p in panels if p["title"].startswith("F estimate"))
    fills = {
        o["matcher"]["options"]: prop["value"]
        for o in band["fieldConfig"]["overrides"]
        for prop in o["properties"]
        if prop["id"] == "custom.fillBelowTo"
    }
    legends = {t["legendFormat"] for t in band["targets"]}
    assert fills == {"upper": "lower"} and {"upper", "lower"} <= legends


def test_grafana_provisioning_points_at_the_mounted_dashboard() -> None:
    compose = load_yaml(DEPLOY / "compose.yaml")
    mounts = dict(
        (src, dst.removesuffix(":ro"))
        for src, dst in (v.split(":", 1) for v in compose["services"]["grafana"]["volumes"])
    )
    provider = load_yaml(DEPLOY / "grafana/provisioning/dashboards/dashboards.yaml")["providers"][0]
    assert provider["type"] == "file"
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    datasource = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (source,) = datasource["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"


# ---------------------------------------------------------------- compose


def test_compose_services_are_present_and_wired() -> None:
    compose = load_yaml(DEPLOY / "compose.yaml")
    services = compose["services"]
    assert {"kafka", "kafka-init", "monitor", "prometheus", "alertmanager", "grafana"} <= set(
        services
    )
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft
    assert "zookeeper" not in json.dumps(compose).lower()
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]

    monitor = services["monitor"]
    assert (DEPLOY / monitor["build"]["context"] / monitor["build"]["dockerfile"]).is_file()
    assert monitor["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    assert services["kafka-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    mounts = {}
    for volume in monitor["volumes"]:
        src, dst = volume.split(":")[:2]
        mounts[dst] = src
    config_src = mounts["/etc/activeaudit-monitor/monitor.yaml"]
    config = load_config(DEPLOY / config_src)
    assert cli_main(["check-config", "--config", str(DEPLOY / config_src)]) == 0
    assert config.kafka.bootstrap_servers == ("kafka:9092",)
    # reachable from the Prometheus container, published on the host's loopback only
    assert config.metrics.listen_address == "0.0.0.0"
    assert monitor["ports"] == [f"127.0.0.1:{config.metrics.port}:{config.metrics.port}"]
    assert mounts[str(config.data_dir)] in compose["volumes"]  # named volume for the state

    # the topics the daemon reads and writes are created by the init job
    init_script = " ".join(services["kafka-init"]["command"])
    for topic in (
        config.kafka.topics.scored,
        config.kafka.topics.requests,
        config.kafka.topics.labels,
        config.kafka.topics.deadletter,
    ):
        assert f"--topic {topic} " in init_script, topic

    prometheus_mounts = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"])
    assert prometheus_mounts["./prometheus"] == "/etc/prometheus"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    am_mounts = dict(v.split(":")[:2] for v in services["alertmanager"]["volumes"])
    assert am_mounts["./alertmanager/alertmanager.yml"] == "/etc/alertmanager/alertmanager.yml"
    # every bind-mounted source exists, and every published port stays on the loopback
    for name, service in services.items():
        for volume in service.get("volumes", []):
            src = volume.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), f"{name}: {src}"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port}"


# ---------------------------------------------------------------- Kubernetes


def test_kubernetes_objects_have_required_fields() -> None:
    objects = k8s_objects()
    assert {"StatefulSet", "ConfigMap", "Service", "Secret"} <= set(objects)
    for kind, obj in objects.items():
        assert obj["apiVersion"] and obj["metadata"]["name"], kind


def test_statefulset_probes_ports_security_and_grace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = k8s_objects()
    sts = objects["StatefulSet"]
    assert sts["apiVersion"] == "apps/v1"
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["serviceName"] == objects["Service"]["metadata"]["name"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]

    # the config the pod mounts is valid, with the SASL password from the Secret's env var
    configmap = objects["ConfigMap"]
    (config_name,) = configmap["data"]
    env_refs = re.findall(r"\{env:\s*(\w+)\}", configmap["data"][config_name])
    assert env_refs == ["MONITOR_KAFKA_PASSWORD"]
    env = {e["name"]: e for e in container["env"]}
    secret_ref = env["MONITOR_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret_ref["name"] == objects["Secret"]["metadata"]["name"]
    assert secret_ref["key"] in objects["Secret"]["stringData"]
    monkeypatch.setenv("MONITOR_KAFKA_PASSWORD", "not-a-real-password")
    path = tmp_path / config_name
    path.write_text(configmap["data"][config_name], encoding="utf-8")
    config = load_config(path)
    assert cli_main(["check-config", "--config", str(path)]) == 0
    assert "not-a-real-password" not in "".join(capsys.readouterr())
    assert config.kafka.client["sasl_plain_password"] == "not-a-real-password"
    assert config.metrics.listen_address == "0.0.0.0"

    # ports: container, probes and Service all name the configured metrics port
    (port,) = container["ports"]
    assert port["containerPort"] == config.metrics.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    (service_port,) = objects["Service"]["spec"]["ports"]
    assert service_port["targetPort"] in (port["name"], port["containerPort"])
    assert service_port["port"] == config.metrics.port
    assert objects["Service"]["spec"]["selector"].items() <= (
        spec["template"]["metadata"]["labels"].items()
    )

    # mounts: the config where the image's entrypoint reads it, the state volume at data_dir
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    entrypoint = dockerfile_instructions()["ENTRYPOINT"][-1]
    config_path = json.loads(entrypoint)[-1]
    assert f"{mounts['config']}/{config_name}" == config_path
    assert mounts["state"] == str(config.data_dir)
    assert {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]} == {"state"}

    # SIGTERM: the grace period covers a poll, the flush of the requests and the close
    shutdown = config.kafka.poll_timeout_ms / 1000 + FLUSH_TIMEOUT_S + CLOSE_BUDGET_S
    assert pod["terminationGracePeriodSeconds"] > shutdown

    # static membership under the pod's name: the args Kubernetes expands set the client key
    args = pod_args(container, "activeaudit-monitor-0")
    run = build_parser().parse_args([*json.loads(entrypoint)[1:], *args])
    assert load_config(path, config_overrides(run)).kafka.client["group_instance_id"] == (
        "activeaudit-monitor-0"
    )


def pod_args(container: dict[str, Any], pod_name: str) -> list[str]:
    """The container's args with ``$(VAR)`` expanded as Kubernetes does, for a pod named so."""
    values = {
        e["name"]: pod_name
        for e in container.get("env", [])
        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"
    }
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in container["args"]]


def test_scale_out_overlay_runs_samplers_beside_one_estimator() -> None:
    overlay = K8S / "scale-out"
    kustomization = load_yaml(overlay / "kustomization.yaml")
    assert kustomization["resources"] == ["../base", "sampler-deployment.yaml"]
    base = k8s_objects()
    sts = base["StatefulSet"]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "StatefulSet", "name": sts["metadata"]["name"]}
    ops = {op["path"]: op["value"] for op in yaml.safe_load(patch["patch"])}
    deployment = load_yaml(overlay / "sampler-deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    (sampler,) = pod["containers"]
    (estimator,) = sts["spec"]["template"]["spec"]["containers"]

    # the image's entrypoint plus each container's args is a valid command line for its role
    entrypoint = json.loads(dockerfile_instructions()["ENTRYPOINT"][-1])
    parser = build_parser()
    est_args = ops["/spec/template/spec/containers/0/args"]
    assert parser.parse_args([*entrypoint[1:], *est_args]).role == "estimator"
    sampler_run = parser.parse_args([*entrypoint[1:], *sampler["args"]])
    assert sampler_run.role == "sampler"
    # the estimator keeps its pod name as static group member; the samplers' names change on
    # every restart of the Deployment, so they stay dynamic members
    estimator_run = parser.parse_args(
        [*entrypoint[1:], *pod_args({**estimator, "args": est_args}, "activeaudit-monitor-0")]
    )
    assert estimator_run.group_instance_id == "activeaudit-monitor-0"
    assert sampler_run.group_instance_id is None

    # disjoint pods: neither controller's selector matches the other's pods
    key = "app.kubernetes.io~1component"
    est_labels = dict(sts["spec"]["template"]["metadata"]["labels"])
    est_labels["app.kubernetes.io/component"] = ops[f"/spec/template/metadata/labels/{key}"]
    est_selector = dict(sts["spec"]["selector"]["matchLabels"])
    est_selector["app.kubernetes.io/component"] = ops[f"/spec/selector/matchLabels/{key}"]
    sampler_labels = deployment["spec"]["template"]["metadata"]["labels"]
    sampler_selector = deployment["spec"]["selector"]["matchLabels"]
    assert est_selector.items() <= est_labels.items()
    assert sampler_selector.items() <= sampler_labels.items()
    assert not est_selector.items() <= sampler_labels.items()
    assert not sampler_selector.items() <= est_labels.items()
    # ...but the Service and the PodMonitor see both, under the job the rules select
    service_selector = base["Service"]["spec"]["selector"]
    assert service_selector.items() <= sampler_labels.items()
    assert service_selector.items() <= est_labels.items()
    assert sampler_labels["app.kubernetes.io/name"] == JOB

    # samplers keep no state: same image, config and secret, no volume claim, read-only root
    assert sampler["image"] == estimator["image"]
    assert sampler["env"] == [e for e in estimator["env"] if e["name"] != "POD_NAME"]
    assert sampler["ports"] == estimator["ports"]
    assert {m["mountPath"] for m in sampler["volumeMounts"]} == {"/etc/activeaudit-monitor", "/tmp"}
    assert "volumeClaimTemplates" not in deployment["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert sampler["securityContext"]["readOnlyRootFilesystem"] is True
    assert sampler["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sampler["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sampler["resources"]["requests"] and sampler["resources"]["limits"]


def test_podmonitor_yields_the_job_the_rules_select() -> None:
    monitor = k8s_objects()["PodMonitor"]
    pod_labels = k8s_objects()["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[monitor["spec"]["jobLabel"]] == JOB
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


# ---------------------------------------------------------------- Dockerfile


def dockerfile_instructions() -> dict[str, list[str]]:
    """Dockerfile instructions (continuations joined, comments dropped), by keyword."""
    lines: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    out: dict[str, list[str]] = {}
    for line in lines:
        keyword, _, rest = line.partition(" ")
        out.setdefault(keyword.upper(), []).append(rest.strip())
    return out


def test_dockerfile_runs_the_daemon_unprivileged_without_secrets() -> None:
    ins = dockerfile_instructions()
    assert ins["FROM"][-1] == "python:3.11-slim"
    user = ins["USER"][-1].split(":")[0]
    assert user not in {"0", "root"}
    assert any("pip install '.[confluent]'" in run for run in ins["RUN"])
    entry = json.loads(ins["ENTRYPOINT"][-1])
    assert entry == ["monitor", "run", "--config", "/etc/activeaudit-monitor/monitor.yaml"]
    assert ins["EXPOSE"] == [str(Config().metrics.port)]
    healthcheck = ins["HEALTHCHECK"][-1]
    assert f":{Config().metrics.port}/healthz" in healthcheck
    for env in ins.get("ENV", []):
        for word in shlex.split(env):
            assert not re.search(r"PASSWORD|SECRET|TOKEN|KEY", word.split("=")[0]), word
    assert not ins.get("ARG"), "no build arguments (they end up in the image history)"
    # everything the build copies exists, and the build copies what the package build reads
    copied: set[str] = set()
    for copy in ins["COPY"]:
        if copy.startswith("--from"):
            continue
        for src in copy.split()[:-1]:
            assert (ROOT / src).exists(), src
            copied.add(src)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for needed in ["pyproject.toml", project["readme"], *project.get("license-files", [])]:
        assert needed in copied, f"the image build needs {needed} (pyproject.toml)"
