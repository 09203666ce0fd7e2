"""The HTTP API (FastAPI): ``create_app(store, scheduler, settings)`` wires the routes of
:mod:`apportion.service.routes` (one router per resource), the dashboard's, the reports' and
the what-if's into one app, with the checks every request passes.

Handlers validate, check rights (:mod:`apportion.service.auth`), write to the store (one
transaction each) and wake the scheduler; they never touch the scheduler's ClusterState,
which only the scheduler thread changes. Host state changes go through the scheduler, which
updates its state and the store together. Errors are JSON ``{"detail": "<field>: <problem>"}``:
400 a body that is not JSON text, 401 without a valid token, 403 outside one's rights
(nothing changed), 404 unknown item, 409 when the item's state does not allow the change,
413 a body over ``[server] max_body_bytes``, 422 on invalid input (every field strictly
typed and bounded: :mod:`apportion.service.validation`), 429 a what-if while the replays it
may run already run (:mod:`apportion.service.whatif_api`). Every refusal changes nothing.
Routes are listed in docs/api.md, rights in docs/security.md; OpenAPI at /docs.
"""

import difflib
import json
import logging

from fastapi import Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.datastructures import URL
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import validation as v
from .config import ServiceConfig
from .dashboard import dashboard_router
from .port import SchedulerPort
from .reports import reports_router
from .routes import audit, budgets, hosts, users, workloads
from .routes.context import API_VERSION, ERRORS, Api, fail
from .store import Conflict, NotFound, Store, database_error
from .whatif_api import whatif_router

log = logging.getLogger("apportion.api")

__all__ = ["API_VERSION", "BodyLimit", "SlashRedirect", "create_app"]


# ---- errors -----------------------------------------------------------------------------
NESTED_TOO_DEEP = ("body: nested too deep: more arrays or objects within each other than the "
                   "JSON parser takes (about 1000 levels); send it flatter")


def _field_errors(exc: RequestValidationError, content_type: str | None = None) -> str:
    if isinstance(exc.body, bytes):  # FastAPI reads a body as JSON only when it says so
        sent = f"it came as {content_type}" if content_type else "it came without one"
        return f"body: send the body as JSON with Content-Type: application/json ({sent})"
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if loc[:1] == ["query"] and len(loc) > 1:  # a query parameter by its name, as
            loc = loc[1:]                           # the handlers' own checks name it
        where = ".".join(loc) if loc else "body"
        if loc[:1] == ["header"] and len(loc) == 2:  # the header as people write it
            where = "-".join(w.capitalize() for w in loc[1].split("-"))
        if loc[-1:] == ["[key]"]:  # pydantic's mark of a refused key: set_weight.<key>.[key]
            where = f"{'.'.join(loc[:-2])}: key {loc[-2]!r}"
        if err.get("type") == "json_invalid":
            where = "body"
            msg = f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
            msg += _json_position(exc.body, err.get("loc", ()))
        else:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            item = err.get("ctx", {}).get("error")
            if isinstance(item, v.ItemError):  # one item of the list: command.0
                where = f"{where}.{item.index}"
        parts.append(f"{where}: {msg}")
    # only the first few: a list of 10,000 bad names must not make a 10,000-line answer
    return "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")


def _json_position(doc: object, loc: tuple[object, ...]) -> str:
    """Where the parser stopped, as " at line 3, column 14" (from the character offset
    FastAPI puts after "body" in the error's location), or "" if it did not say."""
    pos = loc[1] if len(loc) > 1 else None
    if not isinstance(doc, str) or not isinstance(pos, int) or isinstance(pos, bool):
        return ""
    line, column = doc.count("\n", 0, pos) + 1, pos - doc.rfind("\n", 0, pos)
    return f" at line {line}, column {column}"


