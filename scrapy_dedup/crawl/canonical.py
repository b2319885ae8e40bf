"""rel=canonical, the Scrapy side: read it from a response, request its target, wait for it.

The parsing and the scope rules are pure (:mod:`scrapy_dedup.core.canonical`);
what the content index does with a verified canonical is in
:mod:`scrapy_dedup.decide.index`.  Here:

- the spider middleware reads a page's canonical once (:func:`canonical_of`)
  and requests an in-scope target at a higher priority (:func:`canonical_request`);
- the pipeline waits, boundedly, until that target has been decided
  (:func:`await_canonical`), so that the page is verified against it;
- :class:`~scrapy_dedup.crawl.waits.CanonicalWaits` holds the waiting pages; a target is
  released when it is decided, turns out to be a hub, redirects, or fails.

A crawl that stops (Ctrl-C, a CLOSESPIDER limit) fetches no more requests, so a
target still queued will not come: its waiting pages are left owed at once
(:class:`CanonicalWaitStopped`), for the next run to verify against the target,
rather than kept unverified when their wait runs out.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.http import TextResponse

from scrapy_dedup.core.canonical import canonical_scope_check, resolve_canonical
from scrapy_dedup.crawl.waits import RELEASED, STOPPING, TIMED_OUT

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_dedup.crawl.state import DedupState

logger = logging.getLogger(__name__)

#: priority boost of a canonical target over the page that declared it
CANONICAL_PRIORITY = 10

class CanonicalWaitStopped(RuntimeError):
    """The crawl is stopping while the page waits for its canonical target: the page stays
    owed, and the next run decides it against the target."""


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
    assert index is not None  # the pipeline waits only while the store is open
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
