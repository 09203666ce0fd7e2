"""Every package of apportion states its public face in ``__all__``, as httpx does: each
name listed exists, each public name the package's ``__init__.py`` defines is listed, and no
module imports another package's private names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import apportion

SRC = Path(apportion.__file__).parent
# the build output of `make core` holds no sources of its own
NOT_SOURCES = {"__pycache__", "_compiled"}
# dunder names a package may export on purpose
EXPORTED_DUNDERS = {"__version__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if not NOT_SOURCES & set(p.parts))


PACKAGES = [module_name(p) for p in sources() if p.name == "__init__.py"]


def defined_names(init: Path) -> set[str]:
    """Public names bound at the top level of ``init``: its functions, classes and
    assignments, and what it imports from apportion (a name imported from elsewhere, such
    as ``Iterable``, is not the package's own)."""
    names: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").split(".")[0] == "apportion"
        ):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.split(".")[0] == "apportion"}
    return {n for n in names if not n.startswith("_") or n in EXPORTED_DUNDERS} - {"__all__"}


def test_every_package_is_listed() -> None:
    """The packages checked below are the ones on disk (a new package is checked too), and
    they include the public ones named in docs/architecture.md."""
    assert {"apportion", "apportion.core", "apportion.sim", "apportion.sim.traces",
            "apportion.service", "apportion.service.store", "apportion.service.executors",
            "apportion.cli", "apportion.bench"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_declared_and_every_name_in_it_exists(name: str) -> None:
    """``__all__`` is assigned in the package's own ``__init__.py``, is a list without
    repeats, and every name in it is an attribute of the imported package."""
    init = SRC.parent.joinpath(*name.split("."), "__init__.py")
    tree = ast.parse(init.read_text())
    assigned = [n for n in tree.body
                if (isinstance(n, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
                or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                    and n.target.id == "__all__")]
    assert len(assigned) == 1, f"{init}: no __all__ (or more than one)"
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, list)
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what the package does not have: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_the_package_defines_is_exported(name: str) -> None:
    """A public name defined or imported from apportion at the top of ``__init__.py`` is in
    ``__all__``; anything else there is private (``_name``)."""
    init = SRC.parent.joinpath(*name.split("."), "__init__.py")
    exported = set(importlib.import_module(name).__all__)
    unlisted = sorted(defined_names(init) - exported)
    assert unlisted == [], f"{init}: public but not in __all__: {unlisted}"


def private_imports(source: str, package: str) -> list[tuple[int, str, str]]:
    """(line, what, the package that owns it) for each private module or name that
    ``source``, a module of ``package``, imports from another package of apportion:
    ``_name`` is owned by the package of the module defining it, a private module
    ``pkg._mod`` by ``pkg``."""
    found: list[tuple[int, str, str]] = []

    def check(line: int, module: str, names: list[str]) -> None:
        parts = module.split(".")
        if parts[0] != "apportion":
            return
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                found.append((line, ".".join(parts[: i + 1]), ".".join(parts[:i])))
                return
        # the module itself is public; a private name in it belongs to the module's package
        # (a name imported from a package's __init__ belongs to that package)
        owner = module if SRC.parent.joinpath(*parts, "__init__.py").exists() \
            else ".".join(parts[:-1])
        for n in names:
            if n.startswith("_") and not n.startswith("__"):
                found.append((line, f"{module}.{n}", owner))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [a.name for a in node.names]
            check(node.lineno, module, names)
            for n in names:  # `from pkg import _mod` names a private module of pkg
                if SRC.parent.joinpath(*module.split("."), f"{n}.py").exists():
                    check(node.lineno, f"{module}.{n}", [])
        elif isinstance(node, ast.Import):
            for a in node.names:
                check(node.lineno, a.name, [])
    # `from pkg import _mod` is found twice (a private name and a private module): once
    return [(line, what, owner) for line, what, owner in dict.fromkeys(found)
            if not (package == owner or package.startswith(owner + "."))]


def test_no_module_imports_another_packages_private_names() -> None:
    """A name or module starting with ``_`` is used only inside the package that owns it
    (and its subpackages): across packages only public names are imported."""
    crossings = []
    for p in sources():
        me = module_name(p)
        package = me if p.name == "__init__.py" else me.rpartition(".")[0]
        crossings += [f"{p.relative_to(SRC.parent)}:{line}: {what} (private to {owner})"
                      for line, what, owner in private_imports(p.read_text(), package)]
    assert crossings == []


def test_the_private_import_check_finds_a_crossing() -> None:
    """The check above is not vacuous: a CLI module importing the traces package's private
    ``_errors`` module (directly or as ``from ... import _errors``) or a private name of the
    core is reported; a private name of the CLI's own modules is not."""
    source = ("from apportion.sim.traces._errors import TraceError\n"
              "from apportion.core.policy import _Pass\n"
              "from apportion.sim.traces import _errors\n"
              "from .main import _COMMANDS\n"
              "from apportion.cli.main import _LazyGroup\n")
    assert private_imports(source, "apportion.cli") == [
        (1, "apportion.sim.traces._errors", "apportion.sim.traces"),
        (2, "apportion.core.policy._Pass", "apportion.core"),
        (3, "apportion.sim.traces._errors", "apportion.sim.traces"),
    ]
