"""A Texinfo node named "Comments" keeps its text when its navigation line survives the cut.

GNU Texinfo names each node's ``<div>`` after the node, and trafilatura cuts an element whose id
begins with "comment" as a comment section. When nothing was left, the page was read again with
comments (m4's "Comments" node); the Maxima 5.46.0 manual's "Comments" node (maxima-doc
5.46.0-11) kept its "Next: ..., Previous: ..." line, 14 words of 166, and was a document of its
navigation alone (the line at the bottom of the page, after the node's ``<div>``). Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

KEPT = (
    "A comment in the input is any text between /* and */.",
    "The parser treats a comment as whitespace when it looks for tokens",
    "Comments can be nested to any depth.",
    "(%i1) /* the radius */ r : 2;",
)


NAVIGATION = """<div class="header"><p>Next: <a href="m_70.html" accesskey="n" rel="next">Files</a>, Previous:
<a href="m_68.html" accesskey="p" rel="prev">Input and Output</a>, Up: <a href="m_68.html" rel="up">Input
and Output</a> &nbsp; [<a href="m_toc.html#SEC_Contents" rel="contents">Contents</a>][<a href="m_377.html"
rel="index">Index</a>]</p></div>"""


def comments_node(node_id: str = "Comments") -> str:
    """A node of a split Texinfo manual, as makeinfo 6.8 writes it: its navigation line at its
    top, in its ``<div>``, and again at the bottom of the page, after it."""
    return f"""<!DOCTYPE html><html><head><title>Comments (A Manual)</title></head><body lang="en">
<div class="section" id="{node_id}">
{NAVIGATION}
<span id="Comments-1"></span><h3 class="section">13.1 Comments</h3>
<p>A comment in the input is any text between <code>/*</code> and <code>*/</code>.</p>
<p>The parser treats a comment as whitespace when it looks for tokens in the input stream, so
that a token always ends at a comment: <code>a/* b */c</code> holds two tokens, <code>a</code> and
<code>c</code>. Neither the content nor the place of a comment is kept in the parsed input.</p>
<p>Comments can be nested to any depth. The delimiters form pairs, and there must be as many
openings as closings in the input, or the parser waits for more.</p>
<div class="example"><pre class="example">(%i1) /* the radius */ r : 2;
(%o1)                                  2
</pre></div>
<div class=categorybox>Categories: <a href="m_378.html#Syntax">Syntax</a> &middot;</div>
</div>
<hr>
{NAVIGATION}
</body></html>"""


def test_a_node_named_comments_keeps_its_text():
    text = extract_text(comments_node())
    for words in KEPT:
        assert words in text
    # named otherwise, the same node gives the same text
    assert text == extract_text(comments_node("Quoting"))


def test_the_export_of_a_node_named_comments_has_its_text(tmp_path):
    doc = crawled_page(comments_node(), tmp_path, SETTINGS)
    for words in KEPT:
        assert words in doc["text"]
