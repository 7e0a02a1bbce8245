"""The deploy/ kit's Label Studio bridge: the Kubernetes overlay and the compose profile run
``monitor queue labelstudio`` wired to the daemon's configuration, its Secret, its state volume,
the port its ``labelstudio:`` section names and the job the alert rules select.

The command lines are parsed by the monitor's own argument parser and the configuration by the
bridge's own loader, so a renamed flag or key breaks this test, not the deployment.
"""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from monitor.bridges.labelstudio import LabelStudioBridge
from monitor.bridges.ls_config import LabelStudioConfig, parse_labelstudio, state_path
from monitor.cli import build_parser
from monitor.config.load import load_config
from monitor.config.schema import Config
from tests.unit.test_deploy import BRIDGE_JOB, DEPLOY, JOB, K8S, ROOT, alert_rules, load_yaml

OVERLAY = K8S / "labelstudio"


def _bridge_run(
    argv: list[str], config_file: Path
) -> tuple[argparse.Namespace, Config, LabelStudioConfig]:
    """What ``monitor queue labelstudio`` makes of ``argv`` when the file its ``--config`` names
    (a path inside the container) holds ``config_file``."""
    args = build_parser().parse_args(argv)
    assert args.func.__name__ == "run_labelstudio", argv
    config = load_config(config_file, {"data_dir": args.data_dir})
    raw = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    return args, config, parse_labelstudio(raw, str(config_file))


