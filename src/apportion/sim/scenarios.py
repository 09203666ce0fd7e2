"""Built-in scenarios: a synthetic month on one cluster, calibrated to the published picture.

``seed_scenario`` builds the cluster the product brief describes (150 researchers in 15 teams
under 4 programs, outstanding demand 2-3x supply held steady by owners who give up on work
that waits too long, seasonal teams, bursty debugging in working hours, opportunistic sweeps,
squatters, host failures and drains), and ``small_scenario`` a tiny one for fast tests. Every
number and the reason for it is in ``docs/scenarios.md``.

Time 0 is a Monday, 00:00 local time. Everything is drawn from seeded
``numpy.random.Generator``s (one for patience, one for everything else), so a seed gives the
same scenario on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from apportion.core import BudgetNode, BudgetTree, Host, WorkloadSpec, usage_ratio

from .model import HostEvent, HostEventKind, LegacyPriority, Scenario, SimJob

HOUR = 3600.0
DAY = 86400.0
MINUTE = 60.0
GPUS_PER_HOST = 8
MAX_MIN_RUNTIME = 8 * HOUR  # the policy's default cap; no generated workload asks for more
DEBUG_MAX_MIN_RUNTIME = 15 * MINUTE

# Workload classes; the class is the prefix of the workload id ("debug-00042").
TRAIN, SINGLE, EVAL, DEBUG, SWEEP, SQUAT = "train", "single", "eval", "debug", "sweep", "squat"
CLASSES = (TRAIN, SINGLE, EVAL, DEBUG, SWEEP, SQUAT)


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """A team: its weight inside its program, its head count and what it mostly runs."""

    name: str
    weight: float
    researchers: int
    # multipliers on the global class mix (``MIX``): a pretraining team runs more multi-host
    # training, a robotics simulation team more single-host jobs and sweeps
    mix: tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    name: str
    weight: float
    teams: tuple[TeamSpec, ...]


_PRETRAIN = (1.25, 0.5, 0.7, 0.8, 0.7)
_POSTTRAIN = (0.9, 1.3, 1.5, 1.2, 1.1)
_SIM = (0.6, 2.5, 0.8, 1.0, 1.6)
_EVALS = (0.4, 1.5, 4.0, 1.5, 1.2)
_SCIENCE = (0.7, 1.8, 2.0, 1.5, 1.3)

#: The seed organisation: 4 programs weighted 40/30/20/10, 15 teams, 150 researchers.
SEED_ORG: tuple[ProgramSpec, ...] = (
    ProgramSpec("llm", 40, (
        TeamSpec("pretrain", 40, 16, _PRETRAIN),
        TeamSpec("posttrain", 25, 12, _POSTTRAIN),
        TeamSpec("data", 15, 10, _POSTTRAIN),
        TeamSpec("safety", 10, 8, _POSTTRAIN),
        TeamSpec("evals", 10, 8, _EVALS),
    )),
    ProgramSpec("vlm", 30, (
        TeamSpec("pretrain", 40, 12, _PRETRAIN),
        TeamSpec("video", 25, 9),
        TeamSpec("grounding", 20, 8, _POSTTRAIN),
        TeamSpec("ocr", 15, 7, _POSTTRAIN),
    )),
    ProgramSpec("robotics", 20, (
        TeamSpec("sim-rl", 50, 12, _SIM),
        TeamSpec("manipulation", 30, 10, _SIM),
        TeamSpec("navigation", 20, 8, _SIM),
    )),
    ProgramSpec("science", 10, (
        TeamSpec("agents", 45, 12, _SCIENCE),
        TeamSpec("chemistry", 30, 9, _SCIENCE),
        TeamSpec("biology", 25, 9, _SCIENCE),
    )),
)

#: The tiny organisation of ``small_scenario``: 2 programs, 3 teams, 7 researchers.
SMALL_ORG: tuple[ProgramSpec, ...] = (
    ProgramSpec("lab", 60, (TeamSpec("train", 2, 3, _PRETRAIN), TeamSpec("tune", 1, 2))),
    ProgramSpec("apps", 40, (TeamSpec("agents", 1, 2, _SCIENCE),)),
)

# Global share of requested GPU-time per class (train, single, eval, debug, sweep), before the
# team multipliers; squatting comes on top (see _squats). Sweeps are the unallocated work.
MIX = np.array([0.72, 0.065, 0.0055, 0.0035, 0.18])
# submitted GPU-seconds / (GPUs x window). Not the "2-3x" itself: that is the outstanding
# demand (GPUs asked by pending and running work over healthy GPUs), which patience keeps
# bounded; 1.4 puts its 30-day mean at 2.19x under fairshare and 2.20x under legacy on 1,024
# GPUs (measured, docs/scenarios.md)
TARGET_RATIO = 1.4
SEASON_ACTIVE_DAYS = (7.0, 21.0)  # a team's busy phase (a paper push, a release)
SEASON_QUIET_DAYS = (3.0, 10.0)  # between pushes: analysis, writing, planning
QUIET_LEVEL = 0.2  # demand of a quiet team relative to a busy one
APPETITE_SIGMA = 0.5  # spread of demand relative to budget share between teams
FAIL_EVERY_DAYS = 75.0  # mean time between hard failures of one host
UNHEALTHY_EVERY_DAYS = 30.0  # mean time between "unhealthy, drain it" verdicts of one host
HOST_EVENT_GAP = 1.5 * DAY  # no second event on a host while the first is still being handled
REPAIR_TIME = 4 * HOUR
# share of resumable workloads that write a checkpoint when told to stop (SIGTERM, within
# the grace period; e.g. a training loop that saves on the signal); the others lose what
# they did since their last interval checkpoint. Not part of the demand mix.
CHECKPOINT_ON_TERM_SHARE = 0.5
SQUATTERS_PER_1024 = 15  # researchers keeping a placeholder on the 1,024-GPU cluster
LEGACY_NONPREEMPTIBLE = {TRAIN: 0.60, SINGLE: 0.45, EVAL: 0.35, DEBUG: 0.40, SWEEP: 0.0}
# legacy priority mix per class, as probabilities of (LOW, NORMAL, HIGH, URGENT)
LEGACY_PRIORITY = {
    TRAIN: (0.01, 0.07, 0.77, 0.15),
    SINGLE: (0.02, 0.12, 0.78, 0.08),
    EVAL: (0.02, 0.13, 0.78, 0.07),
    DEBUG: (0.01, 0.09, 0.80, 0.10),
    SWEEP: (0.15, 0.30, 0.55, 0.00),
}
# How long the owner waits for a workload to start before withdrawing it (uniform between the
# bounds, seconds): someone at a terminal gives up on a debug job within the hour, an
# evaluation is stale by the next working session, a training run is worth days of waiting.
# A sweep's trials share their launcher's patience. Squatters never give up (no patience).
PATIENCE = {
    TRAIN: (1 * DAY, 3 * DAY),
    SINGLE: (12 * HOUR, 24 * HOUR),
    EVAL: (6 * HOUR, 12 * HOUR),
    DEBUG: (30 * MINUTE, 60 * MINUTE),
    SWEEP: (12 * HOUR, 24 * HOUR),
}


# ---- time profiles ----------------------------------------------------------------------
def diurnal(hours: np.ndarray) -> np.ndarray:
    """Relative rate of interactive submissions in each hour (t=0 is Monday 00:00).

    Weekdays: 1.0 from 09:00 to 18:00, 0.4 in the shoulders (07-09, 18-23), 0.05 at night;
    weekends at a quarter of that.
    """
    hod = hours % 24
    dow = (hours // 24) % 7
    rate = np.where((hod >= 9) & (hod < 18), 1.0, np.where((hod >= 7) & (hod < 23), 0.4, 0.05))
    return np.where(dow >= 5, 0.25 * rate, rate)


def _seasons(rng: np.random.Generator, n_hours: int) -> np.ndarray:
    """Per-hour activity of one team: 1 in busy phases, ``QUIET_LEVEL`` in quiet ones."""
    out = np.empty(n_hours)
    active = rng.random() < 0.65  # about 2/3 of the time busy
    lo_a, hi_a = SEASON_ACTIVE_DAYS
    lo_q, hi_q = SEASON_QUIET_DAYS
    # start somewhere inside the first phase so teams do not switch in lockstep
    length = rng.uniform(lo_a, hi_a) if active else rng.uniform(lo_q, hi_q)
    h, left = 0, int(length * 24 * rng.random()) + 1
    while h < n_hours:
        end = min(n_hours, h + left)
        out[h:end] = 1.0 if active else QUIET_LEVEL
        h = end
        active = not active
        left = int(24 * (rng.uniform(lo_a, hi_a) if active else rng.uniform(lo_q, hi_q)))
    return out


def _last(window: float) -> float:
    """The latest submission time in a window: a second before its end, so that every
    workload arrives within the run; 0 in a window shorter than a second (``--days 1e-9``),
    where a second before the end would be before the start."""
    return max(window - 1.0, 0.0)


def _times(rng: np.random.Generator, weights: np.ndarray, n: int, window: float) -> np.ndarray:
    """``n`` submission times drawn from an hourly rate profile, inside ``[0, window)``."""
    if n == 0:
        return np.empty(0)
    p = weights / weights.sum()
    hours = rng.choice(len(weights), size=n, p=p)
    return np.minimum((hours + rng.random(n)) * HOUR, _last(window))


# ---- per-class draws --------------------------------------------------------------------
@dataclass(slots=True)
class _Batch:
    """Columns of generated workloads of one class (numpy arrays of equal length)."""

    cls: str
    submit: np.ndarray
    gpus: np.ndarray
    duration: np.ndarray
    min_runtime: np.ndarray
    resumable: np.ndarray
    checkpoint: np.ndarray
    user: np.ndarray  # index into the researcher list
    patience: np.ndarray  # seconds; NaN: waits forever


def _patience(rng: np.random.Generator, cls: str, n: int) -> np.ndarray:
    lo, hi = PATIENCE[cls]
    return rng.uniform(lo, hi, size=n)


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int,
               lo: float, hi: float) -> np.ndarray:
    return np.clip(median * np.exp(sigma * rng.standard_normal(n)), lo, hi)


def _take_until(gpu_seconds: np.ndarray, target: float) -> int:
    """How many of the drawn workloads (in order) make up ``target`` GPU-seconds most closely:
    drawing until the target is reached keeps the job-size distribution intact while hitting
    the volume to within one workload."""
    cum = np.cumsum(gpu_seconds)
    k = int(np.searchsorted(cum, target))
    if k >= len(cum):
        return len(cum)
    before = cum[k - 1] if k > 0 else 0.0
    return k + 1 if cum[k] - target < target - before else k


def _checkpoints(rng: np.random.Generator, n: int, unknown: float) -> np.ndarray:
    cp = rng.choice(np.array([15, 20, 30, 45, 60]) * MINUTE, size=n)
    return np.where(rng.random(n) < unknown, 0.0, cp)


def _train(rng: np.random.Generator, target: float, max_gpus: int,
           longest: float) -> dict[str, np.ndarray]:
    """Multi-host training: 16-128 GPUs (whole hosts), hours to days, resumable."""
    sizes = np.array([16, 32, 64, 128])
    probs = np.array([0.40, 0.30, 0.20, 0.10])
    ok = sizes <= max_gpus
    sizes, probs = sizes[ok], probs[ok] / probs[ok].sum()
    n = max(8, int(3 * target / (float(sizes @ probs) * 26 * HOUR)) + 8)
    gpus = rng.choice(sizes, size=n, p=probs)
    dur = _lognormal(rng, 16 * HOUR, 1.0, n, 2 * HOUR, longest)
    k = _take_until(gpus * dur, target)
    mrt = rng.choice(np.array([1, 2, 4, 6, 8]) * HOUR, size=k, p=[0.1, 0.2, 0.3, 0.2, 0.2])
    return {
        "gpus": gpus[:k], "duration": dur[:k], "min_runtime": mrt,
        "resumable": rng.random(k) < 0.9, "checkpoint": _checkpoints(rng, k, 0.15),
    }


def _single(rng: np.random.Generator, target: float) -> dict[str, np.ndarray]:
    """Single-host jobs: 1-8 GPUs, hours (fine-tuning, RL rollouts, data processing)."""
    mean = 5.0 * 6 * HOUR
    n = int(3 * target / mean) + 8
    gpus = rng.choice([1, 2, 4, 8], size=n, p=[0.15, 0.15, 0.25, 0.45])
    dur = _lognormal(rng, 4 * HOUR, 0.9, n, 20 * MINUTE, 2 * DAY)
    k = _take_until(gpus * dur, target)
    mrt = rng.choice(np.array([0.5, 1, 2, 4]) * HOUR, size=k, p=[0.2, 0.35, 0.3, 0.15])
    return {
        "gpus": gpus[:k], "duration": dur[:k], "min_runtime": mrt,
        "resumable": rng.random(k) < 0.7, "checkpoint": _checkpoints(rng, k, 0.3),
    }


def _eval(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Evaluations: 1-8 GPUs, 10 min to 2 h, usually declared for their whole expected run."""
    gpus = rng.choice([1, 2, 4, 8], size=n, p=[0.3, 0.3, 0.2, 0.2])
    dur = _lognormal(rng, 35 * MINUTE, 0.7, n, 10 * MINUTE, 2 * HOUR)
    mrt = rng.choice(np.array([0.5, 1, 2]) * HOUR, size=n, p=[0.5, 0.35, 0.15])
    return {
        "gpus": gpus, "duration": dur, "min_runtime": mrt,
        "resumable": rng.random(n) < 0.2, "checkpoint": np.zeros(n),
    }


