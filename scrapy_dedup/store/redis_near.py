"""Near-duplicate decisions shared by many processes, spread over a cluster's masters.

One atomic check-and-insert over the four SimHash tables would have to hold the four
buckets at once: on a cluster they are in four slots, on four masters, and on one
server that function blocks everything else while it scans (about 750 decisions/s at
10^8 documents). Instead each decision runs *insert, then order, then check*:

1. **insert**: enter (SimHash, token) as *pending* in its four buckets;
2. **order**: take the next number from one counter (the only shared slot; one INCR);
3. **check**: read the four buckets (their pending entries, then their settled ones: a
   decision that settles between the two reads is seen in one of them) and scan them in
   the client. A *settled* entry (a representative) near enough and confirmed makes this
   document its duplicate. A *pending* entry with a smaller order number is a decision
   still in flight: wait until it settles, then scan again. A pending entry without an
   order number, or with a larger one, is ignored.
4. **settle**: move the entries to *settled* (kept) or remove them (duplicate), then
   end the order number.

Why no two near duplicates X and Y are both kept: say X took the smaller number. Y took
its number after X did, X had inserted before taking its number, and Y scans after taking
its own: so Y finds X, pending or settled, and with a smaller number, and waits for X or
joins it. X never waits for Y. Two entries that were pending without a number in one scan
and still pending in the next took their number after this decision did, so they are
later ones. The outcome is the one of a single process deciding in order-number order;
each bucket is locked only for its own short call, so decisions spread over the masters
holding the buckets.

On one server, which has no slots, each step is one function call over the keys of every
group (``sdd_near_open``: insert, order and read the pending entries; ``sdd_near_close``: settle
and release), where a cluster takes one call per slot group. The argument holds as it is, and
more strongly: nothing runs between a decision's inserts, its order number and its read of the
pending entries.

A process that dies mid-decision leaves a pending entry with a lease; when the lease runs
out, the next decision that waits for it removes it (the page is fetched again through
the requests it had taken). A decision that waits renews its own lease.

"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy_dedup.store import redis_keys as rk
from scrapy_dedup.store.base import DecisionBusy
from scrapy_dedup.store.redis_functions import BandGroup, StoreFunctions

logger = logging.getLogger(__name__)

#: how many times a decision whose lease ran out is taken up again
ATTEMPTS = 3
#: a decision opened with ``wait=False`` that still waits for an earlier one after this long
#: gives up (DecisionBusy): a live decision ends within milliseconds, a dead one holds until its
#: lease runs out, and the caller waits for that without blocking
BUSY_AFTER_S = 0.05


class DecisionReaped(Exception):
    """This decision's lease ran out and another process removed it: decide again."""


@dataclass(slots=True)
class NearHold:
    """A near-duplicate decision held open (:meth:`NearDecisions.open`)."""

    scope: str
    simhash: int
    token: bytes
    order: int
    bands: Sequence[BandGroup]
    #: scans until no earlier decision near it was in flight (1: none was)
    scans: int
    #: (scope, simhash, max distance, settled SimHash entries within it) of its last scan
    settled_near: tuple[str, int, int, set[tuple[int, bytes]]]
    #: tokens in the settled band buckets sharing a band hash, from its last scan
    settled_bands: set[bytes]
    #: replies of the reads sent with its first scan, when that scan was its last; else None
    reads: list | None = None
    #: replies of the commands sent before its first scan (``first``)
    first: list = field(default_factory=list)

    @property
    def entry(self) -> tuple[int, bytes, bool, int]:
        """What settles it: (simhash, token, keep: no, its order number)."""
        return self.simhash, self.token, False, self.order


