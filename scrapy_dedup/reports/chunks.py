"""``scrapy dedup chunks`` and ``scrapy dedup boilerplate``: what the chunk layer settled.

``chunks`` lists every chunk repeated (exactly or nearly), in other documents or within one (a
changelog entry given twice): its first source in representative order, every copy with its URL
and status, and ``documents``, how many documents hold it. The copies are sorted through a
temporary LevelDB on disk, so a store of any size is listed with flat memory. ``boilerplate``
lists the lines learned as boilerplate per group (host, or host and first path segment), with
the pages they are on and the smallest URL among them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from scrapy_dedup.decide.chunk_layer import ChunkRecord
from scrapy_dedup.store.base import BOILERPLATE, BOILERPLATE_GROUP, CHUNKS, DedupStore
from scrapy_dedup.store.records import get_text

CHUNK_FIELDS = ("chunk_id", "content_hash", "documents", "first_source", "text", "copies", "urls")
CHUNK_TABLE_FIELDS = ("documents", "first_source", "text")
BOILERPLATE_FIELDS = ("group", "pages", "group_pages", "threshold", "example_url", "text", "key")
BOILERPLATE_TABLE_FIELDS = ("group", "pages", "group_pages", "example_url", "text")


def has_chunks(store: DedupStore) -> bool:
    """Whether the store keeps chunk records (a crawl ran with DEDUP_CHUNKS)."""
    return next(iter(store.scan(CHUNKS)), None) is not None


def _record(store: DedupStore, key: str) -> dict[str, Any] | None:
    raw = store.get(CHUNKS, key)
    return json.loads(raw) if raw is not None else None


def shared_chunks(store: DedupStore) -> Iterator[dict[str, Any]]:
    """One row per chunk repeated (in other documents or within its own), with its first source
    and every copy."""
    import plyvel

    tmp = tempfile.mkdtemp(prefix="scrapy-dedup-chunks-")
    db = plyvel.DB(tmp, create_if_missing=True)
    try:
        with db.write_batch() as batch:
            for n, (_key, raw) in enumerate(store.scan(CHUNKS)):
                record = json.loads(raw)
                for row in record["chunks"]:
                    chunk = ChunkRecord.from_list(row)
                    if chunk.status in ("exact_duplicate", "near_duplicate") and chunk.source_key:
                        copy = {"url": record["url"], "chunk_id": chunk.chunk_id, "status": chunk.status}
                        name = f"{chunk.source_key}\0{chunk.duplicate_of}\0{record['url']}\0{chunk.chunk_id}"
                        batch.put(name.encode(), json.dumps(copy).encode())
                if n % 1000 == 999:
                    batch.write()
                    batch.clear()
        group: list[dict[str, Any]] = []
        current: tuple[str, str] | None = None
        for name, value in db.iterator():
            source_key, source_id, _, _ = name.decode().split("\0")
            if (source_key, source_id) != current and group:
                yield _shared(store, current, group)
                group = []
            current = (source_key, source_id)
            group.append(json.loads(value))
        if group:
            yield _shared(store, current, group)
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _shared(store: DedupStore, source: tuple[str, str] | None, copies: list[dict[str, Any]]) -> dict[str, Any]:
    source_key, source_id = source or ("", "")
    record = _record(store, source_key) or {"url": source_key, "chunks": []}
    text, digest = "", None
    for row in record["chunks"]:
        chunk = ChunkRecord.from_list(row)
        if chunk.chunk_id == source_id:
            full = get_text(store, source_key) or ""
            text, digest = full[chunk.start : chunk.end], chunk.content_hash
            break
    urls = [record["url"]] + sorted({c["url"] for c in copies} - {record["url"]})
    return {
        "chunk_id": source_id,
        "content_hash": digest,
        "documents": len(urls),
        "first_source": record["url"],
        "text": " ".join(text.split()),
        "copies": copies,
        "urls": urls,
    }


def learned_boilerplate(store: DedupStore, host: str | None = None) -> list[dict[str, Any]]:
    """Every line learned as boilerplate (of one host's groups, or all), most frequent first."""
    groups: dict[str, dict[str, Any]] = {}
    for group, raw in store.scan(BOILERPLATE_GROUP):
        if host is None or group == host or group.startswith(host + "/"):
            groups[group] = json.loads(raw)
    rows = []
    for name, raw in store.scan(BOILERPLATE):
        group, _, key = name.rpartition("\0")
        meta = groups.get(group)
        if meta is None or key not in meta["keys"]:
            continue
        value = json.loads(raw)
        rows.append({
            "group": group, "pages": value["pages"], "group_pages": meta["pages"], "threshold": meta["threshold"],
            "example_url": value["example_url"], "text": value["text"], "key": key,
        })  # fmt: skip
    rows.sort(key=lambda r: (r["group"], -r["pages"], r["key"]))
    return rows
