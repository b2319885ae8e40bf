"""Checking and repairing a store: ``scrapy dedup check`` and ``scrapy dedup repair``.

The URL records are the source of truth; everything else that points at a cluster is
derived from them: the clusters and their memberships, the exact, raw and near-duplicate indexes,
the MinHash signatures and texts kept for documents.  ``check_store`` verifies that the derived
records agree with the URL records, on any backend, through the store's interface; the packed
near-duplicate tables and memberships of clusters that no longer exist are read from LevelDB's
keys (:mod:`scrapy_dedup.store.leveldb`), on that backend only.  ``repair_store`` runs LevelDB's
own repair (which salvages what the table files and logs still hold) and then rebuilds every
derived index from the URL records: LevelDB only (see :data:`NOT_REPAIRABLE`).

Checks are registered in :data:`CHECKS` (name -> function), so a new kind of record brings its own.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import plyvel

from scrapy_dedup.core.bands import band_hashes
from scrapy_dedup.core.fingerprints import DEFAULT_MIN_TOKENS
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.core.representative import Candidate, choose_representative
from scrapy_dedup.store.base import (
    CHUNK_EXACT,
    CHUNKS,
    EXACT,
    MEMBERS,
    MINHASH,
    OLDEST_MIGRATABLE,
    PENDING,
    RAW,
    STORE_FORMAT,
    TEXT,
    DedupStore,
    StoreError,
)
from scrapy_dedup.store.leveldb import LAYOUT, LevelDBStore
from scrapy_dedup.store.packed_tables import BANDS_SPEC, SIMHASH_SPEC

#: problems shown per check (the counts are complete)
EXAMPLES = 5
#: what ``scrapy dedup repair`` says of a store it cannot repair (a Redis one)
NOT_REPAIRABLE = (
    "repair salvages a LevelDB store's files; a Redis store has none of its own: a batch a process "
    "left half-applied is finished by the next process that opens it, `scrapy dedup check` reads it "
    "in place, and the server's files are checked with redis-check-rdb / redis-check-aof"
)
_ENTRY = struct.Struct("<QQQ")


@dataclass
class CheckResult:
    """Per check: how many entries were looked at, and what is wrong."""

    checked: Counter = field(default_factory=Counter)
    problems: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: leftovers the store reads correctly (shown, not problems)
    notes: Counter = field(default_factory=Counter)
    #: the checks run, in order, and those the backend does not allow (its records keyed by
    #: digests, which cannot be listed)
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: whether ``scrapy dedup repair`` can repair the store (LevelDB)
    repairable: bool = True

    @property
    def consistent(self) -> bool:
        return not self.problems

    def problem(self, check: str, message: str) -> None:
        self.problems[check] += 1
        if len(self.examples[check]) < EXAMPLES:
            self.examples[check].append(message)


class _View:
    """What the checks share: the store's records and clusters, read once."""

    def __init__(self, store: DedupStore) -> None:
        self.store = store
        #: LevelDB's keys, for the checks of what only that backend has; None on another
        self.db = store._db if isinstance(store, LevelDBStore) else None
        self.records: dict[str, UrlRecord] = {r.key: r for r in store.iter_urls()}
        self.clusters: dict[str, Cluster] = {c.cluster_id: c for c in store.iter_clusters()}
        self.members: dict[str, set[str]] = defaultdict(set)
        if self.db is not None:  # every member set, a dead cluster's too
            for key in self.db.iterator(prefix=b"k:", include_value=False):
                cid, _, member = key[2:].decode().partition(":")
                self.members[cid].add(member)
        else:
            for cid in self.clusters:
                self.members[cid].update(key for key, _ in store.set_members(MEMBERS, cid))
        for cid, cluster in self.clusters.items():  # a cluster's record names one member
            self.members[cid].add(cluster.representative)

    def keys(self, table: str) -> Iterator[tuple[str, bytes]]:
        return self.store.scan(table)