def _sweep_trials(rng: np.random.Generator, target: float) -> tuple[dict[str, np.ndarray],
                                                                     np.ndarray]:
    """Opportunistic sweeps (unallocated, ``min_runtime`` 0): batches of 8-48 similar trials
    of one host each. Returns the trial columns and, per trial, its batch index."""
    mean_batch = 28 * 6.25 * 8.7 * HOUR
    n_batches = int(3 * target / mean_batch) + 4
    size = rng.integers(8, 49, size=n_batches)
    gpus_b = rng.choice([1, 2, 4, 8], size=n_batches, p=[0.05, 0.1, 0.25, 0.6])
    med_b = _lognormal(rng, 8 * HOUR, 0.6, n_batches, 30 * MINUTE, 20 * HOUR)
    batch = np.repeat(np.arange(n_batches), size)
    n = len(batch)
    gpus = gpus_b[batch]
    dur = np.clip(med_b[batch] * np.exp(0.3 * rng.standard_normal(n)), 15 * MINUTE, DAY)
    k = _take_until(gpus * dur, target)  # the last sweep may be cut short
    return {
        "gpus": gpus[:k], "duration": dur[:k], "min_runtime": np.zeros(k),
        "resumable": rng.random(k) < 0.6, "checkpoint": _checkpoints(rng, k, 0.4),
    }, batch[:k]


