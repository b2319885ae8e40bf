"""The store interface: what the decisions keep, and the primitives a backend implements.

Every backend keeps the same things: the frontier (URL keys scheduled, per
crawl run), URL records, URL variants and aliases, and the content index
(exact hashes, SimHash permutation tables, MinHash LSH bands, clusters).  The
dedup logic (:mod:`scrapy_dedup.decide`) talks to :class:`DedupStore` only;
reports read through it too.

Two layers, so that a second backend copies no rule:

- :class:`DedupStore` and :class:`StoreBatch` are written once, here: records
  encoded as the decisions read them, the parameter check at open, run
  numbers, variant counting and the alias bookkeeping that goes with it;
- a backend implements the primitives below them (marked *primitive*): named
  record tables of bytes (``get``/``put``/``delete``/``scan``), owned sets
  (``add_to_set``/``set_members_many``: a cluster's members, a key's aliases),
  a counter, and the near-duplicate index, whose layout is its own. Metadata is the
  :data:`META` table, of JSON values (:func:`~scrapy_dedup.store.records.get_meta`).

Atomic calls.  A shared backend (several crawl processes on one store) must
make these atomic, e.g. as server-side functions; an embedded backend owned
by one process gets that for free:

- ``frontier_mark_many``: check-and-mark of each key, returns the previous state of the key;
  with an offer it also owes the key's request when the key is new (one call where the
  backend can, two otherwise), for many keys in one go (each mark atomic by itself);
- ``put_if_absent``: insert-if-absent, returns what was there (claiming an
  exact content hash for a cluster, recording the store's parameters);
- ``increment_meta``: a counter (the run number);
- ``batch()``: the one unit of work. Every write of a decision or of a page is
  applied, or after a crash none is (a shared backend may let readers see part of a
  batch while it is applied). A batch does not read its own writes; reads go straight
  to the store;
- ``hold_document``: while a decision holds it, no other process decides the
  same URL key in between its reads and its writes (a shared backend never waits
  for it: it raises :class:`DecisionBusy`, and the crawl tries again);
- ``claim_pending``: what dead processes held, recovered: their owed requests
  handed to this one (a shared backend tags all a process holds with its id, and
  recovers it all in that one call once the process's heartbeat is gone);
  ``hold_pending``: a request owed, now held by the process that fetches it.

Everything else is a plain read or a last-writer-wins write.  A near-duplicate
decision is one too: it reads the candidates, decides, and writes.  Two processes
deciding near duplicates at the same moment may both keep one; settling
(:mod:`scrapy_dedup.decide.settle`) merges them, so the settled corpus does not
depend on that race.  Read-then-write
sequences outside those calls (a URL record updated after a fetch) may lose an
update under concurrency; they carry reporting detail, not a decision.

Writes that may wait.  ``batch(later=True)`` holds what the crawl recovers when it is
lost (a fetch's record, a settle, the variants a page's links counted): a backend with
round trips sends it with this process's next call (or ``flush()``) instead of a round
trip of its own, in order, applied with that call whole or not at all, and this process
reads it at once; an embedded backend writes it at once.  There is no other deferred write: a batch is the unit the store applies.
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import xxhash

from scrapy_dedup._moved import MovedMethod
from scrapy_dedup.core.bands import BANDS
from scrapy_dedup.core.records import UrlRecord

#: Version of the on-disk layout (keys and values).  A change is a migration.
#: 3: the MinHash LSH bands are packed (format 2 kept one key per band per representative).
#: 4: MinHash signatures of one-byte slots (fingerprint version 2; formats 2 and 3 kept 4 bytes).
#: 5: texts and fingerprints of pages from extraction version 2 (EXTRACT_PARAMS: the fast mode's
#:    text cut short is replaced by the full mode's). The keys are those of format 4: a migration
#:    keeps every record (past decisions stand); a page fetched again whose text changed is
#:    decided again as updated.
STORE_FORMAT = 5

#: Record tables (``get``/``put``/``delete``/``scan``) and what they hold.
URL = "url"  # url key -> UrlRecord (JSON)
VARIANT = "variant"  # URL dropped before fetch -> {"key", "first_seen", "last_seen", "count", "reason"}
CLUSTER = "cluster"  # cluster id -> Cluster (JSON)
EXACT = "exact"  # <scope id hex>:<content hash> -> cluster id
RAW = "raw"  # raw body hash -> url key (a byte-identical body skips extraction)
MINHASH = "minhash"  # url key -> MinHash signature
TEXT = "text"  # url key -> document text, zlib-compressed (DEDUP_KEEP_TEXT)
PENDING = "pending"  # pending id (a url key) -> request still owed: pickled request dict
EMITTED = "emitted"  # url key -> content hash of the last item emitted for it
# The chunk layer (DEDUP_CHUNKS), derived from the documents' texts and rebuilt at the end of a crawl:
CHUNKS = "chunks"  # url key of a representative -> its chunks and paragraph keys (JSON)
CHUNK_EXACT = "chunk_exact"  # <scope id hex>:<chunk content hash> -> "<url key>\0<chunk id>" of its first source
CHUNK_PRINT = "chunk_print"  # "<url key>\0<chunk id>" -> near fingerprint of a chunk of DEDUP_MIN_TOKENS or more
CHUNK_BANDS = "chunk_bands"  # "<scope id hex>:<band>:<band hash hex>" -> lines "<order>\t<url key>\0<chunk id>" of its sources
BOILERPLATE = "boilerplate"  # "<group>\0<paragraph key>" -> {pages, text, example_url}: lines on 2+ pages
BOILERPLATE_GROUP = "boilerplate_group"  # group -> {pages, threshold, keys}: what counts as boilerplate there
CHANGES = "changes"  # document id -> its settled history (decide.changes): [born, changed, digest, rep key, gone, into]
META = "meta"  # name -> JSON value (records.get_meta/put_meta: the parameters, the URL rules, ...); counters too
TABLES = (
    URL, VARIANT, CLUSTER, EXACT, RAW, MINHASH, TEXT, PENDING, EMITTED,
    CHUNKS, CHUNK_EXACT, CHUNK_PRINT, CHUNK_BANDS, BOILERPLATE, BOILERPLATE_GROUP, CHANGES, META,
)  # fmt: skip
#: The frontier: url key -> run it was last scheduled in, first URL. Written by
#: ``frontier_mark_many`` only, and counted (``count``), not scanned.
FRONTIER = "frontier"


class NearCandidates:
    """The near-duplicate candidates of a fingerprint (:meth:`DedupStore.near_candidates`).

    A backend whose reads are local may give ``bands`` as a function, called when they are
    first read: a SimHash candidate often decides a page before its bands are needed."""

    __slots__ = ("_bands", "simhash")

    def __init__(self, simhash: list[tuple[int, str]], bands: set[str] | Callable[[], set[str]]) -> None:
        #: (stored simhash, cluster id) of the entries sharing at least one 16-bit block with the
        #: SimHash (within the Hamming distance asked for, if any)
        self.simhash = simhash
        self._bands = bands

    @property
    def bands(self) -> set[str]:
        """Ids of the clusters that collide with the band hashes in at least one LSH band."""
        if callable(self._bands):
            self._bands = self._bands()
        return self._bands


@dataclass
class OweOffer:
    """A request to owe if its URL key turns out new (:meth:`DedupStore.frontier_mark_many`):
    the id it is owed under and its serialized form; ``owed`` says whether it was."""

    pending_id: str
    blob: bytes
    owed: bool = False
    #: owed, and the store found no URL record of the key either (told by a shared store only)
    recordless: bool = False


#: Owned sets (``add_to_set``/``set_members_many``): owner -> {member: value}.
ALIASES = "aliases"  # target url key -> {URL of a redirect or variant: reason}
MEMBERS = "members"  # cluster id -> {url key: b""}
SETS = (ALIASES, MEMBERS)


#: the oldest store format ``scrapy dedup migrate`` brings up to date (0.1.0 wrote format 2)
OLDEST_MIGRATABLE = 2


def format_problem(path: str, stored_format: Any) -> str | None:
    """Why a store of ``stored_format`` cannot be used as it is, or None when it can."""
    if stored_format is None or stored_format == STORE_FORMAT:
        return None
    if isinstance(stored_format, int) and OLDEST_MIGRATABLE <= stored_format < STORE_FORMAT:
        return (
            f"the dedup store {path!r} has store format {stored_format}, from an earlier version; this "
            f"version uses format {STORE_FORMAT}: run `scrapy dedup migrate --store {path}` to "
            "migrate it in place (copy the directory first to keep the old one)"
        )
    return (
        f"the dedup store {path!r} has store format {stored_format!r}; this version reads format "
        f"{STORE_FORMAT} (and migrates formats {OLDEST_MIGRATABLE} to {STORE_FORMAT - 1})"
    )


class StoreError(Exception):
    """The store cannot be opened or used (locked, incompatible, corrupt)."""


class StoreLocked(StoreError):
    """Another process holds the store (embedded backends are single-process)."""


class StoreWriteError(StoreError):
    """A write did not reach the store (disk full, I/O error); what was written before stands."""


class DecisionBusy(Exception):
    """Another process holds the decision of this document (:meth:`DedupStore.hold_document`):
    nothing was read or written; decide it again a moment later."""


class IncompatibleStore(StoreError):
    """The store was written with other fingerprint or layout parameters."""


def scope_id(scope: str) -> bytes:
    """8 bytes that stand for a dedup scope in keys."""
    return xxhash.xxh64_digest(scope.encode("utf-8"))


def exact_key(scope: str, content_hash: str) -> str:
    return f"{scope_id(scope).hex()}:{content_hash}"


def band_tuple(bands: Iterable[int]) -> tuple[int, ...]:
    """The band hashes of one entry: all BANDS of them, or none (a document too short for bands)."""
    bands = tuple(bands)
    if bands and len(bands) != BANDS:
        raise ValueError(f"expected {BANDS} band hashes (or none), got {len(bands)}")
    return bands


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class StoreBatch(abc.ABC):
    """One unit of work: the writes of a decision or of a page, applied together when the
    ``with`` block of :meth:`DedupStore.batch` exits."""

    #: the store the batch writes to (what a write that goes on from a record reads)
    _store: DedupStore

    # -- primitives ---------------------------------------------------------
    @abc.abstractmethod
    def put(self, table: str, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    def delete(self, table: str, key: str) -> None: ...

    @abc.abstractmethod
    def add_to_set(self, name: str, owner: str, member: str, value: bytes = b"") -> None: ...

    @abc.abstractmethod
    def remove_from_set(self, name: str, owner: str, member: str) -> None: ...

    @abc.abstractmethod
    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        """Enter a representative's fingerprints in the permutation tables and bands."""

    @abc.abstractmethod
    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None: ...

    # -- records ------------------------------------------------------------
    def put_url(self, record: UrlRecord, if_absent: bool = False) -> None:
        """``if_absent``: a record of the key already in the store is kept instead."""
        if if_absent and self._store.get(URL, record.key) is not None:
            return
        self.put(URL, record.key, record.to_json())

    def count_variant(self, url: str, key: str, seen_at: float, reason: str = "seen") -> None:
        """Count ``url`` as dropped before fetch as a variant of ``key`` (and why): the count
        goes on from its record (``first_seen`` kept), and a variant that now points to another
        key is listed under that key."""
        counted: dict[str, dict[str, Any]] = self.__dict__.setdefault("_counted", {})
        if url in counted:  # a batch does not read its own writes
            previous: dict[str, Any] | None = counted[url]
        else:
            raw = self._store.get(VARIANT, url)
            previous = json.loads(raw) if raw is not None else None
        data: dict[str, Any] = dict(previous) if previous else {"key": key, "first_seen": seen_at, "count": 0}
        data.update(key=key, last_seen=seen_at, count=data.get("count", 0) + 1, reason=reason)
        counted[url] = data
        self.put(VARIANT, url, _json(data))
        if previous is None or previous.get("key") != key:
            self.add_to_set(ALIASES, key, url, b"url_variant")  # as records.put_alias


