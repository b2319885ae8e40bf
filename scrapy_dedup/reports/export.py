"""``scrapy dedup export``: the settled corpus, one record per document (or per unique chunk).

A crawl emits items as it decides them, so a better copy that arrives later is emitted again;
the store, read after the crawl, holds the settled answer. One record per cluster:
``document_id`` (the cluster id), ``url`` (its canonical URL), ``title`` (the representative's:
its item's title field, else its ``<title>``; else the first member's that has one), ``text``
(the representative's, kept with ``DEDUP_KEEP_TEXT``), ``sources`` (every URL of the document
with the reason it is an alias, ``null`` for the canonical one), ``first_seen`` and
``last_seen`` (over all its URLs), ``merged_passages`` (what its other members add, below).

Merge without loss: a page folded into a document (a near duplicate) may have paragraphs its
representative lacks. They are kept with the document as ``merged_passages``: runs of the
members' lines that neither the representative nor an earlier member has
(:func:`~scrapy_dedup.core.merged.merged_passages`), each with its ``source_url`` and its span in
that page's kept text, members taken in URL-key order, so the export stays a function of the
pages. ``--chunks`` chunks them too, each occurrence with the URL its offsets point into.

It streams: clusters are read in store order and written one at a time. ``--chunks`` groups
the chunks of every document by content: the occurrences go to a temporary LevelDB on disk,
sorted by content hash, and are read back one group at a time, so memory stays flat too.

``--changes-since TOKEN`` (:func:`write_changes`) writes the documents to delete and to upsert
since the export that printed TOKEN, read from the store's change history
(:mod:`scrapy_dedup.decide.changes`); its documents and chunks are the full export's, by the
same functions.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from scrapy_dedup.core.chunks import DEFAULT_CHUNK_WORDS, Chunk, chunk_text
from scrapy_dedup.core.merged import MergedPassage, merged_passages
from scrapy_dedup.core.records import stored_json
from scrapy_dedup.reports.formats import Progress, iso
from scrapy_dedup.reports.resolve import Resolver, anchor_link
from scrapy_dedup.store.base import CHUNKS, DedupStore, StoreError
from scrapy_dedup.store.records import get_cluster, get_text, get_variant, iter_aliases_of, iter_clusters, members_of

if TYPE_CHECKING:
    from scrapy_dedup.decide.changes import Changes

FIELDS = ("document_id", "url", "title", "text", "sources", "first_seen", "last_seen", "merged_passages")
CHUNK_FIELDS = ("content_hash", "text", "tokens", "documents", "urls")


class NoTexts(StoreError):
    """The store keeps no document texts, so there is nothing to export."""


@dataclass
class ExportCounts:
    documents: int = 0
    without_text: int = 0
    examples_without_text: list[str] = field(default_factory=list)
    chunks: int = 0
    shared_chunks: int = 0

    def note(self) -> str | None:
        """What the reader should know about documents left out, or None."""
        if not self.without_text:
            return None
        examples = ", ".join(self.examples_without_text)
        return (
            f"{self.without_text} document(s) have no text in the store and were not exported "
            f"(crawled with DEDUP_KEEP_TEXT = False, or not text at all, e.g. {examples})"
        )


def _sources(store: DedupStore, resolver: Resolver, members: list[Any]) -> tuple[list[dict[str, Any]], float, float]:
    """Every URL of a document, with the reason it is an alias; and the first/last time seen."""
    sources = []
    first = min((m.first_seen for m in members if m.first_seen), default=0.0)
    last = max((m.last_seen for m in members), default=0.0)
    for member in members:
        sources.append({"url": member.url, "reason": resolver.place(member).reason})
    for member in members:
        for url, reason in iter_aliases_of(store, member.key):
            if reason == "url_variant" and anchor_link(url):
                continue
            sources.append({"url": url, "reason": reason})
            variant = get_variant(store, url) if reason == "url_variant" else None
            if variant:
                if variant.get("first_seen"):
                    first = min(first or variant["first_seen"], variant["first_seen"])
                last = max(last, variant.get("last_seen") or 0.0)
    sources.sort(key=lambda s: (s["reason"] is not None, s["reason"] or "", s["url"]))
    return sources, first, last


def _text(store: DedupStore, resolver: Resolver, cluster: Any, members: list[Any]) -> str | None:
    """The representative's kept text."""
    rep = resolver.record(cluster.representative)
    return get_text(store, cluster.representative) if rep is None else _kept_text(store, rep, members)


def _kept_text(store: DedupStore, record: Any, members: list[Any]) -> str | None:
    """A member's kept text: its own, or (its bytes were seen before, so extraction was skipped)
    that of a member with the same content."""
    text = get_text(store, record.key)
    for other in members:
        if text is not None or record.content_hash is None:
            break
        if other.key != record.key and other.content_hash == record.content_hash:
            text = get_text(store, other.key)
    return text


