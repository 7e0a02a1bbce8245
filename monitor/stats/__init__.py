"""The pure statistical core: numpy/scipy only, no Kafka, Prometheus, SQLite or logging."""
