"""End to end, the submission vocabulary and the queue views: a real ``apportion serve``
with the local executor (real workload processes), driven through the ``apportion``
commands as separate processes. Arrays with a throttle, dependency chains, time limits,
``submit --wait``, ``logs -f``, batch scripts, short ids and many-id cancels, and a
terminal (tmux) showing ``queue --watch`` and ``submit --wait``. Polls with deadlines
(bounding hangs only); nothing asserts durations."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from e2e_helpers import DEADLINE_S, Live, checkpointing, live_server, q, until_sigterm
from store_db import BACKENDS

LiveFactory = Callable[..., Live]


@pytest.fixture(params=BACKENDS)
def live(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveFactory]:
    """``live(hosts)`` starts a server on this test's database (SQLite or PostgreSQL)."""
    with ExitStack() as stack:

        def start(hosts: dict[str, int]) -> Live:
            return stack.enter_context(live_server(request.param, tmp_path, hosts))

        yield start


@pytest.fixture
def live_sqlite(tmp_path: Path) -> Iterator[LiveFactory]:
    """As ``live``, on SQLite only (for tests about the client, not the store)."""
    with ExitStack() as stack:

        def start(hosts: dict[str, int]) -> Live:
            return stack.enter_context(live_server("sqlite", tmp_path, hosts))

        yield start


def cli_env(s: Live, who: str) -> dict[str, str]:
    return {**os.environ, "APPORTION_URL": s.server.url, "APPORTION_TOKEN": s.tokens[who],
            "APPORTION_CLIENT_CONFIG": "/dev/null"}


def submitted_id(stdout: str) -> str:
    """The id in ``submitted w-000001 to ...``."""
    return stdout.split()[1]


def test_array_throttle_never_runs_more_than_its_limit(live: LiveFactory,
                                                        tmp_path: Path) -> None:
    """``--array 0-5%2``: six workloads, one per index, each seeing its own
    APPORTION_ARRAY_INDEX and the array's APPORTION_ARRAY_ID; sampled every 50 ms while the
    array runs, never more than 2 of its elements run at once (and 2 do, on a host with
    room for all six), and every element completes."""
    s = live({"h0": 8})
    out = tmp_path / "seen"
    out.mkdir()
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--array", "0-5%2", "--", "bash", "-c",
              f'echo "$APPORTION_ARRAY_ID" > {q(out)}/"$APPORTION_ARRAY_INDEX"; sleep 1')
    assert r.returncode == 0, r.stderr
    assert "array" in r.stdout and "6 workloads" in r.stdout, r.stdout
    array = submitted_id(r.stdout.replace("array ", ""))
    peak = 0
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = s.ok("GET", f"/v1/workloads?array={array}&status=all")
        running = sum(1 for w in rows if w["status"] in ("running", "stopping"))
        peak = max(peak, running)
        if len(rows) == 6 and all(w["status"] == "completed" for w in rows):
            break
        assert not any(w["status"] in ("failed", "cancelled", "lost") for w in rows), rows
        assert time.monotonic() < deadline, f"array did not finish: {rows}"
        time.sleep(0.05)
    assert peak == 2
    assert sorted(p.name for p in out.iterdir()) == [str(i) for i in range(6)]
    assert {p.read_text().strip() for p in out.iterdir()} == {array}
    assert [w["array_index"] for w in rows] == list(range(6))
    assert {w["array_id"] for w in rows} == {array}


def test_dependency_chain_ends_when_the_first_fails(live: LiveFactory) -> None:
    """A fails (exit 3); B (afterok:A) and C (afterok:B) never run and end cancelled with
    the reason; D (afternotok:A) runs and completes. Ids are given short (``5``)."""
    s = live({"h0": 4})
    a = s.submit("alice", "ai/llm", 1, "1s", "sleep 0.5; exit 3")
    short = str(int(a.removeprefix("w-")))

    def dep(spec: str) -> str:
        r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
                  "1s", "--dependency", spec, "--", "bash", "-c", "echo ran")
        assert r.returncode == 0, r.stderr
        return submitted_id(r.stdout)

    b = dep(f"afterok:{short}")
    c = dep(f"afterok:{b}")
    d = dep(f"afternotok:{a}")
    assert s.wait_status(a, "failed", "completed")["exit_code"] == 3
    wb = s.wait_status(b, "cancelled", "completed", "failed")
    wc = s.wait_status(c, "cancelled", "completed", "failed")
    wd = s.wait_status(d, "completed", "failed", "cancelled")
    assert (wb["status"], wb["end_reason"]) == ("cancelled", f"dependency {a} failed (afterok)")
    assert (wc["status"], wc["end_reason"]) == ("cancelled",
                                                f"dependency {b} cancelled (afterok)")
    assert wb["attempts"] == [] and wc["attempts"] == []
    assert wd["status"] == "completed" and s.log(d, 1) == "ran\n"


