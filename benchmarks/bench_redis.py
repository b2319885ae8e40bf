"""The Redis store's server side: the frontier against scrapy-redis's dupefilter, and
near-duplicate decisions on one server and on three masters.

    .venv/bin/python benchmarks/bench_redis.py [--size tiny|default|large]

Starts its own redis-server processes (one standalone, one 3-master cluster) on free
loopback ports, as the tests do, and stops them. Measured, side by side in one run:

- frontier: bytes per URL (INFO used_memory on a fresh server, after N distinct URL
  keys) and seen-checks per second, one round trip per check as a dupefilter makes them
  and in bulk (pipelined); against scrapy-redis's ``RFPDupeFilter`` (SADD of a 40-character
  SHA1 per request into one set) on the same URLs;
- near-duplicate decisions (read the candidates, decide in the client, write) with
  the SimHash tables preloaded with D documents (``--docs``, several with commas): decisions
  per second with 4 client processes, p50/p99 latency per decision,
  the server time (INFO commandstats) and CPU (INFO cpu) per decision and the busiest
  master's share, the clients' own CPU time per decision, and two ceilings: the servers'
  (1 s over the busiest master's CPU per decision) and the machine's (its cores over the
  clients' and the servers' CPU per decision), on one server and on three masters
  (``--only near`` measures these alone);
- bytes per document of the tables, against datasketch's MinHash LSH with Redis storage
  (256 permutations).

Writes results/redis.json. The machine has 2 cores for servers and clients together:
decisions/s here are bounded by the clients' CPU, which the server time per decision
shows apart.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scrapy_dedup.store.records import iter_clusters, put_emitted, put_pending, settle_pending

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "example_project"))

import numpy as np  # noqa: E402
from crawl_helpers import process_count_outcome  # noqa: E402
from redis_calls import frontier_mark, frontier_mark_many, near_put, near_scan  # noqa: E402
from run_all import RESULTS, SIZES, fmt, log, row, write_result  # noqa: E402

NAME = "redis"
SIZES_N = {
    # URLs in the frontier, documents in the tables, datasketch documents
    "tiny": (3_000, 3_000, 50),
    "default": (1_000_000, 1_000_000, 500),
    "large": (10_000_000, 10_000_000, 1_000),
}
CLIENTS = 4
#: pages of the PostgreSQL docs crawled by 1, 2 and 4 processes, and decided in one for the store's time
CRAWL_PAGES = {"tiny": 60, "default": 400, "large": 1000}
#: documents with random fingerprints entered in the near-duplicate index, for its bytes per document
INDEX_BYTES_DOCS = {"tiny": (1_000,), "default": (1_000, 100_000), "large": (1_000, 100_000, 1_000_000)}
#: distinct documents through the crawl's store calls, for the bytes per document at a size
#: where the sharded tables' per-key costs are shared
DOCUMENT_BYTES_DOCS = {"tiny": (1_000,), "default": (20_000, 100_000), "large": (100_000, 1_000_000)}
PROCESS_COUNTS = (1, 2, 4)
#: interleaved rounds of those crawls (a shared machine's pages/s move from one crawl to the next)
CRAWL_ROUNDS = {"tiny": 1, "default": 3, "large": 5}
TARGET_BYTES_PER_DOCUMENT = 1536
TARGET_STORE_SHARE = 0.10
ONE_BY_ONE = {"tiny": 1_000, "default": 20_000, "large": 20_000}
#: targets from the project's issue on the shared store
TARGET_BYTES_PER_URL = 40
TARGET_DECISIONS = 10_000
#: a near-duplicate decision is one read and at most one write: no batches
NEAR_BATCH = 1
#: near-duplicate decisions per client process, in batches, and one at a time (decide) beside them
NEAR_PER_CLIENT = {"tiny": 1_024, "default": 20_480, "large": 20_480}
NEAR_ONE_BY_ONE = {"tiny": 100, "default": 500, "large": 500}


def url(i: int) -> str:
    return f"https://www.site{i % 251}.example.org/section-{i % 1000}/articles/{i // 1000}/page-{i}.html?id={i}"


def used_memory(client) -> int:
    from scrapy_dedup.store.redis.functions import primaries

    return sum(int(node.info("memory")["used_memory"]) for node in primaries(client))


# -- frontier -------------------------------------------------------------------------------


def bench_frontier(server_url: str, n: int, one_by_one: int) -> dict:
    from scrapy_dedup.store.redis.functions import StoreFunctions, connect

    client = connect(server_url)
    client.flushall()
    fn = StoreFunctions(client, "bench")
    before = used_memory(client)
    t0 = time.perf_counter()
    batch = 100_000
    for start in range(0, n, batch):
        frontier_mark_many(fn, (url(i) for i in range(start, min(n, start + batch))), 1)
    bulk_s = time.perf_counter() - t0
    ours_bytes = (used_memory(client) - before) / n
    assert fn.frontier_size() == n
    sample = [url(i) for i in range(n, n + one_by_one)]
    t0 = time.perf_counter()
    for u in sample:
        frontier_mark(fn, u, 1)
    ours_one_s = time.perf_counter() - t0
    repeats = frontier_mark_many(fn, sample[:1000], 1)
    assert all(r == 1 for r in repeats)

    # scrapy-redis: its dupefilter, one SADD per request into one set of 40-character SHA1s
    from scrapy import Request
    from scrapy_redis.dupefilter import RFPDupeFilter

    client.flushall()
    before = used_memory(client)
    dupefilter = RFPDupeFilter(client, "bench:dupefilter")
    t0 = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.sadd("bench:dupefilter", dupefilter.request_fingerprint(Request(url(i))))
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    theirs_bulk_s = time.perf_counter() - t0
    theirs_bytes = (used_memory(client) - before) / n
    requests = [Request(u) for u in sample]
    t0 = time.perf_counter()
    for r in requests:
        dupefilter.request_seen(r)
    theirs_one_s = time.perf_counter() - t0
    assert all(dupefilter.request_seen(r) for r in requests[:1000])
    client.flushall()
    return {
        "urls": n,
        "ours": {"bytes_per_url": ours_bytes, "bulk_per_s": n / bulk_s, "one_by_one_per_s": one_by_one / ours_one_s},
        "scrapy_redis": {
            "bytes_per_url": theirs_bytes,
            "bulk_per_s": n / theirs_bulk_s,
            "one_by_one_per_s": one_by_one / theirs_one_s,
        },
    }


# -- near-duplicate decisions ---------------------------------------------------------------


def preload_tables(client, prefix: str, fps: np.ndarray) -> None:
    """Write the settled buckets of ``fps`` (tokens = their index) in the store's layout:
    one HSET per slot group and chunk of its buckets."""
    from scrapy_dedup.core.bands import BLOCK_BITS, BLOCKS
    from scrapy_dedup.store.redis import keys as rk

    records = np.empty(len(fps), dtype=[("fp", ">u8"), ("token", ">u8")])
    records["fp"] = fps
    records["token"] = np.arange(len(fps), dtype=np.uint64)
    sid = rk.scope_digest("").hex()
    per_group = 1 << (BLOCK_BITS - rk.NEAR_GROUP_BITS)
    for table in range(BLOCKS):
        blocks = ((fps >> np.uint64(BLOCK_BITS * table)) & np.uint64(0xFFFF)).astype(np.int64)
        order = np.argsort(blocks, kind="stable")
        data = records[order].tobytes()
        bounds = (np.searchsorted(blocks[order], np.arange(0x10001)) * rk.NEAR_RECORD).tolist()
        pipe = client.pipeline(transaction=False)
        for group_start in range(0, 0x10000, per_group):
            settled = rk.near_group(prefix, sid, table, rk.near_group_of(table, group_start))
            for chunk in range(group_start, group_start + per_group, 1024):
                fields = []
                for block in range(chunk, chunk + 1024):
                    lo, hi = bounds[block], bounds[block + 1]
                    if lo < hi:
                        fields += (block.to_bytes(2, "big"), data[lo:hi])
                if fields:
                    pipe.execute_command("HSET", settled, *fields)
            pipe.execute()


def _decide_worker(server_url, prefix, worker, queries, batch, barrier, out):
    from scrapy_dedup.core.fingerprints import hamming
    from scrapy_dedup.store.redis.functions import StoreFunctions, connect

    fn = StoreFunctions(connect(server_url), prefix)
    # tokens above the preloaded documents' (their index): worker and query number
    items = [(int(fp), (1 << 63 | worker << 40 | i).to_bytes(8, "big")) for i, fp in enumerate(queries)]
    latencies, kept, scans = [], 0, 0
    barrier.wait()
    started, cpu_started = time.perf_counter(), time.process_time()
    for fp, token in items:
        # a near decision as the store makes it: read the candidates, decide here, write
        t0 = time.perf_counter()
        settled = near_scan(fn, "", fp, 3)
        duplicate = any(hamming(other, fp) <= 3 for other, _ in settled)
        if not duplicate:
            near_put(fn, "", fp, token)
        latencies.append((time.perf_counter() - t0, 1))
        kept += not duplicate
        scans += 1
    out.put((started, time.perf_counter(), latencies, kept, scans, time.process_time() - cpu_started))


def _percentiles(values: list[float]) -> dict:
    values = sorted(values)
    n = len(values)
    return {
        "p50": 1000 * values[n // 2],
        "p99": 1000 * values[min(n - 1, int(n * 0.99))],
        "mean": 1000 * statistics.fmean(values),
    }


#: the function calls decisions send. Commands that functions run inside count in their
#: FCALL's time and again under their own names, so those names are left out; so is the one
#: plain HMGET per slot group that a read sends after its FCALL (commandstats cannot tell it
#: from the HMGETs inside functions): the servers' CPU time covers everything.
NEAR_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro")


def _server_stats(client) -> list[tuple[int, int, float]]:
    """(commands, usec) on each master of the commands decisions send, and its CPU seconds."""
    from scrapy_dedup.store.redis.functions import primaries

    out = []
    for node in primaries(client):
        stats = node.info("commandstats")
        cpu = node.info("cpu")
        out.append((sum(int(stats.get(name, {}).get("calls", 0)) for name in NEAR_COMMANDS),
                    sum(int(stats.get(name, {}).get("usec", 0)) for name in NEAR_COMMANDS),
                    float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])))
    return out


def near_queries(fps: np.ndarray, count: int, seed: int) -> list[list[int]]:
    """Per client, ``count`` SimHashes: half near duplicates of stored documents (1-3 bits
    flipped), half new pages."""
    pyrng = random.Random(seed)
    shares = []
    for _ in range(CLIENTS):
        queries = []
        for j in range(count):
            if j % 2 == 0:
                fp = int(fps[pyrng.randrange(len(fps))])
                for _ in range(pyrng.randint(1, 3)):
                    fp ^= 1 << pyrng.randrange(64)
            else:
                fp = pyrng.getrandbits(64)
            queries.append(fp)
        shares.append(queries)
    return shares


def _run_deciders(client, server_url: str, shares: list[list[int]], batch: int) -> dict:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    barrier = ctx.Barrier(len(shares))
    procs = [ctx.Process(target=_decide_worker, args=(server_url, "bench", w, q, batch, barrier, out))
             for w, q in enumerate(shares)]
    before = _server_stats(client)
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    after = _server_stats(client)
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    batches = [lat for r in results for lat, _ in r[2]]
    per_decision = [lat / size for r in results for lat, size in r[2]]
    total = sum(size for r in results for _, size in r[2])
    per_master = [a[1] - b[1] for a, b in zip(after, before)]
    return {
        "batch": batch,
        "decisions": total,
        "kept": sum(r[3] for r in results),
        # reads of its buckets per decision: 1 when no earlier decision near it was in flight
        "scans_per_decision": sum(r[4] for r in results) / total,
        "decisions_per_s": total / wall,
        # a decision waits for its whole batch: its latency is the batch's
        "latency_ms": _percentiles(batches),
        "batch_ms_per_decision": _percentiles(per_decision),
        "server_us_per_decision": sum(per_master) / total,
        "server_cpu_us_per_decision": 1e6 * sum(a[2] - b[2] for a, b in zip(after, before)) / total,
        "commands_per_decision": sum(a[0] - b[0] for a, b in zip(after, before)) / total,
        # the busiest master's time per decision bounds what the servers can decide per second
        "busiest_master_us_per_decision": max(per_master) / total,
        "busiest_master_share": max(per_master) / max(1, sum(per_master)),
        # the same from the servers' CPU time, which the other processes on the machine do not inflate
        "busiest_master_cpu_us_per_decision": 1e6 * max(a[2] - b[2] for a, b in zip(after, before)) / total,
        # the deciding processes' own CPU time: with the servers' it is what a decision costs the machine
        "client_cpu_us_per_decision": 1e6 * sum(r[5] for r in results) / total,
        "cores": os.cpu_count(),
    }


def bench_near(server_url: str, docs: int, per_client: int, seed: int = 11, *, batch: int | None = None,
               one_by_one: int = NEAR_ONE_BY_ONE["default"]) -> dict:
    """Preload ``docs`` documents, then decide ``per_client`` SimHashes in each of CLIENTS
    processes, and ``one_by_one`` more (a second sample)."""
    from scrapy_dedup.store.redis.functions import StoreFunctions, connect, is_cluster

    batch = batch or NEAR_BATCH
    client = connect(server_url)
    client.flushall()
    StoreFunctions(client, "bench")
    rng = np.random.default_rng(seed)
    fps = rng.integers(0, 2**63, size=docs, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size=docs, dtype=np.uint64)
    before = used_memory(client)
    t0 = time.perf_counter()
    preload_tables(client, "bench", fps)
    load_s = time.perf_counter() - t0
    table_bytes = (used_memory(client) - before) / docs
    shares = near_queries(fps, per_client + one_by_one, seed)
    batched = _run_deciders(client, server_url, [q[:per_client] for q in shares], batch)
    single = _run_deciders(client, server_url, [q[per_client:] for q in shares], 1) if one_by_one else None
    client.flushall()
    return {
        "cluster": is_cluster(client),
        "documents": docs,
        **batched,
        "one_at_a_time": single,
        "preload_s": load_s,
        "table_bytes_per_document": table_bytes,
        "load_average": list(os.getloadavg()),
    }


# -- datasketch's Redis LSH storage ---------------------------------------------------------


def bench_datasketch(server_url: str, docs: int) -> dict | None:
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        return None
    from urllib.parse import urlsplit

    from scrapy_dedup.store.redis.functions import connect

    client = connect(server_url)
    client.flushall()
    parts = urlsplit(server_url)
    before = used_memory(client)
    lsh = MinHashLSH(
        threshold=0.7,
        num_perm=256,
        storage_config={"type": "redis", "basename": b"bench", "redis": {"host": parts.hostname, "port": parts.port}},
    )
    rng = random.Random(5)
    for d in range(docs):
        m = MinHash(num_perm=256, seed=1)
        for _ in range(200):
            m.update(str(rng.getrandbits(40)).encode())
        lsh.insert(f"https://docs.example.org/page/{d}", m)
    per_doc = (used_memory(client) - before) / docs
    client.flushall()
    return {"documents": docs, "bytes_per_document": per_doc, "num_perm": 256, "bands": lsh.b, "rows": lsh.r}


# -- a real doc site crawled by 1, 2 and 4 processes ------------------------------------------


def _commandstats(client) -> tuple[int, int]:
    """(calls, usec) of every command, summed over the masters."""
    from scrapy_dedup.store.redis.functions import primaries

    calls = usec = 0
    for node in primaries(client):
        for name, stats in node.info("commandstats").items():
            if name.startswith("cmdstat_"):
                calls += int(stats.get("calls", 0))
                usec += int(stats.get("usec", 0))
    return calls, usec


def _server_reads(client) -> int:
    """The server's read events so far (``INFO stats``): about one a client round trip."""
    return int(client.info("stats")["total_reads_processed"])


