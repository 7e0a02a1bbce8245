"""Benchmarks of the estimators: run with ``.venv/bin/python -m benchmarks.<name>``."""
