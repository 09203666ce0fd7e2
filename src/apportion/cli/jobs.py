"""Client commands for everyday work: ``submit`` (flags or a batch script), ``queue``,
``order``, ``cancel`` and ``logs``, as people coming from ``sbatch``, ``squeue``, ``sprio``
and ``scancel`` expect them. Ids may be given short (``5`` for ``w-000005``).
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import hostlist
import httpx

from apportion.core import FINAL as CORE_FINAL
from apportion.core import format_duration, plural
from apportion.core.units import (
    ClockFieldError,
    DurationError,
    format_duration_exact,
    format_figure,
    parse_duration,
)
from apportion.service import warn_signal
from apportion.service.executors.identity import max_arg_strlen
from apportion.service.replies import (
    BulkCancel,
    CancelOutcome,
    Me,
    QueuedPending,
    QueuedSpec,
    QueueHost,
    QueueView,
    Workload,
)
from apportion.service.validation import MAX_CANCEL_IDS
from apportion.service.warn_signal import WarnSignal
from apportion.text import escape_controls

from .client import (
    EXIT_FAILED,
    Client,
    Failure,
    ServerRefused,
    UnexpectedReply,
    _print_json,
    as_typed,
    connection,
    exit_code_for,
    exit_to_show,
    exported_env,
    fmt_time,
    json_option,
    parse,
    reworded,
    table,
)
from .environ import user_environ
from .ids import WORKLOAD_ID, not_an_id, workload_id
from .numbers import FiniteFloatRange

POLL_S = 0.5  # how often --wait and logs -f ask the server
FINAL = frozenset(s.value for s in CORE_FINAL)  # statuses a workload ends in
REASONS = {
    "no_capacity": "no capacity",
    "waiting_for_preemption": "waiting for preemption",
    "waiting_for_checkpoint": "waiting for a victim's checkpoint",
    "too_large": "too large for the cluster",
}


def _current_umask() -> int:
    """This process's file mode creation mask (setting it is the only way to read it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---- batch scripts ---------------------------------------------------------------------------
# #APPORTION lines take submit's own options, by every name submit takes them (long,
# short, =value); #SBATCH lines this subset
_APPORTION_OPTS = {
    "--budget": "budget", "--account": "budget", "-A": "budget", "--gpus": "gpus",
    "--min-runtime": "min_runtime",
    "--priority": "priority", "--checkpoint-interval": "checkpoint_interval",
    "--name": "name", "-J": "name", "--time": "time_limit", "-t": "time_limit",
    "--array": "array", "-a": "array", "--dependency": "dependency", "-d": "dependency",
    "--chdir": "chdir", "-D": "chdir", "--output": "output", "-o": "output",
    "--export": "export", "--nodelist": "nodelist", "-w": "nodelist",
    "--exclude": "exclude", "-x": "exclude",
    "--gpu-kind": "gpu_kind", "--cluster": "cluster", "--open-mode": "open_mode",
    "--error": "error", "-e": "error", "--signal": "signal",
}
_APPORTION_FLAGS = {"--resumable": "resumable", "--checkpoint-on-term": "checkpoint_on_term"}
_SBATCH_OPTS = {
    # a Slurm account is what the job is charged to: apportion's budget (as the sacct
    # importer reads Account)
    "--account": "budget", "-A": "budget",
    "--job-name": "name", "-J": "name", "--time": "time_limit", "-t": "time_limit",
    "--gpus": "gpus", "-G": "gpus", "--chdir": "chdir", "-D": "chdir",
    "--output": "output", "-o": "output", "--array": "array", "-a": "array",
    "--export": "export",
    "--dependency": "dependency", "-d": "dependency", "--gres": "gres",
    "--gpus-per-node": "gpus_per_node", "--nodes": "nodes", "-N": "nodes",
    "--gpus-per-task": "gpus_per_task", "--ntasks": "ntasks", "-n": "ntasks",
    "--ntasks-per-node": "ntasks_per_node",
    "--nodelist": "nodelist", "-w": "nodelist", "--exclude": "exclude", "-x": "exclude",
    "--open-mode": "open_mode", "--error": "error", "-e": "error", "--signal": "signal",
}

# #SBATCH options that say when or whether the job runs, not how: apportion has no start
# time, hold or reservation (work starts when the policy admits it), so going ahead without
# them would run the work at once; the submission is refused instead. What each asks for:
_SBATCH_WHEN = {
    "--begin": "to start at a later time", "-b": "to start at a later time",
    "--deadline": "to be removed unless it can end by a deadline",
    "--hold": "to be held until released", "-H": "to be held until released",
    "--immediate": "to run only if it can start at once",
    "-I": "to run only if it can start at once",
    "--reservation": "to run only in a Slurm reservation's time and nodes",
    "--test-only": "not to run at all (sbatch only checks it)",
}
_SBATCH_WHEN_FLAGS = {"--hold", "-H", "--immediate", "-I", "--test-only"}  # no value follows


@dataclass
class Script:
    """What a batch script asks for: its options, its command, and the lines not used."""

    options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # "job.sh:5: #SBATCH --mem=4G: why"
    # where each option was given, to name it in an error: "job.sh:3: #SBATCH --gres=gpu:2"
    origins: dict[str, str] = field(default_factory=dict)
    # what the GPU count is of: the job (--gpus), one node (--gres=gpu:8,
    # --gpus-per-node=8: --nodes multiplies it) or one task (--gpus-per-task=1: the tasks do)
    count_of: str = "job"
    # #SBATCH --nodes, --ntasks, --ntasks-per-node: whole numbers
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    # every directive giving a GPU count: (its origin, the count as typed, what it is of)
    gpu_counts: list[tuple[str, str, str]] = field(default_factory=list)
    # the first directive giving a GPU kind with its count (gpu:h100:4, -G a100:4): (its
    # origin, the kind as typed), so that another kind beside it is refused naming both
    typed_kind: tuple[str, str] | None = None


# a line read_script takes for a directive (or, indented, names as ignored), the first line
# included (sbatch reads "#SBATCH" followed by any blank, a tab as a space)
_DIRECTIVE = re.compile(r"^\s*#(?:APPORTION|SBATCH)(?:[ \t]|\s*$)", re.MULTILINE)
_SCRIPT_SUFFIXES = (".sh", ".sbatch", ".slurm")
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._+-]")  # a workload's name, as the API takes it
MAX_NAME = 128


def looks_like_script(path: str) -> bool:
    """A file starting with ``#!`` or holding ``#APPORTION``/``#SBATCH`` lines."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        head = p.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return False
    return head.startswith("#!") or _DIRECTIVE.search(head) is not None


def _is_path(word: str) -> bool:
    """Whether submit's first argument is a path (``./run``, ``job.sh``), not a program
    looked up on the PATH (``python``)."""
    return "/" in word or word.endswith(_SCRIPT_SUFFIXES)


def found_path(word: str, chdir: str | None) -> str:
    """The file submit's first argument names: ``word`` itself, unless it is a relative
    path not here but in ``chdir`` (the directory the work runs in, from --chdir): then
    that one. Here first, as ``sbatch`` reads a script from the directory it was run in."""
    path = Path(word)
    if chdir and _is_path(word) and not path.is_absolute() and not path.exists():
        in_chdir = Path(chdir).expanduser() / path
        if in_chdir.is_file():
            return str(in_chdir)
    return word


def unopenable_path(word: str, chdir: str | None) -> str | None:
    """Why ``word``, submit's first argument, names a file that cannot be opened, or None.
    A word with a ``/`` or a script's suffix (``job.sh``) is a path: it must be there when
    submitting (as ``sbatch`` refuses a script it cannot open), here or, when relative, in
    ``chdir`` (:func:`found_path`). Any other word (``python``) is a program, looked up on
    the PATH where the work runs."""
    if not _is_path(word):
        return None
    try:
        with Path(found_path(word, chdir)).open("rb"):
            return None
    except OSError as e:
        return (f"{word}: cannot open: {e.strerror or e} (a script, or a program given by "
                "its path, must be there when submitting)")


def script_name(path: str) -> str:
    """The name a batch script's work gets when none is given, as sbatch names a job after
    its script: the file's name, with each character a name may not hold (it holds
    letters, digits and ``. _ + -``) as ``_``."""
    return _NOT_IN_A_NAME.sub("_", Path(path).name)[:MAX_NAME]


# the shell line a batch script runs through (given its file's name as "$0", then its text,
# then its arguments): its interpreter runs a private copy of the text as a file, so the
# script sees a path of its own, then its arguments (sys.argv, "$0 $1 ..."), as under
# sbatch (``python3 -c TEXT`` would give it '-c' first). The copy is made as the job's
# account, where it runs (the submitted file may not be readable there), in its TMPDIR.
_SCRIPT_COPY = ('d=$(mktemp -d "${TMPDIR:-/tmp}/apportion.XXXXXX" 2>/dev/null || '
                'mktemp -d /tmp/apportion.XXXXXX) && f="$d/$0" && printf %s "$1" >"$f" || '
                'exit 126; shift;')


def read_script(path: str, args: Sequence[str]) -> Script:
    """Read the directives of a batch script. As ``sbatch`` does, they are read from the
    comment block at the top, up to the first command line, and only at the start of a
    line (an indented one is a comment, named as ignored). The command becomes the
    script's own text run by its interpreter (``#!`` line, else ``/bin/sh``) as a file
    (``_SCRIPT_COPY``), so the server keeps the script as it was at submission."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        first_bad = data.count(b"\n", 0, e.start) + 1
        raise click.UsageError(f"{escape_controls(path)}:{first_bad}: not UTF-8 text: a batch "
                               "script is sent as "
                               "text (save it as UTF-8)") from None
    if b"\r\n" in data and _run_by_a_shell(text):
        # as sbatch refuses it: the shell would read each command with a \r at its end
        # (cd "dir\r", python "train.py\r"), failing in ways that do not say why
        first_crlf = data.count(b"\n", 0, data.index(b"\r\n")) + 1
        raise click.UsageError(f"{escape_controls(path)}:{first_crlf}: DOS line breaks (\\r\\n): a "
                               "batch script must have Unix line breaks (\\n), as sbatch "
                               "requires (convert it: dos2unix, or sed -i 's/\\r$//')")
    per_argument = max_arg_strlen()  # the text is one argument of the command, NUL included
    if len(data) >= per_argument:
        raise click.UsageError(f"{escape_controls(path)}: {len(data)} bytes: a batch script "
                               "may have at most "
                               f"{per_argument - 1} bytes (its text is passed to its shell as "
                               f"one argument, and the kernel's limit on one is {per_argument} "
                               "bytes with its NUL)")
    name = Path(path).name
    out = Script()
    commands = False  # past the first command: directives are no longer read
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if no == 1 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            commands = True
        for prefix, opts in (("#APPORTION", _APPORTION_OPTS), ("#SBATCH", _SBATCH_OPTS)):
            # the prefix, then a blank (a space or a tab, as sbatch reads it) or nothing
            if not (stripped.startswith((prefix + " ", prefix + "\t")) or stripped == prefix):
                continue
            if commands:
                out.ignored.append(f"{name}:{no}: {stripped}: ignored (after the first "
                                   "command; directives go at the top)")
            elif line[:1].isspace():  # sbatch reads lines *beginning* with #SBATCH only
                out.ignored.append(f"{name}:{no}: {stripped}: ignored (indented: as sbatch, "
                                   "a directive is read only at the start of its line)")
            else:
                _directive(out, f"{name}:{no}", prefix, stripped[len(prefix):], opts)
    _count_gpus(out)
    shebang = text.splitlines()[0][2:].split() if text.startswith("#!") else []
    interpreter = shlex.join(shebang or ["/bin/sh"])
    out.command = ["/bin/sh", "-c", f'{_SCRIPT_COPY} exec {interpreter} "$f" "$@"', name, text,
                   *args]
    return out


