"""apportion serve with the Slurm executor, end to end: a real server process (SQLite), the
HTTP API and the CLI client, on the session's real Slurm cluster (4 nodes x 8 GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.slurm_cluster import SlurmCluster
from harness.slurm_service import SlurmService

pytestmark = pytest.mark.slurm

# waits for SIGTERM in small steps (bash runs a trap only between commands)
TRAPPED = (
    "trap 'echo got-SIGTERM at $EPOCHREALTIME; exit 0' TERM; echo up on $APPORTION_HOSTS; "
    "while true; do sleep 0.2 & wait $!; done"
)


@pytest.fixture(scope="module")
def service(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmService]:
    """One server for this module; the cluster is left idle and undrained afterwards."""
    with SlurmService(slurm_cluster, tmp_path_factory.mktemp("service")) as svc:
        yield svc
    slurm_cluster.run(["scancel", "--user", str(os.getuid())], check=False)
    slurm_cluster.wait_no_jobs_running()


@pytest.fixture(autouse=True)
def clean(service: SlurmService, slurm_cluster: SlurmCluster) -> Iterator[None]:
    """Each test starts and ends with no active workload and every node in service."""
    yield
    service.cancel_all()
    for node in slurm_cluster.node_names:
        if "DRAIN" in slurm_cluster.node_state(node):
            slurm_cluster.set_node_state(node, "RESUME")
    for node in slurm_cluster.node_names:
        service.wait_host(node, "healthy")
    slurm_cluster.wait_no_jobs_running()


def test_submitted_workload_runs_under_slurm_where_apportion_placed_it(
    service: SlurmService,
) -> None:
    """`apportion submit` -> the Slurm job runs on the node of apportion's placement with
    the GPUs asked for; its completion is recorded (completed, exit code 0) with its log."""
    env = {**os.environ, "APPORTION_URL": service.url, "APPORTION_TOKEN": service.token("alice")}
    out = subprocess.run(
        [sys.executable, "-m", "apportion.cli.main", "submit", "--budget", "ai/llm",
         "--gpus", "4", "--min-runtime", "60", "--json", "--",
         "bash", "-c", "echo start on $APPORTION_HOSTS; sleep 3; echo finished"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )
    wid = json.loads(out.stdout)["id"]
    w = service.wait_started(wid)
    attempt = w["attempts"][-1]
    [[host, gpus, _]] = attempt["placement"]
    job = service.wait_slurm_state(attempt["handle"], "RUNNING")
    assert (job["NodeList"], gpus) == (host, 4)
    assert job["TresPerNode"] == "gres:gpu:4"
    assert job["JobName"] == wid  # what squeue shows an admin

    done = service.wait_workload(wid, ("completed", "failed", "lost"))
    assert (done["status"], done["exit_code"]) == ("completed", 0)
    assert done["attempts"][-1]["ended_at"] > done["attempts"][-1]["started_at"]
    assert service.logs(wid) == f"start on {host}\nfinished\n"


def test_allocated_submission_displaces_an_unallocated_slurm_job(
    service: SlurmService, slurm_cluster: SlurmCluster
) -> None:
    """With the cluster full of unallocated work, an allocated submission stops one of
    them (its command gets SIGTERM and logs it) and then runs on the freed node."""
    fill = [
        service.submit(budget="ai/vision", gpus=8, min_runtime=0, command=["bash", "-c", TRAPPED])
        for _ in slurm_cluster.node_names
    ]
    for w in fill:
        wid = w["id"]
        service.wait_started(wid)
        service.wait(lambda: "up on" in service.logs(wid), f"{wid} up")  # noqa: B023

    alloc = service.submit(
        budget="ai/llm", gpus=8, min_runtime=60,
        command=["bash", "-c", "echo allocated on $APPORTION_HOSTS at $EPOCHREALTIME; sleep 1"],
    )
    done = service.wait_workload(alloc["id"], ("completed", "failed", "lost"))
    assert (done["status"], done["exit_code"]) == ("completed", 0)

    victims = [service.workload(w["id"]) for w in fill]
    preempted = [v for v in victims if v["status"] == "preempted"]
    assert len(preempted) == 1, [(v["id"], v["status"]) for v in victims]
    victim = preempted[0]
    victim_log = service.logs(victim["id"]).splitlines()
    assert victim_log[-1].startswith("got-SIGTERM at ")
    victim_host = victim["attempts"][-1]["placement"][0][0]
    assert done["attempts"][-1]["placement"][0][0] == victim_host
    words = service.logs(alloc["id"]).split()
    assert words[:3] == ["allocated", "on", victim_host]
    # the GPUs were free when it started: the victim's command had already exited
    assert float(victim_log[-1].split()[-1]) < float(words[-1])
    assert all(v["status"] == "running" for v in victims if v is not victim)


def test_work_cancelled_in_slurm_before_it_ran_fails_and_its_afterok_dependent_never_runs(
    service: SlurmService, slurm_cluster: SlurmCluster
) -> None:
    """Jobs submitted to Slurm directly hold every node, so apportion's job waits PENDING
    in Slurm; an admin cancels it there (scancel: CANCELLED, ExitCode 0:0). The workload
    ends failed without an exit code, saying it was cancelled in Slurm, and the work
    waiting afterok on it is cancelled. Before, it read as completed with exit 0, and the
    dependent ran."""
    foreign = [
        slurm_cluster.run(["sbatch", "--parsable", "-w", node, "--gres=gpu:8", "-o",
                           "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
        for node in slurm_cluster.node_names
    ]
    try:
        w = service.submit(budget="ai/llm", gpus=8, min_runtime=60, command=["echo", "hi"])
        job = service.wait_started(w["id"])["attempts"][-1]["handle"]
        service.wait(lambda: "PENDING" in slurm_cluster.run(
            ["squeue", "-h", "-j", job, "-o", "%T"]).stdout, f"job {job} pending in Slurm")
        dependent = service.submit(budget="ai/llm", gpus=1, min_runtime=0,
                                   dependency=f"afterok:{w['id']}", command=["echo", "ran"])
        slurm_cluster.run(["scancel", job])
        ended = service.wait_workload(w["id"], ("completed", "failed", "cancelled"))
        assert (ended["status"], ended["exit_code"]) == ("failed", None)
        assert ended["end_reason"] == "cancelled in Slurm, not through apportion"
        never = service.wait_workload(dependent["id"], ("completed", "failed", "cancelled"))
        assert never["status"] == "cancelled" and not never["attempts"]
    finally:
        slurm_cluster.run(["scancel", *foreign], check=False)


def test_node_drained_in_slurm_is_emptied_as_protections_end_then_reported_in_repair(
    service: SlurmService, slurm_cluster: SlurmCluster
) -> None:
    """DRAIN in Slurm -> the host drains in apportion: the unallocated job on it is moved
    off at once, the allocated one only once its minimum runtime has passed; the empty host
    then shows as repair with no GPUs used, and a RESUME in Slurm brings it back."""
    min_runtime = 15.0
    alloc = service.submit(budget="ai/llm", gpus=4, min_runtime=min_runtime,
                           command=["bash", "-c", TRAPPED])
    a = service.wait_started(alloc["id"])["attempts"][-1]
    host = a["placement"][0][0]
    unalloc = service.submit(budget="ai/vision", gpus=4, min_runtime=0,
                             command=["bash", "-c", TRAPPED])
    u = service.wait_started(unalloc["id"])["attempts"][-1]
    assert u["placement"][0][0] == host  # best fit: the half-used node
    service.wait(lambda: "up on" in service.logs(unalloc["id"]), "unallocated job up")

    slurm_cluster.set_node_state(host, "DRAIN", "bad fan")
    service.wait_host(host, "draining")
    gone = service.wait_workload(unalloc["id"], "preempted")
    assert "got-SIGTERM" in service.logs(unalloc["id"])
    assert gone["attempts"][-1]["ended_at"] < a["started_at"] + min_runtime
    assert service.workload(alloc["id"])["status"] in ("running", "stopping")

    ended = service.wait_workload(alloc["id"], "preempted", timeout_s=min_runtime + 60)
    assert ended["attempts"][-1]["ended_at"] >= a["started_at"] + min_runtime
    assert "got-SIGTERM" in service.logs(alloc["id"])
    h = service.wait_host(host, "repair")
    assert h["gpus_used"] == 0
    assert "DRAIN" in slurm_cluster.node_state(host)  # apportion does not resume it itself

    slurm_cluster.set_node_state(host, "RESUME")
    assert service.wait_host(host, "healthy")["gpus_used"] == 0


def test_drain_and_repair_through_apportion_are_written_back_to_slurm(
    service: SlurmService, slurm_cluster: SlurmCluster
) -> None:
    """POST /hosts/{name}/drain drains the node in Slurm too (with apportion's reason);
    the repair of the empty host resumes it in Slurm."""
    host = slurm_cluster.node_names[-1]
    r = service.client("admin").post(f"/v1/hosts/{host}/drain", json={"reason": "disk check"})
    assert r.status_code == 200, r.text
    assert "DRAIN" in slurm_cluster.node_state(host)
    reason = slurm_cluster.run(["sinfo", "-h", "-n", host, "-o", "%E"]).stdout.strip()
    assert reason == "disk check"
    service.wait_host(host, "repair")  # empty: the drain policy moves it on by itself

    r = service.client("admin").post(f"/v1/hosts/{host}/repair", json={"reason": "checked"})
    assert r.status_code == 200, r.text
    service.wait(lambda: "DRAIN" not in slurm_cluster.node_state(host), f"{host} resumed")
    time.sleep(3 * service.interval_s)  # a few passes: Slurm's view must not undo it
    assert service.hosts()[host]["state"] == "healthy"


def test_slurmctld_outage_loses_nothing_and_reconciles(
    service: SlurmService, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """slurmctld stopped for 30 s: the API keeps accepting submissions (2xx) and loses
    none; afterwards the jobs that ended during the outage are recorded with their real
    end and exit code, the long one still runs, and the submissions made meanwhile run."""
    ends = tmp_path / "ends"
    ends.mkdir()
    ends.chmod(0o777)

    def job(seconds: float, code: int = 0) -> list[str]:
        record = f"echo $EPOCHREALTIME > {ends}/$APPORTION_WORKLOAD_ID"
        return ["bash", "-c", f"sleep {seconds}; {record}; exit {code}"]

    short = service.submit(budget="ai/llm", gpus=2, min_runtime=60, command=job(4))
    failing = service.submit(budget="ai/llm", gpus=2, min_runtime=60, command=job(5, 3))
    long = service.submit(budget="ai/vision", gpus=4, min_runtime=60,
                          command=["bash", "-c", TRAPPED])
    for w in (short, failing, long):  # really running, not only queued in Slurm
        handle = service.wait_started(w["id"])["attempts"][-1]["handle"]
        service.wait_slurm_state(handle, "RUNNING")

    outage_s = 30.0
    slurm_cluster.stop_controller()
    stopped_at = time.time()
    during: list[str] = []
    try:
        while time.time() < stopped_at + outage_s:
            w = service.submit(budget="ai/llm", gpus=1 + len(during) % 4, min_runtime=60,
                               command=job(1))  # raises unless 201
            during.append(w["id"])
            time.sleep(4)
    finally:
        # when its start began: the scheduler may reach slurmctld before this test's own
        # ping loop sees it up (seconds on a loaded machine)
        restarted_at = time.time()
        slurm_cluster.start_controller()
    assert len(during) >= 6

    listed = {w["id"] for w in service.get("/v1/workloads?status=all&limit=100000")}
    assert set(during) <= listed

    s = service.wait_workload(short["id"], ("completed", "failed", "lost"), timeout_s=90)
    assert (s["status"], s["exit_code"]) == ("completed", 0)
    real_end = float((ends / short["id"]).read_text())
    assert real_end < restarted_at
    assert abs(s["attempts"][-1]["ended_at"] - real_end) < 1.0  # its own end, not Slurm's

    f = service.wait_workload(failing["id"], ("completed", "failed", "lost"), timeout_s=90)
    assert (f["status"], f["exit_code"]) == ("failed", 3)
    assert f["attempts"][-1]["ended_at"] < restarted_at

    for wid in during:
        d = service.wait_workload(wid, ("completed", "failed", "lost"), timeout_s=90)
        assert (d["status"], d["exit_code"], d["attempts_count"]) == ("completed", 0, 1)
        # started at its pass's time: a pass begun just before the restart issues sbatch,
        # which waits for the controller up to the executor's command timeout, so a start
        # is recorded at most that (and a pass's interval) before the restart, never in the
        # outage's earlier part
        assert d["attempts"][-1]["started_at"] >= (
            restarted_at - service.timeout_s - service.interval_s)

    lw = service.workload(long["id"])
    assert (lw["status"], lw["attempts_count"]) == ("running", 1)
    assert service.slurm_job(lw["attempts"][-1]["handle"])["JobState"] == "RUNNING"
