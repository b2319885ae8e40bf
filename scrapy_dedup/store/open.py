"""Opening a store: from a location (a directory, a ``redis://`` URL) and a backend (an import
path, or the one the location selects) to a backend instance.

The crawl, ``scrapy dedup ingest`` and the reports open their stores here, so each failure says
the same one line wherever it happens: a backend that cannot be loaded (its client library is not
installed), a directory that cannot be made or written.  What names a store (settings, a spider,
``--store``) is the caller's: nothing here reads Scrapy's settings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from scrapy_dedup.store import REDIS_BACKEND, is_redis_url
from scrapy_dedup.store.base import DedupStore, StoreError
from scrapy_dedup.store.records import put_meta

#: the backend of a location that is not a ``redis://`` URL (``DEDUP_STORE_BACKEND``'s default)
DEFAULT_BACKEND = "scrapy_dedup.store.leveldb.LevelDBStore"

Backend = type[DedupStore]


def backend_class(backend: str | Backend | None, location: str | None = None) -> Backend:
    """The backend class ``backend`` names, or the one ``location`` selects when it names none.

    StoreError, in one line that names the setting, when it cannot be loaded."""
    if backend is None:
        backend = REDIS_BACKEND if is_redis_url(location) else DEFAULT_BACKEND
    if not isinstance(backend, str):
        return backend
    module, _, name = backend.rpartition(".")
    try:
        if not module:
            raise ValueError(f"not a full import path: {backend!r}")
        cls: Backend = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        extra = " (pip install 'scrapy-dedup[redis]')" if getattr(exc, "name", None) == "redis" else ""
        raise StoreError(
            f"the store backend {backend} (DEDUP_STORE_BACKEND, or chosen by a redis:// "
            f"DEDUP_STORE) cannot be loaded: {exc}{extra}"
        ) from None
    return cls


def unusable(exc: OSError, location: str | None, *, default: bool = False) -> StoreError:
    """The one line for a store directory that cannot be made or written (a file is in the way, no
    permission). ``default``: the location is the crawl's default directory, not ``DEDUP_STORE``."""
    if default:
        where = f"the default store directory {location or exc.filename!r}"
    else:  # a redis:// URL is not repeated: it may hold a password
        where = "DEDUP_STORE" if is_redis_url(location) else f"DEDUP_STORE {location!r}"
    return StoreError(f"{where} cannot be used as a dedup store: {exc.strerror}: {exc.filename!r}")


def open_store(
    location: str,
    params: dict[str, Any],
    *,
    backend: str | Backend | None = None,
    cache_mb: int = 16,
    default: bool = False,
    meta: dict[str, Any] | None = None,
    admit: Callable[[DedupStore], None] | None = None,
    **options: Any,
) -> DedupStore:
    """Open the store at ``location`` for writing (made if it does not exist) and begin a run.

    ``params``: what makes two crawls' fingerprints comparable (a store made with others is
    refused); ``meta``: metadata recorded once the run has begun; ``admit``: reads the store
    before the run begins and raises StoreError to refuse it, so that a refused start writes
    nothing (the store is closed again); ``options``: the backend's own
    (a Redis store's ``prefix``, ``retry``, ``lease_ms``); ``default``: ``location`` is the
    crawl's default directory (the messages say so). Raises StoreError in one line."""
    cls = backend_class(backend, location)
    try:
        # every backend is built this way (DedupStore's docstring); the interface declares no constructor
        store = cls(location, params, cache_mb=cache_mb, **options)  # type: ignore[call-arg]
    except OSError as exc:  # the directory: a file is in the way, or it cannot be written
        raise unusable(exc, location, default=default) from None
    if admit is not None:
        try:
            admit(store)
        except StoreError:
            store.close()
            raise
    store.begin_run()
    for name, value in (meta or {}).items():
        put_meta(store, name, value)
    return store


def open_existing(location: str, *, backend: str | Backend | None = None, **options: Any) -> DedupStore:
    """Open the store at ``location`` for reading, with the parameters it was written with.

    ``options``: the backend's own (a Redis store's ``prefix``). StoreLocked when another process
    holds an embedded store: :meth:`DedupStore.open_snapshot` reads a copy of it."""
    return backend_class(backend, location).open_existing(location, **options)
