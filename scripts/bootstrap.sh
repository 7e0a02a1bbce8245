# Sourced by scripts/demo.sh and scripts/test.sh: installs what the project needs, idempotently.
#   source scripts/bootstrap.sh EXTRA   (EXTRA: demo or test)
# Creates .venv with the package and the EXTRA's Python dependencies; for "test" also installs
# Prometheus, promtool, Alertmanager and Chromium from Debian's packages when they are missing,
# and Label Studio (PyPI) into a virtualenv of its own outside the repository
# ($MONITOR_LABELSTUDIO_VENV, default ~/.cache/activeaudit-monitor/labelstudio-venv): it pins
# many packages and must never share the project's .venv.
set -euo pipefail
extra="${1:-demo}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extra}]"
if [ "$extra" = test ] && ! { command -v promtool && command -v prometheus-alertmanager \
    && command -v chromium; } >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-alertmanager chromium >/dev/null
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
