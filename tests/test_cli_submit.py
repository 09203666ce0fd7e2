"""``apportion submit`` refusing what it is given before anything is sent: each refusal a
usage error naming the flag as typed, the argument, or the script's file and line, never a
traceback nor a request the server would read otherwise than the user meant."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import click
import pytest
from click.testing import CliRunner, Result

from apportion.cli.client import Client
from apportion.cli.jobs import (
    _APPORTION_OPTS,
    _ERROR_FILLS,
    _OUTPUT_FILL,
    _OUTPUT_FILLS,
    _with_output,
    error_file,
    looks_like_script,
    output_file,
    read_script,
)
from apportion.cli.jobs import submit as submit_command
from apportion.cli.main import main
from apportion.core.units import parse_duration
from apportion.service.executors.identity import max_arg_strlen

# no server listens there: a submission that got as far as sending would fail otherwise
NO_SERVER = {"APPORTION_URL": "http://127.0.0.1:9", "APPORTION_TOKEN": "t",
             "APPORTION_CLIENT_CONFIG": "/dev/null"}
FLAGS = ("--budget", "ai/llm", "--gpus", "1", "--min-runtime", "0")


@pytest.fixture(autouse=True)
def _no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission that gets as far as sending fails at once, not after a minute of
    retries."""
    monkeypatch.setattr("apportion.cli.client.RETRY_WAITS", ())


def submit(*args: str) -> Result:
    """``apportion submit ARGS``, in-process."""
    return CliRunner().invoke(main, ["submit", *args], env=NO_SERVER, catch_exceptions=False)


@pytest.mark.parametrize("typed", ["90.0", "+90", "1e3", "1.5"])
def test_a_bare_number_for_time_that_is_not_whole_minutes_is_refused_naming_it(
    typed: str,
) -> None:
    """``--time 90.0`` (``+90``, ``1e3``, ``1.5``): a bare number is whole minutes, as in
    Slurm; one written otherwise is a usage error naming the flag and value (it was sent
    as is, and read by the server as that many seconds)."""
    r = submit(*FLAGS, "--time", typed, "--", "true")
    assert r.exit_code == 2
    assert (f"Error: --time {typed}: a bare number is whole minutes, as in Slurm (90); or "
            "write 90s, 1h30m, HH:MM:SS") in r.stderr


def test_a_bare_number_for_time_from_a_script_line_is_refused_naming_the_line(
    tmp_path: Path,
) -> None:
    """``#SBATCH --time=90.0`` or ``#SBATCH -t 1.5`` in a batch script: the refusal names the
    script's file and line, as for any other directive."""
    for n, line in enumerate(("#SBATCH --time=90.0", "#SBATCH -t 1.5")):
        script = tmp_path / f"job{n}.sh"
        script.write_text(f"#!/bin/sh\n{line}\n#APPORTION --budget ai/llm --gpus 1 "
                          "--min-runtime 0\ntrue\n")
        r = submit(str(script))
        assert r.exit_code == 2
        assert (f"Error: job{n}.sh:2: {line}: a bare number is whole minutes, as in Slurm "
                "(90); or write 90s, 1h30m, HH:MM:SS") in r.stderr


def test_a_time_whose_clock_field_is_out_of_range_is_refused_naming_flag_or_line(
    tmp_path: Path,
) -> None:
    """``--time 99:99``, ``-t 1-24:00`` and ``#SBATCH -t 99:99``: a clock form's field after
    the first out of its range is refused naming the flag or the script line, the value as
    typed and the field (it was sent on and read as 6,039 s)."""
    r = submit(*FLAGS, "-t", "99:99", "--", "true")
    assert r.exit_code == 2
    assert ("Error: --time 99:99: '99:99': the seconds, 99, must be under 60"
            in r.stderr)
    r = submit(*FLAGS, "--time", "1-24:00", "--", "true")
    assert "Error: --time 1-24:00: '1-24:00': the hours, 24, must be under 24" in r.stderr
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 99:99\n#APPORTION --budget ai/llm --gpus 1 "
                      "--min-runtime 0\ntrue\n")
    r = submit(str(script))
    assert r.exit_code == 2
    assert "Error: job.sh:2: #SBATCH -t 99:99: '99:99': the seconds, 99" in r.stderr


def test_a_time_that_is_no_duration_is_refused_in_minutes_not_seconds() -> None:
    """``--time soon``: the refusal says a bare number is minutes (the server's own words,
    "or a number of seconds", are the API's and contradicted the CLI)."""
    r = submit(*FLAGS, "--time", "soon", "--", "true")
    assert r.exit_code == 2
    assert ("Error: --time soon: must be a duration like 2h, 1h30m, 1-00:00:00 or HH:MM:SS, "
            "or a whole number of minutes as in Slurm (90)") in r.stderr
    assert "seconds" not in r.stderr


def test_time_unlimited_or_infinite_as_slurm_takes_them_is_sent_as_no_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--time UNLIMITED``, ``-t infinite``, ``#SBATCH --time=UNLIMITED``, ``#SBATCH -t
    INFINITE`` and ``#SBATCH --time=-1`` (Slurm's words for no time limit, any case) are
    sent as ``0``, the API's none, as ``--time 0`` is (they were refused as no
    duration)."""
    monkeypatch.chdir(tmp_path)
    for typed in ("UNLIMITED", "infinite", "0"):
        for flag in ("--time", "-t"):
            sent = sent_body(monkeypatch, *FLAGS, flag, typed, "--", "true")["time_limit"]
            assert parse_duration(sent) == 0  # "0m" for 0, a bare number's minutes
    for n, line in enumerate(("#SBATCH --time=UNLIMITED", "#SBATCH -t INFINITE",
                              "#SBATCH --time=-1", "#SBATCH -t Unlimited")):
        (tmp_path / f"t{n}.sh").write_text(f"#!/bin/sh\n{line}\n#APPORTION --budget ai/llm "
                                           "--gpus 1 --min-runtime 0\ntrue\n")
        assert parse_duration(sent_body(monkeypatch, f"t{n}.sh")["time_limit"]) == 0


def test_a_batch_script_that_is_not_utf8_is_refused_naming_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch script in Latin-1 (``# café`` on line 2) is a usage error naming the file as
    typed and the first line that is not UTF-8 (it was a UnicodeDecodeError traceback)."""
    (tmp_path / "s5.sh").write_bytes(b"#!/bin/bash\n# caf\xe9\n#SBATCH --gres=gpu:1\n"
                                     b"#APPORTION --budget ai/llm --min-runtime 0\necho hi\n")
    monkeypatch.chdir(tmp_path)
    r = submit("s5.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: s5.sh:2: not UTF-8 text: a batch script is sent as text "
                             "(save it as UTF-8)\n")


def test_an_argument_that_is_not_utf8_is_refused_naming_its_place_in_the_command() -> None:
    """``submit ... -- echo $'\\xff'`` (Python has the byte as a lone surrogate) is a usage
    error naming ``command.1`` and showing the byte (it was a UnicodeEncodeError traceback
    from sending it)."""
    r = submit(*FLAGS, "--", "echo", "\udcff")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: command.1: \\xff: not UTF-8 text, which the server "
                             "takes\n")