def _debug(rng: np.random.Generator, n_sessions: int) -> tuple[dict[str, np.ndarray],
                                                                np.ndarray, np.ndarray]:
    """Debug sessions: bursts of 1-10 small jobs (<= 8 GPUs, ``min_runtime`` <= 15 min),
    minutes long, each submitted a few minutes after the previous one. Returns the job
    columns and each job's offset from the start of its session."""
    per = np.minimum(rng.geometric(1 / 3.0, size=n_sessions), 10)
    session = np.repeat(np.arange(n_sessions), per)
    n = len(session)
    gaps = rng.exponential(6 * MINUTE, size=n)
    first = np.cumsum(per) - per
    cum = np.cumsum(gaps)
    offset = cum - np.repeat(cum[first], per) if n else np.empty(0)  # first at offset 0
    gpus = rng.choice([1, 2, 4, 8], size=n, p=[0.35, 0.25, 0.2, 0.2])
    dur = _lognormal(rng, 12 * MINUTE, 0.8, n, 1 * MINUTE, 90 * MINUTE)
    mrt = rng.choice(np.array([5, 10, 15]) * MINUTE, size=n, p=[0.3, 0.4, 0.3])
    return {
        "gpus": gpus, "duration": dur, "min_runtime": mrt,
        "resumable": np.zeros(n, dtype=bool), "checkpoint": np.zeros(n),
    }, session, offset


