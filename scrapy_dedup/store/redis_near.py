"""Near-duplicate decisions shared by many processes, spread over a cluster's masters.

One atomic check-and-insert over the four SimHash tables would have to hold the four
buckets at once: on a cluster they are in four slots, on four masters, and on one
server that function blocks everything else while it scans (about 750 decisions/s at
10^8 documents). Instead each decision runs *insert, then order, then check*:

1. **insert**: enter (SimHash, token) as *pending* in its four buckets;
2. **order**: take the next number from one counter (the only shared slot; one INCR);
3. **check**: scan the four buckets. A *settled* entry (a representative) near enough
   and confirmed makes this document its duplicate. A *pending* entry with a smaller
   order number is a decision still in flight: wait until it settles, then scan again.
   A pending entry without an order number, or with a larger one, is ignored.
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

A process that dies mid-decision leaves a pending entry with a lease; when the lease runs
out, the next decision that waits for it removes it (the page is fetched again through
the requests it had taken). A decision that waits renews its own lease.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from scrapy_dedup.core.fingerprints import hamming
from scrapy_dedup.store.redis_functions import StoreFunctions

logger = logging.getLogger(__name__)

#: ``confirm(simhash, token)``: whether the candidate is a near duplicate of the document
#: being decided (e.g. MinHash agreement with its representative). Must be symmetric.
Confirm = Callable[[int, bytes], bool]


@dataclass(slots=True)
class NearOutcome:
    #: the token of the representative this document duplicates; None: it was kept
    duplicate_of: bytes | None
    distance: int | None
    order: int
    #: how many scans it took (1 when no earlier decision was in flight)
    scans: int
    #: abandoned decisions of dead processes removed on the way
    reaped: int = 0

    @property
    def kept(self) -> bool:
        return self.duplicate_of is None


class DecisionReaped(Exception):
    """This decision's lease ran out and another process removed it: decide again."""


