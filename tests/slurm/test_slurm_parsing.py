"""How the Slurm backend reads Slurm's output (pure functions; no cluster needed)."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from apportion.cli.serve import build_executor
from apportion.service.config import ConfigError, load_config
from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors import slurm
from apportion.service.executors.slurm import (
    SlurmExecutor,
    SlurmUnavailable,
    _Marker,
    _parse_comment,
    _parse_scontrol_line,
    _read_marker,
    _scontrol_time,
    _wait_status,
    batch_script,
    map_job_state,
    map_node_state,
    node_kind,
    parse_exit_code,
    parse_gpu_count,
    parse_gpu_types,
    unowned_jobs,
)


@pytest.mark.parametrize(("gres", "types"), [
    ("gpu:8", ("",)),
    ("gpu:h100:8", ("h100",)),
    ("gpu:b200:8(S:0-1)", ("b200",)),
    ("gpu:a100:4(S:0),gpu:h100:4", ("a100", "h100")),
    ("gpu:h100:2,shard:4", ("h100",)),
    ("gpu:h100", ("h100",)),
    ("(null)", ()),
    ("", ()),
])
def test_gpu_types_from_gres(gres: str, types: tuple[str, ...]) -> None:
    """Each gpu entry's type ("" when untyped); other gres are not GPUs."""
    assert parse_gpu_types(gres) == types


@pytest.mark.parametrize(("gres", "kinds", "kind", "gres_type", "problem"), [
    ("gpu:h100:8", None, "H100", "h100", ""),
    ("gpu:B200:8(S:0-1)", None, "B200", "B200", ""),
    ("gpu:8", None, "", "", ""),
    ("(null)", None, "", "", ""),
    ("gpu:nvidia_b200:8", {"B200": "nvidia_b200"}, "B200", "nvidia_b200", ""),
    ("gpu:8", {"B200": "nvidia_b200"}, "", "", ""),
    ("gpu:h100:8", {"B200": "nvidia_b200"}, "", "",
     "gres type 'h100' is not in executor.slurm kinds (B200 = 'nvidia_b200')"),
    ("gpu:a100:4,gpu:h100:4", None, "", "",
     "GPUs of several types (a100, h100); apportion needs one kind per host"),
    ("gpu:4,gpu:h100:4", None, "", "",
     "GPUs of several types (untyped, h100); apportion needs one kind per host"),
])
def test_node_kind_from_gres(
    gres: str, kinds: dict[str, str] | None, kind: str, gres_type: str, problem: str
) -> None:
    """A typed gres gives the kind (upper case, or by the kinds map); untyped GPUs give ""
    (the config's default); two types on one node, or a type the map lacks, is a problem."""
    assert node_kind(gres, kinds) == (kind, gres_type, problem)


@pytest.mark.parametrize(("options", "error"), [
    ({"cluster": "a/b"}, "cluster: must be a name without '/', got 'a/b'"),
    ({"kinds": ["h100"]}, "kinds: must be a table of GPU kind = gres type, got ['h100']"),
    ({"kinds": {"B200": 3}}, "kinds: B200: must be a Slurm gres type such as 'h100', got 3"),
    ({"kinds": {"B/200": "b200"}}, "kinds: 'B/200': a GPU kind must be a name without '/'"),
    ({"kinds": {"B200": "b200", "Blackwell": "b200"}},
     "kinds: two kinds map to one gres type: {'B200': 'b200', 'Blackwell': 'b200'}"),
])
def test_bad_pool_options_are_refused_naming_the_option(
    tmp_path: Path, options: dict[str, object], error: str
) -> None:
    """cluster and kinds (from [executor.slurm]) are checked when the executor is made."""
    with pytest.raises(ValueError) as e:
        SlurmExecutor(tmp_path, **options)  # type: ignore[arg-type]
    assert str(e.value) == error


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:8", 8),
    ("gpu:a100:4(S:0-1)", 4),
    ("gpu:2,shard:4", 2),
    ("gpu:a100:2,gpu:v100:2", 4),
    ("(null)", 0),
    ("", 0),
])
def test_gpu_count_from_gres(gres: str, gpus: int) -> None:
    """The GPU count sums every gpu entry of a Gres string and ignores other resources."""
    assert parse_gpu_count(gres) == gpus


@pytest.mark.parametrize(("state", "flags", "host"), [
    ("idle", [], "healthy"),
    ("mixed", [], "healthy"),
    ("allocated", [], "healthy"),
    ("unknown", [], "healthy"),
    ("idle", ["NOT_RESPONDING"], "healthy"),
    ("idle", ["DRAIN"], "draining"),
    ("mixed", ["DRAIN"], "draining"),
    ("allocated", ["DRAIN", "COMPLETING"], "draining"),
    ("down", [], "down"),
    ("down", ["DRAIN"], "down"),
    ("idle", ["FAIL"], "down"),
    ("idle", ["POWERED_DOWN"], "down"),
])
def test_node_state_mapping(state: str, flags: list[str], host: str) -> None:
    """Slurm node states map to apportion host states; DOWN wins over DRAIN, and blips Slurm
    itself does not call DOWN (NOT_RESPONDING, UNKNOWN) do not end workloads."""
    assert map_node_state(state, flags) == host


