"""Which submitted workloads may join the queue: dependencies and array throttles.

A workload can be *held* before the policy ever ranks it: it waits for other workloads to
end (``--dependency afterok:w-000003``), or it is an element of an array whose throttle
(``--array 0-99%10``) is reached. Held work is kept out of the
:class:`~apportion.core.ClusterState` by the drivers: :func:`release` tells them, from the
statuses of the workloads named, which held workloads join the queue now and which can
never run (their dependency can no longer be met). ``decide`` never sees held work, so it
ranks, places and charges exactly as before.

The throttle counts an array's *released* elements that have not ended (queued, running or
requeued): at most ``throttle`` of them, so never more than ``throttle`` run at once.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .lifecycle import FINAL, Status
from .types import CoreError


class After(enum.Enum):
    """When a dependency is met, as Slurm's ``--dependency`` types."""

    OK = "afterok"  # the workload completed (exit 0)
    ANY = "afterany"  # the workload ended, however
    NOTOK = "afternotok"  # the workload ended and did not complete


@dataclass(frozen=True, slots=True)
class Hold:
    """What keeps one submitted workload out of the queue. ``array`` is the id of its array
    (None: not in one), ``index`` its index there, ``throttle`` how many of the array's
    elements may be released and unfinished at once (0: no limit); ``after`` the
    dependencies, every one of which must be met."""

    workload: str
    after: tuple[tuple[After, str], ...] = ()
    array: str | None = None
    index: int = 0
    throttle: int = 0

    def __post_init__(self) -> None:
        if self.throttle < 0:
            raise CoreError(f"workload {self.workload}: array throttle: must be >= 0")


def parse_dependency(text: str) -> tuple[tuple[After, str], ...]:
    """``afterok:ID[:ID...][,afterany:ID...]`` -> ((kind, id), ...). Ids are kept as given
    (the caller resolves short forms). :class:`CoreError` says which part is wrong."""
    out: list[tuple[After, str]] = []
    for part in (p.strip() for p in text.split(",")):
        kind, _, ids = part.partition(":")
        try:
            after = After(kind.strip().lower())
        except ValueError:
            valid = ", ".join(a.value for a in After)
            raise CoreError(
                f"dependency: {part!r}: type must be one of {valid} (as in afterok:ID)"
            ) from None
        names = [i.strip() for i in ids.split(":") if i.strip()]
        if not names:
            raise CoreError(f"dependency: {part!r}: names no workload (as in {kind}:ID)")
        out += [(after, name) for name in names]
    return tuple(out)


MAX_ARRAY = 10_000  # elements of one array
MAX_ARRAY_INDEX = 2**31 - 1  # a 32-bit column
_DIGITS = re.compile(r"[0-9]+")  # an index or a throttle, as typed


def _whole(digits: str) -> int:
    """The number ``digits`` (ASCII) writes; past 12 digits, over every bound here without
    reading it (int() refuses texts of more than 4,300 digits)."""
    return int(digits) if len(digits) <= 12 else 10**12


