"""Which build of :mod:`apportion.core` this process imports: compiled or pure Python.

``python -m apportion.corebuild`` compiles the core sources with mypyc into a build directory
(``src/apportion/_compiled`` unless ``APPORTION_CORE_BUILD_DIR`` names another) with a
``manifest.json`` that records, for every compiled module, the sha256 of the source it was
built from and the interpreter it was built for (compiled modules in
``<build>/apportion/core``, mypyc's shared module in ``<build>``). The package's ``__init__``
installs :class:`CoreFinder` before anything can import the core; when ``apportion.core`` is first
imported, the finder checks that build and, only if it is fresh, imports the core package
with the build directory ahead of the sources on its search path, so the compiled modules
win. A stale build never runs: once any core source differs from what was compiled, the
core is imported from the sources until it is rebuilt. ``APPORTION_PURE_CORE=1`` forces the
sources.

Stdlib only and cheap (it runs on every ``import apportion``); the check itself runs once,
when the core is first needed.
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

CORE = "apportion.core"
PURE_ENV = "APPORTION_PURE_CORE"
BUILD_DIR_ENV = "APPORTION_CORE_BUILD_DIR"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core")
DEFAULT_BUILD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compiled")

NOT_COMPILED = ("__init__",)  # only re-exports: always imported from the sources
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


def stale_reason(build: str, sources: str = SOURCE_DIR) -> str | None:
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
    core_dir = os.path.join(build, "apportion", "core")
    try:
        present = {n for n in os.listdir(core_dir) if n.endswith(suffix)}
    except OSError:
        return f"{core_dir}: missing"
    if present != {f"{m}{suffix}" for m in modules}:
        return f"{core_dir}: holds {sorted(present)}, the manifest lists {sorted(modules)}"
    try:
        current_modules = {n[:-3] for n in os.listdir(sources) if n.endswith(".py")}
    except OSError:
        return f"{sources}: missing"
    added = sorted(current_modules - set(NOT_COMPILED) - set(modules))
    if added:
        return f"{sources}: {', '.join(added)}: not in the compiled build"
    for module, digest in modules.items():
        source = os.path.join(sources, f"{module}.py")
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
    """Finds ``apportion.core`` only: with the fresh compiled build first on its search path,
    or (returning ``None``) leaves it to the ordinary import of the sources."""

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
        if fullname != CORE or self.choose() != COMPILED:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(
            CORE,
            os.path.join(SOURCE_DIR, "__init__.py"),
            submodule_search_locations=[os.path.join(self.path, "apportion", "core"), SOURCE_DIR],
        )


FINDER = CoreFinder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
