"""Fuzzing every input the extension reads from the web: nothing raises out of a component.

Hypothesis strategies for URLs (the RFC 3986 grammar and garbage), ``Link`` headers,
``<link rel=canonical>`` / ``<base>`` markup and HTML bodies (truncated, binary, mixed encodings,
BOMs), through the public functions of the core and through the analysis path the pipeline runs
in its workers (``scrapy_dedup.extraction``: ``analyse_html`` / ``analyse_text`` / ``extract_text`` /
``heading_spans``).  The pathological sizes
(10^4-deep nesting, 10^5 attributes, 100 MB values) are fixed cases: a random generator would
rarely reach them.  Item fields (a non-string URL, bytes text, None, 100 MB values) go through a
real crawl in ``test_hostile_pages.py``.

The run is bounded for ``make test`` (``DEDUP_FUZZ_EXAMPLES``, default 120 per property, about
15 s in all); ``DEDUP_FUZZ_EXAMPLES=20000`` is the long run, and ``scripts/fuzz_atheris.py`` drives
the same targets with atheris (coverage-guided) when it is installed.
"""

from __future__ import annotations

import os
import string

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scrapy_dedup.core import (
    InvalidURL,
    canonical_from_html,
    canonical_from_link_header,
    canonical_scope_check,
    canonical_text,
    content_hash,
    fingerprint,
    jaccard_estimate,
    minhash,
    near_match,
    normalize_url,
    raw_hash,
    resolve_canonical,
    simhash,
    tokenize,
    url_key,
)
from scrapy_dedup.core.canonical import SCOPES
from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html, analyse_text
from scrapy_dedup.extraction.headings import heading_spans
from scrapy_dedup.extraction.main_text import extract_text

