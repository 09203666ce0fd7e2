"""Who a workload runs as, with what environment, and whether the kernel can exec it.

* :class:`Identity` is the server's rule for accounts: as root (the production mode, as
  slurmd), each workload runs as its owner's Unix account, never root unless
  ``[server] allow_root_for`` names the user; not root, the server runs only its own
  user's work unless ``[server] single_user = true`` (then everyone's work runs as the
  server's user). The same rule answers at submit (a 422) and at launch.
* :func:`child_env` builds the only environment a workload sees: a minimal one from the
  account, then what the owner exported, then apportion's own variables, which win.
* :func:`exec_problem` measures argv and environment as ``execve`` does, so what the
  kernel would refuse (E2BIG) is refused at submit instead.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apportion.service.executor import Launch, LaunchRefused

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# apportion adds CUDA_VISIBLE_DEVICES and APPORTION_* after submit: room kept for them
OWN_VARS_RESERVE = 4096
POINTER = 8  # bytes of one argv/envp pointer on the 64-bit machines apportion runs on


@dataclass(frozen=True, slots=True)
class Account:
    """A Unix account as a workload runs under it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups (initgroups), the primary one included
    home: str
    shell: str


def lookup(name: str) -> Account | None:
    """The account ``name`` with its groups, or None if there is no such account."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell)


def server_account() -> Account:
    """The account this process runs as (its effective uid)."""
    uid = os.geteuid()
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return Account(str(uid), uid, os.getegid(), tuple(os.getgroups()), "/", "/bin/sh")
    return Account(pw.pw_name, uid, os.getegid(), tuple(os.getgroups()), pw.pw_dir,
                   pw.pw_shell)


@dataclass(frozen=True, slots=True)
class Identity:
    """The server's rule for accounts (``[server] single_user`` and ``allow_root_for``)."""

    single_user: bool = False
    allow_root_for: frozenset[str] = field(default_factory=frozenset)
    euid: int = field(default_factory=os.geteuid)

    @property
    def as_owner(self) -> bool:
        """Whether work runs as its owner's account (the server is root, not single-user)."""
        return self.euid == 0 and not self.single_user

    @property
    def me(self) -> str:
        """The name of the server's account."""
        try:
            return pwd.getpwuid(self.euid).pw_name
        except KeyError:
            return str(self.euid)

    def describe(self) -> str:
        """One line for the start of ``apportion serve``."""
        me = self.me
        if self.single_user:
            root = " (AS ROOT)" if self.euid == 0 else ""
            return (f"single-user mode: every workload runs as the server's own user "
                    f"{me}{root}, whoever submits it")
        if self.euid == 0:
            # never "for: nobody", which reads as the user nobody (a Unix account's name)
            allowed = (f"as root only for the users in [server] allow_root_for: "
                       f"{', '.join(sorted(self.allow_root_for))}" if self.allow_root_for
                       else "never as root: [server] allow_root_for is empty")
            return ("running as root: each workload runs as its owner's Unix account "
                    f"({allowed})")
        return (f"running as {me}, not root: only {me}'s own work can run; other users' "
                "submissions are refused (run the server as root, or set [server] "
                f"single_user = true to run all work as {me})")

    def problem(self, user: str, account_name: str) -> str | None:
        """Why ``user``'s work (as ``account_name``) cannot run here, or None."""
        return self.resolve(user, account_name)[1]

    def resolve(self, user: str, account_name: str) -> tuple[Account | None, str | None]:
        """(the account to switch to, None) -- None meaning "stay the server's user" --
        or (None, why the work cannot run)."""
        if self.single_user:
            return None, None
        acct = lookup(account_name)
        if acct is None:
            return None, f"user {user}: Unix account {account_name!r} does not exist"
        if self.euid != 0:
            if acct.uid != self.euid:
                me = self.me
                return None, (f"user {user}: the server runs as {me}, not root, and runs "
                              f"only {me}'s work (Unix account {account_name!r} is another)")
            return None, None
        if acct.uid == 0 and user not in self.allow_root_for:
            return None, (f"user {user}: Unix account {account_name!r} is root; work runs "
                          "as root only for users in [server] allow_root_for")
        return acct, None


    def launch_account(self, launch: Launch) -> Account | None:
        """The account one launch switches to (None: it stays the server's user), or
        :class:`LaunchRefused` saying why it cannot run as asked."""
        acct, problem = self.resolve(launch.user, launch.account or launch.user)
        if problem is not None:
            raise LaunchRefused(problem)
        if launch.chdir is not None and not os.path.isabs(launch.chdir):
            raise LaunchRefused(f"chdir: must be an absolute path, got {launch.chdir!r}")
        return acct

