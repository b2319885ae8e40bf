"""Finding the store a report reads."""

from __future__ import annotations

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from scrapy_dedup.runtime import default_store_path
from scrapy_dedup.store.base import DedupStore, StoreError


def open_report_store(settings: BaseSettings, path: str | None, spider: str | None) -> DedupStore:
    if path is None:
        path = settings.get("DEDUP_STORE")
    if path is None:
        if spider is None:
            raise StoreError("say which store to read: --spider NAME inside a project, or --store PATH")
        path = default_store_path(spider)
    backend = load_object(settings.get("DEDUP_STORE_BACKEND") or "scrapy_dedup.store.leveldb.LevelDBStore")
    return backend.open_existing(path)
