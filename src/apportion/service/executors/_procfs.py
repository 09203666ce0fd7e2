"""Process identity from /proc: a pid alone is recycled, ``pid:starttime`` never is."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

MAX_TREE_DEPTH = 4096  # a bound on the walk up the tree (pid 1 ends it long before)


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if no such
    process. The name is skipped by its last ')' because it may hold spaces or parens."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (or going: a process that exits during the read)
        return None
    end = raw.rfind(")")
    fields = raw[end + 2 :].split() if end >= 0 else []
    return fields if len(fields) > 20 else None  # cut short: it exited as we read


def starttime(pid: int) -> int | None:
    """Clock ticks after boot at which ``pid`` started (field 22 of /proc/<pid>/stat)."""
    f = stat_fields(pid)
    return int(f[19]) if f is not None else None


def handle_of(pid: int) -> str | None:
    st = starttime(pid)
    return None if st is None else f"{pid}:{st}"


def parse_handle(handle: str) -> tuple[int, int]:
    pid, _, st = handle.partition(":")
    try:
        return int(pid), int(st)
    except ValueError:
        raise ValueError(f"local executor: handle {handle!r}: expected 'pid:starttime'") from None


def alive(handle: str) -> bool:
    """True if the process named by ``handle`` still runs (a zombie has ended)."""
    pid, st = parse_handle(handle)
    f = stat_fields(pid)
    return f is not None and int(f[19]) == st and f[0] not in ("Z", "X", "x")


def group_alive(pgid: int) -> bool:
    """True if a live (non-zombie) process is in process group ``pgid``. A group of only
    zombies counts as ended: their parent may be an init that reaps late."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            f = stat_fields(int(entry.name))
            if f is not None and int(f[2]) == pgid and f[0] not in ("Z", "X", "x"):
                return True
    return False


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) processes below ``pid`` in the process tree, nearest first."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            f = stat_fields(int(entry.name))
            if f is not None and f[0] not in ("Z", "X", "x"):
                children.setdefault(int(f[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether the live process ``pid`` is below ``ancestor`` in the process tree now."""
    for _ in range(MAX_TREE_DEPTH):
        f = stat_fields(pid)
        if f is None or f[0] in ("Z", "X", "x"):
            return False
        pid = int(f[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def signal_below(pid: int, sig: int, ancestor: int) -> None:
    """Send ``sig`` to ``pid`` only if it is still a process below ``ancestor`` (an
    attempt's wrapper: every process of its job is). A pid listed a moment ago may have
    been freed by the job and given to another account's process since: the process is
    pinned first (a pidfd), then its place in the tree checked, then signalled through
    the pidfd, so no other process is ever signalled in its stead."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd (a kernel before 5.3): checked, then signalled by pid
        if descends_from(pid, ancestor):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return
    try:
        if descends_from(pid, ancestor):
            signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict[str, Any], durable: bool = True) -> None:
    """Readers see the old file or the whole new one, never a partial write; ``durable``:
    on disk (fsync) before this returns."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(data, f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a partial file: no use, and a full disk's space
            os.unlink(tmp)
        raise


def create_json_exclusive(path: Path, data: dict[str, Any]) -> bool:
    """Create ``path`` with ``data`` only if it does not exist, atomically (write a temporary
    file, then hard-link it into place). Returns False if it already existed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.claim")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
