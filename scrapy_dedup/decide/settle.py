"""Settling: the clusters as a function of the set of documents, whatever order they came in.

The crawl decides each page when it arrives (that saves fetching and extracting what is
known already), but near-duplicate similarity is not transitive: a page near two others that
are not near each other joins whichever cluster it meets first. Those decisions are
provisional. Settling recomputes every cluster from what the store holds (each document's
fingerprints, URL, scope and representative inputs) and writes the result back, so the
export, ``lookup`` and the cluster reports read one corpus per set of pages:

1. every document in the representative order (:func:`~scrapy_dedup.core.representative.
   representative_order`: the URL key is its last tie-break, so the order is total);
2. in that order, a document joins the first representative already chosen that it
   duplicates (the same text, or near by the crawl's own test,
   :func:`~scrapy_dedup.core.fingerprints.near_match`), else it becomes a representative.
   A page whose rel=canonical the crawl honoured (``canonical_alias``) comes after every other
   page of its scope in that order and joins the cluster its target was settled in, as the
   crawl placed it: the declaration is kept (its ``duplicate_of`` still names the target).

No member is ever compared with another member, only with its representative, so a chain
A~B~C with A and C apart is never glued into one cluster. Candidates come from the same
key math as the store's indexes (SimHash blocks, MinHash bands), built over the chosen
representatives only.

A settled cluster is named after its scope and its representative's URL key
(:func:`~scrapy_dedup.decide.clusters.cluster_id_for`), as a crawl names the cluster a
page founds: the ``document_id`` of the export stays while its representative does, across
re-crawls and settles. The crawl's items carry the provisional id: a page that takes a
cluster over keeps the id of the page that founded it, so the settled id is the item's only
while the founder still represents the cluster.
"""

from __future__ import annotations

import gc
import itertools
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

import numpy as np
import xxhash

from scrapy_dedup.core.bands import BANDS, BLOCK_BITS, BLOCKS, ROWS, band_hashes
from scrapy_dedup.core.fingerprints import SLOT_BITS, Fingerprint, near_match, set_jaccard, shingle_set
from scrapy_dedup.core.records import Cluster, UrlRecord, duplicate_reason, duplicate_status, unpack_text
from scrapy_dedup.core.representative import Candidate, representative_order
from scrapy_dedup.decide.changes import record as record_changes
from scrapy_dedup.decide.clusters import cluster_id_for, distance
from scrapy_dedup.store.base import CHUNKS, CLUSTER, MINHASH, TEXT, URL, DedupStore, StoreBatch
from scrapy_dedup.store.records import (
    SETTLED_META,
    add_member,
    get_meta,
    index_exact,
    iter_clusters,
    iter_urls,
    members_of_many,
    put_cluster,
    put_meta,
    remove_member,
)

__all__ = ["Settled", "SettleResult", "StoreSettled", "affected", "settle", "settle_clusters", "settle_store"]

#: what a near test answers: (near, SimHash distance, Jaccard)
NearTest = Callable[[UrlRecord, UrlRecord], "tuple[bool, int | None, float | None]"]
#: told the documents about to be settled, so that what they need is read in one call a table
ReadAhead = Callable[[Sequence[UrlRecord]], None]
#: the MinHashes of some documents, read in one call
Minhashes = Callable[[Sequence[UrlRecord]], Sequence["bytes | None"]]


@dataclass(slots=True)
class Settled:
    """One settled cluster: its representative and its other members, with how close each is."""

    representative: UrlRecord
    #: (member, distance to the representative, Jaccard with it)
    members: list[tuple[UrlRecord, int | None, float | None]] = field(default_factory=list)

    @property
    def cluster_id(self) -> str:
        return cluster_id_for(self.representative.scope, self.representative.key)

    def keys(self) -> list[str]:
        """The URL keys of the representative and the members."""
        return [self.representative.key, *(m.key for m, _, _ in self.members)]


@dataclass(slots=True)
class SettleResult:
    documents: int = 0
    clusters: int = 0
    #: documents whose representative settling changed (their provisional decision was revised)
    revised: int = 0
    #: clusters written again (new, renamed, or with members that came or went)
    rewritten: int = 0
    #: URL records written again (placed in another cluster, or with another status or match)
    records: int = 0
    #: documents settled again (all of them, or those an incremental settle reached)
    affected: int = 0
    #: the settled store's duplicates: the same text as their representative (exact), or
    #: another (near), as :func:`~scrapy_dedup.core.records.duplicate_reason` says
    exact_duplicate: int = 0
    near_duplicate: int = 0

    def __str__(self) -> str:
        return (
            f"{self.documents} documents in {self.clusters} clusters ({self.affected} settled again): "
            f"{self.revised} provisional decision(s) revised; {self.rewritten} cluster(s) and "
            f"{self.records} URL record(s) written again; "
            f"{self.exact_duplicate} exact and {self.near_duplicate} near duplicate(s)"
        )


#: documents whose MinHash, text and shingle set settling keeps at once (one LRU each)
_CACHED = 4096
#: documents whose MinHash and text are read in one call (one round trip on Redis)
_READ_AHEAD = 1000
#: clusters whose writes go in one batch
_BATCH = 1000

