"""The service's durable state: one :class:`Store` over SQLite (default) or PostgreSQL.

Every public method is one transaction: it either happens completely or not at all.
Lifecycle changes are checked against the core's transition tables and written as
compare-and-set updates (``... WHERE status = <expected>``), so two writers can never
both move the same workload. SQLite write transactions start with ``BEGIN IMMEDIATE``:
the write lock is taken up front, so a reader upgrading to a writer never hits
``database is locked`` half-way through; waiting writers queue on ``busy_timeout``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Engine,
    Select,
    case,
    create_engine,
    delete,
    event,
    func,
    insert,
    make_url,
    or_,
    select,
    union,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
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
from apportion.core.names import did_you_mean

from .models import (
    AttemptModel,
    AuditModel,
    BudgetModel,
    HostModel,
    MetaModel,
    TokenModel,
    UserModel,
)
from .models import WorkloadModel as WM
from .rows import (
    TOKEN_KINDS,
    AlreadySubmitted,
    AttemptRow,
    AuditRow,
    BudgetRow,
    CancelResult,
    CancelRow,
    Conflict,
    HostRow,
    NotALeaf,
    NotFound,
    PlacementEntry,
    TokenRow,
    UnknownParent,
    UsageInterval,
    UsedAttempt,
    UsedWorkload,
    UserRow,
    WorkloadRow,
)

ACTIVE = (Status.PENDING, Status.RUNNING, Status.STOPPING)
# workloads per transaction of a bulk cancel: each holds the write lock briefly (the
# scheduler and submissions wait for it), and its IN list stays small
CANCEL_BATCH = 500
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


def _outside_transaction(conn: Connection, sql: str) -> Any:
    """Run ``sql`` on the driver's connection itself (its cursor): SQLAlchemy would begin a
    transaction first (see :func:`_sqlite_begin`), inside which some pragmas do nothing."""
    raw = conn.connection.driver_connection
    assert raw is not None, "a connection checked out of the pool has its driver's"
    return raw.execute(sql)


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
    # a host that does not answer at all (a dropped route) fails a connection in 10 s, not
    # after the kernel's two minutes of SYN retries
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10})


log = logging.getLogger("apportion.store")


class StoreUnavailable(Exception):
    """The database a config names cannot be used; the message names it (without its
    password) and says why."""


class StoreMissing(StoreUnavailable):
    """The SQLite file a config names (or, without a config, ``serve``'s default) is not
    there: the input that names the store is wrong, not the database (a usage error to a
    command that only reads it)."""


def shown_url(url: str) -> str:
    """``url`` as it may be printed: the password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: the driver's error says so
        return url


def database_error(url: str, e: DBAPIError) -> StoreUnavailable:
    """A database error (it cannot be reached, the schema cannot be made) as one line that
    names the database: the driver's first line (psycopg's "connection failed: ...
    Connection refused"), not SQLAlchemy's traceback."""
    reason = str(e.orig).strip().splitlines()[0] if e.orig is not None else str(e)
    return StoreUnavailable(f"database {shown_url(url)}: {reason}")


class LockLost(StoreUnavailable):
    """Another server holds the server lock this one held (PostgreSQL dropped this one's
    session, and so its lock, and another server took it): this one must stop scheduling."""


class ServerLock:
    """This process's claim to be the one server scheduling with a database, held until
    :meth:`release` or the process's end (the kernel or PostgreSQL drops it then, so a
    crashed server never leaves it behind). A second ``apportion serve`` on the same
    database would reconcile the first one's running work as its own: with the memory
    executor it ends it as lost, with the others two schedulers launch and charge it twice.

    SQLite: an exclusive ``flock`` on ``<database>.lock`` beside the file. PostgreSQL: a
    session advisory lock, on a connection kept open for it; PostgreSQL drops it with the
    session (a database restart, a failover, a dropped connection), so :meth:`keep` checks
    it before every pass and takes it again."""

    # the advisory lock's key: any fixed 64-bit number no other program uses on the database
    PG_KEY = 0x61707072_74696F6E  # "apprtion"

    def __init__(self, release: Callable[[], None],
                 keep: Callable[[], None] | None = None) -> None:
        self._release = release
        self._keep = keep

    def release(self) -> None:
        self._release()

    def keep(self) -> None:
        """Make sure this server still holds the lock, taking it again if its session was
        lost. :class:`LockLost` if another server holds it now (this one must stop
        scheduling); :class:`StoreUnavailable` if the database does not answer (no pass can
        run then, and the next check tries again). A file lock cannot be lost."""
        if self._keep is not None:
            self._keep()

    @classmethod
    def acquire(cls, url: str) -> ServerLock:
        """Take the lock, or raise :class:`StoreUnavailable` saying another server holds
        it (and, for SQLite, which process: its pid and host are written in the file)."""
        db = make_url(url)
        if db.get_backend_name() == "sqlite":
            if db.database in (None, "", ":memory:"):
                return cls(lambda: None)  # a database of this process alone
            return cls._file_lock(Path(f"{db.database}.lock"), url)
        engine = make_engine(url)
        held = [cls._take(engine, url)]  # the connection whose session holds the lock

        def keep() -> None:
            try:
                mine = held[0].exec_driver_sql(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND pid = pg_backend_pid()").first() is not None
                held[0].commit()
                if mine:
                    return
            except SQLAlchemyError:
                # the session is gone, and its lock with it (DBAPIError), or this connection
                # was closed by an earlier check that could not take the lock again while
                # the database was down (ResourceClosedError)
                pass
            with suppress(SQLAlchemyError):
                held[0].close()
            held[0] = cls._take(engine, url, again=True)

        def release() -> None:
            held[0].close()  # ends the session, and with it the lock
            engine.dispose()

        return cls(release, keep)

    @classmethod
    def _take(cls, engine: Engine, url: str, again: bool = False) -> Connection:
        """A new connection holding the advisory lock; :class:`StoreUnavailable` if the
        database does not answer, :class:`LockLost` (``again``) if another server holds it."""
        try:
            conn = engine.connect()
            got = conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({cls.PG_KEY})").scalar()
            conn.commit()
        except DBAPIError as e:
            raise database_error(url, e) from None
        if not got:
            conn.close()
            if again:
                raise LockLost(f"database {shown_url(url)}: this server lost its server lock "
                               "(its database session ended) and another apportion server "
                               "holds it now: this one stops scheduling")
            engine.dispose()
            raise StoreUnavailable(f"database {shown_url(url)}: another apportion server is "
                                   "scheduling with it (it holds the server lock); stop it "
                                   "first, or give this one another database")
        return conn

    @classmethod
    def _file_lock(cls, path: Path, url: str) -> ServerLock:
        import fcntl
        import os
        import socket

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreUnavailable(f"database {shown_url(url)}: another apportion server is "
                                   f"scheduling with it ({holder}); stop it first, or give "
                                   "this one another data_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

        def release() -> None:
            os.close(fd)  # closing drops the flock

        return cls(release)


def newest_revision() -> str:
    """The schema revision this apportion's migrations end at (``alembic heads``), which
    ``Store.migrate()`` brings a database to."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None, "the migrations form one line"
    return head


def _known_revision(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory(str(MIGRATIONS)).get_revision(revision) is not None
    except CommandError:
        return False


def open_for_reading(url: str) -> Store:
    """The store of a service that has run, opened to read it (``apportion whatif`` and
    ``export-trace``). A SQLite file that is not there is refused, not created empty; so is
    a database the service never started on (no schema), not read as an empty history, and
    one whose schema is not this release's (its tables lack columns this one reads)."""
    db = make_url(url)
    file = db.database if db.get_backend_name() == "sqlite" else None
    if file not in (None, "", ":memory:") and not Path(str(file)).is_file():
        raise StoreMissing(f"{db.database}: no database there")
    store = Store(url)
    try:
        revision = store.revision()
    except DBAPIError as e:
        store.close()
        raise database_error(url, e) from None
    wanted = newest_revision()
    if revision == wanted:
        return store
    store.close()
    if revision is None:
        raise StoreUnavailable(f"database {shown_url(url)}: not an apportion database (no "
                               "schema: the service has never started on it)")
    if not _known_revision(revision):
        raise StoreUnavailable(
            f"database {shown_url(url)}: its schema is newer than this apportion's "
            f"(revision {revision}, this release knows up to {wanted}): it was made by a "
            "newer apportion; read it with that one")
    raise StoreUnavailable(
        f"database {shown_url(url)}: its schema is older than this apportion's (revision "
        f"{revision}, this release wants {wanted}): start the new server once to migrate it")


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
        """Bring the schema to the newest migration (``alembic upgrade head``). An upgrade
        of an existing schema is logged at INFO (``store schema 0006 -> 0010: migrated``):
        it changes the database for good, and an operator wants to see when it happened."""
        # Alembic logs every step at INFO (some on import); to an operator they are debug
        # detail, shown only when apportion's own logging is at DEBUG
        if not log.isEnabledFor(logging.DEBUG):
            logging.getLogger("alembic").setLevel(logging.WARNING)
        from alembic import command
        from alembic.config import Config
        from alembic.migration import MigrationContext
        from alembic.util import CommandError

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        with self.engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                # a batch migration rebuilds a table (copy, drop, rename): with foreign keys
                # enforced, SQLite refuses to drop workloads while attempts refer to it.
                # Off before the transaction (inside one the pragma does nothing), checked
                # and back on after
                _outside_transaction(conn, "PRAGMA foreign_keys=OFF")
            try:
                with conn.execution_options(**{_WRITE: True}).begin():
                    before = MigrationContext.configure(conn).get_current_revision()
                    cfg.attributes["connection"] = conn
                    try:
                        command.upgrade(cfg, "head")
                    except CommandError as e:  # a revision no migration here knows
                        raise StoreUnavailable(
                            f"database {shown_url(self.url)}: its schema is not one this "
                            f"apportion knows ({e}): it was made by a newer apportion; run "
                            "that one, or restore a backup this one made") from None
                    if sqlite:
                        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                        if broken:
                            raise StoreUnavailable(
                                f"database {shown_url(self.url)}: the schema upgrade left "
                                f"rows that refer to missing ones: {broken[:5]}")
            finally:
                if sqlite:
                    _outside_transaction(conn, "PRAGMA foreign_keys=ON")
        after = newest_revision()
        if before is None:
            log.debug("store schema created (revision %s)", after)
        elif before != after:
            log.info("store schema %s -> %s: migrated", before, after)
        else:
            log.debug("store schema %s: up to date", after)

    def revision(self) -> str | None:
        """The schema revision the database is at (Alembic's ``alembic_version``); None
        if it has none."""
        from alembic.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def close(self) -> None:
        self.engine.dispose()

    def checkpoint_wal(self) -> bool:
        """SQLite: copy every commit from the write-ahead log (``-wal``) into the database
        file and empty the log (``PRAGMA wal_checkpoint(TRUNCATE)``), so the file alone
        holds the whole database. False if another connection's reads kept it from
        finishing. PostgreSQL: nothing to do (True). :class:`StoreUnavailable` if the
        database file cannot be written (a full disk, a read-only or immutable file)."""
        if self.engine.dialect.name != "sqlite":
            return True
        try:
            with self.engine.connect() as conn:
                busy = _outside_transaction(
                    conn, "PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except DBAPIError as e:  # connecting, through SQLAlchemy
            raise database_error(self.url, e) from None
        except sqlite3.Error as e:  # the pragma, on the driver's connection: not wrapped
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StoreUnavailable(f"database {shown_url(self.url)}: {reason}") from None
        return bool(busy == 0)

    def db_id(self) -> str:
        """This database's random id (made by the migration that created ``meta``): files
        kept beside the database carry it, so another database's are never taken for its."""
        with self._tx(write=False) as s:
            m = s.get(MetaModel, "db_id")
            if m is None:
                raise NotFound("meta: db_id: missing (run migrate())")
            return m.value

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
        umask: int | None = None,
        idempotency_key: str | None = None,
        request_digest: str | None = None,
        name: str | None = None,
        time_limit: float = 0.0,
        dependencies: Sequence[tuple[str, str]] = (),
        array: Sequence[int] = (),
        array_throttle: int = 0,
        nodelist: Sequence[str] = (),
        exclude: Sequence[str] = (),
        checkpoint_on_term: bool = False,
        gpu_kinds: Sequence[str] = (),
        cluster: str = "",
        signal: str | None = None,
    ) -> WorkloadRow:
        """Store a new pending workload; durable when this returns. ``user`` (the owner)
        defaults to ``actor``; ``chdir``, ``env`` and ``umask`` are the directory, the
        exported environment and the file mode creation mask it runs with;
        ``dependencies`` ``(type, workload id)`` pairs;
        ``nodelist``/``exclude`` the hosts it may (only) and may not use; ``gpu_kinds``
        the GPU kinds it accepts (empty: any) and ``cluster`` its cluster ("": any);
        ``signal`` its ``--signal``, canonical (``warn_signal.WarnSignal.text``). With
        ``array`` (indexes), one workload per index, all in this one transaction, the
        first's id naming the array; the first is returned (:meth:`array_ids` lists all).
        The caller validated the spec (core.validate_spec).

        ``idempotency_key`` (with the ``request_digest`` of the request) is unique per
        owner and kept on the first (or only) workload stored: if one is stored already,
        :class:`AlreadySubmitted` carries that workload and nothing is stored. A unique
        constraint decides, so two concurrent submissions with one key store one
        submission on either database.

        :class:`NotALeaf` if ``budget`` has children by now: the caller checked the tree in
        an earlier read, and a child may have been added since (:meth:`add_budget` checks
        the other way round; the budget row's lock serialises the two checks)."""
        owner = user if user is not None else actor
        try:
            with self._tx() as s:
                self._lock_budget(s, budget)
                if s.scalars(select(BudgetModel.path).where(BudgetModel.parent == budget)
                             .limit(1)).first() is not None:
                    try:  # the core's words, as for a submission to an inner node
                        _tree_of(_budget(b) for b in s.scalars(select(BudgetModel))
                                 ).require_leaf(budget)
                    except CoreError as e:
                        raise NotALeaf(str(e)) from None
                first: WM | None = None
                slots: list[int | None] = list(array) or [None]
                for index in slots:
                    m = WM(
                        budget=budget, user=owner, gpus=gpus,
                        min_runtime=float(min_runtime), resumable=resumable,
                        priority=priority, checkpoint_interval=float(checkpoint_interval),
                        checkpoint_on_term=checkpoint_on_term,
                        command=list(command),
                        chdir=chdir, env=dict(env) if env is not None else None,
                        umask=umask,
                        submit_time=submit_time, queued_at=submit_time,
                        status=Status.PENDING.value, cancel_requested=False,
                        attempts_count=0, created_at=self.clock(),
                        idempotency_key=idempotency_key if first is None else None,
                        request_digest=request_digest if first is None else None,
                        name=name, time_limit=float(time_limit),
                        array_index=index, array_throttle=array_throttle if array else 0,
                        dependencies=[list(d) for d in dependencies] or None,
                        constraints={"nodelist": list(nodelist), "exclude": list(exclude)}
                        if nodelist or exclude else None,
                        gpu_kinds=list(gpu_kinds) or None, cluster=cluster,
                        signal=signal,
                    )
                    s.add(m)
                    s.flush()
                    m.id = f"w-{m.seq:06d}"
                    first = first or m
                    if array:
                        m.array_id = first.id
                    s.flush()
                assert first is not None
                return _workload(first)
        except IntegrityError:
            if idempotency_key is None:
                raise
            found = self.by_idempotency_key(owner, idempotency_key)
            if found is None:
                raise
            raise AlreadySubmitted(*found) from None

    def by_idempotency_key(self, user: str, key: str) -> tuple[WorkloadRow, str | None] | None:
        """The workload ``user`` submitted with ``key``, and its request digest; or None."""
        with self._tx(write=False) as s:
            m = s.scalars(
                select(WM).where(WM.user == user, WM.idempotency_key == key)
            ).one_or_none()
            return None if m is None else (_workload(m), m.request_digest)

    def statuses(self, ids: Iterable[str]) -> dict[str, Status]:
        """The status of each of these workloads that exists."""
        wanted = sorted(set(ids))
        out: dict[str, Status] = {}
        with self._tx(write=False) as s:
            for i in range(0, len(wanted), 500):  # keep IN lists small
                q = select(WM.id, WM.status).where(WM.id.in_(wanted[i : i + 500]))
                out.update((str(w), Status(st)) for w, st in s.execute(q))
        return out

    def end_held(self, workload_id: str, reason: str, actor: str) -> bool:
        """pending -> cancelled with ``reason``, for work that can never start (its
        dependency can no longer be met). Audited. False if it was no longer pending."""
        return self._cancel_pending(workload_id, reason, actor, "workload.cancel")

    def release_held(self, workload_id: str, at: float) -> float | None:
        """Held work joins the queue at ``at``: its ``released_at``, and, if it never ran,
        its ``queued_at`` (waits and the share guarantee count from there, as the
        simulator's do); the ``queued_at`` it has now. Once only: None, changing nothing, if
        it was released before or is no longer pending."""
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.PENDING.value,
                       WM.released_at.is_(None))
                .values(released_at=at,
                        queued_at=case((WM.attempts_count == 0, at), else_=WM.queued_at))
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return None
            return float(s.scalars(select(WM.queued_at).where(WM.id == workload_id)).one())

    def array_ids(self, array_id: str) -> list[str]:
        """The ids of an array's elements, in index order."""
        with self._tx(write=False) as s:
            q = select(WM.id).where(WM.array_id == array_id).order_by(WM.array_index)
            return [str(i) for i in s.scalars(q)]

    def array_span(self, array_id: str) -> tuple[int, int, int]:
        """An array's element count and its smallest and largest index (Slurm's
        ``SLURM_ARRAY_TASK_COUNT``, ``_MIN`` and ``_MAX``)."""
        with self._tx(write=False) as s:
            q = select(func.count(), func.min(WM.array_index), func.max(WM.array_index))
            count, low, high = s.execute(q.where(WM.array_id == array_id)).one()
            if low is None or high is None:
                raise NotFound(f"array {array_id}: not found")
            return int(count), int(low), int(high)

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
        array: str | None = None,
        after: str | None = None,
    ) -> list[WorkloadRow]:
        """Workloads oldest first, with their open attempt. ``budget`` matches the node and
        its whole subtree; ``array`` keeps the elements of that array; ``after`` (a
        workload's id) only those submitted after it: the next page of a list."""
        with self._tx(write=False) as s:
            q = _matching(select(WM), statuses, budget, user, array)
            if after is not None:
                q = q.where(WM.seq > select(WM.seq).where(WM.id == after).scalar_subquery())
            rows = list(s.scalars(q.order_by(WM.seq).limit(limit)))
            return self._with_open_attempts(s, rows)

    def workload_ids(
        self,
        statuses: Iterable[Status],
        budget: str | None = None,
        user: str | None = None,
        array: str | None = None,
    ) -> list[str]:
        """The ids of the workloads :meth:`list_workloads` lists, all of them: the narrow
        read a cancel by filter starts from, in the order it takes them, the pending ones
        first, each group oldest first."""
        with self._tx(write=False) as s:
            q = _matching(select(WM.id), statuses, budget, user, array)
            pending_first = case((WM.status == Status.PENDING.value, 0), else_=1)
            return [str(i) for i in s.scalars(q.order_by(pending_first, WM.seq))]

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

    def undo_attempt(self, workload_id: str, n: int) -> None:
        """Take back attempt ``n``, begun but never launched for a trouble of the server's
        own (``LaunchDeferred``): its row is deleted and the workload is pending again with
        its attempt count as before, in one transaction, as if it had never begun.
        :class:`Conflict` unless ``n`` is its latest attempt, open, with no handle, and the
        workload running."""
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.RUNNING.value,
                       WM.attempts_count == n)
                .values(status=Status.PENDING.value, attempts_count=n - 1)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise self._status_conflict(s, workload_id, Status.PENDING)
            gone = s.execute(
                delete(AttemptModel)
                .where(AttemptModel.workload_id == workload_id, AttemptModel.n == n,
                       AttemptModel.handle.is_(None), AttemptModel.ended_at.is_(None))
            )
            if gone.rowcount != 1:  # type: ignore[attr-defined]
                raise Conflict(f"workload {workload_id}: attempt {n}: not open, or launched")

    def set_attempt_handle(self, workload_id: str, n: int, handle: str,
                           log_path: str | None = None) -> None:
        """Record the executor's handle of a launched attempt, and where its log went
        (``log_path``, when given: read from there even after ``logs_dir`` moves)."""
        with self._tx() as s:
            a = s.get(AttemptModel, (workload_id, n))
            if a is None:
                raise NotFound(f"workload {workload_id}: attempt {n}: not found")
            a.handle = handle
            if log_path:
                a.log_path = log_path

    def mark_stopping(
        self, workload_id: str, reason: str, at: float,
        preempted: Mapping[str, Any] | None = None, actor: str = "",
    ) -> None:
        """running -> stopping (a stop was issued at ``at`` for ``reason``, both kept with
        the open attempt: a restarted scheduler carries the stop on as it was).
        :class:`Conflict` otherwise. For a preemption, ``preempted`` (its reason and whom it
        is for) is audited by ``actor`` as ``workload.preempt`` in the same transaction: the
        entry exists if and only if the stop was recorded, so a crash never leaves a
        preemption in the audit that was never carried out (what ``apportion why`` would
        tell the owner)."""
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.RUNNING.value)
                .values(status=Status.STOPPING.value)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise self._status_conflict(s, workload_id, Status.STOPPING)
            s.execute(
                update(AttemptModel)
                .where(AttemptModel.workload_id == workload_id, AttemptModel.ended_at.is_(None))
                .values(stop_reason=reason, stop_issued_at=at)
                .execution_options(synchronize_session=False)
            )
            if preempted is not None:
                self._audit(s, actor, "workload.preempt", workload_id, None, dict(preempted))

    def mark_signalled(self, workload_id: str, n: int, at: float) -> None:
        """Attempt ``n`` of ``workload_id`` was sent its ``--signal`` at ``at``: kept, so a
        restarted scheduler does not send it again."""
        with self._tx() as s:
            s.execute(
                update(AttemptModel)
                .where(AttemptModel.workload_id == workload_id, AttemptModel.n == n)
                .values(signal_sent_at=at)
                .execution_options(synchronize_session=False)
            )

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

    def cancel_workload(
        self, workload_id: str, actor: str, reason: str | None = None
    ) -> WorkloadRow:
        """Cancel: a pending workload becomes ``cancelled`` at once, with ``reason`` (default
        ``cancelled by <actor>``) as its end reason; a running or stopping one gets
        ``cancel_requested`` and the scheduler stops it. Audited (with the reason, if
        given), once: cancelling one asked to stop already changes nothing. :class:`Conflict`
        if it already ended."""
        with self._tx() as s:
            w = s.scalars(select(WM).where(WM.id == workload_id)).one_or_none()
            if w is None:
                raise NotFound(f"workload {workload_id}: not found")
            old = Status(w.status)
            if old in FINAL:
                raise Conflict(f"workload {workload_id}: status: already {old.value}")
            asked_before = old is not Status.PENDING and w.cancel_requested
            if old is Status.PENDING:
                res = s.execute(
                    update(WM)
                    .where(WM.id == workload_id, WM.status == old.value)
                    .values(status=Status.CANCELLED.value,
                            end_reason=reason or f"cancelled by {actor}",
                            cancel_requested=True)
                    .execution_options(synchronize_session=False)
                )
                if res.rowcount != 1:  # type: ignore[attr-defined]
                    raise Conflict(f"workload {workload_id}: status: changed concurrently")
            else:
                w.cancel_requested = True
            if not asked_before:  # a repeated cancel changes nothing: no second entry
                self._audit(s, actor, "workload.cancel", workload_id, {"status": old.value},
                            None if reason is None else {"reason": reason})
            s.flush()
            s.expire(w)
            return _workload(s.scalars(select(WM).where(WM.id == workload_id)).one())

    def cancel_workloads(
        self,
        ids: Sequence[str],
        actor: str,
        may_cancel: Callable[[str, str], bool],
        only: Collection[Status] | None = None,
    ) -> list[CancelRow]:
        """Cancel many workloads as :meth:`cancel_workload` cancels one (``cancelled by
        <actor>``, each audited as ``workload.cancel``), CANCEL_BATCH to a transaction and
        the pending ones first: GPUs freed by stopping the running ones are then never
        given to work this same call is about to cancel. ``may_cancel(owner, budget)``
        says whether ``actor`` may cancel a workload; one it may not is left as it is.
        Each id is answered once, in the order given. With ``only`` (the states a filter
        listed them in), a workload no longer in one of them is left out of the answer.
        Idempotent: work cancelled already is answered ``ended``, work already asked to
        stop ``cancel_requested`` again, and nothing is written or audited twice."""
        wanted = list(dict.fromkeys(ids))
        first: list[str] = []  # pending when asked: taken before any running one
        if only is None or Status.PENDING in only:
            was = self.statuses(wanted)
            first = [w for w in wanted if was.get(w) is Status.PENDING]
        done: dict[str, CancelRow] = {}
        for todo, states in ((first, (Status.PENDING,)), (wanted, only)):
            left = [w for w in todo if w not in done]
            for i in range(0, len(left), CANCEL_BATCH):
                with self._tx() as s:
                    q = select(WM.id, WM.status, WM.user, WM.budget, WM.cancel_requested
                               ).where(WM.id.in_(left[i : i + CANCEL_BATCH]))
                    if states is not None:
                        q = q.where(WM.status.in_([st.value for st in states]))
                    # locked in one order (PostgreSQL): two bulk cancels never deadlock
                    locked = s.execute(q.order_by(WM.seq).with_for_update())
                    rows = [(str(w), st, owner, budget, bool(requested))
                            for w, st, owner, budget, requested in locked]
                    done.update((r.id, r) for r in self._cancel_rows(s, rows, actor,
                                                                      may_cancel))
        if only is None:
            for w in wanted:
                done.setdefault(w, CancelRow(w, CancelResult.NOT_FOUND))
        return [done[w] for w in wanted if w in done]

    def _cancel_rows(
        self, s: Session, rows: Iterable[tuple[str, str, str, str, bool]], actor: str,
        may_cancel: Callable[[str, str], bool],
    ) -> list[CancelRow]:
        """Cancel ``rows`` (``id, status, user, budget, cancel_requested``, locked by the
        transaction ``s``): what :meth:`cancel_workloads` does to one batch."""
        out: list[CancelRow] = []
        changed: dict[str, Status] = {}  # id -> its status before
        for wid, status, owner, budget, requested in rows:
            old = Status(status)
            if not may_cancel(owner, budget):
                out.append(CancelRow(wid, CancelResult.NOT_ALLOWED, old, owner))
            elif old in FINAL:
                out.append(CancelRow(wid, CancelResult.ENDED, old, owner))
            elif old is Status.PENDING:
                changed[wid] = old
                out.append(CancelRow(wid, CancelResult.CANCELLED, Status.CANCELLED, owner))
            else:
                if not requested:
                    changed[wid] = old
                out.append(CancelRow(wid, CancelResult.CANCEL_REQUESTED, old, owner))
        pending = [w for w, old in changed.items() if old is Status.PENDING]
        running = [w for w, old in changed.items() if old is not Status.PENDING]
        for ids, was, values in (
            (pending, [Status.PENDING], {"status": Status.CANCELLED.value,
                                         "end_reason": f"cancelled by {actor}",
                                         "cancel_requested": True}),
            (running, [Status.RUNNING, Status.STOPPING], {"cancel_requested": True}),
        ):
            if not ids:
                continue
            res = s.execute(
                update(WM)
                .where(WM.id.in_(ids), WM.status.in_([st.value for st in was]))
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != len(ids):  # type: ignore[attr-defined]
                raise Conflict(f"workloads {ids[0]}..{ids[-1]}: status: changed concurrently")
        if changed:  # one entry each, as the cancel of one writes (what history reads)
            at = self.clock()
            s.execute(insert(AuditModel), [
                {"at": at, "actor": actor, "action": "workload.cancel", "target": wid,
                 "old": {"status": old.value}, "new": None}
                for wid, old in changed.items()])
        return out

    def set_aside(self, workload_id: str, reason: str, actor: str) -> bool:
        """End a pending workload the policy cannot handle (``cancelled``, with ``reason``
        as its end reason). Audited. False, changing nothing, if it is no longer pending."""
        return self._cancel_pending(workload_id, reason, actor, "workload.set_aside")

    def refuse(self, workload_id: str, reason: str, actor: str) -> bool:
        """End a pending workload the policy can never run (``cancelled``, with ``reason`` as
        its end reason), audited as ``workload.cancel`` (what ``why`` and the usage reports
        read) and ``workload.refuse``, in one transaction. False, changing nothing, if it is
        no longer pending (cancelled meanwhile)."""
        return self._cancel_pending(workload_id, reason, actor, "workload.cancel",
                                    "workload.refuse")

    def _cancel_pending(self, workload_id: str, reason: str, actor: str, *actions: str) -> bool:
        """pending -> cancelled with ``reason`` as a compare-and-set, audited as each of
        ``actions``; False, changing nothing, if it is no longer pending."""
        with self._tx() as s:
            res = s.execute(
                update(WM)
                .where(WM.id == workload_id, WM.status == Status.PENDING.value)
                .values(status=Status.CANCELLED.value, end_reason=reason)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return False
            for action in actions:
                self._audit(s, actor, action, workload_id,
                            {"status": Status.PENDING.value}, {"reason": reason})
            return True

    def _status_conflict(self, s: Session, workload_id: str, to: Status) -> Exception:
        cur = s.scalars(select(WM.status).where(WM.id == workload_id)).one_or_none()
        if cur is None:
            return NotFound(f"workload {workload_id}: not found")
        return Conflict(
            f"workload {workload_id}: state: cannot go from {cur} to {to.value}"
        )

    def usage_history(
        self, start: float, end: float, actions: Sequence[str]
    ) -> tuple[list[UsedWorkload], list[str], list[AuditRow]]:
        """For the accounts of ``[start, end)``, read only what can count in them, through
        indexes: the workloads submitted before ``end`` that may have asked for or held GPUs
        at or after ``start`` (not ended yet, an attempt open or ended at or after
        ``start``, or a ``workload.cancel`` entry at or after it: work cancelled while
        pending), in submission order, with all their attempts and that cancellation; the
        users who submitted anything before ``end`` (sorted); and every audit entry of
        ``actions``, also those made after ``end`` (oldest first): a host registered later
        did not exist in the period, and its state then is the one its later entries left,
        not its present one. Work that ended before ``start`` is never read, so the cost
        follows the work in the period, not the store's age."""
        open_ = [s.value for s in Status if s not in FINAL]
        with self._tx(write=False) as s:
            cancels: dict[str, float] = {str(t): float(at) for t, at in s.execute(
                select(AuditModel.target, AuditModel.at)
                .where(AuditModel.action == "workload.cancel", AuditModel.at >= start)
                .order_by(AuditModel.id))}
            ids: CompoundSelect[tuple[str | None]] = union(
                select(WM.id).where(WM.status.in_(open_)),
                select(AttemptModel.workload_id).where(
                    AttemptModel.ended_at.is_(None) | (AttemptModel.ended_at >= start)),
                select(AuditModel.target).where(AuditModel.action == "workload.cancel",
                                                AuditModel.at >= start),
            )
            found = s.execute(
                select(WM.id, WM.budget, WM.user, WM.gpus, WM.min_runtime, WM.status,
                       WM.submit_time, WM.released_at, WM.dependencies, WM.array_throttle)
                .where(WM.id.in_(ids.scalar_subquery()), WM.submit_time < end)
                .order_by(WM.seq)).all()
            tries: dict[str, list[UsedAttempt]] = {}
            wanted = [str(r[0]) for r in found]
            for i in range(0, len(wanted), 500):  # keep IN lists small
                q = (select(AttemptModel.workload_id, AttemptModel.placement,
                            AttemptModel.gpus_held, AttemptModel.started_at,
                            AttemptModel.ended_at)
                     .where(AttemptModel.workload_id.in_(wanted[i : i + 500]))
                     .order_by(AttemptModel.workload_id, AttemptModel.n))
                for wid, pl, g, st, en in s.execute(q):
                    tries.setdefault(wid, []).append(UsedAttempt(
                        tuple((str(h), int(n), tuple(int(x) for x in ix)) for h, n, ix in pl),
                        int(g), float(st), None if en is None else float(en)))
            rows = [
                UsedWorkload(str(wid), budget, user, int(gpus), float(mr), Status(status),
                             float(sub), None if rel is None else float(rel),
                             bool(deps) or bool(throttle), cancels.get(str(wid)),
                             tuple(tries.get(str(wid), ())))
                for wid, budget, user, gpus, mr, status, sub, rel, deps, throttle in found
            ]
            users = [str(u) for u in s.scalars(
                select(WM.user).where(WM.submit_time < end).distinct().order_by(WM.user))]
            audit = [
                AuditRow(a.id, a.at, a.actor, a.action, a.target, a.old, a.new)
                for a in s.scalars(
                    select(AuditModel)
                    .where(AuditModel.action.in_(list(actions)))
                    .order_by(AuditModel.id)
                )
            ]
            return rows, users, audit

    def usage_intervals(self, since: float) -> list[UsageInterval]:
        """Attempts overlapping ``[since, now)``: what the ledger is rebuilt from."""
        with self._tx(write=False) as s:
            q = (
                select(WM.budget, AttemptModel.gpus_held, WM.min_runtime,
                       AttemptModel.started_at, AttemptModel.ended_at, AttemptModel.placement,
                       AttemptModel.workload_id, AttemptModel.n)
                .join(WM, WM.id == AttemptModel.workload_id)
                .where(AttemptModel.ended_at.is_(None) | (AttemptModel.ended_at > since))
                .order_by(AttemptModel.started_at)
            )
            return [
                UsageInterval(b, int(g), float(m) > 0, float(st), None if e is None else float(e),
                              str(pl[0][0]) if pl else "", wid, int(n))
                for b, g, m, st, e, pl, wid, n in s.execute(q)
            ]

    def latest_time(self) -> float | None:
        """The latest scheduling time recorded (a submission, a queueing, an attempt's start
        or end, a host's change), on the scheduler's clock; None in an empty database. A
        wall clock behind it was set back (docs/operations.md, "The clock")."""
        with self._tx(write=False) as s:
            times = [
                s.scalar(select(func.max(col)))
                for col in (WM.submit_time, WM.queued_at, AttemptModel.started_at,
                            AttemptModel.ended_at, HostModel.changed_at)
            ]
        known = [float(t) for t in times if t is not None]
        return max(known) if known else None

    # ---- hosts -----------------------------------------------------------------------
    def hosts(self) -> list[HostRow]:
        with self._tx(write=False) as s:
            return [_host(h) for h in s.scalars(select(HostModel).order_by(HostModel.name))]

    def host_history(self) -> list[tuple[float, str, HostState]]:
        """Every host's registration and state changes from the audit, oldest first, as
        ``(at, host, state)``: the first entry of a host is its registration; ``at`` is the
        store's clock when it was recorded."""
        with self._tx(write=False) as s:
            q = (select(AuditModel.at, AuditModel.target, AuditModel.new)
                 .where(AuditModel.action.in_(("host.add", "host.state")))
                 .order_by(AuditModel.id))
            return [(float(at), name, HostState(new["state"])) for at, name, new in s.execute(q)]

    def host_resizes(self) -> list[tuple[float, str, int, int]]:
        """Every host's GPU count changes from the audit (``host.gpus``), oldest first, as
        ``(at, host, old gpus, new gpus)``; ``at`` is the store's clock when it was
        recorded."""
        with self._tx(write=False) as s:
            q = (select(AuditModel.at, AuditModel.target, AuditModel.old, AuditModel.new)
                 .where(AuditModel.action == "host.gpus")
                 .order_by(AuditModel.id))
            return [(float(at), name, int(old["gpus"]), int(new["gpus"]))
                    for at, name, old, new in s.execute(q)]

    def get_host(self, name: str) -> HostRow:
        with self._tx(write=False) as s:
            h = s.get(HostModel, name)
            if h is None:
                raise _no_host(s, name)
            return _host(h)

    def add_host(
        self,
        name: str,
        gpus: int,
        actor: str,
        state: HostState = HostState.HEALTHY,
        reason: str = "",
        at: float | None = None,
        cluster: str = "",
        kind: str = "",
    ) -> HostRow:
        """Register a host of ``cluster`` and GPU ``kind`` ("": the config's defaults).
        Audited. :class:`Conflict` if the name exists."""
        if gpus <= 0:
            raise Conflict(f"host {name}: gpus: must be > 0, got {gpus}")
        with self._tx() as s:
            if s.get(HostModel, name) is not None:
                raise Conflict(f"host {name}: name: already exists")
            h = HostModel(name=name, gpus=gpus, state=state.value, reason=reason,
                          changed_at=self.clock() if at is None else at, cluster=cluster,
                          kind=kind)
            s.add(h)
            new: dict[str, Any] = {"gpus": gpus, "state": state.value}
            if cluster or kind:
                new.update(cluster=cluster, kind=kind)
            self._audit(s, actor, "host.add", name, None, new)
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

    def set_host_gpus(self, name: str, gpus: int, actor: str) -> HostRow:
        """Set a host's GPU count, as its executor reports it (the scheduler does so only
        while no work runs there); audited."""
        if gpus <= 0:
            raise Conflict(f"host {name}: gpus: must be > 0, got {gpus}")
        with self._tx() as s:
            h = s.get(HostModel, name)
            if h is None:
                raise NotFound(f"host {name}: not found")
            self._audit(s, actor, "host.gpus", name, {"gpus": h.gpus}, {"gpus": gpus})
            h.gpus = gpus
            return _host(h)

    def set_host_pool(self, name: str, cluster: str, kind: str, actor: str) -> HostRow:
        """Set a host's cluster and GPU kind ("": the config's defaults), as its executor
        reports them; audited."""
        with self._tx() as s:
            h = s.get(HostModel, name)
            if h is None:
                raise NotFound(f"host {name}: not found")
            before = {"cluster": h.cluster, "kind": h.kind}
            h.cluster, h.kind = cluster, kind
            self._audit(s, actor, "host.pool", name, before, {"cluster": cluster, "kind": kind})
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
                raise _no_budget(s, path)
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
        leaves only). Audited. :class:`Conflict` on a bad path, weight or duplicate;
        :class:`UnknownParent` for a parent that does not exist."""
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
                raise UnknownParent(f"parent {missing[0]!r}: unknown budget"
                                    + did_you_mean(missing[0], known, quote=True))
            # ``parent`` is now the nearest existing ancestor: the node that may stop being
            # a leaf (with create_parents, through the ancestors made for it)
            if parent:
                self._lock_budget(s, parent)  # a submission to it waits, then sees the child
                busy = s.scalars(
                    select(WM.id).where(
                        WM.budget == parent, WM.status.in_([st.value for st in ACTIVE])
                    ).limit(1)
                ).first()
                if busy is not None:
                    raise Conflict(
                        f"budget {path}: parent: {parent!r} is a leaf with active workloads"
                        f" (e.g. {busy}); it cannot get children"
                    )
            for p in reversed(missing):
                s.add(BudgetModel(path=p, parent=parent_of(p) or None, weight=1.0,
                                  managers=[], members=[]))
                self._audit(s, actor, "budget.create", p, None,
                            {"weight": 1.0, "managers": [], "members": []})
                s.flush()
            # each name once, sorted, as a later change of the lists stores them
            managers, members = sorted(set(managers)), sorted(set(members))
            b = BudgetModel(path=path, parent=parent_of(path) or None, weight=float(weight),
                            managers=managers, members=members)
            s.add(b)
            self._audit(s, actor, "budget.create", path, None,
                        {"weight": float(weight), "managers": managers, "members": members})
            return _budget(b)

    def set_budget_weight(self, path: str, weight: float, actor: str) -> BudgetRow:
        """Change one node's weight. Audited (old -> new), unless it had that weight."""
        if not (weight > 0) or weight == float("inf"):
            raise Conflict(f"budget {path}: weight: must be > 0, got {weight}")
        with self._tx() as s:
            b = self._budget_model(s, path)
            old = b.weight
            if old != float(weight):
                b.weight = float(weight)
                self._audit(s, actor, "budget.weight", path, {"weight": old},
                            {"weight": b.weight})
            return _budget(b)

    def set_budget_members(self, path: str, members: Sequence[str], actor: str) -> BudgetRow:
        """Replace a node's member list. Audited (old -> new), unless it had those."""
        return self._set_list(path, "members", members, actor)

    def set_budget_managers(self, path: str, managers: Sequence[str], actor: str) -> BudgetRow:
        """Replace a node's manager list. Audited (old -> new), unless it had those."""
        return self._set_list(path, "managers", managers, actor)

    def _set_list(self, path: str, column: str, names: Sequence[str], actor: str) -> BudgetRow:
        clean = sorted(set(names))
        with self._tx() as s:
            b = self._budget_model(s, path)
            old = list(getattr(b, column))
            if sorted(set(old)) != clean:  # the same names in another order: no change
                setattr(b, column, clean)
                self._audit(s, actor, f"budget.{column}", path, {column: old}, {column: clean})
            return _budget(b)

    def _lock_budget(self, s: Session, path: str) -> None:
        """Lock a budget row until the transaction ends, so that a submission's check that
        it is a leaf and a new child's check that it has no active work never both pass.
        PostgreSQL: ``SELECT ... FOR UPDATE``; SQLite needs nothing (write transactions
        begin IMMEDIATE: one writer at a time already)."""
        s.execute(select(BudgetModel.path).where(BudgetModel.path == path).with_for_update())

    def _budget_model(self, s: Session, path: str) -> BudgetModel:
        b = s.get(BudgetModel, path)
        if b is None:
            raise _no_budget(s, path)
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
                raise Conflict(
                    f"user {name}: name: already exists; change it with apportion users set "
                    f"{name} (--admin/--no-admin, --unix-user), give it another token with "
                    f"apportion tokens create {name}")
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
                raise _no_user(s, name)
            return _user(u)

    def set_user(
        self, name: str, actor: str, admin: bool | None = None,
        unix_user: str | None = None, clear_unix_user: bool = False,
        now: float | None = None,
    ) -> UserRow:
        """Change a user's admin flag and/or Unix account (``clear_unix_user``: back to the
        account of the same name). Audited (old -> new), unless the effective account and the
        flag stay as they were (NULL and the user's own name are the same account: the
        stored form is then kept). :class:`Conflict` if taking the
        admin flag would leave no admin with a valid token at ``now`` (the service's clock;
        default the store's) (:meth:`_keep_an_admin`)."""
        with self._tx() as s:
            u = s.get(UserModel, name)
            if u is None:
                raise _no_user(s, name)
            if admin is False and u.admin and not self._keep_an_admin(
                    s, self.clock() if now is None else now, user=name):
                raise Conflict(
                    f"user {name}: admin: {name} is the last admin with a valid token; "
                    "without the flag nobody could administer this server: make another "
                    "user admin (apportion users set NAME --admin) and give them a token "
                    "(apportion tokens create NAME) first")
            old = {"admin": bool(u.admin), "unix_user": u.unix_user}
            if admin is not None:
                u.admin = admin
            # NULL is the account of the same name: a form that names the account the
            # user already runs as changes nothing, so it is neither stored nor audited
            want = None if clear_unix_user else unix_user
            if (clear_unix_user or unix_user is not None) and \
                    (want or name) != (u.unix_user or name):
                u.unix_user = want
            new = {"admin": bool(u.admin), "unix_user": u.unix_user}
            if new != old:  # a change that changes nothing is no event of the audit
                self._audit(s, actor, "user.set", name, old, new)
            return _user(u)

    def add_token(
        self, user: str, token_hash: str, kind: str = "user", label: str = "",
        expires_at: float | None = None, created_at: float | None = None,
    ) -> TokenRow:
        """Store a token's sha256 hex digest for ``user`` (never the token itself).
        ``kind``: ``user`` (acts as the user) or ``scrape`` (reads only); ``expires_at``:
        when it stops being accepted (None: never); ``created_at``: the time its expiry was
        counted from (None: the store's clock now)."""
        if kind not in TOKEN_KINDS:
            raise Conflict(f"token: kind: must be one of {', '.join(TOKEN_KINDS)}, got {kind!r}")
        with self._tx() as s:
            if s.get(UserModel, user) is None:
                raise _no_user(s, user)
            t = TokenModel(hash=token_hash, user=user,
                           created_at=self.clock() if created_at is None else created_at,
                           id=f"t-{token_hash[:12]}", label=label, kind=kind,
                           expires_at=expires_at)
            s.add(t)
            s.flush()
            return _token(t)

    def tokens(self, user: str | None = None) -> list[TokenRow]:
        """Tokens (all, or of one user), oldest first, revoked ones included."""
        with self._tx(write=False) as s:
            q = select(TokenModel)
            if user is not None:
                q = q.where(TokenModel.user == user)
            return [_token(t) for t in s.scalars(q.order_by(TokenModel.created_at,
                                                            TokenModel.id))]

    def revoke_token(self, token_id: str, actor: str, at: float | None = None) -> TokenRow:
        """Revoke a token at ``at`` (the service's clock; default the store's): from then on
        it is refused. Audited. :class:`Conflict` if it was revoked already, or if it is the
        last valid token of any admin at ``at`` (:meth:`_keep_an_admin`)."""
        with self._tx() as s:
            t = s.scalars(select(TokenModel).where(TokenModel.id == token_id)).one_or_none()
            if t is None:
                raise NotFound(f"token {token_id}: not found")
            if t.revoked_at is not None:
                raise Conflict(f"token {token_id}: already revoked")
            at = self.clock() if at is None else at
            if not self._keep_an_admin(s, at, token=token_id):
                raise Conflict(
                    f"token {token_id}: the last valid token of an admin ({t.user}); revoked, "
                    "nobody could administer this server: create another first (apportion "
                    f"tokens create {t.user}), then revoke this one")
            t.revoked_at = at
            self._audit(s, actor, "token.revoke", t.user, None, {"token": token_id})
            return _token(t)

    def _keep_an_admin(self, s: Session, now: float, user: str | None = None,
                       token: str | None = None) -> bool:
        """False if taking ``user``'s admin flag, or revoking ``token``, would leave no admin
        with a valid user token at ``now`` where there was one: nobody could then
        administer the server (users are seeded from the config into an empty database
        only). A token expired by ``now`` is not valid, so it keeps no admin. The rows read
        are locked (PostgreSQL: ``FOR UPDATE``; SQLite has one writer), so two such
        changes, each harmless alone, are checked one after the other."""
        held = s.execute(
            select(TokenModel.id, TokenModel.user)
            .join(UserModel, TokenModel.user == UserModel.name)
            .where(UserModel.admin.is_(True), TokenModel.revoked_at.is_(None),
                   TokenModel.kind == "user",
                   or_(TokenModel.expires_at.is_(None), TokenModel.expires_at > now))
            .with_for_update()
        ).all()
        left = [i for i, u in held if u != user and i != token]
        return bool(left) or not held

    def user_for_token(self, token_hash: str, now: float | None = None) -> UserRow | None:
        """The user a token digest belongs to, or None (unknown, revoked, or expired at
        ``now``, default the store's clock)."""
        found = self.principal_for_token(token_hash)
        if found is None or found[1].expired(self.clock() if now is None else now):
            return None
        return found[0]

    def principal_for_token(self, token_hash: str) -> tuple[UserRow, TokenRow] | None:
        """``(user, token)`` of a token digest that is not revoked, or None (unknown or
        revoked). Whether it has expired is the caller's to tell, on its own clock, so that
        it can say so (:meth:`TokenRow.expired`)."""
        with self._tx(write=False) as s:
            row = s.execute(
                select(UserModel, TokenModel)
                .join(TokenModel, TokenModel.user == UserModel.name)
                .where(TokenModel.hash == token_hash, TokenModel.revoked_at.is_(None))
            ).one_or_none()
            return None if row is None else (_user(row[0]), _token(row[1]))

    # ---- audit -----------------------------------------------------------------------
    def append_audit(self, actor: str, action: str, target: str, old: Any, new: Any) -> None:
        """Append one audit entry (JSON-able ``old`` and ``new``)."""
        with self._tx() as s:
            self._audit(s, actor, action, target, old, new)

    def audit_names(self) -> tuple[set[str], set[str]]:
        """Every actor and every action the audit has an entry of."""
        with self._tx(write=False) as s:
            actors = set(s.scalars(select(AuditModel.actor).distinct()))
            actions = set(s.scalars(select(AuditModel.action).distinct()))
            return actors, actions

    def audit_of(self, action: str) -> list[AuditRow]:
        """Every audit entry of ``action``, oldest first."""
        with self._tx(write=False) as s:
            q = select(AuditModel).where(AuditModel.action == action).order_by(AuditModel.id)
            return [AuditRow(a.id, a.at, a.actor, a.action, a.target, a.old, a.new)
                    for a in s.scalars(q)]

    def audit(
        self, limit: int = 100, target: str | None = None, after_id: int = 0,
        before_id: int | None = None, actor: str | None = None, action: str | None = None,
        since: float | None = None, until: float | None = None,
    ) -> list[AuditRow]:
        """Audit entries, newest first (``after_id``: only entries with a larger id;
        ``before_id``: only those with a smaller one, the next page of a list), of
        ``target``, by ``actor``, of ``action`` (``budget.weight``, or a family: ``budget``
        is every ``budget.*``), at or after ``since`` and before ``until``."""
        with self._tx(write=False) as s:
            q = select(AuditModel).where(AuditModel.id > after_id)
            if before_id is not None:
                q = q.where(AuditModel.id < before_id)
            if target:
                q = q.where(AuditModel.target == target)
            if actor:
                q = q.where(AuditModel.actor == actor)
            if action:
                q = q.where((AuditModel.action == action)
                            | AuditModel.action.startswith(action + ".", autoescape=True))
            if since is not None:
                q = q.where(AuditModel.at >= since)
            if until is not None:
                q = q.where(AuditModel.at < until)
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


def _matching(
    q: Select[Any], statuses: Iterable[Status] | None, budget: str | None, user: str | None,
    array: str | None,
) -> Select[Any]:
    """``q`` narrowed to workloads in ``statuses``, in ``budget``'s subtree, of ``user`` and
    of ``array`` (each None: any)."""
    if array:
        q = q.where(WM.array_id == array)
    if statuses is not None:
        q = q.where(WM.status.in_([st.value for st in statuses]))
    if budget:
        # the subtree by an exact prefix: LIKE (startswith) reads '_' as any character
        # and, on SQLite, ignores case, so lab_a would take in labxa and LAB_A
        prefix = budget + "/"
        q = q.where((WM.budget == budget)
                    | (func.substr(WM.budget, 1, len(prefix)) == prefix))
    if user:
        q = q.where(WM.user == user)
    return q


def _no_budget(s: Session, path: str) -> NotFound:
    known = s.scalars(select(BudgetModel.path)).all()
    return NotFound(f"budget {path}: not found" + did_you_mean(path, known))


def _no_host(s: Session, name: str) -> NotFound:
    known = s.scalars(select(HostModel.name)).all()
    return NotFound(f"host {name}: not found" + did_you_mean(name, known))


def _no_user(s: Session, name: str) -> NotFound:
    known = s.scalars(select(UserModel.name)).all()
    return NotFound(f"user {name}: not found" + did_you_mean(name, known))


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
        stop_reason=a.stop_reason,
        stop_issued_at=a.stop_issued_at,
        signal_sent_at=a.signal_sent_at,
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
        umask=m.umask,
        name=m.name,
        time_limit=m.time_limit,
        array_id=m.array_id,
        array_index=m.array_index,
        array_throttle=m.array_throttle,
        dependencies=tuple((str(k), str(d)) for k, d in (m.dependencies or ())),
        nodelist=tuple((m.constraints or {}).get("nodelist", ())),
        exclude=tuple((m.constraints or {}).get("exclude", ())),
        gpu_kinds=tuple(m.gpu_kinds or ()),
        cluster=m.cluster or "",
        signal=m.signal,
        released_at=m.released_at,
        attempt=attempt,
        attempts=attempts,
    )


def _user(u: UserModel) -> UserRow:
    return UserRow(u.name, bool(u.admin), u.unix_user)


def _token(t: TokenModel) -> TokenRow:
    return TokenRow(t.id or f"t-{t.hash[:12]}", t.user, t.kind, t.label, t.created_at,
                    t.revoked_at, t.expires_at)


def _host(h: HostModel) -> HostRow:
    return HostRow(h.name, h.gpus, HostState(h.state), h.reason, h.changed_at, h.cluster or "",
                   h.kind or "")


def _budget(b: BudgetModel) -> BudgetRow:
    return BudgetRow(b.path, b.parent, b.weight, tuple(b.managers), tuple(b.members))


def _tree_of(rows: Iterable[BudgetRow]) -> BudgetTree:
    return BudgetTree.build(BudgetNode(r.path, r.weight) for r in rows)
