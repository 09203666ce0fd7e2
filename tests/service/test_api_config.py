"""The service's TOML config: values, defaults and error messages naming file and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apportion.service.config import (
    ConfigError,
    ServiceConfig,
    load_config,
    parse_config,
    parse_duration,
)


def load_config_text(tmp_path: Path, text: str) -> ServiceConfig:
    p = tmp_path / "svc.toml"
    p.write_text(text)
    return load_config(p)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604800.0), ("8h", 28800.0), ("15m", 900.0), ("30s", 30.0), ("90", 90.0),
     (45, 45.0), (1.5, 1.5), ("1h30m", 5400.0), (" 2H ", 7200.0)],
)
def test_durations(text: object, seconds: float) -> None:
    """Durations are numbers of seconds or strings with d/h/m/s units."""
    assert parse_duration(text) == seconds


def test_config_reads_durations_as_the_rest_of_the_package_does(tmp_path: Path) -> None:
    """The config's durations are the package's one syntax (as --set and the API read them):
    Slurm's clock forms and ``min`` too, not only d/h/m/s."""
    cfg = load_config_text(tmp_path, """
[executor]
kind = "memory"
grace_s = "1:30"
[policy]
lookback = "1-00:00:00"
max_min_runtime = "2-12"
checkpoint_wait = "5min"
restart_protection = "01:30:00"
""")
    assert cfg.executor.grace_s == 90.0
    assert cfg.policy.lookback == 86400.0
    assert cfg.policy.max_min_runtime == 2.5 * 86400.0
    assert cfg.policy.checkpoint_wait == 300.0
    assert cfg.policy.restart_protection == 5400.0


@pytest.mark.parametrize("bad", ["soon", "3 weeks", "-5", -1, True, "5x", "", [1]])
def test_bad_durations(bad: object) -> None:
    """Anything else is refused with a readable problem."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_full_config(tmp_path: Path) -> None:
    """Every section is read; data_dir is relative to the config file; policy by name."""
    cfg = load_config_text(tmp_path, """
[server]
host = "0.0.0.0"
port = 9000
data_dir = "d"
[database]
url = "postgresql+psycopg://x@h/db"
[executor]
kind = "slurm"
grace_s = "1m"
[executor.slurm]
partition = "gpu"
[policy]
lookback = "3d"
max_min_runtime = "4h"
debug_max_gpus = 4
rebalance = false
rebalance_margin = 0.2
[scheduler]
interval_s = 2
[[hosts]]
name = "n1"
gpus = 8
[[budgets]]
path = "ai/llm"
weight = 2
managers = ["carol"]
members = ["alice"]
[[users]]
name = "root"
admin = true
[[users]]
name = "carol"
[[users]]
name = "alice"
""")
    assert (cfg.server.host, cfg.server.port, cfg.server.data_dir) == ("0.0.0.0", 9000,
                                                                       tmp_path / "d")
    assert cfg.logs_dir == tmp_path / "d" / "logs"  # no logs_dir: inside data_dir
    assert cfg.db_url == "postgresql+psycopg://x@h/db"
    assert (cfg.executor.kind, cfg.executor.grace_s, dict(cfg.executor.slurm)) == (
        "slurm", 60.0, {"partition": "gpu"})
    p = cfg.policy
    assert (p.lookback, p.max_min_runtime, p.debug_max_gpus, p.rebalance,
            p.rebalance_margin) == (259200.0, 14400.0, 4, False, 0.2)
    assert cfg.scheduler.interval_s == 2.0
    assert cfg.hosts[0].gpus == 8 and cfg.budgets[0].members == ("alice",)
    assert cfg.users[0].admin


def test_logs_dir_is_read_relative_to_the_config_file(tmp_path: Path) -> None:
    """``[server] logs_dir`` puts attempts' logs apart from the database (a file system of
    their own, which jobs' output cannot fill for the database): relative to the config
    file's directory as data_dir is, an absolute path as given."""
    cfg = load_config_text(tmp_path, '[server]\ndata_dir = "d"\nlogs_dir = "joblogs"\n')
    assert (cfg.server.data_dir, cfg.logs_dir) == (tmp_path / "d", tmp_path / "joblogs")
    cfg = load_config_text(tmp_path, '[server]\nlogs_dir = "/srv/joblogs"\n')
    assert cfg.logs_dir == Path("/srv/joblogs")
    with pytest.raises(ConfigError, match="server.logs_dir: must be a string, got 3"):
        load_config_text(tmp_path, "[server]\nlogs_dir = 3\n")