def test_time_limit_sends_sigterm_and_ends_as_timeout(live: LiveFactory,
                                                      tmp_path: Path) -> None:
    """A workload with ``--time 2s`` that would run a minute receives SIGTERM once its
    limit has passed (its trap writes a marker) and ends as ``timeout``, with the limit in
    the reason, after running no less than the limit."""
    s = live({"h0": 2})
    ready, marker = tmp_path / "ready", tmp_path / "sigterm"
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--time", "2s", "--", "bash", "-c", until_sigterm(ready, marker))
    assert r.returncode == 0, r.stderr
    assert "time limit 2 s" in r.stdout
    wid = submitted_id(r.stdout)
    assert s.wait_file(marker) == "SIGTERM attempt 1\n"
    w = s.wait_status(wid, "timeout", "completed", "failed", "preempted")
    assert w["status"] == "timeout", w
    [a] = w["attempts"]
    assert a["end_reason"] == "timeout: reached its time limit of 2 s"
    assert a["ended_at"] - a["started_at"] >= 2.0


def test_time_limit_over_the_cap_is_refused_in_human_units(live_sqlite: LiveFactory) -> None:
    """Without a cap any limit is taken; a limit shorter than the minimum runtime is refused
    naming the flag as typed and both durations in human units."""
    s = live_sqlite({"h0": 2})
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1h",
              "--time", "30m", "--", "true")
    assert r.returncode == 2
    assert "--time: 30 min is shorter than its minimum runtime of 1 h" in r.stderr, r.stderr


def test_submit_wait_exits_with_the_workloads_exit_code(live_sqlite: LiveFactory,
                                                        tmp_path: Path) -> None:
    """``submit --wait`` blocks until the workload ends, printing its state changes, and
    exits with its exit code: 7 for ``exit 7``, 0 for a success. The first workload exits
    only once ``--wait`` has printed it running (a fixed ``sleep 0.5`` could end between
    two of its polls, 0.5 s apart, on a loaded machine: no running line to see)."""
    s = live_sqlite({"h0": 2})
    go, out, err = tmp_path / "go", tmp_path / "wait.out", tmp_path / "wait.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "apportion.cli.main", "submit", "--budget", "ai/llm",
             "--gpus", "1", "--min-runtime", "1s", "--wait", "--", "bash", "-c",
             f"while [ ! -e {q(go)} ]; do sleep 0.05; done; exit 7"],
            env={**cli_env(s, "alice"), "TMPDIR": str(s.tmp)}, stdout=stdout, stderr=stderr)

    def shown_running() -> bool:  # or ended, saying why not
        return " running on " in out.read_text() or waiting.poll() is not None

    try:
        s.wait("submit --wait to show the workload running", shown_running)
        go.touch()
        assert waiting.wait(timeout=DEADLINE_S) == 7, (out.read_text(), err.read_text())
    finally:
        go.touch()  # the workload ends even if an assertion failed before
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    wid = submitted_id(out.read_text())
    lines = out.read_text().splitlines()
    assert f"{wid}: running on h0:1 (attempt 1)" in lines, lines
    assert lines[-1] == f"{wid}: failed (exited 7)"
    ok = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
               "--wait", "--", "true")
    assert ok.returncode == 0, ok.stdout
    assert ok.stdout.splitlines()[-1].endswith(": completed (exited 0)")


