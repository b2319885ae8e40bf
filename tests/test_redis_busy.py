"""A page whose decision another process holds waits without holding up the crawl.

The other process is one that died holding the decision of a URL key (its lock), which stays
until the crawl recovers what that holder had, once its heartbeat is gone; the store never waits
for it, it tells the crawl (DecisionBusy). A crawl that fetches that page waits for it, and
meanwhile goes on fetching and deciding the other pages (before, the wait ran on the reactor
thread, and the whole process stood still). So do a 404 of a page that held a document, whose
removal from its cluster holds the same URL key, and a redirect of such a page.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from test_resume import Crawl, Site, check_same_store, reply, site, state_of, uninterrupted  # noqa: F401 - fixtures

from scrapy_dedup.core.urls import url_key
from scrapy_dedup.store.records import get_url, iter_clusters, members_of
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import connect
from scrapy_dedup.store.redis.store import RedisStore

#: the page whose decision the dead process held: linked from the start page, fetched early
HELD = "a/0"
#: documents the crawl decides while it waits for that page's lock
DECIDED_MEANWHILE = 40


def _wait_for(condition, timeout: float, what: str, crawl: Crawl) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s:\n{crawl.tail()}"
        time.sleep(0.02)


def _lock(client, prefix: str, key: str, holder: str = "4242-deadbeef"):
    """``key``'s decision lock, tagged with ``holder``; returns what deletes it."""
    lock, field = rk.decision_slot(prefix, key)
    client.hset(lock, field, f"{holder}\n1")
    return lambda: client.hdel(lock, field)


def _crawl_past_a_hold(site, uninterrupted, tmp_path, server, prefix: str, release) -> None:
    """Crawl while another process holds a decision /HELD waits for; ``release()`` when the crawl
    decided DECIDED_MEANWHILE other documents after fetching /HELD."""
    held_url = site.url + HELD
    # the crawl looks for dead holders every half lease
    crawl = Crawl(site, tmp_path / "crawl", DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix, DEDUP_REDIS_LEASE="2")
    proc = crawl.launch()
    try:
        _wait_for(lambda: site.snapshot()[f"/{HELD}"] >= 1, 60, f"/{HELD} was not fetched", crawl)
        before = len(crawl.emitted_lines())
        _wait_for(lambda: len(crawl.emitted_lines()) >= before + DECIDED_MEANWHILE, 60,
                  f"the crawl did not decide {DECIDED_MEANWHILE} other documents while /{HELD} waited", crawl)
        assert held_url not in {line["url"] for line in crawl.emitted_lines()}  # still waiting
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # a failed test leaves no crawl behind
        raise
    finally:
        release()
    code = crawl.wait(proc, timeout=120)
    assert code == 0, crawl.logs[-1][-3000:]
    assert crawl.stats()["dedup/doc/waited_for_another_process"] >= 1
    emitted = [line["url"] for line in crawl.emitted_lines()]
    assert emitted.count(held_url) == 1
    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        check_same_store(state_of(store), uninterrupted)
        assert store.count("pending") == 0
    assert not crawl.double_fetches


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_a_page_whose_lock_a_dead_process_holds_waits_while_the_crawl_goes_on(
    site, uninterrupted, tmp_path, request, kind
):
    """The lock's holder is alive while the crawl waits, then its heartbeat stops: the crawl
    recovers what it had, its lock among it, and decides the page."""
    server = request.getfixturevalue(f"redis_{kind}")
    prefix = f"busy:{uuid.uuid4().hex[:10]}"
    client = connect(server.url)
    holders = f"{prefix}:h:{{{prefix}:m}}"
    now_ms = int(client.time()[0]) * 1000
    client.hset(holders, "4242-deadbeef", f"{now_ms + 600_000} 0")  # alive for ten minutes
    _lock(client, prefix, url_key(site.url + HELD))
    _crawl_past_a_hold(site, uninterrupted, tmp_path, server, prefix,
                       lambda: client.hset(holders, "4242-deadbeef", "1 0"))  # its heartbeat is gone


#: where a moved page lives now: its old path redirects here (301)
MOVED_TO = "/moved"


class _ChangingSite(Site):
    """The interrupted-crawl tests' site, where the paths in ``gone`` answer 404 and the paths
    in ``moved`` redirect to MOVED_TO + path, which serves their page."""

    def __init__(self) -> None:
        self.gone: set[str] = set()
        self.moved: set[str] = set()
        super().__init__()

    def _reply(self, path: str):
        if path in self.gone or path in self.moved:
            with self.lock:
                self.hits[path] += 1
            if path in self.moved:
                return 301, {"Location": MOVED_TO + path}, b""
            return 404, {}, b"<html><body>Not found</body></html>"
        if path.startswith(MOVED_TO + "/") and path[len(MOVED_TO):] in self.moved:
            with self.lock:
                self.hits[path] += 1
            return reply(path[len(MOVED_TO):])
        return super()._reply(path)