@pytest.mark.parametrize(("state", "code", "sig", "seen"), [
    ("PENDING", 0, 0, (AttemptState.RUNNING, None, False, False, None)),
    ("CONFIGURING", 0, 0, (AttemptState.RUNNING, None, False, False, None)),
    ("COMPLETING", 3, 0, (AttemptState.RUNNING, None, False, False, None)),
    ("COMPLETED", 0, 0, (AttemptState.EXITED, 0, False, False, None)),
    ("FAILED", 3, 0, (AttemptState.EXITED, 3, False, False, None)),
    ("FAILED", 0, 9, (AttemptState.EXITED, 137, True, False, None)),
    ("TIMEOUT", 0, 15, (AttemptState.EXITED, 143, True, False,
                        "reached Slurm's time limit (TIMEOUT)")),
    ("OUT_OF_MEMORY", 0, 0, (AttemptState.EXITED, 1, False, False,
                             "out of memory (Slurm OUT_OF_MEMORY)")),
    ("DEADLINE", 0, 0, (AttemptState.EXITED, 1, False, False,
                        "reached its Slurm deadline (DEADLINE)")),
    ("NODE_FAIL", 0, 0, (AttemptState.EXITED, None, False, True,
                         "node gpu1 failed (Slurm NODE_FAIL)")),
    ("NODE_FAIL", 255, 0, (AttemptState.EXITED, None, False, True,  # the batch step killed
                           "node gpu1 failed (Slurm NODE_FAIL)")),
    ("BOOT_FAIL", 0, 0, (AttemptState.EXITED, None, False, True,
                         "node gpu1 failed to boot (Slurm BOOT_FAIL)")),
    ("PREEMPTED", 0, 15, (AttemptState.EXITED, 143, True, True,
                          "preempted by Slurm itself on gpu1 (Slurm PREEMPTED: Slurm's "
                          "preemption must be off for apportion's jobs)")),
    ("REVOKED", 0, 0, (AttemptState.EXITED, None, False, True,
                       "revoked by Slurm (REVOKED: another cluster of its federation ran it)")),
    ("CANCELLED", 0, 15, (AttemptState.EXITED, 143, True, False,
                          "cancelled in Slurm, not through apportion")),
    ("CANCELLED", 0, 0, (AttemptState.EXITED, None, True, False,  # cancelled before it ran
                         "cancelled in Slurm, not through apportion")),
])
def test_job_state_mapping(
    state: str, code: int, sig: int,
    seen: tuple[AttemptState, int | None, bool, bool, str | None],
) -> None:
    """Slurm job states map to observations; a failure never reads as exit 0, nor does a
    job cancelled before it ran (it has no exit code); what Slurm says beyond the code is
    the reason; the states in which Slurm, not the work, ended the job (a node failure,
    Slurm's own preemption, a federation) end it as a host death, and a node's failure with
    no exit code of the work's (not even the 255 its killed batch step may be recorded
    with)."""
    obs = map_job_state("1", state, code, sig, nodes="gpu1")
    assert (obs.state, obs.exit_code, obs.signalled, obs.host_died, obs.reason) == seen


def test_only_slurm_timeout_reads_as_ended_at_a_time_limit() -> None:
    """TIMEOUT is ``timed_out`` (the workload ends ``timeout``, not ``failed``) with Slurm's
    exit code as recorded (143 from its SIGTERM, 137 from its kill after KillWait); no other
    final state is, DEADLINE and OUT_OF_MEMORY included."""
    assert map_job_state("1", "TIMEOUT", 0, 15).timed_out
    assert map_job_state("1", "TIMEOUT", 0, 9).exit_code == 137
    for state in ("COMPLETED", "FAILED", "CANCELLED", "DEADLINE", "OUT_OF_MEMORY",
                  "NODE_FAIL", "PREEMPTED"):
        assert not map_job_state("1", state, 0, 15).timed_out, state


def test_a_job_cancelled_in_slurm_says_by_whom_unless_apportion_stopped_it() -> None:
    """CANCELLED by someone in Slurm names them in the reason; a job apportion stopped has
    no reason of its own (the stop's reason is the scheduler's)."""
    assert map_job_state("1", "CANCELLED", 0, 15, cancelled_by="alice").reason == (
        "cancelled in Slurm by alice")
    assert map_job_state("1", "CANCELLED", 0, 15, stopped=True).reason is None


def test_completed_after_stop_reads_signalled() -> None:
    """A job that exits 0 after apportion stopped it reads as signalled."""
    assert map_job_state("1", "COMPLETED", 0, 0, stopped=True).signalled


