"""Crawls over one Redis store: the demo site crawled by 1, 2 and 4 plain Scrapy processes at once
ends with the same documents, clusters, representatives and aliases as one process on LevelDB; an
unreachable server fails the crawl before any request, the password hidden."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from crawl_helpers import process_count_outcome
from redis_servers import free_port
from testing import demo_server, run_crawl  # noqa: F401 - demo_server is a fixture

from scrapy_dedup.store.leveldb import LevelDBStore
from scrapy_dedup.store.records import iter_urls, iter_variants
from scrapy_dedup.store.redis.functions import connect, primaries
from scrapy_dedup.store.redis.store import RedisStore

REDIS_BACKEND = "scrapy_dedup.store.redis.store.RedisStore"


def summary(*args: str) -> dict:
    """``scrapy dedup summary --format jsonl`` run as the CLI, outside any project."""
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "summary", *args, "--format", "jsonl"],
        capture_output=True, text=True, timeout=120, cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


#: summary figures that do not depend on fetch order
SUMMARY_FIGURES = ("urls_known", "url_records", "frontier_keys", "documents", "aliases", "exact_duplicates",
                   "near_duplicates")


def crawl_in_processes(start_url, out_dir, url, processes):
    results = [None] * processes
    settings = {"DEDUP_STORE": url}  # a redis:// store alone selects the Redis backend

    def crawl(i):
        results[i] = run_crawl(start_url, out_dir / f"p{i}", settings)

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def settle(server_url: str) -> None:
    """``scrapy dedup settle`` of the crawl's shared store, as the CLI."""
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", "settle", "--store", server_url, "--redis-prefix", "dedup:site"],
        capture_output=True, text=True, timeout=120, cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_same_clusters_and_representatives_at_any_process_count(demo_server, tmp_path, redis_single, redis_cluster):
    start = demo_server.url + "/"
    run_crawl(start, tmp_path / "leveldb")
    with LevelDBStore.open_existing(str(tmp_path / "leveldb" / "store")) as store:
        expected = process_count_outcome(store)
    assert len(expected["partition"]) > 10
    expected_summary = summary("--store", str(tmp_path / "leveldb" / "store"))

    runs = (("single", redis_single, 1), ("single", redis_single, 2), ("single", redis_single, 4),
            ("cluster", redis_cluster, 4))
    for kind, server, processes in runs:
        label = f"{kind}, {processes} processes"
        server_url = server.url
        # the crawls use the default key prefix: start from an empty server
        for node in primaries(connect(server_url)):
            node.flushdb()
        results = crawl_in_processes(start, tmp_path / f"{kind}{processes}", server_url, processes)
        assert all(r.returncode == 0 for r in results)
        # near duplicates decided at once by two processes may both be kept until settled: the
        # settled store is what does not depend on the process count. A process alone on the
        # store settles it when it closes, as on LevelDB; several may close together, leaving it
        # to `scrapy dedup settle`
        if processes == 1:
            assert "dedup settled:" in results[0].log, label
        else:
            settle(server_url)
        with RedisStore.open_existing(server_url, prefix="dedup:site") as store:
            got = process_count_outcome(store)
            assert store.run == 1, "processes alive together share one run"
        assert got["partition"] == expected["partition"], label
        assert got["per_key"] == expected["per_key"], label
        # reports read the shared store as it is, streaming: no snapshot
        got_summary = summary("--store", server_url, "--redis-prefix", "dedup:site")
        assert {k: got_summary[k] for k in SUMMARY_FIGURES} == {k: expected_summary[k] for k in SUMMARY_FIGURES}
        # every process fetches its start URL (start requests skip the dupefilter) and one emits
        # it; any other page is scheduled by one process only: every page is emitted once
        emitted = [item["url"] for r in results for item in r.items]
        twice = sorted({u for u in emitted if emitted.count(u) > 1})
        assert not twice, f"{label}: emitted by two processes: {twice}"


def test_unreachable_store_fails_before_any_request_with_the_password_hidden(demo_server, tmp_path):
    url = f"redis://crawler:hunter2@127.0.0.1:{free_port()}/0"
    result = run_crawl(
        demo_server.url + "/", tmp_path, {"DEDUP_STORE": url, "DEDUP_STORE_BACKEND": REDIS_BACKEND}, check=False
    )
    assert result.returncode != 0
    assert result.stat("downloader/request_count") == 0
    assert sum(demo_server.counts().values()) == 0
    assert "hunter2" not in result.log
    shown = url.replace("hunter2", "***")
    # one line says why, and nothing else does: no traceback of the crawl that could not start
    assert any(f"cannot reach the Redis store at {shown}" in line for line in result.log.splitlines())
    assert sum(shown in line for line in result.log.splitlines()) == 1, result.log[-3000:]
    assert "Traceback" not in result.log and " ERROR: " not in result.log.replace(" ERROR: scrapy-dedup cannot start", "")


