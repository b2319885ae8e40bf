"""A process of a shared crawl killed mid-crawl loses nothing: the others take over its requests.

The generated documentation site of the interrupted-crawl tests (549 responses) is crawled by
four Scrapy processes over one Redis store and one scrapy-redis queue, each started with the
site's start page; one of them gets SIGKILL (its whole process group) after it emitted some
items. scrapy-redis alone loses the requests that process had taken from the queue. The requests it
held stay owed under leases it no longer renews; the others take them over once the leases
ran out and finish the crawl. The store must end as one uninterrupted process on LevelDB
leaves it (documents, clusters, the canonical URL and alias reason of every URL key,
variants), nothing owed, and every document emitted.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid

import pytest
from test_resume import Crawl, check_same_store, site, state_of, uninterrupted  # noqa: F401 - fixtures

from scrapy_dedup.store.redis_store import RedisStore

PROCESSES = 4
LEASE_S = 3


@pytest.mark.parametrize("kind", ["single", "cluster"])
def test_a_killed_process_s_requests_are_taken_over_by_the_others(
    site, uninterrupted, kind, tmp_path, request, redis_single
):
    server = request.getfixturevalue(f"redis_{kind}")
    prefix = f"kill:{uuid.uuid4().hex[:10]}"
    shared = {
        # one request queue shared by the processes (on the standalone server: scrapy-redis
        # does not speak to a cluster), the dedup store on `server`
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_PERSIST": "True",
        "SCHEDULER_QUEUE_KEY": f"{prefix}:requests",
        "REDIS_URL": redis_single.url,
        "DUPEFILTER_CLASS": "scrapy_dedup.dupefilter.DedupDupeFilter",
        "DEDUP_STORE": server.url,
        "DEDUP_REDIS_PREFIX": prefix,
        "DEDUP_REDIS_LEASE": str(LEASE_S),
        "EMITTED_LOG": str(tmp_path / "emitted.jsonl"),
        "CONCURRENT_REQUESTS": "8",
    }
    crawls = [Crawl(site, tmp_path / f"p{i}", **shared) for i in range(PROCESSES)]
    for crawl in crawls:
        crawl.emitted = tmp_path / "emitted.jsonl"  # one log for all: lines carry their pid
    procs = [crawl.launch() for crawl in crawls]
    victim, victim_proc = crawls[0], procs[0]
    try:
        # mid-crawl: after it emitted a random number of items
        wanted = random.Random(os.getpid()).randint(10, 40)
        deadline = time.monotonic() + 120
        while victim_proc.poll() is None and time.monotonic() < deadline:
            if sum(line["pid"] == victim_proc.pid for line in victim.emitted_lines()) >= wanted:
                break
            time.sleep(0.01)
        assert victim_proc.poll() is None, "the crawl ended before the kill"
        os.killpg(victim_proc.pid, signal.SIGKILL)
        victim.killed_pids.append(victim_proc.pid)
        victim.wait(victim_proc, timeout=30)
        codes = [crawl.wait(proc, timeout=400) for crawl, proc in zip(crawls[1:], procs[1:])]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert codes == [0] * (PROCESSES - 1), [crawl.logs[-1][-2000:] for crawl in crawls[1:]]
    took_over = sum(log.count("took over") + log.count("taking over") for crawl in crawls[1:] for log in crawl.logs)
    assert took_over, "no surviving process took over the killed one's requests"
    # the work was shared: every process fetched pages from the queue
    assert all(crawl.stats().get("scheduler/dequeued/redis", 0) > 10 for crawl in crawls[1:])

    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        got = state_of(store)
        assert store.pending_count() == 0
        rep_urls = {store.get_url(key).url for key in uninterrupted["documents"]}
    check_same_store(got, uninterrupted)
    # no page lost downstream: every document was emitted by some process
    emitted = {line["url"] for line in crawls[0].emitted_lines()}
    assert rep_urls <= emitted, f"documents never emitted: {sorted(rep_urls - emitted)[:10]}"
