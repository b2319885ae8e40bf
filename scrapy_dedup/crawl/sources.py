"""Which response each item came from, so the pipeline can read a spider's plain items.

Scrapy hands the pipeline an item without its response.  The spider
middleware links each item to its response here, the pipeline takes the link
back.  An item can also leave the chain another way (a later middleware drops
it, an exception): the link then stays behind, so the table is bounded, and it
holds the response weakly, so a stale link never keeps a response alive.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.http import Response

#: links kept at most: far more items than Scrapy has in flight (CONCURRENT_ITEMS per response)
MAX_SOURCES = 10_000


class ItemSource:
    """The response an item came from, and the rel=canonical it declared."""

    __slots__ = ("_response", "canonical_url", "canonical_key")

    def __init__(self, response: Response, canonical_url: str | None = None, canonical_key: str | None = None) -> None:
        self._response = weakref.ref(response)
        self.canonical_url = canonical_url
        self.canonical_key = canonical_key

    @property
    def response(self) -> Response | None:
        """The response, or None once nothing else holds it."""
        return self._response()


class ItemSources:
    """item (by identity) -> :class:`ItemSource`, bounded (oldest links go first)."""

    def __init__(self, limit: int = MAX_SOURCES) -> None:
        self.limit = limit
        self._links: OrderedDict[int, ItemSource] = OrderedDict()

    def link(self, item: Any, source: ItemSource) -> None:
        self._links[id(item)] = source
        self._links.move_to_end(id(item))
        while len(self._links) > self.limit:
            self._links.popitem(last=False)

    def take(self, item: Any) -> ItemSource | None:
        """The item's source, removed from the table; None if unknown or its response is gone."""
        source = self._links.pop(id(item), None)
        return source if source is not None and source.response is not None else None

    def forget(self, item: Any, *args: Any, **kwargs: Any) -> None:
        """Drop the link of an item that left the chain (a signal handler)."""
        self._links.pop(id(item), None)

    def __len__(self) -> int:
        return len(self._links)
