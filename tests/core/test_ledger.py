"""The usage ledger: exact GPU-seconds over windows ending at any time, computed by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apportion.core import ROOT, CoreError, UsageLedger


def history() -> UsageLedger:
    """a/x uses 4 GPUs on [0, 100) and 2 more on [50, 150); b uses 8 free GPUs on [20, 70);
    the cluster has 16 healthy GPUs from 0 and 8 more from 60."""
    led = UsageLedger(start=0.0)
    led.change_capacity(16, 0.0)
    led.change("a/x", 4, 0.0, charged=True)
    led.change("b", 8, 20.0, charged=False)
    led.change("a/x", 2, 50.0, charged=True)
    led.change_capacity(8, 60.0)
    led.change("b", -8, 70.0, charged=False)
    led.change("a/x", -4, 100.0, charged=True)
    led.change("a/x", -2, 150.0, charged=True)
    return led


@pytest.mark.parametrize(
    ("node", "now", "window", "expected"),
    [
        # 4 x 100 + 2 x 100
        ("a/x", 200.0, 1e9, 600.0),
        ("a", 200.0, 1e9, 600.0),
        (ROOT, 200.0, 1e9, 600.0),
        # (75, 125]: 4 x 25 (to 100) + 2 x 50
        ("a/x", 125.0, 50.0, 200.0),
        # (0, 75] at now=75 between breakpoints: 4 x 75 + 2 x 25
        ("a/x", 75.0, 75.0, 350.0),
        # (30, 60]: 4 x 30 + 2 x 10
        ("a", 60.0, 30.0, 140.0),
        # a window reaching before the ledger began counts nothing there
        ("a/x", 10.0, 1000.0, 40.0),
        # a window entirely after the last use
        ("a/x", 500.0, 100.0, 0.0),
        ("b", 200.0, 1e9, 0.0),  # b's usage was free, not charged
        ("nobody", 200.0, 1e9, 0.0),
    ],
)
def test_charged_windows(node: str, now: float, window: float, expected: float) -> None:
    """Charged GPU-seconds of a subtree in ``(now - window, now]``, exactly."""
    assert history().charged(node, now, window) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("node", "now", "window", "expected"),
    [
        ("b", 200.0, 1e9, 400.0),  # 8 x 50
        (ROOT, 200.0, 1e9, 400.0),
        ("b", 40.0, 30.0, 160.0),  # (10, 40]: 8 x 20
        ("a/x", 200.0, 1e9, 0.0),
    ],
)
def test_free_windows(node: str, now: float, window: float, expected: float) -> None:
    """Unallocated GPU-seconds are kept apart from charged ones."""
    assert history().free(node, now, window) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("now", "window", "expected"),
    [
        (60.0, 60.0, 960.0),  # 16 x 60
        (100.0, 100.0, 16 * 100 + 8 * 40),
        (100.0, 20.0, 24 * 20),
        (70.0, 20.0, 16 * 10 + 24 * 10),
    ],
)
def test_capacity_windows(now: float, window: float, expected: float) -> None:
    """Healthy GPU-seconds follow capacity changes."""
    assert history().capacity(now, window) == pytest.approx(expected)


def test_rate_and_total() -> None:
    """``rate`` is the GPUs in use now; ``charged_total`` everything since the start."""
    led = history()
    assert led.rate("a") == 0.0 and led.rate("b", charged=False) == 0.0
    led.change("a/x", 3, 200.0, charged=True)
    assert led.rate("a") == 3.0 and led.rate(ROOT) == 3.0
    assert led.charged_total("a", 210.0) == pytest.approx(630.0)


def test_same_instant_changes_add_up() -> None:
    """Several changes at one instant net out (start and stop at the same time: nothing)."""
    led = UsageLedger(start=0.0)
    led.change("a", 4, 10.0, charged=True)
    led.change("a", -4, 10.0, charged=True)
    led.change("a", 2, 10.0, charged=True)
    assert led.charged("a", 20.0, 100.0) == pytest.approx(20.0)


def test_time_never_goes_backwards() -> None:
    """An update before the last one is refused (the ledger is append-only)."""
    led = UsageLedger(start=0.0)
    led.change("a", 1, 10.0, charged=True)
    with pytest.raises(CoreError, match="ledger: time went backwards"):
        led.change("a", -1, 5.0, charged=True)
    with pytest.raises(CoreError, match="ledger: time went backwards"):
        led.change_capacity(8, 5.0)


def test_windows_stay_exact_after_pruning() -> None:
    """Thousands of updates over 60 days: old breakpoints are pruned, yet any window within
    the kept horizon (here 10 days) is still exact. One GPU on [k*600, k*600 + 300) for
    every k: 300 GPU-seconds per 600 s."""
    keep = 10 * 86400.0
    led = UsageLedger(start=0.0, keep=keep)
    end = 60 * 86400.0
    t = 0.0
    while t < end:
        led.change("a/x", 1, t, charged=True)
        led.change("a/x", -1, t + 300, charged=True)
        t += 600
    charged = led.fingerprint()["charged"]
    assert isinstance(charged, tuple)
    times = charged[0][1]  # breakpoints kept for the root's series
    assert len(times) < 2 * keep / 300 + 200  # memory follows the window, not the history
    for window in (600.0, 3600.0, 86400.0, 7 * 86400.0):
        assert led.charged("a", end, window) == pytest.approx(window / 2)
    assert led.charged("a/x", end - 150, 600.0) == pytest.approx(300.0)


@given(
    st.lists(st.tuples(st.integers(1, 500), st.integers(-3, 3)), min_size=1, max_size=60),
    st.lists(st.tuples(st.floats(0, 20_000), st.floats(1, 20_000)), min_size=1, max_size=40),
)
def test_any_window_in_any_order_is_the_integral(
    steps: list[tuple[int, int]], queries: list[tuple[float, float]]
) -> None:
    """Rate changes at random times, then windows asked in random order (the lookup
    remembers where the last one landed): each equals the integral summed by hand."""
    led = UsageLedger(start=0.0)
    changes: list[tuple[float, int]] = []  # (time, rate from then on)
    t, rate = 0.0, 0
    for gap, delta in steps:
        t += gap
        delta = max(delta, -rate)  # a budget never holds fewer than 0 GPUs
        rate += delta
        led.change("a", delta, t, charged=True)
        changes.append((t, rate))

    def used_until(x: float) -> float:
        total, held, since = 0.0, 0, 0.0
        for at, now_rate in changes:
            if at >= x:
                break
            total += held * (at - since)
            held, since = now_rate, at
        return total + held * (x - since)

    for now, window in queries:
        expected = used_until(now) - used_until(max(now - window, 0.0))
        assert led.charged("a", now, window) == pytest.approx(expected, abs=1e-6)


@given(
    st.lists(st.tuples(st.integers(1, 500), st.integers(0, 3)), min_size=1, max_size=60),
    st.lists(st.tuples(st.floats(0, 20_000), st.floats(1, 20_000), st.integers(0, 80)),
             min_size=1, max_size=40),
)
def test_the_kept_windows_and_lookup_hints_change_no_answer(
    steps: list[tuple[int, int]], queries: list[tuple[float, float, int]]
) -> None:
    """The ledger's only state outside its fingerprint is derived: a window read from the
    windows it keeps equals the one worked out afresh (``memo=False``), bit for bit, and a
    lookup gives the same answer wherever the series' hint was left (set at random here)."""
    led = UsageLedger(start=0.0)
    t = 0.0
    for gap, delta in steps:
        t += gap
        led.change("a", delta, t, charged=True)
    series = led._charged["a"]
    for now, window, hint in queries:
        fresh = led.charged("a", now, window, memo=False)
        assert led.charged("a", now, window) == fresh
        assert led.charged("a", now, window) == fresh  # from the kept windows
        series.hint = hint
        assert led.charged("a", now, window, memo=False) == fresh


