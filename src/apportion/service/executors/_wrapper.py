"""Runs one attempt's command for the local executor and leaves a durable record of it.

``python -m apportion.service.executors._wrapper SPEC``, where ``SPEC`` is the attempt's
``<run>/<workload>.<attempt>.spec`` (JSON, written by the executor, readable by the server
only). The wrapper runs as the server's user (root in production) for the whole attempt,
so the run and exit files it writes cannot be forged by the job, which runs as its owner:

1. Claims ``<workload>.<attempt>.run`` (created atomically, only if absent) with its own
   ``pid:starttime`` handle *before* the command starts. If the file exists already, the
   attempt was declared void (stopped before its wrapper claimed it, or found never
   started after a crash): nothing runs, and whoever voided it removes its cgroups. A
   SIGTERM after the claim but before the fork ends it as never started, the cgroups
   removed here.
   The exit record (4.) is written only while this run file still names the wrapper: one
   set aside as another timeline's (``local.py``) leaves that name to another attempt.
2. Becomes a child subreaper (orphans of the job are re-parented to it, not to init), then
   forks the command: it joins the attempt's cgroups, starts a session of its own, drops to
   the owner's groups, gid and uid, enters its directory and execs with exactly the
   environment of the spec. If any of that fails, the reason comes back through a
   close-on-exec pipe ("chdir /x: Permission denied", "command not found: foo") and is
   written to the exit file as ``refused``: the attempt ends and is never retried.
3. Forwards SIGTERM to every process of the job (the scheduler's stop goes through here),
   and enforces the stop's kill deadline itself: the executor writes it (a wall-clock
   time, ``kill_at``) to ``<workload>.<attempt>.stop`` before it sends the SIGTERM, and at
   that time the wrapper SIGKILLs every process of the job (its cgroup's and all below
   this subreaper), whether or not the server is up to send its own SIGKILL (an outage
   during the grace period is not the job's to pay for). Each SIGTERM reads the file
   again; the earliest deadline read holds, so a stop sent again (by a restarted server,
   with what is left of the grace) never puts the kill later. A SIGTERM with no stop file
   of this wrapper's (anyone else's) only forwards, as before.
4. When the command exits, kills every process it left (through its cgroup, or as the
   descendants of this subreaper without cgroups), waits until none lives, removes the
   cgroups and the attempt's private TMPDIR (``_tmpdir.py``: what cannot be removed is said
   in the log and the record's ``tmp_left``), and only then writes
   ``<workload>.<attempt>.exit`` with the exit code (negative: killed by that signal), the
   exit time and its own handle: until then the attempt holds its GPUs. A write that fails
   (a full or read-only disk) is tried again every few seconds for as long as it takes,
   the wrapper living on meanwhile, so the server sees the attempt running, then reads its
   real exit code and exit time, never a vanished attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from apportion.service.executors import _cgroup, _tmpdir
from apportion.service.executors._procfs import (
    create_json_exclusive,
    descendants,
    handle_of,
    read_json,
    signal_below,
    write_json_atomic,
)
from apportion.text import escape_controls

PR_SET_CHILD_SUBREAPER = 36
CHILD_UMASK = 0o022  # the server itself runs with 077; jobs get the usual default
EXIT_RETRY_FIRST_S = 0.5  # a failed write of the exit record is tried again after this,
EXIT_RETRY_MAX_S = 5.0  # doubling up to this


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: _wrapper SPEC", file=sys.stderr)
        return 2
    spec_path = Path(argv[0])
    with open(spec_path) as f:
        spec: dict[str, Any] = json.load(f)
    base = spec_path.with_suffix("")
    workload, attempt = str(spec["workload"]), int(spec["attempt"])
    cgroups: list[str] = list(spec.get("cgroups") or [])
    state: dict[str, Any] = {"term": False, "forwarded": False, "child": None,
                             "kill_at": None}
    me = os.getpid()
    handle = handle_of(me)
    stop_file = base.with_name(base.name + ".stop")

    def signal_job(sig: int) -> None:
        # once to each process of the job (its cgroup's, and all below this subreaper),
        # the command itself first: a shell that traps the signal hears it before the
        # children it waits for end
        child = state["child"]
        rest = (_cgroup.procs(cgroups) | set(descendants(me))) - {child}
        for pid in [child, *sorted(rest)] if isinstance(child, int) else sorted(rest):
            signal_below(pid, sig, me)  # never a pid the job freed and another now has

    def kill_job() -> None:
        # as the executor's kill: the cgroup at once (nothing forks past it), then every
        # process of the job by pid; once the command's process dies, _clean_up does the rest
        if cgroups:
            _cgroup.kill(cgroups)
        signal_job(signal.SIGKILL)

    def enforce_deadline() -> None:
        # kill now if the stop's deadline has passed, else be woken at it (SIGALRM)
        kill_at = state["kill_at"]
        if kill_at is None:
            return
        left = kill_at - time.time()
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        try:
            kill_job()
        except Exception as e:  # noqa: BLE001 - as on_term's: the executor kills too
            print(f"apportion: killing the job at the stop's deadline: {e}",
                  file=sys.stderr, flush=True)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        enforce_deadline()

    def on_term(signum: int, frame: FrameType | None) -> None:
        state["term"] = True
        stop = read_json(stop_file) or {}
        kill_at = stop.get("kill_at")
        if stop.get("handle") == handle and isinstance(kill_at, int | float):
            # the earliest deadline holds: a stop sent again never extends it
            state["kill_at"] = (kill_at if state["kill_at"] is None
                                else min(state["kill_at"], kill_at))
        if state["child"] is not None and not state["forwarded"]:
            state["forwarded"] = True
            try:
                signal_job(signal.SIGTERM)
            except Exception as e:  # noqa: BLE001 - raised here, it would leave the wait
                # below unfinished and the attempt with no exit record; the executor's
                # kill after the grace reaches every process of the job anyway
                print(f"apportion: forwarding SIGTERM: {e}", file=sys.stderr, flush=True)
        if state["child"] is not None:
            enforce_deadline()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    started_at = time.time()
    info: dict[str, Any] = {
        "handle": handle,
        "pid": me,
        "db_id": spec.get("db_id"),
        "workload": workload,
        "attempt": attempt,
        "started_at": started_at,
        "child_pgid": None,
        "cgroups": cgroups,
    }
    run_file = base.with_name(base.name + ".run")
    if not create_json_exclusive(run_file, info):
        print(f"apportion: {workload} attempt {attempt}: voided, not started", file=sys.stderr)
        return 0

    def finish(code: int, signalled: bool, refused: str | None = None) -> int:
        if (read_json(run_file) or {}).get("handle") != handle:
            # set aside: the attempt's name is another one's now, and so is its exit record
            print(f"apportion: {workload} attempt {attempt}: set aside, no exit record "
                  "written", file=sys.stderr, flush=True)
            return 0
        # nothing of the job lives now: its TMPDIR can go, links in it never followed
        tmp = spec.get("tmp")
        tmp_left = _tmpdir.remove(Path(tmp[0]), str(tmp[1])) if tmp else None
        if tmp_left is not None:
            _say(f"apportion: the private TMPDIR was not removed whole: {tmp_left}")
        _write_exit(
            base.with_name(base.name + ".exit"),
            {"exit_code": code, "signalled": signalled, "ended_at": time.time(),
             "started_at": started_at, "handle": handle, "db_id": spec.get("db_id"),
             "refused": refused, "log_full": _log_full(), "tmp_left": tmp_left},
        )
        return 0

    if state["term"]:  # stopped before the command started: its cgroups are ours now
        _cgroup.remove(cgroups)
        return finish(-signal.SIGTERM, True)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for d in cgroups:
        Path(d).mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()  # close-on-exec: EOF means the exec happened
    pid = os.fork()
    if pid == 0:  # the job: nothing here may return into the wrapper's code
        try:
            os.close(r)
            _become_job(spec, cgroups, w)
        finally:
            os._exit(127)
    os.close(w)
    info["child_pgid"] = pid  # it leads a session (and process group) of its own
    try:
        write_json_atomic(run_file, info)
    except OSError as e:  # a full or read-only disk: the job runs on, watched by us (an
        # executor started later finds its processes below this subreaper all the same)
        _say(f"apportion: cannot record the job's process group: {e}")
    with os.fdopen(r, "rb") as pipe:
        err = pipe.read()
    if err:
        _, status = os.waitpid(pid, 0)
        reason = err.decode("utf-8", "replace")
        print(f"apportion: {workload} attempt {attempt}: not started: {reason}",
              file=sys.stderr, flush=True)
        _clean_up(cgroups, me)
        return finish(127, False, reason)
    state["child"] = pid  # signals go to it from now on: it runs the command, not our code
    if state["term"] and not state["forwarded"]:
        state["forwarded"] = True
        signal_job(signal.SIGTERM)  # the TERM arrived while the child was being started
    enforce_deadline()  # the TERM's deadline, if one came before the child was known
    rc = _wait_for(pid)
    signal.setitimer(signal.ITIMER_REAL, 0)  # reaped: its pid may be another's from now
    state["child"] = None
    _clean_up(cgroups, me)
    return finish(rc, rc < 0 or bool(state["term"]))


def _write_exit(path: Path, record: dict[str, Any]) -> None:
    """Write the exit record, however long it takes (the disk full or read-only): until it
    exists the wrapper lives on, so the attempt keeps its GPUs and is seen running, and the
    server then reads the real exit code and time (``record``'s, taken before the first
    try), not an attempt that vanished."""
    delay = EXIT_RETRY_FIRST_S
    failing_since: float | None = None
    while True:
        try:
            write_json_atomic(path, record)
        except OSError as e:
            if failing_since is None:
                failing_since = time.monotonic()
                _say(f"apportion: cannot write the exit record ({e}); trying again every "
                     f"{EXIT_RETRY_MAX_S:g} s at most")
            time.sleep(delay)
            delay = min(EXIT_RETRY_MAX_S, 2 * delay)
            continue
        if failing_since is not None:
            _say(f"apportion: exit record written, "
                 f"{time.monotonic() - failing_since:.0f} s after the first try")
        return


def _log_full() -> bool:
    """True if the file system of the attempt's log (our stdout) has no room left: the
    job's output may have been cut short (ENOSPC), and no line of ours can say so there."""
    try:
        return os.fstatvfs(1).f_bavail == 0
    except OSError:
        return False


