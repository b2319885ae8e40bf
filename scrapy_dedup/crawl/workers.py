"""The extraction worker pool: keeps extraction off Scrapy's reactor thread.

With ``DEDUP_WORKERS = N > 0`` extraction runs in N worker processes (spawned,
never forked from a process that runs a reactor and threads), so a crawl uses
every core.  ``DEDUP_WORKERS = 0`` runs it in one thread of the crawl process:
simpler to debug, bound by the GIL.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

from scrapy.utils.reactor import is_asyncio_reactor_installed
from twisted.internet.defer import Deferred

from scrapy_dedup.extraction.analysis import warm_up

T = TypeVar("T")


class ExtractionPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor: Executor | None = None

    def start(self) -> None:
        if self._executor is not None:
            return
        if self.workers > 0:
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=warm_up
            )
        else:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dedup-extract")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            self.start()
        future = self._executor.submit(fn, *args)
        if is_asyncio_reactor_installed():
            return await asyncio.wrap_future(future)
        return await _deferred_from_future(future)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


def _deferred_from_future(future: Future) -> Deferred:
    from twisted.internet import reactor

    d: Deferred = Deferred()

    def settle(f: Future) -> None:
        if f.cancelled():
            d.cancel()
        elif f.exception() is not None:
            d.errback(f.exception())
        else:
            d.callback(f.result())

    future.add_done_callback(lambda f: reactor.callFromThread(settle, f))
    return d
