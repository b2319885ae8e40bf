"""The crawl's chunk layer: chunk statuses and per-host boilerplate, kept in the store.

While a crawl runs, each representative's chunks get the statuses known when it is decided:
the chunk exact index (first source of a content hash) and the chunk LSH bands (sources of
``DEDUP_MIN_TOKENS`` tokens or more) of the same store, and the boilerplate learned by the last
settled crawl. :meth:`ChunkLayer.settle`, at the end of the crawl, revises them all: it learns
boilerplate again from the current documents (each counted once, whatever its number of URLs),
then takes the documents in representative order (first-seen run, then URL key) and gives every
chunk its status from empty indexes, so the result depends on the set of documents only, never
on the order pages arrived in. Until it has run to its end the store says that it is owed
(meta ``chunks_owed``), so a crawl cut short is settled by the next one.

Everything goes through the store interface's primitives, so every backend keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy_dedup.core.bands import BANDS, band_hashes
from scrapy_dedup.core.boilerplate import (
    BOILERPLATE_PARAMS,
    DEFAULT_BOILERPLATE_MIN_PAGES,
    DEFAULT_BOILERPLATE_SHARE,
    boilerplate_group,
    boilerplate_threshold,
)
from scrapy_dedup.core.chunks import CHUNK_PARAMS, DEFAULT_CHUNK_WORDS, Chunk, Heading
from scrapy_dedup.core.fingerprints import (
    DEFAULT_MAX_DISTANCE,
    DEFAULT_MIN_JACCARD,
    DEFAULT_MIN_TOKENS,
    FINGERPRINT_PARAMS,
    near_match,
)  # fmt: skip
from scrapy_dedup.core.page_chunks import ChunkPrint, PageChunks, page_chunks, page_paragraphs
from scrapy_dedup.core.text import canonical_text
from scrapy_dedup.store.base import (
    BOILERPLATE,
    BOILERPLATE_GROUP,
    CHUNK_BANDS,
    CHUNK_EXACT,
    CHUNK_PRINT,
    CHUNKS,
    DedupStore,
    scope_id,
)
from scrapy_dedup.store.records import get_meta, get_text, iter_clusters, put_meta

__all__ = ["ChunkLayer", "ChunkRecord", "ChunkRules", "ChunkSettleResult", "chunk_member", "split_member"]

logger = logging.getLogger(__name__)

#: meta key: the chunk statuses must be settled (a crawl wrote chunks and has not settled them)
OWED = "chunks_owed"
#: meta key: the params the stored chunks were made with
PARAMS_META = "chunk_params"
#: meta key: documents whose chunks were recorded, ever (atomic counter): their order while a
#: crawl runs, after every settled one (settle gives 0..n-1), and how settle sees writes under it
WRITES_META = "chunk_writes"
_LIVE_ORDER = 1 << 40
_BATCH = 500


def chunk_member(key: str, chunk_id: str) -> str:
    """How a chunk is named in the chunk indexes: the document's URL key and the chunk id."""
    return f"{key}\0{chunk_id}"


def split_member(member: str) -> tuple[str, str]:
    key, _, chunk_id = member.rpartition("\0")
    return key, chunk_id


@dataclass
class ChunkRecord:
    """One chunk of a stored document, with the status it was last given."""

    chunk_id: str
    content_hash: str
    start: int
    end: int
    heading: tuple[str, ...]
    tokens: int
    boilerplate: bool
    status: str
    duplicate_of: str | None = None  #: chunk id of the first source
    source_key: str | None = None  #: URL key of the document the first source is in

    def to_list(self) -> list[Any]:
        return [self.chunk_id, self.content_hash, self.start, self.end, list(self.heading), self.tokens,
                self.boilerplate, self.status, self.duplicate_of, self.source_key]  # fmt: skip

    @classmethod
    def from_list(cls, row: list[Any]) -> ChunkRecord:
        cid, digest, start, end, heading, tokens, bp, status, dup, source = row
        return cls(cid, digest, start, end, tuple(heading), tokens, bool(bp), status, dup, source)

    def as_item(self, text: str) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "text": text[self.start : self.end],
            "start": self.start,
            "end": self.end,
            "heading": list(self.heading),
            "content_hash": self.content_hash,
            "status": self.status,
            "duplicate_of": self.duplicate_of,
        }


