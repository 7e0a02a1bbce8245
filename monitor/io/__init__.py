"""Adapters to the outside world: Kafka clients, SQLite store, Prometheus exporter, Alertmanager."""
