"""Runs one attempt's command for the local executor and leaves a durable record of it.

``python -m apportion.service.executors._wrapper RUN_DIR WORKLOAD ATTEMPT -- COMMAND...``

1. Claims ``RUN_DIR/WORKLOAD.ATTEMPT.run`` (created atomically, only if absent) with its own
   ``pid:starttime`` handle *before* the command starts. If the file exists already, the
   scheduler declared this attempt void while reconciling after a crash: nothing runs.
2. Starts the command as a child in its own process group and records that group.
3. Forwards SIGTERM to the child's group (the scheduler's stop goes through here).
4. When the child exits, kills what it left behind in its group and writes
   ``WORKLOAD.ATTEMPT.exit`` with the exit code (negative: killed by that signal) and the
   exit time, so an exit is observed with its real code and time even if the server was
   down when it happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from apportion.service.executors._procfs import (
    create_json_exclusive,
    handle_of,
    write_json_atomic,
)


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: _wrapper RUN_DIR WORKLOAD ATTEMPT -- COMMAND...", file=sys.stderr)
        return 2
    run_dir, workload, attempt, cmd = Path(argv[0]), argv[1], int(argv[2]), argv[4:]
    state: dict[str, object] = {"term": False, "forwarded": False, "child": None}

    def forward() -> None:
        child = state["child"]
        if isinstance(child, subprocess.Popen) and not state["forwarded"]:
            state["forwarded"] = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        state["term"] = True
        forward()

    signal.signal(signal.SIGTERM, on_term)
    base = run_dir / f"{workload}.{attempt}"
    started_at = time.time()
    info: dict[str, object] = {
        "handle": handle_of(os.getpid()),
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "workload": workload,
        "attempt": attempt,
        "started_at": started_at,
        "child_pgid": None,
    }
    run_file = base.with_name(base.name + ".run")
    if not create_json_exclusive(run_file, info):
        print(f"apportion: {workload} attempt {attempt}: voided, not started", file=sys.stderr)
        return 0

    def finish(code: int, signalled: bool) -> int:
        write_json_atomic(
            base.with_name(base.name + ".exit"),
            {"exit_code": code, "signalled": signalled, "ended_at": time.time(),
             "started_at": started_at},
        )
        return 0

    if state["term"]:
        return finish(-signal.SIGTERM, True)
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        print(f"apportion: cannot start {cmd[0]!r}: {e}", file=sys.stderr, flush=True)
        return finish(127, False)
    state["child"] = child
    info["child_pgid"] = child.pid
    write_json_atomic(run_file, info)
    if state["term"]:
        forward()  # the TERM arrived while the child was being started
    rc = child.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)  # whatever the command left running
    return finish(rc, rc < 0 or bool(state["term"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
