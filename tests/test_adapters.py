"""The Scrapy adapters built in-process, with ``scrapy.utils.test.get_crawler``.

Real crawlers, real components and a real store (the in-memory backend, or
LevelDB where a test needs two runs on disk); no crawl and no server.  The
crawl tests cover the same paths end to end through subprocesses.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from scrapy import Request, Spider
from scrapy.core.downloader.middleware import DownloaderMiddlewareManager
from scrapy.core.spidermw import SpiderMiddlewareManager
from scrapy.exceptions import DropItem
from scrapy.http import HtmlResponse
from scrapy.pipelines import ItemPipelineManager
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.reactor import is_asyncio_reactor_installed
from scrapy.utils.test import get_crawler

from scrapy_dedup.crawl.downloadermw import DedupDownloaderMiddleware
from scrapy_dedup.crawl.dupefilter import DedupDupeFilter
from scrapy_dedup.crawl.pipeline import DedupPipeline
from scrapy_dedup.crawl.sources import ItemSource, ItemSources
from scrapy_dedup.crawl.spidermw import DedupSpiderMiddleware
from scrapy_dedup.crawl.state import DedupState
from scrapy_dedup.store.memory import MemoryStore
from scrapy_dedup.store.records import get_meta, get_url

# conftest.py installs it: the pipeline awaits its extraction pool on the asyncio loop
assert is_asyncio_reactor_installed()

TEXT = " ".join(f"word{i % 97} token{i % 13}" for i in range(400))
OTHER = " ".join(f"other{i % 89} thing{i % 11}" for i in range(400))


class Site(Spider):
    name = "site"


@pytest.fixture
def make_crawler(store_path):
    """A configured crawler (the add-on, an in-memory store at ``store_path``), closed after the test."""
    crawlers = []

    def make(**settings):
        crawler = get_crawler(Site, {
            "ADDONS": {"scrapy_dedup.Addon": 500},
            "DEDUP_STORE": store_path,
            "DEDUP_STORE_BACKEND": "scrapy_dedup.store.memory.MemoryStore",
            "DEDUP_WORKERS": 0,
            "DEDUP_LOGSTATS_INTERVAL": 0,
            "LOG_ENABLED": False,
            **settings,
        })
        crawlers.append(crawler)
        return crawler

    yield make
    for crawler in crawlers:
        state = crawler.get_extension(DedupState)
        if state is not None:
            state.close()
    MemoryStore.discard(store_path)


def run(coro):
    return asyncio.get_event_loop().run_until_complete(coro)


def stats(crawler, prefix="dedup/"):
    return {k[len(prefix):]: v for k, v in crawler.stats.get_stats().items() if k.startswith(prefix)}


# -- the shared state -------------------------------------------------------------------


def test_the_state_is_an_extension_opened_and_closed_explicitly(make_crawler):
    crawler = make_crawler()
    state = crawler.get_extension(DedupState)
    assert DedupState.of(crawler) is state
    assert state.store is None  # built with the crawler; nothing opened yet
    state.open()
    store = state.store
    assert store.run == 1 and state.frontier is not None and state.index is not None
    state.open()
    assert state.store is store  # opening again changes nothing
    assert get_meta(store, "url_rules") == state.config.url_rules.to_json()
    state.close()
    assert state.store is None and state.frontier is None and state.index is None


def test_components_listed_by_hand_install_the_state_themselves(make_crawler):
    crawler = make_crawler(ADDONS={}, ITEM_PIPELINES={DedupPipeline: 200})
    assert crawler.get_extension(DedupState) is None
    pipeline = build_from_crawler(DedupPipeline, crawler)
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    assert crawler.get_extension(DedupState) is pipeline.state is dupefilter.state


# -- the dupefilter's drop reasons ------------------------------------------------------


def test_dupefilter_drops_repeats_in_a_run_and_fresh_documents_of_earlier_runs(make_crawler):
    crawler = make_crawler()
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    dupefilter.open()
    first = Request("http://h/doc")
    assert not dupefilter.request_seen(first)
    again = Request("http://h/doc")
    assert dupefilter.request_seen(again)
    assert again.meta["dedup_dropped"] == "seen"
    assert not dupefilter.request_seen(Request("http://h/doc", meta={"dont_dedup": True}))
    # /old was scheduled, answered with a redirect to /new, which the redirect middleware schedules
    old = Request("http://h/old")
    assert not dupefilter.request_seen(old)
    redirected = Request("http://h/new", meta={"redirect_urls": ["http://h/old"], "redirect_reasons": [301]})
    assert not dupefilter.request_seen(redirected)
    state = dupefilter.state
    state.frontier.record_fetch("http://h/doc", state.key("http://h/doc"), 200, None, None)
    for request in (first, old, redirected):  # their outcomes are recorded: none is owed any more
        state.pending.close_request(request)
    # the repeat is answered from what the frontier knows: it marked that key itself
    assert stats(crawler) == {"url/dropped/seen": 1, "url/seen_known": 1, "url/redirect": 1}
    state.close()

    crawler = make_crawler()  # the next run, on the same store
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    dupefilter.open()
    fresh, alias = Request("http://h/doc"), Request("http://h/old")
    assert dupefilter.request_seen(fresh) and fresh.meta["dedup_dropped"] == "fresh"
    assert dupefilter.request_seen(alias) and alias.meta["dedup_dropped"] == "alias"
    assert not dupefilter.request_seen(Request("http://h/unknown"))
    assert stats(crawler) == {"url/dropped/fresh": 1, "url/dropped/alias": 1}


def test_dupefilter_keys_variants_together(make_crawler):
    crawler = make_crawler()
    dupefilter = build_from_crawler(DedupDupeFilter, crawler)
    dupefilter.open()
    assert not dupefilter.request_seen(Request("http://h/a?utm_source=x&id=1"))
    variant = Request("http://h/a;jsessionid=9?id=1&sid=4")
    assert dupefilter.request_seen(variant)
    assert variant.meta["dedup_dropped"] == "seen"


# -- the pipeline's settle and take-over ------------------------------------------------


def page(url, text, **meta):
    body = f"<html><head><title>t</title></head><body><article><p>{text}</p></article></body></html>"
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=Request(url, meta=meta))


def through_spider_mw(crawler, response, item):
    """The item as the spider middleware hands it on (linked to its response)."""
    mw = build_from_crawler(DedupSpiderMiddleware, crawler)
    return list(mw.process_spider_output(response, [item]))[-1]


def open_pipeline(crawler):
    pipeline = build_from_crawler(DedupPipeline, crawler)
    pipeline.open_spider()
    return pipeline


def test_pipeline_drops_duplicates_and_emits_the_first(make_crawler):
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)
    first = run(pipeline.process_item({"url": "http://h/a", "text": TEXT}))
    assert first["dedup"]["status"] == "new" and first["dedup"]["canonical_url"] == "http://h/a"
    with pytest.raises(DropItem, match="exact_duplicate of http://h/a"):
        run(pipeline.process_item({"url": "http://h/b", "text": TEXT}))
    pipeline.close_spider()
    assert stats(crawler) == {"doc/new": 1, "doc/exact_duplicate": 1, "doc/dropped": 1}


def test_a_decision_runs_off_the_reactor_thread_and_waits_for_its_holds(make_crawler):
    """The pipeline decides on a thread of its own; a hold the reactor thread took (a page gone,
    a redirect) keeps it from deciding in the same store until let go, and the reactor runs on."""
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)
    store, key = pipeline.state.store, pipeline.state.key("http://h/a")
    held = store.hold_document(key)
    held.__enter__()  # on this thread, which runs the event loop
    try:
        deciding = asyncio.ensure_future(pipeline.process_item({"url": "http://h/a", "text": TEXT}))
        run(asyncio.sleep(0.3))  # the loop runs meanwhile
        # on this thread the hold would have let it in (a thread holds again inside its own)
        assert not deciding.done() and get_url(store, key) is None
    finally:
        held.__exit__(None, None, None)
    assert run(deciding)["dedup"]["status"] == "new"
    pipeline.close_spider()


def test_what_waits_for_a_decision_runs_once_it_is_done(make_crawler):
    """A page's record written again on the reactor thread (its links) never falls between the
    reads and the writes of its decision on the decision thread; another page's goes at once."""
    import threading

    decisions = open_pipeline(make_crawler()).state.decisions
    release, order = threading.Event(), []

    def decide():
        release.wait(30)
        order.append("decided k")

    deciding = asyncio.ensure_future(decisions.decide("k", decide))
    run(asyncio.sleep(0.1))  # the decision is under way, on its thread
    decisions.after("k", lambda: order.append("links of k"))
    decisions.after("other", lambda: order.append("links of other"))
    assert order == ["links of other"]
    release.set()
    run(deciding)
    assert order == ["links of other", "decided k", "links of k"]
    decisions.after("k", lambda: order.append("links of k again"))  # nothing under way: at once
    assert order[-1] == "links of k again"


