"""SlurmExecutor against a real Slurm cluster (4 nodes x 8 fake GPUs)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from apportion.service.executor import AttemptState, HostSlots, Launch, LaunchRefused
from apportion.service.executors.slurm import SlurmExecutor
from harness.slurm_cluster import SlurmCluster

from .helpers import wait_for_state, wait_for_text

pytestmark = pytest.mark.slurm


def one_host(host: str, gpus: int) -> tuple[HostSlots, ...]:
    return (HostSlots(host, tuple(range(gpus))),)


def bash(script: str) -> list[str]:
    return ["bash", "-c", script]


def test_inventory_reads_four_healthy_nodes_of_eight_gpus(executor: SlurmExecutor) -> None:
    """inventory() lists gpu1..gpu4, each healthy with 8 GPUs and no reason."""
    hosts = executor.inventory()
    assert [(h.name, h.gpus, h.state, h.reason) for h in hosts] == [
        (f"gpu{i}", 8, "healthy", "") for i in range(1, 5)
    ]


def test_launch_pins_to_the_chosen_node_with_apportion_env(
    executor: SlurmExecutor, tmp_path: Path
) -> None:
    """The job runs on the chosen node with the asked GPU count and APPORTION_* set, plus the
    launch's own env, and its output lands in the launch's log file."""
    log = tmp_path / "w1.log"
    handle = executor.launch(Launch(
        workload_id="w1", attempt=2, slots=one_host("gpu3", 2), log_path=str(log),
        env={"EXTRA": "two words"},
        command=bash('echo "node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES '
                     'wid=$APPORTION_WORKLOAD_ID att=$APPORTION_ATTEMPT '
                     'hosts=$APPORTION_HOSTS extra=$EXTRA"'),
    ))
    assert handle.isdigit()
    wait_for_state(executor, handle, AttemptState.EXITED)
    assert log.read_text().strip() == (
        "node=gpu3 cuda=0,1 wid=w1 att=2 hosts=gpu3 extra=two words"
    )


def test_command_argv_is_passed_verbatim(executor: SlurmExecutor, tmp_path: Path) -> None:
    """Arguments with spaces, quotes and $ reach the command unchanged (no shell expansion)."""
    log = tmp_path / "argv.log"
    args = ["a b", "it's", "$HOME", '"q"', "*"]
    handle = executor.launch(Launch(
        workload_id="argv", attempt=1, slots=one_host("gpu1", 1), log_path=str(log),
        command=["printf", "[%s]\\n", *args],
    ))
    wait_for_state(executor, handle, AttemptState.EXITED)
    assert log.read_text().splitlines() == [f"[{a}]" for a in args]


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_is_observed(executor: SlurmExecutor, tmp_path: Path, code: int) -> None:
    """A command that exits N reads as EXITED with exit code N, not signalled."""
    handle = executor.launch(Launch(
        workload_id=f"exit{code}", attempt=1, slots=one_host("gpu2", 1),
        log_path=str(tmp_path / "x.log"), command=bash(f"exit {code}"),
    ))
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert (obs.exit_code, obs.signalled) == (code, False)


def test_running_job_reads_running(executor: SlurmExecutor, tmp_path: Path) -> None:
    """A job whose command is still going reads RUNNING."""
    log = tmp_path / "run.log"
    handle = executor.launch(Launch(
        workload_id="run", attempt=1, slots=one_host("gpu1", 8), log_path=str(log),
        command=bash("echo started; sleep 60"),
    ))
    wait_for_text(log, "started")
    assert executor.observe([handle])[handle].state is AttemptState.RUNNING


def test_stop_delivers_sigterm_to_the_command(executor: SlurmExecutor, tmp_path: Path) -> None:
    """stop() sends SIGTERM to the command itself (its trap writes a marker); the job then
    ends and reads as EXITED, signalled, with the command's own exit status."""
    log = tmp_path / "term.log"
    handle = executor.launch(Launch(
        workload_id="term", attempt=1, slots=one_host("gpu2", 4), log_path=str(log),
        command=bash('trap "echo got-TERM; exit 0" TERM; echo started; '
                     "while true; do sleep 0.1 & wait $!; done"),
    ))
    wait_for_text(log, "started")
    executor.stop(handle, grace_s=60)
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert "got-TERM" in log.read_text()
    assert (obs.exit_code, obs.signalled) == (0, True)


