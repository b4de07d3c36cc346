"""Benchmarks of a real ``nodus apiserver`` process against raw PostgreSQL baselines (``python -m bench.run``).

Never part of ``make test``; see ``docs/benchmarks.md``.
"""
