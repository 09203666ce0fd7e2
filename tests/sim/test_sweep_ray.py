"""``apportion sweep --engine ray`` on a real Ray cluster: a head started for the test with
``ray start --head`` on loopback (a free port, its own temporary directory), stopped in the
teardown whatever the test did.

The head runs with ``--block`` and is stopped by a SIGTERM to that one process, which stops
every process it started (``ray stop`` would stop every Ray process of the user on the
machine, other clusters included)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_sweep import figures  # tests/sim is on the path (pytest's rootdir-relative imports)

from apportion.sim.scenarios import get_scenario
from apportion.sim.sweep import run_sweep

BIN = Path(sys.executable).parent


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ours(temp_dir: Path | str) -> list[int]:
    """Pids of the processes whose command line names ``temp_dir`` (a cluster's temporary
    directory, or the start of its name)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(temp_dir).encode() in cmd:
            found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class Head:
    address: str
    env: dict[str, str]  # what a client needs: the cluster's own token
    pid: int  # the ``ray start --head --block`` process: SIGTERM stops the cluster


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A one-node Ray cluster with 2 CPUs on 127.0.0.1 and a token of its own (Ray's
    servers listen on every interface even so: the token keeps others out, and a token of
    its own keeps the test clear of ~/.ray/auth_token, which other clusters share)."""
    yield from _head(tmp_path_factory, cpus=2)


def _head(tmp_path_factory: pytest.TempPathFactory, cpus: int) -> Iterator[Head]:
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0"}
    temp_dir = tmp_path_factory.mktemp("ray")  # short: Ray's Unix socket paths live under it
    (port, node_manager, object_manager, agent_listen, agent_grpc, runtime_env,
     metrics) = free_ports(7)
    log = (temp_dir.parent / "ray-head.log").open("w")
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}",
         "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp_dir}",
         f"--node-manager-port={node_manager}",
         f"--object-manager-port={object_manager}",
         f"--dashboard-agent-listen-port={agent_listen}",
         f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}",
         f"--metrics-export-port={metrics}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **auth},
    )
    try:
        deadline = time.monotonic() + 120
        text = ""
        while "Ray runtime started" not in text:
            text = (temp_dir.parent / "ray-head.log").read_text()
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start --head failed (exit {head.poll()}):\n{text}")
            time.sleep(0.5)
        yield Head(f"127.0.0.1:{port}", auth, head.pid)
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)  # the session this fixture started
            head.wait()
        log.close()
        deadline = time.monotonic() + 30
        while ours(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = ours(temp_dir)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes of the test's Ray cluster still running: {left}"


def sweep(*args: str, env: dict[str, str] | None = None, scenario: str = "small",
          days: str = "2") -> subprocess.CompletedProcess[str]:
    """``apportion sweep`` of 2 lookbacks x 2 seeds on ``days`` of ``scenario``, with
    ``env`` added to this process's environment, RAY_ADDRESS removed unless ``env`` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [str(BIN / "apportion"), "sweep", "--scenario", scenario, "--days", days,
         "--grid", "lookback=12h,1d", "--seeds", "0,1", "--quiet", *args],
        capture_output=True, text=True, timeout=600, env={**base, **(env or {})},
    )


def rows_of(out: Path) -> list[dict[str, Any]]:
    return figures(json.loads((out / "sweep.json").read_text()))


