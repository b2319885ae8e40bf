"""Everything the chunk layer computes from one page's text, in one pure call.

Pure (no Scrapy, no I/O), so the crawl runs it in its extraction workers: the page's paragraph
keys (what boilerplate is learned from), its boilerplate spans under the set learned so far, its
chunks, and a near fingerprint for every chunk long enough to be matched (``min_tokens``).
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from .boilerplate import paragraph_key, paragraphs, strip_boilerplate
from .chunks import DEFAULT_CHUNK_WORDS, Chunk, Heading, chunk_text
from .fingerprints import DEFAULT_MIN_TOKENS, Fingerprint, fingerprint

__all__ = ["ChunkPrint", "PageChunks", "page_chunks", "page_paragraphs"]

_HEAD = struct.Struct("<QIB")


@dataclass(frozen=True, slots=True)
class ChunkPrint:
    """The near fingerprint of a chunk, as the store keeps it."""

    simhash: int
    tokens: int
    minhash: bytes
    #: entered in the chunk bands (it is a source others are matched against)
    indexed: bool = False

    def to_bytes(self) -> bytes:
        return _HEAD.pack(self.simhash, self.tokens, int(self.indexed)) + self.minhash

    @classmethod
    def from_bytes(cls, raw: bytes) -> ChunkPrint:
        simhash, tokens, indexed = _HEAD.unpack_from(raw)
        return cls(simhash, tokens, bytes(raw[_HEAD.size :]), bool(indexed))

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(content_hash="", simhash=self.simhash, minhash=self.minhash, tokens=self.tokens, length=0)

    @classmethod
    def of(cls, fp: Fingerprint) -> ChunkPrint:
        return cls(fp.simhash, fp.tokens, fp.minhash)


@dataclass(frozen=True, slots=True)
class PageChunks:
    #: (paragraph key, start, end) of each distinct paragraph, at its first line
    paragraphs: tuple[tuple[str, int, int], ...]
    #: paragraph keys taken out as boilerplate, sorted
    boilerplate: tuple[str, ...]
    chunks: tuple[Chunk, ...]
    #: chunk id -> near fingerprint, for chunks of ``min_tokens`` or more that are not boilerplate
    prints: dict[str, ChunkPrint] = field(default_factory=dict)
    #: the heading spans the chunks were made with (None: Markdown ``#`` lines of the text)
    headings: tuple[Heading, ...] | None = None


def page_paragraphs(text: str) -> tuple[tuple[str, int, int], ...]:
    """(key, start, end) of each distinct paragraph of ``text``, in order of first appearance.

    >>> [(s, e) for _, s, e in page_paragraphs("a b\\nc\\na b\\n")]
    [(0, 3), (4, 5)]
    """
    seen: dict[str, tuple[str, int, int]] = {}
    for start, end in paragraphs(text):
        key = paragraph_key(text[start:end])
        if key and key not in seen:
            seen[key] = (key, start, end)
    return tuple(seen.values())


def page_chunks(
    text: str,
    *,
    scope: str,
    boilerplate_keys: Collection[str] = (),
    headings: Sequence[Heading] | None = None,
    max_words: int = DEFAULT_CHUNK_WORDS,
    min_tokens: int = DEFAULT_MIN_TOKENS,
) -> PageChunks:
    """Chunk ``text`` with the lines whose keys are in ``boilerplate_keys`` taken out as chunks of
    their own (never all of them: a page is never emptied), and fingerprint the chunks.

    >>> page = "Harbor indexes documents.\\nWas this page helpful?"
    >>> from scrapy_dedup.core.boilerplate import paragraph_key
    >>> p = page_chunks(page, scope="k", boilerplate_keys={paragraph_key("was this page helpful?")})
    >>> [(c.text, c.boilerplate) for c in p.chunks]
    [('Harbor indexes documents.', False), ('Was this page helpful?', True)]
    """
    keys = frozenset(boilerplate_keys)
    removed = strip_boilerplate(text, keys).removed if keys else ()
    used = sorted({paragraph_key(text[a:b]) for a, b in removed})
    chunks = chunk_text(text, max_words=max_words, headings=headings, boilerplate=removed, scope=scope)
    prints = {
        c.chunk_id: ChunkPrint.of(fingerprint(c.text)) for c in chunks if not c.boilerplate and c.tokens >= min_tokens
    }
    spans = None if headings is None else tuple(headings)
    return PageChunks(page_paragraphs(text), tuple(used), tuple(chunks), prints, spans)
