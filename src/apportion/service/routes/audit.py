"""The audit log and the liveness check."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ..auth import Principal
from ..replies import AuditEntry, Health
from .context import V1, Api


def router(api: Api) -> APIRouter:
    """``/v1/audit`` and ``/v1/health``."""
    router = APIRouter()
    store, settings, scheduler = api.store, api.settings, api.scheduler
    Reader = Annotated[Principal, Depends(api.principal)]
    v1 = V1

    @router.get(f"{v1}/audit", tags=["audit"])
    def audit(
        _who: Reader,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        target: str | None = None,
    ) -> list[AuditEntry]:
        """Audit entries, newest first: who changed what, when, old -> new."""
        return [AuditEntry.of(a) for a in store.audit(limit=limit, target=target)]

    @router.get(f"{v1}/health", tags=["health"])
    def health() -> Health:
        """Liveness: the database answers. No token needed. ``clock_behind_s``: how far
        the wall clock was set back behind the times recorded (0: it was not)."""
        store.ping()
        return Health(status="ok", executor=settings.executor.kind,
                      clock_behind_s=scheduler.clock_behind_s)

    return router