def _merged(store: DedupStore, cluster: Any, members: list[Any], text: str) -> list[tuple[str, MergedPassage]]:
    """(member URL key, passage) of every passage the members whose text is not the
    representative's add to ``text`` (the representative's), members in URL-key order."""
    seen = {next((m.content_hash for m in members if m.key == cluster.representative), None)}
    texts: list[tuple[str, str]] = []
    keys: dict[str, str] = {}
    for member in sorted(members, key=lambda m: m.key):
        if member.content_hash is None or member.content_hash in seen:
            continue  # the representative, or a copy of a text already taken
        seen.add(member.content_hash)
        kept = _kept_text(store, member, members)
        if kept is not None:
            texts.append((member.url, kept))
            keys[member.url] = member.key
    return [(keys[p.source_url], p) for p in merged_passages(text, texts)]


def documents(
    store: DedupStore,
    counts: ExportCounts | None = None,
    progress: Progress | None = None,
    clusters: Iterable[Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """One record per document (cluster) that has a text, in store order (or of ``clusters``)."""
    counts = counts if counts is not None else ExportCounts()
    progress = progress or Progress("export", streaming=True)
    resolver = Resolver(store)
    for cluster in progress(iter_clusters(store) if clusters is None else clusters, "documents"):
        members = [r for r in (resolver.record(k) for k in members_of(store, cluster)) if r]
        text = _text(store, resolver, cluster, members)
        if text is None:
            counts.without_text += 1
            if len(counts.examples_without_text) < 3:
                counts.examples_without_text.append(cluster.rep_url)
            continue
        sources, first, last = _sources(store, resolver, members)
        merged = _merged(store, cluster, members, text)
        counts.documents += 1
        yield {
            "document_id": cluster.cluster_id,
            "url": cluster.rep_url,
            "title": _title(resolver.record(cluster.representative), members),
            "text": text,
            "sources": sources,
            "first_seen": iso(first),
            "last_seen": iso(last),
            "merged_passages": [p.as_dict() for _, p in merged],
            "_key": cluster.representative,  # not exported: where the stored chunks are
            "_merged": merged,  # not exported: the passages with their members' URL keys
        }
    progress.done()


def _title(representative: Any, members: list[Any]) -> str | None:
    """The representative's title, else the first member's (in URL-key order) that has one: a
    Sphinx page's reST source, longer by its markup, represents the page and has no title."""
    title = getattr(representative, "title", None)
    return title or next((m.title for m in sorted(members, key=lambda m: m.key) if m.title), None)


def _stored_chunks(store: DedupStore) -> Callable[[str, str, str], list[tuple[Chunk, dict[str, Any]]] | None] | None:
    """The chunks a crawl with DEDUP_CHUNKS kept and settled, by representative key; None when the
    store keeps none (the texts are chunked here instead)."""
    from scrapy_dedup.decide.chunk_layer import ChunkLayer

    if next(iter(store.scan(CHUNKS)), None) is None:
        return None
    layer = ChunkLayer(store)

    def stored(key: str, text: str, doc_id: str) -> list[tuple[Chunk, dict[str, Any]]] | None:
        rows = layer.get_chunks(key)
        if rows is None:
            return None
        out = []
        for r in rows:
            piece = text[r.start : r.end]
            chunk = Chunk(r.chunk_id, piece, r.start, r.end, r.heading, r.content_hash, r.tokens, r.boilerplate)
            out.append((chunk, {"status": r.status, "duplicate_of": r.duplicate_of}))
        return out

    return stored


def unique_chunks(
    records: Iterator[dict[str, Any]],
    counts: ExportCounts,
    *,
    max_words: int = DEFAULT_CHUNK_WORDS,
    stored: Callable[[str, str, str], list[tuple[Chunk, dict[str, Any]]] | None] | None = None,
) -> Iterator[dict[str, Any]]:
    """One record per distinct chunk content, with every document and URL it appears in.

    With ``stored`` (a crawl kept its chunks), a document's chunks, ids and settled statuses
    are read from the store; other documents are chunked here."""
    import plyvel

    tmp = tempfile.mkdtemp(prefix="scrapy-dedup-export-")
    db = plyvel.DB(tmp, create_if_missing=True)
    try:
        with db.write_batch() as batch:
            for n, doc in enumerate(records):
                doc_id = doc["document_id"]
                urls = [doc["url"]] + [s["url"] for s in doc["sources"] if s["url"] != doc["url"]]
                batch.put(b"d" + doc_id.encode(), json.dumps(urls).encode())
                kept = stored(doc.get("_key", ""), doc["text"], doc_id) if stored is not None else None
                if kept is None:
                    kept = [(c, {}) for c in chunk_text(doc["text"], max_words=max_words, scope=doc_id)]
                occurrences = [(c, doc["url"], status) for c, status in kept]
                occurrences += _merged_chunks(doc.get("_merged", ()), max_words)
                for seq, (c, source_url, status) in enumerate(occurrences):
                    # the sequence keeps occurrences of one content in document order
                    key = f"c{c.content_hash}\0{doc_id}\0{seq:012d}".encode()
                    value = {"chunk_id": c.chunk_id, "source_url": source_url, "start": c.start, "end": c.end,
                             "heading": list(c.heading), **status}
                    batch.put(b"t" + c.content_hash.encode(), json.dumps([c.text, c.tokens]).encode())
                    batch.put(key, json.dumps(value).encode())
                if n % 1000 == 999:  # keep the batch bounded
                    batch.write()
                    batch.clear()
        current: str | None = None
        group: list[dict[str, Any]] = []
        for key, value in db.iterator(prefix=b"c"):
            digest, doc_id, _ = key[1:].decode().split("\0")
            if digest != current and group:
                yield _chunk_record(db, current, group, counts)
                group = []
            current = digest
            group.append({"document_id": doc_id, **stored_json(value)})
        if group:
            yield _chunk_record(db, current, group, counts)
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _merged_chunks(
    merged: Iterable[tuple[str, MergedPassage]], max_words: int
) -> list[tuple[Chunk, str, dict[str, Any]]]:
    """The chunks of a document's merged passages, with the URL their offsets point into (ids
    scoped by the member's URL key; offsets into the member's kept text)."""
    out: list[tuple[Chunk, str, dict[str, Any]]] = []
    for key, p in merged:
        for c in chunk_text(p.text, max_words=max_words, scope=key):
            out.append((dataclasses.replace(c, start=p.start + c.start, end=p.start + c.end), p.source_url, {}))
    return out


def _chunk_record(db: Any, digest: str | None, group: list[dict[str, Any]], counts: ExportCounts) -> dict[str, Any]:
    text, tokens = json.loads(db.get(b"t" + str(digest).encode()) or b'["", 0]')
    urls: list[str] = []
    seen = set()
    for occurrence in group:
        for url in json.loads(db.get(b"d" + occurrence["document_id"].encode()) or b"[]"):
            if url not in seen:
                seen.add(url)
                urls.append(url)
    counts.chunks += 1
    if len({o["document_id"] for o in group}) > 1:
        counts.shared_chunks += 1
    return {"content_hash": digest, "text": text, "tokens": tokens, "documents": group, "urls": urls}


def write(store: DedupStore, out: TextIO, *, chunks: bool = False, progress: Progress | None = None) -> ExportCounts:
    """Write the export as JSON Lines; raise :class:`NoTexts` when no document has a text."""
    counts = ExportCounts()
    records = documents(store, counts, progress)
    if chunks:
        records = unique_chunks(records, counts, stored=_stored_chunks(store))
    fields = CHUNK_FIELDS if chunks else FIELDS
    for record in records:
        out.write(json.dumps({f: record.get(f) for f in fields}, ensure_ascii=False) + "\n")
    if counts.documents == 0 and counts.without_text:
        raise NoTexts(f"nothing to export: {counts.note()}")
    return counts


# -- export --changes-since: what an index holding an earlier export applies ---------------

def write_changes(
    store: DedupStore, out: TextIO, changes: Changes, *, chunks: bool = False, progress: Progress | None = None
) -> None:
    """Write ``changes`` (:func:`scrapy_dedup.decide.changes.since` a token) as JSON Lines: a ``delete`` line per document gone
    (``reason`` ``gone``, or ``merged`` with the document it went ``into``), then an ``upsert``
    line per document ``new``, ``updated`` or ``re-represented``, with the fields of the export
    (``--chunks``: the document's chunks, every one, in place of its text)."""
    for cid, reason, into in changes.deletes:
        out.write(json.dumps({"op": "delete", "reason": reason, "document_id": cid, "into": into}) + "\n")
    reasons = dict(changes.upserts)
    wanted = (c for c in (get_cluster(store, cid) for cid in reasons) if c is not None)
    records = documents(store, ExportCounts(), progress, clusters=wanted)
    if chunks:
        records = chunked_documents(records, stored=_stored_chunks(store))
    fields = ("document_id", "url", "title", "sources", "chunks") if chunks else FIELDS
    for record in records:
        line = {"op": "upsert", "reason": reasons[record["document_id"]], **{f: record.get(f) for f in fields}}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")


def chunked_documents(
    records: Iterable[dict[str, Any]],
    *,
    stored: Callable[[str, str, str], list[tuple[Chunk, dict[str, Any]]] | None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Each document record with ``chunks``: every chunk of it that the chunk export has (its
    occurrence, with the chunk's text), in document order. Read from :func:`unique_chunks`, so
    a document has here the chunks it has there."""
    docs: dict[str, dict[str, Any]] = {}

    def kept() -> Iterator[dict[str, Any]]:
        for record in records:
            docs[record["document_id"]] = {k: v for k, v in record.items() if k != "text"}
            yield record

    found: dict[str, list[dict[str, Any]]] = {}
    for chunk in unique_chunks(kept(), ExportCounts(), stored=stored):
        for occurrence in chunk["documents"]:
            entry = {k: v for k, v in occurrence.items() if k != "document_id"}
            entry.update(content_hash=chunk["content_hash"], text=chunk["text"], tokens=chunk["tokens"])
            found.setdefault(occurrence["document_id"], []).append(entry)
    for doc_id, record in docs.items():
        yield {**record, "chunks": sorted(found.get(doc_id, []), key=lambda c: (c["start"], c["chunk_id"]))}
