"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
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
