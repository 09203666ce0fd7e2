"""Bearer tokens and who may change what.

Tokens are random (``secrets.token_urlsafe``); the store keeps only their sha256 hex
digest, so a leaked database does not leak working tokens.

Rights follow the budget tree (see docs/service.md, "Roles and rights"):

* an **admin** may do everything, and is the only one who may drain or repair hosts,
  create users and tokens, or change top-level weights;
* a **manager** of node N (listed in N's ``managers``) acts on N's subtree: create children
  of N or of any node below it, change the weight of any node strictly below N, change the
  members and managers of N and of any node below it, and cancel any workload of a leaf in
  the subtree. N's *own* weight is not theirs: it is a share of N's parent, set by the
  parent's manager;
* a **member** listed on a leaf or on any of its ancestors (and a manager of any of them)
  may submit to that leaf, and cancel their own workloads.

Reading (queue, budgets, hosts, audit) needs any valid token. **Private data** (like
Slurm's PrivateData): every reader sees every workload's budget, owner, state, size and
wait reason, but its command, environment and directory, and its logs, only its owner,
a manager of its budget (the leaf or an ancestor) and admins.

Tokens are of a **kind**: ``user`` acts with its user's rights; ``scrape`` (for Prometheus
and wall displays) may only read, and never sees private data.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from apportion.core import ancestors, parent_of

from .store import BudgetRow, UserRow, WorkloadRow

PRIVATE_FIELDS = ("command", "env", "chdir")
# an end reason that starts so goes on with the executor's words, which name the command or
# the directory it could not use: private as they are
LAUNCH_REFUSED = "launch refused"


def new_token() -> str:
    """A fresh random bearer token (43 URL-safe characters)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The digest stored for ``token``."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: a user, and the kind of token it showed."""

    user: UserRow
    kind: str = "user"

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def read_only(self) -> bool:
        return self.kind != "user"

    def may_see_private(self, rights: Rights, owner: str, budget: str) -> bool:
        """Command, environment, directory and logs of ``owner``'s workload in ``budget``."""
        return not self.read_only and (owner == self.user.name or rights.manages(budget))


def redact(workload: dict[str, Any]) -> dict[str, Any]:
    """A workload as others see it (of :func:`as_others_see`'s row): private fields None,
    and ``private: true``."""
    return {**workload, **dict.fromkeys(PRIVATE_FIELDS), "private": True}


def public_reason(reason: str | None) -> str | None:
    """An end reason as those who may not see the workload's private fields read it: a
    refused launch's says only that it was refused."""
    if reason is not None and reason.startswith(LAUNCH_REFUSED):
        return f"{LAUNCH_REFUSED} (why is private to its owner)"
    return reason


def as_others_see(row: WorkloadRow) -> WorkloadRow:
    """``row`` with the end reasons (its own and its attempts') as :func:`public_reason`
    gives them: what a reply or a ``why`` to someone who may not see its private fields
    is made from."""
    return replace(
        row, end_reason=public_reason(row.end_reason),
        attempts=tuple(replace(a, end_reason=public_reason(a.end_reason))
                       for a in row.attempts))


@dataclass(frozen=True, slots=True)
class Rights:
    """What one user may do, given the budget rows at the time of the request."""

    user: UserRow
    managers: dict[str, frozenset[str]]
    members: dict[str, frozenset[str]]

    @classmethod
    def of(cls, user: UserRow, budgets: Iterable[BudgetRow]) -> Rights:
        rows = list(budgets)
        return cls(
            user,
            {b.path: frozenset(b.managers) for b in rows},
            {b.path: frozenset(b.members) for b in rows},
        )

    @property
    def admin(self) -> bool:
        return self.user.admin

    def manages(self, path: str) -> bool:
        """Admin, or a manager of ``path`` or of one of its ancestors."""
        if self.admin:
            return True
        name = self.user.name
        return any(name in self.managers.get(p, ()) for p in ancestors(path)[:-1])

    def can_submit(self, leaf: str) -> bool:
        name = self.user.name
        return self.manages(leaf) or any(
            name in self.members.get(p, ()) for p in ancestors(leaf)[:-1]
        )

    def can_cancel(self, owner: str, budget: str) -> bool:
        return owner == self.user.name or self.manages(budget)

    def can_set_weight(self, path: str) -> bool:
        parent = parent_of(path)
        return self.admin or (bool(parent) and self.manages(parent))


    def can_set_people(self, path: str) -> bool:
        """Members and managers of ``path``."""
        return self.manages(path)

    def can_create(self, path: str) -> bool:
        parent = parent_of(path)
        return self.admin or (bool(parent) and self.manages(parent))

    def can_change_hosts(self) -> bool:
        return self.admin

    def can_manage_users(self) -> bool:
        return self.admin


def weight_owner(path: str) -> str:
    """Whose ``path``'s weight is, for a refusal to set it (``PATCH /v1/budgets/{path}``)
    or to propose it (``POST /v1/whatif``): the rule of ``Rights.can_set_weight`` in
    words."""
    parent = parent_of(path)
    return (f"its share of {parent}'s, set by a manager of {parent} or above, or an admin"
            if parent else "its share of the cluster, set by an admin")
