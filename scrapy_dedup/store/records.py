"""The store's records as the decisions and reports read and write them: plain functions over a
store's primitives (``get``, ``scan``, ``set_members``, ``put_if_absent``) and a batch's
(``put``, ``delete``, ``add_to_set``, ``remove_from_set``), written once for every backend.

A backend makes them fast by making its primitives fast (the Redis store answers ``get`` from
what a decision read ahead), so none of them is a method a backend implements.

>>> from scrapy_dedup.store.memory import MemoryStore
>>> with MemoryStore("doc", {}) as store:
...     claim_exact(store, "site", "c0ffee", "k1"), claim_exact(store, "site", "c0ffee", "k2")
(None, 'k1')
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scrapy_dedup.core.records import Cluster, UrlRecord, pack_text, stored_json, unpack_text
from scrapy_dedup.store.base import (
    ALIASES,
    CLUSTER,
    EMITTED,
    EXACT,
    FRONTIER,
    MEMBERS,
    META,
    MINHASH,
    PENDING,
    RAW,
    TEXT,
    URL,
    VARIANT,
    exact_key,
)

if TYPE_CHECKING:
    from scrapy_dedup.store.base import DedupStore, OweOffer, StoreBatch


# -- URL records ------------------------------------------------------------
def get_url(store: DedupStore, key: str) -> UrlRecord | None:
    raw = store.get(URL, key)
    return UrlRecord.from_json(raw, key) if raw is not None else None


def get_urls(store: DedupStore, keys: Iterable[str]) -> list[UrlRecord]:
    """The URL records of ``keys`` the store has, in their order (one read of them all)."""
    keys = list(keys)
    return [UrlRecord.from_json(raw, key) for key, raw in zip(keys, store.get_many(URL, keys)) if raw is not None]


def iter_urls(store: DedupStore) -> Iterator[UrlRecord]:
    for key, raw in store.scan(URL):
        yield UrlRecord.from_json(raw, key)


def set_members(store: DedupStore, name: str, owner: str) -> list[tuple[str, bytes]]:
    """(member, value) of the owned set ``name`` of ``owner``, in no particular order."""
    return store.set_members_many(name, [owner])[0]


def get_variant(store: DedupStore, url: str) -> dict[str, Any] | None:
    raw = store.get(VARIANT, url)
    return stored_json(raw) if raw is not None else None


def iter_variants(store: DedupStore) -> Iterator[tuple[str, dict[str, Any]]]:
    """(url, {"key", "first_seen", "last_seen", "count"}) for every variant."""
    for url, raw in store.scan(VARIANT):
        yield url, stored_json(raw)


def iter_aliases_of(store: DedupStore, key: str) -> Iterator[tuple[str, str]]:
    """(url, reason) of every redirect and URL variant that points to ``key``."""
    for url, reason in set_members(store, ALIASES, key):
        yield url, reason.decode()


# -- requests still owed, items emitted ---------------------------------------
def has_pending(store: DedupStore, pending_id: str) -> bool:
    return store.get(PENDING, pending_id) is not None


def pending_held_elsewhere(store: DedupStore) -> int:
    """Owed requests another process holds (alive, or dead and not recovered yet): those owed
    that this process does not hold. An embedded store is held by one process: none."""
    if not store.shared:
        return 0
    return max(0, store.count(PENDING) - len(store.held_pending()))


def pending_count(store: DedupStore) -> int:
    """Requests still owed: ``store.count(PENDING)``."""
    return store.count(PENDING)


def frontier_size(store: DedupStore) -> int:
    """URL keys ever scheduled: ``store.count(FRONTIER)``."""
    return store.count(FRONTIER)


def frontier_mark(
    store: DedupStore, key: str, run: int, url: str, owe: OweOffer | None = None
) -> tuple[int, str] | None:
    """Mark one key scheduled in ``run``, owing ``owe`` with it when it is new: what
    :meth:`~DedupStore.frontier_mark_many` answers for the one entry (key, url, owe)."""
    return store.frontier_mark_many(run, [(key, url, owe)])[0]


def maybe_elsewhere(store: DedupStore, pending_ids: Iterable[str]) -> set[str]:
    """Of ``pending_ids``, owed requests this process holds, those another process may hold a
    moment later: a queue several processes share (scrapy-redis) hands a request to whichever
    pops it, which holds it only then (:meth:`~DedupStore.hold_pending`). Until it does, the
    request looks held here although it is on its way elsewhere. A shared store cannot tell
    which: any of them. An embedded store has one process: none."""
    return set(pending_ids) if store.shared else set()


def scannable(store: DedupStore, table: str) -> bool:
    """Whether ``store.scan(table)`` lists the table (see :attr:`~DedupStore.unscannable`)."""
    return table not in store.unscannable


#: the settings of the last settle (an incremental settle needs the same ones); None: the next
#: settle decides every pair again
SETTLED_META = "settled"


def get_meta(store: DedupStore, name: str) -> Any:
    """The JSON value kept under ``name`` in the :data:`META` table, or None."""
    raw = store.get(META, name)
    return json.loads(raw) if raw is not None else None


def put_meta(store: DedupStore, name: str, value: Any, if_absent: bool = False) -> Any:
    """Keep a JSON value, e.g. the URL rules a crawl keyed its URLs with.

    ``if_absent``: keep it only unless ``name`` holds one, and return the value already there,
    or None (atomic). Without it, None."""
    raw = json.dumps(value, sort_keys=True).encode()
    if if_absent:
        previous = store.put_if_absent(META, name, raw)
        return json.loads(previous) if previous is not None else None
    with store.batch() as batch:
        batch.put(META, name, raw)
    return None


def put_meta_if_absent(store: DedupStore, name: str, value: Any) -> Any:
    """Keep the JSON ``value`` unless ``name`` holds one; return the value already there, or None (atomic)."""
    return put_meta(store, name, value, if_absent=True)


def get_emitted(store: DedupStore, key: str) -> str | None:
    """The content hash last emitted for ``key`` (a resumed crawl re-emits what was cut off)."""
    raw = store.get(EMITTED, key)
    return raw.decode() if raw is not None else None


# -- content index ------------------------------------------------------------
def find_exact(store: DedupStore, scope: str, content_hash: str) -> str | None:
    raw = store.get(EXACT, exact_key(scope, content_hash))
    return raw.decode() if raw is not None else None


def claim_exact(store: DedupStore, scope: str, content_hash: str, cluster_id: str) -> str | None:
    """Claim ``content_hash`` for ``cluster_id`` unless a cluster holds it; return that one (atomic)."""
    raw = store.put_if_absent(EXACT, exact_key(scope, content_hash), cluster_id.encode())
    return raw.decode() if raw is not None else None


def raw_index_prefix(extraction: Mapping[str, object]) -> str:
    """What the raw index's keys begin with under ``extraction`` (``EXTRACT_PARAMS``, with the
    crawl's non-default extraction ``options``): the project's extraction version, trafilatura's
    and the options. A body's entry is this then its ``raw_hash``, so a body seen before skips
    extraction only when the text its entry points to came from the running extraction."""
    options = extraction.get("options")
    return f"x{extraction.get('version')}-{extraction.get('trafilatura')}{f'-{options}' if options else ''}:"


def find_raw(store: DedupStore, raw_hash: str) -> str | None:
    raw = store.get(RAW, raw_hash)
    return raw.decode() if raw is not None else None


def get_minhash(store: DedupStore, key: str) -> bytes | None:
    return store.get(MINHASH, key)


def get_text(store: DedupStore, key: str) -> str | None:
    """The text kept for ``key`` (``DEDUP_KEEP_TEXT``), or None."""
    raw = store.get(TEXT, key)
    return unpack_text(raw) if raw is not None else None


def simhash_candidates(
    store: DedupStore, scope: str, simhash: int, max_distance: int | None = None
) -> Iterator[tuple[int, str]]:
    """(stored simhash, cluster id) sharing at least one 16-bit block with ``simhash`` (within
    ``max_distance``, if given): :meth:`~DedupStore.near_candidates` without bands."""
    return iter(store.near_candidates(scope, simhash, (), max_distance).simhash)


def band_candidates(store: DedupStore, scope: str, bands: Iterable[int]) -> set[str]:
    """Cluster ids that collide with ``bands`` in at least one LSH band:
    :meth:`~DedupStore.near_candidates` without a SimHash."""
    return store.near_candidates(scope, None, bands).bands


# -- clusters -----------------------------------------------------------------
def get_cluster(store: DedupStore, cluster_id: str) -> Cluster | None:
    raw = store.get(CLUSTER, cluster_id)
    return Cluster.from_json(raw, cluster_id) if raw is not None else None


def members_of(store: DedupStore, cluster: Cluster | str) -> list[str]:
    """The URL keys of a cluster's members, sorted: its member set and its representative.
    ``cluster``: the cluster, already read, or its id.

    A cluster's record names its representative, so the set need not list it: a cluster
    of one has no set (a set costs a Redis key), and a representative that is replaced
    enters the set then.
    """
    if isinstance(cluster, str):
        found = get_cluster(store, cluster)
        if found is None:  # a cluster gone: what its set still lists
            return sorted(key for key, _ in set_members(store, MEMBERS, cluster))
        cluster = found
    members = {key for key, _ in set_members(store, MEMBERS, cluster.cluster_id)}
    members.add(cluster.representative)
    return sorted(members)


def members_of_many(store: DedupStore, clusters: Sequence[Cluster]) -> list[list[str]]:
    """:func:`members_of` each of ``clusters`` (already read), their sets read in one call."""
    sets = store.set_members_many(MEMBERS, [c.cluster_id for c in clusters])
    return [sorted({c.representative, *(key for key, _ in found)}) for c, found in zip(clusters, sets)]


def iter_clusters(store: DedupStore) -> Iterator[Cluster]:
    for cluster_id, raw in store.scan(CLUSTER):
        yield Cluster.from_json(raw, cluster_id)



# -- writes on a batch --------------------------------------------------------
def put_alias(batch: StoreBatch, target_key: str, url: str, reason: str) -> None:
    """Index ``url`` under the key it points to (redirects, URL variants) for lookups."""
    batch.add_to_set(ALIASES, target_key, url, reason.encode())


def put_cluster(batch: StoreBatch, cluster: Cluster) -> None:
    batch.put(CLUSTER, cluster.cluster_id, cluster.to_json())


def add_member(batch: StoreBatch, cluster_id: str, key: str) -> None:
    batch.add_to_set(MEMBERS, cluster_id, key)


def remove_member(batch: StoreBatch, cluster_id: str, key: str) -> None:
    batch.remove_from_set(MEMBERS, cluster_id, key)


def index_exact(batch: StoreBatch, scope: str, content_hash: str, cluster_id: str) -> None:
    batch.put(EXACT, exact_key(scope, content_hash), cluster_id.encode())


def unindex_exact(batch: StoreBatch, scope: str, content_hash: str) -> None:
    batch.delete(EXACT, exact_key(scope, content_hash))


def index_raw(batch: StoreBatch, raw_hash: str, key: str) -> None:
    batch.put(RAW, raw_hash, key.encode())


def put_minhash(batch: StoreBatch, key: str, minhash: bytes) -> None:
    batch.put(MINHASH, key, minhash)


def put_text(batch: StoreBatch, key: str, text: str | None, packed: bytes | None = None) -> None:
    """Keep a document's text (for diffs in reports); replaces the previous one.
    ``packed``: the text as :func:`~scrapy_dedup.core.records.pack_text` gives it, when
    an extraction worker packed it already (``text`` is then not read)."""
    if packed is None:
        assert text is not None, "put_text is given the text or its packed form"
        packed = pack_text(text)
    batch.put(TEXT, key, packed)


def put_pending(batch: StoreBatch, pending_id: str, request: bytes) -> None:
    """Owe a request: it passed the frontier and its outcome is not durable yet."""
    batch.put(PENDING, pending_id, request)


def settle_pending(batch: StoreBatch, pending_id: str) -> None:
    """The request's outcome is recorded: it is owed no more."""
    batch.delete(PENDING, pending_id)


def put_emitted(batch: StoreBatch, key: str, content_hash: str) -> None:
    """An item with this content left the pipelines for ``key``."""
    batch.put(EMITTED, key, content_hash.encode())
