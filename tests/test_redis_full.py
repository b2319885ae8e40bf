"""The Redis store on a server whose memory is full: the crawl stops with one clear error, and
the next run, once the server has room, finishes the job as an uninterrupted crawl does.

A server with ``maxmemory`` and the ``noeviction`` policy (Redis's default) refuses writes when
full, as a full disk refuses LevelDB's (tests/test_disk_full.py). The limit is set so that the
generated site of the interrupted-crawl tests fills the server mid-crawl.
"""

from __future__ import annotations

import pickle
import uuid

import pytest
import redis
from redis_servers import RedisServer
from test_resume import Crawl, check_same_store, site, state_of, uninterrupted  # noqa: F401 - fixtures

from scrapy_dedup.core.records import UrlRecord
from scrapy_dedup.core.urls import url_key
from scrapy_dedup.store.base import PENDING
from scrapy_dedup.store.records import get_url, put_pending, settle_pending
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.functions import StoreFull, StoreFunctions, connect
from scrapy_dedup.store.redis.store import RedisStore

#: room left on the server for the crawl, in bytes: a part of what the whole crawl takes
ROOM = 1_500_000


def left_held(client, prefix: str) -> dict[str, int]:
    """What a stopped process still holds, by kind: decision locks, and a heartbeat that runs
    (what it owed stays owed, for the holder that recovers it)."""
    seconds, micros = client.time()
    now = int(seconds) * 1000 + int(micros) // 1000  # the deadlines are in ms: so is the comparison
    holders = client.hgetall(f"{prefix}:h:{{{prefix}:m}}")
    held = {
        "locks": sum(client.hlen(rk.decision_shard(prefix, shard)) for shard in range(rk.LOCK_SHARDS)),
        "live holders": sum(int(value.split()[0]) > now for value in holders.values()),
    }
    return {kind: count for kind, count in held.items() if count}


def test_a_full_server_stops_the_crawl_cleanly_and_the_next_run_finishes_it(site, uninterrupted, tmp_path):
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        prefix = f"full:{uuid.uuid4().hex[:10]}"
        StoreFunctions(client, prefix)  # the library is loaded before the limit is set
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + ROOM)
        crawl = Crawl(site, tmp_path / "crawl", DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix)

        proc = crawl.launch()
        crawl.wait(proc, timeout=300)
        log, stats = crawl.logs[-1], crawl.stats()
        assert stats["finish_reason"] == "dedup_store_error", crawl.tail()
        errors = [line for line in log.splitlines() if "] ERROR:" in line]
        assert len(errors) == 1, errors
        assert f"the Redis store at {server.url} is full: the server refused a write" in errors[0]
        assert "maxmemory" in errors[0] and "Traceback" not in log
        assert stats["dedup/error/store_write"] >= 1
        assert not [k for k in stats if k.startswith("dedup/error/") and k != "dedup/error/store_write"]
        # it stopped part of the way; no item went on undecided, and each one decided has its record
        decided = crawl.emitted_lines()
        assert all(line["status"] in ("new", "updated", "exact_duplicate", "near_duplicate") for line in decided)
        assert 0 < len(decided) < len(uninterrupted["documents"])
        with RedisStore.open_existing(server.url, prefix=prefix) as store:
            assert store.count("pending") > 0  # what it had not finished is still owed
            for line in decided:
                assert get_url(store, url_key(line["url"])) is not None, line["url"]
            owed = [pickle.loads(blob)["url"] for _, blob in store.scan(PENDING)]
        # the stopping process let go of its locks, the decisions cut off by the refused writes
        # included, and stopped its heartbeat (both run on a full server): nothing waits for a
        # lease to run out
        assert left_held(client, prefix) == {}

        client.config_set("maxmemory", 0)  # room again: the next run goes on where it stopped
        log = crawl.run_to_end()
        # the stopped process is dead (its heartbeat stopped on the full server), so this one
        # begins the next run rather than joining the stopped one, and recovers what it owed
        assert "began run 2 of the shared store" in log, log[-3000:]
        with RedisStore.open_existing(server.url, prefix=prefix) as store:
            check_same_store(state_of(store), uninterrupted)
            assert store.count("pending") == 0
            rep_urls = {get_url(store, key).url for key in uninterrupted["documents"]}
            # the documents of the requests the stop left owed (a redirect's: its target)
            cut_off = {record.duplicate_of if record.status == "redirect" else record.key
                       for record in (get_url(store, url_key(url)) for url in owed) if record is not None}
        # every document emitted, and no page fetched twice by the next run: it took over every
        # owed request at its start, and dropped the links to them that its pages held
        lines = crawl.emitted_lines()
        emitted = [line["url"] for line in lines]
        assert rep_urls <= set(emitted), f"documents never emitted: {sorted(rep_urls - set(emitted))[:10]}"
        # Emitted once, but for an item that went out just before the refused write that stopped
        # the crawl took its request's settle with it: its request stayed owed, and the next run
        # emitted it again (at least once, as after a kill). Nothing else is emitted twice.
        first_pid = lines[0]["pid"]
        repeats = {url for url in emitted if emitted.count(url) > 1}
        explained = {url for url in repeats if url_key(url) in cut_off
                     and [line["pid"] == first_pid for line in lines if line["url"] == url] == [True, False]}
        assert repeats == explained, sorted(repeats - explained)[:10]
        assert not crawl.double_fetches, crawl.double_fetches[:10]
        assert "of a process that stopped" not in log  # nothing was left to take over later


