"""Pools in the live service: hosts of several clusters and GPU kinds, from the config to
the store, the scheduler, the API and ``why``.

The service here is real (store on SQLite or PostgreSQL, the Scheduler with the memory
executor and a fake clock, the FastAPI app under uvicorn); the scheduler is stepped by hand.
Two pools: ``east/H100`` (hosts e1, e2) and ``west/B200`` (host w1), B200 billed 2.2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.config import Config
from click.testing import CliRunner
from sqlalchemy import text
from store_db import BACKENDS, ServerThread, db_url

from apportion.cli.main import main
from apportion.core import HostState
from apportion.service.api import create_app
from apportion.service.clock import FakeClock
from apportion.service.config import ConfigError, PoolsConfig, ServiceConfig, parse_config
from apportion.service.executor import InventoryHost
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.scheduler import Scheduler
from apportion.service.store import Store
from apportion.service.store.seed import check_overrides, seed_store
from apportion.service.store.store import MIGRATIONS

BASE: dict[str, Any] = {
    "executor": {"kind": "memory"},
    "billing": {"H100": 1.0, "B200": 2.2},
    "hosts": [
        {"name": "e1", "gpus": 8, "cluster": "east", "kind": "H100"},
        {"name": "e2", "gpus": 8, "cluster": "east", "kind": "H100"},
        {"name": "w1", "gpus": 8, "cluster": "west", "kind": "B200"},
    ],
    "budgets": [{"path": "ai", "members": ["alice"]}, {"path": "ops", "members": ["alice"]}],
    "users": [{"name": "alice"}],
}
JOB = {"budget": "ai", "gpus": 8, "min_runtime": "1h", "command": ["train"]}


# ---- config ----------------------------------------------------------------------------------
def test_hosts_carry_their_cluster_and_kind_and_billing_is_read() -> None:
    """``[[hosts]] cluster/kind``, top-level ``billing`` and ``overrides`` (the simulator's
    ``--cluster FILE`` vocabulary) and ``[pools]`` defaults are read as given."""
    cfg = parse_config({**BASE, "pools": {"cluster": "main", "kind": "A100"},
                        "overrides": {"west/B200": {"ops": 0}}})
    assert [(h.name, h.cluster, h.kind) for h in cfg.hosts] == [
        ("e1", "east", "H100"), ("e2", "east", "H100"), ("w1", "west", "B200")]
    assert dict(cfg.pools.billing) == {"H100": 1.0, "B200": 2.2}
    assert cfg.pools.fleet().overrides == {"west/B200": {"ops": 0.0}}
    assert cfg.pools.of("", "") == ("main", "A100")
    assert cfg.pools.of("east", "") == ("east", "A100")


def test_a_config_without_pools_is_one_default_pool() -> None:
    """No cluster, kind or billing anywhere: every host in ``default/gpu``, billed 1."""
    cfg = parse_config({"hosts": [{"name": "h1", "gpus": 8}]})
    assert (cfg.hosts[0].cluster, cfg.hosts[0].kind) == ("", "")
    assert cfg.pools.of("", "") == ("default", "gpu")
    assert cfg.pools.fleet().weight("gpu") == 1.0 and not cfg.pools.overrides


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"billing": {"B200": 0}}, "apportion.toml: billing.B200: must be a number > 0, got 0"),
        ({"billing": {"B200": "2.2"}}, "apportion.toml: billing.B200: must be a number > 0"),
        ({"billing": {"B/200": 2}}, "apportion.toml: billing.B/200: must be a GPU kind"),
        ({"billing": [1]}, "apportion.toml: billing: must be a table"),
        ({"hosts": [{"name": "e1", "gpus": 8, "kind": "H/100"}]},
         "apportion.toml: hosts[0].kind: must be 1 to 64 letters, digits"),
        ({"hosts": [{"name": "e1", "gpus": 8, "cluster": 3}]},
         "apportion.toml: hosts[0].cluster: must be a string, got 3"),
        ({"overrides": {"B200": {"ai": 1}}},
         'apportion.toml: overrides.B200: must be a pool named "cluster/kind"'),
        ({"overrides": {"west/B200": {"ai": -1}}},
         "apportion.toml: overrides.west/B200.ai: must be a number >= 0, got -1"),
        ({"pools": {"kinds": "H100"}},
         "apportion.toml: pools.kinds: unknown key (valid keys: cluster, kind)"),
        ({"overrides": {"west/B300": {"ai": 2}}},
         "apportion.toml: overrides.west/B300: no host is in pool west/B300 (the hosts' "
         "pools: east/H100, west/B200)"),
        ({"overrides": {"default/gpu": {"ai": 2}}},  # [pools]' default: no host names none
         "apportion.toml: overrides.default/gpu: no host is in pool default/gpu (the hosts' "
         "pools: east/H100, west/B200)"),
    ],
)
def test_bad_pools_config_names_the_file_and_field(change: dict[str, Any],
                                                    message: str) -> None:
    """Each mistake is one ConfigError naming the file and the dotted field."""
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, **change}, source="apportion.toml")
    assert str(e.value).startswith(message), str(e.value)


def test_override_budgets_are_checked_against_the_databases_budgets(tmp_path: Path) -> None:
    """Once the database exists its budgets are the ones there are: a per-pool weight of
    cs/nlp, created with ``apportion budgets create`` and absent from ``[[budgets]]``, is
    accepted (it was refused as unknown, naming the config's budgets), and one the
    database lacks is refused naming the database; on a first start (an empty database)
    the budgets the config seeds are the ones checked."""
    cfg = parse_config({**BASE, "overrides": {"west/B200": {"cs/nlp": 3.0}}},
                       source="apportion.toml")
    store = Store(db_url("sqlite", tmp_path))
    store.migrate()
    try:
        with pytest.raises(ConfigError) as first:
            check_overrides(store, cfg)
        assert str(first.value) == ("apportion.toml: overrides.west/B200.cs/nlp: unknown "
                                    "budget (the config's: ai, ops)")
        seed_store(store, cfg, write_tokens=False)
        store.add_budget("cs/nlp", 1.0, actor="alice", create_parents=True)
        check_overrides(store, cfg)
        typo = parse_config({**BASE, "overrides": {"west/B200": {"cs/nlq": 3.0}}},
                            source="apportion.toml")
        with pytest.raises(ConfigError) as e:
            check_overrides(store, typo)
        assert str(e.value) == ("apportion.toml: overrides.west/B200.cs/nlq: unknown budget "
                                "(not in the database; did you mean cs/nlp?)")
    finally:
        store.close()


def test_override_pools_are_checked_against_the_hosts_of_the_config() -> None:
    """A per-pool weight of the pool a host names only through ``[pools]``' defaults is
    accepted; with the Slurm executor the hosts (and so the pools) are Slurm's, not the
    config's, and a pool the config lists no host of is accepted."""
    cfg = parse_config({**BASE, "pools": {"cluster": "north", "kind": "B300"},
                        "hosts": [*BASE["hosts"], {"name": "n1", "gpus": 8}],
                        "overrides": {"north/B300": {"ai": 2}}})
    assert cfg.pools.fleet().overrides == {"north/B300": {"ai": 2.0}}
    slurm = parse_config({**BASE, "executor": {"kind": "slurm"},
                          "overrides": {"north/B300": {"ai": 2}}})
    assert slurm.pools.fleet().overrides == {"north/B300": {"ai": 2.0}}


# ---- a two-pool service ---------------------------------------------------------------------
class Svc:
    def __init__(self, tmp_path: Path, backend: str, config: ServiceConfig) -> None:
        self.config = config
        self.clock = FakeClock(1_000_000.0)
        self.store = Store(db_url(backend, tmp_path), clock=self.clock.now)
        self.store.migrate()
        self.tokens = seed_store(self.store, config, write_tokens=False)
        self.executor = MemoryExecutor(
            [InventoryHost(h.name, h.gpus, "healthy", cluster=h.cluster, kind=h.kind)
             for h in config.hosts], self.clock)
        self.sched = self.scheduler()
        self.server = ServerThread(create_app(self.store, self.sched, config))
        self.client = httpx.Client(base_url=self.server.url, timeout=60)

    def scheduler(self) -> Scheduler:
        return Scheduler(self.store, self.executor, self.config.policy, self.clock,
                         grace_s=0.0, pools=self.config.pools)

    def call(self, method: str, url: str, body: Any = None) -> httpx.Response:
        return self.client.request(method, url, json=body,
                                   headers={"Authorization": f"Bearer {self.tokens['alice']}"})

    def submit(self, **body: Any) -> httpx.Response:
        return self.call("POST", "/v1/workloads", {**JOB, **body})

    def hosts_of(self, wid: str) -> list[str]:
        a = self.store.get_workload(wid).attempt
        assert a is not None, wid
        return [h for h, _, _ in a.placement]

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.store.close()


@pytest.fixture(params=BACKENDS)
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Svc]:
    s = Svc(tmp_path, request.param, parse_config(BASE, base_dir=tmp_path))
    try:
        yield s
    finally:
        s.close()


