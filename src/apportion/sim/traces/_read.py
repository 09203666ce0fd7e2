"""Row readers: every file becomes a header (column names) and rows ``(line, {column: value})``.

Line numbers are 1-based lines of the file. CSV: the header is line 1 and a row is numbered
by the line it starts on (quoted cells may span lines). JSON Lines: the line of the record.
Parquet has no lines: record ``i`` (0-based) is reported as line ``i + 2``, the line it would
have in the same trace written as CSV.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ._errors import TraceError

Row = dict[str, object]
Table = tuple[list[str], Iterator[tuple[int, Row]]]


# A trace's file name ending -> its kind. A text kind may have ``.gz`` added (gzip); Parquet
# compresses itself.
KINDS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
         ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def _ending(path: Path) -> tuple[str, bool]:
    """The suffix that names the kind (``.tsv`` of ``t.tsv.gz``), and whether gzipped."""
    suffixes = [s.lower() for s in path.suffixes]
    gzipped = bool(suffixes) and suffixes[-1] == ".gz"
    if gzipped:
        suffixes.pop()
    return (suffixes[-1] if suffixes else ""), gzipped


def kind_of(path: Path) -> str:
    """``csv``, ``jsonl`` or ``parquet`` from the file name (a ``.gz`` suffix is looked past)."""
    ext, gzipped = _ending(path)
    kind = KINDS.get(ext)
    if kind is None or (gzipped and kind == "parquet"):
        *text, last = (e for e, k in KINDS.items() if k != "parquet")
        binary = " or ".join(e for e, k in KINDS.items() if k == "parquet")
        raise TraceError(f"{path}: format: cannot tell the file type from its name (use "
                         f"{', '.join(text)} or {last}, each with or without .gz, or {binary})")
    return kind


def known_kind(path: Path) -> bool:
    """Whether the file name ends as a trace kind does (``.parquet``, ``.jsonl.gz``, ...;
    ``.parquet.gz`` too, which :func:`kind_of` then refuses)."""
    return _ending(path)[0] in KINDS


def delimiter_of(path: Path, default: str = ",") -> str:
    """The column separator of a CSV trace: a tab for ``.tsv`` (and ``.tsv.gz``)."""
    return "\t" if _ending(path)[0] == ".tsv" else default


class _CheckedGzip(gzip.GzipFile):
    """A gzip file whose damage is a :class:`TraceError` naming the file: gzip says it as
    ``BadGzipFile`` (a traceback) or ``EOFError`` (which click reports as "Aborted!")."""

    def read(self, size: int | None = -1) -> bytes:
        try:
            return super().read(size)
        except (EOFError, OSError, zlib.error) as e:
            raise _damaged(self.name, e) from None

    def read1(self, size: int = -1) -> bytes:
        try:
            return super().read1(size)
        except (EOFError, OSError, zlib.error) as e:
            raise _damaged(self.name, e) from None


def _damaged(name: object, error: Exception) -> TraceError:
    if isinstance(error, EOFError):
        problem = "the compressed data ends early (a truncated or partly copied file?)"
    elif isinstance(error, gzip.BadGzipFile):
        problem = "not a gzip file, though its name ends in .gz"
    else:
        problem = f"cannot decompress: {error}"
    return TraceError(f"{name}: gzip: {problem}")


def open_text(path: Path, newline: str = "") -> IO[str]:
    """Open a text trace, gzip-compressed or not; a UTF-8 byte-order mark is skipped.
    ``newline`` as for :func:`open`: ``""`` for the ``csv`` module, ``"\n"`` to end lines
    at line feeds only. A damaged ``.gz`` is a :class:`TraceError` when read."""
    try:
        if path.suffix.lower() == ".gz":
            return io.TextIOWrapper(_CheckedGzip(str(path), "rb"), encoding="utf-8-sig",
                                    newline=newline)
        return open(path, encoding="utf-8-sig", newline=newline)  # noqa: SIM115 - caller closes
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror or e}") from None


def not_utf8(path: Path, error: UnicodeDecodeError, header: bool) -> TraceError:
    """The error for a trace that is not UTF-8, at the line and column of its first bad byte.

    The text reader decodes ahead in chunks of several KB, so its position when decoding
    fails says nothing about where the byte is: the raw bytes are scanned again, line by line,
    and only on this error, so good files cost nothing more. ``header``: line 1 is a header."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rb") as f:
        # b"\n" never occurs inside a UTF-8 sequence: splitting the bytes at it splits lines
        for line, raw in enumerate(f, start=1):
            if line == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)  # skipped by the reader too
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                column = len(raw[: e.start].decode("utf-8")) + 1  # in characters, from 1
                field = "header" if header and line == 1 else "row"
                return TraceError(
                    f"{path}:{line}: {field}: not UTF-8 text: byte 0x{raw[e.start]:02x} at "
                    f"column {column} (save the file as UTF-8)"
                )
    return TraceError(f"{path}: row: not UTF-8 text: {error}")  # the file changed meanwhile


