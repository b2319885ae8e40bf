"""Every request the crawl owes is settled, however it leaves the crawl, on every backend.

A request is owed from the moment it passes the frontier until its outcome is recorded. Many
leave the crawl without a response reaching the project: Scrapy's off-site filter (a
downloader middleware that drops requests as they are scheduled), robots.txt, an
``IgnoreRequest`` from any middleware, a middleware that sends another request in its place, a
download that fails after its retries, a callback that raises. The crawl must end "complete"
all the same, with the documents a crawl of the same site on another backend finds.

The spider is the tutorial's (tests/spiders/tutorial_spiders.py): a ``CrawlSpider`` with
``allowed_domains`` and ``Rule(LinkExtractor(), callback=..., follow=True)``, crawling the
site as ``localhost`` while its pages link to ``127.0.0.2``, another host.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from local_site import LocalSite
from test_redis_scrapy_redis import scrapy_redis_settings
from testing import run_crawl

from scrapy_dedup.store.redis.keys import default_prefix
from scrapy_dedup.store.redis.store import RedisStore

SPIDERS_DIR = Path(__file__).parent / "spiders"
PAGES = 12
#: seconds the slow start page takes
SLOW_START = 8


def page(title: str, links: list[str], text: str = "") -> bytes:
    anchors = " ".join(f'<a href="{href}">{href}</a>' for href in links)
    body = text or f"{title}: a page of its own, with words nobody else uses: {title} " * 12
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{body}</p>{anchors}</body></html>".encode()


def closed_port() -> int:
    """A loopback port nothing listens on: a download there fails."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Site:
    """Pages /p0.html ... linked in a ring from / ; every page also links off-site (to 127.0.0.2)
    and to the pages of each way of leaving; served on 127.0.0.1, crawled as localhost."""

    def __init__(self) -> None:
        self.served = LocalSite(self.reply)
        port = self.served.server.server_address[1]
        self.url = f"http://localhost:{port}"
        self.offsite = f"http://127.0.0.2:{port}"
        self.unreachable = f"http://localhost:{closed_port()}"
        #: /slow/: the home page, answered SLOW_START seconds after it is asked for
        self.slow_asked = threading.Event()
        self.slow_answered: float | None = None

    def reply(self, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        path = raw_path.split("?")[0]
        if path == "/robots.txt":
            return 200, {}, b"User-agent: *\nDisallow: /private/\n"
        if path in ("/", "/slow/"):
            if path == "/slow/":
                self.slow_asked.set()
                time.sleep(SLOW_START)
                self.slow_answered = time.monotonic()
            return 200, {}, page("home", [f"/p{i}.html" for i in range(PAGES)] + [f"{self.offsite}/home"])
        match = re.fullmatch(r"/p(\d+)\.html", path)
        if match:
            i = int(match[1])
            return 200, {}, page(f"page {i}", [f"/p{(i + 1) % PAGES}.html", f"{self.offsite}/o{i}"])
        if path.startswith("/way/"):
            # the start page of one way of leaving: its links, and one ordinary page
            return 200, {}, page(path, [*WAYS[path[5:]].links(self), "/plain.html"])
        if path.startswith(("/plain.", "/private/", "/chain/", "/bug/", "/ignored/", "/new/", "/long/")):
            links = [path.replace("/1.html", "/2.html")] if path == "/chain/1.html" else []
            return 200, {}, page(path, links)
        return 404, {}, page("not found", [])

    def close(self) -> None:
        self.served.close()


class Way:
    """One way a request leaves the crawl: the links of its start page, the settings that make
    them leave, the stat that shows they did, and the paths that still end up as documents."""

    def __init__(self, links, settings=None, stat="", documents=(), spider_args=None) -> None:
        self._links = links
        self.settings = settings or {}
        self.stat = stat
        self.documents = set(documents)
        self.spider_args = spider_args or {}

    def links(self, site: Site) -> list[str]:
        return [link.format(offsite=site.offsite, unreachable=site.unreachable) for link in self._links]


WAYS = {
    "offsite": Way(["{offsite}/a.html", "{offsite}/b.html"], stat="offsite/filtered"),
    "robots": Way(["/private/a.html", "/private/b.html"], {"ROBOTSTXT_OBEY": True}, "robotstxt/forbidden"),
    # /chain/1.html is one link from the start page, /chain/2.html two
    "depth": Way(["/chain/1.html"], {"DEPTH_LIMIT": 1}, "request_depth_max", ["/chain/1.html"]),
    "url_length": Way(["/long/" + "x" * 300 + ".html"], {"URLLENGTH_LIMIT": 200}, "urllength/request_ignored_count"),
    "download_error": Way(["{unreachable}/a.html"], {"RETRY_TIMES": 1}, "retry/max_reached"),
    "callback_raises": Way(["/bug/a.html"], stat="spider_exceptions/ValueError", spider_args={"raise_on": "/bug/"}),
    "middleware_ignores": Way(
        ["/ignored/a.html"],
        {"DOWNLOADER_MIDDLEWARES": {"tutorial_spiders.IgnoreAfterResponse": 543}},
        "tutorial/ignored",
    ),
    "middleware_replaces": Way(
        ["/old/a.html"],
        {"DOWNLOADER_MIDDLEWARES": {"tutorial_spiders.ReplaceOld": 543}},
        "tutorial/replaced",
        ["/new/a.html"],
    ),
}

#: how a crawl's process ends (DedupState.close)
CLOSED = re.compile(r"dedup store \S+ closed, run \d+: (.*?)(?: \(run the crawl again to resume\))?$", re.M)

SETTINGS = {
    "SPIDER_MODULES": "tutorial_spiders",
    "DEDUP_WORKERS": 1,
    "DEDUP_LOGSTATS_INTERVAL": 0,
    "DOWNLOAD_TIMEOUT": 5,
    "LOG_LEVEL": "INFO",
}


@pytest.fixture(scope="module")
def site():
    s = Site()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def tutorial_spiders(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SPIDERS_DIR))


