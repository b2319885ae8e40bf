"""The frontier's checks and variant counts, on every real store backend, and what they cost a
shared store: keys scheduled in this run dropped without a store call, new keys marked
atomically, variants sent with this process's next call."""

from __future__ import annotations

import pytest
from redis_servers import counting_connection

from scrapy_dedup.decide.frontier import SCHEDULED_KEPT, Frontier
from scrapy_dedup.store.records import get_variant, has_pending, iter_aliases_of, put_pending, settle_pending
from scrapy_dedup.store.redis.store import RedisStore


@pytest.fixture
def store(backend, store_path):
    with backend(store_path, {"v": 1}) as s:
        s.begin_run()
        yield s


def _counted(store: RedisStore):
    counting = counting_connection()
    pool = store.client.connection_pool
    pool.disconnect()
    pool.reset()
    pool.connection_class = counting
    store.client.ping()  # a new connection's handshake is not the calls counted
    counting.commands = counting.round_trips = 0
    return counting


def test_a_second_frontier_answers_what_the_first_marked(store):
    clock = [1000.25]
    frontier = Frontier(store, 1, clock=lambda: clock[0])
    assert frontier.check("http://h/a", "http://h/a") is None
    assert frontier.check("http://h/b?x", "http://h/b") is None
    # a second process of the crawl (or this one after forgetting)
    other = Frontier(store, 1, clock=lambda: clock[0])
    assert frontier.check("http://h/c", "http://h/c") is None
    assert other.check("http://h/a", "http://h/a") == "seen"
    clock[0] = 1001.5
    assert other.check("http://h/b", "http://h/b", original="http://h/b?utm_source=1") == "seen"
    assert other.check("http://h/c", "http://h/c") == "seen"
    assert get_variant(store, "http://h/b") == {
        "key": "http://h/b", "first_seen": 1001.5, "last_seen": 1001.5, "count": 1, "reason": "seen"
    }  # fmt: skip
    assert get_variant(store, "http://h/b?utm_source=1")["count"] == 1
    assert dict(iter_aliases_of(store, "http://h/b")) == {
        "http://h/b": "url_variant", "http://h/b?utm_source=1": "url_variant"
    }  # fmt: skip


def test_variant_counts_go_on_from_the_record_with_the_same_fields_on_every_backend(store):
    times = iter([1000.123456, 2000.654321, 3000.5, 4000.0])
    frontier = Frontier(store, 1, clock=lambda: next(times))
    assert frontier.check("http://h/a", "http://h/a", original="http://h/a?gclid=1") is None
    for _ in range(3):
        assert frontier.check("http://h/a", "http://h/a", original="http://h/a?gclid=1") == "seen"
    # the same record LevelDB writes: the first sighting's time to the microsecond, the last one's, the count
    assert get_variant(store, "http://h/a?gclid=1") == {
        "key": "http://h/a", "first_seen": 1000.123456, "last_seen": 4000.0, "count": 4, "reason": "seen"
    }  # fmt: skip
    assert dict(iter_aliases_of(store, "http://h/a")) == {"http://h/a?gclid=1": "url_variant"}
    # several variants in one batch, one of them twice: counted in order
    with store.batch(later=True) as batch:
        batch.count_variant("http://h/v", "http://h/a", 5.0, "seen")
        batch.count_variant("http://h/v", "http://h/a", 6.0, "fresh")
    assert get_variant(store, "http://h/v") == {
        "key": "http://h/a", "first_seen": 5.0, "last_seen": 6.0, "count": 2, "reason": "fresh"
    }  # fmt: skip


def test_a_variant_that_points_to_a_new_key_is_listed_under_it(store):
    for key, seen_at in (("http://h/a", 1.0), ("http://h/b", 2.0)):
        with store.batch(later=True) as batch:
            batch.count_variant("http://h/v", key, seen_at, "seen")
    assert get_variant(store, "http://h/v")["key"] == "http://h/b"
    assert get_variant(store, "http://h/v")["count"] == 2
    assert dict(iter_aliases_of(store, "http://h/b")) == {"http://h/v": "url_variant"}


def test_a_frontier_remembers_a_bounded_number_of_keys(store):
    frontier = Frontier(store, 1)
    for i in range(SCHEDULED_KEPT + 10):
        frontier._remember(f"k{i}", f"k{i}")
    assert len(frontier._scheduled) == SCHEDULED_KEPT
    assert "k0" not in frontier._scheduled and f"k{SCHEDULED_KEPT + 9}" in frontier._scheduled


