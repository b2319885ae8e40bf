"""A page's output held back in chunks, so that what its elements will ask of the store is
asked in one round trip per chunk (the spider middlewares' read-ahead and mark-ahead)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Any

#: most requests and items of a page held back at once
HELD_MAX = 256

Each = Callable[[Any], Any]
Flush = Callable[[list[Any]], list[Any]]


def held_back(result: Iterable[Any], each: Each, flush: Flush | None, size: int = HELD_MAX) -> Iterator[Any]:
    """``each`` of ``result``'s elements, passed on through ``flush`` by chunks of ``size``
    (``flush`` returns what to pass on); with no ``flush``, one by one."""
    if flush is None:
        for element in result:
            yield each(element)
        return
    held: list[Any] = []
    for element in result:
        held.append(each(element))
        if len(held) >= size:
            yield from flush(held)
            held = []
    yield from flush(held)


async def held_back_async(
    result: AsyncIterable[Any], each: Each, flush: Flush | None, size: int = HELD_MAX
) -> AsyncIterator[Any]:
    """:func:`held_back` of an asynchronous spider output."""
    if flush is None:
        async for element in result:
            yield each(element)
        return
    held: list[Any] = []
    async for element in result:
        held.append(each(element))
        if len(held) >= size:
            for ready in flush(held):
                yield ready
            held = []
    for ready in flush(held):
        yield ready