def test_logs_follow_streams_lines_as_they_are_written(live_sqlite: LiveFactory,
                                                       tmp_path: Path) -> None:
    """``logs -f`` prints a line the workload wrote while it still runs (the workload waits
    for a file the test creates only after reading that line), then the next one, and
    returns once the workload has ended."""
    s = live_sqlite({"h0": 2})
    go = tmp_path / "go"
    wid = s.submit("alice", "ai/llm", 1, "1s",
                   f"echo first; while [ ! -e {q(go)} ]; do sleep 0.1; done; echo second")
    s.wait_status(wid, "running")
    follow = subprocess.Popen(
        [sys.executable, "-m", "apportion.cli.main", "logs", "-f", wid.removeprefix("w-")],
        env=cli_env(s, "alice"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "first\n"
        assert s.workload(wid)["status"] == "running"  # the line came before the end
        go.touch()
        assert follow.stdout.readline() == "second\n"
        assert follow.wait(timeout=DEADLINE_S) == 0
        assert follow.stdout.read() == ""
    finally:
        follow.kill()
        follow.wait()
    assert s.workload(wid)["status"] == "completed"


def test_logs_follow_prints_a_character_written_in_two_halves_whole(
        live_sqlite: LiveFactory, tmp_path: Path) -> None:
    """``logs -f`` on a workload that writes "caf" and the first byte of "é", then (once the
    test has read those four bytes) the second byte and a newline, prints "café\\n" byte for
    byte (the halves, decoded apart, were printed as two U+FFFD)."""
    s = live_sqlite({"h0": 2})
    go = tmp_path / "go"
    wid = s.submit("alice", "ai/llm", 1, "1s",
                   f"printf 'caf\\303'; while [ ! -e {q(go)} ]; do sleep 0.1; done; "
                   "printf '\\251\\n'")
    s.wait_status(wid, "running")
    follow = subprocess.Popen(
        [sys.executable, "-m", "apportion.cli.main", "logs", "-f", wid.removeprefix("w-")],
        env=cli_env(s, "alice"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert follow.stdout is not None
        assert follow.stdout.read(4) == b"caf\xc3"
        go.touch()
        assert follow.wait(timeout=DEADLINE_S) == 0
        assert follow.stdout.read() == b"\xa9\n"
    finally:
        go.touch()  # the workload ends even if an assertion failed before
        follow.kill()
        follow.wait()


def test_logs_follow_goes_on_from_the_start_of_a_log_the_job_truncated(
        live_sqlite: LiveFactory, tmp_path: Path) -> None:
    """``logs -f`` on a workload that writes a line, then (once the test has read it)
    truncates its log to nothing (``truncate -s 0``) and writes "after": "after" is printed
    too, and stderr says ``log truncated: following from its start`` (the output written
    after the truncation was lost, the command exiting 0)."""
    s = live_sqlite({"h0": 2})
    go = tmp_path / "go"
    wid = s.submit("alice", "ai/llm", 1, "1s",
                   f"echo a line written before the truncation; "
                   f"while [ ! -e {q(go)} ]; do sleep 0.1; done; "
                   "truncate -s 0 /proc/self/fd/1; echo after")
    s.wait_status(wid, "running")
    follow = subprocess.Popen(
        [sys.executable, "-m", "apportion.cli.main", "logs", "-f", wid.removeprefix("w-")],
        env=cli_env(s, "alice"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None and follow.stderr is not None
        assert follow.stdout.readline() == "a line written before the truncation\n"
        go.touch()
        assert follow.wait(timeout=DEADLINE_S) == 0
        assert (follow.stdout.read(), follow.stderr.read()) == (
            "after\n", "log truncated: following from its start\n")
    finally:
        go.touch()  # the workload ends even if an assertion failed before
        follow.kill()
        follow.wait()
    assert s.workload(wid)["status"] == "completed"


def test_time_limits_are_read_as_slurm_reads_them(live_sqlite: LiveFactory,
                                                  tmp_path: Path) -> None:
    """``-t 90`` on the command line is 90 minutes, as in a script and in Slurm (it was 90
    seconds); Slurm's days-hours forms are read (``2-12``, ``1-2:30``); ``-t ²`` is refused
    as typed (it was sent as ``²m``, a duration the user never wrote); a bad value from a
    script is refused naming the script line, not a flag that was never typed."""
    s = live_sqlite({"h0": 2})

    def limit(*args: str) -> float:
        r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
                  "1m", *args, "--", "true")
        assert r.returncode == 0, r.stderr
        return float(s.workload(submitted_id(r.stdout))["time_limit"])

    assert limit("-t", "90") == 5400.0
    assert limit("--time", "2-12") == 216000.0
    assert limit("--time", "1-2:30") == 95400.0
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1m",
              "-t", "²", "--", "true")  # a superscript two is no number of minutes
    assert r.returncode == 2 and "Error: --time ²: must be a duration" in r.stderr, r.stderr
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=soon\n#SBATCH --gres=gpu:h100:1\n"
                      "#APPORTION --budget ai/llm --min-runtime 1m\ntrue\n")
    r = s.cli("alice", "submit", str(script))
    assert r.returncode == 2
    assert "\nError: job.sh:2: #SBATCH --time=soon: must be a duration" in r.stderr, r.stderr
    r = s.cli("alice", "submit", "--time", "1h", str(script))
    assert r.returncode == 2  # --time given: then the kind from --gres is what is refused
    assert r.stderr.startswith("Error: job.sh:3: #SBATCH --gres=gpu:h100:1: unknown GPU kind "
                               "'H100'"), r.stderr


def test_batch_script_runs_with_its_directives(live_sqlite: LiveFactory,
                                               tmp_path: Path) -> None:
    """``apportion submit job.sh ARG``: #APPORTION lines give the budget and minimum
    runtime, #SBATCH lines the name, the GPUs (--gres=gpu:2), the time limit (a bare
    number: minutes), the working directory and the output file (%j: the id); --name on
    the command line wins over --job-name; an unknown #SBATCH option is named with its
    line number on stderr. The script runs with its interpreter and its argument; ``show``
    prints the name and the time limit; ``logs`` says where the output went."""
    s = live_sqlite({"h0": 4})
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=from-script\n"
        "#SBATCH --gres=gpu:2 --time=10\n"
        f"#SBATCH --chdir={work}\n"
        "#SBATCH --output=%j.out\n"
        "#SBATCH --mem=4G\n"
        "#APPORTION --budget ai/llm --min-runtime 30s\n"
        "\n"
        'echo "name=$APPORTION_JOB_NAME gpus=$APPORTION_GPUS arg=$1 shell=$BASH_VERSION"\n'
    )
    r = s.cli("alice", "submit", "--name", "from-cli", str(script), "hello")
    assert r.returncode == 0, r.stderr
    assert "job.sh:6: #SBATCH --mem=4G: ignored (not an option apportion reads)" in r.stderr
    wid = submitted_id(r.stdout)
    w = s.wait_status(wid, "completed", "failed")
    assert w["status"] == "completed", w
    assert (w["name"], w["gpus"], w["time_limit"]) == ("from-cli", 2, 600.0)
    assert w["chdir"] == str(work)
    out = (work / f"{wid}.out").read_text()
    assert out.startswith("name=from-cli gpus=2 arg=hello shell=5"), out
    shown = s.cli("alice", "show", wid).stdout.splitlines()
    assert "name:                from-cli" in shown and "time limit:          10 min" in shown
    # its output went to the file: ``logs`` finds an empty log and says where it went
    for follow in ((), ("-f",)):
        logs = s.cli("alice", "logs", *follow, wid)
        assert (logs.returncode, logs.stdout) == (0, "")
        assert logs.stderr.strip() == (
            f"{wid}: its log is empty: it writes its output to {work}/{wid}.out (--output)")


def test_output_file_keeps_every_attempts_output_of_requeued_work(live_sqlite: LiveFactory,
                                                                   tmp_path: Path) -> None:
    """``--output`` of resumable work preempted and run again: the file holds the first
    attempt's output then the second's (the second attempt truncated it, losing the
    first's, where Slurm appends a requeued job's output); the first attempt starts the
    file afresh, as sbatch truncates a new job's."""
    s = live_sqlite({"h0": 2})
    ready, checkpoint, out = tmp_path / "ready", tmp_path / "checkpoint", tmp_path / "o.out"
    out.write_text("left from an earlier job\n")
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "2", "--min-runtime", "0",
              "--resumable", "--output", str(out), "--", "bash", "-c",
              checkpointing(ready, checkpoint))
    assert r.returncode == 0, r.stderr
    wid = submitted_id(r.stdout)
    s.wait_file(ready)
    s.submit("bob", "ai/vision", 2, "1m", "true")  # preempts it: it is requeued
    w = s.wait_status(wid, "completed", "failed", "preempted")
    assert (w["status"], w["attempts_count"]) == ("completed", 2), w
    step = checkpoint.read_text().strip()
    assert out.read_text() == (f"attempt=1\ncheckpoint at step {step}\n"
                               f"attempt=2\nresumed from step {step}\n")


def test_error_file_holds_stderr_and_logs_says_where_it_went(live_sqlite: LiveFactory,
                                                             tmp_path: Path) -> None:
    """A batch script with ``#SBATCH --output=logs/%x-%j.out`` and ``--error=logs/%x-%j.err``
    run by the local executor: stdout in the .out file, stderr in the .err file, and
    ``logs`` (with and without ``-f``) finds the log empty and says where both went; with
    ``--error`` alone stdout is in the log, which ``logs`` prints, saying on stderr where
    stderr went; an ``--error`` file whose directory is missing fails the work as such an
    ``--output`` file does (exit 2, the shell's reason in the log, the command not run)."""
    s = live_sqlite({"h0": 2})
    (tmp_path / "logs").mkdir()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --output=logs/%x-%j.out\n"
                      "#SBATCH --error=logs/%x-%j.err\n"
                      "#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\n"
                      "echo out; echo err >&2\n")
    r = s.cli("alice", "submit", "--chdir", str(tmp_path), "--wait", str(script))
    assert r.returncode == 0 and "ignored" not in r.stderr, (r.stdout, r.stderr)
    wid = submitted_id(r.stdout)
    out, err = tmp_path / f"logs/job.sh-{wid}.out", tmp_path / f"logs/job.sh-{wid}.err"
    assert (out.read_text(), err.read_text()) == ("out\n", "err\n")
    for follow in ((), ("-f",)):
        logs = s.cli("alice", "logs", *follow, wid)
        assert (logs.returncode, logs.stdout) == (0, "")
        assert logs.stderr.strip() == (f"{wid}: its log is empty: it writes its output to "
                                       f"{out} (--output), its stderr to {err} (--error)")
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0",
              "--chdir", str(tmp_path), "-e", "%j.err", "--wait", "--", "sh", "-c",
              "echo out; echo err >&2")
    assert r.returncode == 0, r.stderr
    wid = submitted_id(r.stdout)
    assert (tmp_path / f"{wid}.err").read_text() == "err\n"
    for follow in ((), ("-f",)):
        logs = s.cli("alice", "logs", *follow, wid)
        assert (logs.returncode, logs.stdout) == (0, "out\n")
        assert logs.stderr.strip() == f"{wid}: it writes its stderr to {tmp_path}/{wid}.err " \
                                      "(--error)"
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0",
              "--chdir", str(tmp_path), "-e", "missing/%j.err", "--wait", "--", "touch",
              str(tmp_path / "ran"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    wid = submitted_id(r.stdout)
    w = s.workload(wid)
    assert (w["status"], w["exit_code"]) == ("failed", 2), w
    assert f"cannot create {tmp_path}/missing/{wid}.err" in s.log(wid, 1)
    assert not (tmp_path / "ran").exists()


def test_a_scripts_interpreter_sees_the_script_as_argv0_then_its_arguments(
    live_sqlite: LiveFactory, tmp_path: Path
) -> None:
    """A Python script, a sh script and one without ``#!`` (run by /bin/sh) submitted with
    the arguments ``one`` and ``two words``: each sees a path to (a private copy of) itself,
    in the TMPDIR it was given, first, then exactly those arguments, as under sbatch:
    Python's ``sys.argv`` is ``['.../argv.py', 'one', 'two words']`` (it was ``['-c',
    'argv.py', 'one', ...]``), sh's ``$0`` ``.../argv.sh``, ``$1`` ``one``, ``$2`` ``two
    words``."""
    s = live_sqlite({"h0": 2})
    scripts = {
        "argv.py": "#!/usr/bin/python3\nimport json, os, sys\n"
                   "print(json.dumps([sys.argv, os.path.isfile(sys.argv[0])]))\n",
        "argv.sh": '#!/bin/sh\nprintf "%s|%s|%s|%s\\n" "$0" "$#" "$1" "$2"\n',
        "plain": '#APPORTION --gpus 1\nprintf "%s|%s|%s|%s\\n" "$0" "$#" "$1" "$2"\n',
    }
    out = {}
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
                  "--wait", str(tmp_path / name), "one", "two words")
        assert r.returncode == 0, (r.stdout, r.stderr)
        out[name] = s.cli("alice", "logs", submitted_id(r.stdout)).stdout.strip()
    copies = f"{tmp_path}/apportion."  # the test's TMPDIR (e2e_helpers), exported
    (argv, is_file) = json.loads(out["argv.py"])
    assert argv[0].startswith(copies) and argv[0].endswith("/argv.py") and is_file, argv
    assert argv[1:] == ["one", "two words"], out["argv.py"]
    for name in ("argv.sh", "plain"):
        zero, count, first, second = out[name].split("|")
        assert zero.startswith(copies) and zero.endswith(f"/{name}"), out[name]
        assert (count, first, second) == ("2", "one", "two words"), out[name]


