"""Held work stored before 0008: when it was released, as far as the store tells.

A release before 0008 released held work (dependencies, an array throttle) in memory only;
0008 left its ``released_at`` NULL, which reads as "still held": usage reports owed it
nothing, and the first pass after the upgrade released again work that was already
waiting in the queue, moving its ``queued_at`` (and its share guarantee's deadline) to
that moment. Each such row gets the ``released_at`` the release it ran under would have
given it:

* work that ran: its first attempt's start (it was released then at the latest: in the
  pass that started it, when there was room);
* pending work that never ran and that the scheduler releases now (its dependencies met,
  room under its array's throttle: ``core.gating.release``, as a pass decides it): when
  its last dependency's last attempt ended, or its ``queued_at`` (its submission: the old
  release never moved it on a release) if later or if it has no dependency that ran.
  Its ``queued_at`` stays, and with it its place in the queue and its share guarantee's
  deadline, as the old release kept them;
* anything else stays NULL: still held (a pass releases it, or ends it if a dependency can
  no longer be met), or ended without running (when it left its hold is not recorded).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import sqlalchemy as sa
from alembic import op

from apportion.core import FINAL, Status
from apportion.core.gating import After, Hold, release

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

workloads = sa.table(
    "workloads",
    sa.column("id", sa.String), sa.column("status", sa.String),
    sa.column("queued_at", sa.Double), sa.column("released_at", sa.Double),
    sa.column("attempts_count", sa.Integer), sa.column("dependencies", sa.JSON),
    sa.column("array_id", sa.String), sa.column("array_index", sa.Integer),
    sa.column("array_throttle", sa.Integer),
)
attempts = sa.table(
    "attempts", sa.column("workload_id", sa.String), sa.column("started_at", sa.Double),
    sa.column("ended_at", sa.Double),
)


def upgrade() -> None:
    conn = op.get_bind()
    w = workloads.c
    # in Python, not SQL: "no dependencies" is stored as SQL NULL, JSON null or []
    unreleased = conn.execute(sa.select(workloads).where(w.released_at.is_(None))).all()
    held = [r for r in unreleased if r.dependencies or r.array_throttle]
    if not held:
        return
    a = attempts.c
    first_start: dict[str, float] = {}
    last_end: dict[str, float | None] = {}
    for wid, start, end in conn.execute(
        sa.select(a.workload_id, sa.func.min(a.started_at), sa.func.max(a.ended_at))
        .group_by(a.workload_id)
    ).all():
        first_start[wid], last_end[wid] = start, end
    released: dict[str, float] = {r.id: first_start[r.id] for r in held if r.id in first_start}
    waiting = [r for r in held if r.id not in released and r.status == Status.PENDING.value]
    if waiting:
        statuses = {i: Status(s) for i, s in conn.execute(sa.select(w.id, w.status)).all()}
        ready, _ = release([_hold(r) for r in waiting], statuses.get,
                           _active_elements(conn, released))
        now_released = set(ready)
        for r in waiting:
            if r.id in now_released:  # when its last dependency ended, if after it was queued
                ends = [last_end.get(d) for _, d in r.dependencies or ()]
                released[r.id] = max([r.queued_at, *(e for e in ends if e is not None)])
    for wid, at in released.items():
        conn.execute(sa.update(workloads).where(w.id == wid).values(released_at=at))


def _hold(row: Any) -> Hold:
    return Hold(workload=row.id, after=tuple((After(k), d) for k, d in row.dependencies or ()),
                array=row.array_id, index=row.array_index or 0, throttle=row.array_throttle)


def _active_elements(conn: sa.Connection, released: dict[str, float]) -> Counter[str]:
    """Per array, its released elements that have not ended (what its throttle counts):
    those running or stopping, and those released before or by this migration."""
    w = workloads.c
    rows = conn.execute(
        sa.select(w.id, w.array_id, w.status, w.released_at).where(w.array_id.is_not(None))
    ).all()
    return Counter(
        r.array_id for r in rows
        if Status(r.status) not in FINAL
        and (r.status != Status.PENDING.value or r.released_at is not None or r.id in released)
    )


def downgrade() -> None:
    pass  # the values stay, as 0008's column allows
