"""Finding and opening the store a report reads.

Inside a Scrapy project the store comes from the project's settings
(``DEDUP_STORE``, also through ``-s DEDUP_STORE=...`` or the spider's
``custom_settings``) or from the spider's name (``.scrapy/dedup/<spider>``: ``--spider``, or the
project's only spider); outside one, ``--store PATH`` names it.

An embedded LevelDB store belongs to one process.  When a running crawl holds
it, the report reads a snapshot, the store's own (a LevelDB store copies its
files: :mod:`scrapy_dedup.store.leveldb.snapshot`).
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from scrapy.settings import BaseSettings

from scrapy_dedup.store import is_redis_url
from scrapy_dedup.store.base import DedupStore, StoreError, StoreLocked, StoreWriteError
from scrapy_dedup.store.open import backend_class, open_existing

#: snapshots of a store a running crawl holds (:func:`opened_store`) -> that store's path
_HELD: weakref.WeakKeyDictionary[DedupStore, str] = weakref.WeakKeyDictionary()


def held_by_a_crawl(store: DedupStore) -> str | None:
    """The path of the store ``store`` is a snapshot of, when a running crawl holds that store
    (:func:`opened_store` read a copy): what it shows is that crawl's work so far, not settled."""
    return _HELD.get(store)


def _chosen(settings: BaseSettings, spider: str | None, given: str | None, setting: str, missing: str) -> str | None:
    """``given`` (an option of the command), else ``setting`` as the spider crawls with it, else
    None for the spider's default; without a spider, ``missing`` says what to pass."""
    if given:
        return given
    if spider:
        settings = spider_settings(settings, spider)
    configured = settings.get(setting)
    if configured:
        return str(configured)
    if spider is None:
        raise StoreError(missing)
    return None


def store_path(settings: BaseSettings, path: str | None, spider: str | None) -> str:
    """The directory (or Redis URL) of the store to read."""
    chosen = _chosen(
        settings, spider, path, "DEDUP_STORE",
        "say which store to read: --spider NAME inside a Scrapy project, -s DEDUP_STORE=PATH, or --store PATH",
    )
    if chosen:
        return chosen
    from scrapy.utils.project import data_path

    # the crawl's default (scrapy_dedup.crawl.state.default_store_path), without creating it
    return data_path(f"dedup/{spider}")


def project_spiders(settings: BaseSettings) -> list[str]:
    """The names of the project's spiders, sorted (none outside a project, or when its spiders
    cannot be loaded: a command then asks for one)."""
    if not settings.getlist("SPIDER_MODULES"):
        return []
    try:
        from scrapy.spiderloader import get_spider_loader

        return sorted(get_spider_loader(settings).list())
    except Exception:  # noqa: BLE001 - a broken project: the command asks for a store
        return []


def spider_settings(settings: BaseSettings, spider: str) -> BaseSettings:
    """The settings the spider crawls with: the project's plus its ``custom_settings``."""
    if not settings.getlist("SPIDER_MODULES"):
        return settings
    try:
        from scrapy.spiderloader import get_spider_loader

        spidercls = get_spider_loader(settings).load(spider)
    except Exception:  # noqa: BLE001 - an unknown or broken spider: its name still names the store
        return settings
    settings = settings.copy()
    spidercls.update_settings(settings)
    return settings


def redis_prefix(settings: BaseSettings, spider: str | None, prefix: str | None) -> str:
    """The key prefix of the crawl to read on a Redis server: ``--redis-prefix``, then
    ``DEDUP_REDIS_PREFIX``, then the crawl's default ``dedup:<spider name>``."""
    chosen = _chosen(
        settings, spider, prefix, "DEDUP_REDIS_PREFIX",
        "say which crawl to read on the Redis server: --spider NAME (its keys are under "
        "dedup:<spider name>), --redis-prefix PREFIX, or -s DEDUP_REDIS_PREFIX=PREFIX",
    )
    return chosen or f"dedup:{spider}"


@contextmanager
def opened_store(
    settings: BaseSettings,
    path: str | None,
    spider: str | None,
    *,
    snapshot: bool = True,
    err: TextIO | None = None,
    prefix: str | None = None,
) -> Iterator[DedupStore]:
    """Open the store for reading; a snapshot of it (:meth:`DedupStore.open_snapshot`) when a
    crawl holds it."""
    err = err if err is not None else sys.stderr
    path = store_path(settings, path, spider)
    backend = backend_class(settings.get("DEDUP_STORE_BACKEND"), path)
    # a shared Redis store is read as it is, streaming
    options = {"prefix": redis_prefix(settings, spider, prefix)} if is_redis_url(path) else {}
    try:
        store = open_existing(path, backend=backend, **options)
    except StoreLocked:
        if not snapshot:
            raise
        store = backend.open_snapshot(path, **options)
        _HELD[store] = path
        err.write(
            f"scrapy dedup: a running crawl holds {path}; reading a snapshot taken at "
            f"{time.strftime('%H:%M:%S')} (later writes are not shown)\n"
        )
    except StoreWriteError:
        # a full filesystem: LevelDB cannot open in place, a copy elsewhere reads the same
        if not snapshot:
            raise
        store = backend.open_snapshot(path, **options)
        err.write(f"scrapy dedup: no space left to open {path} in place; reading a copy\n")
    with store:
        yield store
