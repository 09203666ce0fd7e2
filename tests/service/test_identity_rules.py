"""The rules of identity and environment without running anything: config keys, whom work
runs as, ``--export`` as the CLI reads it, and exec limits counted as the kernel does."""

from __future__ import annotations

import os
import pwd
import re

import click
import pytest

from apportion.cli.client import exported_env
from apportion.service.config import ConfigError, parse_config
from apportion.service.executors.identity import (
    Identity,
    arg_max,
    env_problem,
    exec_problem,
    max_arg_strlen,
)

ROOT = pwd.getpwuid(0).pw_name
NOBODY = pwd.getpwnam("nobody")


def test_config_reads_unix_user_single_user_and_allow_root_for() -> None:
    """``[[users]] unix_user``, ``[server] single_user`` and ``allow_root_for`` are read,
    and make the config's identity rule."""
    c = parse_config({
        "server": {"single_user": True, "allow_root_for": ["ops"]},
        "users": [{"name": "alice", "unix_user": "asmith"}, {"name": "bob"}],
    })
    assert [(u.name, u.unix_user) for u in c.users] == [("alice", "asmith"), ("bob", None)]
    assert c.identity == Identity(True, frozenset({"ops"}))
    assert parse_config({}).identity == Identity(False, frozenset())


@pytest.mark.parametrize(("data", "message"), [
    ({"users": [{"name": "a", "unix_user": "no/slash"}]},
     "users[0].unix_user: must be a Unix user name"),
    ({"users": [{"name": "a", "unix_user": "x" * 33}]},
     "users[0].unix_user: must be a Unix user name"),
    ({"users": [{"name": "a", "unix_user": 7}]}, "users[0].unix_user: must be a string"),
    ({"server": {"single_user": "yes"}}, "server.single_user: must be true or false"),
    ({"server": {"allow_root_for": "ops"}}, "server.allow_root_for: must be a list of names"),
])
def test_config_errors_name_the_key(data: dict[str, object], message: str) -> None:
    """Bad identity keys are ``file: key: problem``."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(data, source="apportion.toml")


def test_serves_start_line_as_root_says_who_may_run_as_root_without_naming_nobody() -> None:
    """As root, ``apportion serve``'s start line about accounts says that no work runs as
    root when ``allow_root_for`` is empty, and lists its users otherwise; it once said
    "(as root only for: nobody)" for the empty list, the same words as for a list naming
    the user ``nobody`` (a Unix account of most systems)."""
    def line(allowed: frozenset[str]) -> str:
        return Identity(euid=0, allow_root_for=allowed).describe()

    owner = "running as root: each workload runs as its owner's Unix account"
    assert line(frozenset()) == (
        f"{owner} (never as root: [server] allow_root_for is empty)")
    assert line(frozenset({"ops", "nobody"})) == (
        f"{owner} (as root only for the users in [server] allow_root_for: nobody, ops)")


def test_as_root_work_runs_as_the_owner_and_never_as_root_unless_allowed() -> None:
    """As root: an existing account is switched to; a missing one is refused by name; an
    account of uid 0 only for users in allow_root_for."""
    rule = Identity(euid=0, allow_root_for=frozenset({"ops"}))
    acct, problem = rule.resolve("n", "nobody")
    assert problem is None and acct is not None and acct.uid == NOBODY.pw_uid
    assert rule.problem("alice", "apportion-no-such-account") == (
        "user alice: Unix account 'apportion-no-such-account' does not exist")
    assert rule.problem("mallory", ROOT) == (
        f"user mallory: Unix account {ROOT!r} is root; work runs as root only for users "
        "in [server] allow_root_for")
    assert rule.resolve("ops", ROOT)[0] is not None


def test_not_root_runs_only_the_servers_own_users_work() -> None:
    """Not root (and not single-user): the server's own account's work runs as the server
    (nothing to switch), anyone else's is refused saying why; single-user runs all."""
    me = pwd.getpwuid(NOBODY.pw_uid).pw_name
    rule = Identity(euid=NOBODY.pw_uid)
    assert rule.resolve("n", me) == (None, None)
    problem = rule.problem("alice", ROOT)
    assert problem is not None and "not root, and runs only" in problem
    assert "not root" in rule.describe() and "single_user = true" in rule.describe()
    assert Identity(single_user=True, euid=NOBODY.pw_uid).resolve("alice", "x") == (None, None)


def test_export_reads_all_none_and_names_as_sbatch_does() -> None:
    """``ALL`` takes the shell's exportable variables (not APPORTION_*, not names a shell
    function export makes), ``NONE`` nothing, ``NAME`` one value, ``NAME=value`` sets one."""
    shell = {"HOME": "/h", "FOO": "1", "APPORTION_TOKEN": "secret", "BASH_FUNC_f%%": "() {}",
             "BAD": "\udcff"}
    assert exported_env("ALL", shell) == {"HOME": "/h", "FOO": "1"}
    assert exported_env("NONE", shell) == {}
    assert exported_env("NONE,FOO,BAR=2", shell) == {"FOO": "1", "BAR": "2"}
    assert exported_env("FOO", shell) == {"FOO": "1"}
    assert exported_env("ALL,FOO=3", shell) == {"HOME": "/h", "FOO": "3"}
    for spec, message in [("FOO,ALL", "ALL: must come first"), ("NOPE", "NOPE: not set"),
                          ("A B=1", "not a variable name"), ("", "empty")]:
        with pytest.raises(click.BadParameter, match=message):
            exported_env(spec, shell)


def test_export_of_a_variable_whose_value_is_not_utf8_is_refused_naming_it() -> None:
    """``--export NONE,BAD`` where BAD's value holds a byte that is not UTF-8 is refused
    naming the variable (it was a UnicodeEncodeError traceback when sent)."""
    with pytest.raises(click.BadParameter, match="BAD: its value is not UTF-8 text"):
        exported_env("NONE,BAD", {"BAD": "caf\udce9"})


def test_exec_limits_are_counted_as_the_kernel_counts() -> None:
    """One string may have MAX_ARG_STRLEN bytes with its NUL, not one more; the total is
    strings with NULs plus a pointer each, against ARG_MAX."""
    per = max_arg_strlen()
    assert per == 32 * os.sysconf("SC_PAGE_SIZE")
    assert exec_problem(["x" * (per - 1)], {}, reserve=0) is None
    assert exec_problem(["x" * per], {}, reserve=0) == (
        f"command.0: {per + 1} bytes, over the kernel's limit of {per} bytes per argument "
        "(MAX_ARG_STRLEN)")
    n = arg_max() // (1000 + 8)  # strings of 999 characters + NUL, + pointer
    assert exec_problem(["y" * 999] * n, {}, reserve=0) is None
    assert exec_problem(["y" * 999] * (n + 1), {}, reserve=0) is not None
    assert env_problem({"OK_1": "é"}) is None
    assert env_problem({"1BAD": "x"}) == "env: '1BAD': not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