def test_a_crawl_with_a_password_never_logs_it(demo_server, tmp_path):
    from redis_servers import RedisServer

    with RedisServer(tmp_path / "auth", extra=("--requirepass", "c0rrect-h0rse")) as server:
        url = f"redis://:c0rrect-h0rse@127.0.0.1:{server.port}/0"
        result = run_crawl(demo_server.url + "/", tmp_path / "crawl",
                           {"DEDUP_STORE": url, "DEDUP_STORE_BACKEND": REDIS_BACKEND})
    assert result.items
    assert "c0rrect-h0rse" not in result.log
    assert f"redis://:***@127.0.0.1:{server.port}/0" in result.log


#: ACL rules of a crawl's user (keys, commands) and the one line its crawl fails with (None: it crawls)
ACL_USERS = {
    "its own keys": (["dedup:acl:*"], ["+@all", "-@dangerous", "+info"], None),
    "another prefix's keys": (["dedup:other:*"], ["+@all", "-@dangerous", "+info"],
                              "does not let this user at the keys under the prefix 'dedup:acl'"),
    "no INFO": (["dedup:acl:*"], ["+@all", "-@dangerous"], "does not let this user run INFO"),
    "no functions": (["dedup:acl:*"], ["+@all", "-@dangerous", "+info", "-@scripting"],
                     "does not let this user at the keys under the prefix 'dedup:acl' or at the store's functions"),
}


@pytest.mark.parametrize("user", list(ACL_USERS))
def test_a_crawl_as_an_acl_user_needs_its_own_keys_only(demo_server, tmp_path, user):
    """A user given only the keys under its crawl's prefix, INFO, and no other dangerous command
    (``redis://user:password@...``) crawls and reads its reports: the store touches no other key.
    A user the store cannot work as fails the crawl before any request, in one line."""
    from redis_servers import RedisServer

    keys, commands, refusal = ACL_USERS[user]
    with RedisServer(tmp_path / "acl") as server:
        admin = connect(server.url)
        admin.acl_setuser("crawler", enabled=True, passwords=["+b4ttery-st4ple"], keys=keys, commands=commands)
        url = f"redis://crawler:b4ttery-st4ple@127.0.0.1:{server.port}/0"
        settings = {"DEDUP_STORE": url, "DEDUP_REDIS_PREFIX": "dedup:acl"}
        result = run_crawl(demo_server.url + "/", tmp_path / "crawl", settings, check=refusal is None)
        assert "b4ttery" not in result.log
        if refusal is None:
            assert len(result.items) > 10 and "NOPERM" not in result.log
            assert summary("--store", url, "--redis-prefix", "dedup:acl")["documents"] > 10
            assert all(k.startswith(b"dedup:acl:") for k in admin.scan_iter(count=1000))
        else:
            assert result.returncode != 0 and result.stat("downloader/request_count") == 0
            errors = [line for line in result.log.splitlines() if " ERROR: " in line]
            assert len(errors) == 1 and refusal in errors[0], result.log[-3000:]
            assert "Traceback" not in result.log
        admin.close()


def test_crawls_of_two_spiders_on_one_server_keep_to_their_own_keys(demo_server, tmp_path, redis_single):
    """DEDUP_STORE = "redis://..." alone selects the Redis store; each crawl's keys are under
    dedup:<spider name>, so two crawls share the server without seeing each other's URLs."""
    names = [f"site{uuid.uuid4().hex[:8]}" for _ in range(2)]
    demo_site = demo_server.url + "/"
    first = run_crawl(demo_site, tmp_path / "a", {"DEDUP_STORE": redis_single.url}, spider_args={"name": names[0]})
    second = run_crawl(demo_site, tmp_path / "b", {"DEDUP_STORE": redis_single.url}, spider_args={"name": names[1]})
    # the second crawl did not find the first one's URLs: it fetched the site again
    assert len(first.items) > 10 and len(second.items) > 10
    assert second.stat("dedup/url/dropped/fresh") == 0
    client = connect(redis_single.url)
    for name, crawl in zip(names, (first, second)):
        keys = [k.decode() for k in client.scan_iter(match=f"*{name}*", count=1000)]
        assert keys and all(k.startswith(f"dedup:{name}:") for k in keys)
        with RedisStore.open_existing(redis_single.url, prefix=f"dedup:{name}") as store:
            assert {r.url for r in iter_urls(store)} >= set(crawl.urls)
        assert f"dedup store {redis_single.url} opened" in crawl.log
    # reports pick the backend from the URL; the prefix comes from the option or the setting
    assert summary("--store", redis_single.url, "--redis-prefix", f"dedup:{names[0]}")["documents"] > 10
    assert summary("--store", redis_single.url, "-s", f"DEDUP_REDIS_PREFIX=dedup:{names[1]}")["documents"] > 10
    # the text names the crawl's keys too: one server holds several stores
    text = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "summary", "--store", redis_single.url,
                           "--redis-prefix", f"dedup:{names[0]}"], capture_output=True, text=True, timeout=120, cwd="/")
    assert text.stdout.startswith(f"store  {redis_single.url}, prefix dedup:{names[0]}\n"), text.stdout[:300]
    # an explicit prefix puts a crawl under it, whatever its spider's name
    run_crawl(demo_site, tmp_path / "c", {"DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": f"own:{names[0]}"})
    with RedisStore.open_existing(redis_single.url, prefix=f"own:{names[0]}") as store:
        assert next(iter_urls(store), None) is not None