def test_a_window_asked_again_sees_changes_before_its_end() -> None:
    """A window ending at 100 asked while the last change was at 0, then a change at 50
    (the live service may learn of an exit after a pass that looked later): asked again,
    the window counts it. A change at 100 or later does not move it."""
    led = UsageLedger(start=0.0)
    led.change("a", 4, 0.0, charged=True)
    assert led.charged("a", 100.0, 100.0) == 400.0
    led.change("a", -4, 50.0, charged=True)
    assert led.charged("a", 100.0, 100.0) == 200.0
    led.change("a", 8, 100.0, charged=True)
    assert led.charged("a", 100.0, 100.0) == 200.0
    assert led.charged("a", 110.0, 100.0) == 4 * 40 + 8 * 10


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(1, 4), st.integers(0, 600),
                       st.integers(0, 400)), min_size=1, max_size=30),
    st.lists(st.tuples(st.floats(0, 40_000), st.floats(1, 40_000)), min_size=1, max_size=20),
)
def test_an_end_learnt_late_and_amended_counts_as_if_recorded_on_time(
    runs: list[tuple[int, int, int, int]], queries: list[tuple[float, float]]
) -> None:
    """Overlapping runs; each one's end is recorded up to 400 s late (after other runs
    started, the ledger having moved on), then amended back to its real time. Every window
    of every node equals that of a ledger that recorded each end on time."""
    late, exact = UsageLedger(start=0.0), UsageLedger(start=0.0)
    on_time: list[tuple[float, int]] = []  # (time, rate change)
    learnt: list[tuple[float, int, float]] = []  # (when recorded, rate change, real time)
    t = 0.0
    for gap, gpus, length, delay in runs:
        t += gap
        on_time += [(t, gpus), (t + length, -gpus)]
        learnt += [(t, gpus, t), (t + length + delay, -gpus, t + length)]
    for at, delta in sorted(on_time):
        exact.change("a/x", delta, at, charged=True)
    for at, delta, real in sorted(learnt):
        late.change("a/x", delta, at, charged=True)
        if real < at:
            late.amend("a/x", delta, real, at, charged=True)
    for now, window in queries:
        for node in ("a/x", "a", ROOT):
            assert late.charged(node, now, window) == pytest.approx(
                exact.charged(node, now, window), abs=1e-6)
    assert late.rate("a") == exact.rate("a") == 0


def test_amend_refuses_a_time_after_the_last_update() -> None:
    """The past only: an amendment reaching past the last update is refused."""
    led = UsageLedger(start=0.0)
    led.change("a", 2, 10.0, charged=True)
    with pytest.raises(CoreError, match="ledger: amend: 20.0 is after the last update"):
        led.amend("a", -2, 15.0, 20.0, charged=True)


def test_an_amendment_moves_the_windows_asked_before_it() -> None:
    """A window asked before an amendment (kept for repeat lookups) counts it when asked
    again: 4 GPUs from 0, recorded as ending at 100, really ended at 60."""
    led = UsageLedger(start=0.0)
    led.change("a/x", 4, 0.0, charged=True)
    led.change("a/x", -4, 100.0, charged=True)
    assert led.charged("a", 100.0, 100.0) == 400.0
    led.amend("a/x", -4, 60.0, 100.0, charged=True)
    assert led.charged("a", 100.0, 100.0) == 240.0
    assert led.charged("a/x", 80.0, 30.0) == 4 * 10
