"""``apportion export-trace`` and ``apportion whatif`` on a live service's history: two days
of fake-clock history made by the service's own scheduler (memory executor, SQLite store),
then a live ``apportion serve`` on that store while the commands read it."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import alembic.command
import httpx
import pytest
from alembic.config import Config
from server_proc import Server, free_port, write_config
from sqlalchemy import text

from apportion.cli.whatif import _summary_line, format_pool, format_pools, format_whatif
from apportion.core import BudgetTree, HostState, PolicyConfig
from apportion.core.units import format_figure
from apportion.service.clock import FakeClock
from apportion.service.config import load_config
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.history_trace import read_history
from apportion.service.replies import Whatif
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import seed_store
from apportion.service.store.store import MIGRATIONS, newest_revision
from apportion.service.whatif import WhatifError, check_weights, proposed_configs
from apportion.sim.model import HostEvent, HostEventKind

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True)
class Live:
    config: Path
    until: float  # the end of the fake-clock history
    running_at_end: int
    server: Server


def make_history(
    config_path: Path,
    start: float,
    days: float,
    host_changes: dict[float, tuple[str, HostState]] | None = None,
) -> tuple[float, int]:
    """Two budgets (ai/llm weight 2, ai/vision weight 1) on 2 hosts x 8 GPUs, asking
    together for three times the cluster: every 30 min each submits a 4-GPU, 3 h resumable
    workload (minimum runtime 1 h). ``host_changes`` maps seconds after ``start`` to a host
    state an admin sets then. Returns the end of the history and how many workloads were
    still running then."""
    config = load_config(config_path)
    clock = FakeClock(start)
    store = Store(config.db_url, clock=clock.now)
    store.migrate()
    seed_store(store, config)
    executor = MemoryExecutor([(h.name, h.gpus) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=0.0)
    sched.start()
    t = start
    end = start + days * DAY
    n = 0
    while t < end:
        if n % 3 == 0:  # every 30 min
            for budget in ("ai/llm", "ai/vision"):
                row = store.add_workload(
                    budget=budget,
                    gpus=4,
                    min_runtime=HOUR,
                    submit_time=t,
                    command=["train"],
                    actor="alice",
                    resumable=True,
                    checkpoint_interval=1800.0,
                )
                executor.durations[row.id] = 3 * HOUR
        change = (host_changes or {}).get(t - start)
        if change is not None:
            sched.set_host_state(change[0], change[1], "test", "admin")
        sched.step()
        n += 1
        t += 600.0
        clock.set(t)
    running = sum(1 for w in store.active_workloads() if w.attempt is not None)
    executor.close()
    store.close()
    return end, running


def memory_config(d: Path) -> Path:
    """A service config in ``d``: 2 hosts x 8 GPUs, the memory executor, SQLite in ``d``."""
    return write_config(d / "apportion.toml", free_port(), db_url=f"sqlite:///{d}/a.db",
                        hosts=2, gpus=8, executor="memory")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("whatif")
    config = memory_config(tmp)
    until, running = make_history(config, time.time() - 3 * DAY, 2.0)
    server = Server(config, tmp / "server.log")
    server.start()  # the live service over that history, while the commands read its store
    try:
        yield Live(config, until, running, server)
    finally:
        server.stop()


def apportion(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def whatif_run(live: Live, *args: str) -> subprocess.CompletedProcess[str]:
    """``apportion whatif`` over the last 2 days of ``live``'s history."""
    return apportion("whatif", "--config", str(live.config), "--since", "2d",
                     "--until", repr(live.until), *args)


def whatif(live: Live, *args: str) -> dict[str, Any]:
    run = whatif_run(live, "--json", *args)
    assert run.returncode == 0, run.stdout + run.stderr
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def budget(result: dict[str, Any], path: str) -> dict[str, Any]:
    return next(b for b in result["budgets"] if b["budget"] == path)


def assert_current_side_is(result: dict[str, Any], summary: dict[str, Any]) -> None:
    """What-if's current side (per budget and overall) is exactly the figures of the run
    whose ``summary`` is given, over the same workloads."""
    for b in result["budgets"]:
        assert b["current"]["attainment"] == summary["attainment"]["per_budget"][b["budget"]]
        waits = summary["wait_s"]["per_budget"].get(b["budget"]) or {}
        assert b["current"]["wait_p90_s"] == waits.get("p90")
    assert result["overall"]["current"] == {
        "attainment": summary["attainment"]["overall"],
        "attainment_teams": summary["attainment"]["overall_teams"],
        "wait_p90_s": summary["wait_s"]["all"]["p90"],
        "preemptions": summary["preemptions"]["total"],
        "drains": summary["drains"]["count"],
    }
    assert summary["workloads"] == result["period"]["workloads"] > 100


def test_whatif_raising_a_weight_gives_that_budget_more(live: Live) -> None:
    """--set-weight ai/vision=4 (from 1): replayed on the same two days, ai/vision is
    delivered more GPU-hours and waits less (p90), ai/llm gets less, and ai/vision's
    attainment moves up; with no change the two columns are identical."""
    same = whatif(live)
    for b in same["budgets"]:
        assert b["current"] == b["proposed"]
    result = whatif(live, "--set-weight", "ai/vision=4")
    assert result["set_weight"] == {"ai/vision": 4.0}
    vision, llm = budget(result, "ai/vision"), budget(result, "ai/llm")
    assert (vision["weight_current"], vision["weight_proposed"]) == (1.0, 4.0)
    assert vision["proposed"]["delivered_gpu_hours"] > vision["current"]["delivered_gpu_hours"]
    assert llm["proposed"]["delivered_gpu_hours"] < llm["current"]["delivered_gpu_hours"]
    assert vision["proposed"]["wait_p90_s"] < vision["current"]["wait_p90_s"]
    assert vision["proposed"]["attainment"] > vision["current"]["attainment"]
    assert result["period"]["running_at_end"] == live.running_at_end > 0


def test_whatif_text_names_the_change(live: Live) -> None:
    """The text form: the period line, the change, one line per budget node, overall."""
    run = whatif_run(live, "--set-weight", "ai/vision=4")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "still running at the end, replayed with their run so far" in lines[0]
    assert lines[1] == "current settings -> proposed (ai/vision=4):"
    assert [line.split()[0] for line in lines[3:6]] == ["ai", "ai/llm", "ai/vision"]
    assert "1 -> 4" in lines[5]
    assert lines[6].startswith("overall: attainment per team ")


def test_the_period_line_writes_its_times_in_the_clients_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first line of whatif and export-trace writes the period's start and end as the
    CLI writes every time: in the client's zone, with its offset from UTC."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    period = {"start": 1_796_515_200.0, "end": 1_796_601_600.0, "workloads": 3,
              "host_events": 0, "running_at_end": 1, "waiting_at_end": 0,
              "cancelled_unstarted": 0, "in_former_leaves": {}, "hosts": 2, "pools": []}
    assert _summary_line(period).startswith(
        "3 workloads submitted from 2026-12-06 05:30:00+05:30 to 2026-12-07 05:30:00+05:30 "
        "(1 still running at the end")


def test_the_period_line_writes_every_count_with_thousands_separators() -> None:
    """Every count of whatif's and export-trace's first line is written as the workload
    count is, with thousands separators (5001 cancelled unstarted was written bare beside
    1,548 workloads)."""
    period = {"start": 1_796_515_200.0, "end": 1_796_601_600.0, "workloads": 1548,
              "host_events": 1200, "running_at_end": 1001, "waiting_at_end": 2002,
              "cancelled_unstarted": 5001, "in_former_leaves": {"ai": 3000, "ops": 1},
              "hosts": 1024, "pools": []}
    line = _summary_line(period)
    assert line.startswith("1,548 workloads submitted from ")
    for said in ("(1,001 still running at the end", "; 2,002 still waiting",
                 "; 5,001 cancelled unstarted", "; 3,001 submitted to budgets",
                 "1,024 hosts", "1,200 host events"):
        assert said in line, said


