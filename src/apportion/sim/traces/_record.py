"""One imported row, in canonical terms, before defaults and budgets are applied."""

from __future__ import annotations

from dataclasses import dataclass, field

from apportion.text import as_written

from ..model import LegacyPriority
from ._errors import Bad, TraceError
from ._parse import parse_int

#: The canonical trace columns, in the order :func:`write_canonical` writes them.
CANONICAL_COLUMNS: tuple[str, ...] = (
    "id",
    "submit_time",
    "budget",
    "user",
    "gpus",
    "duration",
    "min_runtime",
    "resumable",
    "priority",
    "preemptible",
    "checkpoint_interval",
)
REQUIRED_COLUMNS: tuple[str, ...] = ("submit_time", "gpus", "duration")
#: Written only when needed to round-trip jobs built by scenario code or a service's history
#: (see docs/traces.md): ``gpu_kinds`` (the kinds a workload accepts, comma-separated; empty:
#: any), ``cluster`` (the cluster it must run in; empty: any), ``checkpoint_on_term``
#: (default false), ``time_limit`` (a run's wall-time limit; empty or 0: none) and
#: ``patience`` (how long its owner waits for a start; empty: forever).
EXTRA_COLUMNS: tuple[str, ...] = (
    "legacy_priority", "squat", "gpu_kinds", "cluster", "checkpoint_on_term", "time_limit",
    "patience",
)


@dataclass(slots=True)
class Record:
    """A row that will become a job. ``None`` means the trace did not say (a default applies).

    ``submit`` is raw seconds, or seconds since the Unix epoch when ``absolute``."""

    line: int
    submit: float
    absolute: bool
    gpus: int
    duration: float
    id: str | None = None
    budget: str | None = None
    user: str = ""
    min_runtime: float | None = None
    resumable: bool | None = None
    priority: int | None = None
    legacy_priority: LegacyPriority | None = None
    preemptible: bool | None = None
    checkpoint_interval: float | None = None
    squat: bool | None = None
    checkpoint_on_term: bool | None = None
    time_limit: float | None = None
    patience: float | None = None
    keys: dict[str, str] = field(default_factory=dict)  # other columns, for budget synthesis
    # sacct only: the hosts it ran on (NodeList) and its start (seconds since the epoch),
    # from which the cluster can be derived when none is given
    nodes: tuple[str, ...] = ()
    start: float | None = None
    # the GPU kinds it accepts and the cluster it must run in, which a run with pools (a
    # --cluster file with kinds) reads: sacct's typed AllocTRES (gres/gpu:h100=8) and
    # Partition, or a column trace's gpu_kinds and cluster
    gpu_kinds: tuple[str, ...] = ()
    cluster: str = ""


class TimeKind:
    """Guards that one file uses one form of submit time (all seconds or all ISO 8601)."""

    __slots__ = ("absolute", "line", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.absolute: bool | None = None
        self.line = 0

    def check(self, absolute: bool, line: int, column: str) -> None:
        if self.absolute is None:
            self.absolute, self.line = absolute, line
        elif absolute != self.absolute:
            this, that = ("an ISO 8601 time", "seconds") if absolute else (
                "seconds", "ISO 8601 times"
            )
            raise TraceError(
                f"{self.path}:{line}: {column}: {this}, but line {self.line} gives {that}; "
                "use one form for the whole file"
            )


def legacy_from_priority(priority: int) -> LegacyPriority:
    """The old scheduler's level for a numeric priority: 0 is NORMAL, 1 HIGH, 2 URGENT,
    -1 LOW (clamped beyond)."""
    return _LEVELS[min(max(priority + 1, 0), len(_LEVELS) - 1)]


_LEVELS = tuple(sorted(LegacyPriority))


def parse_priority(value: object) -> tuple[int, LegacyPriority]:
    """``(priority, legacy level)`` from a number or a level name (low/normal/high/urgent).

    A name sets the legacy level and the within-budget priority ``level - 1`` (normal = 0,
    the default); a number sets the priority and the legacy level by
    :func:`legacy_from_priority`."""
    try:
        p = parse_int(value)
    except Bad:
        name = value.strip().upper() if isinstance(value, str) else ""  # a level's name
        if name not in LegacyPriority.__members__:
            raise Bad(
                f"not a priority: {as_written(value)} (use a whole number or "
                "low/normal/high/urgent)"
            ) from None
        level = LegacyPriority[name]
        return int(level) - 1, level
    return p, legacy_from_priority(p)


def parse_level(value: object) -> LegacyPriority:
    """A legacy level by name or number (0-3)."""
    name = value.strip().upper() if isinstance(value, str) else ""
    if name in LegacyPriority.__members__:
        return LegacyPriority[name]
    try:
        return LegacyPriority(parse_int(value))
    except (Bad, ValueError):
        raise Bad(f"not a legacy priority: {as_written(value)} (use "
                  "low/normal/high/urgent)") from None
