"""What two processes sharing a Redis store hold: owed requests, a URL key's decision, each
tagged with its holder, and recovered by the others once the holder's heartbeat is gone. Each
process is a RedisStore of its own on the same server and key prefix (a real redis-server and a
real 3-master cluster)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
from redis_fixtures import stop_heartbeat

from scrapy_dedup.core.bands import BANDS
from scrapy_dedup.core.records import Cluster, UrlRecord
from scrapy_dedup.store.base import DecisionBusy
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.records import (
    get_cluster,
    get_url,
    has_pending,
    maybe_elsewhere,
    pending_held_elsewhere,
    put_cluster,
    put_pending,
    settle_pending,
)
from scrapy_dedup.store.redis.store import RedisStore

PARAMS = {"test": 1}


def two_processes(url: str, prefix: str, lease_ms: int = 30_000) -> tuple[RedisStore, RedisStore]:
    return (RedisStore(url, PARAMS, prefix=prefix, lease_ms=lease_ms),
            RedisStore(url, PARAMS, prefix=prefix, lease_ms=lease_ms))



def both(near) -> tuple:
    """(SimHash candidates, band candidates) of a near_candidates answer."""
    return near.simhash, near.bands

def crawler_settings(redis_url: str, redis_prefix: str) -> dict:
    """A crawl's settings on the Redis store at ``redis_url``, under ``redis_prefix``, for the
    components built by hand in these tests (extraction in a thread, no log)."""
    return {
        "ADDONS": {"scrapy_dedup.Addon": 500},
        "DEDUP_STORE": redis_url,
        "DEDUP_REDIS_PREFIX": redis_prefix,
        "DEDUP_WORKERS": 0,
        "DEDUP_LOGSTATS_INTERVAL": 0,
        "LOG_ENABLED": False,
    }


def test_a_request_another_process_holds_is_not_claimed_until_it_lets_go(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix)
    try:
        with a.batch() as batch:
            put_pending(batch, "k1", b"request one")
            put_pending(batch, "k2", b"request two")
        assert sorted(a.held_pending()) == ["k1", "k2"]
        assert list(b.claim_pending()) == []  # held by a live process
        assert pending_held_elsewhere(b) == 2 and pending_held_elsewhere(a) == 0
        assert b.get("pending", "k1") == b"request one"  # readers see the request, not its holder
        with a.batch() as batch:
            settle_pending(batch, "k1")
        a.begin_run()
        a.close()  # its heartbeat stops at once: the others recover what it still owes
        assert list(b.claim_pending()) == [("k2", b"request two")]
        assert list(b.claim_pending()) == []  # handed to one process only
        assert b.held_pending() == ["k2"] and b.count("pending") == 1
        with b.batch() as batch:
            settle_pending(batch, "k2")
        assert b.count("pending") == 0 and b.held_pending() == []
    finally:
        b.close()


def test_a_dead_holder_s_requests_are_recovered_once_its_heartbeat_is_gone(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix, lease_ms=1000)
    try:
        with a.batch() as batch:
            put_pending(batch, "k", b"owed")
        time.sleep(1.3)  # longer than a lease: a's heartbeat keeps it alive
        assert list(b.claim_pending()) == []
        stop_heartbeat(a)  # as if it had been killed
        time.sleep(1.1)
        assert list(b.claim_pending()) == [("k", b"owed")]
        assert list(b.claim_pending()) == []  # recovered once: the dead holder is forgotten
        # a process that fetches a request takes it over, whoever owed it
        assert a.hold_pending("k")
        assert a.held_pending() == ["k"] and b.held_pending() == []
        with a.batch() as batch:
            settle_pending(batch, "k")
        # another copy of it (a shared queue's) is owed no more: its outcome is recorded
        assert not b.hold_pending("k")
        assert b.held_pending() == [] and b.count("pending") == 0
    finally:
        a.close()
        b.close()


def _fcalls(store: RedisStore) -> int:
    from scrapy_dedup.store.redis.functions import primaries

    return sum(int(n.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)) for n in primaries(store.client))


def test_fetching_a_request_this_live_process_owes_asks_nothing(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix)
    try:
        a.begin_run()  # its heartbeat runs while it lives
        with a.batch() as batch:
            put_pending(batch, "mine", b"owed by a")
        with b.batch() as batch:
            put_pending(batch, "theirs", b"owed by b")
        before = _fcalls(a)
        assert a.hold_pending("mine")  # nobody can have recovered it: its heartbeat never stopped
        assert _fcalls(a) == before
        # a request another process owes is asked for (and taken over: a fetches it now)
        assert a.hold_pending("theirs")
        assert _fcalls(a) == before + 1
        assert sorted(a.held_pending()) == ["mine", "theirs"] and pending_held_elsewhere(b) == 2
        # settled: its outcome is recorded, a later copy asks again and is not fetched
        with a.batch() as batch:
            settle_pending(batch, "mine")
        assert not a.hold_pending("mine")
        assert _fcalls(a) == before + 2
    finally:
        a.close()
        b.close()


def test_a_process_found_dead_asks_again_and_goes_on_as_a_new_holder(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix, lease_ms=600)
    try:
        with a.batch() as batch:
            put_pending(batch, "k", b"owed")
            put_pending(batch, "k2", b"owed too")
        dead = a._id
        stop_heartbeat(a)  # a stands still longer than a lease (stopped, swapped out)
        time.sleep(0.8)
        assert sorted(b.claim_pending()) == [("k", b"owed"), ("k2", b"owed too")]
        with b.batch() as batch:
            settle_pending(batch, "k")
        # a still counts them as its own, but its heartbeat is refused: it asks, as a new holder
        assert not a.hold_pending("k")  # done elsewhere
        assert a._id != dead
        assert a.hold_pending("k2")  # still owed: a fetches it now
        assert a.held_pending() == ["k2"] and b.held_pending() == []
    finally:
        a.close()
        b.close()


def test_a_url_key_is_decided_by_one_process_at_a_time(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix)
    try:
        with a.hold_document("k"):
            # the store never waits: the other process is told, having read and written nothing
            started = time.monotonic()
            with pytest.raises(DecisionBusy), b.hold_document("k"):
                pass
            assert time.monotonic() - started < 1
            with b.hold_document("other"):  # another key is free
                pass
        with b.hold_document("k"):  # released: the other process decides it now
            pass
    finally:
        a.close()
        b.close()


def test_a_dead_holder_s_decision_lock_is_dropped_when_it_is_recovered(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix, lease_ms=300)
    try:
        held = a.hold_document("k")
        held.__enter__()  # a dies mid-decision
        stop_heartbeat(a)
        time.sleep(0.5)
        # the lock has no expiry of its own: it goes with its holder, once recovered
        with pytest.raises(DecisionBusy), b.hold_document("k"):
            pass
        assert list(b.claim_pending()) == []
        with b.hold_document("k"):
            pass
        held.__exit__(None, None, None)  # a's release, late: it deletes nothing of b's
    finally:
        a.close()
        b.close()


def test_one_process_backends_hold_nothing():
    store = MemoryStore("mem", PARAMS)
    with store.hold_document("k"), store.hold_document("k"):
        pass
    with store.batch() as batch:
        put_pending(batch, "k", b"owed")
    store.begin_run()  # the next process: it takes over what the one before left owed
    with store.batch() as batch:
        put_pending(batch, "k2", b"owed later")  # its own: in flight, never claimed
    assert not store.shared and list(store.claim_pending()) == [("k", b"owed")]
    assert list(store.claim_pending()) == []
    assert pending_held_elsewhere(store) == 0 and store.held_pending() == ["k", "k2"]
    # no other process may be about to hold one, nor writes the store
    assert maybe_elsewhere(store, {"k", "k2"}) == set() and store.writing_elsewhere() == 0


def test_a_process_knows_when_others_write_the_store(redis_url, redis_prefix):
    """A crawl settles the store when it closes only when no other process writes it; a
    request it holds may be on its way to another process through a shared queue."""
    a, b = two_processes(redis_url, redis_prefix)
    try:
        a.begin_run()
        assert a.writing_elsewhere() == 0
        b.begin_run()
        assert a.writing_elsewhere() == 1 and b.writing_elsewhere() == 1
        assert maybe_elsewhere(a, {"k"}) == {"k"}
        b.close()
        assert a.writing_elsewhere() == 0  # the last one to close settles
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("command", "done"),
    [("settle", lambda out: out.startswith("settled ")), ("check", lambda out: out.rstrip().endswith("consistent"))],
    ids=["settle", "check"],
)
def test_a_command_refuses_a_store_crawl_processes_write(redis_url, redis_prefix, command, done):
    """`scrapy dedup settle` and `check` of a Redis store a live crawl process writes are refused
    in one line, as a LevelDB store a crawl holds is: settling is the crawl's to do, and `check`
    reads the store in place, where a cluster and its members read a moment apart may disagree
    (a false "inconsistent", exit 1). Once the process is gone they run."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "scrapy", "dedup", command, "--store", redis_url, "--redis-prefix", redis_prefix]
    crawl = RedisStore(redis_url, PARAMS, prefix=redis_prefix)
    try:
        crawl.begin_run()
        refused = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd="/")
    finally:
        crawl.close()
    assert refused.returncode == 1 and refused.stdout == "", refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"scrapy dedup: 1 crawl process(es) write this store now: {command} it once they are done"
    ], refused.stderr
    after = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd="/")
    assert after.returncode == 0 and done(after.stdout), after.stdout + after.stderr


