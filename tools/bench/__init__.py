"""Benchmark harnesses behind `tps bench` and BENCHMARKS.md."""
