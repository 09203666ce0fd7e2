"""apportion: GPU-time budgets, hierarchical fair share and a minimum-runtime contract.

The package exports only its version and :func:`core_build`; the policy is
:mod:`apportion.core`, the simulator :mod:`apportion.sim`, the live service
:mod:`apportion.service`, the command :mod:`apportion.cli`.
"""

from apportion import coreload as _coreload

__version__ = "0.1.0"

# Before anything imports apportion.core: it comes from the compiled build when that build is
# fresh, from the sources otherwise (see apportion.coreload).
_coreload.install()


def core_build() -> str:
    """Which build of ``apportion.core`` this process uses: ``"compiled"`` or ``"python"``."""
    return _coreload.FINDER.choose()


__all__ = ["__version__", "core_build"]