@pytest.mark.parametrize("kind", ["single", "cluster", "one master", "restarted empty"])
def test_a_server_lost_mid_crawl_stops_the_crawl_once_and_cleanly(demo_server, tmp_path, kind):
    """The server goes away mid-crawl (every master of a cluster, or one of three), or comes back
    at once without the store (restarted without persistence: no key, no function; before, the
    crawl went on and every later decision failed with a traceback): the crawl stops once, with
    one line that says why, and passes on no item it could not decide."""
    from redis_servers import RedisCluster, RedisServer

    if kind in ("single", "restarted empty"):
        server = RedisServer(tmp_path / "lost", extra=("--requirepass", "l0st-h0rse")).start()
        url = f"redis://:l0st-h0rse@127.0.0.1:{server.port}/0"
    else:
        cluster = RedisCluster(tmp_path / "lost").start()
        url = cluster.url
        # every master goes away, or one of three (its slots, a third of every table, are lost)
        server = cluster if kind == "cluster" else cluster.nodes[1]
    settings = {"DEDUP_STORE": url, "DEDUP_REDIS_RETRIES": 2, "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.25}
    result: list = []
    crawl = threading.Thread(target=lambda: result.append(run_crawl(demo_server.url + "/", tmp_path / "crawl",
                                                                    settings, check=False, timeout=180)))
    crawl.start()
    try:
        deadline = time.monotonic() + 60
        while sum(demo_server.counts().values()) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)  # a few pages fetched: the crawl is under way
        assert sum(demo_server.counts().values()) >= 5
        if kind == "restarted empty":
            server.restart()  # persistence off: it comes back empty
    finally:
        if kind != "restarted empty":
            server.stop()  # gone for good
        crawl.join(200)
        server.stop()
        if kind == "one master":
            cluster.stop()
    (outcome,) = result
    fetched = sum(demo_server.counts().values())
    assert outcome.stat("finish_reason") == "dedup_store_error", outcome.log[-3000:]
    assert fetched < 54  # stopped, not crawled to the end: the demo site has 54 pages
    lines = [line for line in outcome.log.splitlines() if "scrapy-dedup stops the crawl" in line]
    assert len(lines) == 1, lines
    if kind in ("single", "restarted empty"):
        assert "l0st-h0rse" not in outcome.log and "***" in lines[0]
    if kind == "restarted empty":
        assert "no longer has the store's functions" in lines[0]
    assert outcome.log.count("Traceback") == 0, outcome.log[-3000:]
    # the pages in flight are left owed for the next run, counted, not one warning each
    assert outcome.stat("dedup/doc/left_pending") >= 1
    assert "Dropped: " not in "".join(line for line in outcome.log.splitlines(True) if " WARNING: " in line)
    # nothing that passed the pipeline claims a decision the store did not record
    assert all(item.get("dedup", {}).get("status") != "undecided" for item in outcome.items)


def test_a_server_restarted_with_its_data_mid_crawl_is_connected_to_again(demo_server, tmp_path):
    """A server restarted with its data (append-only file) while a crawl runs: the client connects
    again within its retries, and the crawl ends as one on LevelDB does."""
    from redis_servers import RedisServer

    expected = summary("--store", str(run_crawl(demo_server.url + "/", tmp_path / "leveldb").out_dir / "store"))
    before = sum(demo_server.counts().values())
    server = RedisServer(tmp_path / "kept", extra=("--appendonly", "yes", "--appendfsync", "always")).start()
    result: list = []
    settings = {"DEDUP_STORE": server.url, "CONCURRENT_REQUESTS": 1, "DOWNLOAD_DELAY": 0.1}
    crawl = threading.Thread(target=lambda: result.append(run_crawl(demo_server.url + "/", tmp_path / "crawl",
                                                                    settings, check=False, timeout=180)))
    crawl.start()
    try:
        deadline = time.monotonic() + 60
        while sum(demo_server.counts().values()) < before + 8 and time.monotonic() < deadline:
            time.sleep(0.05)  # a few pages fetched: the crawl is under way
        server.restart(signal.SIGTERM)  # the append-only file keeps every write and the functions
        crawl.join(200)
        got = summary("--store", server.url, "--redis-prefix", "dedup:site")
    finally:
        server.stop()
        crawl.join(200)
    (outcome,) = result
    assert outcome.stat("finish_reason") == "finished", outcome.log[-3000:]
    assert "Traceback" not in outcome.log and " ERROR: " not in outcome.log
    assert {k: got[k] for k in SUMMARY_FIGURES} == {k: expected[k] for k in SUMMARY_FIGURES}