def test_a_script_whose_file_name_is_not_utf8_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch script named ``caf\\xe9.sh`` (Latin-1) is a usage error naming the file as
    typed (its name was sent and failed with a UnicodeEncodeError traceback)."""
    (tmp_path / "caf\udce9.sh").write_text("#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 "
                                           "--min-runtime 0\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("caf\udce9.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: command.0: caf\\xe9.sh: not UTF-8 text, which the "
                             "server takes\n")


def test_an_option_value_that_is_not_utf8_is_refused_naming_the_flag() -> None:
    """``--name $'caf\\xe9'`` is a usage error naming the flag, not a traceback."""
    r = submit(*FLAGS, "--name", "caf\udce9", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: --name: caf\\xe9: not UTF-8 text, which the server "
                             "takes\n")


@pytest.mark.parametrize(("line", "asks"), [
    ("#SBATCH --begin=2026-12-08T10:00:00", "to start at a later time"),
    ("#SBATCH --begin 2026-12-08T10:00:00", "to start at a later time"),
    ("#SBATCH -b now+1hour", "to start at a later time"),
    ("#SBATCH -bnow+1hour", "to start at a later time"),
    ("#SBATCH --deadline=now+1hour", "to be removed unless it can end by a deadline"),
    ("#SBATCH --hold", "to be held until released"),
    ("#SBATCH -H", "to be held until released"),
    ("#SBATCH --immediate", "to run only if it can start at once"),
    ("#SBATCH --reservation=maint", "to run only in a Slurm reservation's time and nodes"),
    ("#SBATCH --test-only", "not to run at all (sbatch only checks it)"),
])
def test_an_sbatch_line_saying_when_or_whether_the_job_runs_refuses_the_submission(
    tmp_path: Path, line: str, asks: str,
) -> None:
    """``#SBATCH --begin``, ``--deadline``, ``--hold``, ``--immediate``, ``--reservation``
    or ``--test-only`` (long, short, spaced or attached): a usage error naming the file, the
    line as written and what it asks, saying apportion has no start time, before anything
    is sent (they were ignored with a warning and the work ran at once)."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{line}\n#APPORTION --budget ai/llm --gpus 1 "
                      "--min-runtime 0\ntrue\n")
    r = submit(str(script))
    assert r.exit_code == 2, r.output
    assert (f"Error: job.sh:2: {line}: refused: it asks {asks}, and apportion has no start "
            "time, hold or reservation: it starts work as soon as the policy admits it"
            ) in " ".join(r.stderr.split())


def test_sbatch_short_options_with_the_value_attached_are_read_as_the_spaced_forms(
    tmp_path: Path,
) -> None:
    """``#SBATCH -t30``, ``-G2``, ``-Jpyjob``, ``-oout-%j.out`` (as sbatch's getopt reads
    them) give the same options as ``-t 30``, ``-G 2``, ``-J pyjob``, ``-o out-%j.out``,
    each from its line, and nothing is ignored (they were ignored as "not an option
    apportion reads")."""
    attached = tmp_path / "attached.sh"
    attached.write_text("#!/bin/sh\n#SBATCH -t30\n#SBATCH -G2\n#SBATCH -Jpyjob\n"
                        "#SBATCH -oout-%j.out\ntrue\n")
    spaced = tmp_path / "spaced.sh"
    spaced.write_text("#!/bin/sh\n#SBATCH -t 30\n#SBATCH -G 2\n#SBATCH -J pyjob\n"
                      "#SBATCH -o out-%j.out\ntrue\n")
    got, want = read_script(str(attached), []), read_script(str(spaced), [])
    assert got.ignored == []
    assert got.options == want.options == {"time_limit": "30", "gpus": "2", "name": "pyjob",
                                           "output": "out-%j.out"}
    assert got.origins["time_limit"] == "attached.sh:2: #SBATCH -t30"
    assert got.origins["output"] == "attached.sh:5: #SBATCH -oout-%j.out"


def test_work_stored_with_the_earlier_output_line_is_still_known_to_write_to_its_file() -> None:
    """Work submitted with --output before a requeued attempt appended to the file (its
    stored command holds the earlier shell line) is still found writing to that file, so
    ``logs`` says where its output went."""
    for fill in _OUTPUT_FILLS:
        w = {"id": "w-000007", "command": ["/bin/sh", "-c", fill, "sh", "/x/%j.out", "true"]}
        assert output_file(w) == "/x/w-000007.out"


def test_the_stored_output_and_error_lines_are_those_earlier_versions_stored() -> None:
    """The shell lines that --output and --error wrap a command in are stored in workloads'
    commands and recognised there by their text (``logs`` and ``show`` find the files from
    them), so they must never change: the SHA-1 of each (no --open-mode, append, truncate;
    and the earliest --output line) is that of the lines stored since --open-mode and
    --error were first read."""
    def sha1(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    assert [sha1(f) for f in _OUTPUT_FILLS] == [
        "d4c0de240d22", "2f36b63bf6a1", "af46f634c4f3", "ee126007df94"]
    assert [sha1(f) for f in _ERROR_FILLS] == ["5371500466bf", "774dadaebbd0", "53fea5d27c97"]


@pytest.mark.parametrize(("open_mode", "out", "err"), [
    (["--open-mode", "truncate"], "out 2\n", "err 2\n"),
    (["--open-mode", "append"], "old\nout 1\nout 2\n", "old\nerr 1\nerr 2\n"),
    ([], "out 1\nout 2\n", "err 1\nerr 2\n"),
])
def test_open_mode_opens_the_error_file_as_the_output_file_on_a_requeue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_mode: list[str], out: str, err: str,
) -> None:
    """With ``--error`` apart from ``--output``, a requeued attempt opens both files as
    ``--open-mode`` says: ``truncate`` starts both afresh (the first attempt's lines
    gone, as under Slurm), ``append`` keeps what was there, and without it the requeued
    attempt appends to what the first wrote; ``error_file`` names the file."""
    monkeypatch.chdir(tmp_path)
    body = sent_body(monkeypatch, *FLAGS, "-o", "o.log", "-e", "e.log", *open_mode, "--",
                     "sh", "-c", 'echo "out $APPORTION_ATTEMPT"; echo "err $APPORTION_ATTEMPT" >&2')
    (tmp_path / "o.log").write_text("old\n")
    (tmp_path / "e.log").write_text("old\n")
    for attempt in (1, 2):
        _run_attempt(body["command"], "w-000001", attempt)
    assert ((tmp_path / "o.log").read_text(), (tmp_path / "e.log").read_text()) == (out, err)
    assert error_file({"id": "w-000001", "command": body["command"]}) == str(tmp_path / "e.log")


