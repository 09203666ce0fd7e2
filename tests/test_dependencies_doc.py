"""docs/dependencies.md names every library apportion declares: each requirement of
pyproject.toml (the dependencies and every extra) has a row or a mention there."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_declared_requirement_is_named_in_the_dependencies_doc() -> None:
    """Each distribution pyproject.toml requires (dependencies and optional dependencies,
    but the extras that name apportion itself) appears, case aside, in
    docs/dependencies.md."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        required += extra
    doc = (ROOT / "docs" / "dependencies.md").read_text().lower()
    names = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in required}
    missing = sorted(n for n in names - {"apportion"} if n not in doc)
    assert not missing, f"declared in pyproject.toml, not in docs/dependencies.md: {missing}"