def crawl(site: Site, out: Path, store: str, start: str = "/", spider_args=None, **settings):
    return run_crawl(
        site.url + start, out, {**SETTINGS, "DEDUP_STORE": store, **settings},
        spider="tutorial", spider_args=spider_args, timeout=180,
    )


def closing_states(result) -> list[str]:
    return CLOSED.findall(result.log)


def documents(site: Site, *results) -> list[str]:
    """The paths of the items the crawls emitted, each as often as emitted."""
    return sorted(item["url"].removeprefix(site.url) for r in results for item in r.items)


#: a CrawlSpider's start page goes to parse_start_url, not to the rule's callback: no item
SITE_DOCUMENTS = sorted(f"/p{i}.html" for i in range(PAGES))


def test_the_tutorial_spider_ends_complete_on_leveldb(site, tmp_path):
    result = crawl(site, tmp_path, str(tmp_path / "store"))
    assert closing_states(result) == ["complete"]
    assert result.stat("offsite/filtered") > PAGES, "the pages' off-site links were filtered"
    assert documents(site, result) == SITE_DOCUMENTS
    assert {item.keys() >= {"url", "title", "html"} for item in result.items} == {True}


def test_two_processes_with_scrapy_redis_end_complete(site, tmp_path, redis_single):
    name = f"tutorial{uuid.uuid4().hex[:8]}"
    settings = scrapy_redis_settings(redis_single.url, persist=True)
    results = [None, None]

    def run(i: int) -> None:
        results[i] = crawl(site, tmp_path / f"p{i}", redis_single.url, spider_args={"name": name}, **settings)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in results), "a process failed (see its crawl.log)"
    # Started together, one process may pop both start requests from the shared queue (they are
    # not filtered, so nothing is owed for them): the other, with no response yet, waits for it
    # to owe its first links instead of ending at once with nothing owed anywhere.
    assert [closing_states(r) for r in results] == [["complete"], ["complete"]]
    with RedisStore.open_existing(redis_single.url, prefix=default_prefix(name)) as store:
        assert store.count("pending") == 0
    assert sum(r.stat("scheduler/dequeued/redis") for r in results) > PAGES, "the queue was shared"
    assert sum(r.stat("offsite/filtered") for r in results) > PAGES
    # the off-site links each process held were issued once more, then settled
    assert sum(r.stat("dedup/frontier/reissued") for r in results) == sum(r.stat("dedup/frontier/left") for r in results)
    assert sum(r.stat("dedup/frontier/left") for r in results) >= PAGES and not any(
        r.stat("dedup/frontier/resumed") for r in results)
    # each page emitted by one process only
    assert documents(site, *results) == SITE_DOCUMENTS