def test_defaults(tmp_path: Path) -> None:
    """An empty file gives the documented defaults and a SQLite database in data_dir."""
    cfg = load_config_text(tmp_path, "")
    assert (cfg.server.port, cfg.executor.kind, cfg.scheduler.interval_s) == (8642, "local", 5.0)
    assert cfg.db_url == f"sqlite:///{tmp_path / 'apportion-data' / 'apportion.db'}"
    assert cfg.policy.lookback == 7 * 86400
    assert cfg.auth.max_token_lifetime is None  # tokens never expire unless asked to


def test_the_policy_row_of_docs_service_md_names_every_policy_field_and_each_is_read(
    tmp_path: Path,
) -> None:
    """docs/service.md's ``policy.<field>`` row lists every ``PolicyConfig`` field by name
    (it had left out ``debug_lane`` and ``shortcuts``), and ``[policy]`` reads each
    boolean one of them from the config as given."""
    import dataclasses

    from apportion.core import PolicyConfig

    doc = (Path(__file__).parents[2] / "docs" / "service.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `policy.<field>`"))
    fields = [f.name for f in dataclasses.fields(PolicyConfig)]
    assert [f for f in fields if f"`{f}` (" not in row] == []
    cfg = load_config_text(tmp_path, "[policy]\ndebug_lane = false\nshortcuts = false\n")
    assert (cfg.policy.debug_lane, cfg.policy.shortcuts) == (False, False)


