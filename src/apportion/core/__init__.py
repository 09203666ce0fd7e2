"""The pure scheduling policy: ``decide(state, now, config) -> Decisions``.

No I/O, no clock, nothing imported from the rest of the package (a test enforces it).
Drivers (the simulator and the live service) keep a :class:`ClusterState` up to date and
apply the decisions; the policy only reads.
"""

from .config import NUMBER_KNOBS, SIZE_CLASSES, size_class
from .explain import Explanation, explain
from .gating import (
    After,
    Hold,
    allowed_hosts,
    dependency_state,
    parse_array,
    parse_dependency,
    release,
)
from .ledger import UsageLedger, usage_ratio
from .lifecycle import FINAL, HOST_TRANSITIONS, WORKLOAD_TRANSITIONS, Status, check_transition
from .policy import PolicyConfig, decide, is_debug, validate_spec
from .state import ClusterState
from .tree import ROOT, BudgetNode, BudgetTree, ancestors, parent_of
from .types import (
    CoreError,
    Decisions,
    Host,
    HostChange,
    HostState,
    Pending,
    Placement,
    Preempt,
    PreemptReason,
    Reservation,
    Running,
    Slice,
    Start,
    WaitReason,
    WorkloadSpec,
    decision_log,
)
from .units import (
    DurationError,
    format_amount,
    format_duration,
    parse_duration,
    parse_number,
    plural,
)

__all__ = [
    "FINAL",
    "HOST_TRANSITIONS",
    "ROOT",
    "SIZE_CLASSES",
    "WORKLOAD_TRANSITIONS",
    "After",
    "BudgetNode",
    "BudgetTree",
    "ClusterState",
    "CoreError",
    "Decisions",
    "DurationError",
    "NUMBER_KNOBS",
    "Explanation",
    "Host",
    "HostChange",
    "Hold",
    "HostState",
    "Pending",
    "Placement",
    "PolicyConfig",
    "Preempt",
    "PreemptReason",
    "Reservation",
    "Running",
    "Slice",
    "Start",
    "Status",
    "UsageLedger",
    "WaitReason",
    "WorkloadSpec",
    "allowed_hosts",
    "ancestors",
    "check_transition",
    "decide",
    "decision_log",
    "dependency_state",
    "explain",
    "format_amount",
    "format_duration",
    "is_debug",
    "parent_of",
    "parse_array",
    "parse_dependency",
    "parse_duration",
    "parse_number",
    "plural",
    "release",
    "size_class",
    "usage_ratio",
    "validate_spec",
]
