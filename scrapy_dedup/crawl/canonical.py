"""rel=canonical, the Scrapy side: read it from a response, request its target, wait for it.

The parsing and the scope rules are pure (:mod:`scrapy_dedup.core.canonical`);
what the content index does with a verified canonical is in
:mod:`scrapy_dedup.decide.index`.  Here:

- the spider middleware reads a page's canonical once (:func:`canonical_of`)
  and requests an in-scope target at a higher priority (:func:`canonical_request`);
- the pipeline waits, boundedly, until that target has been decided
  (:func:`await_canonical`), so that the page is verified against it;
- :class:`CanonicalWaits` holds the waiting pages; a target is released when it
  is decided, turns out to be a hub, redirects, or fails.

A crawl that stops (Ctrl-C, a CLOSESPIDER limit) fetches no more requests, so a
target still queued will not come: its waiting pages are left owed at once
(:class:`CanonicalWaitStopped`), for the next run to verify against the target,
rather than kept unverified when their wait runs out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.http import TextResponse
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task
from twisted.internet.defer import Deferred

from scrapy_dedup.core.canonical import canonical_scope_check, resolve_canonical

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_dedup.crawl.state import DedupState

logger = logging.getLogger(__name__)

#: priority boost of a canonical target over the page that declared it
CANONICAL_PRIORITY = 10

#: seconds between two looks at whether the crawl is stopping, while pages wait
STOP_CHECK_S = 0.2

#: what a wait ends with
RELEASED, TIMED_OUT, STOPPING = "released", "timed_out", "stopping"


class CanonicalWaitStopped(RuntimeError):
    """The crawl is stopping while the page waits for its canonical target: the page stays
    owed, and the next run decides it against the target."""


def crawl_closing(crawler) -> bool:
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


def canonical_of(state: DedupState, response: Response) -> tuple[str, str] | None:
    """(URL, url key) of the in-scope rel=canonical ``response`` declares, or None."""
    if response.meta.get("dont_dedup") or state.config.canonical_scope == "off":
        return None
    try:
        link = resolve_canonical(
            response.url,
            response.body if isinstance(response, TextResponse) else b"",
            response.headers.getlist(b"Link"),
            response.encoding if isinstance(response, TextResponse) else "utf-8",
        )
    except Exception:
        state.failed("canonical", "could not read the canonical link of %s", response.url)
        return None
    if link is None:
        return None
    reason = canonical_scope_check(response.url, link.url, state.config.canonical_scope)
    if reason is not None:
        state.inc(f"canonical/ignored/{reason}")
        return None
    key = state.key(link.url)
    if key == state.key(response.url):
        state.inc("canonical/self")
        return None
    state.inc(f"canonical/declared/{link.source}")
    return link.url, key


def canonical_request(state: DedupState, response: Response, url: str) -> Request:
    """The request for a page's canonical target, with the page's callbacks, ahead of it."""
    request = response.request
    state.inc("canonical/requested")
    return Request(
        url,
        callback=request.callback if request is not None else None,
        errback=request.errback if request is not None else None,
        priority=(request.priority if request is not None else 0) + CANONICAL_PRIORITY,
        meta={"dedup_canonical_of": response.url},
    )


async def await_canonical(state: DedupState, key: str, target: str) -> None:
    """Wait until the canonical ``target`` (through recorded redirects) has been decided."""
    index, waits = state.index, state.canonical_waits
    for _ in range(state.config.canonical_max_depth):
        resolved = index.resolve(target)
        if index.known_content(resolved) is not None:
            return
        blocked = waits.blocked(key, resolved)
        if blocked is not None:
            state.inc(f"canonical/ignored/{blocked}")
            return
        outcome = await waits.wait(key, resolved)
        if outcome == RELEASED and waits.closing() and index.known_content(index.resolve(target)) is None:
            outcome = STOPPING  # released by a page the stop left undecided
        if outcome == STOPPING:
            state.inc("canonical/left_owed")
            raise CanonicalWaitStopped(f"the crawl stopped while {key} waited for its canonical {resolved}")
        if outcome == TIMED_OUT:
            state.inc("canonical/timeout")
            return
        if index.resolve(target) == resolved:
            return  # decided (or a hub, or failed): no redirect to follow


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
        timer = reactor.callLater(self.timeout, _fire, d, TIMED_OUT)
        if self._watch is None:
            self._watch = task.LoopingCall(self._look)
            self._watch.start(STOP_CHECK_S, now=False)
        try:
            return await maybe_deferred_to_future(d)
        finally:
            self._waits_for.pop(key, None)
            if timer.active():
                timer.cancel()
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