def test_pipeline_flags_duplicates_when_asked_to_keep_them(make_crawler):
    crawler = make_crawler(DEDUP_DROP_DUPLICATES=False)
    pipeline = open_pipeline(crawler)
    run(pipeline.process_item({"url": "http://h/a", "text": TEXT}))
    flagged = run(pipeline.process_item({"url": "http://h/b", "text": TEXT}))
    assert flagged["dedup"]["status"] == "exact_duplicate"
    assert flagged["dedup"]["duplicate_of"] == "http://h/a"
    pipeline.close_spider()


def test_pipeline_drops_an_unchanged_page_and_emits_a_take_over(make_crawler):
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)
    first = run(pipeline.process_item({"url": "http://h/a", "text": TEXT}))
    # it left the pipelines: the crawl records that on item_scraped (else a repeat is re-emitted)
    pipeline.state.pending.close_request(None, [pipeline.state.pending.emission(first)])
    with pytest.raises(DropItem, match="unchanged since the last crawl"):
        run(pipeline.process_item({"url": "http://h/a", "text": TEXT}))
    # fetched again because it now represents its cluster: emitted, superseding the gone copy
    response = page("http://h/a", "x", dedup_promoted=True, dedup_supersedes=["http://h/gone"])
    item = through_spider_mw(crawler, response, {"url": "http://h/a", "text": TEXT})
    taken = run(pipeline.process_item(item))
    assert taken["dedup"]["status"] == "new"
    assert taken["dedup"]["supersedes"] == ["http://h/gone"]
    assert taken["dedup"]["canonical_url"] == "http://h/a"
    pipeline.close_spider()
    assert stats(crawler)["doc/new"] == 2