def test_a_batch_script_over_the_kernels_limit_on_one_argument_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch script of MAX_ARG_STRLEN bytes (its text is one argument of the command, which
    also holds its NUL) is refused naming the file and its size; one byte less is read (the
    server refused it as ``command.4: ... bytes``, an argument the user never typed)."""
    per = max_arg_strlen()
    head = b"#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\n"
    (tmp_path / "big.sh").write_bytes(head + b"#" * (per - len(head) - 1) + b"\n")
    monkeypatch.chdir(tmp_path)
    r = submit("big.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith(
        f"Error: big.sh: {per} bytes: a batch script may have at most {per - 1} bytes (its "
        "text is passed to its shell as one argument, and the kernel's limit on one is "
        f"{per} bytes with its NUL)\n")
    (tmp_path / "big.sh").write_bytes(head + b"#" * (per - len(head) - 2) + b"\n")
    assert len(read_script("big.sh", []).command[4].encode()) == per - 1


def test_a_bad_export_is_refused_naming_the_script_line_or_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``#SBATCH --export=NONE,NOSUCH`` naming a variable the shell has not set is refused
    naming the script's file and line, as the other directives' errors do (it said
    "Invalid value for --export", a flag that was never typed); on the command line it
    names ``--export``."""
    monkeypatch.delenv("NOSUCH", raising=False)
    (tmp_path / "ex.sh").write_text("#!/bin/sh\n#SBATCH --export=NONE,NOSUCH\n#APPORTION "
                                    "--budget ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("ex.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: ex.sh:2: #SBATCH --export=NONE,NOSUCH: NOSUCH: not set "
                             "in your environment\n")
    r = submit(*FLAGS, "--export", "NONE,NOSUCH", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: --export: NOSUCH: not set in your environment\n")


def test_output_percent_a_outside_an_array_is_refused_naming_the_flag() -> None:
    """``-o 'na-%A_%a.out'`` on work that is not an array is a usage error naming the flag:
    %a is an index it does not have (the file was ``na-_.out``)."""
    r = submit(*FLAGS, "-o", "na-%A_%a.out", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: --output: %a is the index in an array, and it is not "
                             "one: give --array, or %j for its id\n")


@pytest.mark.parametrize(("array_env", "written"), [
    ({}, "na-w-000005.out"),
    ({"APPORTION_ARRAY_ID": "w-000003", "APPORTION_ARRAY_INDEX": "2"}, "na-w-000003.out"),
])
def test_output_percent_capital_a_is_the_arrays_id_else_the_workloads_own(
    tmp_path: Path, array_env: dict[str, str], written: str,
) -> None:
    """%A in --output's file name is the array's id, or for work that is not an array its
    own id, as Slurm's %A is the job id outside an array (it was empty: ``na-.out``);
    ``output_file`` (what ``logs`` names) agrees with what the shell line writes."""
    command = _with_output(["echo", "hi"], str(tmp_path / "na-%A.out"))
    env = {"PATH": "/usr/bin:/bin", "APPORTION_WORKLOAD_ID": "w-000005",
           "APPORTION_ATTEMPT": "1", **array_env}
    subprocess.run(command, env=env, check=True, timeout=30)
    assert [p.name for p in tmp_path.iterdir()] == [written]
    assert (tmp_path / written).read_text() == "hi\n"
    w = {"id": "w-000005", "command": command, "array_id": array_env.get("APPORTION_ARRAY_ID")}
    assert output_file(w) == str(tmp_path / written)


def _run_attempt(command: list[str], wid: str, attempt: int) -> None:
    """Run ``command`` as attempt ``attempt`` of workload ``wid`` runs it (the variables
    the executors set that the --output line reads)."""
    env = {"PATH": "/usr/bin:/bin", "APPORTION_WORKLOAD_ID": wid,
           "APPORTION_ATTEMPT": str(attempt)}
    subprocess.run(command, env=env, check=True, timeout=30)


@pytest.mark.parametrize(("open_mode", "kept"), [
    # append: every attempt of every workload appends
    (["--open-mode", "append"], "one 1\none 2\ntwo 1\ntwo 2\n"),
    (["--open-mode=A"], "one 1\none 2\ntwo 1\ntwo 2\n"),  # sbatch reads the first letter
    # truncate: every attempt starts the file afresh, a requeued one too, as Slurm
    # (slurmstepd opens it O_TRUNC whatever the restart count)
    (["--open-mode", "truncate"], "two 2\n"),
    (["--open-mode=T"], "two 2\n"),
    # without it: each workload's first attempt starts the file afresh, a requeued attempt
    # appends to it (apportion's default: no attempt's output is lost)
    ([], "two 1\ntwo 2\n"),
])
def test_open_mode_append_keeps_what_earlier_work_wrote_to_the_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_mode: list[str], kept: str,
) -> None:
    """Two workloads (a --dependency chain) with one ``--output`` file, each run twice (a
    requeue): with ``--open-mode append`` (on the command line, or as a script's ``#SBATCH
    --open-mode=append``) the file keeps every attempt's output of both (the second
    workload's first attempt truncated it); with ``truncate`` every attempt starts it
    afresh, the requeued one too, as Slurm does (it appended, keeping the first attempt's
    lines); without the option, the second workload's first attempt starts it afresh and
    its requeued attempt appends. ``output_file`` (what ``logs`` names) knows each line."""
    monkeypatch.chdir(tmp_path)
    body = sent_body(monkeypatch, *FLAGS, "-o", "chain.log", *open_mode, "--", "sh", "-c",
                     'echo "$0 $APPORTION_ATTEMPT"')
    script = tmp_path / "s.sh"
    lines = "".join(f"#SBATCH {' '.join(open_mode)}\n" for _ in open_mode[:1])
    script.write_text(f"#!/bin/sh\n#SBATCH -o chain.log\n{lines}#APPORTION --budget ai/llm "
                      '--gpus 1 --min-runtime 0\necho "$1 $APPORTION_ATTEMPT"\n')
    from_script = sent_body(monkeypatch, "s.sh")
    for command in (body["command"], from_script["command"]):
        (tmp_path / "chain.log").write_text("")
        for wid, word in (("w-000001", "one"), ("w-000002", "two")):
            for attempt in (1, 2):
                _run_attempt([*command, word], wid, attempt)
        assert (tmp_path / "chain.log").read_text() == kept
        assert output_file({"id": "w-000002", "command": command}) == str(tmp_path / "chain.log")


@pytest.mark.parametrize("typed", ["", "x=1", "overwrite"])
def test_an_open_mode_that_is_neither_append_nor_truncate_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str,
) -> None:
    """``--open-mode overwrite`` (or a script's ``#SBATCH --open-mode=overwrite``) is a
    usage error naming the flag or the line, as sbatch refuses it; ``--open-mode`` without
    ``--output`` is said on stderr to have no effect, and the submission goes ahead."""
    monkeypatch.chdir(tmp_path)
    if typed:
        r = submit(*FLAGS, "-o", "x.log", "--open-mode", typed, "--", "true")
        assert r.exit_code == 2
        assert r.stderr.endswith(f"Error: --open-mode {typed}: must be append or truncate\n")
    (tmp_path / "o.sh").write_text(f"#!/bin/sh\n#SBATCH --open-mode={typed}\n#SBATCH -o x.log"
                                   "\n#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\n"
                                   "true\n")
    r = submit("o.sh")
    assert r.exit_code == 2
    why = "must be append or truncate" if typed else "needs a value"  # sbatch: refused too
    assert r.stderr.endswith(f"Error: o.sh:2: #SBATCH --open-mode={typed}: {why}\n")
    r = submit(*FLAGS, "--open-mode", "append", "--", "true")
    assert ("warning: --open-mode: no effect without --output or --error (the output goes "
            "to the attempt's own log)\n") in r.stderr


@pytest.mark.parametrize("typed", ["résumé", "my job", "x" * 129])
def test_a_name_the_api_does_not_take_is_refused_in_words_naming_the_flag(typed: str) -> None:
    """``-J résumé``, a name with a space, or one over 128 characters is a usage error
    saying in words what a name may hold (it was the server's raw pattern, "String should
    match pattern '^[A-Za-z0-9._+-]+$'")."""
    r = submit(*FLAGS, "-J", typed, "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith(f"Error: --name: only letters A-Z a-z, digits and . _ + -, at "
                             f"most 128 of them (got {typed!r})\n")


def test_a_name_from_a_script_line_the_api_does_not_take_is_refused_naming_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``#SBATCH -J 'my job'``: the refusal names the script's file and line."""
    (tmp_path / "n.sh").write_text("#!/bin/sh\n#SBATCH -J 'my job'\n#APPORTION --budget "
                                   "ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("n.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: n.sh:2: #SBATCH -J my job: only letters A-Z a-z, digits "
                             "and . _ + -, at most 128 of them (got 'my job')\n")


def sent_body(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    """The body ``apportion submit ARGS`` sends (the request is caught, never made)."""
    sent: list[dict[str, Any]] = []

    def caught(self: Client, method: str, path: str, body: Any = None,
               **kw: Any) -> NoReturn:
        sent.append(body)
        raise click.ClickException("caught")

    monkeypatch.setattr(Client, "json", caught)
    r = submit(*args)
    assert (r.exit_code, r.stderr) == (1, "Error: caught\n")
    return sent[0]


def test_slurm_host_lists_in_nodelist_and_exclude_are_sent_as_host_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-w gpu[2,4]`` and ``#SBATCH -x gpu[1-3],cpu7`` (Slurm host lists, as sbatch takes
    them) are sent as the host names they stand for; a comma inside brackets does not split
    (it sent ``gpu[2`` and ``4]``, refused as unknown hosts), and ``h1, h2`` still means h1
    and h2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.sh").write_text("#!/bin/sh\n#SBATCH -x gpu[1-3],cpu7\n#APPORTION "
                                   "--budget ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    body = sent_body(monkeypatch, "-wgpu[2,4]", "x.sh")
    assert (body["nodelist"], body["exclude"]) == (["gpu2", "gpu4"],
                                                   ["gpu1", "gpu2", "gpu3", "cpu7"])
    body = sent_body(monkeypatch, *FLAGS, "--nodelist", "h1, h2", "--", "true")
    assert body["nodelist"] == ["h1", "h2"]


def test_a_host_list_that_is_not_one_is_refused_naming_the_flag_or_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-x 'gpu[3-1]'`` or ``#SBATCH -w gpu[1-`` is a usage error naming the flag or the
    script's line and why, before anything is sent."""
    r = submit(*FLAGS, "-x", "gpu[3-1]", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: --exclude: not a Slurm host list: 'gpu[3-1]' "
                             "(start > stop)\n")
    (tmp_path / "w.sh").write_text("#!/bin/sh\n#SBATCH -w gpu[1-\n#APPORTION --budget "
                                   "ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("w.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: w.sh:2: #SBATCH -w gpu[1-: not a Slurm host list: "
                             "'gpu[1-' (unbalanced brackets)\n")