def test_short_ids_and_cancelling_many(live_sqlite: LiveFactory) -> None:
    """``show 5`` finds ``w-000005``; ``cancel`` takes several ids at once (short or long)
    and ``--user`` with ``--state`` cancels the rest; a bad id among them is reported and
    the command fails, the others are cancelled all the same."""
    s = live_sqlite({"h0": 1})
    blocker = s.submit("alice", "ai/llm", 1, "1m", "sleep 60")
    s.wait_status(blocker, "running")
    waiting = [s.submit("alice", "ai/llm", 1, "1s", "true") for _ in range(4)]
    shown = s.cli("alice", "show", waiting[0].removeprefix("w-000"))
    assert shown.returncode == 0 and f"id:                  {waiting[0]}" in shown.stdout
    r = s.cli("alice", "cancel", waiting[0].removeprefix("w-"), waiting[1], "w-999999")
    assert r.returncode == 44
    assert r.stdout.splitlines() == [f"cancelled {waiting[0]}", f"cancelled {waiting[1]}"]
    assert "w-999999: workload w-999999: not found" in r.stderr
    r = s.cli("alice", "cancel", "--user", "alice", "--state", "pending")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"cancelled {waiting[2]}", f"cancelled {waiting[3]}"]
    assert s.workload(blocker)["status"] == "running"
    r = s.cli("alice", "cancel", blocker)
    assert r.returncode == 0 and "cancel requested" in r.stdout
    assert s.wait_status(blocker, "cancelled")["status"] == "cancelled"


