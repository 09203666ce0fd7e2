"""``POST /v1/whatif``: the service's own history of a period replayed through the
simulator under the current and a proposed setting (``apportion.whatif``; docs/api.md).

Allowed to admins, and to managers for their own subtree: a manager may propose weights of
the nodes whose weight they may set (``Rights.can_set_weight``) and sees the rows of the
nodes they manage; policy settings (``set``) are global, so only admins may propose them.
A replay takes seconds to minutes (a whole period, twice): the handler runs in FastAPI's
thread pool, never in the scheduler's thread."""

# No "from __future__ import annotations": FastAPI reads the handler's annotations at
# runtime, and they name a dependency handed in by create_app.
import dataclasses
import typing
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException

from apportion.core import (
    NUMBER_KNOBS,
    DurationError,
    PolicyConfig,
    parse_duration,
    parse_number,
)

from .auth import Rights
from .bodies import WhatifBody
from .config import ServiceConfig
from .replies import Whatif
from .store import Store, UserRow


def _setting(key: str, value: Any) -> Any:
    """A ``set`` value as the type of its field (durations accept "3d")."""
    from apportion.sim.engine import SIM_NUMBER_KNOBS, SimConfig

    kinds: dict[str, Any] = {}
    for cls in (PolicyConfig, SimConfig):
        hints = typing.get_type_hints(cls)
        # a compiled build keeps only plain types (``float | None`` reads as ``type``): an
        # optional duration is known by its None default, as the CLI's --set knows it
        kinds.update({f.name: float | None if f.default is None else hints[f.name]
                      for f in dataclasses.fields(cls)})
    if key not in kinds:
        raise ValueError(f"unknown key {key!r}; valid keys: {', '.join(sorted(kinds))}")
    kind = kinds[key]
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{key}: must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ValueError(f"{key}: must be a whole number, got {value!r}")
        return int(value)
    if value is None and type(None) in typing.get_args(kind):
        return None
    if key in NUMBER_KNOBS or key in SIM_NUMBER_KNOBS:
        try:
            return parse_number(value)
        except DurationError as e:
            raise ValueError(f"{key}: {e}") from None
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{key}: must be a number of seconds or a duration, got {value!r}")
    try:
        return parse_duration(value)
    except DurationError as e:
        raise ValueError(f"{key}: {e}") from None


def whatif_router(store: Store, settings: ServiceConfig,
                  current_user: Callable[..., UserRow], now: Callable[[], float]) -> APIRouter:
    router = APIRouter()
    User = Annotated[UserRow, Depends(current_user)]

    @router.post("/v1/whatif", tags=["budgets"])
    def whatif(body: WhatifBody, user: User) -> Whatif:
        """Replay the history of the period before ``until`` with the current settings and
        with ``set_weight`` and ``set`` applied: per-budget attainment, delivered GPU-hours,
        waits and preemptions side by side (docs/simulator.md, "What-if on live history")."""
        from apportion.whatif import WhatifError, compare, load_history

        rights = Rights.of(user, store.budgets())
        if not rights.admin:
            if body.set:
                raise HTTPException(403, f"forbidden: {user.name} may not propose policy "
                                         "settings (set): admins only")
            if not any(user.name in m for m in rights.managers.values()):
                raise HTTPException(403, f"forbidden: {user.name} manages no budget")
            for path in body.set_weight:
                if not rights.can_set_weight(path):
                    raise HTTPException(403, f"forbidden: {user.name} may not set the "
                                             f"weight of {path}")
        try:
            since = parse_duration(body.since)
        except DurationError as e:
            raise HTTPException(422, f"since: {e}") from None
        try:
            proposed = {k: _setting(k, v) for k, v in body.set.items()}
        except ValueError as e:
            raise HTTPException(422, f"set: {e}") from None
        try:
            history = load_history(store, since, now() if body.until is None else body.until,
                                   settings.pools)
            result = compare(history, settings.policy, body.set_weight, proposed).result
        except WhatifError as e:
            raise HTTPException(422, f"{e.field}: {e}") from None
        if not rights.admin:  # a manager sees their own subtree
            result["budgets"] = [r for r in result["budgets"] if rights.manages(r["budget"])]
            for pool in result.get("pools", ()):
                pool["budgets"] = [r for r in pool["budgets"] if rights.manages(r["budget"])]
        return Whatif.model_validate(result)

    return router
