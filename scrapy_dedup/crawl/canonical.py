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
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.http import TextResponse
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_dedup.core.canonical import canonical_scope_check, resolve_canonical

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_dedup.crawl.state import DedupState

logger = logging.getLogger(__name__)

#: priority boost of a canonical target over the page that declared it
CANONICAL_PRIORITY = 10


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
        if not await waits.wait(key, resolved):
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

    def __init__(self, timeout: float, max_depth: int) -> None:
        self.timeout = timeout
        self.max_depth = max_depth
        self._waiters: dict[str, list[Deferred]] = {}
        self._waits_for: dict[str, str] = {}

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

    async def wait(self, key: str, target: str) -> bool:
        """Wait for ``target``; False when the wait timed out."""
        from twisted.internet import reactor

        d: Deferred = Deferred()
        self._waiters.setdefault(target, []).append(d)
        self._waits_for[key] = target
        timer = reactor.callLater(self.timeout, _fire, d, False)
        try:
            return await maybe_deferred_to_future(d)
        finally:
            self._waits_for.pop(key, None)
            if timer.active():
                timer.cancel()

    def release(self, target: str) -> None:
        for d in self._waiters.pop(target, ()):
            _fire(d, True)

    def release_all(self) -> None:
        for target in list(self._waiters):
            self.release(target)


def _fire(d: Deferred, value: bool) -> None:
    if not d.called:
        d.callback(value)
