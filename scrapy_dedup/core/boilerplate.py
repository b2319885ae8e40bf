"""Per-host boilerplate: paragraphs that recur on many pages of a site, learned by document frequency.

Pure (no Scrapy, no I/O). A paragraph is a line of extracted text; its key is a hash of its
canonical text, so case, whitespace and Unicode forms do not split one footer into many. Each
page counts a key once however often the paragraph repeats on it (document frequency, not
occurrences). A key is boilerplate in a group (a host, or a host and first path segment) when it
is on at least ``max(min_pages, ceil(share * pages in the group))`` pages.

The learned set is a function of the set of pages, never of the order they arrived in: counts
are sums, a page observed again replaces its earlier observation, and the example URL of a key
is the smallest one. See docs/how-it-works.md, "Chunks and boilerplate", for how a crawl uses it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import xxhash

from .text import canonical_and_count, canonical_text

__all__ = [
    "BOILERPLATE_PARAMS",
    "DEFAULT_BOILERPLATE_MIN_PAGES",
    "DEFAULT_BOILERPLATE_SHARE",
    "BoilerplateLearner",
    "BoilerplateParagraph",
    "Stripped",
    "boilerplate_group",
    "boilerplate_threshold",
    "paragraph_key",
    "paragraphs",
    "strip_boilerplate",
]

#: A paragraph must be on at least this many pages of its group. Measured on random 4-page
#: samples of three real doc sites (docs/benchmarks.md, "Chunks and boilerplate"): with 2, labels and
#: sentences two pages happen to share took 0.1-2.7% of a small host's text; with 3, at most 0.6%.
DEFAULT_BOILERPLATE_MIN_PAGES = 3
#: ... and on at least this share of the group's pages. Measured on the PostgreSQL, Python and
#: SQLite docs: the most repeated lines that are content ("See also" and "Note" labels, a
#: standard sentence of release notes) are on 24-30% of pages; 0.5 keeps them all, and still
#: takes furniture the extractor keeps on most pages of a site.
DEFAULT_BOILERPLATE_SHARE = 0.5

BOILERPLATE_PARAMS: dict[str, object] = {
    "version": 1,
    "paragraph": "line with text",
    "key": "xxh3_64(utf8(canonical_text(line)))",
}


def boilerplate_group(url: str, by_path: bool = False) -> str:
    """The group a page learns boilerplate in: its host (with a non-default port), and with
    ``by_path`` its first path segment too (a site whose /blog and /docs have different templates).

    >>> boilerplate_group("https://Docs.Example.org/guide/install.html")
    'docs.example.org'
    >>> boilerplate_group("http://127.0.0.1:8431/guide/install.html", by_path=True)
    '127.0.0.1:8431/guide'
    >>> boilerplate_group("http://h/index.html", by_path=True)
    'h/'
    """
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:  # a URL that cannot be split still belongs somewhere
        return url
    if port is not None and port != {"http": 80, "https": 443}.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    if not by_path:
        return host
    segments = parts.path.lstrip("/").split("/")
    first = segments[0] if len(segments) > 1 else ""
    return f"{host}/{first}"


def paragraphs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every line of ``text`` that has something on it, without its line break.

    >>> list(paragraphs("a\\n\\n  b c\\n"))
    [(0, 1), (3, 8)]
    """
    pos = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        if body.strip():
            yield pos, pos + len(body)
        pos += len(line)


def paragraph_key(paragraph: str) -> str:
    """16 hex digits identifying a paragraph up to case, whitespace and Unicode form; ``""`` for
    one without a word (table rules, lone brackets: they carry nothing to learn or strip).

    >>> paragraph_key("Was this page  HELPFUL?") == paragraph_key("was this page helpful?")
    True
    >>> paragraph_key("|---|---|")
    ''
    """
    canonical, tokens = canonical_and_count(paragraph)
    return xxhash.xxh3_64_hexdigest(canonical) if tokens else ""


def boilerplate_threshold(pages: int, min_pages: int, share: float) -> int:
    """Pages a paragraph must be on, in a group of ``pages`` pages.

    >>> boilerplate_threshold(10, 3, 0.5), boilerplate_threshold(4, 3, 0.5), boilerplate_threshold(1000, 3, 0.5)
    (5, 3, 500)
    """
    # round() first so that 0.3 * 10 is 3, not 3.0000000000000004 -> 4
    return max(min_pages, math.ceil(round(share * pages, 9)))


