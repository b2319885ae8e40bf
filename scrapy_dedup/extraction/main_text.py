"""Main-text extraction: the one impure piece of fingerprinting (wraps trafilatura).

Everything downstream hashes what this returns, so the options below are part of what makes
two crawls comparable; they are recorded as ``EXTRACT_PARAMS``.
"""

from __future__ import annotations

import logging
import re

from typing import Any

import trafilatura
from trafilatura.utils import load_html
from w3lib.encoding import html_to_unicode

__all__ = ["EXTRACT_PARAMS", "extract_text", "looks_cut"]

# trafilatura logs every page it finds no main text in at WARNING/ERROR; for a crawler those are
# expected outcomes (we return ""), not problems, so keep them out of the crawl log unless the
# application configured that logger itself.
_TRAFILATURA_LOGGER = logging.getLogger("trafilatura")
if _TRAFILATURA_LOGGER.level == logging.NOTSET:
    _TRAFILATURA_LOGGER.setLevel(logging.CRITICAL)

#: What the text of a page is made with; a change here changes extracted text, hence
#: fingerprints (the store format names the extraction its texts came from).
EXTRACT_PARAMS: dict[str, object] = {
    "trafilatura": trafilatura.__version__,
    # 2: fast mode, then the full mode (readability/jusText fallback) when the fast text is cut
    "version": 2,
    # The fast mode alone is 1.2-1.3x cheaper, but on DocBook/Publican books it drops the
    # leading text of most paragraphs (35-55% of pages lost over a fifth of their text); the
    # full mode is run where that happened (benchmarks/bench_extraction.py).
    "fast": "fast, full when cut",
    "deduplicate": False,
    "output_format": "txt",
}

_OPTIONS = {
    "deduplicate": False,
    "output_format": "txt",
    "with_metadata": False,
    "include_images": False,
    "include_links": False,
    "include_formatting": False,
}
_SPACES = re.compile(r"\s+")
#: Share of the fast text that dropped paragraph openings must reach to run the full mode.
CUT_SHARE = 0.02
#: How much of a paragraph's opening (and of the text after its first inline element) is looked up.
_PROBE_CHARS = 40

# Share of control characters / U+FFFD in the first _SNIFF chars above which a body is binary
# (an image, PDF or archive served as text/html); text has almost none of them.
_SNIFF = 4096
_MAX_JUNK_RATIO = 0.05
_JUNK_RE = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")

# libxml2's HTML parser checks each new attribute against the tag's others: quadratic in the
# attributes of one tag (10^5 of them took minutes, a stalled worker).  Attributes carry no main
# text, so a tag's attribute run is cut at _MAX_TAG_CHARS (a real tag is far below; 2,000
# attributes parse in ~10 ms).  "[^<>]" stops at the next tag, so the scan stays linear.
_MAX_TAG_CHARS = 16384
_LONG_RUN_RE = re.compile(r"<[^<>]{%d}" % _MAX_TAG_CHARS)
_LONG_TAG_RE = re.compile(r"(<[A-Za-z][^\s<>]*)([^<>]{%d,})" % _MAX_TAG_CHARS)


def _cut_long_tags(text: str) -> str:
    # one search (~0.3 ms on a 90 KB page, against ~10 ms of extraction) rules most pages out
    if len(text) < _MAX_TAG_CHARS or _LONG_RUN_RE.search(text) is None:
        return text

    def cut(match: re.Match[str]) -> str:
        attrs = match.group(2)[:_MAX_TAG_CHARS]
        return match.group(1) + attrs[: attrs.rfind(" ") + 1 or None]

    return _LONG_TAG_RE.sub(cut, text)


def _decode(html: bytes | bytearray | memoryview) -> str:
    # BOM, then <meta charset>, then UTF-8 with replacement: deterministic and never raises,
    # unlike statistical guessing, which can pick different encodings for two copies of a page.
    _encoding, text = html_to_unicode(None, bytes(html))
    return text


def _openings(tree: Any) -> list[tuple[str, str]]:
    """(opening text, text after the first inline element) of each block that starts with text
    of its own and goes on after an element: a paragraph written as ``<div>`` (DocBook and
    Publican's ``div.para``)."""
    found = []
    for block in tree.iter("div"):
        lead = _SPACES.sub(" ", block.text or "").strip()
        if not lead:
            continue
        after = next((c.tail for c in block if isinstance(c.tag, str) and c.tail and c.tail.strip()), None)
        if after is not None:
            found.append((lead[:_PROBE_CHARS], _SPACES.sub(" ", after).strip()[:_PROBE_CHARS]))
    return found


def looks_cut(openings: list[tuple[str, str]], text: str) -> bool:
    """Whether ``text`` lost paragraph openings: blocks whose continuation after their first
    inline element is in the text but whose opening is not (trafilatura's fast mode keeps only
    the tails of a ``<div>`` paragraph's elements when a page also has enough ``<p>`` text).

    >>> looks_cut([("One of the first actions", "command which takes")], "adduser command which takes a name")
    True
    >>> looks_cut([("One of the first actions", "command which takes")], "One of the first actions ... command which takes")
    False
    """
    flat = _SPACES.sub(" ", text)
    dropped = sum(len(lead) for lead, after in openings if after in flat and lead not in flat)
    return dropped > CUT_SHARE * len(flat) if flat else bool(openings)


def _looks_binary(text: str) -> bool:
    head = text[:_SNIFF]
    if not head.strip():
        return True
    return len(_JUNK_RE.findall(head)) > _MAX_JUNK_RATIO * len(head)


def extract_text(
    html: bytes | str,
    url: str | None = None,
    *,
    favor_precision: bool = False,
    favor_recall: bool = False,
    include_tables: bool = True,
    include_comments: bool = False,
) -> str:
    """Return the boilerplate-free main text of an HTML page, or "" when there is none.

    Never raises and never returns None: binary bodies served as text/html, undecodable
    bytes, empty input and plain text that is not HTML all give "". ``bytes`` are decoded
    from their BOM or ``<meta charset>``, defaulting to UTF-8 with replacement characters;
    pass ``str`` when the HTTP Content-Type already told you the encoding (e.g. Scrapy's
    ``response.text``). There is no size limit here: the caller caps the body size before
    calling (parsing time and memory grow with it).

    >>> page = (b"<html><body><nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
    ...         b"<article><h1>Vacuum</h1><p>" + b"VACUUM reclaims storage occupied by dead tuples. " * 8
    ...         + b"</p></article><footer>Copyright 2024 Example Corp</footer></body></html>")
    >>> text = extract_text(page, "https://example.org/vacuum")
    >>> text.startswith("Vacuum") and "dead tuples" in text and "Copyright" not in text
    True
    >>> extract_text(b"\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\rIHDR" * 50)
    ''
    >>> extract_text("")
    ''
    """
    try:
        text = _decode(html) if isinstance(html, (bytes, bytearray, memoryview)) else html
        if not isinstance(text, str) or _looks_binary(text):
            return ""
        text = _cut_long_tags(text)
        options = dict(
            _OPTIONS,
            url=url,
            favor_precision=favor_precision,
            favor_recall=favor_recall,
            include_tables=include_tables,
            include_comments=include_comments,
        )
        # parsed here once for both modes (trafilatura works on copies of it)
        tree = load_html(text)
        if tree is None:
            return ""
        openings = _openings(tree)
        result = trafilatura.extract(tree, fast=True, **options) or ""
        if openings and looks_cut(openings, result):
            result = trafilatura.extract(tree, fast=False, **options) or result
    except Exception:  # noqa: BLE001 -- a crawl must survive any page; "" means "no text"
        return ""
    return result