def test_links_seen_before_are_dropped_with_one_round_trip_then_none(redis_single, redis_prefix):
    with RedisStore(redis_single.url, {"v": 1}, prefix=redis_prefix) as first, \
            RedisStore(redis_single.url, {"v": 1}, prefix=redis_prefix) as second:  # fmt: skip
        run = first.begin_run()
        # another process schedules half the links of a page; one of them is recorded already
        marker = Frontier(first, run)
        links = [(f"http://h/p{i}", f"http://h/p{i}") for i in range(40)]
        for url, key in links[:20]:
            assert marker.check(url, key) is None
        marker.record_fetch("http://h/p0", "http://h/p0", 200, None, None)
        frontier = Frontier(second, run)
        counting = _counted(second)
        # a link another process scheduled: one round trip, then known
        assert [frontier.check(url, key) for url, key in links[:20]] == ["seen"] * 20
        assert counting.round_trips == 20
        sent = counting.commands
        assert [frontier.check(url, key) for url, key in links[:20]] == ["seen"] * 20
        assert (counting.commands, counting.round_trips) == (sent, 20), "known links cost no store call"
        assert frontier.known_checks == 20
        # a new link is marked, one round trip each (the mark is atomic: see the next test)
        assert [frontier.check(url, key) for url, key in links[20:]] == [None] * 20
        assert counting.round_trips == 40
        # and then known: its second sighting costs nothing either
        assert frontier.check(*links[30]) == "seen"
        # variants of seen links: they wait, then go in one round trip (the crawl sends them once
        # a page's links are checked), or with the next page's read ahead
        before = counting.round_trips
        for _ in range(3):
            assert frontier.check("http://h/p1", "http://h/p1", original="http://h/p1?utm_source=x") == "seen"
        assert frontier.check("http://h/p2", "http://h/p2", original="http://h/p2?utm_medium=y") == "seen"
        # a link to an #anchor of the page is the page: no variant
        assert frontier.check("http://h/p2", "http://h/p2", original="http://h/p2#top") == "seen"
        assert counting.round_trips == before
        second.flush()
        assert counting.round_trips == before + 1
        assert get_variant(first, "http://h/p1?utm_source=x")["count"] == 3
        assert dict(iter_aliases_of(first, "http://h/p2")) == {"http://h/p2?utm_medium=y": "url_variant"}
        frontier.check("http://h/p1", "http://h/p1", original="http://h/p1?utm_source=x")
        assert frontier.check("http://h/q", "http://h/q") is None  # the variant goes with this mark
        assert counting.round_trips == before + 2
        assert get_variant(first, "http://h/p1?utm_source=x")["count"] == 4
        # what waits is sent before this process reads variants or aliases, and when the store closes
        frontier.check("http://h/p1", "http://h/p1", original="http://h/p1?utm_source=x")
        assert get_variant(second, "http://h/p1?utm_source=x")["count"] == 5
        frontier.check("http://h/p3", "http://h/p3", original="http://h/p3?utm_term=x")
        assert dict(iter_aliases_of(second, "http://h/p3")) == {"http://h/p3?utm_term=x": "url_variant"}
        frontier.check("http://h/p1", "http://h/p1", original="http://h/p1?utm_source=x")
    with RedisStore.open_existing(redis_single.url, prefix=redis_prefix) as store:
        assert get_variant(store, "http://h/p1?utm_source=x")["count"] == 6


def test_a_new_link_checked_by_two_processes_is_fetched_by_one(redis_url, redis_prefix):
    with RedisStore(redis_url, {"v": 1}, prefix=redis_prefix) as a, \
            RedisStore(redis_url, {"v": 1}, prefix=redis_prefix) as b:  # fmt: skip
        run = a.begin_run()
        fa, fb = Frontier(a, run), Frontier(b, run)
        links = [(f"http://h/n{i}", f"http://h/n{i}") for i in range(30)]
        # both check the page's links in turn
        assert [(fa.check(*link), fb.check(*link)) for link in links] == [(None, "seen")] * 30
        # and the other way round: b checks first
        more = [(f"http://h/m{i}", f"http://h/m{i}") for i in range(30)]
        assert [(fb.check(*link), fa.check(*link)) for link in more] == [(None, "seen")] * 30


def test_a_request_settles_only_after_the_variants_its_page_added(redis_url, redis_prefix):
    """The variants a page's links add reach the store before the page's request settles: a
    process killed between the two leaves the page owed, so it is fetched again and its links
    add them again. Read by another process, a settled request means its variants are in."""
    page, variant = "http://h/page", "http://h/a?gclid=1"
    with RedisStore(redis_url, {"v": 1}, prefix=redis_prefix) as crawl, \
            RedisStore(redis_url, {"v": 1}, prefix=redis_prefix) as other:  # fmt: skip
        crawl.begin_run()
        with crawl.batch() as batch:
            put_pending(batch, page, b"request")
        assert has_pending(other, page)
        with crawl.batch(later=True) as batch:  # they wait
            batch.count_variant(variant, "http://h/a", 1.0, "normalized")
        assert get_variant(other, variant) is None
        with crawl.batch(later=True) as batch:  # the page's output is exhausted: it settles
            settle_pending(batch, page)
        # the settle waits behind the variants for this process's next call, or a flush
        assert has_pending(other, page) and get_variant(other, variant) is None
        crawl.flush()
        assert not has_pending(other, page)
        assert get_variant(other, variant)["count"] == 1
