"""The core is pure: no clock, no I/O, nothing from the rest of the package.

An AST walk over every file of ``src/apportion/core``: imports must be on an allow-list of
stdlib modules (or relative imports inside core), and no call may reach a clock or the
outside world (``open()``, ``print()``, ``input()``, ``time.time()``, ``datetime.now()``...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import apportion.core

CORE_DIR = Path(apportion.core.__file__).parent

ALLOWED_MODULES = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "collections.abc",
        "dataclasses",
        "enum",
        "functools",
        "heapq",
        "itertools",
        "math",
        "operator",
        "re",  # text matching (units.parse_duration): no state, no I/O
        "types",
        "typing",
    }
)

# Builtins that do I/O or escape the sandbox of a pure function.
FORBIDDEN_CALLS = frozenset(
    {"open", "print", "input", "exec", "eval", "compile", "__import__", "breakpoint"}
)

# Attribute calls that read a clock or randomness, whatever the module was imported as.
FORBIDDEN_ATTRS = frozenset(
    {
        "now",
        "utcnow",
        "today",
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "sleep",
        "random",
        "urandom",
        "getenv",
        "system",
        "popen",
    }
)


def check_source(source: str, filename: str = "<string>") -> list[str]:
    """Every purity violation in one module's source, as ``file:line: problem``."""
    problems: list[str] = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_MODULES:
                    problems.append(f"{where}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module not in ALLOWED_MODULES:
                    problems.append(f"{where}: imports from {node.module}")
            elif node.level > 1:
                problems.append(f"{where}: relative import beyond core (level {node.level})")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                problems.append(f"{where}: calls {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_ATTRS:
                problems.append(f"{where}: calls .{func.attr}()")
    return problems


def core_files() -> list[Path]:
    return sorted(CORE_DIR.glob("**/*.py"))


def test_core_has_files() -> None:
    """The checker looks at the real core (guards against an empty glob passing trivially)."""
    names = {p.name for p in core_files()}
    assert {"policy.py", "placement.py", "preemption.py", "state.py", "ledger.py"} <= names


def test_core_imports_nothing_impure() -> None:
    """No file under core imports a clock, I/O, randomness or another part of the package,
    and none calls open()/print() or a clock."""
    problems = [
        p for path in core_files() for p in check_source(path.read_text(), str(path))
    ]
    assert problems == []


def test_checker_catches_planted_violations() -> None:
    """The checker is not vacuous: each kind of planted violation is reported."""
    cases = {
        "import time": "imports time",
        "import os.path": "imports os.path",
        "from datetime import datetime": "imports from datetime",
        "import random": "imports random",
        "import logging": "imports logging",
        "from pathlib import Path": "imports from pathlib",
        "import subprocess": "imports subprocess",
        "from apportion.sim import engine": "imports from apportion.sim",
        "from apportion.service.clock import WallClock": "imports from apportion.service.clock",
        "from ..sim import engine": "relative import beyond core",
        "x = open('f')": "calls open()",
        "print('hi')": "calls print()",
        "t = clock.time()": "calls .time()",
        "t = dt.datetime.now()": "calls .now()",
    }
    for source, expected in cases.items():
        found = check_source(source)
        assert any(expected in p for p in found), (source, found)
    assert check_source("from .types import CoreError\nimport bisect\nimport math\n") == []
    assert check_source("from time import perf_counter\nperf_counter()\n") == [
        "<string>:1: imports from time"
    ]
