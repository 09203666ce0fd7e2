"""Canonical traces of a fleet's work: the ``gpu_kinds`` and ``cluster`` columns."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from apportion.core import WorkloadSpec
from apportion.sim.model import SimJob
from apportion.sim.traces import TraceError, load_trace, write_canonical


def jobs() -> list[SimJob]:
    asks = [((), ""), (("H100",), ""), (("B200", "H100"), "west"), ((), "east")]
    return [SimJob(WorkloadSpec(f"w{i}", "ai", 8, 3600.0, 60.0 * i, gpu_kinds=kinds,
                                cluster=cluster), 7200.0)
            for i, (kinds, cluster) in enumerate(asks)]


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet"])
def test_asked_kinds_and_cluster_round_trip(tmp_path: Path, ext: str) -> None:
    """write_canonical then load_trace gives back each workload's GPU kinds (in its order)
    and cluster, empty for those that asked for none."""
    path = write_canonical(jobs(), tmp_path / f"t{ext}")
    assert load_trace(path).jobs == tuple(jobs())


def test_the_columns_are_written_only_when_some_work_asks(tmp_path: Path) -> None:
    """Work asking for no kind and no cluster: the plain canonical columns; kinds only: the
    ``gpu_kinds`` column and not ``cluster``; the kinds of one cell are comma-separated."""
    plain = [dataclasses.replace(j, spec=dataclasses.replace(j.spec, gpu_kinds=(), cluster=""))
             for j in jobs()]
    header = write_canonical(plain, tmp_path / "a.csv").read_text().splitlines()[0]
    assert not header.endswith(("gpu_kinds", "cluster"))
    kinds = [dataclasses.replace(j, spec=dataclasses.replace(j.spec, cluster=""))
             for j in jobs()]
    lines = write_canonical(kinds, tmp_path / "b.csv").read_text().splitlines()
    assert lines[0] == header + ",gpu_kinds"
    assert lines[3].endswith(',"B200,H100"')


@pytest.mark.parametrize("cell", ['"H100,,B200"', '"H100,H100"'])
def test_a_bad_kinds_cell_names_the_file_line_and_column(tmp_path: Path, cell: str) -> None:
    """An empty kind or one given twice is a TraceError ``file:line: gpu_kinds: ...``."""
    path = tmp_path / "t.csv"
    path.write_text(f"id,submit_time,gpus,duration,budget,gpu_kinds\na,0,8,60,ai,{cell}\n")
    with pytest.raises(TraceError, match=r"t\.csv:2: gpu_kinds: expected GPU kinds"):
        load_trace(path)
