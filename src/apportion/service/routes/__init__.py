"""The API's routes, one router per resource; :func:`apportion.service.api.create_app`
wires them (with the dashboard's, the reports' and the what-if's) into one app.

``workloads`` (``/v1/workloads``, ``/v1/queue``), ``budgets`` (``/v1/budgets``), ``hosts``
(``/v1/hosts``), ``users`` (``/v1/me``, ``/v1/users``, ``/v1/tokens``), ``audit``
(``/v1/audit``, ``/v1/health``); each module's ``router(api)`` takes the app's
:class:`~apportion.service.routes.context.Api` context (store, scheduler, settings, and who
calls)."""

from . import audit, budgets, hosts, users, workloads

__all__ = ["audit", "budgets", "hosts", "users", "workloads"]
