"""Waiting for another process's decision without blocking the reactor.

On a shared store a decision holds its URL key until its writes are in, and the store never
waits for it: it raises DecisionBusy. Another process that holds it is most often one that
died holding it, until its lease runs out: a crawl that meets such a key tries again a moment
later, polling from BUSY_FIRST_POLL_S doubling up to BUSY_LAST_POLL_S, and fetches and decides
other pages meanwhile. This is the one place where the crawl waits for another process.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task

from scrapy_dedup.crawl.waits import crawl_closing
from scrapy_dedup.store.base import DecisionBusy, StoreError

if TYPE_CHECKING:
    from scrapy_dedup.crawl.state import DedupState

#: request meta: a redirect the dupefilter let through unchecked, as another process held the
#: decision of a source that held a document; the downloader middleware waits for that process
#: and sends the request back to be checked (set and read by the extension only)
META_REDIRECT_WAITS = "dedup_redirect_waits"

#: how long a decision waits for another process's, at most
BUSY_MAX_WAIT_S = 120.0
BUSY_FIRST_POLL_S = 0.005
BUSY_LAST_POLL_S = 0.25

T = TypeVar("T")


class WaitStopped(Exception):
    """The crawl began to stop while a decision waited for another process's."""


async def when_free(state: DedupState, attempt: Callable[[], T | Awaitable[T]], what: str) -> T:
    """``attempt()`` (awaited when it answers an awaitable: work on another thread), again
    after a pause each time it raises DecisionBusy (having done nothing: another holder has the
    key). Counts ``dedup/doc/waited_for_another_process`` once for a call that waited; raises
    WaitStopped when the crawl stops meanwhile, StoreError after BUSY_MAX_WAIT_S."""
    from twisted.internet import reactor

    delay, waited = BUSY_FIRST_POLL_S, 0.0
    while True:
        try:
            done = attempt()
            return await done if inspect.isawaitable(done) else done
        except DecisionBusy:
            pass
        if waited == 0.0:
            state.inc("doc/waited_for_another_process")
        if crawl_closing(state.crawler):
            raise WaitStopped(what)
        if waited >= BUSY_MAX_WAIT_S:
            raise StoreError(f"waited {BUSY_MAX_WAIT_S:.0f} s for another process's decision of {what!r}")
        await maybe_deferred_to_future(task.deferLater(reactor, delay))
        waited += delay
        delay = min(2 * delay, BUSY_LAST_POLL_S)
