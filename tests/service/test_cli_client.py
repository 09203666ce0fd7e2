"""The client commands against a real `apportion serve` (local executor, SQLite) in a
subprocess on a free port."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner, Result
from server_proc import free_port
from store_db import write_config

from apportion.cli.client import Client, fmt_time
from apportion.cli.main import main


@dataclass
class Server:
    url: str
    data_dir: Path
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("serve")
    cfg = write_config(d, "").read_text().replace('kind = "memory"', 'kind = "local"\ngrace_s = 2')
    cfg = cfg.replace("[policy]", "[scheduler]\ninterval_s = 0.2\n[policy]")
    # the test users have no Unix accounts: their work runs as the test's own user
    cfg = cfg.replace("[server]\n", "[server]\nsingle_user = true\n", 1)
    (d / "apportion.toml").write_text(cfg)
    port = free_port()
    with open(d / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli.main", "serve", "--config",
             str(d / "apportion.toml"), "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"apportion serve did not start:\n{(d / 'serve.log').read_text()}")
            time.sleep(0.1)
        tokens = {p.name: p.read_text().strip() for p in (d / "data" / "tokens").iterdir()}
        yield Server(url, d / "data", tokens)
        proc.terminate()
        proc.wait(timeout=30)


def run(server: Server, who: str | None, *args: str, env: dict[str, str] | None = None,
        ) -> Result:
    """Run a client command in-process, with url and token from the environment (and a
    TMPDIR of the test's, exported to the work: a batch script's copy is left there)."""
    base = {"APPORTION_URL": server.url, "APPORTION_CLIENT_CONFIG": "/dev/null",
            "TMPDIR": str(server.data_dir.parent)}
    if who:
        base["APPORTION_TOKEN"] = server.tokens[who]
    return CliRunner().invoke(main, list(args), env={**base, **(env or {})},
                              catch_exceptions=False)


def run_json(server: Server, who: str, *args: str) -> Any:
    r = run(server, who, *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def wait_status(server: Server, wid: str, want: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        w: dict[str, Any] = run_json(server, "alice", "show", wid)
        if w["status"] in want or time.monotonic() > deadline:
            return w
        time.sleep(0.1)


def test_submit_runs_and_logs(server: Server) -> None:
    """submit -> the local executor runs it -> show says completed -> logs prints its output."""
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "2", "--min-runtime",
            "30m", "--", "sh", "-c", "echo hello from $CUDA_VISIBLE_DEVICES")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert r.stdout.startswith(f"submitted {wid} to ai/llm (2 GPUs, min runtime 30 min)")
    w = wait_status(server, wid, {"completed", "failed"})
    assert w["status"] == "completed", w
    out = run(server, "alice", "logs", wid)
    assert out.exit_code == 0 and out.stdout.startswith("hello from ")
    shown = run(server, "alice", "show", wid).stdout
    assert "status:              completed" in shown and "attempts:" in shown
    assert "ended:               exited 0\n" in shown  # the reason gives the code: once


def test_a_script_whose_first_line_is_a_directive_is_a_batch_script(
    server: Server, tmp_path: Path,
) -> None:
    """A script without ``#!`` whose ``#APPORTION`` directive is its first line is read as
    a batch script (it was taken for a command, "--budget: missing"), and run by /bin/sh."""
    script = tmp_path / "job"
    script.write_text("#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\necho first-line\n")
    r = run(server, "alice", "submit", str(script))
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert wait_status(server, wid, {"completed", "failed"})["status"] == "completed"
    assert run(server, "alice", "logs", wid).stdout == "first-line\n"


def test_a_script_path_that_cannot_be_opened_is_refused_naming_it(
    server: Server, tmp_path: Path,
) -> None:
    """``submit nosuch.sh`` (alone, or with every option given) and a path that is a
    directory are usage errors naming the path and why it cannot be opened, as sbatch's
    "Unable to open file"; nothing is submitted (alone it said "--budget: missing"; with
    the options it was stored and failed at launch, "command not found")."""
    def stored() -> int:
        return len(httpx.get(f"{server.url}/v1/workloads",
                             params={"status": "all", "limit": 100_000},
                             headers={"Authorization": f"Bearer {server.tokens['alice']}"}
                             ).json())

    before = stored()
    flags = ("--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")
    for args, word, why in (
        (("nosuch.sh",), "nosuch.sh", "No such file or directory"),
        ((*flags, "nosuch.sh"), "nosuch.sh", "No such file or directory"),
        ((*flags, "--", "./nosuch", "arg"), "./nosuch", "No such file or directory"),
        ((*flags, str(tmp_path)), str(tmp_path), "Is a directory"),
    ):
        r = run(server, "alice", "submit", *args)
        assert r.exit_code == 2, r.output
        assert (f"Error: {word}: cannot open: {why} (a script, or a program given by its "
                "path, must be there when submitting)") in r.stderr
    assert stored() == before


def test_a_program_is_not_taken_for_a_script_path(server: Server, tmp_path: Path) -> None:
    """A program named without a path (``sh``) is looked up where the work runs, and a
    relative path that is in --chdir (not here) runs from there: neither is refused."""
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    (work / "bin" / "hello").write_text("#!/bin/sh\necho from-chdir\n")
    (work / "bin" / "hello").chmod(0o755)
    for args, out in ((("--", "sh", "-c", "echo by-name"), "by-name\n"),
                      (("-D", str(work), "--", "bin/hello"), "from-chdir\n")):
        r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1",
                "--min-runtime", "0", *args)
        assert r.exit_code == 0, r.output
        wid = r.stdout.split()[1]
        assert wait_status(server, wid, {"completed", "failed"})["status"] == "completed"
        assert run(server, "alice", "logs", wid).stdout == out


def test_a_relative_batch_script_in_chdir_is_read_from_there(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``submit -D proj job.sh`` run where there is no job.sh, with job.sh in proj: the
    script is read from proj as a batch script (its #APPORTION line gives the budget) and
    runs (it was not read: "--budget: missing"; with the flags given it failed at launch,
    "command not found: job.sh"). A job.sh here is the one read, as sbatch reads it."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "job.sh").write_text("#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 "
                                 "--min-runtime 0\necho from-proj\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = run(server, "alice", "submit", "-D", str(proj), "job.sh")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert wait_status(server, wid, {"completed", "failed"})["status"] == "completed"
    assert run(server, "alice", "logs", wid).stdout == "from-proj\n"
    (elsewhere / "job.sh").write_text("#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 "
                                      "--min-runtime 0\necho from-here\n")
    r = run(server, "alice", "submit", "-D", str(proj), "job.sh")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert wait_status(server, wid, {"completed", "failed"})["status"] == "completed"
    assert run(server, "alice", "logs", wid).stdout == "from-here\n"


def test_a_batch_script_is_named_after_its_file_unless_given_a_name(
    server: Server, tmp_path: Path,
) -> None:
    """As sbatch names a job after its script, a batch script's work without --name/-J is
    named after the file (a character a name may not hold becomes ``_``), so ``#SBATCH -o
    %x.out`` writes ``s.sh.out`` (it wrote ``.out``); a -J in the script or --name wins."""
    work = tmp_path / "work"
    work.mkdir()
    text = ("#!/bin/sh\n#SBATCH -o %x.out\n" f"#SBATCH --chdir={work}\n"
            "#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\necho $APPORTION_JOB_NAME\n")
    for file, args, name in (("s.sh", (), "s.sh"), ("my job.sh", (), "my_job.sh"),
                             ("t.sh", ("--name", "given"), "given")):
        (tmp_path / file).write_text(text)
        r = run(server, "alice", "submit", *args, str(tmp_path / file))
        assert r.exit_code == 0, r.output
        wid = r.stdout.split()[1]
        w = wait_status(server, wid, {"completed", "failed"})
        assert (w["status"], w["name"]) == ("completed", name)
        assert (work / f"{name}.out").read_text() == f"{name}\n"
    assert not (work / ".out").exists()
    (tmp_path / "j.sh").write_text(text.replace("#SBATCH -o", "#SBATCH -J from-j\n#SBATCH -o"))
    r = run(server, "alice", "submit", str(tmp_path / "j.sh"))
    wid = r.stdout.split()[1]
    assert wait_status(server, wid, {"completed", "failed"})["name"] == "from-j"
    assert (work / "from-j.out").read_text() == "from-j\n"


def test_output_naming_the_name_of_work_without_one_is_a_usage_error(
    server: Server, tmp_path: Path,
) -> None:
    """``-o %x.out`` for a command without --name is a usage error saying so (it wrote a
    hidden file ``.out``); ``%%x`` is a literal ``%x`` and needs no name."""
    flags = ("submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")
    r = run(server, "alice", *flags, "-o", "%x.out", "--", "true")
    assert r.exit_code == 2
    assert "Error: --output: %x is the workload's name, and it has none: give --name" in r.stderr
    r = run(server, "alice", *flags, "-o", str(tmp_path / "%%x.out"), "--", "true")
    assert r.exit_code == 0, r.output
    assert wait_status(server, r.stdout.split()[1], {"completed", "failed"})["status"] == (
        "completed")
    assert (tmp_path / "%x.out").exists()


def test_durations_echoed_are_what_was_stored_exactly(server: Server) -> None:
    """``-t 1-2:30`` is confirmed as ``time limit 1 d 2 h 30 min`` by submit, show and the
    queue's LIMIT column (all said ``1 d 2 h``, dropping the half hour); a minimum runtime
    and checkpoint interval of 1 h 0 min 5 s are shown with their seconds."""
    r = run(server, "dave", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "3605", "--checkpoint-interval", "1h5s", "-t", "1-2:30", "--", "sleep", "600")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert r.stdout == (f"submitted {wid} to ai/llm (1 GPU, min runtime 1 h 0 min 5 s, "
                        "time limit 1 d 2 h 30 min)\n")
    shown = run(server, "dave", "show", wid).stdout.splitlines()
    for line in ("min_runtime:         1 h 0 min 5 s", "checkpoint_interval: 1 h 0 min 5 s",
                 "time limit:          1 d 2 h 30 min"):
        assert line in shown
    (row,) = [line for line in run(server, "dave", "queue").stdout.splitlines()
              if wid in line.split()]
    assert "  1 d 2 h 30 min  " in row
    assert run(server, "dave", "cancel", wid).exit_code == 0
    wait_status(server, wid, {"cancelled"})


def test_show_prints_no_exit_code_for_work_that_has_none(server: Server) -> None:
    """A workload cancelled before it ran has no exit code: ``show`` says how it ended and
    prints no ``(exit None)``."""
    blocker = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1",
                  "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    held = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
               "1m", "--dependency", f"afterok:{blocker}", "--", "true").stdout.split()[1]
    assert run(server, "bob", "cancel", held, blocker).exit_code == 0
    w = wait_status(server, held, {"cancelled"})
    assert (w["status"], w["exit_code"]) == ("cancelled", None)
    ended = [line for line in run(server, "bob", "show", held).stdout.splitlines()
             if line.startswith("ended:")]
    assert len(ended) == 1 and "exit" not in ended[0], ended
    wait_status(server, blocker, {"cancelled"})


def test_show_prints_the_command_quoted_as_a_shell_needs_it(server: Server) -> None:
    """``show`` prints the command as one could paste it into a shell: an argument with
    spaces or quotes keeps them (before, ``bash -c for i in 1 2; ...``)."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--", "bash", "-c", "for i in 1 2; do echo \"it's $i\"; done")
    wid = r.stdout.split()[1]
    command = [line for line in run(server, "bob", "show", wid).stdout.splitlines()
               if line.startswith("command:")]
    assert command == ["command:             bash -c 'for i in 1 2; do echo \"it'\"'\"'s $i\"; "
                       "done'"]
    wait_status(server, wid, {"completed"})