EXAMPLES = int(os.environ.get("DEDUP_FUZZ_EXAMPLES", "120"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# extraction costs milliseconds a page: fewer examples for the same wall time
FUZZ_SLOW = settings(FUZZ, max_examples=max(10, EXAMPLES // 3))

# -- URLs: the RFC 3986 grammar ------------------------------------------------------------

ALPHA = string.ascii_letters
DIGIT = string.digits
HEXDIG = string.hexdigits
UNRESERVED = ALPHA + DIGIT + "-._~"
SUB_DELIMS = "!$&'()*+,;="

pct_encoded = st.builds(lambda a, b: "%" + a + b, st.sampled_from(HEXDIG), st.sampled_from(HEXDIG))


def _run(alphabet: str, *, min_size: int = 0, max_size: int = 12) -> st.SearchStrategy[str]:
    """``*( alphabet / pct-encoded )``"""
    return st.lists(st.one_of(st.sampled_from(alphabet), pct_encoded), min_size=min_size, max_size=max_size).map(
        "".join
    )


scheme = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(ALPHA),
    st.text(alphabet=ALPHA + DIGIT + "+-.", max_size=6),
) | st.sampled_from(["http", "https", "HTTP", "hTTps", "ftp", "file", "mailto", "data", "javascript"])
userinfo = _run(UNRESERVED + SUB_DELIMS + ":")
dec_octet = st.integers(0, 255).map(str) | st.sampled_from(["00", "256", "999", "0x7f"])
ipv4 = st.builds(lambda *o: ".".join(o), dec_octet, dec_octet, dec_octet, dec_octet)
ipv6 = st.ip_addresses(v=6).map(str) | st.sampled_from(["::", "::1", "1::2::3", "fe80::1%25eth0", "::ffff:1.2.3.4"])
ipvfuture = st.builds(
    lambda v, rest: "v" + v + "." + rest,
    st.text(alphabet=HEXDIG, min_size=1, max_size=3),
    st.text(alphabet=UNRESERVED + SUB_DELIMS + ":", min_size=1, max_size=8),
)
ip_literal = st.builds(lambda inner: "[" + inner + "]", ipv6 | ipvfuture)
reg_name = _run(UNRESERVED + SUB_DELIMS, max_size=20) | st.sampled_from(
    ["example.com", "EXAMPLE.org.", "bücher.de", "xn--bcher-kva.de", "例え.テスト", "a..b", "-a-.com", "x" * 70 + ".com"]
)
host = ip_literal | ipv4 | reg_name
port = st.integers(0, 70000).map(str) | st.sampled_from(["", "080", "abc", "-1"])
authority = st.builds(
    lambda user, h, p: (user + "@" if user is not None else "") + h + (":" + p if p is not None else ""),
    st.none() | userinfo,
    host,
    st.none() | port,
)
pchar = UNRESERVED + SUB_DELIMS + ":@"
segment = _run(pchar) | st.sampled_from([".", "..", "%2e", "%2E%2e", "index.html", ";jsessionid=A1"])
path_abempty = st.lists(segment, max_size=6).map(lambda segs: "".join("/" + s for s in segs))
query = _run(pchar + "/?", max_size=30)
fragment = _run(pchar + "/?", max_size=10)


def _uri(s: str, a: str, path: str, q: str | None, f: str | None) -> str:
    return s + "://" + a + path + ("?" + q if q is not None else "") + ("#" + f if f is not None else "")


RFC3986_URI = st.builds(_uri, scheme, authority, path_abempty, st.none() | query, st.none() | fragment)
RELATIVE_REF = st.builds(
    lambda prefix, path, q, f: prefix + path + ("?" + q if q is not None else "") + ("#" + f if f is not None else ""),
    st.sampled_from(["", "//", "/", "./", "../", "../../"]),
    st.lists(segment, max_size=4).map("/".join),
    st.none() | query,
    st.none() | fragment,
)
# Garbage: arbitrary text, control characters and lone surrogates, bytes decoded every which way,
# and valid URLs with one thing broken.
GARBAGE = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(codec=None, categories=["Cc", "Cs", "Zs", "Zl", "Co"]), max_size=30),
    st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.builds(lambda u, junk, at: u[:at] + junk + u[at:], RFC3986_URI, st.text(max_size=5), st.integers(0, 40)),
)
ANY_URL = st.one_of(RFC3986_URI, RELATIVE_REF, GARBAGE)
NOT_A_STRING = st.one_of(st.none(), st.integers(), st.binary(max_size=20), st.lists(st.text(max_size=5), max_size=3))
HOST_RULES = st.sampled_from([
    None,
    {"example.com": {"allow_params": ["id", "page"]}},
    {"*.org": {"trailing_slash": "keep", "path_case": "insensitive", "directory_index": False}},
    {"*.com": {"drop_params": ["s*"]}},
])


@FUZZ
@given(ANY_URL, HOST_RULES)
def test_url_functions_never_raise(url: str, rules) -> None:
    norm = normalize_url(url)
    key = url_key(url, rules)
    assert isinstance(norm, str) and isinstance(key, str)
    assert normalize_url(norm) == norm
    assert url_key(key, rules) == key


@FUZZ
@given(ANY_URL)
def test_strict_mode_raises_only_invalid_url(url: str) -> None:
    try:
        normalize_url(url, strict=True)
        url_key(url, strict=True)
    except InvalidURL:
        pass


@FUZZ
@given(NOT_A_STRING)
def test_url_functions_take_any_value(value) -> None:
    assert normalize_url(value) is value
    assert url_key(value) is value
    with pytest.raises(InvalidURL):
        normalize_url(value, strict=True)


@FUZZ
@given(ANY_URL, ANY_URL, st.sampled_from(SCOPES))
def test_scope_check_never_raises(page: str, canonical: str, scope: str) -> None:
    assert canonical_scope_check(page, canonical, scope) in (None, "disabled", "scheme", "invalid", "off_scope")


# -- Link headers --------------------------------------------------------------------------

rel_value = st.sampled_from(["canonical", "CANONICAL", "alternate canonical", "next", "", "canonical\x00"])
link_param = st.one_of(
    st.builds(lambda v: f'rel="{v}"', rel_value),
    st.builds(lambda v: f"rel={v}", rel_value),
    st.builds(lambda v: f"REL = '{v}'", rel_value),
    st.sampled_from(['title="a, b; c"', 'title="\\"quoted\\""', "hreflang=en", "anchor", ";", "rel", 'rel="']),
)
link_value = st.builds(
    lambda target, params, close: "<" + target + (">" if close else "") + "".join("; " + p for p in params),
    ANY_URL,
    st.lists(link_param, max_size=3),
    st.booleans(),
)
LINK_HEADER = st.one_of(
    st.lists(link_value, max_size=4).map(", ".join),
    st.text(alphabet='<>;,="\' relcanonical/:\\', max_size=60),
    st.text(max_size=60),
)
LINK_VALUES = st.one_of(
    st.none(),
    LINK_HEADER,
    LINK_HEADER.map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=60),
    st.lists(st.one_of(LINK_HEADER, st.binary(max_size=30)), max_size=3),
)


