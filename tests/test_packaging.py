"""What the built distribution ships: the package data that pyproject.toml declares is the
data the package has, the test harness (tests/harness) is not part of it, and every library
the package imports is one it declares."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import apportion

SRC = Path(apportion.__file__).parent
ROOT = SRC.parents[1]
NOT_SOURCES = {"__pycache__", "_compiled"}  # bytecode, and the output of `make core`


def package_data() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns: list[str] = config["tool"]["setuptools"]["package-data"]["apportion"]
    return patterns


def shipped_only_as_data() -> set[Path]:
    """Files of the source tree that setuptools ships only if package-data names them:
    every file but a module of a package (a .py beside an ``__init__.py``)."""
    out = set()
    for p in SRC.rglob("*"):
        if p.is_dir() or NOT_SOURCES & set(p.relative_to(SRC).parts):
            continue
        if p.suffix == ".py" and (p.parent / "__init__.py").exists():
            continue
        out.add(p)
    return out


def test_every_package_data_pattern_matches_a_file() -> None:
    """No pattern in ``[tool.setuptools.package-data]`` names something that does not exist
    (as ``sim/templates/*`` once did)."""
    empty = [pat for pat in package_data() if not [p for p in SRC.glob(pat) if p.is_file()]]
    assert empty == []


def test_every_data_file_is_declared() -> None:
    """Every file the package needs besides its modules (the dashboard's static files, the
    migrations, ``py.typed``) is matched by a package-data pattern, so a wheel has it."""
    declared = {p for pat in package_data() for p in SRC.glob(pat) if p.is_file()}
    missing = sorted(str(p.relative_to(SRC)) for p in shipped_only_as_data() - declared)
    assert missing == []
    assert {"py.typed", "service/static/index.html", "service/migrations/env.py"} <= {
        str(p.relative_to(SRC)) for p in declared}


def test_the_package_holds_no_test_harness() -> None:
    """The Slurm and Unix-account harness lives in tests/harness: there is no
    ``apportion.testing`` any more, and no module of the package imports the harness."""
    assert not (SRC / "testing").exists()
    assert (ROOT / "tests" / "harness" / "slurm_cluster.py").is_file()
    importers = [f"{p.relative_to(SRC)}:{line}" for p, line, names in absolute_imports()
                 if any(n.split(".")[0] == "harness" or n.startswith("apportion.testing")
                        for n in names)]
    assert importers == []


def absolute_imports() -> Iterator[tuple[Path, int, list[str]]]:
    """Every absolute import of the package's source files, at the top or inside a
    function: (file, line, the modules it names)."""
    for p in sorted(SRC.rglob("*.py")):
        if NOT_SOURCES & set(p.relative_to(SRC).parts):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and
                     not node.level else [])
            if names:
                yield p, node.lineno, names


def _normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them (``python_hostlist`` is
    ``python-hostlist``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_of_the_package_is_declared() -> None:
    """Every module outside the standard library that a source file of the package imports
    (at the top or inside a function) belongs to a distribution pyproject.toml requires,
    in ``dependencies`` or in an extra other than ``test`` (the package may not lean on
    what only the tests install, nor on what another requirement happens to pull in, as
    ``pydantic`` and ``starlette`` once came only through FastAPI). The import name is
    mapped to its distribution by the installed metadata (``hostlist`` is
    ``python-hostlist``, ``mypyc`` comes with ``mypy``); a module no installed
    distribution provides is named too."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = list(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        if extra != "test":
            required += reqs
    declared = {_normalized(re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0]) for r in required}
    provided = importlib.metadata.packages_distributions()
    undeclared = []
    for p, line, names in absolute_imports():
        for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names):
            if top == "apportion":
                continue
            dists = {_normalized(d) for d in provided.get(top, [])}
            if not dists & declared:
                undeclared.append(f"{p.relative_to(SRC)}:{line}: {top} "
                                  f"({', '.join(sorted(dists)) or 'not installed'})")
    assert undeclared == [], "imported, not declared in pyproject.toml:\n" + "\n".join(
        undeclared)
