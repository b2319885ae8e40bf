"""Word-level diffs of two texts, short enough to read in a report."""

from __future__ import annotations

import difflib
import html

from scrapy_dedup.core.text import canonical_text

#: words compared at most (SequenceMatcher is quadratic in the worst case)
MAX_WORDS = 20_000


def word_diff(a: str, b: str, *, context: int = 6) -> list[tuple[str, str]]:
    """``(op, text)`` segments turning ``a`` into ``b``: equal, delete, insert, skip.

    Words are compared in their canonical form (case, Unicode form and spacing
    do not count, as for the content hash) and shown as ``b`` writes them.
    Long unchanged runs are cut to ``context`` words on each side of a change.

    >>> word_diff("The release is out on 3 May", "the release is out on 4 MAY")
    [('equal', 'the release is out on'), ('delete', '3'), ('insert', '4'), ('equal', 'MAY')]
    >>> word_diff("Same  words", "SAME words")
    []
    """
    wa, wb = a.split()[:MAX_WORDS], b.split()[:MAX_WORDS]
    na, nb = [canonical_text(w) for w in wa], [canonical_text(w) for w in wb]
    matcher = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    ops: list[tuple[str, str]] = []
    codes = matcher.get_opcodes()
    if all(tag == "equal" for tag, *_ in codes):
        return []  # the same words: nothing to show
    for n, (tag, i1, i2, j1, j2) in enumerate(codes):
        if tag != "equal":
            if i2 > i1:
                ops.append(("delete", " ".join(wa[i1:i2])))
            if j2 > j1:
                ops.append(("insert", " ".join(wb[j1:j2])))
            continue
        words = wb[j1:j2]
        first, last = n == 0, n == len(codes) - 1
        keep_head = 0 if first else context
        keep_tail = 0 if last else context
        if len(words) <= keep_head + keep_tail + 3:
            ops.append(("equal", " ".join(words)))
            continue
        if keep_head:
            ops.append(("equal", " ".join(words[:keep_head])))
        ops.append(("skip", f"{len(words) - keep_head - keep_tail} words"))
        if keep_tail:
            ops.append(("equal", " ".join(words[-keep_tail:])))
    return ops


#: what a diff without changes says
SAME = "no difference in the words (case, spacing and Unicode form do not count)"


#: how each kind of diff run is marked, per output format
_TEXT_MARKS = {"delete": "[-{}-]", "insert": "{{+{}+}}", "skip": "[…{}…]", "equal": "{}"}
_HTML_MARKS = {"delete": "<del>{}</del>", "insert": "<ins>{}</ins>", "skip": '<span class="skip">…{}…</span>', "equal": "{}"}


def _render(ops: list[tuple[str, str]], marks: dict[str, str], escape=lambda t: t) -> str:
    return " ".join(marks.get(op, "{}").format(escape(text)) for op, text in ops)


def as_text(ops: list[tuple[str, str]]) -> str:
    """``[-removed-]`` and ``{+added+}``, as ``git diff --word-diff`` writes them."""
    return _render(ops, _TEXT_MARKS)


def as_html(ops: list[tuple[str, str]]) -> str:
    return _render(ops, _HTML_MARKS, html.escape)
