"""The deploy kit against the real tools and schemas, as a cluster or ``docker compose`` would
read it before running anything.

- ``kustomize build`` renders every kustomization under ``deploy/kubernetes`` (a missing resource,
  a cycle or a patch that no longer applies fails it), and every object it renders, with every
  manifest applied on its own, validates against the Kubernetes API's schemas (kubernetes-validate,
  strict: a field the API does not know is an error, where ``kubectl apply`` may only warn) of
  the oldest and the newest release tested.
- The PodMonitors validate against the Prometheus Operator's CustomResourceDefinition, closed to
  fields it does not declare.
- ``deploy/compose.yaml`` validates against the Compose specification's schema (the one ``docker
  compose`` checks a file with).

kustomize and the two schemas come from the Go module proxy (``scripts/bootstrap.sh``, into
``.venv``); this test reads them from there and reaches no network.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import missing_component

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
SCHEMAS = Path(sys.prefix) / "share" / "activeaudit-monitor" / "schemas"
# the oldest Kubernetes release the manifests are checked against, and the newest that
# kubernetes-validate 1.37 knows
KUBERNETES_VERSIONS = ("1.30", "1.37")


def _tool_file(path: Path) -> Path:
    if not path.exists():
        missing_component(f"{path} is not there: run `source scripts/bootstrap.sh test`")
    return path


@pytest.fixture(scope="module")
def kustomize() -> Path:
    return _tool_file(Path(sys.executable).parent / "kustomize")


def _build(kustomize: Path, directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kustomize), "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, f"kustomize build {directory.relative_to(ROOT)}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _rendered(kustomize: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object of the kit: each kustomization's rendering, then the manifests applied alone."""
    in_kustomization: set[Path] = set()
    for directory in KUSTOMIZATIONS:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        in_kustomization |= {(directory / r).resolve() for r in kustomization["resources"]}
        for obj in _build(kustomize, directory):
            yield f"{directory.relative_to(ROOT)} ({obj['kind']})", obj
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name != "kustomization.yaml" and path.resolve() not in in_kustomization:
            for obj in yaml.safe_load_all(path.read_text()):
                yield str(path.relative_to(ROOT)), obj


def _closed(schema: Any) -> Any:
    """An OpenAPI schema in which every object refuses the properties it does not declare.

    The API server drops unknown fields of a custom resource (pruning) instead of refusing them,
    so a misspelled PodMonitor field would be lost without a word.
    """
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def podmonitor_validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(_tool_file(SCHEMAS / "monitoring.coreos.com_podmonitors.yaml").read_text())
    (version,) = (v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _closed(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(_tool_file(SCHEMAS / "compose-spec.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def _messages(validator: jsonschema.protocols.Validator, obj: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]


def _errors(obj: dict[str, Any], podmonitor_validator: jsonschema.protocols.Validator) -> list[str]:
    """What each schema finds wrong with ``obj``: Kubernetes' own kinds, or a PodMonitor."""
    if obj["kind"] == "PodMonitor":
        return _messages(podmonitor_validator, obj)
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"Kubernetes {version}, {list(exc.absolute_path)}: {exc.message}")
    return errors


def test_every_kubernetes_object_follows_its_schema(
    kustomize: Path, podmonitor_validator: jsonschema.protocols.Validator
) -> None:
    rendered = list(_rendered(kustomize))
    # every file of the kit was read: the three kustomizations, the Secret examples, the monitors
    assert {obj["kind"] for _, obj in rendered} == {
        "ConfigMap", "Service", "StatefulSet", "Deployment", "Secret", "PodMonitor"
    }  # fmt: skip
    assert len(rendered) == 13, [where for where, _ in rendered]
    for where, obj in rendered:
        assert not _errors(obj, podmonitor_validator), (where, _errors(obj, podmonitor_validator))


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        # a misspelled field (readinessProbe) and a port given as a word
        ("StatefulSet", ["spec", "template", "spec", "containers", 0, "readynessProbe"], {}),
        ("Service", ["spec", "ports", 0, "port"], "http"),
        ("PodMonitor", ["spec", "podMetricsEndpoints", 0, "intervall"], "30s"),
        ("PodMonitor", ["spec", "podMetricsEndpoints", 0, "scheme"], "gopher"),
    ],
)
def test_the_schemas_refuse_a_broken_manifest(
    kustomize: Path,
    podmonitor_validator: jsonschema.protocols.Validator,
    kind: str,
    path: list[str | int],
    value: object,
) -> None:
    """Each check can fail: the same objects with one field broken are refused."""
    obj = copy.deepcopy(next(o for _, o in _rendered(kustomize) if o["kind"] == kind))
    parent: Any = obj
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    errors = _errors(obj, podmonitor_validator)
    assert errors
    assert all(str(path[-1]) in e for e in errors), errors


def test_scale_out_renders_one_estimator_beside_the_samplers(kustomize: Path) -> None:
    """The overlay's patch, which ``tests/unit/test_deploy.py`` reads by hand, applies as read."""
    objects = {o["kind"]: o for o in _build(kustomize, K8S / "scale-out")}
    sts, deployment = objects["StatefulSet"], objects["Deployment"]
    (estimator,) = sts["spec"]["template"]["spec"]["containers"]
    assert estimator["args"] == ["--role", "estimator", "--group-instance-id", "$(POD_NAME)"]
    component = "app.kubernetes.io/component"
    assert sts["spec"]["selector"]["matchLabels"][component] == "estimator"
    assert sts["spec"]["template"]["metadata"]["labels"][component] == "estimator"
    assert deployment["spec"]["template"]["metadata"]["labels"][component] != "estimator"
    base = {o["kind"]: o for o in _build(kustomize, K8S / "base")}
    assert (
        base["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
        != (estimator["args"])
    )


def test_compose_file_follows_the_compose_specification(
    compose_validator: jsonschema.protocols.Validator,
) -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert not _messages(compose_validator, compose)
    broken = copy.deepcopy(compose)
    broken["services"]["monitor"]["restrat"] = "always"
    assert any("restrat" in e for e in _messages(compose_validator, broken))
