"""The HTTP API (FastAPI): ``create_app(store, scheduler, settings)``.

Handlers validate, check rights (:mod:`apportion.service.auth`), write to the store (one
transaction each) and wake the scheduler; they never touch the scheduler's ClusterState,
which only the scheduler thread changes. Host state changes go through the scheduler, which
updates its state and the store together. Errors are JSON ``{"detail": "<field>: <problem>"}``:
400 a body that is not JSON text, 401 without a valid token, 403 outside one's rights
(nothing changed), 404 unknown item, 409 when the item's state does not allow the change,
413 a body over ``[server] max_body_bytes``, 422 on invalid input (every field strictly
typed and bounded: :mod:`apportion.service.validation`). Every refusal changes nothing.
Routes are listed in docs/api.md, rights in docs/security.md; OpenAPI at /docs.
"""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies defined inside create_app.
import difflib
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apportion.core import (
    After,
    BudgetNode,
    BudgetTree,
    ClusterState,
    CoreError,
    HostState,
    Status,
    WorkloadSpec,
    allowed_hosts,
    ancestors,
    parse_array,
    parse_dependency,
    usage_ratio,
    validate_spec,
)
from apportion.core.units import parse_duration

from . import validation as v
from .auth import Principal, Rights, hash_token, new_token, redact
from .config import ServiceConfig
from .dashboard import dashboard_router, explain_workload
from .executors import identity
from .reports import reports_router
from .store import AlreadySubmitted, Conflict, NotFound, Store, UserRow, WorkloadRow
from .whatif_api import whatif_router

API_VERSION = "v1"
TOKEN_CACHE_S = 30.0


class SchedulerPort(Protocol):
    """What the API needs from the scheduler."""

    def wake(self) -> None:
        """Something changed in the store (submission, cancel, budgets): run a pass soon."""
        ...

    def set_host_state(self, name: str, state: HostState, reason: str, actor: str) -> object:
        """Change a host's state in the scheduler's state and in the store (audited)."""
        ...


