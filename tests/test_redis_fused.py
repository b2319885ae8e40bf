"""One server, fused calls: each step of a near-duplicate decision is one server-side call over
the keys of every slot group (the per-group calls a cluster needs, folded), and the writes that
wait (a fetch's record, a settle) go with the next call. Checked on a real redis-server against
the per-group calls on the same server: the same outcomes and the same bytes stored."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from scrapy_dedup.core.fingerprints import fingerprint, raw_hash
from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.decide.frontier import Frontier
from scrapy_dedup.decide.index import ContentIndex, Document
from scrapy_dedup.store.base import DecisionBusy, OweOffer
from scrapy_dedup.store.records import (
    claim_exact,
    find_exact,
    frontier_mark,
    get_emitted,
    get_url,
    index_exact,
    pending_held_elsewhere,
    put_emitted,
    settle_pending,
)
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.store import RedisStore

PARAMS = {"test": 1}
def prose(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(5000)}" for _ in range(n))


def doc(url: str, text: str) -> Document:
    return Document(key=url, url=url, fingerprint=fingerprint(text), raw_hash=raw_hash(text.encode()), text=text)


def dump(client, prefix: str) -> dict:
    """Every key of a prefix and its value, named without the prefix; the holders (process
    ids and heartbeats) left out."""
    out = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        name = key.decode().replace(prefix, "P")  # in hash tags too
        if name.startswith("P:h:"):
            continue
        kind = client.type(key).decode()
        out[name] = client.get(key) if kind == "string" else client.hgetall(key) if kind == "hash" else kind
    return out


def per_group(store: RedisStore) -> RedisStore:
    """The store sending the per-group calls a cluster takes, on the same server."""
    store.fn.fused = False
    return store


def crawl_steps(index: ContentIndex) -> list[tuple]:
    """Documents that take every path of a decision: new, exact and near duplicates that take
    over as representatives, one that joins, a short page, a changed representative whose
    cluster promotes a member, a gone page."""
    base, other = prose(1), prose(2)
    steps = [
        index.ingest(doc("http://h/b/first", base)),
        index.ingest(doc("http://h/b/copy", base)),
        index.ingest(doc("http://h/b/near", base + " closing words")),
        index.ingest(doc("http://h/a", base)),
        index.ingest(doc("http://h/other", other)),
        index.ingest(doc("http://h/short", "a short page")),
        index.ingest(doc("http://h/b/near", prose(3))),  # the representative changed: a member is promoted
    ]
    gone = index.forget("http://h/other", 404)
    return [(d.status, d.canonical_url, d.duplicate_of, d.is_representative, d.promoted) for d in steps] + [gone]


def test_a_crawl_s_decisions_and_store_are_those_of_the_per_group_calls(redis_single, redis_prefix):
    fused = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix + ":a")
    grouped = per_group(RedisStore(redis_single.url, PARAMS, prefix=redis_prefix + ":b"))
    try:
        assert fused.fn.fused
        outcomes = []
        for store in (fused, grouped):
            run = store.begin_run()
            outcomes.append(crawl_steps(ContentIndex(store, run, max_distance=3, min_jaccard=0.8, min_tokens=50,
                                                     clock=lambda: 1000.0)))
        assert outcomes[0] == outcomes[1]
        statuses = [step[0] for step in outcomes[0][:-1]]
        # http://h/a has b/first's text, but b/near (longer) represents the cluster by then: near
        assert statuses == ["new", "exact_duplicate", "near_duplicate", "near_duplicate", "new", "new", "updated"]
        assert outcomes[0][6][4] == "http://h/a"  # promoted when the representative changed
        stored, stored_grouped = dump(fused.client, fused.prefix), dump(grouped.client, grouped.prefix)
        assert stored == stored_grouped
        assert any(name.startswith("P:b:") for name in stored)  # band buckets were written
        assert not any(name.startswith("P:d:") for name in stored)  # no lock left
    finally:
        fused.close()
        grouped.close()


class Counting(redis.Connection):
    """A real connection that counts its round trips (one per write to the socket)."""

    round_trips = 0

    def send_packed_command(self, command, check_health=True):
        Counting.round_trips += 1
        return super().send_packed_command(command, check_health)


def _calls(client, command: str) -> int:
    """How many ``command`` calls the server has run (its command statistics)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _fcalls(client) -> int:
    return _calls(client, "fcall")