def _count_gpus(out: Script) -> None:
    """The job's GPUs from a per-node or per-task count, as Slurm counts them: --gres=gpu:8
    on --nodes=2 is 16 GPUs; --gpus-per-task=1 on --ntasks=8 (or --nodes=2 with
    --ntasks-per-node=4) is 8 (apportion places GPUs, not nodes or tasks: it gangs them
    over as many hosts as they need). A task count with no per-task GPU count is named
    as not used."""
    times = {"job": [], "node": ["nodes"],
             "task": ["ntasks"] if out.ntasks is not None else ["nodes", "ntasks_per_node"]}

    def job_count(count: str, of: str) -> str:
        """The job's GPUs by one directive (its count as typed when it is no number)."""
        if not (count.isascii() and count.isdigit()):
            return count
        return str(math.prod([int(count), *(getattr(out, k) for k in times[of]
                                             if getattr(out, k) is not None)]))

    # two directives giving the job different counts (--gpus=2 and --gres=gpu:4): the later
    # one won without a word; the same count twice is one request
    first = out.gpu_counts[0] if out.gpu_counts else None
    for origin, count, of in out.gpu_counts[1:]:
        assert first is not None
        if job_count(count, of) != job_count(first[1], first[2]):
            raise click.UsageError(
                f"{first[0]} and {origin}: two different GPU counts "
                f"({job_count(first[1], first[2])} and {job_count(count, of)} GPUs for the "
                "job); give one of them")
    by = [k for k in times[out.count_of] if getattr(out, k) is not None]
    if by:
        out.options["gpus"] = str(math.prod([int(out.options["gpus"]),
                                             *(getattr(out, k) for k in by)]))
        out.origins["gpus"] = " on ".join([out.origins["gpus"], *(out.origins[k] for k in by)])
    for k in ("ntasks", "ntasks_per_node"):
        if k in out.origins and k not in by:
            why = ("the tasks count only with --gpus-per-task" if out.count_of != "task"
                   else "--ntasks gives the tasks")
            out.ignored.append(f"{out.origins[k]}: ignored ({why})")


_SHELLS = frozenset({"sh", "bash", "dash", "ksh", "mksh", "zsh", "csh", "tcsh"})


def _run_by_a_shell(text: str) -> bool:
    """Whether a batch script's interpreter is a shell: its ``#!`` line's (``/bin/bash
    -l``, ``/usr/bin/env bash``), else ``/bin/sh``. A shell takes a ``\r`` before a line
    break as part of the command; Python, say, does not."""
    if not text.startswith("#!"):
        return True
    words = [Path(w).name for w in text.split("\n", 1)[0][2:].split()]
    if words[:1] == ["env"]:
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return bool(words) and words[0] in _SHELLS


def _directive(out: Script, where: str, prefix: str, rest: str, opts: dict[str, str]) -> None:
    try:
        words = shlex.split(rest, comments=True)
    except ValueError as e:
        out.ignored.append(f"{where}: {prefix}{rest}: ignored ({e})")
        return
    i = 0
    while i < len(words):
        word = words[i]
        opt, eq, value = word.partition("=")
        attached = bool(eq)  # the value is in the word: --time=30, or -t30 (below)
        if not word.startswith("--") and word[:2] in opts and len(word) > 2:
            opt, value, attached = word[:2], word[2:], True  # as sbatch (getopt) reads -t30
        if prefix == "#APPORTION" and opt in _APPORTION_FLAGS:
            out.options[_APPORTION_FLAGS[opt]] = True
            out.origins[_APPORTION_FLAGS[opt]] = escape_controls(f"{where}: {prefix} {opt}")
            i += 1
            continue
        when = word[:2] if not word.startswith("--") and word[:2] in _SBATCH_WHEN else opt
        if prefix == "#SBATCH" and when in _SBATCH_WHEN:
            takes = (not attached and when not in _SBATCH_WHEN_FLAGS and i + 1 < len(words)
                     and not words[i + 1].startswith("-"))
            shown = f"{word} {words[i + 1]}" if takes else word
            raise click.UsageError(escape_controls(
                f"{where}: {prefix} {shown}: refused: it asks {_SBATCH_WHEN[when]}, and "
                "apportion has no start time, hold or reservation: it starts work as soon as "
                "the policy admits it, now perhaps; remove the line to submit it so"))
        if opt not in opts:
            takes = not attached and i + 1 < len(words) and not words[i + 1].startswith("-")
            shown = f"{word} {words[i + 1]}" if takes else word
            out.ignored.append(f"{where}: {prefix} {shown}: ignored (not an option apportion "
                               "reads)")
            i += 2 if takes else 1
            continue
        if not attached:
            if i + 1 >= len(words):
                raise click.UsageError(escape_controls(f"{where}: {prefix} {opt}: needs a value"))
            value = words[i + 1]
            i += 1
        i += 1
        if not value:  # --time= or -t '': sbatch refuses it; dropped, it ran with no limit
            shown = word if attached else f"{opt} ''"
            raise click.UsageError(escape_controls(f"{where}: {prefix} {shown}: needs a value"))
        key = opts[opt]
        # how errors name the line: as the reader's terminal may show it (control and
        # format characters escaped)
        origin = escape_controls(f"{where}: {prefix} {word if attached else f'{opt} {value}'}")
        if key in ("nodes", "ntasks", "ntasks_per_node"):
            if not (value.isascii() and value.isdigit() and int(value) > 0):
                what = "nodes" if key == "nodes" else "tasks"
                out.ignored.append(f"{where}: {prefix} {word if attached else f'{opt} {value}'}"
                                   f": ignored (only a whole number of {what} is read)")
                continue
            setattr(out, key, int(value))
            out.origins[key] = origin
            continue
        if key == "gres" and "," in value:
            # sbatch's --gres is a list (gpu:2,mps:100): its one gpu entry is read, each
            # other one named as not used (the list was read as one entry: type '2,mps')
            items = value.split(",")
            gpu_items = [x for x in items if x.partition(":")[0] == "gpu"]
            if len(gpu_items) == 1:
                for x in items:
                    if x not in gpu_items:
                        out.ignored.append(escape_controls(
                            f"{where}: {prefix} --gres={value}: {x}: ignored (only gpu:N "
                            "is read)"))
                value = gpu_items[0]
        sbatch_gpus = key == "gpus" and prefix == "#SBATCH"  # sbatch's -G takes TYPE:N too
        if key in ("gres", "gpus_per_node", "gpus_per_task") or (sbatch_gpus and ":" in value):
            typed = _gres_typed(value) if key == "gres" else _typed_count(value)
            if typed is None:
                if key == "gpus":  # as an untyped count that is no number is
                    raise click.UsageError(f"{origin}: {value!r} is not a number of GPUs "
                                           "(N or TYPE:N)")
                shown = f"--gres={value}" if key == "gres" else f"{opt}={value}"
                out.ignored.append(f"{where}: {prefix} {shown}: ignored (only "
                                   f"{'gpu:N' if key == 'gres' else 'N or TYPE:N'} is read)")
                continue
            gpus, kind = typed
            # two kinds (--gres=gpu:h100:4 and -G a100:4): the first was kept without a
            # word; refused as two different counts are, naming both
            if kind is not None and out.typed_kind is not None and \
                    kind.upper() != out.typed_kind[1].upper():
                raise click.UsageError(
                    f"{out.typed_kind[0]} and {origin}: two different GPU kinds "
                    f"({out.typed_kind[1]} and {kind}); give one of them")
            if kind is not None and out.typed_kind is None:
                out.typed_kind = (origin, kind)
            # gpu:h100:8 asks for kind H100 (--gpu-kind): a Slurm type in upper case, as
            # the Slurm executor and the sacct importer name kinds by default
            if kind is not None and "gpu_kind" not in out.options:
                out.options["gpu_kind"] = kind.upper()
                out.origins["gpu_kind"] = origin
            # one node's count, which --nodes multiplies, or one task's; --gpus=a100:8 the
            # job's
            out.count_of = {"gpus": "job", "gpus_per_task": "task"}.get(key, "node")
            key, value = "gpus", gpus
        elif key == "gpus":
            out.count_of = "job"  # the job's count, whatever --nodes says
        if key == "gpus":
            out.gpu_counts.append((origin, str(value), out.count_of))
        out.options[key] = value
        out.origins[key] = origin