def test_output_percent_u_is_the_submitters_name_and_a_padding_width_on_an_id_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-o slurm-%u-%5j-%3A-%%u.out``: %u is sent as the submitter's user name (as sbatch
    fills it), the zero-padding width of %5j and %3A is dropped (apportion's ids are no
    numbers: w-000056, padded already), and %%u stays a literal %u (they were left in the
    file name as typed)."""
    monkeypatch.chdir(tmp_path)
    me = pwd.getpwuid(os.getuid()).pw_name
    body = sent_body(monkeypatch, *FLAGS, "-o", "slurm-%u-%5j-%3A-%%u.out", "--", "true")
    assert body["command"][4] == f"{tmp_path}/slurm-{me}-%j-%A-%%u.out"


@pytest.mark.parametrize(("env", "name"), [
    ({"LOGNAME": "ldapuser", "USER": "other"}, "ldapuser"),
    ({"LOGNAME": "", "USER": "ldapuser"}, "ldapuser"),
    ({"LOGNAME": "", "USER": ""}, str(os.getuid())),
])
def test_output_percent_u_without_a_password_entry_is_the_login_name_else_the_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str,
) -> None:
    """``-o o-%u.out`` by a user the password database has no entry for (an LDAP or SSSD
    account whose lookup fails, a uid with no entry: ``pwd.getpwuid`` raises KeyError) is
    sent with %u as the login name of the environment (LOGNAME, else USER), else the uid as
    a number, for the command line's flag and a script's line alike (it was a KeyError
    traceback)."""
    def no_entry(uid: int) -> NoReturn:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    body = sent_body(monkeypatch, *FLAGS, "-o", "o-%u.out", "--", "true")
    assert body["command"][4] == f"{tmp_path}/o-{name}.out"
    (tmp_path / "u.sh").write_text("#!/bin/sh\n#SBATCH --output=s-%u.out\n#APPORTION --budget "
                                   "ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    body = sent_body(monkeypatch, "u.sh")
    assert body["command"][4] == f"{tmp_path}/s-{name}.out"


@pytest.mark.parametrize(("typed", "error"), [
    ("slurm-%N.out", "%N (the node's name) is not known when the work is submitted; the "
                     "fields apportion fills are %j %x %A %a %u and %%"),
    ("o-%2t.out", "%2t (the task's number) is not known when the work is submitted; the "
                  "fields apportion fills are %j %x %A %a %u and %%"),
    ("o-%3a.out", "%3a: a zero-padded array index is not supported; give %a"),
])
def test_output_fields_apportion_cannot_fill_are_refused_naming_the_flag_or_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str, error: str,
) -> None:
    """An --output field of sbatch's that apportion cannot fill when the work is submitted
    (%N, %2t) or a zero-padded array index (%3a) is a usage error naming the field, and the
    flag or the script's line (they were left in the file name as typed)."""
    r = submit(*FLAGS, "--array", "0-1", "-o", typed, "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith(f"Error: --output: {error}\n")
    (tmp_path / "o.sh").write_text(f"#!/bin/sh\n#SBATCH -o {typed}\n#APPORTION --budget "
                                   "ai/llm --gpus 1 --min-runtime 0 --array 0-1\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("o.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith(f"Error: o.sh:2: #SBATCH -o {typed}: {error}\n")


def test_what_submit_quotes_of_its_flags_and_script_lines_has_control_characters_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--time $'1\\x1b[31mRED'``, an ignored ``#SBATCH --foo=\\x1b[31mRED\\u202e`` and a
    refused ``#SBATCH -J ab\\u202ecd`` are quoted in the warning and the errors with their
    control and format characters escaped (they were printed raw: a script could colour,
    clear or reverse what its submitter's terminal shows)."""
    r = submit(*FLAGS, "-t", "1\x1b[31mRED", "--", "true")
    assert r.exit_code == 2 and "Error: --time 1\\x1b[31mRED: must be a duration" in r.stderr
    (tmp_path / "w.sh").write_text("#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 "
                                   "--min-runtime 0\n#SBATCH --foo=\x1b[31mRED\u202e\n"
                                   "#SBATCH -J ab\u202ecd\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("w.sh")
    assert r.exit_code == 2, r.output
    assert "warning: w.sh:3: #SBATCH --foo=\\x1b[31mRED\\u202e: ignored" in r.stderr
    assert "Error: w.sh:4: #SBATCH -J ab\\u202ecd: " in r.stderr
    assert "\x1b" not in r.stderr and "\u202e" not in r.stderr, r.stderr


@pytest.mark.parametrize(("lines", "gpus", "kind"), [
    ("#SBATCH --gpus-per-node=4", "4", None),
    ("#SBATCH --gpus-per-node a100:4", "4", "A100"),
    ("#SBATCH --nodes=2\n#SBATCH --gres=gpu:8", "16", None),
    ("#SBATCH --gpus-per-node=8\n#SBATCH -N 2", "16", None),
    ("#SBATCH -N1\n#SBATCH --gres=gpu:h100:4", "4", "H100"),
    ("#SBATCH --nodes=2\n#SBATCH --gpus=8", "8", None),
])
def test_per_node_gpu_counts_are_read_and_multiplied_by_the_nodes_as_slurm_counts_them(
    tmp_path: Path, lines: str, gpus: str, kind: str | None,
) -> None:
    """``#SBATCH --gpus-per-node=N`` (or ``TYPE:N``) gives N GPUs (it was ignored, and the
    submission refused as giving no ``--gpus``), and ``--nodes``/``-N`` multiplies a
    per-node count (``--gres``, ``--gpus-per-node``) as Slurm does: ``--nodes=2
    --gres=gpu:8`` asks for 16 GPUs (it asked for 8, ``--nodes`` ignored); ``--gpus`` is
    the job's whole count, whatever ``--nodes`` says."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{lines}\ntrue\n")
    got = read_script(str(script), [])
    assert got.ignored == []
    assert got.options.get("gpus") == gpus
    assert got.options.get("gpu_kind") == kind


@pytest.mark.parametrize(("lines", "gpus", "ignored"), [
    ("#SBATCH --gpus-per-task=1", "1", []),
    ("#SBATCH --ntasks=8\n#SBATCH --gpus-per-task=1", "8", []),
    ("#SBATCH -n 4\n#SBATCH --gpus-per-task=a100:2", "8", []),
    ("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=1", "8", []),
    ("#SBATCH --nodes=2\n#SBATCH --gpus-per-task=2", "4", []),
    ("#SBATCH --ntasks=8\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=1", "8",
     ["job.sh:3: #SBATCH --ntasks-per-node=4: ignored (--ntasks gives the tasks)"]),
    ("#SBATCH --ntasks=8\n#SBATCH --gpus=4", "4",
     ["job.sh:2: #SBATCH --ntasks=8: ignored (the tasks count only with --gpus-per-task)"]),
    ("#SBATCH --gpus-per-task=1\n#SBATCH --ntasks=x", "1",
     ["job.sh:3: #SBATCH --ntasks=x: ignored (only a whole number of tasks is read)"]),
])
def test_per_task_gpu_counts_are_multiplied_by_the_tasks_as_slurm_counts_them(
    tmp_path: Path, lines: str, gpus: str, ignored: list[str],
) -> None:
    """``#SBATCH --gpus-per-task=N`` (or ``TYPE:N``) asks for N GPUs per task, and the job
    for N times its tasks, as Slurm counts them: ``--ntasks``/``-n``, else ``--nodes`` times
    ``--ntasks-per-node`` (each 1 when not given). They were ignored, and the submission
    refused as giving no ``--gpus``. A task count that counts nothing (no per-task GPU
    count, or ``--ntasks-per-node`` beside ``--ntasks``) or is no whole number is named as
    ignored, with its line."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{lines}\ntrue\n")
    got = read_script(str(script), [])
    assert got.ignored == ignored
    assert got.options.get("gpus") == gpus


def test_a_per_task_gpu_count_multiplied_by_the_tasks_names_every_line(tmp_path: Path) -> None:
    """What a GPU count that the tasks multiplied is named by, in an error: the per-task
    count's line, then those of the nodes and the tasks per node."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\n"
                      "#SBATCH --gpus-per-task=1\ntrue\n")
    got = read_script(str(script), [])
    assert got.options["gpus"] == "16"
    assert got.origins["gpus"] == ("job.sh:4: #SBATCH --gpus-per-task=1 on job.sh:2: "
                                   "#SBATCH --nodes=2 on job.sh:3: #SBATCH --ntasks-per-node=8")


def test_a_per_node_gpu_count_multiplied_by_the_nodes_names_both_lines(tmp_path: Path) -> None:
    """What a GPU count that ``--nodes`` multiplied is named by, in an error (too many for
    the cluster, say): both script lines."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --gpus-per-node=8\ntrue\n")
    got = read_script(str(script), [])
    assert got.origins["gpus"] == ("job.sh:3: #SBATCH --gpus-per-node=8 on job.sh:2: "
                                   "#SBATCH --nodes=2")


def test_sbatch_gpus_with_a_type_gives_the_count_and_the_gpu_kind(tmp_path: Path) -> None:
    """``#SBATCH --gpus=a100:2`` or ``-G h100:8`` (sbatch's ``[type:]number``) gives that
    many GPUs of that kind, as ``--gres=gpu:a100:2`` does, and ``--nodes`` does not
    multiply it (it was refused: ``'a100:2' is not a whole number``); one that is no
    count is refused naming the line."""
    for line, gpus, kind in (("--gpus=a100:2", "2", "A100"), ("-G h100:8", "8", "H100")):
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH {line}\ntrue\n")
        got = read_script(str(script), [])
        assert got.ignored == []
        assert (got.options["gpus"], got.options["gpu_kind"]) == (gpus, kind)
        assert got.origins["gpus"] == f"job.sh:3: #SBATCH {line}"
    script.write_text("#!/bin/sh\n#SBATCH --gpus=a100:two\n#APPORTION --budget ai/llm "
                      "--min-runtime 0\ntrue\n")
    r = submit(str(script))
    assert r.exit_code == 2
    assert ("Error: job.sh:2: #SBATCH --gpus=a100:two: 'a100:two' is not a number of GPUs "
            "(N or TYPE:N)") in r.stderr


@pytest.mark.parametrize("shebang", ["", "#!/bin/bash -l\r\n", "#!/usr/bin/env bash\r\n"])
def test_a_shell_script_with_dos_line_breaks_is_refused_naming_its_first_such_line(
    tmp_path: Path, shebang: str,
) -> None:
    """A batch script run by a shell, with ``\\r\\n`` line breaks (saved on Windows), is a
    usage error naming the file and its first such line, as sbatch refuses it: it was run,
    and its shell read every command with a ``\\r`` at its end (``cd dir\\r``). A Python
    script's are no trouble to Python: it is read as before."""
    script = tmp_path / "job.sh"
    script.write_bytes(f"{shebang}#SBATCH --gpus=1\r\n#APPORTION --budget ai/llm "
                       "--min-runtime 0\r\ncd out\r\n".encode())
    r = submit(str(script))
    assert r.exit_code == 2
    assert (f"Error: {script}:1: DOS line breaks (\\r\\n): a batch script must have Unix "
            "line breaks (\\n), as sbatch requires") in " ".join(r.stderr.split())
    script.write_bytes(b"#!/usr/bin/env python3\r\n#SBATCH --gpus=1\r\nprint(1)\r\n")
    assert read_script(str(script), []).options == {"gpus": "1"}


def _attempt_output(command: list[str], wid: str, attempt: int = 1,
                    **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as attempt ``attempt`` of workload ``wid`` (with ``env`` besides the
    executors' variables the output line reads); what it left on stdout and stderr is what
    the attempt's log would hold."""
    return subprocess.run(command, env={"PATH": "/usr/bin:/bin", "APPORTION_WORKLOAD_ID": wid,
                                        "APPORTION_ATTEMPT": str(attempt), **env},
                          capture_output=True, text=True, timeout=30)


ECHO_BOTH = ("sh", "-c", "echo out; echo err >&2")  # one line to stdout, one to stderr


@pytest.mark.parametrize("how", ["flags", "short flags", "sbatch", "sbatch short", "apportion"])
def test_error_sends_stderr_to_its_own_file_and_output_stdout_to_its_with_fields_filled_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
) -> None:
    """``--output=logs/%x-%j.out --error=logs/%x-%j.err`` (on the command line, ``-o``/``-e``,
    ``#SBATCH`` lines long or short, or ``#APPORTION`` lines): the work's stdout is in the
    .out file and its stderr in the .err file, their %x and %j filled in as --output's are,
    relative to the working directory, and nothing of it in the attempt's log;
    ``output_file`` and ``error_file`` (what ``logs`` names) agree (``--error`` was refused
    on the command line and ignored in a script, stderr going into the .out file)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    out, err = "logs/%x-%j.out", "logs/%x-%j.err"
    head = "#!/bin/sh\n#APPORTION --budget ai/llm --gpus 1 --min-runtime 0\n"
    body_of_script = "echo out; echo err >&2\n"
    if how in ("flags", "short flags"):
        o, e = ("--output", "--error") if how == "flags" else ("-o", "-e")
        body = sent_body(monkeypatch, *FLAGS, "-J", "job.sh", o, out, e, err, "--", *ECHO_BOTH)
    else:
        lines = {"sbatch": f"#SBATCH --output={out}\n#SBATCH --error={err}\n",
                 "sbatch short": f"#SBATCH -o{out}\n#SBATCH -e {err}\n",
                 "apportion": f"#APPORTION --output {out} --error {err}\n"}[how]
        (tmp_path / "job.sh").write_text(head + lines + body_of_script)
        assert read_script("job.sh", []).ignored == []
        body = sent_body(monkeypatch, "job.sh")
    ran = _attempt_output(body["command"], "w-000005", APPORTION_JOB_NAME="job.sh")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "job.sh-w-000005.err", "job.sh-w-000005.out"]
    assert (tmp_path / "logs/job.sh-w-000005.out").read_text() == "out\n"
    assert (tmp_path / "logs/job.sh-w-000005.err").read_text() == "err\n"
    w = {"id": "w-000005", "name": "job.sh", "command": body["command"]}
    assert output_file(w) == f"{tmp_path}/logs/job.sh-w-000005.out"
    assert error_file(w) == f"{tmp_path}/logs/job.sh-w-000005.err"


def test_error_without_output_leaves_stdout_in_the_attempts_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--array 0-1 -e e-%A_%a.err`` without ``--output``: stderr goes to the file (%A the
    array's id, %a the index), stdout stays in the attempt's log as without either option
    (where sbatch writes slurm-%j.out); ``output_file`` is None, ``error_file`` the file."""
    monkeypatch.chdir(tmp_path)
    body = sent_body(monkeypatch, *FLAGS, "--array", "0-1", "-e", "e-%A_%a.err", "--",
                     *ECHO_BOTH)
    ran = _attempt_output(body["command"], "w-000004", APPORTION_ARRAY_ID="w-000003",
                          APPORTION_ARRAY_INDEX="1")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "out\n", "")
    assert [p.name for p in tmp_path.iterdir()] == ["e-w-000003_1.err"]
    assert (tmp_path / "e-w-000003_1.err").read_text() == "err\n"
    w = {"id": "w-000004", "command": body["command"], "array_id": "w-000003",
         "array_index": 1}
    assert (output_file(w), error_file(w)) == (None, f"{tmp_path}/e-w-000003_1.err")


def test_error_naming_the_same_file_as_output_is_one_file_holding_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-o both.log -e both.log`` (the same name) is the one file of ``-o both.log`` alone,
    the very same shell line, holding stdout and stderr in the order written; ``-o %A.log
    -e %j.log`` outside an array (names that come out the same when filled in) is one file
    too, opened once, as Slurm opens it: neither truncates what the other wrote."""
    monkeypatch.chdir(tmp_path)
    same = sent_body(monkeypatch, *FLAGS, "-o", "both.log", "-e", "both.log", "--", *ECHO_BOTH)
    alone = sent_body(monkeypatch, *FLAGS, "-o", "both.log", "--", *ECHO_BOTH)
    assert same["command"] == alone["command"] and same["command"][2] == _OUTPUT_FILL
    filled = sent_body(monkeypatch, *FLAGS, "-o", "%A.log", "-e", "%j.log", "--", *ECHO_BOTH)
    for command, name in ((same["command"], "both.log"), (filled["command"], "w-000005.log")):
        ran = _attempt_output([*command[:-1], "echo out; echo err >&2; echo out2"], "w-000005")
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
        assert (tmp_path / name).read_text() == "out\nerr\nout2\n"
        w = {"id": "w-000005", "command": command}
        assert (output_file(w), error_file(w)) == (f"{tmp_path}/{name}", None)


@pytest.mark.parametrize(("open_mode", "kept_out", "kept_err"), [
    (["--open-mode", "append"], "one1\none2\ntwo1\ntwo2\n", "!one1\n!one2\n!two1\n!two2\n"),
    ([], "two1\ntwo2\n", "!two1\n!two2\n"),
])
@pytest.mark.parametrize("with_output", [True, False])
def test_open_mode_applies_to_the_error_file_as_to_the_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_mode: list[str], kept_out: str,
    kept_err: str, with_output: bool,
) -> None:
    """Two workloads with one ``--error`` file (and one ``--output`` file, or none), each
    run twice (a requeue): with ``--open-mode append`` both files keep every attempt's
    lines of both workloads; without it (truncate) each workload's first attempt starts
    each file afresh and its requeued attempt appends, as for ``--output`` alone."""
    monkeypatch.chdir(tmp_path)
    output = ["-o", "chain.out"] if with_output else []
    body = sent_body(monkeypatch, *FLAGS, *output, "-e", "chain.err", *open_mode, "--", "sh",
                     "-c", 'echo "$0$APPORTION_ATTEMPT"; echo "!$0$APPORTION_ATTEMPT" >&2')
    logged = ""
    for wid, word in (("w-000001", "one"), ("w-000002", "two")):
        for attempt in (1, 2):
            ran = _attempt_output([*body["command"], word], wid, attempt)
            assert (ran.returncode, ran.stderr) == (0, "")
            logged += ran.stdout
    assert (tmp_path / "chain.err").read_text() == kept_err
    if with_output:
        assert (tmp_path / "chain.out").read_text() == kept_out
    else:  # stdout in each attempt's log
        assert logged == "one1\none2\ntwo1\ntwo2\n"


@pytest.mark.parametrize(("typed", "extra", "error"), [
    ("e-%N.err", [], "%N (the node's name) is not known when the work is submitted; the "
                     "fields apportion fills are %j %x %A %a %u and %%"),
    ("e-%3a.err", ["--array", "0-1"], "%3a: a zero-padded array index is not supported; "
                                      "give %a"),
    ("e-%a.err", [], "%a is the index in an array, and it is not one: give --array, or %j "
                     "for its id"),
])
def test_error_fields_are_refused_as_outputs_are_naming_the_flag_or_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str, extra: list[str],
    error: str,
) -> None:
    """A field of ``--error``'s name that --output's would refuse (%N, a padded %3a, %a
    outside an array) is the same usage error, naming ``--error`` or the script's line;
    %x for work without a name too."""
    r = submit(*FLAGS, *extra, "-e", typed, "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith(f"Error: --error: {error}\n")
    r = submit(*FLAGS, "-e", "%x.err", "--", "true")
    assert r.exit_code == 2
    assert r.stderr.endswith("Error: --error: %x is the workload's name, and it has none: "
                             "give --name\n")
    (tmp_path / "e.sh").write_text(f"#!/bin/sh\n#SBATCH -e {typed}\n#APPORTION --budget "
                                   f"ai/llm --gpus 1 --min-runtime 0 {' '.join(extra)}\ntrue\n")
    monkeypatch.chdir(tmp_path)
    r = submit("e.sh")
    assert r.exit_code == 2
    assert r.stderr.endswith(f"Error: e.sh:2: #SBATCH -e {typed}: {error}\n")


@pytest.mark.parametrize("where", ["missing/x.log", "a-file/x.log"])
def test_an_error_file_that_cannot_be_opened_fails_the_attempt_as_an_output_file_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
) -> None:
    """An ``--error`` file in a directory that is not there (or a path through a regular
    file): the shell says so in the attempt's log, naming the file, and exits 2 without
    running the command, as for such an ``--output`` file; with a good ``--output`` the
    failure is still in the log (stdout is opened first), not in the output file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    ran_bad = tmp_path / "ran"
    cmd = ("sh", "-c", f"touch {ran_bad}")
    for flags in (["-o", where], ["-e", where], ["-o", "good.out", "-e", where]):
        body = sent_body(monkeypatch, *FLAGS, *flags, "--", *cmd)
        ran = _attempt_output(body["command"], "w-000005")
        assert ran.returncode == 2, flags
        assert ran.stdout == ""
        assert f"cannot create {tmp_path}/{where}" in ran.stderr, (flags, ran.stderr)
        assert not ran_bad.exists()
    assert (tmp_path / "good.out").read_text() == ""


@pytest.mark.parametrize(("typed", "sent"), [
    ("B:USR1@120", "B:USR1@120"),
    ("USR1@120", "USR1@120"),
    ("10@120", "USR1@120"),  # a number: this system's name for it
    ("sigusr2", "USR2@60"),  # no @: 60 s, as sbatch; SIG and any case
    ("b:TERM@0", "B:TERM@0"),
    ("B:40@5", "B:40@5"),  # a real-time signal: no name in sbatch's table
])
def test_signal_is_read_as_sbatch_reads_it_and_sent_canonical(
    monkeypatch: pytest.MonkeyPatch, typed: str, sent: str,
) -> None:
    """``--signal`` takes sbatch's forms (``[B:]SIG[@SECONDS]``, the signal a number or a
    name with or without ``SIG``, any case; no ``@`` is 60 s) and is sent in one
    canonical text: ``B:`` when given, the name from sbatch's table, the time always."""
    body = sent_body(monkeypatch, *FLAGS, "--signal", typed, "--", "true")
    assert body["signal"] == sent


def test_signal_from_an_sbatch_line_is_sent_and_none_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``#SBATCH --signal=B:USR1@120`` in a batch script is read like the flag; a
    submission without one sends no ``signal`` (the server stores none)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH --signal=B:USR1@120\n#APPORTION "
                                     "--budget ai/llm --gpus 1 --min-runtime 0\ntrue\n")
    assert sent_body(monkeypatch, "job.sh")["signal"] == "B:USR1@120"
    assert "signal" not in sent_body(monkeypatch, *FLAGS, "--", "true")


@pytest.mark.parametrize(("typed", "says"), [
    ("B:FOO@120", "'FOO' is not a signal: give a number (1 to"),
    ("USR1@65536", "65536 s: at most 65535 seconds before the time limit"),
    ("USR1@2m", "after @ comes the number of seconds before the time limit, 0 to 65535 "
                "(got '2m')"),
    ("0@10", "'0' is not a signal"),
    ("BB:USR1", "the prefix is B:, R: or RB: (got BB:)"),
    # more digits than Python converts (4300): shortened, in the same words
    ("9" * 5000, "'" + "9" * 40 + "... (5000 characters)' is not a signal: give a number (1 to"),
    ("USR1@" + "9" * 5000, "9" * 20 + "... (5000 digits) s: at most 65535 seconds before the "
                                      "time limit"),
], ids=["unknown-name", "time-over-65535", "time-not-seconds", "signal-0", "bad-prefix",
        "signal-of-5000-digits", "time-of-5000-digits"])
def test_a_bad_signal_is_refused_naming_the_flag_or_the_script_line(
    tmp_path: Path, typed: str, says: str,
) -> None:
    """An unknown signal name, a number that is no signal, a time over sbatch's 65535 or
    not a whole number of seconds, a bad prefix: a usage error naming ``--signal`` and its
    value, or the script's file and line, before anything is sent. A signal or a time of
    more digits than Python converts (4300) is refused the same way, shown shortened, with
    no word of Python's own limit (``sys.set_int_max_str_digits``), and the flag's value
    named by its first 40 characters and its length."""
    r = submit(*FLAGS, "--signal", typed, "--", "true")
    assert r.exit_code == 2
    shown = typed if len(typed) <= 40 else f"{typed[:40]}... ({len(typed)} characters)"
    assert f"Error: --signal {shown}: {says}" in r.stderr
    assert "int_max_str_digits" not in r.stderr
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH --signal={typed}\n#APPORTION --budget ai/llm "
                      "--gpus 1 --min-runtime 0\ntrue\n")
    r = submit(str(script))
    assert r.exit_code == 2
    assert f"Error: job.sh:2: #SBATCH --signal={typed}: {says}" in r.stderr