Check = Callable[[_View, CheckResult], None]
#: name -> check, run in this order
CHECKS: dict[str, Check] = {}
#: name -> the tables a check scans (a backend that cannot scan one skips it), or None for a
#: check of LevelDB's own keys, run on that backend only
SCANS: dict[str, tuple[str, ...] | None] = {}


def register_check(name: str, scans: tuple[str, ...] | None = ()) -> Callable[[Check], Check]:
    def add(check: Check) -> Check:
        CHECKS[name] = check
        SCANS[name] = scans
        return check

    return add


def _runs_on(name: str, view: _View) -> bool:
    scans = SCANS[name]
    if scans is None:
        return view.db is not None
    return all(view.store.scannable(table) for table in scans)


@register_check("clusters")
def _check_clusters(view: _View, result: CheckResult) -> None:
    """Every member of a cluster (its representative and its member set) exists and points back."""
    for cid in view.clusters:
        result.checked["clusters"] += 1
        for key in view.members[cid]:
            record = view.records.get(key)
            if record is None:
                result.problem("clusters", f"cluster {cid}: member {key} has no URL record")
            elif record.cluster_id != cid:
                result.problem("clusters", f"cluster {cid}: member {key} points to cluster {record.cluster_id}")
    for cid in view.members.keys() - view.clusters.keys():
        result.problem("clusters", f"memberships of a cluster that does not exist: {cid}")


@register_check("records")
def _check_records(view: _View, result: CheckResult) -> None:
    """A record in a cluster is one of its members."""
    for key, record in view.records.items():
        result.checked["records"] += 1
        if record.cluster_id is None:
            continue
        if record.cluster_id not in view.clusters:
            result.problem("records", f"{key} points to a cluster that does not exist: {record.cluster_id}")
        elif key not in view.members.get(record.cluster_id, ()):
            result.problem("records", f"{key} points to cluster {record.cluster_id}, which does not list it")


@register_check("exact index", (EXACT,))
def _check_exact(view: _View, result: CheckResult) -> None:
    """Entries point at live clusters.  A claim whose cluster was never written (the decision
    that claimed the text did not complete: a crash, a full disk) is read as no entry by the
    index; it is counted apart, and ``repair`` removes it."""
    claimed = {r.cluster_id for r in view.records.values() if r.cluster_id is not None}
    for key, value in view.keys(EXACT):
        result.checked["exact index"] += 1
        cid = value.decode()
        if cid in view.clusters:
            continue
        if cid in claimed:
            result.problem("exact index", f"{key} points to a dead cluster {cid}")
        else:
            result.notes["stale exact claims"] += 1


@register_check("raw index", (RAW,))
def _check_raw(view: _View, result: CheckResult) -> None:
    for key, value in view.keys(RAW):
        result.checked["raw index"] += 1
        if value.decode() not in view.records:
            result.problem("raw index", f"{key} points to an unknown URL key {value.decode()}")


def _packed(name: str, index: str) -> Check:
    """Live entries of a packed index (its first table: every table holds each entry) point at
    live clusters."""

    def check(view: _View, result: CheckResult) -> None:
        for _, value, cid in getattr(view.store, index).live_entries():
            result.checked[name] += 1
            if cid.hex() not in view.clusters:
                result.problem(name, f"an entry {value:016x} points to a dead cluster {cid.hex()}")

    return check


register_check("simhash tables", None)(_packed("simhash tables", "_tables"))
register_check("bands", None)(_packed("bands", "_bands"))


def _orphans(table: str, what: str) -> Check:
    def check(view: _View, result: CheckResult) -> None:
        for url_key, _ in view.keys(table):
            result.checked[what] += 1
            record = view.records.get(url_key)
            if record is None or record.cluster_id is None:
                result.problem(what, f"{what[:-1]} of {url_key}, which is not a document")

    return check


