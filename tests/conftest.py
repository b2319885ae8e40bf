import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from scrapy.utils.reactor import install_reactor, is_reactor_installed

if not is_reactor_installed():
    # before any module imports twisted's default reactor: the in-process adapter tests
    # await the pipeline on the asyncio loop, as a crawl does (crawls run in subprocesses)
    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")

# `make test` (and so CI) runs the property tests on a fixed seed: a green main stays green, and a
# failure replays. HYPOTHESIS_PROFILE=explore draws new examples each run, to look for new bugs.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "example_project"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture(params=["leveldb", "memory", "redis", "redis-cluster"])
def backend(request, store_path):
    """Each store backend in turn: tests of the store and of the decisions run on every one
    (Redis on a real server and on a real 3-master cluster, see redis_fixtures.py)."""
    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.memory import MemoryStore

    if request.param.startswith("redis"):
        from redis_fixtures import redis_backend

        server = request.getfixturevalue("redis_cluster" if request.param == "redis-cluster" else "redis_single")
        yield redis_backend(server.url)
        return
    cls = {"leveldb": LevelDBStore, "memory": MemoryStore}[request.param]
    yield cls
    if cls is MemoryStore:
        MemoryStore.discard(store_path)


# the Redis store's servers (a real redis-server and a real cluster, session-scoped)
from redis_fixtures import redis_cluster, redis_prefix, redis_single, redis_url  # noqa: E402, F401
