"""How the Slurm backend reads Slurm's output (pure functions; no cluster needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from apportion.cli.serve import build_executor
from apportion.service.config import ConfigError, load_config
from apportion.service.executor import AttemptState, HostSlots, Launch
from apportion.service.executors.slurm import (
    SlurmExecutor,
    _parse_comment,
    _parse_scontrol_line,
    _wait_status,
    batch_script,
    map_job_state,
    map_node_state,
    node_kind,
    parse_exit_code,
    parse_gpu_count,
    parse_gpu_types,
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
    ("PENDING", 0, 0, (AttemptState.RUNNING, None, False)),
    ("CONFIGURING", 0, 0, (AttemptState.RUNNING, None, False)),
    ("COMPLETING", 3, 0, (AttemptState.RUNNING, None, False)),
    ("COMPLETED", 0, 0, (AttemptState.EXITED, 0, False)),
    ("FAILED", 3, 0, (AttemptState.EXITED, 3, False)),
    ("FAILED", 0, 9, (AttemptState.EXITED, 137, True)),
    ("TIMEOUT", 0, 15, (AttemptState.EXITED, 143, True)),
    ("NODE_FAIL", 0, 0, (AttemptState.EXITED, 1, False)),
    ("OUT_OF_MEMORY", 0, 0, (AttemptState.EXITED, 1, False)),
    ("CANCELLED", 0, 15, (AttemptState.EXITED, 143, True)),
    ("CANCELLED", 0, 0, (AttemptState.EXITED, None, True)),  # cancelled before it ran
])
def test_job_state_mapping(
    state: str, code: int, sig: int, seen: tuple[AttemptState, int | None, bool]
) -> None:
    """Slurm job states map to observations; a failure never reads as exit 0, nor does a
    job cancelled before it ran (it has no exit code)."""
    obs = map_job_state("1", state, code, sig)
    assert (obs.state, obs.exit_code, obs.signalled) == seen


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


def test_bad_kinds_in_the_config_name_the_file_and_option(tmp_path: Path) -> None:
    """apportion serve's config: [executor.slurm] kinds with a non-type value is a config
    error naming the file, executor.slurm and the kind."""
    path = tmp_path / "apportion.toml"
    path.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n[executor]\nkind = "slurm"\n'
                    '[executor.slurm]\nkinds = { B200 = 3 }\n')
    with pytest.raises(ConfigError) as e:
        build_executor(load_config(path), None)
    assert str(e.value) == (f"{path}: executor.slurm: kinds: B200: must be a Slurm gres type "
                            "such as 'h100', got 3")