def test_queue_and_cancel(server: Server) -> None:
    """A long workload shows in the queue (table and JSON) and can be cancelled."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--resumable", "--priority", "3", "--", "sleep", "600")
    wid = r.stdout.split()[1]
    rows = run_json(server, "bob", "queue", "--user", "bob")
    assert [w["id"] for w in rows] == [wid] and rows[0]["priority"] == 3
    table = run(server, "bob", "queue").stdout.splitlines()
    assert table[0].split()[:3] == ["POS", "ID", "NAME"]
    assert any(line.split()[1:2] == [wid] for line in table[1:])
    wait_status(server, wid, {"running"})
    c = run(server, "bob", "cancel", wid)
    assert c.exit_code == 0 and wid in c.stdout
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_queue_table_is_one_request_and_the_same_table_as_from_the_workloads(
    server: Server, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``apportion queue`` (the table) asks ``GET /v1/queue`` only (before: also every
    active workload, page by page, from ``GET /v1/workloads``: seconds with thousands), and
    prints exactly the table it printed from the workloads' rows (NAME, USER, GPUS,
    PROTECTED, LIMIT: pending, held and running work; with ``--user``/``--budget``, checked
    by the server in one row's request); from a server whose queue view carries no
    ``name`` (an older one), it reads the workloads as before and prints the same table."""
    from apportion.cli import jobs

    sub = ["submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime", "1h", "-t",
           "2h", "--name"]
    r = run(server, "bob", *sub, "long-one", "--", "sleep", "600")
    assert r.exit_code == 0, r.output
    running = r.stdout.split()[1]
    wait_status(server, running, {"running"})
    held = run(server, "bob", *sub, "after", "--dependency", f"afterok:{running}", "--",
               "true").stdout.split()[1]
    other = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1",
                "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    calls: list[str] = []
    real_call = Client.call

    def call(self: Client, method: str, path: str, *a: Any, **kw: Any) -> httpx.Response:
        calls.append(f"{method} {path}")
        return real_call(self, method, path, *a, **kw)

    monkeypatch.setattr(Client, "call", call)
    try:
        client = Client(server.url, server.tokens["bob"])
        for flt in ({}, {"user": "bob"}, {"budget": "ai"}, {"user": "alice"}):
            kw: dict[str, Any] = {"me": False, "user": None, "budget": None, "states": [],
                                  **flt}
            calls.clear()
            now, entries = jobs.queue_entries(client, full=False, **kw)
            assert calls == ["GET /queue"] + (["GET /workloads"] if flt else []), calls
            _, rows = jobs.queue_entries(client, full=True, **kw)
            # the same workloads, each row as the table prints it (durations counted at
            # each answer's own now: its columns are compared without them)
            def cells(es: list[dict[str, Any]]) -> list[list[str]]:
                return [[re.sub(r"waited [^)]*", "waited", c) for i, c in enumerate(r)
                         if i not in (7, 8)] for r in jobs.queue_rows(es)]

            assert cells(entries) == cells(rows)
            ids = [e["id"] for e in entries]
            assert (running in ids and held in ids and other in ids) == (
                flt.get("user") != "alice"), (flt, ids)
            if not flt:
                table = {e["id"]: r for e, r in zip(entries, jobs.queue_rows(entries),
                                                    strict=True)}
                assert [table[w][2:4] for w in (running, held, other)] == [
                    ["long-one", "bob"], ["after", "bob"], ["-", "bob"]]
        # an older server: no name in the view's entries
        real_json = Client.json

        def old(self: Client, method: str, path: str, *a: Any, **kw: Any) -> Any:
            out = real_json(self, method, path, *a, **kw)
            if path == "/queue":
                for e in (*out["pending"], *out["running"]):
                    del e["name"]
            return out

        monkeypatch.setattr(Client, "json", old)
        calls.clear()
        _, entries = jobs.queue_entries(client, False, None, None, [], full=False)
        assert calls[:2] == ["GET /queue", "GET /workloads"]
        named = {e["id"]: e["name"] for e in entries}
        assert (named[running], named[held], named[other]) == ("long-one", "after", None)
    finally:
        monkeypatch.undo()
        run(server, "bob", "cancel", running, held, other)


def test_a_filter_naming_no_budget_or_user_is_an_error_not_an_empty_queue(
    server: Server,
) -> None:
    """queue --budget with a typo, cancel --user with one: exit 2 naming the flag and the
    closest names (before: "no active workloads" / "nothing to cancel", as if the queue
    were empty); GET /v1/workloads answers 422 naming its parameter."""
    q = run(server, "bob", "queue", "--budget", "ai/visoin")
    assert q.exit_code == 2  # a filter the server refuses (422): bad input
    assert q.stderr.startswith("Error: --budget: budget ai/visoin: not found; did you mean "
                               "ai/vision")
    c = run(server, "bob", "cancel", "--user", "bobb")
    assert c.exit_code == 2
    assert c.stderr.startswith("Error: --user: user bobb: not found; did you mean bob")
    api = httpx.get(f"{server.url}/v1/workloads?user=bobb",
                    headers={"Authorization": f"Bearer {server.tokens['bob']}"})
    assert api.status_code == 422
    assert api.json()["detail"].startswith("user: user bobb: not found")


def test_an_array_or_token_user_that_does_not_exist_is_an_error_naming_the_flag(
    server: Server,
) -> None:
    """cancel --array with an id no workload has, and tokens list --user with a typo (as an
    admin): exit 2 naming the flag (before: "nothing to cancel", and an empty list)."""
    c = run(server, "bob", "cancel", "--array", "999999")
    assert c.exit_code == 2
    assert c.stderr.startswith("Error: --array: workload w-999999: not found")
    t = run(server, "root", "tokens", "list", "--user", "bobb")
    assert t.exit_code == 2
    assert t.stderr.startswith("Error: --user: user bobb: not found; did you mean bob")


def test_a_malformed_workload_id_is_a_usage_error_and_w_5_is_w_000005(server: Server) -> None:
    """``show abc``: exit 2 saying it is not a workload id (it was a lookup answered 404);
    ``w-5`` and ``5`` both name ``w-000005``."""
    r = run(server, "bob", "show", "abc")
    assert r.exit_code == 2
    assert "'abc' is not a workload id (5 or w-000005)" in r.output
    wid = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
              "0", "--", "true").stdout.split()[1]
    number = str(int(wid.removeprefix("w-")))
    for typed in (number, "w-" + number):
        assert run_json(server, "bob", "show", typed)["id"] == wid
    wait_status(server, wid, {"completed"})


