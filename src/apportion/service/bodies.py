"""The API's request bodies: strict pydantic models, every field typed and bounded
(:mod:`apportion.service.validation` holds the limits and the checks). A string is not a
number, 1 or "yes" is not a boolean, true is not an integer, and an unknown field is an
error (422 naming it).

A field that takes several forms (a list or a text; a number, a boolean, a text or null)
takes them through :func:`either`, and a duration (a number or a text) through
:func:`~apportion.service.validation.check_duration` first, never through a union left to
pydantic: that tries every member and reports each failure under its internal name for the
member ("gpu_kind.list[function-after[...]]: ...")."""

# No "from __future__ import annotations": pydantic and FastAPI read these at runtime.
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
)

from . import validation as v

_STRICT = ConfigDict(strict=True)


class _Body(BaseModel):
    model_config = _STRICT | ConfigDict(extra="forbid")


def either(accepted: str, *forms: Any) -> PlainValidator:
    """A value in one of ``forms``, told apart by their JSON types (an array or a string; a
    number, a boolean, a string or null) and checked as the one form of its type, so that a
    refusal is that form's ("gpu_kind: must not contain NUL characters", "gpu_kind.1: ...")
    or, for a type no form has, one message naming the forms: "gpu_kind: must be
    ``accepted``, got a number"."""
    by_type = {TypeAdapter(form).json_schema()["type"]: TypeAdapter(form, config=_STRICT)
               for form in forms}

    def check(value: object) -> object:
        for json_type in v.json_types(value):
            if json_type in by_type:
                return by_type[json_type].validate_python(value)
        raise ValueError(f"must be {accepted}, got {v.json_kind(value)}")

    # the schema of every form, as a union would have it (a tuple of forms has no "|" form)
    return PlainValidator(check, json_schema_input_type=Union[forms])  # noqa: UP007


# a bounded text: the bounds come before the check, as bounds after a validator are checked
# on its result and worded for any sequence ("Value should have at least 1 item")
HostName = Annotated[str, Field(min_length=1, max_length=v.MAX_QUERY),
                     AfterValidator(v.check_text)]
GpuKind = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(v.check_text)]
QueryText = Annotated[str, Field(max_length=v.MAX_QUERY), AfterValidator(v.check_text)]
BudgetPath = Annotated[
    str, Field(max_length=v.MAX_PATH, description="segments of [A-Za-z0-9_.-] joined by /"),
    AfterValidator(v.check_budget_path),
]
# the pattern is the schema's only: checked by check_user_name, whose refusal says the
# rule in words (pydantic's says "String should match pattern '^[a-z_]...'")
UserName = Annotated[
    str, Field(description="like a Unix account name",
               json_schema_extra={"maxLength": 32, "pattern": r"^[a-z_][a-z0-9_-]{0,31}$"}),
    AfterValidator(v.check_user_name),
]
People = Annotated[list[UserName], Field(max_length=v.MAX_PEOPLE)]
# a Unix account: useradd's default NAME_REGEX, with capitals and a machine account's "$"
UNIX_USER = r"[A-Za-z_][A-Za-z0-9_-]{0,30}[$]?"
# the patterns are the schema's only: checked by check_unix_user, whose refusal says the
# rule in words (pydantic's says "String should match pattern '^(?:[A-Za-z_]...'")
UnixUser = Annotated[str, Field(min_length=1, json_schema_extra={
    "maxLength": 32, "pattern": f"^{UNIX_USER}$"}), AfterValidator(v.check_unix_user)]
# the same, or "" for the account of the user's own name: one pattern, not a union with
# Literal[""] (which refused a bad name once per form)
UnixUserOrOwn = Annotated[str, Field(json_schema_extra={
    "maxLength": 32, "pattern": f"^(?:{UNIX_USER})?$"}), AfterValidator(v.check_unix_user)]
WorkloadId = Annotated[str, Field(max_length=32, description="w-000123"),
                      AfterValidator(v.check_workload_id)]
HostNames = Annotated[list[HostName], Field(max_length=v.MAX_PEOPLE)]
Weight = Annotated[float, Field(ge=v.MIN_WEIGHT, le=v.MAX_WEIGHT, allow_inf_nan=False,
                                description="relative to its siblings")]