@FUZZ
@given(LINK_VALUES)
def test_link_header_parsing_never_raises(values) -> None:
    target = canonical_from_link_header(values)
    assert target is None or (isinstance(target, str) and target)


# -- <link rel=canonical> and <base> markup ------------------------------------------------

attr_value = st.one_of(ANY_URL, st.sampled_from(["canonical", "&amp;", "&#x0;", "&#99999999;", "&bogus", ""]))
attribute = st.builds(
    lambda name, quote, value: name + ("" if quote is None else "=" + quote + value + quote),
    st.sampled_from(["rel", "REL", "href", "HREF", "hreflang", "x", "rel/", "=", "href\x00"]),
    st.none() | st.sampled_from(['"', "'", ""]),
    attr_value,
)
head_token = st.one_of(
    st.builds(lambda tag, attrs, end: "<" + tag + " " + " ".join(attrs) + end, st.sampled_from(["link", "LINK", "base", "Base"]),
              st.lists(attribute, max_size=4), st.sampled_from([">", "/>", "", " >"])),
    st.sampled_from(["<!--", "-->", "<!-- <link rel=canonical href=/c> -->", "<script>", "</script>", "<style>",
                     "<head>", "</head>", "<body>", "<title>t</title>", "<meta charset=latin-1>", "<", ">"]),
    st.text(max_size=20),
)
HEAD_MARKUP = st.lists(head_token, max_size=12).map("".join)
ENCODINGS = st.sampled_from(["utf-8", "latin-1", "cp1252", "utf-16", "utf-16-le", "utf-32", "shift_jis", "gb18030", "bogus"])


def _encode(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding, "replace")
    except LookupError:
        return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(HEAD_MARKUP, ENCODINGS, st.booleans())
def test_canonical_markup_never_raises(markup: str, encoding: str, as_bytes: bool) -> None:
    body = _encode(markup, encoding) if as_bytes else markup
    canonical, base = canonical_from_html(body, encoding)
    for href in (canonical, base):
        assert href is None or (isinstance(href, str) and href == href.strip() and href)


@FUZZ
@given(ANY_URL, HEAD_MARKUP | st.binary(max_size=200) | st.none(), LINK_VALUES, ENCODINGS)
def test_resolve_canonical_never_raises(page: str, body, links, encoding: str) -> None:
    if isinstance(body, str):
        body = _encode(body, encoding)
    found = resolve_canonical(page, body, links, encoding)
    assert found is None or (isinstance(found.url, str) and found.source in ("html", "header"))


# -- HTML bodies ---------------------------------------------------------------------------

