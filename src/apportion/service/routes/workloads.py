"""Workload routes: submit, list, show, cancel, logs, the policy's queue and ``why``."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at
# runtime, and they name dependencies made from the Api context.
import errno
import os
import stat
from collections.abc import Sequence
from datetime import tzinfo
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import AfterValidator

from apportion.core import (
    After,
    BudgetNode,
    BudgetTree,
    CoreError,
    Status,
    WorkloadSpec,
    allowed_hosts,
    parse_array,
    parse_dependency,
)
from apportion.core.fleet import pool_name
from apportion.core.names import did_you_mean
from apportion.core.units import parse_duration

from .. import validation as v
from ..auth import Principal, Rights, as_others_see, redact
from ..bodies import CancelBody, NoBody, SubmitBody
from ..config import ServiceConfig
from ..dashboard import explain_workload, not_started, reader_zone
from ..executors import identity
from ..pools import fleet_of, validate
from ..replies import (
    BulkCancel,
    CancelOutcome,
    QueueView,
    WhyExplanation,
    WhyHeld,
    WhyHistory,
    Workload,
)
from ..store import (
    ACTIVE,
    AlreadySubmitted,
    CancelResult,
    CancelRow,
    NotALeaf,
    NotFound,
    Store,
    UserRow,
    WorkloadRow,
)
from .context import (
    IDEMPOTENCY_KEY,
    NEXT_PAGE,
    TEXT_ROUTE_ERRORS,
    V1,
    Api,
    core_message,
    fail,
    next_page,
    printable,
    request_digest,
)

# the most of a log one answer holds (4 MiB; the rest is asked for from X-Log-Offset): the
# API shares its process with the scheduler, and a log read whole cost a few times its size
# in memory per request, enough for one user's reads to get the server killed
LOG_ANSWER_MAX = 4 << 20


class LogBytes(Response):
    """A log's bytes as the job wrote them, not text: offsets count bytes, and decoding
    each answer on its own turned a character split between two answers (or cut by
    ``tail``) into replacement characters, and bytes that are not UTF-8 into others."""

    media_type = "application/octet-stream"


def router(api: Api) -> APIRouter:
    """``/v1/workloads`` and below, ``/v1/queue``."""
    router = APIRouter()
    store, scheduler, settings, now = api.store, api.scheduler, api.settings, api.now
    rights, forbid = api.rights, api.forbid
    Reader = Annotated[Principal, Depends(api.principal)]
    User = Annotated[UserRow, Depends(api.writer)]
    v1 = V1

    def shown(who: Principal, rows: Sequence[WorkloadRow],
              with_attempts: bool = False) -> list[Workload]:
        r = Rights.of(who.user, store.budgets())
        pools = _pools(store, settings) if any(w.attempt for w in rows) else {}
        return [
            _workload(w, with_attempts, private=not who.may_see_private(r, w.user, w.budget),
                      pools=pools)
            for w in rows
        ]

    # ---- workloads ---------------------------------------------------------------------
    @router.post(f"{v1}/workloads", status_code=201, tags=["workloads"])
    def submit(
        body: SubmitBody,
        user: User,
        # the pattern is the schema's only: check_idempotency_key's refusal says the rule
        # in words (pydantic's says "String should match pattern '^[\\x21-\\x7e]...'")
        idempotency_key: Annotated[str | None, Header(
            json_schema_extra={"pattern": IDEMPOTENCY_KEY},
            description="a retried submission with the same key answers the first one",
        ), AfterValidator(v.check_idempotency_key)] = None,
    ) -> Workload:
        """Submit a workload to a leaf budget. Durable when the answer arrives."""
        digest = request_digest(body) if idempotency_key is not None else None

        def replay(row: WorkloadRow, first_digest: str | None) -> Workload:
            if first_digest != digest:
                raise fail(409, f"Idempotency-Key: already used for another submission "
                                 f"({row.id}); send a new key for a new one")
            out = _workload(row.as_submitted())
            if row.array_id is not None:  # an array keeps its key on its first element
                out.array_ids = store.array_ids(row.array_id)
            return out

        if idempotency_key is not None:  # a retry answers the first, whatever changed since
            found = store.by_idempotency_key(user.name, idempotency_key)
            if found is not None:
                return replay(*found)
        # the durations as checked in the body (validation.check_duration)
        min_runtime = parse_duration(body.min_runtime)
        checkpoint = parse_duration(body.checkpoint_interval)
        time_limit = (settings.policy.default_time_limit if body.time_limit is None
                      else parse_duration(body.time_limit))
        indexes: tuple[int, ...] = ()
        throttle = 0
        after: tuple[tuple[After, str], ...] = ()
        try:
            if body.array is not None:
                indexes, throttle = parse_array(body.array)
            if body.dependency:
                after = parse_dependency(body.dependency)
        except CoreError as e:
            raise fail(422, str(e)) from None
        known = store.statuses(d for _, d in after)
        for _, dep in after:
            if dep not in known:
                raise fail(422, f"dependency: {dep}: no such workload")
        try:
            after = _whole_arrays(after, store)
        except ValueError as e:
            raise fail(422, str(e)) from None
        t = now()
        host_rows = store.hosts()
        problem = _hosts_problem(body.nodelist, body.exclude, [h.name for h in host_rows])
        if problem is not None:
            raise fail(422, problem)
        try:
            allowed = allowed_hosts([h.name for h in host_rows], body.nodelist, body.exclude)
            spec = WorkloadSpec(
                id="new", budget=body.budget, gpus=body.gpus, min_runtime=min_runtime,
                submit_time=t, user=user.name, resumable=body.resumable,
                priority=body.priority, checkpoint_interval=checkpoint,
                time_limit=time_limit, hosts=allowed,
                checkpoint_on_term=body.checkpoint_on_term,
                gpu_kinds=body.kinds(), cluster=body.cluster or "",
            )
            rows = store.budgets()  # one read serves validation and rights
            if not rows:
                raise fail(422, f"budget: {body.budget!r}: no budgets exist yet")
            tree = BudgetTree.build(BudgetNode(b.path, b.weight) for b in rows)
            # the hosts in their pools, as the scheduler has them
            fleet = fleet_of(tree, settings.pools,
                             ((h.host(), h.cluster, h.kind) for h in host_rows), t)
            validate(fleet, spec, settings.policy)
        except CoreError as e:
            # the body's fields: gpu_kind (one kind or a list), and nodelist and exclude, of
            # which the core's hosts are made
            message = core_message(e).replace("gpu_kinds:", "gpu_kind:", 1)
            if message.startswith("hosts:"):
                sent = [f for f, v in (("nodelist", body.nodelist), ("exclude", body.exclude))
                        if v]
                message = "/".join(sent) + message.removeprefix("hosts")
            raise fail(422, message) from None
        if not Rights.of(user, rows).can_submit(body.budget):
            raise forbid(user, f"submit to budget {body.budget} (not a member)")
        problem = _run_problem(body, user, settings)
        if problem is not None:
            raise fail(422, problem)
        try:
            row = store.add_workload(
                budget=body.budget, gpus=body.gpus, min_runtime=min_runtime, submit_time=t,
                command=body.command, actor=user.name, resumable=body.resumable,
                priority=body.priority, checkpoint_interval=checkpoint, name=body.name,
                chdir=body.chdir, env=body.env, umask=body.umask,
                time_limit=time_limit, dependencies=[(a.value, d) for a, d in after],
                array=indexes, array_throttle=throttle, nodelist=body.nodelist,
                exclude=body.exclude, checkpoint_on_term=body.checkpoint_on_term,
                gpu_kinds=spec.gpu_kinds, cluster=spec.cluster, signal=body.signal,
                idempotency_key=idempotency_key, request_digest=digest,
            )
        except AlreadySubmitted as e:  # the same key, stored concurrently
            return replay(e.row, e.digest)
        except NotALeaf as e:  # a child was added since the check above: refused as there
            raise fail(422, str(e)) from None
        scheduler.wake(by=user.name)
        out = _workload(row)
        if indexes:
            out.array_ids = store.array_ids(row.id)
        return out

    def must_exist(budget: str | None, user: str | None, array: str | None) -> None:
        """A filter naming nothing that exists (or an array id that is no array's) is a
        typo, not an empty queue: 422 naming the field, with the closest names (the store's
        refusal names them)."""
        for field_name, value, lookup in (("budget", budget, store.get_budget),
                                          ("user", user, store.get_user),
                                          ("array", array, lambda a: _array_ids(store, a))):
            if value:
                try:
                    lookup(value)
                except NotFound as e:
                    raise fail(422, f"{field_name}: {e}") from None

    @router.get(f"{v1}/workloads", tags=["workloads"], responses=NEXT_PAGE)
    def queue(
        who: Reader,
        request: Request,
        response: Response,
        status: Annotated[
            str, Query(description="comma-separated statuses, or 'all'")
        ] = "pending,running,stopping",
        budget: Annotated[str | None, Query(description="a node: its whole subtree")] = None,
        user: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
        array: Annotated[str | None, Query(description="an array's id: its elements")] = None,
        after: Annotated[str | None, Query(
            description="a workload's id: only those after it (the next page's cursor)",
        )] = None,
    ) -> list[Workload]:
        """Workloads, oldest first (default: the active ones); with more than ``limit``, a
        ``Link`` header names the next page. Another user's command, environment and
        directory are shown only to managers of its budget and admins."""
        statuses: list[Status] | None = None
        if status != "all":
            valid = ", ".join(s.value for s in Status)
            try:
                statuses = [Status(s.strip()) for s in status.split(",") if s.strip()]
            except ValueError:
                raise fail(422, f"status: must be 'all' or some of: {valid}") from None
            if not statuses:  # it would match nothing: a mistake, not an empty queue
                raise fail(422, f"status: empty; give 'all' or some of: {valid}")
        must_exist(budget, user, array)
        if after:
            try:
                store.get_workload(after)
            except NotFound as e:
                raise fail(422, f"after: {e}") from None
        rows = store.list_workloads(statuses, budget=budget, user=user, limit=limit + 1,
                                    array=array, after=after or None)
        if len(rows) > limit:  # one more than asked for: there are more
            rows = rows[:limit]
            next_page(request, response, "after", rows[-1].id)
        return shown(who, rows)

    @router.get(f"{v1}/workloads/{{workload_id}}", tags=["workloads"])
    def show(workload_id: str, who: Reader) -> Workload:
        """One workload with all its attempts (private fields as in the list)."""
        return shown(who, [store.get_workload(workload_id)], with_attempts=True)[0]

    def _may_touch(user: UserRow, w: WorkloadRow, what: str) -> None:
        if not rights(user).can_cancel(w.user, w.budget):
            raise forbid(user, f"{what} workload {w.id} (owned by {w.user})")

    @router.post(f"{v1}/workloads/{{workload_id}}/cancel", tags=["workloads"])
    def cancel(workload_id: str, user: User, _body: NoBody | None = None) -> Workload:
        """Cancel: pending ones end at once, running ones are stopped by the scheduler."""
        _may_touch(user, store.get_workload(workload_id), "cancel")
        row = store.cancel_workload(workload_id, actor=user.name)
        scheduler.wake(by=user.name)
        return _workload(row)

    @router.post(f"{v1}/workloads/cancel", tags=["workloads"])
    def cancel_many(body: CancelBody, user: User) -> BulkCancel:
        """Cancel many workloads in one request: ``ids``, or every active workload a filter
        matches (``user``, ``budget``, ``array``, narrowed by ``status``). Each as the
        cancel of one: pending ones end at once, running ones are stopped by the
        scheduler; one the caller may not cancel, that has ended or that does not exist is
        answered so and left as it is. A retry cancels and audits nothing twice."""
        filtered = bool(body.user or body.budget or body.array)
        if body.ids is not None and (filtered or body.status):
            raise fail(422, "ids: give ids or a filter (user, budget, array, status), "
                            "not both")
        if body.status and not filtered:
            raise fail(422, "status: only with a filter: user, budget or array")
        if body.ids is None and not filtered:
            raise fail(422, "body: give ids, or a filter: user, budget or array")
        ids, only = body.ids, None
        if ids is None:
            must_exist(body.budget, body.user, body.array)
            only = [Status(s) for s in body.status] if body.status else list(ACTIVE)
            ids = store.workload_ids(only, budget=body.budget, user=body.user,
                                     array=body.array)
        done = store.cancel_workloads(ids, user.name, rights(user).can_cancel, only)
        scheduler.wake(by=user.name)
        return BulkCancel(workloads=[_cancel_outcome(r, user.name) for r in done])

    @router.get(
        f"{v1}/workloads/{{workload_id}}/logs",
        tags=["workloads"],
        response_class=LogBytes,
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
    ) -> Response:
        """The output (stdout and stderr) of one attempt, the bytes as written, at most
        4 MiB of them (``LOG_ANSWER_MAX``): for its owner, managers of its budget and admins.
        ``X-Log-Attempt`` names the attempt, ``X-Log-Offset`` the byte after what was sent:
        pass it as ``offset`` for the rest, or for what was written since (``apportion logs
        -f``); ``X-Log-Size`` is the log's size when read (below it: more to fetch)."""
        w = store.get_workload(workload_id)
        if who.read_only:  # whose ever the work: the token's kind, not its user, refuses
            raise fail(403, f"forbidden: a {who.kind} token of {who.name} cannot read "
                            f"private data (the logs of workload {w.id})")
        if not who.may_see_private(rights(who.user), w.user, w.budget):
            raise forbid(who, f"read the logs of workload {w.id} (owned by {w.user})")
        if not w.attempts:  # it exists: 409 (not yet), not the 404 of a workload that does not
            raise fail(409, f"workload {workload_id}: has not started yet, no logs")
        n = attempt if attempt is not None else w.attempts[-1].n
        a = next((x for x in w.attempts if x.n == n), None)
        if a is None:
            raise fail(404, f"workload {workload_id}: attempt {n}: not found")
        # where it went at launch (older attempts stored none: where logs_dir puts it now)
        path = Path(a.log_path) if a.log_path else settings.logs_dir / workload_id / f"{n}.log"
        try:
            # never through a link, never a fifo or device: with Slurm the log's directory is
            # its owner's, who could otherwise swap the log for a link to a file only the
            # server may read, or for a fifo whose open (without O_NONBLOCK) or read would
            # hold a server thread forever; O_NONBLOCK does not change reading a regular file
            with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise fail(404, f"workload {workload_id}: attempt {n}: log file is not "
                                    "a regular file")
                size = st.st_size
                f.seek(max(0, size - tail) if tail else offset)
                data = f.read(LOG_ANSWER_MAX)
                end = f.tell()
        except FileNotFoundError:
            if settings.executor.kind == "memory":  # a dry run: nothing ran, nothing wrote
                raise fail(404, f"workload {workload_id}: attempt {n}: no log: the memory "
                                "executor runs nothing") from None
            if a.ended_at is None:
                raise fail(409, f"workload {workload_id}: attempt {n}: no log file yet"
                           ) from None
            where = (f"{path} is gone" if a.log_path else
                     f"not found under {settings.logs_dir} (logs_dir changed?)")
            raise fail(404, f"workload {workload_id}: attempt {n}: log file {where}") from None
        except OSError as e:
            if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link put in the log's place
                raise fail(404, f"workload {workload_id}: attempt {n}: log file is a "
                                "symbolic link, which is not served") from None
            raise fail(404, f"workload {workload_id}: attempt {n}: log file unreadable: "
                             f"{e.strerror}") from None
        return LogBytes(data, headers={"X-Log-Attempt": str(n), "X-Log-Offset": str(end),
                                       "X-Log-Size": str(size)})

    @router.get(f"{v1}/queue", tags=["workloads"])
    def policy_queue(who: Reader) -> QueueView:
        """The queue as the scheduler's last pass saw it: pending work in policy order with
        its wait reason, running work with its protection, hosts and budget ratios. 503
        before the first pass (an empty queue would say nothing is pending). Never waits
        for a pass in progress, only for the one that takes in the caller's own writes
        (submissions, cancels): what it submitted is listed."""
        if scheduler.state is None:
            raise fail(503, not_started(store))
        return scheduler.queue_view(who.name)

    @router.get(f"{v1}/workloads/{{workload_id}}/why", tags=["workloads"])
    def why(
        workload_id: str, who: Annotated[Principal | None, Depends(api.public_reader)],
        zone: Annotated[tzinfo, Depends(reader_zone)],
    ) -> WhyExplanation | WhyHeld | WhyHistory:
        """Why it waits (order, ratios, victims, earliest start), what holds it out of the
        queue, or until when it is safe; the times in its sentences in the zone ``tz``
        names (default UTC)."""
        def may_see_private(w: WorkloadRow) -> bool:
            return who is not None and who.may_see_private(rights(who.user), w.user,
                                                           w.budget)
        return explain_workload(store, scheduler, workload_id, may_see_private, zone)

    return router


def _hosts_problem(nodelist: Sequence[str], exclude: Sequence[str],
                   known: Sequence[str]) -> str | None:
    """What is wrong with ``nodelist``/``exclude``, named by the fields as sent (the core
    names them ``hosts``), or None: an unknown host in either (one mistyped in ``exclude``
    would let the work run where it was to be kept off), or the two leaving no host."""
    for field_name, hosts in (("nodelist", nodelist), ("exclude", exclude)):
        for h in hosts:
            if h not in known:
                return f"{field_name}: unknown host {h!r}" + did_you_mean(h, known, quote=True)
    try:
        allowed_hosts(known, nodelist, exclude)
    except CoreError:
        sent = [f for f, v in (("nodelist", nodelist), ("exclude", exclude)) if v]
        return f"{'/'.join(sent)}: {'leave' if len(sent) > 1 else 'leaves'} no host to run on"
    return None


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


def _workload(row: WorkloadRow, with_attempts: bool = False, private: bool = False,
              pools: dict[str, str] | None = None) -> Workload:
    """The reply for one workload: in full, or with its private fields left out; with
    ``pools`` (host -> pool), the pool it runs in."""
    d = (as_others_see(row) if private else row).as_dict(with_attempts)
    out = Workload.model_validate(redact(d) if private else printable(d))
    if row.attempt is not None and row.attempt.placement and pools:
        out.pool = pools.get(row.attempt.placement[0][0])
    return out


def _cancel_outcome(row: CancelRow, caller: str) -> CancelOutcome:
    """One workload's answer to a bulk cancel; why it was left as it is in the words the
    cancel of that one alone answers with."""
    status = None if row.status is None else row.status.value
    detail = {
        CancelResult.ENDED: f"workload {row.id}: status: already {status}",
        CancelResult.NOT_FOUND: f"workload {row.id}: not found",
        CancelResult.NOT_ALLOWED: f"forbidden: {caller} may not cancel workload {row.id} "
                                  f"(owned by {row.owner})",
    }.get(row.result)
    return CancelOutcome(id=row.id, result=row.result.value, status=status, detail=detail)


def _array_ids(store: Store, array_id: str) -> list[str]:
    """The elements of the array ``array_id`` names; :class:`NotFound` when it names no
    workload, or one that is no array's (another element of an array: naming the array's
    id, the one to give)."""
    ids = store.array_ids(array_id)
    if not ids:
        row = store.get_workload(array_id)  # NotFound: no such workload
        if row.array_id is not None:
            raise NotFound(f"workload {array_id}: not an array's id: it is element "
                           f"{row.array_index} of array {row.array_id} (the array's id, its "
                           "first element's, names the whole array)")
        raise NotFound(f"workload {array_id}: not an array")
    return ids


def _pools(store: Any, settings: ServiceConfig) -> dict[str, str]:
    """Host -> its pool ``cluster/kind``; empty with one pool (pools are shown only when
    there are several)."""
    out = {h.name: pool_name(*settings.pools.of(h.cluster, h.kind)) for h in store.hosts()}
    return out if len(set(out.values())) > 1 else {}


def _whole_arrays(after: tuple[tuple[After, str], ...], store: Store
                  ) -> tuple[tuple[After, str], ...]:
    """Each ``afterok``/``afterany`` dependency on an array's id (its first element's, which
    names the array) as one on every element, as Slurm's on an array job id waits for the
    whole array; a dependency on another element is on that element alone. :class:`ValueError`
    for ``afternotok`` on a whole array: Slurm's means "all ended, one at least failed",
    which one dependency per element cannot say (it would need every element to fail)."""
    out: dict[tuple[After, str], None] = {}  # in order, once each
    for kind, dep in after:
        elements = store.array_ids(dep)
        if elements and kind is After.NOTOK:
            raise ValueError(
                f"dependency: afternotok:{dep}: {dep} names an array of {len(elements)} "
                "workloads, and afternotok on a whole array is not supported (in Slurm: all "
                f"ended, one at least failed); use afterany:{dep} (all ended), or name single "
                "elements")
        for element in elements or [dep]:
            out[(kind, element)] = None
    return tuple(out)