def test_work_runs_only_in_a_pool_of_a_kind_it_accepts(svc: Svc) -> None:
    """``gpu_kind: ["B200"]`` starts on the B200 host, and its launch names the pool;
    ``"H100,B200"`` and no kind take what is free; the reply shows the kinds asked and,
    once running, the pool."""
    b200 = svc.submit(gpu_kind=["B200"]).json()
    assert b200["gpu_kinds"] == ["B200"] and b200["cluster"] == "" and "pool" not in b200
    svc.sched.step()
    assert svc.hosts_of(b200["id"]) == ["w1"]
    launch = next(x for x in svc.executor.launches if x.workload_id == b200["id"])
    assert (launch.cluster, launch.kind) == ("west", "B200")
    assert svc.call("GET", f"/v1/workloads/{b200['id']}").json()["pool"] == "west/B200"
    either = svc.submit(gpu_kind="H100,B200").json()
    anything = svc.submit().json()
    assert either["gpu_kinds"] == ["H100", "B200"] and anything["gpu_kinds"] == []
    svc.sched.step()
    assert {svc.hosts_of(either["id"])[0], svc.hosts_of(anything["id"])[0]} == {"e1", "e2"}
    queue = svc.call("GET", "/v1/queue").json()
    assert {r["id"]: r["pool"] for r in queue["running"]} == {
        b200["id"]: "west/B200", either["id"]: "east/H100", anything["id"]: "east/H100"}


