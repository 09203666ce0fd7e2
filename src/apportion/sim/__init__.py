"""The simulator: replays workload submissions against the policy of :mod:`apportion.core`.

Its public face is its modules, imported one by one (the report needs matplotlib and the
sweep's Ray engine needs Ray, so nothing is imported here): :mod:`~apportion.sim.model`
(jobs, host events, scenarios), :mod:`~apportion.sim.scenarios` (the built-in ones),
:mod:`~apportion.sim.traces` (real histories in), :mod:`~apportion.sim.engine` (the
discrete-event engine), :mod:`~apportion.sim.legacy` (the old priority scheduler),
:mod:`~apportion.sim.metrics`, :mod:`~apportion.sim.run` (run policies, write the outputs),
:mod:`~apportion.sim.report` (the HTML report), :mod:`~apportion.sim.sweep` and
:mod:`~apportion.sim.sweep_ray` (grids of settings).
"""

__all__: list[str] = []
