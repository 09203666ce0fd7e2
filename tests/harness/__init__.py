"""Test harnesses that run real backing systems on this machine, for the tests (not part of
the installed package; pytest puts ``tests/`` on the import path): ``slurm_cluster`` (a
private Slurm), ``slurmdbd`` (its accounting), ``slurm_service`` (``apportion serve`` on
it) and ``accounts`` (throw-away Unix accounts)."""

__all__: list[str] = []
