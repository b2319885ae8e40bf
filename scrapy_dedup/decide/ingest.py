"""Decide the records of a JSON Lines file, without crawling.

Each line is one page: a URL and its text, or its HTML (extracted as the crawl
extracts it).  Every record goes through :meth:`ContentIndex.ingest`, the path
the crawl's pipeline takes, so the store ends as a crawl of the same pages
would leave it, and the reports and export read it the same way.  Extraction
may run in worker processes; decisions are made in file order, one at a time,
so the result does not depend on the number of workers.  A malformed line is
reported with its number and skipped.
"""

from __future__ import annotations

import json
import multiprocessing
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import IO, Any
from urllib.parse import urldefrag

from scrapy_dedup.core.body import cut_body
from scrapy_dedup.core.fingerprints import Fingerprint, raw_hash
from scrapy_dedup.decide.frontier import DROP_SEEN
from scrapy_dedup.decide.index import ContentIndex, Document
from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html, analyse_text, warm_up
from scrapy_dedup.extraction.main_text import page_title
from scrapy_dedup.store.records import get_url

#: records extracted ahead of the decisions (bounds memory, keeps the workers busy)
BATCH = 256


@dataclass(frozen=True, slots=True)
class Fields:
    url: str = "url"
    text: str = "text"
    html: str = "html"
    title: str = "title"


@dataclass(slots=True)
class IngestCounts:
    lines: int = 0
    documents: int = 0
    #: (line number, why) of every line that was not ingested
    malformed: list[tuple[int, str]] = field(default_factory=list)
    #: (line number, bytes) of every record whose HTML was cut at ``max_body_bytes``
    cut: list[tuple[int, int]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)


#: An ``html`` field that opens with a tag (a document, or a fragment a spider selected) is markup
#: to extract from; one that does not is plain text: the body of a text/plain page (a Sphinx
#: manual's ``_sources/*.rst.txt``) that the tutorial's spider stores as ``response.text``, which
#: the crawl takes as the page's text, so its ingest does too.
_MARKUP_RE = re.compile(r"[\s\ufeff]*<")


@dataclass(slots=True)
class _Page:
    line: int
    url: str
    body: str
    is_html: bool
    #: the record's title field, else its HTML's <title>
    title: str | None = None
    #: the raw hash of the body as the crawl takes it (HTML cut at ``max_body_bytes``)
    raw: str = ""
    #: an ``html`` field of plain text: the page was served as plain text (not a ``text`` field)
    plain_text: bool = False


def _parse(lines: Iterable[str], fields: Fields, counts: IngestCounts, max_body_bytes: int | None) -> Iterator[_Page]:
    for number, line in enumerate(lines, 1):
        counts.lines = number
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            counts.malformed.append((number, f"not JSON ({exc.msg})"))
            continue
        if not isinstance(record, dict):
            counts.malformed.append((number, "not a JSON object"))
            continue
        url = record.get(fields.url)
        if not isinstance(url, str) or "://" not in url:
            counts.malformed.append((number, f"no {fields.url!r} URL"))
            continue
        text, html = record.get(fields.text), record.get(fields.html)
        title = page_title(record.get(fields.title), html if isinstance(html, str) else None)
        if isinstance(text, str):
            yield _Page(number, url, text, False, title, raw_hash(text.encode("utf-8", "surrogatepass")))
        elif isinstance(html, str):
            # cut as the crawl cuts a page's HTML (DEDUP_MAX_BODY_BYTES): the same page, the same text
            body = cut_body(html, max_body_bytes)
            if body.cut:
                counts.cut.append((number, body.size))
            markup = _MARKUP_RE.match(html) is not None
            yield _Page(number, url, body.text(), markup, title, raw_hash(body.body), plain_text=not markup)
        else:
            counts.malformed.append((number, f"no {fields.text!r} or {fields.html!r} string"))


def _analyse(page: _Page, options: ExtractOptions) -> tuple[str, Fingerprint]:
    if page.is_html:
        return analyse_html(page.body, page.url, options)
    return analyse_text(page.body, options)


def _count_spelling(index: ContentIndex, doc: Document) -> None:
    """A record whose URL is another spelling of a key an earlier record gave (``/`` and
    ``/index.html`` of a plain Scrapy feed) is a URL variant of it, as the crawl counts a link
    to a key it already scheduled: the store keeps the first spelling's URL, so without it the
    other URL left the export's sources and ``lookup``."""
    url = urldefrag(doc.url)[0]
    record = get_url(index.store, doc.key)
    if record is not None and record.url != url:
        with index.store.batch() as batch:
            batch.count_variant(url, doc.key, index.clock(), DROP_SEEN)


def ingest(
    lines: Iterable[str],
    index: ContentIndex,
    key: Callable[[str], str],
    *,
    fields: Fields = Fields(),
    options: ExtractOptions = ExtractOptions(),
    keep_text: bool = True,
    workers: int = 0,
    progress: IO[str] | None = None,
    every: int = 1000,
    max_body_bytes: int | None = None,
) -> IngestCounts:
    """Decide every record of ``lines``; ``key`` makes a URL key (the crawl's URL rules).
    ``max_body_bytes``: a record's HTML is cut there before hashing and extraction, as the crawl
    cuts a page's (``DEDUP_MAX_BODY_BYTES``; ``None``: not cut)."""
    counts = IngestCounts()
    pages = _parse(lines, fields, counts, max_body_bytes)
    pool = (
        ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=warm_up)
        if workers > 0
        else None
    )
    try:
        while batch := list(islice(pages, BATCH)):
            if pool is not None:
                analysed: Iterable[Any] = pool.map(_analyse, batch, [options] * len(batch))
            else:
                analysed = (_analyse(page, options) for page in batch)
            for page, (text, fp) in zip(batch, analysed):
                doc = Document(
                    key=key(page.url),
                    url=page.url,
                    fingerprint=fp,
                    raw_hash=page.raw,
                    title=page.title,
                    plain_text=page.plain_text,
                )
                if keep_text:
                    doc.text = text[: options.max_text_chars]
                decision = index.ingest(doc)
                _count_spelling(index, doc)
                counts.documents += 1
                counts.statuses[decision.status] = counts.statuses.get(decision.status, 0) + 1
                if progress is not None and counts.documents % every == 0:
                    print(f"ingested {counts.documents:,} records (line {page.line:,})", file=progress, flush=True)
    finally:
        if pool is not None:
            pool.shutdown()
    return counts