def test_a_dependency_on_something_that_is_no_workload_id_is_a_usage_error(
    server: Server, tmp_path: Path,
) -> None:
    """``-d afterok:abc`` is a usage error naming the flag (exit 2), as an id typed anywhere
    else is (it was sent and looked up: "--dependency: abc: no such workload", exit 1); from
    a script, the script line is named; short ids of work that exists are taken."""
    flags = ("submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")
    r = run(server, "alice", *flags, "-d", "afterok:5:abc", "--", "true")
    assert r.exit_code == 2, r.output
    assert "Error: --dependency: 'abc' is not a workload id (5 or w-000005)" in r.stderr
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -d afterany:x1\n"
                      "#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    r = run(server, "alice", "submit", str(script))
    assert r.exit_code == 2, r.output
    assert ("Error: job.sh:2: #SBATCH -d afterany:x1: 'x1' is not a workload id (5 or "
            "w-000005)") in r.stderr
    first = run(server, "alice", *flags, "--", "true").stdout.split()[1]
    r = run(server, "alice", *flags, "-d", f"afterany:{int(first[2:])}", "--", "true")
    assert r.exit_code == 0, r.output
    assert run_json(server, "alice", "show", r.stdout.split()[1])["dependencies"] == [
        ["afterany", first]]


def test_cancel_me_cancels_my_work_and_nobody_elses(server: Server) -> None:
    """cancel --me (scancel --me): bob's active work is cancelled, alice's is untouched;
    --me with --user is a usage error, --state without a selection names --me."""
    def submit(who: str, budget: str) -> str:
        r = run(server, who, "submit", "--budget", budget, "--gpus", "1", "--min-runtime",
                "0", "--", "sleep", "600")
        assert r.exit_code == 0, r.output
        return r.stdout.split()[1]

    bobs, alices = submit("bob", "ai/vision"), submit("alice", "ai/llm")
    c = run(server, "bob", "cancel", "--me")
    assert c.exit_code == 0, c.output
    assert bobs in c.stdout and alices not in c.stdout
    assert wait_status(server, bobs, {"cancelled"})["status"] == "cancelled"
    assert run_json(server, "alice", "show", alices)["status"] in ("pending", "running")
    both = run(server, "bob", "cancel", "--me", "--user", "alice")
    assert both.exit_code == 2 and "--me and --user: give one of them" in both.output
    state = run(server, "bob", "cancel", "--state", "pending")
    assert state.exit_code == 2
    assert "--state: only with --me, --user, --budget or --array" in state.output
    assert run(server, "alice", "cancel", "--me").exit_code == 0
    assert wait_status(server, alices, {"cancelled"})["status"] == "cancelled"


