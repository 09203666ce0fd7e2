"""Run workloads as Slurm batch jobs: ``sbatch``/``scancel``/``squeue``/``sinfo``/``scontrol``.

apportion decides; Slurm only carries out. Every attempt becomes one batch job pinned to the
hosts apportion chose (``--nodelist``, ``-N``, ``--gres=gpu:N`` per host, ``--exclusive`` for
whole hosts), with ``--no-requeue`` because apportion requeues by itself. The handle is the
Slurm job id. See docs/slurm.md for the state mapping and the limits.

Pools: every node is in the executor's one ``cluster``; its GPU kind is its typed gres
(``gpu:h100:8`` -> kind ``H100``, or as the ``kinds`` map says), and a launch of a typed kind
asks for ``--gres=gpu:<type>:<n>`` in a partition that holds its hosts.

Exceptions::

    SlurmError             a Slurm command failed, or printed something we cannot read
     +-- SlurmUnavailable  slurmctld did not answer (down, unreachable, or too slow);
                           the caller keeps its own state and retries later
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pwd
import re
import shlex
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apportion.service import warn_signal
from apportion.service.executor import (
    AttemptState,
    ExecutorUnavailable,
    InventoryHost,
    Launch,
    LaunchRefused,
    Observation,
)
from apportion.service.executors._checkpoint import ENV as CHECKPOINT_ENV
from apportion.service.executors._checkpoint import checkpoint_time
from apportion.service.executors.identity import (
    Account,
    Identity,
    child_env,
    exec_problem,
    server_account,
)
from apportion.text import escape_controls

__all__ = [
    "SlurmError",
    "SlurmExecutor",
    "SlurmJob",
    "SlurmUnavailable",
    "map_job_state",
    "map_node_state",
    "node_kind",
    "parse_exit_code",
    "parse_gpu_count",
    "parse_gpu_types",
    "unowned_jobs",
]

# the files of an attempt (batch script, end marker, checkpoint, stop deadline) are named
# apportion-<workload>-<attempt>; the Slurm job is named after its workload's id alone, which
# squeue's default 8-character NAME column shows whole (w-000012)
JOB_NAME_PREFIX = "apportion-"
COMMENT_PREFIX = "apportion:"
# an end marker is one line: a job id, a status, a time, and a refusal's reason (a path
# at most); anything longer is no marker
MARKER_MAX_BYTES = 8192

# Slurm job states in which the attempt still holds (or is about to hold) its GPUs. A PENDING
# job was placed by apportion and waits only for Slurm to start it, so apportion counts it
# as running; COMPLETING still holds the GPUs while Slurm cleans up.
ACTIVE_JOB_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
    "RESIZING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "STAGE_OUT",
    "RESV_DEL_HOLD",
})
# Slurm job states in which the job ended by its own doing or its own limits: failed, with
# what Slurm says beyond the exit code
FAILED_JOB_STATES = {
    "FAILED": "",
    "OUT_OF_MEMORY": "out of memory (Slurm OUT_OF_MEMORY)",
    "DEADLINE": "reached its Slurm deadline (DEADLINE)",
}
# Slurm ended the job at its time limit (a partition's MaxTime: apportion sets no --time):
# the work did not fail, it ran out of time, and ends as ``timeout`` as on the local executor
TIMEOUT_REASON = "reached Slurm's time limit (TIMEOUT)"
# Slurm job states in which Slurm ended the job, not the work: its node failed or never
# booted, Slurm's own preemption took it, another cluster of a federation ran it. The
# attempt ends as on a host death (resumable work requeues, other work is lost), with why.
HOST_DEATH_JOB_STATES = {
    "NODE_FAIL": "node {nodes} failed (Slurm NODE_FAIL)",
    "BOOT_FAIL": "node {nodes} failed to boot (Slurm BOOT_FAIL)",
    "PREEMPTED": "preempted by Slurm itself on {nodes} (Slurm PREEMPTED: Slurm's preemption "
                 "must be off for apportion's jobs)",
    "REVOKED": "revoked by Slurm (REVOKED: another cluster of its federation ran it)",
}
# of those, the node's own failure: no exit code of the work's is read from them
NODE_DEATH_JOB_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
# the batch script's exit status when it refuses to start the command (its directory cannot
# be entered, its program is not found), as the local executor's wrapper and a shell report it
REFUSED_EXIT = 127
# once slurmctld answers again after an outage, it lists a job that ended meanwhile as running
# until the job's node reports (10-20 s here): for this long after a Slurm call went
# unanswered, a listing does not show that a job was still running
OUTAGE_SETTLE_S = 60.0
# a launched job Slurm keeps PENDING for longer than this (behind a job submitted to Slurm
# directly, say) is warned about: apportion counts it as running, and charges it, meanwhile
PENDING_WARN_S = 10.0
# a job of this executor's scripts that no open attempt owns (a launch given up as never
# launched whose sbatch went through late, a second job of one attempt) is stopped once the
# listings have shown it so for this long: the scheduler's own launch, whose id it learns as
# sbatch returns, never looks unowned for so long
STRAY_SETTLE_S = 10.0
# a job's umask when its submitter sent none, as the local executor's (_wrapper.CHILD_UMASK):
# sbatch would pass on the server's 077, and every file a job wrote would be its owner's alone
JOB_UMASK = 0o022

# stderr fragments of Slurm's client library when slurmctld cannot be reached
_UNAVAILABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
)
_GONE_MARKERS = ("Invalid job id specified",)
_ALREADY_DONE_MARKERS = ("already completing or completed", "Invalid job id specified")
log = logging.getLogger("apportion.executor.slurm")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GRES_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")


class SlurmError(RuntimeError):
    """A Slurm command failed or printed something unreadable; the message names which."""


class SlurmUnavailable(SlurmError, ExecutorUnavailable):
    """slurmctld did not answer within the timeout. Nothing was changed that we know of."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One apportion job as Slurm lists it (for reconciliation after a restart)."""

    job_id: str
    workload_id: str
    attempt: int
    state: str  # Slurm's job state, e.g. RUNNING, COMPLETED
    nodes: str  # Slurm's node list, e.g. "gpu[1-2]"


