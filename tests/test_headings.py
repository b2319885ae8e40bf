"""Heading spans of extracted text: the page's <h1>..<h6> found again as whole lines of trafilatura's output."""

from __future__ import annotations

from scrapy_dedup.core.chunks import Heading, chunk_text
from scrapy_dedup.extraction.headings import heading_spans, page_headings
from scrapy_dedup.extraction.main_text import extract_text

PARA = {
    "json": "JSON (JavaScript Object Notation) is a lightweight data interchange format inspired by JavaScript "
    "object literal syntax. This module exposes an API familiar to users of the standard library marshal and "
    "pickle modules.",
    "dump": "Serialize an object as a JSON formatted stream to a file-like object, using the conversion table given "
    "below. If skipkeys is true, dict keys that are not of a basic type are skipped instead of raising a TypeError.",
    "str": "The json module always produces str objects, not bytes objects, so the write method of the file object "
    "must accept str input.",
    "examples": "Encoding basic Python object hierarchies takes one call of dumps, and decoding takes one call of "
    "loads, for every value the format can hold.",
    "decoder": "The decoder performs the following translations in decoding by default: objects become dicts, arrays "
    "become lists, strings become str, and numbers become int or float.",
    "nan": "It also understands NaN, Infinity and -Infinity as their corresponding float values, which is outside "
    "the JSON specification proper.",
}


def _h(level: int, title: str, anchor: str) -> str:
    return f'<h{level}>{title}<a class="headerlink" href="#{anchor}" title="Permalink to this headline">¶</a></h{level}>'


# A page as Sphinx writes it: navigation headings around the body (the extractor drops them),
# pilcrow anchors after each title, and a paragraph that repeats a section's title.
SPHINX = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>json — Harbor 3.2 documentation</title></head><body>
<div class="related" role="navigation"><h3>Navigation</h3><h3>Examples</h3>
<ul><li><a href="../genindex.html">index</a></li><li><a href="../py-modindex.html">modules</a></li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">
<section id="module-json">{_h(1, "json — JSON encoder and decoder", "module-json")}<p>{PARA["json"]}</p>
<section id="basic-usage">{_h(2, "Basic Usage", "basic-usage")}<p>{PARA["dump"]}</p><p>{PARA["str"]}</p>
<section id="examples">{_h(3, "Examples", "examples")}<p>{PARA["examples"]}</p></section></section>
<section id="encoders">{_h(2, "Encoders and <code>Decoders</code>", "encoders")}<p>{PARA["decoder"]}</p>
<p>Examples</p><p>{PARA["nan"]}</p></section></section>
</div></div></div>
<div class="sphinxsidebar" role="navigation"><h3><a href="../contents.html">Table of Contents</a></h3>
<h4>Previous topic</h4><p><a href="email.html">email</a></p><h3>This Page</h3></div></div>
<div class="footer">© Copyright 2001-2023, Harbor Software Foundation.</div>
</body></html>"""


def _spans(html, text):
    return [(h.level, h.title, text[h.start : h.end]) for h in heading_spans(html, text)]


def test_sphinx_page_headings_are_found_in_the_extracted_text():
    text = extract_text(SPHINX, "https://docs.example.org/library/json.html")
    assert "Navigation" not in text and "This Page" not in text  # the extractor dropped the sidebars
    spans = heading_spans(SPHINX, text)
    assert [(h.level, h.title) for h in spans] == [
        (1, "json — JSON encoder and decoder"),
        (2, "Basic Usage"),
        (3, "Examples"),
        (2, "Encoders and Decoders"),
    ]
    for h in spans:
        line = text[h.start : h.end]
        # the whole line: from a line start to a line end
        assert h.start == 0 or text[h.start - 1] == "\n"
        assert h.end == len(text) or text[h.end] == "\n"
        assert line.strip().rstrip("¶") == h.title
    # the paragraph "Examples" in the last section repeats a title: it is not taken as a heading
    repeat = text.index("\nExamples\n") + 1
    assert all(h.start != repeat for h in spans)


def test_a_dropped_navigation_heading_does_not_take_the_real_ones_line():
    """The top navigation has an h3 "Examples" the extractor drops; matching that one first to the
    body's "Examples" lines would lose every heading before them."""
    text = extract_text(SPHINX)
    assert page_headings(SPHINX)[1] == (3, "Examples")  # the navigation one, before the h1
    assert [t for _, t, _ in _spans(SPHINX, text)][0] == "json — JSON encoder and decoder"
    assert len(heading_spans(SPHINX, text)) == 4


def test_chunks_of_a_crawled_page_carry_heading_paths():
    text = extract_text(SPHINX)
    chunks = chunk_text(text, headings=heading_spans(SPHINX, text), max_words=40)
    by_start = {c.text.split()[0]: c.heading for c in chunks}
    top = "json — JSON encoder and decoder"
    assert by_start["JSON"] == (top,)
    assert by_start["Serialize"] == (top, "Basic Usage")
    assert by_start["Encoding"] == (top, "Basic Usage", "Examples")
    assert by_start["The"] in ((top, "Basic Usage"), (top, "Encoders and Decoders"))
    assert by_start["It"] == (top, "Encoders and Decoders")
    # no chunk contains a heading line; every character of the body is in some chunk
    lines = {text[h.start : h.end] for h in heading_spans(SPHINX, text)}
    assert not any(line in c.text.splitlines() for c in chunks for line in lines)
    assert all(text[c.start : c.end] == c.text for c in chunks)
    assert sum(len(c.text.split()) for c in chunks) + sum(len(line.split()) for line in lines) == len(text.split())
    # without spans the heading lines are paragraphs of one section
    assert {c.heading for c in chunk_text(text, max_words=40)} == {()}