def test_a_link_a_dead_process_marked_but_never_owed_is_fetched_when_checked_again(redis_url, redis_prefix):
    """The dupefilter marks a key, then owes its request: a process killed in between leaves a
    key "seen" in this run that nobody owes. The page that linked to it is still owed, so it is
    parsed again by the process that takes it over; its links carry ``dedup_recheck``."""
    from scrapy import Request, Spider
    from scrapy.utils.misc import build_from_crawler
    from scrapy.utils.test import get_crawler

    from scrapy_dedup.crawl.dupefilter import DedupDupeFilter

    class Site(Spider):
        name = "site"

    crawler = get_crawler(Site, crawler_settings(redis_url, redis_prefix))
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    dupefilter.open()
    state = dupefilter.state
    try:
        url = "http://h/lost"
        key = state.key(url)
        state.frontier.mark(url, key)  # the dead process got this far
        assert dupefilter.request_seen(Request(url))  # an ordinary link: seen in this run
        assert not dupefilter.request_seen(Request(url, meta={"dedup_recheck": True}))
        assert has_pending(state.store, key)  # owed now, by this process
        # owed (or recorded) keys stay seen, checked again or not
        assert dupefilter.request_seen(Request(url, meta={"dedup_recheck": True}))
        known = "http://h/known"
        assert not dupefilter.request_seen(Request(known))
        assert dupefilter.request_seen(Request(known, meta={"dedup_recheck": True}))
    finally:
        state.close()


