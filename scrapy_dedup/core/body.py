"""A page's body cut at ``DEDUP_MAX_BODY_BYTES``: the crawl and ``scrapy dedup ingest`` cut it here.

The limit is in bytes, as the raw hash is of bytes; the text extracted is that of the bytes kept,
a character the cut splits in two left out.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

__all__ = ["CutBody", "cut_body"]


class CutBody(NamedTuple):
    #: the body's first ``limit`` bytes (all of them when it is not longer): the raw hash is of these
    body: bytes
    #: the whole body's size, in bytes
    size: int

    @property
    def cut(self) -> bool:
        return self.size > len(self.body)

    def text(self, encoding: str = "utf-8", errors: str = "surrogatepass") -> str:
        """The kept bytes decoded; the bytes of a character the cut split are left out, not
        replaced. The defaults decode the body of a ``str``."""
        return codecs.getincrementaldecoder(encoding)(errors).decode(self.body, final=not self.cut)


def cut_body(body: str | bytes, limit: int | None) -> CutBody:
    """``body`` (a ``str`` is taken as its UTF-8) cut at ``limit`` bytes (``None``: not cut)."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return CutBody(data[:limit], len(data))
