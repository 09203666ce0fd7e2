"""Benchmarks that print figures (speed and memory targets live here, not in tests).

``apportion bench`` runs :mod:`~apportion.bench.decide` (one pass on a large, full
cluster) and :mod:`~apportion.bench.replay` (a whole replay under each policy); nothing is
imported here."""

__all__: list[str] = []