# a Slurm gres type as a node's Gres= names it (h100, nvidia_h100_80gb_hbm3, a100-sxm4)
_GRES_TYPE = re.compile(r"[A-Za-z0-9_.-]+")


def _gres_gpus(value: str) -> str | None:
    """``gpu:4`` or ``gpu:a100:4`` -> ``"4"``; anything else None."""
    typed = _gres_typed(value)
    return None if typed is None else typed[0]


def _gres_typed(value: str) -> tuple[str, str | None] | None:
    """``gpu:4`` -> ``("4", None)``, ``gpu:a100:4`` -> ``("4", "a100")``; anything else
    None."""
    name, colon, typed = value.partition(":")
    return _typed_count(typed) if name == "gpu" and colon else None


def _typed_count(value: str) -> tuple[str, str | None] | None:
    """A GPU count as ``--gpus-per-node`` takes it: ``4`` -> ``("4", None)``, ``a100:4``
    -> ``("4", "a100")``; anything else None."""
    parts = value.split(":")
    count = parts[-1]  # ASCII digits only: int() reads "٥" as 5
    if len(parts) > 2 or not (count.isascii() and count.isdigit()) or not all(parts):
        return None
    if len(parts) == 2 and not _GRES_TYPE.fullmatch(parts[0]):  # "2,mps" is no type
        return None
    return count, (parts[0] if len(parts) == 2 else None)


# how the shell line fills in the fields of a file name given as its "$1": %A is the
# array's id, or outside an array the workload's own (as Slurm's %A is the job id)
_NAME_FILL = ('printf %s "$1" | sed -e "s/%%/\\x01/g" -e "s/%j/$APPORTION_WORKLOAD_ID/g" '
              '-e "s/%x/$APPORTION_JOB_NAME/g" '
              '-e "s/%A/${APPORTION_ARRAY_ID:-$APPORTION_WORKLOAD_ID}/g" '
              '-e "s/%a/$APPORTION_ARRAY_INDEX/g" -e "s/\\x01/%/g"')
# How an attempt opens its files, by --open-mode. Without one (apportion's default) the
# first attempt starts the file afresh and a requeued one writes after what is there, so
# that no attempt's output is lost (Slurm's default, JobFileAppend=0, truncates on requeue
# too). "append": every attempt appends, the first too, so work writing to one file after
# other work (a chain of --dependency jobs with one --output) keeps what they wrote.
# "truncate": every attempt starts the file afresh, a requeued one too, as Slurm does:
# slurmstepd opens a batch job's output with O_TRUNC whenever the job's open mode is
# truncate, whatever its restart count (io_get_file_flags in slurmstepd's io.c; slurmctld
# sends the job's open_mode unchanged with each launch). Each is a shell clause given
# ">" to start afresh or ">>" to append; the lines below are stored in workloads' commands
# and recognised there, so their text must not change.
def _by_attempt(opening: str) -> str:
    """The clause of the default mode: ``opening`` with ``>`` on the first attempt, with
    ``>>`` on a requeued one."""
    return (f'if [ "${{APPORTION_ATTEMPT:-1}}" -gt 1 ]; then {opening.format(o=">>")} '
            f'else {opening.format(o=">")} fi;')


def _open_modes(opening: str) -> dict[str | None, str]:
    """The clause of each --open-mode (None: none given) for a shell ``opening``."""
    return {None: _by_attempt(opening), "append": opening.format(o=">>"),
            "truncate": opening.format(o=">")}


# the shell line --output wraps a command in: it fills in the file's name and sends the
# command's output (stdout and stderr) there, opened as the --open-mode says
_OUTPUT_OPENINGS = _open_modes('exec {o}"$out" 2>&1;')
_OUTPUT_FILL_OF = {mode: f'out=$({_NAME_FILL}); shift; {opening} exec "$@"'
                   for mode, opening in _OUTPUT_OPENINGS.items()}
_OUTPUT_FILL = _OUTPUT_FILL_OF[None]
# the line earlier versions wrapped a command in (every attempt truncating the file, %A
# empty outside an array): their stored work is still known as writing to its file
_EARLIER_OUTPUT_FILL = (
    'out=$(printf %s "$1" | sed -e "s/%%/\\x01/g" -e "s/%j/$APPORTION_WORKLOAD_ID/g" '
    '-e "s/%x/$APPORTION_JOB_NAME/g" -e "s/%A/$APPORTION_ARRAY_ID/g" '
    '-e "s/%a/$APPORTION_ARRAY_INDEX/g" -e "s/\\x01/%/g"); shift; '
    'exec >"$out" 2>&1; exec "$@"')
_OUTPUT_FILLS = (*_OUTPUT_FILL_OF.values(), _EARLIER_OUTPUT_FILL)
# the line --error (a file other than --output's) wraps a command in: "$1" is --output's
# file (empty without one: stdout stays the attempt's log), "$2" --error's, each filled in
# as above and opened as --output's is (the stdout file first, so a failure to open either
# is said in the log); names that come out the same when filled in are one file, as Slurm
# opens them once
_ERROR_OPENINGS = _open_modes('[ -z "$out" ] || exec {o}"$out"; '
                              '[ "$err" = "$out" ] || exec 2{o}"$err";')
_ERROR_FILL_OF = {mode: (f'fill() {{ {_NAME_FILL}; }}; out=$(fill "$1"); err=$(fill "$2"); '
                         f'shift 2; {opening} [ "$err" != "$out" ] || exec 2>&1; exec "$@"')
                  for mode, opening in _ERROR_OPENINGS.items()}
_ERROR_FILL = _ERROR_FILL_OF[None]
_ERROR_FILLS = tuple(_ERROR_FILL_OF.values())


_FIELD = re.compile(r"%([%jxAa])")  # a field of --output's file name, as _OUTPUT_FILL fills it
# a field of a file name as sbatch reads it: an optional zero-padding width, then a letter
_SLURM_FIELD = re.compile(r"%(\d*)([A-Za-z%])")
# sbatch's fields that stand for what apportion does not know when the work is submitted
_UNFILLED = {"N": "the node's name", "n": "the node's number in the job",
             "t": "the task's number", "s": "the step's number",
             "b": "the array index modulo 10", "J": "the job's step"}


def _output_name(text: str, flag: str) -> str:
    """--output's file name as :data:`_OUTPUT_FILL` takes it: ``%u`` filled in with the
    submitter's user name (sbatch's), and the zero-padding width of ``%5j``, ``%5x`` or
    ``%5A`` dropped (as sbatch ignores it for a field that is not a number: apportion's ids
    are ``w-000056``, padded already). A field of sbatch's that apportion cannot fill
    before the work runs (``%N``), or a padded ``%3a``, is a usage error naming ``flag``
    (the flag or the script line); a ``%`` that starts no field stays, as in sbatch."""
    def fill(m: re.Match[str]) -> str:
        width, field = m.groups()
        if field == "u":
            return _user_name().replace("%", "%%")
        if field in "jxA" or (field == "a" and not width):
            return f"%{field}"
        if field == "a":
            raise click.UsageError(f"{flag}: %{width}a: a zero-padded array index is not "
                                   "supported; give %a")
        if field in _UNFILLED:
            raise click.UsageError(
                f"{flag}: %{width}{field} ({_UNFILLED[field]}) is not known when the work is "
                "submitted; the fields apportion fills are %j %x %A %a %u and %%")
        return m.group(0)
    return _SLURM_FIELD.sub(fill, text)


