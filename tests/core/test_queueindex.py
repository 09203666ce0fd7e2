"""``GpusQueue.first_below``, the lookup a pass skips hopeless work with, against a scan."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apportion.core.queueindex import Entry, GpusQueue

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


# An operation on a queue of up to 40 requests w00..w39: queue one (at its place in queue
# order, with a minimum runtime) or take one out.
OPERATIONS = st.lists(
    st.tuples(st.booleans(), st.integers(0, 39), st.sampled_from([0.0, 60.0, 900.0, 3600.0])),
    max_size=120,
)


@given(OPERATIONS, st.integers(0, 39))
def test_add_and_discard_keep_what_a_rebuilt_queue_answers(
    operations: list[tuple[bool, int, float]], first: int
) -> None:
    """Queueing requests (at the end, inside the queue, back into a gap) and taking them
    out, in any order, leaves a ``GpusQueue`` holding what one built afresh from the
    requests then queued holds, in the same order, and ``first_below`` naming the same
    request as a scan of them, for every bound and every place to start from."""
    def entry(i: int) -> Entry:
        return ((0, float(i), f"w{i:02d}"), f"w{i:02d}")

    q = GpusQueue([(entry(first), 60.0)])
    queued = {first: 60.0}
    for add, i, runtime in operations:
        if add and i not in queued:
            q.add(entry(i), runtime)
            queued[i] = runtime
        elif not add and i in queued:
            q.discard(entry(i))
            del queued[i]
    want = [(entry(i), queued[i]) for i in sorted(queued)]
    assert q.items() == want and q.live == len(want)
    assert len(q.entries) < 2 * len(want) + 16  # the gaps are dropped as they pile up
    for bound in (0.0, 61.0, 900.0, 3600.0, float("inf")):
        for start in range(len(q.entries) + 1):
            at = q.first_below(start, bound)
            found = None if at < 0 else q.entries[at]
            # the places from start on hold the entries from the one at start on
            shorter = [e for e, m in want if m < bound and e >= q.entries[start]
                       ] if start < len(q.entries) else []
            assert found == (shorter[0] if shorter else None), (start, bound)


def test_discard_of_a_request_not_held_changes_nothing() -> None:
    """Taking out a request the queue does not hold, or one taken out already, leaves the
    queue as it was."""
    entries = [((0, float(i), f"w{i}"), f"w{i}") for i in (1, 3, 5)]
    q = GpusQueue(zip(entries, [60.0, 900.0, 60.0], strict=True))
    q.discard(((0, 4.0, "w4"), "w4"))
    q.discard(entries[1])
    q.discard(entries[1])
    assert q.live == 2 and q.items() == [(entries[0], 60.0), (entries[2], 60.0)]
    assert q.first_below(1, 1000.0) == 2
