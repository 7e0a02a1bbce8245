#!/usr/bin/env bash
# The whole test suite, from a fresh machine: lint, format, types, then every test.
# Extra arguments go to pytest (e.g. -m "not slow", -k config).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
