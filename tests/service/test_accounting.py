"""``report usage`` figures against attempts written by hand into a real store (SQLite and
PostgreSQL), over ten days: longer than the 7-day lookback window.

The tree: x (share 1/2) with x/a and x/b (1/4 each), y (1/2). One host h1 of 8 GPUs,
added at T0 (a UTC midnight, 2026-11-25), drained from T0+5d to T0+6d (= 2026-12-01
00:00). Hours below are from T0.

* W4 (y, bob, 8 GPUs, allocated): submitted T0-2h, runs T0-1h .. T0+2h (2 h in the period).
* W1 (x/a, alice, 4 GPUs, allocated): submitted T0, runs 2h..3h, requeued, runs 4h..8h.
* W5 (x/a, alice, 8 GPUs, allocated): submitted T0+5d (while h1 drains), runs 6d..6d+1h.
* W2 (y, bob, 8 GPUs, unallocated): runs 8d..8d+10h.
* W3 (x/b, carol, 2 GPUs, allocated): submitted 9d, cancelled while pending at 9d+3h.

Owed per hour is min(share x healthy GPUs, GPUs asked for); the expected figures are
worked out in each test's docstring.
"""

from __future__ import annotations

import calendar
import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from store_db import BACKENDS, open_store

from apportion.core import HostState, Status
from apportion.service.accounting import (
    ReportError,
    headline,
    parse_time,
    table_rows,
    to_csv,
    usage_report,
)
from apportion.service.store import Store, UsedAttempt, UsedWorkload

H, D = 3600.0, 86400.0
T0 = float(calendar.timegm((2026, 11, 25, 0, 0, 0)))
NOW = T0 + 20 * D


def build(store: Store) -> dict[str, str]:
    clock = {"t": T0 - 3 * H}
    store.clock = lambda: clock["t"]
    for path in ("x", "x/a", "x/b", "y"):
        store.add_budget(path, 1.0, actor="root")
    ids: dict[str, str] = {}

    def submit(name: str, budget: str, user: str, gpus: int, min_runtime: float,
               at: float) -> str:
        ids[name] = store.add_workload(budget=budget, gpus=gpus, min_runtime=min_runtime,
                                       submit_time=at, command=["x"], actor=user).id
        return ids[name]

    def run(wid: str, n: int, gpus: int, a: float, b: float, status: Status) -> None:
        store.begin_attempt(wid, [("h1", gpus, list(range(gpus)))], a)
        if status is not Status.COMPLETED:  # preempted: it was stopping first
            store.mark_stopping(wid, "preempted: rebalance", b)
        store.end_attempt(wid, n, b, 0, "exited 0", status)

    w4 = submit("W4", "y", "bob", 8, 2 * H, T0 - 2 * H)
    run(w4, 1, 8, T0 - H, T0 + 2 * H, Status.COMPLETED)
    clock["t"] = T0
    store.add_host("h1", 8, actor="root")
    w1 = submit("W1", "x/a", "alice", 4, H, T0)
    run(w1, 1, 4, T0 + 2 * H, T0 + 3 * H, Status.PENDING)
    run(w1, 2, 4, T0 + 4 * H, T0 + 8 * H, Status.COMPLETED)
    clock["t"] = T0 + 5 * D
    store.set_host_state("h1", HostState.DRAINING, "ECC", "root")
    w5 = submit("W5", "x/a", "alice", 8, H, T0 + 5 * D)
    clock["t"] = T0 + 6 * D
    store.set_host_state("h1", HostState.HEALTHY, "fixed", "root")
    run(w5, 1, 8, T0 + 6 * D, T0 + 6 * D + H, Status.COMPLETED)
    w2 = submit("W2", "y", "bob", 8, 0.0, T0 + 8 * D)
    run(w2, 1, 8, T0 + 8 * D, T0 + 8 * D + 10 * H, Status.PREEMPTED)
    submit("W3", "x/b", "carol", 2, H, T0 + 9 * D)
    clock["t"] = T0 + 9 * D + 3 * H
    store.cancel_workload(ids["W3"], "carol")
    return ids


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(request.param, tmp_path)
    build(s)
    yield s
    s.close()