def test_cancel_state_refuses_states_that_are_not_active_before_cancelling_anything(
    server: Server,
) -> None:
    """``cancel --me --state`` with a finished state (``completed``, ``all``, a typo) among
    the states is a usage error naming ``--state`` and what it takes (exit 2), and cancels
    nothing (it tried to cancel finished work: one HTTP 409 each, exit 1; ``finished`` was
    refused naming the API's ``status``); ``stopping`` is taken."""
    wid = run(server, "dave", "submit", "--budget", "ai/llm", "--gpus", "1",
              "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    for states in ("completed", "all", "finished", "running,completed", "pendng"):
        r = run(server, "dave", "cancel", "--me", "--state", states)
        assert r.exit_code == 2, r.output
        bad = states.split(",")[-1]
        assert (f"--state: {bad!r}: must be pending, running or stopping (finished work "
                "cannot be cancelled)") in r.stderr
        assert r.stdout == "" and "HTTP" not in r.stderr
    assert run_json(server, "dave", "show", wid)["status"] in ("pending", "running")
    r = run(server, "dave", "cancel", "--me", "--state", "pending,running,stopping")
    assert r.exit_code == 0 and wid in r.stdout, r.output
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_queue_and_cancel_take_slurms_user_and_state_options_and_state_names(
    server: Server,
) -> None:
    """``queue -u USER -t PD`` and ``cancel -u USER -t PENDING``, as squeue and scancel
    take them: ``-u`` is ``--user``, ``-t`` (and queue's ``--states``) ``--state``, whose
    states are read in any case and as Slurm's codes (``PD``, ``R``, ``CG``); they were
    refused (``No such option '-u'``; ``'PENDING': must be pending, ...``)."""
    wid = run(server, "dave", "submit", "--budget", "ai/llm", "--gpus", "1",
              "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    assert wait_status(server, wid, {"running"})["status"] == "running"
    for args in (("-u", "dave", "-t", "R"), ("--user", "dave", "--states", "Running"),
                 ("-u", "dave", "-t", "pd,r,cg")):
        rows = run_json(server, "dave", "queue", *args)
        assert [w["id"] for w in rows] == [wid], args
    assert run_json(server, "dave", "queue", "-u", "dave", "-t", "PD") == []
    r = run(server, "dave", "cancel", "-u", "dave", "-t", "PENDING")
    assert (r.exit_code, r.stdout) == (0, "nothing to cancel\n"), r.output
    r = run(server, "dave", "cancel", "-u", "dave", "-t", "RUNNING")
    assert r.exit_code == 0 and wid in r.stdout, r.output
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_submit_parsable_prints_only_the_id_for_a_script_to_keep(server: Server) -> None:
    """``submit --parsable`` (sbatch's, for ``jid=$(sbatch --parsable job.sh)``) prints the
    workload's id alone on stdout, an array's id for an array (which ``afterok:`` takes for
    the whole array), and with ``--wait`` only that: the state changes go to stderr;
    ``--parsable`` with ``--json`` is a usage error (it was refused: ``No such option
    '--parsable'. Did you mean '--resumable'?``)."""
    flags = ("--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")
    r = run(server, "alice", "submit", "--parsable", *flags, "--array", "0-1", "--", "true")
    assert r.exit_code == 0, r.output
    array = r.stdout.strip()
    assert r.stdout == f"{array}\n" and run_json(server, "alice", "show", array)["array_index"] == 0
    r = run(server, "alice", "submit", "--parsable", "--wait", *flags, "-d",
            f"afterok:{array}", "--", "true")
    assert r.exit_code == 0, r.output
    wid = r.stdout.strip()
    assert r.stdout == f"{wid}\n" and f"{wid}: completed (exited 0)" in r.stderr
    both = run(server, "alice", "submit", "--parsable", "--json", *flags, "--", "true")
    assert both.exit_code == 2 and "--parsable and --json: give one of them" in both.stderr


def test_a_submission_over_the_body_limit_says_what_of_it_is_large(server: Server) -> None:
    """A submission over ``[server] max_body_bytes`` (here by an exported variable of 1.1
    MB, ``--export ALL`` being the default) is refused (exit 2) saying its size, the limit,
    and the bytes of its exported environment and of its command, with the way to send
    fewer variables (it said only ``body: must be at most 1048576 bytes ([server]
    max_body_bytes), got ...``: not what the body is, nor what to do)."""
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "0", "--", "true", env={"BIG": "b" * 1_100_000})
    assert r.exit_code == 2, r.output
    assert re.search(r"^Error: the submission is \d+ bytes, over the server's limit of "
                     r"1048576 \(\[server\] max_body_bytes\): of it, the exported "
                     r"environment is \d{7} bytes \(--export: ALL of yours by default; "
                     r"--export NONE, or NAME,\.\.\., sends fewer\) and the command 8 bytes "
                     r"\(HTTP 413\)$", r.stderr), r.stderr


def test_cancel_cancels_an_id_given_twice_once(server: Server) -> None:
    """``cancel 40 40 w-000040``: the workload is cancelled once and the command succeeds
    (the repeats were sent again, answered 409 as already cancelled, and it exited 1)."""
    wid = run(server, "dave", "submit", "--budget", "ai/llm", "--gpus", "1",
              "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    short = str(int(wid.removeprefix("w-")))
    r = run(server, "dave", "cancel", short, short, wid)
    assert r.exit_code == 0, r.output
    assert r.stdout.count(wid) == 1 and r.stderr == ""
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_cancel_by_filter_leaves_out_ended_work_and_an_ended_id_is_no_failure(
        server: Server) -> None:
    """``cancel --me`` is one request, and the server picks the active work in the very
    transactions that cancel it: a workload that has ended is not among it (neither
    cancelled nor reported) and the command succeeds; an id given by hand that has ended is
    no failure either (exit 0: nothing is left to cancel), said on stdout."""
    done = run(server, "carol", "submit", "--budget", "ai/llm", "--gpus", "1",
               "--min-runtime", "0", "--", "true").stdout.split()[1]
    assert wait_status(server, done, {"completed"})["status"] == "completed"
    live = run(server, "carol", "submit", "--budget", "ai/llm", "--gpus", "1",
               "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    r = run(server, "carol", "cancel", "--me")
    assert r.exit_code == 0, r.output
    assert done not in r.output and live in r.stdout
    assert wait_status(server, live, {"cancelled"})["status"] == "cancelled"
    by_id = run(server, "carol", "cancel", done)
    assert (by_id.exit_code, by_id.stdout, by_id.stderr) == (
        0, f"{done}: already completed\n", "")


def test_cancel_by_filter_or_many_ids_is_one_request_per_10000_workloads(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cancel --array`` sends one ``POST /v1/workloads/cancel`` for the whole array (it
    sent one request per element: minutes for thousands), and ids given by hand go in
    requests of at most 10,000 ids (here made 2: three ids, two requests), answered in the
    order given, the filter's after them, each workload said once."""
    from apportion.cli import jobs
    from apportion.cli.client import Client

    sent: list[tuple[str, str]] = []
    call = Client.call

    def counted(self: Client, method: str, path: str, *args: Any, **kw: Any) -> Any:
        sent.append((method, path))
        return call(self, method, path, *args, **kw)

    monkeypatch.setattr(Client, "call", counted)
    r = run(server, "dave", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "0", "--array", "0-5%1", "--", "sleep", "600")
    assert r.exit_code == 0, r.output
    array = r.stdout.split()[2]
    elements = [f"w-{int(array[2:]) + i:06d}" for i in range(6)]
    assert wait_status(server, elements[0], {"running"})["status"] == "running"
    sent.clear()
    r = run(server, "dave", "cancel", "--array", array, "--state", "pending")
    assert r.exit_code == 0, r.output
    assert sent == [("POST", "/workloads/cancel")]
    pending = [line.split()[1] for line in r.stdout.splitlines()]
    assert pending == elements[1:]
    sent.clear()
    monkeypatch.setattr(jobs, "MAX_CANCEL_IDS", 2)
    r = run(server, "dave", "cancel", pending[0], pending[1], pending[2], "--array", array)
    assert sent == [("POST", "/workloads/cancel")] * 3
    assert r.exit_code == 0, r.output  # the three given by hand had ended: no failure
    assert r.stdout == "".join(f"{w}: already cancelled\n" for w in pending[:3]) + (
        f"cancel requested for {elements[0]} (running); the scheduler stops it\n")
    assert wait_status(server, elements[0], {"cancelled"})["status"] == "cancelled"


def test_queue_says_when_a_drain_will_stop_running_work(server: Server) -> None:
    """Running work on a host an admin drains: its queue row says the drain stops it when
    its protection ends; once the host is repaired, it says nothing more."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "10m", "--", "sleep", "600")
    wid = r.stdout.split()[1]
    host = wait_status(server, wid, {"running"})["attempts"][-1]["placement"][0][0]

    def row() -> str:
        (line,) = [line for line in run(server, "bob", "queue").stdout.splitlines()
                   if wid in line.split()]
        return line

    assert "draining" not in row()
    assert run(server, "root", "hosts", "drain", host, "--reason", "fan").exit_code == 0
    assert row().endswith(f"{host}:1 (host draining: stopped when its minimum runtime ends)")
    assert run(server, "root", "hosts", "repair", host).exit_code == 0
    assert row().endswith(f"{host}:1")
    assert run(server, "bob", "cancel", wid).exit_code == 0
    wait_status(server, wid, {"cancelled"})


def test_validation_error_is_printed(server: Server) -> None:
    """The server's message is printed and the exit status is non-zero."""
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "99", "--min-runtime",
            "30m", "--", "true")
    assert r.exit_code == 2  # 422: bad input
    assert "gpus: 99 is more than the cluster's 16" in r.stderr and "HTTP 422" in r.stderr
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "9h", "--", "true")
    assert r.exit_code == 2 and "--min-runtime: 9 h is over the cap of 8 h" in r.stderr
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "30m", "--priority", "5000", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: --priority: Input should be less than or equal to 1000")


def test_forbidden_and_unauthenticated(server: Server) -> None:
    """403 and 401 messages from the server reach the user."""
    r = run(server, "alice", "hosts", "drain", "h1")
    assert r.exit_code == 43 and "forbidden: alice may not change host h1" in r.stderr
    r = run(server, None, "queue")
    assert r.exit_code == 43 and "missing bearer token (HTTP 401)" in r.stderr
    r = run(server, "alice", "queue", "--token", "wrong")
    assert r.exit_code == 43 and "invalid token" in r.stderr


def test_budget_commands(server: Server) -> None:
    """tree, create, set, members, managers and usage; every change lands in the audit."""
    assert run(server, "carol", "budgets", "create", "ai/robotics", "--weight", "2",
               "--member", "bob").exit_code == 0
    assert run(server, "carol", "budgets", "set", "ai/robotics", "3").exit_code == 0
    assert run(server, "carol", "budgets", "members", "ai/robotics", "bob",
               "alice").exit_code == 0
    assert run(server, "carol", "budgets", "managers", "ai/robotics", "dave").exit_code == 0
    tree = {b["path"]: b for b in run_json(server, "bob", "budgets", "tree")}
    robotics = tree["ai/robotics"]
    assert (robotics["weight"], robotics["members"], robotics["managers"]) == (
        3.0, ["alice", "bob"], ["dave"])
    text = run(server, "bob", "budgets", "tree").stdout
    assert "  robotics" in text
    assert run(server, "bob", "budgets", "list").stdout == text  # as `hosts list` is
    usage = run_json(server, "bob", "budgets", "usage")
    assert {b["path"] for b in usage["budgets"]} >= {"ai", "ai/robotics"}
    audit = run_json(server, "bob", "audit", "--target", "ai/robotics")
    assert [a["action"] for a in audit] == [
        "budget.managers", "budget.members", "budget.weight", "budget.create"]
    assert all(a["actor"] == "carol" for a in audit)


def test_a_manager_refused_their_own_nodes_weight_is_told_whose_it_is(server: Server) -> None:
    """dave manages ai/llm: ``budgets set ai/llm 3`` is refused (exit 43) saying that the
    weight is ai/llm's share of ai's, set by a manager of ai or above or an admin, not only
    that dave may not; a top-level node's is the cluster's, an admin's. Nothing changes."""
    before = run_json(server, "bob", "budgets", "tree")
    r = run(server, "dave", "budgets", "set", "ai/llm", "3")
    assert r.exit_code == 43, r.output
    assert r.stderr.strip() == (
        "Error: forbidden: dave may not change the weight of budget ai/llm (its share of "
        "ai's, set by a manager of ai or above, or an admin) (HTTP 403)")
    r = run(server, "carol", "budgets", "set", "ai", "3")
    assert r.exit_code == 43 and "(its share of the cluster, set by an admin)" in r.stderr
    assert run_json(server, "bob", "budgets", "tree") == before


def test_budget_people_refused_are_named_as_typed(server: Server) -> None:
    """A name the server refuses in ``budgets members``/``managers`` (the NAMES arguments)
    or ``budgets create --member``/``--manager`` is named as the user typed it, not as the
    API's field (``members.1: 'bobb' is not a user``, which no flag or argument is
    called); nothing is changed."""
    before = run_json(server, "bob", "budgets", "tree")
    for args, typed in (
            (("budgets", "members", "ai/llm", "alice", "bobb"), "NAMES"),
            (("budgets", "managers", "ai/llm", "bobb"), "NAMES"),
            (("budgets", "create", "ai/x", "--member", "alice", "--member", "bobb"),
             "--member"),
            (("budgets", "create", "ai/x", "--manager", "bobb"), "--manager")):
        r = run(server, "carol", *args)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith(f"Error: {typed}: 'bobb' is not a user (did you mean "), (
            args, r.stderr)
    assert run_json(server, "bob", "budgets", "tree") == before


def test_a_path_or_name_the_server_refuses_is_named_as_the_argument(server: Server) -> None:
    """``budgets create ai/ü`` and ``users add Alice.Smith``: the server's refusal names the
    PATH or NAME argument as ``--help`` shows it (``PATH: segment 2 ('ü'): ...``, ``NAME:
    'Alice.Smith' is not a user name``), as the other commands name theirs, not the API's
    field (``path:``, ``name:``), which is no flag or argument of theirs; exit 2, nothing
    made."""
    before = (run_json(server, "root", "budgets", "tree"),
              run_json(server, "root", "users", "list"))
    r = run(server, "root", "budgets", "create", "ai/\u00fc")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("Error: PATH: segment 2 ('\u00fc'): may only hold"), r.stderr
    r = run(server, "root", "budgets", "create", "ai/" + "x/" * 130 + "x")
    assert r.exit_code == 2 and r.stderr.startswith("Error: PATH: "), r.stderr
    r = run(server, "root", "users", "add", "Alice.Smith")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("Error: NAME: 'Alice.Smith' is not a user name: "), r.stderr
    assert (run_json(server, "root", "budgets", "tree"),
            run_json(server, "root", "users", "list")) == before


@pytest.mark.parametrize("args", [("--from", "yesterday"), ("--to", "last week"),
                                  ("--from", "20261206")])
def test_audit_refuses_a_period_it_cannot_read_as_bad_input_exit_2(
        server: Server, args: tuple[str, ...]) -> None:
    """``audit --from yesterday`` (or a --to, or a date without dashes) is bad input:
    exit 2, as ``report usage`` refuses the very same text and as docs/cli.md's "Exit codes"
    says of input refused, with the one ``Error: --from: ...`` line (it exited 1, the code
    of a reply the client cannot read)."""
    r = run(server, "root", "audit", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"Error: {args[0]}: "), r.stderr
    assert run(server, "root", "report", "usage", *args).exit_code == 2


@pytest.mark.parametrize(("args", "flag"), [
    (("audit", "--target"), "--target"), (("audit", "--actor"), "--actor"),
    (("queue", "--user"), "--user"), (("queue", "--budget"), "--budget"),
    (("tokens", "list", "--user"), "--user"),
])
def test_a_filter_over_the_servers_length_limit_is_named_as_the_flag(
        server: Server, args: tuple[str, ...], flag: str) -> None:
    """A filter the server refuses for its length (every query value: at most 255
    characters) is named by the flag typed (``--target: must be at most 255 characters,
    got 300``), exit 2, not as the API's ``query.target``, which no flag is called."""
    r = run(server, "root", *args, "x" * 300)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"Error: {flag}: must be at most 255 characters, got 300"), (
        r.stderr)


def test_budget_people_may_be_given_comma_separated_as_sacctmgr_takes_them(
        server: Server) -> None:
    """``budgets members PATH alice,bob`` (and ``managers``, ``create --member
    alice,bob``) gives both people, as sacctmgr takes a list of users, mixed with names
    given one by one; it was refused as the one name ``'alice,bob'``. A name of the list
    that is no user is still refused naming the argument or flag."""
    assert run(server, "root", "budgets", "create", "ops/team",
               "--member", "alice,bob", "--manager", "carol").exit_code == 0
    assert run(server, "root", "budgets", "managers", "ops/team", "carol,dave").exit_code == 0
    tree = {b["path"]: b for b in run_json(server, "root", "budgets", "tree")}
    assert (tree["ops/team"]["members"], tree["ops/team"]["managers"]) == (
        ["alice", "bob"], ["carol", "dave"])
    r = run(server, "root", "budgets", "members", "ops/team", "bob,alice", "dave")
    assert (r.exit_code, r.stdout.strip()) == (0, "ops/team: members alice, bob, dave")
    r = run(server, "root", "budgets", "members", "ops/team", "alice,bobb")
    assert r.exit_code == 2 and r.stderr.startswith("Error: NAMES: 'bobb' is not a user"), (
        r.stderr)


def test_audit_target_takes_a_short_workload_id_unless_a_name_has_entries(
        server: Server) -> None:
    """``audit --target 66`` and ``--target w-66`` show the entries of w-000066 (they
    showed none: the target was taken as typed); a budget named as the short id has
    entries of its own, so that name is read as the budget's."""
    r = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
            "0", "--", "sleep", "100")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert run(server, "alice", "cancel", wid).exit_code == 0
    short = str(int(wid.removeprefix("w-")))
    entries = run_json(server, "alice", "audit", "--target", wid)
    assert "workload.cancel" in [a["action"] for a in entries]
    for typed in (short, f"w-{short}"):
        assert run_json(server, "alice", "audit", "--target", typed) == entries, typed
    assert run(server, "root", "budgets", "create", short).exit_code == 0
    named = run_json(server, "alice", "audit", "--target", short)
    assert [(a["action"], a["target"]) for a in named] == [("budget.create", short)]


