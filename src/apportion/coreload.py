"""Which build of the compiled parts this process imports: compiled or pure Python.

``python -m apportion.corebuild`` compiles with mypyc the sources of :mod:`apportion.core`
and the simulator's event loop, metrics and old-scheduler pass (``apportion.sim.engine``,
``apportion.sim.metrics``, ``apportion.sim.legacy``: the work of every simulated event) into
a build directory
(``src/apportion/_compiled`` unless ``APPORTION_CORE_BUILD_DIR`` names another) with a
``manifest.json`` that records, for every compiled module, the sha256 of the source it was
built from and the interpreter it was built for (compiled modules in
``<build>/apportion/<package>``, mypyc's shared module in ``<build>``). The package's
``__init__`` installs :class:`CoreFinder` before anything can import them; when
``apportion.core`` or ``apportion.sim`` is first imported, the finder checks that build and,
only if it is fresh, imports the package with the build directory ahead of the sources on
its search path, so the compiled modules win (the package's other modules come from the
sources). A stale build never runs: once any compiled source differs from what was
compiled, everything is imported from the sources until it is rebuilt, so a process never
mixes a compiled module with the source of another that was never compiled with it.
``APPORTION_PURE_CORE=1`` forces the sources.

Stdlib only and cheap (it runs on every ``import apportion``); the check itself runs once,
when a compiled package is first needed.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

# hashlib, json and importlib.util are imported when the core is first needed, not here:
# `import apportion` stays a few milliseconds.

PURE_ENV = "APPORTION_PURE_CORE"
BUILD_DIR_ENV = "APPORTION_CORE_BUILD_DIR"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 2  # 2: modules named "<package>.<module>"; 1 held the core's alone
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BUILD_DIR = os.path.join(PACKAGE_DIR, "_compiled")

# What the build compiles, per subpackage of apportion: None for every module but the
# package's __init__ (which only re-exports), or the modules named.
COMPILED_PACKAGES: dict[str, tuple[str, ...] | None] = {
    "core": None,  # the policy
    "sim": ("engine", "legacy", "metrics"),  # per-event work and the old scheduler's pass
}
COMPILED = "compiled"
PYTHON = "python"


def ext_suffix() -> str:
    """This interpreter's extension module suffix (``.cpython-311-x86_64-linux-gnu.so``)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def build_dir() -> str:
    """The build directory the loader checks (``APPORTION_CORE_BUILD_DIR`` or the default)."""
    return os.environ.get(BUILD_DIR_ENV) or DEFAULT_BUILD_DIR


def sha256_file(path: str) -> str:
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def compiled_modules(package_dir: str = PACKAGE_DIR) -> list[str]:
    """The modules a build compiles, as ``"<package>.<module>"``: what the sources hold now."""
    out: list[str] = []
    for package, named in COMPILED_PACKAGES.items():
        if named is None:
            names = os.listdir(os.path.join(package_dir, package))
            named = tuple(n[:-3] for n in names if n.endswith(".py") and n != "__init__.py")
        out.extend(f"{package}.{m}" for m in named)
    return sorted(out)


def source_of(module: str, package_dir: str = PACKAGE_DIR) -> str:
    """The source file of ``"<package>.<module>"``."""
    package, name = module.split(".")
    return os.path.join(package_dir, package, f"{name}.py")


def stale_reason(build: str, package_dir: str = PACKAGE_DIR) -> str | None:
    """Why the build in ``build`` must not be loaded, or ``None`` when it matches this
    interpreter and the current sources exactly."""
    import json

    path = os.path.join(build, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return f"no compiled build in {build}"
    except (OSError, ValueError) as e:
        return f"{path}: unreadable: {e}"
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return f"{path}: format: not {MANIFEST_FORMAT}"
    if manifest.get("cache_tag") != sys.implementation.cache_tag:
        return f"{path}: cache_tag: built for {manifest.get('cache_tag')}"
    suffix = ext_suffix()
    if manifest.get("ext_suffix") != suffix:
        return f"{path}: ext_suffix: built for {manifest.get('ext_suffix')}"
    helper = manifest.get("helper")
    modules = manifest.get("modules")
    if not isinstance(helper, str) or not isinstance(modules, dict) or not modules:
        return f"{path}: helper/modules: missing"
    if not os.path.isfile(os.path.join(build, helper + suffix)):
        return f"{path}: helper: {helper}{suffix} missing"
    for package in COMPILED_PACKAGES:
        listed = {m.split(".")[1] for m in modules if m.startswith(f"{package}.")}
        package_build = os.path.join(build, "apportion", package)
        try:
            present = {n for n in os.listdir(package_build) if n.endswith(suffix)}
        except OSError:
            return f"{package_build}: missing"
        if present != {f"{m}{suffix}" for m in listed}:
            return f"{package_build}: holds {sorted(present)}, the manifest lists {sorted(listed)}"
    try:
        wanted = compiled_modules(package_dir)
    except OSError as e:
        return f"{package_dir}: unreadable: {e}"
    added = sorted(set(wanted) - set(modules))
    if added:
        return f"{package_dir}: {', '.join(added)}: not in the compiled build"
    for module, digest in modules.items():
        source = source_of(module, package_dir)
        try:
            current = sha256_file(source)
        except OSError:
            return f"{source}: missing (compiled from a source that is gone)"
        if current != digest:
            return f"{source}: changed since the compiled build"
    return None


def load_helper(build: str) -> None:
    """Import mypyc's shared module of the build (the compiled modules' shims import it by
    its top-level name, so it goes into ``sys.modules`` under that name)."""
    import importlib.util
    import json

    with open(os.path.join(build, MANIFEST), encoding="utf-8") as f:
        helper = str(json.load(f)["helper"])
    if helper in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        helper, os.path.join(build, helper + ext_suffix())
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"{helper}: cannot load from {build}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[helper] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[helper]
        raise


class CoreFinder:
    """Finds the packages of :data:`COMPILED_PACKAGES` only: with the fresh compiled build
    first on their search paths, or (returning ``None``) leaves them to the ordinary import
    of the sources."""

    def __init__(self) -> None:
        self.build: str | None = None  # "compiled" or "python", once decided
        self.path = ""  # the build directory loaded, when compiled
        self.reason = ""  # why the sources are used, when they are

    def choose(self) -> str:
        """Decide once per process: ``"compiled"`` or ``"python"`` (reason in ``reason``)."""
        if self.build is not None:
            return self.build
        build = build_dir()
        if os.environ.get(PURE_ENV, "") not in ("", "0"):
            self.build, self.reason = PYTHON, f"{PURE_ENV} is set"
            return self.build
        reason = stale_reason(build)
        if reason is None:
            try:
                load_helper(build)
            except (ImportError, OSError, ValueError, KeyError) as e:
                reason = f"{build}: cannot load: {e}"
        if reason is None:
            self.build, self.path = COMPILED, build
        else:
            self.build, self.reason = PYTHON, reason
        return self.build

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, rest = fullname.partition(".")
        if package != "apportion" or rest not in COMPILED_PACKAGES:
            return None
        if self.choose() != COMPILED:
            return None
        import importlib.util

        sources = os.path.join(PACKAGE_DIR, rest)
        return importlib.util.spec_from_file_location(
            fullname,
            os.path.join(sources, "__init__.py"),
            submodule_search_locations=[os.path.join(self.path, "apportion", rest), sources],
        )


FINDER = CoreFinder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
