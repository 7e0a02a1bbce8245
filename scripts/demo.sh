#!/usr/bin/env bash
# The main job end to end from a fresh machine: a local broker, a scored stream with a
# degradation half-way, the daemon, a simulated audit team, metrics on 127.0.0.1.
# Extra arguments go to `monitor demo` (see `monitor demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh demo
exec .venv/bin/monitor demo "$@"