# ---- the organisation -------------------------------------------------------------------
def _tree(org: Sequence[ProgramSpec]) -> tuple[BudgetTree, list[tuple[str, list[str]]]]:
    """The budget tree (program/team/researcher) and, per team, its researchers' leaf paths.

    Inside a team the lead has weight 3, about a quarter of the team (senior staff) 2 and the
    rest 1: project leads fund people unequally.
    """
    nodes: list[BudgetNode] = []
    teams: list[tuple[str, list[str]]] = []
    uid = 0
    for prog in org:
        nodes.append(BudgetNode(prog.name, prog.weight))
        for team in prog.teams:
            tpath = f"{prog.name}/{team.name}"
            nodes.append(BudgetNode(tpath, team.weight))
            leaves = []
            for i in range(team.researchers):
                uid += 1
                w = 3.0 if i == 0 else 2.0 if i <= team.researchers // 4 else 1.0
                leaf = f"{tpath}/u{uid:03d}"
                nodes.append(BudgetNode(leaf, w))
                leaves.append(leaf)
            teams.append((tpath, leaves))
    return BudgetTree.build(nodes), teams


def _host_events(rng: np.random.Generator, hosts: Sequence[str],
                 window: float) -> list[HostEvent]:
    """Hard failures and unhealthy verdicts, each a Poisson process per host; an event that
    follows another on the same host within ``HOST_EVENT_GAP`` is dropped (the host is still
    draining or in repair, and one fault is reported once)."""
    rate = 1 / (FAIL_EVERY_DAYS * DAY) + 1 / (UNHEALTHY_EVERY_DAYS * DAY)
    p_fail = (1 / FAIL_EVERY_DAYS) / (1 / FAIL_EVERY_DAYS + 1 / UNHEALTHY_EVERY_DAYS)
    events: list[HostEvent] = []
    for name in hosts:
        t, last = 0.0, -math.inf
        while True:
            t += float(rng.exponential(1 / rate))
            if t >= window:
                break
            kind = HostEventKind.FAIL if rng.random() < p_fail else HostEventKind.UNHEALTHY
            if t - last >= HOST_EVENT_GAP:
                events.append(HostEvent(t, name, kind))
                last = t
    events.sort(key=lambda e: (e.time, e.host))
    return events


