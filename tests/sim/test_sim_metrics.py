"""The metric recorder: exact integrals of piecewise-constant signals, hour by hour."""

from __future__ import annotations

import pytest

from apportion.core import BudgetTree, PreemptReason
from apportion.sim.metrics import Recorder, percentiles, team_of

TREE = BudgetTree.build([("p/t1/a", 1.0), ("p/t1/b", 1.0), ("q/t2/c", 2.0)])
# shares: p 1/2 (t1 1/2: a 1/4, b 1/4), q 1/2 (t2 1/2, c 1/2)


def recorder(healthy: int = 8) -> Recorder:
    return Recorder(TREE, total_gpus=8, healthy=healthy)


def rows(rec: Recorder, budget: str) -> list[tuple[object, ...]]:
    return [r for r in rec.budget_rows if r[2] == budget]


def test_owed_is_min_of_share_and_ask() -> None:
    """Leaf a (share 1/4 of 8 = 2 GPUs) asks 4 GPUs for the whole hour: owed 2 GPU-hours;
    it runs 1 GPU for half the hour: delivered 0.5, attained 0.5."""
    rec = recorder()
    rec.queued("p/t1/a", 4, True, 0.0)
    rec.started("p/t1/a", 1, True, False, 0.0)  # part of it, for the sake of the test
    rec.stopped("p/t1/a", 1, 0, True, False, 1800.0, requeued=True, reason=None)
    rec.close_hour(3600.0)
    (row,) = rows(rec, "p/t1/a")
    assert row[8] == pytest.approx(2.0)  # owed
    assert row[9] == pytest.approx(0.5)  # delivered
    assert row[10] == pytest.approx(0.5)  # attained
    assert row[7] == pytest.approx(4.0)  # asked, time-averaged GPUs


def test_internal_nodes_sum_their_subtree() -> None:
    """a asks 1 GPU and b asks 3: t1 (share 4 GPUs) asks 4 and is owed 4 GPU-hours, while the
    leaves are owed min(2, 1) + min(2, 3) = 3."""
    rec = recorder()
    rec.queued("p/t1/a", 1, True, 0.0)
    rec.queued("p/t1/b", 3, True, 0.0)
    rec.close_hour(3600.0)
    assert rows(rec, "p/t1")[0][8] == pytest.approx(4.0)
    leaves = [float(rows(rec, leaf)[0][8]) for leaf in ("p/t1/a", "p/t1/b")]  # type: ignore[arg-type]
    assert sum(leaves) == pytest.approx(3.0)


def test_healthy_change_moves_owed_at_the_exact_time() -> None:
    """c (share 1/2) asks 8 GPUs; the cluster has 8 healthy GPUs for 900 s then 4: owed
    = (4 x 900 + 2 x 2700) / 3600 = 2.5 GPU-hours."""
    rec = recorder()
    rec.queued("q/t2/c", 8, True, 0.0)
    rec.change_healthy(-4, 900.0)
    rec.close_hour(3600.0)
    assert rows(rec, "q/t2/c")[0][8] == pytest.approx(2.5)
    assert rec.cluster_rows[0][3] == pytest.approx((8 * 900 + 4 * 2700) / 3600)


def test_unallocated_work_is_free_not_owed() -> None:
    """Unallocated work is neither asked nor delivered; it shows as free GPU-hours and in the
    unallocated share of assigned time."""
    rec = recorder()
    rec.queued("q/t2/c", 2, False, 0.0)
    rec.started("q/t2/c", 2, False, False, 0.0)
    rec.close_hour(3600.0)
    (row,) = rows(rec, "q/t2/c")
    assert (row[7], row[8], row[9], row[11]) == (0.0, 0.0, 0.0, pytest.approx(2.0))
    assert rec.totals.unallocated == pytest.approx(2 * 3600)
    assert rec.totals.assigned == pytest.approx(2 * 3600)


def test_attainment_sums_hours_before_dividing() -> None:
    """Hour 0: c owed 4, delivered 4. Hour 1: owed 4, delivered 0. Attainment (4 + 0) / 8
    = 0.5 (not the mean of hourly ratios, which happens to agree here, but is summed)."""
    rec = recorder()
    rec.queued("q/t2/c", 4, True, 0.0)
    rec.started("q/t2/c", 4, True, False, 0.0)
    rec.stopped("q/t2/c", 4, 4, True, False, 3600.0, requeued=True, reason=PreemptReason.REBALANCE)
    rec.close_hour(3600.0)
    rec.close_hour(7200.0)
    att = rec.attainment()
    assert att["per_budget"]["q/t2/c"] == pytest.approx(0.5)  # type: ignore[index]
    assert att["overall"] == pytest.approx(0.5)
    assert att["min_budget"] == "q/t2"
    assert att["per_budget"]["p/t1/a"] is None  # type: ignore[index]  # never owed anything


def test_delivered_above_owed_does_not_raise_attainment() -> None:
    """A budget running 8 GPUs on a 4-GPU share, asking 8, is owed 4 and attains 4: 100%,
    never more."""
    rec = recorder()
    rec.queued("q/t2/c", 8, True, 0.0)
    rec.started("q/t2/c", 8, True, False, 0.0)
    rec.close_hour(3600.0)
    assert rec.attainment()["overall"] == pytest.approx(1.0)


def test_last_bin_may_be_short() -> None:
    """Closing at 5400 s makes a second bin of half an hour, with span_h 0.5."""
    rec = recorder()
    rec.close_hour(3600.0)
    rec.close_hour(5400.0)
    assert [r[1] for r in rec.cluster_rows] == [1.0, 0.5]


def test_percentiles_and_teams() -> None:
    """Linear-interpolation percentiles; an empty sample gives None; team = two levels."""
    assert percentiles([0, 10, 20, 30, 40]) == {"p50": 20.0, "p90": 36.0, "p99": 39.6, "n": 5}
    assert percentiles([])["p90"] is None
    assert team_of("ai/llm/alice") == "ai/llm"
    assert team_of("solo") == "solo"
