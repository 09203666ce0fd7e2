"""GET /v1/workloads/{id}/why and ``apportion why ID`` end to end, on the situation of
test_metrics (2 hosts x 8 GPUs, fake clock at T0 + 1900):

* C (ai/llm, 16 GPUs, 1 h) runs on both hosts since T0 + 100: protected until T0 + 3700;
* B (ai/vision, 8 GPUs, 10 min) waits: the only thing in its way is C, protected until
  T0 + 3700, which is therefore its earliest start;
* U (unallocated) was preempted for C: it has ended, there is nothing to explain.
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from test_metrics import T0, Live, live

from apportion.cli.client import fmt_time
from apportion.cli.main import main
from apportion.service.executors.memory import MemoryExecutor
from apportion.times import format_time

__all__ = ["live"]  # a fixture (test_metrics.py), used by name


def why(live: Live, wid: str, who: str = "bob", **params: str) -> Any:
    return live.client.get(f"/v1/workloads/{wid}/why", params=params,
                           headers={"Authorization": f"Bearer {live.tokens[who]}"})


def test_waiting_workload_explained_with_known_answer(live: Live) -> None:
    """B: first in order, no capacity, blocked by C protected until T0+3700 (its earliest
    start, not a lower bound since nothing is ahead), and the rules would not let it take C
    (taking all 16 GPUs would leave ai/llm below its share)."""
    r = why(live, live.ids["B"])
    assert r.status_code == 200, r.text
    e = r.json()
    assert (e["status"], e["position"], e["considered"]) == ("pending", 1, 1)
    assert e["wait_reason"] == "no_capacity"
    assert e["ratio"] == 0.0
    assert [(v["id"], v["protected"], v["protected_until"], v["rules_allow"])
            for v in e["victims"]] == [(live.ids["C"], True, T0 + 3700, False)]
    assert e["earliest_start"] == T0 + 3700
    assert e["lower_bound"] is False
    assert any(line.startswith("could start at ") and line.endswith(
        "(in 30 min) at the earliest") for line in e["text"])


def test_second_in_line_sees_the_rival_budget_and_no_start_behind_its_own_budgets_work(
    live: Live,
) -> None:
    """D (ai/llm, submitted after B) comes second: ai/vision (ratio 0) is ahead of ai/llm
    (ratio 16x1800 / (16x1900/3)) where their paths diverge, so what it is told is a lower
    bound. Both hosts are C's, of D's own budget, never displaced for D: no earliest start
    is told (it was C's protection end, T0 + 3700, which frees nothing for D), and a line
    says why."""
    d = live.submit("alice", "ai/llm", 8, 600)
    live.at(T0 + 1900)
    e = why(live, d, who="alice").json()
    assert e["position"] == 2
    (rival,) = e["rivals"]
    assert (rival["path"], rival["ratio"], rival["mine"], rival["workloads"]) == (
        "ai/vision", 0.0, "ai/llm", 1)
    assert rival["mine_ratio"] == pytest.approx(16 * 1800 / (16 * 1900 / 3))
    assert e["earliest_start"] is None
    assert e["lower_bound"] is True
    assert not any("at the earliest" in line for line in e["text"])
    assert any(line.startswith("on every host it could use, the room it needs is held by "
                               "work of its own budget") for line in e["text"])


def test_running_workload_reports_its_protection(live: Live) -> None:
    """C runs on h1 and h2 since T0+100, protected until T0+3700."""
    e = why(live, live.ids["C"]).json()
    assert (e["status"], e["started_at"], e["protected_until"]) == ("running", T0 + 100,
                                                                      T0 + 3700)
    assert e["placement"] == [["h1", 8], ["h2", 8]]


def test_stopping_workload_says_why_it_stops_and_when_it_is_killed(live: Live) -> None:
    """C cancelled while it runs, and slow to exit: while it stops, ``why`` says it is
    stopping, why (the stop's reason, ``cancelled``) and when it is killed if it has not
    exited (its stop plus the grace period), not that it is "not protected: it may be
    preempted" (it said so, as of running work, and nothing of the stop)."""
    c = live.ids["C"]
    executor = live.sched.executor
    assert isinstance(executor, MemoryExecutor)
    executor.term_delays[c] = 100.0  # it takes longer to exit than its grace
    live.sched.grace_s = 30.0
    r = live.client.post(f"/v1/workloads/{c}/cancel",
                         headers={"Authorization": f"Bearer {live.tokens['alice']}"})
    assert r.status_code == 200, r.text
    live.at(T0 + 1910)  # the pass that tells it to stop
    e = why(live, c).json()
    assert (e["status"], e["stop_reason"], e["killed_at"]) == ("stopping", "cancelled",
                                                               T0 + 1940)
    assert e["text"][2:] == [f"stopping (cancelled): told to stop (SIGTERM), it is killed at "
                             f"{format_time(T0 + 1940, UTC)} (in 30 s) if it has not exited "
                             "by then"]
    assert not any("may be preempted" in line or "protected" in line for line in e["text"])


def test_why_writes_its_times_in_the_zone_tz_names_with_the_offset(live: Live) -> None:
    """B's earliest start, T0 + 3700 (1970-01-12 14:48:20 UTC), is written with its offset
    from UTC: in UTC without ``tz``, in the zone ``tz`` names (an IANA name or an offset),
    the same by ``GET /v1/dashboard/why``; the JSON keeps the epoch seconds."""
    def earliest(e: Any) -> str:
        assert e["earliest_start"] == T0 + 3700
        return next(line for line in e["text"] if line.startswith("could start at "))

    assert earliest(why(live, live.ids["B"]).json()) == (
        "could start at 1970-01-12 14:48:20+00:00 (in 30 min) at the earliest")
    kolkata = "could start at 1970-01-12 20:18:20+05:30 (in 30 min) at the earliest"
    assert earliest(why(live, live.ids["B"], tz="Asia/Kolkata").json()) == kolkata
    assert earliest(why(live, live.ids["B"], tz="+05:30").json()) == kolkata
    assert earliest(live.client.get(f"/v1/dashboard/why/{live.ids['B']}",
                                    params={"tz": "Asia/Kolkata"}).json()) == kolkata


@pytest.mark.parametrize("route", ["/v1/workloads/{}/why", "/v1/dashboard/why/{}"])
def test_why_refuses_a_zone_it_does_not_know_naming_tz(live: Live, route: str) -> None:
    """An unknown zone is a 422 naming ``tz`` and what would do, not a 500 or UTC."""
    r = live.client.get(route.format(live.ids["B"]), params={"tz": "Mars/Olympus"},
                        headers={"Authorization": f"Bearer {live.tokens['bob']}"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == ("tz: unknown time zone 'Mars/Olympus': give an IANA name "
                                  "(Europe/Berlin) or an offset from UTC (+05:30)")


def test_unknown_workload_is_404_naming_it(live: Live) -> None:
    """An id the store does not know: 404 whose detail names it."""
    r = why(live, "w-999999")
    assert r.status_code == 404
    assert "w-999999" in r.json()["detail"]


def test_ended_workload_tells_what_happened(live: Live) -> None:
    """U was preempted (not resumable) for C: the answer is its history from the store,
    with the reason and the workload it gave way to."""
    r = why(live, live.ids["U"])
    assert r.status_code == 200, r.text
    h = r.json()
    assert (h["kind"], h["status"], h["end_reason"]) == ("history", "preempted",
                                                         "preempted: unallocated")
    assert h["preemptions"] == [{"at": T0 + 100, "reason": "unallocated", "by": live.ids["C"]}]
    assert h["text"][1].endswith(f"for 1 min 40 s; preempted: as unallocated work it gave way "
                                 f"to allocated work, for {live.ids['C']}")


def test_why_needs_a_token(live: Live) -> None:
    """Like every /v1 route but health (public_read is off): no token, 401."""
    url = f"{str(live.client.base_url).rstrip('/')}/v1/workloads/{live.ids['B']}/why"
    assert httpx.get(url).status_code == 401  # live.client carries a scrape token


def test_cli_why_prints_the_explanation(live: Live) -> None:
    """``apportion why ID --json`` prints the route's answer."""
    url = str(live.client.base_url).rstrip("/")
    result = CliRunner().invoke(
        main, ["why", live.ids["B"], "--json", "--url", url, "--token", live.tokens["bob"]])
    assert result.exit_code == 0, result.output
    e = json.loads(result.output)
    assert (e["workload"], e["earliest_start"]) == (live.ids["B"], T0 + 3700)


def test_an_unreachable_executor_shows_in_queue_why_and_metrics(live: Live) -> None:
    """While the executor does not answer (slurmctld down), passes go on deciding nothing;
    GET /v1/queue says since when and why, `apportion queue` gives waiting work that
    reason, `why` says nothing starts meanwhile, and /metrics has apportion_executor_up 0
    and counts the skipped passes. The next pass that reaches it clears all of that."""
    executor = live.sched.executor
    assert isinstance(executor, MemoryExecutor)
    executor.broken = True
    live.at(T0 + 2000)
    live.at(T0 + 2010)
    view = live.client.get("/v1/queue").json()
    assert view["executor_down_since"] == T0 + 2000
    assert view["executor_problem"] == "memory executor: backend unavailable"
    text = why(live, live.ids["B"]).json()["text"]
    assert text[1] == ("nothing starts or ends while the executor does not answer (since "
                       f"{format_time(T0 + 2000, UTC)}: memory executor: backend unavailable)")
    m = live.scrape()
    assert m[("apportion_executor_up", ())] == 0.0
    assert m[("apportion_scheduler_passes_skipped_total", ())] == 2.0
    out = CliRunner().invoke(main, ["queue", "--url", str(live.client.base_url),
                                    "--token", live.tokens["bob"]])
    assert out.exit_code == 0, out.output
    [row] = [line for line in out.output.splitlines() if live.ids["B"] in line]
    assert f"(executor unreachable since {fmt_time(T0 + 2000)}; waited" in row

    executor.broken = False
    live.at(T0 + 2020)
    view = live.client.get("/v1/queue").json()
    assert (view["executor_down_since"], view["executor_problem"]) == (None, None)
    assert live.scrape()[("apportion_executor_up", ())] == 1.0
    assert not any("executor" in line for line in why(live, live.ids["B"]).json()["text"])