def test_the_action_audit_help_gives_as_an_example_is_one_the_server_writes(
        server: Server) -> None:
    """The action ``audit --help`` gives as its example of ``--action`` (it named
    ``budget.set``, which no entry is: ``--action budget.set`` was refused) is an action the
    server audits: after a weight change, ``audit --action`` of it lists that change."""
    example = re.search(r"only this action \((\S+)\)",
                        " ".join(run(server, None, "audit", "--help").stdout.split()))
    assert example is not None
    assert run(server, "root", "budgets", "create", "ops/example").exit_code == 0
    assert run(server, "root", "budgets", "set", "ops/example", "3").exit_code == 0
    r = run(server, "root", "audit", "--action", example[1], "--json")
    assert r.exit_code == 0, r.output
    assert {e["action"] for e in json.loads(r.stdout)} == {example[1]}


def test_budgets_set_takes_the_weight_as_argument_or_as_create_takes_it(server: Server) -> None:
    """``budgets set PATH W`` and ``budgets set PATH --weight W`` (the flag ``budgets create``
    takes) both set the weight; giving two different weights, or none, is a usage error
    (exit 2) that changes nothing."""
    assert run(server, "carol", "budgets", "create", "ai/speech").exit_code == 0
    r = run(server, "carol", "budgets", "set", "ai/speech", "--weight", "4")
    assert (r.exit_code, r.stdout.strip()) == (0, "ai/speech: weight 4")
    r = run(server, "carol", "budgets", "set", "ai/speech", "2", "--weight", "2")
    assert (r.exit_code, r.stdout.strip()) == (0, "ai/speech: weight 2")
    r = run(server, "carol", "budgets", "set", "ai/speech", "3", "--weight", "5")
    assert r.exit_code == 2 and "the weight is given twice: 3 and --weight 5" in r.stderr
    r = run(server, "carol", "budgets", "set", "ai/speech")
    assert r.exit_code == 2 and "missing the weight" in r.stderr
    tree = {b["path"]: b for b in run_json(server, "bob", "budgets", "tree")}
    assert tree["ai/speech"]["weight"] == 2.0
    assert "budget.weight" in run(server, "bob", "audit").stdout


def test_budgets_set_refuses_a_negative_weight_as_the_value_it_is(server: Server) -> None:
    """``budgets set PATH -1`` (and ``-0.5``, ``-1e3``, ``-inf``) is refused as the WEIGHT
    argument out of range (exit 2), not as ``No such option '-1'``; an option after it is
    still read, the arguments keep their order, and nothing is changed."""
    before = run_json(server, "bob", "budgets", "tree")
    for args in (("ai/llm", "-1"), ("ai/llm", "-0.5", "--json"), ("ai/llm", "-1e3"),
                 ("--json", "ai/llm", "-inf")):
        r = run(server, "root", "budgets", "set", *args)
        assert r.exit_code == 2, (args, r.output)
        assert "Error: Invalid value for 'WEIGHT': -" in r.stderr, (args, r.stderr)
        assert "No such option" not in r.stderr
    r = run(server, "root", "budgets", "set", "ai/llm", "-1", "--bogus")
    assert r.exit_code == 2 and "No such option '--bogus'" in r.stderr
    r = run(server, "root", "budgets", "set", "ai/llm", "-1", "--weight")
    assert r.exit_code == 2 and "Option '--weight' requires an argument." in r.stderr
    r = run(server, "root", "budgets", "set", "ai/llm", "--weight", "-1")
    assert r.exit_code == 2 and "Invalid value for '--weight': -1 is out of range" in r.stderr
    assert run_json(server, "bob", "budgets", "tree") == before


def test_out_of_range_numbers_are_refused_naming_the_flag(server: Server) -> None:
    """A weight out of the tree's range, a negative --tail or a --limit under 1 is a usage
    error naming the flag as typed (exit 2), not the API's field after a round trip."""
    for args, flag in ((("budgets", "create", "ai/llm/x", "--weight", "0"), "'--weight'"),
                       (("budgets", "set", "ai/llm", "--weight", "2e6"), "'--weight'"),
                       (("logs", "1", "--tail", "-5"), "'--tail'"),
                       (("audit", "--limit", "0"), "'--limit'")):
        r = run(server, "root", *args)
        assert r.exit_code == 2, r.output
        assert f"Invalid value for {flag}" in r.output


@pytest.mark.parametrize(("args", "argument"), [
    (("hosts", "drain", ""), "NAME"),
    (("hosts", "repair", ""), "NAME"),
    (("users", "set", "", "--admin"), "NAME"),
    (("tokens", "create", ""), "USER"),
    (("tokens", "revoke", ""), "TOKEN_ID"),
    (("budgets", "set", "", "2"), "PATH"),
    (("budgets", "members", ""), "PATH"),
    (("budgets", "managers", ""), "PATH"),
])
def test_an_empty_name_is_refused_naming_the_argument(
    server: Server, args: tuple[str, ...], argument: str
) -> None:
    """An empty host, user, token id or budget path (``hosts drain ""``) is a usage error
    naming the argument (exit 2), not the API's bare ``Not Found`` for a URL naming
    nothing."""
    r = run(server, "root", *args)
    assert r.exit_code == 2, r.output
    assert f"Error: Invalid value for '{argument}': empty" in r.output


@pytest.mark.parametrize("command", [("budgets", "set"), ("budgets", "members"),
                                     ("budgets", "managers")])
def test_a_budget_path_over_255_characters_is_refused_naming_path_and_the_limit(
        server: Server, command: tuple[str, ...]) -> None:
    """A budget path longer than the 255 characters any budget's may have (security.md,
    "Input limits") is a usage error naming PATH, its first 40 characters, its length and
    the limit (exit 2), not the server's ``path.path: must be at most 319 characters``
    (its cap on a URL's part, which names no argument and no budget limit) or, under 320
    characters, ``not found``."""
    for length in (256, 400):
        path = ("abcdefgh/" * 50)[:length - 1] + "x"
        r = run(server, "root", *command, path, *(["2"] if command[1] == "set" else []))
        assert r.exit_code == 2, r.output
        assert (f"Error: Invalid value for 'PATH': {path[:40]!r}... ({length} characters) is "
                "not a budget path: at most 255 characters") in r.stderr, r.stderr


@pytest.mark.parametrize(("args", "argument"), [
    (("hosts", "drain"), "NAME"), (("hosts", "repair"), "NAME"),
    (("users", "set", "--admin"), "NAME"), (("tokens", "create"), "USER"),
    (("tokens", "revoke"), "TOKEN_ID"),
])
def test_a_name_over_255_characters_is_refused_naming_the_argument(
        server: Server, args: tuple[str, ...], argument: str) -> None:
    """A host, user or token id longer than any may be (255 characters) is a usage error
    naming the argument, its first 40 characters and its length (exit 2), not the server's
    ``path.name: must be at most 319 characters`` (its cap on a URL's part)."""
    name = "h" * 400
    r = run(server, "root", *args[:2], name, *args[2:])
    assert r.exit_code == 2, r.output
    assert (f"Error: Invalid value for '{argument}': {name[:40]!r}... (400 characters) is "
            "not a name: at most 255 characters") in r.stderr, r.stderr


def test_host_commands(server: Server) -> None:
    """An admin drains and repairs a host; hosts list shows the state."""
    r = run(server, "root", "hosts", "drain", "h2", "--reason", "ECC errors")
    assert r.exit_code == 0 and "h2: draining" in r.stdout
    hosts = {h["name"]: h for h in run_json(server, "root", "hosts", "list")}
    assert hosts["h2"]["state"] in ("draining", "repair")
    assert run(server, "root", "hosts", "repair", "h2").stdout.strip() == "h2: healthy"
    assert "h2" in run(server, "root", "hosts", "list").stdout


