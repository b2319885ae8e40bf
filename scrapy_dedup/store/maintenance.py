"""Checking a store: ``scrapy dedup check``.

The URL records are the source of truth; everything else that points at a cluster is
derived from them: the clusters and their memberships, the exact, raw and near-duplicate indexes,
the MinHash signatures and texts kept for documents.  ``check_store`` verifies that the derived
records agree with the URL records, on any backend, through the store's interface; the packed
near-duplicate tables and memberships of clusters that no longer exist are read through the
LevelDB store's own methods (:mod:`scrapy_dedup.store.leveldb`), on that backend only.
``scrapy dedup repair`` (:mod:`scrapy_dedup.store.leveldb.repair`) salvages a LevelDB store's
files and rebuilds every derived index from the URL records: LevelDB only (see
:data:`NOT_REPAIRABLE`).

Checks are registered in :data:`CHECKS` (name -> function), so a new kind of record brings its own.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store.base import (
    CHUNK_EXACT,
    CHUNKS,
    EXACT,
    MEMBERS,
    MINHASH,
    PENDING,
    RAW,
    TEXT,
    DedupStore,
)
from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import get_meta, iter_clusters, iter_urls

#: problems shown per check (the counts are complete)
EXAMPLES = 5
#: what ``scrapy dedup repair`` says of a store it cannot repair (a Redis one)
NOT_REPAIRABLE = (
    "repair salvages a LevelDB store's files; a Redis store has none of its own: a batch a process "
    "left half-applied is finished by the next process that opens it, `scrapy dedup check` reads it "
    "in place, and the server's files are checked with redis-check-rdb / redis-check-aof"
)

#: what ``scrapy dedup migrate`` says of a Redis store
NOT_MIGRATABLE = (
    "migrate rewrites a LevelDB store's files in place; a Redis store is read as it is when its "
    "layout is this version's, and one of an earlier layout is refused at start: crawl into a new "
    "DEDUP_REDIS_PREFIX"
)


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
        #: LevelDB, for the checks of what only that backend has; None on another
        self.leveldb = store if isinstance(store, LevelDBStore) else None
        self.records: dict[str, UrlRecord] = {r.key: r for r in iter_urls(store)}
        self.clusters: dict[str, Cluster] = {c.cluster_id: c for c in iter_clusters(store)}
        self.members: dict[str, set[str]] = defaultdict(set)
        if self.leveldb is not None:  # every member set, a dead cluster's too
            for cid, member in self.leveldb.set_entries(MEMBERS):
                self.members[cid].add(member)
        else:  # a thousand sets a call (a round trip on Redis)
            ids = list(self.clusters)
            for start in range(0, len(ids), 1000):
                part = ids[start : start + 1000]
                for cid, pairs in zip(part, store.set_members_many(MEMBERS, part)):
                    self.members[cid].update(key for key, _ in pairs)
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
        return view.leveldb is not None
    return not view.store.unscannable.intersection(scans)


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
        assert view.leveldb is not None  # run on LevelDB only (SCANS)
        for value, cid in view.leveldb.packed_entries(index):
            result.checked[name] += 1
            if cid not in view.clusters:
                result.problem(name, f"an entry {value:016x} points to a dead cluster {cid}")

    return check


register_check("simhash tables", None)(_packed("simhash tables", "simhash"))
register_check("bands", None)(_packed("bands", "bands"))


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
    for key, raw in view.store.scan(PENDING):
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
    owed = bool(get_meta(view.store, "chunks_owed"))
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
    result.repairable = view.leveldb is not None
    return result


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
