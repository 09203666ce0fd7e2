"""The simulator on a fleet (sim/fleet.py): pools from scenarios and --cluster files,
both policies, per-pool figures."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from apportion.cli.main import main
from apportion.core import PolicyConfig
from apportion.core.fleet import FleetConfig
from apportion.sim.engine import Engine, RunResult, SimConfig
from apportion.sim.model import Pools, Scenario
from apportion.sim.run import make_policy
from apportion.sim.scenarios import small_scenario

BILLING = {"H100": 1.0, "B200": 2.2}


def two_pool_small(seed: int = 0) -> Scenario:
    """``small`` (4 hosts of 8) as two pools: h000, h001 H100 in east, the rest B200 in
    west; a third of its work asks for B200, a third for H100, the rest for any."""
    sc = small_scenario(seed=seed)
    names = [h.name for h in sc.hosts]
    of_host = {n: ("east", "H100") if i < 2 else ("west", "B200") for i, n in enumerate(names)}
    kinds = [("B200",), ("H100",), ()]
    jobs = tuple(dataclasses.replace(j, spec=dataclasses.replace(j.spec, gpu_kinds=kinds[i % 3]))
                 for i, j in enumerate(sc.jobs) if j.spec.gpus <= 16)
    return dataclasses.replace(sc, jobs=jobs,
                               pools=Pools(of_host, FleetConfig(billing=BILLING)))


def run(sc: Scenario, policy: str) -> tuple[Engine, RunResult]:
    engine = Engine(sc, make_policy(policy, sc, SimConfig()), PolicyConfig(), name=policy,
                    keep_log=True)
    return engine, engine.run()


@pytest.mark.parametrize("policy", ["fairshare", "legacy"])
def test_every_start_on_a_fleet_is_in_one_pool_of_a_kind_its_work_asked_for(policy: str) -> None:
    """Replaying two_pool_small, each start in the decision log names hosts of one pool,
    of a kind the workload accepts, and something starts in each pool."""
    sc = two_pool_small()
    _, result = run(sc, policy)
    assert sc.pools is not None and result.log is not None
    kinds = {j.spec.id: j.spec.gpu_kinds for j in sc.jobs}
    used = set()
    log = result.log
    for line in log:
        parts = line.split()
        if parts[1] != "start":
            continue
        hosts = [s.split(":")[0] for s in parts[4].split(",")]
        pools = {sc.pools.of_host[h] for h in hosts}
        assert len(pools) == 1, line
        (cluster, kind), = pools
        assert not kinds[parts[2]] or kind in kinds[parts[2]], line
        used.add(kind)
    assert used == {"H100", "B200"}


@pytest.mark.parametrize("policy", ["fairshare", "legacy"])
def test_pool_figures_add_up_to_the_fleet_and_bill_by_kind(policy: str) -> None:
    """summary["pools"]: the fleet's allocated GPU-hours and GPUs are the pools' sums, each
    pool's billed units are its allocated GPU-hours times its kind's weight, and the fleet's
    billed units equal what the fleet ledger charged the root over the whole run."""
    sc = two_pool_small()
    engine, result = run(sc, policy)
    pools = result.summary["pools"]
    parts = [f for k, f in pools.items() if k != "fleet"]
    fleet = pools["fleet"]
    assert fleet["gpus"] == sum(f["gpus"] for f in parts) == 32
    assert math.isclose(fleet["allocated_gpu_hours"], sum(f["allocated_gpu_hours"] for f in parts))
    for f in parts:
        assert math.isclose(f["charged_units"], f["allocated_gpu_hours"] * BILLING[f["kind"]])
        assert 0 < f["occupancy"] <= 1
    charged = engine.state.ledger.charged_total("", engine.end) / 3600
    assert math.isclose(fleet["charged_units"], charged, rel_tol=1e-9)


def test_a_fleet_of_one_pool_replays_exactly_as_the_plain_cluster() -> None:
    """``small`` with every host in one pool (billed 2.2) gives the same decision log as
    ``small`` itself, for fair share."""
    sc = small_scenario()
    one = dataclasses.replace(sc, pools=Pools({h.name: ("east", "B200") for h in sc.hosts},
                                              FleetConfig(billing=BILLING)))
    (_, plain), (_, fleet) = run(sc, "fairshare"), run(one, "fairshare")
    assert fleet.log == plain.log
    assert fleet.log


def _cluster_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(body)
    return path


HOSTS = "".join(
    f'[[hosts]]\nname = "{n}"\ngpus = 8\ncluster = "{c}"\nkind = "{k}"\n'
    for n, c, k in (("a0", "east", "H100"), ("a1", "east", "H100"), ("b0", "west", "B200"),
                    ("b1", "west", "B200"))
)


def test_simulate_with_a_cluster_file_of_two_kinds_reports_each_pool(tmp_path: Path) -> None:
    """``simulate --cluster FILE`` whose hosts carry cluster and kind runs two pools and
    writes per-pool figures to summary.json and a pools table to stdout and report.html."""
    path = _cluster_file(tmp_path, 'billing = { B200 = 2.2 }\n' + HOSTS)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["simulate", "--scenario", "small", "--cluster",
                                       str(path), "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "east/H100" in result.output and "west/B200" in result.output
    summaries = json.loads((out / "summary.json").read_text())
    assert [sorted(s["pools"]) for s in summaries] == [["east/H100", "fleet", "west/B200"]] * 2
    assert summaries[0]["pools"]["west/B200"]["billing"] == 2.2
    assert "<h2>Pools</h2>" in (out / "report.html").read_text()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (HOSTS + '[[hosts]]\nname = "c0"\ngpus = 8\n',
         "host #5 (c0): cluster and kind: every host needs both when any host has one"),
        ('[overrides."west/B200"]\n"nobody" = 2.0\n' + HOSTS,
         "overrides: west/B200: 'nobody': unknown budget"),
        ('[overrides."west/B200"]\n"llm" = -2\n' + HOSTS,
         "overrides: west/B200: llm: must be a number >= 0, got -2"),
        ('billing = { B200 = -1 }\n' + HOSTS, "billing: B200: must be a number > 0"),
        ('[overrides."west/B300"]\n"nobody" = 2.0\n' + HOSTS,
         "overrides.west/B300: no host is in pool west/B300 (the hosts' pools: east/H100, "
         "west/B200)"),
    ],
    ids=["host without kind", "unknown budget in overrides", "negative override weight",
         "negative billing weight", "override of a pool no host is in"],
)
def test_a_bad_cluster_file_is_refused_naming_the_option_the_file_and_the_field(
    tmp_path: Path, body: str, message: str
) -> None:
    """A --cluster file with pools that cannot work is a usage error naming --cluster, the
    file (never 'fleet:', a name the user did not write: the billing and overrides errors
    of the core said that) and what is wrong, never a traceback."""
    path = _cluster_file(tmp_path, body)
    result = CliRunner().invoke(main, ["simulate", "--scenario", "small", "--cluster",
                                       str(path), "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "--cluster" in result.output
    assert re.search(rf"{re.escape(str(path))}:\d+: {re.escape(message)}",
                     " ".join(result.output.split())), result.output  # and its line


def test_the_fleet_scenario_has_three_pools_and_work_asking_for_kinds() -> None:
    """``fleet``: 1,024 H100 in east, 512 B200 in west, 88 B300 in north; work asks for any
    kind, one or two, never for a kind with fewer GPUs than it needs."""
    from apportion.sim.fleet import fleet_scenario

    sc = fleet_scenario(days=1)
    assert sc.pools is not None
    gpus: dict[tuple[str, str], int] = {}
    for h in sc.hosts:
        key = sc.pools.of_host[h.name]
        gpus[key] = gpus.get(key, 0) + h.gpus
    assert gpus == {("east", "H100"): 1024, ("west", "B200"): 512, ("north", "B300"): 88}
    asks = {len(j.spec.gpu_kinds) for j in sc.jobs}
    assert asks == {0, 1, 2}
    by_kind = {k: g for (_, k), g in gpus.items()}
    for j in sc.jobs:
        assert all(by_kind[k] >= j.spec.gpus for k in j.spec.gpu_kinds), j.spec


SACCT_POOLS = """JobID|User|Account|Partition|Submit|Start|End|Elapsed|AllocTRES|State
1|alice|llm|east|2024-03-01T09:00:00|2024-03-01T09:00:05|2024-03-01T10:00:05|01:00:00|cpu=8,gres/gpu:h100=8,node=1|COMPLETED
2|bob|vision|west|2024-03-01T09:10:00|2024-03-01T09:10:05|2024-03-01T10:10:05|01:00:00|cpu=8,gres/gpu:b200=4,node=1|COMPLETED
3|bob|vision|west|2024-03-01T09:20:00|2024-03-01T09:20:05|2024-03-01T10:20:05|01:00:00|cpu=8,gres/gpu=2,node=1|COMPLETED
"""


def test_sacct_typed_tres_and_partition_become_kind_and_cluster(tmp_path: Path) -> None:
    """A typed AllocTRES (gres/gpu:h100=8) gives the workload's GPU kind (upper-cased), the
    Partition its cluster; an untyped one (gres/gpu=2) asks for any kind."""
    from apportion.sim.traces import load_trace

    path = tmp_path / "sacct.txt"
    path.write_text(SACCT_POOLS)
    specs = {j.spec.id: j.spec for j in load_trace(path, format="sacct").jobs}
    assert {k: (s.gpus, s.gpu_kinds, s.cluster) for k, s in specs.items()} == {
        "1": (8, ("H100",), "east"), "2": (4, ("B200",), "west"), "3": (2, (), "west")}


def test_a_sacct_trace_with_kinds_replays_each_job_in_its_pool(tmp_path: Path) -> None:
    """Replayed on a --cluster file with those clusters and kinds, each job of the trace
    above starts in the pool its partition and TRES type name; without the file (one pool)
    the same trace runs too, kinds ignored."""
    trace = tmp_path / "sacct.txt"
    trace.write_text(SACCT_POOLS)
    path = _cluster_file(tmp_path, HOSTS)
    for cluster in ([str(path)], ["2x8"]):
        out = tmp_path / f"out{len(cluster[0])}"
        result = CliRunner().invoke(main, ["simulate", "--trace", str(trace), "--format",
                                           "sacct", "--budget-column", "Account", "--cluster",
                                           *cluster, "--quiet", "--out", str(out)])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())[0]
        assert summary["rejected"] == 0 and summary["workloads"] == 3
        if cluster[0] == str(path):
            pools = summary["pools"]
            assert pools["east/H100"]["allocated_gpu_hours"] == pytest.approx(8.0, rel=0.01)
            assert pools["west/B200"]["allocated_gpu_hours"] == pytest.approx(6.0, rel=0.01)


def test_bench_with_three_pools_times_the_fleet_pass_over_the_same_hosts() -> None:
    """``bench --pools 3`` builds the benchmark's 128 hosts as three pools (64 H100, 48
    B200, 16 B300), its pending work asking for kinds, and times decide_fleet on it."""
    from apportion.bench.decide import build_state
    from apportion.core.fleet import FleetState

    state = build_state(pending=300, pools=3)
    assert isinstance(state, FleetState)
    assert {p: len(s.hosts) for p, s in state.pools.items()} == {
        "east/H100": 64, "north/B300": 16, "west/B200": 48}
    assert {len(p.spec.gpu_kinds) for p in state.pending.values()} == {0, 1, 2}
    result = CliRunner().invoke(main, ["bench", "--pools", "3", "--pending", "300",
                                       "--passes", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["pools"] == 3 and figures["hosts"] == 128 and figures["passes"] == 2


def test_pool_attainment_counts_what_a_team_asked_of_each_pool() -> None:
    """One team (share 1) runs one 8-GPU job asking for H100 for 2 h of a 3 h run: east/H100
    owed it min(its 8 GPUs, the 8 it asked) in each of the two hours, 16 GPU-hours, and it
    got them all (100%); west/B200 was asked nothing, so owes nothing."""
    from apportion.core import BudgetTree, Host, WorkloadSpec
    from apportion.sim.model import SimJob

    tree = BudgetTree.build([("a/x", 1.0)])
    hosts = (Host("e0", 8), Host("w0", 8))
    jobs = (SimJob(WorkloadSpec("j1", "a/x", 8, 3600.0, 0.0, gpu_kinds=("H100",)), 7200.0),)
    sc = Scenario("t", tree, hosts, jobs, days=3 * 3600 / 86400,
                  pools=Pools({"e0": ("east", "H100"), "w0": ("west", "B200")}))
    pools = run(sc, "fairshare")[1].summary["pools"]
    east, west = pools["east/H100"]["attainment"], pools["west/B200"]["attainment"]
    assert east["owed_gpu_hours"] == pytest.approx(16.0)
    assert east["overall"] == pytest.approx(1.0) and east["teams"] == {"a/x": pytest.approx(1.0)}
    assert west["owed_gpu_hours"] == 0 and west["overall"] is None
    assert pools["fleet"]["attainment"]["owed_gpu_hours"] == pytest.approx(16.0)


@pytest.mark.parametrize("policy", ["fairshare", "legacy"])
def test_per_pool_budget_figures_add_up_to_the_runs_per_budget_figures(policy: str) -> None:
    """summary["pools"][pool]["budgets"] on two_pool_small: for every budget node, its
    delivered GPU-hours summed over the pools equal the run's (its budget-hour rows'
    delivered, summed) up to float summation order (relative 1e-9), its preemptions summed
    over the pools equal its workloads' preemptions, and for teams and leaves the waits
    counted in the pools are the run's per-budget wait count; each pool's preemptions are
    its budgets' at the top of the tree, summed, and some happen in each pool; over
    the pools they are the run's total."""
    from apportion.service.whatif import per_budget

    sc = two_pool_small()
    _, result = run(sc, policy)
    pools = {k: f for k, f in result.summary["pools"].items() if k != "fleet"}
    overall = per_budget(result, sc.tree)
    waits = result.summary["wait_s"]["per_budget"]
    for node, figures in overall.items():
        in_pools = [f["budgets"][node] for f in pools.values() if node in f["budgets"]]
        assert math.isclose(sum(b["delivered_gpu_hours"] for b in in_pools),
                            figures["delivered_gpu_hours"], rel_tol=1e-9), node
        assert sum(b["preemptions"] for b in in_pools) == figures["preemptions"], node
        counted = sum(b["wait_s"]["n"] for b in in_pools if b["wait_s"] is not None)
        assert counted == ((waits.get(node) or {}).get("n") or 0), node
    tops = [n for n in sc.tree.nodes() if "/" not in n]
    for f in pools.values():
        assert f["preemptions"] == sum(f["budgets"][n]["preemptions"] for n in tops
                                       if n in f["budgets"])
    assert all(f["preemptions"] > 0 for f in pools.values())
    assert sum(f["preemptions"] for f in pools.values()) == result.summary["preemptions"]["total"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('biling = { B200 = 3 }\n' + HOSTS,
         "fleet.toml: biling: not a key of a host list (its keys: hosts, billing, overrides)"),
        ('[overides."west/B200"]\n"x" = 2.0\n' + HOSTS,
         "fleet.toml: overides: not a key of a host list"),
        (HOSTS + '[[hosts]]\nname = "b2"\ngpus = 8\ncluster = "west"\nkind = "B200"\n'
         'gpu = 4\n', "fleet.toml: hosts[5].gpu: not a key of a host (its keys: name, gpus, "
         "cluster, kind)"),
        (HOSTS + '[[hosts]]\nname = "b2"\ngpus = 8\ncluster = "west"\nkind = "B200"\n'
         'knid = "H100"\n', "fleet.toml: hosts[5].knid: not a key of a host"),
        ('billing = { H100 = 1, B300 = 3 }\n' + HOSTS,
         "fleet.toml: billing.B300: no host has GPU kind B300 (the hosts' kinds: B200, H100)"),
        ('billing = { H100 = 1, b200 = 3 }\n' + HOSTS,
         "fleet.toml: billing.b200: no host has GPU kind b200 (the hosts' kinds: B200, H100)"),
    ],
    ids=["misspelt billing", "misspelt overrides", "host key gpu", "host key knid",
         "billing of a kind no host has", "billing of a kind in another case"],
)
def test_a_cluster_file_key_or_billed_kind_that_would_be_ignored_is_refused_naming_it(
    tmp_path: Path, body: str, message: str
) -> None:
    """A --cluster file's key that is none of its keys (biling, overides; a host's gpu or
    knid) or a billing kind no host has (b200 for B200) is a usage error naming the file
    and the key; these were ignored, so the run billed every kind 1 or lost a setting."""
    path = _cluster_file(tmp_path, body)
    result = CliRunner().invoke(main, ["simulate", "--scenario", "small", "--cluster",
                                       str(path), "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    file, _, said = message.partition(": ")  # and the line of the key
    assert re.search(rf"Invalid value for --cluster: {re.escape(str(path.parent / file))}:"
                     rf"\d+: {re.escape(said)}", result.output), result.output


@pytest.mark.parametrize(("host", "message"), [
    ('cluster = "a/b", kind = "H100"', "host #1 (h000): cluster: must be a name without '/', "
                                       "got 'a/b'"),
    ('cluster = "east", kind = "H100/SXM"', "host #1 (h000): kind: must be a name without "
                                            "'/', got 'H100/SXM'"),
    ('cluster = 5, kind = "H100"', "host #1 (h000): cluster: must be a name without '/', "
                                   "got 5"),
])
def test_a_fleet_hosts_cluster_or_kind_that_is_no_pool_name_is_refused_naming_it(
        tmp_path: Path, host: str, message: str) -> None:
    """A --cluster host whose cluster or kind holds a '/' (a pool is 'cluster/kind') is a
    usage error naming the file, the host and the key, before any run: it crashed the run
    with a traceback ('CoreError: host h000: cluster: must be a name without '/''). A
    cluster that is not a string (5) is named as such, not as missing."""
    path = tmp_path / "fleet.toml"
    path.write_text(f'hosts = [ {{ name = "h000", gpus = 8, {host} }} ]\n')
    result = CliRunner().invoke(main, ["simulate", "--scenario", "small", "--cluster",
                                       str(path), "--quiet", "--out", str(tmp_path / "o")],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert re.search(rf"Invalid value for --cluster: {re.escape(str(path))}:\d+: "
                     rf"{re.escape(message)}", " ".join(result.output.split())), result.output
    assert not (tmp_path / "o" / "summary.json").exists()


@pytest.mark.parametrize(("table", "message"), [
    ("billing = { B200 = true }\n", "billing: B200: must be a number > 0, got true"),
    ('[overrides."west/B200"]\n"llm" = true\n',
     "overrides: west/B200: llm: must be a number >= 0, got true"),
])
def test_a_fleet_files_boolean_weight_is_refused_not_read_as_one(
        tmp_path: Path, table: str, message: str) -> None:
    """A --cluster file's billing or overrides weight given as true is refused naming the
    file and the key, as a host's gpus = true is: it was read as weight 1 without a word."""
    path = _cluster_file(tmp_path, table + HOSTS)
    result = CliRunner().invoke(main, ["simulate", "--scenario", "small", "--cluster",
                                       str(path), "--quiet", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert re.search(rf"Invalid value for --cluster: {re.escape(str(path))}:\d+: "
                     rf"{re.escape(message)}", " ".join(result.output.split())), result.output