#: a MinHash band is 8 slots of 8 bits (one 64-bit int); each band's tag goes above those bits
assert ROWS * SLOT_BITS == 64, "a band is read as one 64-bit int"
_MISSING = object()
_BAND_TAGS = [(band + 1) << 64 for band in range(BANDS)]
_BANDS_OF = struct.Struct(f"<{BANDS}Q")
#: candidate keys of a document: SimHash blocks, then MinHash bands
_COLUMNS = BLOCKS + BANDS
_COLUMN_SALT = (np.arange(1, _COLUMNS + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)
_SCOPE_SALT = np.uint64(0xC2B2AE3D27D4EB4F)
_EMPTY = np.empty(0, np.uint64)
#: documents sharing one SimHash block beyond which they are joined in one group without their
#: distances compared (16 bits: about 15 a block by chance at 10^6 documents)
_LONG_RUN = 256


def _add(index: dict[int, int | list[int]], key: int, n: int) -> None:
    # one int for a key with one entry (most): a list each costs about 90 bytes
    found = index.get(key)
    if found is None:
        index[key] = n
    elif isinstance(found, int):
        index[key] = [found, n]
    else:
        found.append(n)


def _candidates(
    record: UrlRecord,
    keys: list[int],
    index: dict[int, int | list[int]],
    simhash_of: Callable[[int], int | None],
    max_distance: int,
) -> set[int]:
    """The entries of ``index`` that share a band with ``record``, or a SimHash block within
    ``max_distance`` bits: what the store's SimHash tables and bands answer a crawl. A block
    shared by chance (16 bits: thousands of pairs in a large store) is no candidate."""
    # (a record without a SimHash has no keys: the loops below do nothing)
    get, found, simhash = index.get, set(), record.simhash or 0
    for k in keys[BLOCKS:]:  # (the hottest loop of a settle: no generator, no call per key)
        n = get(k)
        if n is not None:
            found.add(n) if isinstance(n, int) else found.update(n)
    for k in keys[:BLOCKS]:
        n = get(k)
        if n is not None:
            for m in (n,) if isinstance(n, int) else n:
                if m not in found and (simhash ^ (simhash_of(m) or 0)).bit_count() <= max_distance:
                    found.add(m)
    return found


def _digest(keys: Iterable[str]) -> str:
    return xxhash.xxh64_hexdigest("\0".join(sorted(keys)).encode())


def affected(
    records: Sequence[UrlRecord],
    touched: Iterable[int],
    near: NearTest,
    *,
    minhashes: Minhashes,
    min_tokens: int,
    max_distance: int = 64,
) -> set[int]:
    """The positions in ``records`` of every document connected to a ``touched`` one by a chain
    of duplicates (the same text, or near).

    Settling decides a document from the representatives before it that it duplicates only,
    so the settled clusters of one such component depend on its documents alone: settling
    these again, and keeping every other cluster, is settling them all."""
    join = _KeyJoin(records, minhashes, min_tokens, max_distance)
    copies: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for n, record in enumerate(records):
        copies[(record.scope, record.content_hash)].append(n)
    reached = set(touched)
    todo = list(reached)
    while todo:
        n = todo.pop()
        record = records[n]
        found = join.candidates(n)
        found.update(copies[(record.scope, record.content_hash)])
        for m in sorted(found - reached):
            if records[m].content_hash == record.content_hash or near(record, records[m])[0]:
                reached.add(m)
                todo.append(m)
    return reached


class _KeyJoin:
    """Every document's candidate keys (:meth:`near_keys`: its SimHash blocks and MinHash
    bands, a column each). :meth:`groups` sorts each column to join the documents that share a
    key; :meth:`candidates` sorts them all once, so that the documents sharing a key with one
    are found by a binary search: what a dict of every document's 36 keys answered, in about a
    tenth of its memory and time (each key an int in a sorted array, not a dict entry and an
    object)."""

    def __init__(
        self,
        records: Sequence[UrlRecord],
        minhashes: Minhashes,
        min_tokens: int,
        max_distance: int,
        reading: np.ndarray | None = None,
    ) -> None:
        """``reading``: the positions of ``records`` in the order their MinHashes are best read
        in (the store's key order: neighbours in a table file, where random reads of a large
        store each read a block of their own), else their own order."""
        n, self.max_distance = len(records), max_distance
        scopes: dict[str, int] = {}
        self.scope = np.fromiter((scopes.setdefault(r.scope, len(scopes)) for r in records), np.uint64, n)
        self.simhash = np.fromiter((r.simhash or 0 for r in records), np.uint64, n)
        # column b < BLOCKS: SimHash block b; then band b's 8 slots as one little-endian int
        self.keys = np.zeros((n, _COLUMNS), np.uint64)
        self.indexable = np.zeros(n, bool)
        blank = bytes(_BANDS_OF.size)
        at_all = np.arange(n) if reading is None else reading
        for start in range(0, n, _READ_AHEAD):
            at = at_all[start : start + _READ_AHEAD]
            chunk = [records[i] for i in at.tolist()]
            signatures = minhashes(chunk)
            ok = [_is_indexable(r, min_tokens, m) for r, m in zip(chunk, signatures)]
            bands = b"".join(m[: _BANDS_OF.size] if good and m else blank for m, good in zip(signatures, ok))
            self.indexable[at] = ok
            self.keys[at, BLOCKS:] = np.frombuffer(bands, "<u8").reshape(len(chunk), BANDS)
        for b in range(BLOCKS):
            self.keys[:, b] = (self.simhash >> np.uint64(BLOCK_BITS * b)) & np.uint64((1 << BLOCK_BITS) - 1)
        self.rows = np.flatnonzero(self.indexable)
        # built by the first candidates() (groups() needs none of it)
        self.order: np.ndarray | None = None
        self.sorted = _EMPTY

    def near_keys(self, n: int) -> list[int]:
        """The candidate keys of document ``n`` compared by distance, from its row (its MinHash
        is not read again): its SimHash blocks (the table number in the bits above 16) and its
        MinHash bands, each band's 8 slots as one int with the band's number above them (the
        bytes the store's band hashes are taken of: equal bands are equal keys, without
        hashing; ints hash faster than the slices did)."""
        if not self.indexable[n]:
            return []
        row = self.keys[n].tolist()
        return [(i + 1) << 16 | block for i, block in enumerate(row[:BLOCKS])] + [
            tag | value for tag, value in zip(_BAND_TAGS, row[BLOCKS:])
        ]

    def _index(self) -> None:
        # one sorted array for every column: a key mixed with its column and scope (equal keys
        # stay equal; a collision of different ones is taken apart by the exact check below)
        mixed = self._mixed(self.rows)
        self.order = np.argsort(mixed.ravel(), kind="stable")
        self.sorted = mixed.ravel()[self.order]

    def _mixed(self, rows: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return self.keys[rows] ^ _COLUMN_SALT ^ (self.scope[rows] * _SCOPE_SALT)[:, None]

    def candidates(self, n: int) -> set[int]:
        """The documents sharing a band with document ``n``, or a SimHash block within
        ``max_distance`` bits: what :func:`_candidates` answers from an index of them all."""
        if not self.indexable[n]:
            return set()
        if self.order is None:
            self._index()
        assert self.order is not None, "built by _index"
        query = self._mixed(np.array([n]))[0]
        lo = np.searchsorted(self.sorted, query, "left").tolist()
        hi = np.searchsorted(self.sorted, query, "right").tolist()
        entries = np.concatenate([self.order[a:b] for a, b in zip(lo, hi)])
        docs, columns = self.rows[entries // _COLUMNS], entries % _COLUMNS
        same = (self.keys[docs, columns] == self.keys[n, columns]) & (self.scope[docs] == self.scope[n])
        near = np.bitwise_count(self.simhash[docs] ^ self.simhash[n]) <= self.max_distance
        return set(docs[same & ((columns >= BLOCKS) | near)].tolist())

    def groups(self, records: Sequence[UrlRecord]) -> np.ndarray:
        """Each document's group: the first position among the documents it is connected to
        by a chain of candidate keys (a band, or a SimHash block within ``max_distance``
        bits, in one scope: what :func:`_candidates` can answer), of copies of one text in a
        scope, or of honoured rel=canonical declarations. No document of a group is a
        candidate of another group's, so each group settles as it would among them all."""
        parent, rows = np.arange(len(records)), self.rows
        scopes = self.scope[rows]
        one_scope = len(rows) < 2 or bool((scopes == scopes[0]).all())
        for column in range(_COLUMNS if len(rows) > 1 else 0):
            keys = self.keys[rows, column]
            order = np.argsort(keys) if one_scope else np.lexsort((keys, scopes))
            keys, at = keys[order], rows[order]
            same = keys[1:] == keys[:-1]
            if not one_scope:
                same &= scopes[order][1:] == scopes[order][:-1]
            if column >= BLOCKS:
                _join(parent, at[:-1][same], at[1:][same])
            else:
                self._join_close(parent, at, same)
        first: dict[tuple[str, str | None], int] = {}
        targets = {r.duplicate_of for r in records if _follows_canonical(r)}
        position = {r.key: n for n, r in enumerate(records) if r.key in targets}
        pairs = []
        for n, r in enumerate(records):
            copy_of = first.setdefault((r.scope, r.content_hash), n)
            if copy_of != n:
                pairs.append((n, copy_of))
        # (a declaration across scopes is not followed: a group stays in one scope)
        pairs += [(n, position[r.duplicate_of]) for n, r in enumerate(records)
                  if _follows_canonical(r) and r.duplicate_of in position
                  and records[position[r.duplicate_of]].scope == r.scope]
        if pairs:
            a, b = np.array(pairs, np.int64).T
            _join(parent, a, b)
        return parent

    def _join_close(self, parent: np.ndarray, at: np.ndarray, same: np.ndarray) -> None:
        """Join the documents ``at`` (sorted by a SimHash block: ``same[i]`` when ``at[i]`` and
        ``at[i + 1]`` share it) that share a block within ``max_distance`` bits. A run longer
        than ``_LONG_RUN`` is joined whole: a coarser group settles alike, only with less
        locality."""
        run = np.concatenate(([0], np.cumsum(~same)))
        length = np.bincount(run)[run]
        long = length > _LONG_RUN
        whole = same & long[:-1]
        _join(parent, at[:-1][whole], at[1:][whole])
        i = np.flatnonzero(~long & (length > 1))
        # every close pair first, then one join (each join flattens the whole forest)
        pairs_a, pairs_b = [], []
        for gap in range(1, _LONG_RUN):
            i = i[i + gap < len(at)]
            i = i[run[i + gap] == run[i]]
            if not len(i):
                break
            a, b = at[i], at[i + gap]
            close = np.bitwise_count(self.simhash[a] ^ self.simhash[b]) <= self.max_distance
            pairs_a.append(a[close])
            pairs_b.append(b[close])
        if pairs_a:
            _join(parent, np.concatenate(pairs_a), np.concatenate(pairs_b))


def _join(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Put ``a[i]`` and ``b[i]`` in one tree of the forest ``parent``, whose roots are the
    smallest position of their tree; the forest is flat (every node's parent its root) after."""
    while True:
        _flatten(parent)
        ra, rb = parent[a], parent[b]
        apart = ra != rb
        if not apart.any():
            return
        a, b, ra, rb = a[apart], b[apart], ra[apart], rb[apart]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))


def _flatten(parent: np.ndarray) -> None:
    while True:
        up = parent[parent]
        if np.array_equal(up, parent):
            return
        parent[:] = up


def _settle_one(
    record: UrlRecord,
    placed: dict[str, Settled],
    exact: dict[str | None, Settled],
    near_index: dict[int, int | list[int]],
    settled: list[Settled],
    near: NearTest,
    near_keys: Callable[[], list[int]],
    max_distance: int,
    last: bool = False,
) -> Settled:
    """Put ``record`` in the cluster it settles in (a new one when it represents); returns it.
    ``last``: no document after it is compared with it (it is not indexed)."""
    # _follows_canonical checks that duplicate_of is set
    target = placed.get(record.duplicate_of) if _follows_canonical(record) else None  # type: ignore[arg-type]
    if target is not None and target.representative.scope == record.scope:
        # an honoured rel=canonical: where its target is (aliases come last in the order)
        target.members.append((record, distance(record, target.representative), record.jaccard))
        return target
    same = exact.get(record.content_hash)
    if same is not None:
        same.members.append((record, distance(record, same.representative), 1.0))
        return same
    # (no representative indexed, and none to index: nothing of it is read)
    keys = near_keys() if near_index or not last else []
    for n in sorted(_candidates(record, keys, near_index, lambda m: settled[m].representative.simhash, max_distance)):
        # in representative order: the first it is near takes it
        ok, gap, jaccard = near(record, settled[n].representative)
        if ok:
            settled[n].members.append((record, gap, jaccard))
            exact.setdefault(record.content_hash, settled[n])
            return settled[n]
    cluster = Settled(record)
    exact[record.content_hash] = cluster
    settled.append(cluster)
    if not last:
        for k in keys:
            _add(near_index, k, len(settled) - 1)
    return cluster


def _follows_canonical(record: UrlRecord) -> bool:
    """A page whose declared rel=canonical the crawl honoured: it goes where its target
    (``duplicate_of``) is settled, and never represents (it sorts after every other page)."""
    return record.canonical_alias and record.duplicate_of is not None


def _is_indexable(record: UrlRecord, min_tokens: int, minhash: bytes | None) -> bool:
    return record.simhash is not None and (record.tokens or 0) >= min_tokens and bool(minhash)


def settle_clusters(
    records: Iterable[UrlRecord],
    near: NearTest,
    *,
    minhash_of: Callable[[str], bytes | None],
    min_tokens: int,
    authority: Sequence[str] = (),
    max_distance: int = 64,
    read_ahead: ReadAhead | None = None,
    minhashes: Minhashes | None = None,
) -> list[Settled]:
    """The settled clusters of ``records`` (documents: URL records with content), in
    representative order. Pure given ``near`` and ``minhash_of``: the same set of records
    gives the same clusters whatever order it is given in. A representative sharing only a
    SimHash block with a record is a candidate within ``max_distance`` bits (64: any).
    ``read_ahead`` is told each run of ``_READ_AHEAD`` records before they are settled;
    ``minhashes`` reads many records' MinHashes at once (else ``minhash_of`` reads each).

    The documents are settled one group after another (:meth:`_KeyJoin.groups`: no document
    is a candidate of another group's), each group in representative order. That decides
    each document as the whole order would, and the representatives a document is compared
    with were settled shortly before it: their texts and shingle sets are still cached.

    >>> from scrapy_dedup.core.records import UrlRecord
    >>> def doc(key, length, content):
    ...     return UrlRecord(key, key, content_hash=content, text_length=length, cluster_id="x")
    >>> docs = [doc("http://h/b", 10, "c1"), doc("http://h/a", 10, "c1"), doc("http://h/c", 20, "c2")]
    >>> never = lambda a, b: (False, None, None)
    >>> [(s.representative.key, [m.key for m, _, _ in s.members])
    ...  for s in settle_clusters(docs, never, minhash_of=lambda k: None, min_tokens=1)]
    [('http://h/c', []), ('http://h/a', ['http://h/b'])]
    """
    given = list(records)
    # (positions in ``given``: the MinHashes are read in its order, the store's key order when
    # the records come from a scan of it)
    order = sorted(range(len(given)), key=lambda i: (given[i].scope, representative_order(Candidate.of(given[i]), authority)))
    ordered = [given[i] for i in order]
    if minhashes is None:
        minhashes = partial(_each, minhash_of)
    reading = np.argsort(np.array(order, np.int64)) if order else np.empty(0, np.int64)
    join = _KeyJoin(ordered, minhashes, min_tokens, max_distance, reading)
    group = join.groups(ordered)
    del order, reading
    sequence = np.argsort(group, kind="stable").tolist()
    size = np.bincount(group, minlength=len(ordered)).tolist()
    group = group.tolist()
    settled: list[Settled] = []
    #: the position in ``ordered`` of each settled cluster's representative
    founded: list[int] = []
    # the settled cluster of each page an honoured rel=canonical names (only those: memory)
    targets = {r.duplicate_of for r in ordered if _follows_canonical(r)}
    placed: dict[str, Settled] = {}
    current = -1
    for count, n in enumerate(sequence):
        if read_ahead is not None and count % _READ_AHEAD == 0:
            # a document alone in its group is compared with none: nothing of it is read
            read_ahead([ordered[m] for m in sequence[count : count + _READ_AHEAD] if size[group[m]] > 1])
        record = ordered[n]
        if group[n] != current:
            # a group is in one scope: restricted text never meets another scope's
            current = group[n]
            exact: dict[str | None, Settled] = {}
            # the group's representatives by SimHash block and by MinHash band: the store's key math, in memory
            near_index: dict[int, int | list[int]] = {}
        before = len(settled)
        last = count + 1 == len(sequence) or group[sequence[count + 1]] != current
        home = _settle_one(record, placed, exact, near_index, settled, near, partial(join.near_keys, n), max_distance, last)
        if len(settled) > before:
            founded.append(n)
        if record.key in targets:
            placed[record.key] = home
    return [settled[i] for i in np.argsort(founded).tolist()]


def _each(minhash_of: Callable[[str], bytes | None], records: Sequence[UrlRecord]) -> list[bytes | None]:
    return [minhash_of(r.key) for r in records]


@dataclass(slots=True)
class StoreSettled:
    """What :func:`settle_store` did."""

    #: the clusters settled (None: not asked for)
    clusters: SettleResult | None = None
    #: the chunk statuses settled (a ``chunk_layer.ChunkSettleResult``), or None
    chunks: Any = None


def settle_store(
    store: DedupStore, config: Any, *, incremental: bool = True, clusters: bool = True, moved: bool = False
) -> StoreSettled:
    """Settle ``store`` under ``config`` (the crawl's settings): the clusters, then the chunk
    statuses, which follow the representatives. The one way a crawl, ``ingest`` and
    ``scrapy dedup settle`` settle a store.

    ``clusters=False``: the chunk statuses only. ``moved``: documents
    changed place meanwhile without a cluster settled again (gone, redirected, taken over,
    added). The chunk statuses are settled when they are owed (a crawl recorded chunks since
    they were last settled), when ``DEDUP_CHUNKS`` is on and the store's chunks were never made
    or were made with other chunk settings (documents no page change decided again have
    theirs made from their kept texts), or when the store keeps chunks (or ``DEDUP_CHUNKS`` is
    on) and representatives may have changed."""
    from scrapy_dedup.decide.chunk_layer import OWED, ChunkLayer

    done = StoreSettled()
    if clusters:
        done.clusters = settle(
            store,
            max_distance=config.max_distance,
            min_jaccard=config.min_jaccard,
            min_tokens=config.min_tokens,
            authority=config.authority,
            incremental=incremental,
        )
        moved = moved or bool(done.clusters.rewritten)
    layer = ChunkLayer(store, config.chunk_rules)
    if (
        get_meta(store, OWED)
        or (config.chunks and not layer.params_current)
        or (moved and (config.chunks or next(iter(store.scan(CHUNKS)), None) is not None))
    ):
        done.chunks = layer.settle()
    return done


def settle(
    store: DedupStore,
    *,
    max_distance: int,
    min_jaccard: float,
    min_tokens: int,
    authority: Sequence[str] = (),
    incremental: bool = True,
) -> SettleResult:
    """Settle every cluster of ``store`` and write what changed, in batches of ``_BATCH`` clusters.

    ``incremental``: when the store was settled before with the same settings, only the
    clusters that changed since (their members no longer match their ``settled`` digest, or
    they are new) are settled again, with every document connected to theirs by a chain of
    duplicates (:func:`affected`); every other cluster is as settling would leave it.

    The near test is the crawl's (:func:`near_match` with its settings; a pair is decided by
    the exact Jaccard of the two texts, and their languages, when the store keeps them).
    """
    with _collector_paused():
        return _settle(
            store,
            max_distance=max_distance,
            min_jaccard=min_jaccard,
            min_tokens=min_tokens,
            authority=authority,
            incremental=incremental,
        )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off until the block ends (as it was before, after).

    A settle holds every URL record, cluster and member list of the store until it ends, and
    makes no reference cycles of its own: each collection found nothing to free, and the
    oldest generation's went through all of those objects again (at 10^6 documents, 21 of
    them, and about 7% of a full settle's CPU with the younger ones)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _settle(
    store: DedupStore,
    *,
    max_distance: int,
    min_jaccard: float,
    min_tokens: int,
    authority: Sequence[str],
    incremental: bool,
) -> SettleResult:
    docs: list[UrlRecord] = []
    #: the redirects, for the change history (an alias counts in its target's document)
    redirects: list[UrlRecord] = []
    for r in iter_urls(store):
        if r.has_content:
            docs.append(r)
        elif r.status == "redirect":
            redirects.append(r)
    # the keys of each text kept under several (only those: memory), in the order they are tried
    shared: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for r in docs:
        shared[(r.scope, r.content_hash)].append(r.key)
    copies = {text: sorted(keys) for text, keys in shared.items() if len(keys) > 1}
    del shared
    # what the documents about to be settled need, read many keys at a time (a round trip a
    # table on Redis, instead of one a document), each value kept until it is first used
    ahead: dict[tuple[str, str], bytes | None] = {}

    def read(table: str, key: str) -> bytes | None:
        found = ahead.pop((table, key), _MISSING)
        return store.get(table, key) if found is _MISSING else found  # type: ignore[return-value]

    def minhashes(records: Sequence[UrlRecord]) -> list[bytes | None]:
        return store.get_many(MINHASH, [r.key for r in records])

    def read_ahead(records: Sequence[UrlRecord]) -> None:
        ahead.clear()
        # only a text compared on its words is read
        keys = [r.key for r in records if (r.tokens or 0) >= min_tokens]
        texts = store.get_many(TEXT, keys)
        ahead.update(zip([(TEXT, key) for key in keys], texts))
        # a MinHash decides a pair only where a text is missing (the candidate keys are read)
        kept = {key for key, text in zip(keys, texts) if text is not None}
        keys = [r.key for r in records if r.key not in kept]
        ahead.update(zip([(MINHASH, key) for key in keys], store.get_many(MINHASH, keys)))

    # bounded caches: the working set of a settle does not grow with the store
    minhash_of = lru_cache(maxsize=_CACHED)(partial(read, MINHASH))

    @lru_cache(maxsize=_CACHED)
    def text_of(scope: str, content_hash: str | None, key: str) -> str | None:
        # a page whose bytes were seen before skipped extraction: its text is kept under a
        # copy, and which copy came first depends on the order
        for k in copies.get((scope, content_hash), (key,)):
            raw = read(TEXT, k)
            if raw is not None:
                return unpack_text(raw)
        return None

    @lru_cache(maxsize=_CACHED)
    def shingles_of(scope: str, content_hash: str | None, key: str) -> Any:
        text = text_of(scope, content_hash, key)
        return None if text is None else shingle_set(text)

    def text_key(record: UrlRecord) -> tuple[str, str | None, str]:
        # copies of one text share their cache entries
        text = (record.scope, record.content_hash)
        return (*text, "" if text in copies else record.key)

    def fingerprint(record: UrlRecord, signature: bool) -> Fingerprint:
        return Fingerprint(
            content_hash=record.content_hash or "",
            simhash=record.simhash or 0,
            minhash=(minhash_of(record.key) or b"") if signature else b"",
            tokens=record.tokens or 0,
            length=record.text_length or 0,
        )

    def near(a: UrlRecord, b: UrlRecord) -> tuple[bool, int | None, float | None]:
        texts = exact = None
        # decided on the two texts (and their languages) when both are kept, as the crawl decides
        if min(a.tokens or 0, b.tokens or 0) >= min_tokens:
            ka, kb = text_key(a), text_key(b)
            sa, sb = shingles_of(*ka), shingles_of(*kb)
            ta, tb = (text_of(*ka), text_of(*kb)) if sa is not None and sb is not None else (None, None)
            if sa is not None and sb is not None and ta is not None and tb is not None:
                texts, exact = (ta, tb), set_jaccard(sa, sb)
        # (a pair decided on its texts needs no MinHash estimate: neither is read)
        fa, fb = fingerprint(a, texts is None), fingerprint(b, texts is None)
        return near_match(
            fa, fb, max_distance=max_distance, min_jaccard=min_jaccard, min_tokens=min_tokens, texts=texts, exact=exact
        )

    params = {"max_distance": max_distance, "min_jaccard": min_jaccard, "min_tokens": min_tokens,
              "authority": list(authority)}
    old = {c.cluster_id: c for c in iter_clusters(store)}
    # each cluster's documents as their URL records place them: the keys its member set and its
    # record list (the writes of a decision go in one batch), without a read of every set
    placed: dict[str, list[str]] = defaultdict(list)
    for r in docs:
        placed[r.cluster_id].append(r.key)  # type: ignore[index]
    if incremental and get_meta(store, SETTLED_META) == params:
        # only the clusters decided since the last settle, and what they are connected to
        clean = {
            key
            for cid, c in old.items()
            if c.settled == _digest(placed[cid]) and cid == cluster_id_for(c.scope, c.representative)
            for key in placed[cid]
        }
        touched = [n for n, r in enumerate(docs) if r.key not in clean]
        reached = (
            affected(
                docs,
                touched,
                near,
                minhashes=minhashes,
                min_tokens=min_tokens,
                max_distance=max_distance,
            )
            if touched
            else set()
        )
        docs_in = [docs[n] for n in sorted(reached)]
    else:
        docs_in = docs
    keys_in = {r.key for r in docs_in}
    # whole clusters: a cluster with a member to settle again has every member among them
    every = old
    old = {cid: c for cid, c in old.items() if docs_in is docs or not keys_in.isdisjoint(placed[cid])}
    # the member sets of the clusters written again, read from the store: the writes follow them
    old_members = _members(store, list(old.values()))
    settled = settle_clusters(
        docs_in,
        near,
        minhash_of=minhash_of,
        min_tokens=min_tokens,
        authority=authority,
        max_distance=max_distance,
        read_ahead=read_ahead,
        minhashes=minhashes,
    )
    result = SettleResult(documents=len(docs), clusters=len(settled) + len(every) - len(old), affected=len(docs_in))
    # the split of the whole store: the clusters settled now, and those kept as they were
    pairs: Iterable[tuple[str | None, str | None]] = (
        (m.content_hash, s.representative.content_hash) for s in settled for m, _, _ in s.members
    )
    kept = [c for cid, c in every.items() if cid not in old]
    if kept:
        content = {r.key: r.content_hash for r in docs}
        kept_pairs = (
            (content.get(key), content.get(c.representative))
            for c in kept
            for key in placed[c.cluster_id]
            if key != c.representative
        )
        pairs = itertools.chain(pairs, kept_pairs)
    for member, rep in pairs:
        if duplicate_reason(member, rep) == "exact_content":
            result.exact_duplicate += 1
        else:
            result.near_duplicate += 1
    if docs_in:
        # until its last batch is written: a settle cut short is followed by a full one
        put_meta(store, SETTLED_META, None)
        batches = _Batches(store)
        try:
            _write(store, batches, settled, old, old_members, result, min_tokens)
        except BaseException as exc:
            batches.close(exc)
            raise
        batches.close()
    put_meta(store, SETTLED_META, params)
    # the settled documents' history, for export --changes-since (from the records read here)
    record_changes(store, itertools.chain(docs, redirects))
    return result


def _members(store: DedupStore, clusters: list[Cluster]) -> dict[str, list[str]]:
    """Each cluster's members, read ``_READ_AHEAD`` clusters a call (a round trip on Redis)."""
    found: dict[str, list[str]] = {}
    for part in _chunks(clusters):
        found.update(zip((c.cluster_id for c in part), members_of_many(store, part)))
    return found


class _Batches:
    """A settle's writes in their order, in batches of the writes of ``_BATCH`` clusters: one
    batch of a whole store's clusters is held in memory until it is applied, and on Redis it is
    one transaction, longer than a client waits for its answer."""

    def __init__(self, store: DedupStore) -> None:
        self.store = store
        self.batch: Any = None
        self._open: Any = None
        self._count = 0

    def next(self) -> StoreBatch:
        """The batch for the writes of one more cluster."""
        if self._open is None or self._count >= _BATCH:
            self.close()
            self._open = self.store.batch()
            self.batch, self._count = self._open.__enter__(), 0
        self._count += 1
        return self.batch

    def close(self, exc: BaseException | None = None) -> None:
        """Apply the batch open (or, with ``exc``, drop it)."""
        opened, self._open = self._open, None
        if opened is not None:
            opened.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)


def _write(
    store: DedupStore,
    batches: _Batches,
    settled: list[Settled],
    old: dict[str, Cluster],
    old_members: dict[str, list[str]],
    result: SettleResult,
    min_tokens: int,
) -> None:
    """What changed. Batches apply in order and a later write wins: a cluster written again
    under its id goes after its removal. A cluster new under its id goes first: its entries in
    the SimHash tables and bands are then added before this settle removes any, and the tables
    need not look for a removal to lift (a read per band). The URL records read here are read
    before any is written; they and the MinHashes are read ``_READ_AHEAD`` clusters a call."""
    new = {s.cluster_id: s for s in settled}
    #: same representative and members: its indexes stay
    kept: set[str] = set()
    #: the same representative: its entry in the SimHash tables and bands stays (the id is
    #: named after the representative, so the entry is the one it would be written again as)
    same_entry: set[str] = set()
    #: the entries to remove: cluster id -> (SimHash, representative)
    unindex: dict[str, tuple[int, str]] = {}
    changed = []
    for cid, cluster in old.items():
        s = new.get(cid)
        if s is not None and s.representative.key == cluster.representative and set(old_members[cid]) == set(s.keys()):
            kept.add(cid)
        else:
            changed.append((cid, cluster))
    for part in _chunks(changed):
        keys = [cluster.representative for _, cluster in part]
        signature = _signatures(store, keys)
        reps = store.get_many(URL, keys)
        for (cid, cluster), raw in zip(part, reps):
            rep = None if raw is None else UrlRecord.from_json(raw, cluster.representative)
            if rep is not None and rep.cluster_id == cid and _is_indexable(rep, min_tokens, signature[rep.key]):
                s = new.get(cid)
                if s is not None and s.representative.key == rep.key:
                    same_entry.add(cid)
                else:
                    unindex[cid] = (rep.simhash, rep.key)  # type: ignore[assignment]
    for part in _chunks([s for cid, s in new.items() if cid not in old]):
        _write_clusters(store, batches, part, old, kept, same_entry, result, min_tokens)
    for part in _chunks([(cid, cluster) for cid, cluster in old.items() if cid not in kept]):
        signature = _signatures(store, [unindex[cid][1] for cid, _ in part if cid in unindex])
        for cid, cluster in part:
            batch = batches.next()
            if cid in unindex:
                simhash, key = unindex[cid]
                batch.unindex_near(cluster.scope, simhash, band_hashes(signature[key]), cid)  # type: ignore[arg-type]
            for key in old_members[cid]:
                remove_member(batch, cid, key)
            batch.delete(CLUSTER, cid)
    for part in _chunks([s for cid, s in new.items() if cid in old]):
        _write_clusters(store, batches, part, old, kept, same_entry, result, min_tokens)


def _chunks(items: list) -> Iterator[list]:
    for start in range(0, len(items), _READ_AHEAD):
        yield items[start : start + _READ_AHEAD]


def _signatures(store: DedupStore, keys: list[str]) -> dict[str, bytes | None]:
    """The MinHashes of ``keys``, read in one call."""
    return dict(zip(keys, store.get_many(MINHASH, keys)))


def _write_clusters(
    store: DedupStore,
    batches: _Batches,
    part: list[Settled],
    old: dict[str, Cluster],
    kept: set[str],
    same_entry: set[str],
    result: SettleResult,
    min_tokens: int,
) -> None:
    """:func:`_write_cluster` each of ``part``, the MinHashes of those indexed read in one call."""
    signature = _signatures(store, [s.representative.key for s in part if s.cluster_id not in kept])
    for s in part:
        _write_cluster(batches.next(), s, old, kept, same_entry, result, signature.get(s.representative.key), min_tokens)


def _write_cluster(
    batch: StoreBatch,
    s: Settled,
    old: dict[str, Cluster],
    kept: set[str],
    same_entry: set[str],
    result: SettleResult,
    signature: bytes | None,
    min_tokens: int,
) -> None:
    """The writes of one settled cluster (``kept``: its indexes stay; ``same_entry``: its
    entry in the SimHash tables and bands stays; ``signature``: its representative's MinHash,
    read when it is not ``kept``)."""
    cid, rep = s.cluster_id, s.representative
    provisional = {}
    for record in (rep, *(m for m, _, _ in s.members)):
        before = old.get(record.cluster_id) if record.cluster_id else None
        provisional[record.key] = before.representative if before is not None else None
    result.revised += sum(1 for key, was in provisional.items() if was != rep.key)
    cluster = Cluster(cid, rep.key, rep.url, 0, 0, scope=rep.scope, size=1 + len(s.members))
    cluster.represent(rep)
    cluster.settled = _digest(s.keys())
    cluster.max_distance = max((gap or 0 for _, gap, _ in s.members), default=0)
    if cid in kept:
        if cluster != old[cid]:  # (dataclass equality: every field)
            put_cluster(batch, cluster)  # (most often: its first settled digest)
    else:
        result.rewritten += 1
        put_cluster(batch, cluster)
        for member, _, _ in s.members:
            add_member(batch, cid, member.key)
        if cid not in same_entry and _is_indexable(rep, min_tokens, signature):
            # _is_indexable checked that the SimHash and the MinHash are there
            batch.index_near(rep.scope, rep.simhash, band_hashes(signature), cid)  # type: ignore[arg-type]
        # (a cluster kept as it was has its exact entries: every member's decision wrote them)
        for content in {rep.content_hash, *(m.content_hash for m, _, _ in s.members)}:
            if content is not None:
                index_exact(batch, rep.scope, content, cid)
    result.records += _place(batch, rep, cid, None, None, None)
    keys = set(s.keys())
    for member, gap, jaccard in s.members:
        # an alias that joined its canonical target keeps it as what it duplicates
        target = member.duplicate_of if _follows_canonical(member) and member.duplicate_of in keys else rep.key
        result.records += _place(batch, member, cid, rep, gap, jaccard, target)


def _place(
    batch: StoreBatch,
    record: UrlRecord,
    cid: str,
    rep: UrlRecord | None,
    gap: int | None,
    jaccard: float | None,
    duplicate_of: str | None = None,
) -> bool:
    """Write ``record`` where settling put it (only when that moved it); True when written.

    A lifecycle status (``unchanged``, ``updated``) stays: it says what the last fetch found,
    which settling does not change."""
    before = (record.cluster_id, record.status, record.reason, record.duplicate_of, record.distance, record.jaccard)
    record.cluster_id = cid
    if rep is None:
        record.clear_match()
        if record.status in ("exact_duplicate", "near_duplicate"):
            record.status = "new"
    else:
        same = duplicate_reason(record.content_hash, rep.content_hash)
        record.reason = "rel_canonical" if record.canonical_alias else same
        if record.status in ("new", "exact_duplicate", "near_duplicate"):
            record.status = duplicate_status(same)
        record.duplicate_of, record.distance, record.jaccard = duplicate_of, gap, jaccard
    if before == (record.cluster_id, record.status, record.reason, record.duplicate_of, record.distance, record.jaccard):
        return False
    batch.put_url(record)
    return True
