"""``apportion serve``: the live service (API, scheduler loop, executor) in one process."""

from __future__ import annotations

import copy
import errno
import logging
import os
import signal
import socket
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from apportion.service.owndirs import unsafe_dir, unsafe_way
from apportion.times import format_time, local_zone, time_zone

if TYPE_CHECKING:
    from apportion.service.executor import Executor

# Slurm commands are cut off after this many seconds unless [executor.slurm] timeout_s says
# otherwise: while slurmctld is down, each scheduling pass waits this long once, then retries.
SLURM_TIMEOUT_S = 3.0


def build_executor(config: Any, clock: Any, db_id: str = "") -> Executor:
    """The executor named by ``[executor] kind``, imported only when used. ``db_id``: the
    store's (the local executor keeps its run files per database)."""
    from apportion.service.config import ConfigError

    kind = config.executor.kind
    from apportion.service.executor import InventoryHost

    hosts = [InventoryHost(h.name, h.gpus, "healthy", cluster=h.cluster, kind=h.kind)
             for h in config.hosts]
    data_dir: Path = config.server.data_dir
    check_hosts(config)
    if kind == "local":
        from apportion.service.executors.local import GpusInUse, LocalExecutor, UnsafeTmpDir

        try:
            return LocalExecutor(hosts, config.logs_dir, data_dir / "run", db_id=db_id,
                                 identity=config.identity,
                                 pids_max=config.executor.pids_max,
                                 tmp_dir=config.executor.tmp_dir or data_dir / "tmp")
        except GpusInUse as e:
            raise ConfigError(f"{config.source}: hosts: {e}") from None
        except UnsafeTmpDir as e:
            raise ConfigError(f"{config.source}: executor.local.tmp_dir: private TMPDIRs "
                              f"{e}") from None
    if kind == "memory":
        from apportion.service.executors.memory import MemoryExecutor

        return MemoryExecutor(hosts, clock)
    from apportion.service.executors.slurm import SlurmExecutor

    options = {"timeout_s": SLURM_TIMEOUT_S, "logs_dir": config.logs_dir,
               "identity": config.identity, **dict(config.executor.slurm)}
    try:
        return SlurmExecutor(data_dir / "slurm-jobs", **options)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{config.source}: executor.slurm: {e}") from None


# the level says which lines are problems (WARNING, ERROR) and which are news (INFO), as
# uvicorn's own lines do ("INFO:     ..."), so an operator can look for them
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def check_hosts(config: Any) -> None:
    """The config's ``[[hosts]]`` as its executor needs them, a :class:`ConfigError`
    otherwise: checked before the server makes anything (data directory, database)."""
    from apportion.service.config import ConfigError

    kind = config.executor.kind
    if kind in ("local", "memory") and not config.hosts:
        raise ConfigError(f"{config.source}: hosts: the {kind} executor needs [[hosts]]")
    if kind == "slurm" and config.hosts:
        # a configured host Slurm does not know would take work that can never start there
        raise ConfigError(f"{config.source}: hosts: the slurm executor takes its hosts from "
                          "Slurm (sinfo); remove the [[hosts]] tables")


