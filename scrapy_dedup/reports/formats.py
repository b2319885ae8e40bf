"""Output writers shared by the listing reports: aligned table, JSON Lines, CSV.

Every writer consumes rows (dicts) one at a time, so a report over millions of
URLs streams.  The table guesses its column widths from the first rows and
then keeps them; when the output is a terminal (or ``COLUMNS`` is set), URL
columns are shortened in the middle so that a line fits.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, TextIO, TypeVar

FORMATS = ("table", "jsonl", "csv")

#: rows the table looks at before it fixes its column widths
TABLE_SAMPLE = 500
#: a shortened URL column keeps at least this many characters
MIN_SHRUNK = 24
#: optional columns are left out before a URL column is cut below this
READABLE_URL = 40
GAP = "  "

T = TypeVar("T")

# What a crawled page could use to take over a terminal: C0 and C1 controls (ESC starts the
# escape sequences, CR rewrites a line) and the bidirectional overrides that reorder what is shown.
# Tab and newline stay: the tables are made of them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_control(text: str) -> str:
    """``text`` without control characters (a table or a terminal shows it as plain text)."""
    return _CONTROL.sub("", text)


class TextOut(Protocol):
    """Where rows are written: a text stream, or a wrapper of one with its ``write``."""

    def write(self, text: str, /) -> int: ...


class ControlFree:
    """A text stream that drops control characters on the way out (``--format table``)."""

    def __init__(self, out: TextOut) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(strip_control(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (``2024-03-01T09:00:00Z``); None for unknown (0 or None)."""
    if not ts:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def hex64(value: int | None) -> str | None:
    """A 64-bit fingerprint as 16 hex digits."""
    return None if value is None else f"{value:016x}"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    # stripped here too, so that column widths count what is shown
    return strip_control(str(value))


def shorten(text: str, width: int) -> str:
    """Cut ``text`` in the middle: a URL keeps its host and the end of its path."""
    if len(text) <= width:
        return text
    if width < 5:
        return text[:width]
    head = (width - 1) // 3
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def terminal_width() -> int:
    """Columns available for a table, 0 when unlimited (output to a file or pipe)."""
    return shutil.get_terminal_size((0, 0)).columns


def write_rows(
    rows: Iterable[dict[str, Any]],
    fields: Sequence[str],
    fmt: str,
    out: TextOut,
    *,
    table_fields: Sequence[str] | None = None,
    shrink: Sequence[str] = (),
    optional: Sequence[str] = (),
    width: int | None = None,
) -> int:
    """Write ``rows`` in ``fmt``; returns the number of rows written.

    ``fields`` are the record's fields, in order (jsonl, csv); the table may
    show fewer (``table_fields``) so that it stays readable in a terminal.
    """
    if fmt == "jsonl":
        return _write_jsonl(rows, fields, out)
    if fmt == "csv":
        return _write_csv(rows, fields, out)
    if fmt == "table":
        return write_table(rows, table_fields or fields, out, shrink=shrink, optional=optional, width=width)
    raise ValueError(f"unknown format {fmt!r}")


def _write_jsonl(rows: Iterable[dict[str, Any]], fields: Sequence[str], out: TextOut) -> int:
    n = 0
    for row in rows:
        out.write(json.dumps({f: row.get(f) for f in fields}, ensure_ascii=False) + "\n")
        n += 1
    return n


def _write_csv(rows: Iterable[dict[str, Any]], fields: Sequence[str], out: TextOut) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    n = 0
    for row in rows:
        writer.writerow(["" if row.get(f) is None else row.get(f) for f in fields])
        n += 1
    return n


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL ('' if it has none)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return ""
    return scheme + sep + rest.split("/", 1)[0].split("?", 1)[0]