def test_pipeline_extracts_the_text_of_a_plain_item_from_its_response(make_crawler):
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)
    response = page("http://h/a", OTHER)
    item = run(pipeline.process_item(through_spider_mw(crawler, response, {"title": "a"})))
    assert item["dedup"]["status"] == "new"
    assert item["dedup"]["canonical_url"] == "http://h/a"  # the response's URL
    assert "other1" in item["text"]
    pipeline.close_spider()


@pytest.mark.parametrize("drop", [False, True])
def test_the_html_field_leaves_with_the_text_only_when_asked(make_crawler, drop):
    from scrapy import Field, Item

    class PageItem(Item):  # an item with no text field: its HTML is all it carries
        url = Field()
        html = Field()

    crawler = make_crawler(DEDUP_DROP_HTML=drop)
    pipeline = open_pipeline(crawler)
    html = f"<html><body><article><p>{TEXT}</p></article></body></html>"
    item = run(pipeline.process_item({"url": "http://h/a", "title": "a", "html": html}))
    assert "word5" in item["text"] and item["title"] == "a"
    assert ("html" in item) is not drop
    declared = run(pipeline.process_item(PageItem(url="http://h/b", html=html.replace("word", "w"))))
    assert declared["html"] == html.replace("word", "w")  # nothing replaces it: kept
    pipeline.close_spider()


# -- the item -> response link ----------------------------------------------------------


def test_a_link_left_behind_keeps_no_response_alive(make_crawler):
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)  # the store is open, as in a crawl
    state = DedupState.of(crawler)
    response = page("http://h/a", TEXT)
    item = through_spider_mw(crawler, response, {"title": "a"})
    assert len(state.sources) == 1
    gone = weakref.ref(response)
    # the item leaves the chain another way (a later middleware drops it, no signal is sent)
    del response, item
    gc.collect()
    assert gone() is None
    assert state.sources.take({"title": "a"}) is None
    pipeline.close_spider()


def test_the_links_are_bounded():
    sources = ItemSources(limit=3)
    response = page("http://h/a", TEXT)
    items = [{"n": i} for i in range(5)]
    for item in items:
        sources.link(item, ItemSource(response))
    assert len(sources) == 3
    assert sources.take(items[0]) is None  # the oldest links went first
    assert sources.take(items[4]).response is response
    sources.forget(items[3])
    assert len(sources) == 1


