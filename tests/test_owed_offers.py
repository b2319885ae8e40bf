"""A link marked ahead with one page and reached first through another page's copy of it: the
copy fetched carries the id its key is owed under, so its outcome settles it, on every backend
(the copy that would otherwise be owed by nobody's response is issued again at the end of the
crawl, and its page fetched twice)."""

from __future__ import annotations

import pytest
from scrapy import Request, Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from scrapy_dedup.crawl.dupefilter import DedupDupeFilter
from scrapy_dedup.crawl.owed import META_PENDING
from scrapy_dedup.crawl.pending import PendingSpiderMiddleware
from scrapy_dedup.store.records import has_pending


class Site(Spider):
    name = "site"


@pytest.fixture(params=["leveldb", "redis_single", "redis_cluster"])
def settings(request, tmp_path, redis_prefix):
    base = {"ADDONS": {"scrapy_dedup.Addon": 500}, "DEDUP_WORKERS": 0, "DEDUP_LOGSTATS_INTERVAL": 0,
            "LOG_ENABLED": False}
    if request.param == "leveldb":
        return {**base, "DEDUP_STORE": str(tmp_path / "store")}
    server = request.getfixturevalue(request.param)
    return {**base, "DEDUP_STORE": server.url, "DEDUP_REDIS_PREFIX": redis_prefix}


def test_a_link_marked_ahead_and_fetched_through_another_page_s_copy_is_settled(settings):
    crawler = get_crawler(Site, settings)
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    dupefilter.open()
    state = dupefilter.state
    try:
        links = build_from_crawler(PendingSpiderMiddleware, crawler)
        url = "http://h/page"
        key = state.key(url)
        first, second = Request(url), Request(url)  # the same link, on two pages
        links._mark_ahead([first])  # the first page's new links: marked, and owed with the mark
        assert has_pending(state.store, key)
        # the second page's copy reaches the scheduler first: it is the one fetched
        assert not dupefilter.request_seen(second)
        assert second.meta[META_PENDING] == key
        assert dupefilter.request_seen(first)  # and the first page's copy is seen
        state.pending.close_request(second)  # its response is recorded: nothing is owed any more
        assert not has_pending(state.store, key)
        assert store_pending(state) == []
    finally:
        state.close()


def store_pending(state) -> list[str]:
    return [pending_id for pending_id, _ in state.store.scan("pending")]
