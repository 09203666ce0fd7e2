"""Limits on what the API accepts, in one place (docs/security.md, "Input limits").

Each check raises ``ValueError`` with a message that says what is wrong; the request models
in :mod:`apportion.service.bodies` attach them to their fields (pydantic ``AfterValidator``),
so a refusal names the field as the client typed it (``command.1: ...``). The limits are
chosen so that everything accepted can be stored identically on SQLite and PostgreSQL
(no NUL: PostgreSQL text cannot hold it; integers within 32 bits; strings within their
columns) and launched by the kernel (argument lengths).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence

from apportion.core.tree import MAX_WEIGHT, MIN_WEIGHT
from apportion.core.units import format_duration, parse_duration
from apportion.service import warn_signal

# ---- budgets ------------------------------------------------------------------------------
SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")
MAX_SEGMENT = 64
MAX_PATH = 255  # the budgets.path column

# ---- users --------------------------------------------------------------------------------
# like Unix account names (useradd's default NAME_REGEX, and at most 32 characters)
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
MAX_PEOPLE = 1000  # names in one members or managers list

# ---- workloads ----------------------------------------------------------------------------
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_GPUS = 1_000_000  # fits a 32-bit column with room; the cluster's size limits it further
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MAX_ARG_STRLEN = 32 * PAGE_SIZE  # the kernel's limit on one argument, its NUL included
MAX_ARGS = 10_000  # arguments in one command, variables in one environment
MAX_PATH_BYTES = 4096  # PATH_MAX: a working directory
WORKLOAD_ID = re.compile(r"w-[0-9]{6,18}")  # "w-000123": the store's, from its sequence
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._+-]")  # a workload's name: ASCII, as sbatch's
MAX_CANCEL_IDS = 10_000  # workload ids in one bulk cancel: one array's elements at most

# ---- free text ----------------------------------------------------------------------------
MAX_TEXT = 1024  # a host change's reason, a token's label
MAX_QUERY = 255  # one query parameter's value
MAX_ID = 2**31 - 1  # a number id (the audit's): its 32-bit column's largest on PostgreSQL
MAX_DURATION_TEXT = 64  # "1h30m" and the like
# ten years: longer than any run, protection, checkpoint interval or history the service
# keeps; a longer one is a mistake (and 1e308 s would be written with 300 digits)
MAX_DURATION_S = 3650 * 86400.0

__all__ = [
    "MAX_ARGS", "MAX_ARG_STRLEN", "MAX_CANCEL_IDS", "MAX_DURATION_S", "MAX_GPUS", "MAX_ID",
    "MAX_PATH", "MAX_PATH_BYTES", "MAX_PEOPLE", "MAX_QUERY", "MAX_SEGMENT", "MAX_TEXT",
    "MAX_WEIGHT", "MIN_WEIGHT", "PRIORITY_MAX", "PRIORITY_MIN", "WORKLOAD_ID", "ItemError",
    "check_budget_path",
    "check_command", "check_duration", "check_idempotency_key", "check_signal", "check_text",
    "check_user_name", "check_workload_id", "check_workload_name", "duration_seconds",
    "json_kind", "json_types",
]

# a value's JSON type (as a JSON schema names it), and as a refusal words it
_JSON_TYPES = [(bool, "boolean", "a boolean"), (int, "integer", "a number"),
               (float, "number", "a number"), (str, "string", "a text"),
               (list, "array", "a list"), (dict, "object", "an object"),
               (type(None), "null", "null")]


def json_types(value: object) -> tuple[str, ...]:
    """The JSON schema types ``value`` (parsed JSON) is of: ``("integer", "number")`` for
    1, ``("boolean",)`` for true (not a number)."""
    for kind, name, _ in _JSON_TYPES:
        if isinstance(value, kind):
            return (name, "number") if name == "integer" else (name,)
    return ()


def json_kind(value: object) -> str:
    """What ``value`` (parsed JSON) is, as a refusal says it: "a number", "a list"."""
    return next((word for kind, _, word in _JSON_TYPES if isinstance(value, kind)),
                type(value).__name__)


def check_duration(value: object) -> object:
    """A duration as sent: seconds (a finite number >= 0) or a text such as "30m", that
    :func:`duration_seconds` takes; returned as sent, the route reads its seconds. Checked
    whole, before pydantic tries each form: a refusal of both would name pydantic's forms
    ("since.constrained-float: ...; since.constrained-str: ...")."""
    if isinstance(value, str):
        if not 1 <= len(value) <= MAX_DURATION_TEXT:
            raise ValueError(f"a duration must be 1 to {MAX_DURATION_TEXT} characters, got "
                             f"{len(value)}")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError('must be a number of seconds or a duration such as "30m", got '
                         f"{json_kind(value)}")
    elif not (math.isfinite(value) and value >= 0):
        raise ValueError(f"must be a number of seconds >= 0, got {value}")
    duration_seconds(value)
    return value


def duration_seconds(value: object) -> float:
    """The seconds of a duration as sent (:func:`~apportion.core.parse_duration`), at most
    :data:`MAX_DURATION_S`. A longer one is refused quoting the value as sent (``1e+308
    s``, ``'99999999d'``), not written out in days."""
    seconds = parse_duration(value)
    if seconds > MAX_DURATION_S:
        sent = repr(value) if isinstance(value, str) else f"{value!r} s"
        raise ValueError(f"{sent} is over the cap of {format_duration(MAX_DURATION_S)} on any "
                         "duration")
    return seconds


def check_text(value: str, limit: int = MAX_TEXT) -> str:
    """A string without NUL characters and lone surrogates, at most ``limit`` characters."""
    if len(value) > limit:
        raise ValueError(f"must be at most {limit} characters, got {len(value)}")
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"must be valid UTF-8 (character {e.start} is not)") from None
    return value


def check_budget_path(path: str) -> str:
    """Segments of ``[A-Za-z0-9_.-]``, each 1 to 64 characters and neither ``.`` nor
    ``..``, joined by ``/``; at most 255 characters in all."""
    if len(path) > MAX_PATH:
        raise ValueError(f"must be at most {MAX_PATH} characters, got {len(path)}")
    if not path:
        raise ValueError("must not be empty")
    for i, seg in enumerate(path.split("/")):
        where = f"segment {i + 1} ({seg!r})"
        if not seg:
            raise ValueError(f"{where}: must not be empty (names joined by '/')")
        if len(seg) > MAX_SEGMENT:
            raise ValueError(f"{where}: must be at most {MAX_SEGMENT} characters")
        if seg in (".", ".."):
            raise ValueError(f"{where}: must not be '.' or '..'")
        if not SEGMENT.fullmatch(seg):
            raise ValueError(f"{where}: may only hold letters, digits, '_', '.' and '-'")
    return path


def check_user_name(name: str) -> str:
    """A name like a Unix account's: ``[a-z_][a-z0-9_-]{0,31}``."""
    if not USER_NAME.fullmatch(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValueError(
            f"{shown!r} is not a user name: a lower-case letter or '_', then up to 31 "
            "lower-case letters, digits, '_' or '-'"
        )
    return name


UNIX_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,30}[$]?")  # useradd's, capitals and "$"