# ---- request bodies ----------------------------------------------------------------------
# Strict: a string is not a number, 1 or "yes" is not a boolean, true is not an integer.
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Text = Annotated[str, AfterValidator(v.check_text)]
BudgetPath = Annotated[
    str, Field(max_length=v.MAX_PATH, description="segments of [A-Za-z0-9_.-] joined by /"),
    AfterValidator(v.check_budget_path),
]
UserName = Annotated[
    str, Field(max_length=32, pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
               description="like a Unix account name"),
    AfterValidator(v.check_user_name),
]
People = Annotated[list[UserName], Field(max_length=v.MAX_PEOPLE)]
# a Unix account: useradd's default NAME_REGEX, with capitals and a machine account's "$"
UnixUser = Annotated[str, Field(max_length=32, pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,30}[$]?$")]
HostName = Annotated[Text, Field(min_length=1, max_length=v.MAX_QUERY)]
HostNames = Annotated[list[HostName], Field(max_length=v.MAX_PEOPLE)]
Weight = Annotated[float, Field(ge=v.MIN_WEIGHT, le=v.MAX_WEIGHT, allow_inf_nan=False,
                                description="relative to its siblings")]
Duration = (
    Annotated[float, Field(ge=0, allow_inf_nan=False)]
    | Annotated[str, Field(min_length=1, max_length=v.MAX_DURATION_TEXT)]
)


class SubmitBody(_Body):
    budget: BudgetPath = Field(description="leaf budget path, e.g. ai/llm/alice")
    gpus: int = Field(gt=0, le=v.MAX_GPUS, description="GPUs, gang-scheduled")
    min_runtime: Duration = Field(
        description='seconds or a duration like "30m"; 0 = unallocated'
    )
    resumable: bool = False
    priority: int = Field(0, ge=v.PRIORITY_MIN, le=v.PRIORITY_MAX,
                          description="order within the budget only")
    checkpoint_interval: Duration = Field(0.0, description='seconds or "30m"; 0 = unknown')
    checkpoint_on_term: bool = Field(
        False, description="writes a checkpoint when told to stop (SIGTERM), within the grace"
    )
    command: Annotated[
        list[str], Field(min_length=1, max_length=v.MAX_ARGS),
        AfterValidator(v.check_command),
    ] = Field(description="argv of the command to run")
    name: str | None = Field(
        None, max_length=128, pattern=r"^[A-Za-z0-9._+-]+$",
        description="a name to know it by: letters, digits and . _ + - only",
    )
    time_limit: Duration | None = Field(
        None, description='wall-time limit, seconds or "2h"; default: the policy\'s'
    )
    array: str | None = Field(
        None, min_length=1, max_length=v.MAX_QUERY,
        description='"0-99", "1,3,5-7", "0-99%10" (at most 10 at once): one per index',
    )
    dependency: str | None = Field(
        None, max_length=v.MAX_TEXT,
        description='"afterok:w-000003[:w-000004]", also afterany, afternotok',
    )
    # what a launch could not use (a relative directory, a bad variable, E2BIG) is refused
    # at submit by the executors' own rules (_run_problem, executors/identity.py)
    chdir: Annotated[str, Field(max_length=v.MAX_PATH_BYTES)] | None = Field(
        None, description="absolute working directory (default: the account's home)"
    )
    env: Annotated[dict[str, str], Field(max_length=v.MAX_ARGS)] | None = Field(
        None, description="the exported environment (default: none, the account's basics)"
    )
    nodelist: HostNames = Field([], description="run only on these hosts")
    exclude: HostNames = Field([], description="never run on these hosts")
    gpu_kind: Annotated[Text, Field(max_length=v.MAX_QUERY)] | None = Field(
        None, description="a GPU kind; refused while hosts have no kinds (use nodelist)"
    )




class WeightBody(_Body):
    weight: Weight


class CreateBudgetBody(_Body):
    path: BudgetPath
    weight: Weight = 1.0
    managers: People = []
    members: People = []


class MembersBody(_Body):
    members: People


class ManagersBody(_Body):
    managers: People


class HostBody(_Body):
    reason: Annotated[Text, Field(max_length=v.MAX_TEXT)] = ""


class UserBody(_Body):
    name: UserName
    admin: bool = False
    unix_user: UnixUser | None = Field(
        None, description="the Unix account its work runs as (default: the same name)")


class UserChangeBody(_Body):
    admin: bool | None = None
    unix_user: UnixUser | Literal[""] | None = Field(
        None, description='the Unix account; "" for the account of the same name')


class TokenBody(_Body):
    kind: Literal["user", "scrape"] = Field(
        default="user", description="user: acts as the user; scrape: may only read")
    label: Annotated[Text, Field(max_length=255)] = ""


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


# ---- errors -----------------------------------------------------------------------------
def _field_errors(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc) if loc else "body"
        if err.get("type") == "json_invalid":
            where = "body"
            msg = f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
        else:
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    # only the first few: a list of 10,000 bad names must not make a 10,000-line answer
    return "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")


def _check_param(where: str, value: str) -> None:
    try:
        v.check_text(value, v.MAX_QUERY if where.startswith("query") else v.MAX_PATH + 64)
    except ValueError as e:
        raise _fail(422, f"{where}: {e}") from None


