"""Chunk statuses across documents: which chunk is new, which repeats another, which is boilerplate.

Pure (no Scrapy, no I/O). Documents are taken in a caller-given order that does not depend on
arrival (the crawl uses the representative order: first-seen run, then URL key), so the first
source of every shared chunk, and every status, is the same whatever order pages came in. A
chunk is ``exact_duplicate`` of the first chunk with its content hash, ``near_duplicate`` of the
first earlier chunk it near-matches (the page rule, :func:`.fingerprints.near_match`, on the
chunk's own fingerprints; chunks under ``min_tokens`` are exact-only, as short pages are), and
``boilerplate`` when it is made of lines learned as boilerplate (never matched, never a source).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .bands import band_hashes
from .chunks import Chunk
from .fingerprints import DEFAULT_MIN_JACCARD, DEFAULT_MIN_TOKENS, Fingerprint, fingerprint, near_match

__all__ = ["CHUNK_STATUSES", "ChunkStatus", "settle_chunks"]

CHUNK_STATUSES = ("new", "exact_duplicate", "near_duplicate", "boilerplate")


@dataclass(frozen=True, slots=True)
class ChunkStatus:
    document_id: str
    chunk_id: str
    status: str  #: one of CHUNK_STATUSES
    duplicate_of: str | None = None  #: chunk id of the first source, for duplicates
    jaccard: float | None = None  #: MinHash estimate against it, for near duplicates


def settle_chunks(
    documents: Iterable[tuple[str, Sequence[Chunk]]],
    *,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
) -> list[ChunkStatus]:
    """Statuses of every chunk of ``documents`` (``(document_id, chunks)`` in settled order).

    >>> from scrapy_dedup.core.chunks import chunk_text
    >>> a = chunk_text("Install with pip.\\n" + " ".join(f"w{i}" for i in range(60)), max_words=60, scope="a")
    >>> b = chunk_text("Install with pip.\\nOther words here.", max_words=5, scope="b")
    >>> [(s.document_id, s.status, s.duplicate_of == a[0].chunk_id) for s in settle_chunks([("a", a), ("b", b)])]
    [('a', 'new', False), ('a', 'new', False), ('b', 'exact_duplicate', True), ('b', 'new', False)]
    """
    exact: dict[str, str] = {}  # content hash -> first chunk id
    bands: dict[tuple[int, int], list[str]] = {}  # (band, hash) -> chunk ids, first first
    prints: dict[str, tuple[int, Fingerprint]] = {}  # source chunk id -> (order indexed, fingerprint)
    out: list[ChunkStatus] = []
    for document_id, chunks in documents:
        for chunk in chunks:
            if chunk.boilerplate:
                out.append(ChunkStatus(document_id, chunk.chunk_id, "boilerplate"))
                continue
            first = exact.get(chunk.content_hash)
            if first is not None:
                out.append(ChunkStatus(document_id, chunk.chunk_id, "exact_duplicate", first))
                continue
            exact[chunk.content_hash] = chunk.chunk_id
            if chunk.tokens < min_tokens:
                out.append(ChunkStatus(document_id, chunk.chunk_id, "new"))
                continue
            fp = fingerprint(chunk.text)
            keys = list(enumerate(band_hashes(fp.minhash)))
            match = _first_near(fp, keys, bands, prints, min_tokens, min_jaccard)
            if match is not None:
                out.append(ChunkStatus(document_id, chunk.chunk_id, "near_duplicate", match[0], match[1]))
                continue  # only sources are indexed, as only representatives are for pages
            prints[chunk.chunk_id] = (len(prints), fp)
            for key in keys:
                bands.setdefault(key, []).append(chunk.chunk_id)
            out.append(ChunkStatus(document_id, chunk.chunk_id, "new"))
    return out


def _first_near(
    fp: Fingerprint,
    keys: list[tuple[int, int]],
    bands: dict[tuple[int, int], list[str]],
    prints: dict[str, tuple[int, Fingerprint]],
    min_tokens: int,
    min_jaccard: float,
) -> tuple[str, float] | None:
    """The earliest indexed source that shares a band with ``fp`` and near-matches it."""
    candidates = {c for key in keys for c in bands.get(key, ())}
    for candidate in sorted(candidates, key=lambda c: prints[c][0]):
        ok, _distance, estimate = near_match(prints[candidate][1], fp, min_tokens=min_tokens, min_jaccard=min_jaccard)
        if ok:
            return candidate, estimate
    return None