def minimal_env(acct: Account) -> dict[str, str]:
    """What ``--export=NONE`` leaves: the account's own basics."""
    return {"HOME": acct.home, "USER": acct.name, "LOGNAME": acct.name,
            "SHELL": acct.shell or "/bin/sh", "PATH": DEFAULT_PATH}


def child_env(
    acct: Account, exported: Mapping[str, str] | None, own: Mapping[str, str]
) -> dict[str, str]:
    """The workload's whole environment: minimal, then exported, then apportion's own."""
    env = minimal_env(acct)
    env.update(exported or {})
    env.update(own)
    return env


# ---- checks at submit ------------------------------------------------------------------
def env_problem(env: Mapping[str, str]) -> str | None:
    """``env.NAME: problem`` for the first bad variable, or None."""
    for name, value in env.items():
        if not ENV_NAME.match(name):
            return f"env: {name!r}: not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
        if not isinstance(value, str):
            return f"env.{name}: must be a string"
        if "\0" in value:
            return f"env.{name}: contains a NUL byte"
        if not _utf8(value):
            return f"env.{name}: not valid UTF-8 (a lone surrogate)"
    return None


def chdir_problem(chdir: str) -> str | None:
    if "\0" in chdir:
        return "chdir: contains a NUL byte"
    if not _utf8(chdir):
        return "chdir: not valid UTF-8 (a lone surrogate)"
    if not os.path.isabs(chdir):
        return f"chdir: must be an absolute path, got {chdir!r}"
    return None


def arg_max() -> int:
    """The kernel's limit on argv + envp (strings and pointers), in bytes."""
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (ValueError, OSError):
        return 2 * 1024 * 1024


def max_arg_strlen() -> int:
    """The kernel's limit on one argument or environment string, NUL included."""
    return 32 * os.sysconf("SC_PAGE_SIZE")


def exec_problem(
    argv: Sequence[str], env: Mapping[str, str], reserve: int = OWN_VARS_RESERVE
) -> str | None:
    """Why ``execve(argv, env)`` would fail with E2BIG, or None. Counted as the kernel
    counts: each string with its NUL, plus one pointer per string; ``reserve`` bytes are
    kept for the variables apportion adds at launch."""
    per = max_arg_strlen()
    total = reserve

    def size(s: str) -> int:
        return len(s.encode("utf-8", "surrogatepass")) + 1

    for i, a in enumerate(argv):
        n = size(a)
        if n > per:
            return (f"command.{i}: {n} bytes, over the kernel's limit of {per} bytes per "
                    "argument (MAX_ARG_STRLEN)")
        total += n + POINTER
    for k, v in env.items():
        n = size(f"{k}={v}")
        if n > per:
            name = k if len(k) <= 40 else f"{k[:40]}... ({len(k)} characters)"
            return (f"env.{name}: {n} bytes, over the kernel's limit of {per} bytes per "
                    "variable (MAX_ARG_STRLEN)")
        total += n + POINTER
    limit = arg_max()
    if total > limit:
        return (f"command and env: {total} bytes together, over the kernel's limit of "
                f"{limit} bytes (ARG_MAX)")
    return None


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