#: guards the first hold of each embedded store, which makes its lock
_HOLD_LOCKS = threading.Lock()


@contextmanager
def _one_thread_at_a_time(store: DedupStore) -> Iterator[None]:
    """An embedded store's hold: its lock (a thread may hold it again inside its own hold)."""
    lock = store.__dict__.get("_holding")
    if lock is None:
        with _HOLD_LOCKS:
            lock = store.__dict__.setdefault("_holding", threading.RLock())
    with lock:
        yield


class DedupStore(abc.ABC):
    """One store of one crawl (by default one per spider).

    ``DEDUP_STORE_BACKEND`` names the class; the crawl builds it as
    ``Backend(path, params, cache_mb=DEDUP_STORE_CACHE_MB)`` and reports open an
    existing one with ``Backend.open_existing(path)``.  A backend's constructor
    connects, then calls :meth:`_check_params`.
    """

    #: parameters recorded at creation; opening with others raises IncompatibleStore
    params: dict[str, Any]
    #: where the store is, for messages
    path: str
    #: several crawl processes share the store at once (embedded backends: one process)
    shared: bool = False
    #: the current run number (0 before the first run): set by :meth:`begin_run`, or read at opening
    run: int = 0
    #: the tables :meth:`scan` does not list (a backend may key a table by digests of its keys)
    unscannable: frozenset[str] = frozenset()
    #: ids owed when the run began, until :meth:`claim_pending` hands them over (embedded backends)
    _left_owed: list[str] = []  # noqa: RUF012 -- replaced, never mutated

    # -- primitives: life cycle ---------------------------------------------
    @classmethod
    @abc.abstractmethod
    def open_existing(cls, path: str) -> DedupStore:
        """Open a store for reading, with the parameters it was written with."""

    @classmethod
    def open_snapshot(cls, path: str, **options: Any) -> DedupStore:
        """A consistent view of the store for reading, while another process holds it (or it
        cannot be opened in place); closing it lets the view go.  Here the store itself: a
        backend whose readers never wait for a writer (in memory, Redis) is read as it is, and
        one that cannot be read meanwhile fails as :meth:`open_existing` does."""
        return cls.open_existing(path, **options)

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def batch(self, later: bool = False) -> AbstractContextManager[StoreBatch]:
        """One unit of work: the writes made on the batch in the ``with`` block are applied
        together when it exits, all of them or, after a crash, none (atomic).

        ``later``: a store with round trips may send them with this process's next call to
        the store (or :meth:`flush`) instead of a round trip of their own; this process reads
        them at once, and writes that wait go in the order they were made, before anything
        written after them. A process that dies before they go loses them: only for writes
        whose loss the crawl recovers from (a fetch's record, a settle, the variants a page's
        links counted: the request stays owed, and is fetched again). An embedded store
        applies them at once."""

    def flush(self) -> None:  # noqa: B027 -- a no-op unless the store keeps writes for later
        """Send the writes that wait (:meth:`batch` ``later``) now."""

    # -- primitives: records ------------------------------------------------
    @abc.abstractmethod
    def get(self, table: str, key: str) -> bytes | None: ...

    def get_many(self, table: str, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` in ``table``, in their order (None where absent): one round trip
        on a store with round trips, one :meth:`get` each here."""
        return [self.get(table, key) for key in keys]

    @abc.abstractmethod
    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        """Every (key, value) of a table, in no particular order (a report sorts what it shows)."""

    def count(self, table: str) -> int:
        """How many keys ``table`` holds; :data:`FRONTIER` too (the URL keys ever scheduled).
        Here by :meth:`scan`: a backend counts its frontier its own way, and may count a table
        faster."""
        return sum(1 for _ in self.scan(table))

    @abc.abstractmethod
    def put_if_absent(self, table: str, key: str, value: bytes) -> bytes | None:
        """Store ``value`` unless ``key`` holds one; return the value already there (atomic)."""

    @abc.abstractmethod
    def set_members_many(self, name: str, owners: Sequence[str]) -> list[list[tuple[str, bytes]]]:
        """The (member, value) pairs of each owned set of ``owners``, in their order (a set's
        pairs in no particular order; an owner with no set has none): one round trip on a store
        with round trips. :func:`~scrapy_dedup.store.records.set_members` reads one set."""

    # -- primitives: counters -----------------------------------------------
    @abc.abstractmethod
    def increment_meta(self, name: str) -> int:
        """Add one to the counter ``name`` of the :data:`META` table (0 when absent) and return
        the new value (atomic)."""

    # -- primitives: frontier -----------------------------------------------
    def frontier_mark_many(
        self, run: int, entries: list[tuple[str, str, OweOffer | None]]
    ) -> list[tuple[int, str] | None]:
        """Mark each (url key, URL, offer) of ``entries`` scheduled in ``run``, in order (one
        round trip on a shared store where it can); returns what each mark answered. Each
        mark is an atomic check-and-mark
        (:func:`~scrapy_dedup.store.records.frontier_mark` marks one key).

        A mark answers None for a key never seen, else the run it was last scheduled in and
        the URL it was first scheduled with; that first URL never changes.

        An offer (None for none): when its key is new, also owe its request (as
        :func:`~scrapy_dedup.store.records.put_pending`), setting ``offer.owed``. A shared store
        does both in one atomic call where it can, so no process dies between marking a key and
        owing its request; this default marks, then owes.
        """
        answers: list[tuple[int, str] | None] = []
        for key, url, offer in entries:
            previous = self._frontier_mark(key, run, url)
            if previous is None and offer is not None:
                with self.batch() as batch:
                    batch.put(PENDING, offer.pending_id, offer.blob)  # as records.put_pending
                offer.owed = True
            answers.append(previous)
        return answers

    @abc.abstractmethod
    def _frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        """The mark of one key, without a request to owe (the primitive)."""

    # -- primitives: near-duplicate index -----------------------------------
    @abc.abstractmethod
    def near_candidates(
        self, scope: str, simhash: int | None, bands: Iterable[int], max_distance: int | None = None
    ) -> NearCandidates:
        """The candidates of a fingerprint in both near-duplicate indexes (one round trip on a
        shared store where it can): the SimHash table entries sharing at least one 16-bit block
        with ``simhash`` (none for None; with ``max_distance``, only those within that Hamming
        distance), and the clusters that collide with ``bands`` in at least one LSH band (none
        for no bands).

        A backend may keep only part of each band hash; it then also finds, rarely, a cluster
        whose band hash shares only that part (the Redis store keeps 46 of the 64 bits: two
        hashes of one bucket agree on the rest one time in 2^32). A candidate is confirmed by
        its signature whatever index found it (:func:`near_match`)."""

    # -- decisions of several processes ---------------------------------------
    def hold_document(self, key: str) -> AbstractContextManager[None]:
        """Hold the decision of the document at url key ``key`` for the ``with`` block: no other
        process decides the same key until the block has exited (atomic).

        A shared backend never waits: when another process holds it, it raises
        :class:`DecisionBusy` on entering, having read and written nothing, and the crawl tries
        again a moment later without blocking its reactor (``crawl/busy.py``).

        An embedded backend is owned by one process: its holds exclude each other across that
        process's threads (a document decided on the crawl's decision thread, a page gone on the
        reactor thread), one at a time whatever their keys; a thread waits for another's to end
        (a decision of an embedded store takes milliseconds).
        """
        return _one_thread_at_a_time(self)

    # -- opening ------------------------------------------------------------
    def _check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Record ``params`` in a new store; refuse a store recorded with others."""
        # JSON round trip so that tuples and lists compare equal
        params = json.loads(json.dumps(params, sort_keys=True))
        raw = self.put_if_absent(META, "params", json.dumps(params, sort_keys=True).encode())  # as records.put_meta
        if raw is None:
            return params
        stored = json.loads(raw)
        self._check_format(stored)
        if stored != params:
            diff = ", ".join(
                f"{k}: store has {stored.get(k)!r}, this crawl uses {params.get(k)!r}"
                for k in sorted(set(stored) | set(params))
                if stored.get(k) != params.get(k)
            )
            self.close()
            hint = "use a new DEDUP_STORE directory, or the parameters it was built with"
            old, new = stored.get("fingerprint"), params.get("fingerprint")
            if (
                not self.shared
                and {k for k in set(stored) | set(params) if stored.get(k) != params.get(k)} == {"fingerprint"}
                and isinstance(old, dict)
                and isinstance(new, dict)
                and (old.get("version", 0), old.get("tokenizer_version", 0)) < (new["version"], new["tokenizer_version"])
            ):
                hint = (  # an upgrade changed the fingerprints' definition: migrate says how
                    f"its fingerprints are an earlier version's: run `scrapy dedup migrate --store {self.path}` "
                    f"(copy the directory first to keep the old one), then `scrapy dedup settle --full "
                    f"--store {self.path}`; or {hint}"
                )
            raise IncompatibleStore(f"the dedup store {self.path!r} was built with other parameters ({diff}); {hint}")
        return stored

    def _check_format(self, stored: dict[str, Any]) -> None:
        """Refuse a store written in another layout (reading it would give wrong answers)."""
        problem = format_problem(self.path, stored.get("store_format", "none"))
        if problem is not None:
            self.close()
            raise IncompatibleStore(problem)

    # -- runs ---------------------------------------------------------------
    def begin_run(self) -> int:
        """Start a crawl run; returns its number (1 for the first run)."""
        self.run = self.increment_meta("run")
        # what the process before this one left owed: all that claim_pending hands over
        self._left_owed = [pending_id for pending_id, _ in self.scan(PENDING)]
        return self.run

    def _read_run(self) -> None:
        raw = self.get(META, "run")  # as records.get_meta
        self.run = int(json.loads(raw)) if raw is not None else 0

    # -- requests still owed (the resumable frontier) -------------------------
    def claim_pending(self) -> Iterator[tuple[str, bytes]]:
        """(id, serialized request) of every request owed that a dead process held, now held by
        this one (atomic); a shared backend recovers everything else such a process held in the
        same call. An embedded backend is held by one process: at the first call, the requests
        owed when its run began (the process before it left them), and none after: this process
        holds every request owed since, whether in flight or still to come."""
        left, self._left_owed = self._left_owed, []
        for pending_id in left:
            blob = self.get(PENDING, pending_id)
            if blob is not None:  # not closed meanwhile
                yield pending_id, blob

    def hold_pending(self, pending_id: str) -> bool:
        """This process is about to fetch the request owed under ``pending_id``: it holds it
        from now on (a shared queue hands a request one process owed to another). False when
        it is owed no more: its outcome is recorded (another process took it over from one
        that died, and fetched it), so this copy need not be fetched."""
        return True

    def held_pending(self) -> list[str]:
        """Ids of the owed requests this process holds (embedded: all of them)."""
        return [pending_id for pending_id, _ in self.scan(PENDING)]

    def writing_elsewhere(self) -> int:
        """How many other processes write this store now: a crawl settles it when it closes
        only when none does (it cannot know when they stop writing; the last one to close
        settles). An embedded backend has one process: 0."""
        return 0

    def __enter__(self) -> DedupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The typed reads (get_url, iter_clusters, ...), the counts (frontier_size, pending_count: count(table)),
