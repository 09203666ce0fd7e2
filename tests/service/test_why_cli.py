"""``apportion why`` against a real ``apportion serve`` (local executor, real processes,
SQLite): sentences first, the structure only with ``--json``; advice computed by the policy;
and for ended work what happened to it, from the store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import Live, live_server, until_sigterm


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server("sqlite", tmp_path, {"h1": 8}) as s:
        yield s


def test_why_says_fewer_gpus_would_start_it_now(live: Live, tmp_path: Path) -> None:
    """h1 (8 GPUs) runs alice's 5-GPU workload, protected for 1 h; bob's 4-GPU workload
    waits (the 3 free GPUs are too few). ``why`` prints sentences, no raw fields, among them
    the policy's advice: with 3 GPUs it could start now on h1. ``--json`` gives the
    structure with the same advice."""
    ready = tmp_path / "ready"
    blocker = live.submit("alice", "ai/llm", 5, "1h", until_sigterm(ready, tmp_path / "m", 600))
    live.wait_file(ready)
    wid = live.submit("bob", "ai/vision", 4, "10m", "true")

    def considered() -> int | None:
        """Its queue position once a pass has seen it (409 until the scheduler has)."""
        r = live.call("GET", f"/v1/workloads/{wid}/why", "bob")
        if r.status_code == 409:
            return None
        assert r.status_code == 200, r.text
        return r.json().get("position") or None

    live.wait("a pass to consider it", considered)
    r = live.cli("bob", "why", wid)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{wid} (pending, 4 GPUs, budget ai/vision, allocated)")
    assert "with 3 GPUs instead of 4 it could start now on h1" in lines
    assert not any(line.startswith(("now:", "wait_reason:")) for line in lines)
    assert any("would displace " + blocker in line for line in lines)
    j = live.cli("bob", "why", wid, "--json")
    data = json.loads(j.stdout)
    assert [(a["change"], a["gpus"], a["hosts"]) for a in data["advice"]] == [
        ("gpus", 3, ["h1"])]
    live.ok("POST", f"/v1/workloads/{blocker}/cancel", "alice")
    live.ok("POST", f"/v1/workloads/{wid}/cancel", "bob")


def test_why_on_ended_work_tells_what_happened(live: Live, tmp_path: Path) -> None:
    """An unallocated workload preempted for alice's allocated one: ``why`` says it ran on
    h1, gave way to allocated work, and for whom; one that exited 3 says so."""
    ready = tmp_path / "ready"
    victim = live.submit("bob", "ai/vision", 8, 0, until_sigterm(ready, tmp_path / "m"))
    live.wait_file(ready)
    winner = live.submit("alice", "ai/llm", 8, "10m", "exit 3")
    live.wait_status(victim, "preempted")
    live.wait_status(winner, "failed")
    r = live.cli("bob", "why", victim)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{victim} (preempted, 8 GPUs, budget ai/vision, unallocated, "
                               "minimum runtime 0): submitted by bob at ")
    assert lines[1].startswith("attempt 1: ran on h1 (8 GPUs) from ")
    assert lines[1].endswith("preempted: as unallocated work it gave way to allocated work, "
                             f"for {winner}")
    failed = live.cli("alice", "why", winner).stdout.splitlines()
    assert failed[1].endswith("exited with code 3")
    assert failed[-1] == "final exit code 3"


def test_why_on_work_waiting_again_tells_its_earlier_run(live: Live, tmp_path: Path) -> None:
    """A resumable unallocated workload preempted for alice's allocated one waits again:
    ``why`` explains the wait and ends with its earlier run, where it ran, that it gave way
    to allocated work, for whom, and that it was requeued."""
    ready, winner_ready = tmp_path / "ready", tmp_path / "winner-ready"
    victim = live.submit("bob", "ai/vision", 8, 0, until_sigterm(ready, tmp_path / "m"),
                         resumable=True)
    live.wait_file(ready)
    winner = live.submit("alice", "ai/llm", 8, "10m",
                         until_sigterm(winner_ready, tmp_path / "w", 600))
    live.wait_file(winner_ready)

    def waiting_again() -> bool:
        w = live.workload(victim)
        return w["status"] == "pending" and w["attempts_count"] == 1

    live.wait("the victim to be requeued", waiting_again)
    r = live.cli("bob", "why", victim)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{victim} (pending, 8 GPUs, budget ai/vision, unallocated)")
    assert lines[-1].startswith("attempt 1: ran on h1 (8 GPUs) from ")
    assert lines[-1].endswith(
        f"preempted: as unallocated work it gave way to allocated work, for {winner}; "
        "requeued (it kept its place in its budget's queue)")
    live.ok("POST", f"/v1/workloads/{winner}/cancel", "alice")
    live.ok("POST", f"/v1/workloads/{victim}/cancel", "bob")


def test_control_characters_of_a_command_reach_show_and_why_escaped(live: Live) -> None:
    """A program name holding ESC, BEL and a newline (to clear an admin's screen, set the
    window's title and forge a line) is refused at launch: the end reason the server stores
    quotes it escaped (``\\x1b``, ``\\x07``, ``\\n``), and ``show`` (its command and end
    reason) and ``why`` print those characters escaped, never as they are."""
    program = "\x1b[2J\x1b]0;owned\x07nope\nw-000099 completed  FAKE"
    escaped = "\\x1b[2J\\x1b]0;owned\\x07nope\\nw-000099 completed  FAKE"
    body = {"budget": "ai/llm", "gpus": 1, "min_runtime": 0, "command": [program]}
    wid = live.ok("POST", "/v1/workloads", "alice", body)["id"]
    w = live.wait_status(wid, "failed")
    assert w["end_reason"] == f"launch refused: command not found: {escaped}"
    show = live.cli("root", "show", wid)
    why = live.cli("root", "why", wid)
    for r in (show, why):
        assert r.returncode == 0, r.stderr
        assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", r.stdout), r.stdout
        assert not any(line.startswith("w-000099") for line in r.stdout.splitlines())
    lines = show.stdout.splitlines()
    assert f"command:             '{escaped}'" in lines
    assert f"ended:               launch refused: command not found: {escaped} (exit 127)" \
        in lines
    assert f"command not found: {escaped}" in why.stdout
