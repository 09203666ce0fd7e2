"""docs/architecture.md says what the code does: every part of apportion imports, of the rest
of apportion, only the parts its row of the package table says it may, and every phase of a
pass is named where the doc says where each decision is made."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import apportion

SRC = Path(apportion.__file__).parent
DOC = Path(__file__).parents[1] / "docs" / "architecture.md"
# the build output of `make core` holds no sources of its own
NOT_SOURCES = {"__pycache__", "_compiled"}
# the top-level package exports only its version and core_build (which build of core runs):
# every part may read them
TOP = "apportion"
# what the table's service row restricts to a few modules: "`sim` only in the what-if: ...
# (`service/history_trace.py`), ... (`service/whatif.py`; ...) and its route
# (`service/whatif_api.py`, ...)"
ONLY_IN = {("service", "sim"): {"service/history_trace.py", "service/whatif.py",
                                "service/whatif_api.py"}}


def documented() -> dict[str, set[str] | None]:
    """Per part (``core``, ``whatif``, ...), the parts the table lets it import (None:
    everything)."""
    table = DOC.read_text().split("## Packages and what each may import", 1)[1]
    table = table.split("\n\n", 2)[1]
    allowed: dict[str, set[str] | None] = {}
    for line in table.splitlines():
        if not line.startswith("| `apportion."):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        parts = [n.removeprefix("apportion.") for n in re.findall(r"`([^`]+)`", cells[0])]
        may = cells[-1]
        names = None if may.startswith("everything") else {
            n for n in re.findall(r"`([^`]+)`", may) if re.fullmatch(r"[a-z_]+", n)
        }
        for part in parts:
            allowed[part] = None if names is None else names | set(parts)
    return allowed


def part_of(module: str) -> str:
    """``apportion.sim.engine`` -> ``sim``; ``apportion.times`` -> ``times``; the
    top-level package's own names (``apportion.core_build``) -> ``apportion``."""
    head = module.split(".")[1] if "." in module else TOP
    return head if (SRC / head).is_dir() or (SRC / f"{head}.py").is_file() else TOP


def imports(path: Path) -> set[str]:
    """Every module of apportion that ``path`` imports, at the top or inside a function."""
    rel = path.relative_to(SRC.parent).with_suffix("").parts
    package = rel if rel[-1] == "__init__" else rel[:-1]
    package = package[:-1] if package[-1] == "__init__" else package
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out |= ({f"{module}.{a.name}" for a in node.names} if module == TOP
                    else {module})
    return {m for m in out if m == TOP or m.startswith(TOP + ".")}


