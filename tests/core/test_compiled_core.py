"""The optional compiled core (the policy, and the simulator's event loop and metrics): built
outside the sources, loaded only while it matches them, and deciding exactly as the
pure-Python sources do.

One real mypyc build per module run (about 20 s), into a temporary directory; every check
then runs in a fresh interpreter, since the choice of build is made once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import apportion
from apportion.coreload import BUILD_DIR_ENV, MANIFEST, PURE_ENV, ext_suffix

PACKAGE = Path(apportion.__file__).parent
SOURCES = PACKAGE / "core"
SIM_COMPILED = {"sim.engine", "sim.legacy", "sim.metrics"}

# Prints which build a fresh interpreter loaded and where each compiled module and the
# packages' other modules came from.
WHICH = """
import importlib, json, apportion, apportion.core, apportion.sim.scenarios
from apportion import coreload
mods = json.load(open(coreload.build_dir() + "/manifest.json"))["modules"]
files = {m: importlib.import_module("apportion." + m).__file__ for m in mods}
print(json.dumps({"build": apportion.core_build(), "reason": coreload.FINDER.reason,
                  "init": apportion.core.__file__, "files": files,
                  "scenarios": apportion.sim.scenarios.__file__}))
"""

# Runs both policies on 3 days of the seed scenario on 256 GPUs, with the decision log kept.
SIMULATE = """
import json, apportion
from apportion.sim.run import run_policies
from apportion.sim.scenarios import seed_scenario
runs = run_policies(seed_scenario(days=3, size=256), ("fairshare", "legacy"), progress=False,
                    keep_log=True)
print(json.dumps({"build": apportion.core_build(),
                  "runs": [{"summary": r.summary, "log": r.log} for r in runs]}))
"""

# Cost of the run and the build used: the only summary keys allowed to differ.
RUN_COST = ("wall_s", "cpu_s", "events_per_s", "peak_memory_mb", "core_build")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PURE_ENV, BUILD_DIR_ENV)}
    env.update(extra)
    return env


def python(code: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh compiled build of the current core sources, in a temporary directory."""
    out = tmp_path_factory.mktemp("corebuild") / "build"
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.corebuild", "--out", str(out)],
        env=clean_env(), capture_output=True, text=True, timeout=600, check=False,
    )
    if not (out / MANIFEST).is_file():
        pytest.fail(
            "the compiled core could not be built (a C compiler and the Python headers are "
            "needed: scripts/install-system.sh installs them): "
            + (proc.stdout + proc.stderr).strip()
        )
    yield out


@pytest.fixture
def package_copy(tmp_path: Path, build: Path) -> Path:
    """A copy of the whole package with the build in its default place; returns the
    directory to put on PYTHONPATH."""
    root = tmp_path / "site"
    shutil.copytree(PACKAGE, root / "apportion",
                    ignore=shutil.ignore_patterns("_compiled", "__pycache__"))
    shutil.copytree(build, root / "apportion" / "_compiled")
    return root


def test_build_is_loaded_when_fresh(build: Path) -> None:
    """A build that matches the sources is loaded: every compiled module (all of the core
    but its __init__, the simulator's engine and metrics) comes from the build directory as
    an extension module; the core's __init__ and the simulator's other modules from the
    sources."""
    got = python(WHICH, clean_env(**{BUILD_DIR_ENV: str(build)}))
    assert got["build"] == "compiled", got["reason"]
    core = {m for m in got["files"] if m.startswith("core.")}
    assert core == {f"core.{p.stem}" for p in SOURCES.glob("*.py") if p.stem != "__init__"}
    assert set(got["files"]) - core == SIM_COMPILED
    for module, file in got["files"].items():
        assert file.endswith(ext_suffix()), module
        assert Path(file).parent == build / "apportion" / module.split(".")[0], module
    assert got["init"] == str(SOURCES / "__init__.py")
    assert got["scenarios"] == str(PACKAGE / "sim" / "scenarios.py")


def test_build_leaves_the_source_tree_alone(build: Path) -> None:
    """Building writes nothing next to the sources: no extension modules, no C files,
    no build directory."""
    strays = [
        p for p in PACKAGE.rglob("*")
        if p.suffix in (".so", ".c", ".pyd", ".o") and "_compiled" not in p.parts
    ]
    assert strays == []
    assert not (SOURCES / "build").exists()
    assert not (PACKAGE / "build").exists()


