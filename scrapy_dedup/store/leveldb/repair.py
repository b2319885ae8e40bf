"""``scrapy dedup repair``: salvage a LevelDB store's files, then rebuild every derived index
from the URL records (which ``scrapy dedup migrate`` does too).

LevelDB's own repair salvages what the table files and logs still hold; the URL records are the
source of truth, and everything derived from them (clusters, memberships, the exact, raw and
near-duplicate indexes) is written again through the store's interface.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import plyvel

from scrapy_dedup.core.bands import band_hashes
from scrapy_dedup.core.fingerprints import DEFAULT_MIN_TOKENS
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.core.representative import Candidate, choose_representative
from scrapy_dedup.store.base import CHUNKS, MINHASH, OLDEST_MIGRATABLE, STORE_FORMAT, TEXT, StoreError
from scrapy_dedup.store.leveldb.store import LAYOUT, LevelDBStore
from scrapy_dedup.store.records import (
    add_member,
    get_meta,
    get_minhash,
    index_exact,
    index_raw,
    iter_clusters,
    iter_urls,
    put_cluster,
    put_meta,
    raw_index_prefix,
)


@dataclass
class RepairResult:
    records: int = 0
    clusters: int = 0
    removed: Counter = field(default_factory=Counter)
    lost_clusters: int = 0
    #: the store's parameters were lost and written again from the settings
    params_lost: bool = False


def repair_store(
    path: str,
    *,
    min_tokens: int = DEFAULT_MIN_TOKENS,
    authority: tuple[str, ...] = (),
    params: dict[str, Any] | None = None,
) -> RepairResult:
    """Salvage the store's files with LevelDB's repair, then rebuild the derived indexes.

    ``min_tokens`` and ``authority`` are the crawl's ``DEDUP_MIN_TOKENS`` and ``DEDUP_AUTHORITY``
    (which documents enter the near-duplicate index; who represents a cluster whose record is
    lost); ``params`` are the crawl's store parameters, written again if the damage took them.
    """
    if not os.path.exists(os.path.join(path, "CURRENT")) and not any(
        name.endswith((".ldb", ".log", ".sst")) for name in _names(path)
    ):
        raise StoreError(f"no dedup store at {path!r}")
    try:
        # repair_db takes no lock: make sure no crawl holds the store first
        plyvel.DB(path, create_if_missing=False).close()
    except plyvel.IOError as exc:
        if "lock" in str(exc).lower():
            raise StoreError(f"the dedup store {path!r} is in use by another process; stop it first") from exc
    except plyvel.Error:
        pass  # what repair is for
    plyvel.repair_db(path)
    params_lost = False
    db = plyvel.DB(path, create_if_missing=False)
    try:
        raw = db.get(b"m:params")
        if raw is None and params is not None:
            full = {**params, **LAYOUT}
            db.put(b"m:params", json.dumps(json.loads(json.dumps(full)), sort_keys=True).encode())
            params_lost = True
        elif raw is not None:
            stored = json.loads(raw)
            found = stored.get("store_format")
            # the damage took the newer parameters, or the store is older: the rebuild below
            # writes every derived key in this version's layout, which is what a migration does
            if isinstance(found, int) and OLDEST_MIGRATABLE <= found < STORE_FORMAT:
                db.put(b"m:params", json.dumps({**stored, **LAYOUT}, sort_keys=True).encode())
    finally:
        db.close()
    store = LevelDBStore.open_existing(path)
    try:
        result = rebuild(store, min_tokens, authority)
        result.params_lost = params_lost
        return result
    finally:
        store.close()


def _names(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def rebuild(store: LevelDBStore, min_tokens: int, authority: tuple[str, ...]) -> RepairResult:
    """Rebuild every derived index of ``store`` from its URL records (repair and migrate)."""
    result = RepairResult()
    old_clusters = {c.cluster_id: c for c in iter_clusters(store)}
    records = list(iter_urls(store))
    result.records = len(records)
    by_cluster: dict[str, list[UrlRecord]] = defaultdict(list)
    for record in records:
        if record.cluster_id is not None:
            by_cluster[record.cluster_id].append(record)
    result.removed = store.clear_derived()
    documents = {r.key for rs in by_cluster.values() for r in rs}
    for table in (MINHASH, TEXT):
        orphans = [key for key, _ in store.scan(table) if key not in documents]
        with store.batch() as batch:
            for key in orphans:
                batch.delete(table, key)
        result.removed[table] += len(orphans)
    # under the extraction of the store's last crawl (none recorded: none rebuilt, and a page
    # fetched again is extracted again)
    extraction = get_meta(store, "extraction")
    if isinstance(extraction, dict):
        prefix = raw_index_prefix(extraction)
        with store.batch() as batch:
            for record in records:
                if record.raw_hash:
                    index_raw(batch, prefix + record.raw_hash, record.key)
    for cid, members in by_cluster.items():
        cluster = _cluster_of(cid, members, old_clusters.get(cid), authority)
        if cid not in old_clusters:
            result.lost_clusters += 1
        rep = next(r for r in members if r.key == cluster.representative)
        with store.batch() as batch:
            put_cluster(batch, cluster)
            for member in members:
                if member.key != cluster.representative:  # named by the cluster's record
                    add_member(batch, cid, member.key)
                if member.content_hash:
                    index_exact(batch, member.scope, member.content_hash, cid)
            if rep.simhash is not None and (rep.tokens or 0) >= min_tokens:
                minhash = get_minhash(store, rep.key)
                batch.index_near(rep.scope, rep.simhash, band_hashes(minhash) if minhash else (), cid)
        result.clusters += 1
    if next(store.scan(CHUNKS), None) is not None:
        # representatives may have changed: the next crawl settles the chunk statuses again
        put_meta(store, "chunks_owed", True)
    # what changed before the damage cannot be told: earlier exports' tokens are refused, not
    # answered in part
    store.delete_meta("changes")
    put_meta(store, "repaired", {"records": result.records, "clusters": result.clusters})
    return result


def _cluster_of(cid: str, members: list[UrlRecord], old: Cluster | None, authority: tuple[str, ...]) -> Cluster:
    """The cluster as it was when its record survived and still agrees, else chosen again."""
    keys = {r.key for r in members}
    if old is not None and old.representative in keys:
        old.size = len(members)
        return old
    best = choose_representative((Candidate.of(r) for r in members), authority)
    rep = next(r for r in members if r.key == best.key)
    cluster = Cluster(cid, rep.key, rep.url, 0, 0, scope=rep.scope, size=len(members))
    cluster.represent(rep)
    cluster.max_distance = max((r.distance or 0) for r in members)
    return cluster
