"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.accounts import UnixAccounts


@pytest.fixture(scope="module")
def accounts() -> Iterator[UnixAccounts]:
    """The test Unix accounts (alice and bob), made for one test module and removed after
    it. Without root it raises, so the tests that need them fail, never skip."""
    from harness.accounts import unix_accounts  # only the modules that use them pay for it

    with unix_accounts() as a:
        yield a


@pytest.fixture
def shared() -> Iterator[Path]:
    """A fresh directory under /tmp that every account may enter (pytest's own temporary
    directories are root's only), removed after the test."""
    from harness.accounts import open_dir

    with open_dir("apportion-shared-") as d:
        yield d


@pytest.fixture
def alice_dir(shared: Path, accounts: UnixAccounts) -> Path:
    """A directory in ``shared`` that is alice's account's only (0700)."""
    d = shared / "alice"
    d.mkdir()
    os.chown(d, accounts.alice.uid, accounts.alice.gid)
    os.chmod(d, 0o700)
    return d