def _slow_and_missing(site, tmp_path, store: str, **crawl_args) -> tuple[dict[int, Any], dict[int, float]]:
    """Two crawl processes on one store: the first starts on the slow home page; once it has
    asked for it, the second starts on a page that answers 404. Their results, and when each
    ended (monotonic)."""
    results: dict[int, Any] = {}
    ended: dict[int, float] = {}
    site.slow_asked.clear()
    site.slow_answered = None

    def run(i: int, start: str) -> None:
        results[i] = crawl(site, tmp_path / f"p{i}", store, start, **crawl_args)
        ended[i] = time.monotonic()

    first = threading.Thread(target=run, args=(0, "/slow/"))
    first.start()
    assert site.slow_asked.wait(120), "the first process asked for its start page"
    second = threading.Thread(target=run, args=(1, "/missing.html"))
    second.start()
    for t in (first, second):
        t.join()
    assert set(results) == {0, 1}, "a process failed (see its crawl.log)"
    return results, ended


def test_a_process_whose_pages_yielded_nothing_yet_waits_for_the_first_links_of_the_others(site, tmp_path, redis_single):
    """Over one scrapy-redis queue, a process whose only start request gives no response (a 404)
    finds nothing to do and nothing owed anywhere while the other fetches a slow start page:
    start requests are not filtered, so nothing is owed for them. It waits for that page's links
    instead of ending at once, and the two share the crawl."""
    name = f"tutorial{uuid.uuid4().hex[:8]}"
    settings = {**scrapy_redis_settings(redis_single.url, persist=True), "DOWNLOAD_TIMEOUT": SLOW_START * 3}
    results, ended = _slow_and_missing(site, tmp_path, redis_single.url, spider_args={"name": name}, **settings)
    assert site.slow_answered is not None and ended[1] > site.slow_answered, "the second ended before any link was owed"
    assert [closing_states(results[i]) for i in (0, 1)] == [["complete"], ["complete"]]
    assert documents(site, *results.values()) == SITE_DOCUMENTS


def test_plain_processes_on_redis_settle_what_left_at_the_first_idle_moment(site, tmp_path, redis_single):
    """Scrapy's own scheduler keeps each process's queue to itself: a request a process holds
    when it is idle left the crawl, as on LevelDB. Only a shared queue (scrapy-redis, above)
    makes a process wait for a second idle moment and issue its requests once more."""
    result = crawl(site, tmp_path, redis_single.url, DEDUP_REDIS_PREFIX=f"test:{uuid.uuid4().hex[:12]}")
    assert closing_states(result) == ["complete"]
    assert result.stat("dedup/frontier/left") >= PAGES, "the off-site links were settled"
    assert result.stat("dedup/frontier/reissued") == 0
    assert documents(site, result) == SITE_DOCUMENTS


def test_a_process_that_waits_for_the_requests_of_others_says_so_once(site, tmp_path, redis_single):
    """Plain processes on one store: a process with nothing left to fetch stays open while
    another owes requests (a whole lease when that one was killed), and says why, once."""
    prefix = f"test:{uuid.uuid4().hex[:12]}"
    settings = {"DEDUP_REDIS_PREFIX": prefix, "DOWNLOAD_DELAY": 0.5, "DOWNLOAD_TIMEOUT": SLOW_START * 3}
    results, _ = _slow_and_missing(site, tmp_path, redis_single.url, **settings)
    assert [closing_states(results[i]) for i in (0, 1)] == [["complete"], ["complete"]]
    waiting = re.compile(r"nothing left to fetch here; waiting for the [\d,]+ requests other processes")
    assert len(waiting.findall(results[1].log)) == 1, results[1].log[-3000:]
    assert not waiting.search(results[0].log)
    assert documents(site, *results.values()) == SITE_DOCUMENTS


