"""``apportion init [DIR]``: write a commented example config to start from."""

from __future__ import annotations

import getpass
import os
import pwd
from pathlib import Path

import click

from apportion.service.executors.identity import Identity
from apportion.service.validation import check_user_name

CONFIG_NAME = "apportion.toml"

EXAMPLE = '''\
# apportion service configuration (docs/service.md lists every key).
# Budgets, users and hosts below seed an EMPTY database on the first start only; after
# that the database is the source of truth: change them with `apportion budgets ...`,
# `apportion hosts ...` (and the API), not here.

[server]
host = "127.0.0.1"          # listen address; put a proxy with TLS in front for remote users
port = 8642
data_dir = "apportion-data" # relative to this file: database, tokens, logs
# Run as root, each workload runs as its owner's Unix account, never as root unless its
# owner is listed here (see docs/security.md); not as root, set single_user = true to run
# everyone's work as the server's own user.
allow_root_for = {allow_root}

[database]
url = ""                    # empty: SQLite in data_dir; or postgresql+psycopg://user@host/db
# A password here is read by whoever can read this file: keep it 0600 (as written), or put
# the password in the server's ~/.pgpass or PGPASSWORD instead.

[executor]
kind = "local"              # local (processes on this machine), slurm, or memory (a dry run)
grace_s = 30                # seconds between SIGTERM and SIGKILL when work is stopped

[scheduler]
interval_s = 5              # a pass at least this often (and after every submission)

[policy]
lookback = "7d"             # usage ratios are measured over this sliding window
max_min_runtime = "8h"      # the longest protection a workload may ask for

# The machines work runs on (kind = "local" or "memory"; Slurm brings its own nodes).
[[hosts]]
name = "gpu01"
gpus = 8

[[hosts]]
name = "gpu02"
gpus = 8

# The budget tree: weights are relative among siblings. Here "research" gets 3/4 of the
# cluster, split 2:1 between llm and vision, and "ops" 1/4. Work is submitted to leaves.
[[budgets]]
path = "research"
weight = 3
managers = ["{admin}"]      # may change weights and people in this subtree

[[budgets]]
path = "research/llm"
weight = 2
members = ["{admin}"]       # may submit to this budget

[[budgets]]
path = "research/vision"
weight = 1
members = ["{admin}"]

[[budgets]]
path = "ops"
weight = 1
members = ["{admin}"]

# People. Each gets a token in data_dir/tokens/<name> on the first start.
[[users]]
name = "{admin}"
admin = true                # may create users and budgets anywhere, drain hosts
'''


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--admin", default=None,
              help="the admin user's name (default: your login name), like a Unix account's: "
                   "lower-case letters, digits, '_' and '-'")
@click.option("--force", is_flag=True, help="overwrite an existing apportion.toml")
def init(directory: Path, admin: str | None, force: bool) -> None:
    """Write a commented example config (two hosts, a small budget tree, one admin) to
    DIRECTORY/apportion.toml (mode 0600: it may come to hold the database's password), and
    print the next three commands."""
    name = getpass.getuser() if admin is None else admin  # --admin "" is refused below
    try:  # the config loader's rule: serve would refuse the config
        check_user_name(name)
    except ValueError as e:
        if admin is not None:
            raise click.BadParameter(str(e), param_hint="'--admin'") from None
        raise click.UsageError(f"the admin would be named after your login name, and {e}: "
                               "name the admin with --admin NAME") from None
    path = directory / CONFIG_NAME
    if path.exists() and not force:
        raise click.ClickException(f"{path}: already exists (--force to overwrite)")
    directory.mkdir(parents=True, exist_ok=True)
    # an admin whose account is root (trying it out as root) may run work as root, so the
    # commands printed below work as they are
    allow_root = f'["{name}"]' if _is_root_account(name) else "[]"
    # the server's alone from the start: database.url may come to hold a password
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # one overwritten (--force) keeps no wider mode
    with open(fd, "w", encoding="utf-8") as f:
        f.write(EXAMPLE.replace("{admin}", name).replace("{allow_root}", allow_root))
    data = directory / "apportion-data"
    click.echo(f"wrote {path}: edit hosts, budgets and users, then:\n")
    click.echo(f"  apportion serve --config {path}")
    click.echo(f"  export APPORTION_URL=http://127.0.0.1:8642 "
               f"APPORTION_TOKEN=$(cat {data / 'tokens' / name})")
    click.echo("  apportion submit --budget research/llm --gpus 1 --min-runtime 30m -- "
               "nvidia-smi")
    # the check every submission makes, run now: the last command above would be refused
    rule = Identity(allow_root_for=frozenset({name}) if allow_root != "[]" else frozenset())
    problem = rule.problem(name, name)
    if problem is not None:
        click.echo(f"\nnote: {problem}, so the local executor would refuse {name}'s work "
                   f"(served by {rule.me}): make the account, give {name} an existing one "
                   "(unix_user), or set [server] single_user = true", err=True)


def _is_root_account(name: str) -> bool:
    try:
        return pwd.getpwnam(name).pw_uid == 0
    except KeyError:
        return False
