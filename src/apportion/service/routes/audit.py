"""The audit log and the liveness check."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from apportion import __version__
from apportion.core.names import did_you_mean

from .. import validation as v
from ..accounting import ReportError, parse_time
from ..auth import Principal
from ..replies import AuditEntry, Health
from ..store import NotFound
from .context import NEXT_PAGE, V1, Api, fail, next_page


def router(api: Api) -> APIRouter:
    """``/v1/audit`` and ``/v1/health``."""
    router = APIRouter()
    store, settings, scheduler = api.store, api.settings, api.scheduler
    Reader = Annotated[Principal, Depends(api.principal)]
    v1 = V1

    @router.get(f"{v1}/audit", tags=["audit"], responses=NEXT_PAGE)
    def audit(
        _who: Reader,
        request: Request,
        response: Response,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        target: str | None = None,
        actor: Annotated[str | None, Query(description="only entries by this user (or "
                                                       "scheduler, config)")] = None,
        action: Annotated[str | None, Query(description="only this action (budget.weight) or "
                                                        "family (budget: every budget.*)")
                          ] = None,
        from_: Annotated[str | None, Query(alias="from", description="only entries at or "
                                           "after: 2026-11-01, 30d (ago), epoch s")] = None,
        to: Annotated[str | None, Query(description="only entries before; like from")
                      ] = None,
        before: Annotated[int | None, Query(
            ge=1, le=v.MAX_ID,
            description="an entry's id: only older entries (the next page's cursor)",
        )] = None,
    ) -> list[AuditEntry]:
        """Audit entries, newest first: who changed what, when, old -> new; of a target, by
        an actor, of an action or family, in a period. With more than ``limit``, a ``Link``
        header names the next page."""
        now = api.now()
        try:
            since = None if from_ is None else parse_time(from_, "from", now)
            until = None if to is None else parse_time(to, "to", now)
        except ReportError as e:
            raise fail(422, str(e)) from None
        if since is not None and until is not None and since >= until:
            # an empty period is a mistake, as the usage report says of it
            raise fail(422, f"from: must be before to ({from_} is not before {to})")
        rows = store.audit(limit=limit + 1, target=target, before_id=before, actor=actor,
                           action=action, since=since, until=until)
        if not rows and (actor or action):  # nothing: is it a name nothing has?
            unknown_names(actor, action)
        if not rows and target:
            unknown_target(target)
        if len(rows) > limit:  # one more than asked for: there are older ones
            rows = rows[:limit]
            next_page(request, response, "before", rows[-1].id)
        return [AuditEntry.of(a) for a in rows]

    def unknown_names(actor: str | None, action: str | None) -> None:
        """422 for an ``actor`` that is no user and has no entry, or an ``action`` (or
        family) no entry has, with the closest names: a filter that names nothing is a
        typo, not an empty audit. Asked only when a filtered page came back empty: the
        names are read from the whole audit."""
        actors, actions = store.audit_names()
        known = actors | {u.name for u in store.users()}
        if actor and actor not in known:
            raise fail(422, f"actor: no user and no entry by {actor!r}"
                            + did_you_mean(actor, known, quote=True))
        families = actions | {a.partition(".")[0] for a in actions}
        if action and action not in families:
            raise fail(422, f"action: no entry of {action!r}"
                            + did_you_mean(action, families, quote=True))

    def unknown_target(target: str) -> None:
        """422 for a ``target`` that no entry is about and that is no budget, host, user
        or workload, with the closest budget, host and user names: a mistyped target read
        as an empty audit looks like a target nothing happened to."""
        if store.audit(limit=1, target=target):
            return
        known = ({b.path for b in store.budgets()} | {h.name for h in store.hosts()}
                 | {u.name for u in store.users()})
        if target in known:
            return
        try:
            store.get_workload(target)
            return
        except NotFound:
            pass
        raise fail(422, f"target: no budget, host, user or workload {target!r} and no entry "
                        f"about it" + did_you_mean(target, known, quote=True))

    @router.get(f"{v1}/health", tags=["health"])
    def health() -> Health:
        """Liveness: the database answers. No token needed. ``clock_behind_s``: how far
        the wall clock was set back behind the times recorded (0: it was not);
        ``version`` and ``schema_revision``: this server's release and its store's schema
        (what a client of another release names when it cannot read an answer)."""
        revision = store.revision()  # a query: the database answers
        return Health(status="ok", executor=settings.executor.kind,
                      clock_behind_s=scheduler.clock_behind_s, version=__version__,
                      schema_revision=revision)

    return router