@dataclass(frozen=True, slots=True)
class BoilerplateParagraph:
    """One learned paragraph, as listed by reports."""

    group: str
    key: str
    text: str
    pages: int  #: pages of the group it is on
    group_pages: int  #: pages of the group
    example_url: str  #: the smallest URL it is on


class BoilerplateLearner:
    """Document frequencies of paragraphs per group, in memory (the store keeps the same
    figures for a crawl). ``observe`` the same page again after it changed: the old
    observation is replaced, so the counts are always those of the current set of pages."""

    def __init__(self, min_pages: int = DEFAULT_BOILERPLATE_MIN_PAGES, share: float = DEFAULT_BOILERPLATE_SHARE):
        if min_pages < 2:
            raise ValueError(f"min_pages must be at least 2 (a paragraph on one page is never boilerplate), got {min_pages}")
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.min_pages = min_pages
        self.share = share
        self._pages: dict[str, dict[str, frozenset[str]]] = {}  # group -> url -> keys
        self._df: dict[str, Counter[str]] = {}
        self._texts: dict[str, str] = {}  # key -> canonical text (equal for every page)

    def observe(self, group: str, url: str, text: str) -> None:
        keys = set()
        for start, end in paragraphs(text):
            key = paragraph_key(text[start:end])
            if key:
                keys.add(key)
                self._texts.setdefault(key, canonical_text(text[start:end]))
        self.forget(group, url)
        self._pages.setdefault(group, {})[url] = frozenset(keys)
        self._df.setdefault(group, Counter()).update(keys)

    def forget(self, group: str, url: str) -> None:
        """Take a page out (deleted, or about to be observed again)."""
        old = self._pages.get(group, {}).pop(url, None)
        if old:
            self._df[group].subtract(old)
            for key in old:
                if self._df[group][key] <= 0:
                    del self._df[group][key]

    def group_pages(self, group: str) -> int:
        return len(self._pages.get(group, ()))

    def threshold(self, group: str) -> int:
        return boilerplate_threshold(self.group_pages(group), self.min_pages, self.share)

    def boilerplate_keys(self, group: str) -> frozenset[str]:
        need = self.threshold(group)
        return frozenset(k for k, n in self._df.get(group, Counter()).items() if n >= need)

    def is_boilerplate(self, group: str) -> Callable[[str], bool]:
        keys = self.boilerplate_keys(group)
        return lambda paragraph: paragraph_key(paragraph) in keys

    def learned(self, group: str | None = None) -> list[BoilerplateParagraph]:
        """Every boilerplate paragraph (of one group, or all), most frequent first."""
        out = []
        for g in sorted(self._pages) if group is None else [group]:
            pages = self._pages.get(g, {})
            keys = self.boilerplate_keys(g)
            for key in keys:
                example = min(url for url, ks in pages.items() if key in ks)
                out.append(BoilerplateParagraph(g, key, self._texts[key], self._df[g][key], len(pages), example))
        out.sort(key=lambda p: (p.group, -p.pages, p.key))
        return out


@dataclass(frozen=True, slots=True)
class Stripped:
    """What :func:`strip_boilerplate` found: ``removed`` spans are boilerplate lines, ``kept``
    the rest; ``removed`` is empty when stripping would have left no text (a page is never emptied)."""

    kept: tuple[tuple[int, int], ...]
    removed: tuple[tuple[int, int], ...]

    def removed_chars(self) -> int:
        return sum(b - a for a, b in self.removed)


def strip_boilerplate(text: str, is_boilerplate: Callable[[str], bool] | Iterable[str]) -> Stripped:
    """Split the lines of ``text`` into kept and boilerplate spans. ``is_boilerplate`` is a
    predicate on a line, or a collection of :func:`paragraph_key` values.

    >>> page = "Intro to VACUUM.\\nWas this page helpful?\\nVACUUM reclaims storage."
    >>> s = strip_boilerplate(page, {paragraph_key("was this page helpful?")})
    >>> [page[a:b] for a, b in s.removed], len(s.kept)
    (['Was this page helpful?'], 2)
    >>> strip_boilerplate("Was this page helpful?", {paragraph_key("was this page helpful?")}).removed
    ()
    """
    if not callable(is_boilerplate):
        keys = frozenset(is_boilerplate)
        is_boilerplate = lambda paragraph: paragraph_key(paragraph) in keys  # noqa: E731
    kept: list[tuple[int, int]] = []
    removed: list[tuple[int, int]] = []
    for start, end in paragraphs(text):
        (removed if is_boilerplate(text[start:end]) else kept).append((start, end))
    if not kept:
        return Stripped(tuple(removed), ())
    return Stripped(tuple(kept), tuple(removed))