def _user_name() -> str:
    """The submitter's user name, as sbatch fills ``%u``: the password database's name for
    this process's uid; where the lookup finds none (an LDAP or SSSD account whose lookup
    fails, a uid with no entry), the login name of the environment (``LOGNAME``, else
    ``USER``), else the uid as a number, as ``ls -l`` shows a file of that uid."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return os.environ.get("LOGNAME") or os.environ.get("USER") or str(uid)


def _with_output(command: list[str], output: str | None, mode: str | None = None,
                 error: str | None = None) -> list[str]:
    """Send the command's output to ``output`` (``sbatch --output``) and its stderr to
    ``error`` (``sbatch --error``; without it, or the same name, to ``output`` too), in the
    workload's own directory and account: by ``mode`` (``--open-mode``) ``"append"``,
    appended to by every attempt, the first too; ``"truncate"``, started afresh by every
    attempt, a requeued one too (as Slurm); None (not given), truncated by its first
    attempt and appended to by the next. Without ``output`` its stdout stays in the
    attempt's log. ``%j`` is the workload id, ``%x`` its name, ``%A`` its array's id (else
    its own) and ``%a`` its index, ``%%`` a percent sign: filled in when it starts."""
    if error is None or error == output:  # one file, as before --error was read
        assert output is not None
        fill = _OUTPUT_FILL_OF[mode]
        return ["/bin/sh", "-c", fill, "sh", output, *command]
    fill = _ERROR_FILL_OF[mode]
    return ["/bin/sh", "-c", fill, "sh", output or "", error, *command]


SHOWN_VALUE_CHARS = 40  # of a flag's value echoed in an error, as the server shortens them


def _flag_shown(flag: str, value: str) -> str:
    """``--time 2x``: a flag as typed, to name it in an error; a value of more than
    :data:`SHOWN_VALUE_CHARS` characters is cut there, saying how long it was."""
    if len(value) > SHOWN_VALUE_CHARS:
        value = f"{value[:SHOWN_VALUE_CHARS]}... ({len(value)} characters)"
    return escape_controls(f"{flag} {value}")


def _warn_signal(value: Any, named: Callable[[str, str], str]) -> WarnSignal | None:
    """``--signal`` as sbatch reads it (:mod:`apportion.service.warn_signal`), or None
    when not given; a bad one is a usage error naming the flag or the script line
    (``named``). ``R:`` (Slurm's leave to overlap a reservation) is read, said to have no
    effect, and dropped."""
    if value is None:
        return None
    text = str(value)
    where = named("signal", _flag_shown("--signal", text))
    try:
        warn = warn_signal.parse(text)
    except ValueError as e:
        raise click.UsageError(escape_controls(f"{where}: {e}")) from None
    if warn.reservation:
        click.echo(f"warning: {where}: R: has no effect (it lets a Slurm job overlap a "
                   "reservation, and apportion has none); the signal is sent as without it",
                   err=True)
    return warn


def _open_mode(text: str, flag: str) -> str:
    """``--open-mode`` as sbatch reads it, by its first letter (any case): ``"append"`` or
    ``"truncate"``; anything else is a usage error naming ``flag`` (the flag or the script
    line)."""
    if text[:1] in ("a", "A", "t", "T"):
        return "append" if text[:1] in ("a", "A") else "truncate"
    raise click.UsageError(f"{flag}: must be append or truncate")


def output_file(w: dict[str, Any]) -> str | None:
    """The file a workload (as ``GET /v1/workloads/{id}`` gives it) sends its output to,
    if it was submitted with ``--output``, with its ``%`` fields filled in as
    :func:`_with_output` fills them; else None (its output is in its log)."""
    return _output_files(w)[0]


def error_file(w: dict[str, Any]) -> str | None:
    """The file a workload (as ``GET /v1/workloads/{id}`` gives it) sends its stderr to,
    if it was submitted with ``--error`` naming another file than ``--output``'s, filled
    in as :func:`output_file` is; else None (its stderr goes with its output)."""
    return _output_files(w)[1]


def _output_files(w: dict[str, Any]) -> tuple[str | None, str | None]:
    """:func:`output_file` and :func:`error_file` of ``w``."""
    command = w.get("command") or []
    if len(command) < 5 or command[:2] != ["/bin/sh", "-c"] or command[3] != "sh":
        return None, None
    if command[2] in _OUTPUT_FILLS:
        names = [str(command[4])]
    elif command[2] in _ERROR_FILLS and len(command) >= 6:
        names = [str(command[4]), str(command[5])]
    else:
        return None, None
    own_id = "" if command[2] == _EARLIER_OUTPUT_FILL else w["id"]  # %A outside an array
    fields = {"%": "%", "j": w["id"], "x": w.get("name") or "",
              "A": w.get("array_id") or own_id,
              "a": "" if w.get("array_index") is None else str(w["array_index"])}
    out, *err = [_FIELD.sub(lambda m: fields[m.group(1)], name) if name else None
                 for name in names]
    return out, (err[0] if err and err[0] != out else None)  # the same name: one file


# ---- submit ----------------------------------------------------------------------------------
# what submit needs, and the lines of a batch script that can give it
_REQUIRED = (
    ("--budget", "budget", "#SBATCH --account=ai/llm or #APPORTION --budget ai/llm"),
    ("--gpus", "gpus", "#SBATCH --gres=gpu:N, --gpus=N or #APPORTION --gpus N"),
    ("--min-runtime", "min_runtime", "#APPORTION --min-runtime 30m (sbatch has none: the "
     "shortest run that makes progress, never preempted before it; 0 for free, preemptible "
     "work)"),
)

# sbatch's options typed on submit's command line by habit, which it does not take: what
# to do instead, said in the error rather than click's bare "No such option" (or a guess
# at a flag of a similar spelling: --mem, "did you mean --name, --time?")
_SBATCH_IN_SCRIPTS = ("--gres", "-G", "--gpus-per-node", "--gpus-per-task", "--nodes", "-N",
                      "--ntasks", "-n", "--ntasks-per-node")
_SBATCH_UNUSED = ("--partition", "-p", "--qos", "-q", "--mem", "--mem-per-cpu",
                  "--mem-per-gpu", "--cpus-per-task", "-c", "--cpus-per-gpu", "--exclusive",
                  "--constraint", "-C", "--mail-type", "--mail-user", "--requeue",
                  "--no-requeue", "--licenses", "-L", "--comment", "--wckey", "--time-min",
                  "--mincpus", "--tmp", "--hint", "--distribution", "-m")


def _sbatch_option_hint(option: str) -> str | None:
    """What to type instead of sbatch's ``option`` on submit's command line, or None."""
    if option in _SBATCH_IN_SCRIPTS:
        return (f"{option} is sbatch's: on the command line give the job's GPUs as --gpus N "
                f"(their type as --gpu-kind); a batch script's #SBATCH {option} line is read")
    if option == "--wrap":
        return ("--wrap is sbatch's: give the command after the options: apportion submit "
                "[OPTIONS] -- CMD ARGS...")
    if option in _SBATCH_UNUSED:
        return (f"{option} is sbatch's, and apportion does not use it (it places GPUs; a "
                f"batch script's #SBATCH {option} line is named as ignored): leave it out")
    return None


class _SubmitCommand(click.Command):
    """``submit``, whose error for one of sbatch's options says what to type instead."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            hint = _sbatch_option_hint(e.option_name)
            if hint is None:
                raise
            raise click.UsageError(f"No such option: {hint}", ctx=ctx) from None


@click.command(cls=_SubmitCommand, context_settings={"ignore_unknown_options": False})
@click.option("--budget", "--account", "-A", "budget",
              help="leaf budget path, e.g. ai/llm/alice (--account, -A: as sbatch names "
                   "what a job is charged to)")
@click.option("--gpus", type=int, help="GPUs (gang-scheduled)")
@click.option("--min-runtime",
              help="minimum runtime: 30m, 8h, seconds; 0 = unallocated (free, preemptible)")
@click.option("--resumable", is_flag=True, help="may be preempted and requeued after min-runtime")
@click.option("--priority", type=int, default=0, help="order within the budget only")
@click.option("--checkpoint-interval", default="0", help="how often it checkpoints (e.g. 30m)")
@click.option("--checkpoint-on-term", is_flag=True,
              help="it writes a checkpoint when told to stop (SIGTERM), within the grace "
                   "period (with --resumable; without, it has no effect)")
@click.option("--name", "-J", default=None, help="a name to know it by")
@click.option("--time", "time_limit", "-t", default=None,
              help="wall-time limit (2h, 1-00:00:00; a bare number is whole minutes, as in "
                   "Slurm; 0 or UNLIMITED: none); at the limit it is stopped: timeout")
@click.option("--array", "-a", default=None,
              help="one workload per index: 0-99, 1,3,5-7, 0-15:4 (every 4th); 0-99%10 runs "
                   "at most 10 at once")
@click.option("--dependency", "-d", default=None,
              help="afterok|afterany|afternotok:ID[:ID...] (ids short or long)")
@click.option("--chdir", "-D", default=None, metavar="DIR",
              help="directory it runs in (default: the current one)")
@click.option("--export", "export", default="ALL", metavar="ALL|NONE|NAME[=value],...",
              help="environment it runs with: ALL of yours (default), NONE, or the named "
                   "variables (NAME takes yours, NAME=value sets it; ALL,NAME=value both)")
@click.option("--nodelist", "-w", default=None,
              help="run only on these hosts (h1,h2 or a Slurm host list: gpu[1-4,7])")
@click.option("--exclude", "-x", default=None,
              help="never run on these hosts (h3,h4 or a Slurm host list: gpu[5-8])")
@click.option("--gpu-kind", default=None, metavar="KIND[,KIND...]",
              help="GPU kinds it may run on, preferred first (B200 or H100,B200; "
                   "default: any)")
@click.option("--cluster", default=None, help="the cluster it must run in (default: any)")
@click.option("--output", "-o", default=None,
              help="write its output to this file (%j id, %x name, %A array (else its id), "
                   "%a index in the array, %u your user name, %% a percent sign)")
@click.option("--error", "-e", default=None,
              help="write its stderr to this file (the same fields as --output; default: "
                   "with its output)")
@click.option("--open-mode", default=None, metavar="append|truncate",
              help="with --output or --error: every attempt appends to the file (append), "
                   "or starts it afresh, a requeued one too, as Slurm (truncate); default: "
                   "the first starts it afresh, a requeued one appends")
@click.option("--signal", "signal", default=None, metavar="[B:]SIG[@SECONDS]",
              help="send SIG (USR1, 10, ...) SECONDS (default 60) before the time limit, "
                   "to every process of the work, or with B: to the batch script's own "
                   "process only; it runs on until the limit")
@click.option("--wait", "wait", is_flag=True,
              help="block, print its state changes, exit with its exit code")
@click.option("--parsable", "parsable", is_flag=True,
              help="print only its id (an array's: the array's id), as sbatch --parsable: "
                   "jid=$(apportion submit --parsable job.sh); with --wait, the state "
                   "changes go to stderr")
@json_option
@click.argument("command", nargs=-1, required=True)
@connection
@click.pass_context
def submit(ctx: click.Context, /, client: Client, as_json: bool, wait: bool, parsable: bool,
           command: tuple[str, ...], **given: Any) -> None:
    """Submit a workload.

    \b
      apportion submit --budget B --gpus N --min-runtime 30m -- CMD...
      apportion submit job.sh [ARGS...]

    A batch script's #APPORTION lines take these same options (#APPORTION --gpus 8) and its
    #SBATCH lines the common subset (--account (the budget), --job-name, --time,
    --gres=gpu:N, --gpus-per-node, --gpus, --nodes, --gpus-per-task with --ntasks or
    --ntasks-per-node, --chdir, --output, --error,
    --open-mode, --array, --dependency, --nodelist, --exclude, --export, --signal);
    options on the command line win. Lines it does not use are listed on stderr with their
    line numbers; an #SBATCH line saying when or whether the job runs (--begin, --deadline, --hold,
    --immediate, --reservation, --test-only) refuses the submission: apportion has no
    start time.
    A first argument with a / or ending in .sh, .sbatch or .slurm must be a file that can be
    opened when submitting (a relative one here, else in --chdir, and a batch script is read
    from there); any other word is a program on the PATH where the work runs.

    Sent with a fresh Idempotency-Key and retried with it if the connection is lost or the
    server answers 5xx: a submission the server stored before the answer was lost is
    answered again, never stored twice."""
    if parsable and as_json:
        raise click.UsageError("--parsable and --json: give one of them")
    opts = dict(given)
    cmd = command_words = list(command)  # cmd becomes a batch script's shell line
    from_script: dict[str, str] = {}  # option -> the script line that gave it

    def named(key: str, typed: str) -> str:
        """How to name an option in an error: the script line that gave it, else the flag."""
        return from_script.get(key, typed)

    _refuse_what_is_not_utf8(ctx, cmd, given)
    _refuse_empty_values(ctx, given)
    problem = unopenable_path(cmd[0], given.get("chdir"))
    if problem is not None:
        raise click.UsageError(problem)
    first = found_path(cmd[0], given.get("chdir"))
    if looks_like_script(first):
        script = read_script(first, cmd[1:])
        for line in script.ignored:
            click.echo(f"warning: {escape_controls(line)}", err=True)
        for key, value in script.options.items():
            source = ctx.get_parameter_source(key)
            if source is not click.core.ParameterSource.COMMANDLINE:
                opts[key] = value
                from_script[key] = script.origins[key]
        if not opts.get("name"):  # as sbatch names a job after its script (%x fills it)
            opts["name"] = script_name(cmd[0])
        cmd = script.command
    for flag, key, in_script in _REQUIRED:
        if opts.get(key) in (None, ""):
            # a script may give it in its lines too (#SBATCH ones for the budget and GPUs);
            # a command has only the command line
            where = f", or in the script: {in_script}" if cmd is not command_words else ""
            raise click.UsageError(f"{flag}: missing: give it on the command line{where}")
    if opts.get("checkpoint_on_term") and not opts.get("resumable"):
        # stored as asked, but the policy reads it only for resumable work: say so
        click.echo(f"warning: {named('checkpoint_on_term', '--checkpoint-on-term')}: no "
                   "effect without --resumable (work that is not resumable is not requeued "
                   "when preempted: it loses its whole run)", err=True)
    limit = str(opts.get("time_limit") or "").strip()
    if limit:
        opts["time_limit"] = _time_limit(
            limit, named("time_limit", _flag_shown("--time", limit)))
    name = str(opts.get("name") or "")
    if _NOT_IN_A_NAME.search(name) or len(name) > MAX_NAME:  # the API's rule, said in words
        raise click.UsageError(f"{named('name', '--name')}: only letters A-Z a-z, digits and "
                               f". _ + -, at most {MAX_NAME} of them (got {name!r})")
    gpus = _whole(opts, "gpus", named("gpus", "--gpus"))
    warn = _warn_signal(opts.get("signal"), named)
    priority = _whole(opts, "priority", named("priority", "--priority"))
    open_mode = opts.get("open_mode")
    mode = None if open_mode is None else _open_mode(
        str(open_mode), named("open_mode", _flag_shown("--open-mode", str(open_mode))))
    files: dict[str, str] = {}  # --output's and --error's file, as the shell line takes them
    for key, flag in (("output", "--output"), ("error", "--error")):
        if not opts.get(key):
            continue
        where = named(key, flag)
        text = _output_name(str(opts[key]), where)
        if not opts.get("name") and "x" in _FIELD.findall(text):
            raise click.UsageError(f"{where}: %x is the workload's name, and it has none: "
                                   "give --name")
        if not opts.get("array") and "a" in _FIELD.findall(text):
            raise click.UsageError(f"{where}: %a is the index in an array, and it is not "
                                   "one: give --array, or %j for its id")
        # relative to the working directory, which is the submit directory unless --chdir
        # says otherwise (as sbatch): made absolute here, where both are known
        base = Path(str(opts.get("chdir") or ".")).expanduser().absolute()
        files[key] = str(base / text)
    if files:
        cmd = _with_output(cmd, files.get("output"), mode, files.get("error"))
    elif open_mode is not None:
        # as sbatch's, it says how the output files are opened; apportion has none to open
        click.echo(f"warning: {named('open_mode', '--open-mode')}: no effect without "
                   "--output or --error (the output goes to the attempt's own log)", err=True)
    body: dict[str, Any] = {
        "budget": opts["budget"], "gpus": gpus, "min_runtime": opts["min_runtime"],
        "resumable": bool(opts.get("resumable")), "priority": priority,
        "checkpoint_interval": opts.get("checkpoint_interval") or "0", "command": cmd,
        "checkpoint_on_term": bool(opts.get("checkpoint_on_term")),
    }
    body["chdir"] = str(Path(str(opts.get("chdir") or ".")).expanduser().absolute())
    if not _is_utf8(body["chdir"]):
        raise click.UsageError(f"the working directory {_escaped(body['chdir'])}: not "
                               "UTF-8 text, which the server takes (--chdir DIR for another)")
    body["umask"] = _current_umask()  # the work creates files as this shell would (as sbatch)
    try:
        body["env"] = exported_env(str(opts.get("export") or "ALL"), user_environ())
    except click.BadParameter as e:  # named as the other options are: flag or script line
        raise click.UsageError(f"{named('export', '--export')}: {e.message}") from None
    for key in ("name", "time_limit", "array", "cluster"):
        if opts.get(key):
            body[key] = str(opts[key])
    if warn is not None:
        body["signal"] = warn.text
    if opts.get("gpu_kind"):
        body["gpu_kind"] = [k.strip() for k in str(opts["gpu_kind"]).split(",") if k.strip()]
    for key in ("nodelist", "exclude"):
        if opts.get(key):
            body[key] = _host_names(str(opts[key]), named(key, _FLAGS[key]))
    if opts.get("dependency"):
        body["dependency"] = _full_dependency(str(opts["dependency"]),
                                              named("dependency", "--dependency"))
    try:
        # a fresh key, and retries with it if the connection is lost or the server answers
        # 5xx: a submission stored before its answer was lost is answered, not stored twice
        w = client.json("POST", "/workloads", body,
                        headers={"Idempotency-Key": str(uuid.uuid4())}, retry=True)
    except click.ClickException as e:  # name the flag (or script line) as typed
        if e.message.startswith("budget '"):  # the tree's "budget 'x': unknown budget"
            raise reworded(e, f"{named('budget', '--budget')}: {e.message}") from None
        if e.message.startswith("body: must be at most "):  # 413: say what made it large
            raise reworded(e, _body_too_large(e.message, body)) from None
        raise as_typed(e, {f: named(f, typed) for f, typed in _FLAGS.items()}) from None
    row = parse(Workload, w, "POST /v1/workloads")
    ids = row.array_ids or [row.id]
    if as_json and not wait:
        _print_json(w)
    elif parsable:  # the id alone, for a script to keep (afterok: takes an array's id)
        click.echo(row.id)
    elif not as_json:
        what = (f"array {row.id} of {plural(len(ids), 'workload')} ({ids[0]}..{ids[-1]})"
                if row.array_ids else row.id)
        # what was stored, exactly: "1 d 2 h" for 1-2:30 would hide the half hour
        limit = (f", time limit {format_duration_exact(row.time_limit)}" if row.time_limit
                 else "")
        click.echo(f"submitted {what} to {row.budget} ({plural(row.gpus, 'GPU')}, min "
                   f"runtime {format_duration_exact(row.min_runtime)}{limit})")
    if wait:
        try:
            if not as_json:
                sys.exit(wait_for(client, ids, lambda line: click.echo(line, err=parsable)))
            # stdout: one JSON document, the final workload (an array: its elements, a
            # list), with its exit_code and attempts; the changes of state go to stderr
            code = wait_for(client, ids, lambda line: click.echo(line, err=True))
            final = [client.json("GET", f"/workloads/{wid}", patient=True) for wid in ids]
        except ServerRefused as e:
            if e.status != 401:
                raise
            # the token was revoked or expired while waiting: the work was stored and goes
            # on, only the waiting ended (exit 43, no valid token)
            what = f"array {row.id}" if row.array_ids else row.id
            raise reworded(e, f"{what} was accepted and keeps its place in the queue, but "
                              "waiting for it stopped: the token is no longer valid "
                              f"({e.message}); follow it with a valid token: apportion "
                              f"show {row.id}, apportion logs -f {row.id}") from None
        _print_json(final if row.array_ids else final[0])
        sys.exit(code)


_BODY_LIMIT = re.compile(r"body: must be at most (\d+) bytes \(\[server\] max_body_bytes\), "
                         r"got (\d+)(.*)$")


def _body_too_large(message: str, body: dict[str, Any]) -> str:
    """The server's 413 (``body: must be at most N bytes ..., got M (HTTP 413)``) for a
    submission, saying what of it is large: the exported environment (``--export ALL`` by
    default) and the command (a batch script's text among it), in bytes as sent."""
    def size(value: Any) -> int:
        return len(json.dumps(value).encode())

    m = _BODY_LIMIT.match(message)
    said = (f"the submission is {m[2]} bytes, over the server's limit of {m[1]} ([server] "
            "max_body_bytes)") if m else message
    return (f"{said}: of it, the exported environment is {size(body.get('env') or {})} "
            "bytes (--export: ALL of yours by default; --export NONE, or NAME,..., sends "
            f"fewer) and the command {size(body.get('command') or [])} bytes"
            f"{m[3] if m else ''}")


def _refuse_what_is_not_utf8(ctx: click.Context, command: Sequence[str],
                             given: dict[str, Any]) -> None:
    """A usage error for a word of the command (``command.1``, 0 being the program or the
    script) or an option's value that is not UTF-8 text (a file name or an argument in
    Latin-1, say): the server takes text, and sending it failed with a traceback."""
    for i, word in enumerate(command):
        if not _is_utf8(word):
            raise click.UsageError(f"command.{i}: {_escaped(word)}: not UTF-8 text, "
                                   "which the server takes")
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    for key, value in given.items():
        if isinstance(value, str) and not _is_utf8(value):
            raise click.UsageError(f"{flags[key]}: {_escaped(value)}: not UTF-8 text, "
                                   "which the server takes")


def _refuse_empty_values(ctx: click.Context, given: dict[str, Any]) -> None:
    """A usage error for an option given an empty value (``--time ''``), as sbatch refuses
    ``--time=``: it was taken for the option left out, so the work ran with no time limit
    (or its log, or the script's name) without a word."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    for key, value in given.items():
        if value == "":
            raise click.UsageError(f"{flags[key]}: needs a value (it is empty)")


def _is_utf8(text: str) -> bool:
    """Whether ``text`` is UTF-8 text: bytes that are not (in an argument, a file name)
    reach Python as lone surrogates, which cannot be encoded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str) -> str:
    """``text`` with its bytes that are not UTF-8 written as ``\\xe9``, to show in an
    error."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


_FLAGS = {"time_limit": "--time", "min_runtime": "--min-runtime", "array": "--array",
          "dependency": "--dependency", "checkpoint_interval": "--checkpoint-interval",
          "gpus": "--gpus", "budget": "--budget", "name": "--name", "chdir": "--chdir",
          "gpu_kind": "--gpu-kind", "gpu_kinds": "--gpu-kind", "cluster": "--cluster",
          "hosts": "--nodelist/--exclude", "nodelist/exclude": "--nodelist/--exclude",
          "nodelist": "--nodelist", "exclude": "--exclude",
          "priority": "--priority", "env": "--export"}


# what Slurm's --time takes for no time limit (any case): the API's 0, none
_NO_TIME_LIMIT = frozenset({"unlimited", "infinite", "-1"})


def _time_limit(text: str, where: str) -> str:
    """``--time`` as sent to the server, where a bare number is minutes, as Slurm reads it
    (``90`` -> ``90m``), and ``UNLIMITED``, ``INFINITE`` (any case) or ``-1`` is no limit,
    as Slurm reads them (``0``, the API's none; a cap, ``[policy] max_time_limit``, refuses
    it). Slurm takes only whole minutes: a number written otherwise (``90.0``, ``+90``,
    ``1e3``), which the server would read as seconds, and anything that is no duration are
    usage errors naming ``where`` (the flag and value, or the script line), in the CLI's
    terms: minutes, not the API's seconds."""
    if text.lower() in _NO_TIME_LIMIT:
        return "0"
    if text.isascii() and text.isdigit():
        return text + "m"
    if text.isascii() and _is_number(text):
        raise click.UsageError(f"{where}: a bare number is whole minutes, as in Slurm (90); "
                               "or write 90s, 1h30m, HH:MM:SS")
    try:
        parse_duration(text)
    except ClockFieldError as e:  # a clock form, with a field out of its range
        raise click.UsageError(f"{where}: {e}") from None
    except DurationError:
        raise click.UsageError(f"{where}: must be a duration like 2h, 1h30m, 1-00:00:00 or "
                               "HH:MM:SS, or a whole number of minutes as in Slurm (90)"
                               ) from None
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _whole(opts: dict[str, Any], key: str, flag: str) -> int:
    """A whole-number option (a script gives it as text)."""
    try:
        return int(opts.get(key) or 0)
    except ValueError:
        raise click.UsageError(f"{flag}: {opts[key]!r} is not a whole number") from None


