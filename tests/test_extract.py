"""extract_text: the main text of a page without its chrome, and "" for junk (never None,
never an exception)."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

import lxml.html
import pytest
import trafilatura

from scrapy_dedup.extraction.main_text import EXTRACT_PARAMS, MIN_VISIBLE_SHARE, extract_text

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>Vacuuming | Example Docs</title></head>
<body>
<header><div class="logo">Example Docs</div><nav><ul><li><a href="/">Home</a></li><li><a href="/guide">Guide</a></li>
<li><a href="/api">API reference</a></li><li><a href="/blog">Blog</a></li></ul></nav></header>
<main><article>
<h1>Routine Vacuuming</h1>
<p>PostgreSQL databases require periodic maintenance known as vacuuming. For many installations, it is
sufficient to let vacuuming be performed by the autovacuum daemon.</p>
<p>VACUUM reclaims storage occupied by dead tuples. In normal operation, tuples that are deleted or obsoleted by
an update are not physically removed from their table; they remain present until a VACUUM is done.</p>
<p>Therefore it is necessary to do VACUUM periodically, especially on frequently-updated tables.</p>
</article></main>
<footer><p>Copyright 2024 Example Corp. All rights reserved.</p>
<p><a href="/privacy">Privacy policy</a> | <a href="/terms">Terms of use</a></p></footer>
</body></html>"""


def test_article_without_navigation_and_footer():
    text = extract_text(PAGE.encode(), "https://docs.example.org/vacuum")
    assert text.startswith("Routine Vacuuming")
    assert "VACUUM reclaims storage occupied by dead tuples." in text
    assert text.rstrip().endswith("especially on frequently-updated tables.")
    for chrome in ("Home", "API reference", "Copyright", "Privacy policy", "Example Docs"):
        assert chrome not in text


def test_str_bytes_bytearray_and_memoryview_agree():
    expected = extract_text(PAGE.encode())
    assert extract_text(PAGE) == expected
    assert extract_text(bytearray(PAGE.encode())) == expected
    assert extract_text(memoryview(PAGE.encode())) == expected


def test_same_page_twice_gives_the_same_text():
    # trafilatura's own duplicate cache is off: it would blank segments it saw on earlier pages
    assert extract_text(PAGE) == extract_text(PAGE) != ""
    assert EXTRACT_PARAMS["deduplicate"] is False


def test_declared_encoding_is_honoured():
    latin = PAGE.replace('charset="utf-8"', 'charset="iso-8859-1"').replace("Routine Vacuuming", "Café crème")
    assert extract_text(latin.encode("latin-1")).startswith("Café crème")


def test_undeclared_text_is_read_as_utf8():
    undeclared = PAGE.replace('<meta charset="utf-8">', "").replace("Routine Vacuuming", "Café crème")
    assert "charset" not in undeclared
    assert extract_text(undeclared.encode()).startswith("Café crème")
    unknown = undeclared.replace("<head>", '<head><meta charset="x-no-such-charset">')
    assert extract_text(unknown.encode()).startswith("Café crème")
    # one broken byte elsewhere does not turn the whole page into windows-1252
    broken = undeclared.encode().replace("crème".encode(), "crème".encode() + b" \xff")
    assert extract_text(broken).startswith("Café crème \ufffd")


def test_bom_decides_the_encoding():
    assert extract_text(b"\xff\xfe" + PAGE.encode("utf-16-le")).startswith("Routine Vacuuming")


def test_invalid_bytes_and_unknown_charsets_do_not_raise():
    broken = PAGE.encode().replace(b"Routine", b"Rout\xff\xfeine")
    assert extract_text(broken).startswith("Rout\ufffd\ufffdine Vacuuming")
    bogus = PAGE.replace('charset="utf-8"', 'charset="x-no-such-charset"').encode()
    assert extract_text(bogus).startswith("Routine Vacuuming")


@pytest.mark.parametrize(
    "junk",
    [
        b"",
        "",
        b"   \n ",
        b"\x00" * 100,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(random.Random(1).randrange(256) for _ in range(4000)),
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nstream\n" + bytes(random.Random(2).randrange(256) for _ in range(4000)),
        gzip.compress(PAGE.encode()),  # Scrapy decompresses; a still-compressed body is junk
        b"<html><body></body></html>",
        "just some plain text, not html at all " * 20,
        None,
        12345,
    ],
    ids=["empty-bytes", "empty-str", "blank", "nul", "png", "pdf", "gzip", "empty-html", "plain-text", "none", "int"],
)
def test_junk_gives_empty_string(junk):
    assert extract_text(junk) == ""  # type: ignore[arg-type]


def test_options_are_passed_through():
    table_page = PAGE.replace(
        "<p>Therefore",
        "<table><tr><th>Setting</th><th>Default</th></tr><tr><td>autovacuum_naptime</td><td>1min</td></tr></table><p>Therefore",
    )
    assert "autovacuum_naptime" in extract_text(table_page)
    assert "autovacuum_naptime" not in extract_text(table_page, include_tables=False)


PUBLICAN = Path(__file__).parent / "fixtures" / "pages" / "publican_section.html"
OPENINGS = (
    "Log files grow without end",
    "Each package that writes logs",
    "A rule names the files",
    "When a service must be told",
    "Testing a rule before the night",
)


def test_a_docbook_page_cut_by_the_fast_mode_keeps_its_opening_prose():
    """A Publican/DocBook section (paragraphs written as ``div.para``, a sidebar with a ``<p>``
    title): trafilatura's fast mode keeps only what follows each paragraph's first inline
    element; extract_text sees paragraphs written as ``<div>`` and takes the full mode's text."""
    body = PUBLICAN.read_bytes()
    fast = trafilatura.extract(body, fast=True, deduplicate=False, output_format="txt")
    assert fast.startswith("logrotate program, which renames")  # the page reproduces the cut
    assert not any(opening in fast for opening in OPENINGS)
    text = extract_text(body)
    assert text.startswith("Log files grow without end")
    for opening in OPENINGS:
        assert opening in text
    assert "Download the ebook" not in text and "Prev" not in text