def test_exit_code_formats() -> None:
    """scontrol's N:S and squeue --json's raw wait status give the same (code, signal)."""
    assert parse_exit_code("3:0") == (3, 0)
    assert parse_exit_code("0:15") == (0, 15)
    assert _wait_status(3 << 8) == (3, 0)
    assert _wait_status(9) == (0, 9)
    assert _wait_status({"return_code": 2, "signal": {"id": 0}}) == (2, 0)


def test_scontrol_line_values_may_hold_spaces() -> None:
    """scontrol -o key=value parsing keeps spaces inside values such as Reason."""
    line = "NodeName=gpu1 State=IDLE+DRAIN Reason=ecc errors [root@2026-01-01T00:00:00]"
    fields = _parse_scontrol_line(line)
    assert fields["State"] == "IDLE+DRAIN"
    assert fields["Reason"] == "ecc errors [root@2026-01-01T00:00:00]"


def test_comment_round_trip_keeps_colons() -> None:
    """The job comment carries attempt and workload id, even an id with ':'."""
    assert _parse_comment("apportion:3:a:b c") == (3, "a:b c")
    assert _parse_comment("someone else's job") is None
    assert _parse_comment("apportion:x:y") is None


def test_batch_script_forwards_sigterm_and_keeps_exit_status(tmp_path: Path) -> None:
    """The batch script, run by bash directly, passes its exit status through and forwards
    a SIGTERM sent to the script to the command (whose trap decides the status)."""
    launch = Launch(
        workload_id="w", attempt=1, slots=(HostSlots("h", (0,)),),
        command=["bash", "-c", 'trap "echo got-TERM; exit 5" TERM; echo up; '
                 "while true; do sleep 0.1 & wait $!; done"],
    )
    script = tmp_path / "job.sh"
    script.write_text(batch_script(launch, ["h"]))
    with subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        proc.terminate()
        assert proc.stdout.readline() == "got-TERM\n"
        assert proc.wait(30) == 5


def test_batch_script_forwards_the_b_signal_to_the_command_which_runs_on(
    tmp_path: Path,
) -> None:
    """With ``--signal=B:USR1`` (``Launch.batch_signal``), SIGUSR1 sent to the batch script
    (``scancel --batch``, the batch shell as Slurm sees it) reaches the command, the batch
    shell the owner wrote, and the script waits on for it: a later SIGTERM still stops it
    with the command's own status. Without it, the script traps no USR1."""
    import signal

    launch = Launch(
        workload_id="w", attempt=1, slots=(HostSlots("h", (0,)),), batch_signal=signal.SIGUSR1,
        command=["bash", "-c", 'trap "echo got-USR1" USR1; trap "echo got-TERM; exit 5" TERM; '
                 "echo up; while true; do sleep 0.1 & wait $!; done"],
    )
    script = tmp_path / "job.sh"
    script.write_text(batch_script(launch, ["h"]))
    with subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline() == "got-USR1\n"
        assert proc.poll() is None  # it runs on
        proc.terminate()
        assert proc.stdout.readline() == "got-TERM\n"
        assert proc.wait(30) == 5
    assert " USR1" not in batch_script(
        Launch(workload_id="w", attempt=1, slots=(HostSlots("h", (0,)),), command=["true"]),
        ["h"])


