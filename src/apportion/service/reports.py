"""``GET /v1/reports/usage``: the usage accounts of :mod:`apportion.service.accounting` for
any period, as JSON, CSV or a standalone HTML page with plots.

No ``from __future__ import annotations``: FastAPI reads the handler's annotations at run
time, and they name the authentication dependency handed in."""

import threading
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from .accounting import BY, ReportError, parse_time, to_csv, to_html, usage_report
from .config import PoolsConfig
from .replies import UsageReport
from .store import Store

FORMATS = ("json", "csv", "html")
# reports computed at once; one more is refused with 429 (each holds a thread of the
# routes' shared pool and a CPU while it runs: a client retrying a slow report started
# another each time)
MAX_REPORTS = 2
RETRY_AFTER_S = 10


def reports_router(store: Store, now: Callable[[], float], user: Callable[..., Any],
                   pools: PoolsConfig | None = None) -> APIRouter:
    """The report routes; ``user`` is the app's authentication dependency (a token is
    needed, as for every /v1 route but health); ``pools`` the config's clusters, kinds and
    billing weights."""
    router = APIRouter()
    slots = threading.BoundedSemaphore(MAX_REPORTS)

    @router.get("/v1/reports/usage", tags=["reports"], response_model=UsageReport,
                responses={429: {"description": f"{MAX_REPORTS} reports are being computed "
                                 "already; Retry-After says when to ask again"}})
    def usage(
        _user: Annotated[Any, Depends(user)],
        from_: Annotated[str, Query(alias="from", description="2026-11-01, 30d (ago), epoch s")
                         ] = "30d",
        to: Annotated[str, Query(description="like from; default now")] = "now",
        by: Annotated[str, Query(description=" or ".join(BY))] = "budget",
        format: Annotated[str, Query(description=" or ".join(FORMATS))] = "json",
    ) -> UsageReport | Response:
        """Charged and free GPU-hours, owed, delivered and attainment for a period (UTC
        hours), per budget, user, or month and budget, in GPU-hours and billed units, with a
        per-pool breakdown (see docs/operations.md). At most ``MAX_REPORTS`` at once: one
        more is refused with 429."""
        t = now()
        if format not in FORMATS:
            raise HTTPException(422, f"format: must be one of {', '.join(FORMATS)}, "
                                     f"got {format!r}")
        if not slots.acquire(blocking=False):
            raise HTTPException(429, f"{MAX_REPORTS} usage reports are being computed already, "
                                "the server's limit: try again in a while",
                                {"Retry-After": str(RETRY_AFTER_S)})
        try:
            try:
                start, end = parse_time(from_, "from", t), parse_time(to, "to", t)
                if start >= end:  # named as typed, as GET /v1/audit names the same period
                    raise ReportError(f"from: must be before to ({from_} is not before {to})")
                report = usage_report(store, start, end, by, t, pools)
            except ReportError as e:
                raise HTTPException(422, str(e)) from None
            if format == "csv":
                return PlainTextResponse(to_csv(report), media_type="text/csv")
            if format == "html":
                return HTMLResponse(to_html(report))
            return UsageReport.model_validate(report)
        finally:
            slots.release()

    return router


__all__ = ["reports_router"]
