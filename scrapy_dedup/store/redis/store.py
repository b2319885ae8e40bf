"""The Redis backend: one store shared by every crawl process, on a server or a cluster.

``DEDUP_STORE = "redis://[user:password@]host:port/db"`` (``rediss://`` for TLS); a cluster is
recognised from the server itself. The keys are in :mod:`~scrapy_dedup.store.redis.keys` (and,
for metadata ``P:m``, holders ``P:h``, owned sets ``P:s``, first URLs ``P:fu`` and the cluster
journal ``P:j``, below); the atomic steps are in ``functions.lua``.

Liveness is one mechanism: every process that writes is a *holder*, an id with a heartbeat, and
whatever it holds is tagged with that id. Once its deadline has passed it is dead for good, and
:meth:`RedisStore.claim_pending` recovers everything it had. A batch is one MULTI/EXEC on one
server; on a cluster it is journalled in one slot, applied slot by slot, then struck from the
journal (a dead holder's batches are applied whole when it is recovered). A batch made with
``later=True`` waits for this process's next call, which carries it in its own round trip. The
manual's "The Redis store" says more.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import redis
import xxhash
from redis.cluster import RedisCluster

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.store.base import (
    ALIASES,
    FRONTIER,
    META,
    PENDING,
    STORE_FORMAT,
    URL,
    VARIANT,
    DecisionBusy,
    DedupStore,
    IncompatibleStore,
    NearCandidates,
    OweOffer,
    StoreBatch,
    StoreError,
    StoreWriteError,
    band_tuple,
)
from scrapy_dedup.store.records import get_meta, get_url
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import (
    _STORE_FAILURES,
    RetryPolicy,
    StoreConnectionLost,
    StoreFull,
    StoreFunctions,
    StoreLost,
    connect,
    is_cluster,
    redact,
    refused_as_full,
)
from scrapy_dedup.store.redis.wire import FunctionsMissing, replies_lost

logger = logging.getLogger(__name__)

LAYOUT = rk.LAYOUT
#: a holder whose heartbeat stopped this long is dead (``DEDUP_REDIS_LEASE``): it beats every third
LEASE_MS = 30_000
#: variant writes that wait for a round trip, at most
WAITING_MAX = 512
#: a scan reads a table in this many round trips (1,024 shards: 16 a round trip)
SCAN_ROUNDS = 64


def _encode_commands(commands: list[tuple]) -> bytes:
    """A cluster batch as its journal keeps it: read back by the store only, as owed requests are."""
    return pickle.dumps(commands, protocol=5)


class RedisBatch(StoreBatch):
    """Writes recorded as commands and sent together when the block exits."""

    _store: RedisStore

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self.commands: list[tuple] = []

    def put(self, table: str, key: str, value: bytes) -> None:
        s = self._store
        if table == PENDING:
            # owed, and held by this process (tagged with its holder id)
            self.commands.append(("HSET", rk.pending_key(s.prefix, key), key, s._tag(bytes(value))))
            s._hold(key)
            return
        if table == URL:
            self.commands += s._url_put(key, bytes(value))
            return
        self.commands.append(rk.table_layout(table).put_command(*s._slot(table, key), bytes(value)))

    def delete(self, table: str, key: str) -> None:
        s = self._store
        if table == PENDING:
            # settled: whoever holds it now, its outcome is recorded
            self.commands.append(("HDEL", rk.pending_key(s.prefix, key), key))
            with s._held_lock:
                s._held.discard(key)
            return
        self.commands.append(rk.table_layout(table).delete_command(*s._slot(table, key)))

    def put_url(self, record: UrlRecord, if_absent: bool = False) -> None:
        self.commands += self._store._url_put(record.key, record.to_json(), if_absent)

    def count_variant(self, url: str, key: str, seen_at: float, reason: str = "seen") -> None:
        # One server-side step per count (no read, no lost update), and the alias written again
        s = self._store
        self.add_to_set(ALIASES, key, url, b"url_variant")
        self.commands.append(
            ("FCALL", "sdd_variant_count", 1, s._slot(VARIANT, url)[0],
             url, json.dumps(key), json.dumps(seen_at), json.dumps(reason))
        )  # fmt: skip

    def add_to_set(self, name: str, owner: str, member: str, value: bytes = b"") -> None:
        self.commands.append(("HSET", self._store._set_key(name, owner), member, bytes(value)))

    def remove_from_set(self, name: str, owner: str, member: str) -> None:
        self.commands.append(("HDEL", self._store._set_key(name, owner), member))

    def index_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        self._near("sdd_near_put", "sdd_bands_add", scope, simhash, bands, cluster_id)

    def unindex_near(self, scope: str, simhash: int, bands: Iterable[int], cluster_id: str) -> None:
        self._near("sdd_near_remove", "sdd_bands_remove", scope, simhash, bands, cluster_id)

    def _near(self, table_fn, band_fn, scope, simhash, bands, cluster_id) -> None:
        s = self._store
        bands = band_tuple(bands)
        token = bytes.fromhex(cluster_id)
        fp = rk.simhash_bytes(simhash)
        for key in rk.near_buckets(s.prefix, scope, simhash):
            self.commands.append(("FCALL", table_fn, 1, key, fp, token))
        for key, entries in rk.band_calls(s.prefix, scope, bands):
            # one call per band group: its buckets are fields of one hash
            self.commands.append(("FCALL", band_fn, 1, key, token, entries))


class RedisStore(DedupStore):
    """A store on a Redis server or cluster, shared by every process that opens it."""

    shared = True
    #: tables keyed by digests of their keys (see keys.py)
    unscannable = frozenset(table for table, layout in rk.TABLES.items() if layout.key is None)

    def __init__(
        self,
        path: str,
        params: dict[str, Any],
        *,
        cache_mb: int = 16,
        prefix: str = "dedup:crawl",
        retry: RetryPolicy = RetryPolicy(),
        lease_ms: int = LEASE_MS,
    ) -> None:
        with self._opening():
            self._connect(path, prefix, retry, lease_ms)
            self.params = self._check_params({**params, "store_format": STORE_FORMAT, "simhash_layout": LAYOUT})
            self._read_run()

    @classmethod
    def open_existing(cls, path: str, prefix: str = "dedup:crawl") -> RedisStore:
        store = cls.__new__(cls)
        with store._opening():
            store._connect(path, prefix, RetryPolicy(), LEASE_MS)
            store.params = get_meta(store, "params")
        if store.params is None:
            store.close()
            raise StoreError(f"no dedup store at {store.path!r} under the key prefix {prefix!r}")
        store._check_format(store.params)
        if store.params.get("simhash_layout") != LAYOUT:
            store.close()
            raise StoreError(
                f"the dedup store {store.path!r} has store format {store.params.get('store_format')!r}; "
                f"this version reads format {STORE_FORMAT} ({LAYOUT} layout)"
            )
        store._read_run()
        return store

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """A server whose ACL does not let this user at the store's keys or functions fails the
        opening in one line, naming the key prefix."""
        try:
            yield
        except redis.exceptions.NoPermissionError as exc:
            self.client.close()  # set: connect() turns its own refusals into StoreError
            raise StoreError(
                f"the Redis store at {self.path} does not let this user at the keys under the prefix "
                f"{self.prefix!r} or at the store's functions (see the user's ACL): {exc}"
            ) from None

    def _check_format(self, stored: dict[str, Any]) -> None:
        """Refuse a store of another format: ``scrapy dedup migrate`` converts LevelDB stores
        only, so a Redis store of an earlier format is crawled again under a new prefix."""
        if stored.get("store_format") != STORE_FORMAT:
            self.close()
            raise IncompatibleStore(
                f"the dedup store {self.path!r} under the key prefix {self.prefix!r} has store format "
                f"{stored.get('store_format')!r}; this version reads format {STORE_FORMAT} and does not "
                "migrate a Redis store: crawl into a new key prefix (DEDUP_REDIS_PREFIX)"
            )

    def _connect(self, path: str, prefix: str, retry: RetryPolicy, lease_ms: int) -> None:
        self.url, self.path, self.prefix = path, redact(path), rk.check_prefix(prefix)  # path: what messages show
        self.retry, self.lease_ms = retry, lease_ms
        self.client = connect(self.url, retry=retry)
        self.fn = StoreFunctions(self.client, self.prefix)
        #: this process's holder id: entered in the holders' hash at its first use (_holder)
        self._id: str | None = None
        self._holder_lock = threading.Lock()
        #: until when (time.monotonic()) this holder's heartbeat surely runs; 0: not entered
        self._alive_until = 0.0
        #: closed: what it holds is left to be recovered, and it enters as a holder no more
        self._closed = False
        #: the run this process crawls in (begin_run); 0: none
        self._joined = 0
        self._heartbeat: threading.Thread | None = None
        self._stopping = threading.Event()
        self._batch_ids = itertools.count(1)
        self._holds = itertools.count(1)
        #: ids of the owed requests this process holds
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        #: the writes of batches applied later (``batch(later=True)``), in order: every call
        #: sends them first, or carries them in its own round trip (see _CARRIERS)
        self._waiting: list[tuple] = []
        #: held by each call for its round trips, whatever its thread: one that sends the writes
        #: that wait is answered before another thread's call goes, which so reads them
        self._calling = threading.RLock()
        #: the refusal that stopped this process's writes (a full server): a write after it may
        #: depend on one refused (a request settled whose page's records were not), so none goes
        self._refused: StoreWriteError | None = None
        #: the lost connection that stopped the crawl once the retries ran out: every later call
        #: fails with it at once (the crawl is closing; waiting through the retries again for
        #: each page in flight held its close for minutes)
        self._lost: StoreConnectionLost | None = None

    def close(self) -> None:
        waiting = len(self._waiting)  # counted first: sending takes them off the list
        try:
            if waiting:
                self.flush()
        except Exception:  # noqa: BLE001 -- the connection is gone: the requests stay owed
            logger.warning("could not send %d writes that waited to %s", waiting, self.path)
        self._closed = True
        if self._heartbeat is not None:
            self._stopping.set()
            # a heartbeat retrying a lost server is not waited for (a daemon thread, it ends)
            self._heartbeat.join(timeout=0 if self._lost else 5)
            self._heartbeat = None
            try:
                if self._lost:
                    raise self._lost
                # dead at once: what it still holds is recovered like a dead holder's
                self.client.fcall("sdd_holder_beat", 1, self._holders_key(), self._id, 0)
            except Exception:  # noqa: BLE001 -- its heartbeat has stopped: it is dead within a lease
                logger.debug("could not stop the heartbeat of %s in %s", self._id, self.path)
            self._alive_until = 0.0
        self.client.close()

    # -- holders: one id and one heartbeat per process ------------------------
    def begin_run(self) -> int:
        """Join the run of the crawl's processes alive now, or begin the next one.

        Every process of one crawl works in the same run, so a URL another process
        scheduled a moment ago is "seen", not "fetched in an earlier run".
        """
        with self._holder_lock:
            self.run, began = self._enter("next")
            self._joined = self.run
        logger.info("%s run %d of the shared store %s", "began" if began else "joined", self.run, self.path)
        return self.run

    def _holder(self) -> str:
        """This process's holder id, for what it tags: entered at its first use (its heartbeat
        starts then), and its heartbeat renewed first when it is not sure to run on."""
        if self._closed:
            # a late write after close would enter a new holder whose heartbeat nobody stops
            raise StoreWriteError(f"the Redis store at {self.path} is closed: this process writes no more")
        if not self._surely_alive():
            with self._holder_lock:
                if not self._surely_alive():
                    self._beat()
        assert self._id is not None, "a holder has its id once entered"
        return self._id

    def _tag(self, value: bytes) -> bytes:
        """``value`` tagged with this process's holder id: what a dead holder had is found by it."""
        return self._holder().encode() + b"\n" + value

    def _surely_alive(self) -> bool:
        """Whether this holder's deadline is at least a third of a lease away: then nobody can
        have recovered what it holds."""
        return time.monotonic() < self._alive_until - self.lease_ms / 3000

    def _enter(self, run: int | str) -> tuple[int, int]:
        """Enter this holder (a new id if it has none or is dead) in ``run`` (0: not crawling,
        "next": the run of the holders alive now, or the next one); returns (run, began)."""
        while True:
            if self._id is None:
                self._id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            sent = time.monotonic()
            entered, began = (int(x) for x in self.client.fcall(
                "sdd_holder_enter", 2, self._holders_key(), self._meta_key(), self._id, self.lease_ms, run))
            if entered >= 0:
                break
            self._id = None  # dead already: what it held is recovered; it goes on as a new holder
        self._alive_until = sent + self.lease_ms / 1000
        if self._heartbeat is None:
            self._stopping.clear()
            self._heartbeat = threading.Thread(target=self._beating, name="dedup-redis-heartbeat", daemon=True)
            self._heartbeat.start()
        return entered, began

    def _beat(self) -> None:
        """One heartbeat; a holder found dead (silent longer than a lease: the others recover
        what it held) goes on under a new id, in its run."""
        if self._closed:
            return  # stopped at close: dead, and recovered like any dead holder
        sent = time.monotonic()
        if self._id is not None and self.client.fcall("sdd_holder_beat", 1, self._holders_key(), self._id, self.lease_ms):
            self._alive_until = sent + self.lease_ms / 1000
            return
        if self._id is not None:
            logger.warning("this process was silent longer than DEDUP_REDIS_LEASE (%d ms): the others recover "
                           "what it held in %s, and it goes on as a new holder", self.lease_ms, self.path)
            self._id = None
            with self._held_lock:
                self._held.clear()
        self._enter(self._joined)

    def _beating(self) -> None:
        while not self._stopping.wait(self.lease_ms / 3000):
            try:
                with self._holder_lock:
                    self._beat()
            except Exception:  # noqa: BLE001 -- the crawl's own calls report a lost connection
                logger.debug("could not renew this process's heartbeat in %s", self.path)

    def _holders(self) -> tuple[int, dict[bytes, list[int]]]:
        """The server's clock (ms), and each holder's [heartbeat deadline (ms), run]: deadlines
        are the server's, so no clock of this machine is compared with them."""
        seconds, micros = self.client.time()
        holders = self._hash(self._holders_key())
        return seconds * 1000 + micros // 1000, {h: [int(x) for x in value.split()] for h, value in holders.items()}

    def claim_pending(self) -> Iterator[tuple[str, bytes]]:
        """Recover what every dead holder had, the one path for all of it: its cluster batches
        applied whole (before its requests are decided again), its decision locks dropped, and
        the requests it owed, each handed to this process by one atomic call (no two processes
        take the same one) and yielded; then the holder is forgotten."""
        now_ms, holders = self._holders()
        dead = sorted(h.decode() for h, (deadline, _) in holders.items() if deadline <= now_ms)
        if not dead:
            return
        me = self._holder()
        if is_cluster(self.client):
            journal = self._journal_key()
            # an entry's field is its writer's holder id, ':', its batch number
            for entry, commands in self._claim(journal, me, dead, lambda f: f.rpartition(b":")[0].decode() not in dead):
                self._apply_by_slot(pickle.loads(commands))
                self.client.hdel(journal, entry)
        for shard in range(rk.LOCK_SHARDS):
            for _ in self.fn.claim(rk.decision_shard(self.prefix, shard), "", dead):
                pass
        held = {pending_id.encode("utf-8", "surrogatepass") for pending_id in self._held_ids()}
        for shard in range(rk.PENDING_SHARDS):
            for field, payload in self._claim(rk.pending_shard(self.prefix, shard), me, dead, held.__contains__):
                pending_id = field.decode("utf-8", "surrogatepass")
                self._hold(pending_id)
                yield pending_id, payload
        self.client.hdel(self._holders_key(), *dead)

    def _claim(
        self, key: str, holder: str, dead: list[str], known: Callable[[bytes], bool]
    ) -> list[tuple[bytes, bytes]]:
        """(field, what it held) of every entry of the ``dead`` holders in the hash ``key``, each
        now tagged with ``holder``. When a step was sent again after a lost reply, what its first
        sending took is tagged with ``holder`` already, and the second sending's reply leaves it
        out: the hash is read then, and its entries tagged with ``holder`` whose field ``known``
        does not know (this process's own) are what was claimed."""
        again = replies_lost()
        claimed = list(self.fn.claim(key, holder, dead))
        if replies_lost() == again:
            return claimed
        tag = self._tag(b"")
        return [(field, value[len(tag):]) for field, value in self._hash(key).items()
                if value.startswith(tag) and not known(field)]

    # -- requests owed ----------------------------------------------------------
    def _hold(self, pending_id: str) -> None:
        with self._held_lock:
            self._held.add(pending_id)

    def _held_ids(self) -> list[str]:
        with self._held_lock:
            return list(self._held)

    def hold_pending(self, pending_id: str) -> bool:
        with self._held_lock:
            mine = pending_id in self._held
        if mine and self._surely_alive():
            # owed by this process, alive all along: nobody recovered it, and its outcome is not
            # recorded (settling it would have let it go)
            return True
        # asked otherwise: another process may have recovered it, or fetched and settled it
        if not self._carrying("FCALL", "sdd_pending_adopt", 1, rk.pending_key(self.prefix, pending_id),
                              pending_id, self._holder()):
            return False
        self._hold(pending_id)
        return True

    def held_pending(self) -> list[str]:
        # a request this process owed may have been fetched and settled by another (a shared
        # scrapy-redis queue), or recovered: forget those first
        held = self._held_ids()
        if not held:
            return []
        pipe = self.client.pipeline(transaction=False)
        for pending_id in held:
            pipe.hget(rk.pending_key(self.prefix, pending_id), pending_id)
        mine = (self._id or "").encode() + b"\n"
        gone = {i for i, raw in zip(held, pipe.execute()) if raw is None or not raw.startswith(mine)}
        with self._held_lock:
            self._held.difference_update(gone)
        return [i for i in held if i not in gone]

    def writing_elsewhere(self) -> int:
        # the other holders alive in this process's run (any run when it crawls in none)
        now_ms, holders = self._holders()
        mine = (self._id or "").encode()
        return sum(1 for holder, (deadline, run) in holders.items()
                   if holder != mine and deadline > now_ms and run > 0 and self._joined in (0, run))

    def _stopped_by(self, exc: Exception) -> StoreWriteError:
        """The error that stops the crawl for ``exc``, one of ``_STORE_FAILURES``."""
        if isinstance(exc, StoreWriteError):
            return exc  # this process's writes stopped already (_refused)
        if refused_as_full(exc):
            # the reply names the command (binary arguments): only the server's reason is kept
            reason = str(exc).rsplit("caused error: ", 1)[-1].rsplit("because of: ", 1)[-1].rstrip(".")
            self._refused = self._refused or StoreFull(
                f"the Redis store at {self.path} is full: the server refused a write ({reason}); "
                "raise its maxmemory or free memory, then run the crawl again: it goes on where it stopped"
            )
            return self._refused
        if isinstance(exc, redis.exceptions.ExecAbortError):
            self._refused = self._refused or StoreWriteError(f"the Redis store at {self.path} refused a write: {exc}")
            return self._refused
        if isinstance(exc, FunctionsMissing):
            return StoreLost(
                f"the Redis store at {self.path} no longer has the store's functions: the server restarted "
                "without persistence or was flushed, and the store's records under the prefix "
                f"{self.prefix!r} are likely gone with them; run the crawl again: it goes on from what is "
                "left, or starts over"
            )
        self._lost = self._lost or StoreConnectionLost(
            f"lost the connection to the Redis store at {self.path} "
            f"({self.retry.retries} retries with backoff ran out): {exc}"
        )
        return self._lost

    # -- decisions shared by processes ----------------------------------------
    @contextmanager
    def hold_document(self, key: str) -> Iterator[None]:
        """Hold ``key``'s decision: a lock tagged with this hold, taken with ``HSETNX``, released
        by its holder only, or dropped when its holder is recovered (dead). The store never waits:
        when another process holds it, :class:`DecisionBusy` (the crawl waits without blocking,
        and tries again). The block's batches are applied as any batch is, each when it exits."""
        lock, field = rk.decision_slot(self.prefix, key)
        holder = self._lock(lock, field)
        if holder is None:
            raise DecisionBusy(key)
        try:
            yield
        finally:
            try:
                # a full server runs it too (allow-oom): a decision whose write it refused lets
                # go of its lock, and the other processes, or the next run, need not wait for
                # this holder's recovery
                self.client.fcall("sdd_release", 1, lock, field, holder)
            except _STORE_FAILURES as exc:
                raise self._stopped_by(exc) from None

    def _lock(self, lock: str, field: bytes) -> bytes | None:
        """Take a decision's lock (the writes that wait go with it, in its transaction: no lock
        is taken if the server refuses them): this hold's tag, or None when another holds it."""
        holder = self._tag(str(next(self._holds)).encode())
        again = replies_lost()
        if self._carrying("HSETNX", lock, field, holder):
            return holder
        # a lock that holds this hold's tag (each hold is numbered) was taken by the round trip
        # that lost its reply: redis-py sent it again, and that HSETNX answered 0
        return holder if replies_lost() != again and self.client.hget(lock, field) == holder else None

    # -- key names ----------------------------------------------------------
    def _journal_key(self) -> str:
        return f"{self.prefix}:j:{{{self.prefix}:m}}"

    def _holders_key(self) -> str:
        return f"{self.prefix}:h:{{{self.prefix}:m}}"

    def _meta_key(self) -> str:
        return f"{self.prefix}:m:{{{self.prefix}:m}}"

    def _slot(self, table: str, key: str) -> tuple[str, bytes]:
        """(shard hash, field) of a record (:func:`~scrapy_dedup.store.redis.keys.table_slot`);
        the metadata is one hash, its names the fields."""
        if table == META:
            return self._meta_key(), key.encode("utf-8", "surrogatepass")
        return rk.table_slot(self.prefix, table, key)

    def _set_key(self, name: str, owner: str) -> str:
        digest = xxhash.xxh64_hexdigest(owner.encode("utf-8", "surrogatepass"))
        return f"{self.prefix}:s:{name}:{{s{digest}}}{owner}"

    def _first_urls_key(self, bucket_key: str) -> str:
        # the same {tag} as the bucket: one call reads and writes both
        return bucket_key.replace(":f:", ":fu:", 1)

    # -- batches ------------------------------------------------------------
    @contextmanager
    def batch(self, later: bool = False) -> Iterator[RedisBatch]:
        batch = RedisBatch(self)
        yield batch
        if not batch.commands:
            return
        if not later:
            self._apply(batch.commands)
            return
        # they wait for this process's next call, which sends them first (see _CARRIERS)
        with self._calling:
            self._waiting += batch.commands
            full = len(self._waiting) >= WAITING_MAX
        if full:
            self.flush()

    def flush(self) -> None:
        waiting = self._take_waiting()
        if waiting and self.fn.fused:
            self._atomic(waiting)
        elif waiting:
            self._journalled(waiting)

    def _apply(self, commands: list[tuple]) -> None:
        if not is_cluster(self.client):
            self._atomic(self._take_waiting() + commands)  # the writes that wait go first
            return
        # The writes that wait go first, as one server's batch carries them: a request settled by
        # this batch must not be durable before what its page added.
        self.flush()
        if len(commands) == 1:
            # one command is atomic by itself: no journal (a metadata write, say)
            self.client.execute_command(*commands[0])
            return
        self._journalled(commands)

    def _atomic(self, commands: list[tuple]) -> None:
        """Apply ``commands`` on one server: one command alone is atomic by itself, more go in
        one MULTI/EXEC."""
        if len(commands) == 1:
            self.client.execute_command(*commands[0])
            return
        pipe = self.client.pipeline(transaction=True)
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute()

    def _journalled(self, commands: list[tuple]) -> None:
        # A cluster transaction holds one slot: the batch is journalled in one slot first, then
        # applied slot by slot (in order within each), then its journal entry goes. A writer
        # that dies in between leaves the entry, which the next store opened replays: every
        # write is an absolute put, delete, add or remove, so applying it again is harmless (but
        # a variant's count, reporting detail, which may then count one sighting twice).
        entry = f"{self._holder()}:{next(self._batch_ids)}"
        journal = self._journal_key()
        self.client.hset(journal, entry, self._tag(_encode_commands(commands)))
        self._apply_by_slot(commands)
        self.client.hdel(journal, entry)

    def _apply_by_slot(self, commands: list[tuple]) -> None:
        client = self.client
        assert isinstance(client, RedisCluster), "batches go slot by slot on a cluster only"
        by_slot: dict[int, list[tuple]] = {}
        for command in commands:
            key = command[3] if command[0] == "FCALL" else command[1]
            by_slot.setdefault(client.keyslot(key), []).append(command)
        for slot_commands in by_slot.values():
            pipe = self.client.pipeline(transaction=True)
            for command in slot_commands:
                pipe.execute_command(*command)
            pipe.execute()

    def _hash(self, key: str) -> dict[bytes, bytes]:
        """A hash's fields and values, as bytes: the client is made without decode_responses."""
        return cast("dict[bytes, bytes]", self.client.hgetall(key))

    # -- records ------------------------------------------------------------
    def get(self, table: str, key: str) -> bytes | None:
        if table == PENDING:
            raw = self._carrying("HGET", rk.pending_key(self.prefix, key), key)
            return _payload(raw) if raw is not None else None
        layout = rk.table_layout(table)
        value = self._carrying(*layout.get_command(*self._slot(table, key)))
        return value if value is None else layout.read(value)

    def get_many(self, table: str, keys: Sequence[str]) -> list[bytes | None]:
        if table == PENDING or len(keys) < 2:
            return [self.get(table, key) for key in keys]
        layout = rk.table_layout(table)
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.execute_command(*layout.get_command(*self._slot(table, key)))
        return [value if value is None else layout.read(value) for value in pipe.execute()]

    def _carrying(self, *command: Any) -> Any:
        """Run ``command``; on one server the writes that wait go ahead of it in the same round
        trip (a connection runs them in order, so this process reads its own writes)."""
        if not (self._waiting and self.fn.fused):
            return self.client.execute_command(*command)
        pipe, _ = self._pipeline()
        pipe.execute_command(*command)
        return pipe.execute()[-1]

    def _url_put(self, key: str, value: bytes, if_absent: bool = False) -> list[tuple]:
        # a recorded URL keeps its own first URL: the frontier's copy can go
        bucket, rid = rk.frontier_slot(self.prefix, key)
        return [("HSETNX" if if_absent else "HSET", *self._slot(URL, key), value),
                ("HDEL", self._first_urls_key(bucket), rid)]

    def count(self, table: str) -> int:
        if table == FRONTIER:
            return self.fn.frontier_size()
        if table != PENDING:
            return super().count(table)
        pipe = self.client.pipeline(transaction=False)
        for shard in range(rk.PENDING_SHARDS):
            pipe.hlen(rk.pending_shard(self.prefix, shard))
        return sum(int(n) for n in pipe.execute())

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        if table == PENDING:
            for shard in range(rk.PENDING_SHARDS):
                rows = self._hash(rk.pending_shard(self.prefix, shard))
                for field in sorted(rows):
                    yield field.decode("utf-8", "surrogatepass"), _payload(rows[field])
            return
        if table == META:
            rows = self._hash(self._meta_key())
            for field in sorted(rows):
                yield field.decode("utf-8", "surrogatepass"), rows[field]
            return
        layout = rk.table_layout(table)
        if layout.key is None:
            raise StoreError(f"the Redis store keeps the {table} table by digests of its keys: it is not scanned")
        per_round = max(1, layout.shards // SCAN_ROUNDS)
        for start in range(0, layout.shards, per_round):
            pipe = self.client.pipeline(transaction=False)
            for shard in range(start, min(layout.shards, start + per_round)):
                pipe.hgetall(rk.table_shard(self.prefix, table, shard))
            for rows in pipe.execute():
                for key, value in sorted((layout.key(field), value) for field, value in rows.items()):
                    yield key, layout.read(value)

    def put_if_absent(self, table: str, key: str, value: bytes) -> bytes | None:
        layout = rk.table_layout(table)
        if layout.packed:
            raise ValueError(f"the Redis store packs the records of the {table} table: they are put, not claimed")
        shard, field = self._slot(table, key)
        value = layout.stored(bytes(value))
        current = self.client.fcall("sdd_exact_claim", 1, shard, field, value)
        return None if current is None else layout.read(bytes(current))

    def set_members_many(self, name: str, owners: Sequence[str]) -> list[list[tuple[str, bytes]]]:
        pipe = self.client.pipeline(transaction=False)
        for owner in owners:
            pipe.hgetall(self._set_key(name, owner))
        return [[(m.decode("utf-8", "surrogatepass"), rows[m]) for m in sorted(rows)] for rows in pipe.execute()]

    # -- counters -----------------------------------------------------------
    def increment_meta(self, name: str) -> int:
        return int(self.client.hincrby(self._meta_key(), name, 1))

    # -- frontier -----------------------------------------------------------
    def _frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        bucket, rid = rk.frontier_slot(self.prefix, key)
        again = replies_lost()
        previous, first_url = self._carrying(
            "FCALL", "sdd_frontier_mark_url", 2, bucket, self._first_urls_key(bucket), run, rid, url
        )
        if int(previous) == run and replies_lost() != again:
            # sent again after a lost reply: the mark seen may be this call's own first one, so
            # the key counts as new (fetched twice at worst, never left unfetched)
            return None
        return self._marked(key, url, int(previous), first_url)

    def _marked(self, key: str, url: str, previous: int, first_url: bytes | None) -> tuple[int, str] | None:
        if previous == 0:
            return None
        if first_url is None:
            record = get_url(self, key)
            first = record.url if record is not None else url
        else:
            first = first_url.decode("utf-8", "surrogatepass")
        return int(previous), first

    def frontier_mark_many(
        self, run: int, entries: list[tuple[str, str, OweOffer | None]]
    ) -> list[tuple[int, str] | None]:
        if not self.fn.fused or any(offer is None for _, _, offer in entries):
            return super().frontier_mark_many(run, entries)  # two slots on a cluster: two calls
        owing = cast("list[tuple[str, str, OweOffer]]", entries)
        again = replies_lost()
        if len(owing) < 2:  # one call, with the writes that wait
            replies = [self._carrying(*self._mark_owe_command(key, run, url, offer)) for key, url, offer in owing]
            waiting = 0
        else:
            pipe, waiting = self._pipeline()  # the writes that wait go first, in the same round trip
            for key, url, offer in owing:
                pipe.execute_command(*self._mark_owe_command(key, run, url, offer))
            replies = pipe.execute(raise_on_error=False)
        resent = run if replies_lost() != again else None
        # a mark the server refused (full) fails the call, but the requests owed by the marks
        # before it are held all the same: this process hands them over when it closes
        answers = [self._marked_owing(key, url, offer, reply, resent)
                   for (key, url, offer), reply in zip(owing, replies[waiting:]) if not isinstance(reply, Exception)]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return answers

    def _mark_owe_command(self, key: str, run: int, url: str, owe: OweOffer) -> tuple:
        bucket, rid = rk.frontier_slot(self.prefix, key)
        return ("FCALL", "sdd_frontier_mark_owe", 4, bucket, self._first_urls_key(bucket),
                rk.pending_key(self.prefix, owe.pending_id), self._slot(URL, key)[0], run, rid, url,
                owe.pending_id, self._holder(), owe.blob, key)

    def _marked_owing(
        self, key: str, url: str, owe: OweOffer, reply: list, resent: int | None
    ) -> tuple[int, str] | None:
        """What a mark-and-owe answered. ``resent``: the run, when the round trip was sent again
        after a lost reply; a mark of this run then may be the call's own first one, which owed
        the request under this holder: so it was."""
        previous, first_url, owed, recorded = reply
        if int(previous) == resent and not int(owed):
            mine = self._tag(owe.blob)
            if self.client.hget(rk.pending_key(self.prefix, owe.pending_id), owe.pending_id) == mine:
                previous, owed, recorded = 0, 1, 1
        if int(owed):
            self._hold(owe.pending_id)
            owe.owed = True
            owe.recordless = not int(recorded)
        return self._marked(key, url, int(previous), first_url)

    def _pipeline(self) -> tuple[Any, int]:
        """A pipeline that carries the writes that wait ahead of what the caller queues, and how
        many replies they take. Carried writes make it one transaction: the server applies
        them, and the caller's commands, all or none, so a write refused (a full server) is
        never left behind while a later one, a request settled by it, goes through."""
        waiting = self._take_waiting()
        pipe = self.client.pipeline(transaction=bool(waiting))
        for call in waiting:
            pipe.execute_command(*call)
        return pipe, len(waiting)

    def _check_not_refused(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self._refused is not None:
            raise self._refused

    def _take_waiting(self) -> list[tuple]:
        if self._waiting:
            self._check_not_refused()  # they stay, owed, like the requests they belong to
        with self._calling:
            waiting, self._waiting = self._waiting, []
        return waiting

    # -- near-duplicate index -----------------------------------------------
    def near_candidates(
        self, scope: str, simhash: int | None, bands: Iterable[int], max_distance: int | None = None
    ) -> NearCandidates:
        # both indexes in one round trip
        pipe = self.client.pipeline(transaction=False)
        distance = 64 if max_distance is None else max_distance
        decode_near = None if simhash is None else self.fn.queue_near_read(pipe, scope, simhash, distance)
        groups = rk.band_calls(self.prefix, scope, band_tuple(bands))
        for key, entries in groups:
            pipe.fcall("sdd_bands_find", 1, key, entries)
        replies = pipe.execute()
        near_at = len(replies) - len(groups)
        near = sorted(decode_near(replies[:near_at])) if decode_near is not None else []
        found = {token.hex() for reply in replies[near_at:] for token in rk.band_tokens(reply)}
        return NearCandidates([(fp, token.hex()) for fp, token in near], found)


def _payload(held: bytes) -> bytes:
    """An owed request as its shard keeps it: its holder, a newline, the request."""
    return held.split(b"\n", 1)[1]


def _guard(name: str) -> None:
    method = getattr(RedisStore, name)

    def guarded(self, *args, **kwargs):
        try:
            with self._calling:
                if name in _WRITERS or self._lost is not None:
                    self._check_not_refused()  # a lost connection stops every call, a refusal the writes
                if self._waiting and name != "flush" and (name not in _CARRIERS or not self.fn.fused):
                    self.flush()  # what this process wrote is in before anything else
                result = method(self, *args, **kwargs)
            if hasattr(result, "__next__"):
                return _guarded_iter(self, result)
            return result
        except _STORE_FAILURES as exc:
            raise self._stopped_by(exc) from None

    guarded.__name__, guarded.__doc__ = method.__name__, method.__doc__
    setattr(RedisStore, name, guarded)


def _guarded_iter(store: RedisStore, iterator: Iterator) -> Iterator:
    try:
        yield from iterator
    except _STORE_FAILURES as exc:
        raise store._stopped_by(exc) from None


#: the calls that send the writes that wait with their own round trip (on one server)
_CARRIERS = frozenset({"_apply", "get", "_frontier_mark", "frontier_mark_many", "flush",
                       "hold_pending", "_lock"})

#: the calls that write: none goes once a write of this process was refused (RedisStore._refused)
_WRITERS = frozenset({"_apply", "put_if_absent", "increment_meta", "_frontier_mark",
                      "frontier_mark_many", "flush", "begin_run", "claim_pending", "hold_pending",
                      "_lock"})

# every call that reaches the server: a lost connection, once the client's retries with
# backoff have run out, is one StoreConnectionLost naming the store (password hidden), and a
# write refused by a full server one StoreFull
for _name in (
    "_apply", "get", "get_many", "scan", "put_if_absent", "set_members_many",
    "increment_meta", "_frontier_mark", "frontier_mark_many", "flush", "count",
    "near_candidates", "begin_run",
    "claim_pending", "hold_pending", "held_pending", "_lock",
):
    _guard(_name)
