"""One control group per attempt, so every process of a job lives and dies with it.

Cgroup v1 (one hierarchy per controller, e.g. ``/sys/fs/cgroup/{pids,freezer,devices}``):
the attempt gets ``<controller>/apportion/<name>`` in each of ``pids`` (to list it),
``freezer`` (to stop it from forking while it is killed) and ``devices`` (to deny the GPU
device nodes it was not given), where mounted. Cgroup v2 (``cgroup.controllers`` at the
root): one ``apportion/<name>`` whose ``cgroup.kill`` ends it at once; v2 has no
``devices.*`` files (device rules there are eBPF programs), so GPUs are not fenced on v2.

A process that joined the group cannot leave it without root, whatever it forks or
``setsid``s; children are in it from birth. Everything here takes the attempt's list of
cgroup directories (kept in its run file), so an executor started after a restart can
list and kill the processes of an attempt it did not launch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "apportion"
V1_CONTROLLERS = ("pids", "freezer", "devices")
GPU_MAJOR = 195  # /dev/nvidia<N> are character devices 195:N
GPU_MINORS = range(0, 254)  # 254 is nvidia-modeset and 255 nvidiactl: not GPUs, left open
FREEZE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where this host's cgroups are and which kind (1 or 2)."""

    version: int
    root: Path
    controllers: tuple[str, ...] = ()  # v1: the used controllers that are mounted

    @staticmethod
    def detect(root: Path = ROOT) -> CgroupHost | None:
        """The host's cgroups if this process may create them (root), else None."""
        if os.geteuid() != 0:
            return None
        if (root / "cgroup.controllers").exists():
            return CgroupHost(2, root)
        mounted = tuple(c for c in V1_CONTROLLERS if (root / c / "cgroup.procs").exists())
        if "pids" in mounted or "freezer" in mounted:
            return CgroupHost(1, root, mounted)
        return None

    @property
    def devices(self) -> bool:
        """Whether GPU device nodes can be fenced (the v1 devices controller)."""
        return self.version == 1 and "devices" in self.controllers

    def describe(self) -> str:
        if self.version == 2:
            return f"cgroup v2 at {self.root} (cgroup.kill; GPU device nodes not fenced)"
        fence = "GPU device nodes fenced" if self.devices else "no devices controller"
        return f"cgroup v1 at {self.root} ({', '.join(self.controllers)}; {fence})"

    def dirs(self, name: str) -> list[Path]:
        """The directories :meth:`create` makes for ``name`` (whether made or not)."""
        if self.version == 2:
            return [self.root / PREFIX / name]
        return [self.root / c / PREFIX / name for c in self.controllers]

    def create(self, name: str, gpus: Iterable[int] | None,
               pids_max: int | None = None) -> list[str]:
        """Make the attempt's cgroups; ``gpus``: GPU indexes it may open (None: no fence);
        ``pids_max``: how many processes and threads it may have at once (None or 0: no
        limit), where the pids controller is there (v1 mounted; v2 enabled at the root)."""
        dirs = self.dirs(name)
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        if pids_max:
            if self.version == 2:  # the parent is ours: hand the controller down to each attempt
                with contextlib.suppress(OSError), open(
                    self.root / PREFIX / "cgroup.subtree_control", "w"
                ) as f:
                    f.write("+pids")
                d = self.root / PREFIX / name
            else:
                d = self.root / "pids" / PREFIX / name
            if (d / "pids.max").exists():
                (d / "pids.max").write_text(str(pids_max))
        if self.devices and gpus is not None:
            given = set(gpus)
            d = self.root / "devices" / PREFIX / name
            fd = os.open(d / "devices.deny", os.O_WRONLY)
            try:
                for minor in GPU_MINORS:  # one rule per write: the kernel parses one at a time
                    if minor not in given:
                        os.write(fd, f"c {GPU_MAJOR}:{minor} rwm".encode())
            finally:
                os.close(fd)
        return [str(d) for d in dirs]


def join(dirs: Sequence[str], pid: int) -> None:
    """Move ``pid`` into every directory of the attempt."""
    for d in dirs:
        with open(os.path.join(d, "cgroup.procs"), "w") as f:
            f.write(str(pid))


def procs(dirs: Sequence[str]) -> set[int]:
    """Every live process of the attempt (zombies are not listed)."""
    out: set[int] = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                out.update(int(x) for x in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            pass
        except OSError as e:
            # ENODEV: removed between the open and the read (its wrapper removes it once
            # no process is left in it): as empty as one already gone
            if e.errno != errno.ENODEV:
                raise
    return out


def signal_all(dirs: Sequence[str], sig: int) -> None:
    for pid in procs(dirs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill(dirs: Sequence[str]) -> None:
    """SIGKILL every process of the attempt, without letting one fork past it: v2 writes
    ``cgroup.kill``; v1 freezes the group, kills what is in it, then thaws it so the
    killed processes can die."""
    for d in dirs:
        k = os.path.join(d, "cgroup.kill")
        if os.path.exists(k):
            with contextlib.suppress(FileNotFoundError), open(k, "w") as f:
                f.write("1")
            return
    freezer = next((d for d in dirs if os.path.exists(os.path.join(d, "freezer.state"))), None)
    if freezer is not None:
        state = os.path.join(freezer, "freezer.state")
        with contextlib.suppress(FileNotFoundError):
            with open(state, "w") as f:
                f.write("FROZEN")
            deadline = time.monotonic() + FREEZE_WAIT_S
            while time.monotonic() < deadline:
                with open(state) as f:
                    if f.read().strip() == "FROZEN":
                        break
                time.sleep(0.005)
    try:
        signal_all(dirs, signal.SIGKILL)
    finally:
        if freezer is not None:
            with contextlib.suppress(FileNotFoundError), open(
                os.path.join(freezer, "freezer.state"), "w"
            ) as f:
                f.write("THAWED")


def remove(dirs: Sequence[str]) -> None:
    """Remove the attempt's (empty) cgroups; one still in use stays."""
    for d in dirs:
        with contextlib.suppress(FileNotFoundError, OSError):
            os.rmdir(d)
