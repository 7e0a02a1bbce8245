#!/usr/bin/env bash
# The whole test suite, from a fresh machine: lint, format, types, then every test.
# Extra arguments go to pytest (e.g. -m "not slow", -k config).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# One BLAS thread per process: the suite runs the daemon, brokers and simulations side by side
# on few cores, where numpy's threaded BLAS made a 24,000-element dot product ~200x slower
# (20 ms instead of 0.1 ms) under load.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# Two workers (pytest-xdist): tests sharing a broker or Label Studio stay on one worker
# (tests/conftest.py); MONITOR_TEST_WORKERS=0 runs everything in this process.
.venv/bin/python -m pytest -n "${MONITOR_TEST_WORKERS:-2}" --dist loadgroup "$@"
