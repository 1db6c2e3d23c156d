"""Benchmarks of hrm-memory against its peers (run from the repository root).

- ``python -m benchmarks.bench_peers``: throughput and latency per operation
  against a dict, LangGraph's InMemoryStore, diskcache, lmdb and a naive
  file-per-key store.
- ``python -m benchmarks.bench_open``: open time, first-read latency and
  bytes on disk as the store grows.
- ``python -m benchmarks.run_all``: both, written to ``BENCHMARKS.md``.
"""
