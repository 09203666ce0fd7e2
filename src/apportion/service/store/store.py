"""The service's durable state: one :class:`Store` over SQLite (default) or PostgreSQL.

Every public method is one transaction: it either happens completely or not at all.
Lifecycle changes are checked against the core's transition tables and written as
compare-and-set updates (``... WHERE status = <expected>``), so two writers can never
both move the same workload. SQLite write transactions start with ``BEGIN IMMEDIATE``:
the write lock is taken up front, so a reader upgrading to a writer never hits
``database is locked`` half-way through; waiting writers queue on ``busy_timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from apportion.core import (
    FINAL,
    HOST_TRANSITIONS,
    WORKLOAD_TRANSITIONS,
    BudgetNode,
    BudgetTree,
    CoreError,
    HostState,
    Status,
    check_transition,
    parent_of,
)

from .models import AttemptModel, AuditModel, BudgetModel, HostModel, TokenModel, UserModel
from .models import WorkloadModel as WM
from .rows import (
    AttemptRow,
    AuditRow,
    BudgetRow,
    Conflict,
    HostRow,
    NotFound,
    PlacementEntry,
    UsageInterval,
    UserRow,
    WorkloadRow,
)

ACTIVE = (Status.PENDING, Status.RUNNING, Status.STOPPING)
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
_WRITE = "apportion_write"


def default_sqlite_url(data_dir: str | Path) -> str:
    """The default database: ``<data_dir>/apportion.db``."""
    return f"sqlite:///{Path(data_dir).resolve() / 'apportion.db'}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # Hand transaction control to the ``begin`` hook below (pysqlite would otherwise
    # begin lazily and DEFERRED, which is what makes lock upgrades fail under contention).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    # WAL: readers never block the writer and the writer never blocks readers.
    cur.execute("PRAGMA journal_mode=WAL")
    # FULL, not NORMAL: in WAL mode NORMAL may lose the last commits on power loss (the
    # database stays consistent, but an acknowledged submission could vanish). FULL fsyncs
    # the WAL at every commit, so what the API acknowledged is on disk.
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    write = conn.get_execution_options().get(_WRITE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with apportion's settings (SQLite: WAL, FULL sync, busy
    timeout, immediate write transactions; PostgreSQL: psycopg 3, pre-ping)."""
    if url.startswith("sqlite"):
        memory = url in ("sqlite://", "sqlite:///:memory:")
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
        if memory:  # one connection, or every session would see its own empty database
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return create_engine(url, pool_pre_ping=True)