@dataclass
class ChunkSettleResult:
    """What one settling did, for its log line and stats."""

    documents: int = 0
    chunks: int = 0
    #: chunks whose status changed from the one their item carried
    revised: int = 0
    #: documents chunked again because their boilerplate lines changed
    rechunked: int = 0
    without_text: int = 0
    #: boilerplate groups and the lines learned in them
    groups: int = 0
    boilerplate: int = 0
    #: documents were recorded while it ran (another process of a shared store): still owed
    left_owed: bool = False


def _headings_json(headings: Sequence[Heading] | None) -> list[list[Any]] | None:
    return None if headings is None else [[h.start, h.end, h.level, h.title] for h in headings]


def _headings(raw: list[list[Any]] | None) -> tuple[Heading, ...] | None:
    return None if raw is None else tuple(Heading(*h) for h in raw)


@dataclass(frozen=True)
class ChunkRules:
    """What makes chunks and their statuses: the crawl's DEDUP_CHUNK_* and DEDUP_BOILERPLATE_*
    settings, and the page rule's thresholds, which chunks share."""

    #: largest chunk, in fingerprint tokens
    max_words: int = DEFAULT_CHUNK_WORDS
    #: boilerplate: on at least this many documents of its group...
    min_pages: int = DEFAULT_BOILERPLATE_MIN_PAGES
    #: ... and on at least this share of them
    share: float = DEFAULT_BOILERPLATE_SHARE
    #: groups are host and first path segment, not host alone
    by_path: bool = False
    #: the page rule, applied to chunks: shorter chunks are exact-only
    min_tokens: int = DEFAULT_MIN_TOKENS
    min_jaccard: float = DEFAULT_MIN_JACCARD
    max_distance: int = DEFAULT_MAX_DISTANCE


#: boilerplate groups whose learned lines a crawl keeps in memory (the most recently used):
#: one group per host (or host and first path segment), so a crawl of many hosts stays flat;
#: a group read again after it left comes from the store
BOILERPLATE_GROUPS_KEPT = 4096