# ---- a real terminal ---------------------------------------------------------------------
class Tmux:
    """One tmux server (its own socket) with one window, driven like a user at a terminal."""

    def __init__(self, socket: Path, env: dict[str, str]) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is missing: run scripts/install-system.sh"
        self.base = [tmux, "-S", str(socket)]
        self.env = env
        self.run("new-session", "-d", "-x", "160", "-y", "40", "-s", "t", "bash --norc")
        self.type("PS1='term$ '")  # a prompt the test can tell apart from output

    def run(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def type(self, line: str) -> None:
        self.run("send-keys", "-t", "t", line, "Enter")

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "t")

    def wait_for(self, what: str, ok: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            screen = self.screen()
            if ok(screen):
                return screen
            assert time.monotonic() < deadline, f"screen never showed {what}:\n{screen}"
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True)


def test_terminal_queue_watch_and_submit_wait(live_sqlite: LiveFactory,
                                              tmp_path: Path) -> None:
    """In a tmux terminal: ``queue --watch 0.5`` shows the running workload with its name,
    hosts and protection left, and a pending one at position 1 with its reason; once the
    first is cancelled the refreshed screen shows the second running. Then ``submit --wait``
    prints the state changes and the shell sees its exit code (5); that workload exits only
    once the screen shows it running (a fixed ``sleep 0.5`` could end between two polls of
    ``--wait``, 0.5 s apart, on a loaded machine)."""
    s = live_sqlite({"h0": 2})
    env = cli_env(s, "alice")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    term = Tmux(tmp_path / "tmux.sock", env)
    try:
        exe = shlex.quote(sys.executable)
        first = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "2", "--min-runtime",
                      "1h", "--name", "trainer", "--", "sleep", "120")
        big = submitted_id(first.stdout)
        s.wait_status(big, "running")
        second = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "2",
                       "--min-runtime", "1m", "--name", "evaluator", "--", "sleep", "120")
        small = submitted_id(second.stdout)
        term.type(f"{exe} -m apportion.cli.main queue --watch 0.5")
        screen = term.wait_for("both workloads", lambda t: "evaluator" in t and "trainer" in t
                               and "no capacity" in t)
        assert "every 0.5 s: apportion queue" in screen, screen
        lines = {line.split()[1]: line for line in screen.splitlines()
                 if line.split()[1:2] in ([big], [small])}
        assert re.match(rf"1 +{small} +evaluator +alice +ai/llm +pending +2 +- +- +- +"
                        r"\(no capacity; waited \d+ s\)$", lines[small]), lines[small]
        # running on h0, protected for 1 h from its start: 1 h less its elapsed time left
        # (to the second: 1 h while under half a second has passed)
        assert re.match(rf"- +{big} +trainer +alice +ai/llm +running +2 +\d+ s +"
                        r"(1 h|59 min( \d+ s)?) +- +h0:2$", lines[big]), lines[big]
        s.cli("alice", "cancel", big)
        term.wait_for("the second running", lambda t: any(
            line.split()[1:2] == [small] and "running" in line.split()
            for line in t.splitlines()))
        term.run("send-keys", "-t", "t", "C-c")
        term.wait_for("the prompt back", lambda t: t.rstrip().endswith("term$"))
        s.cli("alice", "cancel", small)
        term.type("clear")
        go = tmp_path / "go"  # the workload exits once --wait has shown it running
        term.type(f"{exe} -m apportion.cli.main submit --budget ai/llm --gpus 1 "
                  f"--min-runtime 1s --wait -- bash -c 'while [ ! -e {go} ]; do sleep 0.05; "
                  "done; exit 5'; echo \"rc=$?\"")
        term.wait_for("the workload running", lambda t: "running on h0:1 (attempt 1)" in t)
        go.touch()
        # the shell's own output line, not the typed command that holds "rc=" too
        screen = term.wait_for("the exit code",
                               lambda t: re.search(r"^rc=\d+$", t, re.M) is not None)
        assert re.search(r"^rc=5$", screen, re.M), screen
        assert "running on h0:1 (attempt 1)" in screen
        assert "failed (exited 5)" in screen
    finally:
        (tmp_path / "go").touch()  # the workload ends even if an assertion failed before
        term.close()


