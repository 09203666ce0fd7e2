"""``--signal``: a signal sent to running work some seconds before its time limit, as
sbatch's ``--signal=[{R|B}:]<sig_num>[@sig_time]`` asks for it (docs/cli.md, "--signal").

Read as Slurm reads it (``get_signal_opts`` in its ``src/common/proc_args.c``): an optional
``B:`` (the batch shell only; without it every process of the job but the batch shell
under Slurm, every process of the job with the local executor), an optional ``R:``
(Slurm's leave to overlap a reservation with ``MaxStartDelay``: apportion has no
reservations, so it is read and dropped), the signal as a number or one of Slurm's names
(``USR1``, ``SIGUSR1``, any case) and ``@`` the seconds before the limit, 0 to 65535;
without ``@``, 60. It is stored in one canonical text, ``B:USR1@120`` (``B:`` only when
given, the name as Slurm's table has it, the time always).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

DEFAULT_TIME_S = 60  # sbatch's sig_time when "@" is left out
MAX_TIME_S = 0xFFFF  # sbatch's largest sig_time (a 16-bit field)
# the names sbatch takes (its signals_mapping), each as this system numbers it
NAMES = ("HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT",
         "STOP", "TSTP", "TTIN", "TTOU", "XCPU")
_NUMBERS = {name: int(getattr(signal, f"SIG{name}")) for name in NAMES}
_TEXT = re.compile(r"(?:(?P<flags>[RrBb]{1,2}):)?(?P<sig>[^@]*)(?:@(?P<time>.*))?", re.DOTALL)


@dataclass(frozen=True, slots=True)
class WarnSignal:
    """The signal ``number`` (``name`` as shown: ``USR1``, or the number for one sbatch has
    no name for), sent ``time`` seconds before the time limit; ``batch``: to the batch shell
    (the command's own process) only."""

    number: int
    name: str
    time: int
    batch: bool = False
    reservation: bool = False  # R: was given (read and dropped: apportion has none)

    @property
    def text(self) -> str:
        """The canonical text, as stored and shown: ``B:USR1@120``."""
        return f"{'B:' if self.batch else ''}{self.name}@{self.time}"


def parse(text: str) -> WarnSignal:
    """``text`` as sbatch's ``--signal`` takes it; ``ValueError`` saying what is wrong."""
    m = _TEXT.fullmatch(text.strip())
    if m is None:  # cannot happen: every text matches; kept for the type checker
        raise ValueError("not [B:]SIGNAL[@SECONDS]")
    flags = (m.group("flags") or "").upper()
    if len(flags) == 2 and set(flags) != {"R", "B"}:
        raise ValueError(f"the prefix is B:, R: or RB: (got {flags}:)")
    sig = m.group("sig").strip()
    number = _signal_number(sig)
    if number is None:
        sig = sig if len(sig) <= 40 else f"{sig[:40]}... ({len(sig)} characters)"
        raise ValueError(f"{sig!r} is not a signal: give a number (1 to "
                         f"{signal.NSIG - 1}) or a name: {', '.join(NAMES)} (SIG before "
                         "it, any case)")
    seconds = m.group("time")
    time = DEFAULT_TIME_S
    if seconds is not None:
        if not (seconds.isascii() and seconds.isdigit()):
            raise ValueError(f"after @ comes the number of seconds before the time "
                             f"limit, 0 to {MAX_TIME_S} (got {seconds!r})")
        # a bound before int(): one of over 4300 digits would raise Python's own words
        digits = seconds.lstrip("0") or "0"
        if len(digits) > len(str(MAX_TIME_S)) or int(digits) > MAX_TIME_S:
            shown = digits if len(digits) <= 20 else f"{digits[:20]}... ({len(digits)} digits)"
            raise ValueError(f"{shown} s: at most {MAX_TIME_S} seconds before the "
                             "time limit (as sbatch takes it)")
        time = int(digits)
    return WarnSignal(number, name_of(number), time, "B" in flags, "R" in flags)


def _signal_number(sig: str) -> int | None:
    """A signal as sbatch names it: a number this system has, or a name of its table."""
    if sig.isascii() and sig.isdigit():
        digits = sig.lstrip("0") or "0"
        if len(digits) > len(str(signal.NSIG)):  # never int() thousands of digits
            return None
        n = int(digits)
        return n if 1 <= n < signal.NSIG else None
    upper = sig.upper()
    return _NUMBERS.get(upper[3:] if upper.startswith("SIG") else upper)


def name_of(number: int) -> str:
    """A signal as Slurm's commands take it: its name in their table (``USR1``), else its
    number."""
    return next((n for n, v in _NUMBERS.items() if v == number), str(number))


def due_at(started_at: float, time_limit: float, warn: WarnSignal) -> float | None:
    """When the signal is due for an attempt started at ``started_at`` with
    ``time_limit`` (0: none, and then never): ``warn.time`` before the limit, or at the
    start if the limit is shorter than that (as Slurm sends it at once)."""
    if time_limit <= 0:
        return None
    return started_at + max(0.0, time_limit - warn.time)