def parse_array(text: str) -> tuple[tuple[int, ...], int]:
    """``0-99``, ``1,3,5-7``, ``0-15%4``, ``0-15:4`` (a range's every 4th index, as
    Slurm's step) -> (indexes ascending, throttle; 0 = none). At
    most ``MAX_ARRAY`` indexes, each at most ``MAX_ARRAY_INDEX``: checked before a range
    is expanded, so a huge range costs nothing."""
    spec, _, limit = text.strip().partition("%")
    limit = limit.strip()
    throttle = 0
    if limit:
        # ASCII digits only: str.isdigit() also passes '²', which int() refuses
        throttle = _whole(limit) if _DIGITS.fullmatch(limit) else 0
        if not 1 <= throttle <= MAX_ARRAY:
            raise CoreError(f"array: {text!r}: the throttle after % must be a whole number "
                            f"from 1 to {MAX_ARRAY}")
    indexes: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        # the whole value, then the part refused in it, unless the part is all of it
        where = "array: " if part == text.strip() else f"array: {text!r}: "
        span, colon, by = part.partition(":")
        lo, dash, hi = span.partition("-")
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)) or (
                colon and not (dash and _DIGITS.fullmatch(by))):
            raise CoreError(f"{where}{part!r} is not an index or a range like 0-99 "
                            "(or 0-99:2, every 2nd)")
        step = _whole(by) if colon else 1
        if step < 1:
            raise CoreError(f"{where}the step after : in {part!r} must be at least 1")
        first, last = _whole(lo), _whole(hi) if dash else _whole(lo)
        if last < first:
            raise CoreError(f"{where}range {part!r} ends before it starts")
        if last > MAX_ARRAY_INDEX:
            raise CoreError(f"{where}index {hi if dash else lo} is over "
                            f"{MAX_ARRAY_INDEX}")
        if (last - first) // step + 1 > MAX_ARRAY:
            raise CoreError(f"array: {(last - first) // step + 1} elements, at most "
                            f"{MAX_ARRAY}")
        indexes.update(range(first, last + 1, step))
        if len(indexes) > MAX_ARRAY:  # so far, which bounds what is built
            raise CoreError(f"array: more than {MAX_ARRAY} elements, at most {MAX_ARRAY}")
    return tuple(sorted(indexes)), throttle


def allowed_hosts(
    hosts: Iterable[str], nodelist: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[str, ...]:
    """The hosts a workload may use (``WorkloadSpec.hosts``) from ``--nodelist`` (only
    these) and ``--exclude`` (not these), among ``hosts``; ``()`` when neither is given (any
    host). :class:`CoreError` if they leave none."""
    if not nodelist and not exclude:
        return ()
    pool = set(nodelist) if nodelist else set(hosts)
    left = tuple(sorted(pool - set(exclude)))
    if not left:
        raise CoreError("hosts: --nodelist and --exclude leave no host to run on")
    return left


def dependency_state(
    hold: Hold, status_of: Callable[[str], Status | None]
) -> tuple[bool, str | None]:
    """(met, never): ``met`` when every dependency is met; ``never`` is the reason one can
    no longer be (then the workload must end), e.g. ``dependency w-000003 failed (afterok)``."""
    met = True
    for after, dep in hold.after:
        status = status_of(dep)
        if status is None:
            return False, f"dependency {dep} does not exist ({after.value})"
        if status not in FINAL:
            met = False
            continue
        completed = status is Status.COMPLETED
        if after is After.OK and not completed:
            return False, f"dependency {dep} {status.value} ({after.value})"
        if after is After.NOTOK and completed:
            return False, f"dependency {dep} completed ({after.value})"
    return met, None


def release(
    held: Iterable[Hold],
    status_of: Callable[[str], Status | None],
    active: Mapping[str, int],
) -> tuple[list[str], list[tuple[str, str]]]:
    """Which held workloads join the queue now, and which end (with the reason).

    ``status_of`` gives any workload's status (None: unknown); ``active`` the released,
    unfinished elements of each array. Array elements are released in index order."""
    ready: list[str] = []
    ended: list[tuple[str, str]] = []
    room = dict(active)
    ordered: Sequence[Hold] = sorted(
        held, key=lambda h: (h.array or "", h.index, h.workload)
    )
    for h in ordered:
        met, never = dependency_state(h, status_of)
        if never is not None:
            ended.append((h.workload, never))
            continue
        if not met:
            continue
        if h.array is not None and h.throttle:
            if room.get(h.array, 0) >= h.throttle:
                continue
            room[h.array] = room.get(h.array, 0) + 1
        ready.append(h.workload)
    return ready, ended


__all__ = [
    "After", "Hold", "allowed_hosts", "dependency_state", "parse_array", "parse_dependency",
    "release",
]