def test_ray_sweep_on_a_cluster_matches_the_process_engine(ray_head: Head, tmp_path: Path) -> None:
    """A 2 settings x 2 seeds sweep as Ray tasks on the test's cluster (--address) gives
    exactly the rows of --engine process (every figure but what the runs cost), the same
    table, and the same files."""
    ray = sweep("--engine", "ray", "--address", ray_head.address, "--out", str(tmp_path / "ray"),
                env=ray_head.env)
    assert ray.returncode == 0, ray.stdout + ray.stderr
    proc = sweep("--engine", "process", "--out", str(tmp_path / "proc"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got, want = rows_of(tmp_path / "ray"), rows_of(tmp_path / "proc")
    assert len(want) == 4 and len({json.dumps(r, sort_keys=True) for r in want}) == 4
    assert got == want

    def table(text: str) -> list[list[str]]:  # the table without its last column, wall time
        return [line.split()[:-1] for line in text.splitlines() if not line.startswith("wrote")]

    assert table(ray.stdout) == table(proc.stdout)
    for name in ("sweep.csv", "sweep.json", "sweep.png", "sweep.svg"):
        assert (tmp_path / "ray" / name).stat().st_size > 0


def test_ray_sweep_of_a_fleet_matches_the_process_engine(
        ray_head: Head, tmp_path: Path) -> None:
    """On the fleet scenario (several pools, workloads asking for GPU kinds and clusters)
    the Ray tasks give exactly the rows of --engine process, each summary with its pools:
    the scenario reaches the workers whole."""
    ray = sweep("--engine", "ray", "--address", ray_head.address, "--out", str(tmp_path / "ray"),
                env=ray_head.env, scenario="fleet", days="1")
    assert ray.returncode == 0, ray.stdout + ray.stderr
    proc = sweep("--out", str(tmp_path / "proc"), scenario="fleet", days="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got, want = rows_of(tmp_path / "ray"), rows_of(tmp_path / "proc")
    assert all(len(row["summary"]["pools"]) > 1 for row in want)
    assert got == want


def test_ray_sweep_uses_ray_address(ray_head: Head, tmp_path: Path) -> None:
    """Without --address, RAY_ADDRESS names the cluster: the sweep runs there and its rows
    match the process engine's."""
    env = {**ray_head.env, "RAY_ADDRESS": ray_head.address}
    ray = sweep("--engine", "ray", "--out", str(tmp_path / "ray"), env=env)
    assert ray.returncode == 0, ray.stdout + ray.stderr
    proc = sweep("--out", str(tmp_path / "proc"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows_of(tmp_path / "ray") == rows_of(tmp_path / "proc")


FAILING = """
import sys
from pathlib import Path

from apportion.sim.scenarios import get_scenario
from apportion.sim.sweep import run_point, run_sweep


def failing_at_one_day(scenario, settings, seed):  # shipped to the workers by value
    if settings["lookback"] == 86400.0:
        raise ValueError("injected failure at lookback=1d")
    return run_point(scenario, settings, seed)


run_sweep(get_scenario("small", days=2, seed=0), {}, {"lookback": [86400.0, 43200.0]},
          Path(sys.argv[1]), engine="ray", address=sys.argv[2], progress=False,
          runner=failing_at_one_day)
"""


def test_ray_sweep_reports_a_failed_point_and_runs_the_others(
        ray_head: Head, tmp_path: Path) -> None:
    """On the cluster, the point that raises is reported with its own error (not Ray's
    wrapper) and the other point has the figures of the process engine."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "ray"), ray_head.address],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, **ray_head.env})
    assert run.returncode == 0, run.stdout + run.stderr
    rows = rows_of(tmp_path / "ray")
    assert rows[0]["error"] == "ValueError: injected failure at lookback=1d"
    assert rows[0]["summary"] is None and rows[0]["attainment_overall"] is None
    want = run_sweep(get_scenario("small", days=2, seed=0), {}, {"lookback": [43200.0]},
                     tmp_path / "proc", jobs=1, progress=False)
    assert rows[1]["summary"] == figures(want)[0]["summary"]
    assert rows[1]["error"] is None


def test_ray_sweep_without_address_starts_and_stops_its_own_cluster(tmp_path: Path) -> None:
    """No --address and no RAY_ADDRESS: the sweep starts a local cluster of its own, gets
    the process engine's rows, and leaves no Ray process of its own behind."""
    before = set(ours("apportion-ray-"))  # the prefix of the sweep's own temporary directory
    ray = sweep("--engine", "ray", "--jobs", "2", "--out", str(tmp_path / "ray"))
    assert ray.returncode == 0, ray.stdout + ray.stderr
    proc = sweep("--out", str(tmp_path / "proc"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows_of(tmp_path / "ray") == rows_of(tmp_path / "proc")
    deadline = time.monotonic() + 30  # workers may take a moment to exit after the driver
    while set(ours("apportion-ray-")) - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not set(ours("apportion-ray-")) - before, "the sweep's own Ray cluster is running"


@pytest.fixture(scope="module")
def ray_head_without_cpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A one-node Ray cluster as ``ray_head``, with no CPU (``--num-cpus=0``, as the head of
    a large or autoscaling cluster often is)."""
    yield from _head(tmp_path_factory, cpus=0)


def test_ray_sweep_on_a_cluster_without_cpus_says_no_point_can_start(
        ray_head_without_cpus: Head, tmp_path: Path) -> None:
    """--address of a cluster with no CPU: the sweep says on stderr, within a minute, that
    the cluster has no CPU and every point needs one, naming --address and the address, and
    waits (a node may join); Ctrl-C then stops it, none finished: --out holds only
    points.jsonl, with no point. It waited for ever without a word."""
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp_path / "out"
    run = subprocess.Popen(
        [str(BIN / "apportion"), "sweep", "--scenario", "small", "--days", "2", "--grid",
         "lookback=12h,1d", "--quiet", "--engine", "ray", "--address",
         ray_head_without_cpus.address, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**base, **ray_head_without_cpus.env})
    try:
        assert run.stderr is not None
        line = run.stderr.readline()  # blocks until the sweep says something
        assert line.strip() == (
            f"warning: --address {ray_head_without_cpus.address}: the Ray cluster has no CPU, "
            "and every point needs one: none starts until a node with CPUs joins it (Ctrl-C "
            "stops the sweep)")
    finally:
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    assert "interrupted after 0 of 2 points; none finished" in err
    assert [p.name for p in out.iterdir()] == ["points.jsonl"]
    assert len((out / "points.jsonl").read_text().splitlines()) == 1  # the sweep's name only


@pytest.fixture
def short_lived_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A one-node Ray cluster with 1 CPU for one test, which the test stops half way (the
    teardown stops it if the test did not)."""
    yield from _head(tmp_path_factory, cpus=1)


def test_a_sweep_whose_ray_cluster_goes_away_keeps_its_finished_points_for_resume(
    short_lived_head: Head, tmp_path: Path,
) -> None:
    """A 6-point sweep (one point at a time) on a Ray cluster whose head is stopped once a
    point has finished: Ray ends the driver (exit status not 0), points.jsonl keeps the
    points finished by then (at least one, not all), and the same command with --resume
    and --engine process runs only the rest (its stderr reports no failed point) and
    writes the figures of a whole --engine process run. (Every finished point used to be
    lost with the driver.)"""
    grid = ("--scenario", "seed", "--days", "7", "--grid", "lookback=12h,1d,2d,3d,4d,5d",
            "--quiet")
    out = tmp_path / "out"
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen(
        [str(BIN / "apportion"), "sweep", *grid, "--engine", "ray", "--address",
         short_lived_head.address, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**base, **short_lived_head.env},
    )
    journal = out / "points.jsonl"
    try:
        deadline = time.monotonic() + 300
        while not (journal.exists() and len(journal.read_text().splitlines()) >= 2):
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "no point finished in 300 s"
            time.sleep(0.2)
        os.kill(short_lived_head.pid, signal.SIGTERM)
        _, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode != 0, err
    kept = len(journal.read_text().splitlines()) - 1
    assert 1 <= kept < 6, err
    resumed = subprocess.run(
        [str(BIN / "apportion"), "sweep", *grid, "--resume", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=base)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "failed" not in resumed.stderr
    assert len(journal.read_text().splitlines()) == 7  # its name, the kept and the rest
    whole = subprocess.run(
        [str(BIN / "apportion"), "sweep", *grid, "--out", str(tmp_path / "whole")],
        capture_output=True, text=True, timeout=600, env=base)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert rows_of(out) == rows_of(tmp_path / "whole")
