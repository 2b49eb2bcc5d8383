"""Benchmarks: each prints one JSON line (``chrono bench NAME``)."""
