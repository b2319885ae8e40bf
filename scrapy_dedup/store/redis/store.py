"""The Redis backend: one store shared by every crawl process, on a server or a cluster.

``DEDUP_STORE = "redis://[user:password@]host:port/db"`` (``rediss://`` for TLS). A
Redis Cluster is recognised from the server itself. Keys carry the crawl's prefix
(``DEDUP_REDIS_PREFIX``, by default ``dedup:<spider name>``); their layout and slots
are in :mod:`scrapy_dedup.store.redis.keys`, the atomic calls in
``functions.lua``. Beyond that layout:

=================================  ===========================================
``P:m:{P:m}``                      metadata (hash: name -> JSON), the run counter
``P:r:{P:m}``                      processes in the current run, by lease deadline
``P:t:<table>:{t<table><shard>}``  records of one table, 1,024 or 16,384 hashes (see
                                   *record tables* in redis_keys: digests as fields)
``P:s:<set>:{s<digest>}<owner>``   one owned set (hash: member -> value): a URL's
                                   aliases, a cluster's members but its representative
``P:fu:{f<bucket>}``               first URL of a frontier key not yet recorded
``P:d:{d<url key digest>}``        a URL key being decided (see ``hold_document``)
=================================  ===========================================

Reads stream: ``scan`` walks a table a few shards a round trip, so a report needs no
snapshot and never blocks the server. A batch is one MULTI/EXEC transaction on a standalone server; inside
a decision's hold it waits for the thread's next read, or goes with the hold's release.
On a cluster, where one transaction cannot span slots, a batch is journalled in one slot
(``P:j:{P:m}``), applied slot by slot, then struck from the journal; a batch left there
by a writer that died is replayed when a store is next opened. Readers may see part of a
batch while it is applied; after a crash a batch is applied whole.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

import redis
import xxhash
from redis.cluster import RedisCluster

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.store.base import (
    ALIASES,
    EXACT,
    PENDING,
    STORE_FORMAT,
    URL,
    VARIANT,
    DecisionBusy,
    DecisionReads,
    DedupStore,
    IncompatibleStore,
    OweOffer,
    StoreBatch,
    StoreError,
    StoreWriteError,
    band_tuple,
)
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
from scrapy_dedup.store.redis.wire import FunctionsMissing

logger = logging.getLogger(__name__)

LAYOUT = rk.LAYOUT
#: a process of a crawl renews its place in the run this often; one silent for a lease is gone
RUN_LEASE_MS = 30_000
#: a cluster batch journalled longer ago than this was left by a writer that died mid-way
JOURNAL_REPLAY_AFTER_S = 60.0
#: a document's decision (its URL key) is held this long at most; a process that dies
#: mid-decision frees it when this runs out
DECISION_LEASE_MS = 30_000
#: an owed request's lease (``DEDUP_REDIS_LEASE``): renewed every third of it while its holder lives
PENDING_LEASE_MS = 30_000
#: variant URLs whose alias this process wrote, remembered so that later counts skip it
VARIANT_ALIASES_KEPT = 16_384
#: variant writes that wait for a round trip, at most
WAITING_MAX = 512
#: how many of the requests it settled last a process hands over again when it closes: a settle
#: is let go of when queued, and one the server refused (full) or never got (connection lost)
#: leaves its request owed by this process. What is in flight at a stop is far fewer: the
#: decisions of CONCURRENT_REQUESTS responses and the writes that wait (WAITING_MAX commands).
SETTLED_HANDED_OVER = 4_096
#: a scan reads a table in this many round trips (1,024 shards: 16 a round trip)
SCAN_ROUNDS = 64


def _encode_commands(commands: list[tuple], written_at: float) -> bytes:
    def arg(value: Any) -> list:
        if isinstance(value, bytes):
            return ["b", value.decode("latin-1")]
        if isinstance(value, int):
            return ["i", value]
        return ["s", value]

    return json.dumps({"at": written_at, "commands": [[arg(a) for a in c] for c in commands]}).encode()


def _decode_commands(raw: bytes) -> tuple[float, list[tuple]]:
    data = json.loads(raw)
    decode: dict[str, Callable[[Any], Any]] = {"b": lambda v: v.encode("latin-1"), "i": int, "s": str}
    return data["at"], [tuple(decode[t](v) for t, v in c) for c in data["commands"]]


class RedisBatch(StoreBatch):
    """Writes recorded as commands and sent together when the block exits."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self.commands: list[tuple] = []

    def put(self, table: str, key: str, value: bytes) -> None:
        s = self._store
        if table == PENDING:
            # owed, and held by this process under a lease it renews while alive
            held, deadlines = rk.pending_keys(s.prefix, key)
            self.commands.append(("FCALL", "sdd_pending_hold", 2, held, deadlines, key, s._writer, s.lease_ms, bytes(value)))
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
            held, deadlines = rk.pending_keys(s.prefix, key)
            self.commands += [("HDEL", held, key), ("ZREM", deadlines, key)]
            s._release(key)
            return
        self.commands.append(rk.table_layout(table).delete_command(*s._slot(table, key)))

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
        token = rk.cluster_token(cluster_id)
        if s.fn.fused:
            # one server: every table and band in one call
            self.commands.append(s.fn.near_index_command(scope, simhash, token, bands, table_fn == "sdd_near_put"))
            return
        fp = rk.simhash_bytes(simhash)
        for key in rk.near_buckets(s.prefix, scope, simhash):
            self.commands.append(("FCALL", table_fn, 1, key, fp, token))
        for (key,), entries in rk.band_calls(s.prefix, scope, bands):
            # one call per band group: its buckets are fields of one hash
            self.commands.append(("FCALL", band_fn, 1, key, token, entries))


