"""End to end: a real ``apportion serve`` process with the local executor (real workload
processes), on SQLite and on PostgreSQL, driven over HTTP and through the ``apportion``
client commands. Polls with deadlines (bounding hangs only); nothing asserts durations."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Live, checkpointing, live_server, until_sigterm
from store_db import BACKENDS

LiveFactory = Callable[..., Live]


@pytest.fixture(params=BACKENDS)
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveFactory]:
    """``live(hosts)`` starts a server on this test's database (SQLite or PostgreSQL)."""
    with ExitStack() as stack:

        def start(hosts: dict[str, int]) -> Live:
            return stack.enter_context(live_server(request.param, tmp_path, hosts))

        yield start


def gpu_list(attempt: dict[str, Any]) -> str:
    """The CUDA_VISIBLE_DEVICES an attempt on one host should have seen."""
    [(_, _, indexes)] = attempt["placement"]
    return ",".join(str(i) for i in indexes)


def test_submit_runs_and_completes(live: LiveFactory) -> None:
    """`apportion submit` -> the command runs as a real process -> completed with exit code
    0; its log file holds its output, which shows APPORTION_WORKLOAD_ID, APPORTION_ATTEMPT
    and CUDA_VISIBLE_DEVICES set to the workload, attempt 1 and its assigned GPUs."""
    s = live({"h0": 4})
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "2", "--min-runtime", "30s",
              "--", "bash", "-c",
              'echo "id=$APPORTION_WORKLOAD_ID attempt=$APPORTION_ATTEMPT '
              'gpus=$CUDA_VISIBLE_DEVICES"; echo hello from the workload')
    assert r.returncode == 0, r.stderr
    wid = r.stdout.split()[1]
    w = s.wait_status(wid, "completed", "failed", "lost")
    assert (w["status"], w["exit_code"], w["attempts_count"]) == ("completed", 0, 1), w
    [attempt] = w["attempts"]
    assert attempt["exit_code"] == 0 and attempt["placement"][0][:2] == ["h0", 2]
    expected = f"id={wid} attempt=1 gpus={gpu_list(attempt)}\nhello from the workload\n"
    assert s.log(wid, 1) == expected
    shown = s.cli("alice", "logs", wid)
    assert (shown.returncode, shown.stdout) == (0, expected)


def test_allocated_preempts_unallocated(live: LiveFactory, tmp_path: Path) -> None:
    """On a full host, an allocated workload displaces an unallocated one: the unallocated
    process really receives SIGTERM (its trap writes a marker), it ends preempted (not
    resumable), and the allocated one then runs on the very GPUs it freed."""
    s = live({"h0": 2})
    ready, marker = tmp_path / "ready", tmp_path / "sigterm"
    victim = s.submit("alice", "ai/llm", 2, 0, until_sigterm(ready, marker))
    s.wait_file(ready)
    preemptor = s.submit("bob", "ai/vision", 2, "1m", 'echo "gpus=$CUDA_VISIBLE_DEVICES"')

    assert s.wait_file(marker) == "SIGTERM attempt 1\n"
    v = s.wait_status(victim, "preempted", "pending", "completed", "failed")
    assert v["status"] == "preempted", v
    assert v["attempts"][0]["end_reason"] == "preempted: unallocated"
    p = s.wait_status(preemptor, "completed", "failed")
    assert p["status"] == "completed", p
    [va], [pa] = v["attempts"], p["attempts"]
    assert pa["placement"] == va["placement"]
    assert pa["started_at"] >= va["ended_at"]  # never on GPUs its victim still held
    assert s.log(preemptor, 1) == f"gpus={gpu_list(va)}\n"


