"""``POST /v1/whatif``: the service's own history of a period replayed through the
simulator under the current and a proposed setting (:mod:`apportion.service.whatif`; docs/api.md).

Allowed to admins, and to managers for their own subtree: a manager may propose weights of
the nodes whose weight they may set (``Rights.can_set_weight``) and sees the rows of the
nodes they manage; policy settings (``set``) are global, so only admins may propose them.
A replay takes seconds to minutes (a whole period, twice) of a CPU: it runs in a thread of
:class:`Replays`' own pool, never in FastAPI's (which every route shares) nor in the
scheduler's, and only a few at once, one per user; more are refused at once (429)."""

# No "from __future__ import annotations": FastAPI reads the handler's annotations at
# runtime, and they name a dependency handed in by create_app.
import asyncio
import dataclasses
import threading
import time
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException
from starlette.concurrency import run_in_threadpool

from apportion.core import (
    NUMBER_KNOBS,
    DurationError,
    PolicyConfig,
    parse_duration,
    parse_number,
)
from apportion.text import as_written

from .auth import Rights, weight_owner
from .bodies import WhatifBody
from .config import ServiceConfig
from .replies import Whatif
from .routes.context import ErrorBody
from .store import Store, UserRow
from .validation import duration_seconds

T = TypeVar("T")
# a replay takes seconds to minutes: the refused client is told to come back in a while
RETRY_AFTER_S = 10


class Replays:
    """The what-if replays running now, each in a thread of a pool of their own: at most
    ``limit`` at once (``[server] max_whatif_replays``) and one per user. One more is
    refused at once with 429 and a ``Retry-After``, never queued (a queued request would
    hold its connection for minutes): replays without a bound took every thread FastAPI
    shares among the routes, and the CPU, from the rest of the API."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="apportion-whatif")
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}  # user -> when their replay started (monotonic)

    async def run(self, user: str, replay: Callable[[], T]) -> T:
        """``replay()`` for ``user`` in this pool; 429 if one of theirs, or ``limit``
        replays, run already. The slot is held until the replay ends, even when its client
        went away meanwhile."""
        with self._lock:
            if user in self._started:
                running = time.monotonic() - self._started[user]
                raise self._busy(f"a what-if replay of yours is already running (for "
                                 f"{running:.0f} s): one runs at a time per user; try again "
                                 "when it ends")
            if len(self._started) >= self.limit:
                raise self._busy(f"{len(self._started)} what-if replays are already running, "
                                 "the server's limit ([server] max_whatif_replays): try again "
                                 "in a while")
            self._started[user] = time.monotonic()
        try:
            future = self._pool.submit(replay)
        except BaseException:
            self._free(user)
            raise
        # freed when the replay ends, before its answer is sent (the first callback), or
        # when it is cancelled unstarted (its client gone)
        future.add_done_callback(lambda _: self._free(user))
        return await asyncio.wrap_future(future)

    def _free(self, user: str) -> None:
        with self._lock:
            del self._started[user]

    @staticmethod
    def _busy(detail: str) -> HTTPException:
        return HTTPException(429, detail, {"Retry-After": str(RETRY_AFTER_S)})


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
            raise ValueError(f"{key}: must be true or false, got {as_written(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ValueError(f"{key}: must be a whole number, got {as_written(value)}")
        return int(value)
    if value is None and type(None) in typing.get_args(kind):
        return None
    if key in NUMBER_KNOBS or key in SIM_NUMBER_KNOBS:
        try:
            return parse_number(value)
        except DurationError as e:
            raise ValueError(f"{key}: {e}") from None
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{key}: must be a number of seconds or a duration, got "
                         f"{as_written(value)}")
    try:
        return duration_seconds(value)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


def whatif_router(store: Store, settings: ServiceConfig,
                  current_user: Callable[..., UserRow], now: Callable[[], float]) -> APIRouter:
    router = APIRouter()
    User = Annotated[UserRow, Depends(current_user)]
    replays = Replays(settings.server.max_whatif_replays)

    def checked(body: WhatifBody, user: UserRow) -> Callable[[], Whatif]:
        """The replay ``body`` asks for, once the caller's rights and the inputs are checked
        (403 or 422 here, before the replay takes a slot)."""
        # the replay (and the simulator with it) is loaded when a what-if is asked, not at
        # the server's start
        from .whatif import WhatifError, check_paths, compare, load_history

        budgets = store.budgets()
        try:  # a mistyped budget is said so (and the closest one) before any right on it
            check_paths(body.set_weight, [b.path for b in budgets])
        except WhatifError as e:
            raise HTTPException(422, f"{e.field}: {e}") from None
        rights = Rights.of(user, budgets)
        if not rights.admin:
            if body.set:
                raise HTTPException(403, f"forbidden: {user.name} may not propose policy "
                                         "settings (set): admins only")
            if not any(user.name in m for m in rights.managers.values()):
                raise HTTPException(403, f"forbidden: {user.name} manages no budget")
            for path in body.set_weight:
                if not rights.can_set_weight(path):
                    raise HTTPException(403, f"forbidden: {user.name} may not propose the "
                                             f"weight of budget {path} (set_weight: "
                                             f"{weight_owner(path)})")
        since = parse_duration(body.since)  # checked in the body (validation.check_duration)
        try:
            proposed = {k: _setting(k, v) for k, v in body.set.items()}
        except ValueError as e:
            raise HTTPException(422, f"set: {e}") from None

        def replay() -> Whatif:
            try:
                at = now()
                history = load_history(store, since, at if body.until is None else body.until,
                                       settings.pools, now=at)
                result = compare(history, settings.policy, body.set_weight, proposed).result
            except WhatifError as e:
                raise HTTPException(422, f"{e.field}: {e}") from None
            if not rights.admin:  # a manager sees their own subtree
                result["budgets"] = [r for r in result["budgets"]
                                     if rights.manages(r["budget"])]
                for pool in result.get("pools", ()):
                    pool["budgets"] = [r for r in pool["budgets"]
                                       if rights.manages(r["budget"])]
            return Whatif.model_validate(result)

        return replay

    @router.post("/v1/whatif", tags=["budgets"], responses={429: {
        "model": ErrorBody, "description": "a replay of the caller's, or [server] "
        "max_whatif_replays replays, run already; Retry-After says when to ask again"}})
    async def whatif(body: WhatifBody, user: User) -> Whatif:
        """Replay the history of the period before ``until`` with the current settings and
        with ``set_weight`` and ``set`` applied: per-budget attainment, delivered GPU-hours,
        waits and preemptions side by side (docs/simulator.md, "What-if on live history").
        One replay at a time per user, and at most ``[server] max_whatif_replays`` at once:
        one more is refused with 429."""
        # the checks read the store: in the shared pool, briefly, as every route does
        replay = await run_in_threadpool(checked, body, user)
        return await replays.run(user.name, replay)

    return router