def rows(report: dict[str, Any], key: str = "budget") -> dict[Any, dict[str, Any]]:
    if report["by"] == "month":
        return {(r["month"], r["budget"]): r for r in report["rows"]}
    return {r[key]: r for r in report["rows"]}


def test_per_budget_figures_over_ten_days(store: Store) -> None:
    """x/a: charged 4x1 + 4x4 + 8x1 = 28 GPU-h; owed 2 GPUs (1/4 of 8) in each of hours
    0-7 (it asked for 4) = 16, none while h1 drained, 2 in hour 6d = 18; got
    min(delivered, owed): 2 in hours 2 and 4-7, 2 in hour 6d = 12: 2/3.
    x/b: owed 2 x 3 h while W3 waited, got nothing: 0. x (share 1/2, 4 GPUs): owed 4 x 8 +
    4 + 2 x 3 = 42, got 4 x 5 + 4 = 24: 4/7. y: charged 8 x 2 = 16, free 8 x 10 = 80, owed
    4 x 2 = 8, all got: 1. The cluster (8 GPUs): owed 8+8+4+4+4x4 (hours 0-7) + 8 + 6 = 54,
    got 8+8+4+0+16 + 8 = 44. Healthy: 9 days x 8 GPUs = 1728 GPU-h."""
    r = usage_report(store, T0, T0 + 10 * D, "budget", NOW)
    got = {k: (v["charged_gpu_hours"], v["free_gpu_hours"], v["owed_gpu_hours"],
               v["attainment"]) for k, v in rows(r).items()}
    assert got == {
        "(all)": (44.0, 80.0, 54.0, pytest.approx(44 / 54, rel=1e-12)),
        "x": (28.0, 0.0, 42.0, pytest.approx(24 / 42, rel=1e-12)),
        "x/a": (28.0, 0.0, 18.0, pytest.approx(12 / 18, rel=1e-12)),
        "x/b": (0.0, 0.0, 6.0, 0.0),
        "y": (16.0, 80.0, 8.0, 1.0),
    }
    assert rows(r)["x/a"]["delivered_gpu_hours"] == 28.0
    assert r["healthy_gpu_hours"] == 1728.0
    assert r["occupancy"] == pytest.approx(124 / 1728, rel=1e-12)
    assert r["unallocated_fraction"] == pytest.approx(80 / 124, rel=1e-12)


def test_per_user_figures(store: Store) -> None:
    """alice: W1 and W5, 28 charged; bob: W4 (16 charged) and W2 (80 free); carol's W3
    never ran: a row of zeros. Owed and attainment are per budget only."""
    r = usage_report(store, T0, T0 + 10 * D, "user", NOW)
    assert {u: (v["charged_gpu_hours"], v["free_gpu_hours"]) for u, v in rows(r, "user").items()
            } == {"alice": (28.0, 0.0), "bob": (16.0, 80.0), "carol": (0.0, 0.0)}
    assert "attainment" not in rows(r, "user")["alice"]


def test_per_month_figures_split_at_the_month_boundary(store: Store) -> None:
    """2026-12-01 00:00 is T0+6d. x/a in November: W1, 20 charged, owed 16, got 10; in
    December: W5, 8 charged, owed 2 (hour 6d), got 2. y: all charged in November, all
    free in December."""
    r = usage_report(store, T0, T0 + 10 * D, "month", NOW)
    m = rows(r)
    assert [(m[k]["charged_gpu_hours"], m[k]["owed_gpu_hours"], m[k]["attainment"])
            for k in (("2026-11", "x/a"), ("2026-12", "x/a"))] == [
        (20.0, 16.0, pytest.approx(10 / 16, rel=1e-12)), (8.0, 2.0, 1.0)]
    assert [(m[k]["charged_gpu_hours"], m[k]["free_gpu_hours"])
            for k in (("2026-11", "y"), ("2026-12", "y"))] == [(16.0, 0.0), (0.0, 80.0)]