def _say(line: str) -> None:
    """One line to the attempt's log, which may be on the failing disk too."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def _become_job(spec: dict[str, Any], cgroups: list[str], errpipe: int) -> None:
    """In the forked child: join, drop, enter, exec. On failure, say why on ``errpipe``."""
    argv: list[str] = list(spec["argv"])
    env: dict[str, str] = dict(spec["env"])
    stage = "cgroup"
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGPIPE, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        _cgroup.join(cgroups, os.getpid())
        stage = "session"
        os.setsid()
        acct = spec.get("account")
        if acct is not None:
            stage = "account"
            os.setgroups(list(acct["groups"]))
            os.setresgid(acct["gid"], acct["gid"], acct["gid"])
            os.setresuid(acct["uid"], acct["uid"], acct["uid"])
        os.umask(spec.get("umask", CHILD_UMASK))  # the submitter's (a spec before it: 022)
        stage = "chdir"
        os.chdir(spec.get("chdir") or "/")
        stage = "exec"
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        os.write(errpipe, _reason(stage, e, spec).encode("utf-8", "replace"))
    except BaseException as e:  # never fall back into the wrapper's code in the child
        os.write(errpipe, f"cannot start: {e}".encode("utf-8", "replace"))


def _reason(stage: str, e: OSError, spec: dict[str, Any]) -> str:
    import errno

    what = e.strerror or str(e)
    # the owner's text, shown to admins in `show` and `why`: no terminal escapes
    cmd = escape_controls(spec["argv"][0])
    if stage == "chdir":
        return f"chdir {escape_controls(spec.get('chdir') or '/')}: {what}"
    if stage == "exec":
        if e.errno == errno.ENOENT:
            return f"command not found: {cmd}"
        # a bare name's search takes EACCES over ENOENT, so a directory of PATH this
        # account cannot search (the submitter's, exported) made a command that is nowhere
        # "permission denied"; as a shell, say "not found" unless a file of that name is seen
        if e.errno == errno.EACCES and not _on_path(spec["argv"][0], spec["env"]):
            return f"command not found: {cmd}"
        if e.errno == errno.EACCES:
            return f"permission denied: {cmd}"
        if e.errno == errno.E2BIG:
            return "argument list too long"
        return f"cannot run {cmd}: {what}"
    if stage == "account":
        return f"cannot switch to account uid {spec['account']['uid']}: {what}"
    return f"{stage}: {what}"


def _on_path(name: str, env: dict[str, str]) -> bool:
    """Whether ``name`` is a path, or a file of that name is seen (by this process's
    account) in a directory of ``env``'s ``PATH``, as ``execvpe`` searches it."""
    if "/" in name:
        return True
    dirs = env.get("PATH", os.defpath).split(os.pathsep)
    return any(os.path.exists(os.path.join(d or ".", name)) for d in dirs)


def _wait_for(pid: int) -> int:
    """Reap children (adopted orphans too) until ``pid`` exits; its exit code."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return -signal.SIGKILL  # cannot happen: pid is our child until we reap it
        if got == pid:
            return os.waitstatus_to_exitcode(status)


def _clean_up(cgroups: list[str], me: int) -> None:
    """Kill and reap every process the job left, until none lives; remove its cgroups."""
    while True:
        if cgroups:
            _cgroup.kill(cgroups)
        for pid in descendants(me):
            signal_below(pid, signal.SIGKILL, me)
        reaped = _reap_all()
        if not (cgroups and _cgroup.procs(cgroups)) and not descendants(me) and reaped:
            break
        time.sleep(0.01)
    _cgroup.remove(cgroups)


def _reap_all() -> bool:
    """Reap what has exited; True when no child is left."""
    while True:
        try:
            got, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if got == 0:
            return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
