"""Real Unix accounts for the isolation tests: created as root, removed afterwards.

``unix_accounts()`` makes ``<prefix>-alice`` and ``<prefix>-bob`` (``useradd -M -s /bin/sh``,
no home directory) sharing the supplementary group ``<prefix>-shared``, and deletes them
(and the group) when the block ends. Accounts left by an earlier run that was killed are
removed first. Without root it raises: the tests that need it fail, they never skip.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from apportion.service.executors.identity import Account, lookup

__all__ = ["UnixAccounts", "open_dir", "unix_accounts"]


@dataclass(frozen=True, slots=True)
class UnixAccounts:
    alice: Account
    bob: Account
    group: str  # the supplementary group both are in
    gid: int


def _exists_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _exists_group(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _remove(users: list[str], group: str) -> None:
    for u in users:
        if _exists_user(u):
            subprocess.run(["userdel", u], check=True, capture_output=True)
    if _exists_group(group):
        subprocess.run(["groupdel", group], check=True, capture_output=True)


@contextmanager
def unix_accounts(prefix: str = "apportion") -> Iterator[UnixAccounts]:
    """Two fresh accounts and their shared group, for the duration of the block."""
    import os

    if os.geteuid() != 0:
        raise RuntimeError("unix_accounts: creating Unix accounts needs root "
                           "(CI runs these tests as root)")
    users = [f"{prefix}-alice", f"{prefix}-bob"]
    group = f"{prefix}-shared"
    _remove(users, group)
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        for u in users:
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", "-G", group, u], check=True,
                           capture_output=True)
        alice, bob = lookup(users[0]), lookup(users[1])
        assert alice is not None and bob is not None
        yield UnixAccounts(alice, bob, group, grp.getgrnam(group).gr_gid)
    finally:
        _remove(users, group)


@contextmanager
def open_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory under /tmp that every account may enter (pytest's own temporary
    directories are root's only), removed when the block ends."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
