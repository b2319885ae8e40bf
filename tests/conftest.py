import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "example_project"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture(params=["leveldb", "memory"])
def backend(request, store_path):
    """Each store backend in turn: tests of the store and of the decisions run on both."""
    from scrapy_dedup.store.leveldb import LevelDBStore
    from scrapy_dedup.store.memory import MemoryStore

    cls = {"leveldb": LevelDBStore, "memory": MemoryStore}[request.param]
    yield cls
    if cls is MemoryStore:
        MemoryStore.discard(store_path)
