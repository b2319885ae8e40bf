"""The extraction worker pool: keeps extraction off Scrapy's reactor thread.

With ``DEDUP_WORKERS = N > 0`` extraction runs in N worker processes (spawned,
never forked from a process that runs a reactor and threads), so a crawl uses
every core.  ``DEDUP_WORKERS = 0`` runs it in one thread of the crawl process:
simpler to debug, bound by the GIL.

Signals are the crawl process's business: a terminal's Ctrl-C reaches the whole
process group, and a worker that died of it would fail every item in flight.
Workers ignore SIGINT and SIGTERM (blocked while one is spawned, so also while it
starts); the crawl stops them when it closes. A crawl process that cannot close
(SIGKILL, the OOM killer) leaves its workers without a parent: each exits within a
second of finding itself adopted, even when the crawl process died before the worker
had started.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

from scrapy.utils.reactor import is_asyncio_reactor_installed
from twisted.internet.defer import CancelledError, Deferred

from scrapy_dedup.extraction.analysis import warm_up


class PoolClosed(RuntimeError):
    """The pool was closed (the crawl is stopping) before the work was done."""


#: how often a worker checks that the crawl process that started it is still its parent
PARENT_CHECK_S = 1.0


def _worker_start(parent: int) -> None:
    # leave SIGINT/SIGTERM to the crawl process, which shuts the pool down in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # the crawl process's pid, not this one's parent now: a worker that takes seconds to start
    # may already have been adopted
    threading.Thread(target=_exit_without, args=(parent,), daemon=True, name="dedup-parent").start()
    warm_up()


def _exit_without(parent: int) -> None:
    """Exit once ``parent`` is gone (this process adopted by another): a killed crawl process
    never shuts its pool down, and its workers, deaf to SIGTERM, would otherwise live on."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)

T = TypeVar("T")


class ExtractionPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor: Executor | None = None
        self._closed = False

    def start(self) -> None:
        if self._executor is not None:
            return
        if self.workers > 0:
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_start, initargs=(os.getpid(),),
            )
        else:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dedup-extract")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the pool; raises PoolClosed once the pool is closed."""
        if self._closed:
            raise PoolClosed("the extraction pool is closed")
        if self._executor is None:
            self.start()
        assert self._executor is not None  # start() made it
        try:
            future = _submit(self._executor, fn, *args)
        except RuntimeError as exc:  # shut down, or broken by a dead worker
            raise PoolClosed(str(exc)) from exc
        return await _outcome(future, "extraction")

    def close(self, wait: bool = True) -> None:
        """Stop the pool.  ``wait``: let the work already running finish (a graceful stop);
        else the workers are terminated (a forced stop must not wait for them)."""
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if not wait and isinstance(executor, ProcessPoolExecutor):
            # terminate the workers, so that interpreter exit never waits on a busy one
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                process.terminate()
        executor.shutdown(wait=wait, cancel_futures=True)


class DecisionThread:
    """The thread a crawl process decides its documents on.

    A decision reads and writes the store, a round trip each on a shared store: waited for on
    the reactor thread, every round trip would hold up every page, where on this thread the
    reactor fetches and parses other pages meanwhile. One thread: decisions run one at a time,
    in the order asked, as they did on the reactor thread."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        #: url key -> what waits for the end of its decision (see :meth:`after`)
        self._deciding: dict[str, list[Callable[[], None]]] = {}

    async def decide(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread as the decision of url key ``key``: what :meth:`after`
        is given for ``key`` meanwhile runs once it is done."""
        mine = key not in self._deciding
        if mine:
            self._deciding[key] = []
        try:
            return await self.run(fn, *args)
        finally:
            if mine:
                for work in self._deciding.pop(key):
                    work()

    def after(self, key: str, work: Callable[[], None]) -> None:
        """``work()`` (on the reactor thread) now, or once the decision of ``key`` under way is
        done: a page's record read and written again on the reactor thread (its links, say)
        must not fall in between the reads and the writes of its decision."""
        waiting = self._deciding.get(key)
        if waiting is None:
            work()
        else:
            waiting.append(work)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread; raises PoolClosed once the thread is closed."""
        if self._closed:
            raise PoolClosed("the decision thread is closed")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dedup-decide")
        try:
            future = self._executor.submit(fn, *args)
        except RuntimeError as exc:  # shut down
            raise PoolClosed(str(exc)) from exc
        return await _outcome(future, "the decision")

    def close(self) -> None:
        """Stop the thread once the decision it runs is done (one a forced stop cut short would
        leave its URL key held)."""
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


async def _outcome(future: Future[T], work: str) -> T:
    """What ``future`` ends with, awaited on the reactor; PoolClosed when its pool was shut
    down under it (or its worker died)."""
    try:
        if is_asyncio_reactor_installed():
            return await asyncio.wrap_future(future)
        return await _deferred_from_future(future)
    except (asyncio.CancelledError, CancelledError, BrokenExecutor) as exc:
        raise PoolClosed(f"{work} stopped: {type(exc).__name__}") from exc


#: the signals a worker leaves to the crawl process
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _submit(executor: Executor, fn: Callable[..., T], *args: Any) -> Future[T]:
    """``executor.submit`` with SIGINT and SIGTERM blocked: a worker is spawned there and
    inherits the mask, so a Ctrl-C that reaches it while it imports, before ``_worker_start``
    ignores the signal, waits instead of killing it; here the signal arrives once unblocked."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        return executor.submit(fn, *args)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        return executor.submit(fn, *args)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


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