class LogFormatter(logging.Formatter):
    """The server's log lines, stamped in the server's zone with its offset from UTC (the
    rule of every time shown: apportion.times), so a line pasted elsewhere still says when."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return format_time(record.created, time_zone(local_zone()))


def secure_data_dir(config: Any) -> None:
    """Create the data directory and the logs directory listable by the server only:
    traversable (0711), because each job reaches its own checkpoint file below ``logs/``
    (and with Slurm, compute nodes write each log as its owner); the database, tokens and
    scripts inside stay the server's, each with a mode of its own. A directory someone else
    could change, or put a link in the place of, is refused (:func:`unsafe_dir`,
    :func:`unsafe_way`): the server, often root, would follow their links."""
    for d, key, what in ((config.server.data_dir, "server.data_dir", "data directory"),
                         (config.logs_dir, "server.logs_dir", "logs directory")):
        where = f"{what} {d} ({config.source}: {key})"
        try:
            problem = unsafe_way(d)  # before anything is made there
            if problem is None:
                d.mkdir(parents=True, exist_ok=True)
                problem = unsafe_dir(d) or unsafe_way(d)  # what another made meanwhile
            if problem is not None:
                raise click.ClickException(f"{where}: {problem}")
            os.chmod(d, 0o711)
        except OSError as e:  # e.g. a read-only or full disk: the server could write nothing
            raise click.ClickException(f"{where}: {e.strerror or e}") from None


def warn_readable_password(config_path: str, url: str) -> None:
    """Say once, at start, that the config file holds the database's password and others
    can read it (jobs among them: the server's command line names the file)."""
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:  # not a URL: load_config has refused it already
        return
    mode = stat.S_IMODE(os.stat(config_path).st_mode)
    if (u.password or u.query.get("password")) and mode & 0o044:
        click.echo(f"apportion: warning: {config_path} (mode {mode:04o}) holds the database's "
                   f"password (database.url) and others can read it: chmod 600 "
                   f"{config_path}, or put the password in the server's ~/.pgpass or "
                   "PGPASSWORD instead", err=True)


def secure_db_file(config: Any) -> None:
    """A SQLite database (and its WAL files) readable by the server only."""
    if config.database.url:
        return
    for suffix in ("", "-wal", "-shm"):
        p = config.server.data_dir / f"apportion.db{suffix}"
        if p.exists():
            os.chmod(p, 0o600)


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound now (not inherited by the work it launches);
    a :class:`click.ClickException` naming the address when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:  # create_server would say a name it cannot resolve as "Unknown error -2"
        socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: the host does not "
                                   f"resolve here ({e.strerror})") from None
    try:
        return socket.create_server((host, port), family=family)
    except OSError as e:
        hint = (" (another server listens there: stop it, or give --port)"
                if e.errno == errno.EADDRINUSE else "")
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {os.strerror(e.errno) if e.errno else e}{hint}"
        ) from None


def handle_signals(server: Any) -> None:
    """SIGTERM and SIGINT stop the server cleanly, and SIGHUP (habitually sent to reload a
    config) is answered with a line and ignored. uvicorn shuts down on SIGTERM and SIGINT,
    then raises the signal again for the handler it found; with the default one, SIGTERM
    would kill the process before :func:`serve` stops the scheduler, folds the SQLite
    write-ahead log into the database file and releases the server lock. This one only
    asks uvicorn to exit (also when the signal comes before it runs)."""

    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    def hangup(signum: int, frame: object) -> None:
        click.echo("apportion: SIGHUP: this server does not reload its config; restart it "
                   "to apply changes", err=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hangup)


def checkpoint_wal(store: Any) -> None:
    """At a clean stop, fold SQLite's write-ahead log into ``apportion.db``, so that the
    file alone is a whole copy of the database (docs/operations.md, "Backups and
    restore"); if that cannot be done, say so: the log stays beside it, whole."""
    from apportion.service.store import StoreUnavailable

    try:
        if store.checkpoint_wal():
            return
        why = "another connection was reading it"
    except StoreUnavailable as e:  # the file cannot be written: the -wal keeps every commit
        why = str(e)
    click.echo(f"apportion: the write-ahead log was not folded into the database file "
               f"({why}): a copy of the database needs its -wal file too", err=True)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see docs/service.md)")