GpuKinds = Annotated[
    list[GpuKind] | str,
    either('a list of GPU kinds or a text such as "H100,B200"',
           Annotated[list[GpuKind], Field(max_length=v.MAX_PEOPLE)], QueryText),
]
Duration = Annotated[
    Annotated[float, Field(ge=0, allow_inf_nan=False)]
    | Annotated[str, Field(min_length=1, max_length=v.MAX_DURATION_TEXT)],
    BeforeValidator(v.check_duration),
]


# a value of WhatifBody.set: its key says which type it must be (whatif_api._setting)
Setting = Annotated[
    float | bool | str | None,
    either("a number, a boolean, a text or null", Annotated[float, Field(allow_inf_nan=False)],
           bool, Annotated[str, Field(max_length=v.MAX_DURATION_TEXT)], None),
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
    # the pattern is the schema's only: check_workload_name's refusal says the rule in
    # words (pydantic's says "String should match pattern '^[A-Za-z0-9._+-]+$'")
    name: Annotated[str, Field(max_length=128, json_schema_extra={
        "pattern": r"^[A-Za-z0-9._+-]+$"}), AfterValidator(v.check_workload_name)] | None = Field(
        None, description="a name to know it by: ASCII letters, digits and . _ + - only",
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
    umask: Annotated[int, Field(ge=0, le=0o777)] | None = Field(
        None, description="the file mode creation mask it runs with, as a number (63 for "
                          "0o077; the CLI sends the submitter's, as sbatch does); "
                          "default 18 (0o022)"
    )
    nodelist: HostNames = Field([], description="run only on these hosts")
    exclude: HostNames = Field([], description="never run on these hosts")
    gpu_kind: GpuKinds | None = Field(
        None, description='GPU kinds it accepts, in order of preference (["H100", "B200"] '
                          'or "H100,B200"); absent: any'
    )
    cluster: QueryText | None = Field(
        None, description="the cluster it must run in; absent: any"
    )
    signal: Annotated[str, Field(max_length=v.MAX_QUERY),
                      AfterValidator(v.check_signal)] | None = Field(
        None, description='sbatch\'s --signal: "[B:]SIG[@SECONDS]" (USR1 or 10; default 60 '
                          's), sent that long before the time limit; stored as "B:USR1@120"'
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
    user: Annotated[str, Field(min_length=1, max_length=v.MAX_QUERY),
                    AfterValidator(v.check_text)] | None = Field(
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


class NoBody(_Body):
    """The body of a request that takes none (a cancel, a revoke): nothing, ``{}`` or
    ``null``; a field is refused (422 naming it), as every body's unknown fields are, not
    dropped unread."""


class HostBody(_Body):
    reason: Annotated[str, Field(max_length=v.MAX_TEXT), AfterValidator(v.check_text)] = ""


class UserBody(_Body):
    name: UserName
    admin: bool = False
    unix_user: UnixUser | None = Field(
        None, description="the Unix account its work runs as (default: the same name)")


class UserChangeBody(_Body):
    admin: bool | None = None
    unix_user: UnixUserOrOwn | None = Field(
        None, description='the Unix account; "" for the account of the same name')


class TokenBody(_Body):
    kind: Literal["user", "scrape"] = Field(
        default="user", description="user: acts as the user; scrape: may only read")
    label: Annotated[str, Field(max_length=255), AfterValidator(v.check_text)] = ""
    # one of the two, or neither: [auth] max_token_lifetime, else never
    expires_in: Duration | None = Field(
        default=None, description='its lifetime from now (the server\'s clock): seconds or "90d"')
    expires_at: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="when it expires, seconds since the epoch")


class WhatifBody(_Body):
    since: Duration = Field(description='length of the period: seconds or "14d"')
    until: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None, description="end of the period, seconds since the epoch (default: now)")
    set_weight: Annotated[dict[BudgetPath, Weight], Field(max_length=v.MAX_PEOPLE)] = Field(
        default_factory=dict, description="proposed weight per budget path")
    set: Annotated[
        dict[Annotated[str, Field(max_length=v.MAX_QUERY)], Setting],
        Field(max_length=v.MAX_PEOPLE),
    ] = Field(default_factory=dict,
              description='proposed PolicyConfig or engine settings; durations as seconds '
                          'or "3d"')