def _host_names(text: str, flag: str) -> list[str]:
    """The hosts of a Slurm host list, as sbatch's -w/-x take it (``gpu[1-3,7],cpu1``): the
    server is sent plain names. Not one is a usage error naming ``flag`` (the flag or the
    script line)."""
    try:
        hosts = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as e:
        raise click.UsageError(f"{flag}: not a Slurm host list: {text!r} ({e})") from None
    return [h.strip() for h in hosts if h.strip()]


def _full_dependency(text: str, flag: str) -> str:
    """Long ids in ``afterok:5:6`` -> ``afterok:w-000005:w-000006``. A word that is no
    workload id (``abc``) is a usage error naming ``flag`` (the flag or the script line),
    not a lookup by the server."""
    if "?" in text:  # Slurm's "any of them": the words around it are no ids
        raise click.UsageError(f"{flag}: {text!r}: '?' (Slurm's: when any one of them is "
                               "met) is not read: apportion waits until every dependency is "
                               "met (several separated by ',': afterok:5,afterany:6)")
    parts = []
    for part in text.split(","):
        kind, _, ids = part.partition(":")
        full = [kind]
        for typed in (i for i in ids.split(":") if i):
            wid = workload_id(typed)
            if wid is None:
                raise click.UsageError(f"{flag}: {not_an_id(typed)}")
            full.append(wid)
        parts.append(":".join(full))
    return ",".join(parts)


