"""The service's seams are declared: the scheduler's readers use only ``SchedulerPort``, and
nothing discovers what a scheduler or an executor can do by ``getattr``/``hasattr``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_env import Env, make_env

import apportion.service
from apportion.service.executor import Executor
from apportion.service.executors.memory import MemoryExecutor
from apportion.service.port import SchedulerPort

SERVICE = Path(apportion.service.__file__).parent
CLI = SERVICE.parent / "cli"
# every module that reads the scheduler without being it
READERS = sorted(
    [SERVICE / n for n in ("api.py", "dashboard.py", "prom.py", "whatif_api.py",
                           "history.py", "reports.py")]
    + list((SERVICE / "routes").glob("*.py"))
)


def _members(protocol: type) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[Env]:
    e = make_env("sqlite", tmp_path)
    yield e
    e.store.close()


def test_scheduler_has_every_name_of_the_port(lite: Env) -> None:
    """A started ``Scheduler`` is a ``SchedulerPort``: it has each of the port's members
    (mypy checks their types where ``create_app`` is given a ``Scheduler``)."""
    missing = sorted(n for n in _members(SchedulerPort) if not hasattr(lite.sched, n))
    assert missing == []
    assert isinstance(lite.sched, SchedulerPort)


def _scheduler_attributes(path: Path) -> set[tuple[int, str]]:
    """(line, name) of every ``scheduler.<name>`` / ``self.scheduler.<name>`` in ``path``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id == "scheduler") or (
            isinstance(v, ast.Attribute) and v.attr == "scheduler"
        ):
            out.add((node.lineno, node.attr))
    return out


def test_readers_use_only_the_port() -> None:
    """The API, dashboard, metrics and their helpers name no attribute of the scheduler that
    ``SchedulerPort`` does not declare (so the port is everything they depend on)."""
    declared = _members(SchedulerPort)
    used = {(p.name, line, name) for p in READERS for line, name in _scheduler_attributes(p)}
    assert {name for _, _, name in used} >= {"lock", "state", "queue_view", "wake"}
    assert sorted(u for u in used if u[2] not in declared) == []


def _probes(path: Path) -> list[str]:
    """``getattr``/``hasattr`` calls in ``path`` whose object is a scheduler or executor."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args):
            target = ast.unparse(node.args[0])
            if "scheduler" in target or "executor" in target:
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_nothing_probes_a_scheduler_or_an_executor() -> None:
    """No ``getattr(scheduler, ...)``/``hasattr(executor, ...)`` in the service or the CLI:
    what they offer is in their protocols."""
    files = sorted(SERVICE.rglob("*.py")) + sorted(CLI.glob("*.py"))
    assert len(files) > 20
    assert [p for f in files for p in _probes(f)] == []


def test_memory_executor_has_every_name_of_the_executor_protocol(lite: Env) -> None:
    """The in-memory executor offers each member of ``Executor`` (the other executors are
    checked by mypy where ``build_executor`` returns them as an ``Executor``)."""
    executor: Executor = lite.executor
    assert isinstance(executor, MemoryExecutor)
    missing = sorted(n for n in _members(Executor) if not hasattr(executor, n))
    assert missing == []
