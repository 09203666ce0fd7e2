"""The service's TOML configuration, loaded into frozen dataclasses.

Every problem is reported as ``file: key: problem`` (``key`` dotted, list items by index,
e.g. ``apportion.toml: hosts[1].gpus: must be an integer > 0``); read from a file, with the
line the key (or its table) is written on, ``apportion.toml:12: hosts[1].gpus: ...``
(:func:`load_config`; none for a key the file does not write). Relative paths
(``server.data_dir``) are taken relative to the config file's directory, so a config means
the same thing whatever directory the server is started from.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError

from apportion.core import NUMBER_KNOBS, BudgetTree, CoreError, PolicyConfig, parse_duration
from apportion.core.config import policy_from
from apportion.core.fleet import FleetConfig
from apportion.core.names import did_you_mean
from apportion.text import as_written, at_key_line

from .executors.identity import Identity
from .store import default_sqlite_url

T = TypeVar("T")
EXECUTOR_KINDS = ("local", "slurm", "memory")
# the keyword arguments of the Slurm executor [executor.slurm] may give (serve gives the
# others: its jobs directory, in data_dir, and whom work runs as, from [server])
SLURM_KEYS = ("cluster", "env", "kinds", "logs_dir", "partition", "timeout_s")
# a cluster or GPU kind: what a pool name "cluster/kind" and Slurm's gres types can carry
_POOL_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z")
_UNIX_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}[$]?\Z", re.IGNORECASE)


class ConfigError(ValueError):
    """A bad configuration file; the message is ``file: key: problem``."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8642
    data_dir: Path = Path("apportion-data")
    # where attempts' logs (and the local executor's checkpoint files) go; None: data_dir/logs.
    # Jobs write there: on a file system of its own they cannot fill the database's
    logs_dir: Path | None = None
    # false: the dashboard's data, "why" and /metrics need a token like every other read
    public_read: bool = False
    # larger request bodies are refused with 413 before they are read whole
    max_body_bytes: int = 1 << 20
    # what-if replays (POST /v1/whatif) running at once, one per user; one more gets 429
    max_whatif_replays: int = 2
    # as root, work runs as each owner's Unix account; single_user runs everyone's work as
    # the server's own user instead (see docs/security.md)
    single_user: bool = False
    allow_root_for: tuple[str, ...] = ()  # users whose work may run as root (uid 0)
    # false: no line per HTTP request on stderr (clients that poll, as logs -f and
    # queue --watch do, add one every half second); the server's own lines stay
    access_log: bool = True


@dataclass(frozen=True, slots=True)
class AuthConfig:
    # seconds: the lifetime of a token created without one, and the longest one may have;
    # None: tokens never expire unless their creator says when
    max_token_lifetime: float | None = None


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    url: str = ""  # empty: sqlite:///<data_dir>/apportion.db


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    kind: str = "local"
    grace_s: float = 10.0
    # [executor.local] pids_max: processes and threads per attempt (0: no limit)
    pids_max: int = 8192
    # [executor.local] tmp_dir: where jobs' private TMPDIRs go (None: <data_dir>/tmp)
    tmp_dir: Path | None = None
    # [executor.slurm] is handed to the Slurm executor as keyword arguments
    slurm: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class HostConfig:
    name: str
    gpus: int
    cluster: str = ""  # "": the [pools] default cluster
    kind: str = ""  # "": the [pools] default GPU kind