def wait_for(client: Client, ids: Sequence[str], say: Callable[[str], None],
             poll_s: float = POLL_S) -> int:
    """Follow workloads until all have ended, saying each change of state once. Returns the
    exit code to leave with: the workload's (the largest of an array's); 1 when one ended
    without one of its own (cancelled, preempted, lost, timeout) or failed by a signal."""
    seen: dict[str, str] = {}
    codes: dict[str, int] = {}
    while len(codes) < len(ids):
        for wid in ids:
            if wid in codes:
                continue
            w = client.json("GET", f"/workloads/{wid}", patient=True)  # through an outage
            line = _state_line(w)
            if seen.get(wid) != line:
                seen[wid] = line
                say(f"{wid}: {line}")
            if w["status"] in FINAL:
                code = w["exit_code"]
                ok = w["status"] == "completed"
                # only a failure's code is its own: a stop's (cancel, timeout, ...) signal
                # shows in the code too (Slurm: 143), yet it did not end by itself
                own = w["status"] == "failed" and isinstance(code, int) and code > 0
                codes[wid] = 0 if ok else (code if own else 1)
        if len(codes) < len(ids):
            time.sleep(poll_s)
    return max(codes.values(), default=0)


def _state_line(w: dict[str, Any]) -> str:
    status = str(w["status"])
    if status in ("running", "stopping") and w.get("attempt"):
        hosts = ",".join(f"{h}:{g}" for h, g, _ in w["attempt"]["placement"])
        return f"{status} on {hosts} (attempt {w['attempt']['n']})"
    if status in FINAL:
        reason = w["end_reason"] or status
        code = exit_to_show(reason, w["exit_code"])
        return f"{status} ({reason}{'' if code is None else f', exit {code}'})"
    if status == "pending" and w.get("attempts_count"):
        return f"pending (requeued after attempt {w['attempts_count']})"
    return status


# ---- queue -----------------------------------------------------------------------------------
ACTIVE = ("pending", "running", "stopping")  # the states queue shows and cancel can end
WORKLOADS_PAGE = 100_000  # GET /v1/workloads's largest limit


# Slurm's state codes as squeue and scancel take them (-t PD,R); its names are read in any
# case (PENDING), as Slurm reads them
_SLURM_STATES = {"pd": "pending", "r": "running", "cg": "stopping", "completing": "stopping"}


def active_states(text: str | None, finished: str) -> list[str]:
    """The states ``--state`` names (comma-separated, any case, or Slurm's codes ``PD``,
    ``R``, ``CG``); one that is not active is a usage error naming it, ``finished`` saying
    what to do about finished work instead."""
    typed = [s.strip() for s in (text or "").split(",") if s.strip()]
    wanted = [_SLURM_STATES.get(s.lower(), s.lower()) for s in typed]
    bad = [t for t, s in zip(typed, wanted, strict=True) if s not in ACTIVE]
    if bad:
        raise click.UsageError(f"--state: {bad[0]!r}: must be pending, running or stopping "
                               f"({finished})")
    return list(dict.fromkeys(wanted))


def _me(client: Client) -> str:
    return client.reply(Me, "GET", "/me").name


