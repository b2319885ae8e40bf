"""Which member of a cluster represents it.

The choice is a pure function of the members, so two crawls that end with the
same members end with the same representative, whatever order the pages were
fetched in.  Order of preference:

1. not a page that declared another page of the cluster as its rel=canonical;
2. the most authoritative source (``DEDUP_AUTHORITY``, an ordered list of hosts or URL
   prefixes, e.g. the original language's ``https://host/en-US/`` before its translations):
   what a user lists is what they want kept, so it outranks the length;
3. a page whose text was extracted from HTML before one served as plain text: the page a
   reader is sent to, not its source (a Sphinx page's reST source, ``_sources/*.txt``, is the
   same words with its markup, so longer);
4. the longest canonical text (the most complete copy);
5. the earliest crawl run it was first seen in (an established URL keeps its place);
6. the smallest URL key (a stable last resort).

Length before anything the text cannot say: a truncated or abridged copy never represents the
full one, even when more URLs serve it. That is also why a partial translation (the original with
some lines translated, often longer) represents its original when nothing ranks the original
first. Measured on debian-handbook 11.20220922 (26 languages, pages declaring no language): of
the 112 settled documents holding an English page and other pages, a partial translation
represents 88 and an exact copy of the English text under another language's URL 24 (the
smallest URL key: ``ar-MA/``, ``cs-CZ/``...); with ``DEDUP_AUTHORITY = ["*/en-US/*"]``, none.
Two rules were measured and not taken (docs/how-it-works.md): the text the most URLs serve
before the length fixes 18 of the 88 but lets a truncated copy served twice represent the full
page; the most central member is the English one in 30 of the other 70, at the cost of
comparing every pair of members. Nothing in a page says which of its exact copies is the
original: ``DEDUP_AUTHORITY`` is the way to name it.

First-seen counts in crawl runs, not seconds: within one run, fetch order
depends on concurrency and must not decide anything.  For the same reason the
last tie-break is the URL key, not the URL fetched: of several variants of a
key (``?jsessionid=...``), which one was fetched depends on fetch order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from .records import Cluster, UrlRecord


@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    url: str
    text_length: int
    first_run: int
    canonical_alias: bool = False
    plain_text: bool = False

    @classmethod
    def of(cls, record: UrlRecord) -> Candidate:
        """A member, from its URL record."""
        return cls(
            record.key, record.url, record.text_length or 0, record.first_run, record.canonical_alias, record.plain_text
        )

    @classmethod
    def representing(cls, cluster: Cluster) -> Candidate:
        """A cluster's representative, from what the cluster record keeps of it."""
        return cls(
            cluster.representative,
            cluster.rep_url,
            cluster.rep_text_length,
            cluster.rep_first_run,
            cluster.rep_canonical_alias,
            cluster.rep_plain_text,
        )


def authority_rank(url: str, authority: Sequence[str]) -> int:
    """Position of the first ``DEDUP_AUTHORITY`` pattern that matches ``url``.

    A pattern with a ``/`` is a URL prefix (``https://docs.example.com/en-US/``), with ``*``
    matching any run of characters (``*/en-US/*``); one without is a host
    (``docs.example.com``) or every subdomain of one (``*.example.com``).

    >>> authority_rank("https://docs.example.com/a", ["docs.example.com", "*.example.com"])
    0
    >>> authority_rank("https://www.example.com/a", ["docs.example.com", "*.example.com"])
    1
    >>> authority_rank("https://mirror.org/a", ["docs.example.com"])
    1
    >>> prefer = ["https://h.org/en-US/", "*/fr/*"]
    >>> [authority_rank(u, prefer) for u in ("https://h.org/en-US/a", "https://h.org/fr/a", "https://h.org/de/a")]
    [0, 1, 2]
    >>> [authority_rank(u, ["*/*[!.]??.html"]) for u in ("https://h.org/m/a.html", "https://h.org/m/a.nl.html")]
    [0, 1]
    """
    host = None
    for rank, pattern in enumerate(authority):
        if "/" in pattern:
            if fnmatchcase(url, pattern if pattern.endswith("*") else pattern + "*"):
                return rank
            continue
        if host is None:
            host = (urlsplit(url).hostname or "").lower()
        pattern = pattern.lower()
        if host == pattern or (pattern.startswith("*.") and fnmatchcase(host, pattern)):
            return rank
    return len(authority)


def representative_order(candidate: Candidate, authority: Sequence[str] = ()) -> tuple:
    """Sort key: the smallest key is the representative."""
    return (
        candidate.canonical_alias,
        authority_rank(candidate.url, authority),
        candidate.plain_text,
        -candidate.text_length,
        candidate.first_run,
        candidate.key,
    )


def choose_representative(candidates: Iterable[Candidate], authority: Sequence[str] = ()) -> Candidate:
    """The member that represents the cluster.

    >>> a = Candidate("http://h/b", "http://h/b;jsessionid=1", 100, 1)
    >>> b = Candidate("http://h/a", "http://h/a;jsessionid=2", 100, 1)
    >>> c = Candidate("http://h/c", "http://h/c", 120, 2)
    >>> choose_representative([a, b]).key
    'http://h/a'
    >>> choose_representative([a, b, c]).url
    'http://h/c'
    >>> source = Candidate("http://h/_sources/c.rst.txt", "http://h/_sources/c.rst.txt", 140, 1, plain_text=True)
    >>> choose_representative([c, source]).url
    'http://h/c'
    """
    return min(candidates, key=lambda c: representative_order(c, authority))