def _counted(store: RedisStore) -> None:
    pool = store.client.connection_pool
    pool.disconnect()
    pool.reset()
    pool.connection_class = Counting


def test_a_new_page_s_writes_are_one_transaction_inside_its_lock(redis_single, redis_prefix):
    store = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    try:
        index = ContentIndex(store, store.begin_run(), max_distance=3, min_jaccard=0.8, min_tokens=50)
        index.ingest(doc("http://h/warm", prose(10)))
        calls, locks, transactions = _fcalls(store.client), _calls(store.client, "hsetnx"), _calls(store.client, "exec")
        decision = index.ingest(doc("http://h/new", prose(11)))
        assert decision.status == "new"
        assert _calls(store.client, "hsetnx") == locks + 1  # the lock
        assert _calls(store.client, "exec") == transactions + 1  # the decision's batch, whole
        # a band lookup per band group; the exact claim; in the batch an entry per SimHash table
        # and band group, the MinHash signature's put; the release
        assert _fcalls(store.client) - calls == rk.BAND_GROUPS + 1 + rk.BLOCKS + rk.BAND_GROUPS + 1 + 1
        assert not any(store.client.hlen(rk.decision_shard(store.prefix, s)) for s in range(rk.LOCK_SHARDS))
    finally:
        store.close()


def test_an_unchanged_page_reads_no_candidates(redis_single, redis_prefix):
    store = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    try:
        index = ContentIndex(store, store.begin_run(), max_distance=3, min_jaccard=0.8, min_tokens=50)
        text = prose(12)
        assert index.ingest(doc("http://h/page", text)).status == "new"
        for recalled in (False, True):
            # the same page again, unchanged (one whose body was seen before is recalled): its
            # URL record decides it, and the release is its one function call
            page = doc("http://h/page", text)
            page.recalled = recalled
            calls = _fcalls(store.client)
            assert index.ingest(page).status == "unchanged"
            assert _fcalls(store.client) - calls == 1
    finally:
        store.close()


@contextmanager
def _two_processes(url: str, prefix: str) -> Iterator[tuple[RedisStore, RedisStore]]:
    """Two stores on one prefix, as two crawl processes open it."""
    store, other = RedisStore(url, PARAMS, prefix=prefix), RedisStore(url, PARAMS, prefix=prefix)
    try:
        yield store, other
    finally:
        store.close()
        other.close()