def check_unix_user(name: str) -> str:
    """A Unix account name as useradd takes it by default (capitals and a machine account's
    ``$`` too), or ``""`` (the user's own name, where a change allows it: the caller's
    type says)."""
    if name and not UNIX_USER.fullmatch(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValueError(
            f"{shown!r} is not a Unix account name: a letter or '_', then up to 30 letters, "
            "digits, '_' or '-', and a '$' at the end at most"
        )
    return name


IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # the workloads.idempotency_key column


def check_idempotency_key(key: str) -> str:
    """An ``Idempotency-Key`` header: 1 to 255 printable ASCII characters, no spaces."""
    if not IDEMPOTENCY_KEY.fullmatch(key):
        shown = repr(key) if len(key) <= 40 else f"{key[:40] + '...'!r} ({len(key)} characters)"
        raise ValueError(
            f"{shown} is not a key: 1 to 255 printable ASCII characters, no spaces")
    return key


def check_workload_id(wid: str) -> str:
    """A workload id as the store makes them: ``w-`` and 6 to 18 digits."""
    if not WORKLOAD_ID.fullmatch(wid):
        shown = wid if len(wid) <= 40 else wid[:40] + "..."
        raise ValueError(f"{shown!r} is not a workload id (w-000005)")
    return wid


def check_workload_name(name: str) -> str:
    """A workload's name: 1 to 128 ASCII letters, digits and ``. _ + -`` (its length is
    the field's bound), refused naming the first character that is none of them."""
    shown = name if len(name) <= 40 else name[:40] + "..."
    if not name:
        raise ValueError("must not be empty (leave it out for none)")
    if (bad := NOT_IN_A_NAME.search(name)) is not None:
        raise ValueError(f"{shown!r} is not a name: character {bad.start() + 1} "
                         f"({bad.group()!r}) is not an ASCII letter, a digit, '.', '_', '+' "
                         "or '-'")
    return name


def check_signal(text: str) -> str:
    """sbatch's ``--signal`` (:mod:`apportion.service.warn_signal`), as its canonical text
    (``B:USR1@120``; an ``R:`` dropped)."""
    return warn_signal.parse(text).text


class ItemError(ValueError):
    """A refusal of one item of a list field: the API names it ``field.N`` (``command.0:
    ...``), as pydantic names an item it refuses and as docs/api.md writes them."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def check_command(argv: Sequence[str]) -> list[str]:
    """A non-empty argv of valid UTF-8 strings without NUL. Their sizes against the
    kernel's limits (``MAX_ARG_STRLEN`` per argument, ``ARG_MAX`` with the environment) are
    checked at submit, where the environment is known, by the rule launches apply
    (``executors.identity.exec_problem``)."""
    if not argv:
        raise ValueError("must hold at least the program to run")
    if len(argv) > MAX_ARGS:
        raise ValueError(f"must have at most {MAX_ARGS} arguments, got {len(argv)}")
    for i, arg in enumerate(argv):
        if "\x00" in arg:
            raise ItemError(i, "must not contain NUL characters")
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ItemError(i, f"must be valid UTF-8 (character {e.start} is not)") from None
    if not argv[0]:
        raise ItemError(0, "the program must not be empty")
    return list(argv)