#: one band group's keys (settled then pending buckets) and its 8-byte band hashes (twice):
#: the arguments of one call to a band function, on one slot
BandGroup = tuple[list[str], list[bytes]]


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
        #: inside :meth:`hold`: tokens in the settled band buckets sharing a band hash
        self.settled_bands: set[bytes] | None = None

    def decide(
        self,
        scope: str,
        simhash: int,
        token: bytes,
        max_distance: int,
        confirm: Confirm | None = None,
    ) -> NearOutcome:
        """Keep ``(simhash, token)`` as a representative, or name the one it duplicates."""
        for _attempt in range(3):
            try:
                return self._decide_once(scope, simhash, token, max_distance, confirm)
            except DecisionReaped:
                continue
        raise DecisionReaped("a near-duplicate decision was reaped three times: leases are too short")

    def _decide_once(self, scope, simhash, token, max_distance, confirm) -> NearOutcome:
        order = self.fn.near_add_then_order(scope, simhash, token, self.lease_ms)
        try:
            match, scans, reaped = self._await_earlier(scope, simhash, token, order, max_distance, confirm, True)
        except DecisionReaped:
            self.fn.near_settle(scope, simhash, token, keep=False)
            raise
        self._settle(scope, simhash, token, order, keep=match is None)
        if match is not None:
            return NearOutcome(match[1], match[0], order, scans, reaped)
        return NearOutcome(None, None, order, scans, reaped)

    @contextmanager
    def hold(
        self, scope: str, simhash: int, max_distance: int, bands: Sequence[BandGroup] = ()
    ) -> Iterator[int]:
        """Hold a near-duplicate decision the caller takes itself, from reads of the store.

        Inside the block every decision that took an earlier order number and is near this
        one (a SimHash within ``max_distance``, or one of the same LSH band hashes) has
        finished, its writes in the store, and every one that takes a later number waits
        until the block has exited: the caller's reads and writes are those of one process
        deciding in order-number order. ``bands``: per band group (one slot), the settled
        and the pending band buckets of this document and its 8-byte band hashes
        (:func:`~scrapy_dedup.store.redis_keys.band_calls` with kinds ``b``, ``bp``). The
        caller writes a kept document's entries itself (as a representative); the pending
        entries only stand for the decision in flight, under a token of its own.

        The last band lookup of the wait reads the settled buckets too: what it found is
        :attr:`settled_bands` inside the block (the representatives sharing a band hash,
        as of the moment no earlier decision near this one was left in flight).
        """
        fn = self.fn
        token = os.urandom(8)
        pending = [self._pending_records(group, token) for group in bands]
        for _attempt in range(3):
            # in before the order number is taken, like the SimHash entries
            self._bands_call("sdd_records_add", pending)
            order = fn.near_add_then_order(scope, simhash, token, self.lease_ms)
            try:
                self._await_earlier(scope, simhash, token, order, max_distance, None, False, bands)
                break
            except DecisionReaped:
                self._bands_call("sdd_records_remove", pending)
                fn.near_settle(scope, simhash, token, keep=False)
        else:
            raise DecisionReaped("a near-duplicate decision was reaped three times: leases are too short")
        try:
            yield order
        finally:
            self.settled_bands = None
            self._bands_call("sdd_records_remove", pending)
            if not fn.near_settle_then_release(scope, simhash, token, False, order):
                # held longer than its lease: a later decision may have gone on without it
                logger.warning("a near-duplicate decision outlived its lease of %d ms", self.lease_ms)

    @staticmethod
    def _pending_records(group: BandGroup, token: bytes) -> tuple[list[str], list[bytes]]:
        keys, hashes = group
        half = len(keys) // 2  # settled keys first, then the pending ones
        return keys[half:], [h + token for h in hashes[half:]]

    def _bands_call(self, function: str, calls: Sequence[tuple[list[str], list[bytes]]]) -> list:
        """One call of a band function per band group (one slot), pipelined."""
        if not calls:
            return []
        pipe = self.fn.client.pipeline(transaction=False)
        for keys, records in calls:
            pipe.fcall(function, len(keys), *keys, *records)
        return pipe.execute()

    def _await_earlier(self, scope, simhash, token, order, max_distance, confirm, match_settled, bands=()):
        """Wait until no earlier decision near ``simhash`` is in flight: (match, scans, reaped).

        With ``match_settled``, a settled entry near enough (and confirmed) ends the wait as
        the match; else the match is always None. ``bands`` as in :meth:`hold`: decisions in
        flight with one of these band hashes count as near too.
        """
        fn = self.fn
        later: set[bytes] = set()  # pending without an order in one scan and still pending in the next
        unordered: set[bytes] = set()
        reaped = scans = 0
        started = renewed = self.clock()
        while True:
            scans += 1
            settled, pending = fn.near_scan(scope, simhash, max_distance)
            if match_settled:
                match = self._closest(simhash, token, settled, confirm)
                if match is not None:
                    return match, scans, reaped
            others = {(fp, t) for fp, t in pending if t != token}
            if bands:
                # found by band alone: SimHash unknown (None), so a dead one's entries stay
                # (ignored once its order number is reaped)
                seen = {t for _, t in others} | {token}
                for found in self._bands_find(bands):
                    others.update((None, bytes(t)) for t in found if bytes(t) not in seen)
            later |= {t for _, t in others if t in unordered}
            undecided = [(fp, t) for fp, t in others if t not in later]
            if confirm is not None:
                undecided = [(fp, t) for fp, t in undecided if confirm(fp, t)]
            orders = fn.order_get([t for _, t in undecided])
            unordered = {t for (_, t), o in zip(undecided, orders) if o is None}
            earlier = [(fp, t, o) for (fp, t), o in zip(undecided, orders) if o is not None and o[0] < order]
            if not earlier and not unordered:
                return None, scans, reaped
            for fp, t, (their_order, ms_left) in earlier:
                if ms_left < 0 and fn.order_reap(t, their_order):
                    # its process died mid-decision: its entries go, the order number first
                    if fp is not None:
                        fn.near_settle(scope, fp, t, keep=False)
                    reaped += 1
            now = self.clock()
            if now - started > self.max_wait_s:
                raise TimeoutError(f"waited {self.max_wait_s:.0f} s for earlier near-duplicate decisions")
            if earlier:
                if (now - renewed) * 1000 > self.lease_ms / 3:
                    if not fn.order_renew(token, order, self.lease_ms):
                        raise DecisionReaped()
                    renewed = now
                self.sleep(self.poll_s)

    def _bands_find(self, bands: Sequence[BandGroup]) -> list:
        """The tokens of the decisions in flight sharing a band hash (one list per band);
        the settled ones found by the same calls are kept in :attr:`settled_bands`."""
        settled: set[bytes] = set()
        in_flight = []
        for (keys, _), found in zip(bands, self._bands_call("sdd_records_find", bands)):
            half = len(keys) // 2
            for tokens in found[:half]:
                settled.update(bytes(t) for t in tokens)
            in_flight.extend(found[half:])
        self.settled_bands = settled
        return in_flight

    @staticmethod
    def _closest(simhash, token, settled, confirm) -> tuple[int, bytes] | None:
        best = None
        for fp, t in sorted(settled, key=lambda e: (hamming(e[0], simhash), e[1])):
            if t == token:
                continue
            if confirm is None or confirm(fp, t):
                best = (hamming(fp, simhash), t)
                break
        return best

    def _settle(self, scope: str, simhash: int, token: bytes, order: int, keep: bool) -> None:
        fn = self.fn
        if not fn.near_settle_then_release(scope, simhash, token, keep, order):
            # reaped while deciding: take back what was settled, decide again
            if keep:
                fn.near_remove(scope, simhash, token)
            fn.near_settle(scope, simhash, token, keep=False)
            raise DecisionReaped()