register_check("minhashes", (MINHASH,))(_orphans(MINHASH, "minhashes"))
register_check("texts", (TEXT,))(_orphans(TEXT, "texts"))


@register_check("pending requests", (PENDING,))
def _check_pending(view: _View, result: CheckResult) -> None:
    """Every request still owed can be issued again (a dict Scrapy's request_from_dict takes)."""
    for key, raw in view.store.iter_pending():
        result.checked["pending requests"] += 1
        try:
            request = pickle.loads(raw)  # noqa: S301 - the store's own writes
            ok = isinstance(request, dict) and isinstance(request.get("url"), str)
        except Exception:  # noqa: BLE001 - whatever is wrong, it is one unusable entry
            ok = False
        if not ok:
            result.problem("pending requests", f"the pending request of {key} does not deserialize")


@register_check("chunks", (CHUNKS, CHUNK_EXACT))
def _check_chunks(view: _View, result: CheckResult) -> None:
    """Chunk records (DEDUP_CHUNKS) belong to representatives, and every chunk exact entry names a
    chunk a record holds. Before the statuses are settled (a crawl cut short) leftovers are
    expected: they are counted apart, and the next crawl settles them."""
    owed = bool(view.store.get_meta("chunks_owed"))
    reps = {c.representative for c in view.clusters.values()}
    held: dict[str, set[str]] = {}
    for url_key, value in view.keys(CHUNKS):
        result.checked["chunks"] += 1
        try:
            held[url_key] = {row[0] for row in json.loads(value)["chunks"]}
        except (ValueError, KeyError, TypeError, IndexError):
            result.problem("chunks", f"the chunk record of {url_key} does not parse")
            continue
        if url_key not in reps:
            if owed:
                result.notes["chunk records to settle"] += 1
            else:
                result.problem("chunks", f"chunks of {url_key}, which represents no document")
    for key, value in view.keys(CHUNK_EXACT):
        result.checked["chunk exact index"] += 1
        url_key, _, chunk_id = value.decode().rpartition("\0")
        if chunk_id not in held.get(url_key, ()):
            if owed:
                result.notes["chunk claims to settle"] += 1
            else:
                result.problem("chunk exact index", f"{key} names a chunk no record holds")


def check_store(store: DedupStore) -> CheckResult:
    result = CheckResult()
    view = _View(store)
    for name, check in CHECKS.items():
        if _runs_on(name, view):
            result.ran.append(name)
            check(view, result)
        else:
            result.skipped.append(name)
    result.repairable = view.db is not None
    return result


# -- repair ------------------------------------------------------------------------------