def write_table(
    rows: Iterable[dict[str, Any]],
    fields: Sequence[str],
    out: TextOut,
    *,
    shrink: Sequence[str] = (),
    optional: Sequence[str] = (),
    width: int | None = None,
) -> int:
    """An aligned table; URL columns are the ``shrink`` ones.

    When every URL of the first rows has one origin, the table says so once
    and shows paths.  When a line is wider than ``width``, the ``optional``
    columns are left out (in order) and then URL columns are cut in the middle.
    """
    width = terminal_width() if width is None else width
    iterator = iter(rows)
    head: list[dict[str, Any]] = []
    for row in iterator:
        head.append(row)
        if len(head) >= TABLE_SAMPLE:
            break
    urls = {origin(str(r[f])) for r in head for f in shrink if r.get(f)}
    common = urls.pop() if len(urls) == 1 else ""

    def text(row: dict[str, Any], f: str) -> str:
        value = cell(row.get(f))
        if common and f in shrink and value.startswith(common):
            return value[len(common):] or "/"
        return value

    fields = list(fields)
    widths = {f: max([len(f)] + [len(text(r, f)) for r in head]) for f in fields}
    for f in optional:
        # leave a column out rather than cut URLs below a readable width
        if width and f in fields and _total(fields, widths, shrink) > width:
            fields.remove(f)
    numeric = {
        f: bool(head) and all(r.get(f) is None or isinstance(r.get(f), (int, float)) for r in head) for f in fields
    }
    limits = _fit(fields, [widths[f] for f in fields], shrink, width)

    def line(values: list[str]) -> str:
        parts = []
        for i, (f, value) in enumerate(zip(fields, values, strict=True)):
            limit = limits[i]
            if limit is not None:
                value = shorten(value, limit)
            w = limit if limit is not None else widths[f]
            last = i == len(values) - 1
            parts.append(value.rjust(w) if numeric[f] else (value if last else value.ljust(w)))
        return GAP.join(parts).rstrip() + "\n"

    if common:
        out.write(f"(URLs on {common})\n")
    out.write(line(fields))
    n = 0
    for row in _chain(head, iterator):
        out.write(line([text(row, f) for f in fields]))
        n += 1
    return n


def _total(fields: Sequence[str], widths: dict[str, int], shrink: Sequence[str]) -> int:
    """Width of a line whose URL columns are cut to a readable width."""
    cells = sum(min(widths[f], READABLE_URL) if f in shrink else widths[f] for f in fields)
    return cells + len(GAP) * (len(fields) - 1)


def _fit(fields: Sequence[str], widths: list[int], shrink: Sequence[str], width: int) -> list[int | None]:
    """Per-column limits so that a line fits ``width`` (None: no limit)."""
    limits: list[int | None] = [None] * len(fields)
    total = sum(widths) + len(GAP) * (len(fields) - 1)
    if not width or total <= width:
        return limits
    excess = total - width
    shrinkable = [i for i, f in enumerate(fields) if f in shrink and widths[i] > MIN_SHRUNK]
    room = sum(widths[i] - MIN_SHRUNK for i in shrinkable)
    if not room:
        return limits
    for i in shrinkable:
        share = (widths[i] - MIN_SHRUNK) / room
        limits[i] = max(MIN_SHRUNK, widths[i] - int(excess * share + 0.999))
    return limits


def _chain(first: list[T], rest: Iterator[T]) -> Iterator[T]:
    yield from first
    yield from rest


class Progress:
    """A counter on stderr for long scans, shown only when stderr is a terminal.

    When stdout is the same terminal and the report streams its rows, the rows
    are the progress: pass ``streaming=True`` and the counter stays quiet.
    """

    def __init__(self, label: str, *, streaming: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.enabled = _isatty(self.stream) and not (streaming and _isatty(sys.stdout))
        self.count = 0
        self._next = time.monotonic() + 0.5
        self._shown = False

    def __call__(self, iterable: Iterable[T], label: str | None = None) -> Iterator[T]:
        label = label or self.label
        for item in iterable:
            self.count += 1
            if self.enabled and time.monotonic() >= self._next:
                self.stream.write(f"\r{label}: {self.count:,}\033[K")
                self.stream.flush()
                self._shown = True
                self._next = time.monotonic() + 0.25
            yield item

    def done(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