def _workloads(client: Client, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every workload ``GET /v1/workloads`` lists with these filters, page by page; a
    filter naming no budget or user is refused naming the flag (``--budget: no budget
    'reserch'; did you mean 'research'?``)."""
    try:
        rows, _ = client.pages("/workloads", params, "after", WORKLOADS_PAGE)
    except click.ClickException as e:
        raise as_typed(e, {"budget": "--budget", "user": "--user"}) from None
    return rows


TABLE_ONLY = frozenset({"state", "reason"})
"""Keys of a queue entry that ``queue --json`` leaves out: ``state`` is the workload's
``status``, ``reason`` the table's words for ``wait_reason``/``hold``/``stop_reason``."""


def _named(view: dict[str, Any]) -> bool:
    """Whether a ``GET /v1/queue`` answer carries each entry's ``name`` (a server from
    before it does not: ``queue`` then reads the workloads themselves)."""
    return all("name" in e for e in (*view.get("pending", ()), *view.get("running", ())))


def _in(budget: str | None, user: str | None, w: QueuedSpec) -> bool:
    """Whether ``w`` is in ``budget``'s subtree and ``user``'s, as ``GET /v1/workloads``
    filters (each None: any)."""
    return (user is None or w.user == user) and (
        budget is None or w.budget == budget or w.budget.startswith(budget + "/"))


def queue_entries(client: Client, me: bool, user: str | None, budget: str | None,
                  states: Sequence[str], full: bool = True
                  ) -> tuple[float | None, list[dict[str, Any]]]:
    """The queue as ``squeue`` shows it: pending work in the policy's order, then running
    work. Each entry is the workload (as ``GET /v1/workloads`` gives it) with ``position``
    (None: held or not yet ranked; with several pools, in its ``pool``'s order), ``pool``
    (None with one pool), ``wait_reason``, ``hold`` and ``stop_reason`` (as ``GET
    /v1/queue`` names them), ``elapsed_s``, ``waited_s``, ``protected_s`` (protection
    left; None: unallocated) and ``hosts``; and for the table only (:data:`TABLE_ONLY`)
    ``state`` and ``reason``, the REASON column's text.

    ``full`` False (the table): each entry is the queue view's own (with ``name``, all the
    table shows), from the one ``GET /v1/queue``, not the workload's whole row (pages of
    ``GET /v1/workloads``: seconds with thousands of active workloads); a filter is still
    checked by the server (one row asked for), which names a budget or user that does not
    exist. From a server whose view has no ``name``, the rows are read as with ``full``."""
    raw = client.json("GET", "/queue")
    view = parse(QueueView, raw, "GET /v1/queue")
    rows: dict[str, dict[str, Any]] | None = None
    if full or not _named(raw):
        rows = {w["id"]: w for w in _workloads(client, {"budget": budget, "user": user})}
    elif budget is not None or user is not None:  # a typo is an error, not an empty queue
        try:
            client.call("GET", "/workloads", params={"budget": budget, "user": user,
                                                     "limit": 1})
        except click.ClickException as e:
            raise as_typed(e, {"budget": "--budget", "user": "--user"}) from None
    who = _me(client) if me else None
    now = view.now
    out: list[dict[str, Any]] = []

    def row(e: QueuedSpec) -> dict[str, Any] | None:
        if rows is not None:
            return rows.get(e.id)
        return e.model_dump() if _in(budget, user, e) else None

    def keep(e: QueuedSpec, state: str) -> dict[str, Any] | None:
        w = row(e)
        if w is not None and (who is None or w["user"] == who) and (
                not states or state in states):
            return w
        return None

    for p in view.pending:
        w = keep(p, "pending")
        if w is None:
            continue
        reason = p.hold or (
            f"executor unreachable since {fmt_time(view.executor_down_since)}"
            if view.executor_down_since is not None  # nothing starts: the reason that holds
            else _too_large(p, view.hosts) if p.wait_reason == "too_large"
            else REASONS.get(p.wait_reason or "", "not reached yet"))
        if p.retry_at is not None:  # set aside after a failed launch
            reason += f", next try at {fmt_time(p.retry_at)}"
        out.append({**w, "position": p.position, "pool": p.pool,
                    "wait_reason": p.wait_reason, "hold": p.hold, "stop_reason": None,
                    "state": "pending", "reason": reason, "elapsed_s": None,
                    "protected_s": None, "hosts": [],
                    "waited_s": None if now is None else now - p.queued_at})
    draining = {h.name for h in view.hosts if h.state == "draining"}
    for r in view.running:
        state = "stopping" if r.stopping else "running"
        w = keep(r, state)
        if w is None:
            continue
        left = None
        if w["min_runtime"] and now is not None:
            left = max(0.0, r.protected_until - now)
        why = r.stop_reason
        if not r.stopping and any(h in draining for h, _, _ in r.placement):
            why = "host draining: stopped when its minimum runtime ends"
        out.append({**w, "position": None, "pool": r.pool, "wait_reason": None, "hold": None,
                    "stop_reason": r.stop_reason, "state": state, "reason": why,
                    "elapsed_s": None if now is None else now - r.started_at,
                    "waited_s": None, "protected_s": left,
                    "hosts": [f"{h}:{g}" for h, g, _ in r.placement]})
    return now, out


def _too_large(p: QueuedPending, hosts: Sequence[QueueHost]) -> str:
    """``too_large`` said of the pools it may use when there are several (a kind with no
    healthy host is not "too large for the cluster" while other kinds have room): each
    one's healthy GPUs, ``(east/B200: 0 healthy, west/B200: 8 healthy)``."""
    if not any(h.pool for h in hosts):  # one pool
        return REASONS["too_large"]
    healthy: dict[str, int] = {}
    for h in hosts:
        if h.pool and (not p.gpu_kinds or h.kind in p.gpu_kinds) and (
                not p.cluster or h.cluster == p.cluster):
            healthy[h.pool] = healthy.get(h.pool, 0) + (h.gpus if h.state == "healthy" else 0)
    counts = ", ".join(f"{pool}: {n} healthy" for pool, n in sorted(healthy.items()))
    return f"more GPUs than the healthy hosts it may use hold ({counts})"


def queue_rows(entries: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The table's cells of :func:`queue_entries` (a POOL after BUDGET with several pools,
    as :func:`queue_headers`)."""
    several = _several_pools(entries)
    def dur(seconds: float | None) -> str:
        return "-" if seconds is None else format_duration(seconds)

    out = []
    for e in entries:
        if e["state"] == "pending":
            where = f"({e['reason']}; waited {dur(e['waited_s'])})"
            protected = "-"
        else:
            where = ",".join(e["hosts"]) or "-"
            if e["reason"]:  # why it is stopping, or that a drain will stop it
                where += f" ({e['reason']})"
            protected = ("none" if not e["min_runtime"] else
                         dur(e["protected_s"]) if e["protected_s"] else "-")
        out.append([str(e["position"] or "-"), e["id"], e["name"] or "-", e["user"],
                    e["budget"], *([e["pool"] or "-"] if several else []), e["state"],
                    str(e["gpus"]), dur(e["elapsed_s"]), protected, _limit(e), where])
    return out


def queue_headers(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The queue's column names: POOL only with several pools, where POS counts in it."""
    if not _several_pools(entries):
        return QUEUE_HEADERS
    at = QUEUE_HEADERS.index("BUDGET") + 1
    return [*QUEUE_HEADERS[:at], "POOL", *QUEUE_HEADERS[at:]]


def _several_pools(entries: Sequence[dict[str, Any]]) -> bool:
    return any(e["pool"] for e in entries)


def _limit(w: dict[str, Any]) -> str:
    """The time limit as given (exact: a limit is typed in round units, so it stays short),
    where the counting columns beside it are shortened to two units."""
    return format_duration_exact(w["time_limit"]) if w.get("time_limit") else "-"


QUEUE_HEADERS = ["POS", "ID", "NAME", "USER", "BUDGET", "STATE", "GPUS", "ELAPSED",
                 "PROTECTED", "LIMIT", "HOSTS (REASON)"]


@click.command()
@click.option("--me", is_flag=True, help="only my workloads")
@click.option("--user", "-u", default=None, help="only this user's workloads")
@click.option("--budget", default=None, help="only this budget node's subtree")
@click.option("--state", "--states", "-t", "states", default=None,
              help="only these states, comma-separated: pending,running,stopping (any "
                   "case; Slurm's PD,R,CG too)")
@click.option("--watch", type=FiniteFloatRange(min=0, min_open=True, max=86400), default=None,
              metavar="SECONDS",
              help="refresh every SECONDS (at most a day) until interrupted (Ctrl-C)")
@json_option
@connection
def queue(client: Client, me: bool, user: str | None, budget: str | None,
          states: str | None, watch: float | None, as_json: bool) -> None:
    """The queue as the policy orders it, like squeue: POS is the place in the policy's
    order (held work has none; with several pools, in the order of its POOL, the first it
    waits in), PROTECTED how long no rebalance may preempt it yet (its
    minimum runtime, and for a run resumed after a requeue its restart protection)."""
    wanted = active_states(states, "finished work: apportion show ID")
    if as_json:  # the API's names only: its status, and its codes for the reasons
        _print_json([{k: v for k, v in e.items() if k not in TABLE_ONLY}
                     for e in queue_entries(client, me, user, budget, wanted)[1]])
        return
    if watch is None:
        _print_queue(queue_entries(client, me, user, budget, wanted, full=False)[1])
        return
    try:
        while True:
            now, entries = queue_entries(client, me, user, budget, wanted, full=False)
            click.clear()
            click.echo(f"every {watch:g} s: apportion queue    {fmt_time(now)}")
            _print_queue(entries)
            time.sleep(watch)
    except KeyboardInterrupt:
        pass


def _print_queue(entries: Sequence[dict[str, Any]]) -> None:
    if not entries:
        click.echo("no active workloads")
        return
    table(queue_headers(entries), queue_rows(entries))


# ---- order -----------------------------------------------------------------------------------
@click.command()
@json_option
@connection
def order(client: Client, as_json: bool) -> None:
    """The Fair Tree order, like sshare/sprio: at every level the sibling with the lower
    usage ratio first (ties by name), depth-first, with each node's share, charged
    GPU-hours in the window, usage ratio and pending work. Ratios are counted when asked
    (the order the next pass starts from); within a pass each admission raises its
    budget's ratio."""
    view = client.reply(QueueView, "GET", "/queue")
    nodes = {b.path: b for b in view.budgets}
    pending: dict[str, int] = {}
    first: dict[str, int] = {}
    for p in view.pending:
        for node in _ancestors(p.budget):
            pending[node] = pending.get(node, 0) + 1
            if p.position is not None and node not in first:
                first[node] = p.position
    kids: dict[str, list[str]] = {}
    for path in nodes:
        kids.setdefault(path.rpartition("/")[0], []).append(path)
    out: list[dict[str, Any]] = []

    def walk(parent: str, depth: int) -> None:
        ranked = sorted(kids.get(parent, []), key=lambda n: (nodes[n].usage_ratio or 0.0, n))
        for rank, path in enumerate(ranked, 1):
            out.append({**nodes[path].model_dump(), "depth": depth, "rank": rank,
                        "pending": pending.get(path, 0), "first_position": first.get(path)})
            walk(path, depth + 1)

    walk("", 0)
    if as_json:
        _print_json(out)
        return
    # charged hours as the ratio counts them: billed units where GPU kinds are billed
    table(["BUDGET", "RANK", "SHARE", "CHARGED_H", "RATIO", "PENDING", "FIRST_POS"],
          [["  " * b["depth"] + b["path"].rsplit("/", 1)[-1], b["rank"],
            f"{format_figure(100 * b['share'])}%", format_figure(b["charged_gpu_s"] / 3600),
            "-" if b["usage_ratio"] is None else f"{b['usage_ratio']:.2f}", b["pending"],
            b["first_position"] or "-"] for b in out])


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# ---- cancel ----------------------------------------------------------------------------------
@click.command()
@click.argument("ids", nargs=-1, type=WORKLOAD_ID)
@click.option("--me", is_flag=True, help="every active workload of mine (--user ME)")
@click.option("--user", "-u", default=None, help="every active workload of this user")
@click.option("--budget", default=None, help="every active workload in this budget's subtree")
@click.option("--state", "-t", "states", default=None,
              help="with --me/--user/--budget/--array: only these states, comma-separated: "
                   "pending,running,stopping (any case; Slurm's PD,R,CG too)")
@click.option("--array", "array", type=WORKLOAD_ID, default=None,
              help="every element of this array (its id: the first element's)")
@click.option("--json", "as_json", is_flag=True,
              help='print the server\'s answer as one JSON document: {"workloads": [{id, '
                   'result, status, detail}, ...]}')
@connection
def cancel(client: Client, ids: tuple[str, ...], me: bool, user: str | None,
           budget: str | None, states: str | None, array: str | None,
           as_json: bool) -> None:
    """Cancel workloads: by id (many, short or long), or all matching --me, --user,
    --budget, --array (and --state). A running one is stopped by the scheduler. The server
    cancels them all in one request (ids: up to 10,000 a request), the pending ones
    first."""
    # refused before anything is asked: finished work cannot be cancelled
    wanted = active_states(states, "finished work cannot be cancelled")
    if me:
        if user is not None:
            raise click.UsageError("--me and --user: give one of them")
        user = _me(client)
    given = list(dict.fromkeys(ids))  # each once, in order: "cancel 40 w-40" is one
    filtered = bool(user or budget or array)
    if states and not filtered:
        raise click.UsageError("--state: only with --me, --user, --budget or --array")
    if not given and not filtered:
        raise click.UsageError("give workload ids, or --me, --user, --budget or --array")
    outcomes = [o for i in range(0, len(given), MAX_CANCEL_IDS)
                for o in _cancel(client, {"ids": given[i : i + MAX_CANCEL_IDS]})]
    if filtered:
        body = {"user": user, "budget": budget, "array": array, "status": wanted or None}
        matched = _cancel(client, {k: v for k, v in body.items() if v is not None})
        outcomes += [o for o in matched if o.id not in given]  # each said once
    if as_json:  # the answers of every request as one: stdout holds one JSON document
        _print_json({"workloads": [o.model_dump(mode="json") for o in outcomes]})
    elif not outcomes:
        click.echo("nothing to cancel")
    failed: list[CancelOutcome] = []
    for o in outcomes:
        if o.result in _CANCEL_REFUSED:  # the others were cancelled all the same
            failed.append(o)
            click.echo(f"{o.id}: {o.detail}", err=True)
        elif not as_json:
            click.echo(_cancel_line(o))
    if failed:
        # the exit code of the single cancel's refusal, if all failed alike; else 1
        codes = {exit_code_for(_CANCEL_REFUSED[o.result]) for o in failed}
        raise Failure(f"{len(failed)} of {plural(len(outcomes), 'workload')} not cancelled",
                      codes.pop() if len(codes) == 1 else EXIT_FAILED)


# a bulk cancel's result that refuses a workload: the single cancel's refusal
_CANCEL_REFUSED = {"not_found": 404, "not_allowed": 403}


def _cancel_line(o: CancelOutcome) -> str:
    """What ``cancel`` says on stdout of a workload it did not fail on."""
    if o.result == "cancelled":
        return f"cancelled {o.id}"
    if o.result == "cancel_requested":
        return f"cancel requested for {o.id} ({o.status}); the scheduler stops it"
    # ended: nothing left to cancel, not a failure, as a filter leaves ended work out and
    # the API calls the retry safe (a cancel sent again after a timeout lands here)
    return f"{o.id}: already {o.status}"


def _cancel(client: Client, body: dict[str, Any]) -> list[CancelOutcome]:
    """``POST /v1/workloads/cancel``: each workload's outcome. A refused filter names the
    flag as typed (``--budget: budget reserch: not found; did you mean research?``)."""
    try:
        # as long as the server takes: a filter may match tens of thousands
        r = client.call("POST", "/workloads/cancel", body, timeout=None)
    except click.ClickException as e:
        raise as_typed(e, {"budget": "--budget", "user": "--user", "array": "--array",
                           "status": "--state"}) from None
    return parse(BulkCancel, r.json(), "POST /v1/workloads/cancel").workloads


# ---- logs ------------------------------------------------------------------------------------
@click.command()
@click.argument("workload_id", type=WORKLOAD_ID)
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="attempt number (default: latest)")
@click.option("--tail", type=click.IntRange(min=0), default=0, help="only the last N bytes")
@click.option("--follow", "-f", is_flag=True,
              help="print lines as they are written, until the workload ends")