def test_the_tutorial_spider_ends_complete_on_a_redis_cluster(site, tmp_path, redis_cluster):
    result = crawl(site, tmp_path, redis_cluster.url, DEDUP_REDIS_PREFIX=f"test:{uuid.uuid4().hex[:12]}")
    assert closing_states(result) == ["complete"]
    assert result.stat("offsite/filtered") > PAGES
    assert documents(site, result) == SITE_DOCUMENTS


@pytest.mark.parametrize("backend", ["leveldb", "redis"])
@pytest.mark.parametrize("way", list(WAYS))
def test_a_request_that_leaves_the_crawl_is_settled(site, tmp_path, way, backend, request):
    spec = WAYS[way]
    if backend == "redis":
        store = request.getfixturevalue("redis_single").url
        extra = {"DEDUP_REDIS_PREFIX": f"test:{uuid.uuid4().hex[:12]}"}
    else:
        store, extra = str(tmp_path / "store"), {}
    result = crawl(site, tmp_path, store, f"/way/{way}", spec.spider_args, **spec.settings, **extra)
    assert result.stat(spec.stat) > 0, f"no request left the crawl through {way}"
    assert closing_states(result) == ["complete"]
    assert documents(site, result) == sorted({"/plain.html", *spec.documents})


@pytest.mark.parametrize("backend", ["leveldb", "redis"])
def test_owed_requests_a_resumed_run_drops_are_settled(site, tmp_path, backend, request):
    """A run stopped early leaves requests owed; the next run issues them again, and a filter
    that changed meanwhile (here allowed_domains) drops them before the dupefilter sees them."""
    if backend == "redis":
        store = request.getfixturevalue("redis_single").url
        extra = {"DEDUP_REDIS_PREFIX": f"test:{uuid.uuid4().hex[:12]}"}
    else:
        store, extra = str(tmp_path / "store"), {}
    first = crawl(site, tmp_path / "first", store, CLOSESPIDER_PAGECOUNT=2, CONCURRENT_REQUESTS=1, **extra)
    owed = closing_states(first)
    assert len(owed) == 1 and owed[0].startswith("interrupted: "), owed
    second = crawl(site, tmp_path / "second", store, spider_args={"allowed": "elsewhere.invalid"}, **extra)
    assert second.stat("dedup/frontier/resumed") > 0 and second.stat("offsite/filtered") > 0
    assert closing_states(second) == ["complete"]
    assert second.stat("dedup/frontier/left") >= int(re.sub(r"\D", "", owed[0]))
    # "closed", not "settled": settling is what the clusters and chunk statuses do at the end
    closed = re.findall(r"closed (\d+) owed requests that left the crawl", second.log)
    assert closed and sum(map(int, closed)) == second.stat("dedup/frontier/left")


def test_a_one_process_store_s_crawl_fetches_each_page_once_while_it_looks_for_stopped_processes(tmp_path):
    """Every half ``DEDUP_REDIS_LEASE`` (and at idle moments) the crawl claims the requests of a
    process that stopped, on every backend: a one-process store hands over what was owed when
    its run began, never a request in flight, so no page is fetched twice."""
    fetched: Counter[str] = Counter()
    lock = threading.Lock()
    pages = 16

    def reply(raw_path: str) -> tuple[int, dict[str, str], bytes]:
        path = raw_path.split("?")[0]
        with lock:
            fetched[path] += 1
        time.sleep(0.15)  # requests in flight when the claims come (every 0.5 s)
        if path == "/":
            return 200, {}, page("home", [f"/q{i}.html" for i in range(pages)])
        match = re.fullmatch(r"/q(\d+)\.html", path)
        if match:
            i = int(match[1])
            return 200, {}, page(f"page {i}", [f"/q{(i + 1) % pages}.html"])
        return 404, {}, page("not found", [])

    served = LocalSite(reply)
    try:
        result = run_crawl(
            served.url + "/", tmp_path,
            {**SETTINGS, "DEDUP_STORE": str(tmp_path / "store"), "DEDUP_REDIS_LEASE": 1, "CONCURRENT_REQUESTS": 2},
            spider="tutorial", timeout=180,
        )
    finally:
        served.close()
    assert closing_states(result) == ["complete"]
    assert len(result.items) == pages
    assert fetched and max(fetched.values()) == 1, sorted(p for p, n in fetched.items() if n > 1)