def _left_while_locked(tmp_path, server, prefix: str, site: _ChangingSite, stop, change: str) -> tuple[Crawl, str]:
    """Crawl the site once, make /HELD answer 404 (``change`` "gone") or redirect ("moved") under a dead
    process's lock of its URL key, then crawl it again (every page fetched again) and, once 40
    other pages were fetched while the 404 (or the redirect) waited, ``stop(proc)`` (None: the
    crawl goes on) and release the lock."""
    crawl = Crawl(site, tmp_path / "crawl", DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix)
    crawl.run_to_end()
    held_key = url_key(site.url + HELD)
    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        assert get_url(store, held_key).cluster_id is not None
    getattr(site, change).add(f"/{HELD}")
    client = connect(server.url)
    # another process's lock (a holder the store does not know: never recovered): it outlasts
    # the waits below unless released
    release = _lock(client, prefix, held_key)
    proc = crawl.launch(DEDUP_REVISIT_AFTER="0")  # every page is fetched again
    try:
        _wait_for(lambda: site.snapshot()[f"/{HELD}"] >= 2, 60, f"/{HELD} was not fetched again", crawl)
        fetched = sum(site.snapshot().values())
        _wait_for(lambda: sum(site.snapshot().values()) >= fetched + DECIDED_MEANWHILE, 60,
                  f"the crawl did not fetch {DECIDED_MEANWHILE} other pages while /{HELD}'s {change} waited", crawl)
        with RedisStore.open_existing(server.url, prefix=prefix) as store:
            assert get_url(store, held_key).cluster_id is not None  # not taken out yet
        if stop is not None:
            stop(proc)
            code = crawl.wait(proc, timeout=120)
            assert code == 0, crawl.logs[-1][-3000:]
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        release()
    if stop is None:
        code = crawl.wait(proc, timeout=120)
        assert code == 0, crawl.logs[-1][-3000:]
    return crawl, held_key


#: what each way of leaving counts: /HELD answers 404 (gone) or redirects (moved)
LEFT_STAT = {"gone": "dedup/doc/deleted", "moved": "dedup/doc/redirected"}


def _check_left(change: str, server, prefix: str, site: _ChangingSite, held_key: str) -> None:
    """/HELD is out of its cluster, and nothing is owed: deleted (gone), or a redirect to its
    new URL recorded as its alias, where its document lives now, fetched once (moved)."""
    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        record = get_url(store, held_key)
        assert record.cluster_id is None
        assert all(held_key not in members_of(store, c) for c in iter_clusters(store))
        if change == "gone":
            assert record.status == "deleted" and record.http_status == 404
        else:
            new_key = url_key(site.url + MOVED_TO.lstrip("/") + "/" + HELD)
            assert record.status == "redirect" and record.duplicate_of == new_key
            assert get_url(store, new_key).cluster_id is not None
            assert site.snapshot()[f"{MOVED_TO}/{HELD}"] == 1
        assert store.count("pending") == 0


@pytest.mark.parametrize("change", ["gone", "moved"])
@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_a_page_that_left_while_a_dead_process_holds_its_lock_waits_while_the_crawl_goes_on(
    tmp_path, request, kind, change
):
    """A 404 of a page that held a document takes it out of its cluster under its URL key's
    lock; so does its redirect, recorded when the request it makes reaches the dupefilter.
    While a dead process holds that lock, the response (the redirect: its request, in the
    downloader middleware) waits without blocking the reactor, and the crawl fetches other
    pages meanwhile. Before, the redirect waited on the reactor thread, and the crawl stood
    still."""
    server = request.getfixturevalue(f"redis_{kind}")
    prefix = f"busy:{uuid.uuid4().hex[:10]}"
    site = _ChangingSite()
    try:
        crawl, held_key = _left_while_locked(tmp_path, server, prefix, site, None, change)
        stats = crawl.stats()
        assert stats["dedup/doc/waited_for_another_process"] >= 1 and stats[LEFT_STAT[change]] == 1
        _check_left(change, server, prefix, site, held_key)
    finally:
        site.stop()


@pytest.mark.parametrize("change", ["gone", "moved"])
def test_a_crawl_stopped_while_a_page_that_left_waits_leaves_it_to_the_next_run(tmp_path, redis_single, change):
    """Ctrl-C while the 404 (or the redirect) waits: the crawl stops without taking the page
    out of its cluster, its request stays owed, and the next run fetches it again and takes it
    out."""
    prefix = f"busy:{uuid.uuid4().hex[:10]}"
    site = _ChangingSite()
    try:
        crawl, held_key = _left_while_locked(tmp_path, redis_single, prefix, site,
                                             lambda proc: os.killpg(proc.pid, signal.SIGINT), change)
        stats = crawl.stats()
        assert stats["finish_reason"] == "shutdown" and stats["dedup/doc/left_pending"] >= 1
        assert LEFT_STAT[change] not in stats
        with RedisStore.open_existing(redis_single.url, prefix=prefix) as store:
            assert get_url(store, held_key).cluster_id is not None
            assert held_key in {pending_id for pending_id, _ in store.scan("pending")}  # still owed
        before = site.snapshot()[f"/{HELD}"]
        crawl.run_to_end()
        assert site.snapshot()[f"/{HELD}"] == before + 1 and crawl.stats()[LEFT_STAT[change]] == 1
        _check_left(change, redis_single, prefix, site, held_key)
    finally:
        site.stop()