def test_host_constraints_and_gpu_kind(live_sqlite: LiveFactory) -> None:
    """``--exclude h0`` runs on h1 and ``--nodelist h0`` on h0 (though best fit would pick
    otherwise for one of them); an unknown host, flags that leave no host and a GPU kind the
    hosts do not have (they are all of the default kind, gpu) are refused naming the flags."""
    s = live_sqlite({"h0": 2, "h1": 2})
    placed = {}
    for flag, host in (("--exclude", "h0"), ("--nodelist", "h0")):
        r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime",
                  "1s", flag, host, "--wait", "--", "true")
        assert r.returncode == 0, (r.stdout, r.stderr)
        wid = submitted_id(r.stdout)
        placed[flag] = s.workload(wid)["attempts"][0]["placement"][0][0]
    assert placed == {"--exclude": "h1", "--nodelist": "h0"}
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--nodelist", "h9", "--", "true")
    assert r.returncode == 2 and "--nodelist: unknown host 'h9'" in r.stderr
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--nodelist", "h0", "--exclude", "h0", "--", "true")
    assert r.returncode == 2
    assert "--nodelist/--exclude: leave no host to run on" in r.stderr
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--gpu-kind", "h100", "--", "true")
    assert r.returncode == 2
    assert "--gpu-kind: unknown GPU kind 'h100' (the fleet has gpu)" in r.stderr


