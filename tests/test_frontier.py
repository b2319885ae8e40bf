"""The frontier's decisions against each real store backend (LevelDB in a temporary directory, memory)."""

import pytest

from scrapy_dedup.decide.frontier import Frontier
from scrapy_dedup.store.records import get_url, get_variant, iter_aliases_of, put_pending, settle_pending


@pytest.fixture
def store(backend, store_path):
    with backend(store_path, {"v": 1}) as s:
        s.begin_run()
        yield s


def test_seen_fresh_revisit_and_hub(store):
    clock = [1000.0]
    frontier = Frontier(store, 1, revisit_after=60, clock=lambda: clock[0])
    assert frontier.check("http://h/doc", "http://h/doc") is None
    assert frontier.check("http://h/doc", "http://h/doc") == "seen"
    frontier.record_fetch("http://h/doc", "http://h/doc", 200, '"e1"', None)
    frontier.mark_without_document("http://h/hub", "http://h/hub", "hub")
    frontier.check("http://h/hub", "http://h/hub")
    frontier.record_fetch("http://h/hub", "http://h/hub", 200, None, None)
    frontier.mark_without_document("http://h/hub", "http://h/hub", "hub")
    store.begin_run()
    frontier = Frontier(store, 2, revisit_after=60, clock=lambda: clock[0])
    record = get_url(store, "http://h/doc")
    record.kind = "document"
    with store.batch() as b:
        b.put_url(record)
    assert frontier.check("http://h/doc", "http://h/doc") == "fresh"
    assert frontier.check("http://h/hub", "http://h/hub") is None
    assert frontier.conditional_headers("http://h/doc") == {"If-None-Match": '"e1"'}
    store.begin_run()
    clock[0] += 61
    assert Frontier(store, 3, revisit_after=60, clock=lambda: clock[0]).check("http://h/doc", "http://h/doc") is None


def test_a_key_found_never_scheduled_sends_its_first_request_without_validators(store):
    frontier = Frontier(store, 1)
    assert frontier.check("http://h/new", "http://h/new") is None
    # a record appears meanwhile (another process fetched the page): the first request of a
    # key found never scheduled asks the store nothing, a later one (a retry) reads it
    Frontier(store, 1).record_fetch("http://h/new", "http://h/new", 200, '"e2"', None)
    record = get_url(store, "http://h/new")
    record.kind = "document"
    with store.batch() as b:
        b.put_url(record)
    assert frontier.conditional_headers("http://h/new") == {}
    assert frontier.conditional_headers("http://h/new") == {"If-None-Match": '"e2"'}


def test_a_resumed_job_drops_what_it_fetched_and_fetches_again_what_it_did_not(store):
    # job 1 (run 1) fetched a hub; job 2 (run 2) marked it, fetched a second hub, and stopped
    clock = [1000.0]
    first = Frontier(store, 1, clock=lambda: clock[0])
    for key in ("http://h/a", "http://h/b"):
        first.check(key, key)
        first.record_fetch(key, key, 200, None, None)
        first.mark_without_document(key, key, "hub")
    store.begin_run()
    clock[0] = 2000.0
    second = Frontier(store, 2, first_run=2, job_started=2000.0, clock=lambda: clock[0])
    assert second.check("http://h/a", "http://h/a") is None  # a hub: fetched again by a new job
    assert second.check("http://h/b", "http://h/b") is None
    second.record_fetch("http://h/b", "http://h/b", 200, None, None)
    store.begin_run()
    resumed = Frontier(store, 3, first_run=2, job_started=2000.0, clock=lambda: clock[0])
    assert resumed.check("http://h/b", "http://h/b") == "seen"  # fetched by the job it goes on with
    assert resumed.check("http://h/a", "http://h/a") is None  # fetched by job 1 only: due again
    # a store whose job an older version began (no start time) fetches both again, as before
    store.begin_run()
    older = Frontier(store, 4, first_run=2, clock=lambda: clock[0])
    assert older.check("http://h/b", "http://h/b") is None


