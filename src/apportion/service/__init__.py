"""The live scheduler: store, executors, HTTP API, dashboard and metrics around the policy.

Its public face is its modules, imported one by one (nothing is imported here, so a
process that needs only the store does not load the web stack):
:mod:`~apportion.service.scheduler` (reconcile -> decide -> apply),
:mod:`~apportion.service.store`, :mod:`~apportion.service.executor` (the interface to what
runs the work) and :mod:`~apportion.service.executors`, :mod:`~apportion.service.api`,
:mod:`~apportion.service.config`, :mod:`~apportion.service.clock`,
:mod:`~apportion.service.auth`, :mod:`~apportion.service.dashboard`,
:mod:`~apportion.service.prom`, :mod:`~apportion.service.accounting`,
:mod:`~apportion.service.reports`, :mod:`~apportion.service.history`,
:mod:`~apportion.service.whatif_api` and :mod:`~apportion.service.whatif` (the what-if on
the service's history, :mod:`~apportion.service.history_trace`, replayed in the simulator),
:mod:`~apportion.service.validation`,
:mod:`~apportion.service.port` (what the API, dashboard and metrics may use of the scheduler),
:mod:`~apportion.service.replies` and :mod:`~apportion.service.bodies` (the API's typed
replies and request bodies), :mod:`~apportion.service.routes` (one router per resource).
"""

__all__: list[str] = []