def test_resumable_is_requeued_and_resumes(live: LiveFactory, tmp_path: Path) -> None:
    """A resumable unallocated workload displaced by allocated work checkpoints on SIGTERM,
    goes back to pending, and runs again as attempt 2 (APPORTION_ATTEMPT=2), resuming from
    the step its first attempt saved."""
    s = live({"h0": 2})
    ready, checkpoint = tmp_path / "ready", tmp_path / "checkpoint"
    wid = s.submit("alice", "ai/llm", 2, 0, checkpointing(ready, checkpoint), resumable=True)
    s.wait_file(ready)
    preemptor = s.submit("bob", "ai/vision", 2, "1m", "echo done")

    requeued = s.wait("first attempt ended", lambda: (
        (w := s.workload(wid))["attempts"] and w["attempts"][0]["ended_at"] is not None and w))
    assert requeued["attempts"][0]["end_reason"] == "preempted: unallocated"
    w = s.wait_status(wid, "completed", "failed", "preempted")
    assert (w["status"], w["attempts_count"]) == ("completed", 2), w
    assert s.workload(preemptor)["status"] == "completed"
    first, second = s.log(wid, 1), s.log(wid, 2)
    step = checkpoint.read_text().strip()
    assert first.startswith("attempt=1\n") and f"checkpoint at step {step}\n" in first
    assert second == f"attempt=2\nresumed from step {step}\n"
    # back in the queue from the end of its first attempt until its second
    a1, a2 = w["attempts"]
    assert w["queued_at"] == a1["ended_at"] <= a2["started_at"]


def test_drain_moves_work_off_then_repair(live: LiveFactory, tmp_path: Path) -> None:
    """Draining a host (admin) stops its unallocated work at once (requeued, it restarts
    elsewhere) while protected work keeps running until its minimum runtime has passed; the
    emptied host goes to repair by itself (GET /v1/hosts), and repairing it brings it back
    into service."""
    protection = 4.0
    s = live({"h0": 4, "h1": 4})
    # h1 out of the way first, so both workloads land on h0; an empty host drains to repair
    s.ok("POST", "/v1/hosts/h1/drain", body={"reason": "fan"})
    s.wait_host("h1", "repair")
    u_ready, u_ckpt = tmp_path / "u-ready", tmp_path / "u-checkpoint"
    p_ready, p_term = tmp_path / "p-ready", tmp_path / "p-sigterm"
    unalloc = s.submit("alice", "ai/llm", 2, 0, checkpointing(u_ready, u_ckpt), resumable=True)
    s.wait_file(u_ready)
    protected = s.submit("bob", "ai/vision", 2, protection, until_sigterm(p_ready, p_term))
    s.wait_file(p_ready)
    assert s.ok("POST", "/v1/hosts/h1/repair")["state"] == "healthy"

    assert s.ok("POST", "/v1/hosts/h0/drain", body={"reason": "ECC"})["state"] == "draining"
    u = s.wait_status(unalloc, "completed", "failed", "preempted")
    p = s.wait_status(protected, "preempted", "completed", "failed", "pending")
    u1, u2 = u["attempts"]
    [pa] = p["attempts"]
    assert [u1["placement"][0][0], pa["placement"][0][0]] == ["h0", "h0"]
    # the unallocated one left at once (while the other was still protected) and restarted
    assert u1["end_reason"] == "preempted: drain"
    assert u1["ended_at"] < pa["started_at"] + protection
    assert u["status"] == "completed" and u2["placement"][0][0] == "h1"
    # the protected one was stopped only once its minimum runtime had passed
    assert (p["status"], pa["end_reason"]) == ("preempted", "preempted: drain")
    assert pa["ended_at"] >= pa["started_at"] + protection
    assert p_term.read_text() == "SIGTERM attempt 1\n"

    h0 = s.wait_host("h0", "repair")
    # the drain's reason stays: it is what the repair is for
    assert h0["gpus_used"] == 0 and h0["reason"] == "ECC (drained: empty)"
    assert s.ok("POST", "/v1/hosts/h0/repair", body={"reason": "DIMM replaced"})[
        "state"] == "healthy"
    assert s.hosts()["h0"]["state"] == "healthy"
    # back in service: work needing both whole hosts runs
    both = s.submit("alice", "ai/llm", 8, "1m", 'echo "$APPORTION_HOSTS"')
    b = s.wait_status(both, "completed", "failed")
    assert b["status"] == "completed"
    assert sorted(x[0] for x in b["attempts"][0]["placement"]) == ["h0", "h1"]


