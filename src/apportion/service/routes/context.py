"""What every group of routes shares: the :class:`Api` context (store, scheduler, settings,
the scheduler's clock and the token dependencies) and the helpers that build errors."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
import difflib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from apportion.core import CoreError
from apportion.times import format_time

from ..auth import Principal, Rights, hash_token
from ..config import ServiceConfig
from ..port import SchedulerPort
from ..store import Store, TokenRow, UserRow

API_VERSION = "v1"
V1 = f"/{API_VERSION}"
TOKEN_CACHE_S = 30.0
BEARER = HTTPBearer(auto_error=False, description="a token from <data_dir>/tokens/<user>")


class ErrorBody(BaseModel):
    """Every error: what is wrong and where (``<field>: <problem>``)."""

    detail: str


_ERROR = {"model": ErrorBody}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "the body is not JSON text"},
    401: {**_ERROR, "description": "no valid token"},
    403: {**_ERROR, "description": "outside the token's rights; nothing changed"},
    404: {**_ERROR, "description": "no such item"},
    409: {**_ERROR, "description": "the item's state does not allow it; nothing changed"},
    413: {**_ERROR, "description": "the body is over [server] max_body_bytes"},
    422: {**_ERROR, "description": "invalid input; the detail names the field"},
    503: {**_ERROR, "description": "the scheduler is not ready yet"},
}
# the same, for a route whose answers are text: its errors are still JSON
TEXT_ROUTE_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": r["description"], "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}
    for code, r in ERRORS.items()
}
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, no spaces
# a list answered in pages: the header that says where the rows left out continue
NEXT_PAGE: dict[int | str, dict[str, Any]] = {200: {"headers": {"Link": {
    "description": "only when rows were left out (over `limit`): `<URL>; rel=\"next\"`, the "
                   "next page: this request with its cursor set",
    "schema": {"type": "string"}}}}}




class Api:
    """One app's store, scheduler and settings, with the dependencies that say who calls:
    :meth:`principal` (any valid token), :meth:`writer` (a user token: its user) and
    :meth:`public_reader` (no token needed with ``[server] public_read``)."""

    def __init__(self, store: Store, scheduler: SchedulerPort, settings: ServiceConfig) -> None:
        self.store, self.scheduler, self.settings = store, scheduler, settings
        self.now: Callable[[], float] = scheduler.clock.now
        # digest -> (token, principal, cached until): saves a query per request. Cleared
        # whenever a token is revoked or a user changed, so a revoked token is refused at
        # once; a hit is checked against the token's expiry, on the service's clock.
        self.token_cache: dict[str, tuple[TokenRow, Principal, float]] = {}

    def principal(
        self, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> Principal:
        if cred is None or not cred.credentials:
            raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        digest = hash_token(cred.credentials)
        cache = self.token_cache
        hit = cache.get(digest)
        if hit is not None and hit[2] > time.monotonic():
            token, who = hit[0], hit[1]
        else:
            found = self.store.principal_for_token(digest)
            if found is None:
                raise HTTPException(401, "invalid token", {"WWW-Authenticate": "Bearer"})
            token, who = found[1], Principal(found[0], found[1].kind)
            if len(cache) > 10_000:
                cache.clear()
            cache[digest] = (token, who, time.monotonic() + TOKEN_CACHE_S)
        if token.expires_at is not None and token.expired(self.now()):
            raise HTTPException(
                401, f"token {token.id} expired at {format_time(token.expires_at, UTC)}; ask "
                     f"an admin for a new one (apportion tokens create {token.user})",
                {"WWW-Authenticate": "Bearer"})
        return who

    def writer(
        self, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> UserRow:
        who = self.principal(cred)
        if who.read_only:
            raise fail(403, f"forbidden: a {who.kind} token of {who.name} may only read")
        return who.user

    def public_reader(
        self, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    ) -> Principal | None:
        """The dashboard's data, ``why`` and /metrics: no token needed with public_read."""
        if self.settings.server.public_read:
            return None
        return self.principal(cred)

    def rights(self, user: UserRow) -> Rights:
        return Rights.of(user, self.store.budgets())

    def forbid(self, user: UserRow | Principal, what: str) -> HTTPException:
        return fail(403, f"forbidden: {user.name} may not {what}")

    def people(self, body_field: str, names: Sequence[str]) -> None:
        """422 unless every name is a user."""
        if names:
            unknown_people(body_field, names, {u.name for u in self.store.users()})


def unknown_people(field: str, names: Sequence[str], known: set[str]) -> None:
    """422 naming the first name that is not a user, with the closest user names."""
    for i, name in enumerate(names):
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise fail(422, f"{field}.{i}: {name!r} is not a user{hint}")


def printable(value: Any) -> Any:
    """``value`` with every string made valid UTF-8 (a lone surrogate becomes ``?``). New
    input cannot hold one; rows stored before that check could, and must not make a read
    fail for everyone."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {k: printable(x) for k, x in value.items()}
    if isinstance(value, list):
        return [printable(x) for x in value]
    return value


def request_digest(body: BaseModel) -> str:
    """What makes two submissions the same request (for the Idempotency-Key)."""
    text = json.dumps(body.model_dump(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def next_page(request: Request, response: Response, cursor: str, value: str | int) -> None:
    """Say where the rows left out of this answer continue: ``Link: <URL>; rel="next"``,
    URL this request's path and query with ``cursor`` set to ``value``. Relative to the
    server (resolved against the request's URL, RFC 8288), so it holds behind a proxy
    that answers for another scheme or host."""
    url = request.url.include_query_params(**{cursor: value})
    response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'


def fail(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


def core_message(e: CoreError) -> str:
    # "workload new: gpus: ..." -> "gpus: ..." (a new workload has no id yet)
    msg = str(e)
    return msg.removeprefix("workload new: ")

