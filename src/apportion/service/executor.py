"""The one narrow interface between the live scheduler and whatever runs the work.

Implementations: ``local`` (real process groups on this machine), ``slurm`` (sbatch/scancel
on a real Slurm cluster) and ``memory`` (in-process, for the parity test and fast unit
tests). The scheduler never asks an executor to decide anything: it only launches, stops,
and reports what it observes; the reconciler folds those observations into state.

An executor says no in one of three ways, and only these (all are part of the protocol)::

    LaunchRefused          permanent, from ``launch`` only: this launch can never succeed as
                           asked (argument list too long, command not found or not
                           executable, no such Unix account, a directory that cannot be
                           entered, slots the backend cannot express). The scheduler ends
                           the workload ``failed`` after this one try, with the reason.
    ExecutorUnavailable    transient, from any method: the backend did not answer. From
                           ``inventory`` the pass decides nothing; from ``launch`` the
                           attempt is looked for (``find``) on the next pass before it is
                           tried again; from ``stop``/``set_host_drain`` they are retried.
    LaunchDeferred         transient, from ``launch`` only: the server's own files could not
                           be written (its logs or run directory missing, refused, read-only
                           or full). Nothing was started; the scheduler takes the attempt
                           back (no attempt is kept), says so once, and tries again later.

Any other exception is an executor's bug, not an answer. The scheduler logs it with its
traceback and treats it as the backend's silence: an ``inventory`` that raises it makes the
pass decide nothing (never "reachable" on a failure); a ``launch`` that raises it puts the
workload back to pending with a backoff so that everything else keeps starting. A
refusal that only the started attempt can discover (e.g. the owner's account may not enter
its directory) is reported as an exit whose :attr:`Observation.refused` holds the reason;
it ends the workload the same way as :class:`LaunchRefused`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class LaunchRefused(Exception):
    """This launch can never succeed as asked; the message says why, e.g.
    ``command not found: foo``. Nothing was started."""


class LaunchDeferred(Exception):
    """This launch could not be made for a trouble of the server's own, not the workload's:
    a directory of the server's missing, refused, read-only or full; the message says which
    and what, in one line. Nothing was started; it may succeed once that is mended."""


class ExecutorUnavailable(Exception):
    """The executor's backend did not answer (e.g. Slurm's controller is down). What was
    asked may or may not have happened: a launch must be looked for (``find``) before it is
    repeated. The scheduler decides nothing while the backend cannot be reached."""


@dataclass(frozen=True, slots=True)
class HostSlots:
    """GPUs of one host given to one attempt, by index (for CUDA_VISIBLE_DEVICES)."""

    host: str
    gpu_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything needed to start one attempt of a workload."""

    workload_id: str
    attempt: int
    command: Sequence[str]
    slots: tuple[HostSlots, ...]
    # the environment the owner exported (None: none, ``--export=NONE``); the executor adds
    # a minimal one from the account (HOME, USER, ...) under it and its own variables
    # (CUDA_VISIBLE_DEVICES, APPORTION_*) over it. Never the server's environment.
    env: Mapping[str, str] | None = None
    log_path: str = ""  # per-attempt log file (stdout and stderr)
    whole_hosts: bool = False  # multi-host work owns its hosts
    user: str = ""  # the apportion user who owns it
    account: str = ""  # the Unix account it runs as ("" : the server's own)
    chdir: str | None = None  # absolute working directory (None: the account's home)
    umask: int | None = None  # the submitter's file mode creation mask (None: 022)
    # the pool of the slots (a gang never spans pools): e.g. Slurm's partition and gres type
    cluster: str = ""
    kind: str = ""
    # the signal of the workload's ``--signal=B:...`` (0: none): what the Slurm batch
    # script forwards to the command when Slurm's --batch signal reaches the script
    batch_signal: int = 0


@dataclass(frozen=True, slots=True)
class InventoryHost:
    name: str
    gpus: int
    state: str  # "healthy" | "draining" | "repair" | "down"
    reason: str = ""
    cluster: str = ""  # "": the config's default cluster ([pools] cluster)
    kind: str = ""  # GPU kind; "": the config's default ([pools] kind)


class AttemptState(enum.Enum):
    RUNNING = "running"
    EXITED = "exited"  # finished; exit_code tells how
    GONE = "gone"  # the executor has no trace of it any more