def test_the_candidates_read_inside_a_hold_are_the_store_s_and_its_own_writes(redis_url, redis_prefix):
    a, b = two_processes(redis_url, redis_prefix)
    aa, bb, cc = "aa" * 8, "bb" * 8, "cc" * 8
    fp = 0x0123_4567_89AB_CDEF
    mine = [(1 << 63) | band << 40 | 7 for band in range(BANDS)]
    theirs = [(1 << 63) | band << 40 | 9 for band in range(BANDS)]
    theirs[6] = mine[6]  # one band hash in common
    try:
        with a.batch() as batch:
            batch.index_near("", 0xFFFF, theirs, aa)
            batch.index_near("", fp ^ 0b101, (), cc)  # distance 2: near
            batch.index_near("", fp ^ 0xFFFF_0000, (), bb)  # distance 16: in a bucket, not near
        with b.hold_document("k"):
            assert both(b.near_candidates("", fp, mine, 3)) == ([(fp ^ 0b101, cc)], {aa})
            with a.batch() as batch:  # another process writes meanwhile (it holds no lock of it)
                batch.unindex_near("", fp ^ 0b101, (), cc)
            assert both(b.near_candidates("", fp, mine, 3)) == ([], {aa})
            assert {t for _, t in b.near_candidates("", fp, (), 16).simhash} == {bb}
            with b.batch() as batch:  # a write of the hold: read back at once
                batch.index_near("", fp, mine, bb)
            assert both(b.near_candidates("", fp, mine, 3)) == ([(fp, bb)], {aa, bb})
            assert a.near_candidates("", None, mine).bands == {aa, bb}  # in before the release
        assert a.near_candidates("other scope", None, mine).bands == set()
    finally:
        a.close()
        b.close()