def test_signal_with_r_warns_that_it_has_no_effect_and_sends_the_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--signal=R:USR1@30`` (Slurm's leave to overlap a reservation, which apportion has
    none of) is accepted with a warning saying so, and the signal is sent without it."""
    sent: list[dict[str, Any]] = []

    def caught(self: Client, method: str, path: str, body: Any = None, **kw: Any) -> NoReturn:
        sent.append(body)
        raise click.ClickException("caught")

    monkeypatch.setattr(Client, "json", caught)
    r = submit(*FLAGS, "--signal", "RB:USR1@30", "--", "true")
    assert r.exit_code == 1
    assert "warning: --signal RB:USR1@30: R: has no effect" in r.stderr
    assert sent[0]["signal"] == "B:USR1@30"


@pytest.mark.parametrize("line", ["#SBATCH --account=ai/llm", "#SBATCH --account ai/llm",
                                  "#SBATCH -A ai/llm", "#SBATCH -Aai/llm"])
def test_an_sbatch_account_line_gives_the_budget(tmp_path: Path, line: str) -> None:
    """``#SBATCH --account``/``-A`` (spaced, ``=`` or attached), what sbatch charges a job
    to, gives the budget, named by its line in an error, and is not ignored (it was ignored
    as "not an option apportion reads", and the submission then refused as giving no
    ``--budget``)."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{line}\n#SBATCH --gpus=1\ntrue\n")
    got = read_script(str(script), [])
    assert got.ignored == []
    assert got.options["budget"] == "ai/llm"
    assert got.origins["budget"] == f"job.sh:2: {line}"


