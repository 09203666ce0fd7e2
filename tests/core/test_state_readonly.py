"""``ClusterState`` is written only through its methods: its indexes are read-only views to
every reader the type checker sees (the whole package is checked by mypy in CI)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).parents[2]

# Each line writes one index (or the clock) behind the state's back.
WRITES = [
    's.free["h0"] = 1',
    's.idle.add("h0")',
    's.stopping.discard("w")',
    's.queues["a"].append(((0, 0.0, "x"), "x"))',
    's.budgets_on["h0"]["a"] = 1',
    's.sizes["a"][(1, 60.0)] = 2',
    's.hosts.pop("h0")',
    's.running.clear()',
    's.schedulable_names.append("h9")',
    's.time = 3.0',
]


def test_mypy_refuses_every_write_to_an_index_of_the_state(tmp_path: Path) -> None:
    """A module that writes the state's indexes directly gets one mypy error per write, on
    that write's line; the same module reading them gets none."""
    writes = tmp_path / "writes.py"
    writes.write_text(
        "from apportion.core import ClusterState\n\n\ndef f(s: ClusterState) -> None:\n"
        + "".join(f"    {w}\n" for w in WRITES)
    )
    reads = tmp_path / "reads.py"
    reads.write_text(
        "from apportion.core import ClusterState\n\n\ndef f(s: ClusterState) -> int:\n"
        '    return s.free["h0"] + len(s.idle) + len(s.queues["a"]) + int(s.time)\n'
    )
    cache = ["--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary"]
    out, err, status = api.run([*cache, str(writes)])
    lines = sorted({int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line})
    assert lines == list(range(5, 5 + len(WRITES))), out + err
    out, err, status = api.run([*cache, str(reads)])
    assert status == 0, out + err