def test_stop_kills_a_command_that_ignores_sigterm_after_the_grace(
    executor: SlurmExecutor, tmp_path: Path
) -> None:
    """A command that ignores SIGTERM is killed once the grace period is over (observe()
    enforces the deadline) and reads as EXITED, signalled."""
    log = tmp_path / "stubborn.log"
    handle = executor.launch(Launch(
        workload_id="stubborn", attempt=1, slots=one_host("gpu3", 1), log_path=str(log),
        command=bash('trap "echo ignored-TERM" TERM; echo started; '
                     "while true; do sleep 0.1 & wait $!; done"),
    ))
    wait_for_text(log, "started")
    executor.stop(handle, grace_s=1.0)
    wait_for_text(log, "ignored-TERM")
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert obs.signalled


def test_stop_cancels_a_pending_job(
    executor: SlurmExecutor, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    """A job still waiting in Slurm's queue reads RUNNING (placed) and stop() cancels it."""
    first = executor.launch(Launch(
        workload_id="holder", attempt=1, slots=one_host("gpu4", 8), log_path=str(tmp_path / "h"),
        command=bash("echo started; sleep 60"),
    ))
    wait_for_text(tmp_path / "h", "started")
    waiting = executor.launch(Launch(
        workload_id="waiter", attempt=1, slots=one_host("gpu4", 8), log_path=str(tmp_path / "w"),
        command=bash("echo ran"),
    ))
    assert slurm_cluster.run(["squeue", "-h", "-j", waiting, "-o", "%T"]).stdout.strip() == (
        "PENDING"
    )
    assert executor.observe([waiting])[waiting].state is AttemptState.RUNNING
    executor.stop(waiting, grace_s=30)
    obs = wait_for_state(executor, waiting, AttemptState.EXITED)
    assert obs.signalled
    assert not (tmp_path / "w").exists()
    assert executor.observe([first])[first].state is AttemptState.RUNNING


def test_multi_node_launch_takes_two_whole_hosts(
    executor: SlurmExecutor, tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    """A 16-GPU launch on gpu1+gpu2 with whole_hosts runs one job on both nodes, exclusive,
    8 GPUs each; srun inside reaches both."""
    log = tmp_path / "multi.log"
    handle = executor.launch(Launch(
        workload_id="multi", attempt=1, whole_hosts=True, log_path=str(log),
        slots=(HostSlots("gpu1", tuple(range(8))), HostSlots("gpu2", tuple(range(8)))),
        command=bash('echo "hosts=$APPORTION_HOSTS"; '
                     'srun bash -c \'echo "on=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"\'; '
                     "echo started; sleep 60"),
    ))
    content = wait_for_text(log, "started")
    assert "hosts=gpu1,gpu2" in content
    assert sorted(line for line in content.splitlines() if line.startswith("on=")) == [
        "on=gpu1 gpus=0,1,2,3,4,5,6,7", "on=gpu2 gpus=0,1,2,3,4,5,6,7",
    ]
    shown = slurm_cluster.run(["scontrol", "-o", "show", "job", handle]).stdout
    assert "NodeList=gpu[1-2]" in shown
    assert "OverSubscribe=NO" in shown  # --exclusive
    assert executor.list_jobs()[handle].nodes == "gpu[1-2]"


def test_launch_rejects_uneven_gpu_counts(executor: SlurmExecutor) -> None:
    """One Slurm job has one GPU count per node: uneven slots are a LaunchRefused before
    sbatch."""
    with pytest.raises(LaunchRefused, match="slots"):
        executor.launch(Launch(
            workload_id="uneven", attempt=1, command=["true"],
            slots=(HostSlots("gpu1", (0, 1)), HostSlots("gpu2", (0,))),
        ))


def test_unknown_handle_reads_gone(executor: SlurmExecutor) -> None:
    """A job id Slurm never heard of (or forgot) reads GONE."""
    assert executor.observe(["987654"])["987654"].state is AttemptState.GONE


def test_node_drained_in_slurm_reads_draining(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster
) -> None:
    """A node an operator drains in Slurm reads as draining, with Slurm's reason."""
    slurm_cluster.set_node_state("gpu4", "DRAIN", "fan failure")
    try:
        host = {h.name: h for h in executor.inventory()}["gpu4"]
        assert (host.state, host.reason) == ("draining", "fan failure")
    finally:
        slurm_cluster.set_node_state("gpu4", "RESUME")


def test_node_down_in_slurm_reads_down(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster
) -> None:
    """A node Slurm marks DOWN reads as down."""
    slurm_cluster.set_node_state("gpu4", "DOWN", "power")
    try:
        host = {h.name: h for h in executor.inventory()}["gpu4"]
        assert (host.state, host.reason) == ("down", "power")
    finally:
        slurm_cluster.set_node_state("gpu4", "RESUME")
        slurm_cluster.wait_nodes_idle(["gpu4"])


def test_set_host_drain_round_trip(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster
) -> None:
    """set_host_drain(True) drains the node in Slurm with the reason; (False) resumes it,
    and resuming a node that is not drained is a no-op."""
    executor.set_host_drain("gpu3", True, "ecc errors")
    assert "DRAIN" in slurm_cluster.node_state("gpu3")
    host = {h.name: h for h in executor.inventory()}["gpu3"]
    assert (host.state, host.reason) == ("draining", "ecc errors")
    executor.set_host_drain("gpu3", False, "")
    assert "DRAIN" not in slurm_cluster.node_state("gpu3")
    executor.set_host_drain("gpu3", False, "")
    assert {h.name: h.state for h in executor.inventory()}["gpu3"] == "healthy"


def test_list_jobs_finds_apportion_jobs_by_workload(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """list_jobs()/find_by_workload() recover workload id and attempt of apportion's jobs
    (even ids with ':' and spaces), and ignore jobs submitted by others."""
    other = slurm_cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"])
    wid = "team/a: run 7"
    handles = [
        executor.launch(Launch(
            workload_id=wid, attempt=n, slots=one_host("gpu1", 1),
            log_path=str(tmp_path / f"{n}.log"), command=["true"],
        ))
        for n in (1, 2)
    ]
    jobs = executor.list_jobs()
    assert other.stdout.strip() not in jobs
    found = executor.find_by_workload(wid)
    assert [(j.job_id, j.workload_id, j.attempt) for j in found] == [
        (handles[0], wid, 1), (handles[1], wid, 2),
    ]


def test_squeue_as_an_admin_types_it_shows_each_jobs_workload_id(
    executor: SlurmExecutor, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Plain ``squeue`` (its default format, whose NAME column shows 8 characters) shows
    the apportion workload id of each job apportion launched, whole, in NAME (it showed
    ``apportio``), ``squeue --name=<id>`` lists that workload's jobs, and the comment
    still names the attempt; the attempt's end marker is still read by its file name,
    ``apportion-<workload>-<attempt>.end``."""
    handles = {
        executor.launch(Launch(
            workload_id=wid, attempt=n, slots=one_host(host, 1),
            log_path=str(tmp_path / f"{wid}-{n}.log"),
            command=bash(f"sleep {'30' if n == 3 else '0.2'}"),
        )): (wid, n)
        for wid, n, host in (("w-000012", 3, "gpu1"), ("w-000013", 1, "gpu2"))
    }
    [running] = [h for h, (_, n) in handles.items() if n == 3]
    wait_for_state(executor, running, AttemptState.RUNNING)
    out = slurm_cluster.run(["squeue"]).stdout.splitlines()
    assert out[0].split()[2] == "NAME", out
    names = {line.split()[0]: line.split()[2] for line in out[1:]}
    assert names[running] == "w-000012", out
    by_name = slurm_cluster.run(["squeue", "-h", "-o", "%i %k", "--name=w-000012"]).stdout
    assert by_name.split() == [running, "apportion:3:w-000012"]
    [done] = [h for h in handles if h != running]
    obs = wait_for_state(executor, done, AttemptState.EXITED)
    end = (tmp_path / "apportion-w-000013-1.end").read_text().split()
    assert obs.exit_code == 0 and end[0] == done
    assert obs.ended_at == float(end[2])  # the marker was read: its time, not Slurm's
    executor.stop(running, grace_s=0)


def test_stop_of_a_finished_job_is_harmless(executor: SlurmExecutor, tmp_path: Path) -> None:
    """Stopping a job that already ended changes nothing and raises nothing."""
    handle = executor.launch(Launch(
        workload_id="done", attempt=1, slots=one_host("gpu1", 1),
        log_path=str(tmp_path / "d.log"), command=["true"],
    ))
    wait_for_state(executor, handle, AttemptState.EXITED)
    executor.stop(handle, grace_s=0.1)
    executor.stop(handle, grace_s=0)
    obs = wait_for_state(executor, handle, AttemptState.EXITED)
    assert obs.exit_code == 0


def test_a_partition_that_has_none_of_slurms_nodes_is_warned_about_once(
    slurm_cluster: SlurmCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``partition = "nosuch"`` the inventory is empty while Slurm has nodes: a warning
    names executor.slurm.partition and the partitions Slurm's nodes are in (it said
    nothing, and every submission was refused as larger than the cluster); the next
    inventory does not repeat it."""
    ex = SlurmExecutor(jobs_dir=tmp_path / "jobs", partition="nosuch", env=slurm_cluster.env)
    with caplog.at_level(logging.WARNING, logger="apportion.executor.slurm"):
        assert ex.inventory() == []
        assert ex.inventory() == []
    assert [r.getMessage() for r in caplog.records] == [
        "executor.slurm.partition = 'nosuch': none of Slurm's nodes is in that partition "
        "(their partitions: gpu), so apportion has no host to run work on"]