def test_max_token_lifetime_is_read_as_a_duration(tmp_path: Path) -> None:
    """``[auth] max_token_lifetime`` takes a duration as every other setting does."""
    cfg = load_config_text(tmp_path, "[auth]\nmax_token_lifetime = '90d'")
    assert cfg.auth.max_token_lifetime == 90 * 86400


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[policy]\nlookbak = '7d'", "policy.lookbak: unknown key (valid keys: lookback, "),
        ("[policy]\nlookback = 'a week'", "policy.lookback: must be a duration"),
        ("[policy]\nlookback = 0", "policy.lookback: must be > 0"),
        ("[policy]\nrebalance = 1", "policy.rebalance: must be true or false"),
        ("[policy]\nvictim_max_factor = '2h'", "policy.victim_max_factor: must be a number >= 0"),
        ("[policy]\nadmission_charge = -1", "policy.admission_charge: must be a number >= 0"),
        ("[server]\nport = 'http'", "server.port: must be an integer"),
        ("[server]\nport = 70000", "server.port: must be <= 65535"),
        ("[server]\nhots = 1", "server.hots: unknown key"),
        ("[executor]\nkind = 'k8s'", "executor.kind: must be one of local, slurm, memory"),
        ("[scheduler]\ninterval_s = 0", "scheduler.interval_s: must be > 0"),
        ("[[hosts]]\nname = 'a'\ngpus = 0", "hosts[0].gpus: must be an integer >= 1"),
        ("[[hosts]]\ngpus = 8", "hosts[0].name: missing"),
        ("[[hosts]]\nname='a'\ngpus=8\n[[hosts]]\nname='a'\ngpus=8",
         "hosts[1].name: duplicate 'a'"),
        ("[[budgets]]\npath = 'a'\nweight = 0", "budgets[0].weight: must be a number > 0"),
        ("[[budgets]]\npath = 'a'\nmembers = 'bob'", "budgets[0].members: must be a list"),
        ("[[budgets]]\npath = 'a'\nweight = 1e308", "budgets[0].weight: must be a number from"),
        ("[[budgets]]\npath = 'a/..'", "budgets[0].path: segment 2 ('..'): must not be"),
        ("[[budgets]]\npath = 'a'\nmembers = ['Bob']", "budgets[0].members[0]: 'Bob' is not"),
        ("[[users]]\nname = 'a/b'", "users[0].name: 'a/b' is not a user name"),
        ("[[users]]\nname = 'nobody'\n[[budgets]]\npath = 'a'\n[[budgets]]\npath = 'b'\n"
         "members = ['nobody', 'nobody1']",
         "budgets[1].members[1]: unknown user 'nobody1' (not in [[users]]); did you mean "
         "'nobody'?"),
        ("[[budgets]]\npath = 'a'\nmanagers = ['carol']",
         "budgets[0].managers[0]: unknown user 'carol' (not in [[users]])"),
        ("[server]\npublic_read = 'yes'", "server.public_read: must be true or false"),
        ("[server]\nmax_body_bytes = 10", "server.max_body_bytes: must be an integer >= 1024"),
        ("[server]\nmax_whatif_replays = 0", "server.max_whatif_replays: must be an integer >= 1"),
        ("[[users]]\nname = 'x'\nadmin = 'yes'", "users[0].admin: must be true or false"),
        ("[[users]]\nname = 'x'\nrole = 'admin'", "users[0].role: unknown key"),
        ("hosts = 3", "hosts: must be an array of tables"),
        ("sever = 1", "sever: unknown key (valid keys: auth, billing, budgets, database"),
        ("[auth]\nmax_token_lifetime = 0", "auth.max_token_lifetime: must be a duration > 0"),
        ("[auth]\nmax_token_lifetime = 'a year'", "auth.max_token_lifetime: must be a duration"),
        ("[auth]\nmax_token_life = '90d'", "auth.max_token_life: unknown key (valid keys: "
         "max_token_lifetime)"),
        ("[server\n", "Expected ']'"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """Each problem is reported as `file:line: key: problem`, the line the key (or its
    table) is on (a TOML syntax error as the TOML reader says it, with its line)."""
    with pytest.raises(ConfigError) as e:
        load_config_text(tmp_path, text)
    where = re.escape(str(tmp_path / "svc.toml"))
    assert re.match(rf"{where}:[0-9]+: ", str(e.value)) or (
        str(e.value).startswith(f"{tmp_path / 'svc.toml'}: ") and "(at line " in str(e.value)
    ), str(e.value)
    assert message in str(e.value)


def test_an_unknown_key_in_executor_slurm_is_refused_naming_it_and_the_valid_keys(
        tmp_path: Path) -> None:
    """``bogus = 1`` in [executor.slurm] is refused when the config is read, as an unknown
    key is elsewhere, naming the file, ``executor.slurm.bogus`` and the keys it may hold
    (it reached the Slurm executor and was reported as a Python TypeError, ``__init__() got
    an unexpected keyword argument 'bogus'``); the keys it may hold are read."""
    with pytest.raises(ConfigError) as e:
        load_config_text(tmp_path, "[executor]\nkind = 'slurm'\n[executor.slurm]\nbogus = 1")
    assert str(e.value) == (f"{tmp_path / 'svc.toml'}:4: executor.slurm.bogus: unknown key "
                            "(valid keys: cluster, env, kinds, logs_dir, partition, timeout_s)")
    cfg = load_config_text(tmp_path, """
[executor]
kind = "slurm"
[executor.slurm]
cluster = "east"
env = { SLURM_CONF = "/x" }
kinds = { H100 = "h100" }
logs_dir = "/l"
partition = "gpu"
timeout_s = 3
""")
    assert dict(cfg.executor.slurm) == {
        "cluster": "east", "env": {"SLURM_CONF": "/x"}, "kinds": {"H100": "h100"},
        "logs_dir": "/l", "partition": "gpu", "timeout_s": 3}


@pytest.mark.parametrize(("line", "message"), [
    ("partition = 3", "executor.slurm.partition: must be a string, got 3"),
    ("cluster = true", "executor.slurm.cluster: must be a string, got True"),
    ("logs_dir = 1", "executor.slurm.logs_dir: must be a string, got 1"),
    ('timeout_s = "x"', "executor.slurm.timeout_s: must be a number > 0, got 'x'"),
    ("timeout_s = 0", "executor.slurm.timeout_s: must be a number > 0, got 0"),
    ("env = { SLURM_CONF = 1 }", "executor.slurm.env.SLURM_CONF: must be a string, got 1"),
    ('env = "x"', "executor.slurm.env: must be a table of NAME = \"value\", got 'x'"),
    ("kinds = { H100 = 3 }",
     "executor.slurm.kinds.H100: must be a Slurm gres type such as 'h100', got 3"),
    ("kinds = [1]", "executor.slurm.kinds: must be a table of GPU kind = \"gres type\", got [1]"),
])
def test_a_value_of_the_wrong_type_in_executor_slurm_is_refused_naming_line_key_and_type(
        tmp_path: Path, line: str, message: str) -> None:
    """A value of [executor.slurm] of the wrong type (``partition = 3``, which was passed on
    to sbatch unchecked) is refused when the config is read, as the config's other keys
    are: the file and the key's line, the key, what it must be and what it got."""
    with pytest.raises(ConfigError) as e:
        load_config_text(tmp_path, f"[executor]\nkind = 'slurm'\n[executor.slurm]\n{line}")
    assert str(e.value) == f"{tmp_path / 'svc.toml'}:4: {message}"


def test_a_short_max_min_runtime_alone_shortens_the_default_checkpoint_wait(
        tmp_path: Path) -> None:
    """``max_min_runtime = "2m"`` without ``checkpoint_wait``: its default is then 2 min
    (the shorter of 10 min and max_min_runtime, which it may not exceed), not a refusal of
    the 10 min nobody set; with max_min_runtime of 10 min or more it stays 10 min."""
    cfg = load_config_text(tmp_path, '[policy]\nmax_min_runtime = "2m"\n'
                                     'restart_protection = "1m"\n')
    assert (cfg.policy.max_min_runtime, cfg.policy.checkpoint_wait) == (120.0, 120.0)
    cfg = load_config_text(tmp_path, '[policy]\nmax_min_runtime = "10m"\n'
                                     'restart_protection = "1m"\n')
    assert cfg.policy.checkpoint_wait == 600.0


@pytest.mark.parametrize(("text", "line", "problem"), [
    ('max_min_runtime = "2m"\nrestart_protection = "1m"\ncheckpoint_wait = "15m"', 4,
     "policy.checkpoint_wait: 15 min is over max_min_runtime (2 min)"),
    ('max_min_runtime = "2m"', 1,
     "policy.restart_protection: 1 h is over max_min_runtime (2 min) (the default: "
     "restart_protection is not set)"),
])
def test_a_policy_value_over_max_min_runtime_is_named_as_a_key_and_as_a_default(
        tmp_path: Path, text: str, line: int, problem: str) -> None:
    """A knob over max_min_runtime is refused as ``file:line: policy.<knob>: problem`` (it
    was ``policy: <knob>``), saying when the value refused is the knob's default (then
    the line is its table's, [policy]), with both times as durations as they are typed
    (they were said in seconds: ``900 s``)."""
    with pytest.raises(ConfigError) as e:
        load_config_text(tmp_path, f"[policy]\n{text}\n")
    assert str(e.value) == f"{tmp_path / 'svc.toml'}:{line}: {problem}"


def test_missing_file(tmp_path: Path) -> None:
    """A missing file is reported by name."""
    with pytest.raises(ConfigError, match="nope.toml: cannot read"):
        load_config(tmp_path / "nope.toml")


def test_parse_config_source_name() -> None:
    """Errors from parse_config carry the given source name."""
    with pytest.raises(ConfigError, match="^inline: server.port"):
        parse_config({"server": {"port": -1}}, source="inline")


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql+psycopg://ops:s3cret@db:abc/apportion", "database.url: the port is not a number"),
    ("postgresql+psycopg://ops:s3cret@[::1/apportion", "database.url: the port is not a number; "
     "an IPv6 host goes in brackets, then the port: [::1]:5432"),
    ("mysql://ops:s3cret@db/apportion", "database.url: mysql: not supported"),
    ("not a url", "database.url: not a database URL; expected sqlite:///PATH or"),
    ("sqlite:////nonexistent/dir/x.db",
     "database.url: /nonexistent/dir: no such directory for the SQLite database"),
])
def test_a_database_url_that_cannot_work_is_refused_naming_the_key(
        tmp_path: Path, url: str, message: str) -> None:
    """A URL the server could not open is refused when the config is read, naming the file
    and database.url and never the password (serve, whatif --config and export-trace
    printed tracebacks: ValueError, NoSuchModuleError, ArgumentError, FileNotFoundError)."""
    with pytest.raises(ConfigError) as e:
        load_config_text(tmp_path, f'[database]\nurl = "{url}"\n')
    assert str(e.value).startswith(f"{tmp_path / 'svc.toml'}:2: {message}"), str(e.value)
    assert "s3cret" not in str(e.value)


