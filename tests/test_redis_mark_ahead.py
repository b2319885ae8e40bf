"""A page's new links marked ahead of their checks on a Redis store, in one round trip: only
when nothing can drop a request between the outermost spider middleware and the dupefilter.
A spider middleware of the project's own that sits outside it, and drops some links, turns it
off: the dropped links are neither marked nor owed, as on LevelDB."""

from __future__ import annotations

import os
import textwrap

from crawl_helpers import process_count_outcome
from testing import demo_server, run_crawl  # noqa: F401 - demo_server is a fixture

from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.redis.store import RedisStore

DROPPING = textwrap.dedent('''
    import zlib

    from scrapy import Request


    class DropSome:
        """Drops every third link, by a hash of its URL: the same ones in every crawl."""

        def process_spider_output(self, response, result, spider=None):
            for element in result:
                if not _dropped(element):
                    yield element

        async def process_spider_output_async(self, response, result, spider=None):
            async for element in result:
                if not _dropped(element):
                    yield element


    def _dropped(element):
        return isinstance(element, Request) and zlib.crc32(element.url.encode()) % 3 == 0
''')


def test_links_are_marked_ahead_on_a_shared_store(demo_server, tmp_path, redis_single, redis_prefix):
    result = run_crawl(demo_server.url + "/", tmp_path / "redis",
                       {"DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": redis_prefix})
    # every page but the start page was reached by a link, each marked ahead of its check
    assert result.stat("dedup/url/marked_ahead") >= result.stat("downloader/response_count") - 1
    with RedisStore.open_existing(redis_single.url, prefix=redis_prefix) as store:
        assert store.count("pending") == 0


def test_an_outer_middleware_of_the_project_turns_marking_ahead_off(
    demo_server, tmp_path, redis_single, redis_prefix, monkeypatch
):
    (tmp_path / "dropping_mw.py").write_text(DROPPING, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    middlewares = {"SPIDER_MIDDLEWARES": {"dropping_mw.DropSome": 5}}
    run_crawl(demo_server.url + "/", tmp_path / "leveldb", middlewares)
    with LevelDBStore.open_existing(str(tmp_path / "leveldb" / "store")) as store:
        expected = process_count_outcome(store)
    result = run_crawl(demo_server.url + "/", tmp_path / "redis",
                       {**middlewares, "DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": redis_prefix})
    assert result.stat("dedup/url/marked_ahead") == 0
    with RedisStore.open_existing(redis_single.url, prefix=redis_prefix) as store:
        # nothing the project's middleware dropped was marked or is owed
        assert store.count("pending") == 0
        assert process_count_outcome(store) == expected