@click.option("--host", default=None, help="listen address (default: [server] host)")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="listen port (default: [server] port)")
def serve(config_path: str | None, host: str | None, port: int | None) -> None:
    """Run the scheduler service: HTTP API, scheduling loop and executor."""
    import uvicorn
    from sqlalchemy.exc import DBAPIError

    from apportion.service.api import create_app
    from apportion.service.clock import WallClock
    from apportion.service.config import ConfigError, ServiceConfig, load_config
    from apportion.service.scheduler import Scheduler
    from apportion.service.store import (
        LockLost,
        ServerLock,
        Store,
        StoreUnavailable,
        database_error,
        shown_url,
    )
    from apportion.service.store.seed import check_overrides, ignored_seed, seed_store

    log = logging.StreamHandler()
    log.setFormatter(LogFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[log])
    # the server's files are the server's: the database, tokens, run files and logs it
    # creates are readable by it alone (a workload gets its own umask back)
    os.umask(0o077)
    try:
        config = load_config(config_path) if config_path else ServiceConfig()
        if not config_path and not config.hosts:  # the defaults: nothing could ever run
            raise click.UsageError("no --config given, and without a config there are no "
                                   "[[hosts]] to run work on: give --config FILE "
                                   "(apportion init writes a commented one)")
        check_hosts(config)  # before a data directory and a database are made for nothing
        if config_path:
            warn_readable_password(config_path, config.database.url)
        secure_data_dir(config)  # a directory that is not the server's: said first
        # listen before the database is opened: a port in use is said before a first start
        # seeds the database and writes its tokens (uvicorn said it after, exit 3)
        listener = listen(host or config.server.host, port or config.server.port)
        try:  # one server per database: a second would take the first one's work as its own
            lock = ServerLock.acquire(config.db_url)
        except StoreUnavailable as e:
            raise click.ClickException(str(e)) from None
        clock = WallClock()
        store = Store(config.db_url)
        try:
            store.migrate()
        except DBAPIError as e:
            raise click.ClickException(str(database_error(config.db_url, e))) from None
        except StoreUnavailable as e:  # a schema of a newer apportion, a broken upgrade
            raise click.ClickException(str(e)) from None
        secure_db_file(config)
        check_overrides(store, config)
        executor = build_executor(config, clock, db_id=store.db_id())
        tokens = seed_store(store, config)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:  # a file the server must write (tokens, run files): say which
        where = f"{e.filename}: " if e.filename else ""
        raise click.ClickException(f"cannot start: {where}{e.strerror or e}") from None
    click.echo(f"apportion: database {shown_url(config.db_url)}; logs in {config.logs_dir}",
               err=True)
    click.echo(f"apportion: {executor.describe()}", err=True)
    # uvicorn says where it listens only for a socket it binds itself, never for ours
    at, bound = listener.getsockname()[:2]
    shown = f"[{at}]" if ":" in at else at
    click.echo(f"apportion: listening on http://{shown}:{bound}", err=True)
    if tokens:
        click.echo(f"apportion: first start: tokens for {', '.join(sorted(tokens))} written "
                   f"to {config.tokens_dir}", err=True)
    ignored = ignored_seed(store, config)
    if ignored:
        click.echo(f"apportion: the config's [[users]] and [[budgets]] seed an empty database "
                   f"only: ignored where they differ from this one's ({'; '.join(ignored)}); "
                   "change users with `apportion users add/set` and budgets with `apportion "
                   "budgets create/set/members/managers` (as an admin)", err=True)
    scheduler = Scheduler(store, executor, config.policy, clock, grace_s=config.executor.grace_s,
                          pools=config.pools)
    try:
        scheduler.start()
    except Exception:  # e.g. Slurm unreachable: the loop's first pass starts it again
        logging.getLogger("apportion.serve").exception("scheduler start failed; retrying")
    stop = threading.Event()
    lost: list[str] = []
    app = create_app(store, scheduler, config)
    # uvicorn writes its request lines to stdout by default: the server's log is stderr
    # alone (docs/operations.md), so a service manager's or shell's 2>> gets every line
    log_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    server = uvicorn.Server(uvicorn.Config(app, host=host or config.server.host,
                                           port=port or config.server.port, log_level="info",
                                           access_log=config.server.access_log,
                                           log_config=log_config))
    handle_signals(server)

    def schedule() -> None:
        try:
            scheduler.run_forever(config.scheduler.interval_s, stop, guard=lock.keep)
        except LockLost as e:  # another server schedules now: this one stops, whole
            logging.getLogger("apportion.serve").error("%s", e)
            lost.append(str(e))
            server.should_exit = True  # uvicorn's own graceful shutdown

    loop = threading.Thread(target=schedule, name="apportion-scheduler", daemon=True)
    loop.start()
    try:
        server.run(sockets=[listener])
    finally:
        # a second SIGTERM or SIGINT while the server winds down ends it at once
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop.set()
        scheduler.wake()
        loop.join(timeout=30)
        executor.close()
        checkpoint_wal(store)
        lock.release()
        store.close()
    if lost:
        raise click.ClickException(lost[0])
