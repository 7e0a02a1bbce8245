"""In-memory stand-ins for tests and benchmarks: a broker log, its source and sink."""
