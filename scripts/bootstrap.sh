# Sourced by scripts/demo.sh and scripts/test.sh: installs what the project needs, idempotently.
#   source scripts/bootstrap.sh EXTRA   (EXTRA: demo or test)
# Creates .venv with the package and the EXTRA's Python dependencies; for "test" also installs
# Prometheus, promtool, Alertmanager, Chromium, Java 17, Maven, OpenSSL and Go from Debian's
# packages when they are missing, fetches Apache Kafka's jars from Maven Central (once; cached in
# ~/.cache/activeaudit-monitor), builds kustomize into .venv/bin and copies the Compose and
# Prometheus Operator schemas into .venv/share from the Go module proxy, and installs Label
# Studio (PyPI) into a virtualenv of its own outside the repository ($MONITOR_LABELSTUDIO_VENV,
# default ~/.cache/activeaudit-monitor/labelstudio-venv): it pins many packages and must never
# share the project's .venv.
set -euo pipefail
extra="${1:-demo}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extra}]"
if [ "$extra" = test ]; then
  missing=""
  command -v promtool >/dev/null || missing="$missing prometheus"
  command -v prometheus-alertmanager >/dev/null || missing="$missing prometheus-alertmanager"
  command -v chromium >/dev/null || missing="$missing chromium"
  command -v java >/dev/null || missing="$missing openjdk-17-jre-headless"
  command -v mvn >/dev/null || missing="$missing maven"
  # the TLS certificates of the SASL_SSL test broker (monitor/sim/kafka_broker.py: OpenSSL 3)
  command -v openssl >/dev/null || missing="$missing openssl"
  # kustomize and the deploy kit's schemas (tests/integration/test_deploy_schemas.py)
  command -v go >/dev/null || missing="$missing golang-go"
  if [ -n "$missing" ]; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      $missing >/dev/null
  fi
  # the real Apache Kafka broker of the integration tests (monitor/sim/kafka_broker.py)
  .venv/bin/python -m monitor.sim.kafka_broker --fetch >/dev/null
  # the deploy kit's tools, from the Go module proxy: kustomize (needs Go 1.24 or later; with an
  # older Go the test skips, and fails under CI), the Compose specification's schema (as `docker
  # compose` validates with) and the Prometheus Operator's PodMonitor CRD
  if [ ! -x .venv/bin/kustomize ] && ! GOBIN="$PWD/.venv/bin" \
      go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.0; then
    echo "bootstrap: kustomize not built (Go $(go env GOVERSION), needs go1.24)" >&2
  fi
  schemas=.venv/share/activeaudit-monitor/schemas
  for module_file in \
      github.com/compose-spec/compose-go/v2@v2.16.2:schema/compose-spec.json \
      github.com/prometheus-operator/prometheus-operator@v0.85.0:example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml; do
    module="${module_file%%:*}" file="${module_file#*:}"
    if [ ! -f "$schemas/$(basename "$file")" ]; then
      go mod download "$module"
      install -D -m 644 "$(go env GOMODCACHE)/$module/$file" "$schemas/$(basename "$file")"
    fi
  done
fi
labelstudio_version="1.23.2"
ls_venv="${MONITOR_LABELSTUDIO_VENV:-$HOME/.cache/activeaudit-monitor/labelstudio-venv}"
if [ "$extra" = test ] && ! "$ls_venv/bin/python" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('label-studio') != '$labelstudio_version')" \
    2>/dev/null; then
  "$python" -m venv "$ls_venv"
  "$ls_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "label-studio==$labelstudio_version"
fi