def test_signal_is_sent_with_scancel_to_the_batch_script_or_to_the_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``signal(job, USR1, batch=True)`` is ``scancel --batch --signal=USR1 JOB`` (the batch
    script, which forwards it); ``batch=False`` is ``scancel --signal=USR1 JOB`` (the job's
    steps and not the batch script, as sbatch's --signal without B:); a signal Slurm has
    no name for goes by its number."""
    ex = SlurmExecutor(tmp_path / "jobs")
    calls: list[list[str]] = []

    def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(ex, "_run", run)
    ex.signal("7", 10, True)
    ex.signal("7", 10, False)
    ex.signal("7", 40, False)
    assert calls == [["scancel", "--batch", "--signal=USR1", "7"],
                     ["scancel", "--signal=USR1", "7"], ["scancel", "--signal=40", "7"]]


def test_bad_kinds_in_the_config_name_the_file_and_option(tmp_path: Path) -> None:
    """apportion serve's config: [executor.slurm] kinds with a non-type value is a config
    error naming the file and line, executor.slurm.kinds and the kind."""
    path = tmp_path / "apportion.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n[executor]\nkind = "slurm"\n'
                    '[executor.slurm]\nkinds = { B200 = 3 }\n')
    with pytest.raises(ConfigError) as e:
        build_executor(load_config(path), None)
    assert str(e.value) == (f"{path}:6: executor.slurm.kinds.B200: must be a Slurm gres type "
                            "such as 'h100', got 3")


@pytest.mark.parametrize(("text", "marker"), [
    ("7 0 1700000000.25\n", _Marker(1700000000.25)),
    ("7 refused 1700000000.5 chdir /x: Permission denied\n",
     _Marker(1700000000.5, "chdir /x: Permission denied")),
    ("7 0 inf\n", None),
    ("7 0 nan\n", None),
    ("8 0 1700000000.25\n", None),  # another job's
    ("7 0\n", None),
])
def test_end_marker_is_read_only_if_it_is_this_jobs_and_its_time_finite(
    tmp_path: Path, text: str, marker: _Marker | None
) -> None:
    """The end marker beside the log counts only with this job's id and a finite time;
    a refusal carries its reason."""
    (tmp_path / "apportion-w-1.end").write_text(text)
    assert _read_marker("7", "apportion-w-1", str(tmp_path / "1.log")) == marker


def test_an_end_marker_that_is_no_regular_file_is_not_read(tmp_path: Path) -> None:
    """The marker lies in a directory its job's owner can write, and the server reads it
    as root: a symbolic link (to a file only root may read), a fifo (whose read would
    block the scheduler's pass) or anything but a regular file reads as no marker, at
    once; a regular file is read only as far as a marker can be long."""
    secret = tmp_path / "secret"
    secret.write_text("7 0 1700000000.25\n")
    os.chmod(secret, 0o600)
    (tmp_path / "apportion-w-1.end").symlink_to(secret)
    assert _read_marker("7", "apportion-w-1", str(tmp_path / "1.log")) is None
    os.mkfifo(tmp_path / "apportion-w-2.end")
    started = time.monotonic()
    assert _read_marker("7", "apportion-w-2", str(tmp_path / "2.log")) is None
    assert time.monotonic() - started < 5.0  # not blocked on the fifo (bounds a hang)
    (tmp_path / "apportion-w-3.end").write_text("7 0 1700000000.25" + " " * (1 << 20) + "x")
    assert _read_marker("7", "apportion-w-3", str(tmp_path / "3.log")) is None
    (tmp_path / "apportion-w-4.end").write_text("7 0 1700000000.25\n")
    assert _read_marker("7", "apportion-w-4", str(tmp_path / "4.log")) == _Marker(
        1700000000.25)


def test_a_marker_moves_the_end_within_slurms_second_or_after_an_outage_to_the_last_sighting(
    tmp_path: Path,
) -> None:
    """Slurm's EndTime (whole seconds) is the end; a marker only places it within that
    second, unless Slurm went unanswered since the job was last seen active: then it may
    go back to that sighting, never before. A job never seen active, or with no EndTime,
    is not believed at all."""
    ex = SlurmExecutor(tmp_path)
    ex._active_at["7"] = 100.0  # last listed active at 100
    assert ex._end_time("7", None, 200.0) == 200.0
    assert ex._end_time("7", _Marker(200.4), 200.0) == 200.4
    assert ex._end_time("7", _Marker(120.0), 200.0) == 200.0  # no outage: not believed
    assert ex._end_time("7", _Marker(5000.0), 200.0) == 201.0
    assert ex._end_time("7", _Marker(120.0), 0.0) is None
    ex._unreachable_at = 150.0  # slurmctld silent after the last sighting
    assert ex._end_time("7", _Marker(120.0), 200.0) == 120.0
    assert ex._end_time("7", _Marker(50.0), 200.0) == 100.0
    assert ex._end_time("8", _Marker(120.0), 200.0) == 200.0  # never seen active


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def test_scontrol_times_are_read_as_utc_whatever_the_servers_zone(
    zone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scontrol``'s zone-less EndTime is read as UTC (the zone the executor runs Slurm's
    commands in), the same instant under any TZ of the server, also in the hour a US
    fall-back repeats (01:50 on 2026-11-01, which in Los Angeles names two instants); an
    absent one is 0. It was read in the server's TZ: 8 h late in Los Angeles."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        assert _scontrol_time("2026-12-06T22:00:00") == 1796594400.0  # 2026-12-06 22:00Z
        assert _scontrol_time("2026-11-01T01:50:00") == 1793497800.0  # 2026-11-01 01:50Z
        assert _scontrol_time("Unknown") == 0.0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_every_slurm_command_runs_with_tz_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Slurm command gets ``TZ=UTC`` in its environment, over the server's TZ and with
    an ``env`` of its own (which replaces the server's environment and had no TZ, so
    scontrol printed in the system's zone), keeping ``env``'s other variables."""
    seen: list[dict[str, str]] = []

    def run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(dict(kw["env"]))  # type: ignore[call-overload]
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setenv("TZ", "America/Los_Angeles")
    monkeypatch.setattr(subprocess, "run", run)
    for env in (None, {"SLURM_CONF": "/etc/slurm-b/slurm.conf"},
                {"SLURM_CONF": "/x", "TZ": "Asia/Kolkata"}):
        ex = SlurmExecutor(tmp_path / "jobs", env=env)
        ex._run(["scontrol", "-o", "show", "job", "7"], check=False)
        assert seen[-1]["TZ"] == "UTC"
        if env is not None:
            assert seen[-1]["SLURM_CONF"] == env["SLURM_CONF"]


def test_stop_unknown_stops_only_this_executors_jobs_no_attempt_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``stop_unknown`` (at start, after a restore) stops each running or pending job of
    this executor's scripts whose id the database does not know, naming it in a warning;
    it leaves the known one, a finished one, another data directory's and a job that is
    not apportion's alone."""
    ex = SlurmExecutor(jobs_dir=tmp_path / "jobs")
    jobs_dir = (tmp_path / "jobs").absolute()

    def job(state: str, wid: str, attempt: int = 1, scripts: Path = jobs_dir,
            comment: str | None = None) -> dict[str, object]:
        return {"job_state": state,
                "comment": f"apportion:{attempt}:{wid}" if comment is None else comment,
                "command": str(scripts / f"apportion-{wid}-{attempt}.sh")}

    squeue = {
        "11": job("RUNNING", "w-000001"),  # the database's
        "12": job("RUNNING", "w-000002"),  # the lost future's
        "13": job("PENDING", "w-000003", 2),  # the lost future's, waiting for its nodes
        "14": job("COMPLETED", "w-000004"),
        "15": job("RUNNING", "w-000005", scripts=tmp_path / "elsewhere"),
        "16": job("RUNNING", "w-000006", comment="someone else's"),
    }
    cancels: list[list[str]] = []
    monkeypatch.setattr(ex, "_squeue", lambda: squeue)
    monkeypatch.setattr(ex, "_scancel", cancels.append)
    with caplog.at_level("WARNING", logger="apportion.executor.slurm"):
        ex.stop_unknown({"11"}, grace_s=30.0)
    assert cancels == [["--state=PENDING", "12"], ["--batch", "--signal=TERM", "12"],
                       ["--state=PENDING", "13"], ["--batch", "--signal=TERM", "13"]]
    assert [r.getMessage() for r in caplog.records] == [
        f"{wid} attempt {n} (Slurm job {job_id}) runs for no attempt the database knows (a "
        "backup restored from before it started?): stopped"
        for wid, n, job_id in (("w-000002", 1, "12"), ("w-000003", 2, "13"))]


def _listed(jobs_dir: Path, state: str, wid: str, attempt: int = 1,
            scripts: Path | None = None, comment: str | None = None) -> dict[str, object]:
    """A job as ``squeue --json`` lists it, running ``scripts``' batch script (default:
    ``jobs_dir``'s) of ``wid``'s attempt."""
    return {"job_state": state,
            "comment": f"apportion:{attempt}:{wid}" if comment is None else comment,
            "command": str((scripts or jobs_dir) / f"apportion-{wid}-{attempt}.sh")}


def test_unowned_jobs_are_this_executors_active_jobs_no_open_attempt_owns(
    tmp_path: Path,
) -> None:
    """``unowned_jobs`` lists, by job id, the running or pending jobs of this executor's
    scripts whose id is no open attempt's handle and whose attempt is not one still
    launching (its launch unanswered): a duplicate of an adopted attempt is listed; a
    known one, one of a launching attempt, a finished or completing one (its attempt
    closed on its end marker while Slurm runs its epilog), another data directory's and
    one that is not apportion's are not."""
    jobs_dir = (tmp_path / "jobs").absolute()
    listing = {
        "21": _listed(jobs_dir, "RUNNING", "w-000001"),  # adopted by its attempt
        "22": _listed(jobs_dir, "PENDING", "w-000001"),  # a second job of that attempt
        "23": _listed(jobs_dir, "RUNNING", "w-000002"),  # its attempt ended never launched
        "24": _listed(jobs_dir, "RUNNING", "w-000003", 2),  # its launch still unanswered
        "25": _listed(jobs_dir, "COMPLETED", "w-000004"),
        "28": _listed(jobs_dir, "COMPLETING", "w-000008"),  # its attempt closed; epilog runs
        "26": _listed(jobs_dir, "RUNNING", "w-000005", scripts=tmp_path / "elsewhere"),
        "27": _listed(jobs_dir, "RUNNING", "w-000006", comment="someone else's"),
        "9": _listed(jobs_dir, "RUNNING", "w-000007"),
    }
    assert unowned_jobs(listing, {"21"}, tmp_path / "jobs", {("w-000003", 2)}) == [
        ("9", 1, "w-000007"), ("22", 1, "w-000001"), ("23", 1, "w-000002")]


def test_stop_strays_stops_unowned_jobs_after_settling_from_observes_listing_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``stop_strays`` reads the listing of the ``observe`` just before it (no Slurm call
    of its own), stops a job no open attempt owns only once listings have shown it so for
    STRAY_SETTLE_S (here a second job of the attempt whose first job ``find`` adopted),
    names it in one warning and stops it once; a job of an attempt still
    launching is left alone, and without a fresh listing (none since the last call, or the
    observe got no answer) nothing is looked at."""
    ex = SlurmExecutor(jobs_dir=tmp_path / "jobs")
    jobs_dir = (tmp_path / "jobs").absolute()
    listing = {"31": _listed(jobs_dir, "RUNNING", "w-000001"),
               "32": _listed(jobs_dir, "RUNNING", "w-000001"),  # a second sbatch of it
               "33": _listed(jobs_dir, "PENDING", "w-000002")}
    listed: list[int] = []
    cancels: list[list[str]] = []
    clock = [1000.0]

    def squeue() -> dict[str, dict[str, object]]:
        listed.append(1)
        return listing

    monkeypatch.setattr(ex, "_squeue", squeue)
    monkeypatch.setattr(ex, "_scancel", cancels.append)
    monkeypatch.setattr(slurm.time, "monotonic", lambda: clock[0])
    known, launching = {"31"}, {("w-000002", 1)}

    def a_pass(after_s: float) -> None:
        clock[0] += after_s
        ex.observe(["31"])
        ex.stop_strays(known, launching, grace_s=30.0)

    assert ex.find("w-000001", 1) == "31"  # the oldest of the attempt's two jobs
    with caplog.at_level("WARNING", logger="apportion.executor.slurm"):
        a_pass(0.0)  # 32 first seen unowned: not yet
        a_pass(slurm.STRAY_SETTLE_S - 1)
        assert cancels == []
        a_pass(1.0)
        assert cancels == [["--state=PENDING", "32"], ["--batch", "--signal=TERM", "32"]]
        a_pass(1.0)  # stopped already: not again
        ex.stop_strays(known, launching, grace_s=30.0)  # no observe since: nothing read
    assert len(cancels) == 2 and len(listed) == 5  # find's and the four observes'
    assert [r.getMessage() for r in caplog.records] == [
        "w-000001 attempt 1 (Slurm job 32) runs for no open attempt (a launch given up as "
        "never launched that Slurm queued late, or a second job of one attempt): stopped"]

    def down() -> dict[str, dict[str, object]]:
        raise SlurmUnavailable("squeue: Unable to contact slurm controller")

    monkeypatch.setattr(ex, "_squeue", down)
    known, launching = set(), set()
    with pytest.raises(SlurmUnavailable):
        ex.observe([])
    clock[0] += 2 * slurm.STRAY_SETTLE_S
    ex.stop_strays(known, launching, grace_s=30.0)  # the failed observe listed nothing
    assert len(cancels) == 2


def test_stop_unknown_without_an_answer_from_slurm_only_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """When slurmctld does not answer at start, ``stop_unknown`` logs one warning with the
    reason instead of failing the start (which then goes on as in any outage)."""
    ex = SlurmExecutor(jobs_dir=tmp_path / "jobs")

    def down() -> dict[str, dict[str, object]]:
        raise SlurmUnavailable("squeue: Unable to contact slurm controller")

    monkeypatch.setattr(ex, "_squeue", down)
    with caplog.at_level("WARNING", logger="apportion.executor.slurm"):
        ex.stop_unknown(set(), grace_s=30.0)
    assert [r.getMessage() for r in caplog.records] == [
        "Slurm jobs the database does not know were not looked for: squeue: Unable to "
        "contact slurm controller"]


def test_a_refusal_quoting_control_characters_is_read_with_them_escaped(
        tmp_path: Path) -> None:
    """A refusal in the end marker quotes the owner's command as typed; its ESC and BEL
    (to clear an admin's screen and set the window's title, in ``show`` and ``why``) are
    read escaped (``\\x1b``, ``\\x07``)."""
    (tmp_path / "apportion-w-1.end").write_text(
        "7 refused 1700000000.5 command not found: \x1b[2J\x1b]0;owned\x07nope\n")
    assert _read_marker("7", "apportion-w-1", str(tmp_path / "1.log")) == _Marker(
        1700000000.5, "command not found: \\x1b[2J\\x1b]0;owned\\x07nope")


def _deadline_job(tmp_path: Path, command: str) -> tuple[list[str], dict[str, str], Path]:
    """A batch script with a stop file, run as Slurm job 4242 would run it, with stand-ins
    for squeue (the job has one srun step) and scancel that log their arguments; returns
    its argv, environment and the log of those calls."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "squeue").write_text(f'#!/bin/sh\necho "squeue $*" >> {calls}\n'
                                 "printf '4242.batch\\n4242.0\\n'\n")
    (fake / "scancel").write_text(f'#!/bin/sh\necho "scancel $*" >> {calls}\n')
    for tool in ("squeue", "scancel"):
        (fake / tool).chmod(0o755)
    launch = Launch(workload_id="w", attempt=1, slots=(HostSlots("h", (0,)),),
                    command=["bash", "-c", command],
                    env={"PATH": f"{fake}:{os.environ['PATH']}"})
    script = tmp_path / "job.sh"
    script.write_text(batch_script(launch, ["h"], str(tmp_path / "job.end"),
                                   stop_file=str(tmp_path / "job.stop")))
    return ["bash", str(script)], {**os.environ, "SLURM_JOB_ID": "4242"}, calls


def _group_alive(pgid: int) -> list[str]:
    """The processes of process group ``pgid`` that still run (not zombies)."""
    out = subprocess.run(["ps", "-o", "stat=,args=", "-g", str(pgid)], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line.strip() and not line.startswith("Z")]


def _group_alive_until(pgid: int, until: float) -> list[str]:
    """:func:`_group_alive` once it is empty, or at ``until`` (wall clock) at the latest: a
    process sent SIGKILL runs until it is next scheduled, a moment on a loaded machine."""
    while (alive := _group_alive(pgid)) and time.time() < until:
        time.sleep(0.02)
    return alive


def _timers(script: int) -> set[int]:
    """The running deadline timers of the batch script ``script``: its subshells (children
    with its own command line; the command is ``bash -c ...``)."""
    def read(pid: str, what: str) -> bytes:
        try:
            return Path(f"/proc/{pid}/{what}").read_bytes()
        except OSError:
            return b""

    own = read(str(script), "cmdline")
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        fields = read(entry.name, "stat").rpartition(b")")[2].split()
        if (len(fields) > 1 and int(fields[1]) == script and fields[0] not in (b"Z", b"X")
                and read(entry.name, "cmdline") == own):
            found.add(int(entry.name))
    return found


def _armed(script: int, other_than: set[int]) -> set[int]:
    """Wait until ``script`` runs a deadline timer that is none of ``other_than`` (it has
    read its stop file at a SIGTERM and armed its timer anew); its timers then."""
    deadline = time.monotonic() + 30
    while not (timers := _timers(script)) - other_than:
        assert time.monotonic() < deadline, f"no new timer (had {other_than})"
        time.sleep(0.01)
    return timers


def test_batch_script_kills_its_job_at_the_stops_earliest_deadline_without_the_server(
    tmp_path: Path,
) -> None:
    """A job that ignores SIGTERM is killed by its batch script itself at the deadline the
    stop file gave (no server involved): at each SIGTERM the script reads the file and the
    earliest deadline holds (one sent later never puts the kill later), a SIGTERM sent to
    its whole process group (a job's ``kill 0``) does not disarm the timer, and at the
    deadline the end marker is written dated then, the job's step and batch step get
    ``scancel --signal=KILL``, and every process of the script's group is killed. Each
    deadline is written once the script has read the one before (its timer armed anew:
    a fixed 0.3 s let a slow script read the next one in its place)."""
    import signal

    argv, env, calls = _deadline_job(
        tmp_path, 'trap "echo ignored" TERM; sleep 600 & echo up; while :; do sleep 0.1; done')
    stop = tmp_path / "job.stop"
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        t0 = time.time()
        stop.write_text(f"4242 {t0 + 4:.6f}\n")
        proc.terminate()
        first = _armed(proc.pid, set())
        deadline = t0 + 1.5
        stop.write_text(f"4242 {deadline:.6f}\n")  # earlier: it holds
        os.killpg(proc.pid, signal.SIGTERM)
        _armed(proc.pid, first)
        stop.write_text(f"4242 {t0 + 9:.6f}\n")  # later: ignored
        proc.terminate()
        assert proc.wait(30) == -signal.SIGKILL
        ended = time.time()
    assert deadline <= ended < deadline + 2.0
    job_id, status, at = (tmp_path / "job.end").read_text().split()
    assert (job_id, status) == ("4242", "137")
    assert deadline <= float(at) < deadline + 0.5
    assert calls.read_text().splitlines() == [
        "squeue -h -s -j 4242 -o %i", "scancel --signal=KILL 4242.0",
        "scancel --batch --full --signal=KILL 4242"]
    assert _group_alive_until(proc.pid, ended + 10) == []  # the command, its sleep, the timer


def test_batch_script_of_a_job_ending_within_the_grace_kills_nothing_and_leaves_no_timer(
    tmp_path: Path,
) -> None:
    """A job that exits within its grace period keeps its own exit status and end marker:
    its script drops the deadline's timer when the command ends, so nothing of the job
    (no timer, no sleep) outlives it and no kill is ever sent; dropping the timer writes
    nothing to the job's log (bash notes a SIGKILLed background job it still tracks). (The
    timer, sent SIGKILL as the script ends, is waited for until its deadline at most: one
    that survived would act then.)"""
    argv, env, calls = _deadline_job(
        tmp_path, 'trap "sleep 0.3; exit 3" TERM; echo up; while :; do sleep 0.1; done')
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == "up\n"
        kill_at = time.time() + 1.5
        (tmp_path / "job.stop").write_text(f"4242 {kill_at:.6f}\n")
        proc.terminate()
        assert proc.wait(30) == 3
        assert proc.stderr.read() == ""
    assert _group_alive_until(proc.pid, kill_at) == []
    time.sleep(1.5)  # past the deadline
    assert not calls.exists()
    assert (tmp_path / "job.end").read_text().split()[:2] == ["4242", "3"]


def test_stop_records_the_earliest_deadline_beside_the_end_marker_before_its_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stop(job, grace)`` writes ``<job id> <now + grace>`` to ``<log dir>/<job
    name>.stop``, where the executor put the attempt's log (the attempt and workload from
    the job's comment, never the name or output path the job's owner can change in Slurm),
    before it sends the SIGTERM, readable by the job's owner whatever the server's umask; a
    stop sent again keeps an earlier deadline of this job's; a link put there is replaced,
    never written through; a stop of grace 0 writes nothing (it kills at once)."""
    ex = SlurmExecutor(tmp_path / "jobs", logs_dir=tmp_path / "logs")
    logs = ex.log_path("w-1", 1).parent
    logs.mkdir(parents=True)
    stop_file = logs / "apportion-w-1-1.stop"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen: list[str] = []
    monkeypatch.setattr(ex, "_scontrol_job", lambda job_id: {
        "Comment": "apportion:1:w-1 ", "JobName": "apportion-x",  # as scontrol -o gives it
        "StdOut": str(elsewhere / "out.log"),
        "Command": str(tmp_path / "jobs" / "apportion-w-1-1.sh")})
    monkeypatch.setattr(ex, "_hard_kill", lambda job_id: seen.append("kill"))

    def scancel(args: list[str]) -> None:
        seen.append(" ".join(args) + (f" ({stop_file.read_text().strip()})"
                                      if stop_file.exists() else ""))

    monkeypatch.setattr(ex, "_scancel", scancel)
    old = os.umask(0o077)
    try:
        before = time.time()
        ex.stop("7", grace_s=30)
        job_id, at = stop_file.read_text().split()
        assert job_id == "7" and before + 30 <= float(at) <= time.time() + 30
        assert seen[-1] == f"--batch --signal=TERM 7 (7 {at})"
        assert stat.S_IMODE(stop_file.stat().st_mode) == 0o644
        ex.stop("7", grace_s=60)
        assert stop_file.read_text().split() == ["7", at]  # the earlier one holds
        stop_file.write_text(f"6 {float(at) - 10:.6f}\n")  # another job's: replaced
        ex.stop("7", grace_s=5)
        assert stop_file.read_text().split()[0] == "7"
        secret = tmp_path / "secret"
        secret.write_text("root's\n")
        stop_file.unlink()
        stop_file.symlink_to(secret)
        ex.stop("7", grace_s=5)
        assert secret.read_text() == "root's\n"
        assert not stop_file.is_symlink() and stop_file.read_text().startswith("7 ")
        stop_file.unlink()
        ex.stop("7", grace_s=0)
        assert not stop_file.exists() and seen[-1] == "kill"
        assert list(elsewhere.iterdir()) == []  # the output path the job names: untouched
    finally:
        os.umask(old)


def test_stop_writes_no_deadline_file_where_a_changed_comment_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job's owner can change its comment in Slurm (``scontrol update Comment=``): a
    stop of their job whose comment names another attempt (another user's workload) writes
    no deadline file there, as root, and leaves that attempt's own file as it was; the
    comment is believed only for a job whose command is this executor's script of the
    attempt it names (run directly, or through runuser from an owner's directory)."""
    ex = SlurmExecutor(tmp_path / "jobs", logs_dir=tmp_path / "logs")
    theirs = ex.log_path("w-2", 1).parent
    theirs.mkdir(parents=True)
    their_stop = theirs / "apportion-w-2-1.stop"
    their_stop.write_text("8 1000.000000\n")
    mine = str(tmp_path / "jobs" / "users" / "alice" / "apportion-w-1-1.sh")
    monkeypatch.setattr(ex, "_scontrol_job", lambda job_id: {
        "Comment": "apportion:1:w-2", "JobName": "apportion-w-2-1", "Command": mine})
    monkeypatch.setattr(ex, "_scancel", lambda args: None)
    ex.stop("7", grace_s=30)
    assert their_stop.read_text() == "8 1000.000000\n"
    assert sorted(p.name for p in theirs.iterdir()) == ["apportion-w-2-1.stop"]
    # the same job with its comment as launched: its own file is written
    ex.log_path("w-1", 1).parent.mkdir(parents=True)
    monkeypatch.setattr(ex, "_scontrol_job", lambda job_id: {
        "Comment": "apportion:1:w-1", "JobName": "x", "Command": mine})
    ex.stop("7", grace_s=30)
    assert (ex.log_path("w-1", 1).parent / "apportion-w-1-1.stop").read_text().startswith("7 ")
