"""Each attempt's private ``TMPDIR`` under the local executor (docs/security.md, "Each job's
own TMPDIR").

The server (root) makes ``<tmp_dir>/<db_id>/<workload>.<attempt>`` before the job starts:
the job's account's, mode 0700, in a parent only the server can write (0711), so no user
can make, replace or link another job's directory. Everything here works on directory fds
with ``O_NOFOLLOW``; a name is looked at with ``lstat`` and never followed.

:func:`remove` takes the directory and all in it away when the attempt has ended (the
wrapper does, once nothing of the job lives; the executor for an attempt whose wrapper
could not): fd-based, so a link the job left in it is removed, never followed, however it
points; what cannot be removed (a file made immutable) is said, never raised.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def make(parent: Path, name: str, uid: int, gid: int) -> Path:
    """A fresh, empty directory ``parent/name`` owned by ``uid:gid``, mode 0700. Whatever
    is at that name already (left by an attempt of another timeline, a restored backup:
    only the server can write ``parent``) is removed first, never followed; an
    :class:`OSError` if it cannot be."""
    pfd = os.open(parent, _DIR)
    try:
        left = remove_at(pfd, name)
        if left is not None:
            raise OSError(f"{parent / name}: left by an earlier attempt, and cannot be "
                          f"removed: {left}")
        os.mkdir(name, 0o700, dir_fd=pfd)
        fd = os.open(name, _DIR, dir_fd=pfd)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():  # cannot be: parent is the server's alone
                raise OSError(f"{parent / name}: not made by the server (owned by uid "
                              f"{st.st_uid}): refused")
            os.fchown(fd, uid, gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    finally:
        os.close(pfd)
    return parent / name


def remove(parent: Path, name: str) -> str | None:
    """Remove ``parent/name`` and everything in it, never following a link; None once
    it is gone (or was never there), else what is left and why, in one line."""
    try:
        pfd = os.open(parent, _DIR)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{parent}: {e.strerror or e}"
    try:
        return remove_at(pfd, name)
    finally:
        os.close(pfd)


def remove_at(pfd: int, name: str) -> str | None:
    """:func:`remove` of ``name`` in the directory of the fd ``pfd``."""
    try:
        st = os.lstat(name, dir_fd=pfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{name}: {e.strerror or e}"
    problems: list[str] = []
    try:
        if not stat.S_ISDIR(st.st_mode):  # a link or a file: the name goes, not its target
            os.unlink(name, dir_fd=pfd)
            return None
        # fd-based on this platform (shutil.rmtree.avoids_symlink_attacks): each directory
        # is opened relative to its parent's fd and checked to be the one lstat saw, links
        # are unlinked, never followed

        def said(func: Any, path: str, exc: Any) -> None:
            e = exc[1]
            if not isinstance(e, FileNotFoundError):  # removed meanwhile: gone all the same
                problems.append(f"{path}: {getattr(e, 'strerror', None) or e}")

        shutil.rmtree(name, dir_fd=pfd, onerror=said)
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - a tree too deep, an fd limit: said, never raised
        problems.append(f"{name}: {e}")
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"