def test_edited_source_makes_the_build_stale(package_copy: Path) -> None:
    """Once a core source differs from what was compiled, the pure-Python core is loaded
    (the edited module included) until the build is redone."""
    env = clean_env(PYTHONPATH=str(package_copy))
    before = python(WHICH, env)
    assert before["build"] == "compiled", before["reason"]
    policy = package_copy / "apportion" / "core" / "policy.py"
    policy.write_text(policy.read_text() + "\n# edited after the build\n")
    after = python(WHICH, env)
    assert after["build"] == "python"
    assert "policy.py: changed since the compiled build" in after["reason"]
    assert all(f.endswith(".py") for f in after["files"].values())
    assert after["files"]["core.policy"] == str(policy)


def test_edited_engine_makes_the_whole_build_stale(package_copy: Path) -> None:
    """The simulator's compiled modules count as much as the core's: edit one and nothing
    compiled is loaded, the core included (a compiled module never runs beside a source it
    was not compiled with)."""
    engine = package_copy / "apportion" / "sim" / "engine.py"
    engine.write_text(engine.read_text() + "\n# edited after the build\n")
    got = python(WHICH, clean_env(PYTHONPATH=str(package_copy)))
    assert got["build"] == "python"
    assert "engine.py: changed since the compiled build" in got["reason"]
    assert all(f.endswith(".py") for f in got["files"].values())


def test_new_core_module_makes_the_build_stale(package_copy: Path) -> None:
    """A core module that the build does not contain also sends the import to the sources:
    a pure-Python module among compiled ones is not a combination that was ever built."""
    (package_copy / "apportion" / "core" / "extra.py").write_text('"""Added later."""\n')
    got = python(WHICH, clean_env(PYTHONPATH=str(package_copy)))
    assert got["build"] == "python"
    assert "core.extra: not in the compiled build" in got["reason"]


def test_pure_core_variable_wins_over_a_fresh_build(build: Path) -> None:
    """APPORTION_PURE_CORE=1 loads the sources even when the build is fresh."""
    got = python(WHICH, clean_env(**{BUILD_DIR_ENV: str(build), PURE_ENV: "1"}))
    assert got["build"] == "python"
    assert all(f.endswith(".py") for f in got["files"].values())


def test_build_for_another_interpreter_or_incomplete_is_ignored(
    build: Path, tmp_path: Path
) -> None:
    """A build made for another interpreter, or missing one of its modules, is not loaded."""
    foreign = tmp_path / "foreign"
    shutil.copytree(build, foreign)
    manifest = json.loads((foreign / MANIFEST).read_text())
    manifest["cache_tag"] = "cpython-399"
    (foreign / MANIFEST).write_text(json.dumps(manifest))
    got = python(WHICH, clean_env(**{BUILD_DIR_ENV: str(foreign)}))
    assert (got["build"], "cache_tag" in got["reason"]) == ("python", True)

    partial = tmp_path / "partial"
    shutil.copytree(build, partial)
    (partial / "apportion" / "core" / f"placement{ext_suffix()}").unlink()
    got = python(WHICH, clean_env(**{BUILD_DIR_ENV: str(partial)}))
    assert got["build"] == "python"


def test_missing_compiler_is_one_line_and_success(tmp_path: Path) -> None:
    """Without a C compiler the build says in one line that the pure-Python core will be
    used, writes no build and exits 0 (so `make` goes on)."""
    out = tmp_path / "build"
    proc = subprocess.run(
        [sys.executable, "-m", "apportion.corebuild", "--out", str(out)],
        env=clean_env(CC=str(tmp_path / "no-such-cc")), capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "the pure-Python core will be used" in lines[0], proc.stdout
    assert "no C compiler" in lines[0]
    assert not (out / MANIFEST).exists()


def test_compiled_and_pure_cores_simulate_identically(build: Path) -> None:
    """Both policies on 3 days of the seed scenario: the compiled core and the pure-Python
    core make the same starts, preemptions and host changes at the same moments and produce
    the same summary (run cost aside)."""
    compiled = python(SIMULATE, clean_env(**{BUILD_DIR_ENV: str(build)}))
    pure = python(SIMULATE, clean_env(**{BUILD_DIR_ENV: str(build), PURE_ENV: "1"}))
    assert (compiled["build"], pure["build"]) == ("compiled", "python")
    for c, p in zip(compiled["runs"], pure["runs"], strict=True):
        kinds = {line.split()[1] for line in c["log"]}
        assert kinds == {"start", "preempt", "host"}  # the comparison is not vacuous
        assert c["log"] == p["log"]
        assert c["summary"]["core_build"] == "compiled"
        assert p["summary"]["core_build"] == "python"
        for key in RUN_COST:
            del c["summary"][key], p["summary"][key]
        assert c["summary"] == p["summary"]
