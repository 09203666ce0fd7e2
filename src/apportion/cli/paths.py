"""Where commands write their output: checked when the command line is read, so that a
directory or file that cannot be written is a usage error naming the flag, not a traceback
after a long simulation or a replay."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, Literal

import click


class OutputPath(click.Path):
    """``click.Path`` to a ``Path`` that refuses an empty one: ``Path("")`` is the current
    directory, so ``--out ''`` wrote there without a word."""

    def __init__(self, kind: Literal["file", "directory"]) -> None:
        super().__init__(file_okay=kind == "file", dir_okay=kind == "directory",
                         path_type=Path)
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail(f"empty; give a {self.kind}"
                      + (" (. for the current one)" if self.kind == "directory" else ""),
                      param, ctx)
        return super().convert(value, param, ctx)


OUTPUT_DIR = OutputPath("directory")
OUTPUT_FILE = OutputPath("file")


def _unwritable(what: Path, e: OSError) -> click.BadParameter:
    return click.BadParameter(f"{what}: cannot write there: {e.strerror or e}")


def output_dir(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """A click callback for an output directory: tried by making it (with its parents) and
    a file in it, then left as it was; the command makes it when it writes, so a command
    refused for another reason leaves nothing behind."""
    if value is None:
        return None
    made = [p for p in (value, *value.parents) if not p.exists()]
    try:
        value.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=value):
            pass
    except OSError as e:
        raise _unwritable(value, e) from None
    finally:
        for p in made:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()
    return value


def output_file(_ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """A click callback for an output file: its directory must exist and take a file (the
    file itself is written, or replaced, by the command)."""
    if value is None:
        return None
    parent = value.parent
    try:
        if not parent.is_dir():
            raise FileNotFoundError(2, "no such directory", str(parent))
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise _unwritable(value, e) from None
    return value