@pytest.mark.parametrize("flag", ["--account", "-A"])
def test_account_on_the_command_line_is_the_budget(
    monkeypatch: pytest.MonkeyPatch, flag: str,
) -> None:
    """``submit --account B`` and ``-A B``, as a Slurm user types them, send B as the
    budget (they were refused: ``No such option``)."""
    body = sent_body(monkeypatch, flag, "ai/llm", "--gpus", "1", "--min-runtime", "0", "--",
                     "true")
    assert body["budget"] == "ai/llm"


@pytest.mark.parametrize(("flag", "why"), [
    ("--signal", "is not a signal"),
    ("--time", "must be a duration"),
    ("--open-mode", "must be append or truncate"),
])
def test_an_over_long_flag_value_is_named_shortened_in_its_error(flag: str, why: str) -> None:
    """A value of 3,000 characters refused by ``--signal``, ``--time`` or ``--open-mode`` is
    named by its first 40 characters and its length, not echoed whole after ``Error:
    --<flag>`` (it was: 3 KB of error for a 3 KB value)."""
    value = "x" * 3000
    r = submit(*FLAGS, flag, value, "--", "true")
    assert r.exit_code == 2
    [error] = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert error.startswith(f"Error: {flag} {'x' * 40}... (3000 characters): "), error
    assert why in error and len(error) < 400, error


