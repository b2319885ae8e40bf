"""A process of a shared crawl killed mid-crawl loses nothing: the others take over its requests.

The generated documentation site of the interrupted-crawl tests (549 responses) is crawled by
four Scrapy processes over one Redis store and one scrapy-redis queue, each started with the
site's start page; one of them gets SIGKILL (its whole process group) after it emitted some
items. scrapy-redis alone loses the requests that process had taken from the queue. The requests it
held stay owed, tagged with its holder id; once its heartbeat is gone (a lease after the kill)
the others recover what it had (its requests, its decision locks, on a cluster its half-applied
batches) and finish the crawl. The store must end as one uninterrupted process on LevelDB
leaves it (documents, clusters, the canonical URL and alias reason of every URL key,
variants), nothing owed, and every document emitted.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import time
import uuid
from collections import Counter

import pytest
from test_resume import Crawl, check_same_store, site, state_of, uninterrupted  # noqa: F401 - fixtures

from scrapy_dedup.crawl.pending import META_PENDING
from scrapy_dedup.store.records import get_url
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import connect
from scrapy_dedup.store.redis.store import RedisStore

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
    # The first process starts alone and the others once it owes requests: a process started at
    # the same moment may find its start request popped by another (start requests are not
    # filtered, so nothing is owed for them) and nothing owed, and end at once (reliability.md)
    procs = [crawls[0].launch()]
    try:
        deadline = time.monotonic() + 120
        while not crawls[0].emitted_lines() and procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        procs += [crawl.launch() for crawl in crawls[1:]]
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
        orphans = _orphans(server.url, redis_single.url, prefix, procs[victim].pid)
        survivors = [i for i in range(PROCESSES) if i != victim]
        codes = [crawls[i].wait(procs[i], timeout=400) for i in survivors]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert codes == [0] * (PROCESSES - 1), [crawls[i].logs[-1][-2000:] for i in survivors]

    with RedisStore.open_existing(server.url, prefix=prefix) as store:
        got = state_of(store)
        assert store.count("pending") == 0
        rep_urls = {get_url(store, key).url for key in uninterrupted["documents"]}
    check_same_store(got, uninterrupted)
    # no page lost downstream: every document was emitted by some process
    emitted = {line["url"] for line in crawls[0].emitted_lines()}
    assert rep_urls <= emitted, f"documents never emitted: {sorted(rep_urls - emitted)[:10]}"
    # the work was shared: a survivor at least fetched from the queue
    assert sum(crawls[i].stats().get("scheduler/dequeued/redis", 0) > 0 for i in survivors) >= 1
    # The requests the killed process had taken out of the queue are owed by its holder only:
    # nobody can fetch them before a survivor takes them over. (Those it owed that were still
    # queued are adopted by whichever process pops them; a kill between two fetches can leave
    # none to take over.)
    took_over = sum(crawls[i].stats().get("dedup/frontier/resumed", 0) for i in survivors)
    if orphans:
        assert took_over >= len(orphans), (orphans, took_over)


def _orphans(store_url: str, queue_url: str, prefix: str, pid: int) -> set[str]:
    """The requests owed by `pid`'s holder that are no longer in the shared queue: those the
    killed process had taken out of it. Read twice, a moment apart, so that a request a survivor
    has just popped and not yet adopted is not counted."""

    def held_by_pid() -> set[str]:
        owner = f"{pid}-".encode()
        held = set()
        for shard in range(rk.PENDING_SHARDS):
            for pending_id, value in store.hgetall(rk.pending_shard(prefix, shard)).items():
                if value.startswith(owner):
                    held.add(pending_id.decode())
        return held

    store, queue = connect(store_url), connect(queue_url)
    try:
        first = held_by_pid()
        time.sleep(0.3)  # shorter than a lease: nothing is taken over yet
        queued = {pickle.loads(blob)["meta"].get(META_PENDING) for blob in queue.zrange(f"{prefix}:requests", 0, -1)}
        return (first & held_by_pid()) - queued
    finally:
        store.close()
        queue.close()