# ---- assembly ---------------------------------------------------------------------------
def _generate(name: str, org: Sequence[ProgramSpec], days: float, seed: int, size: int,
              host_events: bool, demand: float = TARGET_RATIO) -> Scenario:
    if size < GPUS_PER_HOST or size % GPUS_PER_HOST:
        raise ValueError(f"size: must be a positive multiple of {GPUS_PER_HOST}, got {size}")
    if not days > 0:
        raise ValueError(f"days: must be > 0, got {days}")
    if not demand > 0:
        raise ValueError(f"demand: must be > 0, got {demand}")
    rng = np.random.default_rng(seed)
    # patience comes from its own stream, so it does not shift any other draw
    prng = np.random.default_rng([seed, 1])
    window = days * DAY
    n_hours = math.ceil(days * 24)
    hours = np.arange(n_hours, dtype=float)
    day_profile = diurnal(hours)
    tree, teams = _tree(org)
    team_specs = [t for p in org for t in p.teams]
    leaves = [leaf for _, ls in teams for leaf in ls]
    leaf_index = {leaf: i for i, leaf in enumerate(leaves)}
    n_hosts = size // GPUS_PER_HOST
    host_names = [f"h{i:03d}" for i in range(n_hosts)]
    # multi-host runs take at most half the cluster, so one run never needs every host
    max_train = min(128, max(16, (size // 2) // GPUS_PER_HOST * GPUS_PER_HOST))
    if size < 16:
        max_train = 0
    capacity = size * window
    target = demand * capacity

    batches: list[_Batch] = []

    # squatters first: their placeholders are allocated demand and come out of the target
    squat = _squats(rng, leaves, size, window)
    squat_volume = float((squat.gpus * squat.duration).sum()) if len(squat.gpus) else 0.0
    batches.append(squat)
    remaining = max(0.0, target - squat_volume)

    activity = np.array([_seasons(rng, n_hours) for _ in teams])
    appetite = np.exp(APPETITE_SIGMA * rng.standard_normal(len(teams)))
    team_share = np.array([tree.share(path) for path, _ in teams])
    weight = team_share * appetite * activity.mean(axis=1)
    team_volume = remaining * weight / weight.sum()
    mix_mult = np.array([t.mix for t in team_specs])
    if max_train == 0:
        mix_mult[:, 0] = 0.0
    mix = MIX * mix_mult
    mix = mix / mix.sum(axis=1, keepdims=True)
    # people in a team are not equally busy
    busy = np.exp(0.6 * rng.standard_normal(len(leaves)))

    for ti, (_, team_leaves) in enumerate(teams):
        act = activity[ti]
        vol = team_volume[ti] * mix[ti]
        members = np.array([leaf_index[leaf] for leaf in team_leaves])
        pick = busy[members] / busy[members].sum()
        interactive = act * day_profile
        mild = act * (0.5 + 0.5 * day_profile)

        def users(n: int, members: np.ndarray = members, pick: np.ndarray = pick) -> np.ndarray:
            return rng.choice(members, size=n, p=pick)

        if vol[0] > 0:
            cols = _train(rng, vol[0], max_train, min(7 * DAY, window / 2))
            k = len(cols["gpus"])
            batches.append(_Batch(TRAIN, _times(rng, act, k, window), user=users(k),
                                  patience=_patience(prng, TRAIN, k), **cols))
        cols = _single(rng, vol[1])
        k = len(cols["gpus"])
        batches.append(_Batch(SINGLE, _times(rng, mild, k, window), user=users(k),
                              patience=_patience(prng, SINGLE, k), **cols))
        n_eval = int(rng.poisson(vol[2] / (3.3 * 45 * MINUTE)))
        cols = _eval(rng, n_eval)
        batches.append(_Batch(EVAL, _times(rng, mild, n_eval, window), user=users(n_eval),
                              patience=_patience(prng, EVAL, n_eval), **cols))
        n_sessions = int(rng.poisson(vol[3] / (3.0 * 3.25 * 16.5 * MINUTE)))
        cols, session, offset = _debug(rng, n_sessions)
        starts = _times(rng, interactive, n_sessions, window)
        who = users(n_sessions)
        submit = np.minimum(starts[session] + offset, _last(window))
        batches.append(_Batch(DEBUG, submit, user=who[session],
                              patience=_patience(prng, DEBUG, len(submit)), **cols))
        cols, batch = _sweep_trials(rng, vol[4])
        nb = int(batch.max()) + 1 if len(batch) else 0
        starts = _times(rng, interactive, nb, window)
        who = users(nb)
        # a sweep's trials go in within a minute of each other (one launcher loop)
        submit = np.minimum(starts[batch] + rng.random(len(batch)) * MINUTE, _last(window))
        batches.append(_Batch(SWEEP, submit, user=who[batch],
                              patience=_patience(prng, SWEEP, nb)[batch], **cols))

    # which resumable workloads checkpoint on SIGTERM: their own stream, so adding the
    # attribute shifts no other draw (the demand mix is unchanged)
    jobs = _assemble(rng, batches, leaves, np.random.default_rng([seed, 2]))
    events = _host_events(rng, host_names, window) if host_events else []
    hosts = tuple(Host(h, GPUS_PER_HOST) for h in host_names)
    scenario = Scenario(
        name=name, tree=tree, hosts=hosts, jobs=tuple(jobs), host_events=tuple(events),
        days=days, repair_time=REPAIR_TIME,
    )
    scenario.meta.update(calibration(scenario, seed=seed))
    return scenario


def _squats(rng: np.random.Generator, leaves: Sequence[str], size: int,
            window: float) -> _Batch:
    """Placeholders kept by researchers "keeping a debug node": a few GPUs held for 1-5 days
    at a time with a gap of up to two days between holds, over the whole window."""
    n_squatters = max(1, round(SQUATTERS_PER_1024 * size / 1024))
    who = rng.choice(len(leaves), size=n_squatters, replace=False)
    rows: list[tuple[float, int, float, int]] = []
    for u in who:
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.3, 0.3, 0.25, 0.15]))
        t = float(rng.uniform(0, 2 * DAY))
        while t < window:
            hold = float(rng.uniform(1, 5)) * DAY
            rows.append((t, gpus, hold, int(u)))
            t += hold + float(rng.uniform(0, 2)) * DAY
    n = len(rows)
    arr = np.array(rows, dtype=float).reshape(n, 4)
    return _Batch(
        SQUAT, submit=arr[:, 0], gpus=arr[:, 1].astype(int), duration=arr[:, 2],
        # a squatter declares the longest protection allowed
        min_runtime=np.full(n, MAX_MIN_RUNTIME), resumable=np.zeros(n, dtype=bool),
        checkpoint=np.zeros(n), user=arr[:, 3].astype(int), patience=np.full(n, np.nan),
    )