@dataclass(frozen=True, slots=True)
class PoolsConfig:
    """Clusters and GPU kinds (docs/service.md, "Pools"). A host that names no cluster or
    kind (in the config or the executor's inventory) is in ``cluster`` / ``kind``;
    ``billing`` and ``overrides`` are :class:`~apportion.core.fleet.FleetConfig`'s, with the
    simulator's ``--cluster FILE`` vocabulary."""

    cluster: str = "default"
    kind: str = "gpu"
    billing: Mapping[str, float] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def of(self, cluster: str, kind: str) -> tuple[str, str]:
        """The (cluster, kind) of a host that says ``cluster`` and ``kind`` ("": default)."""
        return cluster or self.cluster, kind or self.kind

    def fleet(self, tree: BudgetTree | None = None) -> FleetConfig:
        """The core's config; with ``tree``, only the per-pool weights of budgets it has
        (a budget removed since the config was written funds nothing anywhere)."""
        overrides = {p: {b: w for b, w in ws.items() if tree is None or b in tree}
                     for p, ws in self.overrides.items()}
        return FleetConfig(billing=dict(self.billing),
                           overrides={p: ws for p, ws in overrides.items() if ws})


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    path: str
    weight: float = 1.0
    managers: tuple[str, ...] = ()
    members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UserConfig:
    name: str
    admin: bool = False
    unix_user: str | None = None  # None: the Unix account of the same name


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """The whole configuration. ``budgets``, ``users`` and ``hosts`` seed an empty database
    only; afterwards the database is the source of truth."""

    server: ServerConfig = field(default_factory=ServerConfig)
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    hosts: tuple[HostConfig, ...] = ()
    budgets: tuple[BudgetConfig, ...] = ()
    users: tuple[UserConfig, ...] = ()
    source: str = "<defaults>"
    pools: PoolsConfig = field(default_factory=PoolsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)

    @property
    def db_url(self) -> str:
        return self.database.url or default_sqlite_url(self.server.data_dir)

    @property
    def identity(self) -> Identity:
        """Whom work runs as (``[server] single_user`` and ``allow_root_for``)."""
        return Identity(self.server.single_user, frozenset(self.server.allow_root_for))

    @property
    def logs_dir(self) -> Path:
        return self.server.logs_dir or self.server.data_dir / "logs"

    @property
    def tokens_dir(self) -> Path:
        return self.server.data_dir / "tokens"


