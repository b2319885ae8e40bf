"""A reply lost after the server ran the commands: redis-py sends the round trip again, and the
second sending sees the first one's effect. Each write whose answer the crawl reads must take
that for its own, never for another process's (a wait for nobody) or for a page seen before (a
page never fetched). A real redis-server behind a TCP relay that drops the connection instead
of passing a reply back (tests/lost_reply.py)."""

from __future__ import annotations

import multiprocessing
import signal
import time
from contextlib import contextmanager

import pytest
from lost_reply import LostReplyRelay
from testing import demo_server, run_crawl  # noqa: F401 - demo_server is a fixture

from scrapy_dedup.store.base import DecisionBusy, OweOffer
from scrapy_dedup.store.redis.store import RedisStore

PARAMS = {"test": 1}


@contextmanager
def one_node_cluster(directory):
    """A relay in front of a cluster of one master holding every slot, which tells its clients to
    connect through the relay (``cluster-announce-port``): every connection goes through it."""
    import redis
    from redis_servers import RedisServer

    relay = LostReplyRelay(0)
    node = RedisServer(directory, cluster=True, extra=("--cluster-announce-port", str(relay.port))).start()
    relay.upstream_port = node.port
    try:
        with relay, redis.Redis(port=node.port) as admin:
            admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            deadline = time.monotonic() + 30
            while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO") and time.monotonic() < deadline:
                time.sleep(0.05)
            yield relay
    finally:
        node.stop()


@pytest.fixture(params=["single", "cluster"])
def relay(request, tmp_path):
    """A relay in front of a real server, then of a real cluster."""
    if request.param == "single":
        with LostReplyRelay(request.getfixturevalue("redis_single").port) as relay:
            yield relay
    else:
        with one_node_cluster(tmp_path / "node") as relay:
            yield relay


@pytest.fixture
def relayed(relay, redis_prefix):
    """(a store reached through the relay, another process's store, the relay); on a cluster
    both go through the relay, which loses only the reply it is armed for."""
    a = RedisStore(relay.url, PARAMS, prefix=redis_prefix)
    b = RedisStore(relay.url, PARAMS, prefix=redis_prefix)
    try:
        yield a, b, relay
    finally:
        a.close()
        b.close()


def test_a_decision_lock_whose_reply_was_lost_is_held_by_its_retry(relayed):
    """Without this the crawl waited 120 s for another process that was itself, then dropped
    the page undecided (a server restarted with its data mid-crawl)."""
    a, b, relay = relayed
    a.begin_run()
    relay.armed = b"HSETNX"
    with a.hold_document("k"):
        assert relay.lost == 1  # taken, the reply lost, and sent again
        with pytest.raises(DecisionBusy), b.hold_document("k"):
            pass
    with b.hold_document("k"):  # a released it
        with pytest.raises(DecisionBusy), a.hold_document("k"):
            pass  # another live holder's lock stays another's


@pytest.mark.parametrize("relay", ["single"], indirect=True)  # one call marks and owes on one server only
def test_a_link_marked_and_owed_by_a_round_trip_whose_reply_was_lost_is_fetched(relayed):
    a, b, relay = relayed
    run = a.begin_run()
    offer = OweOffer("k", b"the request")
    relay.armed = b"sdd_frontier_mark_owe"
    assert a.frontier_mark_many(run, [("k", "http://h/k", offer)]) == [None]  # new: it is fetched
    assert relay.lost == 1
    assert offer.owed and a.held_pending() == ["k"]
    # a key another process marked and owes in this run stays seen
    other = OweOffer("j", b"another request")
    assert b.frontier_mark_many(run, [("j", "http://h/j", other)]) == [None]
    relay.armed = b"sdd_frontier_mark_owe"
    mine = OweOffer("j", b"another request")
    assert a.frontier_mark_many(run, [("j", "http://h/j", mine)]) == [(run, "http://h/j")]
    assert relay.lost == 2 and not mine.owed and a.held_pending() == ["k"]


@pytest.mark.parametrize("relay", ["single"], indirect=True)  # one round trip marks and owes several
def test_links_marked_by_a_round_trip_sent_in_part_are_fetched(relayed):
    """The round trip is sent in two pieces, the second too large for the sockets' buffers: the
    server runs the first mark, and the connection drops while the second is being sent. Without
    this the send failure was not counted as a reply lost: the second sending took the first
    mark for another's, and its request, owed by this process, was never fetched (the CI crawl
    that lost every 29th reply waited for it until killed)."""
    a, _b, relay = relayed
    run = a.begin_run()
    small, large = OweOffer("k1", b"a request"), OweOffer("k2", b"x" * (16 << 20))
    relay.armed = b"sdd_frontier_mark_owe"
    answers = a.frontier_mark_many(run, [("k1", "http://h/k1", small), ("k2", "http://h/k2", large)])
    assert relay.lost == 1
    assert answers == [None, None] and small.owed and large.owed
    assert sorted(a.held_pending()) == ["k1", "k2"]


