"""``GpusQueue.first_below``, the lookup a pass skips hopeless work with, against a scan."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apportion.core.queueindex import GpusQueue

RUNTIMES = st.lists(st.sampled_from([0.0, 60.0, 900.0, 1800.0, 3600.0, 7200.0, 28800.0]),
                    max_size=70)


@given(RUNTIMES, st.integers(0, 80), st.sampled_from([0.0, 61.0, 900.0, 3600.0, 1e9,
                                                       float("inf")]))
def test_first_below_is_the_first_place_a_scan_finds(runtimes: list[float], start: int,
                                                     bound: float) -> None:
    """For any minimum runtimes in queue order, any place to start from (past the end
    included) and any bound, ``first_below`` names the first place at or after the start
    holding a runtime below the bound, or -1 where a scan finds none."""
    entries = [((0, float(i), f"w{i:03d}"), f"w{i:03d}") for i in range(len(runtimes))]
    q = GpusQueue(zip(entries, runtimes, strict=True))
    want = next((i for i in range(start, len(runtimes)) if runtimes[i] < bound), -1)
    assert q.first_below(start, bound) == want
    assert q.entries == entries and q.min_runtimes == runtimes


def test_position_is_the_place_in_queue_order() -> None:
    """``position`` is where an entry is, or would be inserted, in queue order."""
    entries = [((0, float(i), f"w{i}"), f"w{i}") for i in (1, 3, 5)]
    q = GpusQueue(zip(entries, [60.0, 60.0, 60.0], strict=True))
    assert q.position(entries[1]) == 1
    assert q.position(((0, 4.0, "w4"), "w4")) == 2
    assert q.position(((0, 9.0, "w9"), "w9")) == 3
