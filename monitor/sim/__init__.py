"""Simulated and local infrastructure for the demo, the tests and the benchmarks."""
