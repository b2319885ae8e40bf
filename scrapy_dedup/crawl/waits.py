"""Waiting in the crawl without blocking the reactor: whether the crawl is closing
(:func:`crawl_closing`), and the pages waiting for their rel=canonical target
(:class:`CanonicalWaits`, which :mod:`scrapy_dedup.crawl.canonical` uses).

The bottom of ``crawl/``: it imports nothing of the package, so that the crawl's state, which
holds the waits, imports it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task
from twisted.internet.defer import Deferred

#: seconds between two looks at whether the crawl is stopping, while pages wait
STOP_CHECK_S = 0.2

#: what a wait ends with
RELEASED, TIMED_OUT, STOPPING = "released", "timed_out", "stopping"



def crawl_closing(crawler: Any) -> bool:
    """Whether the crawl stops fetching: stopped (Ctrl-C, SIGTERM) or its spider closing
    (a CLOSESPIDER limit, an error); False before the engine runs."""
    try:
        engine = crawler.engine
    except RuntimeError:  # not set before the crawl starts
        return False
    if engine is None or getattr(engine, "spider", None) is None:
        return False
    if not engine.running:
        return True
    # the engine's slot has no public flag for a spider being closed
    slot = getattr(engine, "_slot", None)
    return getattr(slot, "closing", None) is not None


class CanonicalWaits:
    """Pages waiting for their rel=canonical target to be processed.

    A page that names a canonical the store does not know yet waits (at most
    ``timeout`` seconds) until the target has been ingested, has turned out to
    be a hub, or failed.  A page never waits on a chain longer than
    ``max_depth`` or on a cycle (A names B, B names A).
    """

    def __init__(self, timeout: float, max_depth: int, closing: Callable[[], bool] = lambda: False) -> None:
        self.timeout = timeout
        self.max_depth = max_depth
        #: whether the crawl is stopping (then no waited-for target will come)
        self.closing = closing
        self._waiters: dict[str, list[Deferred]] = {}
        self._waits_for: dict[str, str] = {}
        self._watch: task.LoopingCall | None = None

    def blocked(self, key: str, target: str) -> str | None:
        """Why ``key`` must not wait for ``target`` (``loop``, ``depth``), or None."""
        depth, current = 0, target
        while current in self._waits_for:
            current = self._waits_for[current]
            depth += 1
            if current == key:
                return "loop"
            if depth >= self.max_depth:
                return "depth"
        return None

    async def wait(self, key: str, target: str) -> str:
        """Wait for ``target``: RELEASED, TIMED_OUT, or STOPPING (the crawl is stopping)."""
        from twisted.internet import reactor

        if self.closing():
            return STOPPING
        d: Deferred = Deferred()
        self._waiters.setdefault(target, []).append(d)
        self._waits_for[key] = target
        # twisted types its reactor with zope interfaces, which mypy reads without their plugin
        timer = reactor.callLater(self.timeout, _fire, d, TIMED_OUT)  # type: ignore[arg-type]
        if self._watch is None:
            self._watch = task.LoopingCall(self._look)
            self._watch.start(STOP_CHECK_S, now=False)
        try:
            return await maybe_deferred_to_future(d)
        finally:
            self._waits_for.pop(key, None)
            if timer.active():  # type: ignore[misc]  # a zope-typed IDelayedCall
                timer.cancel()  # type: ignore[misc]
            if not self._waiters and self._watch is not None:
                watch, self._watch = self._watch, None
                if watch.running:
                    watch.stop()

    def _look(self) -> None:
        if self.closing():
            self.release_all(STOPPING)

    def release(self, target: str, outcome: str = RELEASED) -> None:
        for d in self._waiters.pop(target, ()):
            _fire(d, outcome)

    def release_all(self, outcome: str = STOPPING) -> None:
        """End every wait: the crawl is closing (no target comes any more)."""
        for target in list(self._waiters):
            self.release(target, outcome)


def _fire(d: Deferred, value: str) -> None:
    if not d.called:
        d.callback(value)