def _host_port(url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def test_the_kubernetes_overlay_runs_one_bridge_on_the_daemons_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kustomization = load_yaml(OVERLAY / "kustomization.yaml")
    objects = {
        load_yaml(OVERLAY / name)["kind"]: load_yaml(OVERLAY / name)
        for name in [*kustomization["resources"], "podmonitor.yaml", "secret.example.yaml"]
    }
    assert set(objects) == {"StatefulSet", "Service", "PodMonitor", "Secret"}
    sts, service = objects["StatefulSet"], objects["Service"]
    daemon_sts = load_yaml(K8S / "base" / "statefulset.yaml")
    configmap = load_yaml(K8S / "base" / "configmap.yaml")
    kafka_secret = load_yaml(K8S / "secret.example.yaml")

    spec = sts["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 1  # one writer of the state file; two bridges import twice
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert spec["serviceName"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["image"] == daemon_sts["spec"]["template"]["spec"]["containers"][0]["image"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False

    # secrets through the environment: the token variable the section names, and every
    # {env: VAR} of the Kafka client settings, each from a Secret of the kit
    secrets = {s["metadata"]["name"]: s for s in (objects["Secret"], kafka_secret)}
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    for ref in env.values():
        assert ref["key"] in secrets[ref["name"]]["stringData"], ref
    (config_name,) = configmap["data"]
    config_text = configmap["data"][config_name]
    for var in re.findall(r"\{env:\s*(\w+)\}", config_text):
        assert var in env, var
        monkeypatch.setenv(var, "not-a-real-secret")

    # the command line, parsed as the monitor parses it: the mounted file, the state volume
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    config_file = tmp_path / config_name
    config_file.write_text(config_text, encoding="utf-8")
    argv = [*container["command"][1:], *container["args"]]
    args, config, ls = _bridge_run(argv, config_file)
    assert container["command"][0] == "monitor"
    assert str(args.config) == f"{mounts['config']}/{config_name}"
    assert state_path(ls, config.data_dir).parent == Path(mounts["state"])
    assert {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]} == {"state"}
    assert mounts["state"] != load_config(config_file).data_dir.as_posix()  # its own volume
    assert ls.token_env in env

    # one port: the section's, on the pod's interface, probed, behind the Service; the
    # webhook Label Studio is told to call is that Service's
    assert ls.listen_address == "0.0.0.0"
    (port,) = container["ports"]
    assert port["containerPort"] == ls.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == ls.port
    assert service_port["targetPort"] in (port["name"], port["containerPort"])
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert ls.webhook_url is not None
    host, webhook_port = _host_port(ls.webhook_url)
    assert host is not None and host.split(".")[0] == service["metadata"]["name"]
    assert webhook_port == ls.port

    # SIGTERM: the grace period covers the bridge's stop
    stop_timeout = inspect.signature(LabelStudioBridge.stop).parameters["timeout_s"].default
    assert pod["terminationGracePeriodSeconds"] > stop_timeout

    # scraped under the job the bridge's alert rules select, apart from the daemon's pods
    monitor_ = objects["PodMonitor"]["spec"]
    assert labels[monitor_["jobLabel"]] == BRIDGE_JOB
    assert monitor_["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor_["podMetricsEndpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    daemon_selectors = [
        load_yaml(K8S / "podmonitor.yaml")["spec"]["selector"]["matchLabels"],
        load_yaml(K8S / "base" / "service.yaml")["spec"]["selector"],
    ]
    for selector in daemon_selectors:
        assert not selector.items() <= labels.items()
        assert selector["app.kubernetes.io/name"] == JOB
    bridge_rules = [r for r in alert_rules() if r["alert"].startswith("MonitorAuditBridge")]
    assert any(f'job="{BRIDGE_JOB}"' in r["expr"] for r in bridge_rules)


def _uncommented_bridge_job() -> dict[str, Any]:
    """The commented-out scrape job of prometheus.yml, uncommented as a user would."""
    lines = (DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if f"# - job_name: {BRIDGE_JOB}" in line)
    block = []
    for line in lines[start:]:
        if not line.lstrip().startswith("#"):
            break
        block.append(line.replace("# ", "", 1))
    (job,) = yaml.safe_load("\n".join(block))
    assert isinstance(job, dict)
    return job


def test_the_compose_profile_runs_label_studio_and_the_bridge() -> None:
    compose = load_yaml(DEPLOY / "compose.yaml")
    services = compose["services"]
    studio, bridge = services["labelstudio"], services["labelstudio-bridge"]
    assert studio["profiles"] == bridge["profiles"] == ["labelstudio"]  # opt-in
    assert bridge["image"] == services["monitor"]["image"]
    assert bridge["build"] == services["monitor"]["build"]

    # Label Studio: the version the test suite runs against, its user's token the bridge's
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text(encoding="utf-8")
    version = re.search(r'^labelstudio_version="([^"]+)"', bootstrap, re.M)
    assert version is not None
    assert studio["image"] == f"heartexlabs/label-studio:{version.group(1)}"
    assert studio["environment"]["USE_DEFAULT_BANNED_SUBNETS"] == "false"  # the webhook

    mounts = dict(v.split(":")[:2] for v in bridge["volumes"])
    config_src = next(src for src, dst in mounts.items() if dst.endswith(".yaml"))
    args, config, ls = _bridge_run(bridge["entrypoint"][1:], DEPLOY / config_src)
    assert bridge["entrypoint"][0] == "monitor"
    assert mounts[config_src] == str(args.config)
    daemon_mounts = dict(v.split(":")[:2] for v in services["monitor"]["volumes"])
    assert daemon_mounts[config_src] == mounts[config_src]  # the daemon's own file
    state_volume = next(src for src, dst in mounts.items() if dst == str(args.data_dir))
    assert state_volume in compose["volumes"]
    assert state_path(ls, config.data_dir).parent == args.data_dir
    token = re.fullmatch(r"\$\{(\w+):-\}", studio["environment"]["LABEL_STUDIO_USER_TOKEN"])
    assert token is not None
    assert bridge["environment"][ls.token_env] == f"${{{token.group(1)}:-}}"

    # Label Studio's address, the webhook's and the published port are the section's
    assert _host_port(ls.url) == ("labelstudio", 8080)
    assert "127.0.0.1:8080:8080" in studio["ports"]
    assert ls.listen_address == "0.0.0.0"
    assert bridge["ports"] == [f"127.0.0.1:{ls.port}:{ls.port}"]
    assert ls.webhook_url is not None
    assert _host_port(ls.webhook_url) == ("labelstudio-bridge", ls.port)
    assert str(ls.port) in " ".join(bridge["healthcheck"]["test"])

    # the scrape job, once uncommented, is the one the rules select, at the bridge's port
    job = _uncommented_bridge_job()
    assert job["job_name"] == BRIDGE_JOB
    assert job["static_configs"] == [{"targets": [f"labelstudio-bridge:{ls.port}"]}]