class _DecisionState(threading.local):
    """Per thread, what the decision it holds read ahead and has yet to send: a decision may
    run on a thread of its own while the crawl's thread writes through the same store."""

    def __init__(self) -> None:
        #: document holds entered and not yet left
        self.depth = 0
        #: (table, key) -> value, read with a hold's own round trip: each answers one get, and
        #: any write of this thread drops them
        self.prefetched: dict[tuple[str, str], bytes | None] = {}
        #: (scope, band hashes, tokens) of the band buckets read with the hold
        self.settled_bands: tuple[str, tuple[int, ...], set[bytes]] | None = None
        #: (scope, simhash, max distance, entries) of the SimHash buckets read with the hold
        self.settled_near: tuple[str, int, int, set[tuple[int, bytes]]] | None = None
        #: one server, inside a hold: (commands, atomic, function given the replies or None)
        #: to send before the next read or with the outermost hold's release
        self.queued: list[tuple[list[tuple], bool, Callable[[list], None] | None]] = []
        #: exact-index entries the hold read absent: a claim of one is sent with the release
        #: (see RedisStore.put_if_absent)
        self.unclaimed: set[str] = set()

    def forget_reads(self) -> None:
        self.prefetched.clear()
        self.unclaimed.clear()
        self.settled_bands = self.settled_near = None