def test_delivered_gpu_hours_are_written_to_one_decimal_from_100_up() -> None:
    """whatif's delivered GPU-hours, in the budget table and in a pool's line and table, are
    written to one decimal however large (``1,297.1 -> 1,297.3``), as the dashboard's
    preview and ``report usage`` write them, so that a change of 0.2 GPU-h above 100 is
    not written as 1 (``1,297 -> 1,298``)."""
    side = {"attainment": 0.5, "wait_p50_s": 60.0, "wait_p90_s": 120.0, "preemptions": 0}
    row = {"budget": "ai", "weight_current": 1.0, "weight_proposed": 1.0,
           "current": {**side, "delivered_gpu_hours": 1297.14},
           "proposed": {**side, "delivered_gpu_hours": 1297.34}}
    assert "1,297.1 -> 1,297.3" in format_whatif([row])
    pool = {"pool": "east/H100", "gpus": 16, "budgets": [row],
            "current": {**side, "occupancy": 0.9, "delivered_gpu_hours": 1297.14},
            "proposed": {**side, "occupancy": 0.9, "delivered_gpu_hours": 1297.34}}
    text = format_pool(pool)
    assert "delivered 1,297.1 -> 1,297.3 GPU-h" in text
    assert text.splitlines()[-1].split()[4:7] == ["1,297.1", "->", "1,297.3"]


def test_pool_occupancy_is_labelled_the_replays_with_why_it_can_exceed_100_percent() -> None:
    """A pool's occupancy in whatif's text is labelled the replay's, and when the period had
    host events (a drain) a note under the pools says why it can exceed 100% (work still
    running on a draining host counts as assigned while the host is not healthy) and that
    report usage leaves that work out; without host events there is no note."""
    side = {"occupancy": 1.088, "delivered_gpu_hours": 10.0, "attainment": 0.9,
            "wait_p50_s": 60.0, "preemptions": 1}
    pool = {"pool": "east/H100", "gpus": 32, "current": side, "proposed": side, "budgets": []}
    drained = format_pools({"period": {"host_events": 1}, "pools": [pool]})
    assert drained[0].startswith("pool east/H100 (32 GPUs): replay occupancy 108.8% -> 108.8%")
    assert drained[-1] == (
        "replay occupancy: assigned GPUs over healthy GPUs, as the simulator counts them; work "
        "still running on draining hosts counts as assigned while the host is not healthy: "
        "this can exceed 100%; apportion report usage leaves it out of both")
    assert format_pools({"period": {"host_events": 0}, "pools": [pool]}) == drained[:1]
    assert format_pools({"period": {"host_events": 1}}) == []


def test_whatif_refuses_an_unknown_budget(live: Live) -> None:
    """A mistyped budget is a usage error naming --set-weight, with a suggestion."""
    run = whatif_run(live, "--set-weight", "ai/visoin=4")
    assert run.returncode == 2
    assert "--set-weight" in run.stderr and "did you mean 'ai/vision'?" in run.stderr


def test_whatif_refuses_a_weight_the_tree_refuses_naming_the_flag(live: Live) -> None:
    """A weight out of the tree's range (5,000,000 > 1e6) is a usage error naming
    --set-weight and the range in readable numbers (0.000001 to 1,000,000, not 1e-06 to
    1e+06), as `budgets set` refuses it, before the store is read (it was a traceback)."""
    run = whatif_run(live, "--set-weight", "ai/vision=5000000")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert ("Invalid value for --set-weight: ai/vision=5000000: weight must be a number from "
            "0.000001 to 1,000,000") in " ".join(run.stderr.split())


def test_proposed_weights_are_checked_as_a_tree_change_is() -> None:
    """Weights each in range whose product leaves a share below the floor (1e-6 under
    1e6 twice: 1e-24) are refused naming set_weight, where POST /v1/whatif once answered
    500 from the replay's tree."""
    tree = BudgetTree.build([("a", 1.0), ("b", 1.0), ("a/x", 1.0), ("a/y", 1.0),
                             ("a/x/p", 1.0), ("a/x/q", 1.0)])
    with pytest.raises(WhatifError, match="share of the cluster .* is below 1e-15") as e:
        check_weights({"a": 1e-6, "b": 1e6, "a/x": 1e-6, "a/y": 1e6, "a/x/p": 1e-6,
                       "a/x/q": 1e6}, tree)
    assert e.value.field == "set_weight"