class ChunkLayer:
    """Chunk statuses and boilerplate of one store (see the module docstring)."""

    def __init__(self, store: DedupStore, rules: ChunkRules | None = None) -> None:
        self.store = store
        self.rules = rules or ChunkRules()
        self._learned: dict[str, frozenset[str]] = {}
        self._owed_marked = False
        #: while settling: the band rows it has written (every other one is empty)
        self._written: _Written | None = None
        self.params = json.loads(json.dumps(
            {"chunks": CHUNK_PARAMS, "boilerplate": BOILERPLATE_PARAMS, "fingerprint": FINGERPRINT_PARAMS["version"],
             **dataclasses.asdict(self.rules)}, sort_keys=True
        ))  # fmt: skip
        stored = get_meta(store, PARAMS_META)
        #: stored chunks were made with other params: settle makes them again from the texts
        self.params_changed = stored is not None and stored != self.params
        #: the store's chunks were made with these params (False: with others, or never made)
        self.params_current = stored == self.params

    # -- during the crawl -------------------------------------------------------------------
    def group(self, url: str) -> str:
        return boilerplate_group(url, self.rules.by_path)

    def boilerplate_keys(self, group: str) -> frozenset[str]:
        """What the last settled crawl learned as boilerplate in ``group``."""
        keys = self._learned.pop(group, None)
        if keys is None:
            raw = self.store.get(BOILERPLATE_GROUP, group)
            keys = frozenset(json.loads(raw)["keys"]) if raw is not None and not self.params_changed else frozenset()
            if len(self._learned) >= BOILERPLATE_GROUPS_KEPT:
                del self._learned[next(iter(self._learned))]  # the least recently used
        self._learned[group] = keys  # last: the most recently used
        return keys

    def chunk(self, text: str, key: str, url: str, headings: Sequence[Heading] | None = None) -> PageChunks:
        """Chunk a page here (the crawl does the same call in a worker: :func:`page_chunks`)."""
        return page_chunks(text, headings=headings, **self.chunk_args(key, url))

    def chunk_args(self, key: str, url: str) -> dict[str, Any]:
        """What :func:`page_chunks` takes besides the text and the headings."""
        return {
            "scope": key,
            "boilerplate_keys": self.boilerplate_keys(self.group(url)),
            "max_words": self.rules.max_words,
            "min_tokens": self.rules.min_tokens,
        }

    def record(self, key: str, url: str, scope: str, page: PageChunks) -> list[ChunkRecord]:
        """Give a representative's chunks their statuses and keep them; returns them."""
        # before each write: a crawl cut short from here on leaves the settling owed (every time,
        # as another process of a shared store may have settled meanwhile)
        put_meta(self.store, OWED, True)
        if not self._owed_marked:
            put_meta(self.store, PARAMS_META, self.params)
            self._owed_marked = True
        seq = _LIVE_ORDER + self.store.increment_meta(WRITES_META)
        previous = self._get(key)
        rows = self._assign(key, scope, page.chunks, page.prints, seq, previous, claim=True)
        self._put(key, url, scope, page, rows)
        return rows

    def lookup(self, key: str, scope: str, page: PageChunks) -> list[ChunkRecord]:
        """Statuses of a page that is not a representative (passed on as a duplicate): read only."""
        return self._assign(key, scope, page.chunks, page.prints, 0, None, claim=False)

    def forget(self, key: str) -> None:
        """A document is no representative any more: its chunks leave the indexes (settle does
        the same for any it missed)."""
        previous = self._get(key)
        if previous is None:
            return
        with self.store.batch() as b:
            bands: dict[str, tuple[dict, set]] = {}
            self._unindex(b, key, previous, bands)
            self._write_bands(b, bands)
            b.delete(CHUNKS, key)

    # -- store rows ---------------------------------------------------------------------------
    def _get(self, key: str) -> dict[str, Any] | None:
        raw = self.store.get(CHUNKS, key)
        return json.loads(raw) if raw is not None else None

    def get_chunks(self, key: str) -> list[ChunkRecord] | None:
        record = self._get(key)
        return None if record is None else [ChunkRecord.from_list(r) for r in record["chunks"]]

    def _put(self, key, url, scope, page: PageChunks, rows: list[ChunkRecord], batch=None) -> None:
        record = {
            "url": url,
            "scope": scope,
            "group": self.group(url),
            "headings": _headings_json(page.headings),
            "paragraphs": [list(p) for p in page.paragraphs],
            "boilerplate": list(page.boilerplate),
            "chunks": [r.to_list() for r in rows],
        }
        if batch is None:
            with self.store.batch() as b:
                b.put(CHUNKS, key, json.dumps(record, separators=(",", ":")).encode())
        else:
            batch.put(CHUNKS, key, json.dumps(record, separators=(",", ":")).encode())

    def _owners(self, scope: str, minhash: bytes) -> list[str]:
        sid = scope_id(scope).hex()
        return [f"{sid}:{band}:{h:016x}" for band, h in enumerate(band_hashes(minhash))]

    def _bands(self, owner: str, read: dict[str, dict[str, int]] | None = None) -> dict[str, int]:
        """member -> order of the sources in one chunk band. ``read``: the rows read so far for
        one document (nothing is written between its lookups and its writes), kept there."""
        if read is not None:
            row = read.get(owner)
            if row is None:
                row = read[owner] = self._bands(owner)
            return row
        if self._written is not None and owner not in self._written:
            return {}  # settling emptied every band row, and has not written this one
        raw = self.store.get(CHUNK_BANDS, owner)
        if raw is None:
            return {}
        rows = (line.partition("\t") for line in raw.decode().split("\n"))
        return {member: int(order) for order, _, member in rows}

    def _write_bands(
        self, batch, changes: dict[str, tuple[dict[str, int], set[str]]], read: dict[str, dict[str, int]] | None = None
    ) -> None:
        """Apply (added, removed) members per band owner: one write per owner, as a batch does not
        read its own writes. ``read``: rows already read (see :meth:`_bands`), changed in place."""
        written = self._written
        for owner, (added, removed) in changes.items():
            rows = self._bands(owner, read)
            for member in removed:
                rows.pop(member, None)
            rows.update(added)
            if rows:
                # lines of "order TAB member" (URL keys hold no tab or line break)
                value = "\n".join(f"{order}\t{member}" for member, order in sorted(rows.items()))
                batch.put(CHUNK_BANDS, owner, value.encode())
                if written is not None:
                    written.add(owner)
            else:
                batch.delete(CHUNK_BANDS, owner)

    def _unindex(self, batch, key: str, previous: dict[str, Any], bands: dict[str, tuple[dict, set]]) -> None:
        """Take the chunks of ``previous`` (a stored record of ``key``) out of the indexes (band
        removals go to ``bands``), and drop their fingerprints."""
        sid = scope_id(previous.get("scope", "")).hex()
        for row in previous["chunks"]:
            chunk = ChunkRecord.from_list(row)
            member = chunk_member(key, chunk.chunk_id)
            exact = f"{sid}:{chunk.content_hash}"
            if self.store.get(CHUNK_EXACT, exact) == member.encode():
                batch.delete(CHUNK_EXACT, exact)
            raw = self.store.get(CHUNK_PRINT, member)
            if raw is not None:
                p = ChunkPrint.from_bytes(raw)
                if p.indexed:
                    for owner in self._owners(previous.get("scope", ""), p.minhash):
                        bands.setdefault(owner, ({}, set()))[1].add(member)
                batch.delete(CHUNK_PRINT, member)

    def _assign(
        self,
        key: str,
        scope: str,
        chunks: Sequence[Chunk],
        prints: dict[str, ChunkPrint],
        seq: int,
        previous: dict[str, Any] | None,
        *,
        claim: bool,
    ) -> list[ChunkRecord]:
        store = self.store
        sid = scope_id(scope).hex()
        rows: list[ChunkRecord] = []
        local: list[tuple[str, ChunkPrint, frozenset[str]]] = []  # sources of this document so far
        texts = _ChunkTexts(self, key, chunks)
        sources: list[tuple[str, ChunkPrint, list[str]]] = []
        read: dict[str, dict[str, int]] = {}  # band rows, each read once
        for c in chunks:
            row = ChunkRecord(c.chunk_id, c.content_hash, c.start, c.end, c.heading, c.tokens, c.boilerplate, "new")
            rows.append(row)
            if c.boilerplate:
                row.status = "boilerplate"  # never matched, never a source
                continue
            me = chunk_member(key, c.chunk_id)
            exact = f"{sid}:{c.content_hash}"
            held = store.put_if_absent(CHUNK_EXACT, exact, me.encode()) if claim else store.get(CHUNK_EXACT, exact)
            if held is not None and held.decode() != me:
                row.status = "exact_duplicate"
                row.source_key, row.duplicate_of = split_member(held.decode())
                continue
            p = prints.get(c.chunk_id)
            if p is None:
                continue  # too short for near matching: exact only
            owners = self._owners(scope, p.minhash)
            match = self._first_near(key, p, owners, local, texts, me, read)
            if match is not None:
                row.status = "near_duplicate"
                row.source_key, row.duplicate_of = split_member(match)
                continue
            local.append((me, p, frozenset(owners)))
            sources.append((me, p, owners))
        if not claim:
            return rows
        new_ids = {r.chunk_id for r in rows}
        bands: dict[str, tuple[dict, set]] = {}
        with store.batch() as b:
            if previous is not None:
                self._unindex(b, key, previous, bands)
            for c in chunks:
                p = prints.get(c.chunk_id)
                if p is not None:
                    b.put(CHUNK_PRINT, chunk_member(key, c.chunk_id), ChunkPrint(p.simhash, p.tokens, p.minhash).to_bytes())
            for me, p, owners in sources:
                b.put(CHUNK_PRINT, me, ChunkPrint(p.simhash, p.tokens, p.minhash, True).to_bytes())
                for owner in owners:
                    bands.setdefault(owner, ({}, set()))[0][me] = seq
            self._write_bands(b, bands, read)
        if previous is not None:
            # the unindexing above may have dropped claims this document holds again
            for r in rows:
                if r.status == "new" and r.chunk_id in new_ids:
                    store.put_if_absent(CHUNK_EXACT, f"{sid}:{r.content_hash}", chunk_member(key, r.chunk_id).encode())
        return rows

    def _first_near(
        self,
        key: str,
        p: ChunkPrint,
        owners: list[str],
        local: list[tuple[str, ChunkPrint, frozenset[str]]],
        texts: _ChunkTexts,
        me: str,
        read: dict[str, dict[str, int]],
    ) -> str | None:
        """The earliest source (smallest order, then name) that near-matches ``p``; sources of
        this document come after the stored ones (they are later in the order). A candidate is
        confirmed on the two chunks' texts when both are at hand, as documents are (exact
        Jaccard, and a translation needs TRANSLATION_MIN_JACCARD)."""
        candidates: dict[str, int] = {}
        for owner in owners:
            for member, order in self._bands(owner, read).items():
                if not member.startswith(key + "\0"):  # an earlier version of this document
                    candidates[member] = order
        fp = p.fingerprint()
        for member in sorted(candidates, key=lambda m: (candidates[m], m)):
            raw = self.store.get(CHUNK_PRINT, member)
            if raw is None:
                continue
            if self._near(ChunkPrint.from_bytes(raw).fingerprint(), fp, texts.pair(member, me)):
                return member
        mine = set(owners)
        for member, q, theirs in local:
            if not mine.isdisjoint(theirs) and self._near(q.fingerprint(), fp, texts.pair(member, me)):
                return member
        return None

    def _near(self, a, b, texts: tuple[str, str] | None = None) -> bool:
        ok, _, _ = near_match(
            a, b, max_distance=self.rules.max_distance, min_jaccard=self.rules.min_jaccard,
            min_tokens=self.rules.min_tokens, texts=texts,
        )  # fmt: skip
        return ok

    # -- at the end of the crawl --------------------------------------------------------------
    @property
    def owed(self) -> bool:
        return bool(get_meta(self.store, OWED))

    def settle(self) -> ChunkSettleResult:
        """Learn boilerplate from the current documents and give every chunk its status again,
        in representative order; keep the revised statuses. Streams the store (one document's
        text at a time); holds the representatives' keys and one group's paragraph counts.

        A crawl settles when no other process writes the store
        (:meth:`~scrapy_dedup.store.base.DedupStore.writing_elsewhere`). Documents recorded
        while it runs leave the settling owed, so the next one to settle settles them."""
        store = self.store
        result = ChunkSettleResult()
        writes = get_meta(store, WRITES_META) or 0
        put_meta(store, OWED, True)
        reps = sorted(
            (c.rep_first_run, c.representative, c.scope, c.rep_url) for c in iter_clusters(store)
        )
        rep_keys = {key for _, key, _, _ in reps}
        prints = self._clear(rep_keys)
        self._written = _Written(prints * BANDS)
        try:
            self._rebuild(reps, result)
        finally:
            self._written = None
        put_meta(store, PARAMS_META, self.params)
        self.params_changed = False
        self.params_current = True
        if (get_meta(store, WRITES_META) or 0) == writes:
            put_meta(store, OWED, False)  # else pages were recorded meanwhile: settled next time
        else:
            result.left_owed = True
        return result

    def _rebuild(self, reps, result: ChunkSettleResult) -> None:
        """Learn the boilerplate, and give every representative's chunks their statuses in order."""
        store = self.store
        learned = self._learn(reps, result)
        self._learned = dict(learned)
        for seq, (_, key, scope, url) in enumerate(reps):
            previous = self._get(key)
            if previous is not None and previous.get("scope", "") != scope:
                previous = None
            old = {} if previous is None else {r[0]: (r[7], r[8]) for r in previous["chunks"]}
            page = self._page_for(key, url, previous, learned.get(self.group(url), frozenset()), result)
            if page is None:
                continue
            rows = self._assign(key, scope, page.chunks, page.prints, seq, None, claim=True)
            with store.batch() as b:
                for cid in set(old) - {r.chunk_id for r in rows}:
                    b.delete(CHUNK_PRINT, chunk_member(key, cid))  # a chunk the document has no more
                self._put(key, url, scope, page, rows, batch=b)
            result.documents += 1
            result.chunks += len(rows)
            result.revised += sum(1 for r in rows if old.get(r.chunk_id) != (r.status, r.duplicate_of))

    def _page_for(self, key, url, previous, learned: frozenset[str], result: ChunkSettleResult) -> PageChunks | None:
        """The document's chunks under the final boilerplate: the stored ones when the lines taken
        out are the same, else chunked again from its text."""
        if previous is not None and not self.params_changed:
            mine = {p[0] for p in previous["paragraphs"]}
            if set(previous["boilerplate"]) == (learned & mine):
                chunks = []
                prints: dict[str, ChunkPrint] = {}
                for row in previous["chunks"]:
                    r = ChunkRecord.from_list(row)
                    chunks.append(Chunk(r.chunk_id, "", r.start, r.end, r.heading, r.content_hash, r.tokens, r.boilerplate))
                    if not r.boilerplate and r.tokens >= self.rules.min_tokens:
                        raw = self.store.get(CHUNK_PRINT, chunk_member(key, r.chunk_id))
                        if raw is not None:
                            prints[r.chunk_id] = ChunkPrint.from_bytes(raw)
                if len(prints) == sum(1 for c in chunks if not c.boilerplate and c.tokens >= self.rules.min_tokens):
                    paragraphs = tuple(tuple(p) for p in previous["paragraphs"])
                    headings = _headings(previous.get("headings"))
                    return PageChunks(paragraphs, tuple(previous["boilerplate"]), tuple(chunks), prints, headings)
        text = get_text(self.store, key)
        if text is None:
            result.without_text += 1
            return None
        result.rechunked += 1
        headings = _headings(previous.get("headings")) if previous is not None else None
        return page_chunks(
            text, scope=key, boilerplate_keys=learned, headings=headings, max_words=self.rules.max_words,
            min_tokens=self.rules.min_tokens,
        )  # fmt: skip

    def _clear(self, rep_keys: set[str]) -> int:
        """Empty the chunk indexes (rebuilt next, in order); drop what non-representatives left.
        Returns the number of chunk fingerprints kept."""
        store = self.store
        kept = 0
        for rows in _chunked(store.scan(CHUNK_PRINT)):
            with store.batch() as b:
                for member, raw in rows:
                    key, _ = split_member(member)
                    p = ChunkPrint.from_bytes(raw)
                    if key not in rep_keys:
                        b.delete(CHUNK_PRINT, member)
                        continue
                    kept += 1
                    if p.indexed:
                        b.put(CHUNK_PRINT, member, ChunkPrint(p.simhash, p.tokens, p.minhash).to_bytes())
        for table in (CHUNK_EXACT, CHUNK_BANDS, BOILERPLATE, BOILERPLATE_GROUP):
            for rows in _chunked(store.scan(table)):
                with store.batch() as b:
                    for key, _ in rows:
                        b.delete(table, key)
        for rows in _chunked(store.scan(CHUNKS)):
            with store.batch() as b:
                for key, _ in rows:
                    if key not in rep_keys:
                        b.delete(CHUNKS, key)
        return kept

    def _learn(self, reps, result: ChunkSettleResult) -> dict[str, frozenset[str]]:
        """Document frequency of every paragraph, per group, over the current documents."""
        by_group: dict[str, list[tuple[str, str]]] = {}
        for _, key, _, url in reps:
            by_group.setdefault(self.group(url), []).append((url, key))
        learned: dict[str, frozenset[str]] = {}
        for group in sorted(by_group):
            docs = by_group[group]
            counts: Counter[str] = Counter()
            example: dict[str, tuple[str, str, int, int]] = {}  # key -> (url, doc key, start, end)
            pages = 0
            for url, key in docs:
                record = self._get(key)
                if record is not None and not self.params_changed:
                    paragraphs = [tuple(p) for p in record["paragraphs"]]
                else:
                    text = get_text(self.store, key)
                    if text is None:
                        continue
                    paragraphs = list(page_paragraphs(text))
                pages += 1
                for pkey, start, end in paragraphs:
                    counts[pkey] += 1
                    if pkey not in example or url < example[pkey][0]:
                        example[pkey] = (url, key, start, end)
            need = boilerplate_threshold(pages, self.rules.min_pages, self.rules.share)
            keys = sorted(k for k, n in counts.items() if n >= need)
            learned[group] = frozenset(keys)
            # by the document of their example: each document's text is read once, one at a time
            lines = sorted((example[pkey][1], pkey, n) for pkey, n in counts.items() if n >= 2)
            text_of: tuple[str | None, str | None] = (None, None)
            for rows in _chunked(lines):
                with self.store.batch() as b:
                    for key, pkey, n in rows:
                        if text_of[0] != key:
                            text_of = (key, get_text(self.store, key))
                        url, _, start, end = example[pkey]
                        text = text_of[1]
                        line = canonical_text(text[start:end]) if text is not None else ""
                        value = {"pages": n, "text": line, "example_url": url}
                        b.put(BOILERPLATE, f"{group}\0{pkey}", json.dumps(value).encode())
            with self.store.batch() as b:
                value = {"pages": pages, "threshold": need, "keys": keys}
                b.put(BOILERPLATE_GROUP, group, json.dumps(value).encode())
            result.groups += 1
            result.boilerplate += len(keys)
        return learned