class RedisStore(DedupStore):
    """A store on a Redis server or cluster, shared by every process that opens it."""

    shared = True

    def __init__(
        self,
        path: str,
        params: dict[str, Any],
        *,
        cache_mb: int = 16,
        prefix: str = "dedup:crawl",
        retry: RetryPolicy = RetryPolicy(),
        lease_ms: int = PENDING_LEASE_MS,
    ) -> None:
        self.url = path
        self.lease_ms = lease_ms
        self.path = redact(path)  # what messages show
        self.prefix = rk.check_prefix(prefix)
        with self._opening():
            self._connect(retry)
            self.params = self._check_params({**params, "store_format": STORE_FORMAT, "simhash_layout": LAYOUT})
            self._read_run()
            self.replay_journal()

    @classmethod
    def open_existing(cls, path: str, prefix: str = "dedup:crawl") -> RedisStore:
        store = cls.__new__(cls)
        store.url, store.path, store.prefix = path, redact(path), rk.check_prefix(prefix)
        store.lease_ms = PENDING_LEASE_MS
        with store._opening():
            store._connect(RetryPolicy())
            store.params = store.get_meta("params")
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

    def _connect(self, retry: RetryPolicy) -> None:
        self.retry = retry
        self.client = connect(self.url, retry=retry)
        self.fn = StoreFunctions(self.client, self.prefix)
        self._writer = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._batch_ids = itertools.count(1)
        self._holds = itertools.count(1)
        #: what a decision in force on a thread read ahead and has yet to send
        self._decision = _DecisionState()
        self._heartbeat: threading.Thread | None = None
        self._stopping = threading.Event()
        #: ids of the owed requests this process holds (alive while its own lease is renewed)
        self._held: set[str] = set()
        #: the ids it settled last (SETTLED_HANDED_OVER), handed over again at close
        self._settled: deque[str] = deque(maxlen=SETTLED_HANDED_OVER)
        self._held_lock = threading.Lock()
        #: until when (time.monotonic()) this process's own lease surely runs; 0: not renewed
        self._own_lease_until = 0.0
        self._variant_aliases: OrderedDict[str, str] = OrderedDict()
        #: writes sent with the next round trip (variant counts and aliases, see record_variants)
        self._waiting: list[tuple] = []
        self._waiting_lock = threading.Lock()
        #: the writes that wait hold a record this process wrote (put_url_soon): every call
        #: sends them first, or carries them (see _CARRIERS)
        self._behind = False

    def close(self) -> None:
        waiting = len(self._waiting)  # counted first: sending takes them off the list
        try:
            self.send_waiting()
        except Exception:  # noqa: BLE001 -- reporting detail; the connection is gone anyway
            logger.warning("could not send %d variant writes to %s", waiting, self.path)
        if self._heartbeat is not None:
            self._stopping.set()
            self._heartbeat.join(timeout=5)
            self._heartbeat = None
            self._own_lease_until = 0.0
            held = self._owed_at_close()
            try:
                # what this process still owes is handed to the others at once (or to the next run)
                self.fn.pending_owner_renew(self._writer, 0)
                if held:
                    self.fn.pending_renew(self._writer, 0, held)
            except Exception:  # noqa: BLE001 -- the leases run out anyway
                logger.debug("could not hand %d owed requests over in %s", len(held), self.path)
            try:
                self.client.fcall("sdd_run_leave", 2, self._meta_key(), self._members_key(), self._writer)
            except Exception:  # noqa: BLE001 -- leaving is best effort: the lease runs out anyway
                logger.debug("could not leave the run of %s", self.path)
        self.client.close()

    # -- runs shared by processes -------------------------------------------
    def begin_run(self) -> int:
        """Join the run of the crawl's processes alive now, or begin the next one.

        Every process of one crawl works in the same run, so a URL another process
        scheduled a moment ago is "seen", not "fetched in an earlier run".
        """
        self._run, began = (
            int(x) for x in self.client.fcall(
                "sdd_run_join", 2, self._meta_key(), self._members_key(), self._writer, RUN_LEASE_MS
            )
        )
        logger.info("%s run %d of the shared store %s", "began" if began else "joined", self._run, self.path)
        # this process's own lease covers every request it holds from now on
        self._renew_own_lease()
        if self._heartbeat is None:
            self._stopping.clear()
            self._heartbeat = threading.Thread(target=self._renew, name="dedup-redis-run", daemon=True)
            self._heartbeat.start()
        return self._run

    def _renew(self) -> None:
        while not self._stopping.wait(min(RUN_LEASE_MS, self.lease_ms) / 3000):
            try:
                self.renew_leases()
            except Exception:  # noqa: BLE001 -- the crawl's own calls report a lost connection
                logger.debug("could not renew this process's leases in %s", self.path)

    def renew_leases(self) -> None:
        """This process's run lease and its own lease on the requests it holds: a fixed number
        of calls (one per pending shard), however many requests it owes."""
        self.client.fcall("sdd_run_renew", 2, self._meta_key(), self._members_key(), self._writer, RUN_LEASE_MS)
        self._renew_own_lease()

    def _renew_own_lease(self) -> None:
        sent = time.monotonic()
        self.fn.pending_owner_renew(self._writer, self.lease_ms)
        # the server set the deadline after ``sent``: it holds at least until then, by this clock
        self._own_lease_until = sent + self.lease_ms / 1000

    def _lease_certainly_held(self) -> bool:
        """Whether this process's own lease is sure to run for a third of a lease more: then
        no other process can have taken over a request it holds (reclaim needs the holder's
        lease to have run out)."""
        return time.monotonic() < self._own_lease_until - self.lease_ms / 3000

    # -- requests owed, under leases ------------------------------------------
    def _hold(self, pending_id: str) -> None:
        with self._held_lock:
            self._held.add(pending_id)

    def _release(self, pending_id: str) -> None:
        with self._held_lock:
            self._held.discard(pending_id)
            self._settled.append(pending_id)

    def _held_ids(self) -> list[str]:
        with self._held_lock:
            return list(self._held)

    def _owed_at_close(self) -> list[str]:
        """What a closing process hands over: the requests it holds, and those it settled last,
        whose settle may not have reached the store (a hand-over of one whose settle is
        recorded finds it gone, and does nothing)."""
        with self._held_lock:
            return list(self._held.union(self._settled))

    def claim_pending(self) -> Iterator[tuple[str, bytes]]:
        """Owed requests whose holder's lease ran out (it died, or every process stopped),
        each handed to this process by one atomic call: no two processes take the same one.
        A dead holder's half-applied batch (a cluster) is finished first."""
        self.replay_journal()
        while True:
            claimed = self.fn.pending_reclaim(self._writer, self.lease_ms, limit=100)
            if not claimed:
                return
            for pending_id, payload in claimed:
                self._hold(pending_id)
                yield pending_id, payload

    def hold_pending(self, pending_id: str) -> bool:
        with self._held_lock:
            mine = pending_id in self._held
        if mine and self._lease_certainly_held():
            # owed by this process, whose lease never ran out since: nobody took it over, and
            # its outcome is not recorded (settling it would have let it go)
            return True
        # asked otherwise: another process may have taken it over while this one's lease lapsed
        held, deadlines = rk.pending_keys(self.prefix, pending_id)
        if not self._carrying("FCALL", "sdd_pending_adopt", 2, held, deadlines, pending_id, self._writer, self.lease_ms):
            return False
        self._hold(pending_id)
        return True

    def pending_count(self) -> int:
        pipe = self.client.pipeline(transaction=False)
        for shard in range(rk.PENDING_SHARDS):
            pipe.hlen(rk.pending_shard(self.prefix, shard)[0])
        return sum(int(n) for n in pipe.execute())

    def held_pending(self) -> list[str]:
        # a request this process owed may have been fetched and settled by another (a shared
        # scrapy-redis queue), or taken over: forget those first
        held = self._held_ids()
        if not held:
            return []
        pipe = self.client.pipeline(transaction=False)
        for pending_id in held:
            pipe.hget(rk.pending_keys(self.prefix, pending_id)[0], pending_id)
        mine = self._writer.encode() + b"\n"
        gone = {i for i, raw in zip(held, pipe.execute()) if raw is None or not raw.startswith(mine)}
        with self._held_lock:
            self._held.difference_update(gone)
        return [i for i in held if i not in gone]

    def pending_held_elsewhere(self) -> int:
        return max(0, self.pending_count() - len(self.held_pending()))

    def _stopped_by(self, exc: Exception) -> StoreWriteError:
        """The error that stops the crawl for ``exc``, one of ``_STORE_FAILURES``."""
        if refused_as_full(exc):
            # the reply names the command (binary arguments): only the server's reason is kept
            reason = str(exc).rsplit("caused error: ", 1)[-1].rsplit("because of: ", 1)[-1].rstrip(".")
            return StoreFull(
                f"the Redis store at {self.path} is full: the server refused a write ({reason}); "
                "raise its maxmemory or free memory, then run the crawl again: it goes on where it stopped"
            )
        if isinstance(exc, redis.exceptions.ExecAbortError):
            return StoreWriteError(f"the Redis store at {self.path} refused a write: {exc}")
        if isinstance(exc, FunctionsMissing):
            return StoreLost(
                f"the Redis store at {self.path} no longer has the store's functions: the server restarted "
                "without persistence or was flushed, and the store's records under the prefix "
                f"{self.prefix!r} are likely gone with them; run the crawl again: it goes on from what is "
                "left, or starts over"
            )
        return StoreConnectionLost(
            f"lost the connection to the Redis store at {self.path} "
            f"({self.retry.retries} retries with backoff ran out): {exc}"
        )

    # -- decisions shared by processes ----------------------------------------
    @contextmanager
    def hold_document(self, key: str, reads: DecisionReads | None = None) -> Iterator[None]:
        """Hold ``key``'s decision: a lock with an expiry (a dead holder frees it), taken with
        ``SET NX PX`` and released only by its holder. The store never waits: when another
        process holds it, :class:`DecisionBusy` (the crawl waits without blocking, and tries
        again).

        The key's URL record, which a decision reads first, comes in the same round trip: the
        next ``get`` of it inside the block is that answer (read once, before any write). On
        one server so do ``reads`` (the SimHash and band buckets the matching scans, and its
        first records), and the block's writes go with the release.
        """
        lock = rk.decision_key(self.prefix, key)
        holder = f"{self._writer}:{next(self._holds)}"
        d = self._decision
        # on one server a connection runs a pipeline in order: the reads come after the lock is
        # taken; on a cluster they are on other masters, so they are read afterwards
        one_server = not is_cluster(self.client)
        outermost = d.depth == 0
        try:
            self._flush()
            pipe = self.client.pipeline(transaction=False)
            # a record this process wrote goes first (one server): the reads below see it
            waiting = self._queue_waiting(pipe) if self._behind else 0
            pipe.set(lock, holder, nx=True, px=DECISION_LEASE_MS)
            decode = None
            if one_server:
                pipe.execute_command(*self._read_command(URL, key))
                if reads is not None and outermost:
                    decode = self._queue_first_reads(pipe, reads)
            taken, *replies = pipe.execute()[waiting:]
        except _STORE_FAILURES as exc:
            # the server refused a write of the round trip (full) after the lock was taken, say:
            # the lock goes (a release by this holder's name deletes nothing it did not take)
            with contextlib.suppress(*_STORE_FAILURES):
                self.client.fcall("sdd_lock_release", 1, lock, holder)
            raise self._stopped_by(exc) from None
        if not taken:
            raise DecisionBusy(key)
        if one_server:
            d.prefetched[(URL, key)] = replies[0]
            if decode is not None:
                decode(replies[1:])
        d.depth += 1
        try:
            yield
        finally:
            self._leave_hold(("FCALL", "sdd_lock_release", 1, lock, holder), True)

    def _queue_first_reads(self, pipe: Any, first: DecisionReads) -> Callable[[list], None]:
        """Queue what a decision reads first: its SimHash and band buckets and its first
        records; the function returned keeps the replies for the matching's reads (each
        answers once, before any write)."""
        scope, simhash, bands, max_distance, reads = first
        bands = band_tuple(bands)
        d = self._decision
        decode_near = None if simhash is None else self.fn.queue_near_read(pipe, scope, [simhash], max_distance)
        groups = rk.band_calls(self.prefix, scope, bands)
        for keys, entries in groups:
            pipe.fcall("sdd_bands_find", len(keys), *keys, entries)
        ahead = [(table, k) for table, k in reads if table != PENDING]
        for table, k in ahead:
            pipe.execute_command(*self._read_command(table, k))

        def decode(replies: list) -> None:
            near_at = len(replies) - len(ahead) - len(groups)
            if decode_near is not None:
                assert simhash is not None, "a near read is queued for a SimHash only"
                d.settled_near = (scope, simhash, max_distance, decode_near(replies[:near_at])[0])
            if bands:
                found = replies[near_at : near_at + len(groups)]
                d.settled_bands = (scope, bands, {token for reply in found for _, token in rk.band_found(reply)})
            values = replies[near_at + len(groups) :]
            d.prefetched.update(zip(ahead, values))
            d.unclaimed.update(k for (table, k), value in zip(ahead, values) if table == EXACT and value is None)

        return decode

    def _leave_hold(self, command: tuple, raise_lost: bool) -> None:
        """Leave a hold with ``command`` (its release). On one server it is queued after the
        decision's writes and sent with them when the outermost hold is left."""
        d = self._decision
        d.depth -= 1
        if d.depth == 0:
            d.forget_reads()
        try:
            if not self.fn.fused:
                self._flush()
                self.client.execute_command(*command)
                return
            d.queued.append(([command], False, None))
            if d.depth == 0:
                self._flush()
        except _STORE_FAILURES as exc:
            if raise_lost:
                raise self._stopped_by(exc) from None

    def _flush(self) -> None:
        """Send what this thread's holds queued, in order, in one round trip.

        Inside a hold on one server a batch's writes wait (:meth:`_apply`) until this
        thread's next read, or until the outermost hold is left: then the writes and the
        lock's release go together, in one MULTI/EXEC when there are writes (a batch stays all
        or nothing). A connection runs its commands in order, so another process that finds
        the lock free finds the writes in.
        """
        d = self._decision
        queued, d.queued = d.queued, []
        if not queued:
            return
        commands = [command for group, _, _ in queued for command in group]
        try:
            if len(commands) == 1 and not self._behind:
                replies = [self.client.execute_command(*commands[0])]
            else:
                pipe = self.client.pipeline(transaction=any(atomic for _, atomic, _ in queued))
                # a record this process wrote before the hold goes first, in the same round trip
                waiting = self._queue_waiting(pipe) if self._behind else 0
                for command in commands:
                    pipe.execute_command(*command)
                replies = pipe.execute()[waiting:]
        except (redis.exceptions.OutOfMemoryError, redis.exceptions.ExecAbortError) as exc:
            if refused_as_full(exc):
                self._release_refused(queued)
            raise
        at = 0
        for group, _, done in queued:
            if done is not None:
                done(replies[at : at + len(group)])
            at += len(group)

    def _release_refused(self, queued: list[tuple[list[tuple], bool, Any]]) -> None:
        """A full server refused a decision's writes and, in the same transaction, the lock's
        release sent with them (:meth:`_leave_hold`). The release goes again on its own, as a
        function a full server runs, so that the decisions of other processes, and of the next
        run, need not wait out its lease. The crawl stops all the same."""
        releases = [command for group, atomic, _ in queued if not atomic for command in group]
        if not releases:
            return
        pipe = self.client.pipeline(transaction=False)
        for command in releases:
            pipe.execute_command(*command)
        with contextlib.suppress(*_STORE_FAILURES):
            pipe.execute(raise_on_error=False)

    # -- key names ----------------------------------------------------------
    def _journal_key(self) -> str:
        return f"{self.prefix}:j:{{{self.prefix}:m}}"

    def _members_key(self) -> str:
        return f"{self.prefix}:r:{{{self.prefix}:m}}"

    def _meta_key(self) -> str:
        return f"{self.prefix}:m:{{{self.prefix}:m}}"

    def _slot(self, table: str, key: str) -> tuple[str, bytes]:
        """(shard hash, field) of a record (:func:`~scrapy_dedup.store.redis.keys.table_slot`)."""
        return rk.table_slot(self.prefix, table, key)

    def _read_command(self, table: str, key: str) -> tuple:
        """The command that reads a record of ``table`` (its reply as stored, or None)."""
        return rk.table_layout(table).get_command(*self._slot(table, key))

    def _set_key(self, name: str, owner: str) -> str:
        digest = xxhash.xxh64_hexdigest(owner.encode("utf-8", "surrogatepass"))
        return f"{self.prefix}:s:{name}:{{s{digest}}}{owner}"

    def _first_urls_key(self, bucket_key: str) -> str:
        # the same {tag} as the bucket: one call reads and writes both
        return bucket_key.replace(":f:", ":fu:", 1)

    # -- batches ------------------------------------------------------------
    def batch(self) -> AbstractContextManager[RedisBatch]:
        return self._batch(self._apply)

    def batch_soon(self) -> AbstractContextManager[RedisBatch]:
        return self._batch(self._apply_soon)

    @contextmanager
    def _batch(self, apply: Callable[[list[tuple]], None]) -> Iterator[RedisBatch]:
        batch = RedisBatch(self)
        yield batch
        if batch.commands:
            apply(batch.commands)

    def _apply_soon(self, commands: list[tuple]) -> None:
        """On one server, outside a hold: ``commands`` wait for this process's next call,
        which sends them first in its own round trip (see _CARRIERS)."""
        if not self.fn.fused or self._decision.depth:
            self._apply(commands)
            return
        self._decision.forget_reads()  # a write
        with self._waiting_lock:
            self._waiting += commands
            self._behind = True
            full = len(self._waiting) >= WAITING_MAX
        if full:
            self.send_waiting()

    def _apply(self, commands: list[tuple]) -> None:
        # a write: what a hold read ahead may no longer be the store's
        d = self._decision
        d.forget_reads()
        if not is_cluster(self.client):
            if d.depth:
                # inside a hold: sent before this thread's next read, or with the hold's release
                d.queued.append((commands, True, None))
                return
            self._flush()
            if len(commands) == 1 and not self._waiting:
                # one command is atomic by itself: no MULTI/EXEC around it
                self.client.execute_command(*commands[0])
                return
            pipe = self.client.pipeline(transaction=True)
            self._queue_waiting(pipe)  # the writes that wait go first, in the same round trip
            for command in commands:
                pipe.execute_command(*command)
            pipe.execute()
            return
        # The writes that wait (a page's variants) go first, as one server's batch carries them:
        # a request settled by this batch must not be durable before what its page added.
        self.send_waiting()
        # A cluster transaction holds one slot: the batch is journalled in one slot first, then
        # applied slot by slot (in order within each), then its journal entry goes. A writer
        # that dies in between leaves the entry, which the next store opened replays: every
        # write is an absolute put, delete, add or remove, so applying it again is harmless.
        entry = f"{self._writer}:{next(self._batch_ids)}"
        journal = self._journal_key()
        self.client.hset(journal, entry, _encode_commands(commands, time.time()))
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

    def replay_journal(self, older_than_s: float = JOURNAL_REPLAY_AFTER_S) -> int:
        """Finish the cluster batches of writers that died mid-way; returns how many.

        An entry is replayed once it is ``older_than_s`` old, or at once when its writer's own
        lease ran out: that process is dead (its heartbeat renews the lease while it lives,
        whatever its crawl thread is doing), and the requests it owed are about to be taken
        over, so its half-applied batch is whole before they are decided again.
        """
        if not is_cluster(self.client):
            return 0
        journal = self._journal_key()
        entries = self._hash(journal)
        if not entries:
            return 0
        dead = self._dead_writers()
        replayed = 0
        for entry, raw in entries.items():
            written_at, commands = _decode_commands(raw)
            writer = entry.decode().rsplit(":", 1)[0]
            if time.time() - written_at < older_than_s and writer not in dead:
                continue  # its writer may still be applying it
            self._apply_by_slot(commands)
            self.client.hdel(journal, entry)
            replayed += 1
        return replayed

    def _hash(self, key: str) -> dict[bytes, bytes]:
        """A hash's fields and values, as bytes: the client is made without decode_responses."""
        return cast("dict[bytes, bytes]", self.client.hgetall(key))

    def _dead_writers(self) -> set[str]:
        """Processes whose own lease ran out (a process that closed cleanly has none)."""
        seconds, micros = self.client.time()
        now_ms = seconds * 1000 + micros // 1000
        leases = self._hash(rk.pending_owners(self.prefix, 0))
        return {owner.decode() for owner, deadline in leases.items() if int(deadline) <= now_ms}

    # -- records ------------------------------------------------------------
    def get(self, table: str, key: str) -> bytes | None:
        if table == VARIANT and self._waiting and not self.fn.fused:
            self.send_waiting()  # a process reads its own writes
        prefetched = self._decision.prefetched
        if prefetched:
            if (table, key) in prefetched:
                value = prefetched.pop((table, key))
                return value if value is None else rk.table_layout(table).read(value)
        if table == PENDING:
            raw = self._carrying("HGET", rk.pending_keys(self.prefix, key)[0], key)
            return _payload(raw) if raw is not None else None
        value = self._carrying(*self._read_command(table, key))
        return value if value is None else rk.table_layout(table).read(value)

    def _carrying(self, *command: Any) -> Any:
        """Run ``command``; on one server the writes that wait go ahead of it in the same round
        trip (a connection runs them in order, so this process reads its own writes)."""
        if not (self._waiting and self.fn.fused):
            return self.client.execute_command(*command)
        pipe = self.client.pipeline(transaction=False)
        self._queue_waiting(pipe)
        pipe.execute_command(*command)
        *carried, reply = pipe.execute(raise_on_error=False)
        failed = [r for r in carried if isinstance(r, Exception)]
        if failed:  # a write that waited is not this call's failure: logged
            logger.warning("%d writes sent to %s failed: %s", len(failed), self.path, failed[0])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _url_put(self, key: str, value: bytes, if_absent: bool = False) -> list[tuple]:
        # a recorded URL keeps its own first URL: the frontier's copy can go
        bucket, rid = rk.frontier_slot(self.prefix, key)
        return [("HSETNX" if if_absent else "HSET", *self._slot(URL, key), value),
                ("HDEL", self._first_urls_key(bucket), rid)]

    def put_url_soon(self, record: UrlRecord, if_absent: bool = False) -> None:
        if not self.fn.fused or self._decision.depth:
            super().put_url_soon(record, if_absent)
            return
        self._apply_soon(self._url_put(record.key, record.to_json(), if_absent))

    def scannable(self, table: str) -> bool:
        return table == PENDING or rk.table_layout(table).key is not None

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        if table == VARIANT and self._waiting:
            self.send_waiting()
        if table == PENDING:
            for shard in range(rk.PENDING_SHARDS):
                rows = self._hash(rk.pending_shard(self.prefix, shard)[0])
                for field in sorted(rows):
                    yield field.decode("utf-8", "surrogatepass"), _payload(rows[field])
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
        d = self._decision
        answered = table == EXACT and key in d.unclaimed
        d.forget_reads()  # a write
        layout = rk.table_layout(table)
        if layout.packed:
            raise ValueError(f"the Redis store packs the records of the {table} table: they are put, not claimed")
        shard, field = self._slot(table, key)
        value = layout.stored(bytes(value))
        if answered:
            # The hold read this entry absent: the claim goes with the release (in its MULTI),
            # saving a round trip. Another process that claims the same text in between wins,
            # and this decision keeps a cluster of its own for it: a provisional extra copy,
            # which settling merges.
            d.queued.append(([("HSETNX", shard, field, value)], True, None))
            return None
        current = self.client.fcall("sdd_exact_claim", 1, shard, field, value)
        return None if current is None else layout.read(bytes(current))

    def set_members(self, name: str, owner: str) -> Iterator[tuple[str, bytes]]:
        if name == ALIASES and self._waiting:
            self.send_waiting()
        rows = self._hash(self._set_key(name, owner))
        for member in sorted(rows):
            yield member.decode("utf-8", "surrogatepass"), rows[member]

    # -- metadata -----------------------------------------------------------
    def get_meta(self, name: str) -> Any:
        raw = self.client.hget(self._meta_key(), name)
        return json.loads(raw) if raw is not None else None

    def put_meta(self, name: str, value: Any) -> None:
        self.client.hset(self._meta_key(), name, json.dumps(value, sort_keys=True))

    def put_meta_if_absent(self, name: str, value: Any) -> Any:
        current = self.client.fcall("sdd_exact_claim", 1, self._meta_key(), name, json.dumps(value, sort_keys=True))
        return None if current is None else json.loads(current)

    def increment_meta(self, name: str) -> int:
        return int(self.client.hincrby(self._meta_key(), name, 1))

    # -- frontier -----------------------------------------------------------
    def frontier_mark(self, key: str, run: int, url: str) -> tuple[int, str] | None:
        bucket, rid = rk.frontier_slot(self.prefix, key)
        previous, first_url = self._carrying(
            "FCALL", "sdd_frontier_mark_url", 2, bucket, self._first_urls_key(bucket), run, rid, url
        )
        return self._marked(key, url, int(previous), first_url)

    def _marked(self, key: str, url: str, previous: int, first_url: bytes | None) -> tuple[int, str] | None:
        if previous == 0:
            return None
        if first_url is None:
            record = self.get_url(key)
            first = record.url if record is not None else url
        else:
            first = first_url.decode("utf-8", "surrogatepass")
        return int(previous), first

    def frontier_mark_owing(self, key: str, run: int, url: str, owe: OweOffer) -> tuple[int, str] | None:
        if not self.fn.fused:
            return super().frontier_mark_owing(key, run, url, owe)  # two slots on a cluster: two calls
        return self._marked_owing(key, url, owe, self._carrying(*self._mark_owe_command(key, run, url, owe)))

    def frontier_mark_many(
        self, run: int, entries: list[tuple[str, str, OweOffer]]
    ) -> list[tuple[int, str] | None]:
        if not self.fn.fused or len(entries) < 2:
            return super().frontier_mark_many(run, entries)
        pipe = self.client.pipeline(transaction=False)
        waiting = self._queue_waiting(pipe)  # the writes that wait go first, in the same round trip
        for key, url, offer in entries:
            pipe.execute_command(*self._mark_owe_command(key, run, url, offer))
        replies = pipe.execute(raise_on_error=False)
        # a mark the server refused (full) fails the call, but the requests owed by the marks
        # before it are held all the same: this process hands them over when it closes
        answers = [self._marked_owing(key, url, offer, reply)
                   for (key, url, offer), reply in zip(entries, replies[waiting:]) if not isinstance(reply, Exception)]
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return answers

    def _mark_owe_command(self, key: str, run: int, url: str, owe: OweOffer) -> tuple:
        bucket, rid = rk.frontier_slot(self.prefix, key)
        held, deadlines = rk.pending_keys(self.prefix, owe.pending_id)
        return ("FCALL", "sdd_frontier_mark_owe", 5, bucket, self._first_urls_key(bucket), held, deadlines,
                self._slot(URL, key)[0], run, rid, url, owe.pending_id, self._writer, self.lease_ms, owe.blob, key)

    def _marked_owing(self, key: str, url: str, owe: OweOffer, reply: list) -> tuple[int, str] | None:
        previous, first_url, owed, recorded = reply
        if int(owed):
            self._hold(owe.pending_id)
            owe.owed = True
            owe.recordless = not int(recorded)
        return self._marked(key, url, int(previous), first_url)

    def frontier_peek(self, entries: Iterable[tuple[str, str]]) -> dict[str, tuple[int, str]]:
        # one round trip: a read per bucket, and the URL record of every key (the first URL of a
        # key already recorded is its record's, the frontier's copy having gone)
        urls = dict(entries)
        if not urls:
            return {}
        by_bucket: dict[str, list[tuple[str, bytes]]] = {}
        for key in urls:
            bucket, rid = rk.frontier_slot(self.prefix, key)
            by_bucket.setdefault(bucket, []).append((key, rid))
        pipe = self.client.pipeline(transaction=False)
        counts = self._queue_waiting(pipe)  # the writes that wait go in the same round trip
        for bucket, rids in by_bucket.items():
            pipe.fcall("sdd_frontier_peek", 2, bucket, self._first_urls_key(bucket), *(rid for _, rid in rids))
        for key in urls:
            pipe.hget(*self._slot(URL, key))
        replies = pipe.execute()[counts:]
        records = dict(zip(urls, replies[len(by_bucket) :]))
        answers: dict[str, tuple[int, str]] = {}
        for rids, states in zip(by_bucket.values(), replies):
            for (key, _), (previous, first_url) in zip(rids, states):
                if int(previous) == 0:
                    continue
                if first_url is not None:
                    first = first_url.decode("utf-8", "surrogatepass")
                elif records[key] is not None:
                    first = UrlRecord.from_json(records[key], key).url
                else:
                    first = urls[key]  # as frontier_mark answers a key with neither
                answers[key] = (int(previous), first)
        return answers

    def record_variants(self, variants: Iterable[tuple[str, str, float, str]]) -> None:
        # Each count is one server-side step (no read, no lost update); a variant's alias is
        # written with its first count by this process (a variant keeps its key: keys follow
        # from the URL). They wait for send_waiting(), which the crawl calls once the links of
        # a page are checked, or for the next round trip (a page's read ahead): one round trip
        # for a page's variants. They are in before any batch that follows them (the page's
        # settle among them), so a process killed in between leaves the page owed, and its
        # links add them again when it is fetched again.
        calls: list[tuple] = []
        for url, key, seen_at, reason in variants:
            if self._variant_aliases.get(url) != key:
                calls.append(("HSET", self._set_key(ALIASES, key), url, b"url_variant"))
                self._variant_aliases[url] = key
            calls.append(
                ("FCALL", "sdd_variant_count", 1, self._slot(VARIANT, url)[0],
                 url, json.dumps(key), json.dumps(seen_at), json.dumps(reason))
            )  # fmt: skip
        while len(self._variant_aliases) > VARIANT_ALIASES_KEPT:
            self._variant_aliases.popitem(last=False)
        with self._waiting_lock:
            self._waiting += calls
            full = len(self._waiting) >= WAITING_MAX
        if full:
            self.send_waiting()

    def _queue_waiting(self, pipe) -> int:
        """Queue the writes that wait on ``pipe``; returns how many replies they take."""
        waiting = self._take_waiting()
        for call in waiting:
            pipe.execute_command(*call)
        return len(waiting)

    def _take_waiting(self) -> list[tuple]:
        with self._waiting_lock:
            waiting, self._waiting = self._waiting, []
            self._behind = False
        return waiting

    def send_waiting(self) -> None:
        if not self._waiting:
            return
        pipe = self.client.pipeline(transaction=False)
        if self._queue_waiting(pipe):
            pipe.execute()

    def frontier_size(self) -> int:
        return self.fn.frontier_size()

    # -- near-duplicate index -----------------------------------------------
    def simhash_candidates(
        self, scope: str, simhash: int, max_distance: int | None = None
    ) -> Iterator[tuple[int, str]]:
        max_distance = 64 if max_distance is None else max_distance
        d = self._decision
        held, d.settled_near = d.settled_near, None
        if held is not None and held[:3] == (scope, simhash, max_distance):
            settled = held[3]
        else:
            settled = self.fn.near_scan(scope, simhash, max_distance)
        for fp, token in sorted(settled):
            yield fp, token.hex()

    def band_candidates(self, scope: str, bands: Iterable[int]) -> set[str]:
        bands = tuple(bands)
        d = self._decision
        held, d.settled_bands = d.settled_bands, None
        if held is not None and held[0] == scope and held[1] == bands:
            return {token.hex() for token in held[2]}
        pipe = self.client.pipeline(transaction=False)
        for keys, entries in rk.band_calls(self.prefix, scope, bands):
            pipe.fcall("sdd_bands_find", len(keys), *keys, entries)
        return {token.hex() for found in pipe.execute() for _, token in rk.band_found(found)}


