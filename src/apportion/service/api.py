"""The HTTP API (FastAPI): ``create_app(store, scheduler, settings)``.

Handlers validate, check rights (:mod:`apportion.service.auth`), write to the store (one
transaction each) and wake the scheduler; they never touch the scheduler's ClusterState,
which only the scheduler thread changes. Host state changes go through the scheduler, which
updates its state and the store together. Errors are JSON ``{"detail": "<field>: <problem>"}``:
401 without a valid token, 403 outside one's rights (nothing changed), 404 unknown item,
409 when the item's state does not allow the change, 422 on invalid input.
Routes are listed in docs/api.md; OpenAPI at /docs.
"""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies defined inside create_app.
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from apportion.core import (
    BudgetNode,
    BudgetTree,
    ClusterState,
    CoreError,
    HostState,
    Status,
    WorkloadSpec,
    ancestors,
    usage_ratio,
    validate_spec,
)

from .auth import Rights, hash_token, new_token
from .config import ServiceConfig, parse_duration
from .dashboard import dashboard_router, explain_workload
from .store import Conflict, NotFound, Store, UserRow, WorkloadRow

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
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitBody(_Body):
    budget: str = Field(description="leaf budget path, e.g. ai/llm/alice")
    gpus: int = Field(description="GPUs, gang-scheduled")
    min_runtime: float | str = Field(
        description='seconds or a duration like "30m"; 0 = unallocated'
    )
    resumable: bool = False
    priority: int = 0
    checkpoint_interval: float | str = Field(0, description='seconds or "30m"; 0 = unknown')
    checkpoint_on_term: bool = Field(
        False, description="writes a checkpoint when told to stop (SIGTERM), within the grace"
    )
    command: list[str] = Field(min_length=1, description="argv of the command to run")


class WeightBody(_Body):
    weight: float = Field(gt=0)


class CreateBudgetBody(_Body):
    path: str
    weight: float = Field(1.0, gt=0)
    managers: list[str] = []
    members: list[str] = []


class MembersBody(_Body):
    members: list[str]


class ManagersBody(_Body):
    managers: list[str]


class HostBody(_Body):
    reason: str = ""