def _assemble(rng: np.random.Generator, batches: Sequence[_Batch],
              leaves: Sequence[str], term_rng: np.random.Generator) -> list[SimJob]:
    """Merge the classes, order by submission, number the workloads, add the legacy fields
    and which resumable ones checkpoint on SIGTERM (``CHECKPOINT_ON_TERM_SHARE``)."""
    cls = np.concatenate([np.full(len(b.submit), CLASSES.index(b.cls)) for b in batches])
    submit = np.concatenate([b.submit for b in batches])
    gpus = np.concatenate([b.gpus for b in batches]).astype(int)
    duration = np.concatenate([b.duration for b in batches])
    mrt = np.concatenate([b.min_runtime for b in batches])
    resumable = np.concatenate([b.resumable for b in batches]).astype(bool)
    checkpoint = np.concatenate([b.checkpoint for b in batches])
    user = np.concatenate([b.user for b in batches]).astype(int)
    patience = np.concatenate([b.patience for b in batches])
    n = len(submit)
    on_term = resumable & (term_rng.random(n) < CHECKPOINT_ON_TERM_SHARE)
    # legacy priority and opt-out, per class
    levels = np.zeros(n, dtype=int)
    nonpre = np.zeros(n, dtype=bool)
    u = rng.random(n)
    v = rng.random(n)
    for ci, name in enumerate(CLASSES):
        mask = cls == ci
        if name == SQUAT:
            levels[mask] = LegacyPriority.HIGH
            nonpre[mask] = True
            continue
        cum = np.cumsum(LEGACY_PRIORITY[name])
        levels[mask] = np.searchsorted(cum, u[mask], side="right").clip(0, 3)
        nonpre[mask] = v[mask] < LEGACY_NONPREEMPTIBLE[name]
    order = np.lexsort((cls, submit))
    jobs: list[SimJob] = []
    prio = list(LegacyPriority)
    for i, j in enumerate(order):
        name = CLASSES[cls[j]]
        leaf = leaves[user[j]]
        spec = WorkloadSpec(
            id=f"{name}-{i:05d}", budget=leaf, gpus=int(gpus[j]),
            min_runtime=round(float(mrt[j]), 3), submit_time=round(float(submit[j]), 3),
            user=leaf.rsplit("/", 1)[1], resumable=bool(resumable[j]),
            checkpoint_interval=float(checkpoint[j]),
            checkpoint_on_term=bool(on_term[j]),
        )
        jobs.append(SimJob(
            spec=spec, duration=round(float(duration[j]), 3),
            legacy_priority=prio[int(levels[j])], legacy_preemptible=not bool(nonpre[j]),
            squat=name == SQUAT,
            patience=None if math.isnan(patience[j]) else round(float(patience[j]), 3),
        ))
    return jobs