def test_a_title_twice_in_the_page_is_two_headings_and_each_line_is_taken_once():
    html = (
        "<html><body><article><h1>Release notes</h1>"
        f"<h2>Changes</h2><p>{PARA['dump']}</p><h2>Changes</h2><p>{PARA['decoder']}</p>"
        f"<p>Changes</p><p>{PARA['nan']}</p></article></body></html>"
    )
    text = extract_text(html)
    spans = heading_spans(html, text)
    assert [(h.level, h.title) for h in spans] == [(1, "Release notes"), (2, "Changes"), (2, "Changes")]
    assert len({h.start for h in spans}) == 3
    # the two h2 take the first two "Changes" lines, in order; the third line stays a paragraph
    firsts = [i for i in range(len(text)) if text.startswith("Changes\n", i) and (i == 0 or text[i - 1] == "\n")]
    assert [h.start for h in spans[1:]] == firsts[:2]


def test_japanese_page_in_shift_jis():
    html = (
        "<html><head><meta charset='shift_jis'><title>Debian リファレンス</title></head><body><main>"
        "<h1>第1章 GNU/Linux チュートリアル</h1>"
        "<p>コンピューターシステムを学ぶことは新しい外国語を学ぶことに似ています。チュートリアルブックは有用ですが、"
        "実際に自ら使って学ぶことが必要です。</p>"
        "<h2>1.1. コンソールの基礎</h2>"
        "<p>システムを起動すると、GUI を設定していない場合には文字ベースのログイン画面が表示されます。"
        "ホスト名が foo だとすると、ログインプロンプトは次のようになります。</p>"
        "<h3>1.1.1. シェルプロンプト</h3>"
        "<p>ログインプロンプトでユーザー名を入力し、その後パスワードを入力します。大文字と小文字は区別されます。</p>"
        "</main></body></html>"
    ).encode("shift_jis")
    text = extract_text(html)
    assert "シェルプロンプト" in text
    spans = heading_spans(html, text)
    assert [(h.level, h.title) for h in spans] == [
        (1, "第1章 GNU/Linux チュートリアル"),
        (2, "1.1. コンソールの基礎"),
        (3, "1.1.1. シェルプロンプト"),
    ]
    chunks = chunk_text(text, headings=spans)
    assert chunks[-1].heading == ("第1章 GNU/Linux チュートリアル", "1.1. コンソールの基礎", "1.1.1. シェルプロンプト")


def test_matching_is_canonical():
    # case, full-width forms, NBSP and the space between a section number and its title
    html = "<h2><span class='secno'>2.1.</span>Ｃonfiguring&nbsp;THE   Store</h2><p>x</p>"
    text = "Intro line.\n2.1. configuring the store\nx"
    assert _spans(html, text) == [(2, "2.1. configuring the store", "2.1. configuring the store")]


def test_headings_the_extractor_dropped_give_nothing():
    html = "<html><body><nav><h2>Site map</h2></nav><article><p>Only text here.</p></article></body></html>"
    assert page_headings(html) == [(2, "Site map")]
    assert heading_spans(html, "Only text here.") == ()
    assert heading_spans("<p>no headings</p>", "no headings") == ()
    # trafilatura keeps headings inside a main container (<main>, <article>, role=main); a page
    # without one (DocBook's div.chapter) is read again inside one, and keeps them too
    body = f"<h1>Console basics</h1><p>{PARA['dump']}</p><h2>Shell prompt</h2><p>{PARA['str']}</p>"
    for container, kept in (("<div class='chapter'>%s</div>", 2), ("<main>%s</main>", 2), ("<article>%s</article>", 2)):
        html = "<html><body>" + container % body + "</body></html>"
        assert len(heading_spans(html, extract_text(html))) == kept, container


def test_bad_input_gives_no_spans():
    assert heading_spans("", "text") == ()
    assert heading_spans("<h1>a</h1>", "") == ()
    assert heading_spans(b"\x89PNG\r\n\x1a\n\x00\x00" * 100, "a") == ()
    assert heading_spans(None, "a") == ()  # type: ignore[arg-type]
    assert heading_spans("<h1>a</h1>", None) == ()  # type: ignore[arg-type]
    assert heading_spans("<h1>\ud800</h1>", "\ud800") == (Heading(0, 1, 1, "\ud800"),)  # lone surrogates
    assert page_headings("<h1>" * 100_000) == []  # empty titles are not headings


def test_many_equal_headings_and_lines_stay_linear():
    """10^3 equal headings against 10^3 equal lines is 10^6 candidate pairs: matched greedily,
    still in order and each line once."""
    html = "<h2>Step</h2><p>do it</p>" * 1000
    text = "Step\ndo it\n" * 1000
    spans = heading_spans(html, text)
    assert len(spans) == 1000 and len({h.start for h in spans}) == 1000
    assert all(text[h.start : h.end] == "Step" for h in spans)


def test_heading_spans_are_deterministic():
    text = extract_text(SPHINX)
    assert heading_spans(SPHINX, text) == heading_spans(SPHINX.encode("utf-8"), text)