# the near-duplicate candidates (simhash_candidates, band_candidates: near_candidates), the metadata
# (get_meta, put_meta: the META table), scannable (the attribute unscannable) and a batch's typed
# writes (put_cluster, put_pending, ...) were methods before 0.3.0; they are functions of
# scrapy_dedup.store.records now, and the old names call them with a DeprecationWarning.
_READS = (
    "get_url", "iter_urls", "get_variant", "iter_variants", "iter_aliases_of", "has_pending", "get_emitted",
    "find_exact", "claim_exact", "find_raw", "get_minhash", "get_text", "get_cluster", "members_of", "iter_clusters",
    "set_members",
    "pending_held_elsewhere", "maybe_elsewhere", "put_meta_if_absent", "frontier_mark", "frontier_size",
    "pending_count", "simhash_candidates", "band_candidates", "get_meta", "put_meta", "scannable",
)  # fmt: skip
_WRITES = (
    "put_alias", "put_cluster", "add_member", "remove_member", "index_exact", "unindex_exact", "index_raw",
    "put_minhash", "put_text", "put_pending", "settle_pending", "put_emitted",
)  # fmt: skip
for _name in _READS:
    setattr(DedupStore, _name, MovedMethod("DedupStore", _name, "scrapy_dedup.store.records", "store"))
for _name in _WRITES:
    setattr(StoreBatch, _name, MovedMethod("StoreBatch", _name, "scrapy_dedup.store.records", "batch"))