class SlurmExecutor:
    """Executor backed by a Slurm cluster reached through its command-line tools.

    ``jobs_dir``: where batch scripts (and logs without a ``log_path``) are written; on a real
    cluster it must be readable on the submit host only, but a log path must be writable from
    the compute nodes. ``partition``: passed to ``sbatch -p`` and filters the inventory (None:
    the cluster's default partition, all nodes). ``env``: environment for every Slurm command
    (e.g. with ``SLURM_CONF``); None means this process's; ``TZ`` is always ``UTC``.
    ``timeout_s``: limit of one command; past it :class:`SlurmUnavailable` is raised.
    ``logs_dir``: where :meth:`log_path` puts each attempt's log
    (``<logs_dir>/<workload>/<attempt>.log``; default: beside the scripts).
    ``identity``: whom work runs as. From a server running as root, each job is submitted as
    its owner (``sbatch --uid/--gid`` where this Slurm has them, else ``runuser -u``), so
    Slurm's accounting and permissions see the real user; the log's directory then belongs
    to the owner, since the node writes the log as them.

    Pools: ``cluster`` is the cluster of every node (one executor drives one slurmctld, one
    cluster; "": the config's default). A node's GPU kind comes from its typed gres:
    ``kinds`` maps apportion's kinds to Slurm's gres types (``{"B200": "nvidia_b200"}``);
    without it a type is the kind in upper case (``h100`` -> ``H100``), as the sacct importer
    reads ``gres/gpu:h100``. Untyped GPUs (``gpu:8``) have kind "" (the config's default). A
    node whose GPUs cannot be given one kind (a type ``kinds`` does not name, two types on
    one node) is reported down with the reason, so nothing is placed on it.
    """

    name = "slurm"

    def __init__(
        self,
        jobs_dir: str | os.PathLike[str],
        partition: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        logs_dir: str | os.PathLike[str] | None = None,
        identity: Identity | None = None,
        cluster: str = "",
        kinds: Mapping[str, str] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0, got {timeout_s}")
        if not isinstance(cluster, str) or "/" in cluster:
            raise ValueError(f"cluster: must be a name without '/', got {cluster!r}")
        self.cluster_name = cluster  # every node's cluster ("": the config's default)
        # apportion kind <-> Slurm gres type; None: the type in upper case is the kind
        self._type_of: dict[str, str] | None = None
        if kinds is not None:
            if not isinstance(kinds, Mapping):
                raise ValueError(f"kinds: must be a table of GPU kind = gres type, got {kinds!r}")
            for kind, gres_type in kinds.items():
                if not kind or "/" in kind:
                    raise ValueError(f"kinds: {kind!r}: a GPU kind must be a name without '/'")
                if not isinstance(gres_type, str) or not _GRES_TYPE.match(gres_type):
                    raise ValueError(f"kinds: {kind}: must be a Slurm gres type such as "
                                     f"'h100', got {gres_type!r}")
            types = list(kinds.values())
            if len(set(types)) != len(types):
                raise ValueError(f"kinds: two kinds map to one gres type: {dict(kinds)}")
            self._type_of = dict(kinds)
        # from the last inventory: node -> its partitions; kind -> gres type seen
        self._partitions: dict[str, tuple[str, ...]] = {}
        self._seen_types: dict[str, str] = {}
        self._partition_warned = False  # the partition's emptiness was warned about
        self.jobs_dir = Path(jobs_dir)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.partition = partition
        # TZ=UTC: scontrol prints times without a zone, in its own zone; read as UTC, they
        # name one instant whatever the server's TZ, the system's or a DST change (the jobs
        # never see it: they are submitted with --export=NONE)
        self.env = {**(os.environ if env is None else env), "TZ": "UTC"}
        self.timeout_s = timeout_s
        self.logs_dir = Path(logs_dir) if logs_dir is not None else None
        self.identity = identity if identity is not None else Identity()
        self._has_uid: bool | None = None  # whether sbatch takes --uid/--gid (asked once)
        self._lock = threading.Lock()
        self._kill_at: dict[str, float] = {}  # handle -> monotonic deadline of the hard kill
        self._stopped: set[str] = set()  # handles we asked to stop (their end is "signalled")
        # handle -> wall time of the last listing that showed the job still active (not one
        # just after an outage: OUTAGE_SETTLE_S), and when a Slurm call last got no answer:
        # what an end marker's time is checked against
        self._active_at: dict[str, float] = {}
        self._unreachable_at: float | None = None
        self._pending_warned: set[str] = set()  # handles warned about as long PENDING
        # the jobs of the last observe's listing, for stop_strays (None: taken since, or
        # that observe got no listing); job id -> when first seen owned by no open attempt
        self._listing: dict[str, dict[str, Any]] | None = None
        self._unowned_since: dict[str, float] = {}

    # -- Executor protocol ---------------------------------------------------------------

    def describe(self) -> str:
        """How work runs here, for the start of ``apportion serve``."""
        return f"slurm executor: {self.identity.describe()}"

    def inventory(self) -> list[InventoryHost]:
        """Slurm's nodes (of the partition, when one is set) with their GPUs, state, cluster
        and GPU kind (see the class)."""
        data = self._json(["sinfo", "--json"], "nodes")
        hosts: dict[str, InventoryHost] = {}
        partitions: dict[str, tuple[str, ...]] = {}
        seen: dict[str, str] = {}
        for node in data["nodes"]:
            name = str(node["name"])
            in_partitions = tuple(str(p) for p in node.get("partitions") or [])
            if self.partition and self.partition not in in_partitions:
                continue
            gres = str(node.get("gres") or "")
            flags = [str(f) for f in node.get("state_flags") or []]
            reason = str(node.get("reason") or "")
            if not reason and "NOT_RESPONDING" in flags:
                reason = "not responding to slurmctld"
            state = map_node_state(str(node.get("state") or ""), flags)
            kind, gres_type, problem = node_kind(gres, self._type_of)
            if problem:
                # apportion cannot tell what this node's GPUs are worth: place nothing there
                state, reason = "down", f"gres {gres}: {problem}"
            elif kind:
                seen[kind] = gres_type
            partitions[name] = in_partitions
            hosts[name] = InventoryHost(
                name=name, gpus=parse_gpu_count(gres), state=state, reason=reason,
                cluster=self.cluster_name, kind=kind,
            )
        with self._lock:
            self._partitions, self._seen_types = partitions, seen
        self._warn_empty_partition(data["nodes"], bool(hosts))
        return [hosts[n] for n in sorted(hosts, key=_natural_key)]

    def _warn_empty_partition(self, nodes: Sequence[Mapping[str, Any]], found: bool) -> None:
        """Say once that the configured partition holds none of Slurm's nodes (a wrong
        name, most likely): apportion then sees no host, and without this would only
        refuse every submission as larger than the cluster."""
        empty = bool(self.partition and nodes and not found)
        if empty and not self._partition_warned:
            names = sorted({str(p) for n in nodes for p in n.get("partitions") or []})
            log.warning("executor.slurm.partition = %r: none of Slurm's nodes is in that "
                        "partition (their partitions: %s), so apportion has no host to run "
                        "work on", self.partition, ", ".join(names) or "none")
        self._partition_warned = empty

    def launch(self, launch: Launch) -> str:
        """Write the batch script and ``sbatch`` it pinned to the slots' hosts; return the id."""
        if not launch.command:
            raise LaunchRefused(f"command: empty for workload {launch.workload_id}")
        if not launch.slots:
            raise LaunchRefused(f"slots: empty for workload {launch.workload_id}")
        hosts = [s.host for s in launch.slots]
        if len(set(hosts)) != len(hosts):
            raise LaunchRefused(f"slots: a host appears twice: {hosts}")
        per_host = {len(s.gpu_indexes) for s in launch.slots}
        if len(per_host) != 1:
            # one batch job has one --gres=gpu:N for all of its nodes
            raise LaunchRefused(f"slots: Slurm needs the same GPU count on every host: {hosts}")
        gpus = per_host.pop()
        gres_type, partition = self._pool_of(launch.kind, hosts)
        for key in launch.env or {}:
            if not _ENV_KEY.match(key):
                raise LaunchRefused(f"env: not a variable name: {key!r}")
        acct = self.identity.launch_account(launch)
        run_as = acct if acct is not None else server_account()
        env = child_env(run_as, launch.env, {})
        too_big = exec_problem(list(launch.command), env)
        if too_big is not None:
            raise LaunchRefused(f"argument list too long: {too_big}")

        base = _file_base(launch.workload_id, launch.attempt)
        prefix, script = self._submitter(acct, base)
        log = Path(launch.log_path) if launch.log_path else self.jobs_dir / f"{base}.log"
        _log_dir(log.parent, acct)
        end_file = _end_file(str(log), base)
        end_file.unlink(missing_ok=True)
        checkpoint = _checkpoint_file(str(log), base)
        stop_file = _stop_file(str(log), base)
        for stale in (checkpoint, stop_file):
            with contextlib.suppress(OSError):  # another timeline's; a directory is ignored
                stale.unlink(missing_ok=True)
        workdir = launch.chdir or run_as.home or "/"
        script.write_text(batch_script(launch, hosts, str(end_file), env, str(checkpoint),
                                       workdir, str(stop_file)))
        if acct is not None and prefix:
            os.chown(script, acct.uid, acct.gid)  # sbatch reads it as the owner
        args = [
            *prefix, "sbatch", "--parsable",
            # the job's environment is exactly the script's exports, never ours
            "--export=NONE",
            f"--chdir={workdir}",  # the script enters it too: Slurm falls back to /tmp
            # what an admin's squeue shows: the workload's id (the attempt is the comment's)
            f"--job-name={_safe(launch.workload_id)}",
            f"--comment={COMMENT_PREFIX}{launch.attempt}:{launch.workload_id}",
            f"--nodes={len(hosts)}",
            f"--nodelist={','.join(hosts)}",
            "--no-requeue",
            "--open-mode=append",
            # sbatch expands %j etc. in file names; %% is a literal %
            f"--output={str(log).replace('%', '%%')}",
        ]
        if gpus:
            args.append(f"--gres=gpu:{gres_type}:{gpus}" if gres_type else f"--gres=gpu:{gpus}")
        if launch.whole_hosts:
            args.append("--exclusive")
        if partition:
            args.append(f"--partition={partition}")
        if acct is not None and not prefix:
            args += [f"--uid={acct.uid}", f"--gid={acct.gid}"]
        args.append(str(script))
        out = self._run(args).stdout.strip()
        job_id = out.split(";", 1)[0]  # "id" or "id;cluster"
        if not job_id.isdigit():
            raise SlurmError(f"sbatch: unexpected output {out!r}")
        return job_id

    def _pool_of(self, kind: str, hosts: Sequence[str]) -> tuple[str, str]:
        """(gres type, partition) of a launch of ``kind`` on ``hosts``.

        A kind the last inventory saw as a typed gres asks for that type; any other (the
        config's default kind of untyped GPUs, "") asks for untyped GPUs, as before. The
        partition is the configured one; without it, a typed launch goes to the first
        partition (in Slurm's order) that holds all its hosts, since the default partition
        may not hold them (a partition per GPU type)."""
        with self._lock:
            gres_type = self._seen_types.get(kind, "") if kind else ""
            if self.partition or not gres_type:
                return gres_type, self.partition or ""
            common = [p for p in self._partitions.get(hosts[0], ())
                      if all(p in self._partitions.get(h, ()) for h in hosts)]
        return gres_type, common[0] if common else ""

    def _submitter(self, acct: Account | None, base: str) -> tuple[list[str], Path]:
        """How sbatch is run for ``acct`` (a command prefix) and where its script goes:
        ``--uid/--gid`` (no prefix) where this Slurm has them, else ``runuser -u``, with the
        script in a directory of the owner's."""
        if acct is None or self._sbatch_has_uid():
            return [], self.jobs_dir / f"{base}.sh"
        d = self.jobs_dir / "users" / acct.name
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.jobs_dir, 0o711)
        os.chmod(d.parent, 0o711)
        os.chown(d, acct.uid, acct.gid)
        os.chmod(d, 0o700)
        return ["runuser", "-u", acct.name, "--"], d / f"{base}.sh"

    def _sbatch_has_uid(self) -> bool:
        """Whether this sbatch accepts --uid and --gid (Slurm 23.02 removed them)."""
        if self._has_uid is None:
            help_text = self._run(["sbatch", "--help"], check=False).stdout
            self._has_uid = "--uid" in help_text and "--gid" in help_text
        return self._has_uid

    def stop(self, handle: str, grace_s: float) -> None:
        """SIGTERM the batch script now (it forwards it to the command); SIGKILL after
        ``grace_s``, enforced by :meth:`tick` (called by :meth:`observe`) and by the batch
        script itself, which is told the deadline first (:meth:`_record_stop`), so it holds
        while this server is down. Never blocks on the job itself."""
        self._stop(handle, grace_s)

    def _stop(self, handle: str, grace_s: float, job: tuple[int, str] | None = None) -> None:
        """:meth:`stop`; ``job``: the job's attempt and workload id, if known (else asked)."""
        if not handle.isdigit():
            return
        with self._lock:
            self._stopped.add(handle)
        # a pending job would silently drop the signal: cancel it outright instead
        self._scancel(["--state=PENDING", handle])
        if grace_s <= 0:
            self._hard_kill(handle)
            return
        self._record_stop(handle, grace_s, job)  # read by the batch script at the SIGTERM
        self._scancel(["--batch", "--signal=TERM", handle])
        with self._lock:
            self._kill_at[handle] = time.monotonic() + grace_s

    def _record_stop(self, handle: str, grace_s: float, job: tuple[int, str] | None) -> None:
        """Write the stop's kill deadline (``now + grace_s``, wall clock) beside the job's
        end marker, as ``<job id> <epoch seconds>``, for its batch script: at each SIGTERM
        the script reads it and at that time SIGKILLs its whole job itself
        (:func:`batch_script`), so the job is killed at its deadline even if this server is
        down by then; :meth:`tick`'s kill stays (harmless twice). An earlier deadline
        already recorded for this job is kept: a stop sent again never extends it. ``job``
        (attempt, workload id) is read from the job's comment (``scontrol``) when not
        given, and believed only if the job runs this executor's batch script of that
        attempt (its command, which the owner cannot change; the comment they can, and
        would otherwise have this write into another attempt's directory). The file goes
        where this executor put the attempt's log (:meth:`log_path`), never where the job
        says its output goes: the job's owner can change its name and output path in
        Slurm, and this runs as root. Not written (said in the log), the server's kill
        alone remains, as before."""
        if job is None:
            try:
                found = self._scontrol_job(handle)
            except SlurmUnavailable:
                raise  # the SIGTERM cannot be sent either: the caller tries again
            except SlurmError as e:
                log.warning("Slurm job %s: its kill deadline was not recorded for its batch "
                            "script (%s): only this server kills it at the end of its "
                            "grace", handle, e)
                return
            if found is None:
                return  # gone: nothing to stop
            job = _parse_comment(found.get("Comment", "").strip())
            if job is None:
                return  # not a job of apportion's
            # the comment is the owner's to change (scontrol update): believed only for the
            # job of this executor's script of that attempt, as find() believes it
            if not self._is_script_of(found.get("Command", "").strip(), *job):
                log.warning("Slurm job %s: its comment names %s attempt %d, whose batch "
                            "script it does not run (%s): its kill deadline was not "
                            "recorded; only this server kills it at the end of its grace",
                            handle, job[1], job[0], found.get("Command", "").strip())
                return
        attempt, workload_id = job
        base = _file_base(workload_id, attempt)
        path = _stop_file(str(self.log_path(workload_id, attempt)), base)
        kill_at = time.time() + max(0.0, grace_s)
        old = _read_stop(handle, path)
        if old is not None and old <= kill_at:
            return
        try:
            _write_stop(path, handle, kill_at)
        except OSError as e:  # a full disk; a directory where the file goes; no log dir
            log.warning("Slurm job %s: its kill deadline was not recorded for its batch "
                        "script (%s: %s): only this server kills it at the end of its grace",
                        handle, path, e.strerror or e)

    def signal(self, handle: str, signum: int, batch: bool) -> None:
        """``scancel --signal``: with ``batch`` (``--batch``) to the batch script, which
        forwards it to the command (:func:`batch_script`, ``Launch.batch_signal``), else to
        the job's steps (what ``srun`` started), not the batch script, as Slurm's own
        ``--signal`` without ``B:`` does."""
        if not handle.isdigit():
            return
        sig = f"--signal={warn_signal.name_of(signum)}"
        self._scancel(["--batch", sig, handle] if batch else [sig, handle])

    def observe(self, handles: Sequence[str]) -> dict[str, Observation]:
        """State of each handle from one ``squeue --json`` (plus ``scontrol`` for misses)."""
        self.tick()
        asked_at = time.time()
        with self._lock:
            self._listing = None  # a listing older than this call is never stop_strays'
        jobs = self._squeue()
        with self._lock:
            self._listing = jobs
        result: dict[str, Observation] = {}
        for handle in handles:
            job = jobs.get(handle)
            if job is not None:
                state = _job_state(job.get("job_state"))
                code, sig = _wait_status(job.get("exit_code"))
                name, stdout = str(job.get("name") or ""), str(job.get("standard_output") or "")
                comment = str(job.get("comment") or "")
                slurm_end = float(job.get("end_time") or 0)
                nodes = str(job.get("nodes") or "")
                if state == "PENDING":
                    self._warn_pending(handle, name, job, asked_at)
            elif handle.isdigit():
                found = self._scontrol_job(handle)
                if found is None:
                    result[handle] = Observation(handle, AttemptState.GONE)
                    continue
                state = found.get("JobState", "")
                code, sig = parse_exit_code(found.get("ExitCode", "0:0"))
                name, stdout = found.get("JobName", ""), found.get("StdOut", "")
                comment = found.get("Comment", "").strip()
                slurm_end = _scontrol_time(found.get("EndTime", ""))
                nodes = found.get("NodeList", "")
            else:
                result[handle] = Observation(handle, AttemptState.GONE)
                continue
            with self._lock:
                stopped = handle in self._stopped
            ended_at, marker, by = None, None, ""
            # its files' name, from the attempt its comment names (not its job name: that is
            # the workload's id alone)
            parsed = _parse_comment(comment)
            base = "" if parsed is None else _file_base(parsed[1], parsed[0])
            if state in ACTIVE_JOB_STATES:
                with self._lock:
                    outage = self._unreachable_at
                    if outage is None or asked_at - outage > OUTAGE_SETTLE_S:
                        self._active_at[handle] = asked_at
            else:
                marker = _read_marker(handle, base, stdout)
                ended_at = self._end_time(handle, marker, slurm_end)
                if state == "CANCELLED" and not stopped:
                    by = self._cancelled_by(handle)
            result[handle] = map_job_state(handle, state, code, sig, stopped, ended_at,
                                           nodes=nodes, cancelled_by=by)
            if (marker is not None and marker.refused is not None and state == "FAILED"
                    and (code, sig) == (REFUSED_EXIT, 0)):
                # Slurm confirms the script's own refusal: it never started the command
                result[handle] = replace(result[handle], refused=marker.refused)
            if result[handle].state is AttemptState.RUNNING and base and stdout:
                # the job's own file beside its log, on the file system the logs share
                at = checkpoint_time(_checkpoint_file(stdout, base))
                result[handle] = replace(result[handle], checkpoint_at=at)
        with self._lock:  # only the handles still asked about need their last sighting
            self._active_at = {h: t for h, t in self._active_at.items() if h in result}
            self._pending_warned &= result.keys()
        return result

    def _warn_pending(self, handle: str, name: str, job: Mapping[str, Any], now: float) -> None:
        """Say once per job that Slurm keeps it PENDING past PENDING_WARN_S after its
        launch, and why (Slurm's reason): apportion counts a launched job as running, so
        the wait is charged as GPU time (docs/slurm.md, Limits)."""
        submitted = float(job.get("submit_time") or 0)
        with self._lock:
            if not submitted or now - submitted < PENDING_WARN_S or handle in self._pending_warned:
                return
            self._pending_warned.add(handle)
        reason = str(job.get("state_reason") or "") or "no reason given"
        log.warning("Slurm job %s (%s) is still PENDING in Slurm %.0f s after its launch "
                    "(%s): apportion counts it as running and charges its GPUs meanwhile; "
                    "a job not submitted through apportion may hold its nodes",
                    handle, name, now - submitted, reason)

    def _end_time(self, handle: str, marker: _Marker | None, slurm_end: float) -> float | None:
        """When a finished job ended: Slurm's EndTime (whole seconds, None if it has none),
        made exact by the time the batch script recorded, within that second. Only when
        Slurm could not be asked since this executor last saw the job active may the
        recorded time go back further, to that last sighting: Slurm dates an end when the
        controller hears of it, late after an outage. The script runs as the job's owner,
        who can write that file too: a forged time shortens the charge by less than a
        second, or by no more than the outage and the minute after it."""
        if not slurm_end:
            return None
        if marker is None:
            return slurm_end
        with self._lock:
            seen, outage = self._active_at.get(handle), self._unreachable_at
        after_outage = seen is not None and outage is not None and outage >= seen
        earliest = seen if after_outage and seen is not None else slurm_end
        return min(max(marker.at, earliest), slurm_end + 1.0)

    def _cancelled_by(self, handle: str) -> str:
        """Who cancelled a job in Slurm, from ``sacct`` (``CANCELLED by 1001``, with
        slurmdbd): the account's name, or ``uid N``; "" where sacct cannot say."""
        try:
            proc = subprocess.run(
                ["sacct", "-n", "-X", "-P", "-o", "State", "-j", handle], env=self.env,
                capture_output=True, text=True, timeout=self.timeout_s, stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):  # not installed, no answer
            return ""
        m = re.search(r"CANCELLED by (\d+)", proc.stdout)
        if proc.returncode != 0 or m is None:
            return ""
        try:
            return pwd.getpwuid(int(m.group(1))).pw_name
        except KeyError:
            return f"uid {m.group(1)}"

    def set_host_drain(self, host: str, drain: bool, reason: str) -> None:
        """``scontrol update State=DRAIN`` (with the reason) or ``State=RESUME``."""
        if drain:
            reason = reason.replace("\n", " ").strip() or "drained by apportion"
            self._run(["scontrol", "update", f"NodeName={host}", "State=DRAIN",
                       f"Reason={reason}"])
            return
        proc = self._run(["scontrol", "update", f"NodeName={host}", "State=RESUME"],
                         check=False)
        # resuming a node that is not drained is a no-op for us, not an error
        if proc.returncode != 0 and "Invalid node state" not in proc.stderr:
            raise SlurmError(f"scontrol update NodeName={host} State=RESUME: "
                             f"{proc.stderr.strip()}")

    def close(self) -> None:
        """Nothing to release: every call is a short-lived subprocess."""

    def log_path(self, workload_id: str, attempt: int) -> Path:
        """Where an attempt's output goes (the scheduler passes it as ``Launch.log_path``)."""
        if self.logs_dir is None:
            return self.jobs_dir / f"{_file_base(workload_id, attempt)}.log"
        return self.logs_dir / _safe(workload_id) / f"{attempt}.log"

    def find(self, workload_id: str, attempt: int) -> str | None:
        """The job id of this attempt if Slurm has it (a launch whose answer was lost, e.g. an
        ``sbatch`` that timed out after the controller had queued the job), else None.
        Only a job of this executor's script counts: another apportion (or an earlier
        database) on the same cluster may have used the same workload id. Of several (the
        attempt submitted twice) the oldest is adopted; :meth:`stop_strays` stops the
        others, as it stops one that shows up only after this found nothing. Raises
        :class:`SlurmUnavailable` when Slurm cannot say."""
        ids = sorted(
            (job_id for job_id, job in self._squeue().items()
             if _parse_comment(str(job.get("comment") or "")) == (attempt, workload_id)
             and self._is_script_of(str(job.get("command") or ""), attempt, workload_id)),
            key=int,
        )
        return ids[0] if ids else None

    def _is_script_of(self, command: str, attempt: int, workload_id: str) -> bool:
        """Whether a job's command (which its owner cannot change in Slurm, unlike its
        comment, name and output path) is this executor's batch script of that attempt."""
        name = f"{_file_base(workload_id, attempt)}.sh"
        return _is_script(command, os.path.abspath(self.jobs_dir / name),
                          os.path.abspath(self.jobs_dir / "users"), name)

    def stop_unknown(self, known: Collection[str], grace_s: float) -> None:
        """Stop every job of this executor's scripts that Slurm still runs or holds for no
        attempt the database knows (its id not in ``known``): a restored backup's lost
        future, which the database can neither charge, stop nor see. Each is named in a
        warning and stopped as :meth:`stop` does, which returns at once: Slurm gives its
        GPUs to no other job before it has ended. Jobs of another data directory's
        scripts are left alone. When Slurm does not answer, a warning says so and nothing
        else happens (the start goes on; :meth:`stop_strays` finds them on a later pass)."""
        try:
            self._stop_unknown(known, grace_s)
        except SlurmUnavailable as e:
            log.warning("Slurm jobs the database does not know were not looked for: %s", e)

    def _stop_unknown(self, known: Collection[str], grace_s: float) -> None:
        for job_id, attempt, workload_id in unowned_jobs(self._squeue(), known, self.jobs_dir):
            log.warning("%s attempt %d (Slurm job %s) runs for no attempt the database "
                        "knows (a backup restored from before it started?): stopped",
                        workload_id, attempt, job_id)
            self._stop(job_id, grace_s, (attempt, workload_id))

    def stop_strays(
        self, known: Collection[str], launching: Collection[tuple[str, int]], grace_s: float
    ) -> None:
        """Stop, while the server runs, each job of this executor's scripts that Slurm
        runs or holds for no open attempt: its id is none of ``known`` (the open attempts'
        handles) and its attempt is none of ``launching`` (open attempts whose launch got
        no answer yet, which ``find`` may still adopt). That is an ``sbatch`` that timed out
        and went through only after ``find`` had found nothing (the attempt ended
        ``never launched`` and requeued), or a second job of one attempt beside the one
        ``find`` adopted (the oldest). Each is stopped as :meth:`stop` does once the
        listings have shown it unowned for STRAY_SETTLE_S, and named in a warning.

        No Slurm call of its own: it reads the listing of the :meth:`observe` called just
        before it (the scheduler computes ``known`` after that observe, so any job in the
        listing that its launches started already has its handle there); without one
        (that observe got no answer) it does nothing."""
        with self._lock:
            jobs, self._listing = self._listing, None
        if jobs is None:
            return
        now = time.monotonic()
        found = unowned_jobs(jobs, known, self.jobs_dir, launching)
        with self._lock:
            self._unowned_since = {j: self._unowned_since.get(j, now) for j, _, _ in found}
            due = [(j, n, w) for j, n, w in found if j not in self._stopped
                   and now - self._unowned_since[j] >= STRAY_SETTLE_S]
        for job_id, attempt, workload_id in due:
            try:
                self._stop(job_id, grace_s, (attempt, workload_id))
            except SlurmError:
                with self._lock:  # not stopped after all: looked at again next time
                    self._stopped.discard(job_id)
                raise
            log.warning("%s attempt %d (Slurm job %s) runs for no open attempt (a launch "
                        "given up as never launched that Slurm queued late, or a second "
                        "job of one attempt): stopped", workload_id, attempt, job_id)

    # -- beyond the protocol -------------------------------------------------------------

    def tick(self) -> None:
        """Send the hard kill to every stopped job whose grace period has run out."""
        now = time.monotonic()
        with self._lock:
            due = [h for h, t in self._kill_at.items() if t <= now]
        for handle in due:
            self._hard_kill(handle)  # raises SlurmUnavailable: the deadline stays for later
            with self._lock:
                self._kill_at.pop(handle, None)

    def list_jobs(self) -> dict[str, SlurmJob]:
        """Every job apportion submitted that Slurm still knows of, by job id (finished ones
        stay listed for Slurm's MinJobAge)."""
        jobs: dict[str, SlurmJob] = {}
        for job_id, job in self._squeue().items():
            parsed = _parse_comment(str(job.get("comment") or ""))
            if parsed is None:
                continue
            attempt, workload_id = parsed
            jobs[job_id] = SlurmJob(
                job_id=job_id, workload_id=workload_id, attempt=attempt,
                state=_job_state(job.get("job_state")), nodes=str(job.get("nodes") or ""),
            )
        return jobs

    def find_by_workload(self, workload_id: str) -> list[SlurmJob]:
        """This workload's jobs that Slurm still knows of, oldest attempt first."""
        found = [j for j in self.list_jobs().values() if j.workload_id == workload_id]
        return sorted(found, key=lambda j: (j.attempt, int(j.job_id)))

    # -- Slurm calls ---------------------------------------------------------------------

    def _run(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                args, env=self.env, capture_output=True, text=True, timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise self._unavailable(
                f"{args[0]}: no answer within {self.timeout_s:g} s (slurmctld down or slow)"
            ) from None
        except FileNotFoundError:
            raise SlurmError(f"{args[0]}: not installed (scripts/install-system.sh)") from None
        if proc.returncode != 0:
            err = proc.stderr.strip()
            if any(m in err for m in _UNAVAILABLE_MARKERS):
                raise self._unavailable(f"{args[0]}: {err}")
            if check:
                raise SlurmError(f"{' '.join(args[:3])}: exit {proc.returncode}: {err}")
        return proc

    def _json(self, args: list[str], key: str) -> dict[str, Any]:
        out = self._run(args).stdout
        try:
            data = json.loads(out)
        except json.JSONDecodeError as e:
            raise SlurmError(f"{args[0]} --json: unreadable output: {e}") from None
        errors = data.get("errors") or []
        if errors:
            # these tools exit 0 with an "errors" list when slurmctld does not answer
            text = "; ".join(str(e.get("error", e)) for e in errors)
            raise self._unavailable(f"{args[0]} --json: {text}")
        if not isinstance(data.get(key), list):
            raise SlurmError(f"{args[0]} --json: no {key!r} list in output")
        return dict(data)

    def _unavailable(self, message: str) -> SlurmUnavailable:
        """The error for a Slurm call that got no answer, noting when (see _end_time)."""
        with self._lock:
            self._unreachable_at = time.time()
        return SlurmUnavailable(message)

    def _squeue(self) -> dict[str, dict[str, Any]]:
        # squeue --json ignores -j and state filters in Slurm 22.05: it lists every job
        data = self._json(["squeue", "--json"], "jobs")
        return {str(j["job_id"]): j for j in data["jobs"]}

    def _scontrol_job(self, job_id: str) -> dict[str, str] | None:
        proc = self._run(["scontrol", "-o", "show", "job", job_id], check=False)
        if proc.returncode != 0:
            if any(m in proc.stderr for m in _GONE_MARKERS):
                return None
            raise SlurmError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
        return _parse_scontrol_line(proc.stdout.strip().splitlines()[0] if proc.stdout else "")

    def _scancel(self, args: list[str]) -> None:
        proc = self._run(["scancel", *args], check=False)
        if proc.returncode != 0 and not any(m in proc.stderr for m in _ALREADY_DONE_MARKERS):
            raise SlurmError(f"scancel {' '.join(args)}: {proc.stderr.strip()}")

    def _hard_kill(self, handle: str) -> None:
        """SIGKILL to every process of the job, now. A plain ``scancel --signal=KILL`` (with
        or without ``--full``) is a cancel: Slurm sends SIGTERM again and SIGKILL only after
        its KillWait, while the job's end is dated at once. Each step (``srun``) gets SIGKILL
        as a step, then the batch step, the script and every process of it, as a signal
        (``--batch --full``)."""
        steps = self._run(["squeue", "-h", "-s", "-j", handle, "-o", "%i"], check=False).stdout
        numbered = [s for s in steps.split() if s.partition(".")[2].isdigit()]
        if numbered:
            self._scancel(["--signal=KILL", *numbered])
        self._scancel(["--batch", "--full", "--signal=KILL", handle])


# -- pure helpers (tested without Slurm) ---------------------------------------------------


def batch_script(
    launch: Launch, hosts: Sequence[str], end_file: str = "",
    env: Mapping[str, str] | None = None, checkpoint_file: str = "", chdir: str = "",
    stop_file: str = "",
) -> str:
    """The bash batch script of one attempt.

    It sets the submitter's umask (022 when none was sent, as the local executor), enters
    ``chdir`` itself,
    as the job's owner (Slurm's ``--chdir`` falls back to /tmp when it cannot), and checks
    that the command's program exists and may be run: if not, it says why in the log and
    in ``end_file`` (``<job id> refused <epoch> <why>``) and exits 127, never starting it
    elsewhere (``launch refused: chdir /x: Permission denied``, as the local executor).

    The command runs in the background and the script waits for it: bash runs a trap only
    between commands, and ``wait`` returns as soon as a trapped signal arrives, so a SIGTERM
    sent to the script (``scancel --batch``) is forwarded to the command at once. The script
    exits with the command's status. With ``end_file``, it first writes
    ``<job id> <status> <epoch seconds>`` there: Slurm dates a job's end when the controller
    hears of it, which after a controller outage can be long after the real end.
    ``checkpoint_file``: exported as ``APPORTION_CHECKPOINT_FILE`` (the job touches it
    after each checkpoint). ``chdir`` is exported as ``SLURM_SUBMIT_DIR`` too.

    With ``stop_file``, the script enforces a stop's kill deadline itself
    (:func:`_deadline_lines`), so it holds while apportion's server is down.
    """
    env = {
        **dict((launch.env or {}) if env is None else env),
        # apportion's own variables win over exported ones
        "APPORTION_WORKLOAD_ID": launch.workload_id,
        "APPORTION_ATTEMPT": str(launch.attempt),
        "APPORTION_HOSTS": ",".join(hosts),
        **({CHECKPOINT_ENV: checkpoint_file} if checkpoint_file else {}),
        # sbatch would give the directory it ran in: the server's
        **({"SLURM_SUBMIT_DIR": chdir} if chdir else {}),
    }
    marker = f" > {shlex.quote(end_file)} 2>/dev/null" if end_file else " >/dev/null"
    lines = [
        "#!/bin/bash",
        f"# apportion workload {_one_line(launch.workload_id)} attempt {launch.attempt}",
        f"umask {JOB_UMASK if launch.umask is None else launch.umask:03o}",
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        # sbatch --export=NONE leaves SLURM_EXPORT_ENV=NONE, which srun would inherit: its
        # steps would start without even PATH. Steps get the job's (exact) environment.
        "unset SLURM_EXPORT_ENV",
        "refuse() {  # the command cannot start here: why, in the log and the end marker",
        '  echo "apportion: not started: $1" >&2',
        "  printf '%s refused %s %s\\n' \"${SLURM_JOB_ID:-}\" \"${EPOCHREALTIME/,/.}\" "
        f"\"${{1//$'\\n'/ }}\"{marker}",
        f"  exit {REFUSED_EXIT}",
        "}",
        *(_enter(chdir) if chdir else []),
        _check_program(launch.command[0]),
        "forwarded=",
        "child=",
        *(_deadline_lines(stop_file, marker) if stop_file else []),
        # (the timer is armed once the command's pid is known: a background job of its
        # own before then would take its place in $!)
        ('trap \'forwarded=1; if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; '
         "arm_kill; fi' TERM" if stop_file else
         'trap \'forwarded=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null\' TERM'),
        *_forward_warning(launch.batch_signal),
        f"{shlex.join(launch.command)} &",
        "child=$!",
        ('[ -n "$forwarded" ] && { kill -TERM "$child" 2>/dev/null; arm_kill; }  # TERM came '
         "before the start" if stop_file else
         '[ -n "$forwarded" ] && kill -TERM "$child" 2>/dev/null  # TERM came before the start'),
        *([f'[ -n "$warned" ] && kill -{warn} "$child" 2>/dev/null  # it came before the start']
          if (warn := _forwarded_warning(launch.batch_signal)) else []),
        'wait "$child"; rc=$?',
        "# a trapped signal interrupts wait: wait again for the command's own status",
        'while [ -n "$forwarded$again" ]; do forwarded=; again=; wait "$child"; rc=$?; done',
        *(['[ -n "$timer" ] && kill -KILL "$timer" 2>/dev/null  # it ended in time: no kill']
          if stop_file else []),
        *([f'printf \'%s %s %s\\n\' "${{SLURM_JOB_ID:-}}" "$rc" "${{EPOCHREALTIME/,/.}}" '
           f'> {shlex.quote(end_file)} 2>/dev/null']
          if end_file else []),
        'exit "$rc"',
        "",
    ]
    return "\n".join(lines)


def _deadline_lines(stop_file: str, marker: str) -> list[str]:
    """Batch script lines enforcing a stop's kill deadline, as the server's :meth:`tick`
    does, so that it holds while the server is down (a crash, a restart).

    ``stop()`` writes ``<job id> <epoch seconds>`` to ``stop_file`` before its SIGTERM; at
    each SIGTERM the script reads it (``arm_kill``) and, if it is this job's and earlier
    than the deadline it keeps (a stop sent again never puts the kill later), arms a timer
    in place of any earlier one. The timer is a subshell that waits with ``read -t`` (no
    ``sleep`` left behind when the script kills it, once the command ended in time) and
    ignores TERM, INT and HUP (a job signalling its own process group does not disarm it).
    At the deadline it writes the end marker, dated then, and SIGKILLs every process of
    the job as the server's kill does: each step (``srun``, outside this script's
    processes), then the batch step (``--batch --full``: this script, the timer and all
    they started), and this script's process group directly (when it leads one, as
    slurmstepd starts it), should Slurm not answer.
    The job runs as its owner, who may end the timer: the server's kill stays."""
    q = shlex.quote(stop_file)
    return [
        "# a stop's kill deadline (apportion's stop() writes it before its SIGTERM)",
        "kill_at=",
        "timer=",
        "kill_job() {  # at the deadline: the end marker, dated now; SIGKILL to the whole job",
        "  printf '%s %s %s\\n' \"${SLURM_JOB_ID:-}\" 137 \"${EPOCHREALTIME/,/.}\""
        f"{marker}",
        "  local s steps=()",
        '  for s in $(squeue -h -s -j "${SLURM_JOB_ID:-}" -o %i 2>/dev/null); do',
        r'    [[ $s =~ \.[0-9]+$ ]] && steps+=("$s")',
        "  done",
        '  [ ${#steps[@]} -gt 0 ] && scancel --signal=KILL "${steps[@]}" 2>/dev/null',
        '  scancel --batch --full --signal=KILL "${SLURM_JOB_ID:-}" 2>/dev/null',
        "  local pgid; pgid=$(ps -o pgid= -p $$ 2>/dev/null)  # a group it leads (slurmstepd's",
        '  [ "${pgid// /}" = "$$" ] && kill -KILL -- "-$$"  # way), never one it joined',
        "}",
        "arm_kill() {  # at each SIGTERM: the earliest deadline recorded for this job holds",
        "  local id at",
        f"  [ -f {q} ] && read -r id at < {q} 2>/dev/null || return 0",
        r'  [[ $id == "${SLURM_JOB_ID:-}" && $at =~ ^([0-9]+)\.([0-9]{6})$ ]] || return 0',
        "  at=$((10#${BASH_REMATCH[1]}${BASH_REMATCH[2]}))  # microseconds",
        '  [[ -z $kill_at || $at -lt $kill_at ]] || return 0',
        "  kill_at=$at",
        '  [ -n "$timer" ] && kill -KILL "$timer" 2>/dev/null',
        "  (",
        "    trap '' TERM INT HUP",
        "    exec 3<> <(:)  # a pipe nobody writes to: read -t waits without a child",
        '    while now=${EPOCHREALTIME/[.,]/}; [ "$now" -lt "$at" ]; do',
        "      printf -v left '%d.%06d' $(((at - now) / 1000000)) $(((at - now) % 1000000))",
        '      read -r -t "$left" -u 3 _ || [ $? -gt 128 ] || sleep "$left"',
        "    done",
        "    kill_job",
        "  ) &",
        "  timer=$!",
        '  disown "$timer"  # bash would note its SIGKILL ("Killed") in the job\'s log',
        "}",
    ]


def _forwarded_warning(signum: int) -> str | None:
    """The name (``USR1``) of the ``--signal=B:`` signal the batch script forwards to the
    command, or None: none asked for, or one the script does not trap (TERM is forwarded
    already; KILL and STOP cannot be trapped, and reach the script alone, as they would
    reach the batch shell under sbatch)."""
    if not signum or signum in (signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP):
        return None
    return warn_signal.name_of(signum)


def _forward_warning(signum: int) -> list[str]:
    """Script lines forwarding ``--signal=B:``'s signal (``scancel --batch`` sends it to
    this script) to the command, which is the batch shell the owner wrote; one that comes
    before the command started is sent to it once it has."""
    warn = _forwarded_warning(signum)
    if warn is None:
        return []
    return ["warned=", "again=",
            f"trap 'again=1; if [ -n \"$child\" ]; then kill -{warn} \"$child\" 2>/dev/null; "
            f"else warned=1; fi' {warn}"]


def _enter(chdir: str) -> list[str]:
    """Script lines entering ``chdir``, or refusing with the system's reason."""
    q = shlex.quote(chdir)
    return [f"cd -- {q} 2>/dev/null || {{ why=$(cd -- {q} 2>&1); "
            f'refuse "chdir "{q}": ${{why##*: }}"; }}']


def _check_program(program: str) -> str:
    """A script line refusing a program that is not found or may not be run (as ``execve``
    would: a path must be an executable file, a name be found on PATH)."""
    q = shlex.quote(program)
    if "/" not in program:
        return f'command -v -- {q} >/dev/null || refuse "command not found: "{q}'
    return (f'[ -e {q} ] || refuse "command not found: "{q}; '
            f'[ -x {q} ] && [ ! -d {q} ] || refuse "permission denied: "{q}')


def map_job_state(
    handle: str, state: str, exit_code: int, signal: int, stopped: bool = False,
    ended_at: float | None = None, nodes: str = "", cancelled_by: str = "",
) -> Observation:
    """Observation of a Slurm job state. ``stopped``: apportion asked it to stop;
    ``ended_at``: when it ended, if known (kept on the observation of a finished job);
    ``nodes``: its node list; ``cancelled_by``: who cancelled it in Slurm, if known.

    PENDING and the other not-yet-final states read as RUNNING (the job was placed; Slurm
    only has not started it yet). COMPLETED is exit 0; FAILED, OUT_OF_MEMORY and DEADLINE
    keep the exit code (a signal N reads as 128 + N, like a shell) and never read as 0, with
    what Slurm says in ``reason``; TIMEOUT keeps its exit code too and is ``timed_out``
    (the workload ends as ``timeout``, as at apportion's own time limit); NODE_FAIL,
    BOOT_FAIL, PREEMPTED and REVOKED are Slurm's doing, not the work's: ``host_died``,
    with why. CANCELLED is always ``signalled``, and without an exit code when Slurm has
    none (``0:0``: cancelled before it ran), so that work cancelled in Slurm never reads as
    exit 0; cancelled outside apportion, ``reason`` says so (and by whom, when known).
    """
    if state in ACTIVE_JOB_STATES:
        return Observation(handle, AttemptState.RUNNING)
    code = 128 + signal if signal else exit_code
    if state == "COMPLETED":
        return Observation(handle, AttemptState.EXITED, code, stopped or bool(signal), ended_at)
    if state == "CANCELLED":
        by = f" by {cancelled_by}" if cancelled_by else ", not through apportion"
        return Observation(handle, AttemptState.EXITED, code or None, True, ended_at,
                           reason=None if stopped else f"cancelled in Slurm{by}")
    if state in HOST_DEATH_JOB_STATES:
        why = HOST_DEATH_JOB_STATES[state].format(nodes=nodes or "(unknown)")
        # a node's failure is no exit of the work: whatever status the batch step was
        # recorded with as its node went (0:0, or 255 when slurmd killed it first, by chance
        # of timing) is not the work's (a preemption's signal is kept: it was stopped)
        if state in NODE_DEATH_JOB_STATES:
            code = 0
        return Observation(handle, AttemptState.EXITED, code or None, stopped or bool(signal),
                           ended_at, reason=why, host_died=True)
    if state == "TIMEOUT":
        # Slurm's SIGTERM, then SIGKILL after KillWait: its signal shows in the exit code,
        # as the stop at apportion's own time limit shows in the local executor's
        return Observation(handle, AttemptState.EXITED, code, True, ended_at,
                           reason=TIMEOUT_REASON, timed_out=True)
    if state in FAILED_JOB_STATES:
        # e.g. OUT_OF_MEMORY may carry ExitCode 0:0; it must not look like success
        return Observation(handle, AttemptState.EXITED, code or 1, stopped or bool(signal),
                           ended_at, reason=FAILED_JOB_STATES[state] or None)
    # a state this version does not know: it still holds its resources as far as we can tell
    return Observation(handle, AttemptState.RUNNING)


def map_node_state(state: str, flags: Sequence[str]) -> str:
    """apportion host state of a Slurm node state (``sinfo --json`` ``state`` + flags).

    DOWN, FAIL, POWERED_DOWN -> down; any DRAIN (draining or drained) -> draining;
    IDLE/MIXED/ALLOCATED/COMPLETING and UNKNOWN -> healthy. Slurm's own verdict decides when
    a node is dead: it marks a silent node DOWN after SlurmdTimeout. Before that, reading a
    blip as down would end workloads that are running fine, and Slurm shows such blips
    routinely: NOT_RESPONDING for a moment after every RESUME, UNKNOWN after a slurmctld
    restart until each slurmd registers again. A drained, empty node still reads as
    draining: moving it to repair is apportion's step, not Slurm's.
    """
    base = state.strip().upper()
    parts = {base, *(f.strip().upper() for f in flags)}
    if parts & {"DOWN", "FAIL", "FAILING", "POWERED_DOWN", "POWER_DOWN", "ERROR", "FUTURE",
                "INVAL"}:
        return "down"
    if parts & {"DRAIN", "DRAINED", "DRAINING"}:
        return "draining"
    return "healthy"


def parse_exit_code(text: str) -> tuple[int, int]:
    """``scontrol``'s ``ExitCode=N:S`` -> (exit code N, signal S)."""
    code, _, sig = text.partition(":")
    try:
        return int(code or 0), int(sig or 0)
    except ValueError:
        raise SlurmError(f"ExitCode: not N:S: {text!r}") from None


def parse_gpu_count(gres: str) -> int:
    """GPUs in a Gres string: ``gpu:8``, ``gpu:a100:4(S:0-1)``, ``gpu:2,shard:4`` -> 8, 4, 2."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        try:
            total += int(parts[-1])
        except ValueError:
            total += 1 if len(parts) == 2 else 0  # "gpu:a100" with no count: one device
    return total


def node_kind(gres: str, kinds: Mapping[str, str] | None = None) -> tuple[str, str, str]:
    """(GPU kind, gres type, problem) of a node's Gres; kind "" for untyped or no GPUs.

    ``kinds``: apportion kind -> gres type; None: the type in upper case is the kind
    (``gpu:h100:8`` -> ``H100``). A problem (two types on the node, a type ``kinds`` does
    not name) says why the node has no kind."""
    types = sorted(set(parse_gpu_types(gres)))
    if not types or types == [""]:
        return "", "", ""
    if len(types) > 1:
        named = ", ".join(t or "untyped" for t in types)
        return "", "", f"GPUs of several types ({named}); apportion needs one kind per host"
    (gres_type,) = types
    if kinds is None:
        return gres_type.upper(), gres_type, ""
    for kind, t in kinds.items():
        if t == gres_type:
            return kind, gres_type, ""
    known = ", ".join(f"{k} = {t!r}" for k, t in kinds.items())
    return "", "", f"gres type {gres_type!r} is not in executor.slurm kinds ({known})"


def parse_gpu_types(gres: str) -> tuple[str, ...]:
    """The type of each ``gpu`` entry of a Gres string, "" when untyped: ``gpu:h100:8`` ->
    ``("h100",)``, ``gpu:8`` -> ``("",)``, ``gpu:a100:4(S:0),gpu:h100:4`` -> ``("a100",
    "h100")``; other gres (``shard:4``) are not GPUs."""
    types = []
    for item in re.split(r",(?![^()]*\))", gres):
        parts = re.sub(r"\(.*\)$", "", item.strip()).split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        typed = len(parts) >= 3 or not parts[1].isdigit()
        types.append(parts[1] if typed else "")
    return tuple(types)


def _wait_status(value: Any) -> tuple[int, int]:
    """``squeue --json`` gives the raw wait status (exit code << 8 | signal)."""
    if isinstance(value, dict):  # newer OpenAPI versions
        number = value.get("return_code", 0)
        signal = value.get("signal", {})
        sig = signal.get("id", 0) if isinstance(signal, dict) else 0
        return int(number or 0), int(sig or 0)
    status = int(value or 0)
    return (status >> 8) & 0xFF, status & 0x7F


def _job_state(value: Any) -> str:
    if isinstance(value, list):  # newer OpenAPI versions: a list of state + flags
        return str(value[0]) if value else ""
    return str(value or "")


def _log_dir(d: Path, acct: Account | None) -> None:
    """The attempt's log directory: the node writes the log as the job's owner, so the
    directory is theirs (0700) below directories others may cross but not list."""
    d.mkdir(parents=True, exist_ok=True)
    if acct is not None:
        os.chmod(d.parent, 0o711)
        os.chown(d, acct.uid, acct.gid)
        os.chmod(d, 0o700)


def unowned_jobs(
    jobs: Mapping[str, Mapping[str, Any]], known: Collection[str], jobs_dir: Path,
    launching: Collection[tuple[str, int]] = (),
) -> list[tuple[str, int, str]]:
    """(job id, attempt, workload id), by job id, of each job of ``jobs`` (``squeue
    --json``'s, by id) that is still active (running or pending; not completing: that one
    ends anyway), runs this executor's script for its attempt (``jobs_dir``, as
    :meth:`SlurmExecutor.find` counts it), and is owned by no open attempt: its id is not
    in ``known`` and its (workload id, attempt) not in ``launching``."""
    users = os.path.abspath(jobs_dir / "users")
    found = []
    for job_id, job in jobs.items():
        parsed = _parse_comment(str(job.get("comment") or ""))
        state = _job_state(job.get("job_state"))
        # COMPLETING: ending already (its epilog runs), like the job of an attempt that
        # just closed on its end marker: nothing to stop, nothing to warn of
        if (parsed is None or job_id in known or state not in ACTIVE_JOB_STATES
                or state == "COMPLETING"):
            continue
        attempt, workload_id = parsed
        if (workload_id, attempt) in launching:
            continue
        name = f"{_file_base(workload_id, attempt)}.sh"
        script = os.path.abspath(jobs_dir / name)
        if _is_script(str(job.get("command") or ""), script, users, name):
            found.append((job_id, attempt, workload_id))
    return sorted(found, key=lambda j: int(j[0]) if j[0].isdigit() else -1)


def _is_script(command: str, script: str, users: str, name: str) -> bool:
    """Whether a job's command is this executor's script of ``name`` (in ``jobs_dir``, or
    in an owner's directory below it when submitted through runuser)."""
    path = os.path.abspath(command)
    if path == script:
        return True
    return os.path.basename(path) == name and os.path.dirname(os.path.dirname(path)) == users


def _file_base(workload_id: str, attempt: int) -> str:
    """The name of an attempt's files without their suffix: ``apportion-<workload>-<n>``."""
    return f"{JOB_NAME_PREFIX}{_safe(workload_id)}-{attempt}"


def _end_file(log: str, base: str) -> Path:
    """The end marker of an attempt: beside its log (which the nodes can write), named by
    :func:`_file_base`."""
    return Path(log).parent / f"{base}.end"


def _stop_file(log: str, base: str) -> Path:
    """A stop's kill deadline for the batch script (``SlurmExecutor._record_stop``): beside
    the end marker, where the nodes can read it (the jobs directory may be the server's
    alone)."""
    return Path(log).parent / f"{base}.stop"


def _read_stop(handle: str, path: Path) -> float | None:
    """The kill deadline recorded in ``path`` for job ``handle`` (``<job id> <epoch>``), or
    None: none, another job's, or not a finite time."""
    fields = (_read_small_file(path, MARKER_MAX_BYTES) or "").split()
    if len(fields) != 2 or fields[0] != handle:
        return None
    try:
        at = float(fields[1])
    except ValueError:
        return None
    return at if math.isfinite(at) else None


def _write_stop(path: Path, handle: str, kill_at: float) -> None:
    """Write ``<handle> <kill_at>`` (six decimals, as the batch script reads it) to
    ``path``, readable by the job's owner. The directory is the owner's, and this runs as
    root: a new file is made beside it (never following a link) and renamed over it, so
    whatever the owner put there is replaced, never written through."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        try:
            os.fchmod(fd, 0o644)  # whatever the server's umask: the job reads it as its owner
            os.write(fd, f"{handle} {kill_at:.6f}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _checkpoint_file(log: str, base: str) -> Path:
    """An attempt's APPORTION_CHECKPOINT_FILE: beside its log, in the owner's directory."""
    return Path(log).parent / f"{base}.checkpoint"


@dataclass(frozen=True, slots=True)
class _Marker:
    """What a batch script wrote to its end marker: when it ended (a finite epoch time) and,
    if it refused to start the command, why. Written as the job's owner: a claim, checked
    against Slurm (``SlurmExecutor._end_time``, the exit status of a refusal)."""

    at: float
    refused: str | None = None


def _read_marker(handle: str, base: str, stdout: str) -> _Marker | None:
    """The end marker of job ``handle`` (``<job id> <status> <epoch>``, or ``<job id>
    refused <epoch> <why>``), beside its log ``stdout``, named ``base`` (:func:`_file_base`
    of the attempt its comment names), if it is this job's and well formed: the job id must
    match and the time be a finite number."""
    if not base.startswith(JOB_NAME_PREFIX) or not stdout:
        return None
    text = _read_small_file(_end_file(stdout, base), MARKER_MAX_BYTES)
    if text is None:
        return None
    fields = text.split(maxsplit=3)
    refusal = len(fields) == 4 and fields[1] == "refused"
    if len(fields) != (4 if refusal else 3) or fields[0] != handle:
        return None
    try:
        at = float(fields[2])
    except ValueError:
        return None
    if not math.isfinite(at):
        return None
    # the reason quotes the owner's command or directory, shown to admins: no escapes
    return _Marker(at, escape_controls(fields[3].strip()) if refusal else None)


def _read_small_file(path: Path, limit: int) -> str | None:
    """The text of ``path`` if it is a regular file of at most ``limit`` bytes, else None.
    It lies where the job's owner can write and the server reads it as root: a symbolic
    link is not followed, a fifo or device not read (opened without blocking, then only
    a regular file is read), and no more than ``limit`` + 1 bytes are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > limit:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _scontrol_time(text: str) -> float:
    """``scontrol``'s ``2024-05-01T10:00:00`` as epoch seconds (0 if absent), read as UTC:
    the executor runs every Slurm command with ``TZ=UTC`` (``SlurmExecutor.env``), so this
    is the zone it prints in."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def _parse_comment(comment: str) -> tuple[int, str] | None:
    if not comment.startswith(COMMENT_PREFIX):
        return None
    attempt, sep, workload_id = comment.removeprefix(COMMENT_PREFIX).partition(":")
    if not sep or not attempt.isdigit():
        return None
    return int(attempt), workload_id


def _parse_scontrol_line(line: str) -> dict[str, str]:
    """``Key=value Key=value`` with values that may contain spaces (e.g. Reason=)."""
    fields: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|$)", line):
        fields[m.group(1)] = m.group(2)
    return fields


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:100]


def _one_line(text: str) -> str:
    return text.replace("\n", " ")


def _natural_key(name: str) -> tuple[str, int]:
    m = re.match(r"(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)
