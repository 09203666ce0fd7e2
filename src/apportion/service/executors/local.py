"""Runs attempts as real processes on this machine, each as its owner's Unix account.

Each attempt runs under a small wrapper (``_wrapper.py``) started in its own session: the
wrapper claims a run file in ``run_dir`` *before* the command starts, forks the command as
its owner (see :class:`~apportion.service.executors.identity.Identity`) in the attempt's
own cgroup where the host offers one (``_cgroup.py``; else a process group, and the
wrapper as child subreaper), forwards SIGTERM to every process of it, and writes an exit
file with the real exit code and time once none of them lives. The handle is the
wrapper's ``pid:starttime``, so a pid recycled by the kernel is never mistaken for the
attempt. A stop's SIGKILL deadline is written for the wrapper (``<stem>.stop``) before its
SIGTERM, and the wrapper kills its job then, so the deadline holds while the server is
down; the executor's own kill at the deadline stays. Because everything needed to
observe an attempt lives in ``run_dir`` and /proc, a new executor (after a server restart)
observes attempts launched by an old one, including ones that ended while the server was
down.

``run_dir`` holds one directory per database (``run/<db_id>/``), written only by the server
and its wrappers (mode 0700); a run or exit file is taken for an attempt only if it names
that attempt's handle, so files left by another database (or a restored backup of this
one) are never read as this one's. Work that still runs for no attempt the database knows
(a restored backup's lost future) is stopped at start (:meth:`LocalExecutor.stop_unknown`)
before its GPUs are handed out again; files are set aside only once their wrapper is dead.

"Hosts" are names for slices of this machine's GPUs, one after the other in the order
given (two 8-GPU hosts: GPUs 0-7 and 8-15): CUDA_VISIBLE_DEVICES lists the machine's GPUs
of the indexes the scheduler assigned on the first host, and with the cgroup v1 devices
controller the job may open only those ``/dev/nvidia<N>`` (of every host it was given).
Removing or resizing a host moves the GPUs of the hosts after it, so an executor whose
hosts would hand GPUs a running attempt holds (its spec records them) to other work is
refused at start.

Each attempt's ``APPORTION_CHECKPOINT_FILE`` is ``logs/<workload>/<attempt>.checkpoint/
checkpoint``: the directory is made at launch, owned by the job's account (0700) inside the
server's ``logs/<workload>`` (0711), and the file's modification time is reported with each
observation of the running attempt (``_checkpoint.py`` says what is believed).

Work run as its owner's account gets a private ``TMPDIR``, ``<tmp_dir>/<db_id>/<workload>.
<attempt>`` (``_tmpdir.py``): made at launch, the job's account's (0700) in the server's
``tmp_dir/<db_id>`` (0711), and removed with all in it when the attempt ends: by its
wrapper once nothing of the job lives, else by the executor (the wrapper died, the attempt
was voided or never launched, or it ended while the server was down: swept at start).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from apportion.service.executor import (
    AttemptState,
    InventoryHost,
    Launch,
    LaunchDeferred,
    LaunchRefused,
    Observation,
)
from apportion.service.executors import _cgroup, _checkpoint, _procfs, _tmpdir
from apportion.service.executors._wrapper import CHILD_UMASK
from apportion.service.executors.identity import (
    Identity,
    child_env,
    exec_problem,
    server_account,
)
from apportion.service.owndirs import unsafe_dir, unsafe_way

_SAFE = re.compile(r"^[A-Za-z0-9_.-]+$")
# how long a wrapper whose job was killed gets to reap it and write its exit record (and
# then to die of its own SIGKILL), when an attempt the database does not know is ended
KILL_WAIT_S = 5.0
# processes and threads (the pids controller counts both) one attempt may have at once: far
# above what a training job runs (8 ranks with 16 loader workers each, and their threads,
# stay in the low thousands), far below the 32768 pids a kernel may have in all (its
# default pid_max), so a fork bomb gets EAGAIN instead of taking every pid of the host
PIDS_MAX = 8192
# a wrapper whose job has ended this long ago without its exit record (its run directory's
# disk full or read-only) is said in the server's log: it is shown running until then
EXIT_RECORD_LATE_S = 10.0

# the end reason's note when the log's file system was full at the attempt's end
LOG_FULL = "log cut short? its file system was full (ENOSPC) when the job ended"

log = logging.getLogger("apportion.executor.local")


class GpusInUse(ValueError):
    """The hosts given would hand GPUs an attempt still runs on to other work."""


class UnsafeTmpDir(ValueError):
    """The directory for the jobs' private TMPDIRs is not the server's alone."""


class LocalExecutor:
    """The ``local`` executor: ``hosts`` as configured, logs under ``logs_dir``, durable
    per-attempt records under ``run_dir/<db_id>`` (``db_id`` "": ``run_dir`` itself).
    ``identity``: whom work runs as (default: the owner's account when root).
    ``cgroups``: "auto" (the host's, when root), None (process groups only) or a
    :class:`~apportion.service.executors._cgroup.CgroupHost`. ``pids_max``: the processes
    and threads an attempt may have at once, through its pids cgroup (0: no limit).
    ``tmp_dir``: where each attempt run as its owner's account gets its private TMPDIR
    (default: ``tmp`` beside ``run_dir``), the server's alone (:class:`UnsafeTmpDir`)."""

    name = "local"

    def __init__(
        self,
        hosts: Iterable[InventoryHost | tuple[str, int]],
        logs_dir: str | os.PathLike[str],
        run_dir: str | os.PathLike[str],
        python: str = sys.executable,
        db_id: str = "",
        identity: Identity | None = None,
        cgroups: _cgroup.CgroupHost | str | None = "auto",
        pids_max: int = PIDS_MAX,
        tmp_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self._hosts: dict[str, InventoryHost] = {}
        # each host is its own slice of this machine's GPUs, in the order given: host k's
        # GPU i is the machine's GPU (GPUs of the hosts before k) + i
        self._first_gpu: dict[str, int] = {}
        for h in hosts:
            ih = h if isinstance(h, InventoryHost) else InventoryHost(h[0], h[1], "healthy")
            self._first_gpu[ih.name] = sum(x.gpus for x in self._hosts.values())
            self._hosts[ih.name] = ih
        if db_id and not _SAFE.match(db_id):
            raise ValueError(f"local executor: db_id {db_id!r}: unsafe as a file name")
        self.identity = identity if identity is not None else Identity()
        if isinstance(cgroups, str) and cgroups != "auto":
            raise ValueError(f"local executor: cgroups: 'auto', None or a CgroupHost, "
                             f"got {cgroups!r}")
        self.cgroups: _cgroup.CgroupHost | None = (
            _cgroup.CgroupHost.detect() if isinstance(cgroups, str) else cgroups
        )
        # absolute: the wrappers run from "/", and read their spec and log paths from there
        self.logs_dir = Path(logs_dir).absolute()
        run_dir = Path(run_dir).absolute()
        self.run_dir = run_dir / db_id if db_id else run_dir
        self.db_id = db_id
        for d in (self.logs_dir, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        # the server's records: nobody else may read (specs hold environments) or write them
        os.chmod(self.run_dir, 0o700)
        # jobs reach their own log through the fd they are given, never through the tree
        os.chmod(self.logs_dir, 0o711)
        # the logs directory as made (or checked) at start: (device, inode), see _logs_dir
        self._logs_dir_id = _dir_id(self.logs_dir)
        self.python = python
        self.pids_max = pids_max
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # launched here: reaped on poll
        self._index: dict[str, str] = {}  # handle -> "<workload>.<attempt>"
        self._kill_at: dict[str, float] = {}  # handle -> SIGKILL deadline (monotonic)
        self._timers: dict[str, threading.Timer] = {}
        self._scanned: set[str] = set()  # run files already indexed
        # the logs' file system was full when the last job ended (said once in the server's
        # log, and again once it has had room and filled up again)
        self._logs_full = False
        self.drained: dict[str, str] = {}
        self._jobs: dict[str, dict[str, Any]] = {}  # handle -> its run file, job recorded
        self._job_gone_since: dict[str, float] = {}  # handle -> no job seen since (monotonic)
        self._said_late: set[str] = set()  # handles whose late exit record was said
        # jobs' private TMPDIRs: only for work run as its owner's account (as root)
        tmp_root = Path(tmp_dir).absolute() if tmp_dir is not None else run_dir.parent / "tmp"
        self.tmp_dir: Path | None = None
        if self.identity.as_owner:
            self.tmp_dir = tmp_root / db_id if db_id else tmp_root
            self._tmp_dir_id = self._make_tmp_dir(tmp_root)
        self._said_tmp_left: set[str] = set()
        self._check_running_devices()
        self._sweep_tmp()

    # ---- the Executor protocol -------------------------------------------------------
    def inventory(self) -> list[InventoryHost]:
        return list(self._hosts.values())

    def describe(self) -> str:
        """How work is isolated here, for the start of ``apportion serve``."""
        how = (self.cgroups.describe() if self.cgroups is not None else
               "no cgroups (not root, or none mounted): process groups only; a process "
               "that leaves its group and outlives its parent escapes")
        if self.cgroups is not None:
            how += (f"; pids.max {self.pids_max} per attempt" if self.pids_max else
                    "; no process limit per attempt")
        return f"local executor: {self.identity.describe()}; {how}"

    def launch(self, launch: Launch) -> str:
        wid = launch.workload_id
        if not _SAFE.match(wid):
            raise LaunchRefused(f"workload id {wid!r}: unsafe as a file name")
        if not launch.command:
            raise LaunchRefused(f"workload {wid}: command: empty")
        for s in launch.slots:
            if s.host not in self._hosts:
                raise LaunchRefused(f"host {s.host!r}: unknown host")
        acct = self.identity.launch_account(launch)
        run_as = acct if acct is not None else server_account()
        devices = [[self._first_gpu[s.host] + i for i in s.gpu_indexes] for s in launch.slots]
        ckpt = self.checkpoint_path(wid, launch.attempt)
        stem = f"{wid}.{launch.attempt}"
        tmp = self.tmp_path(wid, launch.attempt) if acct is not None else None
        own = own_env(launch, devices, str(ckpt))
        if tmp is not None:  # apportion's, as Slurm's job_container/tmpfs gives a private /tmp
            own["TMPDIR"] = str(tmp)
        env = child_env(run_as, launch.env, own)
        argv = list(launch.command)
        too_big = exec_problem(argv, env, reserve=0)
        if too_big is not None:
            raise LaunchRefused(f"argument list too long: {too_big}")
        self._check_own_dirs()
        self._set_aside(stem)
        if tmp is not None and acct is not None:
            try:
                self._check_tmp_dir()
                _tmpdir.make(tmp.parent, tmp.name, acct.uid, acct.gid)
            except OSError as e:  # full, read-only, a leftover that cannot be removed
                raise LaunchDeferred(f"private TMPDIR {tmp}: {e.strerror or e}") from None
        cgroups: list[str] = []
        if self.cgroups is not None:
            gpus = {i for d in devices for i in d}
            cgroups = self.cgroups.create(self._cgroup_name(stem), gpus, self.pids_max)
        spec: dict[str, Any] = {
            "db_id": self.db_id, "workload": wid, "attempt": launch.attempt,
            "argv": argv, "env": env, "chdir": launch.chdir or run_as.home or "/",
            "umask": CHILD_UMASK if launch.umask is None else launch.umask,
            "account": ({"uid": acct.uid, "gid": acct.gid, "groups": list(acct.groups)}
                        if acct is not None else None),
            "cgroups": cgroups,
            # the private TMPDIR its wrapper removes at the end: [parent, name]
            "tmp": [str(tmp.parent), tmp.name] if tmp is not None else None,
            # the machine's GPUs it holds, checked at each start (_check_running_devices)
            "slots": [{"host": s.host, "gpus": list(s.gpu_indexes), "devices": d}
                      for s, d in zip(launch.slots, devices, strict=True)],
        }
        spec_path = self.run_dir / f"{stem}.spec"
        writing: str | None = None  # the server's directory being written, while it is
        try:
            # not fsynced: read at once by the wrapper; lost in a crash, the attempt never
            # started (and find() then removes the cgroups its spec names, if it is there)
            writing = f"run directory {self.run_dir}"
            _procfs.write_json_atomic(spec_path, spec, durable=False)
            writing = f"logs directory {self.logs_dir}"
            log_fd = self._attempt_files(wid, launch.attempt, acct)
            writing = None
            try:
                # -P and cwd "/": with -m, Python would put the current directory first
                # on sys.path, and the server's may be one its users can write to; the
                # wrapper runs as the server (root), so it imports only installed code
                proc = subprocess.Popen(
                    [self.python, "-P", "-m", "apportion.service.executors._wrapper",
                     str(spec_path)],
                    cwd="/",
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                os.close(log_fd)
        except BaseException as e:
            _cgroup.remove(cgroups)  # no wrapper will run in them: none left behind
            self._remove_tmp(stem)
            # the interpreter cannot be run, or the command's argv and environment are over
            # the kernel's limits: so for every try. A file of the server's own that cannot
            # be written (its run directory gone) is the server's trouble: raised as it is,
            # naming the file, and the launch tried again later
            if isinstance(e, OSError) and (e.errno == errno.E2BIG or e.errno in (
                    errno.ENOENT, errno.EACCES) and e.filename == self.python):
                raise LaunchRefused(f"wrapper {self.python}: {e.strerror}") from None
            if isinstance(e, OSError) and writing is not None:  # full, read-only, refused
                raise LaunchDeferred(f"{writing}: {e.strerror or e}") from None
            raise
        # the child is ours and not yet reaped, so /proc/<pid> exists even if it already died
        handle = _procfs.handle_of(proc.pid)
        if handle is None:
            raise RuntimeError(f"local executor: workload {wid}: wrapper vanished at launch")
        with self._lock:
            self._procs[handle] = proc
            self._index[handle] = stem
        return handle

    def _check_own_dirs(self) -> None:
        """Before a launch: the run directory is there, and the logs directory is the one
        checked at start or passes the same checks (docs/security.md, "The server's files
        are the server's"). One removed while the server runs is made again as at start
        (the server's, 0711), if its parent is there; one that is no longer the server's
        alone is refused; either way :class:`LaunchDeferred` says in one line what is wrong,
        and the launch is tried again later."""
        if not self.run_dir.is_dir():  # with the data directory (and the database?)
            raise LaunchDeferred(f"run directory {self.run_dir}: missing (was the data "
                                 "directory removed?); restore it, or restart the server")
        d = self.logs_dir
        ident = _dir_id(d)
        if ident is not None and ident == self._logs_dir_id:
            st = os.stat(d)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o711:
                return  # the very directory checked before, as it was left
        problem = None
        try:
            problem = unsafe_way(d)  # before anything is made there, as at start
            if problem is None and ident is None:
                if not d.parent.is_dir():
                    raise LaunchDeferred(f"logs directory {d}: missing, and so is "
                                         f"{d.parent}: make it, or restart the server")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(d, 0o711)
                log.warning("logs directory %s was missing: made again (0711, the "
                            "server's)", d)
            if problem is None:
                problem = unsafe_dir(d) or unsafe_way(d)  # what another made meanwhile
            if problem is None:
                os.chmod(d, 0o711)
        except OSError as e:
            problem = e.strerror or str(e)
        if problem is not None:
            raise LaunchDeferred(f"logs directory {d}: {problem}")
        self._logs_dir_id = _dir_id(d)

    # ---- private TMPDIRs -------------------------------------------------------------
    def tmp_path(self, workload_id: str, attempt: int) -> Path:
        """The private ``TMPDIR`` of an attempt run as its owner's account."""
        assert self.tmp_dir is not None
        return self.tmp_dir / f"{workload_id}.{attempt}"

    def _make_tmp_dir(self, root: Path) -> tuple[int, int] | None:
        """Make (or check) ``root`` and this database's directory in it, each the server's
        and 0711: jobs cross them to their own TMPDIR, nobody else can make, list, rename
        or link anything there. A directory that another account owns or can write, on a
        way someone else could change (:func:`unsafe_way`), or one the jobs' accounts
        cannot cross, is refused (:class:`UnsafeTmpDir`); its (device, inode)."""
        assert self.tmp_dir is not None
        for d in dict.fromkeys((root, self.tmp_dir)):
            try:
                problem = unsafe_way(d)  # before anything is made there
                if problem is None:
                    d.mkdir(parents=True, exist_ok=True)
                    problem = unsafe_dir(d) or unsafe_way(d)  # what another made meanwhile
                if problem is None:
                    os.chmod(d, 0o711)
                    problem = _uncrossable(d)
            except OSError as e:
                problem = e.strerror or str(e)
            if problem is not None:
                raise UnsafeTmpDir(f"{d}: {problem}")
        return _dir_id(self.tmp_dir)

    def _check_tmp_dir(self) -> None:
        """Before a launch: the TMPDIRs' directory is still the one made at start, as it
        was left, or passes the same checks again (made anew if it was removed); else
        :class:`OSError` saying what is wrong (the launch is deferred)."""
        assert self.tmp_dir is not None
        ident = _dir_id(self.tmp_dir)
        if ident is not None and ident == self._tmp_dir_id:
            st = os.lstat(self.tmp_dir)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o711:
                return
        root = self.tmp_dir.parent if self.db_id else self.tmp_dir
        try:
            self._tmp_dir_id = self._make_tmp_dir(root)
        except UnsafeTmpDir as e:
            raise OSError(str(e)) from None

    def _remove_tmp(self, stem: str) -> None:
        """Remove the private TMPDIR of the attempt ``stem`` (if it has one); say in the
        server's log, once, what cannot be removed."""
        if self.tmp_dir is None:
            return
        left = _tmpdir.remove(self.tmp_dir, stem)
        if left is not None:
            self._say_tmp_left(stem, left)

    def _say_tmp_left(self, stem: str, left: str) -> None:
        if stem in self._said_tmp_left:
            return
        self._said_tmp_left.add(stem)
        wid, attempt = stem.rsplit(".", 1)
        log.warning("%s attempt %s: its private TMPDIR %s was not removed whole: %s (remove "
                    "it by hand; the attempt has ended)", wid, attempt,
                    (self.tmp_dir or Path()) / stem, left)

    def _sweep_tmp(self) -> None:
        """At start: remove the private TMPDIRs of attempts that have ended (while the
        server was down, their wrapper killed before it could) and of names no attempt of
        this run directory holds. Kept: an attempt whose wrapper or any process of whose
        job still lives, and one launched but not yet claimed (:meth:`find` settles it)."""
        if self.tmp_dir is None:
            return
        try:
            names = sorted(os.listdir(self.tmp_dir))
        except OSError as e:
            log.warning("private TMPDIRs %s: cannot be listed: %s", self.tmp_dir,
                        e.strerror or e)
            return
        for stem in names:
            info = _procfs.read_json(self.run_dir / f"{stem}.run")
            if info is None:
                if (self.run_dir / f"{stem}.spec").exists():
                    continue  # its wrapper may be starting: find() voids it, or adopts it
            elif not info.get("void"):
                handle = info.get("handle")
                if isinstance(handle, str) and _procfs.alive(handle) or _job_alive(info):
                    continue  # still running, or its processes not yet killed (observe)
            self._remove_tmp(stem)

    def stop(self, handle: str, grace_s: float) -> None:
        self._reap()
        stem = self._stem(handle)
        if stem is not None and self._exit_info(stem, handle) is not None:
            return
        if stem is not None and self._void(stem, handle):
            return  # stopped before its wrapper claimed it: the command will never start
        if stem is not None:
            self._record_stop(stem, handle, grace_s)  # read by the wrapper at the SIGTERM
        _signal(handle, signal.SIGTERM)  # the wrapper forwards it to the whole job
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

    def _record_stop(self, stem: str, handle: str, grace_s: float) -> None:
        """Write the stop's kill deadline (``now + grace_s``, wall clock) for the wrapper of
        ``handle``, which SIGKILLs its job then itself (``_wrapper.py``), so the job is
        killed at its deadline even if this server is down by then; this server's own
        kill stays (harmless twice). A deadline already recorded for that wrapper that is
        earlier is kept: a stop sent again never extends it. Not written (said in the log),
        the server's kill alone remains, as before."""
        path = self.run_dir / f"{stem}.stop"
        kill_at = time.time() + max(0.0, grace_s)
        old = _procfs.read_json(path) or {}
        if (old.get("handle") == handle and isinstance(old.get("kill_at"), int | float)
                and old["kill_at"] <= kill_at):
            return
        try:
            _procfs.write_json_atomic(path, {"handle": handle, "kill_at": kill_at},
                                      durable=False)
        except OSError as e:  # a full or read-only disk
            wid, attempt = stem.rsplit(".", 1)
            log.warning("%s attempt %s: its kill deadline was not recorded for its wrapper "
                        "(%s): only this server kills it at the end of its grace", wid,
                        attempt, e.strerror or e)

    def signal(self, handle: str, signum: int, batch: bool) -> None:
        """Send ``signum`` to the attempt's job, which runs on: with ``batch`` to the
        command's own process only (the batch script's shell, ``B:``), else to every
        process of the job (its cgroup's, and every one below its wrapper, the command's
        first), as the wrapper forwards a stop's SIGTERM. An attempt whose wrapper has
        not started the command, or has ended, gets nothing. The command's process is
        signalled only while its parent is still the attempt's wrapper, so a pid the
        system gave to another process once the job ended is never signalled."""
        self._reap()
        stem = self._stem(handle)
        if stem is None or self._exit_info(stem, handle) is not None:
            return
        info = _procfs.read_json(self.run_dir / f"{stem}.run")
        if info is None or info.get("handle") != handle or not _procfs.alive(handle):
            return  # not claimed yet (the command not started), voided, or ended
        wrapper = _procfs.parse_handle(handle)[0]
        child = info.get("child_pgid")
        fields = _procfs.stat_fields(child) if isinstance(child, int) else None
        own = fields is not None and int(fields[1]) == wrapper and fields[0] not in "ZXx"
        if batch:
            targets = [child] if own and isinstance(child, int) else []
        else:
            rest = (_cgroup.procs(_cgroups_of(info)) | set(_procfs.descendants(wrapper))
                    ) - {child, wrapper}
            targets = ([child] if own and isinstance(child, int) else []) + sorted(rest)
        for pid in targets:  # each only while still below the wrapper (a pid is recycled)
            _procfs.signal_below(pid, signum, wrapper)

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
    def _check_running_devices(self) -> None:
        """Refuse hosts that would hand a running attempt's GPUs to other work (GpusInUse,
        naming the attempt, its host, the GPUs it holds and what the hosts now make of
        them). Host k's GPUs follow those of the hosts before it, so a host removed or
        resized moves the GPUs of every host after it, and the scheduler, which knows
        hosts and indexes only, would place new work on GPUs still in use. Each GPU a
        running attempt holds must be its host's same GPU still, or nobody's (a host
        removed or shrunk at the end)."""
        given = {self._first_gpu[h.name] + i: (h.name, i)
                 for h in self._hosts.values() for i in range(h.gpus)}
        for path in sorted(self.run_dir.glob("*.run")):
            stem = path.name[: -len(".run")]
            info = _procfs.read_json(path)
            handle = info.get("handle") if info else None
            if (not isinstance(handle, str) or not _procfs.alive(handle)
                    or self._exit_info(stem, handle) is not None):
                continue
            spec = _procfs.read_json(self.run_dir / f"{stem}.spec")
            for host, gpus, held in _held_devices(spec):
                if all(given.get(d) == (host, i) or (d not in given and not self._has_gpu(host, i))
                       for i, d in zip(gpus, held, strict=True)):
                    continue
                h = self._hosts.get(host)
                now = (f"give {host} the machine's GPUs {_span(self._first_gpu[host], h.gpus)}"
                       if h is not None else f"have no host {host}")
                others = {d: given[d][0] for d in held if d in given and given[d][0] != host}
                if others:
                    now += f" and GPUs {_ids(others)} to {', '.join(sorted({*others.values()}))}"
                wid, attempt = stem.rsplit(".", 1)
                raise GpusInUse(
                    f"{wid} attempt {attempt} still runs on host {host} with this machine's "
                    f"GPUs {_ids(held)}, but the [[hosts]] now {now} (a host's GPUs follow "
                    f"those of the hosts before it): keep each host's [[hosts]] block as it "
                    f"was until its work has ended (drain it first), or remove or shrink "
                    f"only the last hosts")

    def _has_gpu(self, host: str, index: int) -> bool:
        h = self._hosts.get(host)
        return h is not None and index < h.gpus

    def stop_unknown(self, known: Collection[str], grace_s: float) -> None:
        """Stop every wrapper of this run directory that is alive but runs no attempt in
        ``known`` (the handles of the database's open attempts): a restored backup's lost
        future, which the database can neither charge, stop nor see, and whose GPUs and
        cgroup names it would hand out again. Each is named in a warning and stopped as
        :meth:`stop` does (SIGTERM, SIGKILL after ``grace_s``); this returns once none
        lives, their files moved to ``stale/``."""
        unknown: dict[str, str] = {}
        for path in sorted(self.run_dir.glob("*.run")):
            stem = path.name[: -len(".run")]
            info = _procfs.read_json(path)
            handle = info.get("handle") if info else None
            if (not isinstance(handle, str) or handle in known or not _procfs.alive(handle)
                    or self._exit_info(stem, handle) is not None):  # ended, leaving now
                continue
            wid, attempt = stem.rsplit(".", 1)
            log.warning("%s attempt %s (wrapper pid %d) runs for no attempt the database "
                        "knows (a backup restored from before it started?): stopped, its "
                        "files moved to %s", wid, attempt, _procfs.parse_handle(handle)[0],
                        self.run_dir / "stale")
            unknown[stem] = handle
        self._end_wrappers(unknown, grace_s)
        for stem in unknown:
            self._remove_tmp(stem)  # its wrapper's, unless it was killed before it could
            self._move_aside(stem)

    def stop_strays(
        self, known: Collection[str], launching: Collection[tuple[str, int]], grace_s: float
    ) -> None:
        """Nothing to do: :meth:`find`'s void claim makes a wrapper it found nothing of
        refuse to run, so no launch given up starts later."""

    def find(self, workload_id: str, attempt: int) -> str | None:
        """The handle of attempt ``attempt`` of ``workload_id`` if its wrapper claimed it.

        If no wrapper has claimed it yet, the attempt is declared void (a void claim is
        written), so a wrapper that is still starting refuses to run it: the attempt can
        then safely be ended as never started. Used only while reconciling after a crash.
        """
        stem = f"{workload_id}.{attempt}"
        run_file = self.run_dir / f"{stem}.run"
        for _ in range(2):
            info = _procfs.read_json(run_file)
            if info is not None:
                handle = info.get("handle")
                if isinstance(handle, str) and handle:
                    with self._lock:
                        self._index[handle] = stem
                    return handle
                break  # void
            if _procfs.create_json_exclusive(run_file, {"void": True, "at": time.time()}):
                break
        # never started: the cgroups made for it at launch hold nothing, and nobody else
        # knows them (its spec names them, if the launch got as far as writing it); nor
        # does its private TMPDIR
        _cgroup.remove(self._cgroups(stem))
        self._remove_tmp(stem)
        return None

    def _void(self, stem: str, handle: str) -> bool:
        """Forbid an attempt whose wrapper has not claimed it yet (it may still be starting
        up, before it can handle SIGTERM), and record it as ended now. False if claimed.

        The void claim names the handle it voids, so that an executor started after a
        crash still finds the attempt by its handle, and can finish the exit record if the
        crash fell between the claim and the record."""
        claim = {"void": True, "at": time.time(), "voided": handle}
        if not _procfs.create_json_exclusive(self.run_dir / f"{stem}.run", claim):
            return False
        self._record_void(stem, claim)
        return True

    def _unrecorded_void(self, stem: str, handle: str) -> dict[str, object] | None:
        """The exit record of ``handle`` if it was voided but the server died before it
        wrote the record (written now, with the void's time). Its wrapper may still be
        alive for a moment: it runs nothing, so the attempt has ended all the same."""
        claim = _procfs.read_json(self.run_dir / f"{stem}.run")
        if claim is None or claim.get("voided") != handle:
            return None
        return self._record_void(stem, claim)

    def _record_void(self, stem: str, claim: dict[str, Any]) -> dict[str, object]:
        """The exit record of a voided attempt: it ended when it was voided. The cgroups
        made for it at launch go first: its wrapper, finding the void claim, never runs
        anything in them, nor removes them (they were left behind, empty, for every attempt
        cancelled before it started)."""
        _cgroup.remove(self._cgroups(stem))
        self._remove_tmp(stem)
        ex: dict[str, object] = {
            "exit_code": -signal.SIGTERM, "signalled": True, "ended_at": claim["at"],
            "voided": True, "handle": claim["voided"], "db_id": self.db_id,
        }
        _procfs.write_json_atomic(self.run_dir / f"{stem}.exit", ex)
        return ex

    def log_path(self, workload_id: str, attempt: int) -> Path:
        return self.logs_dir / workload_id / f"{attempt}.log"

    def checkpoint_path(self, workload_id: str, attempt: int) -> Path:
        """The attempt's ``APPORTION_CHECKPOINT_FILE`` (the job creates it by touching it)."""
        return self.logs_dir / workload_id / f"{attempt}.checkpoint" / "checkpoint"

    def _workload_dir(self, workload_id: str) -> int:
        """An fd of ``logs/<workload>``, made if need be: the server's, 0711 (jobs cross it
        to their own files, nobody lists it). Whatever else is at that name (a link, which
        only the server or root could have put in logs_dir) is refused, never followed."""
        logs = os.open(self.logs_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(workload_id, 0o711, dir_fd=logs)
            try:
                fd = os.open(workload_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                             dir_fd=logs)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise LaunchDeferred(f"logs directory {self.logs_dir}: {workload_id}: not a "
                                     "directory of the server's (a link or a file): not "
                                     "followed") from None
        finally:
            os.close(logs)
        try:
            os.fchown(fd, os.geteuid(), os.getegid())
            os.fchmod(fd, 0o711)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _attempt_files(self, workload_id: str, attempt: int, acct: Any) -> int:
        """Make the attempt's checkpoint directory and log (at :meth:`checkpoint_path` and
        :meth:`log_path`, which the scheduler passes as ``Launch.log_path``) through the fd
        of their directory, never by a path a link could redirect; the log's fd."""
        workload_dir = self._workload_dir(workload_id)
        try:
            self._checkpoint_dir(workload_dir, f"{attempt}.checkpoint", acct)
            return self._open_log(workload_dir, f"{attempt}.log", acct)
        finally:
            os.close(workload_dir)

    def _checkpoint_dir(self, workload_dir: int, name: str, acct: Any) -> None:
        """A fresh, empty directory ``name`` for the attempt's checkpoint file, the job's
        account's only, in the server's ``workload_dir`` (so the job cannot replace it)."""
        try:
            old = os.stat(name, dir_fd=workload_dir, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:  # another timeline's (a restored backup)
            if stat.S_ISDIR(old.st_mode):
                shutil.rmtree(name, dir_fd=workload_dir)  # fd-based: never follows links
            else:
                os.unlink(name, dir_fd=workload_dir)
        os.mkdir(name, 0o700, dir_fd=workload_dir)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=workload_dir)
        try:
            if acct is not None:
                os.fchown(fd, acct.uid, acct.gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)

    def _open_log(self, workload_dir: int, name: str, acct: Any) -> int:
        """A fresh log file ``name`` for the attempt, owned by its account and readable by
        it only, in the server's ``workload_dir`` (so the job cannot swap the file for a
        link). One already there (another timeline's) is removed, never written through."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=workload_dir)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND,
                     0o600, dir_fd=workload_dir)
        try:
            if acct is not None:
                os.fchown(fd, acct.uid, acct.gid)
            os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _set_aside(self, stem: str) -> None:
        """A new attempt's files cannot exist yet in this database's history: any found
        are another timeline's (a restored backup) and are moved out of the way. A wrapper
        they name that still runs (one :meth:`stop_unknown` did not see) is killed first:
        it holds the GPUs and the cgroup names the new attempt is about to be given. One
        that has written its exit record is left to leave (as :meth:`stop_unknown` leaves
        it): its command has ended, and it writes nothing more."""
        info = _procfs.read_json(self.run_dir / f"{stem}.run")
        handle = info.get("handle") if info else None
        if (isinstance(handle, str) and _procfs.alive(handle)
                and self._exit_info(stem, handle) is None):
            wid, attempt = stem.rsplit(".", 1)
            log.warning("%s attempt %s: the wrapper (pid %d) of another timeline's attempt "
                        "of that name still runs: killed before the new attempt starts",
                        wid, attempt, _procfs.parse_handle(handle)[0])
            self._end_wrappers({stem: handle}, 0)
        self._move_aside(stem)

    def _move_aside(self, stem: str) -> None:
        """Move the run, exit, spec and stop files of ``stem`` to ``stale/``, never read
        again."""
        stale = self.run_dir / "stale"
        for suffix in (".run", ".exit", ".spec", ".stop"):
            p = self.run_dir / f"{stem}{suffix}"
            if p.exists():
                stale.mkdir(exist_ok=True)
                os.replace(p, stale / f"{p.name}.{time.time():.6f}")
        self._scanned.discard(f"{stem}.run")  # the name is free for a new claim

    def _end_wrappers(self, wrappers: Mapping[str, str], grace_s: float) -> None:
        """Stop the wrappers ``wrappers`` (stem -> handle) and wait until none lives:
        SIGTERM (each forwards it to its job), SIGKILL to the jobs still alive after
        ``grace_s`` (their wrappers then reap them, write their exit records and leave),
        and to the wrappers themselves after :data:`KILL_WAIT_S` more; their cgroups are
        removed."""
        for stem, handle in wrappers.items():
            self._record_stop(stem, handle, grace_s)
            _signal(handle, signal.SIGTERM)
        live = self._wait_ended(wrappers.values(), grace_s)
        for stem, handle in wrappers.items():
            if handle in live:
                self._kill_job(stem)
        live = self._wait_ended(live, KILL_WAIT_S)
        for handle in live:  # e.g. one that cannot write its exit record
            _signal(handle, signal.SIGKILL)
        self._wait_ended(live, KILL_WAIT_S)
        for stem in wrappers:
            _cgroup.remove(_cgroups_of(_procfs.read_json(self.run_dir / f"{stem}.run")))

    def _wait_ended(self, handles: Collection[str], timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` until none of ``handles`` lives; those still alive."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._reap()
            live = [h for h in handles if _procfs.alive(h)]
            if not live or time.monotonic() >= deadline:
                return live
            time.sleep(0.05)

    # ---- internals -------------------------------------------------------------------
    def _observe_one(self, handle: str) -> Observation:
        stem = self._stem(handle)
        if stem is not None:
            ex = self._exit_info(stem, handle) or self._unrecorded_void(stem, handle)
            if ex is not None:
                return self._exited(handle, ex)
        if _procfs.alive(handle):
            ckpt = None
            if stem is not None:
                wid, attempt = stem.rsplit(".", 1)
                ckpt = _checkpoint.checkpoint_time(self.checkpoint_path(wid, int(attempt)))
                self._check_exit_late(handle, stem)
            return Observation(handle, AttemptState.RUNNING, checkpoint_at=ckpt)
        if stem is None:
            stem = self._stem(handle)
        if stem is not None:
            ex = self._exit_info(stem, handle)  # it may have written it just before exiting
            if ex is not None:
                return self._exited(handle, ex)
            # the wrapper died uncleanly: leave nothing behind, and hold the GPUs until
            # nothing of the job lives
            if self._kill_job(stem):
                return Observation(handle, AttemptState.RUNNING)
            _cgroup.remove(self._cgroups(stem))
            self._remove_tmp(stem)
        return Observation(handle, AttemptState.GONE)

    def _check_exit_late(self, handle: str, stem: str) -> None:
        """Say once (a warning) that the job of a live wrapper ended more than
        :data:`EXIT_RECORD_LATE_S` ago with no exit record yet: the wrapper cannot write it
        (the run directory's disk full or read-only) and retries, and the attempt is shown
        running meanwhile, which nothing else would explain. Cheap: the run file is read
        until it records the job, then only its cgroups or process group are looked at."""
        info = self._jobs.get(handle)
        if info is None:
            info = _procfs.read_json(self.run_dir / f"{stem}.run") or {}
            if _cgroups_of(info) or isinstance(info.get("child_pgid"), int):
                self._jobs[handle] = info
        cgroups, pgid = _cgroups_of(info), info.get("child_pgid")
        if cgroups:
            gone = not _cgroup.procs(cgroups)
        elif isinstance(pgid, int):
            try:
                os.killpg(pgid, 0)
                gone = False
            except ProcessLookupError:
                gone = True
            except PermissionError:
                gone = False
        else:
            return  # not known yet where its job runs
        if not gone:
            self._job_gone_since.pop(handle, None)
            return
        since = self._job_gone_since.setdefault(handle, time.monotonic())
        late = time.monotonic() - since
        if late >= EXIT_RECORD_LATE_S and handle not in self._said_late:
            self._said_late.add(handle)
            wid, attempt = stem.rsplit(".", 1)
            log.warning("%s attempt %s: exit record pending: its job ended %.0f s ago but "
                        "its wrapper cannot write the record in %s (disk full or read-only?; "
                        "it tries again): shown running, holding its GPUs, until it can",
                        wid, attempt, late, self.run_dir)

    def _exited(self, handle: str, ex: dict[str, object]) -> Observation:
        self._jobs.pop(handle, None)
        self._job_gone_since.pop(handle, None)
        if handle in self._said_late:
            self._said_late.discard(handle)
            log.info("%s: exit record written at last", self._stem(handle) or handle)
        with self._lock:
            t = self._timers.pop(handle, None)
            self._kill_at.pop(handle, None)
        if t is not None:
            t.cancel()
        stem = self._stem(handle)
        if ex.get("tmp_left") and stem is not None:  # said in the attempt's log too
            self._say_tmp_left(stem, str(ex["tmp_left"]))
        self._say_logs_full(stem, bool(ex.get("log_full")))
        code = ex.get("exit_code")
        ended = ex.get("ended_at")
        return Observation(
            handle,
            AttemptState.EXITED,
            int(code) if isinstance(code, int) else None,
            bool(ex.get("signalled")),
            ended_at=float(ended) if isinstance(ended, int | float) else None,
            refused=str(ex["refused"]) if ex.get("refused") else None,
            log_note=LOG_FULL if ex.get("log_full") else None,
        )

    def _say_logs_full(self, stem: str | None, full: bool) -> None:
        """Tell the operator, once, that the logs' file system is full (a job ended with its
        log cut short: every job writing there loses output until room is made), and once
        again when a job ended with room there. The attempt's end reason tells its owner,
        who can free nothing there."""
        if full and not self._logs_full:
            wid, _, attempt = (stem or "").rpartition(".")
            log.warning("logs directory %s: its file system is full (%s ended with its log "
                        "cut short): every job writing there loses output until space is "
                        "freed there", self.logs_dir,
                        f"{wid} attempt {attempt}" if wid else "a job")
        elif not full and self._logs_full:
            log.info("logs directory %s: its file system had room again when a job ended",
                     self.logs_dir)
        self._logs_full = full

    def _kill(self, handle: str) -> None:
        with self._lock:
            self._timers.pop(handle, None)
            self._kill_at.pop(handle, None)
        stem = self._stem(handle)
        if stem is not None and self._exit_info(stem, handle) is not None:
            return
        if stem is not None and self._kill_job(stem):
            return  # the wrapper reaps what it killed, then writes the exit file
        if stem is not None and (self.run_dir / f"{stem}.run").exists():
            # claimed: none of the job lives, and the wrapper, which handles SIGTERM from
            # before its claim, either never starts the command or reaps it and writes the exit
            # record. Killed now (even before it has recorded the command's process group:
            # the command may have started and ended in that moment), it would leave the
            # attempt with no record, seen as gone rather than stopped.
            return
        _signal(handle, signal.SIGKILL)  # an attempt this executor knows nothing of

    def _kill_job(self, stem: str) -> bool:
        """SIGKILL every process of the attempt; False if none was alive."""
        info = _procfs.read_json(self.run_dir / f"{stem}.run")
        if info is None:
            return False
        cgroups = _cgroups_of(info)
        if cgroups:
            if not _cgroup.procs(cgroups):
                return False
            _cgroup.kill(cgroups)
            return True
        pgid = info.get("child_pgid")
        alive = False
        if isinstance(pgid, int) and _procfs.group_alive(pgid):
            alive = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        handle = info.get("handle")
        if isinstance(handle, str) and _procfs.alive(handle):  # what the wrapper adopted
            wrapper = _procfs.parse_handle(handle)[0]
            for pid in _procfs.descendants(wrapper):
                alive = True
                _procfs.signal_below(pid, signal.SIGKILL, wrapper)
        return alive

    def _exit_info(self, stem: str, handle: str) -> dict[str, object] | None:
        """The exit record of ``stem`` if it is the one of this very attempt (``handle``):
        a record of another database or timeline names another wrapper."""
        ex = _procfs.read_json(self.run_dir / f"{stem}.exit")
        if ex is None or ex.get("handle") != handle:
            return None
        return ex

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
            # a wrapper's claim names its handle; a void claim the handle it voided
            h = (info.get("handle") or info.get("voided")) if info else None
            if isinstance(h, str):
                with self._lock:
                    self._index.setdefault(h, path.name[: -len(".run")])
            if info is not None:
                self._scanned.add(path.name)
        with self._lock:
            return self._index.get(handle)

    def _cgroups(self, stem: str) -> list[str]:
        """The cgroups made for attempt ``stem`` at launch: its wrapper's claim names them;
        before a claim, or after a void one, only its spec does; with no spec (the server
        died between making them and writing it), the name the launch gives them."""
        named = (_cgroups_of(_procfs.read_json(self.run_dir / f"{stem}.run"))
                 or _cgroups_of(_procfs.read_json(self.run_dir / f"{stem}.spec")))
        if named or self.cgroups is None:
            return named
        return [str(d) for d in self.cgroups.dirs(self._cgroup_name(stem))]

    def _cgroup_name(self, stem: str) -> str:
        """The name of attempt ``stem``'s cgroups, one per server store and attempt."""
        return f"{self.db_id[:12] or 'local'}-{stem}"

    def _reap(self) -> None:
        """Collect exited wrappers started by this process, so none lingers as a zombie."""
        with self._lock:
            done = [h for h, p in self._procs.items() if p.poll() is not None]
            for h in done:
                del self._procs[h]


def own_env(launch: Launch, devices: Sequence[Sequence[int]], checkpoint_file: str
            ) -> dict[str, str]:
    """apportion's own variables of an attempt, set over what its owner exported:
    ``CUDA_VISIBLE_DEVICES`` (``devices``: the machine's GPUs of each slot, the first
    host's), the ``APPORTION_*`` ones, and those of Slurm's that a batch script reads to
    know its job, as a Slurm job's batch step has them (on the Slurm executor, Slurm sets
    them): ``SLURM_JOB_ID`` and ``SLURM_JOBID`` (the workload's id, ``w-000013``, as
    ``%j`` names its output file and as ``SLURM_ARRAY_JOB_ID`` is an array's),
    ``SLURM_JOB_NAME`` (its name, if it has one), ``SLURM_SUBMIT_DIR`` (its working
    directory, as the Slurm executor sets it) and ``SLURM_GPUS_ON_NODE`` (its GPUs on the
    first host). Without them a script's ``ckpt/$SLURM_JOB_ID`` was ``ckpt/`` for every
    job, and the submitting shell's own (exported from inside a Slurm job) was read."""
    wid = launch.workload_id
    own = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in (devices[0] if devices else ())),
        "APPORTION_WORKLOAD_ID": wid,
        "APPORTION_ATTEMPT": str(launch.attempt),
        "APPORTION_GPUS": str(sum(len(s.gpu_indexes) for s in launch.slots)),
        "APPORTION_HOSTS": ";".join(
            f"{s.host}:{','.join(str(i) for i in s.gpu_indexes)}" for s in launch.slots
        ),
        _checkpoint.ENV: checkpoint_file,
        "SLURM_JOB_ID": wid,
        "SLURM_JOBID": wid,
        "SLURM_GPUS_ON_NODE": str(len(launch.slots[0].gpu_indexes) if launch.slots else 0),
    }
    name = (launch.env or {}).get("APPORTION_JOB_NAME")
    if name:
        own["SLURM_JOB_NAME"] = name
    if launch.chdir:
        own["SLURM_SUBMIT_DIR"] = launch.chdir
    return own


def _signal(handle: str, sig: int) -> None:
    """Send ``sig`` to the process of ``handle`` if it is still that process."""
    if _procfs.alive(handle):
        with contextlib.suppress(ProcessLookupError):
            os.kill(_procfs.parse_handle(handle)[0], sig)


def _held_devices(spec: dict[str, Any] | None) -> list[tuple[str, list[int], list[int]]]:
    """(host, its GPU indexes, the machine's GPUs) of each host an attempt's spec was
    given; for a spec written before specs recorded them, the first host's, read from the
    environment the attempt was started with."""
    if spec is None:
        return []
    if "slots" in spec:
        return [(str(s["host"]), list(s["gpus"]), list(s["devices"])) for s in spec["slots"]]
    env = spec.get("env") or {}
    first, _, gpus = str(env.get("APPORTION_HOSTS", "")).partition(";")[0].partition(":")
    cuda = str(env.get("CUDA_VISIBLE_DEVICES", ""))
    if not first or not gpus or not cuda:
        return []
    return [(first, [int(i) for i in gpus.split(",")], [int(i) for i in cuda.split(",")])]


def _dir_id(d: Path) -> tuple[int, int] | None:
    """(device, inode) of the directory ``d`` (links followed); None if there is none."""
    try:
        st = os.stat(d)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _ids(gpus: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(gpus))


def _span(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def _job_alive(info: dict[str, Any]) -> bool:
    """Whether a process of the job a run file records still lives (nothing is killed)."""
    cgroups = _cgroups_of(info)
    if cgroups:
        return bool(_cgroup.procs(cgroups))
    pgid = info.get("child_pgid")
    return isinstance(pgid, int) and _procfs.group_alive(pgid)


def _uncrossable(d: Path) -> str | None:
    """Why the jobs' accounts could not reach a directory in ``d``, or None: each
    directory on its way must let others cross it (the x bit for others)."""
    for p in [d, *d.parents]:
        if not os.stat(p).st_mode & stat.S_IXOTH:
            return (f"{p} cannot be crossed by the jobs' accounts (mode "
                    f"{stat.S_IMODE(os.stat(p).st_mode):04o}): their TMPDIR would be out of "
                    f"their reach; make it 0711 (chmod 0711 {p}), or name another directory")
    return None


def _cgroups_of(info: dict[str, Any] | None) -> list[str]:
    dirs = info.get("cgroups") if info else None
    return [str(d) for d in dirs] if isinstance(dirs, list) else []