def test_a_period_inside_the_history_counts_only_its_part(store: Store) -> None:
    """From T0+3h to T0+7h: W1's attempt 2 runs 4h..7h inside (3 h x 4 GPUs = 12);
    owed 2 x 4 h = 8, got 2 x 3 h = 6."""
    r = rows(usage_report(store, T0 + 3 * H, T0 + 7 * H, "budget", NOW))["x/a"]
    assert (r["charged_gpu_hours"], r["owed_gpu_hours"], r["attainment"]) == (12.0, 8.0, 0.75)


@pytest.mark.parametrize("by", ["budget", "month"])
def test_the_cluster_row_is_named_all_in_json_csv_and_table(store: Store, by: str) -> None:
    """The cluster's row is budget ``(all)`` in the JSON (``rows`` and ``budgets``), in
    the CSV and in the table alike (the JSON named it ``""``, the others ``(all)``)."""
    report = usage_report(store, T0, T0 + 10 * D, by, NOW)
    names = [r["budget"] for r in report["rows"]]
    assert "(all)" in names and "" not in names
    assert [r["budget"] for r in report["budgets"]][0] == "(all)"
    col = 0 if by == "budget" else 1
    csv_names = [line.split(",")[col] for line in to_csv(report).splitlines()[1:]]
    assert csv_names == names
    assert [cells[col] for cells in table_rows(report)[1]] == names


def test_csv_has_one_line_per_budget(store: Store) -> None:
    """The CSV: a header naming the columns, then one line per node with full precision,
    the cluster's named ``(all)`` as in the table (its budget cell was empty);
    with one pool billed 1 (no billing in the config), charged units are charged
    GPU-hours."""
    report = usage_report(store, T0, T0 + 10 * D, "budget", NOW)
    lines = to_csv(report).splitlines()
    assert lines[0] == ("budget,share,charged_gpu_hours,charged_units,free_gpu_hours,"
                        "owed_gpu_hours,delivered_gpu_hours,attainment,period_from,period_to")
    assert lines[4] == ("x/b,0.25,0.0,0.0,0.0,6.0,0.0,0.0,2026-11-25 00:00:00+00:00,"
                        "2026-12-05 00:00:00+00:00")
    assert lines[1].startswith("(all),1.0,")  # the cluster, named as in the table
    assert [r["charged_units"] for r in report["rows"]] == [
        r["charged_gpu_hours"] for r in report["rows"]]
    assert any(r["charged_units"] > 0 for r in report["rows"])