def _check_params(request: Request) -> None:
    """Query and path parameters without NUL (PostgreSQL cannot compare them) and bounded,
    so that a read answers the same on both databases."""
    for key, value in request.query_params.multi_items():
        _check_param(f"query.{key}", key)
        _check_param(f"query.{key}", value)
    for key, value in request.path_params.items():
        _check_param(f"path.{key}", str(value))


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 before it is read
    whole, whether it says its Content-Length or comes chunked. At most ``limit`` bytes
    are held; the app then reads them as if from the client. (Starlette's own limit
    answers in plain text; this one answers like every other refusal.)"""

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

        async def replay() -> Message:
            return held.pop(0) if held else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, got: str) -> None:
        body = json.dumps({"detail": f"body: must be at most {self.limit} bytes "
                                     f"([server] max_body_bytes), got {got}"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _unknown_people(field: str, names: Sequence[str], known: set[str]) -> None:
    """422 naming the first name that is not a user, with the closest user names."""
    for i, name in enumerate(names):
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise _fail(422, f"{field}.{i}: {name!r} is not a user{hint}")


def _printable(value: Any) -> Any:
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
        return {k: _printable(x) for k, x in value.items()}
    if isinstance(value, list):
        return [_printable(x) for x in value]
    return value


def _digest(body: BaseModel) -> str:
    """What makes two submissions the same request (for the Idempotency-Key)."""
    text = json.dumps(body.model_dump(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fail(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


def _core_message(e: CoreError) -> str:
    # "workload new: gpus: ..." -> "gpus: ..." (a new workload has no id yet)
    msg = str(e)
    return msg.removeprefix("workload new: ")


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
    bearer = HTTPBearer(auto_error=False, description="a token from <data_dir>/tokens/<user>")
    # digest -> (principal, valid until): saves a query per request. Cleared whenever a
    # token is revoked or a user changed, so a revoked token is refused at once.
    token_cache: dict[str, tuple[Principal, float]] = {}
    clock = getattr(scheduler, "clock", None)
    now: Callable[[], float] = clock.now if clock is not None else time.time

    @app.exception_handler(RequestValidationError)
    def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _field_errors(exc)})

    @app.exception_handler(NotFound)
    def _not_found(_req: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": str(exc)})

    @app.exception_handler(Conflict)
    def _conflict(_req: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    def principal(
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        if cred is None or not cred.credentials:
            raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        digest = hash_token(cred.credentials)
        hit = token_cache.get(digest)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        found = store.principal_for_token(digest)
        if found is None:
            raise HTTPException(401, "invalid token", {"WWW-Authenticate": "Bearer"})
        who = Principal(found[0], found[1])
        if len(token_cache) > 10_000:
            token_cache.clear()
        token_cache[digest] = (who, time.monotonic() + TOKEN_CACHE_S)
        return who

    def writer(who: Annotated[Principal, Depends(principal)]) -> UserRow:
        if who.read_only:
            raise _fail(403, f"forbidden: a {who.kind} token of {who.name} may only read")
        return who.user

    def public_reader(
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal | None:
        """The dashboard's data, ``why`` and /metrics: no token needed with public_read."""
        if settings.server.public_read:
            return None
        return principal(cred)

    Reader = Annotated[Principal, Depends(principal)]
    User = Annotated[UserRow, Depends(writer)]

    def rights(user: UserRow) -> Rights:
        return Rights.of(user, store.budgets())

    def forbid(user: UserRow | Principal, what: str) -> HTTPException:
        return _fail(403, f"forbidden: {user.name} may not {what}")

    def shown(who: Principal, rows: Sequence[WorkloadRow],
              with_attempts: bool = False) -> list[dict[str, Any]]:
        r = Rights.of(who.user, store.budgets())
        return [
            _printable(w.as_dict(with_attempts)) if who.may_see_private(r, w.user, w.budget)
            else redact(w.as_dict(with_attempts))
            for w in rows
        ]

    def people(body_field: str, names: Sequence[str]) -> None:
        if names:
            _unknown_people(body_field, names, {u.name for u in store.users()})

    v1 = f"/{API_VERSION}"

    # ---- workloads ---------------------------------------------------------------------
    @app.post(f"{v1}/workloads", status_code=201, tags=["workloads"])
    def submit(
        body: SubmitBody,
        user: User,
        idempotency_key: Annotated[str | None, Header(
            pattern=IDEMPOTENCY_KEY,
            description="a retried submission with the same key answers the first one",
        )] = None,
    ) -> dict[str, Any]:
        """Submit a workload to a leaf budget. Durable when the answer arrives."""
        digest = _digest(body) if idempotency_key is not None else None

        def replay(row: WorkloadRow, first_digest: str | None) -> dict[str, Any]:
            if first_digest != digest:
                raise _fail(409, f"Idempotency-Key: already used for another submission "
                                 f"({row.id}); send a new key for a new one")
            out = row.as_submitted().as_dict()
            if row.array_id is not None:  # an array keeps its key on its first element
                out["array_ids"] = store.array_ids(row.array_id)
            return out

        if idempotency_key is not None:  # a retry answers the first, whatever changed since
            found = store.by_idempotency_key(user.name, idempotency_key)
            if found is not None:
                return replay(*found)
        try:
            min_runtime = parse_duration(body.min_runtime)
        except ValueError as e:
            raise _fail(422, f"min_runtime: {e}") from None
        try:
            checkpoint = parse_duration(body.checkpoint_interval)
        except ValueError as e:
            raise _fail(422, f"checkpoint_interval: {e}") from None
        try:
            time_limit = (settings.policy.default_time_limit if body.time_limit is None
                          else parse_duration(body.time_limit))
        except ValueError as e:
            raise _fail(422, f"time_limit: {e}") from None
        indexes: tuple[int, ...] = ()
        throttle = 0
        after: tuple[tuple[After, str], ...] = ()
        try:
            if body.array is not None:
                indexes, throttle = parse_array(body.array)
            if body.dependency:
                after = parse_dependency(body.dependency)
        except CoreError as e:
            raise _fail(422, str(e)) from None
        if body.gpu_kind is not None:
            raise _fail(422, f"gpu_kind: {body.gpu_kind!r}: the hosts of this cluster have no "
                        "GPU kinds; choose hosts with nodelist or exclude")
        known = store.statuses(d for _, d in after)
        for _, dep in after:
            if dep not in known:
                raise _fail(422, f"dependency: {dep}: no such workload")
        t = now()
        host_rows = store.hosts()
        try:
            allowed = allowed_hosts([h.name for h in host_rows], body.nodelist, body.exclude)
            spec = WorkloadSpec(
                id="new", budget=body.budget, gpus=body.gpus, min_runtime=min_runtime,
                submit_time=t, user=user.name, resumable=body.resumable,
                priority=body.priority, checkpoint_interval=checkpoint,
                time_limit=time_limit, hosts=allowed,
                checkpoint_on_term=body.checkpoint_on_term,
            )
            rows = store.budgets()  # one read serves validation and rights
            if not rows:
                raise _fail(422, f"budget: {body.budget!r}: no budgets exist yet")
            tree = BudgetTree.build(BudgetNode(b.path, b.weight) for b in rows)
            state = ClusterState(tree, [h.host() for h in host_rows], start=t)
            validate_spec(spec, state, settings.policy)
        except CoreError as e:
            raise _fail(422, _core_message(e)) from None
        if not Rights.of(user, rows).can_submit(body.budget):
            raise forbid(user, f"submit to budget {body.budget} (not a member)")
        problem = _run_problem(body, user, settings)
        if problem is not None:
            raise _fail(422, problem)
        try:
            row = store.add_workload(
                budget=body.budget, gpus=body.gpus, min_runtime=min_runtime, submit_time=t,
                command=body.command, actor=user.name, resumable=body.resumable,
                priority=body.priority, checkpoint_interval=checkpoint, name=body.name,
                chdir=body.chdir, env=body.env,
                time_limit=time_limit, dependencies=[(a.value, d) for a, d in after],
                array=indexes, array_throttle=throttle, nodelist=body.nodelist,
                exclude=body.exclude, checkpoint_on_term=body.checkpoint_on_term,
                idempotency_key=idempotency_key, request_digest=digest,
            )
        except AlreadySubmitted as e:  # the same key, stored concurrently
            return replay(e.row, e.digest)
        scheduler.wake()
        out = row.as_dict()
        if indexes:
            out["array_ids"] = store.array_ids(row.id)
        return out

    @app.get(f"{v1}/workloads", tags=["workloads"])
    def queue(
        who: Reader,
        status: Annotated[
            str, Query(description="comma-separated statuses, or 'all'")
        ] = "pending,running,stopping",
        budget: Annotated[str | None, Query(description="a node: its whole subtree")] = None,
        user: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
        array: Annotated[str | None, Query(description="an array's id: its elements")] = None,
    ) -> list[dict[str, Any]]:
        """Workloads, oldest first (default: the active ones). Another user's command,
        environment and directory are shown only to managers of its budget and admins."""
        statuses: list[Status] | None = None
        if status != "all":
            try:
                statuses = [Status(s.strip()) for s in status.split(",") if s.strip()]
            except ValueError:
                valid = ", ".join(s.value for s in Status)
                raise _fail(422, f"status: must be 'all' or some of: {valid}") from None
        rows = store.list_workloads(statuses, budget=budget, user=user, limit=limit,
                                    array=array)
        return shown(who, rows)

    @app.get(f"{v1}/workloads/{{workload_id}}", tags=["workloads"])
    def show(workload_id: str, who: Reader) -> dict[str, Any]:
        """One workload with all its attempts (private fields as in the list)."""
        return shown(who, [store.get_workload(workload_id)], with_attempts=True)[0]

    def _may_touch(user: UserRow, w: WorkloadRow, what: str) -> None:
        if not rights(user).can_cancel(w.user, w.budget):
            raise forbid(user, f"{what} workload {w.id} (owned by {w.user})")

    @app.post(f"{v1}/workloads/{{workload_id}}/cancel", tags=["workloads"])
    def cancel(workload_id: str, user: User) -> dict[str, Any]:
        """Cancel: pending ones end at once, running ones are stopped by the scheduler."""
        _may_touch(user, store.get_workload(workload_id), "cancel")
        row = store.cancel_workload(workload_id, actor=user.name)
        scheduler.wake()
        out: dict[str, Any] = _printable(row.as_dict())
        return out

    @app.get(
        f"{v1}/workloads/{{workload_id}}/logs",
        tags=["workloads"],
        response_class=PlainTextResponse,
        responses=TEXT_ROUTE_ERRORS,
    )
    def logs(
        workload_id: str,
        who: Reader,
        attempt: Annotated[int | None, Query(ge=1, le=1_000_000,
                                             description="default: the latest")] = None,
        tail: Annotated[int, Query(ge=0, le=1 << 40, description="last N bytes (0: all)")] = 0,
        offset: Annotated[int, Query(ge=0, le=1 << 40,
                                     description="from this byte on (following)")] = 0,
    ) -> PlainTextResponse:
        """The output (stdout and stderr) of one attempt: for its owner, managers of its
        budget and admins. ``X-Log-Attempt`` names the attempt, ``X-Log-Offset`` the byte
        after what was sent: pass it as ``offset`` to read only what was written since
        (``apportion logs -f``)."""
        w = store.get_workload(workload_id)
        if not who.may_see_private(rights(who.user), w.user, w.budget):
            raise forbid(who, f"read the logs of workload {w.id} (owned by {w.user})")
        if not w.attempts:
            raise _fail(404, f"workload {workload_id}: has not started yet, no logs")
        n = attempt if attempt is not None else w.attempts[-1].n
        a = next((x for x in w.attempts if x.n == n), None)
        if a is None:
            raise _fail(404, f"workload {workload_id}: attempt {n}: not found")
        path = Path(a.log_path) if a.log_path else settings.logs_dir / workload_id / f"{n}.log"
        try:
            # never through a link: with Slurm the log's directory is its owner's, who could
            # otherwise swap the log for a link to a file only the server may read
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                if tail:
                    size = f.seek(0, 2)
                    f.seek(max(0, size - tail))
                elif offset:
                    f.seek(offset)
                data = f.read()
                end = f.tell()
        except FileNotFoundError:
            raise _fail(404, f"workload {workload_id}: attempt {n}: no log file yet") from None
        except OSError as e:  # ELOOP: a link put in the log's place
            raise _fail(404, f"workload {workload_id}: attempt {n}: log file unreadable: "
                             f"{e.strerror}") from None
        return PlainTextResponse(data.decode("utf-8", errors="replace"),
                                 headers={"X-Log-Attempt": str(n), "X-Log-Offset": str(end)})

    @app.get(f"{v1}/me", tags=["users"])
    def me(who: Reader) -> dict[str, Any]:
        """The user the token belongs to."""
        return {"name": who.user.name, "admin": who.user.admin}

    # ---- budgets -----------------------------------------------------------------------
    @app.get(f"{v1}/budgets", tags=["budgets"])
    def budgets(_who: Reader) -> list[dict[str, Any]]:
        """The budget tree, parents first: weight, share of the cluster, managers, members."""
        rows = store.budgets()
        if not rows:
            return []
        tree = store.load_tree()
        return [
            {
                "path": b.path, "parent": b.parent, "weight": b.weight,
                "share": tree.share(b.path), "leaf": tree.is_leaf(b.path),
                "managers": list(b.managers), "members": list(b.members),
            }
            for b in rows
        ]

    @app.get(f"{v1}/budgets/usage", tags=["budgets"])
    def usage(_who: Reader) -> dict[str, Any]:
        """Charged and free GPU-hours of every node over the lookback window, and its usage
        ratio (charged / (share x healthy GPU-hours))."""
        view = scheduler.queue_view() if hasattr(scheduler, "queue_view") else None
        return _usage(store, settings, now(), view)

    @app.get(f"{v1}/queue", tags=["workloads"])
    def policy_queue(_who: Reader) -> dict[str, Any]:
        """The queue as the scheduler's last pass saw it: pending work in policy order with
        its wait reason, running work with its protection, hosts and budget ratios."""
        if not hasattr(scheduler, "queue_view"):
            raise _fail(404, "queue: this scheduler has no queue view")
        view: dict[str, Any] = scheduler.queue_view()
        return view

    @app.post(f"{v1}/budgets", status_code=201, tags=["budgets"])
    def create_budget(body: CreateBudgetBody, user: User) -> dict[str, Any]:
        """Create a node below an existing one (admin: also at the top)."""
        if not rights(user).can_create(body.path):
            raise forbid(user, f"create budget {body.path}")
        people("managers", body.managers)
        people("members", body.members)
        try:
            b = store.add_budget(body.path, body.weight, actor=user.name,
                                 managers=body.managers, members=body.members)
        except Conflict as e:
            if "weight" in str(e):  # a share too small: invalid input, not a state
                raise _fail(422, f"weight: {e}") from None
            raise
        scheduler.wake()
        return {"path": b.path, "weight": b.weight, "managers": list(b.managers),
                "members": list(b.members)}

    @app.patch(f"{v1}/budgets/{{path:path}}", tags=["budgets"])
    def set_weight(path: str, body: WeightBody, user: User) -> dict[str, Any]:
        """Change a node's weight (its parent's manager, or an admin)."""
        store.get_budget(path)
        if not rights(user).can_set_weight(path):
            raise forbid(user, f"change the weight of budget {path}")
        try:
            store.load_tree().with_weight(path, body.weight)
        except CoreError as e:
            raise _fail(422, f"weight: {e}") from None
        b = store.set_budget_weight(path, body.weight, actor=user.name)
        scheduler.wake()
        return {"path": b.path, "weight": b.weight}

    @app.put(f"{v1}/budgets/{{path:path}}/members", tags=["budgets"])
    def set_members(path: str, body: MembersBody, user: User) -> dict[str, Any]:
        """Replace a node's members (existing users)."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the members of budget {path}")
        people("members", body.members)
        b = store.set_budget_members(path, body.members, actor=user.name)
        return {"path": b.path, "members": list(b.members)}

    @app.put(f"{v1}/budgets/{{path:path}}/managers", tags=["budgets"])
    def set_managers(path: str, body: ManagersBody, user: User) -> dict[str, Any]:
        """Replace a node's managers (existing users)."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the managers of budget {path}")
        people("managers", body.managers)
        b = store.set_budget_managers(path, body.managers, actor=user.name)
        return {"path": b.path, "managers": list(b.managers)}

    # ---- hosts -------------------------------------------------------------------------
    @app.get(f"{v1}/hosts", tags=["hosts"])
    def hosts(_who: Reader) -> list[dict[str, Any]]:
        """Hosts with their state, the reason of the last change and GPUs in use."""
        used: dict[str, int] = {}
        for w in store.list_workloads([Status.RUNNING, Status.STOPPING], limit=100_000):
            if w.attempt is not None:
                for host, gpus, _ in w.attempt.placement:
                    used[host] = used.get(host, 0) + gpus
        return [{**h.as_dict(), "gpus_used": used.get(h.name, 0)} for h in store.hosts()]

    def _host_change(name: str, to: HostState, body: HostBody, user: UserRow) -> dict[str, Any]:
        if not rights(user).can_change_hosts():
            raise forbid(user, f"change host {name} (admins only)")
        store.get_host(name)
        try:
            scheduler.set_host_state(name, to, body.reason, user.name)
        except CoreError as e:
            raise _fail(409, str(e)) from None
        return store.get_host(name).as_dict()

    @app.post(f"{v1}/hosts/{{name}}/drain", tags=["hosts"])
    def drain(name: str, user: User, body: HostBody | None = None) -> dict[str, Any]:
        """Mark a host unhealthy: no new work; emptied as protections end, then to repair."""
        return _host_change(name, HostState.DRAINING, body or HostBody(), user)

    @app.post(f"{v1}/hosts/{{name}}/repair", tags=["hosts"])
    def repair(name: str, user: User, body: HostBody | None = None) -> dict[str, Any]:
        """Mark a host repaired: back to healthy (from repair, down, or calling off a drain)."""
        return _host_change(name, HostState.HEALTHY, body or HostBody(), user)

    # ---- users and tokens --------------------------------------------------------------
    def _user_dict(u: UserRow) -> dict[str, Any]:
        return {"name": u.name, "admin": u.admin, "unix_user": u.unix_user,
                "account": u.account}

    def _admin(user: UserRow, what: str) -> None:
        if not rights(user).can_manage_users():
            raise forbid(user, f"{what} (admins only)")

    @app.post(f"{v1}/users", status_code=201, tags=["users"])
    def create_user(body: UserBody, user: User) -> dict[str, Any]:
        """Create a user (admins only)."""
        _admin(user, "create users")
        u = store.add_user(body.name, actor=user.name, admin=body.admin,
                           unix_user=body.unix_user)
        return _user_dict(u)

    @app.get(f"{v1}/users", tags=["users"])
    def list_users(who: Reader) -> list[dict[str, Any]]:
        """Every user with its admin flag and Unix account (admins only)."""
        if who.read_only or not who.user.admin:
            raise forbid(who, "list users (admins only)")
        return [_user_dict(u) for u in store.users()]

    @app.patch(f"{v1}/users/{{name}}", tags=["users"])
    def change_user(name: str, body: UserChangeBody, user: User) -> dict[str, Any]:
        """Change a user's admin flag or Unix account (admins only). Takes effect at once
        for every token of that user."""
        _admin(user, "change users")
        u = store.set_user(name, actor=user.name, admin=body.admin,
                           unix_user=body.unix_user or None,
                           clear_unix_user=body.unix_user == "")
        token_cache.clear()
        return _user_dict(u)

    @app.post(f"{v1}/users/{{name}}/tokens", status_code=201, tags=["tokens"])
    def create_token(name: str, user: User, body: TokenBody | None = None) -> dict[str, Any]:
        """A new token for a user (admins only). Shown once; only its hash is kept."""
        _admin(user, "create tokens")
        body = body or TokenBody()
        token = new_token()
        row = store.add_token(name, hash_token(token), kind=body.kind, label=body.label)
        store.append_audit(user.name, "token.create", name, None,
                           {"token": row.id, "kind": row.kind, "label": row.label})
        return {**row.as_dict(), "token": token}

    @app.get(f"{v1}/tokens", tags=["tokens"])
    def list_tokens(
        who: Reader,
        user: Annotated[str | None, Query(description="only this user's")] = None,
    ) -> list[dict[str, Any]]:
        """Tokens (never the secret): admins see all, others their own."""
        if who.read_only or not who.user.admin:
            if user is not None and user != who.name:
                raise forbid(who, f"list the tokens of {user}")
            user = who.name
        return [t.as_dict() for t in store.tokens(user)]

    @app.post(f"{v1}/tokens/{{token_id}}/revoke", tags=["tokens"])
    def revoke_token(token_id: str, user: User) -> dict[str, Any]:
        """Revoke a token (admins, or the token's own user): refused from this moment."""
        mine = {t.id for t in store.tokens(user.name)}
        if not user.admin and token_id not in mine:
            if any(t.id == token_id for t in store.tokens()):
                raise forbid(user, f"revoke token {token_id} (not theirs)")
            raise NotFound(f"token {token_id}: not found")
        row = store.revoke_token(token_id, actor=user.name)
        token_cache.clear()
        return row.as_dict()

    # ---- audit, why, health ------------------------------------------------------------
    @app.get(f"{v1}/audit", tags=["audit"])
    def audit(
        _who: Reader,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        target: str | None = None,
    ) -> list[dict[str, Any]]:
        """Audit entries, newest first: who changed what, when, old -> new."""
        return [a.as_dict() for a in store.audit(limit=limit, target=target)]

    @app.get(f"{v1}/workloads/{{workload_id}}/why", tags=["workloads"])
    def why(
        workload_id: str, _who: Annotated[Principal | None, Depends(public_reader)]
    ) -> dict[str, Any]:
        """Why it waits (order, ratios, victims, earliest start) or until when it is safe."""
        return explain_workload(store, scheduler, workload_id)

    app.include_router(reports_router(store, now, principal))  # /v1/reports/usage
    app.include_router(  # /, /sim (pages: public), /v1/dashboard/*, /metrics
        dashboard_router(store, scheduler, settings, reader=public_reader)
    )
    app.include_router(whatif_router(store, settings, writer, now))  # POST /v1/whatif

    @app.get(f"{v1}/health", tags=["health"])
    def health() -> dict[str, Any]:
        """Liveness: the database answers. No token needed."""
        store.ping()
        return {"status": "ok", "executor": settings.executor.kind}

    return app