BOMS = ["", "\ufeff"]
BYTE_BOMS = [b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"]
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
element = st.deferred(
    lambda: st.one_of(
        words,
        st.sampled_from(["&amp;", "&nbsp;", "&#0;", "&#xD800;", "<br>", "<hr/>", "<!-- c -->", "<![CDATA[x]]>", "</p>",
                         "<p", "<?xml?>", "<!DOCTYPE html>"]),
        st.builds(
            lambda tag, attrs, children, close: f"<{tag}{''.join(' ' + a for a in attrs)}>" + "".join(children)
            + (f"</{tag}>" if close else ""),
            st.sampled_from(["p", "div", "article", "main", "h1", "table", "td", "tr", "script", "style", "nav",
                             "footer", "li", "ul", "a", "svg", "math", "template", "iframe", "noscript", "xmp"]),
            st.lists(attribute, max_size=3),
            st.lists(element, max_size=4),
            st.booleans(),
        ),
    )
)
PAGE = st.builds(
    lambda bom, head, body: bom + "<html><head>" + head + "</head><body>" + body + "</body></html>",
    st.sampled_from(BOMS),
    HEAD_MARKUP,
    st.lists(element, max_size=8).map("".join),
)


@st.composite
def html_bodies(draw) -> bytes | str:
    """A page as the network delivers it: encoded (several encodings in one body), maybe
    truncated, maybe behind a BOM, or plain binary."""
    kind = draw(st.sampled_from(["str", "bytes", "mixed", "truncated", "binary"]))
    page = draw(PAGE)
    if kind == "str":
        return page
    if kind == "binary":
        return draw(st.binary(max_size=2000))
    if kind == "mixed":
        cut = draw(st.integers(0, len(page)))
        first, second = draw(ENCODINGS), draw(ENCODINGS)
        return draw(st.sampled_from(BYTE_BOMS)) + _encode(page[:cut], first) + _encode(page[cut:], second)
    data = draw(st.sampled_from(BYTE_BOMS)) + _encode(page, draw(ENCODINGS))
    if kind == "truncated":
        data = data[: draw(st.integers(0, len(data)))]
    return data


OPTIONS = st.builds(
    ExtractOptions,
    favor_precision=st.booleans(),
    favor_recall=st.booleans(),
    include_tables=st.booleans(),
    include_comments=st.booleans(),
    max_text_chars=st.sampled_from([0, 1, 100, 1_000_000]),
)


def _check_headings(body, text: str) -> None:
    spans = heading_spans(body, text)
    assert isinstance(spans, tuple)
    previous = 0
    for h in spans:  # whole lines of the text, in order, none twice
        assert previous <= h.start < h.end <= len(text) and 1 <= h.level <= 6
        assert (h.start == 0 or text[h.start - 1] in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        previous = h.end


def _check_fingerprint(text: str, fp) -> None:
    assert isinstance(text, str)
    assert len(fp.content_hash) == 32 and 0 <= fp.simhash < 2**64 and fp.tokens >= 0
    assert jaccard_estimate(fp.minhash, fp.minhash) in (0.0, 1.0)


@FUZZ_SLOW
@given(html_bodies(), st.none() | ANY_URL, OPTIONS)
def test_analysis_of_any_body_never_raises(body, url, options: ExtractOptions) -> None:
    text, fp = analyse_html(body, url, options)
    _check_fingerprint(text, fp)
    _check_headings(body, text)
    assert extract_text(body, url) == analyse_html(body, url, ExtractOptions())[0]


@FUZZ_SLOW
@given(html_bodies())
def test_raw_hash_and_canonical_of_any_body(body) -> None:
    data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    assert len(raw_hash(data)) == 32
    canonical_from_html(body)


TEXTS = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec=None), max_size=200),  # lone surrogates included
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.sampled_from(["\ufeff", "\u200b" * 50, "\x00" * 10, "| | | " * 100, "去重" * 300, "\U0001f600" * 40]),
)


@FUZZ
@given(TEXTS, OPTIONS)
def test_text_functions_never_raise(text: str, options: ExtractOptions) -> None:
    canonical = canonical_text(text)
    assert canonical_text(canonical) == canonical
    canonical.encode("utf-8")  # always encodable, whatever came in
    tokenize(canonical)
    assert content_hash(text) == content_hash(canonical)
    assert 0 <= simhash(text) < 2**64
    sig = minhash(text)
    assert jaccard_estimate(sig, sig) in (0.0, 1.0)
    same, fp = analyse_text(text, options)
    assert same is text
    _check_headings(f"<h1>{text}</h1><p>x</p><h2>{text[:5]}</h2>", text)
    _check_fingerprint(text, fp)
    assert near_match(fp, fingerprint(text))[0] in (True, False)


# -- the pathological sizes (fixed cases) --------------------------------------------------

DEEP = 10_000
MANY = 100_000


