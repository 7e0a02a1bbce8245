# Sourced by scripts/demo.sh and scripts/test.sh: installs what the project needs, idempotently.
#   source scripts/bootstrap.sh EXTRA   (EXTRA: demo or test)
# Creates .venv with the package and the EXTRA's Python dependencies; for "test" also installs
# Prometheus, promtool, Alertmanager, Chromium, Java 17, Maven and OpenSSL from Debian's packages when they
# are missing, fetches Apache Kafka's jars from Maven Central (once; cached in
# ~/.cache/activeaudit-monitor), and installs Label Studio (PyPI) into a virtualenv of its own
# outside the repository ($MONITOR_LABELSTUDIO_VENV, default
# ~/.cache/activeaudit-monitor/labelstudio-venv): it pins many packages and must never share the
# project's .venv.
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