def _run_problem(body: SubmitBody, user: UserRow, settings: ServiceConfig) -> str | None:
    """Why this submission could never run as asked (``field: problem``), or None: its
    directory and environment, their size against the kernel's exec limits, and the
    owner's Unix account (unless nothing runs, with the memory executor)."""
    if body.chdir is not None:
        problem = identity.chdir_problem(body.chdir)
        if problem is not None:
            return problem
    env = body.env or {}
    problem = identity.env_problem(env)
    if problem is None:  # each argument's size too: the body checked only its text
        problem = identity.exec_problem(body.command, env)
    if problem is None and settings.executor.kind != "memory":
        problem = settings.identity.problem(user.name, user.account)
    return problem


def _usage(
    store: Store, settings: ServiceConfig, now: float, view: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Per-node usage over the lookback. Charged GPU-hours and ratios come from the
    scheduler's ledger when it is running (``view``: its queue view), else from the attempts
    in the store with capacity taken as the healthy GPUs now times the window (the store
    keeps no per-second host history). Free GPU-hours always come from the store."""
    window = settings.policy.lookback
    since = now - window
    rows = store.budgets()
    if not rows:
        return {"lookback_s": window, "capacity_gpu_hours": 0.0, "budgets": []}
    tree = store.load_tree()
    charged: dict[str, float] = {}
    free: dict[str, float] = {}
    for u in store.usage_intervals(since):
        end = now if u.ended_at is None else min(u.ended_at, now)
        seconds = max(0.0, end - max(u.started_at, since)) * u.gpus_held
        table = charged if u.allocated else free
        for node in ancestors(u.budget)[:-1]:
            table[node] = table.get(node, 0.0) + seconds
    healthy = sum(h.gpus for h in store.hosts() if h.state is HostState.HEALTHY)
    capacity = healthy * window
    live: dict[str, dict[str, Any]] = {}
    if view and view.get("now") is not None:
        live = {b["path"]: b for b in view.get("budgets", [])}
    out = []
    for path in tree.nodes():
        c = charged.get(path, 0.0)
        ratio = usage_ratio(c, tree.share(path), capacity) if capacity > 0 else None
        if path in live:
            c, ratio = float(live[path]["charged_gpu_s"]), live[path]["usage_ratio"]
        out.append({
            "path": path,
            "share": tree.share(path),
            "charged_gpu_hours": c / 3600.0,
            "free_gpu_hours": free.get(path, 0.0) / 3600.0,
            "usage_ratio": ratio,
        })
    return {"lookback_s": window, "capacity_gpu_hours": capacity / 3600.0,
            "source": "scheduler" if live else "store", "budgets": out}