def test_a_url_record_read_inside_a_hold_is_the_store_s_and_its_own_writes(redis_url, redis_prefix):
    from scrapy_dedup.core.records import UrlRecord

    a, b = two_processes(redis_url, redis_prefix)
    try:
        with a.batch() as batch:
            batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="new"))
        with b.hold_document("http://h/a"):
            assert get_url(b, "http://h/a").status == "new"
            with a.batch() as batch:  # another process writes it meanwhile (outside any hold)
                batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="updated"))
            assert get_url(b, "http://h/a").status == "updated"
            with b.batch() as batch:
                batch.put_url(UrlRecord(key="http://h/a", url="http://h/a", status="gone"))
            assert get_url(b, "http://h/a").status == "gone"
            assert get_url(a, "http://h/a").status == "gone"  # in when its batch exits
        with b.hold_document("http://h/new"):
            assert get_url(b, "http://h/new") is None
    finally:
        a.close()
        b.close()


def _die_mid_batch(url: str, prefix: str) -> None:
    store = RedisStore(url, PARAMS, prefix=prefix, lease_ms=300)
    store.begin_run()
    with store.batch() as batch:
        put_pending(batch, "http://h/p", b"request")
    applied = []
    apply_slot = store.client.pipeline

    def pipeline(*args, **kwargs):
        # the second slot's writes never go: killed between two slots of one batch
        if applied:
            os.kill(os.getpid(), signal.SIGKILL)
        applied.append(True)
        return apply_slot(*args, **kwargs)

    store.client.pipeline = pipeline
    record = UrlRecord(key="http://h/p", url="http://h/p", cluster_id="00000000000000c1", status="new")
    with store.batch() as batch:
        batch.put_url(record)
        put_cluster(batch, Cluster("00000000000000c1", "http://h/p", "http://h/p", 100, 1))


def test_a_batch_a_dead_process_left_half_applied_is_finished_before_its_requests_are_taken_over(
    redis_cluster, redis_prefix
):
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_die_mid_batch, args=(redis_cluster.url, redis_prefix))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    other = RedisStore(redis_cluster.url, PARAMS, prefix=redis_prefix)
    try:
        record, cluster = get_url(other, "http://h/p"), get_cluster(other, "00000000000000c1")
        assert (record is None) != (cluster is None)  # one slot written, the other not
        time.sleep(0.5)  # its lease runs out: it is dead
        assert list(other.claim_pending()) == [("http://h/p", b"request")]
        assert get_url(other, "http://h/p").cluster_id == "00000000000000c1"
        assert get_cluster(other, "00000000000000c1").representative == "http://h/p"
    finally:
        other.close()


def test_a_process_that_joins_a_running_crawl_resumes_nothing_and_says_nothing_of_it(
    redis_url, redis_prefix, caplog
):
    """A process started a moment after another finds the requests that one owes (held by a live
    process): it resumes none of them, and does not log that it resumes an interrupted run. Once
    the first process is gone, the next one to start resumes what it left, and says so."""
    import logging

    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from scrapy_dedup.crawl.state import DedupState

    class Site(Spider):
        name = "site"

    def process() -> DedupState:
        crawler = get_crawler(Site, crawler_settings(redis_url, redis_prefix))
        state = DedupState.of(crawler)
        state.open()
        return state

    first = process()
    joined = later = None
    try:
        url = "http://h/owed"
        first.pending.owe(Request(url), first.key(url))
        joined = process()
        with caplog.at_level(logging.INFO, logger="scrapy_dedup"):
            assert joined.pending_at_start == 1  # owed in the store, by the first process
            assert list(joined.pending.resume()) == []
        assert "resuming" not in caplog.text
        first.close()
        first = None
        joined.close()
        joined = None
        later = process()
        with caplog.at_level(logging.INFO, logger="scrapy_dedup"):
            assert [r.url for r in later.pending.resume()] == [url]
        assert "resuming the pending requests" in caplog.text
    finally:
        for state in (first, joined, later):
            if state is not None:
                state.close()