def test_order_and_queue_filters(live_sqlite: LiveFactory) -> None:
    """``order`` lists the tree in Fair Tree order: after ai/llm used GPUs, its sibling
    ai/vision (ratio 0) ranks first under ai. ``queue --me`` shows only the caller's work
    and ``--state`` only the states asked for."""
    s = live_sqlite({"h0": 2})
    used = s.submit("alice", "ai/llm", 2, "1s", "sleep 1")
    s.wait_status(used, "completed")
    r = s.cli("alice", "order", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(b["path"], b["rank"], b["depth"]) for b in rows] == [
        ("ai", 1, 0), ("ai/vision", 1, 1), ("ai/llm", 2, 1)]
    assert rows[2]["usage_ratio"] > 0 == rows[1]["usage_ratio"]
    text = s.cli("alice", "order").stdout.splitlines()
    assert [line.split()[:2] for line in text[1:]] == [["ai", "1"], ["vision", "1"],
                                                       ["llm", "2"]]
    mine = s.submit("alice", "ai/llm", 2, "1m", "sleep 60")
    s.wait_status(mine, "running")
    theirs = s.submit("bob", "ai/vision", 1, "1m", "sleep 60")
    r = s.cli("bob", "queue", "--me", "--json")
    [entry] = json.loads(r.stdout)
    assert (entry["id"], entry["status"], entry["position"], entry["wait_reason"]) == (
        theirs, "pending", 1, "no_capacity")
    r = s.cli("bob", "queue", "--state", "running", "--json")
    [entry] = json.loads(r.stdout)
    assert (entry["id"], entry["hosts"], entry["elapsed_s"] >= 0) == (mine, ["h0:2"], True)
    assert 0 < entry["protected_s"] <= 60
    r = s.cli("bob", "queue", "--state", "done")
    assert r.returncode == 2 and "--state: 'done': must be pending, running or stopping" in (
        r.stderr)
    s.cli("root", "cancel", mine, theirs)


