"""Which member of a cluster represents it.

The choice is a pure function of the members, so two crawls that end with the
same members end with the same representative, whatever order the pages were
fetched in.  Order of preference:

1. not a page that declared another page of the cluster as its rel=canonical;
2. the most authoritative source (``DEDUP_AUTHORITY``, an ordered list of hosts or URL
   prefixes, e.g. the original language's ``https://host/en-US/`` before its translations):
   what a user lists is what they want kept, so it outranks the rest;
3. the text the most URLs serve (``copies``: the URL records of its scope holding exactly
   this canonical text): a site that serves one text under several URLs (an original and its
   untranslated copies, a page and its print view) treats it as the page, and a variant
   served once (a partial translation, an edited copy) as a variant. Length does not say
   that: a partial translation is the original with some lines translated, and translated
   lines are often longer, so the longest text picked it;
4. the longest canonical text (the most complete copy; what a member adds that the
   representative lacks is kept with the document as merged passages either way);
5. the earliest crawl run it was first seen in (an established URL keeps its place);
6. the smallest URL key (a stable last resort).

The copies are counted by settling over every document it settles (all copies of one text
settle together, so the count is the same whatever else changed). The crawl's provisional
choice uses the same order with what it knows: a page with its cluster representative's text
adds a copy to it (``Cluster.rep_copies``); a page with another member's text counts that
text's copies among the members, and the first of them represents when that text now comes
first; any other page counts as one.

Measured on debian-handbook 11.20220922 (26 languages): of the 112 settled documents holding an
English page and other pages, a partial translation represented 88 with the longest text first,
70 with the copies first (the 70: sections whose English text only ``en-US/`` serves, every
other language having changed a label); see docs/how-it-works.md.

Nothing in a page says which of several exact copies is the original when the pages do not
declare a language: among them the order falls to the run and the URL key, and
``DEDUP_AUTHORITY`` is the way to name the original (``*/en-US/*``).

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
    #: the URLs serving exactly this text (the member's own included)
    copies: int = 1

    @classmethod
    def of(cls, record: UrlRecord, copies: int = 1) -> Candidate:
        """A member, from its URL record and the number of URLs serving its text."""
        return cls(record.key, record.url, record.text_length or 0, record.first_run, record.canonical_alias, copies)

    @classmethod
    def representing(cls, cluster: Cluster) -> Candidate:
        """A cluster's representative, from what the cluster record keeps of it."""
        return cls(
            cluster.representative,
            cluster.rep_url,
            cluster.rep_text_length,
            cluster.rep_first_run,
            cluster.rep_canonical_alias,
            cluster.rep_copies,
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
        -candidate.copies,
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
    >>> original = Candidate("http://h/en/p", "http://h/en/p", 100, 1, copies=2)
    >>> choose_representative([original, c]).key
    'http://h/en/p'
    """
    return min(candidates, key=lambda c: representative_order(c, authority))
