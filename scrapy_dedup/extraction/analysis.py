"""What runs in the extraction workers: main text and fingerprints.

Scrapy-free and picklable, so it runs in worker processes.  Extraction
(~40 ms a page) is the cost centre of the content layer; hashing is well
under a millisecond.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from scrapy_dedup.core.fingerprints import Fingerprint, fingerprint
from scrapy_dedup.core.page_chunks import PageChunks, page_chunks
from scrapy_dedup.core.records import pack_text
from scrapy_dedup.extraction.headings import heading_spans
from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS, extract_text


@dataclass(frozen=True, slots=True)
class ExtractOptions:
    favor_precision: bool = False
    favor_recall: bool = False
    include_tables: bool = True
    include_comments: bool = False
    #: the text fed to the fingerprints is cut here (a 50 MB page stays cheap)
    max_text_chars: int = 1_000_000

    def extraction(self) -> dict[str, object]:
        """What the text and fingerprints of a page are made with: ``EXTRACT_PARAMS`` and, as
        ``options``, the options not at their default (``name=value``, comma-separated; empty at
        the defaults). A store records it, and a body seen before skips extraction only when its
        text was made the same way (a ``DEDUP_EXTRACT_*`` setting changed: pages are extracted
        again)."""
        changed = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) != f.default]
        return {**EXTRACT_PARAMS, "options": ",".join(changed)}


def analyse_html(html: str | bytes, url: str | None, options: ExtractOptions) -> tuple[str, Fingerprint]:
    """Extract the main text of a page and fingerprint it."""
    text = extract_text(
        html,
        url,
        favor_precision=options.favor_precision,
        favor_recall=options.favor_recall,
        include_tables=options.include_tables,
        include_comments=options.include_comments,
    )
    return text, fingerprint(text[: options.max_text_chars])


def analyse_text(text: str, options: ExtractOptions) -> tuple[str, Fingerprint]:
    """Fingerprint text a spider already extracted."""
    return text, fingerprint(text[: options.max_text_chars])


def analysed_and_packed(
    analyse: Callable[..., tuple[str, Fingerprint]], *args: Any
) -> tuple[str, Fingerprint, bytes]:
    """``analyse(*args)`` (:func:`analyse_html` or :func:`analyse_text`, options last), and the
    text as the store keeps it (``DEDUP_KEEP_TEXT``, cut at ``max_text_chars``): packed here, in
    the worker, instead of on the crawl's reactor thread (about 0.15 ms a page)."""
    text, fp = analyse(*args)
    options: ExtractOptions = args[-1]
    return text, fp, pack_text(text[: options.max_text_chars])


def analyse_chunks(text: str, html: str | bytes | None, **options: Any) -> PageChunks:
    """A page's chunks (:func:`scrapy_dedup.core.page_chunks.page_chunks`), with the heading
    spans of its HTML, so that chunks follow its sections. An HTML page's headings come from its
    HTML only, none when the extractor kept none: a ``#`` line of its text is code (a root
    prompt, a comment), not Markdown. Text a spider gave (``html`` None) has its Markdown ``#``
    headings read."""
    headings = heading_spans(html, text) if html is not None else None
    return page_chunks(text, headings=headings, **options)


def warm_up() -> None:
    """Import and exercise the extractor once, so the first page is not slow."""
    analyse_html("<html><body><p>warm up</p></body></html>", None, ExtractOptions())