def _check_param(where: str, value: str, query: bool) -> None:
    try:
        v.check_text(value, v.MAX_QUERY if query else v.MAX_PATH + 64)
    except ValueError as e:
        raise fail(422, f"{where}: {e}") from None


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route reads, its dependencies' included."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _check_params(request: Request) -> None:
    """Query and path parameters without NUL (PostgreSQL cannot compare them) and bounded,
    so that a read answers the same on both databases; a query parameter at most once (the
    routes read one value, the last: ``?user=ann&user=bob`` listed bob's work alone).
    A query parameter is named as the routes' own checks name it, by its name alone
    (``limit: ...``, as ``after: ...``); a path parameter as ``path.<name>``."""
    for key, value in request.query_params.multi_items():
        _check_param(key, key, query=True)
        _check_param(key, value, query=True)
    route = request.scope.get("route")
    if isinstance(route, APIRoute) and route.path.startswith("/v1/"):
        known = _query_names(route.dependant)
        for key in request.query_params:
            if key not in known:  # a typo (?stauts=) or a guess (?page=) answered as if absent
                close = difflib.get_close_matches(key, sorted(known), n=1)
                takes = ", ".join(sorted(known)) if known else "none"
                raise fail(422, f"{key}: unknown parameter"
                                + (f"; did you mean {close[0]}?" if close else "")
                                + f" ({request.method} {route.path} takes: {takes})")
    for key in request.query_params:
        if len(values := request.query_params.getlist(key)) > 1:
            shown = ", ".join(repr(x[:40]) for x in values[:5])
            raise fail(422, f"{key}: given {len(values)} times ({shown}"
                            f"{', ...' if len(values) > 5 else ''}); give it once")
    for key, value in request.path_params.items():
        _check_param(f"path.{key}", str(value), query=False)


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before it is read
    whole, whether it says its Content-Length or comes chunked. At most ``limit`` bytes
    are held; the app then reads them as if from the client. (Starlette's own limit
    answers in plain text; this one answers like every other refusal.) A body that is not
    UTF-8 (or holds a NUL byte, as UTF-16 and UTF-32 do) gets 400 saying so: JSON is UTF-8,
    and the parser would otherwise read some such bodies as UTF-16 (and take them), answer
    others 'malformed JSON: Expecting value', others with no field."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await self._refuse(send, length.decode("latin-1"))
            return
        held: list[Message] = []
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break  # the client went away: let the app see it
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send, f"more than {self.limit}")
                return
            if not message.get("more_body", False):
                break

        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.request")
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            await self._answer(send, 400, f"body: not UTF-8 text (byte 0x{body[e.start]:02x} "
                                          f"at offset {e.start}); send JSON as UTF-8")
            return
        # JSON text in UTF-8 holds no NUL byte (inside a string it is written \u0000), while
        # UTF-16 and UTF-32 put one beside every ASCII character: valid UTF-8 all the same,
        # and the parser would take the body for UTF-16 and read it
        if (nul := body.find(b"\x00")) >= 0:
            await self._answer(send, 400, f"body: not UTF-8 text (byte 0x00 at offset {nul}: "
                                          "UTF-16 or UTF-32?); send JSON as UTF-8")
            return

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, got: str) -> None:
        await self._answer(send, 413, f"body: must be at most {self.limit} bytes "
                                      f"([server] max_body_bytes), got {got}")

    async def _answer(self, send: Send, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class SlashRedirect:
    """ASGI middleware: a request whose path ends with "/" and that no route takes as it
    is, but would take without the slash, is redirected there (307: method and body kept),
    as Starlette redirects it when no route matches at all. Starlette does not when some
    route matches the path for another method: ``PATCH /v1/budgets/{path:path}`` matches
    ``/v1/budgets/`` and ``/v1/budgets/ai/members/``, so ``POST /v1/budgets/`` got 405
    Method Not Allowed, naming a method the route has."""

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app, self.router = app, router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path != "/" and path.endswith("/"):
            bare = {**scope, "path": path.rstrip("/")}
            if (not any(r.matches(scope)[0] is Match.FULL for r in self.router.routes)
                    and any(r.matches(bare)[0] is Match.FULL for r in self.router.routes)):
                await RedirectResponse(str(URL(scope=bare)), 307)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# ---- the app -----------------------------------------------------------------------------
def create_app(store: Store, scheduler: SchedulerPort, settings: ServiceConfig) -> FastAPI:
    """The API bound to one store and one scheduler."""
    app = FastAPIOffline(  # /docs with its assets shipped in a package: no CDN
        redoc_url=None,  # ReDoc's page still fetches its logo from the internet
        title="apportion",
        version="0.1.0",
        description="GPU-time budgets, hierarchical fair share and a minimum-runtime contract.",
        responses=ERRORS,
        dependencies=[Depends(_check_params)],
    )
    app.add_middleware(BodyLimit, limit=settings.server.max_body_bytes)
    app.add_middleware(SlashRedirect, router=app.router)

    @app.exception_handler(RequestValidationError)
    def _invalid(req: Request, exc: RequestValidationError) -> JSONResponse:
        detail = _field_errors(exc, req.headers.get("content-type"))
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(req: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a body its JSON parser gives up on with a bare 400 "There was an
        # error parsing the body": the parser's RecursionError is JSON nested too deep
        if isinstance(exc.__cause__, RecursionError):
            return JSONResponse(status_code=400, content={"detail": NESTED_TOO_DEEP})
        return await http_exception_handler(req, exc)

    @app.exception_handler(NotFound)
    def _not_found(_req: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(Conflict)
    def _conflict(_req: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    def _database_down(_req: Request, exc: DBAPIError) -> JSONResponse:
        # the database does not answer (down, restarting, unreachable): a 503 naming it,
        # and one log line, not a 500 and a traceback per request
        problem = str(database_error(settings.db_url, exc))
        log.warning("%s", problem)
        return JSONResponse(status_code=503, content={"detail": problem})

    api = Api(store, scheduler, settings)
    for resource in (workloads, users, budgets, hosts, audit):
        app.include_router(resource.router(api))
    # /v1/reports/usage
    app.include_router(reports_router(store, api.now, api.principal, settings.pools))
    app.include_router(  # /, /sim (pages: public), /v1/dashboard/*, /metrics
        dashboard_router(store, scheduler, settings, reader=api.public_reader,
                         principal=api.principal)
    )
    app.include_router(whatif_router(store, settings, api.writer, api.now))  # POST /v1/whatif
    return app
