# Sourced by scripts/demo.sh and scripts/test.sh: installs what the project needs, idempotently.
#   source scripts/bootstrap.sh EXTRA   (EXTRA: demo or test)
# Creates .venv with the package and the EXTRA's Python dependencies; for "test" also installs
# Prometheus, promtool and Alertmanager from Debian's packages when they are missing.
set -euo pipefail
extra="${1:-demo}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extra}]"
if [ "$extra" = test ] && ! { command -v promtool && command -v prometheus-alertmanager; } >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-alertmanager >/dev/null
fi
