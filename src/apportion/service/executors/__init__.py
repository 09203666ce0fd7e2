"""What runs the work: one module per executor of the :mod:`apportion.service.executor`
protocol, imported one by one: :mod:`~apportion.service.executors.memory` (in process,
on the injected clock), :mod:`~apportion.service.executors.local` (processes on this
machine), :mod:`~apportion.service.executors.slurm` (Slurm batch jobs), and
:mod:`~apportion.service.executors.identity` (whom work runs as). Modules whose names start
with ``_`` are private to this package.
"""

__all__: list[str] = []