# (what, method, url, body, a user without the right)
WRITES: list[tuple[str, str, str, Any, str]] = [
    ("submit", "POST", "/v1/workloads",
     {"budget": "ai/llm", "gpus": 1, "min_runtime": "1m", "command": ["true"]}, "bob"),
    ("cancel", "POST", "/v1/workloads/{wid}/cancel", None, "bob"),
    ("weight", "PATCH", "/v1/budgets/ai/llm", {"weight": 3}, "dave"),
    ("top weight", "PATCH", "/v1/budgets/ai", {"weight": 3}, "carol"),
    ("members", "PUT", "/v1/budgets/ai/llm/members", {"members": ["bob"]}, "alice"),
    ("managers", "PUT", "/v1/budgets/ai/llm/managers", {"managers": ["bob"]}, "bob"),
    ("create child", "POST", "/v1/budgets", {"path": "ai/llm/x", "weight": 1}, "alice"),
    ("create top", "POST", "/v1/budgets", {"path": "research", "weight": 1}, "carol"),
    ("drain", "POST", "/v1/hosts/h0/drain", {"reason": "fan"}, "carol"),
    ("repair", "POST", "/v1/hosts/h0/repair", {"reason": "ok"}, "dave"),
    ("create user", "POST", "/v1/users", {"name": "eve", "admin": True}, "carol"),
    ("create token", "POST", "/v1/users/root/tokens", None, "alice"),
]


def test_writes_without_rights_are_refused(live: LiveFactory, tmp_path: Path) -> None:
    """Every kind of write against the real server: no token or an unknown one is 401, a
    user without the right (non-member, manager of the wrong node, non-admin) is 403 with
    the reason, and the workloads, budgets, hosts and audit log are unchanged."""
    s = live({"h0": 2})
    wid = s.submit("alice", "ai/llm", 2, 0, until_sigterm(tmp_path / "ready", tmp_path / "t"))
    s.wait_file(tmp_path / "ready")

    def fingerprint() -> list[Any]:
        return [s.ok("GET", u) for u in ("/v1/workloads?status=all", "/v1/budgets",
                                         "/v1/hosts", "/v1/audit?limit=10000")]

    before = fingerprint()
    for what, method, url, body, refused in WRITES:
        url = url.replace("{wid}", wid)
        assert s.call(method, url, None, body).status_code == 401, what
        assert s.call(method, url, body=body, token="not-a-token").status_code == 401, what
        r = s.call(method, url, refused, body)
        assert r.status_code == 403, (what, r.text)
        assert r.json()["detail"].startswith(f"forbidden: {refused} may not"), (what, r.text)
        assert fingerprint() == before, f"{what}: a refused write changed something"
    # the same refusal through the client: the server's message and exit status 43
    out = s.cli("carol", "hosts", "drain", "h0")
    assert out.returncode == 43 and "forbidden: carol may not change host h0" in out.stderr
    assert fingerprint() == before
    assert s.ok("POST", f"/v1/workloads/{wid}/cancel", "alice")["cancel_requested"]
    assert s.wait_status(wid, "cancelled", "preempted", "failed")["status"] == "cancelled"