def check_header(where: str, header: list[str]) -> None:
    """Refuse a column named twice: a row holds one value per name, so one of the two would
    be dropped without a word. Names are compared ignoring case, as :func:`find_column`
    matches them. Unnamed columns (``a,,b``) are let be: nothing can ask for them."""
    first: dict[str, int] = {}  # lower-cased name -> its column, from 1
    for i, name in enumerate(header, start=1):
        j = first.setdefault(name.lower(), i)
        if name and j != i:
            other = header[j - 1]
            spelt = "" if other == name else f", as {other!r} and {name!r}"
            raise TraceError(
                f"{where}: header: column {other!r} appears twice (columns {j} and {i}{spelt})"
            )


def read_table(path: Path, kind: str, delimiter: str = ",") -> Table:
    if kind == "csv":
        return _read_csv(path, delimiter_of(path, delimiter))
    if kind == "jsonl":
        return _read_jsonl(path)
    if kind == "parquet":
        return _read_parquet(path)
    raise AssertionError(kind)


def _read_csv(path: Path, delimiter: str) -> Table:
    f = open_text(path)
    reader = csv.reader(f, delimiter=delimiter)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        f.close()
        raise TraceError(f"{path}: header: the file is empty") from None
    except csv.Error as e:
        f.close()
        raise TraceError(f"{path}:1: header: {e}") from None
    except UnicodeDecodeError as e:
        f.close()
        raise not_utf8(path, e, header=True) from None
    try:
        check_header(f"{path}:1", header)
    except TraceError:
        f.close()
        raise

    def rows() -> Iterator[tuple[int, Row]]:
        with f:
            end = reader.line_num
            while True:
                line = end + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    return
                except csv.Error as e:
                    raise TraceError(f"{path}:{line}: row: {e}") from None
                except UnicodeDecodeError as e:
                    raise not_utf8(path, e, header=True) from None
                end = reader.line_num
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    continue  # blank line
                if len(cells) != len(header):
                    raise TraceError(
                        f"{path}:{line}: row: expected {len(header)} fields, got {len(cells)}"
                    )
                yield line, dict(zip(header, cells, strict=True))

    return header, rows()


def _read_jsonl(path: Path) -> Table:
    records: list[tuple[int, Row]] = []
    header: dict[str, None] = {}  # ordered set: columns in order of first appearance
    spelling: dict[str, str] = {}  # lower-cased key -> the file's first spelling of it
    with open_text(path) as f:
        try:
            for line, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                if not records and raw.lstrip().startswith("["):
                    # one JSON array (as Philly publishes cluster_job_log), not JSON Lines
                    raise TraceError(
                        f"{path}:{line}: row: expects JSON Lines (one object per line); this "
                        "file is a JSON array (convert it: jq -c '.[]' FILE > FILE.jsonl)"
                    )
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{path}:{line}: row: not valid JSON: {e.msg}") from None
                if not isinstance(record, dict):
                    raise TraceError(f"{path}:{line}: row: expected a JSON object")
                record = _one_spelling(f"{path}:{line}", record, spelling)
                header.update(dict.fromkeys(record))
                records.append((line, record))
        except UnicodeDecodeError as e:
            raise not_utf8(path, e, header=False) from None
    if not records:  # else refused as missing every column, "(columns: )"
        raise TraceError(f"{path}: row: the file is empty (no JSON objects)")
    return list(header), iter(records)


def _one_spelling(where: str, record: dict[str, object],
                  spelling: dict[str, str]) -> dict[str, object]:
    """``record`` with each key as the file first spelt it, ignoring case: a row's ``GPUS``
    where the others say ``gpus`` is that column, as a CSV header in another case is read
    (it was a column of its own, and the row's ``gpus`` missing). An object naming one key
    twice in different cases is refused, as a header naming a column twice is."""
    out: dict[str, object] = {}
    typed: dict[str, str] = {}  # the file's spelling -> this object's
    for key, value in record.items():
        name = spelling.setdefault(key.lower(), key)
        if name in out:
            raise TraceError(f"{where}: row: key {typed[name]!r} appears twice, as "
                             f"{typed[name]!r} and {key!r}")
        out[name] = value
        typed[name] = key
    return out


def _read_parquet(path: Path) -> Table:
    import pyarrow as pa  # imported here: only Parquet traces need it
    import pyarrow.parquet as pq

    if not path.is_file():
        raise TraceError(f"{path}: cannot open: No such file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise TraceError(f"{path}: cannot read Parquet: {e}") from None
    header = list(table.column_names)
    check_header(str(path), header)
    records = table.to_pylist()
    return header, ((i + 2, r) for i, r in enumerate(records))


def find_column(header: list[str], name: str) -> str | None:
    """The header's column called ``name``: exact match first, then ignoring case."""
    if name in header:
        return name
    low = name.lower()
    for h in header:
        if h.lower() == low:
            return h
    return None