# -- the add-on -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "cls", "manager"),
    [
        ("ITEM_PIPELINES", DedupPipeline, ItemPipelineManager),
        ("DOWNLOADER_MIDDLEWARES", DedupDownloaderMiddleware, DownloaderMiddlewareManager),
        ("SPIDER_MIDDLEWARES", DedupSpiderMiddleware, SpiderMiddlewareManager),
    ],
)
def test_a_component_listed_as_a_class_with_the_addon_is_built_once(make_crawler, setting, cls, manager):
    crawler = make_crawler(**{setting: {cls: 300}})
    built = manager.from_crawler(crawler)
    assert sum(isinstance(mw, cls) for mw in built.middlewares) == 1


def test_an_item_passes_the_pipeline_once_when_listed_as_a_class_with_the_addon(make_crawler):
    crawler = make_crawler(ITEM_PIPELINES={DedupPipeline: 300})
    manager = ItemPipelineManager.from_crawler(crawler)
    DedupState.of(crawler).open()
    item = run(manager.process_item_async({"url": "http://h/a", "text": TEXT}))
    # decided twice, the second pass would have found it unchanged and dropped it
    assert item["dedup"]["status"] == "new"
    assert stats(crawler) == {"doc/new": 1}


# -- rel=canonical when the crawl stops -------------------------------------------------


def test_a_page_waiting_for_its_canonical_when_the_crawl_stops_stays_owed(make_crawler):
    import time

    from scrapy_dedup.crawl.pending import LeftPending

    crawler = make_crawler(DEDUP_CANONICAL_TIMEOUT=30)
    pipeline = open_pipeline(crawler)
    assert pipeline.state.canonical_waits.closing() is False  # no engine runs this crawler
    stopping: list[bool] = []
    pipeline.state.canonical_waits.closing = lambda: bool(stopping)  # the engine's state, told here
    head = '<title>t</title><link rel="canonical" href="http://h/c">'
    body = f"<html><head>{head}</head><body><article><p>{TEXT}</p></article></body></html>"
    response = HtmlResponse("http://h/p", body=body.encode(), encoding="utf-8", request=Request("http://h/p"))
    spider_mw = build_from_crawler(DedupSpiderMiddleware, crawler)
    output = list(spider_mw.process_spider_output(response, [{"url": "http://h/p"}]))
    assert [r.url for r in output if isinstance(r, Request)] == ["http://h/c"]  # the target, requested

    async def stop_while_it_waits():
        async def stop():
            await asyncio.sleep(0.3)
            stopping.append(True)  # C is still queued: it will not be fetched any more

        asyncio.ensure_future(stop())
        return await pipeline.process_item(output[-1])

    started = time.monotonic()
    with pytest.raises(LeftPending):
        run(stop_while_it_waits())
    assert time.monotonic() - started < 10  # the stop ended the wait, not its 30 s
    counts = stats(crawler)
    assert counts["canonical/left_owed"] == 1 and counts["doc/left_pending"] == 1
    assert "canonical/timeout" not in counts
    # nothing recorded for P: the next run decides it against its canonical
    assert get_url(pipeline.state.store, pipeline.state.key("http://h/p")) is None
    pipeline.close_spider()


def test_a_page_whose_canonical_is_decided_goes_on_though_the_crawl_then_stops(make_crawler):
    crawler = make_crawler()
    pipeline = open_pipeline(crawler)
    pipeline.state.canonical_waits.closing = lambda: True
    first = run(pipeline.process_item({"url": "http://h/c", "text": TEXT}))
    assert first["dedup"]["status"] == "new"
    head = '<title>t</title><link rel="canonical" href="http://h/c">'
    body = f"<html><head>{head}</head><body><article><p>{TEXT}</p></article></body></html>"
    response = HtmlResponse("http://h/p", body=body.encode(), encoding="utf-8", request=Request("http://h/p"))
    item = through_spider_mw(crawler, response, {"url": "http://h/p", "text": TEXT})
    with pytest.raises(DropItem, match="rel_canonical"):
        run(pipeline.process_item(item))  # C is known: no wait, verified at once
    assert "canonical/left_owed" not in stats(crawler)
    pipeline.close_spider()
