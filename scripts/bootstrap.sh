# Sourced by scripts/demo.sh and scripts/test.sh: installs what the project needs, idempotently.
#   source scripts/bootstrap.sh EXTRA   (EXTRA: demo or test)
# Creates .venv with the package and the EXTRA's Python dependencies; for "test" also installs
# Prometheus, promtool, Alertmanager, Java 17 and Maven from Debian's packages when they are missing,
# and fetches Apache Kafka's jars from Maven Central (once; cached in ~/.cache/activeaudit-monitor).
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
  command -v java >/dev/null || missing="$missing openjdk-17-jre-headless"
  command -v mvn >/dev/null || missing="$missing maven"
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
