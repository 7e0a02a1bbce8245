#!/usr/bin/env bash
# A real Apache Kafka broker (single-node KRaft) on 127.0.0.1 for trying the daemon by hand:
#   bash scripts/kafka-broker.sh [--port 9092] [--data-dir DIR] [--heap-mb 256] [--version 4.1.1]
# The first run fetches Kafka's jars with Maven into ~/.cache/activeaudit-monitor; Ctrl-C stops it.
# Run the integration tests against it:
#   MONITOR_TEST_KAFKA_BOOTSTRAP=127.0.0.1:PORT .venv/bin/python -m pytest -m integration
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
exec "$python" -m monitor.sim.kafka_broker "$@"