def _payload(held: bytes) -> bytes:
    """An owed request as the lease hash keeps it: its holder, a newline, the request."""
    return held.split(b"\n", 1)[1]


def _guard(name: str) -> None:
    method = getattr(RedisStore, name)

    def guarded(self, *args, **kwargs):
        try:
            if self._behind and name not in _CARRIERS:
                self.send_waiting()  # a record this process wrote is in before anything else
            if self._decision.queued and name != "_apply":
                self._flush()  # a read sees this thread's writes
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
_CARRIERS = frozenset({"_apply", "get", "frontier_mark", "frontier_mark_owing", "frontier_mark_many", "frontier_peek",
                       "record_variants",
                       "send_waiting", "hold_pending"})

# every call that reaches the server: a lost connection, once the client's retries with
# backoff have run out, is one StoreConnectionLost naming the store (password hidden), and a
# write refused by a full server one StoreFull
for _name in (
    "_apply", "get", "scan", "put_if_absent", "set_members", "get_meta", "put_meta", "put_meta_if_absent",
    "increment_meta", "frontier_mark", "frontier_mark_owing", "frontier_mark_many", "frontier_peek", "record_variants", "send_waiting", "frontier_size", "simhash_candidates", "band_candidates", "begin_run",
    "claim_pending", "pending_count", "pending_held_elsewhere", "hold_pending", "held_pending",
):
    _guard(_name)