def test_export_round_trips_through_simulate(live: Live, tmp_path: Path) -> None:
    """export-trace writes the canonical trace with the tree and hosts beside it; the
    command it prints, apportion simulate --trace ..., gives the same per-budget
    attainment, waits and overall figures as whatif's current column."""
    out = tmp_path / "history.parquet"
    run = apportion(
        "export-trace",
        "--config",
        str(live.config),
        "--since",
        "2d",
        "--until",
        repr(live.until),
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    replay = next(line for line in run.stdout.splitlines() if line.startswith("replay: "))
    args = replay.removeprefix("replay: apportion ").split()
    assert args[-2:] == ["--out", "DIR"]
    sim = apportion(*args[:-1], str(tmp_path / "sim"), "--policy", "fairshare", "--quiet")
    assert sim.returncode == 0, sim.stdout + sim.stderr
    (summary,) = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert_current_side_is(whatif(live), summary)


def test_export_trace_says_one_host_event_in_the_singular(tmp_path: Path) -> None:
    """With one host event in the period, export-trace's note says ``the 1 host event in
    ... is not part of the trace format; apportion whatif replays it`` (it said ``the 1
    host event ... are not part ... replays them``)."""
    config = memory_config(tmp_path)
    start = 1_700_000_000.0
    until, _ = make_history(config, start, 0.5, {2 * HOUR: ("h1", HostState.DRAINING)})
    run = apportion("export-trace", "--config", str(config), "--since", "12h", "--until",
                    repr(until), "--out", str(tmp_path / "t.csv"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert (f"note: the 1 host event in {tmp_path / 't.host-events.csv'} is not part of the "
            "trace format; apportion whatif replays it, apportion simulate --trace does not"
            ) in run.stdout


def test_host_health_comes_from_the_audit_log(tmp_path: Path) -> None:
    """A host drained 2 h into the history (the scheduler sends it to repair once empty)
    and marked healthy at 10 h: read_history gives an unhealthy event at 2 h and a repaired
    one at 10 h after the first submission (the automated move to repair is the engine's own
    to model); export-trace writes them beside the trace, and whatif replays them."""
    config = memory_config(tmp_path)
    start = 1_700_000_000.0
    until, _ = make_history(
        config,
        start,
        0.5,
        {2 * HOUR: ("h1", HostState.DRAINING), 10 * HOUR: ("h1", HostState.HEALTHY)},
    )
    store = Store(load_config(config).db_url)
    try:
        history = read_history(store, start, until)
    finally:
        store.close()
    assert history.origin == start
    assert history.host_events == [
        HostEvent(2 * HOUR, "h1", HostEventKind.UNHEALTHY),
        HostEvent(10 * HOUR, "h1", HostEventKind.REPAIRED),
    ]
    out = tmp_path / "t.csv"
    run = apportion(
        "export-trace",
        "--config",
        str(config),
        "--since",
        "12h",
        "--until",
        repr(until),
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "t.host-events.csv").read_text().splitlines() == [
        "time,host,event",
        "7200.0,h1,unhealthy",
        "36000.0,h1,repaired",
    ]
    assert (f"note: the 2 host events in {tmp_path / 't.host-events.csv'} are not part of the "
            "trace format; apportion whatif replays them, apportion simulate --trace does "
            "not") in run.stdout
    run = apportion(
        "whatif", "--config", str(config), "--since", "12h", "--until", repr(until), "--json"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    assert result["period"]["host_events"] == 2
    assert result["overall"]["current"]["drains"] == 1  # the replay drained h1 too


def test_post_whatif_matches_the_command_and_checks_rights(live: Live) -> None:
    """POST /v1/whatif on the live server: for an admin, the answer of apportion whatif
    --json with the same inputs, which parses into ``Whatif`` and dumps back identical;
    alice (a member, no manager) is refused with 403; made manager of ai she gets the same
    answer, but may not propose policy settings; an unknown setting, or a duration given
    for a plain-number setting, is a 422 naming ``set`` and the key."""
    url = f"{live.server.url}/v1/whatif"
    body = {"since": "2d", "until": live.until, "set_weight": {"ai/vision": 4}}

    def post(user: str, data: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            url,
            json=data,
            timeout=300,
            headers={"Authorization": f"Bearer {live.server.token(user)}"},
        )

    answer = post("admin", body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == whatif(live, "--set-weight", "ai/vision=4")
    assert Whatif.model_validate(answer.json()).model_dump(mode="json") == answer.json()
    refused = post("alice", body)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "forbidden: alice manages no budget"
    managers = f"{live.server.url}/v1/budgets/ai/managers"
    admin = {"Authorization": f"Bearer {live.server.token('admin')}"}
    assert httpx.put(managers, json={"managers": ["alice"]}, headers=admin).status_code == 200
    try:
        as_manager = post("alice", body)
        assert as_manager.status_code == 200, as_manager.text
        assert as_manager.json() == answer.json()  # ai's subtree is the whole tree
        settings = post("alice", {**body, "set": {"lookback": "3d"}})
        assert settings.status_code == 403 and "admins only" in settings.json()["detail"]
    finally:
        httpx.put(managers, json={"managers": []}, headers=admin)
    bad = post("admin", {**body, "set": {"lookbak": "3d"}})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("set: unknown key 'lookbak'")
    factor = post("admin", {**body, "set": {"victim_max_factor": "2h"}})
    assert factor.status_code == 422
    assert factor.json()["detail"] == "set: victim_max_factor: must be a number >= 0, got '2h'"


def test_post_whatif_quotes_a_refused_setting_as_the_json_sent_it(live: Live) -> None:
    """POST /v1/whatif with a ``set`` value of the wrong JSON type is a 422 quoting the
    value as JSON writes it: ``true``, ``false`` and ``null``, not Python's ``True`` and
    ``None``; a text stays quoted as in the other refusals (``'yes'``)."""
    def refusal(settings: dict[str, Any]) -> tuple[int, str]:
        r = httpx.post(f"{live.server.url}/v1/whatif", timeout=60,
                       json={"since": "2d", "until": live.until, "set": settings},
                       headers={"Authorization": f"Bearer {live.server.token('admin')}"})
        return r.status_code, r.json()["detail"]

    assert refusal({"lookback": True}) == (
        422, "set: lookback: must be a number of seconds or a duration, got true")
    assert refusal({"lookback": None}) == (
        422, "set: lookback: must be a number of seconds or a duration, got null")
    assert refusal({"reservations": False}) == (
        422, "set: reservations: must be a whole number, got false")
    assert refusal({"rebalance": None}) == (
        422, "set: rebalance: must be true or false, got null")
    assert refusal({"rebalance": "yes"}) == (
        422, "set: rebalance: must be true or false, got 'yes'")


def test_post_whatif_names_a_managers_mistyped_budget_as_it_does_an_admins(
        live: Live) -> None:
    """A manager of ai proposing a weight for a budget that does not exist outside ai
    (``ai-vision``, ``AI/Vision``) is told it does not exist, with the closest one (422,
    ``set_weight: no budget 'ai-vision'; did you mean 'ai/vision'?``), as an admin is and
    as ``PATCH /v1/budgets/{path}`` answers an unknown one: the rights were checked first,
    so a typo read ``forbidden: alice may not set the weight of ai-vision``. A budget that
    exists and is not hers stays refused (403)."""
    url = f"{live.server.url}/v1/whatif"
    admin = {"Authorization": f"Bearer {live.server.token('admin')}"}
    managers = f"{live.server.url}/v1/budgets/ai/managers"
    assert httpx.put(managers, json={"managers": ["alice"]}, headers=admin).status_code == 200
    try:
        for typo in ("ai-vision", "AI/Vision"):
            for user in ("alice", "admin"):
                r = httpx.post(url, json={"since": "2d", "until": live.until,
                                          "set_weight": {typo: 4}}, timeout=300,
                               headers={"Authorization": f"Bearer {live.server.token(user)}"})
                assert (r.status_code, r.json()["detail"]) == (
                    422, f"set_weight: no budget {typo!r}; did you mean 'ai/vision'?"), user
        r = httpx.post(url, json={"since": "2d", "until": live.until, "set_weight": {"ai": 4}},
                       timeout=300,
                       headers={"Authorization": f"Bearer {live.server.token('alice')}"})
        assert r.status_code == 403
        assert r.json()["detail"].startswith("forbidden: alice may not propose the weight of "
                                             "budget ai ")
    finally:
        httpx.put(managers, json={"managers": []}, headers=admin)


def test_post_whatif_refuses_a_managers_weight_outside_their_subtree_saying_whose_it_is(
        live: Live) -> None:
    """A manager of ai proposing, in a what-if, the weight of ai itself (a top-level weight)
    is refused (403) saying the field and whose weight it is, in the words with which
    ``PATCH /v1/budgets/ai`` refuses to set it: ``forbidden: alice may not propose the weight
    of budget ai (set_weight: its share of the cluster, set by an admin)``. It said only
    ``may not set the weight of ai``, with no reason, where setting it gave one."""
    url = live.server.url
    admin = {"Authorization": f"Bearer {live.server.token('admin')}"}
    alice = {"Authorization": f"Bearer {live.server.token('alice')}"}
    managers = f"{url}/v1/budgets/ai/managers"
    assert httpx.put(managers, json={"managers": ["alice"]}, headers=admin).status_code == 200
    try:
        r = httpx.post(f"{url}/v1/whatif", json={"since": "2d", "until": live.until,
                                                 "set_weight": {"ai": 4}},
                       timeout=300, headers=alice)
        owner = "its share of the cluster, set by an admin"
        assert (r.status_code, r.json()["detail"]) == (
            403, f"forbidden: alice may not propose the weight of budget ai (set_weight: "
                 f"{owner})")
        patch = httpx.patch(f"{url}/v1/budgets/ai", json={"weight": 4}, headers=alice)
        assert (patch.status_code, patch.json()["detail"]) == (
            403, f"forbidden: alice may not change the weight of budget ai ({owner})")
    finally:
        httpx.put(managers, json={"managers": []}, headers=admin)


def test_the_server_answers_other_requests_while_a_whatif_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /v1/whatif runs its replay off the event loop: with the replay held (its history
    load waits on an event), GET /v1/dashboard/state is answered, and only then is the
    replay let go and the what-if answered. Were the replay on the event loop, the state
    request could not be answered while it was held and the test would fail on its
    deadline, not hang."""
    import threading

    from api_env import start_env

    import apportion.service.whatif

    replaying, state_answered = threading.Event(), threading.Event()
    real_load = apportion.service.whatif.load_history

    def held_load(*args: Any, **kwargs: Any) -> Any:
        replaying.set()
        if not state_answered.wait(timeout=20):
            raise AssertionError("the state request was not answered while the replay ran")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(apportion.service.whatif, "load_history", held_load)
    env = start_env(tmp_path, "sqlite")
    env.scheduler.step()  # the dashboard's state is there after the first pass
    try:
        answers: dict[str, httpx.Response] = {}

        def post() -> None:  # its own connection: an httpx.Client is not shared by threads
            answers["whatif"] = httpx.post(
                env.server.url + "/v1/whatif",
                timeout=120,
                headers={"Authorization": f"Bearer {env.tokens['root']}"},
                json={"since": "1d", "set_weight": {"ai/vision": 4}},
            )

        poster = threading.Thread(target=post)
        poster.start()
        assert replaying.wait(timeout=60), "the what-if never started its replay"
        state = env.call("GET", "/v1/dashboard/state", "root")
        assert state.status_code == 200, state.text
        assert "whatif" not in answers  # the replay is still held
        state_answered.set()
        poster.join(timeout=120)
        assert not poster.is_alive()
        # an empty store has no history to replay: a clear 422, after the state answer
        assert answers["whatif"].status_code in (200, 422), answers["whatif"].text
    finally:
        state_answered.set()
        env.close()


class HeldReplays:
    """POST /v1/whatif's replays held running: each one's history load says it started
    (:meth:`wait_started`) and waits until :meth:`release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import queue
        import threading

        import apportion.service.whatif

        self.started: queue.Queue[None] = queue.Queue()
        self.released = threading.Event()
        real_load = apportion.service.whatif.load_history

        def held_load(*args: Any, **kwargs: Any) -> Any:
            self.started.put(None)
            self.released.wait(timeout=60)
            return real_load(*args, **kwargs)

        monkeypatch.setattr(apportion.service.whatif, "load_history", held_load)

    def wait_started(self) -> None:
        self.started.get(timeout=60)

    def release(self) -> None:
        self.released.set()


def post_whatif(url: str, token: str, timeout: float = 120,
                set_weight: dict[str, float] | None = None) -> httpx.Response:
    """A what-if on its own connection (an httpx.Client is not shared by threads)."""
    weights = {"ai/vision": 4} if set_weight is None else set_weight
    return httpx.post(url + "/v1/whatif", timeout=timeout,
                      headers={"Authorization": f"Bearer {token}"},
                      json={"since": "1d", "set_weight": weights})


def test_a_users_second_whatif_is_refused_at_once_while_theirs_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a replay of carol's (a manager) is held running: 45 more POST /v1/whatif of
    hers in parallel are each refused at once, 429 with a Retry-After and a detail saying
    hers is already running, none replayed; `apportion whatif` prints that detail and exits
    1; /v1/health and a submission answer meanwhile. Once hers ends (here a 422: the store
    has no history), she may replay again."""
    from concurrent.futures import ThreadPoolExecutor

    from api_env import start_env
    from click.testing import CliRunner

    from apportion.cli.main import main

    held = HeldReplays(monkeypatch)
    env = start_env(tmp_path, "sqlite")
    url, token = env.server.url, env.tokens["carol"]
    try:
        with ThreadPoolExecutor(46) as pool:
            first = pool.submit(post_whatif, url, token)
            held.wait_started()
            more = list(pool.map(lambda _: post_whatif(url, token, timeout=10), range(45)))
            assert {(r.status_code, r.headers.get("Retry-After")) for r in more} == {
                (429, "10")}
            assert more[0].json()["detail"].startswith(
                "a what-if replay of yours is already running (for ")
            assert more[0].json()["detail"].endswith(
                "one runs at a time per user; try again when it ends")
            assert held.started.empty()  # none of them was replayed
            cli = CliRunner().invoke(main, ["whatif", "--since", "1d"], env={
                "APPORTION_URL": url, "APPORTION_TOKEN": token,
                "APPORTION_CLIENT_CONFIG": "/dev/null"}, catch_exceptions=False)
            assert cli.exit_code == 40  # 429: another refusal
            assert "Error: a what-if replay of yours is already running" in cli.stderr
            assert "(HTTP 429)" in cli.stderr
            health = httpx.get(url + "/v1/health", timeout=5)
            assert health.status_code == 200, health.text
            job = {"budget": "ai/llm", "gpus": 1, "min_runtime": 0, "command": ["true"]}
            submitted = httpx.post(url + "/v1/workloads", json=job, timeout=5,
                                   headers={"Authorization": f"Bearer {env.tokens['alice']}"})
            assert submitted.status_code == 201, submitted.text
            assert not first.done()  # hers is still held
            held.release()
            assert first.result().status_code == 422, first.result().text  # nothing to replay
        again = post_whatif(url, token)
        assert again.status_code == 422, again.text  # replayed, not refused
    finally:
        held.release()
        env.close()


def test_whatif_replays_over_the_servers_limit_are_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `[server] max_whatif_replays` (2 by default) replays held running, root's and
    carol's, dave's (manager of ai/llm, proposing nothing) is refused at once: 429 with a
    Retry-After, the detail naming the limit and its key."""
    from concurrent.futures import ThreadPoolExecutor

    from api_env import start_env

    held = HeldReplays(monkeypatch)
    env = start_env(tmp_path, "sqlite")
    assert env.config.server.max_whatif_replays == 2
    try:
        with ThreadPoolExecutor(2) as pool:
            running = [pool.submit(post_whatif, env.server.url, env.tokens[who])
                       for who in ("root", "carol")]
            held.wait_started()
            held.wait_started()
            refused = post_whatif(env.server.url, env.tokens["dave"], timeout=10,
                                  set_weight={})
            assert (refused.status_code, refused.headers.get("Retry-After")) == (429, "10")
            assert refused.json()["detail"] == (
                "2 what-if replays are already running, the server's limit ([server] "
                "max_whatif_replays): try again in a while")
            held.release()
            assert [r.result().status_code for r in running] == [422, 422]
    finally:
        held.release()
        env.close()


def test_one_pool_export_is_written_as_before_pools(live: Live, tmp_path: Path) -> None:
    """One pool (no cluster, kind, billing or per-pool weight in the config): the hosts file
    is a plain host list and the trace has only the canonical columns, so it replays as one
    cluster, as before pools."""
    from apportion.sim.traces import CANONICAL_COLUMNS

    out = tmp_path / "history.csv"
    run = apportion("export-trace", "--config", str(live.config), "--since", "2d",
                    "--until", repr(live.until), "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "history.hosts.json").read_text()) == [
        {"name": "h0", "gpus": 8}, {"name": "h1", "gpus": 8}]
    assert out.read_text().splitlines()[0] == ",".join(CANONICAL_COLUMNS)


# ---- a two-pool service: east/H100 (e1, e2) and west/B200 (w1), B200 billed 2.2 -------------
POOLED_HOSTS = (("e1", "east", "H100"), ("e2", "east", "H100"), ("w1", "west", "B200"))


def write_pooled_config(path: Path, db_url: str) -> Path:
    """The test config (write_config's budgets and users) with two pools: billing
    H100 1 / B200 2.2, ai/vision weighted 3 in west/B200, and the three hosts."""
    write_config(path, free_port(), db_url=db_url, hosts=0, executor="memory")
    hosts = "".join(f'[[hosts]]\nname = "{n}"\ngpus = 8\ncluster = "{c}"\nkind = "{k}"\n\n'
                    for n, c, k in POOLED_HOSTS)
    path.write_text('billing = { H100 = 1.0, B200 = 2.2 }\n\n' + path.read_text() + "\n"
                    + hosts + '[overrides."west/B200"]\n"ai/vision" = 3\n')
    return path


def make_pooled_history(config_path: Path, start: float, days: float) -> float:
    """Every 30 min: ai/llm a 4-GPU, 3 h workload for H100 only, ai/vision one for B200 only,
    and every hour ai/vision an 8-GPU, 2 h one accepting any kind (all resumable, minimum
    runtime 1 h): the scheduler with the config's pools places them. Returns the end."""
    from apportion.service.executor import InventoryHost

    config = load_config(config_path)
    clock = FakeClock(start)
    store = Store(config.db_url, clock=clock.now)
    store.migrate()
    seed_store(store, config)
    executor = MemoryExecutor([InventoryHost(h.name, h.gpus, "healthy", cluster=h.cluster,
                                             kind=h.kind) for h in config.hosts], clock)
    sched = Scheduler(store, executor, config.policy, clock, grace_s=0.0, pools=config.pools)
    sched.start()
    t, end, n = start, start + days * DAY, 0
    asks = (("ai/llm", 4, ("H100",), 3 * HOUR), ("ai/vision", 4, ("B200",), 3 * HOUR),
            ("ai/vision", 8, (), 2 * HOUR))
    while t < end:
        for budget, gpus, kinds, duration in asks:
            if n % (3 if kinds else 6) == 0:
                row = store.add_workload(budget=budget, gpus=gpus, min_runtime=HOUR,
                                         submit_time=t, command=["train"], actor="alice",
                                         resumable=True, checkpoint_interval=1800.0,
                                         gpu_kinds=kinds)
                executor.durations[row.id] = duration
        sched.step()
        n += 1
        t += 600.0
        clock.set(t)
    executor.close()
    store.close()
    return end


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("whatif-pools")
    config = write_pooled_config(tmp / "apportion.toml", f"sqlite:///{tmp}/a.db")
    until = make_pooled_history(config, time.time() - 3 * DAY, 2.0)
    server = Server(config, tmp / "server.log")
    server.start()
    try:
        yield Live(config, until, 0, server)
    finally:
        server.stop()


def test_pooled_export_round_trips_as_a_fleet(pooled: Live, tmp_path: Path) -> None:
    """A two-pool service's export: the hosts file is a fleet's --cluster file (each host's
    cluster and kind, the billing, the per-pool weight), the trace names the kinds each
    workload asked for; the printed apportion simulate --trace command replays it as a fleet
    (figures per pool, west's units 2.2 per GPU-hour) to whatif's current figures."""
    out = tmp_path / "history.csv"
    run = apportion("export-trace", "--config", str(pooled.config), "--since", "2d",
                    "--until", repr(pooled.until), "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 hosts in 2 pools (east/H100, west/B200)" in run.stdout.splitlines()[0]
    hosts = json.loads((tmp_path / "history.hosts.json").read_text())
    assert hosts == {
        "billing": {"H100": 1.0, "B200": 2.2},
        "overrides": {"west/B200": {"ai/vision": 3.0}},
        "hosts": [{"name": n, "gpus": 8, "cluster": c, "kind": k} for n, c, k in POOLED_HOSTS],
    }
    header, *rows = out.read_text().splitlines()
    assert header.endswith(",gpu_kinds")  # asked kinds only; no cluster was asked for
    assert {r.rsplit(",", 1)[1] for r in rows} == {"H100", "B200", ""}
    replay = next(line for line in run.stdout.splitlines() if line.startswith("replay: "))
    args = replay.removeprefix("replay: apportion ").split()
    sim = apportion(*args[:-1], str(tmp_path / "sim"), "--policy", "fairshare", "--quiet")
    assert sim.returncode == 0, sim.stdout + sim.stderr
    (summary,) = json.loads((tmp_path / "sim" / "summary.json").read_text())
    east, west = summary["pools"]["east/H100"], summary["pools"]["west/B200"]
    assert (east["gpus"], west["gpus"]) == (16, 8)
    assert west["allocated_gpu_hours"] > 0
    assert west["charged_units"] == pytest.approx(2.2 * west["allocated_gpu_hours"], rel=1e-12)
    assert_current_side_is(whatif(pooled), summary)


def pooled_history(pooled: Live) -> Any:
    """The two-pool service's last 2 days, read from its store as the what-if reads them."""
    from apportion.service.whatif import load_history

    config = load_config(pooled.config)
    store = Store(config.db_url)
    try:
        return load_history(store, 2 * DAY, pooled.until, config.pools, now=time.time())
    finally:
        store.close()


def test_pooled_replay_runs_work_only_on_the_kind_it_asked_for(pooled: Live) -> None:
    """whatif's replay of the two-pool history: every start of a workload that asked for
    H100 is on e1/e2, of one that asked for B200 on w1 (work accepting any kind started
    too); replayed as one pool, as before pools, every host was one kind, so B200-only work
    started on the H100 hosts too."""
    from apportion.core import PolicyConfig
    from apportion.service.whatif import scenario_of
    from apportion.sim.run import run_policies

    history = pooled_history(pooled)
    assert history.pools is not None
    one_pool = dataclasses.replace(history, pools=None)
    kind_of = {n: k for n, _, k in POOLED_HOSTS}

    def kinds_started(h: Any) -> dict[tuple[str, ...], set[str]]:
        asked = {j.spec.id: tuple(j.spec.gpu_kinds) for j in history.jobs}
        (run,) = run_policies(scenario_of(h, 8 * HOUR), ["fairshare"], PolicyConfig(),
                              progress=False, keep_log=True)
        assert run.log is not None
        got: dict[tuple[str, ...], set[str]] = {}
        for line in run.log:
            _, what, wid, *rest = line.split()
            if what == "start":
                hosts = {slot.split(":")[0] for slot in rest[-1].split(",")}
                got.setdefault(asked[wid], set()).update(kind_of[h] for h in hosts)
        return got

    started = kinds_started(history)
    assert set(started) == {("H100",), ("B200",), ()}  # work of each kind of ask started
    assert (started[("H100",)], started[("B200",)]) == ({"H100"}, {"B200"})
    assert "H100" in kinds_started(one_pool)[("B200",)]


def test_pooled_post_whatif_replays_the_same_fleet(pooled: Live) -> None:
    """POST /v1/whatif on the two-pool server replays the history on the server's pools:
    the same answer as apportion whatif --json with the same config and inputs, which
    differs from the replay as one pool (B200-only work on H100 hosts there)."""
    body = {"since": "2d", "until": pooled.until, "set_weight": {"ai/vision": 2}}
    answer = httpx.post(f"{pooled.server.url}/v1/whatif", json=body, timeout=300,
                        headers={"Authorization": f"Bearer {pooled.server.token('admin')}"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == whatif(pooled, "--set-weight", "ai/vision=2")
    from apportion.service.whatif import compare

    history = pooled_history(pooled)
    one_pool = compare(dataclasses.replace(history, pools=None),
                       load_config(pooled.config).policy, {"ai/vision": 2}, {}).result
    assert answer.json()["budgets"] != one_pool["budgets"]


def test_pooled_whatif_shows_where_a_weight_change_moves_the_work(pooled: Live,
                                                                   tmp_path: Path) -> None:
    """--set-weight ai/vision=4 on the two-pool history: the answer has both pools; in each,
    every budget node's delivered GPU-hours, summed over the pools, is its overall row's
    (relative 1e-9: the same GPU-seconds summed in another order), and so are its
    preemptions; ai/vision's any-kind work moves onto east/H100, where its delivered
    GPU-hours and its attainment go up and ai/llm's delivered GPU-hours go down. The text
    form prints one block per pool after the overall line, whatif-pools.csv has a row per
    pool and budget node, and POST /v1/whatif answers the same pools."""
    result = whatif(pooled, "--set-weight", "ai/vision=4")
    pools = {p["pool"]: p for p in result["pools"]}
    assert [(p["cluster"], p["kind"], p["gpus"]) for p in pools.values()] == [
        ("east", "H100", 16), ("west", "B200", 8)]
    for row in result["budgets"]:
        here = [b for p in pools.values() for b in p["budgets"] if b["budget"] == row["budget"]]
        for side in ("current", "proposed"):
            assert sum(b[side]["delivered_gpu_hours"] for b in here) == pytest.approx(
                row[side]["delivered_gpu_hours"], rel=1e-9)
            assert sum(b[side]["preemptions"] for b in here) == row[side]["preemptions"]
    east = {b["budget"]: b for b in pools["east/H100"]["budgets"]}
    vision, llm = east["ai/vision"], east["ai/llm"]
    assert vision["proposed"]["delivered_gpu_hours"] > vision["current"]["delivered_gpu_hours"]
    assert vision["proposed"]["attainment"] > vision["current"]["attainment"]
    assert llm["proposed"]["delivered_gpu_hours"] < llm["current"]["delivered_gpu_hours"]
    assert [b["budget"] for b in pools["west/B200"]["budgets"]] == ["ai", "ai/vision"]

    run = whatif_run(pooled, "--set-weight", "ai/vision=4", "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("overall: "))
    blocks = [line for line in lines[at + 1:] if line.startswith("pool ")]
    assert [b.split()[1] for b in blocks] == ["east/H100", "west/B200"]
    assert blocks[0].startswith("pool east/H100 (16 GPUs): replay occupancy ")
    head = lines.index(blocks[0]) + 1
    assert lines[head].split() == ["budget", "attainment", "delivered", "GPU-h", "wait",
                                   "p50", "preemptions"]
    c, p = vision["current"]["delivered_gpu_hours"], vision["proposed"]["delivered_gpu_hours"]
    assert f"{format_figure(c)} -> {format_figure(p)}" in next(
        line for line in lines[head:] if line.startswith("ai/vision "))
    csv_rows = (tmp_path / "out" / "whatif-pools.csv").read_text().splitlines()
    assert csv_rows[0].startswith("pool,budget,attainment_current,")
    assert len(csv_rows) - 1 == sum(len(p["budgets"]) for p in pools.values())

    answer = httpx.post(f"{pooled.server.url}/v1/whatif", timeout=300,
                        json={"since": "2d", "until": pooled.until,
                              "set_weight": {"ai/vision": 4}},
                        headers={"Authorization": f"Bearer {pooled.server.token('admin')}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["pools"] == result["pools"]


def test_pooled_whatif_shows_a_manager_only_their_subtree_in_each_pool(pooled: Live) -> None:
    """alice, manager of ai/vision only, asks POST /v1/whatif on the two-pool server: in
    each pool she sees the pool's figures and only ai/vision's row, as the admin's answer
    has them; ai and ai/llm (outside her subtree) are left out there as in the overall
    rows."""
    url = f"{pooled.server.url}/v1/whatif"
    admin = {"Authorization": f"Bearer {pooled.server.token('admin')}"}
    body = {"since": "2d", "until": pooled.until}
    full = httpx.post(url, json=body, timeout=300, headers=admin)
    assert full.status_code == 200, full.text
    managers = f"{pooled.server.url}/v1/budgets/ai/vision/managers"
    assert httpx.put(managers, json={"managers": ["alice"]}, headers=admin).status_code == 200
    try:
        mine = httpx.post(url, json=body, timeout=300, headers={
            "Authorization": f"Bearer {pooled.server.token('alice')}"})
    finally:
        httpx.put(managers, json={"managers": []}, headers=admin)
    assert mine.status_code == 200, mine.text
    answer = mine.json()
    assert [b["budget"] for b in answer["budgets"]] == ["ai/vision"]
    assert len(answer["pools"]) == len(full.json()["pools"]) == 2
    for seen, whole in zip(answer["pools"], full.json()["pools"], strict=True):
        assert {k: v for k, v in seen.items() if k != "budgets"} == {
            k: v for k, v in whole.items() if k != "budgets"}
        assert seen["budgets"] == [b for b in whole["budgets"] if b["budget"] == "ai/vision"]
        assert {b["budget"] for b in whole["budgets"]} > {"ai/vision"}


def test_one_pool_whatif_has_no_pool_section(live: Live) -> None:
    """One pool: the JSON answer (command and POST /v1/whatif) has no ``pools`` field, only
    the fields it had before pools, and the text form ends with the overall line, no
    per-pool block after it."""
    result = whatif(live, "--set-weight", "ai/vision=4")
    assert set(result) == {"period", "set_weight", "set", "overall", "budgets"}
    answer = httpx.post(f"{live.server.url}/v1/whatif", timeout=300,
                        json={"since": "2d", "until": live.until,
                              "set_weight": {"ai/vision": 4}},
                        headers={"Authorization": f"Bearer {live.server.token('admin')}"})
    assert answer.status_code == 200, answer.text
    assert "pools" not in answer.json()
    run = whatif_run(live, "--set-weight", "ai/vision=4")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 7  # period, change, header, ai, ai/llm, ai/vision, overall
    assert lines[-1].startswith("overall: attainment per team ")
    assert not any(line.startswith("pool ") for line in lines)


def test_export_without_a_store_is_a_usage_error_naming_it_and_creates_none(tmp_path: Path) -> None:
    """export-trace without --config where no service ever started (an empty data
    directory): exit 2, the usage code (a required input, the store, is missing), with one
    line naming the database file that is not there and
    pointing at --config, and no database file left behind (before, SQLAlchemy's traceback
    after creating an empty database). whatif --config on a config whose database is not
    there says the same of it, with exit 2 too."""
    (tmp_path / "apportion-data").mkdir()
    db = tmp_path / "apportion-data" / "apportion.db"
    run = subprocess.run([sys.executable, "-m", "apportion.cli.main", "export-trace",
                          "--since", "1d", "--out", str(tmp_path / "t.csv")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr == (f"Error: {db}: no database there (without --config, the store of a "
                          "service started in this directory; give the service's config "
                          "with --config FILE)\n")
    assert not db.exists()
    config = write_config(tmp_path / "apportion.toml", free_port())
    run = apportion("whatif", "--config", str(config), "--since", "1d")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr == f"Error: {tmp_path / 'data' / 'apportion.db'}: no database there\n"
    assert not (tmp_path / "data").exists()


def test_whatif_refuses_a_database_the_service_never_started_on(tmp_path: Path) -> None:
    """A config whose SQLite file exists but holds no apportion schema: whatif says it is
    not an apportion database instead of replaying an empty history or failing on a
    missing table."""
    config = write_config(tmp_path / "apportion.toml", free_port())
    (tmp_path / "data").mkdir()
    sqlite3.connect(tmp_path / "data" / "apportion.db").execute("CREATE TABLE t (x INTEGER)")
    run = apportion("whatif", "--config", str(config), "--since", "1d")
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr == (f"Error: database sqlite:///{tmp_path / 'data' / 'apportion.db'}: "
                          "not an apportion database (no schema: the service has never "
                          "started on it)\n")


def test_a_database_of_an_older_release_is_refused_in_one_line_before_it_is_read(
        tmp_path: Path) -> None:
    """whatif --config and export-trace --config on a database an older release made
    (schema revision 0006, not yet migrated by a newer server; a budget and a host in
    it): exit 1 with one line
    naming the database, its revision and the one this release wants, and saying how to
    migrate it (before, SQLAlchemy's traceback: no such column: hosts.cluster)."""
    config = write_config(tmp_path / "apportion.toml", 18792)
    (tmp_path / "data").mkdir()
    db = tmp_path / "data" / "apportion.db"
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    store = Store(f"sqlite:///{db}")
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        alembic.command.upgrade(cfg, "0006")
        conn.execute(text("INSERT INTO budgets (path, parent, weight, managers, members) "
                          "VALUES ('ops', NULL, 1.0, '[]', '[]')"))
        conn.execute(text("INSERT INTO hosts (name, gpus, state, reason, changed_at) "
                          "VALUES ('h1', 8, 'healthy', '', 0.0)"))
    store.close()
    for args in (["whatif", "--since", "1d"],
                 ["export-trace", "--since", "1d", "--out", str(tmp_path / "t.csv")]):
        run = apportion(*args, "--config", str(config))
        assert run.returncode == 1, run.stdout + run.stderr
        assert run.stderr == (
            f"Error: database sqlite:///{db}: its schema is older than this apportion's "
            f"(revision 0006, this release wants {newest_revision()}): start the new server "
            "once to migrate it\n")


def test_unreachable_postgresql_is_one_line_naming_it_without_its_password(
    tmp_path: Path,
) -> None:
    """serve and whatif on a PostgreSQL URL nobody listens on: exit 1 with the database (its
    password masked) and the driver's reason on one line, not SQLAlchemy's traceback."""
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://ops:s3cret@127.0.0.1:{port}/apportion"
    config = write_config(tmp_path / "apportion.toml", free_port(), db_url=url)
    for command in (["serve", "--config", str(config)],
                    ["whatif", "--config", str(config), "--since", "1d"]):
        run = apportion(*command)
        assert run.returncode == 1, run.stdout + run.stderr
        error = run.stderr.splitlines()[-1]
        assert error.startswith(f"Error: database postgresql+psycopg://ops:***@127.0.0.1:"
                                f"{port}/apportion: connection failed: "), run.stderr
        assert "Connection refused" in error
        assert "Traceback" not in run.stderr and "s3cret" not in run.stderr


def test_work_of_a_leaf_that_has_children_now_is_left_out_and_counted(tmp_path: Path) -> None:
    """ai/vision runs two workloads, then (idle) gets a child ai/vision/new; ai/llm runs
    one. The replayed tree is today's, where ai/vision is no leaf: whatif and export-trace
    leave its two workloads out and say so (before, the replay failed on them: a 500 from
    POST /v1/whatif, a traceback from the commands), and replay ai/llm's."""
    config = memory_config(tmp_path)
    start = 1_700_000_000.0
    clock = FakeClock(start)
    store = Store(load_config(config).db_url, clock=clock.now)
    store.migrate()
    seed_store(store, load_config(config))
    executor = MemoryExecutor([("h0", 8), ("h1", 8)], clock)
    sched = Scheduler(store, executor, load_config(config).policy, clock, grace_s=0.0)
    sched.start()
    def submit(budget: str, at: float) -> None:
        clock.set(start + at)
        row = store.add_workload(budget=budget, gpus=4, min_runtime=600.0,
                                 submit_time=start + at, command=["train"], actor="alice")
        executor.durations[row.id] = HOUR
        sched.step()

    submit("ai/vision", 0.0)
    submit("ai/vision", 60.0)
    clock.set(start + 1.5 * HOUR)
    sched.step()  # both have ended: ai/vision may get children
    store.add_budget("ai/vision/new", 1.0, "alice")
    submit("ai/llm", 2 * HOUR)
    for t in (3, 4):
        clock.set(start + t * HOUR)
        sched.step()
    executor.close()
    store.close()
    until = start + 4 * HOUR
    run = apportion("whatif", "--config", str(config), "--since", "5h", "--until", repr(until),
                    "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    period = json.loads(run.stdout)["period"]
    assert (period["workloads"], period["in_former_leaves"]) == (1, {"ai/vision": 2})
    run = apportion("export-trace", "--config", str(config), "--since", "5h", "--until",
                    repr(until), "--out", str(tmp_path / "t.csv"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("0 cancelled unstarted, left out; 2 submitted to a budget that has children now "
            "(ai/vision), left out)") in run.stdout.splitlines()[0]
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert len(rows) == 2 and ",ai/llm," in rows[1], rows


def test_whatif_without_config_asks_the_server(live: Live) -> None:
    """apportion whatif without --config, with --url and a token: the server replays its
    history, and --json prints what --config prints reading the store; the text form has
    the same lines. A manager's proposal of a policy setting is refused with the server's
    403 (exit 1), a mistyped budget is a usage error naming --set-weight (exit 2), as with
    --config, and so is a weight out of the tree's range (0, -1, 2e6), in the CLI's
    words."""
    proposal = ("--since", "2d", "--until", repr(live.until), "--set-weight", "ai/vision=4")

    def ask(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return apportion("whatif", "--url", live.server.url, "--token",
                         live.server.token(user), *args)

    served = ask("admin", *proposal, "--json")
    assert served.returncode == 0, served.stdout + served.stderr
    assert json.loads(served.stdout) == whatif(live, "--set-weight", "ai/vision=4")
    text = ask("admin", *proposal)
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout == whatif_run(live, "--set-weight", "ai/vision=4").stdout
    refused = ask("alice", *proposal)
    assert refused.returncode == 43
    assert refused.stderr == "Error: forbidden: alice manages no budget (HTTP 403)\n"
    typo = ask("admin", "--since", "2d", "--set-weight", "ai/visoin=4")
    assert typo.returncode == 2
    assert ("Invalid value for --set-weight: no budget 'ai/visoin'; did you mean "
            "'ai/vision'?") in typo.stderr
    # a weight out of the tree's range is refused in the CLI's words, as `budgets set`
    # refuses it (it was the request body's check: 'ai/vision: Input should be greater than
    # or equal to 1e-06')
    for weight in ("0", "-1", "2e6"):
        out_of_range = ask("admin", "--since", "2d", "--set-weight", f"ai/vision={weight}")
        assert out_of_range.returncode == 2
        assert (f"Invalid value for --set-weight: ai/vision={weight}: weight must be a number "
                "from 0.000001 to 1,000,000") in " ".join(out_of_range.stderr.split())


def test_a_weight_or_until_that_is_not_a_finite_number_is_refused_naming_the_flag(
        live: Live) -> None:
    """--set-weight ai/vision=nan (or inf), and --until nan, inf or -5: a usage error (exit
    2) naming the flag and what was typed, whether the server replays (before: a traceback,
    'Out of range float values are not JSON compliant', or the server's 'until: ...') or
    the store is read here (before: 'Error: must be a finite time, got nan')."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    for where in (server, ("--config", str(live.config))):
        for weight in ("nan", "inf", "-inf"):
            run = apportion("whatif", *where, "--since", "2d", "--set-weight",
                            f"ai/vision={weight}")
            assert run.returncode == 2, run.stdout + run.stderr
            assert (f"Invalid value for --set-weight: ai/vision={weight}: weight must be a "
                    "number from 0.000001 to 1,000,000") in " ".join(run.stderr.split())
        for until, want in (("nan", "must be a finite number of seconds, got 'nan'"),
                            ("inf", "must be a finite number of seconds, got 'inf'"),
                            ("-5", "seconds since the epoch must be >= 0, got '-5'")):
            run = apportion("whatif", *where, "--since", "2d", "--until", until)
            assert run.returncode == 2, run.stdout + run.stderr
            assert f"Invalid value for --until: {want}" in " ".join(run.stderr.split())
            assert "Traceback" not in run.stderr


def test_until_now_is_the_default(live: Live) -> None:
    """--until now, the default its help names, is accepted and ends the period now, with
    the server replaying and with --config (it was refused as 'not seconds since the epoch
    or an ISO 8601 time')."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "2d", "--until", "now", "--json")
        assert run.returncode == 0, run.stdout + run.stderr
        assert abs(json.loads(run.stdout)["period"]["end"] - time.time()) < 300


def test_until_is_read_as_report_usage_reads_to(live: Live, tmp_path: Path) -> None:
    """whatif and export-trace read --until with report usage's parser
    (accounting.parse_time): 20261207 is refused with the date to write, as report usage
    --to refuses it (it was read as seconds in August 1970, then 'nothing to replay'), and
    1d is a day ago (it was refused as 'not seconds since the epoch or an ISO 8601 time'),
    whether the server replays or the store is read here."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    want = ("Invalid value for --until: '20261207' reads as seconds since the epoch: write "
            "the date 2026-12-07")
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "1d", "--until", "20261207")
        assert run.returncode == 2 and want in " ".join(run.stderr.split()), run.stderr
        run = apportion("whatif", *where, "--since", "2d", "--until", "1d", "--json")
        assert run.returncode == 0, run.stdout + run.stderr
        assert abs(json.loads(run.stdout)["period"]["end"] - (time.time() - DAY)) < 300
    run = apportion("export-trace", "--config", str(live.config), "--since", "1d", "--until",
                    "20261207", "--out", str(tmp_path / "t.csv"))
    assert run.returncode == 2 and want in " ".join(run.stderr.split()), run.stderr


def test_a_period_with_no_workload_is_refused_naming_the_period(live: Live) -> None:
    """--until 2020-01-01, before anything was submitted: exit 2 with the flags and the
    period they make, not 'Invalid value for --since', whether the server replays (its 422
    says 'period: ...') or the store is read here; export-trace says the same."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    want = ("Error: --since 2d --until 2020-01-01: no workload was submitted in the 2 d from "
            "2019-12-30 00:00:00+00:00 to 2020-01-01 00:00:00+00:00: nothing to replay\n")
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "2d", "--until", "2020-01-01")
        assert (run.returncode, run.stderr) == (2, want), run.stdout + run.stderr
    run = apportion("export-trace", "--config", str(live.config), "--since", "2d", "--until",
                    "2020-01-01", "--out", str(live.config.parent / "never.csv"))
    assert (run.returncode, run.stderr) == (2, want), run.stdout + run.stderr


def test_an_until_after_now_is_cut_to_now_and_running_work_counts_its_run_so_far(
        live: Live, tmp_path: Path) -> None:
    """--until a day after now: the period ends now, said on a note naming --until as
    typed, and the work still running counts its run up to now, in the exported trace
    (every run ends by now) and in the replay, whether the server replays or the store is
    read here (before, running work was counted as run up to the future --until: a day
    more of GPU-hours per workload). A period wholly after now is refused, naming it."""
    from datetime import UTC, datetime

    from apportion.sim.traces import load_trace

    later = datetime.fromtimestamp(time.time() + DAY, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    out = tmp_path / "t.csv"
    before = time.time()
    run = apportion("export-trace", "--config", str(live.config), "--since", "4d",
                    "--until", later, "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"note: --until {later} is after now: the period ends now" in run.stdout
    first = live.until - 2 * DAY  # the history's first submission
    jobs = load_trace(out, tree=BudgetTree.build([("ai/llm", 2), ("ai/vision", 1)])).jobs
    assert live.running_at_end > 0
    assert max(first + j.spec.submit_time + j.duration for j in jobs) <= time.time()
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "4d", "--until", later, "--json")
        assert run.returncode == 0, run.stdout + run.stderr
        assert before <= json.loads(run.stdout)["period"]["end"] <= time.time()
        assert f"note: --until {later} is after now" in run.stderr
        run = apportion("whatif", *where, "--since", "1h", "--until", later)
        assert run.returncode == 2, run.stdout + run.stderr
        assert "are after now" in run.stderr and "no history yet" in run.stderr


def test_overall_attainment_is_given_per_team_and_per_researcher() -> None:
    """One team (t/a) of two researchers asking for the whole 8-GPU host in 8-GPU work: the
    team gets all it is owed, but each hour only one researcher runs, so per researcher
    attainment is about half. The what-if's overall figures give both, labelled: the JSON
    ``attainment_teams`` and ``attainment`` (the runs' summary ``overall_teams`` and
    ``overall``), and the text line 'attainment per team ... per researcher ...' (it said
    'attainment' of the per-researcher figure, below every team's)."""
    from apportion.cli.whatif import format_overall
    from apportion.core import Host, PolicyConfig, WorkloadSpec
    from apportion.service.history_trace import History
    from apportion.service.whatif import compare
    from apportion.sim.model import SimJob

    tree = BudgetTree.build([("t", 1.0), ("t/a", 1.0), ("t/a/x", 1.0), ("t/a/y", 1.0)])
    jobs = [SimJob(WorkloadSpec(f"{leaf}{n}", f"t/a/{leaf}", 8, HOUR, n * HOUR), 4 * HOUR)
            for n in range(12) for leaf in "xy"]
    history = History(start=0.0, end=2 * DAY, origin=0.0, jobs=jobs, tree=tree,
                      hosts=(Host("h1", 8),), host_events=[])
    outcome = compare(history, PolicyConfig(), {}, {})
    overall = outcome.result["overall"]["current"]
    summary = outcome.current.summary["attainment"]
    assert overall["attainment_teams"] == summary["overall_teams"] > 0.95
    assert overall["attainment"] == summary["overall"] < 0.75
    assert Whatif.model_validate(outcome.result).model_dump(mode="json")["overall"] == (
        outcome.result["overall"])
    teams, leaves = (f"{100 * summary[k]:.1f}%" for k in ("overall_teams", "overall"))
    assert format_overall(outcome.result["overall"]).startswith(
        f"overall: attainment per team {teams} -> {teams}, per researcher {leaves} -> {leaves}, "
        "wait p90 ")


def test_the_server_takes_checkpoint_default_none_as_the_command_does(
        live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    """--set checkpoint_default=none (its documented default, "the policy's") through the
    server: the command and POST /v1/whatif's {"set": {"checkpoint_default": null}} replay
    with it, as whatif --config does. The server read the setting's type from the class's
    annotations, which a compiled build gives as ``type`` (simulated here), and refused it:
    'set: checkpoint_default: must be a number of seconds or a duration, got None'."""
    from apportion.service.whatif_api import _setting
    from apportion.sim.engine import SimConfig

    monkeypatch.setitem(SimConfig.__annotations__, "checkpoint_default", type)
    assert _setting("checkpoint_default", None) is None
    assert _setting("checkpoint_default", "1h") == 3600.0
    run = apportion("whatif", "--url", live.server.url, "--token", live.server.token("admin"),
                    "--since", "2d", "--until", repr(live.until), "--set",
                    "checkpoint_default=none", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    served = json.loads(run.stdout)
    assert served["set"] == {"checkpoint_default": None}
    assert served == whatif(live, "--set", "checkpoint_default=none")


def test_a_budget_given_twice_to_set_weight_is_refused(live: Live) -> None:
    """--set-weight ai/vision=2 --set-weight ai/vision=3: a usage error naming the path (it
    replayed with the last weight, silently, where sweep --grid refuses a key given twice);
    --set lookback twice likewise."""
    for args, want in ((("--set-weight", "ai/vision=2", "--set-weight", "ai/vision=3"),
                        "Invalid value for --set-weight: ai/vision is given twice"),
                       (("--set", "lookback=1d", "--set", "lookback=2d"),
                        "Invalid value for --set: lookback is given twice")):
        run = whatif_run(live, *args)
        assert run.returncode == 2, run.stdout + run.stderr
        assert want in run.stderr


def test_export_gives_the_replay_days_to_four_decimals_as_whatif_replays_them(
        live: Live, tmp_path: Path) -> None:
    """--since 31h7m: from the period's first submission (on the history's half-hour grid)
    to its end is 31 h, 1.2916666666666667 days. The replay command export-trace prints
    gives --days 1.2917 (it gave the span whole), and whatif replays that same span (its
    period's ``days``), so the two stay figure for figure the same
    (test_export_round_trips_through_simulate)."""
    period = ("--config", str(live.config), "--since", "31h7m", "--until", repr(live.until))
    run = apportion("export-trace", *period, "--out", str(tmp_path / "t.csv"))
    assert run.returncode == 0, run.stdout + run.stderr
    replay = next(line for line in run.stdout.splitlines() if line.startswith("replay: "))
    assert " --days 1.2917 " in replay, replay
    run = apportion("whatif", *period, "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout)["period"]["days"] == 1.2917


def test_export_to_a_name_of_no_known_kind_lists_the_names_taken(
        live: Live, tmp_path: Path) -> None:
    """export-trace --out t.txt: exit 1 naming --out once and every ending a trace may have
    (it said 'use .csv, .jsonl or .parquet', though .csv.gz, .tsv, .json ... are taken, and
    named the file twice)."""
    out = tmp_path / "t.txt"
    run = apportion("export-trace", "--config", str(live.config), "--since", "2d", "--until",
                    repr(live.until), "--out", str(out))
    assert (run.returncode, run.stderr) == (1, (
        f"Error: --out {out}: format: cannot tell the file type from its name (use .csv, "
        ".tsv, .jsonl, .ndjson or .json, each with or without .gz, or .parquet or .pq)\n"))


def test_an_until_past_the_year_9999_is_refused_naming_until(live: Live) -> None:
    """--until 1e18 (no date can say it): a usage error naming --until and the range, with
    the server replaying and with --config, not a traceback from writing out the period."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "2d", "--until", "1e18")
        assert run.returncode == 2, run.stdout + run.stderr
        assert ("Invalid value for --until: must be a time from 1970 to 9999 (seconds since "
                "the epoch from 0 to 253402214400), got 1e+18") in " ".join(run.stderr.split())


def test_export_carries_checkpoint_on_term_and_time_limit(tmp_path: Path) -> None:
    """A workload submitted checkpointing on SIGTERM with a 2 h time limit, beside one with
    neither: export-trace writes both columns, and the trace reads back to the jobs the
    history holds, field by field (both were dropped, so the replay ran the work without a
    limit and lost its progress at every preemption)."""
    from apportion.sim.traces import load_trace

    config = memory_config(tmp_path)
    start = 1_700_000_000.0
    store = Store(load_config(config).db_url, clock=FakeClock(start).now)
    store.migrate()
    seed_store(store, load_config(config))
    store.add_workload(budget="ai/llm", gpus=4, min_runtime=600.0, submit_time=start,
                       command=["train"], actor="alice", resumable=True,
                       checkpoint_on_term=True, time_limit=2 * HOUR)
    store.add_workload(budget="ai/vision", gpus=4, min_runtime=600.0, submit_time=start + 60,
                       command=["eval"], actor="alice")
    history = read_history(store, start, start + HOUR)
    store.close()
    out = tmp_path / "t.csv"
    run = apportion("export-trace", "--config", str(config), "--since", "1h", "--until",
                    repr(start + HOUR), "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert out.read_text().splitlines()[0].endswith(",checkpoint_on_term,time_limit")
    first, second = load_trace(out, tree=history.tree).jobs
    assert (first.spec.checkpoint_on_term, first.spec.time_limit) == (True, 2 * HOUR)
    assert (second.spec.checkpoint_on_term, second.spec.time_limit) == (False, 0.0)
    assert (first, second) == tuple(history.jobs)


def test_a_since_over_ten_years_is_refused_as_typed(live: Live) -> None:
    """--since 1e308: a usage error naming --since and quoting what was typed, with the
    server replaying and with --config (before: 'may be at most 366 d, got' and the period
    written out in days, 300 digits); export-trace says the same."""
    server = ("--url", live.server.url, "--token", live.server.token("admin"))
    want = "Invalid value for --since: '1e308' is over the cap of 3650 d on any duration"
    for where in (server, ("--config", str(live.config))):
        run = apportion("whatif", *where, "--since", "1e308")
        assert run.returncode == 2, run.stdout + run.stderr
        assert want in " ".join(run.stderr.split())
    run = apportion("export-trace", "--config", str(live.config), "--since", "1e308",
                    "--out", str(live.config.parent / "never.csv"))
    assert run.returncode == 2 and want in " ".join(run.stderr.split())


def test_a_proposed_setting_over_max_min_runtime_is_said_in_durations() -> None:
    """whatif's ``--set checkpoint_wait=9h`` over the default max_min_runtime (8 h) is
    refused, about the field ``set``, as ``...: 9 h is over max_min_runtime (8 h)``, in the
    durations typed (it said ``32400 s is over max_min_runtime (28800 s)``)."""
    with pytest.raises(WhatifError) as e:
        proposed_configs(PolicyConfig(), {"checkpoint_wait": 9 * 3600.0})
    assert (e.value.field, str(e.value)) == (
        "set", "policy: checkpoint_wait: 9 h is over max_min_runtime (8 h)")