def test_an_sbatch_line_with_a_tab_after_the_prefix_is_read_as_sbatch_reads_it(
    tmp_path: Path,
) -> None:
    """``#SBATCH<tab>--gres=gpu:4`` is a directive, as sbatch reads it (any blank after the
    prefix), so it gives the same options as with a space, each named by its line, and a
    file whose only directives are so written is taken for a batch script; such lines were
    taken for plain comments, so the GPUs, time limit and budget they asked for were
    dropped without a word."""
    tabbed = tmp_path / "tabbed.sh"
    tabbed.write_text("#SBATCH\t--gres=gpu:4\n#SBATCH\t-t 30\n#APPORTION\t--budget ai/llm\n"
                      "true\n")
    spaced = tmp_path / "spaced.sh"
    spaced.write_text("#SBATCH --gres=gpu:4\n#SBATCH -t 30\n#APPORTION --budget ai/llm\n"
                      "true\n")
    assert looks_like_script(str(tabbed))
    got, want = read_script(str(tabbed), []), read_script(str(spaced), [])
    assert got.ignored == []
    assert got.options == want.options == {"gpus": "4", "time_limit": "30",
                                           "budget": "ai/llm"}
    assert got.origins["gpus"] == "tabbed.sh:1: #SBATCH --gres=gpu:4"