class Store:
    """Durable state of the live service. See docs/service.md for the schema.

    ``clock`` stamps ``created_at`` and audit entries only; scheduling times (submit,
    start, end) are always passed in by the caller.
    """

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.clock = clock
        self.engine = make_engine(url)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(
            self.engine.execution_options(**{_WRITE: True}), expire_on_commit=False
        )

    # ---- lifecycle -------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest migration (``alembic upgrade head``)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        with self.engine.execution_options(**{_WRITE: True}).begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[Session]:
        maker = self._write if write else self._read
        with maker() as s, s.begin():
            yield s

    def _audit(
        self, s: Session, actor: str, action: str, target: str, old: Any, new: Any
    ) -> None:
        s.add(AuditModel(at=self.clock(), actor=actor, action=action, target=target,
                         old=old, new=new))

    # ---- workloads -------------------------------------------------------------------
    def add_workload(
        self,
        *,
        budget: str,
        gpus: int,
        min_runtime: float,
        submit_time: float,
        command: Sequence[str],
        actor: str,
        resumable: bool = False,
        priority: int = 0,
        checkpoint_interval: float = 0.0,
        user: str | None = None,
        chdir: str | None = None,
        env: Mapping[str, str] | None = None,
        checkpoint_on_term: bool = False,
    ) -> WorkloadRow:
        """Store a new pending workload; durable when this returns. ``user`` (the owner)
        defaults to ``actor``; ``chdir`` and ``env`` are the directory and the exported
        environment it runs with. The caller validated the spec (core.validate_spec)."""
        with self._tx() as s:
            m = WM(
                budget=budget, user=user if user is not None else actor, gpus=gpus,
                min_runtime=float(min_runtime), resumable=resumable, priority=priority,
                checkpoint_interval=float(checkpoint_interval), command=list(command),
                checkpoint_on_term=checkpoint_on_term, chdir=chdir,
                env=dict(env) if env is not None else None,
                submit_time=submit_time, queued_at=submit_time, status=Status.PENDING.value,
                cancel_requested=False, attempts_count=0, created_at=self.clock(),
            )
            s.add(m)
            s.flush()
            m.id = f"w-{m.seq:06d}"
            s.flush()
            return _workload(m)

    def get_workload(self, workload_id: str) -> WorkloadRow:
        """One workload with all its attempts; :class:`NotFound` if there is none."""
        with self._tx(write=False) as s:
            m = s.scalars(select(WM).where(WM.id == workload_id)).one_or_none()
            if m is None:
                raise NotFound(f"workload {workload_id}: not found")
            attempts = [
                _attempt(a)
                for a in s.scalars(
                    select(AttemptModel)
                    .where(AttemptModel.workload_id == workload_id)
                    .order_by(AttemptModel.n)
                )
            ]
            open_ = next((a for a in attempts if a.ended_at is None), None)
            return _workload(m, open_, tuple(attempts))

    def list_workloads(
        self,
        statuses: Iterable[Status] | None = None,
        budget: str | None = None,
        user: str | None = None,
        limit: int = 1000,
    ) -> list[WorkloadRow]:
        """Workloads oldest first, with their open attempt. ``budget`` matches the node and
        its whole subtree."""
        with self._tx(write=False) as s:
            q = select(WM)
            if statuses is not None:
                q = q.where(WM.status.in_([st.value for st in statuses]))
            if budget:
                q = q.where((WM.budget == budget) | WM.budget.startswith(budget + "/"))
            if user:
                q = q.where(WM.user == user)
            rows = list(s.scalars(q.order_by(WM.seq).limit(limit)))
            return self._with_open_attempts(s, rows)

    def active_workloads(self) -> list[WorkloadRow]:
        """Pending, running and stopping workloads, oldest first, with their open attempt."""
        with self._tx(write=False) as s:
            rows = list(
                s.scalars(
                    select(WM).where(WM.status.in_([st.value for st in ACTIVE])).order_by(WM.seq)
                )
            )
            return self._with_open_attempts(s, rows)

    def active_index(self) -> dict[str, tuple[str, bool]]:
        """``id -> (status value, cancel_requested)`` of every active workload: the narrow
        read a scheduling pass needs to notice submissions, cancels and ends."""
        with self._tx(write=False) as s:
            q = (
                select(WM.id, WM.status, WM.cancel_requested)
                .where(WM.status.in_([st.value for st in ACTIVE]))
                .order_by(WM.seq)
            )
            return {str(i): (st, bool(c)) for i, st, c in s.execute(q)}

    def _with_open_attempts(self, s: Session, rows: list[WM]) -> list[WorkloadRow]:
        ids = [m.id for m in rows if m.status != Status.PENDING.value]
        open_: dict[str, AttemptRow] = {}
        for i in range(0, len(ids), 500):  # keep IN lists small
            for a in s.scalars(
                select(AttemptModel).where(
                    AttemptModel.workload_id.in_(ids[i : i + 500]),
                    AttemptModel.ended_at.is_(None),
                )
            ):
                open_[a.workload_id] = _attempt(a)
        return [_workload(m, open_.get(m.id or "")) for m in rows]

    def begin_attempt(
        self,
        workload_id: str,
        placement: Sequence[tuple[str, int, Sequence[int]]],
        started_at: float,
        log_path: str | None = None,
    ) -> AttemptRow:
        """pending -> running and a new attempt row (handle NULL), in one transaction.
        Written before the executor launches. :class:`Conflict` if not pending."""
        entries: list[PlacementEntry] = [(h, int(g), tuple(ix)) for h, g, ix in placement]
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.PENDING.value)
                .values(status=Status.RUNNING.value, attempts_count=WM.attempts_count + 1)
                .returning(WM.attempts_count)
            ).one_or_none()
            if res is None:
                raise self._status_conflict(s, workload_id, Status.RUNNING)
            n = int(res[0])
            a = AttemptModel(
                workload_id=workload_id, n=n,
                placement=[[h, g, list(ix)] for h, g, ix in entries],
                gpus_held=sum(g for _, g, _ in entries), started_at=started_at,
                log_path=log_path,
            )
            s.add(a)
            s.flush()
            return _attempt(a)

    def set_attempt_handle(self, workload_id: str, n: int, handle: str) -> None:
        """Record the executor's handle of a launched attempt."""
        with self._tx() as s:
            a = s.get(AttemptModel, (workload_id, n))
            if a is None:
                raise NotFound(f"workload {workload_id}: attempt {n}: not found")
            a.handle = handle

    def mark_stopping(self, workload_id: str) -> None:
        """running -> stopping (a preemption was issued). :class:`Conflict` otherwise."""
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.RUNNING.value)
                .values(status=Status.STOPPING.value)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise self._status_conflict(s, workload_id, Status.STOPPING)

    def end_attempt(
        self,
        workload_id: str,
        n: int,
        ended_at: float,
        exit_code: int | None,
        end_reason: str,
        new_status: Status,
    ) -> bool:
        """End attempt ``n`` and move the workload to ``new_status`` (``pending``: requeued,
        ``queued_at = ended_at``), charging ``gpus_held x (ended_at - started_at)``
        GPU-seconds, in one transaction. Idempotent: returns False, changing nothing, if
        the attempt had already ended. :class:`Conflict` on an illegal transition."""
        with self._tx() as s:
            a = s.get(AttemptModel, (workload_id, n))
            if a is None:
                raise NotFound(f"workload {workload_id}: attempt {n}: not found")
            gpu_seconds = a.gpus_held * max(0.0, ended_at - a.started_at)
            res = s.execute(
                update(AttemptModel)
                .where(
                    AttemptModel.workload_id == workload_id,
                    AttemptModel.n == n,
                    AttemptModel.ended_at.is_(None),
                )
                .values(ended_at=ended_at, exit_code=exit_code, end_reason=end_reason,
                        gpu_seconds=gpu_seconds)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return False
            w = s.scalars(select(WM).where(WM.id == workload_id)).one()
            old = Status(w.status)
            try:
                check_transition(WORKLOAD_TRANSITIONS, "workload", workload_id, old, new_status)
            except CoreError as e:
                raise Conflict(str(e)) from None
            values: dict[str, Any] = {"status": new_status.value}
            if new_status is Status.PENDING:
                values["queued_at"] = ended_at
            elif new_status in FINAL:
                values.update(exit_code=exit_code, end_reason=end_reason)
            res = s.execute(
                update(WM).where(WM.id == workload_id, WM.status == old.value).values(**values)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise Conflict(f"workload {workload_id}: status: changed concurrently")
            return True

    def cancel_workload(self, workload_id: str, actor: str) -> WorkloadRow:
        """Cancel: a pending workload becomes ``cancelled`` at once; a running or stopping
        one gets ``cancel_requested`` and the scheduler stops it. Audited.
        :class:`Conflict` if it already ended."""
        with self._tx() as s:
            w = s.scalars(select(WM).where(WM.id == workload_id)).one_or_none()
            if w is None:
                raise NotFound(f"workload {workload_id}: not found")
            old = Status(w.status)
            if old in FINAL:
                raise Conflict(f"workload {workload_id}: status: already {old.value}")
            if old is Status.PENDING:
                res = s.execute(
                    update(WM)
                    .where(WM.id == workload_id, WM.status == old.value)
                    .values(status=Status.CANCELLED.value, end_reason=f"cancelled by {actor}",
                            cancel_requested=True)
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount != 1:  # type: ignore[attr-defined]
                    raise Conflict(f"workload {workload_id}: status: changed concurrently")
            else:
                w.cancel_requested = True
            self._audit(s, actor, "workload.cancel", workload_id, {"status": old.value}, None)
            s.flush()
            s.expire(w)
            return _workload(s.scalars(select(WM).where(WM.id == workload_id)).one())

    def _status_conflict(self, s: Session, workload_id: str, to: Status) -> Exception:
        cur = s.scalars(select(WM.status).where(WM.id == workload_id)).one_or_none()
        if cur is None:
            return NotFound(f"workload {workload_id}: not found")
        return Conflict(
            f"workload {workload_id}: state: cannot go from {cur} to {to.value}"
        )

    def usage_intervals(self, since: float) -> list[UsageInterval]:
        """Attempts overlapping ``[since, now)``: what the ledger is rebuilt from."""
        with self._tx(write=False) as s:
            q = (
                select(WM.budget, AttemptModel.gpus_held, WM.min_runtime,
                       AttemptModel.started_at, AttemptModel.ended_at)
                .join(WM, WM.id == AttemptModel.workload_id)
                .where(AttemptModel.ended_at.is_(None) | (AttemptModel.ended_at > since))
                .order_by(AttemptModel.started_at)
            )
            return [
                UsageInterval(b, int(g), float(m) > 0, float(st), None if e is None else float(e))
                for b, g, m, st, e in s.execute(q)
            ]

    # ---- hosts -----------------------------------------------------------------------
    def hosts(self) -> list[HostRow]:
        with self._tx(write=False) as s:
            return [_host(h) for h in s.scalars(select(HostModel).order_by(HostModel.name))]

    def get_host(self, name: str) -> HostRow:
        with self._tx(write=False) as s:
            h = s.get(HostModel, name)
            if h is None:
                raise NotFound(f"host {name}: not found")
            return _host(h)

    def add_host(
        self,
        name: str,
        gpus: int,
        actor: str,
        state: HostState = HostState.HEALTHY,
        reason: str = "",
        at: float | None = None,
    ) -> HostRow:
        """Register a host. Audited. :class:`Conflict` if the name exists."""
        if gpus <= 0:
            raise Conflict(f"host {name}: gpus: must be > 0, got {gpus}")
        with self._tx() as s:
            if s.get(HostModel, name) is not None:
                raise Conflict(f"host {name}: name: already exists")
            h = HostModel(name=name, gpus=gpus, state=state.value, reason=reason,
                          changed_at=self.clock() if at is None else at)
            s.add(h)
            self._audit(s, actor, "host.add", name, None, {"gpus": gpus, "state": state.value})
            return _host(h)

    def set_host_state(
        self, name: str, state: HostState, reason: str, actor: str, at: float | None = None
    ) -> HostRow:
        """Move a host along HOST_TRANSITIONS; audited (old -> new state and reason).
        :class:`Conflict` on an illegal transition."""
        with self._tx() as s:
            h = s.get(HostModel, name)
            if h is None:
                raise NotFound(f"host {name}: not found")
            old = HostState(h.state)
            try:
                check_transition(HOST_TRANSITIONS, "host", name, old, state)
            except CoreError as e:
                raise Conflict(str(e)) from None
            before = {"state": h.state, "reason": h.reason}
            h.state, h.reason = state.value, reason
            h.changed_at = self.clock() if at is None else at
            self._audit(s, actor, "host.state", name, before,
                        {"state": state.value, "reason": reason})
            return _host(h)

    # ---- budgets ---------------------------------------------------------------------
    def budgets(self) -> list[BudgetRow]:
        """Every budget node, parents before children."""
        with self._tx(write=False) as s:
            rows = [_budget(b) for b in s.scalars(select(BudgetModel))]
        order = {p: i for i, p in enumerate(_tree_of(rows).nodes())} if rows else {}
        return sorted(rows, key=lambda r: order.get(r.path, 0))

    def get_budget(self, path: str) -> BudgetRow:
        with self._tx(write=False) as s:
            b = s.get(BudgetModel, path)
            if b is None:
                raise NotFound(f"budget {path}: not found")
            return _budget(b)

    def load_tree(self) -> BudgetTree:
        """The budget tree as the policy core uses it. :class:`NotFound` if there is none."""
        rows = self.budgets()
        if not rows:
            raise NotFound("budgets: the tree is empty")
        return _tree_of(rows)

    def add_budget(
        self,
        path: str,
        weight: float,
        actor: str,
        managers: Sequence[str] = (),
        members: Sequence[str] = (),
        create_parents: bool = False,
    ) -> BudgetRow:
        """Create a node. Its parent must exist (or ``create_parents``: missing ancestors
        get weight 1). A leaf with active workloads cannot get children (they draw on
        leaves only). Audited. :class:`Conflict` on a bad path, weight or duplicate."""
        with self._tx() as s:
            existing = [_budget(b) for b in s.scalars(select(BudgetModel))]
            known = {b.path for b in existing}
            if path in known:
                raise Conflict(f"budget {path}: path: already exists")
            new = [BudgetNode(b.path, b.weight) for b in existing] + [BudgetNode(path, weight)]
            try:
                BudgetTree.build(new)
            except CoreError as e:
                raise Conflict(str(e)) from None
            parent = parent_of(path)
            missing = []
            while parent and parent not in known:
                missing.append(parent)
                parent = parent_of(parent)
            if missing and not create_parents:
                raise Conflict(f"budget {path}: parent: unknown budget {missing[0]!r}")
            direct = parent_of(path)
            if direct in known:
                busy = s.scalars(
                    select(WM.id).where(
                        WM.budget == direct, WM.status.in_([st.value for st in ACTIVE])
                    ).limit(1)
                ).first()
                if busy is not None:
                    raise Conflict(
                        f"budget {path}: parent: {direct!r} is a leaf with active workloads"
                        f" (e.g. {busy}); it cannot get children"
                    )
            for p in reversed(missing):
                s.add(BudgetModel(path=p, parent=parent_of(p) or None, weight=1.0,
                                  managers=[], members=[]))
                self._audit(s, actor, "budget.create", p, None,
                            {"weight": 1.0, "managers": [], "members": []})
                s.flush()
            b = BudgetModel(path=path, parent=parent_of(path) or None, weight=float(weight),
                            managers=list(managers), members=list(members))
            s.add(b)
            self._audit(s, actor, "budget.create", path, None,
                        {"weight": float(weight), "managers": list(managers),
                         "members": list(members)})
            return _budget(b)

    def set_budget_weight(self, path: str, weight: float, actor: str) -> BudgetRow:
        """Change one node's weight. Audited (old -> new)."""
        if not (weight > 0) or weight == float("inf"):
            raise Conflict(f"budget {path}: weight: must be > 0, got {weight}")
        with self._tx() as s:
            b = self._budget_model(s, path)
            old = b.weight
            b.weight = float(weight)
            self._audit(s, actor, "budget.weight", path, {"weight": old}, {"weight": b.weight})
            return _budget(b)

    def set_budget_members(self, path: str, members: Sequence[str], actor: str) -> BudgetRow:
        """Replace a node's member list. Audited (old -> new)."""
        return self._set_list(path, "members", members, actor)

    def set_budget_managers(self, path: str, managers: Sequence[str], actor: str) -> BudgetRow:
        """Replace a node's manager list. Audited (old -> new)."""
        return self._set_list(path, "managers", managers, actor)

    def _set_list(self, path: str, column: str, names: Sequence[str], actor: str) -> BudgetRow:
        clean = sorted(set(names))
        with self._tx() as s:
            b = self._budget_model(s, path)
            old = list(getattr(b, column))
            setattr(b, column, clean)
            self._audit(s, actor, f"budget.{column}", path, {column: old}, {column: clean})
            return _budget(b)

    def _budget_model(self, s: Session, path: str) -> BudgetModel:
        b = s.get(BudgetModel, path)
        if b is None:
            raise NotFound(f"budget {path}: not found")
        return b

    # ---- users and tokens ------------------------------------------------------------
    def add_user(
        self, name: str, actor: str, admin: bool = False, unix_user: str | None = None
    ) -> UserRow:
        """Create a user (``unix_user``: the Unix account its work runs as, None for the
        account of the same name). Audited. :class:`Conflict` if the name exists."""
        if not name:
            raise Conflict("user: name: must not be empty")
        with self._tx() as s:
            if s.get(UserModel, name) is not None:
                raise Conflict(f"user {name}: name: already exists")
            s.add(UserModel(name=name, admin=admin, unix_user=unix_user))
            self._audit(s, actor, "user.create", name, None,
                        {"admin": admin, "unix_user": unix_user})
            return UserRow(name, admin, unix_user)

    def users(self) -> list[UserRow]:
        with self._tx(write=False) as s:
            return [_user(u) for u in s.scalars(select(UserModel).order_by(UserModel.name))]

    def get_user(self, name: str) -> UserRow:
        with self._tx(write=False) as s:
            u = s.get(UserModel, name)
            if u is None:
                raise NotFound(f"user {name}: not found")
            return _user(u)

    def add_token(self, user: str, token_hash: str) -> None:
        """Store a token's sha256 hex digest for ``user`` (never the token itself)."""
        with self._tx() as s:
            if s.get(UserModel, user) is None:
                raise NotFound(f"user {user}: not found")
            s.add(TokenModel(hash=token_hash, user=user, created_at=self.clock()))

    def user_for_token(self, token_hash: str) -> UserRow | None:
        """The user a token digest belongs to, or None."""
        with self._tx(write=False) as s:
            u = s.scalars(
                select(UserModel)
                .join(TokenModel, TokenModel.user == UserModel.name)
                .where(TokenModel.hash == token_hash)
            ).one_or_none()
            return None if u is None else _user(u)

    # ---- audit -----------------------------------------------------------------------
    def append_audit(self, actor: str, action: str, target: str, old: Any, new: Any) -> None:
        """Append one audit entry (JSON-able ``old`` and ``new``)."""
        with self._tx() as s:
            self._audit(s, actor, action, target, old, new)

    def audit(
        self, limit: int = 100, target: str | None = None, after_id: int = 0
    ) -> list[AuditRow]:
        """Audit entries, newest first (``after_id``: only entries with a larger id)."""
        with self._tx(write=False) as s:
            q = select(AuditModel).where(AuditModel.id > after_id)
            if target:
                q = q.where(AuditModel.target == target)
            return [
                AuditRow(a.id, a.at, a.actor, a.action, a.target, a.old, a.new)
                for a in s.scalars(q.order_by(AuditModel.id.desc()).limit(limit))
            ]

    def is_empty(self) -> bool:
        """True before anything was seeded: no budgets, users or hosts."""
        with self._tx(write=False) as s:
            return all(
                s.scalars(select(m).limit(1)).first() is None
                for m in (BudgetModel, UserModel, HostModel)
            )


# ---- row conversion ------------------------------------------------------------------
def _attempt(a: AttemptModel) -> AttemptRow:
    return AttemptRow(
        workload_id=a.workload_id,
        n=a.n,
        placement=tuple((str(h), int(g), tuple(int(i) for i in ix)) for h, g, ix in a.placement),
        gpus_held=a.gpus_held,
        started_at=a.started_at,
        ended_at=a.ended_at,
        handle=a.handle,
        exit_code=a.exit_code,
        end_reason=a.end_reason,
        gpu_seconds=a.gpu_seconds,
        log_path=a.log_path,
    )


def _workload(
    m: WM, attempt: AttemptRow | None = None, attempts: tuple[AttemptRow, ...] = ()
) -> WorkloadRow:
    assert m.id is not None
    return WorkloadRow(
        id=m.id,
        budget=m.budget,
        user=m.user,
        gpus=m.gpus,
        min_runtime=m.min_runtime,
        resumable=m.resumable,
        priority=m.priority,
        checkpoint_interval=m.checkpoint_interval,
        checkpoint_on_term=m.checkpoint_on_term,
        command=tuple(m.command),
        submit_time=m.submit_time,
        queued_at=m.queued_at,
        status=Status(m.status),
        cancel_requested=m.cancel_requested,
        attempts_count=m.attempts_count,
        exit_code=m.exit_code,
        end_reason=m.end_reason,
        created_at=m.created_at,
        chdir=m.chdir,
        env=dict(m.env) if m.env is not None else None,
        attempt=attempt,
        attempts=attempts,
    )


def _user(u: UserModel) -> UserRow:
    return UserRow(u.name, bool(u.admin), u.unix_user)


def _host(h: HostModel) -> HostRow:
    return HostRow(h.name, h.gpus, HostState(h.state), h.reason, h.changed_at)


def _budget(b: BudgetModel) -> BudgetRow:
    return BudgetRow(b.path, b.parent, b.weight, tuple(b.managers), tuple(b.members))


def _tree_of(rows: Iterable[BudgetRow]) -> BudgetTree:
    return BudgetTree.build(BudgetNode(r.path, r.weight) for r in rows)