def _crawl_together(start: str, out: Path, settings: dict, processes: int) -> tuple[float, list]:
    from testing import run_crawl

    results: list = [None] * processes

    def one(i: int) -> None:
        results[i] = run_crawl(start, out / f"p{i}", settings, timeout=1800, check=False)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(processes)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    failed = [r for r in results if r.returncode != 0]
    if failed:
        raise RuntimeError(f"a crawl process failed:\n{failed[0].log[-3000:]}")
    return wall, results


def bench_processes(single_url: str, tmp: Path, pages: int, counts: tuple[int, ...], rounds: int = 1) -> dict:
    """The PostgreSQL docs served on 127.0.0.1, crawled by one process on LevelDB, then by
    1, 2 and 4 processes over one Redis store and one scrapy-redis queue; in ``rounds``
    interleaved rounds, whose pages/s are given each and as their median (a shared machine's
    speed moves more from one crawl to the next than the store changes it)."""
    import uuid

    from bench_crawl import postgres_site
    from redis_time import QUEUE_CLIENT

    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.redis.functions import connect
    from scrapy_dedup.store.redis.store import RedisStore

    site, chosen = postgres_site(pages)
    # the crawl processes time their round trips (redis_time.py, from this folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    server, origin = site.serve()
    start = origin + "/index.html"
    base = {"DEDUP_WORKERS": 1, "DEDUP_LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "WARNING", "CONCURRENT_REQUESTS": 16}
    client = connect(single_url)
    runs: dict[str, dict] = {}

    def measured(label: str, wall: float, extra: dict) -> None:
        # the last round's figures, the pages/s of every round and their median
        run = runs.setdefault(label, {"rounds_pages_per_s": []})
        run["rounds_pages_per_s"].append(site.fetches / wall)
        if "same_result_as_leveldb" in extra:
            run.setdefault("rounds_same_result", []).append(extra.pop("same_result_as_leveldb"))
            run["same_result_as_leveldb"] = all(run["rounds_same_result"])
        run.update(wall_s=wall, fetches=site.fetches, pages_per_s=statistics.median(run["rounds_pages_per_s"]), **extra)

    try:
        for turn in range(rounds):
            site.reset()
            wall, (ref,) = _crawl_together(start, tmp / f"leveldb-{turn}", base, 1)
            with LevelDBStore.open_existing(str(tmp / f"leveldb-{turn}" / "p0" / "store")) as store:
                expected = process_count_outcome(store)
            measured("leveldb, 1 process", wall, {})
            for n in counts:
                client.flushall()
                prefix = f"bench:{uuid.uuid4().hex[:8]}"
                settings = {
                    **base,
                    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                    "SCHEDULER_PERSIST": True,
                    "SCHEDULER_QUEUE_KEY": f"{prefix}:requests",
                    "REDIS_URL": single_url,
                    "DUPEFILTER_CLASS": "scrapy_dedup.dupefilter.DedupDupeFilter",
                    "DEDUP_STORE": single_url,
                    "DEDUP_REDIS_PREFIX": prefix,
                    "EXTENSIONS": {"demo_project.extensions.StatsDump": 500, "redis_time.RedisTime": 0},
                    "REDIS_PARAMS": {"client_name": QUEUE_CLIENT},
                }
                site.reset()
                memory_before = used_memory(client)
                calls_before, usec_before = _commandstats(client)
                reads_before = _server_reads(client)
                wall, results = _crawl_together(start, tmp / f"redis{n}-{turn}", settings, n)
                reads_after = _server_reads(client)
                calls_after, usec_after = _commandstats(client)
                # near duplicates decided at once by two processes may both be kept until the
                # shared store is settled: the settled store is what equals one process's
                subprocess.run([sys.executable, "-m", "scrapy", "dedup", "settle", "--store", single_url,
                                "--redis-prefix", prefix], check=True, capture_output=True, cwd=tmp, timeout=600)
                with RedisStore.open_existing(single_url, prefix=prefix) as store:
                    got = process_count_outcome(store)
                    documents = sum(1 for _ in iter_clusters(store))
                    urls = len(got["per_key"])
                client.delete(f"{prefix}:requests")
                memory = used_memory(client) - memory_before
                measured(f"redis, {n} process{'es' if n > 1 else ''}", wall, {
                    "same_result_as_leveldb": got == expected,
                    "server_us_per_page": (usec_after - usec_before) / site.fetches,
                    "server_calls_per_page": (calls_after - calls_before) / site.fetches,
                    # every client's round trips (the store's and scrapy-redis's queue): a server
                    # read event takes in one round trip's commands
                    "round_trips_per_page": (reads_after - reads_before) / site.fetches,
                    "documents": documents,
                    "url_records": urls,
                    "bytes_per_document_everything": memory / documents,
                    "bytes_per_url_record_everything": memory / urls,
                    "emitted": sum(len(r.items) for r in results),
                    # every process's time in the store's round trips (and the queue's apart),
                    # per page served (each is extracted once)
                    "store_round_trip_ms_per_page": 1000 * sum(
                        r.stats.get("bench/redis_store_s", 0) for r in results) / len(chosen),
                    "queue_round_trip_ms_per_page": 1000 * sum(
                        r.stats.get("bench/redis_queue_s", 0) for r in results) / len(chosen),
                    # and the share of the processes' wall time it took
                    "store_round_trip_share_of_wall": sum(r.stats.get("bench/redis_store_s", 0) for r in results)
                    / max(1e-9, sum(float(r.stats.get("elapsed_time_seconds", 0)) for r in results)),
                    # documents that found another process's decision near theirs in flight and
                    # waited for it (off the reactor, DecisionBusy)
                    "waited_for_another_process": sum(
                        r.stats.get("dedup/doc/waited_for_another_process", 0) for r in results),
                    "store_replies_per_fetch": sum(
                        r.stats.get("bench/redis_store_replies", 0) for r in results) / site.fetches,
                })
                log(NAME, f"  round {turn + 1}: {n} process(es): {site.fetches / wall:.1f} pages/s, "
                          f"same result: {got == expected}")
    finally:
        server.shutdown()
    return runs


def _family(key: bytes, prefix: str) -> str:
    """``b``, ``n``, ``t:url``, ... : the part of a key between the crawl's prefix and its tag."""
    rest = key.decode("utf-8", "surrogateescape")[len(prefix) + 1 :]
    return rest.split("{", 1)[0].rstrip(":") or rest


def bytes_by_family(client, prefix: str) -> dict[str, dict[str, int]]:
    """Per key family of one crawl's prefix: keys and bytes (``MEMORY USAGE``, exact: SAMPLES 0)."""
    from scrapy_dedup.store.redis.functions import primaries

    out: dict[str, dict[str, int]] = {}
    for node in primaries(client):
        keys = list(node.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            pipe = node.pipeline(transaction=False)
            for key in chunk:
                pipe.memory_usage(key, samples=0)
            for key, used in zip(chunk, pipe.execute()):
                entry = out.setdefault(_family(key, prefix), {"keys": 0, "bytes": 0})
                entry["keys"] += 1
                entry["bytes"] += int(used or 0)
    return dict(sorted(out.items()))


def bench_index_bytes(server_url: str, counts: tuple[int, ...], seed: int = 17) -> dict:
    """Bytes per document of the near-duplicate index (LSH band buckets and SimHash tables)
    after N documents with random fingerprints entered through the store's batch API."""
    import uuid

    from scrapy_dedup.core.bands import BANDS
    from scrapy_dedup.store.redis.store import RedisStore

    rng = random.Random(seed)
    out = {}
    for n in counts:
        store = RedisStore(server_url, {"bench": 1}, prefix=f"bench:{uuid.uuid4().hex[:8]}")
        try:
            looked_up = []
            for start in range(0, n, 500):
                with store.batch() as batch:
                    for i in range(start, min(n, start + 500)):
                        bands = [rng.getrandbits(64) for _ in range(BANDS)]
                        batch.index_near("", rng.getrandbits(64), bands, f"{i:016x}")
                        if i % max(1, n // 200) == 0:
                            looked_up.append((f"{i:016x}", bands))
            # a lookup of a document's 32 bands (one call per band group): server time at this size
            calls_before, usec_before = _commandstats(store.client)
            t0 = time.perf_counter()
            for cid, bands in looked_up:
                assert cid in store.near_candidates("", None, bands).bands
            lookup_s = (time.perf_counter() - t0) / len(looked_up)
            calls_after, usec_after = _commandstats(store.client)
            families = bytes_by_family(store.client, store.prefix)
            store.client.delete(*[k for k in store.client.scan_iter(match=f"{store.prefix}:*", count=1000)])
        finally:
            store.close()
        out[str(n)] = {
            "documents": n,
            "band_lookup_ms": 1000 * lookup_s,
            "band_lookup_server_us": (usec_after - usec_before) / len(looked_up),
            "bytes_by_family": families,
            "bytes_per_document": {f: v["bytes"] / n for f, v in families.items() if f not in ("m",)},
        }
    return out


def bench_band_bucket_cost(server_url: str, calls: int = 1000, seed: int = 23) -> dict:
    """Server time of one band-group lookup (``sdd_bands_find`` of 4 buckets, fields of one
    hash) with the buckets as full as 10^6 and 10^7 documents make them at 12, 14 and 16 bucket
    bits: what the choice of BAND_BUCKET_BITS trades against the per-bucket bytes."""
    import uuid

    from scrapy_dedup.store.redis import keys as rk
    from scrapy_dedup.store.redis.functions import StoreFunctions, connect, primaries

    client = connect(server_url)
    StoreFunctions(client, "bench")
    node = primaries(client)[0]
    rng = random.Random(seed)
    key = rk.band_hash_key(f"bench:{uuid.uuid4().hex[:8]}", rk.scope_digest("").hex(), 0)
    out: dict[str, dict[str, float]] = {}
    for bits in (12, 14, 16):
        for docs in (10**6, 10**7):
            records = max(1, docs >> bits)
            entries = b""
            for band in range(4):
                band_hash = rng.getrandbits(64)
                field = rk.band_field(band, band_hash)
                client.hset(key, field, rng.randbytes(rk.BAND_RECORD * records))
                entries += rk.band_entry(band, band_hash)
            before = int(node.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0))
            for _ in range(calls):
                client.fcall("sdd_bands_find", 1, key, entries)
            after = int(node.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0))
            out.setdefault(str(bits), {})[str(docs)] = (after - before) / calls
            client.delete(key)
    return out


def _request_blob() -> bytes:
    import pickle

    return pickle.dumps({"url": "https://www.postgresql.org/docs/15/x.html", "callback": "parse",
                         "headers": {}, "meta": {}, "priority": 0}, protocol=4)


def decide_pages(store, pages, request_blob: bytes) -> float:
    """Seconds per page of what a crawl process asks of its store for each page of ``pages``
    ((url, raw bytes, text, fingerprint, packed text or None)): the frontier's seen-check (a
    shared store owes the request with the key's mark, as the dupefilter does), recording the
    response, the recall of its body by hash (which skips the extraction of a body seen
    before), the decision, settling the request. The crawl's extraction workers pack the text
    the store keeps; a page without it packed is packed here, in the pass."""
    from scrapy_dedup.core.fingerprints import raw_hash
    from scrapy_dedup.decide.frontier import Frontier
    from scrapy_dedup.decide.index import ContentIndex, Document
    from scrapy_dedup.store.base import OweOffer

    run = store.begin_run()
    frontier = Frontier(store, run)
    index = ContentIndex(store, run, max_distance=3, min_jaccard=0.8, min_tokens=50)
    count = 0
    t0 = time.perf_counter()
    for url, body, text, fp, packed in pages:
        key = url
        offer = OweOffer(key, request_blob) if store.shared else None
        frontier.check(url, key, owe=offer)
        if offer is None or not offer.owed:
            with store.batch() as batch:
                put_pending(batch, key, request_blob)
        frontier.record_fetch(url, key, 200, None, None)
        body_hash = raw_hash(body)
        index.recall(body_hash)  # as the pipeline asks before it extracts
        doc = Document(key=key, url=url, fingerprint=fp, raw_hash=body_hash, text=text, packed_text=packed)
        decision = index.ingest(doc)
        with store.batch(later=True) as batch:  # as the crawl settles
            if decision.content_hash:
                put_emitted(batch, key, decision.content_hash)
            settle_pending(batch, key)
        count += 1
    return (time.perf_counter() - t0) / max(1, count)


def bench_store_time(server_url: str, pages: int) -> dict:
    """Per page, the time a crawl process spends on the store against the time it spends
    extracting, on the same pages in one process (:func:`decide_pages`): the whole pass
    (client wall: the decision's own code, the round trips and the server's work), and the
    part of it spent in round trips (writing to the socket, the server, reading the replies)."""
    import uuid

    import _corpus
    from redis_servers import counting_connection

    from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html, analysed_and_packed
    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.redis.store import RedisStore

    root = _corpus.docs_root()
    paths = _corpus.html_pages(root)[:pages]
    bodies = [(f"https://www.postgresql.org/docs/15/{p}", (root / p).read_bytes()) for p in paths]
    options = ExtractOptions()
    t0 = time.perf_counter()
    # what a crawl's extraction worker does: the text, its fingerprints, the text packed to keep
    analysed = [(url, body, *analysed_and_packed(analyse_html, body, url, options)) for url, body in bodies]
    extract_s = (time.perf_counter() - t0) / len(analysed)
    request_blob = _request_blob()

    with tempfile.TemporaryDirectory() as tmp, LevelDBStore(str(Path(tmp) / "store"), {"bench": 1}) as store:
        leveldb_s = decide_pages(store, analysed, request_blob)
    store = RedisStore(server_url, {"bench": 1}, prefix=f"bench:{uuid.uuid4().hex[:8]}")
    counting = counting_connection()
    try:
        # the same store on connections that count what the client sends
        pool = store.client.connection_pool
        pool.disconnect()
        pool.reset()
        pool.connection_class = counting
        calls_before, usec_before = _commandstats(store.client)
        sent_before, trips_before, waited_before = counting.commands, counting.round_trips, counting.seconds
        redis_s = decide_pages(store, analysed, request_blob)
        sent, trips = counting.commands - sent_before, counting.round_trips - trips_before
        waited_s = counting.seconds - waited_before
        calls_after, usec_after = _commandstats(store.client)
        t0 = time.perf_counter()
        for _ in range(1000):
            store.client.ping()
        ping_us = (time.perf_counter() - t0) * 1000
        families = bytes_by_family(store.client, store.prefix)
        documents = sum(1 for _ in iter_clusters(store))
    finally:
        store.close()
    n = len(analysed)
    return {"pages": n, "extract_ms": 1000 * extract_s, "redis_store_ms": 1000 * redis_s,
            "leveldb_store_ms": 1000 * leveldb_s, "redis_over_extract": redis_s / extract_s,
            "round_trip_ms": 1000 * waited_s / n, "round_trip_over_extract": waited_s / n / extract_s,
            "client_commands_per_page": sent / n, "round_trips_per_page": trips / n,
            "server_calls_per_page": (calls_after - calls_before) / n,
            "server_us_per_page": (usec_after - usec_before) / n, "ping_us": ping_us,
            "documents": documents, "bytes_by_family": families,
            "bytes_per_document_by_family": {f: v["bytes"] / documents for f, v in families.items()}}


def synthetic_pages(count: int, texts: list[str], seed: int = 5):
    """``count`` distinct pages (url, raw bytes, text, fingerprint, packed text) of the length and words of
    real ones: page i is the words of ``texts[i % len(texts)]`` in a random order, so no two are
    near duplicates and each is a document of its own. They are fingerprinted by a worker
    process, as a crawl's extraction workers do, while the caller decides the ones before."""
    rng = random.Random(seed)

    def shuffled():
        for i in range(count):
            words = texts[i % len(texts)].split()
            rng.shuffle(words)
            yield f"https://docs.example.org/{i // 1000}/page-{i}.html", " ".join(words)

    pages = shuffled()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        # two blocks in flight at most: the worker runs ahead of the caller by one block
        block = list(itertools.islice(pages, 2048))
        ahead = pool.map_async(_synthetic_page, block, chunksize=64) if block else None
        while ahead is not None:
            block = list(itertools.islice(pages, 2048))
            following = pool.map_async(_synthetic_page, block, chunksize=64) if block else None
            yield from ahead.get()
            ahead = following


def _synthetic_page(page: tuple[str, str]) -> tuple:
    from scrapy_dedup.core.fingerprints import fingerprint
    from scrapy_dedup.core.records import pack_text

    url, text = page
    return url, text.encode(), text, fingerprint(text), pack_text(text)


def bench_document_bytes(server_url: str, counts: tuple[int, ...], pages: int) -> dict:
    """Bytes per document, by key family, after each of ``counts`` distinct documents went
    through a crawl's store calls (:func:`decide_pages`), each count in a store of its own: at
    sizes where the per-key costs of the sharded tables are shared, as in a real crawl, unlike
    the few hundred pages of the store time measure.  Texts are kept (``DEDUP_KEEP_TEXT``, the
    default); the families are given apart."""
    import _corpus

    from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html

    root = _corpus.docs_root()
    options = ExtractOptions()
    texts = []
    for path in _corpus.html_pages(root)[:pages]:
        text, _ = analyse_html((root / path).read_bytes(), f"https://www.postgresql.org/docs/15/{path}", options)
        if text:
            texts.append(text)
    return {str(count): _document_bytes(server_url, count, texts) for count in counts}


def _document_bytes(server_url: str, documents: int, texts: list[str]) -> dict:
    import uuid

    from scrapy_dedup.store.redis.store import RedisStore

    store = RedisStore(server_url, {"bench": 1}, prefix=f"bench:{uuid.uuid4().hex[:8]}")
    try:
        used_before = used_memory(store.client)
        decide_pages(store, synthetic_pages(documents, texts), _request_blob())
        store.close()  # sends the last settle, which waits for a next call (batch(later=True))
        store = RedisStore(server_url, {"bench": 1}, prefix=store.prefix)
        used = used_memory(store.client) - used_before
        families = bytes_by_family(store.client, store.prefix)
        kept = sum(1 for _ in iter_clusters(store))
        store.client.delete(*[k for k in store.client.scan_iter(match=f"{store.prefix}:*", count=1000)])
    finally:
        store.close()
    total = sum(v["bytes"] for v in families.values())
    text_bytes = families.get("t:text", {}).get("bytes", 0)
    return {"documents": kept, "used_memory_per_document": used / kept,
            "bytes_per_document": total / kept, "bytes_per_document_without_texts": (total - text_bytes) / kept,
            "bytes_by_family": families,
            "bytes_per_document_by_family": {f: v["bytes"] / kept for f, v in families.items()}}


def measure_near(single, cluster, doc_counts: list[int], per_client: int, one_by_one: int) -> list[dict]:
    """Near-duplicate decisions at each document count, on one server and on three masters."""
    runs = []
    for docs in doc_counts:
        for label, target in (("1 server", single), ("3 masters", cluster)):
            log(NAME, f"near-duplicate decisions on {label}: {docs:,} documents preloaded, {CLIENTS} clients x "
                      f"{per_client:,} decisions in batches of {NEAR_BATCH}, and x {one_by_one} one at a time ...")
            r = {"servers": label, **bench_near(target.url, docs, per_client, one_by_one=one_by_one)}
            runs.append(r)
            log(NAME, f"  {r['decisions_per_s']:.0f} decisions/s, batch p99 {r['latency_ms']['p99']:.1f} ms; one at a "
                      f"time {r['one_at_a_time']['decisions_per_s']:.0f}/s; load {r['load_average'][0]:.1f}")
    return runs


def _measure(tmp: Path, n_urls: int, doc_counts: list[int], per_client: int, n_sketch: int, size: str,
             only_near: bool, crawl_rounds: int):
    from redis_servers import RedisCluster, RedisServer

    with RedisServer(tmp / "single") as single, RedisCluster(tmp / "cluster") as cluster:
        if only_near:
            return None, measure_near(single, cluster, doc_counts, per_client, NEAR_ONE_BY_ONE[size]), None, None, None
        log(NAME, f"frontier: {n_urls:,} URLs, ours and scrapy-redis's dupefilter ...")
        frontier = bench_frontier(single.url, n_urls, ONE_BY_ONE[size])
        near = measure_near(single, cluster, doc_counts, per_client, NEAR_ONE_BY_ONE[size])
        log(NAME, f"datasketch MinHashLSH with Redis storage: {n_sketch:,} documents ...")
        sketch = bench_datasketch(single.url, n_sketch)
        log(NAME, f"store time per page against extraction, {CRAWL_PAGES[size]} PostgreSQL pages ...")
        store_time = bench_store_time(single.url, CRAWL_PAGES[size])
        log(NAME, f"near-duplicate index bytes at {', '.join(f'{n:,}' for n in INDEX_BYTES_DOCS[size])} documents ...")
        store_time["index_bytes"] = bench_index_bytes(single.url, INDEX_BYTES_DOCS[size])
        store_time["band_bucket_cost_us"] = bench_band_bucket_cost(single.url)
        log(NAME, f"bytes per document after {', '.join(f'{n:,}' for n in DOCUMENT_BYTES_DOCS[size])} distinct documents ...")
        store_time["document_bytes"] = bench_document_bytes(single.url, DOCUMENT_BYTES_DOCS[size], CRAWL_PAGES[size])
        log(NAME, f"the PostgreSQL docs crawled by {', '.join(map(str, PROCESS_COUNTS))} processes "
                  f"({CRAWL_PAGES[size]} pages) ...")
        crawls = bench_processes(single.url, tmp, CRAWL_PAGES[size], PROCESS_COUNTS, crawl_rounds)
    return frontier, near, sketch, store_time, crawls


def _count_label(n: int) -> str:
    return {10**5: "10^5", 10**6: "10^6", 10**7: "10^7", 10**8: "10^8"}.get(n, f"{n:,}")


def store_time_rows(store_time: dict) -> list[dict]:
    """Rows of the store time per page and of the bytes by key family after those pages."""
    rows: list[dict] = []
    rows.append(row(NAME, f"store time per page, {store_time['pages']} PostgreSQL pages decided in one process "
                    "(seen-check, owe, record the response, decide, settle; client wall)",
                    f"{store_time['redis_store_ms']:.2f} ms (Redis)",
                    f"extraction {store_time['extract_ms']:.1f} ms; LevelDB {store_time['leveldb_store_ms']:.2f} ms",
                    f"{100 * store_time['redis_over_extract']:.1f}% of extraction", "< 10% of extraction",
                    store_time["redis_over_extract"] < TARGET_STORE_SHARE))
    rows.append(row(NAME, "store time per page in round trips (writing to the socket, the server's work, reading "
                    "the replies; the rest of the pass is the decision's own code, as on LevelDB)",
                    f"{store_time['round_trip_ms']:.2f} ms (Redis)", f"extraction {store_time['extract_ms']:.1f} ms",
                    f"{100 * store_time['round_trip_over_extract']:.1f}% of extraction",
                    "< 10% of extraction (the round trips alone)",
                    store_time["round_trip_over_extract"] < TARGET_STORE_SHARE))
    rows.append(row(NAME, "store time per page: where it goes (Redis)",
                    f"{store_time['client_commands_per_page']:.0f} commands sent in "
                    f"{store_time['round_trips_per_page']:.1f} round trips ({store_time['server_calls_per_page']:.0f} "
                    f"with the functions' own), {store_time['server_us_per_page']:.0f} us "
                    f"of server time; one round trip (PING) {store_time['ping_us']:.0f} us", "", "", "report", None))
    per_family = store_time["bytes_per_document_by_family"]
    rows.append(row(NAME, f"bytes per document by key family after the {store_time['pages']} pages "
                    f"({store_time['documents']} documents; MEMORY USAGE)",
                    ", ".join(f"{f} {fmt(b)}" for f, b in sorted(per_family.items(), key=lambda e: -e[1])[:8]),
                    f"all {fmt(sum(per_family.values()))}", "", "report", None))
    return rows


def document_bytes_rows(document_bytes: dict) -> list[dict]:
    """Rows of the bytes per document after many distinct documents (:func:`bench_document_bytes`)."""
    return [r for d in document_bytes.values() for r in _document_bytes_rows(d)]


def _document_bytes_rows(d: dict) -> list[dict]:
    per_family = d["bytes_per_document_by_family"]
    return [
        row(NAME, f"bytes per document at {d['documents']:,} distinct documents, the crawl's store calls "
            "(MEMORY USAGE of every key, texts kept)", fmt(d["bytes_per_document"]),
            f"without the texts {fmt(d['bytes_per_document_without_texts'])}; used_memory "
            f"{fmt(d['used_memory_per_document'])}", "", "<= 1.5 KB",
            d["bytes_per_document_without_texts"] <= TARGET_BYTES_PER_DOCUMENT),
        row(NAME, f"bytes per document at {d['documents']:,} distinct documents, by key family",
            ", ".join(f"{f} {fmt(b)}" for f, b in sorted(per_family.items(), key=lambda e: -e[1])[:9]),
            "", "", "report", None),
    ]


def index_rows(store_time: dict) -> list[dict]:
    """Rows of the near-duplicate index's bytes and lookup cost at a few sizes."""
    rows: list[dict] = []
    for count, r in store_time["index_bytes"].items():
        fams = r["bytes_by_family"]
        rows.append(row(NAME, f"near-duplicate index bytes per document at {int(count):,} random documents "
                        "(LSH band buckets b, SimHash tables n; MEMORY USAGE)",
                        ", ".join(f"{f} {fmt(v['bytes'] / r['documents'])} ({v['keys']:,} keys)"
                                  for f, v in fams.items() if f in ("b", "n")), "", "", "report", None))
        rows.append(row(NAME, f"LSH band lookup of one document at {int(count):,} documents (32 bands, one call "
                        "per band group)", f"{r['band_lookup_ms']:.2f} ms, {r['band_lookup_server_us']:.0f} us "
                        "of server time", "", "", "report", None))
    cost = store_time["band_bucket_cost_us"]
    rows.append(row(NAME, "server time of one band-group lookup (4 buckets) as full as 10^6 / 10^7 documents "
                    "make them, by bucket bits (the layout uses 14)",
                    "; ".join(f"{bits} bits {c['1000000']:.0f} / {c['10000000']:.0f} us" for bits, c in cost.items()),
                    "", "", "report", None))
    return rows


def crawl_rows(crawls: dict, extract_ms: float | None = None) -> list[dict]:
    """Rows of the PostgreSQL docs crawled on LevelDB and by 1, 2 and 4 processes on Redis;
    ``extract_ms``: the extraction time per page of the store-time pass (the same pages,
    extracted on the idle machine), against which the crawls' round trips are put."""
    rows: list[dict] = []
    reference = crawls["leveldb, 1 process"]

    def pages(r: dict) -> str:
        each = r.get("rounds_pages_per_s", [])
        if len(each) < 2:
            return fmt(r["pages_per_s"])
        return f"{fmt(r['pages_per_s'])} (median of {len(each)} rounds: {', '.join(fmt(p) for p in each)})"

    for label, r in crawls.items():
        if label == "leveldb, 1 process":
            rows.append(row(NAME, f"PostgreSQL docs crawled, {label}: pages/s", pages(r), "", "",
                            "report", None))
            continue
        rows.append(row(NAME, f"PostgreSQL docs crawled, {label} (scrapy-redis queue): pages/s",
                        pages(r), f"LevelDB, 1 process {fmt(reference['pages_per_s'])}",
                        f"{r['pages_per_s'] / reference['pages_per_s']:.2f}x", "same result as LevelDB",
                        r["same_result_as_leveldb"]))
        rows.append(row(NAME, f"PostgreSQL docs crawled, {label}: server time and calls per page",
                        f"{r['server_us_per_page']:.0f} us in {r['server_calls_per_page']:.0f} calls, "
                        f"{r['round_trips_per_page']:.2f} round trips (the store's and the queue's)", "", "",
                        "report", None))
        if extract_ms and "store_round_trip_ms_per_page" in r:
            share = r["store_round_trip_ms_per_page"] / extract_ms
            rows.append(row(NAME, f"PostgreSQL docs crawled, {label}: the store's round trips per page served, in "
                            "the crawl processes (redis-py's send and read, the queue's apart)",
                            f"{r['store_round_trip_ms_per_page']:.2f} ms ({r['store_replies_per_fetch']:.1f} "
                            f"replies a fetch; the queue {r['queue_round_trip_ms_per_page']:.2f} ms); "
                            f"{100 * r['store_round_trip_share_of_wall']:.1f}% of the processes' wall time",
                            f"extraction {extract_ms:.1f} ms a page (the store-time pass, idle machine)",
                            f"{100 * share:.1f}% of extraction", "< 10% of extraction", share < TARGET_STORE_SHARE))
    one_process = crawls["redis, 1 process"]
    rows.append(row(NAME, "bytes per document, everything included (records, MinHash, texts, indexes, frontier, "
                    f"owed requests; used_memory after the crawl / {one_process['documents']} documents)",
                    fmt(one_process["bytes_per_document_everything"]), "", "", "<= 1.5 KB",
                    one_process["bytes_per_document_everything"] <= TARGET_BYTES_PER_DOCUMENT))
    rows.append(row(NAME, f"bytes per URL record, everything included ({one_process['url_records']} URL keys)",
                    fmt(one_process["bytes_per_url_record_everything"]), "", "", "report", None))
    return rows


#: rows of the near-duplicate decisions start with these (``--only near`` replaces them)
NEAR_ROW_PREFIXES = ("near-duplicate decisions", "SimHash tables")
#: rows of the store time and of the crawls start with these (``--only crawl`` replaces them)
STORE_ROW_PREFIXES = ("store time per page", "bytes per document by key family", "bytes per document at")
#: rows of the near-duplicate index's bytes and lookup cost (``--only crawl`` replaces them too)
INDEX_ROW_PREFIXES = ("near-duplicate index bytes", "LSH band lookup", "server time of one band-group lookup")
CRAWL_ROW_PREFIXES = ("PostgreSQL docs crawled", "bytes per document, everything", "bytes per URL record")


def _replace_rows(rows: list[dict], prefixes: tuple[str, ...], new: list[dict]) -> list[dict]:
    """``rows`` with the ones whose measure starts with ``prefixes`` replaced by ``new``, in place
    of the first of them."""
    kept = [r for r in rows if not r["measure"].startswith(prefixes)]
    at = next((i for i, r in enumerate(rows) if r["measure"].startswith(prefixes)), len(kept))
    return kept[:at] + new + kept[at:]


def _previous(out: Path) -> dict:
    path = out / f"{NAME}.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"rows": []}
    previous.pop("benchmark", None)
    previous.pop("machine", None)
    return previous


def machine_ceiling(r: dict) -> float:
    """Decisions/s this machine could reach if every core did nothing but decide: the clients
    and the servers share its cores, so a figure above it cannot be measured here."""
    return r["cores"] * 1e6 / (r["client_cpu_us_per_decision"] + r["server_cpu_us_per_decision"])


def near_rows(near: list[dict], sketch: dict | None) -> list[dict]:
    rows = []
    by_docs: dict[int, dict[str, dict]] = {}
    for r in near:
        by_docs.setdefault(r["documents"], {})[r["servers"]] = r
    largest = max(by_docs)
    for docs, runs in by_docs.items():
        dlabel = _count_label(docs)
        # the target is stated at 10^7 documents; smaller tables are reported beside it
        at_target = docs >= 10**7
        for lbl, r in runs.items():
            head = f"near-duplicate decisions at {dlabel} documents, {lbl}"
            three = lbl == "3 masters"
            rows.append(row(NAME, f"{head}: decisions/s ({CLIENTS} clients, one at a time; "
                            f"load average {r['load_average'][0]:.1f})",
                            fmt(r["decisions_per_s"]), f"one at a time (decide) {fmt(r['one_at_a_time']['decisions_per_s'])}",
                            f"{r['decisions_per_s'] / r['one_at_a_time']['decisions_per_s']:.1f}x",
                            f">= {TARGET_DECISIONS:,} on 3 masters at 10^7" if three else "report",
                            r["decisions_per_s"] >= TARGET_DECISIONS if three and at_target else None))
            rows.append(row(NAME, f"{head}: p50 / p99 latency per batch of {r['batch']} (every decision of a batch "
                            "waits for it) and per decision one at a time",
                            f"{r['latency_ms']['p50']:.1f} / {r['latency_ms']['p99']:.1f} ms per batch; "
                            f"{r['batch_ms_per_decision']['p50']:.2f} / {r['batch_ms_per_decision']['p99']:.2f} ms "
                            "per decision (batch time / batch size)",
                            f"one at a time {r['one_at_a_time']['latency_ms']['p50']:.2f} / "
                            f"{r['one_at_a_time']['latency_ms']['p99']:.2f} ms", "", "report", None))
            rows.append(row(NAME, f"{head}: server time per decision (commandstats of FCALL; CPU of the servers)",
                            f"{r['server_us_per_decision']:.0f} us in {r['commands_per_decision']:.2f} FCALLs, "
                            f"{r['server_cpu_us_per_decision']:.0f} us CPU; busiest master "
                            f"{100 * r['busiest_master_share']:.0f}% of it",
                            f"one at a time {r['one_at_a_time']['server_us_per_decision']:.0f} us in "
                            f"{r['one_at_a_time']['commands_per_decision']:.0f} FCALLs", "", "report", None))
            rows.append(row(NAME, f"{head}: server-bound ceiling (1 s / busiest master's CPU time per decision)",
                            fmt(1e6 / r["busiest_master_cpu_us_per_decision"]),
                            f"from commandstats {fmt(1e6 / r['busiest_master_us_per_decision'])}", "", "report", None))
            if "client_cpu_us_per_decision" in r:
                rows.append(row(NAME, f"{head}: machine-bound ceiling ({r['cores']} cores / the clients' and the "
                                "servers' CPU time per decision)", fmt(machine_ceiling(r)),
                                f"clients {r['client_cpu_us_per_decision']:.0f} us + servers "
                                f"{r['server_cpu_us_per_decision']:.0f} us CPU per decision", "", "report", None))
        if "1 server" in runs and "3 masters" in runs:
            one, three = runs["1 server"], runs["3 masters"]
            rows.append(row(NAME, f"near-duplicate decisions at {dlabel}: 3 masters vs 1 server",
                            fmt(three["decisions_per_s"]), f"1 server {fmt(one['decisions_per_s'])}",
                            f"{three['decisions_per_s'] / one['decisions_per_s']:.2f}x",
                            ">= 2x at 10^7" if at_target else "report",
                            three["decisions_per_s"] >= 2 * one["decisions_per_s"] if at_target else None))
            if "client_cpu_us_per_decision" in three:
                most = min(machine_ceiling(three), 1e6 / three["busiest_master_cpu_us_per_decision"])
                rows.append(row(NAME, f"near-duplicate decisions at {dlabel}: the most 3 masters could show against "
                                "1 server on this machine (the lower of their two ceilings)", fmt(most),
                                f"1 server {fmt(one['decisions_per_s'])}",
                                f"{most / one['decisions_per_s']:.2f}x", "report", None))
    one = by_docs[largest].get("1 server") or next(iter(by_docs[largest].values()))
    rows.append(row(NAME, f"SimHash tables at {_count_label(largest)} documents: bytes per document",
                    fmt(one["table_bytes_per_document"]),
                    f"datasketch Redis LSH (256 perm) {fmt(sketch['bytes_per_document'])}" if sketch else "datasketch not measured",
                    f"{sketch['bytes_per_document'] / one['table_bytes_per_document']:.0f}x less" if sketch else "",
                    "report", None))
    return rows


def frontier_rows(frontier: dict) -> list[dict]:
    ours, theirs = frontier["ours"], frontier["scrapy_redis"]
    label = _count_label(frontier["urls"])
    return [
        row(NAME, f"frontier, {label} URLs: bytes per URL (used_memory)", fmt(ours["bytes_per_url"]),
            f"scrapy-redis SADD {fmt(theirs['bytes_per_url'])}",
            f"{theirs['bytes_per_url'] / ours['bytes_per_url']:.1f}x less",
            f"<= {TARGET_BYTES_PER_URL}", ours["bytes_per_url"] <= TARGET_BYTES_PER_URL),
        row(NAME, f"frontier, {label} URLs: seen-checks/s, one round trip each", fmt(ours["one_by_one_per_s"]),
            f"scrapy-redis {fmt(theirs['one_by_one_per_s'])}",
            f"{ours['one_by_one_per_s'] / theirs['one_by_one_per_s']:.2f}x", "report", None),
        row(NAME, f"frontier, {label} URLs: seen-checks/s, pipelined", fmt(ours["bulk_per_s"]),
            f"scrapy-redis {fmt(theirs['bulk_per_s'])}", f"{ours['bulk_per_s'] / theirs['bulk_per_s']:.2f}x",
            "report", None),
    ]


@contextmanager
def _one_server(tmp: Path) -> Iterator:
    """A ``redis-server`` in ``tmp``, which is removed afterwards."""
    from redis_servers import RedisServer

    try:
        with RedisServer(tmp / "single") as single:
            yield single
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=SIZES, default="default")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--urls", type=int, help="URLs in the frontier (default by size)")
    parser.add_argument("--docs", help="documents in the tables, comma-separated for several runs (default by size)")
    parser.add_argument("--crawl-rounds", type=int, help="crawl in this many interleaved rounds, each kind's "
                        "pages/s given per round and as their median (default by size: 1 tiny, 3 default, 5 large)")
    parser.add_argument("--only", choices=["near", "frontier", "crawl", "bytes"], help="near: measure near-duplicate "
                        "decisions only (the other figures of the results file stay as they are); crawl: the store "
                        "time per page, the near-duplicate index's bytes and the crawls by 1, 2 and 4 processes "
                        "only (likewise); bytes: the bytes per document after --docs distinct documents only "
                        "(e.g. --docs 1000000; the figures at other counts stay); frontier: the "
                        "frontier against scrapy-redis's dupefilter alone, written to redis_frontier.json (e.g. "
                        "--urls 10000000)")
    args = parser.parse_args(argv)
    n_urls, n_docs, n_sketch = SIZES_N[args.size]
    n_urls = args.urls or n_urls
    doc_counts = [int(d) for d in args.docs.split(",")] if args.docs else [n_docs]

    tmp = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    if args.only == "frontier":
        with _one_server(tmp) as single:
            log(NAME, f"frontier: {n_urls:,} URLs, ours and scrapy-redis's dupefilter ...")
            frontier = bench_frontier(single.url, n_urls, ONE_BY_ONE[args.size])
        write_result(f"{NAME}_frontier", {"size": args.size, "frontier": frontier, "rows": frontier_rows(frontier)},
                     args.out)
        return 0
    if args.only == "bytes":
        counts = tuple(doc_counts) if args.docs else DOCUMENT_BYTES_DOCS[args.size]
        with _one_server(tmp) as single:
            log(NAME, f"bytes per document after {', '.join(f'{n:,}' for n in counts)} distinct documents ...")
            measured = bench_document_bytes(single.url, counts, CRAWL_PAGES[args.size])
        previous = _previous(args.out)
        store_time = previous.get("store_time", {})
        store_time["document_bytes"] = {**store_time.get("document_bytes", {}), **measured}
        rows = _replace_rows(previous.get("rows", []), ("bytes per document at",),
                             document_bytes_rows(dict(sorted(store_time["document_bytes"].items(), key=lambda e: int(e[0])))))
        write_result(NAME, {**previous, "store_time": store_time, "rows": rows}, args.out)
        return 0
    if args.only == "crawl":
        with _one_server(tmp) as single:
            log(NAME, f"store time per page against extraction, {CRAWL_PAGES[args.size]} PostgreSQL pages ...")
            store_time = bench_store_time(single.url, CRAWL_PAGES[args.size])
            # the index's bytes and bucket cost go with the store time's rows: measured again
            log(NAME, f"near-duplicate index bytes at "
                      f"{', '.join(f'{n:,}' for n in INDEX_BYTES_DOCS[args.size])} documents ...")
            store_time["index_bytes"] = bench_index_bytes(single.url, INDEX_BYTES_DOCS[args.size])
            store_time["band_bucket_cost_us"] = bench_band_bucket_cost(single.url)
            log(NAME, f"bytes per document after {', '.join(f'{n:,}' for n in DOCUMENT_BYTES_DOCS[args.size])} distinct documents ...")
            # the figures at other counts (a --only bytes run at 10^6, say) stay beside these
            measured = bench_document_bytes(single.url, DOCUMENT_BYTES_DOCS[args.size], CRAWL_PAGES[args.size])
            kept = _previous(args.out).get("store_time", {}).get("document_bytes", {})
            store_time["document_bytes"] = dict(sorted({**kept, **measured}.items(), key=lambda e: int(e[0])))
            log(NAME, f"the PostgreSQL docs crawled by {', '.join(map(str, PROCESS_COUNTS))} processes ...")
            crawls = bench_processes(single.url, tmp, CRAWL_PAGES[args.size], PROCESS_COUNTS,
                                     args.crawl_rounds or CRAWL_ROUNDS[args.size])
        previous = _previous(args.out)
        rows = _replace_rows(previous.get("rows", []), STORE_ROW_PREFIXES,
                             store_time_rows(store_time) + document_bytes_rows(store_time["document_bytes"]))
        rows = _replace_rows(rows, INDEX_ROW_PREFIXES, index_rows(store_time))
        rows = _replace_rows(rows, CRAWL_ROW_PREFIXES, crawl_rows(crawls, store_time["extract_ms"]))
        write_result(NAME, {**previous, "store_time": store_time, "crawls": crawls, "rows": rows}, args.out)
        return 0
    try:
        results = _measure(tmp, n_urls, doc_counts, NEAR_PER_CLIENT[args.size], n_sketch, args.size,
                           args.only == "near", args.crawl_rounds or CRAWL_ROUNDS[args.size])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    frontier, near, sketch, store_time, crawls = results
    if args.only == "near":
        previous = _previous(args.out)
        rows = _replace_rows(previous.get("rows", []), NEAR_ROW_PREFIXES, near_rows(near, previous.get("datasketch")))
        write_result(NAME, {**previous, "near": near, "rows": rows}, args.out)
        return 0

    rows = [
        *frontier_rows(frontier),
        *near_rows(near, sketch),
    ]
    rows += store_time_rows(store_time)
    rows += document_bytes_rows(store_time["document_bytes"])
    rows += index_rows(store_time)
    rows += crawl_rows(crawls, store_time["extract_ms"])
    notes = [
        "servers and the clients share the machine's cores: decisions/s is bounded by the Python clients and "
        "the servers together; the server time per decision is INFO commandstats of the commands decisions send "
        "(FCALL), summed over masters, and the servers' CPU time (INFO cpu) beside it.",
        "frontier bytes per URL include the 16,384 bucket keys; scrapy-redis stores a 40-character SHA1 per "
        "request in one set.",
        "SimHash tables: 4 tables of 16-byte records, preloaded in the store's layout; datasketch stores its "
        "LSH hash tables and each key's band values.",
    ]
    write_result(NAME, {"size": args.size, "frontier": frontier, "near": near, "datasketch": sketch,
                        "store_time": store_time, "crawls": crawls,
                        "rows": rows, "notes": notes}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
