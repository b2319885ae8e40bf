"""Main-text extraction: the one impure piece of fingerprinting (wraps trafilatura).

Everything downstream hashes what this returns, so the options below are part of what makes
two crawls comparable; they are recorded as ``EXTRACT_PARAMS``.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import trafilatura
from lxml import etree
from trafilatura.utils import load_html
from trafilatura.xpaths import BODY_XPATH
from w3lib.encoding import html_body_declared_encoding, read_bom, to_unicode

__all__ = ["EXTRACT_PARAMS", "MIN_OPENINGS", "MIN_VISIBLE_SHARE", "extract_text", "html_title", "page_title"]

# trafilatura logs every page it finds no main text in at WARNING/ERROR; for a crawler those are
# expected outcomes (we return ""), not problems, so keep them out of the crawl log unless the
# application configured that logger itself.
_TRAFILATURA_LOGGER = logging.getLogger("trafilatura")
if _TRAFILATURA_LOGGER.level == logging.NOTSET:
    _TRAFILATURA_LOGGER.setLevel(logging.CRITICAL)

#: Pages with this many paragraphs written as ``<div>`` (text, an inline element, more text: the
#: ``div.para`` of DocBook and Publican) go to the full mode directly: the fast mode drops the
#: openings of such paragraphs on most of these pages, and the full mode alone costs less than
#: both. 3 sends 60-67% of a Publican book's pages, none of Sphinx's or Doxygen's and 2 of 60
#: javadoc pages (class pages with several described members, whose text is the same either way;
#: benchmarks/results/extraction.md).
MIN_OPENINGS = 3

#: A fast-mode text shorter than this share of the page's visible text (the ``<body>`` without
#: scripts and styles, whitespace left out) is taken as cut, and the full mode runs too. It
#: catches what counting ``<div>`` paragraphs misses: a Doxygen member list that kept its
#: one-line heading (3% of the page), a Japanese DocBook section whose paragraphs open with a
#: command, ``<code>``, not with text (20%). On 202 measured pages without ``<div>`` paragraphs
#: it sends 19 to the second pass (benchmarks/results/extraction.md).
MIN_VISIBLE_SHARE = 0.5

#: What the text of a page is made with; a change here changes extracted text, hence
#: fingerprints (the store format names the extraction its texts came from).
EXTRACT_PARAMS: dict[str, object] = {
    "trafilatura": trafilatura.__version__,
    # 2: the full mode (readability/jusText fallback) for pages of DocBook-style paragraphs, the
    # fast mode otherwise; 3: also when the fast text is under MIN_VISIBLE_SHARE of the page;
    # 4: a <span> inside a sentence keeps its words whatever its class (_keep_inline_spans);
    # 5: the links of a list item with words of its own are its text (_keep_inline_links), a
    # page of several <article>s whose text is short is read again without them (_main_text),
    # and a <code> inside a <code> is unwrapped (_unwrap_nested_code); 6: an element named like a
    # comment section that holds the page's first heading is no comment section
    # (_unname_page_comments), and a page whose text has none of its headings and that has no
    # frame trafilatura knows is read again inside one (_frame_body); 7: the links of a definition
    # term with words of its own are its text, an element whose heading links to its id is a
    # section (_unname_linked_sections), and a frame without text is none; 8: an element whose
    # name XML refuses is unwrapped (_unwrap_invalid_tags), and a page of <div> paragraphs with
    # headings in list items is read in a frame at once
    "version": 8,
    # The fast mode is 1.2-1.45x cheaper, but on DocBook/Publican books it drops the leading text
    # of most paragraphs (in 45% of pages, over a tenth of the full mode's text; measured in
    # benchmarks/bench_extraction.py).
    "fast": f"fast; full with {MIN_OPENINGS}+ div paragraphs or under {MIN_VISIBLE_SHARE} of the visible text",
    "deduplicate": False,
    "output_format": "txt",
}

_OPTIONS = {
    "deduplicate": False,
    "output_format": "txt",
    "with_metadata": False,
    "include_images": False,
    "include_links": False,
    "include_formatting": False,
}

# Share of control characters / U+FFFD in the first _SNIFF chars above which a body is binary
# (an image, PDF or archive served as text/html); text has almost none of them.
_SNIFF = 4096
_MAX_JUNK_RATIO = 0.05
_JUNK_RE = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")

# libxml2's HTML parser checks each new attribute against the tag's others: quadratic in the
# attributes of one tag (10^5 of them took minutes, a stalled worker).  Attributes carry no main
# text, so a tag's attribute run is cut at _MAX_TAG_CHARS (a real tag is far below; 2,000
# attributes parse in ~10 ms).  "[^<>]" stops at the next tag, so the scan stays linear.
_MAX_TAG_CHARS = 16384
_LONG_RUN_RE = re.compile(rf"<[^<>]{{{_MAX_TAG_CHARS}}}")
_LONG_TAG_RE = re.compile(rf"(<[A-Za-z][^\s<>]*)([^<>]{{{_MAX_TAG_CHARS},}})")


def _cut_long_tags(text: str) -> str:
    # one search (~0.3 ms on a 90 KB page, against ~10 ms of extraction) rules most pages out
    if len(text) < _MAX_TAG_CHARS or _LONG_RUN_RE.search(text) is None:
        return text

    def cut(match: re.Match[str]) -> str:
        attrs = match.group(2)[:_MAX_TAG_CHARS]
        return match.group(1) + attrs[: attrs.rfind(" ") + 1 or None]

    return _LONG_TAG_RE.sub(cut, text)


def _decode(html: bytes | bytearray | memoryview) -> str:
    # BOM, then <meta charset>, then UTF-8 with replacement: deterministic and never raises,
    # unlike statistical guessing, which can pick different encodings for two copies of a page.
    # (w3lib 2.6's html_to_unicode() falls back to windows-1252, which garbles undeclared UTF-8.)
    body = bytes(html)
    encoding, bom = read_bom(body)
    if encoding and bom is not None:
        return to_unicode(body[len(bom):], encoding)
    return to_unicode(body, html_body_declared_encoding(body) or "utf-8")


def _div_paragraphs(tree: Any) -> int:
    """How many paragraphs are written as ``<div>`` (up to MIN_OPENINGS): blocks that open with
    text of their own and go on after an inline element, as DocBook and Publican's ``div.para``.

    >>> from lxml.html import fromstring
    >>> para = "<div class='para'>Rotation is done by <code>logrotate</code>, once a day.</div>"
    >>> _div_paragraphs(fromstring(f"<html><body>{para * 4}<div>menu</div></body></html>"))
    3
    >>> _div_paragraphs(fromstring("<html><body><div><p>A <code>p</code> paragraph.</p></div></body></html>"))
    0
    """
    found = 0
    for block in tree.iter("div"):
        if block.text and not block.text.isspace():
            if any(isinstance(c.tag, str) and c.tail and not c.tail.isspace() for c in block):
                found += 1
                if found == MIN_OPENINGS:
                    break
    return found


def _keep_inline_spans(tree: Any) -> None:
    """Take the class off every ``<span>`` that sits inside a sentence (text of its own block
    before it, or after it), so that trafilatura, which cuts elements whose class names a menu,
    a button, options..., cannot cut words out of the sentence. DocBook names its GUI words so:
    "choose <span class="guimenu">Layer</span> → <span class="guimenuitem">Rotate 90°
    clockwise</span>." lost the menu path, and two pages that differ only there were merged.
    A span of a navigation block stands alone (between tags, whitespace around it) and keeps
    its class.

    >>> from lxml.html import fromstring
    >>> tree = fromstring('<div><p>Open <span class="guimenu">Layer</span>.</p>'
    ...                   '<div> <span class="menu">Home</span> <span class="menu">About</span></div></div>')
    >>> _keep_inline_spans(tree)
    >>> [span.get("class") for span in tree.iter("span")]
    [None, 'menu', 'menu']
    """
    for span in tree.iter("span"):
        if span.get("class") is None:
            continue
        previous = span.getprevious()
        before = previous.tail if previous is not None else span.getparent().text
        if (before and not before.isspace()) or (span.tail and not span.tail.isspace()):
            del span.attrib["class"]


#: blocks: a link inside one of them within a list item is not in the item's own line of text
_BLOCKS = frozenset(
    "li ul ol dl dt dd table tr td th div section article aside nav header footer form pre blockquote"
    " h1 h2 h3 h4 h5 h6".split()
)
#: the heading tags: the first on a page is its title (_unname_page_comments); a text that lost
#: them all sends its page to _frame_body
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
#: a letter (a count or a date, "(12)", "2024-05-01", next to a menu's link is no sentence)
_LETTER_RE = re.compile(r"[^\W\d_]")


def _letters_outside_links(element: Any) -> bool:
    """Whether ``element`` has a letter of its own: in its text, outside its links and the
    blocks in it."""
    if element.text and _LETTER_RE.search(element.text):
        return True
    for child in element:
        if isinstance(child.tag, str) and child.tag != "a" and child.tag not in _BLOCKS:
            if _letters_outside_links(child):
                return True
        if child.tail and _LETTER_RE.search(child.tail):
            return True
    return False


#: the items of a list whose links _keep_inline_links judges: a list item, a definition list's term
_ITEMS = ("li", "dt")


def _keep_inline_links(tree: Any) -> None:
    """Make plain text of every link of a list item that has words outside its links, so that
    trafilatura's link-density test, which cuts a list of short links as navigation, cannot cut
    the words around them. An API reference links each parameter's type: "<li><code>path</code>
    <a class="type">&lt;string&gt;</a></li>" is a short link in every item of the list of
    parameters, and the whole list left the text (Node.js's ``path.basename(path[, suffix])``
    lost its parameters and what it returns). A definition list's term is such an item: Sphinx
    writes each API entry as a ``<dl>`` whose term, the signature, ends with two short links
    ("[source]", "¶"), and trafilatura cut the last entry of a page, then the new last one
    (the exceptions page of pyca/cryptography 38.0.4 lost 2 classes of 6). A list of links
    alone (a menu, a table of contents, links with a count) keeps its links and is judged as
    before.

    >>> from lxml.html import fromstring
    >>> tree = fromstring('<div><ul><li><code>path</code> <a href="t">&lt;string&gt;</a></li></ul>'
    ...                   '<ul><li><a href="a.html">Home</a></li><li><a href="b.html">News</a> (12)</li></ul>'
    ...                   '<dl><dt>class InvalidKey<a href="s">[source]</a></dt><dd>Raised.</dd></dl></div>')
    >>> _keep_inline_links(tree)
    >>> [a.text for a in tree.iter("a")], [s.text for s in tree.iter("span")]
    (['Home', 'News'], ['<string>', '[source]'])
    """
    verdicts: dict[Any, bool] = {}
    plain = []
    for link in tree.iter("a"):
        # the list item whose line the link is in: no block between them
        item = next((e for e in link.iterancestors() if e.tag in _BLOCKS), None)
        if item is None or item.tag not in _ITEMS:
            continue
        if item not in verdicts:
            verdicts[item] = _letters_outside_links(item)
        if verdicts[item]:
            plain.append(link)
    for link in plain:
        link.tag = "span"
        link.attrib.clear()


def _outer_articles(tree: Any) -> int:
    """How many ``<article>`` elements the page has that are not inside another (up to 2).

    >>> from lxml.html import fromstring
    >>> _outer_articles(fromstring("<div><article><p>f/1</p></article><article><p>g/2</p></article></div>"))
    2
    >>> _outer_articles(fromstring("<div><article><p>a post</p><article><p>a comment</p></article></article></div>"))
    1
    """
    found = 0
    for article in tree.iter("article"):
        if next(article.iterancestors("article"), None) is None:
            found += 1
            if found == 2:
                break
    return found


def _unwrap_nested_code(tree: Any) -> None:
    """Unwrap every ``<code>`` inside another ``<code>``, keeping its words. trafilatura drops
    the text after such a pair ("the size of the <code><code>circular_buffer</code></code>s)."
    lost "s).") or moves the code after the rest of its paragraph ("The circular_buffer to
    compare." became "The to compare. circular_buffer"); BoostBook writes a link to a class in
    a description so.

    >>> from lxml.html import fromstring
    >>> tree = fromstring('<p>Size of <code class="a"><code class="a"><a href="c">buffer</a></code></code>s.</p>')
    >>> _unwrap_nested_code(tree)
    >>> [code.text_content() for code in tree.iter("code")], tree.text_content()
    (['buffer'], 'Size of buffers.')
    """
    for inner in tree.xpath("//code//code"):
        inner.drop_tag()


#: elements named with more than lowercase letters and digits (what lxml's HTML parser gives a
#: plain tag): the few whose name needs a check, found without a Python object per element
_UNUSUAL_TAGS = etree.XPath("//*[translate(name(), 'abcdefghijklmnopqrstuvwxyz0123456789', '')]")


def _unwrap_invalid_tags(tree: Any) -> None:
    """Unwrap every element whose name XML does not allow, keeping its words. lxml's HTML parser
    reads an unescaped generic in a ``<pre>`` (javadoc: ``EnclosingBall<Sphere2D, S2Point>``) as
    an element named ``sphere2d,``; trafilatura copies elements with ``SubElement``, which refuses
    such a name, and gave up on the whole page. A browser shows the element's content as text.

    >>> from lxml.html import fromstring
    >>> tree = fromstring("<pre>EnclosingBall<Sphere2D, S2Point> cap = shape.cap();</pre>")
    >>> _unwrap_invalid_tags(tree)
    >>> [element.tag for element in tree.iter()], tree.text_content()
    (['pre'], 'EnclosingBall cap = shape.cap();')
    """
    for element in _UNUSUAL_TAGS(tree):
        try:
            etree.QName(element.tag)
        except ValueError:
            element.drop_tag()


#: an ``id`` or ``class`` that trafilatura takes for a comment section (it cuts the element)
_COMMENTS_NAME_RE = re.compile(r"^comment|(?:article|post)-comments", re.IGNORECASE)


def _unname_page_comments(tree: Any) -> None:
    """Take the ``id`` and ``class`` off every element named like a comment section that holds
    the page's first heading: that element is the page, not comments under it. GNU Texinfo names
    a node's ``<div>`` after the node, and the Maxima manual's "Comments" node kept only its
    "Next: ..., Previous: ..." line (14 words of 166). A post's comments come after its title
    and keep their name.

    >>> from lxml.html import fromstring
    >>> tree = fromstring('<div><div class="section" id="Comments"><h3>13.1 Comments</h3><p>A comment.</p></div></div>')
    >>> _unname_page_comments(tree)
    >>> [(e.get("id"), e.get("class")) for e in tree.iter("div")]
    [(None, None), (None, None)]
    >>> tree = fromstring('<div><h1>A post</h1><p>Text.</p><div id="comments"><h3>2 comments</h3></div></div>')
    >>> _unname_page_comments(tree)
    >>> tree.find("div").get("id")
    'comments'
    """
    heading = next(tree.iter(_HEADINGS), None)
    if heading is None:
        return
    for element in heading.iterancestors():
        if any(_COMMENTS_NAME_RE.search(element.get(name) or "") for name in ("id", "class")):
            element.attrib.pop("id", None)
            element.attrib.pop("class", None)


def _unname_linked_sections(tree: Any) -> None:
    """Take the ``id`` off every element whose heading (a child ``<h1>``..``<h6>``) links to it:
    that id is the slug of the heading, a section of the text, not the name of a widget. Sphinx
    names each section so and puts a permalink in its heading, and trafilatura cuts an element
    whose id holds "author", "tags", "nav", "share", "related"...: the Babel 2.10.3 manual lost
    its "Authors" section (134 names) and its "Likely Subtags" section.

    >>> from lxml.html import fromstring
    >>> tree = fromstring('<div><section id="authors"><h2>Authors<a href="#authors">¶</a></h2><p>A. B.</p>'
    ...                   '</section><div id="tags"><h3>Tags</h3><a href="/t/1">one</a></div></div>')
    >>> _unname_linked_sections(tree)
    >>> [(e.tag, e.get("id")) for e in tree.iter("section", "div")]
    [('div', None), ('section', None), ('div', 'tags')]
    """
    for heading in tree.iter(_HEADINGS):
        section = heading.getparent()
        name = section.get("id") if section is not None else None
        if name and any(link.get("href") == f"#{name}" for link in heading.iter("a")):
            del section.attrib["id"]


def _letters(text: str) -> int:
    """Characters of ``text`` other than spaces, tabs and line breaks: a length that means the
    same in every script (a Japanese sentence is one whitespace-separated "word")."""
    return len(text) - text.count(" ") - text.count("\n") - text.count("\t") - text.count("\r")


def _visible_letters(tree: Any) -> int:
    """:func:`_letters` of the page's ``<body>`` as a browser shows it, near enough: its text
    without that of scripts and styles (the boilerplate counts, as it is visible).

    >>> from lxml.html import fromstring
    >>> _visible_letters(fromstring("<html><body><p>two words</p><script>var a = 1;</script></body></html>"))
    8
    """
    body = tree.find("body")
    if body is None:
        body = tree
    hidden = sum(_letters(e.text or "") for e in body.iter("script", "style", "noscript", "template"))
    return _letters(body.text_content()) - hidden


def _looks_binary(text: str) -> bool:
    head = text[:_SNIFF]
    if not head.strip():
        return True
    return len(_JUNK_RE.findall(head)) > _MAX_JUNK_RATIO * len(head)


def _one_pass(tree: Any, options: dict[str, Any]) -> str:
    # The fast mode cuts the paragraph openings of pages written in DocBook's <div>
    # paragraphs: those go to the full mode directly (cheaper than both). Any other page
    # whose fast text holds little of what the page shows gets the full mode's text too
    # (a page the fast mode finds no text in at all is no document: plain text, a frame).
    if _div_paragraphs(tree) >= MIN_OPENINGS:
        return trafilatura.extract(tree, fast=False, **options) or ""
    result = trafilatura.extract(tree, fast=True, **options) or ""
    if result and _letters(result) < MIN_VISIBLE_SHARE * _visible_letters(tree):
        result = trafilatura.extract(tree, fast=False, **options) or result
    return result


def _headings_kept(tree: Any, text: str) -> tuple[int, int]:
    """How many of the page's headings (``<h1>`` to ``<h6>`` with words) are lines of ``text``,
    and how many it has.

    >>> from lxml.html import fromstring
    >>> _headings_kept(fromstring("<div><h1>NAME</h1><p>x</p><h2>SEE  ALSO</h2><h3> </h3></div>"), "NAME\\nx")
    (1, 2)
    """
    lines = {" ".join(line.split()) for line in text.splitlines()}
    titles = [title for title in (" ".join(h.text_content().split()) for h in tree.iter(_HEADINGS)) if title]
    return sum(title in lines for title in titles), len(titles)


def _frame_body(tree: Any) -> bool:
    """Wrap the content of ``<body>`` in a ``<main>`` when no element of the page is one that
    trafilatura takes as a main-text frame (an ``<article>``, a ``<main>``, a ``div`` of class
    ``content``...; its ``BODY_XPATH``), and say whether it did. Without a frame, a page with
    paragraphs enough gets trafilatura's paragraphs, code and tables alone: headings, definition
    lists and lists leave the text. pod2html writes pages so (their blocks right in ``<body>``):
    perlamiga lost every heading and every ``=item`` term ("abc-shell"), File::Path the
    signatures of its functions ("make_path( $dir1, $dir2, .... )").

    >>> from lxml.html import fromstring
    >>> tree = fromstring("<html><body><h1>NAME</h1><p>perlamiga</p></body></html>")
    >>> _frame_body(tree), [child.tag for child in tree.find("body")]
    (True, ['main'])
    >>> _frame_body(fromstring("<html><body><article><h1>NAME</h1></article></body></html>"))
    False

    A frame without text is none: trafilatura reads nothing in it and goes on as without one.
    Doxygen gives every page an empty ``<div id="main-nav">`` (a script fills it with the menu),
    which trafilatura's ``BODY_XPATH`` names a frame ("main"): the pages of a class kept none of
    their headings, and their lists, "Returns" and "See also", left the text.

    >>> _frame_body(fromstring('<html><body><div id="main-nav"></div><h1>Queue</h1></body></html>'))
    True
    """
    body = tree.find("body")
    if body is None or any(found.text_content().strip() for expr in BODY_XPATH for found in expr(tree)):
        return False
    frame = body.makeelement("main", {})
    frame.text, body.text = body.text, None
    frame.extend(list(body))
    body.append(frame)
    return True


#: a heading inside a list item: javadoc before JDK 11 writes each section and member of a class
#: page as a list item (``<li class="blockList"><h4>``)
_HEADINGS_IN_LISTS = etree.XPath("boolean(//li//h1|//li//h2|//li//h3|//li//h4|//li//h5|//li//h6)")


def _main_text(tree: Any, options: dict[str, Any]) -> str:
    result = _one_pass(tree, options)
    # trafilatura takes a page's first <article> as its main text. A page made of several
    # (Erlang/OTP's reference pages write each function as an <article class="func">) whose
    # text holds little of what it shows is read again with its articles as plain blocks, and
    # the longer text is kept (memsup: 1,468 letters of 7,055, then 6,366). An article inside
    # another (a post's comments) does not count.
    if result and _outer_articles(tree) > 1 and _letters(result) < MIN_VISIBLE_SHARE * _visible_letters(tree):
        for article in tree.iter("article"):
            article.tag = "div"
        whole = _one_pass(tree, options)
        if _letters(whole) > _letters(result):
            result = whole
    return result


def extract_text(
    html: bytes | str,
    url: str | None = None,
    *,
    favor_precision: bool = False,
    favor_recall: bool = False,
    include_tables: bool = True,
    include_comments: bool = False,
) -> str:
    """Return the boilerplate-free main text of an HTML page, or "" when there is none.

    Never raises and never returns None: binary bodies served as text/html, undecodable
    bytes, empty input and plain text that is not HTML all give "". ``bytes`` are decoded
    from their BOM or ``<meta charset>``, defaulting to UTF-8 with replacement characters;
    pass ``str`` when the HTTP Content-Type already told you the encoding (e.g. Scrapy's
    ``response.text``). There is no size limit here: the caller caps the body size before
    calling (parsing time and memory grow with it).

    >>> page = (b"<html><body><nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
    ...         b"<article><h1>Vacuum</h1><p>" + b"VACUUM reclaims storage occupied by dead tuples. " * 8
    ...         + b"</p></article><footer>Copyright 2024 Example Corp</footer></body></html>")
    >>> text = extract_text(page, "https://example.org/vacuum")
    >>> text.startswith("Vacuum") and "dead tuples" in text and "Copyright" not in text
    True
    >>> extract_text(b"\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\rIHDR" * 50)
    ''
    >>> extract_text("")
    ''
    """
    try:
        text = _decode(html) if isinstance(html, (bytes, bytearray, memoryview)) else html
        if not isinstance(text, str) or _looks_binary(text):
            return ""
        text = _cut_long_tags(text)
        options: dict[str, Any] = dict(
            _OPTIONS,
            url=url,
            favor_precision=favor_precision,
            favor_recall=favor_recall,
            include_tables=include_tables,
            include_comments=include_comments,
        )
        # parsed here once for both modes (trafilatura works on copies of it)
        tree = load_html(text)
        if tree is None:
            return ""
        _unwrap_invalid_tags(tree)
        _keep_inline_spans(tree)
        _keep_inline_links(tree)
        _unwrap_nested_code(tree)
        _unname_page_comments(tree)
        _unname_linked_sections(tree)
        if _div_paragraphs(tree) >= MIN_OPENINGS and _HEADINGS_IN_LISTS(tree):
            # A page of <div> paragraphs with no frame trafilatura knows keeps its paragraphs alone,
            # and those in list items leave the text with the lists: javadoc before JDK 11 puts a
            # class's description and each member's in list items (div.contentContainer is no
            # frame), and the Commons Math 3.6.1 API lost 406 of its 926 class descriptions and
            # 2,217 of 7,924 member descriptions (228 and 1,634 read in a frame first, for the
            # same CPU). Such a page is read in a frame at once (read again below, it cost a
            # second full-mode pass, as it would on every DocBook page without headings kept).
            _frame_body(tree)
        result = _main_text(tree, options)
        if not result and not include_comments:
            # trafilatura cuts an element named like a comment section (id or class "comment..."):
            # when that held all the text, it was the page itself (GNU Texinfo names the section
            # on comments <div id="Comments">), not comments under it
            options["include_comments"] = True
            result = _main_text(tree, options)
        # a page whose text has none of its headings (trafilatura found no frame on it, and kept
        # its paragraphs alone) is read again inside a frame, whose text is kept when it has
        # more of them and is no shorter. A page without text stays so (inside a frame, its
        # menus and lists of links could be read). A page of <div> paragraphs, read by the full
        # mode, is left as it is: framed, 34 of the Debian Handbook's 127 pages were read again
        # for no heading more (their text unchanged, 1.4x the CPU of the fast mode).
        if result:
            kept, headings = _headings_kept(tree, result)
            if headings and not kept and _div_paragraphs(tree) < MIN_OPENINGS and _frame_body(tree):
                framed = _main_text(tree, options)
                if _headings_kept(tree, framed)[0] > kept and _letters(framed) >= _letters(result):
                    result = framed
    except Exception:  # noqa: BLE001 -- a crawl must survive any page; "" means "no text"
        return ""
    return result or ""


_TITLE_RE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
#: a page's title is looked for in its first this many characters, and cut to TITLE_MAX_CHARS
TITLE_SEARCHED_CHARS = 65_536
TITLE_MAX_CHARS = 300


def html_title(markup: str | bytes) -> str | None:
    """The page's ``<title>``: entities unescaped, whitespace collapsed, cut to TITLE_MAX_CHARS;
    None when its first TITLE_SEARCHED_CHARS characters hold none, or an empty one.

    >>> html_title("<html><head><title> Caf&eacute;\\n  menu </title></head><body>x</body></html>")
    'Café menu'
    >>> html_title(b"<TITLE>Bytes</TITLE>"), html_title("<p>no title</p>"), html_title("<title> </title>")
    ('Bytes', None, None)
    """
    head = markup[:TITLE_SEARCHED_CHARS]
    if isinstance(head, bytes):
        head = head.decode("utf-8", "replace")
    found = _TITLE_RE.search(head)
    if found is None:
        return None
    title = " ".join(html.unescape(found.group(1)).split())
    return title[:TITLE_MAX_CHARS] or None


def page_title(given: object, markup: object) -> str | None:
    """A page's title: ``given`` (a string with more than whitespace: whitespace collapsed, cut
    to TITLE_MAX_CHARS), else the ``<title>`` of ``markup`` (HTML as str or bytes), else None.

    >>> page_title("  The\\n  manual ", "<title>Other</title>"), page_title(None, "<title>From HTML</title>")
    ('The manual', 'From HTML')
    >>> page_title(" ", None), page_title(3, b"<p>none</p>")
    (None, None)
    """
    if isinstance(given, str) and given.strip():
        return " ".join(given.split())[:TITLE_MAX_CHARS]
    return html_title(markup) if isinstance(markup, (str, bytes)) else None
