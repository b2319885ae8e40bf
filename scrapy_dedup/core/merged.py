"""What a merged page adds to its document: its paragraphs the representative lacks.

Two pages can share most of their words and still differ in what a reader asks for (two
commands' manual pages with the same option blocks and different options). When settling folds
one into the other's document, the paragraphs only the member has are kept as passages of the
document, each with the URL it came from, so retrieval still finds them.

Pure (no Scrapy, no I/O). Paragraphs are the text's lines (:func:`.boilerplate.paragraphs`),
compared by :func:`.boilerplate.paragraph_key` (up to case, whitespace and Unicode form), so a
line the representative has is never carried twice, and a line two members add is carried once,
with the first of them in the order the caller gives (the export gives URL-key order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .boilerplate import paragraph_key, paragraphs

__all__ = ["MergedPassage", "merged_passages"]


@dataclass(frozen=True, slots=True)
class MergedPassage:
    """A run of consecutive lines of a member that the document had not: ``text ==
    member_text[start:end]``, where ``source_url`` is the member's URL."""

    source_url: str
    text: str
    start: int
    end: int

    def as_dict(self) -> dict[str, object]:
        return {"source_url": self.source_url, "text": self.text, "start": self.start, "end": self.end}


def merged_passages(representative_text: str, members: Iterable[tuple[str, str]]) -> list[MergedPassage]:
    """The passages ``members`` ((URL, text) pairs, in the order given) add to a document whose
    representative has ``representative_text``: runs of their lines whose key neither the
    representative nor an earlier passage has. A line without a word (a table rule, a lone
    bracket) is never carried and ends a run.

    >>> rep = "Usage: tool [options]\\n-v  verbose\\n-q  quiet"
    >>> member = "Usage: tool [options]\\n-v  verbose\\n-n  dry run\\n-f  force\\n-q  QUIET"
    >>> [(p.source_url, p.text) for p in merged_passages(rep, [("http://h/b", member), ("http://h/c", "-f force")])]
    [('http://h/b', '-n  dry run\\n-f  force')]
    """
    known = {paragraph_key(representative_text[a:b]) for a, b in paragraphs(representative_text)}
    out: list[MergedPassage] = []
    for url, text in members:
        run: tuple[int, int] | None = None
        for a, b in paragraphs(text):
            key = paragraph_key(text[a:b])
            if not key or key in known:
                if run is not None:
                    out.append(MergedPassage(url, text[run[0] : run[1]], *run))
                    run = None
                continue
            known.add(key)
            run = (a, b) if run is None else (run[0], b)
        if run is not None:
            out.append(MergedPassage(url, text[run[0] : run[1]], *run))
    return out
