"""Finding and opening the store a report reads.

Inside a Scrapy project the store comes from the project's settings
(``DEDUP_STORE``, also through ``-s DEDUP_STORE=...`` or the spider's
``custom_settings``) or from the spider's name (``.scrapy/dedup/<spider>``);
outside one, ``--store PATH`` names it.

An embedded LevelDB store belongs to one process.  When a running crawl holds
it, the report reads a snapshot: the store's files are copied to a temporary
directory and the copy is opened (the crawl's files are only ever read).
A snapshot may miss the crawl's last writes, never half of one: each decision
is one atomic batch in LevelDB's log, and a batch cut short at the end of the
copied log is dropped when the copy is opened.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from scrapy.settings import BaseSettings

from scrapy_dedup.store import is_redis_url
from scrapy_dedup.store.base import DedupStore, StoreError, StoreLocked, StoreWriteError
from scrapy_dedup.store.open import backend_class, open_existing

#: copies attempted while a crawl keeps changing the store's files
SNAPSHOT_ATTEMPTS = 5


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
    """Open the store for reading; a snapshot of it when a crawl holds it."""
    err = err if err is not None else sys.stderr
    path = store_path(settings, path, spider)
    redis = is_redis_url(path)
    backend = backend_class(settings.get("DEDUP_STORE_BACKEND"), path)
    copy_dir = None
    try:
        if redis:
            # a shared Redis store is read as it is, streaming: no snapshot
            store = open_existing(path, backend=backend, prefix=redis_prefix(settings, spider, prefix))
        else:
            store = open_existing(path, backend=backend)
    except StoreLocked:
        if not snapshot or not _snapshot_capable(backend):
            raise
        copy_dir, store = _open_snapshot(backend, path)
        err.write(
            f"scrapy dedup: a running crawl holds {path}; reading a snapshot taken at "
            f"{time.strftime('%H:%M:%S')} (later writes are not shown)\n"
        )
    except StoreWriteError:
        # a full filesystem: LevelDB cannot open in place, a copy elsewhere reads the same
        if not snapshot or not _snapshot_capable(backend):
            raise
        copy_dir, store = _open_snapshot(backend, path)
        err.write(f"scrapy dedup: no space left to open {path} in place; reading a copy\n")
    try:
        with store:
            yield store
    finally:
        if copy_dir is not None:
            shutil.rmtree(copy_dir, ignore_errors=True)


def _snapshot_capable(backend: type) -> bool:
    from scrapy_dedup.store.leveldb import LevelDBStore

    return isinstance(backend, type) and issubclass(backend, LevelDBStore)


def _open_snapshot(backend: type[DedupStore], path: str) -> tuple[str, DedupStore]:
    import plyvel

    last_error: Exception | None = None
    for _ in range(SNAPSHOT_ATTEMPTS):
        copy_dir = tempfile.mkdtemp(prefix="scrapy-dedup-snapshot-")
        try:
            _copy_store(path, copy_dir)
            # LevelDB refuses to open a copy that lacks a table its manifest names
            store = backend.open_existing(copy_dir)
            return copy_dir, store
        except (OSError, StoreError, plyvel.Error) as exc:
            last_error = exc
            shutil.rmtree(copy_dir, ignore_errors=True)
    raise StoreLocked(
        f"the dedup store {path!r} is in use by a running crawl and no consistent snapshot "
        f"could be taken ({' '.join(str(last_error).split())}); try again when the crawl ends"
    )


def _files(path: str, *suffixes: str) -> list[str]:
    return sorted(entry.name for entry in os.scandir(path) if entry.name.endswith(suffixes) and entry.is_file())


def _copy_store(src: str, dst: str) -> None:
    """Copy a LevelDB directory that another process is writing to.

    The order makes the copy a consistent prefix of the writes:

    1. the write-ahead logs: each holds later writes than the one before, and
       one cut short mid-record ends, when opened, at its last whole batch;
    2. the manifest CURRENT names: the tables and the oldest live log of the
       state it describes (LevelDB appends to it; a cut-short edit is ignored);
    3. the tables, listed after the manifest was copied, so every table it
       names is there unless a compaction deleted it meanwhile, which the
       open of the copy reports (and the snapshot is taken again).
    """
    for name in _files(src, ".log"):
        try:
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
        except FileNotFoundError:
            continue  # flushed to a table meanwhile: the manifest copied next names that table
    with open(os.path.join(src, "CURRENT"), encoding="ascii") as f:
        manifest = f.read().strip()
    shutil.copyfile(os.path.join(src, manifest), os.path.join(dst, manifest))
    with open(os.path.join(dst, "CURRENT"), "w", encoding="ascii") as f:
        f.write(manifest + "\n")
    for name in _files(src, ".ldb", ".sst"):
        # Copied, never hard-linked: opening the copy may write a new table under a
        # number the source is still writing, and a link would truncate the source's.
        try:
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
        except FileNotFoundError:
            continue  # compacted away: obsolete, or the open of the copy says it is missing