def test_cancel_a_whole_array_or_one_element(live_sqlite: LiveFactory) -> None:
    """``cancel ID`` of one element leaves the others; ``cancel --array ID`` (short) cancels
    every element still active, the pending ones first (so the GPUs of the running one, once
    stopped, cannot start an element the same command cancels), then the running one."""
    s = live_sqlite({"h0": 1})
    r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1", "--min-runtime", "1s",
              "--array", "0-3", "--", "sleep", "60")
    assert r.returncode == 0, r.stderr
    rows = s.ok("GET", "/v1/workloads?status=all")
    ids = [w["id"] for w in rows]
    assert len(ids) == 4
    s.wait_status(ids[0], "running")
    one = s.cli("alice", "cancel", ids[3])
    assert one.stdout.splitlines() == [f"cancelled {ids[3]}"]
    rest = s.cli("alice", "cancel", "--array", ids[0].removeprefix("w-"))
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.splitlines() == [
        f"cancelled {ids[1]}", f"cancelled {ids[2]}",
        f"cancel requested for {ids[0]} (running); the scheduler stops it"]
    for wid in ids:
        assert s.wait_status(wid, "cancelled", "completed", "failed")["status"] == "cancelled"


def test_work_runs_with_the_umask_it_was_submitted_under(live_sqlite: LiveFactory,
                                                         tmp_path: Path) -> None:
    """``apportion submit`` from a shell with umask 077 runs the work with 077 (as sbatch
    carries it), so the file it writes is its owner's alone; from a shell with 022, 022.
    The server itself runs with 077 either way."""
    s = live_sqlite({"h0": 2})
    modes = {}
    for mask in (0o077, 0o022):
        out = tmp_path / f"out-{mask:03o}"
        old = os.umask(mask)  # the submitting shell's, inherited by the CLI process
        try:
            r = s.cli("alice", "submit", "--budget", "ai/llm", "--gpus", "1",
                      "--min-runtime", "1s", "--", "bash", "-c", f"umask > {q(out)}")
        finally:
            os.umask(old)
        assert r.returncode == 0, r.stderr
        s.wait_status(submitted_id(r.stdout), "completed")
        modes[mask] = (out.read_text().strip(), out.stat().st_mode & 0o777)
    assert modes == {0o077: ("0077", 0o600), 0o022: ("0022", 0o644)}