@pytest.mark.parametrize(("line", "shown"), [
    ("--time=", "#SBATCH --time="), ("-t ''", "#SBATCH -t ''"),
    ("--output=", "#SBATCH --output="), ("--account=", "#SBATCH --account="),
])
def test_an_sbatch_option_with_an_empty_value_is_refused_naming_the_line(
    tmp_path: Path, line: str, shown: str,
) -> None:
    """``#SBATCH --time=`` (or ``-t ''``, an empty ``--output=`` or ``--account=``) is a
    usage error naming the line, as sbatch refuses it: it was taken for the option left
    out, so the work was stored with no time limit (its output in its log) and nothing
    said so."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -G 1\n#SBATCH {line}\ntrue\n")
    r = submit("--budget", "ai/llm", "--min-runtime", "0", str(script))
    assert r.exit_code == 2
    assert f"Error: job.sh:3: {shown}: needs a value" in r.stderr


@pytest.mark.parametrize("flag", ["--time", "--output", "--name", "--budget"])
def test_a_flag_given_an_empty_value_is_refused_naming_it(flag: str) -> None:
    """``--time ''`` (``--output ''``, ``--name ''``, ``--budget ''``) on the command line
    is a usage error naming the flag: it was taken for the flag left out (no time limit,
    the output in the log) without a word."""
    flags = dict(zip(FLAGS[::2], FLAGS[1::2], strict=True))
    flags[flag] = ""
    r = submit(*[w for kv in flags.items() for w in kv], "--", "true")
    assert r.exit_code == 2
    assert f"Error: {flag}: needs a value (it is empty)" in r.stderr


def test_an_sbatch_gres_list_gives_its_gpu_entry_and_names_the_others_as_not_used(
    tmp_path: Path,
) -> None:
    """``#SBATCH --gres=gpu:2,mps:100`` (sbatch's --gres is a comma-separated list) gives
    the gpu entry's 2 GPUs, with no kind, and names ``mps:100`` as not used; ``gpu:h100:2``
    in such a list gives kind H100. The list was read as one entry of type ``2,mps`` and
    count 100: 100 GPUs of a kind '2', refused as ``unknown GPU kind '2'``."""
    script = tmp_path / "job.sh"
    for line, kind in (("--gres=gpu:2,mps:100", None), ("--gres=mps:100,gpu:h100:2", "H100")):
        script.write_text(f"#!/bin/sh\n#SBATCH {line}\ntrue\n")
        got = read_script(str(script), [])
        assert got.options["gpus"] == "2"
        assert got.options.get("gpu_kind") == kind
        assert got.ignored == [f"job.sh:2: #SBATCH {line}: mps:100: ignored (only gpu:N is "
                               "read)"]


@pytest.mark.parametrize(("typed", "said"), [
    (["--gres=gpu:8"], "--gres is sbatch's: on the command line give the job's GPUs as "
                       "--gpus N (their type as --gpu-kind); a batch script's #SBATCH --gres "
                       "line is read"),
    (["-N", "2"], "-N is sbatch's: on the command line give the job's GPUs as --gpus N"),
    (["--mem=32G"], "--mem is sbatch's, and apportion does not use it (it places GPUs; a "
                    "batch script's #SBATCH --mem line is named as ignored): leave it out"),
    (["-p", "gpu"], "-p is sbatch's, and apportion does not use it"),
    (["--wrap=python train.py"], "--wrap is sbatch's: give the command after the options: "
                                 "apportion submit [OPTIONS] -- CMD ARGS..."),
])
def test_an_sbatch_option_on_the_command_line_is_refused_saying_what_to_type_instead(
    typed: list[str], said: str,
) -> None:
    """``apportion submit --gres=gpu:8 job.sh`` (``-N 2``, ``--mem=32G``, ``-p gpu``,
    ``--wrap=...``), sbatch's options typed by habit, is a usage error saying what to do
    instead: the GPUs as --gpus, or leave out what apportion does not use. Click's bare
    error guessed at flags of a similar spelling (``--mem``: "Did you mean one of:
    '--name', '--time'?"), or had no hint (``-N``, ``-p``)."""
    r = submit(*FLAGS, *typed, "--", "true")
    assert r.exit_code == 2
    assert f"Error: No such option: {said}" in r.stderr
    assert "Did you mean" not in r.stderr


def test_what_submit_misses_is_said_with_where_a_command_or_a_script_can_give_it(
    tmp_path: Path,
) -> None:
    """A missing --budget, --gpus or --min-runtime is said with where it can be given: a
    command's on the command line alone (it said "or in a #APPORTION line of the script"
    with no script), a batch script's also by its #SBATCH lines (--account, --gres), which
    it left unsaid; the minimum runtime, which sbatch has not, is said in a few words."""
    r = submit("--gpus", "1", "--min-runtime", "0", "--", "true")
    assert r.stderr.endswith("Error: --budget: missing: give it on the command line\n")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --time=10\ntrue\n")
    r = submit("--min-runtime", "0", str(script))
    assert r.stderr.endswith("Error: --budget: missing: give it on the command line, or in "
                             "the script: #SBATCH --account=ai/llm or #APPORTION --budget "
                             "ai/llm\n")
    r = submit("--budget", "ai/llm", str(script))
    assert r.exit_code == 2
    assert "Error: --gpus: missing: give it on the command line, or in the script: #SBATCH " \
           "--gres=gpu:N, --gpus=N or #APPORTION --gpus N\n" in r.stderr
    r = submit("--budget", "ai/llm", "--gpus", "1", str(script))
    assert r.stderr.endswith("Error: --min-runtime: missing: give it on the command line, or "
                             "in the script: #APPORTION --min-runtime 30m (sbatch has none: "
                             "the shortest run that makes progress, never preempted before "
                             "it; 0 for free, preemptible work)\n")


def test_slurms_any_of_dependency_is_refused_saying_so_not_as_a_bad_id(tmp_path: Path) -> None:
    """``--dependency afterok:5?afterok:6`` (Slurm's ``?``: any one of them met) is refused
    saying that ``?`` is not read and that apportion waits for every dependency, from the
    flag or the script line; it said "'5?afterok' is not a workload id", as if an id were
    mistyped."""
    r = submit(*FLAGS, "-d", "afterok:5?afterok:6", "--", "true")
    assert r.exit_code == 2
    assert ("Error: --dependency: 'afterok:5?afterok:6': '?' (Slurm's: when any one of them "
            "is met) is not read: apportion waits until every dependency is met (several "
            "separated by ',': afterok:5,afterany:6)") in r.stderr
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --dependency=afterok:5?afterany:6\ntrue\n")
    r = submit(*FLAGS, str(script))
    assert r.exit_code == 2
    assert "Error: job.sh:2: #SBATCH --dependency=afterok:5?afterany:6: 'afterok:5?" in r.stderr
    assert "is not a workload id" not in r.stderr


def test_an_apportion_line_takes_every_name_submit_takes_an_option_by(tmp_path: Path) -> None:
    """Every name by which ``submit`` takes an option that ``#APPORTION`` lines read (its
    short ones, ``-J``, ``-t``, ``-A``, ``-o``, ..., and ``--account``) is read from an
    ``#APPORTION`` line as its long name is, from its line, and nothing is ignored (the
    short names and ``--account`` were ignored as "not an option apportion reads", so
    ``#APPORTION -J big`` left the work unnamed)."""
    read = set(_APPORTION_OPTS.values())
    checked = 0
    for param in submit_command.params:
        if not isinstance(param, click.Option) or param.name not in read:
            continue
        for name in param.opts:
            script = tmp_path / "job.sh"
            script.write_text(f"#!/bin/sh\n#APPORTION {name} value\ntrue\n")
            got = read_script(str(script), [])
            assert got.ignored == [], name
            assert got.options == {param.name: "value"}, name
            assert got.origins[param.name] == f"job.sh:2: #APPORTION {name} value"
            checked += 1
    assert checked >= 30  # the long names and the aliases: the loop did look at them


@pytest.mark.parametrize("indent", [" ", "    ", "\t"])
def test_an_indented_directive_is_ignored_with_a_warning_naming_its_line(
    tmp_path: Path, indent: str,
) -> None:
    """An indented ``#SBATCH`` or ``#APPORTION`` line is not read, as sbatch reads only
    lines beginning with ``#SBATCH`` (to it one indented is a comment): it is named as
    ignored with its line number, does not end the directive block, and the lines at the
    start of theirs around it are read (the indented ones were read as if not indented)."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH --gpus 1\n{indent}#SBATCH --gpus 4\n"
                      f"{indent}#APPORTION --min-runtime 2h\n#SBATCH -J kept\ntrue\n")
    got = read_script(str(script), [])
    assert got.options == {"gpus": "1", "name": "kept"}
    assert got.ignored == [
        "job.sh:3: #SBATCH --gpus 4: ignored (indented: as sbatch, a directive is read only "
        "at the start of its line)",
        "job.sh:4: #APPORTION --min-runtime 2h: ignored (indented: as sbatch, a directive is "
        "read only at the start of its line)"]


@pytest.mark.parametrize(("lines", "said"), [
    ("#SBATCH --gpus=2\n#SBATCH --gres=gpu:4",
     "job.sh:2: #SBATCH --gpus=2 and job.sh:3: #SBATCH --gres=gpu:4: two different GPU "
     "counts (2 and 4 GPUs for the job); give one of them"),
    ("#SBATCH --gres=gpu:4 -G 2",
     "job.sh:2: #SBATCH --gres=gpu:4 and job.sh:2: #SBATCH -G 2: two different GPU counts "
     "(4 and 2 GPUs for the job); give one of them"),
    ("#APPORTION --gpus 3\n#SBATCH --gpus-per-node=h100:4",
     "job.sh:2: #APPORTION --gpus 3 and job.sh:3: #SBATCH --gpus-per-node=h100:4: two "
     "different GPU counts (3 and 4 GPUs for the job); give one of them"),
])
def test_two_different_gpu_counts_in_a_script_are_refused_naming_both_lines(
    tmp_path: Path, lines: str, said: str,
) -> None:
    """``#SBATCH --gpus`` beside ``--gres`` (or ``--gpus-per-node``, or ``#APPORTION
    --gpus``), on one line or two, giving the job different counts is a usage error naming
    both as typed with their lines (the later one was taken without a word)."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{lines}\n#APPORTION --budget ai/llm --min-runtime 0\n"
                      "true\n")
    r = submit(str(script))
    assert r.exit_code == 2 and r.stderr.endswith(f"Error: {said}\n")


@pytest.mark.parametrize(("lines", "said"), [
    ("#SBATCH --gres=gpu:h100:4\n#SBATCH -G a100:4",
     "job.sh:2: #SBATCH --gres=gpu:h100:4 and job.sh:3: #SBATCH -G a100:4: two different "
     "GPU kinds (h100 and a100); give one of them"),
    ("#SBATCH --gpus-per-node=a100:4 --gres=gpu:b200:4",
     "job.sh:2: #SBATCH --gpus-per-node=a100:4 and job.sh:2: #SBATCH --gres=gpu:b200:4: two "
     "different GPU kinds (a100 and b200); give one of them"),
])
def test_two_different_gpu_kinds_in_a_script_are_refused_naming_both_lines(
    tmp_path: Path, lines: str, said: str,
) -> None:
    """``#SBATCH --gres=gpu:h100:4`` beside ``-G a100:4`` (the same count, two GPU kinds), on
    one line or two, is a usage error naming both as typed with their lines, as two
    different counts are (the first kind was kept without a word)."""
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{lines}\n#APPORTION --budget ai/llm --min-runtime 0\n"
                      "true\n")
    r = submit(str(script))
    assert r.exit_code == 2 and r.stderr.endswith(f"Error: {said}\n")


def test_the_same_gpu_kind_given_twice_in_a_script_is_read_once(tmp_path: Path) -> None:
    """``#SBATCH --gres=gpu:h100:4`` and ``-G H100:4`` ask for the same kind (a Slurm type
    is the kind in upper case): read as kind H100, with no error."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gres=gpu:h100:4\n#SBATCH -G H100:4\ntrue\n")
    got = read_script(str(script), [])
    assert (got.options["gpus"], got.options["gpu_kind"]) == ("4", "H100")


def test_the_same_gpu_count_given_twice_in_a_script_is_read_once(tmp_path: Path) -> None:
    """``#SBATCH --gpus=4`` and ``#SBATCH --gres=gpu:4`` (one node) ask for the same 4 GPUs:
    read, with no error and nothing named as ignored."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gpus=4\n#SBATCH --gres=gpu:4\ntrue\n")
    got = read_script(str(script), [])
    assert got.options["gpus"] == "4" and got.ignored == []