# ---- loading -----------------------------------------------------------------------------
class _Reader:
    """Reads one table, remembering which keys were used so leftovers are reported."""

    def __init__(self, src: str, where: str, table: object) -> None:
        self.src, self.where = src, where
        if not isinstance(table, dict):
            raise self.error("", "must be a table")
        self.table: dict[str, Any] = table
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def error(self, name: str, problem: str) -> ConfigError:
        key = self.key(name) if name else self.where
        return ConfigError(f"{self.src}: {key}: {problem}")

    def get(self, name: str, default: Any = None, required: bool = False) -> Any:
        self.used.add(name)
        if name not in self.table:
            if required:
                raise self.error(name, "missing")
            return default
        return self.table[name]

    def string(self, name: str, default: str = "", required: bool = False) -> str:
        v = self.get(name, default, required)
        if not isinstance(v, str):
            raise self.error(name, f"must be a string, got {v!r}")
        return v

    def integer(self, name: str, default: int = 0, minimum: int = 0,
                required: bool = False) -> int:
        v = self.get(name, default, required)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.error(name, f"must be an integer >= {minimum}, got {v!r}")
        return v

    def number(self, name: str, default: float, positive: bool = False) -> float:
        v = self.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or (
            positive and v <= 0
        ):
            raise self.error(name, f"must be a number {'>' if positive else '>='} 0, got {v!r}")
        return float(v)

    def boolean(self, name: str, default: bool = False) -> bool:
        v = self.get(name, default)
        if not isinstance(v, bool):
            raise self.error(name, f"must be true or false, got {v!r}")
        return v

    def duration(self, name: str, default: float) -> float:
        try:
            return parse_duration(self.get(name, default))
        except ValueError as e:
            raise self.error(name, str(e)) from None

    def strings(self, name: str, what: str, item: str) -> dict[str, str]:
        """A table of strings (``env = { SLURM_CONF = "/x" }``); ``what`` says what it
        must be when it is no table, ``item`` what each value must be, naming the entry
        that is not (``kinds.B200``)."""
        v = self.get(name, {})
        if not isinstance(v, dict):
            raise self.error(name, f"must be {what}, got {as_written(v)}")
        for key, x in v.items():
            if not isinstance(x, str):
                raise self.error(f"{name}.{key}", f"must be {item}, got {as_written(x)}")
        return dict(v)

    def names(self, name: str) -> tuple[str, ...]:
        v = self.get(name, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise self.error(name, f"must be a list of names, got {v!r}")
        return tuple(v)

    def done(self, valid: tuple[str, ...] | None = None) -> None:
        extra = sorted(set(self.table) - self.used)
        if extra:
            known = ", ".join(sorted(valid if valid is not None else self.used))
            raise self.error(extra[0], f"unknown key (valid keys: {known})")


def _database_url(r: _Reader) -> str:
    """``database.url``: empty (SQLite in data_dir), a SQLite file in a directory that
    exists, or PostgreSQL (``postgresql://`` and ``postgres://`` are given the psycopg 3
    driver). Anything else is refused here, naming the key, rather than failing as a
    traceback when the server or what-if opens it. The URL is never echoed with its
    password."""
    url = r.string("url", "")
    if not url:
        return url
    for spelling in ("postgres://", "postgresql://"):
        if url.startswith(spelling):
            url = "postgresql+psycopg://" + url[len(spelling):]
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise r.error("url", "not a database URL; expected sqlite:///PATH or "
                             "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE") from None
    except ValueError:  # SQLAlchemy reads the port with int(); what it read is not echoed:
        # a malformed URL may put some of the password there
        hint = "; an IPv6 host goes in brackets, then the port: [::1]:5432" if "[" in url else ""
        raise r.error("url", f"the port is not a number{hint}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).parent  # as SQLite opens it: from the working dir
            if not folder.is_dir():
                raise r.error("url", f"{folder}: no such directory for the SQLite database")
        return url
    if backend != "postgresql" or parsed.get_driver_name() != "psycopg":
        raise r.error("url", f"{parsed.drivername}: not supported; apportion stores in SQLite "
                             "(sqlite:///PATH) or PostgreSQL (postgresql+psycopg://...)")
    return url


def load_config(path: str | Path) -> ServiceConfig:
    """Read and check a TOML config file; a problem names the line of its key, when the
    file writes it (``file:line: key: problem``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: {e}") from None
    try:
        return parse_config(data, source=str(p), base_dir=p.resolve().parent)
    except ConfigError as e:
        located = at_key_line(str(e), str(p), text)
        if located == str(e):
            raise
        raise ConfigError(located) from None


def parse_config(
    data: Mapping[str, Any], source: str = "<config>", base_dir: Path | None = None
) -> ServiceConfig:
    """Check a parsed TOML document; see the module docstring for the error format."""
    top = _Reader(source, "", dict(data))
    base = base_dir if base_dir is not None else Path.cwd()

    r = _Reader(source, "server", top.get("server", {}))
    data_dir = base / r.string("data_dir", "apportion-data")  # an absolute one stays itself
    logs_dir = r.string("logs_dir", "")
    server = ServerConfig(
        host=r.string("host", "127.0.0.1"),
        port=r.integer("port", 8642, minimum=0),
        data_dir=data_dir,
        logs_dir=base / logs_dir if logs_dir else None,
        public_read=r.boolean("public_read", False),
        max_body_bytes=r.integer("max_body_bytes", 1 << 20, minimum=1024),
        max_whatif_replays=r.integer("max_whatif_replays", 2, minimum=1),
        single_user=r.boolean("single_user", False),
        allow_root_for=r.names("allow_root_for"),
        access_log=r.boolean("access_log", True),
    )
    if server.port > 65535:
        raise r.error("port", f"must be <= 65535, got {server.port}")
    r.done()

    r = _Reader(source, "auth", top.get("auth", {}))
    lifetime = r.duration("max_token_lifetime", 0.0) if "max_token_lifetime" in r.table \
        else None
    if lifetime is not None and lifetime <= 0:
        raise r.error("max_token_lifetime", "must be a duration > 0 (leave it out for tokens "
                                            "that never expire)")
    auth = AuthConfig(max_token_lifetime=lifetime)
    r.done(("max_token_lifetime",))

    r = _Reader(source, "database", top.get("database", {}))
    database = DatabaseConfig(url=_database_url(r))
    r.done()

    r = _Reader(source, "executor", top.get("executor", {}))
    kind = r.string("kind", "local")
    if kind not in EXECUTOR_KINDS:
        raise r.error("kind", f"must be one of {', '.join(EXECUTOR_KINDS)}, got {kind!r}")
    grace = r.duration("grace_s", 10.0)
    slurm = _slurm(_Reader(source, "executor.slurm", r.get("slurm", {})))
    local = _Reader(source, "executor.local", r.get("local", {}))
    pids_max = local.integer("pids_max", ExecutorConfig().pids_max, minimum=0)
    tmp_dir = local.string("tmp_dir", "")
    local.done()
    executor = ExecutorConfig(kind=kind, grace_s=grace, pids_max=pids_max,
                              tmp_dir=base / tmp_dir if tmp_dir else None, slurm=dict(slurm))
    r.done()

    policy = _policy(_Reader(source, "policy", top.get("policy", {})))

    r = _Reader(source, "scheduler", top.get("scheduler", {}))
    interval = r.duration("interval_s", 5.0)
    if interval <= 0:
        raise r.error("interval_s", "must be > 0")
    scheduler = SchedulerConfig(interval_s=interval)
    r.done()

    hosts = _each(source, "hosts", top.get("hosts", []), lambda x: HostConfig(
        name=x.string("name", required=True), gpus=x.integer("gpus", required=True, minimum=1),
        cluster=_pool_part(x, "cluster", ""), kind=_pool_part(x, "kind", ""),
    ))
    _unique(source, "hosts", [h.name for h in hosts])
    pools = _pools(source, top)
    budgets = _each(source, "budgets", top.get("budgets", []), lambda x: BudgetConfig(
        path=x.string("path", required=True), weight=x.number("weight", 1.0, positive=True),
        managers=x.names("managers"), members=x.names("members"),
    ))
    _unique(source, "budgets", [b.path for b in budgets], what="path")
    users = _each(source, "users", top.get("users", []), lambda x: UserConfig(
        name=x.string("name", required=True), admin=x.boolean("admin"),
        unix_user=_unix_user(x),
    ))
    _unique(source, "users", [u.name for u in users])
    _check_seed(source, budgets, users)
    if executor.kind in ("local", "memory"):  # their hosts are the config's; Slurm has its own
        _check_override_pools(source, pools, hosts)
    top.done(("auth", "billing", "budgets", "database", "executor", "hosts", "overrides", "policy",
              "pools", "scheduler", "server", "users"))
    return ServiceConfig(server, database, executor, policy, scheduler, hosts, budgets, users,
                         source, pools, auth)


def _slurm(r: _Reader) -> dict[str, Any]:
    """[executor.slurm]: the keys given, each of the type the Slurm executor takes, checked
    here, where the file's line can be named (a number passed on as ``partition`` went on
    to sbatch); what a value means (a cluster without '/', a gres type) the executor
    checks when serve builds it."""
    unknown = sorted(set(r.table) - set(SLURM_KEYS))
    if unknown:
        raise r.error(unknown[0], f"unknown key (valid keys: {', '.join(SLURM_KEYS)})")
    given = set(r.table)
    slurm: dict[str, Any] = {name: r.string(name) for name in ("cluster", "logs_dir",
                                                                "partition") if name in given}
    if "timeout_s" in given:
        slurm["timeout_s"] = r.number("timeout_s", 0, positive=True)
    if "env" in given:
        slurm["env"] = r.strings("env", 'a table of NAME = "value"', "a string")
    if "kinds" in given:
        slurm["kinds"] = r.strings("kinds", 'a table of GPU kind = "gres type"',
                                   "a Slurm gres type such as 'h100'")
    return slurm


def _pool_part(r: _Reader, name: str, default: str) -> str:
    """A cluster or GPU kind name ("" only as the default: none given)."""
    v = r.string(name, default)
    if v != default and not _POOL_PART.match(v):
        raise r.error(name, "must be 1 to 64 letters, digits and . _ + - (starting with a "
                            f"letter or digit), got {v!r}")
    return v


def _pools(src: str, top: _Reader) -> PoolsConfig:
    """``[pools]`` (the default cluster and kind) and the top-level ``billing`` (kind ->
    units per GPU-second) and ``overrides`` (pool -> {budget: weight}) tables, as in the
    simulator's ``--cluster FILE``."""
    r = _Reader(src, "pools", top.get("pools", {}))
    cluster, kind = _pool_part(r, "cluster", "default"), _pool_part(r, "kind", "gpu")
    r.done(("cluster", "kind"))
    billing: dict[str, float] = {}
    b = _Reader(src, "billing", top.get("billing", {}))
    for k in b.table:
        if not _POOL_PART.match(k):
            raise b.error(k, "must be a GPU kind (letters, digits and . _ + -)")
        billing[k] = b.number(k, 1.0, positive=True)
    overrides: dict[str, dict[str, float]] = {}
    o = _Reader(src, "overrides", top.get("overrides", {}))
    for pool in o.table:
        c, sep, k = pool.partition("/")
        if not (sep and _POOL_PART.match(c) and _POOL_PART.match(k)):
            raise o.error(pool, "must be a pool named \"cluster/kind\", e.g. \"west/B200\"")
        w = _Reader(src, f"overrides.{pool}", o.get(pool))
        overrides[pool] = {path: w.number(path, 1.0) for path in w.table}
    try:
        out = PoolsConfig(cluster, kind, billing, overrides)
        out.fleet()  # the core's own checks, once more
    except CoreError as e:
        raise ConfigError(f"{src}: {e}") from None
    return out


def _check_override_pools(src: str, pools: PoolsConfig, hosts: tuple[HostConfig, ...]) -> None:
    """Per-pool weights name pools some host of ``hosts`` is in: a mistyped pool would
    silently fund nothing."""
    there = sorted({"/".join(pools.of(h.cluster, h.kind)) for h in hosts})
    for pool in pools.overrides:
        if pool not in there:
            raise ConfigError(f"{src}: overrides.{pool}: no host is in pool {pool} (the "
                              f"hosts' pools: {', '.join(there) or 'none'})")


def _unix_user(r: _Reader) -> str | None:
    if "unix_user" not in r.table:
        r.used.add("unix_user")
        return None
    v = r.string("unix_user")
    if not _UNIX_NAME.match(v):
        raise r.error("unix_user", f"must be a Unix user name (at most 32 of a-z, 0-9, _, "
                                   f"-, starting with a letter or _), got {v!r}")
    return v


def _each(src: str, name: str, value: object, build: Callable[[_Reader], T]) -> tuple[T, ...]:
    """Build one item per ``[[name]]`` table, then report that table's unknown keys."""
    if not isinstance(value, list):
        raise ConfigError(f"{src}: {name}: must be an array of tables ([[{name}]])")
    out = []
    for i, item in enumerate(value):
        r = _Reader(src, f"{name}[{i}]", item)
        out.append(build(r))
        r.done()
    return tuple(out)


def _check_seed(src: str, budgets: tuple[BudgetConfig, ...],
                users: tuple[UserConfig, ...]) -> None:
    """The API's rules for budget paths, weights and user names hold for the config too."""
    from .validation import MAX_WEIGHT, MIN_WEIGHT, check_budget_path, check_user_name

    def check(key: str, fn: Callable[[str], str], value: str) -> None:
        try:
            fn(value)
        except ValueError as e:
            raise ConfigError(f"{src}: {key}: {e}") from None

    for i, u in enumerate(users):
        check(f"users[{i}].name", check_user_name, u.name)
    known = [u.name for u in users]
    for i, b in enumerate(budgets):
        check(f"budgets[{i}].path", check_budget_path, b.path)
        if not MIN_WEIGHT <= b.weight <= MAX_WEIGHT:
            raise ConfigError(f"{src}: budgets[{i}].weight: must be a number from "
                              f"{MIN_WEIGHT:g} to {MAX_WEIGHT:g}, got {b.weight:g}")
        for field_ in ("managers", "members"):
            for j, who in enumerate(getattr(b, field_)):
                check(f"budgets[{i}].{field_}[{j}]", check_user_name, who)
                # the seed makes only the [[users]] listed, and the API refuses unknown people
                if who not in known:
                    raise ConfigError(f"{src}: budgets[{i}].{field_}[{j}]: unknown user "
                                      f"{who!r} (not in [[users]])"
                                      + did_you_mean(who, known, quote=True))


def _unique(src: str, name: str, values: list[str], what: str = "name") -> None:
    seen: set[str] = set()
    for i, v in enumerate(values):
        if v in seen:
            raise ConfigError(f"{src}: {name}[{i}].{what}: duplicate {v!r}")
        seen.add(v)


def _policy(r: _Reader) -> PolicyConfig:
    valid = tuple(f.name for f in dataclasses.fields(PolicyConfig))
    defaults = PolicyConfig()
    for key in r.table:
        if key not in valid:
            raise r.error(key, f"unknown key (valid keys: {', '.join(valid)})")
    values: dict[str, Any] = {}
    for name in valid:
        if name not in r.table:
            continue
        default = getattr(defaults, name)
        if isinstance(default, bool):
            values[name] = r.boolean(name, default)
        elif isinstance(default, int):
            values[name] = r.integer(name, default)
        elif name in NUMBER_KNOBS:  # a margin or a factor
            values[name] = r.number(name, default)
        else:  # every other float field is a duration
            values[name] = r.duration(name, default)
    try:
        return policy_from(values)
    except CoreError as e:
        # "policy: <knob>: problem", as file: key: problem, saying when the file did not
        # set the knob refused (its default is what is wrong then, with what the file set)
        knob, sep, problem = str(e).removeprefix("policy: ").partition(": ")
        if not sep or knob not in valid:
            raise ConfigError(f"{r.src}: {e}") from None
        default = "" if knob in r.table else f" (the default: {knob} is not set)"
        raise r.error(knob, problem + default) from None