def test_a_drain_reason_with_control_and_bidi_characters_is_listed_escaped(
    server: Server,
) -> None:
    """A drain reason holding ESC, BEL, a newline, a right-to-left override (U+202E) and a
    right-to-left mark (U+200F) is printed by ``hosts list`` with each of them escaped
    (``\\x1b``, ``\\u202e``), and by ``audit`` in its JSON escapes (``\\u001b``), never
    as they are: it cannot colour the admin's terminal, forge a line or show reversed."""
    reason = "bad\x1b[31mRED\x07 line2\nline3 \u202eevil\u200f"
    try:
        assert run(server, "root", "hosts", "drain", "h2", "--reason", reason).exit_code == 0
        for args, escaped in (
            (("hosts", "list"), "bad\\x1b[31mRED\\x07 line2\\nline3 \\u202eevil\\u200f"),
            (("audit", "--target", "h2", "--limit", "1"),
             "bad\\u001b[31mRED\\u0007 line2\\nline3 \\u202eevil\\u200f"),
        ):
            out = run(server, "root", *args)
            assert out.exit_code == 0, out.output
            assert escaped in out.stdout, (args, out.stdout)
            assert not set(out.stdout) & set("\x1b\x07\u202e\u200f"), args
    finally:
        run(server, "root", "hosts", "repair", "h2")


def test_draining_a_host_already_in_repair_says_so_and_changes_nothing(
    server: Server,
) -> None:
    """An empty host drained goes to repair; draining it again answers that it is in repair
    already, with its reason, and how to put it back (exit 0), instead of a 409 about a
    transition ("cannot go from repair to draining"); the reason stays the first drain's."""
    idle = [h["name"] for h in run_json(server, "root", "hosts", "list") if h["gpus_used"] == 0]
    assert idle, "a host with nothing running on it"
    host = idle[0]
    assert run(server, "root", "hosts", "drain", host, "--reason", "fan").exit_code == 0
    deadline = time.monotonic() + 30
    while {h["name"]: h for h in run_json(server, "root", "hosts", "list")}[host][
            "state"] != "repair":
        assert time.monotonic() < deadline, "the empty host did not go to repair"
        time.sleep(0.1)
    again = run(server, "root", "hosts", "drain", host, "--reason", "again")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == (f"{host}: repair already (fan (drained: empty)): it takes "
                                    f"no work; apportion hosts repair {host} puts it back in "
                                    "service")
    assert run(server, "root", "hosts", "repair", host).stdout.strip() == f"{host}: healthy"


def test_config_file(server: Server, tmp_path: Path) -> None:
    """Without flags or env, url and token_file come from the client config file."""
    (tmp_path / "tok").write_text(server.tokens["bob"] + "\n")
    cfg = tmp_path / "client.toml"
    cfg.write_text(f'url = "{server.url}"\ntoken_file = "{tmp_path / "tok"}"\n')
    env: dict[str, str | None] = {
        "APPORTION_URL": None, "APPORTION_TOKEN": None, "APPORTION_CLIENT_CONFIG": str(cfg)}
    r = CliRunner().invoke(main, ["hosts", "list", "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert {h["name"] for h in json.loads(r.stdout)} == {"h1", "h2"}


def client_config(tmp_path: Path, text: str, *args: str,
                  env: dict[str, str | None] | None = None) -> Result:
    """``queue`` with only a client config file holding ``text`` (no flags, no variables)."""
    cfg = tmp_path / "client.toml"
    cfg.write_text(text)
    return CliRunner().invoke(main, ["queue", *args], env={
        "APPORTION_URL": None, "APPORTION_TOKEN": None, "APPORTION_CLIENT_CONFIG": str(cfg),
        **(env or {})})


@pytest.mark.parametrize(("text", "problem"), [
    ("url = 5\n", "1: url: must be a string, got 5"),
    ('url = "http://127.0.0.1:1"\ntokn_file = "t"\n',
     "2: tokn_file: unknown key (valid keys: token, token_file, url)"),
    ('token = "a"\ntoken_file = "t"\n', "2: token, token_file: give one of them"),
    ('# the server\nurl = "127.0.0.1:18300"\n',
     "2: url: '127.0.0.1:18300' has no scheme: give http:// or https:// "
     "(http://127.0.0.1:18300)"),
    ('url = "ftp://h"\n', "1: url: 'ftp://h': the scheme must be http:// or https://"),
    ('url = "http://h:port"\n', "1: url: 'http://h:port': Invalid port: 'port'"),
    ('token = " "\n', "1: token: the token is empty"),
    ('\ntoken = "ab cd"\n', "2: token: the token must be one word of printable characters"),
], ids=["wrong type", "unknown key", "token twice", "no scheme", "other scheme", "bad port",
        "blank token", "token with a space"])
def test_a_bad_client_config_is_refused_as_file_line_key_problem(
    tmp_path: Path, text: str, problem: str,
) -> None:
    """Each problem of the client config file is one line ``file:line: key: problem``
    (exit 2; the line the file writes the key on, the later of two keys that exclude each
    other), as the server's config reports its own: a value of the wrong type was a
    traceback, a misspelled key was ignored, a URL without a scheme or a blank token failed
    every request as if the server could not be reached; and no line was named."""
    r = client_config(tmp_path, text)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"Error: {tmp_path / 'client.toml'}:{problem}"), r.stderr
    assert "Traceback" not in r.output and "cannot reach" not in r.output


def test_a_token_file_that_is_blank_is_named(tmp_path: Path) -> None:
    """A token file holding nothing but a newline is named with the key that names it, and
    that key's line."""
    (tmp_path / "tok").write_text("\n")
    r = client_config(tmp_path, f'token_file = "{tmp_path / "tok"}"\n')
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {tmp_path / 'client.toml'}:1: token_file: "
                        f"{tmp_path / 'tok'}: the token is empty\n")


def test_a_client_config_named_but_missing_is_an_error(tmp_path: Path) -> None:
    """APPORTION_CLIENT_CONFIG naming a file that is not there is an error naming the file
    (it was ignored, and the default URL used); /dev/null is an empty config."""
    missing = tmp_path / "none.toml"
    r = CliRunner().invoke(main, ["queue"], env={
        "APPORTION_URL": None, "APPORTION_TOKEN": None, "APPORTION_CLIENT_CONFIG": str(missing)})
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {missing}: cannot read: No such file or directory (named by "
                        "APPORTION_CLIENT_CONFIG)\n")


def test_the_default_client_config_may_be_missing(tmp_path: Path) -> None:
    """Without APPORTION_CLIENT_CONFIG, a missing ~/.config/apportion/client.toml is no
    error: the default URL is asked."""
    port = free_port()
    r = CliRunner().invoke(main, ["queue", "--url", f"http://127.0.0.1:{port}"], env={
        "APPORTION_TOKEN": None, "APPORTION_CLIENT_CONFIG": None, "HOME": str(tmp_path)})
    assert r.exit_code == 50 and "cannot reach the server" in r.stderr


@pytest.mark.parametrize(("args", "env", "problem"), [
    (("--url", "127.0.0.1:18300"), {},
     "--url: '127.0.0.1:18300' has no scheme: give http:// or https://"),
    ((), {"APPORTION_URL": "localhost:8642"},
     "APPORTION_URL: 'localhost:8642' has no scheme: give http:// or https://"),
    ((), {"APPORTION_TOKEN": " "}, "APPORTION_TOKEN: the token is empty"),
    ((), {"APPORTION_TOKEN": "abc\n"}, "APPORTION_TOKEN: the token must be one word"),
    (("--token", "a b"), {}, "--token: the token must be one word"),
], ids=["flag url", "env url", "blank env token", "env token with newline", "flag token"])
def test_a_bad_url_or_token_typed_is_a_usage_error_naming_it(
    args: tuple[str, ...], env: dict[str, str], problem: str,
) -> None:
    """A URL without a scheme or a blank token, given by flag or variable, is a usage error
    naming the flag or the variable (exit 2), before any request (a blank token read as
    "cannot reach the server ...: Illegal header value")."""
    base = {"APPORTION_URL": f"http://127.0.0.1:{free_port()}", "APPORTION_TOKEN": "t",
            "APPORTION_CLIENT_CONFIG": "/dev/null"}
    r = CliRunner().invoke(main, ["queue", *args], env={**base, **env})
    assert r.exit_code == 2, r.output
    assert f"Error: {problem}" in r.stderr and "cannot reach" not in r.stderr


