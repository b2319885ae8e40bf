"""Fixtures for the Redis store: a real standalone server and a real 3-master cluster, started
once per test session on free loopback ports and stopped at its end (see redis_servers.py)."""

from __future__ import annotations

import uuid

import pytest
from redis_servers import RedisCluster, RedisServer

REDIS_KINDS = ("single", "cluster")


@pytest.fixture(scope="session")
def redis_single(tmp_path_factory):
    with RedisServer(tmp_path_factory.mktemp("redis-single")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(params=REDIS_KINDS)
def redis_url(request):
    """The URL of a standalone server, then of a cluster: each test runs on both."""
    server = request.getfixturevalue(f"redis_{request.param}")
    return server.url


@pytest.fixture
def redis_prefix():
    """A key prefix of its own for each test, so tests share the servers without flushing them."""
    return f"test:{uuid.uuid4().hex[:12]}"


def redis_backend(url: str):
    """The Redis store as the store tests build a backend: ``Backend(path, params)`` and
    ``Backend.open_existing(path)``, each path (a test's temporary directory) standing for a
    key prefix of its own on the server at ``url``."""
    import hashlib

    from scrapy_dedup.store.redis.store import RedisStore

    def prefix_of(path) -> str:
        return "test:" + hashlib.sha1(str(path).encode()).hexdigest()[:16]

    class RedisAtPath(RedisStore):
        def __init__(self, path, params, **options):
            super().__init__(url, params, prefix=prefix_of(path), **options)

        @classmethod
        def open_existing(cls, path):
            return RedisStore.open_existing(url, prefix=prefix_of(path))

    return RedisAtPath


def stop_heartbeat(store) -> None:
    """Stop a store's heartbeat as a SIGKILL of its process would: nothing is closed or handed
    over, and once its lease has run out the holder is dead and the others recover what it had."""
    store._stopping.set()
    if store._heartbeat is not None:
        store._heartbeat.join()
