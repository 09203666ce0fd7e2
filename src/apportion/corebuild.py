"""Build the optional compiled core: ``python -m apportion.corebuild [--out DIR]``.

Compiles with mypyc the modules :data:`apportion.coreload.COMPILED_PACKAGES` names (the
policy, :mod:`apportion.core` but its ``__init__``, which only re-exports; and the
simulator's event loop and metrics) into ``DIR`` (default: ``src/apportion/_compiled``, or
``APPORTION_CORE_BUILD_DIR``), never into the source tree: the work happens in a temporary
copy of the package. ``DIR`` then holds ``apportion/<package>/<module><EXT_SUFFIX>``,
mypyc's shared module and ``manifest.json`` (each module's source sha256, the interpreter's
cache tag and extension suffix), which :mod:`apportion.coreload` checks before loading
anything.

Without a C compiler or the Python headers, or if compilation fails, it prints one line and
exits 0: the pure-Python core is then used, which gives the same decisions, only slower.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from apportion.coreload import (
    MANIFEST,
    MANIFEST_FORMAT,
    PACKAGE_DIR,
    build_dir,
    compiled_modules,
    ext_suffix,
    sha256_file,
    source_of,
)

HELPER_GROUP = "apportion_core"  # mypyc names its shared module "<group>__mypyc"

SETUP_PY = """\
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="apportion-core-compiled",
    ext_modules=mypycify({paths!r}, opt_level="3", group_name={group!r}),
)
"""


class BuildError(Exception):
    """The compiled core cannot be built here; the message says why, in one line."""


def check_toolchain() -> None:
    """Fail fast (before a slow mypyc run) when there is no compiler or no Python.h."""
    try:
        import mypyc  # noqa: F401
        import setuptools  # noqa: F401  (mypyc builds its extensions through it)
    except ImportError as e:
        raise BuildError(f"{e.name} is not installed (pip install mypy setuptools)") from e
    # the compiler setuptools will call: $CC if set, else the one Python was built with
    cc = shlex.split(os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc"))
    if not cc or shutil.which(cc[0]) is None:
        raise BuildError(f"no C compiler ({cc[0] if cc else 'cc'} not found)")
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise BuildError(f"no Python headers ({include}/Python.h missing)")


def compile_in(work: Path, package: Path, modules: list[str]) -> dict[str, str]:
    """Copy the package into ``work`` and compile ``modules`` (``"<package>.<module>"``)
    there; returns each one's sha256 (of the exact bytes compiled, so a source edited
    meanwhile makes the build stale, not wrong). The whole package is copied so that mypyc
    type-checks the compiled modules against the very sources they import."""
    shutil.copytree(
        package, work / "apportion",
        ignore=shutil.ignore_patterns("_compiled", "__pycache__", "*.so", ".*"),
    )
    digests = {m: sha256_file(source_of(m, str(work / "apportion"))) for m in modules}
    paths = [f"apportion/{m.replace('.', '/')}.py" for m in modules]
    (work / "setup.py").write_text(SETUP_PY.format(paths=paths, group=HELPER_GROUP))
    proc = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=work, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        raise BuildError(f"mypyc failed: {(errors or lines or ['no output'])[0].strip()}")
    return digests


def install_build(work: Path, out: Path, modules: list[str], digests: dict[str, str]) -> None:
    """Move the compiled files of ``work`` into ``out``, replacing what was there; the
    manifest is written last, so a half-written build is never loaded."""
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _stage(work, staging, modules, digests)
        old = out.with_name(f".{out.name}-old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # left only if something failed


def _stage(work: Path, staging: Path, modules: list[str], digests: dict[str, str]) -> None:
    suffix = ext_suffix()
    helper = f"{HELPER_GROUP}__mypyc"
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the build from other users
    # the same layout as the temporary copy: mypyc derives each module's __file__ from it
    for m in modules:
        package, name = m.split(".")
        target = staging / "apportion" / package
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "apportion" / package / f"{name}{suffix}", target)
    shutil.copy2(work / f"{helper}{suffix}", staging)
    import mypy.version

    manifest = {
        "format": MANIFEST_FORMAT,
        "cache_tag": sys.implementation.cache_tag,
        "ext_suffix": suffix,
        "python": sys.version.split()[0],
        "mypyc": mypy.version.__version__,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "helper": helper,
        "modules": digests,
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def build(out: Path, package: Path = Path(PACKAGE_DIR)) -> int:
    """Build into ``out``; returns how many modules were compiled. Raises :class:`BuildError`."""
    check_toolchain()
    modules = compiled_modules(str(package))
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="apportion-corebuild-") as tmp:
        digests = compile_in(Path(tmp), package, modules)
        install_build(Path(tmp), out, modules, digests)
    # the sources may have changed while compiling: say so now rather than at load time
    changed = [m for m in modules if sha256_file(source_of(m, str(package))) != digests[m]]
    if changed:
        (out / MANIFEST).unlink()  # so `make` builds again next time
        raise BuildError(f"core sources changed while compiling ({', '.join(changed)})")
    return len(modules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m apportion.corebuild", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=Path(build_dir()),
                        help="build directory (default: %(default)s)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    t0 = time.monotonic()
    try:
        n = build(out)
    except (BuildError, OSError) as e:
        print(f"apportion: compiled core not built: {e}; the pure-Python core will be used")
        return 0
    print(f"apportion: compiled core built: {n} modules in {out} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
