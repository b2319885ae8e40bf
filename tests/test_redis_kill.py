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
from collections import Counter

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
        "DOWNLOAD_DELAY": "0.05",  # so that the kill lands mid-crawl on a fast machine too
    }
    crawls = [Crawl(site, tmp_path / f"p{i}", **shared) for i in range(PROCESSES)]
    for crawl in crawls:
        crawl.emitted = tmp_path / "emitted.jsonl"  # one log for all: lines carry their pid
    procs = [crawl.launch() for crawl in crawls]
    try:
        # mid-crawl: the first process that emitted a random number of items
        wanted = random.Random(os.getpid()).randint(5, 20)
        deadline = time.monotonic() + 120
        victim = None
        while victim is None and time.monotonic() < deadline:
            counts = Counter(line["pid"] for line in crawls[0].emitted_lines())
            victim = next((i for i, proc in enumerate(procs) if counts[proc.pid] >= wanted and proc.poll() is None), None)
            time.sleep(0.01)
        assert victim is not None, "no process emitted enough items before the crawl ended"
        os.killpg(procs[victim].pid, signal.SIGKILL)
        crawls[victim].killed_pids.append(procs[victim].pid)
        crawls[victim].wait(procs[victim], timeout=30)
        survivors = [i for i in range(PROCESSES) if i != victim]
        codes = [crawls[i].wait(procs[i], timeout=400) for i in survivors]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert codes == [0] * (PROCESSES - 1), [crawls[i].logs[-1][-2000:] for i in survivors]
    took_over = sum(log.count("took over") + log.count("taking over") for i in survivors for log in crawls[i].logs)
    assert took_over, "no surviving process took over the killed one's requests"
    # the work was shared: the killed process and a survivor at least fetched from the queue
    assert sum(crawls[i].stats().get("scheduler/dequeued/redis", 0) > 0 for i in survivors) >= 1

    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        got = state_of(store)
        assert store.pending_count() == 0
        rep_urls = {store.get_url(key).url for key in uninterrupted["documents"]}
    check_same_store(got, uninterrupted)
    # no page lost downstream: every document was emitted by some process
    emitted = {line["url"] for line in crawls[0].emitted_lines()}
    assert rep_urls <= emitted, f"documents never emitted: {sorted(rep_urls - emitted)[:10]}"