def test_paragraphs_that_open_with_a_command_keep_their_text():
    """The same section with every paragraph opening with ``<code>`` (as Japanese sentences
    that start with the command do): no paragraph opens with text of its own, so none counts
    as a ``<div>`` paragraph; the fast mode keeps under half of the page's text, and the full
    mode's text is taken."""
    body = re.sub(r'(<div class="para">\s*)', r'\1<code class="command">logrotate</code> ', PUBLICAN.read_text())
    fast = trafilatura.extract(body, fast=True, deduplicate=False, output_format="txt")
    visible = "".join(lxml.html.fromstring(body.encode()).find("body").itertext())
    assert "logrotate program, which renames" not in fast  # the page reproduces the cut
    assert len("".join(fast.split())) < MIN_VISIBLE_SHARE * len("".join(visible.split()))
    text = extract_text(body)
    for opening in OPENINGS:
        assert opening in text
    assert "logrotate program, which renames" in text and "Download the ebook" not in text


def test_a_page_of_p_paragraphs_is_extracted_in_fast_mode():
    assert extract_text(PAGE) == trafilatura.extract(PAGE, fast=True, deduplicate=False, output_format="txt")
    # one paragraph written as <div> is not enough to leave it
    two = PAGE.replace("<p>VACUUM reclaims", "<div>VACUUM <b>reclaims</b>", 1).replace("VACUUM is done.</p>", "VACUUM is done.</div>", 1)
    assert extract_text(two) == trafilatura.extract(two, fast=True, deduplicate=False, output_format="txt")


def test_a_page_whose_text_is_all_in_an_element_named_like_comments_keeps_it():
    # GNU Texinfo's split manuals (here m4's "Comments" node) name each section's <div> after it;
    # trafilatura cuts an element whose id starts with "comment" as a comment section
    prose = "Comments in m4 are normally delimited by the characters hash and newline. " * 6
    page = (
        '<html><head><title>Comments</title></head><body lang="en"><div class="section" id="Comments">'
        '<div class="header"><p>Next: <a href="Other-tokens.html">Other kinds of input tokens</a></p></div><hr>'
        f'<h3 class="section">3.3 Comments in m4 input</h3><p>{prose}</p><p>{prose.upper()}</p></div></body></html>'
    )
    text = extract_text(page)
    assert prose.strip() in text and prose.upper().strip() in text
    # named otherwise, the same page gives the same text
    assert text == extract_text(page.replace('id="Comments"', 'id="Quoting"'))
    # a comment section under an article is still cut
    article = page.replace('id="Comments"', 'id="Quoting"').replace(
        "</div></body>", '<div id="comments"><p>' + "Great post, thanks for sharing it! " * 6 + "</p></div></div></body>"
    )
    assert "Great post" not in extract_text(article)
    assert "Great post" in extract_text(article, include_comments=True)


def javadoc_class_page() -> str:
    """A class page as javadoc before JDK 11 writes it: no frame trafilatura knows
    (``div.contentContainer``), the description and each member in a list item under a heading,
    each description a ``<div>`` paragraph."""
    methods = "".join(
        f'<ul class="blockList"><li class="blockList"><h4>measure{n}</h4>'
        f"<pre>public&nbsp;double&nbsp;measure{n}(Shape&nbsp;shape)</pre>"
        f'<div class="block">Measures the <code>Shape</code> given along axis {n}, in points, and rounds the result'
        f' down.</div><dl><dt><span class="returnLabel">Returns:</span></dt><dd>the length along axis {n}</dd></dl>'
        "</li></ul>"
        for n in range(4)
    )
    return (
        '<html><head><title>Ruler</title></head><body><div class="topNav"><ul class="navList">'
        '<li><a href="overview-summary.html">Overview</a></li><li><a href="package-summary.html">Package</a></li>'
        '</ul></div><div class="header"><h2 title="Class Ruler" class="title">Class Ruler</h2></div>'
        '<div class="contentContainer"><div class="description"><ul class="blockList"><li class="blockList">'
        '<pre>public class <span class="typeNameLabel">Ruler</span> extends java.lang.Object</pre>'
        '<div class="block">A ruler measures the shapes it is given along each of its axes. It keeps no state between'
        " two measures, so one <code>Ruler</code> may serve every thread of an application at once.</div>"
        '</li></ul></div><div class="details"><ul class="blockList"><li class="blockList"><ul class="blockList">'
        f'<li class="blockList"><h3>Method Detail</h3>{methods}</li></ul></li></ul></div></div></body></html>'
    )


def test_a_class_page_of_div_paragraphs_in_list_items_keeps_its_descriptions():
    """The description of a class and of each member (``<div>`` paragraphs in list items, under
    headings): trafilatura reads the page without a frame and keeps its paragraphs alone, and
    those inside list items leave with the lists. Read in a frame, the page keeps them."""
    page = javadoc_class_page()
    alone = trafilatura.extract(page, fast=False, deduplicate=False, output_format="txt")
    assert "A ruler measures the shapes" not in alone and "along axis 2" not in alone  # the page reproduces the loss
    text = extract_text(page)
    assert "A ruler measures the shapes it is given along each of its axes." in text
    for n in range(4):
        assert f"given along axis {n}, in points, and rounds the result down." in text
    assert "Class Ruler" in text and "Method Detail" in text