def test_links_drop_and_count_what_leveldb_does(demo_server, tmp_path, redis_single):
    """One process on Redis: the same requests are dropped, for the
    same reasons, and the same variants are counted under the same keys as on LevelDB; most
    links seen before are dropped without asking the store."""
    start = demo_server.url + "/"
    on_leveldb = run_crawl(start, tmp_path / "leveldb")
    prefix = f"test:{uuid.uuid4().hex[:12]}"
    on_redis = run_crawl(start, tmp_path / "redis", {"DEDUP_STORE": redis_single.url, "DEDUP_REDIS_PREFIX": prefix})
    dropped = on_leveldb.stats_with_prefix("dedup/url/dropped/")
    assert dropped.get("seen", 0) > 20
    assert on_redis.stats_with_prefix("dedup/url/dropped/") == dropped
    assert on_redis.stat("dedup/url/normalized") == on_leveldb.stat("dedup/url/normalized")
    # a seen link is answered from what the process knows: read ahead with its page, or checked before
    assert on_redis.stat("dedup/url/seen_known") > dropped["seen"] / 2
    assert on_redis.stat("dedup/url/seen_known") <= dropped["seen"]

    def spellings(store):
        # per key, every spelling of it met: its first URL and its variants, without fragments
        # (which spelling came first, and so the variants' reasons, depends on fetch order, on
        # LevelDB as well)
        found = {}
        for url, v in iter_variants(store):
            found.setdefault(v["key"], set()).add(url.split("#", 1)[0])
        for record in iter_urls(store):
            if record.key in found:
                found[record.key].add(record.url.split("#", 1)[0])
        return found

    with LevelDBStore.open_existing(str(tmp_path / "leveldb" / "store")) as store:
        expected = spellings(store)
        expected_outcome = process_count_outcome(store)
    with RedisStore.open_existing(redis_single.url, prefix=prefix) as store:
        assert spellings(store) == expected
        assert process_count_outcome(store) == expected_outcome
    assert len(expected) > 3
    got = summary("--store", redis_single.url, "--redis-prefix", prefix)
    want = summary("--store", str(tmp_path / "leveldb" / "store"))
    assert {k: got[k] for k in SUMMARY_FIGURES} == {k: want[k] for k in SUMMARY_FIGURES}


def test_export_of_a_store_crawl_processes_write_says_they_run(demo_server, tmp_path, redis_single):
    """`export` of a Redis store while a crawl process writes it says the crawl runs and settles
    it when it ends, as for a LevelDB store a crawl holds: not that the crawl stopped, nor to run
    `scrapy dedup settle` (refused while a process writes the store)."""
    name = f"site{uuid.uuid4().hex[:8]}"
    settings = {"DEDUP_STORE": redis_single.url, "DOWNLOAD_DELAY": 0.15}
    result: list = []
    crawl = threading.Thread(target=lambda: result.append(
        run_crawl(demo_server.url + "/", tmp_path / "crawl", settings, spider_args={"name": name})))
    crawl.start()
    store = ["--store", redis_single.url, "--redis-prefix", f"dedup:{name}"]
    reads = []
    while crawl.is_alive():
        for extra in (["-o", str(tmp_path / "out.jsonl")], ["--changes-since", "0-0"]):
            read = subprocess.run([sys.executable, "-m", "scrapy", "dedup", "export", *store, *extra],
                                  capture_output=True, text=True, timeout=120, cwd="/")
            if crawl.is_alive():  # the crawl still ran when it ended
                reads.append(read)
    crawl.join()
    assert result
    unsettled = [r for r in reads if "change token:" not in r.stderr and "no dedup store" not in r.stderr]
    assert unsettled, [r.stderr for r in reads]
    for read in unsettled:
        assert "Traceback" not in read.stderr, read.stderr
        assert "export again when the crawl ends" in read.stderr, read.stderr
        assert "dedup settle" not in read.stderr and "stopped" not in read.stderr, read.stderr
