"""Heading spans of extracted text: which lines of the main text were ``<h1>``..``<h6>`` in the page.

The extractor's plain-text output does not mark headings, so the chunker would see a heading as
one more paragraph. This module reads the page's headings again and finds each as a whole line
of the extracted text, so that ``chunk_text(text, headings=heading_spans(html, text))`` gives
chunks that never cross a section and carry their heading path.

Matching is by canonical text (case, Unicode form, whitespace; spaces between words are ignored
too, because the extractor and the markup may disagree on the space between ``<span>1.2.</span>``
and a title; so is a trailing anchor glyph such as Sphinx's pilcrow). Headings and lines are matched in document order, each at most once, keeping the
largest number of headings: a navigation heading the extractor dropped cannot take a body line
that repeats its title ahead of the real headings, and a title repeated in the body is not a
second heading. Runs in the extraction workers, next to trafilatura; never raises.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from lxml import etree

from scrapy_dedup.core.boilerplate import paragraphs
from scrapy_dedup.core.chunks import Heading
from scrapy_dedup.core.text import canonical_text
from scrapy_dedup.extraction.main_text import _cut_long_tags, _decode

__all__ = ["heading_spans", "page_headings"]

_HEADING_TAGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_ANY_HEADING_RE = re.compile(r"<h[1-6]", re.IGNORECASE)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# Anchor glyphs documentation generators append to headings (Sphinx's pilcrow, icon fonts).
_ANCHOR_GLYPHS = "¶\uf0c1\U0001f517"
# Above this many (heading, line) candidate pairs the order-keeping match would cost more than
# the extraction it follows; such a page (thousands of equal headings and equal lines) is
# matched greedily instead, still in order and each line once.
_MAX_PAIRS = 100_000


def _key(text: str) -> str:
    return "".join(canonical_text(text).split()).rstrip(_ANCHOR_GLYPHS)


def page_headings(html: str | bytes) -> list[tuple[int, str]]:
    """(level, text) of the ``<h1>``..``<h6>`` elements of a page, in document order; ``[]``
    for anything that is not parseable HTML.

    >>> page_headings(b"<h1>Guide</h1><p>intro</p><h2>Install <a href='#i'>#</a></h2><h3> </h3>")
    [(1, 'Guide'), (2, 'Install #')]
    """
    try:
        text = _decode(html) if isinstance(html, (bytes, bytearray, memoryview)) else html
        if not isinstance(text, str) or _ANY_HEADING_RE.search(text) is None:
            return []
        # lone surrogates become U+FFFD, as canonical_text makes them on the text side
        data = _SURROGATE_RE.sub("\ufffd", _cut_long_tags(text)).encode("utf-8")
        # the text is decoded already: utf-8 here overrides any <meta charset> in the markup
        parser = etree.HTMLParser(encoding="utf-8", recover=True, no_network=True, remove_comments=True,
                                  remove_pis=True)
        root = etree.fromstring(data, parser)
        if root is None:
            return []
        out = []
        for element in root.iter(*_HEADING_TAGS):
            title = " ".join("".join(element.itertext()).split())
            if title:
                out.append((int(element.tag[1]), title))
        return out
    except Exception:  # noqa: BLE001 -- a page without readable headings has none, never a failed page
        return []


def _longest_in_order(candidates: Sequence[Sequence[int]]) -> list[int | None]:
    """For headings in order, each with the sorted line numbers it could be, the line of each in
    a largest matching where lines increase with headings (``None``: not matched). A longest
    strictly increasing subsequence over the candidates, each heading's listed from last to first
    so that it takes at most one line."""
    tails: list[int] = []  # smallest last line of a matching of each length
    tail_at: list[int] = []  # index into pairs of that last element
    pairs: list[tuple[int, int, int]] = []  # (heading, line, previous pair or -1)
    for heading, lines in enumerate(candidates):
        for line in reversed(lines):
            k = bisect.bisect_left(tails, line)
            pairs.append((heading, line, tail_at[k - 1] if k else -1))
            if k == len(tails):
                tails.append(line)
                tail_at.append(len(pairs) - 1)
            else:
                tails[k] = line
                tail_at[k] = len(pairs) - 1
    chosen: list[int | None] = [None] * len(candidates)
    at = tail_at[-1] if tail_at else -1
    while at >= 0:
        heading, line, at = pairs[at]
        chosen[heading] = line
    return chosen


def _greedy_in_order(candidates: Sequence[Sequence[int]]) -> list[int | None]:
    chosen: list[int | None] = []
    after = -1
    for lines in candidates:
        i = bisect.bisect_right(lines, after)
        if i < len(lines):
            after = lines[i]
            chosen.append(after)
        else:
            chosen.append(None)
    return chosen


def _title(line: str) -> str:
    return " ".join(line.split()).rstrip(_ANCHOR_GLYPHS + " ")


def heading_spans(html: str | bytes, text: str) -> tuple[Heading, ...]:
    """Spans of ``text`` (the page's extracted main text) that are headings of ``html``:
    ``text[h.start:h.end]`` is the whole line, ``h.level`` 1..6, ``h.title`` the line without
    surrounding spaces or a trailing anchor glyph. ``()`` when the page has no heading the
    extractor kept, or for any input that is not HTML and text.

    >>> html = "<h1>Guide</h1><p>Harbor indexes.</p><h2>Install</h2><p>Run pip.</p>"
    >>> text = "Guide\\nHarbor indexes.\\nInstall\\nRun pip."
    >>> [(h.level, h.title, text[h.start:h.end]) for h in heading_spans(html, text)]
    [(1, 'Guide', 'Guide'), (2, 'Install', 'Install')]
    >>> heading_spans(b"\\x89PNG\\r\\n", "Guide")
    ()
    """
    try:
        if not isinstance(text, str) or not text:
            return ()
        headings = page_headings(html)
        if not headings:
            return ()
        lines: dict[str, list[int]] = {}
        spans = list(paragraphs(text))
        wanted = {_key(title) for _, title in headings}
        wanted.discard("")
        # a line far longer than every title cannot fold down to one: skip canonicalizing it
        longest = 4 * max(map(len, wanted), default=0) + 100
        for number, (start, end) in enumerate(spans):
            if end - start > longest:
                continue
            key = _key(text[start:end])
            if key in wanted:
                lines.setdefault(key, []).append(number)
        kept = [(level, lines[key]) for level, title in headings if (key := _key(title)) in lines]
        candidates = [found for _, found in kept]
        if sum(map(len, candidates)) > _MAX_PAIRS:
            chosen = _greedy_in_order(candidates)
        else:
            chosen = _longest_in_order(candidates)
        out = []
        for (level, _), line in zip(kept, chosen):
            if line is not None:
                start, end = spans[line]
                out.append(Heading(start, end, level, _title(text[start:end])))
        return tuple(out)
    except Exception:  # noqa: BLE001 -- chunks without heading paths, never a failed page
        return ()