def test_a_transaction_discarded_at_exec_for_memory_is_a_full_store(tmp_path):
    # the server checks the memory limit when a transaction's commands are queued and again at
    # EXEC: memory that runs out in between discards the transaction whole (EXECABORT, no command
    # refused), which must stop the crawl as a full store does, not escape as an unknown error
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        store = RedisStore(server.url, {"test": 1}, prefix=f"full:{uuid.uuid4().hex[:10]}")
        try:
            conn = client.connection_pool.get_connection()
            try:
                conn.send_command("MULTI")
                conn.read_response()
                conn.send_command("SET", f"{store.prefix}:x", b"x" * 100)
                assert conn.read_response() == b"QUEUED"
                client.config_set("maxmemory", 1)  # another client's writes filled the server
                conn.send_command("EXEC")
                with pytest.raises(redis.exceptions.ExecAbortError) as refused:
                    conn.read_response()
            finally:
                client.connection_pool.release(conn)
                client.config_set("maxmemory", 0)
            stop = store._stopped_by(refused.value)
            assert isinstance(stop, StoreFull)
            assert str(stop).startswith(f"the Redis store at {server.url} is full: the server refused a write (OOM")
        finally:
            store.close()


def test_a_refused_write_takes_no_later_write_with_it(tmp_path):
    # The writes that wait for a call go with it, applied whole or not at all; and once the
    # server refused a write, the process sends no other: a settle sent beside a refused record
    # (a delete, which a full server allows) would leave a request done whose page is not recorded.
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        store = RedisStore(server.url, {"test": 1}, prefix=f"full:{uuid.uuid4().hex[:10]}")
        try:
            with store.batch() as batch:
                put_pending(batch, "owed", b"a request")
            client.config_set("maxmemory", 1)  # full: every write that adds is refused
            with store.batch(later=True) as batch:
                batch.put_url(UrlRecord(key="page", url="http://example.com/page", status="fetched"))
                settle_pending(batch, "owed")
            with pytest.raises(StoreFull):
                store.get(PENDING, "owed")  # the call that carries them
            client.config_set("maxmemory", 0)  # room again, but this process has stopped writing
            with pytest.raises(StoreFull), store.batch() as batch:
                settle_pending(batch, "owed")
            assert store.get(PENDING, "owed") == b"a request"  # reads go on
            assert get_url(store, "page") is None
        finally:
            store.close()


def test_a_decision_whose_write_a_full_server_refused_lets_go_of_its_lock(tmp_path):
    # the release is a function a full server runs (allow-oom): the other processes, and the next
    # run, decide the page without waiting for this holder's recovery
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        prefix = f"full:{uuid.uuid4().hex[:10]}"
        store, other = RedisStore(server.url, {"test": 1}, prefix=prefix), RedisStore(server.url, {"test": 1}, prefix=prefix)
        try:
            with pytest.raises(StoreFull), store.hold_document("page"):
                client.config_set("maxmemory", 1)  # full: every write that adds is refused
                with store.batch() as batch:
                    batch.put_url(UrlRecord(key="page", url="http://example.com/page", status="new"))
            assert "locks" not in left_held(client, prefix)  # released while the server was full
            client.config_set("maxmemory", 0)
            with other.hold_document("page"):
                assert get_url(other, "page") is None
            with pytest.raises(StoreFull), store.hold_document("page"):
                pass  # this process has stopped writing: it takes no lock either
        finally:
            client.config_set("maxmemory", 0)
            store.close()
            other.close()