def test_csv_says_in_utc_the_period_each_row_covers_by_month_the_months_part(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CSV's last columns, ``period_from`` and ``period_to``, say in UTC what each
    row's figures cover, whatever the reader's zone: per budget or user the report's period;
    per month the UTC month's part of it (2026-11 from the period's start to 2026-12-01
    00:00 UTC, 2026-12 from then to the period's end). Without them a forwarded file named
    neither its period nor the zone of its months."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    start, end = T0 + 8 * H, T0 + 10 * D
    for by in ("budget", "user"):
        for row in csv.DictReader(io.StringIO(to_csv(usage_report(store, start, end, by,
                                                                  NOW)))):
            assert (row["period_from"], row["period_to"]) == (
                "2026-11-25 08:00:00+00:00", "2026-12-05 00:00:00+00:00")
    got = {(r["month"], r["period_from"], r["period_to"]) for r in csv.DictReader(
        io.StringIO(to_csv(usage_report(store, start, end, "month", NOW))))}
    assert got == {("2026-11", "2026-11-25 08:00:00+00:00", "2026-12-01 00:00:00+00:00"),
                   ("2026-12", "2026-12-01 00:00:00+00:00", "2026-12-05 00:00:00+00:00")}


def test_the_headline_writes_the_period_in_utc_with_its_offset(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The period of the headline (the table's last line, the HTML page's first) is
    written as every time is shown, in UTC, the zone of the report's hours, days and
    months, whatever the reader's zone."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    report = usage_report(store, T0, T0 + 10 * D + 8 * H, "budget", NOW)
    assert headline(report).startswith(
        "2026-11-25 00:00:00+00:00 to 2026-12-05 08:00:00+00:00: ")


def test_bad_parameters_are_named(store: Store) -> None:
    """An unknown grouping or an empty period is refused with the parameter's name."""
    with pytest.raises(ReportError, match="by: must be one of budget, user, month"):
        usage_report(store, T0, T0 + D, "team", NOW)
    with pytest.raises(ReportError, match="from: must be before to"):
        usage_report(store, T0 + D, T0, "budget", NOW)


def test_daily_chart_shows_a_single_day_on_a_two_day_axis_with_markers() -> None:
    """One day of figures: each day is a marker (a line needs two points) and the axis
    spans the day before to the day after (matplotlib spanned years around one date);
    over more than a month, plain lines."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from apportion.service.accounting import daily_chart

    day = 1_796_515_200.0  # 2026-12-06 00:00 UTC
    one = {"days": [day], "daily": {"ai": {"delivered": [12.0], "owed": [10.0]}}}
    fig = daily_chart(one, {"ai": "tab:blue"})
    (ax,) = fig.axes
    assert ax.get_xlim() == (day / 86400 - 1, day / 86400 + 1)
    assert [line.get_marker() for line in ax.get_lines()] == ["o", "o"]
    assert ax.get_ylim()[0] == 0
    plt.close(fig)
    days = [day + 86400.0 * i for i in range(40)]
    many = {"days": days, "daily": {"ai": {"delivered": [1.0] * 40, "owed": [1.0] * 40}}}
    fig = daily_chart(many, {"ai": "tab:blue"})
    assert [line.get_marker() for line in fig.axes[0].get_lines()] == ["None", "None"]
    plt.close(fig)


def test_the_per_day_plot_says_its_days_are_utc_days(tmp_path: Path) -> None:
    """The HTML usage report's per-day plot says its days are UTC days, as the headline
    says its period is UTC: the plot's x axis is labelled ``day (UTC)``, its dates are
    written in UTC, and its caption reads "per UTC day"."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from apportion.service.accounting import daily_chart, to_html

    day = 1_796_515_200.0  # 2026-12-06 00:00 UTC
    fig = daily_chart({"days": [day, day + D], "daily": {"ai": {"delivered": [1.0, 2.0],
                                                               "owed": [1.0, 1.0]}}},
                      {"ai": "tab:blue"})
    (ax,) = fig.axes
    assert ax.get_xlabel() == "day (UTC)"
    assert str(ax.xaxis.get_major_locator().tz) == "UTC"
    plt.close(fig)
    store = open_store("sqlite", tmp_path)
    store.clock = lambda: T0
    store.add_budget("ai", 1.0, actor="root")
    store.add_host("h1", 8, actor="root")
    page = to_html(usage_report(store, T0 - 2 * D, T0, "budget", NOW))
    store.close()
    assert "<figcaption>Delivered (solid) and owed (dashed) per UTC day, top-level " \
        "budgets</figcaption>" in page


def test_a_host_counts_from_its_registration_and_as_it_was_then(store: Store) -> None:
    """h1 was added at T0: the day before it, nothing was healthy (not its 8 GPUs x 24 h),
    and the day around T0 counts its 12 h from T0 (96). Draining h1 now changes neither:
    a past period comes from the audit, not the host's present state."""
    def healthy(start: float, end: float) -> float:
        return float(usage_report(store, start, end, "budget", NOW)["healthy_gpu_hours"])

    before = (healthy(T0 - D, T0), healthy(T0 - 12 * H, T0 + 12 * H))
    assert before == (0.0, 96.0)
    store.clock = lambda: NOW - H
    store.set_host_state("h1", HostState.DRAINING, "ECC", "root")
    assert (healthy(T0 - D, T0), healthy(T0 - 12 * H, T0 + 12 * H)) == before


def test_a_resized_host_counts_the_gpus_it_had_in_each_period(store: Store) -> None:
    """The executor reports h1 with 4 GPUs from T0+12d on (audited host.gpus 8 -> 4): a day
    after it counts 4 x 24 = 96 healthy GPU-hours, the day before still 8 x 24 = 192, and
    the two hours around it 8 + 4 = 12, in the cluster's figure and its pool's (the 8 GPUs
    h1 was registered with were counted for every period, after the resize too)."""
    def healthy(start: float, end: float) -> tuple[float, float]:
        r = usage_report(store, start, end, "budget", NOW)
        return float(r["healthy_gpu_hours"]), float(r["pools"][0]["healthy_gpu_hours"])

    t = T0 + 12 * D
    store.clock = lambda: t
    store.set_host_gpus("h1", 4, "apportion")
    assert healthy(t, t + D) == (96.0, 96.0)
    assert healthy(t - D, t) == (192.0, 192.0)
    assert healthy(t - H, t + H) == (12.0, 12.0)


def test_a_finished_period_is_the_same_after_later_starts_and_cancels(store: Store) -> None:
    """P (x/a, 4 GPUs) and Q (x/b, 2 GPUs) are submitted at T0+12d and wait through the
    period [T0+12d, T0+12d+2h): each is owed min(1/4 x 8, asked) = 2 GPUs x 2 h = 4. After
    the period P starts and completes and Q is cancelled: the period's figures stay those
    computed while they waited (P's demand once ended at its submission: its only attempt,
    after the period, was left out)."""
    t = T0 + 12 * D
    p = store.add_workload(budget="x/a", gpus=4, min_runtime=H, submit_time=t, command=["x"],
                           actor="alice").id
    q = store.add_workload(budget="x/b", gpus=2, min_runtime=H, submit_time=t, command=["x"],
                           actor="carol").id

    def figures(now: float) -> dict[str, tuple[float, Any]]:
        r = usage_report(store, t, t + 2 * H, "budget", now)
        return {b: (v["owed_gpu_hours"], v["attainment"]) for b, v in rows(r).items()}

    waiting = figures(t + 2 * H)
    assert (waiting["x/a"], waiting["x/b"]) == ((4.0, 0.0), (4.0, 0.0))
    store.begin_attempt(p, [("h1", 4, [0, 1, 2, 3])], t + 3 * H)
    store.end_attempt(p, 1, t + 4 * H, 0, "exited 0", Status.COMPLETED)
    store.clock = lambda: t + 3 * H
    store.cancel_workload(q, "carol")
    assert figures(NOW) == waiting


def test_held_work_is_owed_nothing_until_released(store: Store) -> None:
    """An array of 1-GPU elements throttled to one at a time (%1) in x/a (1/4 of 8 GPUs =
    2): element k is released and runs in hour k of [T0+12d, T0+12d+3h); element 3 is
    cancelled while still held. Each hour x/a asked for the 1 GPU it was allowed, got it:
    owed 3, attainment 100% (counted from submission, the held elements made it owed 2 a
    GPU-hour it could not use: 5, 60%)."""
    t = T0 + 12 * D
    first = store.add_workload(budget="x/a", gpus=1, min_runtime=H, submit_time=t,
                               command=["x"], actor="alice", array=[0, 1, 2, 3],
                               array_throttle=1).id
    elements = store.array_ids(first)
    for k, wid in enumerate(elements[:3]):
        store.release_held(wid, t + k * H)
        store.begin_attempt(wid, [("h1", 1, [0])], t + k * H)
        store.end_attempt(wid, 1, t + (k + 1) * H, 0, "exited 0", Status.COMPLETED)
    store.clock = lambda: t + H
    store.cancel_workload(elements[3], "alice")
    r = rows(usage_report(store, t, t + 3 * H, "budget", NOW))["x/a"]
    assert (r["charged_gpu_hours"], r["owed_gpu_hours"], r["attainment"]) == (3.0, 3.0, 1.0)


class WholeHistory:
    """The store as a report read it before: every workload submitted before the period's
    end, with all its attempts, and every cancellation ever audited (the oracle)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def usage_history(self, start: float, end: float, actions: tuple[str, ...]
                      ) -> tuple[list[UsedWorkload], list[str], list[Any]]:
        cancels = {a.target: a.at for a in self.store.audit_of("workload.cancel")}
        every = [self.store.get_workload(w.id) for w in
                 self.store.list_workloads(statuses=list(Status), limit=10**6)
                 if w.submit_time < end]
        rows = [UsedWorkload(w.id, w.budget, w.user, w.gpus, w.min_runtime, w.status,
                             w.submit_time, w.released_at,
                             bool(w.dependencies) or bool(w.array_throttle), cancels.get(w.id),
                             tuple(UsedAttempt(a.placement, a.gpus_held, a.started_at,
                                               a.ended_at) for a in w.attempts))
                for w in every]
        audit = sorted((a for action in actions for a in self.store.audit_of(action)),
                       key=lambda a: a.id)
        return rows, sorted({w.user for w in rows}), audit


def test_a_report_reads_only_the_work_in_its_period_with_the_figures_of_the_whole_history(
    store: Store,
) -> None:
    """Beyond the fixture's history (work ended before, across and after each period, one
    preempted and requeued, one cancelled while pending): R runs from 11d and never ends,
    P waits from 10d+12h and is never started, C waits from 10d and is cancelled at 11d,
    a throttled array is held, released and run at 12d. For periods before, across and
    after each of them, by budget, user and month, the report equals the one computed from
    the whole history (WholeHistory), and ``Store.usage_history`` read only the workloads
    that can count in the period: not those that ended before it began."""
    t = T0 + 10 * D
    r_ = store.add_workload(budget="y", gpus=2, min_runtime=H, submit_time=t + D,
                            command=["x"], actor="bob").id
    store.begin_attempt(r_, [("h1", 2, [6, 7])], t + D)
    store.add_workload(budget="x/b", gpus=1, min_runtime=0.0, submit_time=t + 12 * H,
                       command=["x"], actor="dave")
    c = store.add_workload(budget="x/a", gpus=2, min_runtime=H, submit_time=t,
                           command=["x"], actor="carol").id
    store.clock = lambda: t + D
    store.cancel_workload(c, "carol")
    first = store.add_workload(budget="x/b", gpus=1, min_runtime=H, submit_time=t + D,
                               command=["x"], actor="alice", array=[0, 1],
                               array_throttle=1).id
    for k, wid in enumerate(store.array_ids(first)):
        store.release_held(wid, t + (2 + k) * D)
        store.begin_attempt(wid, [("h1", 1, [k])], t + (2 + k) * D)
        store.end_attempt(wid, 1, t + (2 + k) * D + 5 * H, 0, "exited 0", Status.COMPLETED)
    whole = cast(Store, WholeHistory(store))
    periods = [(T0 - 3 * H, T0 + 3 * H), (T0 + 3 * H, T0 + 7 * H), (T0 + 5 * D, T0 + 9 * D),
               (T0 + 9 * D + 2 * H, t + 2 * H), (t + 2 * H, t + D), (t + D, t + 3 * D + H),
               (t + 5 * D, t + 6 * D), (T0 - D, NOW)]
    for start, end in periods:
        for by in ("budget", "user", "month"):
            assert usage_report(store, start, end, by, NOW) == usage_report(
                whole, start, end, by, NOW), (start - T0, end - T0, by)
    read = {w.id: w for w in store.usage_history(t + 5 * D, t + 6 * D, ())[0]}
    assert set(read) == {r_, store.list_workloads(user="dave")[0].id}  # open work only
    read = {w.id: w for w in store.usage_history(t + 2 * H, t + D, ())[0]}
    assert sorted(read) == sorted([c, store.list_workloads(user="dave")[0].id])
    assert read[c].cancelled_at == t + D


def test_a_report_by_month_computes_each_hourly_series_once_as_by_budget_does(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A report by month over a year (13 UTC months) integrates the hour-by-hour series
    (``accounting._steps``) exactly as many times as the report by budget of the same
    period, and its months' charged GPU-hours add up to the period's: each hour's figures
    are computed once and sliced per month (they were recomputed for every month and
    budget, about 350 times on a year, 25 s on a store of 50,000 workloads)."""
    from apportion.service import accounting

    calls = {"n": 0}
    steps = accounting._steps

    def counted(changes: list[tuple[float, float]], edges: Any) -> Any:
        calls["n"] += 1
        return steps(changes, edges)

    monkeypatch.setattr(accounting, "_steps", counted)
    start = NOW - 365 * D
    reports = {}
    count = {}
    for by in ("budget", "month"):
        calls["n"] = 0
        reports[by] = usage_report(store, start, NOW, by, NOW)
        count[by] = calls["n"]
    assert len({r["month"] for r in reports["month"]["rows"]}) == 13
    assert count["month"] == count["budget"]
    by_month: dict[str, float] = {}
    for r in reports["month"]["rows"]:
        by_month[r["budget"]] = by_month.get(r["budget"], 0.0) + r["charged_gpu_hours"]
    assert by_month == {r["budget"]: pytest.approx(r["charged_gpu_hours"], abs=1e-9)
                        for r in reports["budget"]["rows"]}


def test_an_eight_digit_date_without_dashes_is_refused_not_read_as_seconds() -> None:
    """--from 20261206 names the flag and the date to write (it was read as epoch seconds
    in 1970 and refused as a period of 20,559 days); other numbers stay seconds."""
    with pytest.raises(ReportError, match=r"^--from: '20261206' reads as seconds since the "
                                          r"epoch: write the date 2026-12-06$"):
        parse_time("20261206", "--from", NOW)


@pytest.mark.parametrize("typed", ["20:00", "09:30", "1:30:00", "1-00:00:00"])
def test_parse_time_refuses_a_clock_time_without_a_date(typed: str) -> None:
    """``--from 20:00`` is refused naming the flag (it was read as a duration, 20 min ago,
    and a report of the wrong period was printed without a word)."""
    with pytest.raises(ReportError, match=f"^--from: {re.escape(repr(typed))} reads as a "
                                          "clock time, which is not taken: write the date"):
        parse_time(typed, "--from", NOW)


@pytest.mark.parametrize("typed", ["٥", "２０２６１２０６", "２０２６-１１-０１"])
def test_parse_time_refuses_digits_other_than_ascii(typed: str) -> None:
    """Digits of other scripts are refused naming the flag and the value (float() read
    '٥' as 5 seconds after the epoch and full-width 20261206 as epoch seconds)."""
    with pytest.raises(ReportError, match=f"^--from: must be written in ASCII digits, got "
                                          f"{re.escape(repr(typed))}$"):
        parse_time(typed, "--from", NOW)
    assert parse_time("1796515200", "--from", NOW) == 1796515200.0
    assert parse_time("20261399", "--from", NOW) == 20261399.0  # no such date: seconds


def test_the_html_reports_bars_keep_most_of_the_width_beside_a_long_budget_path(
        tmp_path: Path) -> None:
    """With a budget path of 78 characters (research/vision-and-perception-long-name/
    very-long-subproject-name-for-testing), the page's GPU-hours plot still gives its
    longest bar at least half the image's width: the path is wrapped at its slashes and the
    figure widened for it (the label took the figure's width and left the bars a sliver,
    under a tenth of it)."""
    import base64

    from matplotlib import image

    from apportion.service.accounting import to_html

    long = "research/vision-and-perception-long-name/very-long-subproject-name-for-testing"
    store = open_store("sqlite", tmp_path)
    clock = {"t": T0}
    store.clock = lambda: clock["t"]
    for path in ("research", "research/vision-and-perception-long-name", long):
        store.add_budget(path, 1.0, actor="root")
    store.add_host("h1", 8, actor="root")
    wid = store.add_workload(budget=long, gpus=8, min_runtime=H, submit_time=T0,
                             command=["x"], actor="alice").id
    store.begin_attempt(wid, [("h1", 8, list(range(8)))], T0)
    store.end_attempt(wid, 1, T0 + 4 * H, 0, "exited 0", Status.COMPLETED)
    html = to_html(usage_report(store, T0, T0 + D, "budget", NOW))
    store.close()
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    pixels = image.imread(io.BytesIO(base64.b64decode(pngs[1])), format="png")
    charged = (abs(pixels[:, :, 0] - 0x1F / 255) < 0.02) & \
        (abs(pixels[:, :, 1] - 0x77 / 255) < 0.02) & (abs(pixels[:, :, 2] - 0xB4 / 255) < 0.02)
    longest = max(max((len(run) for run in "".join("x" if c else " " for c in row).split()),
                      default=0) for row in charged)
    assert longest >= pixels.shape[1] / 2, (longest, pixels.shape[1])
