"""The streaming pipeline's pure logic: records, windows, sampler, aggregates, estimator, alerts.

Imports only ``monitor.config``, ``monitor.errors`` and ``monitor.stats``: no Kafka, Prometheus,
SQLite or HTTP (enforced by ``tests/unit/test_pure_core.py``).
"""