@connection
def logs(client: Client, workload_id: str, attempt: int | None, tail: int,
         follow: bool) -> None:
    """Print the output of a workload's attempt, byte for byte as written (one submitted
    with --output writes it to that file instead: an empty log says where; one submitted
    with --error its stderr to that file: stderr says where)."""
    if not follow:
        printed = _print_log(client, workload_id, attempt, tail=tail) > 0
    else:
        printed = follow_logs(client, workload_id, attempt)
    _say_where_output_goes(client, workload_id, printed)


def _say_where_output_goes(client: Client, wid: str, printed: bool) -> None:
    """Tell, on stderr, where the output of a workload submitted with --output went (when
    its log printed nothing), and where its stderr went if --error sent it elsewhere. Once
    the log is printed this is a hint only: a workload the server cannot answer then (an
    older server, an outage) leaves the command done, not failed."""
    try:
        w = client.json("GET", f"/workloads/{wid}")
    except click.ClickException:
        if printed:
            return
        raise
    out, err = _output_files(w)
    to_err = "" if err is None else f"its stderr to {escape_controls(err)} (--error)"
    if out is not None and not printed:
        click.echo(f"{wid}: its log is empty: it writes its output to "
                   f"{escape_controls(out)} (--output)" + (f", {to_err}" if to_err else ""),
                   err=True)
    elif to_err:
        click.echo(f"{wid}: it writes {to_err}", err=True)


def follow_logs(client: Client, wid: str, attempt: int | None,
                poll_s: float = POLL_S) -> bool:
    """Print an attempt's output as it grows; without ``attempt`` follow the latest one
    (a requeued workload's next attempt too). Ends once the workload has ended and all of
    its output was printed; returns whether any was."""
    offset, current, printed = 0, attempt, False
    while True:
        w = client.json("GET", f"/workloads/{wid}", patient=True)  # through an outage
        done = w["status"] in FINAL
        latest = w["attempts"][-1]["n"] if w["attempts"] else None
        if attempt is None and latest is not None and latest != current:
            if current is not None:
                printed = _drain(client, wid, current, offset) > 0 or printed  # its rest
                click.echo(f"--- attempt {latest} ---", err=True)
            current, offset = latest, 0
        if current is not None:
            offset = _drain(client, wid, current, offset)
            printed = offset > 0 or printed
        if done:
            return printed
        time.sleep(poll_s)


def _drain(client: Client, wid: str, n: int, offset: int) -> int:
    """Print attempt ``n``'s output from ``offset``; returns the new offset."""
    try:
        return _print_log(client, wid, n, offset=offset, patient=True)  # -f: through an outage
    except click.ClickException as e:
        if "no log file yet" in e.message:
            return offset
        raise


def _print_log(client: Client, wid: str, attempt: int | None, offset: int = 0,
               tail: int = 0, patient: bool = False) -> int:
    """Print an attempt's output (the latest without ``attempt``) from ``offset``, or its last
    ``tail`` bytes, up to where the log ended when first asked. The server answers a
    bounded piece at a time, each printed before the next is asked for: a long log is never
    held whole. A log now shorter than ``offset`` was truncated (``truncate -s 0`` by the
    job): that is said on stderr and it is printed from its start, as ``tail -f`` does.
    Returns the offset after what was printed."""
    r = client.call("GET", f"/workloads/{wid}/logs", patient=patient,
                    params={"attempt": attempt, "tail": tail or None, "offset": offset or None})
    n = _log_position(r, "X-Log-Attempt")
    # a server older than X-Log-Size answers the whole log at once: it ends where that does
    end = _log_position(r, "X-Log-Size" if "X-Log-Size" in r.headers else "X-Log-Offset")
    if end < offset:
        click.echo("log truncated: following from its start", err=True)
        return _print_log(client, wid, n, patient=patient)
    while True:
        click.echo(r.content, nl=False)  # bytes: a character split between answers stays whole
        offset = _log_position(r, "X-Log-Offset")
        if offset >= end or not r.content:
            return offset
        # the same attempt's rest, even if the workload was requeued meanwhile
        r = client.call("GET", f"/workloads/{wid}/logs", params={"attempt": n, "offset": offset},
                        patient=patient)


def _log_position(r: httpx.Response, header: str) -> int:
    """The number a logs answer gives in ``header``; an answer without it is an error that
    says so, not a traceback."""
    value = r.headers.get(header)
    if value is not None and value.isascii() and value.isdigit():
        return int(value)
    what = f"no {header} header" if value is None else f"{header}: {value!r}"
    raise UnexpectedReply(f"GET {r.url.path}", what)


__all__ = ["cancel", "logs", "order", "queue", "read_script", "submit", "wait_for"]

