"""First start: fill an empty database from the config, and hand out tokens."""

from __future__ import annotations

import os
from pathlib import Path

from apportion.core import parent_of
from apportion.core.names import did_you_mean

from ..auth import hash_token, new_token
from ..config import ConfigError, ServiceConfig
from .store import Store

SEED_ACTOR = "config"


def write_token(tokens_dir: Path, user: str, token: str) -> Path:
    """Write ``token`` to ``tokens_dir/user`` readable by the server's owner only (0600)."""
    tokens_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tokens_dir, 0o700)
    path = tokens_dir / user
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def seed_store(store: Store, config: ServiceConfig, write_tokens: bool = True) -> dict[str, str]:
    """If the store is empty, create the configured users (one token each, written to
    ``<data_dir>/tokens/<user>`` when ``write_tokens``), budgets and hosts, all audited as
    done by ``config`` (the tokens too, as ``token.create``). Returns the new tokens by
    user; ``{}`` if the store was not empty."""
    if not store.is_empty():
        return {}
    tokens: dict[str, str] = {}
    for u in config.users:
        store.add_user(u.name, actor=SEED_ACTOR, admin=u.admin, unix_user=u.unix_user)
        token = new_token()
        row = store.add_token(u.name, hash_token(token))
        store.append_audit(SEED_ACTOR, "token.create", u.name, None,
                           {"token": row.id, "kind": row.kind, "label": row.label})
        tokens[u.name] = token
        if write_tokens:
            write_token(config.tokens_dir, u.name, token)
    explicit = {b.path for b in config.budgets}
    for b in sorted(config.budgets, key=lambda b: b.path.count("/")):
        # a listed parent comes first (sorted by depth); unlisted ones get weight 1
        store.add_budget(b.path, b.weight, actor=SEED_ACTOR, managers=b.managers,
                         members=b.members, create_parents=parent_of(b.path) not in explicit)
    for h in config.hosts:
        store.add_host(h.name, h.gpus, actor=SEED_ACTOR, cluster=h.cluster, kind=h.kind)
    return tokens


def check_overrides(store: Store, config: ServiceConfig) -> None:
    """Per-pool weights (``overrides``) name budgets that exist: the database's, or before
    the first start (an empty database) those the config's ``[[budgets]]`` seed; a
    mistyped path would silently fund nothing. No budget at all: not checked (the
    scheduler logs an unknown one, leaving it out). Raises ConfigError naming the key."""
    first = store.is_empty()
    known = {"/".join(b.path.split("/")[:n]) for b in config.budgets
             for n in range(1, b.path.count("/") + 2)} if first else {
        b.path for b in store.budgets()}
    for pool, weights in config.pools.overrides.items():
        for path in weights:
            if known and path not in known:
                where = (f"the config's: {', '.join(sorted(known))}" if first
                         else "not in the database" + did_you_mean(path, known))
                raise ConfigError(f"{config.source}: overrides.{pool}.{path}: unknown budget "
                                  f"({where})")


def ignored_seed(store: Store, config: ServiceConfig) -> list[str]:
    """Where the config's ``[[users]]`` and ``[[budgets]]`` differ from the database they
    no longer seed (a user or budget it lacks or has otherwise), one short phrase each: a
    config edited after the first start is not applied, and the start says so."""
    users = {u.name: u for u in store.users()}
    out: list[str] = []
    for cu in config.users:
        u = users.get(cu.name)
        if u is None:
            out.append(f"user {cu.name}: not in the database")
            continue
        if cu.admin != u.admin:
            out.append(f"user {cu.name}: admin {_yes(cu.admin)}, the database's {_yes(u.admin)}")
        if (cu.unix_user or cu.name) != u.account:
            out.append(f"user {cu.name}: unix_user {cu.unix_user or cu.name}, the "
                       f"database's {u.account}")
    budgets = {b.path: b for b in store.budgets()}
    for cb in config.budgets:
        b = budgets.get(cb.path)
        if b is None:
            out.append(f"budget {cb.path}: not in the database")
            continue
        if cb.weight != b.weight:
            out.append(f"budget {cb.path}: weight {cb.weight:g}, the database's {b.weight:g}")
        for field, want, have in (("managers", cb.managers, b.managers),
                                  ("members", cb.members, b.members)):
            if sorted(want) != sorted(have):
                out.append(f"budget {cb.path}: {field} {_names(want)}, the database's "
                           f"{_names(have)}")
    return out


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _names(names: tuple[str, ...]) -> str:
    return ",".join(sorted(names)) or "none"