def job_class(job: SimJob) -> str:
    """The class a generated workload belongs to (the prefix of its id)."""
    return job.spec.id.split("-", 1)[0]


def calibration(scenario: Scenario, seed: int | None = None) -> dict[str, object]:
    """The figures that show a scenario matches its description (kept in ``Scenario.meta``).

    ``submitted_supply_ratio``: requested GPU-seconds of every workload submitted in the
    window (allocated and unallocated, at their true durations) over GPUs x window; work
    abandoned unstarted never takes its share, so this is an upper bound on what is served.
    ``patience_h``: the mean patience per class, hours (None: that class never gives up).
    ``offered_load_p10/p50/p90``: GPUs that would be busy, hour by hour after a 2-day
    ramp-up, if every workload started the moment it was submitted, over the cluster's GPUs.
    """
    window = scenario.days * DAY
    gpus_total = sum(h.gpus for h in scenario.hosts)
    jobs = scenario.jobs
    n = len(jobs)
    cls = [job_class(j) for j in jobs]
    gpus = np.fromiter((j.spec.gpus for j in jobs), float, n)
    dur = np.fromiter((j.duration for j in jobs), float, n)
    sub = np.fromiter((j.spec.submit_time for j in jobs), float, n)
    unalloc = np.fromiter((not j.spec.allocated for j in jobs), bool, n)
    volume = gpus * dur
    n_hours = math.ceil(window / HOUR)
    load = np.zeros(n_hours + 1)
    a = np.clip((sub // HOUR).astype(int), 0, n_hours)
    b = np.clip(((sub + dur) // HOUR).astype(int) + 1, 0, n_hours)
    np.add.at(load, a, gpus)
    np.add.at(load, b, -gpus)
    load = np.cumsum(load)[:n_hours] / gpus_total
    steady = load[min(48, n_hours // 2):]
    by_class = {c: cls.count(c) for c in CLASSES}
    hours_by_class = {
        c: round(float(volume[[k == c for k in cls]].sum()) / HOUR, 1) for c in CLASSES
    }
    high = sum(j.legacy_priority is LegacyPriority.HIGH for j in jobs)
    urgent = sum(j.legacy_priority is LegacyPriority.URGENT for j in jobs)
    allocated = [j for j in jobs if j.spec.allocated]
    nonpre = sum(not j.legacy_preemptible for j in allocated)
    kinds = [e.kind for e in scenario.host_events]
    patience: dict[str, float | None] = {}
    for c in CLASSES:
        values = [j.patience for j, k in zip(jobs, cls, strict=True)
                  if k == c and j.patience is not None]
        patience[c] = round(sum(values) / len(values) / HOUR, 2) if values else None
    team_volume: dict[str, float] = {}
    for job, v in zip(jobs, volume, strict=True):
        team = job.spec.budget.rsplit("/", 1)[0]
        team_volume[team] = team_volume.get(team, 0.0) + float(v)
    # each team's requested GPU-time over what its share of the whole cluster would give it
    over_share = {
        t: round(usage_ratio(v, scenario.tree.share(t), gpus_total * window), 2)
        for t, v in sorted(team_volume.items())
    }
    meta: dict[str, object] = {
        "size_gpus": gpus_total,
        "hosts": len(scenario.hosts),
        "days": scenario.days,
        "programs": len(scenario.tree.children("")),
        "teams": sum(len(scenario.tree.children(p)) for p in scenario.tree.children("")),
        "researchers": len(scenario.tree.leaves),
        "teams_submitting": len(team_volume),
        "workloads": n,
        "workloads_by_class": by_class,
        "gpu_hours_by_class": hours_by_class,
        "submitted_supply_ratio": round(float(volume.sum()) / (gpus_total * window), 3),
        "offered_load_p10": round(float(np.percentile(steady, 10)), 3),
        "offered_load_p50": round(float(np.percentile(steady, 50)), 3),
        "offered_load_p90": round(float(np.percentile(steady, 90)), 3),
        "patience_h": patience,
        # a window of a fraction of a second may hold no GPU-hours: 0 of 0, not nan
        "unallocated_demand_share": (round(float(volume[unalloc].sum() / volume.sum()), 3)
                                     if volume.sum() else 0.0),
        "legacy_high_share": round(high / n, 3),
        "legacy_urgent_share": round(urgent / n, 3),
        "legacy_nonpreemptible_share_of_allocated": round(nonpre / max(1, len(allocated)), 3),
        "squat_count": by_class[SQUAT],
        "squat_gpu_hours": hours_by_class[SQUAT],
        "host_failures": kinds.count(HostEventKind.FAIL),
        "host_drains": kinds.count(HostEventKind.UNHEALTHY),
        "team_demand_over_share": over_share,
    }
    if seed is not None:
        meta["seed"] = seed
    return meta


def seed_scenario(days: float = 30, seed: int = 0, size: int = 1024, *,
                  demand: float = TARGET_RATIO) -> Scenario:
    """The built-in scenario ``seed``: ``size`` GPUs (hosts of 8) shared by 150 researchers in
    15 teams under 4 programs weighted 40/30/20/10, for ``days`` days; the work submitted
    asks for ``demand`` times the cluster's GPU-time (default ``TARGET_RATIO``, 1.4), and
    every workload but the squatters' is withdrawn if it has not started within its owner's
    patience, so the outstanding demand settles at 2-3x the cluster instead of growing.

    Deterministic for a given ``(days, seed, size, demand)``. Calibration figures are in
    ``meta``.
    """
    return _generate("seed", SEED_ORG, days, seed, size, host_events=True, demand=demand)


def small_scenario(seed: int = 0, days: float = 2.0) -> Scenario:
    """A tiny scenario for fast tests: 4 hosts x 8 GPUs, 2 days (or ``days``), 7
    researchers in 3 teams, the same workload classes and demand ratio as ``seed``, a drain
    at 20 h and a failure at 30 h (those within the period)."""
    sc = _generate("small", SMALL_ORG, days, seed, 32, host_events=False)
    events = tuple(e for e in (
        HostEvent(20 * HOUR, "h001", HostEventKind.UNHEALTHY),
        HostEvent(30 * HOUR, "h002", HostEventKind.FAIL),
    ) if e.time < days * DAY)
    out = Scenario(name=sc.name, tree=sc.tree, hosts=sc.hosts, jobs=sc.jobs, host_events=events,
                   days=sc.days, repair_time=sc.repair_time, meta=dict(sc.meta))
    out.meta.update(host_failures=sum(e.kind is HostEventKind.FAIL for e in events),
                    host_drains=sum(e.kind is HostEventKind.UNHEALTHY for e in events))
    return out


def fleet_scenario(days: float = 30, seed: int = 0) -> Scenario:
    """The built-in scenario ``fleet`` (see :func:`apportion.sim.fleet.fleet_scenario`)."""
    from .fleet import fleet_scenario as build

    return build(days=days, seed=seed)


SCENARIOS = {"seed": seed_scenario, "small": small_scenario, "fleet": fleet_scenario}


def get_scenario(name: str, days: float | None = None, seed: int = 0,
                 size: int | None = None, demand: float | None = None) -> Scenario:
    """A built-in scenario by name (``seed``, ``small`` or ``fleet``), for the command line."""
    if name == "seed":
        return seed_scenario(days=30 if days is None else days, seed=seed,
                             size=1024 if size is None else size,
                             demand=TARGET_RATIO if demand is None else demand)
    if size is not None and name in ("small", "fleet"):
        raise ValueError(f"size: scenario {name!r} has its own cluster; --size sizes seed "
                         "and traces")
    if name == "small":
        return small_scenario(seed=seed, days=2.0 if days is None else days)
    if name == "fleet":
        return fleet_scenario(days=30 if days is None else days, seed=seed)
    raise ValueError(f"scenario {name!r}: unknown; built-in scenarios: {', '.join(SCENARIOS)}")
