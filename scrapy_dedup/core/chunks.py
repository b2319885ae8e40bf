"""Structural chunks of a document's text: headings first, then paragraphs, then sentences.

Pure (no Scrapy, no I/O). A chunk is a slice of the text it came from (``text[start:end]``),
so a retriever can cite the exact characters and a re-crawl of unchanged text gives the same
chunks. Sizes are counted in tokens exactly as the fingerprints count them
(:func:`scrapy_dedup.core.text.token_count`), so "a chunk of 200 words" and "a chunk too short for
near-duplicate matching" mean the same thing everywhere.

Headings come from one of two places: spans given by the caller (the extractor knows which
lines were ``<h1>``..``<h6>``), or Markdown ATX lines (``## Title``) in the text itself.
Everything that changes the chunks of a text is in :data:`CHUNK_PARAMS`; a store keeps it and
refuses chunk fingerprints made with other params.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import xxhash

from .text import TOKENIZER_VERSION, canonical_and_count, token_count, token_starts

__all__ = [
    "CHUNK_PARAMS",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_WORDS",
    "Chunk",
    "Heading",
    "chunk_id",
    "chunk_text",
    "markdown_headings",
]

#: Largest chunk, in fingerprint tokens. Measured on the PostgreSQL 15, Python 3.11 and SQLite
#: docs (benchmarks/bench_chunks.py; docs/benchmarks.md, "Chunks and boilerplate"): at 200, at most 0.1% of
#: lines are longer and get cut at sentences, 4.2-4.7% of chunks are under 50 words (exact-only),
#: and a chunk has 1,100-1,270 characters at the median (about 300 subword tokens) and
#: 2,060-2,310 at p99, about the 512-token input of common embedding models.
DEFAULT_CHUNK_WORDS = 200
#: Tokens repeated from the end of one chunk at the start of the next. 0: an overlap makes
#: every pair of neighbouring chunks a partial duplicate of each other.
DEFAULT_CHUNK_OVERLAP = 0

_VERSION = 1

#: Everything that makes two chunkings of the same text equal. Stored with chunk fingerprints.
CHUNK_PARAMS: dict[str, object] = {
    "version": _VERSION,
    "tokenizer_version": TOKENIZER_VERSION,
    "split": "headings>paragraphs(lines)>sentences>tokens",
    "chunk_id": "xxh3_64(scope NUL content_hash NUL occurrence)",
}

_ATX_RE = re.compile(r"^[ ]{0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_LINE_RE = re.compile(r"[^\n]*\S[^\n]*")  # a line with something on it
# A sentence ends after . ! ? (and closing quotes or brackets) followed by whitespace, or after
# the full-width stops of CJK text, which are not followed by a space.
_SENTENCE_END_RE = re.compile(r"(?<=[.!?…])[\"'’”)\]]*\s+|(?<=[。！？])[」』）”]*\s*")
_WORD_RE = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading line of the text: ``text[start:end]`` is its whole line, ``level`` 1..6."""

    start: int
    end: int
    level: int
    title: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: ``text == document_text[start:end]``."""

    chunk_id: str  #: 16 hex digits, see :func:`chunk_id`
    text: str
    start: int
    end: int
    heading: tuple[str, ...]  #: titles of the enclosing headings, outermost first
    content_hash: str  #: :func:`scrapy_dedup.core.fingerprints.content_hash` of ``text``
    tokens: int  #: fingerprint tokens of ``text``
    boilerplate: bool = False  #: made of boilerplate lines only (see :mod:`.boilerplate`)

    def as_dict(self) -> dict[str, object]:
        return {
            "chunk_id": self.chunk_id,
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "heading": list(self.heading),
            "content_hash": self.content_hash,
        }


def chunk_id(scope: str, content_hash_hex: str, occurrence: int = 0) -> str:
    """Stable id of a chunk: from the document's identity (``scope``, e.g. its URL key), the
    chunk's content hash and how many equal chunks came before it in the same text. Not its
    position, so an edit elsewhere in the page leaves the id of unchanged chunks alone.

    >>> chunk_id("http://example.org/a", "0" * 32)
    '74a6bddc0a3fa1d7'
    >>> chunk_id("http://example.org/a", "0" * 32, 1) != chunk_id("http://example.org/a", "0" * 32)
    True
    """
    return xxhash.xxh3_64_hexdigest(f"{scope}\0{content_hash_hex}\0{occurrence}".encode("utf-8", "surrogatepass"))


def markdown_headings(text: str) -> list[Heading]:
    """ATX headings (``# A``, ``## B``) of Markdown text, in order.

    >>> [(h.level, h.title) for h in markdown_headings("# Guide\\nintro\\n## Install ##\\nrun it")]
    [(1, 'Guide'), (2, 'Install')]
    """
    return [Heading(m.start(), m.end(), len(m.group(1)), m.group(2).strip()) for m in _ATX_RE.finditer(text)]


def _sections(text: str, headings: Sequence[Heading]) -> Iterator[tuple[tuple[str, ...], int, int]]:
    """(heading path, start, end) of the body of each section, in order."""
    path: list[tuple[int, str]] = []
    pos = 0
    for h in sorted(headings, key=lambda h: h.start):
        if h.start < pos or h.end > len(text) or h.end < h.start:
            continue  # overlapping or out-of-range spans from a caller are ignored, not fatal
        yield tuple(t for _, t in path), pos, h.start
        while path and path[-1][0] >= h.level:
            path.pop()
        path.append((h.level, h.title))
        pos = h.end
    yield tuple(t for _, t in path), pos, len(text)


def _spans(pattern: re.Pattern[str], text: str, start: int, end: int) -> list[tuple[int, int]]:
    return [(start + m.start(), start + m.end()) for m in pattern.finditer(text[start:end])]


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    out = []
    pos = start
    for m in _SENTENCE_END_RE.finditer(text, start, end):
        if m.start() > pos:
            out.append((pos, m.start()))
        pos = m.end()
    if pos < end:
        out.append((pos, end))
    return [(a, b) for a, b in out if text[a:b].strip()]


def _units(text: str, start: int, end: int, cap: int) -> Iterator[tuple[int, int, int]]:
    """(start, end, tokens) of pieces of at most ``cap`` tokens: a whole line when it fits,
    else its sentences, else runs of words, else (a CJK run without spaces) characters."""
    for a, b in _spans(_LINE_RE, text, start, end):
        n = token_count(text[a:b])
        if n <= cap:
            yield a, b, n
            continue
        for sa, sb in _sentences(text, a, b):
            n = token_count(text[sa:sb])
            if n <= cap:
                yield sa, sb, n
                continue
            for wa, wb in _spans(_WORD_RE, text, sa, sb):
                n = token_count(text[wa:wb])
                if n <= cap:
                    yield wa, wb, n
                    continue
                # a run without spaces (CJK, or a long identifier): cut between tokens
                cuts = [wa + i for i in token_starts(text[wa:wb])[1:]]
                for ca, cb in zip([wa, *cuts], [*cuts, wb]):
                    yield ca, cb, token_count(text[ca:cb])


def _pack(text: str, units: Iterable[tuple[int, int, int]], cap: int, overlap: int) -> Iterator[tuple[int, int]]:
    """Greedy packing of units into (start, end) chunks of at most ``cap`` tokens; with an
    overlap, a chunk starts with the last units of the previous one (up to ``overlap`` tokens)."""
    current: list[tuple[int, int, int]] = []
    total = 0
    for unit in units:
        if current and total + unit[2] > cap:
            yield current[0][0], current[-1][1]
            carried: list[tuple[int, int, int]] = []
            kept = 0
            for prev in reversed(current) if overlap else ():  # (units of 0 tokens are no overlap)
                if kept + prev[2] > overlap or kept + prev[2] + unit[2] > cap:
                    break
                carried.insert(0, prev)
                kept += prev[2]
            current, total = carried, kept
        current.append(unit)
        total += unit[2]
    if current:
        yield current[0][0], current[-1][1]


def _split_at(start: int, end: int, spans: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int, bool]]:
    """Pieces of [start, end) outside and inside ``spans`` (sorted, disjoint), in order."""
    pos = start
    for a, b in spans:
        if b <= pos or a >= end:
            continue
        a, b = max(a, pos), min(b, end)
        if a > pos:
            yield pos, a, False
        yield a, b, True
        pos = b
    if pos < end:
        yield pos, end, False


def chunk_text(
    text: str,
    *,
    max_words: int = DEFAULT_CHUNK_WORDS,
    overlap: int = DEFAULT_CHUNK_OVERLAP,
    headings: Sequence[Heading] | None = None,
    boilerplate: Sequence[tuple[int, int]] = (),
    scope: str = "",
) -> list[Chunk]:
    """Split ``text`` into chunks that never cross a heading, keep whole lines (paragraphs)
    together up to ``max_words`` tokens, and split a longer line at sentence ends (then words).

    ``headings``: heading spans of ``text`` (their lines are the sections' titles, not part of
    any chunk); ``None`` reads Markdown ATX headings from the text. A text with headings and
    nothing else gives its heading lines as chunks, so no text is lost. ``scope`` (the
    document's identity) goes into :func:`chunk_id`. ``boilerplate``: spans of lines learned as
    boilerplate (:func:`.boilerplate.strip_boilerplate`); they become chunks of their own marked
    ``boilerplate``, so no other chunk contains them. Deterministic; never raises on any text.

    >>> doc = "# Guide\\nHarbor indexes documents.\\n## Install\\nRun pip install harbor. Then run it."
    >>> [(c.heading, c.text) for c in chunk_text(doc)]
    [(('Guide',), 'Harbor indexes documents.'), (('Guide', 'Install'), 'Run pip install harbor. Then run it.')]
    >>> [c.text for c in chunk_text("One two three. Four five six.", max_words=3)]
    ['One two three.', 'Four five six.']
    """
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, got {max_words}")
    if overlap < 0 or overlap >= max_words:
        raise ValueError(f"overlap must be between 0 and max_words - 1, got {overlap}")
    if headings is None:
        headings = markdown_headings(text)
    cuts = sorted(boilerplate)
    spans: list[tuple[tuple[str, ...], int, int, bool]] = []
    for path, start, end in _sections(text, headings):
        for piece_start, piece_end, is_boilerplate in _split_at(start, end, cuts):
            units = _units(text, piece_start, piece_end, max_words)
            for a, b in _pack(text, units, max_words, 0 if is_boilerplate else overlap):
                spans.append((path, a, b, is_boilerplate))
    if not spans and headings:  # only headings: they are the text
        units = _units(text, 0, len(text), max_words)
        spans = [((), a, b, False) for a, b in _pack(text, units, max_words, overlap)]
    chunks = []
    seen: dict[str, int] = {}
    for path, a, b, is_boilerplate in spans:
        piece = text[a:b]
        canonical, n = canonical_and_count(piece)
        if n == 0:
            continue  # punctuation-only lines carry nothing a retriever could match
        digest = xxhash.xxh3_128_hexdigest(canonical)  # content_hash(piece), folded once
        occurrence = seen.get(digest, 0)
        seen[digest] = occurrence + 1
        chunks.append(Chunk(chunk_id(scope, digest, occurrence), piece, a, b, path, digest, n, is_boilerplate))
    return chunks