class _Written:
    """The band rows one settling has written, as the bits of a hash table (a Bloom filter of
    one hash function): a row it has not written is empty, as settling emptied them all, and
    need not be read. A bit another row set only costs a read; its size is bounded (32 MB).

    Rows another process of a shared store writes meanwhile are not in it; the settling is then
    left owed (``WRITES_META``) and the next one rebuilds every row."""

    def __init__(self, rows: int) -> None:
        # about 16 bits a row: a row not written finds its bit set about 6% of the time
        bits = 1 << min(max(16 * rows, 1 << 16).bit_length(), 28)
        self._mask = bits - 1
        self._bits = bytearray(bits >> 3)

    def add(self, owner: str) -> None:
        h = hash(owner) & self._mask
        self._bits[h >> 3] |= 1 << (h & 7)

    def __contains__(self, owner: str) -> bool:
        h = hash(owner) & self._mask
        return bool(self._bits[h >> 3] >> (h & 7) & 1)


class _ChunkTexts:
    """The texts of chunks compared while one document's chunks are assigned: its own (given,
    or cut from its kept text) and those of earlier documents (cut from their kept texts at
    the spans of their chunk records), each document's read once."""

    def __init__(self, layer: ChunkLayer, key: str, chunks: Sequence[Chunk]) -> None:
        self.layer, self.key = layer, key
        self.own = {c.chunk_id: c for c in chunks}
        self.docs: dict[str, tuple[str | None, dict[str, tuple[int, int]]]] = {}

    def _doc(self, key: str) -> tuple[str | None, dict[str, tuple[int, int]]]:
        if key not in self.docs:
            rows = self.layer.get_chunks(key) if key != self.key else None
            spans = {r.chunk_id: (r.start, r.end) for r in rows or ()}
            self.docs[key] = (get_text(self.layer.store, key), spans)
        return self.docs[key]

    def text(self, member: str) -> str | None:
        key, chunk_id = split_member(member)
        if key == self.key and chunk_id in self.own:
            chunk = self.own[chunk_id]
            if chunk.text:
                return chunk.text
            whole = self._doc(key)[0]
            return None if whole is None else whole[chunk.start : chunk.end]
        whole, spans = self._doc(key)
        span = spans.get(chunk_id)
        return None if whole is None or span is None else whole[span[0] : span[1]]

    def pair(self, member: str, me: str) -> tuple[str, str] | None:
        theirs, mine = self.text(member), self.text(me)
        return None if theirs is None or mine is None else (theirs, mine)


def _chunked(rows: Iterator[Any] | list[Any], size: int = _BATCH) -> Iterator[list[Any]]:
    """Rows in lists of ``size``; a scan is read ahead of the writes to the same table."""
    block: list[Any] = []
    for row in rows:
        block.append(row)
        if len(block) >= size:
            yield block
            block = []
    if block:
        yield block

