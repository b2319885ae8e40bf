"""``scrapy dedup migrate``: bring a store written by an earlier version to this store format.

What a crawl found is kept as it is: the URL records, the frontier, URL variants and aliases,
MinHash signatures and texts.  What is derived from the records (clusters, memberships, the exact,
raw and near-duplicate indexes) is rebuilt with this version's layout, the way
``scrapy dedup repair`` rebuilds it, and the store's format is updated last, so a migration cut
short is run again.  A format change that touches the kept keys adds its conversion to
:data:`CONVERSIONS`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plyvel

from scrapy_dedup.core.fingerprints import DEFAULT_MIN_TOKENS, FINGERPRINT_PARAMS, fingerprint, narrow_signature
from scrapy_dedup.core.page_chunks import ChunkPrint
from scrapy_dedup.store.base import (
    CHUNK_BANDS,
    CHUNK_PRINT,
    MINHASH,
    OLDEST_MIGRATABLE,
    STORE_FORMAT,
    StoreError,
    StoreLocked,
    format_problem,
)  # fmt: skip
from scrapy_dedup.store.leveldb.repair import rebuild
from scrapy_dedup.store.leveldb.store import LAYOUT, LevelDBStore, record_key
from scrapy_dedup.store.records import SETTLED_META, get_text, iter_urls, put_meta, put_minhash

_BATCH = 5_000


def _narrow_signatures(db: Any) -> None:
    """Format 3 -> 4 (fingerprint version 2): MinHash slots of one byte instead of four.

    A document's signature and its chunks' become the low byte of each slot, which is what
    this version computes from the same text, so a document whose text was not kept loses
    nothing. The chunk band index is keyed by the old slots: it is emptied, and the chunk
    layer, whose parameters name the fingerprint version, settles the chunks again from the
    texts at the end of the next crawl that has them on. Doing this twice changes nothing (a
    migration cut short runs it again)."""

    def rewrite(table: str, narrow: Callable[[bytes], bytes]) -> None:
        wb, pending = db.write_batch(), 0
        for key, value in db.iterator(prefix=record_key(table, "")):
            new = narrow(value)
            if new != value:
                wb.put(key, new)
                pending += 1
            if pending >= _BATCH:
                wb.write()
                wb, pending = db.write_batch(), 0
        wb.write()

    def narrow_chunk(raw: bytes) -> bytes:
        p = ChunkPrint.from_bytes(raw)
        return ChunkPrint(p.simhash, p.tokens, narrow_signature(p.minhash), p.indexed).to_bytes()

    rewrite(MINHASH, narrow_signature)
    rewrite(CHUNK_PRINT, narrow_chunk)
    with db.write_batch() as wb:
        for key in db.iterator(prefix=record_key(CHUNK_BANDS, ""), include_value=False):
            wb.delete(key)


#: format N -> what turns the kept keys of format N into those of format N + 1 (raw LevelDB)
CONVERSIONS: dict[int, Callable[[Any], None]] = {3: _narrow_signatures}


@dataclass
class Migration:
    path: str
    from_format: int
    to_format: int
    records: int = 0
    clusters: int = 0
    rebuilt: bool = False

    def __str__(self) -> str:
        if not self.rebuilt:
            return f"{self.path} already has store format {self.to_format}: nothing to migrate"
        return (
            f"migrated {self.path} from store format {self.from_format} to {self.to_format}: "
            f"{self.records:,} URL records kept, {self.clusters:,} clusters rebuilt"
        )


def migrate_store(path: str, *, min_tokens: int = DEFAULT_MIN_TOKENS, authority: tuple[str, ...] = ()) -> Migration:
    try:
        db = plyvel.DB(path, create_if_missing=False)
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower():
            raise StoreLocked(f"the dedup store {path!r} is in use by another process; stop it first") from exc
        raise StoreError(f"cannot open the dedup store {path!r}: {exc}") from exc
    except plyvel.Error as exc:
        raise StoreError(f"no dedup store at {path!r} ({exc})") from exc
    try:
        raw = db.get(b"m:params")
        params = json.loads(raw) if raw else {}
        found = params.get("store_format")
        if not isinstance(found, int) or not OLDEST_MIGRATABLE <= found <= STORE_FORMAT:
            raise StoreError(format_problem(path, found) or f"{path!r} has no store parameters")
        interrupted = db.get(b"m:migrating")
        # fingerprints of another definition (a new tokenizer, the MinHash over words) are
        # computed again from the texts, in a store of this format too
        refingerprint = params.get("fingerprint") != json.loads(json.dumps(dict(FINGERPRINT_PARAMS)))
        if found == STORE_FORMAT and interrupted is None and not refingerprint:
            return Migration(path, found, found)
        if interrupted is not None:
            marker = json.loads(interrupted)
            found, refingerprint = marker["from"], marker.get("refingerprint", False) or refingerprint
        for version in range(found, STORE_FORMAT):
            if version in CONVERSIONS:
                CONVERSIONS[version](db)
        updated = {**params, **LAYOUT, "fingerprint": dict(FINGERPRINT_PARAMS)}
        new_params = json.dumps(updated, sort_keys=True).encode()
    finally:
        db.close()
    # the derived indexes are rebuilt through this version's backend, which needs the format it
    # reads: the parameters are written first as they will be, and the migration is redone from
    # the records if it is cut short
    db = plyvel.DB(path, create_if_missing=False)
    try:
        db.put(b"m:migrating", json.dumps({"from": found, "refingerprint": refingerprint}).encode())
        db.put(b"m:params", new_params)
    finally:
        db.close()
    store = LevelDBStore.open_existing(path)
    try:
        if refingerprint:
            _refingerprint(store)
            # past decisions stand until the next settle, which decides every pair again
            put_meta(store, SETTLED_META, None)
        rebuilt = rebuild(store, min_tokens, authority)
        store.delete_meta("migrating")
    finally:
        store.close()
    return Migration(path, found, STORE_FORMAT, rebuilt.records, rebuilt.clusters, rebuilt=True)


def _refingerprint(store: LevelDBStore) -> int:
    """Fingerprint every document whose text the store kept again, with this version's
    definition; returns how many.  Clusters keep their members (past decisions stand); a
    document without its text keeps its old fingerprints, which match nothing new exactly."""
    done = 0
    for record in list(iter_urls(store)):
        if record.cluster_id is None:
            continue
        text = get_text(store, record.key)
        if text is None:
            continue
        fp = fingerprint(text)
        record.content_hash, record.simhash, record.tokens = fp.content_hash, fp.simhash, fp.tokens
        with store.batch() as batch:
            batch.put_url(record)
            put_minhash(batch, record.key, fp.minhash)
        done += 1
    return done