def test_every_part_imports_only_what_the_architecture_table_allows() -> None:
    """Each source file of apportion imports, of the other parts of apportion, only those
    the "may import" column of its part's row in docs/architecture.md names (the service's
    `sim` only in its what-if modules, as its row says), and every part has a row."""
    allowed = documented()
    wrong: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        if NOT_SOURCES & set(path.parts):
            continue
        rel = path.relative_to(SRC)
        mine = rel.parts[0].removesuffix(".py")
        if mine == "__init__":
            continue  # the top-level package
        if mine not in allowed:
            wrong.append(f"{rel}: part {mine!r} has no row in the table")
            continue
        may = allowed[mine]
        for module in sorted(imports(path)):
            theirs = part_of(module)
            if theirs in (TOP, mine) or may is None:
                continue
            if theirs not in may:
                wrong.append(f"{rel}: imports {module}, not in {mine}'s row")
            elif str(rel) not in ONLY_IN.get((mine, theirs), {str(rel)}):
                wrong.append(f"{rel}: imports {module}, which {mine}'s row allows only in "
                             f"{', '.join(sorted(ONLY_IN[(mine, theirs)]))}")
    assert not wrong, "\n".join(wrong)


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (part -> the parts it imports), as the parts in order with the
    first repeated at the end (``['service', 'whatif', 'service']``); None if it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, path + [node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_no_two_parts_import_each_other() -> None:
    """The parts of apportion import each other in one direction only: the graph of which
    part imports which, from every import of every source file (at the top or inside a
    function: a lazy import hides a cycle from Python, not from this test), has no cycle,
    and neither has the graph the table of docs/architecture.md allows (``cli``, which may
    import everything, left out: nothing imports it; nor the parts of one row, which share it)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if NOT_SOURCES & set(path.parts):
            continue
        mine = path.relative_to(SRC).parts[0].removesuffix(".py")
        if mine == "__init__":
            continue
        graph.setdefault(mine, set()).update(
            p for p in map(part_of, imports(path)) if p not in (TOP, mine))
    assert cycle(graph) is None, f"parts that import each other: {cycle(graph)}"
    rows = documented()
    # the parts of one row (``coreload``, ``corebuild``) share their set: not an edge
    allowed = {part: {p for p in may if rows.get(p) != may}
               for part, may in rows.items() if may is not None}
    assert cycle(allowed) is None, f"the table lets parts import each other: {cycle(allowed)}"


def test_every_phase_of_a_pass_is_named_in_the_architecture_doc() -> None:
    """Every phase ``Pass.run`` calls (its own methods, in order), but the shortcut it
    runs only in the fast pass (``seed_failures``), is named in docs/architecture.md as
    ``core.policy.Pass.<phase>`` or ``Pass.<phase>``: the doc's table of where each decision
    is made and its steps of a pass leave none out."""
    policy = SRC / "core" / "policy.py"
    tree = ast.parse(policy.read_text())
    run = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Pass")
    body = next(n for n in run.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    shortcuts = {
        c.func.attr for n in body.body if isinstance(n, ast.If)
        for c in ast.walk(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
    }
    phases = [
        n.value.func.attr for n in body.body
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Attribute)
        and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == "self"
    ]
    assert phases and shortcuts == {"seed_failures"}, (phases, shortcuts)
    doc = DOC.read_text()
    missing = [p for p in phases if f"Pass.{p}`" not in doc]
    assert not missing, f"phases of a pass docs/architecture.md does not name: {missing}"


def test_the_service_seams_doc_names_every_method_and_error() -> None:
    """docs/architecture.md's "The service's seams" names, in backticks, every method (not
    property) of ``SchedulerPort`` and ``Executor`` and every exception
    ``service/executor.py`` defines (the executor's ways to say no)."""
    doc = DOC.read_text().split("## The service's seams", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([A-Za-z_]+)`", doc))
    wanted: set[str] = set()
    for file, protocol in (("port.py", "SchedulerPort"), ("executor.py", "Executor")):
        tree = ast.parse((SRC / "service" / file).read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == protocol)
        wanted |= {
            f.name for f in cls.body if isinstance(f, ast.FunctionDef)
            and not f.name.startswith("_")
            and not any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)
        }
    tree = ast.parse((SRC / "service" / "executor.py").read_text())
    wanted |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)
               and any(isinstance(b, ast.Name) and b.id == "Exception" for b in n.bases)}
    assert not wanted - named, sorted(wanted - named)


def test_parts_said_to_use_the_standard_library_name_what_else_they_import() -> None:
    """A part whose row of docs/architecture.md's package table says it imports "the
    standard library" imports no other library that the row does not name in backticks
    (``corebuild`` builds with mypyc and setuptools)."""
    table = DOC.read_text().split("## Packages and what each may import", 1)[1]
    table = table.split("\n\n", 2)[1]
    wrong: list[str] = []
    for line in table.splitlines():
        if not line.startswith("| `apportion."):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[-1].startswith("the standard library"):
            continue
        named = set(re.findall(r"`([^`]+)`", cells[-1]))
        for part in (n.removeprefix("apportion.") for n in re.findall(r"`([^`]+)`", cells[0])):
            files = (sorted((SRC / part).rglob("*.py")) if (SRC / part).is_dir()
                     else [SRC / f"{part}.py"])
            for path in files:
                if NOT_SOURCES & set(path.parts):
                    continue
                for node in ast.walk(ast.parse(path.read_text())):
                    if isinstance(node, ast.Import):
                        tops = {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                        tops = {node.module.split(".")[0]}
                    else:
                        continue
                    for top in tops - set(sys.stdlib_module_names) - {TOP} - named:
                        wrong.append(f"{path.relative_to(SRC)}: imports {top}")
    assert not wrong, "\n".join(sorted(set(wrong)))
