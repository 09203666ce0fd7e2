"""Whether a directory is the server's alone: the checks ``apportion serve`` makes of its
data and logs directories at start (docs/security.md, "The server's files are the
server's"), and the local executor again when it makes its logs directory anew."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path


def unsafe_dir(d: Path) -> str | None:
    """Why the directory ``d`` (links resolved) is not the server's alone, and what to do;
    None if it is: owned by the server's user and writable by nobody else."""
    real = Path(os.path.realpath(d))
    st = os.stat(real)
    me = account_name(os.geteuid())
    if st.st_uid != os.geteuid():
        owner = account_name(st.st_uid)
        return (f"owned by {owner}, not by {me}, whom this server runs as; it would follow "
                f"links {owner} puts there: make it {me}'s (chown {me} {real}), or name a "
                f"directory that does not exist yet (the server creates it)")
    if st.st_mode & 0o022:
        return (f"writable by others (mode {stat.S_IMODE(st.st_mode):04o}); the server would "
                f"follow links they put there: make it 0711 (chmod 0711 {real})")
    return None


def unsafe_way(d: Path) -> str | None:
    """Why someone but root or the server could put a link in the place of ``d`` or of a
    directory on its way, and what to do; None if nobody can. Every entry the path's
    resolution passes through (each component as written and, through each link, each
    component of its target, however many links are chained) must be root's or the
    server's, and a directory on the way writable by them alone unless sticky (as /tmp);
    in a sticky directory a link stays its owner's to replace. Names not made yet are
    skipped; ``d`` itself is :func:`unsafe_dir`'s."""
    mine = (0, os.geteuid())
    owners = " or ".join(dict.fromkeys(account_name(uid) for uid in mine))
    real = os.path.realpath(d)
    for p in _resolution(d.absolute()):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in mine:
                way = "" if p == d.absolute() else ", on its way,"
                return (f"{p}{way} is a link of {account_name(st.st_uid)}, who could replace "
                        f"it: name the directory without it")
        elif os.path.realpath(p) != real and (
                st.st_uid not in mine or st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            who = (account_name(st.st_uid) if st.st_uid not in mine else
                   f"others (mode {stat.S_IMODE(st.st_mode):04o}, not sticky)")
            return (f"{p}, on its way, can be changed by {who}, who could put a link in its "
                    f"place: name a directory whose parents only {owners} can change")
    return None


def _resolution(path: Path, links: int = 0) -> list[Path]:
    """Every entry resolving the absolute ``path`` passes through, in order: each component
    and, for each link met, the entries resolving its target (then the rest from there)."""
    if links > 40:  # as the kernel's ELOOP: a loop of links resolves to nothing
        return []
    seen: list[Path] = []
    at = Path(path.anchor)
    for name in path.parts[1:]:
        if name in (".", ".."):  # as the kernel: '..' of where resolution has got to
            at = at.parent if name == ".." else at
            continue
        step = at / name
        seen.append(step)
        if os.path.islink(step):
            target = Path(os.readlink(step))
            seen += _resolution(target if target.is_absolute() else at / target, links + 1)
            at = Path(os.path.realpath(step))
        else:
            at = step
    return seen


def account_name(uid: int) -> str:
    """The name of ``uid``'s account, or ``uid N`` when it has none here."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