def test_every_budget_change_is_audited(live: LiveFactory) -> None:
    """Creating a budget and changing a weight, the members and the managers through the
    client each leave one audit entry with who, when, and old -> new."""
    s = live({"h0": 2})
    seeded = {a["id"] for a in s.ok("GET", "/v1/audit?limit=10000")}
    changes = [
        ("carol", ("budgets", "create", "ai/robotics", "--weight", "2", "--member", "bob")),
        ("carol", ("budgets", "set", "ai/llm", "5")),
        ("dave", ("budgets", "members", "ai/llm", "alice", "bob")),
        ("carol", ("budgets", "managers", "ai/llm", "dave", "carol")),
    ]
    times = []
    for who, args in changes:
        before = time.time()
        r = s.cli(who, *args)
        assert r.returncode == 0, (args, r.stderr)
        times.append((before, time.time()))
    got = [a for a in s.ok("GET", "/v1/audit?limit=10000", "bob") if a["id"] not in seeded]
    got.reverse()  # the API lists newest first
    assert [(a["actor"], a["action"], a["target"], a["old"], a["new"]) for a in got] == [
        ("carol", "budget.create", "ai/robotics", None,
         {"weight": 2.0, "managers": [], "members": ["bob"]}),
        ("carol", "budget.weight", "ai/llm", {"weight": 2.0}, {"weight": 5.0}),
        ("dave", "budget.members", "ai/llm", {"members": ["alice"]},
         {"members": ["alice", "bob"]}),
        ("carol", "budget.managers", "ai/llm", {"managers": ["dave"]},
         {"managers": ["carol", "dave"]}),
    ]
    for a, (before, after) in zip(got, times, strict=True):
        assert before <= a["at"] <= after, a
    tree = {b["path"]: b for b in s.ok("GET", "/v1/budgets", "bob")}
    assert tree["ai/llm"]["weight"] == 5.0 and tree["ai/llm"]["managers"] == ["carol", "dave"]


def test_logs_of_past_attempts_stay_reachable_after_logs_dir_moves(tmp_path: Path) -> None:
    """An attempt's log is read from where it was written at launch: after a restart with
    another ``[server] logs_dir`` the log of an attempt that ran before is still served
    whole; and once that file is deleted, the 404 names the missing file (not "no log file
    yet"). An ended attempt that stored no log path (run before paths were stored) whose
    log is not under the current logs_dir gets a 404 saying "(logs_dir changed?)"."""
    import httpx
    from server_proc import Server, free_port, write_config

    from apportion.service.store import Store

    config = write_config(tmp_path / "apportion.toml", free_port(), hosts=1)
    server = Server(config, tmp_path / "server.log")
    server.start()
    try:
        auth = {"Authorization": f"Bearer {server.token('alice')}"}
        ids = []
        for text in ("first", "second"):
            r = httpx.post(f"{server.url}/v1/workloads", headers=auth,
                           json={"budget": "ai/llm", "gpus": 1, "min_runtime": "30s",
                                 "command": ["echo", text]})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        deadline = time.monotonic() + 30
        while any(httpx.get(f"{server.url}/v1/workloads/{w}", headers=auth).json()["status"]
                  != "completed" for w in ids):
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.1)
    finally:
        server.stop()
    old = tmp_path / "data" / "logs"
    store = Store(f"sqlite:///{tmp_path / 'data' / 'apportion.db'}")
    try:  # as an attempt launched before log paths were stored
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE attempts SET log_path = NULL WHERE workload_id = ?",
                                 (ids[1],))
    finally:
        store.close()
    text = config.read_text().replace('data_dir = "data"\n',
                                      'data_dir = "data"\nlogs_dir = "moved"\n')
    config.write_text(text)
    server.start()
    try:
        r = httpx.get(f"{server.url}/v1/workloads/{ids[0]}/logs", headers=auth)
        assert (r.status_code, r.text) == (200, "first\n")
        (old / ids[0] / "1.log").unlink()
        r = httpx.get(f"{server.url}/v1/workloads/{ids[0]}/logs", headers=auth)
        assert (r.status_code, r.json()["detail"]) == (
            404, f"workload {ids[0]}: attempt 1: log file {old / ids[0] / '1.log'} is gone")
        r = httpx.get(f"{server.url}/v1/workloads/{ids[1]}/logs", headers=auth)
        assert (r.status_code, r.json()["detail"]) == (
            404, f"workload {ids[1]}: attempt 1: log file not found under "
                 f"{tmp_path / 'moved'} (logs_dir changed?)")
    finally:
        server.stop()
