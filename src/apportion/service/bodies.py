"""The API's request bodies: strict pydantic models, every field typed and bounded
(:mod:`apportion.service.validation` holds the limits and the checks). A string is not a
number, 1 or "yes" is not a boolean, true is not an integer, and an unknown field is an
error (422 naming it)."""

# No "from __future__ import annotations": pydantic and FastAPI read these at runtime.
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from . import validation as v


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Text = Annotated[str, AfterValidator(v.check_text)]
BudgetPath = Annotated[
    str, Field(max_length=v.MAX_PATH, description="segments of [A-Za-z0-9_.-] joined by /"),
    AfterValidator(v.check_budget_path),
]
UserName = Annotated[
    str, Field(max_length=32, pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
               description="like a Unix account name"),
    AfterValidator(v.check_user_name),
]
People = Annotated[list[UserName], Field(max_length=v.MAX_PEOPLE)]
# a Unix account: useradd's default NAME_REGEX, with capitals and a machine account's "$"
UnixUser = Annotated[str, Field(max_length=32, pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,30}[$]?$")]
WorkloadId = Annotated[str, Field(max_length=32, description="w-000123"),
                      AfterValidator(v.check_workload_id)]
HostName = Annotated[Text, Field(min_length=1, max_length=v.MAX_QUERY)]
HostNames = Annotated[list[HostName], Field(max_length=v.MAX_PEOPLE)]
Weight = Annotated[float, Field(ge=v.MIN_WEIGHT, le=v.MAX_WEIGHT, allow_inf_nan=False,
                                description="relative to its siblings")]
GpuKinds = Annotated[list[Annotated[Text, Field(min_length=1, max_length=64)]],
                     Field(max_length=v.MAX_PEOPLE)]
Duration = Annotated[
    Annotated[float, Field(ge=0, allow_inf_nan=False)]
    | Annotated[str, Field(min_length=1, max_length=v.MAX_DURATION_TEXT)],
    BeforeValidator(v.check_duration),
]


class SubmitBody(_Body):
    budget: BudgetPath = Field(description="leaf budget path, e.g. ai/llm/alice")
    gpus: int = Field(gt=0, le=v.MAX_GPUS, description="GPUs, gang-scheduled")
    min_runtime: Duration = Field(
        description='seconds or a duration like "30m"; 0 = unallocated'
    )
    resumable: bool = False
    priority: int = Field(0, ge=v.PRIORITY_MIN, le=v.PRIORITY_MAX,
                          description="order within the budget only")
    checkpoint_interval: Duration = Field(0.0, description='seconds or "30m"; 0 = unknown')
    checkpoint_on_term: bool = Field(
        False, description="writes a checkpoint when told to stop (SIGTERM), within the grace"
    )
    command: Annotated[
        list[str], Field(min_length=1, max_length=v.MAX_ARGS),
        AfterValidator(v.check_command),
    ] = Field(description="argv of the command to run")
    name: str | None = Field(
        None, max_length=128, pattern=r"^[A-Za-z0-9._+-]+$",
        description="a name to know it by: letters, digits and . _ + - only",
    )
    time_limit: Duration | None = Field(
        None, description='wall-time limit, seconds or "2h"; default: the policy\'s'
    )
    array: str | None = Field(
        None, min_length=1, max_length=v.MAX_QUERY,
        description='"0-99", "1,3,5-7", "0-99%10" (at most 10 at once): one per index',
    )
    dependency: str | None = Field(
        None, max_length=v.MAX_TEXT,
        description='"afterok:w-000003[:w-000004]", also afterany, afternotok',
    )
    # what a launch could not use (a relative directory, a bad variable, E2BIG) is refused
    # at submit by the executors' own rules (_run_problem, executors/identity.py)
    chdir: Annotated[str, Field(max_length=v.MAX_PATH_BYTES)] | None = Field(
        None, description="absolute working directory (default: the account's home)"
    )
    env: Annotated[dict[str, str], Field(max_length=v.MAX_ARGS)] | None = Field(
        None, description="the exported environment (default: none, the account's basics)"
    )
    nodelist: HostNames = Field([], description="run only on these hosts")
    exclude: HostNames = Field([], description="never run on these hosts")
    gpu_kind: GpuKinds | Annotated[Text, Field(max_length=v.MAX_QUERY)] | None = Field(
        None, description='GPU kinds it accepts, in order of preference (["H100", "B200"] '
                          'or "H100,B200"); absent: any'
    )
    cluster: Annotated[Text, Field(max_length=v.MAX_QUERY)] | None = Field(
        None, description="the cluster it must run in; absent: any"
    )

    def kinds(self) -> tuple[str, ...]:
        """The accepted kinds as a list, whichever way they were sent."""
        given = self.gpu_kind.split(",") if isinstance(self.gpu_kind, str) else self.gpu_kind
        return tuple(dict.fromkeys(k.strip() for k in given or () if k.strip()))


class CancelBody(_Body):
    """Workloads to cancel: ``ids``, or every active one a filter matches (``user``,
    ``budget``, ``array``, narrowed by ``status``); the route refuses both, or neither."""

    ids: Annotated[list[WorkloadId],
                   Field(min_length=1, max_length=v.MAX_CANCEL_IDS)] | None = Field(
        None, description=f"these workloads (at most {v.MAX_CANCEL_IDS:,})")
    # any text: one that names no user is refused with the closest names, as the queue's
    user: Annotated[Text, Field(min_length=1, max_length=v.MAX_QUERY)] | None = Field(
        None, description="every active workload of this user")
    budget: BudgetPath | None = Field(
        None, description="every active workload in this node's subtree")
    array: WorkloadId | None = Field(
        None, description="every active element of this array (its first element's id)")
    status: Annotated[list[Literal["pending", "running", "stopping"]],
                      Field(min_length=1, max_length=3)] | None = Field(
        None, description="with a filter: only work in these states (default: all three)")


class WeightBody(_Body):
    weight: Weight


class CreateBudgetBody(_Body):
    path: BudgetPath
    weight: Weight = 1.0
    managers: People = []
    members: People = []


class MembersBody(_Body):
    members: People


class ManagersBody(_Body):
    managers: People


class HostBody(_Body):
    reason: Annotated[Text, Field(max_length=v.MAX_TEXT)] = ""


class UserBody(_Body):
    name: UserName
    admin: bool = False
    unix_user: UnixUser | None = Field(
        None, description="the Unix account its work runs as (default: the same name)")


class UserChangeBody(_Body):
    admin: bool | None = None
    unix_user: UnixUser | Literal[""] | None = Field(
        None, description='the Unix account; "" for the account of the same name')


class TokenBody(_Body):
    kind: Literal["user", "scrape"] = Field(
        default="user", description="user: acts as the user; scrape: may only read")
    label: Annotated[Text, Field(max_length=255)] = ""


class WhatifBody(_Body):
    since: Duration = Field(description='length of the period: seconds or "14d"')
    until: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None, description="end of the period, seconds since the epoch (default: now)")
    set_weight: Annotated[dict[BudgetPath, Weight], Field(max_length=v.MAX_PEOPLE)] = Field(
        default_factory=dict, description="proposed weight per budget path")
    set: Annotated[
        dict[Annotated[str, Field(max_length=v.MAX_QUERY)],
             Annotated[float, Field(allow_inf_nan=False)] | bool
             | Annotated[str, Field(max_length=v.MAX_DURATION_TEXT)] | None],
        Field(max_length=v.MAX_PEOPLE),
    ] = Field(default_factory=dict,
              description='proposed PolicyConfig or engine settings; durations as seconds '
                          'or "3d"')