@pytest.mark.parametrize("spelling", ["postgres://", "postgresql://"])
def test_postgresql_urls_get_the_psycopg_driver(tmp_path: Path, spelling: str) -> None:
    """postgres:// (the common short spelling, which SQLAlchemy does not know) and
    postgresql:// both mean PostgreSQL through psycopg 3."""
    cfg = load_config_text(tmp_path, f'[database]\nurl = "{spelling}ops@db/apportion"\n')
    assert cfg.db_url == "postgresql+psycopg://ops@db/apportion"


def test_a_config_error_names_the_line_of_its_key_as_the_file_writes_it(
        tmp_path: Path) -> None:
    """Read from a file, a problem says the line its key is written on, after the file's
    name (``svc.toml:12: hosts[1].gpus: ...``), however the key is written: in a [table],
    the second [[hosts]] table, a list spread over lines (its key's line), a quoted key in
    a dotted [table."name"], an inline table (its key's line); a key the file does not
    write is named at its table's line. Before, it said the file and the key only, and an
    operator had to find the line. The problem itself is unchanged."""
    head = ('# comment\n[server]\nport = 8642\n\n[[hosts]]\nname = "a"\ngpus = 8\n\n'
            '[[hosts]]  # the second\nname = "b"\n')
    cases = [
        (head + "gpus = 0\n", 11, "hosts[1].gpus: must be an integer >= 1, got 0"),
        (head + 'gpus = 8\n[[users]]\nname = "x"\n[[budgets]]\npath = "ai"\n'
                'members = [\n  "x",\n  "nobody",\n]\n', 16,
         "budgets[0].members[1]: unknown user 'nobody' (not in [[users]])"),
        ('billing = { H100 = 1.0, B200 = 0 }\n[server]\n', 1,
         "billing.B200: must be a number > 0, got 0"),
        ('[[hosts]]\nname = "w"\ngpus = 8\ncluster = "west"\nkind = "B200"\n'
         '[[budgets]]\npath = "r"\n[overrides."west/B200"]\n"r" = 1\n"r/x" = -1\n', 10,
         "overrides.west/B200.r/x: "),
        (head + 'gpus = 8\n[policy]\nmax_min_runtime = "2m"\n', 12,
         "policy.restart_protection: 1 h is over max_min_runtime"),
    ]
    for text, line, problem in cases:
        with pytest.raises(ConfigError) as e:
            load_config_text(tmp_path, text)
        assert str(e.value).startswith(f"{tmp_path / 'svc.toml'}:{line}: {problem}"), (
            text, str(e.value))