def test_the_queue_numbers_pending_work_in_its_pools_order_as_why_does(svc: Svc) -> None:
    """Every host full; waiting: allocated work of any kind (in both pools), unallocated
    work for H100 (east/H100) and allocated work for B200 (west/B200). Each pool's pass
    has its own order, so the queue lists pending work pool by pool, each entry with its
    pool and its position in that pool's order (``apportion queue``: a POOL column), and
    why tells the same position in the same pool: the any-kind work under east/H100, the
    first pool it waits in, holding first place in west/B200 too, where the B200 work is
    second."""
    for kind in ("H100", "H100", "B200"):
        assert svc.submit(gpu_kind=[kind]).status_code == 201
    svc.sched.step()
    any_kind = svc.submit().json()["id"]
    free_h100 = svc.submit(gpu_kind=["H100"], min_runtime=0).json()["id"]
    alloc_b200 = svc.submit(gpu_kind=["B200"]).json()["id"]
    svc.sched.step()
    pending = svc.call("GET", "/v1/queue").json()["pending"]
    assert [(r["id"], r["pool"], r["position"]) for r in pending] == [
        (any_kind, "east/H100", 1), (free_h100, "east/H100", 2), (alloc_b200, "west/B200", 2)]
    for wid, said in [(any_kind, "position 1 of 2 in pool east/H100's order"),
                      (free_h100, "position 2 of 2 in pool east/H100's order"),
                      (alloc_b200, "position 2 of 2 in pool west/B200's order")]:
        assert svc.call("GET", f"/v1/workloads/{wid}/why").json()["text"][1] == said
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    r = CliRunner().invoke(main, ["queue", "--state", "pending"], env=env,
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert [line.split()[:6] for line in r.output.splitlines()] == [
        ["POS", "ID", "NAME", "USER", "BUDGET", "POOL"],
        ["1", any_kind, "-", "alice", "ai", "east/H100"],
        ["2", free_h100, "-", "alice", "ai", "east/H100"],
        ["2", alloc_b200, "-", "alice", "ai", "west/B200"]]


def test_work_waiting_for_a_victims_checkpoint_is_said_so_with_two_pools(svc: Svc) -> None:
    """ops's resumable B200 work (all of w1, checkpointing every 5 min) is 70 s in when ai
    asks for 4 B200 GPUs: ai's work waits for that checkpoint, and ``/v1/queue`` and
    ``apportion queue`` say so, as ``why`` does (they said the pass had not reached it:
    merging the pools' decisions dropped the reason)."""
    victim = svc.submit(budget="ops", gpu_kind=["B200"], min_runtime="1m", resumable=True,
                        checkpoint_interval="5m").json()["id"]
    svc.sched.step()
    assert svc.hosts_of(victim) == ["w1"]
    svc.clock.set(svc.clock.now() + 70)
    wid = svc.submit(gpu_kind=["B200"], gpus=4, min_runtime="1m").json()["id"]
    svc.sched.step()
    pending = svc.call("GET", "/v1/queue").json()["pending"]
    assert [(r["id"], r["wait_reason"]) for r in pending] == [(wid, "waiting_for_checkpoint")]
    assert svc.call("GET", f"/v1/workloads/{wid}/why").json()["wait_reason"] == (
        "waiting_for_checkpoint")
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    r = CliRunner().invoke(main, ["queue"], env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "(waiting for a victim's checkpoint; waited " in r.output, r.output


def test_work_for_a_cluster_waits_for_that_cluster(svc: Svc) -> None:
    """``cluster: "west"`` never starts in east, even with east idle."""
    first = svc.submit(cluster="west").json()["id"]
    second = svc.submit(cluster="west").json()["id"]
    svc.sched.step()
    assert svc.hosts_of(first) == ["w1"]
    assert svc.store.get_workload(second).attempt is None
    assert svc.sched.queue_view().pending[0].cluster == "west"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"gpu_kind": ["A100"]}, "gpu_kind: unknown GPU kind 'A100' (the fleet has B200, H100)"),
        ({"gpu_kind": "H100,A100"},
         "gpu_kind: unknown GPU kind 'A100' (the fleet has B200, H100)"),
        ({"cluster": "north"}, "cluster: unknown cluster 'north' (the fleet has east, west)"),
        ({"cluster": "east", "gpu_kind": ["B200"]},
         "cluster: cluster east has no B200 GPUs (the fleet has them in west)"),
        ({"gpus": 9, "gpu_kind": ["B200"]},
         "gpus: 9 is more than any pool it may use holds (west/B200: 8)"),
        ({"gpus": 17}, "gpus: 17 is more than any pool holds (east/H100: 16, west/B200: 8)"),
        ({"nodelist": ["w1"], "gpu_kind": ["H100"]},
         "nodelist: the hosts it may use (w1) have no H100 GPUs"),
        ({"exclude": ["e1", "e2"], "gpu_kind": ["H100"]},
         "exclude: the hosts it may use (w1) have no H100 GPUs"),
    ],
)
def test_an_unknown_kind_or_cluster_is_refused_naming_the_field(
    svc: Svc, body: dict[str, Any], detail: str
) -> None:
    """422 with the field first and what exists; nothing stored. Too many GPUs for each of
    the pools names what each holds (it named the first pool's, east/H100's, alone), and
    so does too many for the one pool of its kind (it said "the cluster's 8"); a kind the
    cluster lacks is said of the cluster (it said no pool of B200 there funds ai); a
    host list holding none of the kind asked for names the host field sent (it said no
    pool of H100 funds the budget)."""
    r = svc.submit(**body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(detail), r.json()
    assert svc.store.list_workloads() == []


def test_hosts_show_their_cluster_kind_and_pool(svc: Svc) -> None:
    """``GET /v1/hosts`` names each host's cluster, kind and pool."""
    got = {h["name"]: (h["cluster"], h["kind"], h["pool"])
           for h in svc.call("GET", "/v1/hosts").json()}
    assert got == {"e1": ("east", "H100", "east/H100"), "e2": ("east", "H100", "east/H100"),
                   "w1": ("west", "B200", "west/B200")}


def test_why_advises_a_kind_that_would_start_it_now(svc: Svc) -> None:
    """Work asking for B200 waits while w1 is full and both H100 hosts are free: ``why``
    says H100 in east would start it now, with the flag to use."""
    svc.submit(gpu_kind=["B200"])
    svc.sched.step()
    waiting = svc.submit(gpu_kind=["B200"]).json()["id"]
    svc.sched.step()
    why = svc.call("GET", f"/v1/workloads/{waiting}/why").json()
    assert why["pool_advice"] == [
        "waiting for B200 GPUs; H100 in east would start it now (--gpu-kind H100)"]
    assert why["text"][-1] == why["pool_advice"][0]
    assert why["pool"] == "west/B200"


def test_work_for_a_kind_with_no_healthy_host_is_said_so_naming_the_pool(svc: Svc) -> None:
    """w1, the only B200 host, drained (empty: in repair): 4 GPUs of B200 wait as too
    large, and the queue says more GPUs than the healthy hosts it may use hold with each
    pool's healthy GPUs (it said "too large for the cluster" with 16 H100 GPUs free);
    ``why`` names the pool whose healthy hosts it counts (it said "0 of 8 GPUs are
    healthy" of no pool)."""
    svc.sched.set_host_state("w1", HostState.DRAINING, "ECC", "admin")
    wid = svc.submit(gpu_kind=["B200"], gpus=4).json()["id"]
    svc.sched.step()
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    r = CliRunner().invoke(main, ["queue"], env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert ("(more GPUs than the healthy hosts it may use hold (west/B200: 0 healthy); "
            "waited ") in r.output
    why = svc.call("GET", f"/v1/workloads/{wid}/why").json()
    assert why["wait_reason"] == "too_large"
    assert "waiting: too large (more GPUs than all healthy hosts of pool west/B200 " \
           "together)" in why["text"]
    assert why["caveats"] == [
        "asks for more GPUs than all healthy hosts of pool west/B200 together (0 of 8 GPUs "
        "are healthy; not healthy: w1 repair): it starts only once enough hosts are "
        "healthy again"]

def test_usage_is_charged_in_billed_units_and_survives_a_restart(svc: Svc) -> None:
    """One hour of 8 B200 GPUs charges 8 x 3600 x 2.2 units to its budget; a scheduler
    rebuilt from the store charges the same."""
    wid = svc.submit(gpu_kind=["B200"]).json()["id"]
    svc.sched.step()
    t0 = svc.clock.now()
    svc.clock.set(t0 + 3600)
    svc.executor.finish(wid)
    svc.sched.step()
    assert svc.store.get_workload(wid).status.value == "completed"

    def charged(s: Scheduler) -> float:
        assert s.state is not None
        return s.state.ledger.charged("ai", svc.clock.now(), s.config.lookback)

    assert charged(svc.sched) == pytest.approx(8 * 3600 * 2.2, rel=1e-12)
    again = svc.scheduler()
    again.start()
    assert charged(again) == pytest.approx(8 * 3600 * 2.2, rel=1e-12)


def test_budgets_usage_gives_gpu_hours_and_billed_units_apart(svc: Svc) -> None:
    """An hour of 8 B200 GPUs (billed 2.2): GET /v1/budgets/usage says 8 GPU-hours charged
    and 17.6 units, the units the usage ratio counts; it once gave the units as GPU-hours.
    ``apportion budgets usage`` shows both columns on a server that bills."""
    wid = svc.submit(gpu_kind=["B200"]).json()["id"]
    svc.sched.step()
    svc.clock.set(svc.clock.now() + 3600)
    svc.executor.finish(wid)
    svc.sched.step()
    usage = svc.call("GET", "/v1/budgets/usage").json()
    ai = next(b for b in usage["budgets"] if b["path"] == "ai")
    assert (usage["source"], usage["billed"]) == ("scheduler", True)
    assert ai["charged_gpu_hours"] == pytest.approx(8.0, rel=1e-12)
    assert ai["charged_units"] == pytest.approx(8 * 2.2, rel=1e-12)
    result = CliRunner().invoke(main, ["budgets", "usage", "--url", svc.server.url, "--token",
                                       svc.tokens["alice"]])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("GPU kinds are billed: the ratios count CHARGED_UNITS")
    assert lines[1].split() == ["BUDGET", "SHARE", "CHARGED_GPU_H", "CHARGED_UNITS",
                                "FREE_GPU_H", "RATIO"]
    assert next(line for line in lines if line.startswith("ai ")).split()[2:4] == [
        "8.0", "17.6"]


# ---- the store -------------------------------------------------------------------------------
def test_queue_and_dashboard_name_gpus_and_billed_units_apart(svc: Svc) -> None:
    """8 B200 GPUs (billed 2.2) running for ai: /v1/queue says 8 GPUs charged now and 17.6
    units charged now (it said 17.6 as GPUs); after an hour the dashboard state's
    ``charged_units`` is 17.6 (the billed units it called ``charged_gpu_hours``)."""
    t0 = svc.clock.now()
    svc.submit(gpu_kind=["B200"])
    svc.sched.step()
    ai = next(b for b in svc.call("GET", "/v1/queue").json()["budgets"] if b["path"] == "ai")
    assert (ai["gpus_charged_now"], ai["gpus_free_now"]) == (8.0, 0.0)
    assert ai["units_charged_now"] == pytest.approx(17.6, rel=1e-12)
    svc.clock.set(t0 + 3600)
    svc.sched.step()
    state = svc.call("GET", "/v1/dashboard/state").json()
    ai = next(b for b in state["budgets"] if b["path"] == "ai")
    assert ai["charged_units"] == pytest.approx(17.6, rel=1e-9)
    assert "charged_gpu_hours" not in ai


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_from_0006_keeps_hosts_and_workloads_in_the_default_pool(
    tmp_path: Path, backend: str
) -> None:
    """A host and a workload stored at revision 0006 survive migration 0007: the host in
    the default cluster and kind (""), the workload accepting any kind in any cluster."""
    store = Store(db_url(backend, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0006")
        conn.execute(text("INSERT INTO hosts (name, gpus, state, reason, changed_at) "
                          "VALUES ('h1', 8, 'healthy', '', 1.0)"))
        conn.execute(text(
            "INSERT INTO workloads (id, budget, \"user\", gpus, min_runtime, resumable, "
            "priority, checkpoint_interval, command, submit_time, queued_at, status, "
            "cancel_requested, attempts_count, created_at) VALUES ('w-000001', 'ai', "
            "'alice', 8, 60.0, false, 0, 0.0, '[\"train\"]', 1.0, 1.0, 'pending', false, 0, "
            "1.0)"))
    store.migrate()
    try:
        (h,) = store.hosts()
        assert (h.name, h.gpus, h.cluster, h.kind) == ("h1", 8, "", "")
        w = store.get_workload("w-000001")
        assert (w.gpus, w.gpu_kinds, w.cluster) == (8, (), "")
        assert w.spec().gpu_kinds == () and w.spec().cluster == ""
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_store_keeps_kinds_clusters_and_host_pools(tmp_path: Path, backend: str) -> None:
    """A workload's kinds (in order) and cluster, and a host's cluster and kind (set at
    registration and changed later, audited), read back as written."""
    store = Store(db_url(backend, tmp_path))
    store.migrate()
    try:
        store.add_budget("ai", 1.0, "admin")
        w = store.add_workload(budget="ai", gpus=1, min_runtime=60, submit_time=1.0,
                               command=["x"], actor="alice", gpu_kinds=["B200", "H100"],
                               cluster="west")
        assert (w.gpu_kinds, w.cluster) == (("B200", "H100"), "west")
        assert store.get_workload(w.id).spec().gpu_kinds == ("B200", "H100")
        store.add_host("w1", 8, "admin", cluster="west", kind="B200")
        assert (store.get_host("w1").cluster, store.get_host("w1").kind) == ("west", "B200")
        store.set_host_pool("w1", "west", "B300", "scheduler")
        assert store.get_host("w1").kind == "B300"
        (entry,) = store.audit(limit=10, target="w1")[:1]
        assert (entry.action, entry.old, entry.new) == (
            "host.pool", {"cluster": "west", "kind": "B200"},
            {"cluster": "west", "kind": "B300"})
    finally:
        store.close()


def test_usage_report_charges_billed_units_with_a_breakdown_by_pool(svc: Svc) -> None:
    """An hour of 8 B200 GPUs and an hour of 8 H100 GPUs: the report charges budget ai 16
    GPU-hours and 8 x 2.2 + 8 = 25.6 units, and each pool its own GPU-hours, units and
    occupancy (of its own healthy GPU-hours)."""
    t0 = svc.clock.now()
    b200 = svc.submit(gpu_kind=["B200"]).json()["id"]
    h100 = svc.submit(gpu_kind=["H100"]).json()["id"]
    svc.sched.step()
    svc.clock.set(t0 + 3600)
    svc.executor.finish(b200)
    svc.executor.finish(h100)
    svc.sched.step()
    r = svc.call("GET", f"/v1/reports/usage?from={t0}&to={t0 + 3600}")
    assert r.status_code == 200, r.text
    report = r.json()
    ai = next(b for b in report["budgets"] if b["budget"] == "ai")
    assert ai["charged_gpu_hours"] == pytest.approx(16.0, rel=1e-12)
    assert ai["charged_units"] == pytest.approx(8 * 2.2 + 8, rel=1e-12)
    pools = {p["pool"]: p for p in report["pools"]}
    assert set(pools) == {"east/H100", "west/B200"}
    west, east = pools["west/B200"], pools["east/H100"]
    assert (west["billing"], west["gpus"], east["billing"], east["gpus"]) == (2.2, 8, 1.0, 16)
    assert west["charged_gpu_hours"] == pytest.approx(8.0, rel=1e-12)
    assert west["charged_units"] == pytest.approx(17.6, rel=1e-12)
    assert east["charged_units"] == pytest.approx(8.0, rel=1e-12)
    assert west["occupancy"] == pytest.approx(1.0, rel=1e-12)
    assert east["occupancy"] == pytest.approx(0.5, rel=1e-12)


def test_occupancy_counts_only_work_on_healthy_hosts_on_metrics_and_in_the_report(
        svc: Svc) -> None:
    """east/H100 full (e1 and e2, 8 GPUs each) for an hour, e1 drained half way with its
    work still running: ``/metrics`` says 8 used on 8 healthy (1.0, not 16 / 8), and the
    report's pool occupancy is 12 of 12 healthy GPU-hours (1.0, not 16 / 12); the GPUs
    used still count all 16."""
    t0 = svc.clock.now()
    ids = [svc.submit(gpu_kind=["H100"]).json()["id"] for _ in range(2)]
    svc.sched.step()
    assert sorted(h for w in ids for h in svc.hosts_of(w)) == ["e1", "e2"]
    svc.clock.set(t0 + 1800)
    svc.sched.set_host_state("e1", HostState.DRAINING, "ECC", "admin")
    svc.sched.step()
    text_ = svc.call("GET", "/metrics").text
    assert 'apportion_gpus_used{pool="east/H100"} 16.0' in text_
    assert 'apportion_pool_occupancy{pool="east/H100"} 1.0' in text_
    svc.clock.set(t0 + 3600)
    for w in ids:
        svc.executor.finish(w)
    svc.sched.step()
    r = svc.call("GET", f"/v1/reports/usage?from={t0}&to={t0 + 3600}")
    assert r.status_code == 200, r.text
    east = next(p for p in r.json()["pools"] if p["pool"] == "east/H100")
    assert east["healthy_gpu_hours"] == pytest.approx(12.0, rel=1e-12)
    assert east["charged_gpu_hours"] == pytest.approx(16.0, rel=1e-12)
    assert east["occupancy"] == pytest.approx(1.0, rel=1e-12)
    assert r.json()["occupancy"] == pytest.approx(12 / 20, rel=1e-12)  # w1 idle: 8 more


def test_metrics_and_dashboard_show_hosts_by_pool(svc: Svc) -> None:
    """``/metrics`` labels host gauges with their pool and gives each pool's occupancy;
    the dashboard's hosts come grouped by pool, each naming it."""
    svc.submit(gpu_kind=["B200"])
    svc.sched.step()
    text_ = svc.call("GET", "/metrics").text
    assert 'apportion_hosts{pool="east/H100",state="healthy"} 2.0' in text_
    assert 'apportion_host_gpus{pool="west/B200",state="healthy"} 8.0' in text_
    assert 'apportion_gpus_used{pool="west/B200"} 8.0' in text_
    assert 'apportion_pool_occupancy{pool="west/B200"} 1.0' in text_
    assert 'apportion_pool_occupancy{pool="east/H100"} 0.0' in text_
    hosts = svc.call("GET", "/v1/dashboard/state").json()["hosts"]
    assert [(h["pool"], h["name"]) for h in hosts] == [
        ("east/H100", "e1"), ("east/H100", "e2"), ("west/B200", "w1")]


def test_cli_submit_takes_gpu_kinds_and_a_cluster(svc: Svc, tmp_path: Path) -> None:
    """``apportion submit --gpu-kind H100,B200 --cluster west`` stores both (kinds in the
    order given); an unknown kind fails naming the flag as typed and what exists, and
    --nodelist holding none of the kind asked for names --nodelist, and a cluster without
    the kind asked for names --cluster (it named --gpu-kind); a batch
    script's ``#SBATCH --gres=gpu:b200:8`` asks for 8 B200 GPUs (Slurm's type, upper case)."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    common = ("submit", "--budget", "ai", "--gpus", "8", "--min-runtime", "1h")
    r = run(*common, "--gpu-kind", "H100,B200", "--cluster", "west", "--json", "--", "train")
    assert r.exit_code == 0, r.output
    w = svc.store.list_workloads()[0]
    assert (w.gpu_kinds, w.cluster) == (("H100", "B200"), "west")
    r = run(*common, "--gpu-kind", "A100", "--", "train")
    assert r.exit_code == 2
    assert "--gpu-kind: unknown GPU kind 'A100' (the fleet has B200, H100)" in r.output
    r = run(*common, "-w", "w1", "--gpu-kind", "H100", "--", "train")
    assert r.exit_code == 2
    assert "Error: --nodelist: the hosts it may use (w1) have no H100 GPUs" in r.output
    r = run(*common, "--gpu-kind", "B200", "--cluster", "east", "--", "train")
    assert r.exit_code == 2
    assert ("Error: --cluster: cluster east has no B200 GPUs (the fleet has them in west)"
            in r.output)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gres=gpu:b200:8\n#APPORTION --budget ai\n"
                      "#APPORTION --min-runtime 1h\ntrain\n")
    r = run("submit", str(script))
    assert r.exit_code == 0, r.output
    last = svc.store.list_workloads()[-1]
    assert (last.gpus, last.gpu_kinds) == (8, ("B200",))


def test_cli_show_prints_the_kinds_cluster_and_pool(svc: Svc) -> None:
    """``apportion show`` prints the GPU kinds (in the order given) and the cluster asked
    for, and the pool of running work (it printed none of them); work asking for any kind
    anywhere, still pending, prints none of the three."""
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    running = svc.submit(gpu_kind=["B200", "H100"], cluster="west").json()["id"]
    svc.sched.step()
    pending = svc.submit(gpus=16).json()["id"]

    def show(wid: str) -> list[str]:
        r = CliRunner().invoke(main, ["show", wid], env=env, catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.output.splitlines()

    lines = show(running)
    assert "gpu kinds:           B200,H100" in lines
    assert "cluster:             west" in lines
    assert "pool:                west/B200" in lines
    assert not [line for line in show(pending)
                if line.startswith(("gpu kinds:", "cluster:", "pool:"))]

def test_executors_report_the_configured_hosts_pools(tmp_path: Path) -> None:
    """The local and memory executors built from a config report each host's cluster and
    kind as configured ("" where the config names none: the [pools] defaults)."""
    from apportion.cli.serve import build_executor

    data = {**BASE, "hosts": [*BASE["hosts"], {"name": "x1", "gpus": 4}],
            "server": {"data_dir": str(tmp_path / "data"), "single_user": True}}
    for kind in ("memory", "local"):
        cfg = parse_config({**data, "executor": {"kind": kind}}, base_dir=tmp_path)
        ex = build_executor(cfg, FakeClock(0.0))
        try:
            assert [(h.name, h.cluster, h.kind) for h in ex.inventory()] == [
                ("e1", "east", "H100"), ("e2", "east", "H100"), ("w1", "west", "B200"),
                ("x1", "", "")], kind
        finally:
            ex.close()


def test_a_host_the_executor_moves_to_another_kind_is_stored_and_rebuilt(svc: Svc) -> None:
    """The executor reports w1 as B300 now (e.g. Slurm's gres type): the pass stores the new
    kind (audited) and decides nothing; the next one runs on the rebuilt pools."""
    import dataclasses

    svc.sched.step()
    svc.executor._hosts["w1"] = dataclasses.replace(svc.executor._hosts["w1"], kind="B300")
    assert svc.sched.step() == []
    assert svc.store.get_host("w1").kind == "B300"
    wid = svc.submit(gpu_kind=["B300"]).json()["id"]
    svc.sched.step()
    assert svc.hosts_of(wid) == ["w1"]
    assert svc.sched.state is not None
    assert set(svc.sched.state.pools) == {"east/H100", "west/B300"}


def test_cli_report_usage_prints_a_row_per_pool(svc: Svc) -> None:
    """``apportion report usage`` with two pools: after the budget table, one row per pool
    with its billing weight, GPUs and charged units."""
    from click.testing import CliRunner

    from apportion.cli.main import main

    t0 = svc.clock.now()
    wid = svc.submit(gpu_kind=["B200"]).json()["id"]
    svc.sched.step()
    svc.clock.set(t0 + 3600)
    svc.executor.finish(wid)
    svc.sched.step()
    env = {"APPORTION_URL": svc.server.url, "APPORTION_TOKEN": svc.tokens["alice"],
           "APPORTION_CLIENT_CONFIG": "/dev/null"}
    r = CliRunner().invoke(main, ["report", "usage", "--from", str(t0), "--to",
                                  str(t0 + 3600)], env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("POOL"))
    assert lines[header].split()[:4] == ["POOL", "BILLING", "GPUS", "HEALTHY"]
    assert lines[header + 1].split()[:6] == ["east/H100", "1.0", "16", "16.0", "0.0", "0.0"]
    assert lines[header + 2].split()[:6] == ["west/B200", "2.2", "8", "8.0", "8.0", "17.6"]


def test_per_pool_weights_apply_and_an_unknown_budget_is_logged_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``overrides."west/B200" = {ops = 0}``: ops is not funded on the B200 host, so its
    B200 work is refused naming the pool rule, and so is its work for cluster west, naming
    the cluster (it named gpu_kind, not sent), while ai's runs there. A weight of a budget
    the database lacks (the budgets came from the database, not the config) is logged by
    the scheduler and left out."""
    cfg = parse_config({**BASE, "overrides": {"west/B200": {"ops": 0}}}, base_dir=tmp_path)
    s = Svc(tmp_path, "sqlite", cfg)
    try:
        r = s.submit(budget="ops", gpu_kind=["B200"])
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == "gpu_kind: no pool of B200 funds budget ops"
        r = s.submit(budget="ops", cluster="west")
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == "cluster: no pool of any kind in cluster west funds " \
            "budget ops"
        ok = s.submit(gpu_kind=["B200"]).json()["id"]
        s.sched.step()
        assert s.hosts_of(ok) == ["w1"]
        ghost = PoolsConfig(billing=dict(cfg.pools.billing),
                            overrides={"west/B200": {"gone": 2.0, "ops": 0.0}})
        with caplog.at_level("WARNING", logger="apportion.scheduler"):
            again = Scheduler(s.store, s.executor, cfg.policy, s.clock, pools=ghost)
            again.start()
        assert "per-pool weights of budgets that do not exist, left out: west/B200: gone" \
            in caplog.text
        assert again.state is not None
        assert again.state.config.overrides == {"west/B200": {"ops": 0.0}}
    finally:
        s.close()


def test_a_billing_weight_changed_in_the_config_is_audited_and_logged_at_start(
    svc: Svc, caplog: pytest.LogCaptureFixture
) -> None:
    """The first start audits each kind's billing weight (``pool.billing`` by ``config``,
    old none); a restart with the same weights audits nothing more; a restart with B200 at
    3.0 instead of 2.2 writes one entry, 2.2 -> 3.0, and warns in the log that past work is
    recharged at it (a change repriced all past usage with no record of it)."""
    def billing() -> list[tuple[str, str, Any, Any]]:
        return [(a.actor, a.target, a.old, a.new)
                for a in svc.store.audit_of("pool.billing")]

    svc.sched.start()
    first = [("config", "B200", None, {"billing": 2.2}), ("config", "H100", None, {"billing": 1.0})]
    assert billing() == first
    Scheduler(svc.store, svc.executor, svc.config.policy, svc.clock,
              pools=svc.config.pools).start()
    assert billing() == first
    dearer = PoolsConfig(billing={"H100": 1.0, "B200": 3.0})
    with caplog.at_level("WARNING", logger="apportion.scheduler"):
        Scheduler(svc.store, svc.executor, svc.config.policy, svc.clock, pools=dearer).start()
    assert billing() == [*first, ("config", "B200", {"billing": 2.2}, {"billing": 3.0})]
    assert ("billing of B200 changed from 2.2 to 3 units per GPU-second: the charges of all "
            "its work in the lookback window, and of reports of past periods, are now "
            "counted at 3") in caplog.text

def test_an_override_pool_no_host_is_in_is_logged_by_the_scheduler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Pools whose hosts the executor reports (Slurm's) are not the config's to check: the
    scheduler logs a per-pool weight of a pool none of its hosts is in, naming the pools
    there are, and makes its pools as without it."""
    cfg = parse_config(BASE, base_dir=tmp_path)
    s = Svc(tmp_path, "sqlite", cfg)
    try:
        typo = PoolsConfig(billing=dict(cfg.pools.billing), overrides={"west/B300": {"ai": 2.0}})
        with caplog.at_level("WARNING", logger="apportion.scheduler"):
            sched = Scheduler(s.store, s.executor, cfg.policy, s.clock, pools=typo)
            sched.start()
        assert ("per-pool weights of pools no host is in, without effect: west/B300 (the "
                "hosts' pools: east/H100, west/B200)") in caplog.text
        assert sched.state is not None and set(sched.state.pools) == {"east/H100", "west/B200"}
    finally:
        s.close()