def test_a_lock_held_elsewhere_makes_the_decision_busy_at_once(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (store, other):
        index = ContentIndex(store, store.begin_run(), max_distance=3, min_jaccard=0.8, min_tokens=50)
        page = doc("http://h/contended", prose(13))
        with other.hold_document("http://h/contended"):
            started = time.monotonic()
            with pytest.raises(DecisionBusy):  # the store never waits: the crawl tries again
                index.ingest(page)
            assert time.monotonic() - started < 1
            assert get_url(store, "http://h/contended") is None  # nothing written
        assert index.ingest(page).status == "new"


def test_a_claim_inside_a_hold_is_the_server_s_answer_at_once(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (store, other):
        claim_exact(other, "", "d" * 16, "cd" * 8)  # another process's text, claimed before the hold
        with store.hold_document("k"):
            assert claim_exact(store, "", "e" * 16, "ef" * 8) is None  # founded by this process
            assert find_exact(other, "", "e" * 16) == "ef" * 8  # in at once, before the release
            assert claim_exact(store, "", "d" * 16, "ef" * 8) == "cd" * 8  # held by another: joined
            assert claim_exact(other, "", "e" * 16, "00" * 8) == "ef" * 8
        assert find_exact(other, "", "d" * 16) == "cd" * 8


def test_writes_inside_a_hold_reach_the_server_when_their_batch_exits(redis_single, redis_prefix):
    mine = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    other = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    try:
        with mine.hold_document("http://h/a"):
            with mine.batch() as batch:
                batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="new"))
            assert get_url(other, "http://h/a").status == "new"  # applied as any batch is
            with pytest.raises(DecisionBusy), other.hold_document("http://h/a"):
                pass  # but the key stays this decision's until the block exits
            # a batch of another thread (the crawl's, beside a decision thread) goes at once too
            thread = threading.Thread(target=lambda: _put(mine, "http://h/b"))
            thread.start()
            thread.join(10)
            assert get_url(other, "http://h/b").status == "new"
            with mine.batch() as batch:
                batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="updated"))
        assert get_url(other, "http://h/a").status == "updated"
        assert not mine.client.hexists(*rk.decision_slot(mine.prefix, "http://h/a"))  # released
    finally:
        mine.close()
        other.close()


def _put(store: RedisStore, key: str) -> None:
    with store.batch() as batch:
        batch.put_url(UrlRecord(key=key, url=key, status="new"))


def _write_in_a_hold_and_die(url, prefix):
    store = RedisStore(url, PARAMS, prefix=prefix, lease_ms=300)
    with store.hold_document("http://h/doomed"):
        with store.batch() as batch:
            batch.put_url(UrlRecord(key="http://h/doomed", url="http://h/doomed", status="new"))
            index_exact(batch, "", "f" * 16, "ab" * 8)
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_decision_killed_inside_its_hold_leaves_its_lock_to_the_recovery(redis_single, redis_prefix):
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_write_in_a_hold_and_die, args=(redis_single.url, redis_prefix))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL
    store = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    try:
        # its batch went whole, as any batch does
        assert get_url(store, "http://h/doomed").status == "new"
        assert find_exact(store, "", "f" * 16) == "ab" * 8
        # the lock has no expiry of its own: it goes with its holder, once recovered
        with pytest.raises(DecisionBusy), store.hold_document("http://h/doomed"):
            pass
        time.sleep(0.5)  # its lease runs out: it is dead
        assert list(store.claim_pending()) == []
        with store.hold_document("http://h/doomed"):
            pass
    finally:
        store.close()


def test_a_new_link_is_marked_and_owed_in_one_round_trip(redis_url, redis_prefix):
    with _two_processes(redis_url, redis_prefix) as (a, b):
        run = a.begin_run()
        assert b.begin_run() == run
        fused = a.fn.fused
        if fused:
            _counted(a)
            a.client.ping()  # the counted connection is made
        trips = Counting.round_trips
        offer = OweOffer("http://h/new", b"the request")
        assert frontier_mark(a, "http://h/new", run, "http://h/new", offer) is None
        assert offer.owed
        if fused:  # one atomic call on one server (on a cluster: the mark, then the owe)
            assert Counting.round_trips - trips == 1
        assert a.get("pending", "http://h/new") == b"the request"
        assert a.held_pending() == ["http://h/new"] and pending_held_elsewhere(b) == 1
        # the same link found by the other process: seen, and nothing owed twice or taken over
        again = OweOffer("http://h/new", b"a copy")
        assert frontier_mark(b, "http://h/new", run, "http://h/new", again) == (run, "http://h/new")
        assert not again.owed
        assert b.get("pending", "http://h/new") == b"the request"
        assert b.held_pending() == [] and pending_held_elsewhere(b) == 1