class NearDecisions:
    def __init__(
        self,
        functions: StoreFunctions,
        *,
        lease_ms: int = 30_000,
        poll_s: float = 0.002,
        max_wait_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.fn = functions
        self.lease_ms = lease_ms
        self.poll_s = poll_s
        self.max_wait_s = max_wait_s
        self.clock = clock
        self.sleep = sleep

    def open(
        self, scope: str, simhash: int, max_distance: int, bands: Sequence[BandGroup] = (), reads: Sequence[tuple] = (),
        first: Sequence[tuple] = (), proceed: Callable[[list], bool] | None = None, wait: bool = True,
    ) -> NearHold | None:
        """Open a near-duplicate decision the caller takes itself, from reads of the store; it
        holds until :meth:`close` (or the call :meth:`close_command` gives has run).

        While it holds, every decision that took an earlier order number and is near this one
        (a SimHash within ``max_distance``, or one of the same LSH band hashes) has finished,
        its writes in the store, and every one that takes a later number waits until it is
        closed: the caller's reads and writes are those of one process deciding in
        order-number order. ``bands``: per band group (one slot), its settled and pending
        hashes and this document's entries (field and band hash of each band)
        (:func:`~scrapy_dedup.store.redis_keys.band_calls` with kinds ``b``, ``bp``). The
        caller writes a kept document's entries itself (as a representative); the pending
        entries only stand for the decision in flight, under a token of its own.

        ``reads``: read commands sent with the first scan (one server only, after the order
        number was taken and the pending entries read): their replies are
        :attr:`NearHold.reads` when that first scan found no earlier decision in flight, so
        that they are what the caller would have read once the hold was open.

        ``first`` (one server only): commands sent before all that in the same round trip (a
        lock the decision takes with its hold); ``proceed`` is given their replies and, if it
        answers False, the decision ends at once, waiting for nobody, and None is returned.
        Their replies are :attr:`NearHold.first`.

        ``wait=False``: when an earlier decision near this one is still in flight after
        :data:`BUSY_AFTER_S`, this one ends, keeping nothing, and raises
        :class:`~scrapy_dedup.store.base.DecisionBusy`.
        """
        fn = self.fn
        token = os.urandom(8)
        for attempt in range(ATTEMPTS):
            # the pending band entries go in with the SimHash ones, before the order number is
            # taken; the first scan (buckets and band lookups) rides in the same round trip
            order, (settled, in_flight), found, read, head = fn.near_add_order_read(
                scope, [(simhash, token)], self.lease_ms, max_distance, bands, reads, first if attempt == 0 else ()
            )
            if attempt == 0:
                first_replies = head
                if proceed is not None and not proceed(head):
                    fn.near_settle_then_release_many(scope, [(simhash, token, False, order)], bands)
                    return None
            band_in_flight, settled_bands = self._band_tokens(found)
            try:
                scans, settled_near, settled_bands = self._await_earlier(
                    scope, simhash, token, order, max_distance, bands, (settled[0], in_flight[0], band_in_flight,
                                                                        settled_bands), None if wait else BUSY_AFTER_S
                )
                break
            except DecisionReaped:
                fn.near_settle_then_release_many(scope, [(simhash, token, False, order)], bands)
            except DecisionBusy:
                fn.near_settle_then_release_many(scope, [(simhash, token, False, order)], bands)
                raise
        else:
            raise DecisionReaped("a near-duplicate decision was reaped three times: leases are too short")
        return NearHold(scope, simhash, token, order, bands, scans, (scope, simhash, max_distance, settled_near),
                        settled_bands, read if scans == 1 else None, first_replies)

    def close(self, held: NearHold) -> None:
        """End a decision opened by :meth:`open`: its pending entries out, its order number released."""
        if not self.fn.near_settle_then_release_many(held.scope, [held.entry], held.bands)[0]:
            self._outlived()

    def close_command(self, held: NearHold) -> tuple[tuple, Callable[[Any], None]]:
        """One server: :meth:`close` as one command, to send with others (after the decision's
        writes), and the function to call with its reply."""
        command, decode = self.fn.near_close_command(held.scope, [held.entry])

        def check(reply: Any) -> None:
            if not decode(reply)[0]:
                self._outlived()

        return command, check

    def _outlived(self) -> None:
        # held longer than its lease: a later decision may have gone on without it
        logger.warning("a near-duplicate decision outlived its lease of %d ms", self.lease_ms)

    def _await_earlier(
        self, scope, simhash, token, order, max_distance, bands, first_scan, busy_after_s: float | None = None
    ) -> tuple[int, set[tuple[int, bytes]], set[bytes]]:
        """Wait until no earlier decision near ``simhash`` is in flight; returns how many scans
        it took, and the settled SimHash entries and band tokens of the last.

        ``bands`` as in :meth:`open`: decisions in flight with one of these band hashes count
        as near too. ``first_scan``: (settled, pending, band tokens in flight, settled band
        tokens) read after the order number was taken, for the first round. ``busy_after_s``:
        raise DecisionBusy when an earlier decision is still in flight after that long.
        """
        fn = self.fn
        later: set[bytes] = set()  # pending without an order in one scan and still pending in the next
        unordered: set[bytes] = set()
        started = renewed = self.clock()
        scans = 0
        while True:
            if first_scan is not None:
                settled, pending, band_in_flight, settled_bands = first_scan
                first_scan = None
            else:
                settled, pending, band_in_flight, settled_bands = self._scan(scope, simhash, max_distance, bands)
            scans += 1
            others = {(fp, t) for fp, t in pending if t != token}
            if bands:
                # found by band alone: SimHash unknown (None), so a dead one's entries stay
                # (on a cluster, ignored once its order number is reaped; on one server its
                # band record goes with the number)
                seen = {t for _, t in others} | {token}
                for found in band_in_flight:
                    others.update((None, bytes(t)) for t in found if bytes(t) not in seen)
            later |= {t for _, t in others if t in unordered}
            undecided = [(fp, t) for fp, t in others if t not in later]
            orders = fn.order_get([t for _, t in undecided])
            unordered = {t for (_, t), o in zip(undecided, orders) if o is None}
            earlier = [(fp, t, o) for (fp, t), o in zip(undecided, orders) if o is not None and o[0] < order]
            if not earlier and not unordered:
                return scans, settled, settled_bands
            for fp, t, (their_order, ms_left) in earlier:
                if ms_left < 0 and fn.order_reap(t, their_order):
                    # its process died mid-decision: its entries go, the order number first
                    if fp is not None:
                        fn.near_settle(scope, fp, t, keep=False)
            now = self.clock()
            if earlier and busy_after_s is not None and now - started > busy_after_s:
                raise DecisionBusy(f"an earlier near-duplicate decision is in flight after {busy_after_s} s")
            if now - started > self.max_wait_s:
                raise TimeoutError(f"waited {self.max_wait_s:.0f} s for earlier near-duplicate decisions")
            if earlier:
                if (now - renewed) * 1000 > self.lease_ms / 3:
                    if not fn.order_renew(token, order, self.lease_ms):
                        raise DecisionReaped()
                    renewed = now
                self.sleep(self.poll_s)

    def _scan(self, scope, simhash, max_distance, bands) -> tuple[set, set, list, set[bytes]]:
        """(settled, pending) SimHash entries within ``max_distance``, the band tokens in
        flight and the settled band tokens, read in one round trip."""
        (settled, pending), found = self.fn.near_read(scope, [simhash], max_distance, bands)
        return (settled[0], pending[0], *self._band_tokens(found))

    @staticmethod
    def _band_tokens(found: list) -> tuple[list, set[bytes]]:
        """From the replies of one band lookup per group: the tokens of the decisions in flight
        sharing a band hash (one list per group), and the settled ones (representatives)."""
        settled: set[bytes] = set()
        in_flight = []
        for reply in found:
            pending = []
            for kind, token in rk.band_found(reply):
                if kind == 0:
                    settled.add(token)
                else:
                    pending.append(token)
            in_flight.append(pending)
        return in_flight, settled
