"""Runs attempts as real process groups on this machine.

Each attempt runs under a small wrapper (``_wrapper.py``) started in its own session: the
wrapper claims a run file in ``run_dir`` *before* the command starts, runs the command as a
child in a process group of its own, forwards SIGTERM to that group, and writes an exit file
with the real exit code and time. The handle is the wrapper's ``pid:starttime``, so a pid
recycled by the kernel is never mistaken for the attempt. Because everything needed to
observe an attempt lives in ``run_dir`` and /proc, a new executor (after a server restart)
observes attempts launched by an old one, including ones that ended while the server was
down.

"Hosts" are names for slices of this machine's GPUs: CUDA_VISIBLE_DEVICES lists the GPU
indexes the scheduler assigned.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from apportion.service.executor import AttemptState, InventoryHost, Launch, Observation
from apportion.service.executors import _procfs

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")


class LocalExecutor:
    """The ``local`` executor: ``hosts`` as configured, logs under ``logs_dir``, durable
    per-attempt records under ``run_dir``."""

    name = "local"

    def __init__(
        self,
        hosts: Iterable[InventoryHost | tuple[str, int]],
        logs_dir: str | os.PathLike[str],
        run_dir: str | os.PathLike[str],
        python: str = sys.executable,
    ) -> None:
        self._hosts: dict[str, InventoryHost] = {}
        for h in hosts:
            ih = h if isinstance(h, InventoryHost) else InventoryHost(h[0], h[1], "healthy")
            self._hosts[ih.name] = ih
        self.logs_dir = Path(logs_dir)
        self.run_dir = Path(run_dir)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.python = python
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # launched here: reaped on poll
        self._index: dict[str, str] = {}  # handle -> "<workload>.<attempt>"
        self._kill_at: dict[str, float] = {}  # handle -> SIGKILL deadline (monotonic)
        self._timers: dict[str, threading.Timer] = {}
        self._scanned: set[str] = set()  # run files already indexed
        self.drained: dict[str, str] = {}

    # ---- the Executor protocol -------------------------------------------------------
    def inventory(self) -> list[InventoryHost]:
        return list(self._hosts.values())

    def launch(self, launch: Launch) -> str:
        wid = launch.workload_id
        if not _SAFE.match(wid):
            raise ValueError(f"local executor: workload id {wid!r}: unsafe as a file name")
        if not launch.command:
            raise ValueError(f"local executor: workload {wid}: command: empty")
        for s in launch.slots:
            if s.host not in self._hosts:
                raise ValueError(f"local executor: host {s.host!r}: unknown host")
        log_path = Path(launch.log_path) if launch.log_path else self.log_path(wid, launch.attempt)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(launch.env)
        first = launch.slots[0].gpu_indexes if launch.slots else ()
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in first)
        env["APPORTION_WORKLOAD_ID"] = wid
        env["APPORTION_ATTEMPT"] = str(launch.attempt)
        env["APPORTION_GPUS"] = str(sum(len(s.gpu_indexes) for s in launch.slots))
        env["APPORTION_HOSTS"] = ";".join(
            f"{s.host}:{','.join(str(i) for i in s.gpu_indexes)}" for s in launch.slots
        )
        argv = [
            self.python, "-m", "apportion.service.executors._wrapper",
            str(self.run_dir), wid, str(launch.attempt), "--", *launch.command,
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        # the child is ours and not yet reaped, so /proc/<pid> exists even if it already died
        handle = _procfs.handle_of(proc.pid)
        if handle is None:
            raise RuntimeError(f"local executor: workload {wid}: wrapper vanished at launch")
        with self._lock:
            self._procs[handle] = proc
            self._index[handle] = f"{wid}.{launch.attempt}"
        return handle

    def stop(self, handle: str, grace_s: float) -> None:
        self._reap()
        stem = self._stem(handle)
        if stem is not None and self._exit_info(stem) is not None:
            return
        if stem is not None and self._void(stem):
            return  # stopped before its wrapper claimed it: the command will never start
        if _procfs.alive(handle):
            pid, _ = _procfs.parse_handle(handle)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # the wrapper forwards it to the command's group
        with self._lock:
            if handle in self._timers:
                return  # a stop is already under way: keep its deadline
            if grace_s <= 0:
                self._kill_at[handle] = time.monotonic()
            else:
                self._kill_at[handle] = time.monotonic() + grace_s
                t = threading.Timer(grace_s, self._kill, args=(handle,))
                t.daemon = True
                self._timers[handle] = t
                t.start()
        if grace_s <= 0:
            self._kill(handle)

    def observe(self, handles: Sequence[str]) -> dict[str, Observation]:
        self._reap()
        now = time.monotonic()
        with self._lock:
            overdue = [h for h, t in self._kill_at.items() if t <= now]
        for h in overdue:  # in case a timer was lost: the deadline is also checked here
            self._kill(h)
        out: dict[str, Observation] = {}
        for h in handles:
            out[h] = self._observe_one(h)
        return out

    def set_host_drain(self, host: str, drain: bool, reason: str) -> None:
        # nothing to mirror on one machine; remembered for the record
        if drain:
            self.drained[host] = reason
        else:
            self.drained.pop(host, None)

    def close(self) -> None:
        """Forget timers; running attempts keep running (they belong to the cluster, not to
        this process) and are observed again by the next executor."""
        with self._lock:
            for t in self._timers.values():
                t.cancel()
            self._timers.clear()

    # ---- reconciliation --------------------------------------------------------------
    def find(self, workload_id: str, attempt: int) -> str | None:
        """The handle of attempt ``attempt`` of ``workload_id`` if its wrapper claimed it.

        If no wrapper has claimed it yet, the attempt is declared void (a void claim is
        written), so a wrapper that is still starting refuses to run it: the attempt can
        then safely be ended as never started. Used only while reconciling after a crash.
        """
        run_file = self.run_dir / f"{workload_id}.{attempt}.run"
        for _ in range(2):
            info = _procfs.read_json(run_file)
            if info is not None:
                handle = info.get("handle")
                if isinstance(handle, str) and handle:
                    with self._lock:
                        self._index[handle] = f"{workload_id}.{attempt}"
                    return handle
                return None  # void
            if _procfs.create_json_exclusive(run_file, {"void": True, "at": time.time()}):
                return None
        return None

    def _void(self, stem: str) -> bool:
        """Forbid an attempt whose wrapper has not claimed it yet (it may still be starting
        up, before it can handle SIGTERM), and record it as ended now. False if claimed."""
        if not _procfs.create_json_exclusive(
            self.run_dir / f"{stem}.run", {"void": True, "at": time.time()}
        ):
            return False
        _procfs.write_json_atomic(
            self.run_dir / f"{stem}.exit",
            {"exit_code": -signal.SIGTERM, "signalled": True, "ended_at": time.time(),
             "voided": True},
        )
        return True

    def log_path(self, workload_id: str, attempt: int) -> Path:
        return self.logs_dir / workload_id / f"{attempt}.log"

    # ---- internals -------------------------------------------------------------------
    def _observe_one(self, handle: str) -> Observation:
        stem = self._stem(handle)
        if stem is not None:
            ex = self._exit_info(stem)
            if ex is not None:
                return self._exited(handle, ex)
        if _procfs.alive(handle):
            return Observation(handle, AttemptState.RUNNING)
        if stem is None:
            stem = self._stem(handle)
        if stem is not None:
            ex = self._exit_info(stem)  # it may have written the file just before exiting
            if ex is not None:
                return self._exited(handle, ex)
            self._kill_child_group(stem)  # the wrapper died uncleanly: leave nothing behind
        return Observation(handle, AttemptState.GONE)

    def _exited(self, handle: str, ex: dict[str, object]) -> Observation:
        with self._lock:
            t = self._timers.pop(handle, None)
            self._kill_at.pop(handle, None)
        if t is not None:
            t.cancel()
        code = ex.get("exit_code")
        ended = ex.get("ended_at")
        return Observation(
            handle,
            AttemptState.EXITED,
            int(code) if isinstance(code, int) else None,
            bool(ex.get("signalled")),
            ended_at=float(ended) if isinstance(ended, int | float) else None,
        )

    def _kill(self, handle: str) -> None:
        with self._lock:
            self._timers.pop(handle, None)
            self._kill_at.pop(handle, None)
        stem = self._stem(handle)
        if stem is not None and self._exit_info(stem) is not None:
            return
        if stem is not None and self._kill_child_group(stem):
            return
        if _procfs.alive(handle):  # the command has not started yet: kill the wrapper
            pid, _ = _procfs.parse_handle(handle)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _kill_child_group(self, stem: str) -> bool:
        info = _procfs.read_json(self.run_dir / f"{stem}.run")
        pgid = info.get("child_pgid") if info else None
        if not isinstance(pgid, int) or not _procfs.group_alive(pgid):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        return True

    def _exit_info(self, stem: str) -> dict[str, object] | None:
        return _procfs.read_json(self.run_dir / f"{stem}.exit")

    def _stem(self, handle: str) -> str | None:
        with self._lock:
            stem = self._index.get(handle)
        if stem is not None:
            return stem
        # launched by an earlier executor (before a restart): index the run files not yet seen
        for path in self.run_dir.glob("*.run"):
            if path.name in self._scanned:
                continue
            info = _procfs.read_json(path)
            h = info.get("handle") if info else None
            if isinstance(h, str):
                with self._lock:
                    self._index.setdefault(h, path.name[: -len(".run")])
            if info is not None:
                self._scanned.add(path.name)
        with self._lock:
            return self._index.get(handle)

    def _reap(self) -> None:
        """Collect exited wrappers started by this process, so none lingers as a zombie."""
        with self._lock:
            done = [h for h, p in self._procs.items() if p.poll() is not None]
            for h in done:
                del self._procs[h]