def test_a_fetch_record_goes_with_the_next_call(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (a, b):
        run = a.begin_run()
        frontier = Frontier(a, run)
        assert frontier.check("http://h/p", "http://h/p") is None
        _counted(a)
        a.client.ping()  # the counted connection is made
        trips = Counting.round_trips
        record = frontier.record_fetch("http://h/p", "http://h/p", 200, '"v1"', None)
        assert Counting.round_trips == trips + 1  # the read of the record; the write waits
        assert get_url(b, "http://h/p") is None  # not sent yet
        # this process reads its own write, in the round trip of the read
        assert get_url(a, "http://h/p") == record
        assert Counting.round_trips == trips + 2
        assert get_url(b, "http://h/p") == record
        # a call that cannot carry it sends it first: nothing reads around it
        frontier.record_fetch("http://h/p", "http://h/p", 200, '"v2"', None)
        assert a.count("pending") == 0
        assert get_url(b, "http://h/p").etag == '"v2"' and get_url(b, "http://h/p").fetch_count == 2
        # and a batch carries it ahead of its own writes, in its transaction
        frontier.record_fetch("http://h/p", "http://h/p", 200, '"v3"', None)
        trips = Counting.round_trips
        with a.batch() as batch:
            put_emitted(batch, "http://h/p", "c" * 32)
        assert Counting.round_trips == trips + 1
        assert get_url(b, "http://h/p").etag == '"v3"' and get_emitted(b, "http://h/p") == "c" * 32
        # a decision's lock reads the record with the write ahead of it
        frontier.record_fetch("http://h/p", "http://h/p", 200, '"v4"', None)
        index = ContentIndex(a, run, max_distance=3, min_jaccard=0.8, min_tokens=50)
        assert index.ingest(doc("http://h/p", prose(40))).status == "new"
        stored = get_url(b, "http://h/p")
        assert stored.etag == '"v4"' and stored.fetch_count == 4 and stored.has_content


def _fetch_and_die(url: str, prefix: str) -> None:
    store = RedisStore(url, PARAMS, prefix=prefix, lease_ms=300)
    frontier = Frontier(store, store.begin_run())
    offer = OweOffer("http://h/p", b"the request")
    assert frontier.check("http://h/p", "http://h/p", owe=offer) is None and offer.owed
    frontier.record_fetch("http://h/p", "http://h/p", 200, None, None)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_fetch_record_not_sent_when_the_process_dies_is_fetched_again(redis_single, redis_prefix):
    # killed before its next call: the fetch is not recorded, and its request is still owed
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_fetch_and_die, args=(redis_single.url, redis_prefix))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    time.sleep(0.5)  # its heartbeat stopped a lease ago: it is dead
    b = RedisStore(redis_single.url, PARAMS, prefix=redis_prefix)
    try:
        assert get_url(b, "http://h/p") is None
        assert list(b.claim_pending()) == [("http://h/p", b"the request")]
    finally:
        b.close()


