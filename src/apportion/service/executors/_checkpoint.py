"""The checkpoint file of an attempt: how a running job tells the scheduler it saved its work.

Each attempt gets ``APPORTION_CHECKPOINT_FILE``, a path in a directory that belongs to the
job's own account (mode 0700, inside a directory of the server's that the job can cross but
not change, so the job cannot swap its directory for another). The job touches the file
after each checkpoint; the executor reports the file's modification time with every
observation of the attempt (:attr:`~apportion.service.executor.Observation.checkpoint_at`).

The server only ever stats the file, never opens or follows it: the directory is opened
with ``O_NOFOLLOW`` and the name looked up in it without following a symbolic link. Only a
regular file owned by the directory's owner (the job's account) counts; a symbolic link, a
directory, a hard link to someone else's file or anything else is ignored, so the file
cannot make the server reveal or touch anything outside the job's own directory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

ENV = "APPORTION_CHECKPOINT_FILE"


def checkpoint_time(path: Path) -> float | None:
    """The modification time of the checkpoint file at ``path``, or None when there is none
    to believe: absent, not a regular file, not owned by its directory's owner, or a
    directory that is not a real directory."""
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        owner = os.fstat(fd).st_uid
        st = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
        return None
    return st.st_mtime