def test_an_error_is_asked_again_a_page_is_not(store):
    # a server error is no answer, and a page gone (404, 410) or refused (403, 429) may come back
    frontier = Frontier(store, 1)
    for path, status in (("/busy", 503), ("/gone", 404), ("/removed", 410), ("/refused", 403), ("/page", 200)):
        frontier.check(f"http://h{path}", f"http://h{path}")
        frontier.record_fetch(f"http://h{path}", f"http://h{path}", status, None, None)
    store.begin_run()
    later = Frontier(store, 2)
    assert [later.check(f"http://h{p}", f"http://h{p}") for p in ("/busy", "/gone", "/removed", "/refused")] == [None] * 4
    assert later.check("http://h/page", "http://h/page") == "fresh"


def test_redirect_hops_are_counted_once_and_repointed(store):
    frontier = Frontier(store, 1)
    assert frontier.record_redirect([("http://h/x/", "http://h/x"), ("http://h/x", "http://h/x")], "http://h/y", [301, 301]) == 1
    assert frontier.record_redirect([("http://h/a", "http://h/a")], "http://h/b", [301]) == 1
    assert frontier.record_redirect([("http://h/a", "http://h/a"), ("http://h/b", "http://h/b")], "http://h/c", [301, 302]) == 1
    assert get_url(store, "http://h/a").duplicate_of == "http://h/c"
    assert list(iter_aliases_of(store, "http://h/b")) == []
    assert sorted(u for u, _ in iter_aliases_of(store, "http://h/c")) == ["http://h/a", "http://h/b"]
    assert get_url(store, "http://h/b").http_status == 302


def test_variants_are_recorded_with_their_reason(store):
    frontier = Frontier(store, 1)
    frontier.check("http://h/a", "http://h/a", original="http://h/a?utm_source=x")
    assert frontier.check("http://h/a", "http://h/a", original="http://h/a?gclid=1") == "seen"
    assert get_variant(store, "http://h/a?utm_source=x")["reason"] == "normalized"
    assert get_variant(store, "http://h/a?gclid=1")["reason"] == "seen"


def test_a_key_an_earlier_run_still_owes_is_dropped_as_seen_on_every_backend(store):
    """The crawl issues an owed request again itself (past the dupefilter), so a link to its key
    is dropped, however the page was recorded: one fetch, by the owed request."""
    frontier = Frontier(store, 1)
    for key in ("http://h/never-fetched", "http://h/fetched"):
        assert frontier.check(key, key) is None
    frontier.record_fetch("http://h/fetched", "http://h/fetched", 200, None, None)
    frontier.mark_without_document("http://h/fetched", "http://h/fetched", "hub")  # fetched again on every run
    with store.batch() as b:
        put_pending(b, "http://h/never-fetched", b"request")
        put_pending(b, "http://h/fetched", b"request")
    store.begin_run()
    frontier = Frontier(store, 2)
    assert frontier.check("http://h/never-fetched", "http://h/never-fetched") == "seen"
    assert frontier.check("http://h/fetched", "http://h/fetched") == "seen"
    with store.batch() as b:
        settle_pending(b, "http://h/fetched")
    store.begin_run()
    assert Frontier(store, 3).check("http://h/fetched", "http://h/fetched") is None  # owed no more: a hub


def test_the_spelling_fetched_after_a_mark_ahead_is_never_its_own_variant(store):
    # a page marks its link to the key ahead under one spelling; another page's link to the same
    # key, under another spelling, reaches its check first and is the one fetched
    from scrapy_dedup.store.base import OweOffer

    frontier = Frontier(store, 1)
    key = "http://h/a"
    marked, fetched = "http://h/a;jsessionid=1", "http://h/a?sid=2"
    frontier.mark_ahead([(marked, key, OweOffer(key, b"request"))])
    assert frontier.check(fetched, key) is None
    assert frontier.check(fetched, key) == "seen"
    assert frontier.check(marked, key) == "seen"
    assert get_variant(store, fetched) is None
    assert get_variant(store, marked)["reason"] == "seen"