def test_a_first_fetch_of_a_key_without_a_record_reads_nothing(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (a, b):
        run = a.begin_run()
        frontier = Frontier(a, run)
        # a record written without the frontier (an ingest of an existing corpus, say)
        ingested = UrlRecord(key="http://h/ingested", url="http://h/ingested", cluster_id="c1", status="new")
        with b.batch() as batch:
            batch.put_url(ingested)
        for key in ("http://h/new", "http://h/ingested", "http://h/raced"):
            assert frontier.check(key, key, owe=OweOffer(key, b"request")) is None
        _counted(a)
        a.client.ping()  # the counted connection is made
        trips = Counting.round_trips
        record = frontier.record_fetch("http://h/new", "http://h/new", 200, '"v1"', None)
        assert Counting.round_trips == trips  # nothing to read, and the write waits
        assert record.fetch_count == 1 and record.first_run == run
        # the store told the mark this key has a record: it is read and kept
        kept = frontier.record_fetch("http://h/ingested", "http://h/ingested", 200, None, None)
        assert Counting.round_trips == trips + 1
        assert kept.cluster_id == "c1" and kept.status == "new" and kept.fetch_count == 1
        # another process records the key before this one's write is sent: its record stays
        with b.batch() as batch:
            batch.put_url(UrlRecord(key="http://h/raced", url="http://h/raced", cluster_id="c2", status="new"))
        frontier.record_fetch("http://h/raced", "http://h/raced", 200, None, None)
        a.flush()
        assert get_url(b, "http://h/new") == record
        assert get_url(b, "http://h/ingested") == kept
        assert get_url(b, "http://h/raced").cluster_id == "c2"


def test_a_settle_goes_with_the_next_call(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (a, b):
        run = a.begin_run()
        offer = OweOffer("http://h/p", b"request")
        assert frontier_mark(a, "http://h/p", run, "http://h/p", offer) is None and offer.owed
        _counted(a)
        a.client.ping()  # the counted connection is made
        trips = Counting.round_trips
        with a.batch(later=True) as batch:
            put_emitted(batch, "http://h/p", "c" * 32)
            settle_pending(batch, "http://h/p")
        assert Counting.round_trips == trips
        # another process still finds it owed: a process killed now has it fetched again
        assert pending_held_elsewhere(b) == 1 and get_emitted(b, "http://h/p") is None
        assert get_emitted(a, "http://h/p") == "c" * 32  # read with the writes ahead of it
        assert Counting.round_trips == trips + 1
        assert b.count("pending") == 0 and get_emitted(b, "http://h/p") == "c" * 32


def test_a_read_waits_for_the_writes_another_thread_sends(redis_single, redis_prefix):
    """Writes that wait, queued on one thread and carried by another thread's round trip, are
    in before a read that follows them on the first thread. Without this the read went on a
    connection of its own while the round trip carrying them was on its way, and found nothing:
    a page's record read on the reactor thread while the decision thread sent its fetch."""
    from lost_reply import LostReplyRelay

    with LostReplyRelay(redis_single.port) as relay:
        a = RedisStore(relay.url, PARAMS, prefix=redis_prefix)
        try:
            a.begin_run()
            with a.batch(later=True) as batch:
                put_emitted(batch, "http://h/p", "c" * 32)
            relay.hold = (b"MULTI", 1.0)  # the round trip carrying it arrives a second late
            other = threading.Thread(target=a.get, args=("url", "http://h/other"))
            other.start()
            assert relay.holding.wait(10)
            assert get_emitted(a, "http://h/p") == "c" * 32
            other.join()
        finally:
            a.close()


def test_a_page_s_new_links_are_marked_ahead_in_one_round_trip(redis_single, redis_prefix):
    with _two_processes(redis_single.url, redis_prefix) as (a, b):
        run = a.begin_run()
        assert b.begin_run() == run
        Frontier(b, run).check("http://h/seen", "http://h/seen")  # another process scheduled it
        frontier = Frontier(a, run)
        links = ["http://h/1", "http://h/2", "http://h/seen", "http://h/1"]
        offers = [OweOffer(url, f"request {url}".encode()) for url in links]
        _counted(a)
        a.client.ping()  # the counted connection is made
        trips = Counting.round_trips
        frontier.mark_ahead((url, url, offer) for url, offer in zip(links, offers))
        assert Counting.round_trips == trips + 1
        # each check answers from its mark, without the store; the repeated link is left to
        # its own check, which finds it scheduled now
        assert [frontier.offered(url) is offer for url, offer in zip(links[:3], offers)] == [True] * 3
        assert [frontier.check(url, url) for url in links] == [None, None, "seen", "seen"]
        assert Counting.round_trips == trips + 1
        assert [o.owed for o in offers] == [True, True, False, False]
        assert sorted(a.held_pending()) == ["http://h/1", "http://h/2"]
        assert b.get("pending", "http://h/2") == b"request http://h/2"
        assert frontier.offered("http://h/1") is None  # checked: the offer is the check's