def _big_cases() -> dict[str, bytes | str]:
    para = "<p>" + "Deep nesting must not stop the crawl. " * 20 + "</p>"
    return {
        "nested-divs": "<html><body>" + "<div>" * DEEP + para + "</div>" * DEEP + "</body></html>",
        "nested-unclosed": "<html><body>" + "<div><span><b>" * (DEEP // 3) + para,
        "nested-tables": "<html><body>" + "<table><tr><td>" * DEEP + para,
        "nested-in-head": "<html><head>" + "<link>" * DEEP + "<div>" * DEEP + "</head><body>" + para,
        "many-attributes": "<html><head><link " + " ".join(f"a{i}=v{i}" for i in range(MANY))
        + " rel=canonical href=/c></head><body><p " + " ".join(f"d{i}='x'" for i in range(MANY)) + ">"
        + para + "</p></body></html>",
        "many-duplicate-attributes": "<html><body><div " + "class=a " * MANY + ">" + para + "</div></body></html>",
        "unclosed-attribute": "<html><head><link rel=canonical href=\"" + "x" * MANY * 5,
        "unclosed-comment": "<html><head><!--" + "<link rel=canonical href=/c>" * (MANY // 10),
        "mixed-encodings": b"\xef\xbb\xbf<html><head><meta charset=shift_jis></head><body><p>"
        + "caf\u00e9 na\u00efve ".encode("utf-8") * 300 + "caf\u00e9".encode("latin-1") * 300
        + "\u53bb\u91cd".encode("gb18030") * 300 + "\u53bb".encode("utf-16-le") * 300 + b"</p></body></html>",
        "utf-16-bom": "\ufeff<html><body><p>".encode("utf-16-le") + ("UTF-16 text. " * 200).encode("utf-16-le"),
        "utf-32-bom": b"\x00\x00\xfe\xff" + ("<p>UTF-32 text.</p>" * 100).encode("utf-32-be"),
        "nul-bytes": b"<html><body><p>" + b"text\x00" * 5000 + b"</p></body></html>",
        "many-equal-headings": "<html><body><main>" + "<h2>Step</h2><p>Do it.</p>" * (MANY // 50) + "</main></body></html>",
        "unclosed-headings": "<html><body>" + "<h3>Open heading " * (MANY // 10) + para,
    }


@pytest.mark.parametrize("name", sorted(_big_cases()))
def test_pathological_bodies(name: str) -> None:
    body = _big_cases()[name]
    for data in (body, body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body):
        text, fp = analyse_html(data, "http://example.com/page", ExtractOptions())
        _check_fingerprint(text, fp)
        _check_headings(data, text)
        canonical_from_html(data)
        resolve_canonical("http://example.com/page", data if isinstance(data, bytes) else data.encode(), None)
        raw_hash(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))


def test_deep_nesting_keeps_its_text_up_to_the_parser_limit() -> None:
    para = "<p>" + "Deep nesting must not stop the crawl. " * 20 + "</p>"
    shallow = "<html><body>" + "<div>" * 250 + para + "</div>" * 250 + "</body></html>"
    assert "Deep nesting must not stop the crawl." in analyse_html(shallow, None, ExtractOptions())[0]
    # libxml2 stops building the tree at 256 levels: such a page has no text (recorded as
    # skipped_empty by the pipeline), and nothing raises
    assert analyse_html(_big_cases()["nested-divs"], None, ExtractOptions())[0] == ""


def test_many_attributes_keep_the_text() -> None:
    """A tag with 10^5 attributes took libxml2 minutes (quadratic): the tag is cut before
    parsing, and the text is the same as without the attributes."""
    para = "<p>" + "Deep nesting must not stop the crawl. " * 20 + "</p>"
    attrs = " ".join(f"d{i}='x'" for i in range(MANY))
    body = f"<html><body><article><p {attrs}>{para}</p></article></body></html>"
    plain = f"<html><body><article><p>{para}</p></article></body></html>"
    assert analyse_html(body, None, ExtractOptions())[0] == analyse_html(plain, None, ExtractOptions())[0] != ""


def test_hundred_megabyte_values() -> None:
    big = "Large value, repeated. " * (100 * 1024 * 1024 // 23)
    assert len(big) >= 100 * 1024 * 1024 - 23
    text, fp = analyse_text(big, ExtractOptions())
    assert fp.tokens > 0 and text is big
    assert normalize_url("http://example.com/" + big[:1_000_000]).startswith("http://example.com/")
    assert canonical_from_link_header("<" + big[:10_000_000] + ">; rel=canonical") is not None
    assert canonical_from_html(big) == (None, None)