@dataclass(frozen=True, slots=True)
class Observation:
    """What the executor saw of one attempt it was given (by its handle)."""

    handle: str
    state: AttemptState
    exit_code: int | None = None
    signalled: bool = False  # ended by a signal we (or someone) sent
    ended_at: float | None = None  # when it exited, if the executor knows (else: when seen)
    refused: str | None = None  # the command never started, and never will: why
    # how it ended when its exit code alone does not say (e.g. "cancelled in Slurm by
    # alice"): the end reason, in place of "exited N"
    reason: str | None = None
    # it was ended by a failure of its hosts, not by its own doing (e.g. Slurm's NODE_FAIL):
    # it ends as a host death does (resumable work requeues), with ``reason``
    host_died: bool = False
    # it was ended at the executor's own time limit (Slurm's TIMEOUT: a partition's
    # MaxTime), not by its own doing: it ends as ``timeout``, as work apportion stops at its
    # time limit does, with ``reason``
    timed_out: bool = False
    # when the running attempt last reported a checkpoint (the modification time of its
    # APPORTION_CHECKPOINT_FILE), as the executor's clock has it; None: never, or unknown
    checkpoint_at: float | None = None
    # what the end reason should add about its log (e.g. its file system was full when it
    # ended: the output may be cut short), or None
    log_note: str | None = None


class Executor(Protocol):
    """What runs the work. All methods are synchronous and must not block for long. Each
    may raise :class:`ExecutorUnavailable`; ``launch`` may also raise
    :class:`LaunchRefused`."""

    name: str

    def describe(self) -> str:
        """One line on how work runs and is isolated, for the start of ``apportion serve``."""
        ...

    def inventory(self) -> list[InventoryHost]:
        """Hosts as the executor sees them (the config's for ``local``; Slurm's nodes)."""
        ...

    def launch(self, launch: Launch) -> str:
        """Start one attempt; return a durable handle (pid/pgid, Slurm job id, ...)."""
        ...

    def find(self, workload_id: str, attempt: int) -> str | None:
        """The handle of attempt ``attempt`` of ``workload_id`` if a launch of it went
        through (its answer may have been lost: a crash, a timeout), else None; after None
        that launch can no longer start. Used to reconcile before a launch is repeated."""
        ...

    def stop_unknown(self, known: Collection[str], grace_s: float) -> None:
        """Stop the work of this executor (of this database) that runs for no open attempt
        the database knows (whose handle is not in ``known``): what a restored backup's lost
        future started. Called once the start's reconciliation has adopted every attempt
        of the database, and before anything is placed. Each one is named in a warning.
        The local executor returns only once none of it lives, since the state counts its
        GPUs as free."""
        ...

    def stop_strays(
        self, known: Collection[str], launching: Collection[tuple[str, int]], grace_s: float
    ) -> None:
        """Stop, without waiting, work of this executor that runs for no open attempt while
        the server runs: its handle is none of ``known`` and its (workload id, attempt) none
        of ``launching`` (open attempts whose launch is not answered yet). Called on each
        pass that reached the executor, right after :meth:`observe`, whose listing it may
        reuse. Each one stopped is named in a warning."""
        ...

    def log_path(self, workload_id: str, attempt: int) -> Path | None:
        """Where the attempt's output goes (passed as :attr:`Launch.log_path`); None for an
        executor that keeps no output."""
        ...

    def stop(self, handle: str, grace_s: float) -> None:
        """Ask the attempt to stop: SIGTERM now, SIGKILL after ``grace_s`` if still alive.
        Returns at once; the exit shows up in :meth:`observe`."""
        ...

    def signal(self, handle: str, signum: int, batch: bool) -> None:
        """Send signal ``signum`` to the running attempt, which runs on (sbatch's
        ``--signal``, due some time before its time limit). ``batch``: to the batch shell
        only (the command's own process: ``B:``); else to every process of the job (the
        local executor) or to its job steps but not the batch shell (Slurm, as its own
        ``--signal`` without ``B:``). Nothing to an attempt that has ended."""
        ...

    def observe(self, handles: Sequence[str]) -> dict[str, Observation]:
        """Current state of each handle (including ones launched before a restart)."""
        ...

    def set_host_drain(self, host: str, drain: bool, reason: str) -> None:
        """Mirror a drain (or its end) into the backend, where it has such a notion."""
        ...

    def close(self) -> None:
        ...