def test_a_link_marked_by_a_round_trip_whose_reply_was_lost_is_fetched(relayed):
    a, b, relay = relayed
    run = a.begin_run()
    relay.armed = b"sdd_frontier_mark_url"
    assert a.frontier_mark_many(run, [("k", "http://h/k", None)]) == [None]
    assert relay.lost == 1
    assert b.frontier_mark_many(run, [("k", "http://h/k", None)]) == [(run, "http://h/k")]


def test_a_crawl_that_loses_every_29th_reply_ends_as_one_on_leveldb(demo_server, tmp_path, redis_single, redis_prefix):
    """Every 29th round trip after start-up loses its reply (about 35 of a crawl of the demo
    site, on every kind of command): the crawl ends as one on LevelDB does."""
    from test_redis_crawl import SUMMARY_FIGURES, summary

    expected = summary("--store", str(run_crawl(demo_server.url + "/", tmp_path / "leveldb").out_dir / "store"))
    with LostReplyRelay(redis_single.port, every=29, after=60) as relay:
        settings = {"DEDUP_STORE": relay.url, "DEDUP_REDIS_PREFIX": redis_prefix}
        outcome = run_crawl(demo_server.url + "/", tmp_path / "redis", settings, check=False, timeout=240)
    assert relay.lost > 20
    assert outcome.stat("finish_reason") == "finished", outcome.log[-3000:]
    assert "Traceback" not in outcome.log and " ERROR: " not in outcome.log, outcome.log[-3000:]
    got = summary("--store", redis_single.url, "--redis-prefix", redis_prefix)
    assert {k: got[k] for k in SUMMARY_FIGURES} == {k: expected[k] for k in SUMMARY_FIGURES}


def test_requests_claimed_by_a_round_trip_whose_reply_was_lost_are_handed_over(relayed, redis_prefix):
    """Without this a dead process's requests were tagged with the live one that claimed them,
    which never knew it: nobody fetched them, and the crawl waited for their holder."""
    from scrapy_dedup.store.records import put_pending
    from scrapy_dedup.store.redis import keys as rk

    a, b, relay = relayed
    b.begin_run()
    with b.batch() as batch:
        put_pending(batch, "k1", b"one")
        put_pending(batch, "k2", b"two")
    mine = OweOffer("k3", b"three")  # a request a owes itself: it is not handed over again
    assert a.frontier_mark_many(a.begin_run(), [("k3", "http://h/k3", mine)]) == [None]
    b.close()  # its heartbeat stops now: the others recover what it owed
    relay.armed = rk.pending_key(redis_prefix, "k1").encode()
    assert sorted(a.claim_pending()) == [("k1", b"one"), ("k2", b"two")]
    assert relay.lost == 1
    assert sorted(a.held_pending()) == ["k1", "k2", "k3"]


def test_batches_claimed_by_a_round_trip_whose_reply_was_lost_are_finished(tmp_path, redis_prefix):
    """On a cluster, a dead process's journalled batch is finished before its requests are taken
    over; the claim that hands it over lost its reply: the batch is finished all the same."""
    from test_redis_holds import _die_mid_batch

    from scrapy_dedup.store.records import get_cluster, get_url

    with one_node_cluster(tmp_path / "node") as relay:
        proc = multiprocessing.get_context("fork").Process(target=_die_mid_batch, args=(relay.url, redis_prefix))
        proc.start()
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        other = RedisStore(relay.url, PARAMS, prefix=redis_prefix)
        try:
            assert (get_url(other, "http://h/p") is None) != (get_cluster(other, "00000000000000c1") is None)
            time.sleep(0.5)  # its lease runs out: it is dead
            relay.armed = other._journal_key().encode()
            assert list(other.claim_pending()) == [("http://h/p", b"request")]
            assert relay.lost == 1
            assert get_url(other, "http://h/p").cluster_id == "00000000000000c1"
            assert get_cluster(other, "00000000000000c1").representative == "http://h/p"
            assert other.client.hlen(other._journal_key()) == 0
        finally:
            other.close()
