"""scrapy-redis's scheduler with this extension's dupefilter over one Redis store: the
scheduler builds the dupefilter with from_spider(), and its clear() (when the queue is not
persisted) must leave the shared store alone."""

from __future__ import annotations

import threading
import uuid

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from testing import demo_server, run_crawl  # noqa: F401 - demo_server is a fixture

from scrapy_dedup.crawl.dupefilter import DedupDupeFilter
from scrapy_dedup.store.records import iter_urls
from scrapy_dedup.store.redis.functions import connect
from scrapy_dedup.store.redis.store import RedisStore


def scrapy_redis_settings(url: str, persist: bool) -> dict:
    return {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_PERSIST": persist,
        "REDIS_URL": url,
        "DUPEFILTER_CLASS": "scrapy_dedup.dupefilter.DedupDupeFilter",
        "DEDUP_STORE": url,
    }


def test_from_settings_says_a_crawler_is_needed():
    with pytest.raises(NotConfigured, match="needs the crawler"):
        DedupDupeFilter.from_settings(Settings())


def test_scrapy_redis_scheduler_without_persist_leaves_the_store(demo_server, tmp_path, redis_single):
    name = f"site{uuid.uuid4().hex[:8]}"
    settings = scrapy_redis_settings(redis_single.url, persist=False)
    first = run_crawl(demo_server.url + "/", tmp_path / "a", settings, spider_args={"name": name})
    assert len(first.items) > 10
    assert first.stat("scheduler/enqueued/redis") > 10, "the crawl went through scrapy-redis's queue"
    client = connect(redis_single.url)
    # scrapy-redis flushed its own queue on close; the dedup store is still all there
    assert client.exists(f"{name}:requests") == 0
    with RedisStore.open_existing(redis_single.url, prefix=f"dedup:{name}") as store:
        assert {r.url for r in iter_urls(store)} >= set(first.urls)
    # the next run finds what the first fetched: the pages without links are not fetched again,
    # and those that link are, but none is a new document
    second = run_crawl(demo_server.url + "/", tmp_path / "b", settings, spider_args={"name": name})
    assert second.stat("dedup/url/dropped/fresh") > 0
    assert second.stat("dedup/doc/unchanged") > 10
    assert second.items == []


def test_two_processes_share_the_scrapy_redis_queue_and_the_store(demo_server, tmp_path, redis_single):
    name = f"site{uuid.uuid4().hex[:8]}"
    settings = scrapy_redis_settings(redis_single.url, persist=True)
    start = demo_server.url + "/"
    results = [None, None]

    def crawl(i):
        results[i] = run_crawl(start, tmp_path / f"p{i}", settings, spider_args={"name": name})

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None and r.returncode == 0 for r in results)
    # every page other than the start URL (each process's start request skips the filter) is
    # scheduled once, through the shared queue, and emitted by one process only
    emitted = [item["url"] for r in results for item in r.items if item["url"] != start]
    assert len(emitted) > 10
    assert len(emitted) == len(set(emitted))
    with RedisStore.open_existing(redis_single.url, prefix=f"dedup:{name}") as store:
        assert {r.url for r in iter_urls(store)} >= set(emitted)
    assert sum(r.stat("scheduler/dequeued/redis") for r in results) > 10
    # the shared queue was drained (Redis drops an empty queue's key)
    assert connect(redis_single.url).exists(f"{name}:requests") == 0