class UserBody(_Body):
    name: str = Field(min_length=1)
    admin: bool = False


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
            msg = str(err.get("msg", "invalid"))
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def _fail(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


def _core_message(e: CoreError) -> str:
    # "workload new: gpus: ..." -> "gpus: ..." (a new workload has no id yet)
    msg = str(e)
    return msg.removeprefix("workload new: ")


# ---- the app -----------------------------------------------------------------------------
def create_app(store: Store, scheduler: SchedulerPort, settings: ServiceConfig) -> FastAPI:
    """The API bound to one store and one scheduler."""
    app = FastAPI(
        title="apportion",
        version="0.1.0",
        description="GPU-time budgets, hierarchical fair share and a minimum-runtime contract.",
    )
    bearer = HTTPBearer(auto_error=False, description="a token from <data_dir>/tokens/<user>")
    # digest -> (user, valid until): saves a query per request; tokens are never changed
    # in place (only added), so the cache can only be stale about a user's admin flag
    token_cache: dict[str, tuple[UserRow, float]] = {}
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

    def current_user(
        cred: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> UserRow:
        if cred is None or not cred.credentials:
            raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
        digest = hash_token(cred.credentials)
        hit = token_cache.get(digest)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        user = store.user_for_token(digest)
        if user is None:
            raise HTTPException(401, "invalid token", {"WWW-Authenticate": "Bearer"})
        if len(token_cache) > 10_000:
            token_cache.clear()
        token_cache[digest] = (user, time.monotonic() + TOKEN_CACHE_S)
        return user

    User = Annotated[UserRow, Depends(current_user)]

    def rights(user: UserRow) -> Rights:
        return Rights.of(user, store.budgets())

    def forbid(user: UserRow, what: str) -> HTTPException:
        return _fail(403, f"forbidden: {user.name} may not {what}")

    v1 = f"/{API_VERSION}"

    # ---- workloads ---------------------------------------------------------------------
    @app.post(f"{v1}/workloads", status_code=201, tags=["workloads"])
    def submit(body: SubmitBody, user: User) -> dict[str, Any]:
        """Submit a workload to a leaf budget. Durable when the answer arrives."""
        try:
            min_runtime = parse_duration(body.min_runtime)
        except ValueError as e:
            raise _fail(422, f"min_runtime: {e}") from None
        try:
            checkpoint = parse_duration(body.checkpoint_interval)
        except ValueError as e:
            raise _fail(422, f"checkpoint_interval: {e}") from None
        t = now()
        try:
            spec = WorkloadSpec(
                id="new", budget=body.budget, gpus=body.gpus, min_runtime=min_runtime,
                submit_time=t, user=user.name, resumable=body.resumable,
                priority=body.priority, checkpoint_interval=checkpoint,
                checkpoint_on_term=body.checkpoint_on_term,
            )
            rows = store.budgets()  # one read serves validation and rights
            if not rows:
                raise _fail(422, f"budget: {body.budget!r}: no budgets exist yet")
            tree = BudgetTree.build(BudgetNode(b.path, b.weight) for b in rows)
            state = ClusterState(tree, [h.host() for h in store.hosts()], start=t)
            validate_spec(spec, state, settings.policy)
        except CoreError as e:
            raise _fail(422, _core_message(e)) from None
        if not Rights.of(user, rows).can_submit(body.budget):
            raise forbid(user, f"submit to budget {body.budget} (not a member)")
        row = store.add_workload(
            budget=body.budget, gpus=body.gpus, min_runtime=min_runtime, submit_time=t,
            command=body.command, actor=user.name, resumable=body.resumable,
            priority=body.priority, checkpoint_interval=checkpoint,
            checkpoint_on_term=body.checkpoint_on_term,
        )
        scheduler.wake()
        return row.as_dict()

    @app.get(f"{v1}/workloads", tags=["workloads"])
    def queue(
        _user: User,
        status: Annotated[
            str, Query(description="comma-separated statuses, or 'all'")
        ] = "pending,running,stopping",
        budget: Annotated[str | None, Query(description="a node: its whole subtree")] = None,
        user: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """Workloads, oldest first (default: the active ones)."""
        statuses: list[Status] | None = None
        if status != "all":
            try:
                statuses = [Status(s.strip()) for s in status.split(",") if s.strip()]
            except ValueError:
                valid = ", ".join(s.value for s in Status)
                raise _fail(422, f"status: must be 'all' or some of: {valid}") from None
        rows = store.list_workloads(statuses, budget=budget, user=user, limit=limit)
        return [w.as_dict() for w in rows]

    @app.get(f"{v1}/workloads/{{workload_id}}", tags=["workloads"])
    def show(workload_id: str, _user: User) -> dict[str, Any]:
        """One workload with all its attempts."""
        return store.get_workload(workload_id).as_dict(with_attempts=True)

    def _may_touch(user: UserRow, w: WorkloadRow, what: str) -> None:
        if not rights(user).can_cancel(w.user, w.budget):
            raise forbid(user, f"{what} workload {w.id} (owned by {w.user})")

    @app.post(f"{v1}/workloads/{{workload_id}}/cancel", tags=["workloads"])
    def cancel(workload_id: str, user: User) -> dict[str, Any]:
        """Cancel: pending ones end at once, running ones are stopped by the scheduler."""
        _may_touch(user, store.get_workload(workload_id), "cancel")
        row = store.cancel_workload(workload_id, actor=user.name)
        scheduler.wake()
        return row.as_dict()

    @app.get(
        f"{v1}/workloads/{{workload_id}}/logs",
        tags=["workloads"],
        response_class=PlainTextResponse,
    )
    def logs(
        workload_id: str,
        user: User,
        attempt: Annotated[int | None, Query(ge=1, description="default: the latest")] = None,
        tail: Annotated[int, Query(ge=0, description="last N bytes (0: all)")] = 0,
    ) -> PlainTextResponse:
        """The output (stdout and stderr) of one attempt."""
        w = store.get_workload(workload_id)
        _may_touch(user, w, "read the logs of")
        if not w.attempts:
            raise _fail(404, f"workload {workload_id}: has not started yet, no logs")
        n = attempt if attempt is not None else w.attempts[-1].n
        a = next((x for x in w.attempts if x.n == n), None)
        if a is None:
            raise _fail(404, f"workload {workload_id}: attempt {n}: not found")
        path = Path(a.log_path) if a.log_path else settings.logs_dir / workload_id / f"{n}.log"
        try:
            with open(path, "rb") as f:
                if tail:
                    size = f.seek(0, 2)
                    f.seek(max(0, size - tail))
                data = f.read()
        except FileNotFoundError:
            raise _fail(404, f"workload {workload_id}: attempt {n}: no log file yet") from None
        return PlainTextResponse(data.decode("utf-8", errors="replace"))

    # ---- budgets -----------------------------------------------------------------------
    @app.get(f"{v1}/budgets", tags=["budgets"])
    def budgets(_user: User) -> list[dict[str, Any]]:
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
    def usage(_user: User) -> dict[str, Any]:
        """Charged and free GPU-hours of every node over the lookback window, and its usage
        ratio (charged / (share x healthy GPU-hours))."""
        view = scheduler.queue_view() if hasattr(scheduler, "queue_view") else None
        return _usage(store, settings, now(), view)

    @app.get(f"{v1}/queue", tags=["workloads"])
    def policy_queue(_user: User) -> dict[str, Any]:
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
        b = store.add_budget(body.path, body.weight, actor=user.name,
                             managers=body.managers, members=body.members)
        scheduler.wake()
        return {"path": b.path, "weight": b.weight, "managers": list(b.managers),
                "members": list(b.members)}

    @app.patch(f"{v1}/budgets/{{path:path}}", tags=["budgets"])
    def set_weight(path: str, body: WeightBody, user: User) -> dict[str, Any]:
        """Change a node's weight (its parent's manager, or an admin)."""
        store.get_budget(path)
        if not rights(user).can_set_weight(path):
            raise forbid(user, f"change the weight of budget {path}")
        b = store.set_budget_weight(path, body.weight, actor=user.name)
        scheduler.wake()
        return {"path": b.path, "weight": b.weight}

    @app.put(f"{v1}/budgets/{{path:path}}/members", tags=["budgets"])
    def set_members(path: str, body: MembersBody, user: User) -> dict[str, Any]:
        """Replace a node's members."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the members of budget {path}")
        b = store.set_budget_members(path, body.members, actor=user.name)
        return {"path": b.path, "members": list(b.members)}

    @app.put(f"{v1}/budgets/{{path:path}}/managers", tags=["budgets"])
    def set_managers(path: str, body: ManagersBody, user: User) -> dict[str, Any]:
        """Replace a node's managers."""
        store.get_budget(path)
        if not rights(user).can_set_people(path):
            raise forbid(user, f"change the managers of budget {path}")
        b = store.set_budget_managers(path, body.managers, actor=user.name)
        return {"path": b.path, "managers": list(b.managers)}

    # ---- hosts -------------------------------------------------------------------------
    @app.get(f"{v1}/hosts", tags=["hosts"])
    def hosts(_user: User) -> list[dict[str, Any]]:
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

    # ---- users, audit, health ----------------------------------------------------------
    @app.post(f"{v1}/users", status_code=201, tags=["users"])
    def create_user(body: UserBody, user: User) -> dict[str, Any]:
        """Create a user (admins only)."""
        if not rights(user).can_manage_users():
            raise forbid(user, "create users (admins only)")
        u = store.add_user(body.name, actor=user.name, admin=body.admin)
        return {"name": u.name, "admin": u.admin}

    @app.post(f"{v1}/users/{{name}}/tokens", status_code=201, tags=["users"])
    def create_token(name: str, user: User) -> dict[str, Any]:
        """A new token for a user (admins only). Shown once; only its hash is kept."""
        if not rights(user).can_manage_users():
            raise forbid(user, "create tokens (admins only)")
        token = new_token()
        store.add_token(name, hash_token(token))
        store.append_audit(user.name, "token.create", name, None, None)
        return {"user": name, "token": token}

    @app.get(f"{v1}/audit", tags=["audit"])
    def audit(
        _user: User,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        target: str | None = None,
    ) -> list[dict[str, Any]]:
        """Audit entries, newest first: who changed what, when, old -> new."""
        return [a.as_dict() for a in store.audit(limit=limit, target=target)]

    @app.get(f"{v1}/workloads/{{workload_id}}/why", tags=["workloads"])
    def why(workload_id: str, _user: User) -> dict[str, Any]:
        """Why it waits (order, ratios, victims, earliest start) or until when it is safe."""
        return explain_workload(store, scheduler, workload_id)

    app.include_router(dashboard_router(store, scheduler, settings))  # /, /sim, /metrics

    @app.get(f"{v1}/health", tags=["health"])
    def health() -> dict[str, Any]:
        """Liveness: the database answers. No token needed."""
        store.ping()
        return {"status": "ok", "executor": settings.executor.kind}

    return app


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