#: derived keys, rebuilt from the URL records: clusters, memberships, exact and raw indexes, the
#: packed indexes (write-ahead entries, runs, tombstones, counters) and format 2's band keys; and
#: the change history (decide.changes), which starts again at the next settle
DERIVED = (
    b"D:",
    b"c:",
    b"k:",
    b"h:",
    b"r:",
    b"b",
    *(
        prefix
        for spec in (SIMHASH_SPEC, BANDS_SPEC)
        for prefix in (spec.wal, spec.run, spec.tomb, spec.gen_key, spec.gen_key.replace(b"_gen", b"_counts"))
    ),
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
        result = _rebuild(store, min_tokens, authority)
        result.params_lost = params_lost
        return result
    finally:
        store.close()


def _names(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _rebuild(store: LevelDBStore, min_tokens: int, authority: tuple[str, ...]) -> RepairResult:
    db = store._db
    result = RepairResult()
    old_clusters = {c.cluster_id: c for c in store.iter_clusters()}
    records = list(store.iter_urls())
    result.records = len(records)
    by_cluster: dict[str, list[UrlRecord]] = defaultdict(list)
    for record in records:
        if record.cluster_id is not None:
            by_cluster[record.cluster_id].append(record)
    for prefix in DERIVED:
        with db.write_batch() as wb:
            for key in db.iterator(prefix=prefix, include_value=False):
                wb.delete(key)
                result.removed[prefix.decode()] += 1
    documents = {r.key for rs in by_cluster.values() for r in rs}
    for prefix in (b"n:", b"x:"):
        with db.write_batch() as wb:
            for key in db.iterator(prefix=prefix, include_value=False):
                if key[2:].decode() not in documents:
                    wb.delete(key)
                    result.removed[prefix.decode()] += 1
    # the indexes' memory was loaded at open: start from empty ones
    store._open_indexes()
    for record in records:
        if record.raw_hash:
            with store.batch() as batch:
                batch.index_raw(record.raw_hash, record.key)
    for cid, members in by_cluster.items():
        cluster = _cluster_of(cid, members, old_clusters.get(cid), authority)
        if cid not in old_clusters:
            result.lost_clusters += 1
        rep = next(r for r in members if r.key == cluster.representative)
        with store.batch() as batch:
            batch.put_cluster(cluster)
            for member in members:
                if member.key != cluster.representative:  # named by the cluster's record
                    batch.add_member(cid, member.key)
                if member.content_hash:
                    batch.index_exact(member.scope, member.content_hash, cid)
            if rep.simhash is not None and (rep.tokens or 0) >= min_tokens:
                minhash = store.get_minhash(rep.key)
                batch.index_near(rep.scope, rep.simhash, band_hashes(minhash) if minhash else (), cid)
        result.clusters += 1
    if next(db.iterator(prefix=b"C:", include_value=False), None) is not None:
        # representatives may have changed: the next crawl settles the chunk statuses again
        store.put_meta("chunks_owed", True)
    # what changed before the damage cannot be told: earlier exports' tokens are refused, not
    # answered in part
    db.delete(b"m:changes")
    db.put(b"m:repaired", json.dumps({"records": result.records, "clusters": result.clusters}).encode())
    return result


def _cluster_of(cid: str, members: list[UrlRecord], old: Cluster | None, authority: tuple[str, ...]) -> Cluster:
    """The cluster as it was when its record survived and still agrees, else chosen again."""
    keys = {r.key for r in members}
    if old is not None and old.representative in keys:
        old.size = len(members)
        return old
    best = choose_representative(
        (Candidate(r.key, r.url, r.text_length or 0, r.first_run, r.canonical_alias) for r in members), authority
    )
    rep = next(r for r in members if r.key == best.key)
    return Cluster(
        cluster_id=cid,
        representative=rep.key,
        rep_url=rep.url,
        rep_text_length=rep.text_length or 0,
        rep_first_run=rep.first_run,
        rep_canonical_alias=rep.canonical_alias,
        scope=rep.scope,
        size=len(members),
        max_distance=max((r.distance or 0) for r in members),
    )


def describe(result: CheckResult) -> Iterator[str]:
    """The lines ``scrapy dedup check`` prints."""
    names = list(dict.fromkeys([*result.ran, *result.checked, *result.problems]))
    width = max(len(n) for n in names)
    for name in names:
        checked, problems = result.checked.get(name, 0), result.problems.get(name, 0)
        yield f"{name:<{width}}  {checked:>9,} checked  {problems:>6,} {'problem' if problems == 1 else 'problems'}"
        for example in result.examples.get(name, ()):
            yield f"  {example}"
    if result.skipped:
        yield f"not checked on this backend (it keeps them in a form that cannot be listed): {', '.join(result.skipped)}"
    for note, count in result.notes.items():
        removed = "; `scrapy dedup repair` removes them" if result.repairable else ""
        yield f"{note}: {count:,} (harmless{removed})"
    total = sum(result.problems.values())
    rebuilt = "; `scrapy dedup repair` rebuilds the indexes" if result.repairable else ""
    yield "consistent" if not total else f"inconsistent: {total:,} problem(s){rebuilt}"