def test_an_empty_token_variable_with_no_other_token_is_a_usage_error_naming_it(
    tmp_path: Path,
) -> None:
    """``APPORTION_TOKEN=`` (empty, as ``$(cat tokens/alice)`` gives when the file is not
    there) with no ``--token`` and no token in the client config is a usage error naming the
    variable (``APPORTION_TOKEN: the token is empty``, exit 2), before any request; it sent
    no token and printed the server's "missing bearer token (HTTP 401)". A token in the
    client config still wins over the empty variable, as before."""
    base = {"APPORTION_URL": f"http://127.0.0.1:{free_port()}", "APPORTION_TOKEN": ""}
    r = CliRunner().invoke(main, ["queue"], env={**base, "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 2, r.output
    assert "Error: APPORTION_TOKEN: the token is empty" in r.stderr
    cfg = tmp_path / "client.toml"
    cfg.write_text('token = "t"\n')
    r = CliRunner().invoke(main, ["queue"], env={**base, "APPORTION_CLIENT_CONFIG": str(cfg)})
    assert r.exit_code == 50 and "cannot reach the server" in r.stderr, r.output


def test_an_empty_url_variable_with_no_other_url_is_a_usage_error_naming_it(
    tmp_path: Path,
) -> None:
    """``APPORTION_URL=`` (empty) with no ``--url`` and no URL in the client config is a
    usage error naming the variable (``APPORTION_URL: the URL is empty``, exit 2); it asked
    the default URL, http://127.0.0.1:8642, as if nothing had been set. A URL in the client
    config still wins over the empty variable, as before."""
    base = {"APPORTION_URL": "", "APPORTION_TOKEN": "t"}
    r = CliRunner().invoke(main, ["queue"], env={**base, "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 2, r.output
    assert "Error: APPORTION_URL: the URL is empty" in r.stderr
    cfg = tmp_path / "client.toml"
    port = free_port()
    cfg.write_text(f'url = "http://127.0.0.1:{port}"\n')
    r = CliRunner().invoke(main, ["queue"], env={**base, "APPORTION_CLIENT_CONFIG": str(cfg)})
    assert r.exit_code == 50 and f"127.0.0.1:{port}" in r.stderr, r.output


def test_a_url_ending_in_the_api_prefix_is_the_server(server: Server) -> None:
    """``--url http://host:port/v1`` (the API's base as docs/api.md writes routes) reaches
    the server: the /v1 is dropped (it asked /v1/v1/... and printed "Not Found (HTTP 404)")."""
    for url in (f"{server.url}/v1", f"{server.url}/v1/", f"{server.url}/"):
        r = run(server, "bob", "hosts", "list", "--url", url)
        assert r.exit_code == 0, r.output
        assert "h1" in r.stdout


def test_unreachable_server() -> None:
    """A server that is not there gives a clear message, not a traceback."""
    r = CliRunner().invoke(main, ["queue"], env={
        "APPORTION_URL": f"http://127.0.0.1:{free_port()}", "APPORTION_TOKEN": "x",
        "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 50 and "cannot reach the server" in r.stderr


@contextlib.contextmanager
def slow_server(delay: float, body: bytes) -> Iterator[str]:
    """An HTTP server on a free port that answers every request ``body`` (200) after
    ``delay`` seconds; yields its URL."""

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay)
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client left
                pass

        def log_message(self, *_: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_read_timeout_says_the_server_did_not_answer_in_time_not_that_it_is_unreachable(
) -> None:
    """A server that takes the request but answers after the read timeout: the error says
    it did not answer within that many seconds and may still be working on it; it said
    ``cannot reach the server``, as if the request had never arrived."""
    with slow_server(3.0, b"[]") as url, pytest.raises(click.ClickException) as e:
        Client(url, "x").call("GET", "/queue", timeout=0.5)
    assert e.value.message == (f"the server at {url} did not answer within 0.5 s (it may "
                               "still be working on the request)")


def test_report_usage_waits_for_the_server_past_the_default_read_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``report usage`` waits for the report as long as the server takes, as ``whatif``
    does: with every other request's read timeout cut to 1 s, a report answered after 2 s
    is printed (it failed at the 60 s default with ``cannot reach the server``); another
    command still times out, exit 50 (no answer)."""
    call = Client.call

    def quick(self: Client, *args: Any, timeout: Any = 60, **kw: Any) -> httpx.Response:
        return call(self, *args, timeout=None if timeout is None else 1.0, **kw)

    monkeypatch.setattr(Client, "call", quick)
    with slow_server(2.0, b"budget,share\n(all),1.0\n") as url:
        r = CliRunner().invoke(main, ["report", "usage", "--format", "csv"], env={
            "APPORTION_URL": url, "APPORTION_TOKEN": "x", "APPORTION_CLIENT_CONFIG": "/dev/null"})
        assert r.exit_code == 0, r.output
        assert r.stdout == "budget,share\n(all),1.0\n"
        r = CliRunner().invoke(main, ["queue"], env={
            "APPORTION_URL": url, "APPORTION_TOKEN": "x", "APPORTION_CLIENT_CONFIG": "/dev/null"})
        assert r.exit_code == 50 and "did not answer within 1 s" in r.stderr


def test_a_submission_retried_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``submit`` to a server that is not there says on stderr, at its first retry, that
    the server does not answer and it keeps trying (it was silent for about a minute), once
    however many retries follow; then fails as before."""
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", (0.01,) * 3)
    url = f"http://127.0.0.1:{free_port()}"
    r = CliRunner().invoke(main, ["submit", "--budget", "ai/llm", "--gpus", "1",
                                  "--min-runtime", "0", "--", "true"], env={
        "APPORTION_URL": url, "APPORTION_TOKEN": "x", "APPORTION_CLIENT_CONFIG": "/dev/null"})
    assert r.exit_code == 50
    lines = r.stderr.splitlines()
    assert lines[0] == (f"apportion: the server at {url} does not answer (Connection "
                        "refused); retrying for about a minute ...")
    assert len(lines) == 2 and lines[1].startswith(f"Error: cannot reach the server at {url}")


def test_submit_checkpoint_on_term_is_stored_and_shown(server: Server) -> None:
    """--checkpoint-on-term reaches the store (show --json) and the text view shows it."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--resumable", "--checkpoint-on-term", "--", "sleep", "600")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    wid = r.stdout.split()[1]
    assert run_json(server, "bob", "show", wid)["checkpoint_on_term"] is True
    assert "checkpoint_on_term:  True" in run(server, "bob", "show", wid).stdout
    assert run(server, "bob", "cancel", wid).exit_code == 0
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_submit_signal_is_stored_and_shown(server: Server) -> None:
    """``--signal sigusr1`` with ``--time 1h`` reaches the store canonical (show --json:
    ``USR1@60``, sbatch's 60 s when ``@`` is left out) and the text view says it."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--time", "1h", "--signal", "B:sigusr1", "--", "sleep", "600")
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    assert run_json(server, "bob", "show", wid)["signal"] == "B:USR1@60"
    assert ("signal:              SIGUSR1 60 s before the time limit (to the batch script)"
            in run(server, "bob", "show", wid).stdout)
    assert run(server, "bob", "cancel", wid).exit_code == 0
    assert wait_status(server, wid, {"cancelled"})["status"] == "cancelled"


def test_show_says_when_the_signal_was_sent_after_the_work_ended(server: Server) -> None:
    """``show`` of work whose ``--signal`` was sent and which has ended since still says
    ``sent <time>``, the last attempt's (it said it only while an attempt was open, so
    once the work ended it read as never sent)."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--time", "1", "--signal", "B:USR1@60", "--", "sh", "-c",
            'trap "exit 0" USR1; while :; do sleep 0.1; done')
    assert r.exit_code == 0, r.output
    wid = r.stdout.split()[1]
    done = wait_status(server, wid, {"completed", "failed", "timeout"})
    assert done["status"] == "completed"
    shown = run_json(server, "bob", "show", wid)
    assert shown["attempt"] is None and shown["attempts"][-1]["signal_sent_at"] is not None
    line = next(x for x in run(server, "bob", "show", wid).stdout.splitlines()
                if x.startswith("signal:"))
    assert line.startswith("signal:              SIGUSR1 60 s before the time limit "
                           "(to the batch script); sent 20"), line


def test_checkpoint_on_term_without_resumable_is_warned_about(
    server: Server, tmp_path: Path,
) -> None:
    """--checkpoint-on-term without --resumable is taken (stored as asked) with a warning
    on stderr that it has no effect, naming the flag or the script line (it was silent)."""
    r = run(server, "bob", "submit", "--budget", "ai/vision", "--gpus", "1", "--min-runtime",
            "0", "--checkpoint-on-term", "--", "true")
    assert r.exit_code == 0, r.output
    assert r.stderr == ("warning: --checkpoint-on-term: no effect without --resumable (work "
                        "that is not resumable is not requeued when preempted: it loses its "
                        "whole run)\n")
    wid = r.stdout.split()[1]
    assert run_json(server, "bob", "show", wid)["checkpoint_on_term"] is True
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#APPORTION --budget ai/vision --gpus 1 --min-runtime 0\n"
                      "#APPORTION --checkpoint-on-term\ntrue\n")
    r = run(server, "bob", "submit", str(script))
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith("warning: job.sh:3: #APPORTION --checkpoint-on-term: no effect "
                               "without --resumable")
    wait_status(server, wid, {"completed"})


@pytest.mark.parametrize("shell_value", [None, "6"])
def test_submit_exports_openblas_num_threads_only_as_the_users_shell_set_it(
    server: Server, shell_value: str | None,
) -> None:
    """``apportion submit`` started as a program (where it sets OPENBLAS_NUM_THREADS=1 for its
    own NumPy) exports OPENBLAS_NUM_THREADS only if the user's shell set it, with the user's
    value: every job got OPENBLAS_NUM_THREADS=1 that nobody had set."""
    shell = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if shell_value is not None:
        shell["OPENBLAS_NUM_THREADS"] = shell_value
    r = subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", "submit", "--budget", "ai/llm", "--gpus",
         "1", "--min-runtime", "0", "--json", "--", "true"],
        env={**shell, "APPORTION_URL": server.url, "APPORTION_TOKEN": server.tokens["alice"],
             "APPORTION_CLIENT_CONFIG": "/dev/null"},
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["env"]
    assert env.get("OPENBLAS_NUM_THREADS") == shell_value
    assert env.get("HOME") == shell.get("HOME")  # the rest of the shell's environment is there


def test_names_in_a_request_path_are_sent_as_typed_and_name_nothing_else(
    server: Server,
) -> None:
    """A user, host, budget or token named with ``/..``, ``#``, ``?`` or a control character
    is sent percent-quoted: ``users set 'nosuch/../bob'`` and ``'bob#x'`` no longer make bob
    admin (a ``/`` or a ``..`` name is a usage error; ``#x`` is a user of that name, not
    found), ``budgets set 'ai/llm#zz'`` no longer sets ai/llm, and a control character is a
    refusal naming it, not an httpx traceback."""
    def admin_of(name: str) -> bool:
        users = run_json(server, "root", "users", "list")
        return next(u["admin"] for u in users if u["name"] == name)

    before = admin_of("bob")
    for name in ("nosuch/../bob", "..", "."):
        r = run(server, "root", "users", "set", name, "--admin")
        assert r.exit_code == 2 and "is not a name" in r.stderr, r.output
    r = run(server, "root", "users", "set", "bob#x", "--admin")
    assert r.exit_code == 44 and "user bob#x: not found" in r.stderr, r.output
    assert admin_of("bob") == before
    weight = next(b["weight"] for b in run_json(server, "root", "budgets", "tree")
                  if b["path"] == "ai/llm")
    r = run(server, "root", "budgets", "set", "ai/llm#zz", "5")
    assert r.exit_code == 44 and "ai/llm#zz" in r.stderr, r.output
    for path in ("ai/../ops", "ai//llm"):
        r = run(server, "root", "budgets", "set", path, "5")
        assert r.exit_code == 2 and "is not a budget path" in r.stderr, r.output
    assert next(b["weight"] for b in run_json(server, "root", "budgets", "tree")
                if b["path"] == "ai/llm") == weight
    for args in (["hosts", "repair", "gpu\x07"], ["tokens", "create", "bob\x1b[31m"],
                 ["tokens", "revoke", "t-?x"]):
        r = run(server, "root", *args)
        assert r.exit_code == 44 and r.stderr.startswith("Error: ") and "\x07" not in r.stderr \
            and "Traceback" not in r.output, r.output


def test_adding_a_user_that_exists_says_what_to_do_instead(server: Server) -> None:
    """``users add alice`` when alice exists is refused (exit 49) with the commands that do
    what the admin may have meant, changing her (``users set alice``) or giving her another
    token (``tokens create alice``), not only "already exists"; alice is unchanged."""
    before = run_json(server, "root", "users", "list")
    r = run(server, "root", "users", "add", "alice", "--admin")
    assert r.exit_code == 49, r.output
    assert r.stderr.startswith("Error: user alice: name: already exists; "), r.stderr
    assert "apportion users set alice" in r.stderr, r.stderr
    assert "apportion tokens create alice" in r.stderr, r.stderr
    assert run_json(server, "root", "users", "list") == before


@pytest.mark.parametrize(("args", "said"), [
    (("users", "remove", "alice"), "users are never removed"),
    (("users", "delete", "alice"), "users are never removed"),
    (("users", "disable", "alice"), "users are never removed"),
    (("tokens", "delete", "t-000000000000"), "apportion tokens revoke ID"),
])
def test_removing_a_user_or_token_says_what_to_do_instead(
        server: Server, args: tuple[str, ...], said: str) -> None:
    """``users remove``/``delete``/``disable`` (no such commands: users are kept) is a usage
    error (exit 2) that says how to take a user's access away instead (revoke the tokens,
    take them out of the budgets, cancel their work), and ``tokens delete`` names ``tokens
    revoke``, not click's bare ``No such command``; nothing is changed."""
    before = run_json(server, "root", "users", "list")
    r = run(server, "root", *args)
    assert r.exit_code == 2, r.output
    assert f"Error: No such command '{args[1]}': " in r.stderr and said in r.stderr, r.stderr
    if args[0] == "users":
        for step in ("apportion tokens revoke", "apportion budgets members",
                     "apportion cancel --user"):
            assert step in r.stderr
    assert run_json(server, "root", "users", "list") == before


@pytest.mark.parametrize("word", ["delete", "remove", "rm", "close"])
def test_removing_a_budget_says_budgets_are_kept_and_how_to_close_one(
        server: Server, word: str) -> None:
    """``budgets delete|remove|rm|close PATH`` (no such commands: budgets are kept, their
    history feeds the reports) is a usage error (exit 2) that says so and names the real
    commands that close one (members and managers emptied, the least weight, cancel its
    work), not click's bare ``No such command``; the tree is unchanged."""
    before = run_json(server, "root", "budgets", "tree")
    r = run(server, "root", "budgets", word, "ai/llm")
    assert r.exit_code == 2, r.output
    assert f"Error: No such command '{word}': budgets are never removed" in r.stderr, r.stderr
    for step in ("apportion budgets members PATH", "apportion budgets managers PATH",
                 "apportion budgets set PATH 0.000001", "apportion cancel --budget PATH"):
        assert step in r.stderr, r.stderr
    assert run_json(server, "root", "budgets", "tree") == before


@pytest.mark.parametrize(("word", "said"), [
    ("resume", "apportion hosts repair NAME"), ("undrain", "apportion hosts repair NAME"),
    ("down", "apportion hosts drain NAME"), ("offline", "apportion hosts drain NAME"),
])
def test_slurms_words_for_a_hosts_state_name_drain_or_repair(
        server: Server, word: str, said: str) -> None:
    """``hosts resume h1`` (Slurm's ``state=resume``, ``undrain``) is a usage error (exit
    2) naming ``hosts repair NAME``, and ``hosts down``/``offline`` one naming ``hosts drain
    NAME``, not click's bare ``No such command``; the host is unchanged."""
    before = run_json(server, "root", "hosts", "list")
    r = run(server, "root", "hosts", word, "h1")
    assert r.exit_code == 2, r.output
    assert f"Error: No such command '{word}': {said}" in r.stderr, r.stderr
    assert run_json(server, "root", "hosts", "list") == before


def test_each_kind_of_failure_has_its_own_documented_exit_code(server: Server) -> None:
    """One exit code per kind of failure (docs/cli.md, "Exit codes"), whatever the command:
    404 -> 44, 403 and 401 -> 43, 409 -> 49 (also the logs of work not started yet, which
    is no missing workload), the server's 422 and the CLI's own checks -> 2, a server that
    cannot be reached -> 50 (they all exited 1)."""
    assert run(server, "root", "show", "999999").exit_code == 44
    assert run(server, "alice", "hosts", "drain", "h1").exit_code == 43
    assert run(server, "alice", "queue", "--token", "bogus").exit_code == 43
    assert run(server, "root", "users", "add", "alice").exit_code == 49
    assert run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "99",
               "--min-runtime", "0", "--", "true").exit_code == 2
    assert run(server, "root", "report", "usage", "--from", "2026-12-06",
               "--to", "2026-12-06").exit_code == 2
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert run(server, "alice", "queue", "--url", unreachable).exit_code == 50
    first = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1",
                "--min-runtime", "0", "--", "sleep", "600").stdout.split()[1]
    held = run(server, "alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
               "0", "--dependency", f"afterok:{first}", "--", "true").stdout.split()[1]
    logs = run(server, "alice", "logs", held)
    assert (logs.exit_code, logs.stderr) == (
        49, f"Error: workload {held}: has not started yet, no logs (HTTP 409)\n")
    assert run(server, "alice", "logs", "999999").exit_code == 44
    assert run(server, "alice", "cancel", first, held).exit_code == 0


def test_submit_wait_json_prints_only_the_final_workload_on_stdout(server: Server) -> None:
    """``submit --wait --json``: stdout is exactly one JSON document, the workload once it
    ended (status, exit_code, attempts), and the changes of state are on stderr (stdout
    held the pending workload followed by the progress lines, which no parser reads)."""
    r = run(server, "alice", "submit", "--wait", "--json", "--budget", "ai/llm", "--gpus", "1",
            "--min-runtime", "0", "--", "sh", "-c", "exit 3")
    assert r.exit_code == 3, r.output
    w = json.loads(r.stdout)
    assert (w["status"], w["exit_code"], len(w["attempts"])) == ("failed", 3, 1)
    assert f"{w['id']}: failed" in r.stderr


def test_audit_shows_a_times_old_or_new_value_as_a_time_not_epoch_seconds(
        server: Server) -> None:
    """``audit``'s NEW column gives a token's ``expires_at`` as every time is shown (date,
    time and offset, this machine's zone), not as the epoch seconds the API answers; the
    JSON answer keeps the number."""
    assert run(server, "root", "tokens", "create", "alice", "--expires", "1d").exit_code == 0
    [entry] = [a for a in run_json(server, "root", "audit", "--action", "token.create",
                                   "--target", "alice")
               if a["new"].get("expires_at")]
    expires = entry["new"]["expires_at"]
    assert isinstance(expires, float | int)
    r = run(server, "root", "audit", "--action", "token.create", "--target", "alice")
    assert r.exit_code == 0, r.output
    assert f'"expires_at": "{fmt_time(expires)}"' in r.output, r.output
    assert str(int(expires)) not in r.output
