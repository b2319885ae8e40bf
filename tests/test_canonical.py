"""Canonical link parsing (Link header, HTML head), resolution and scope checks."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings, strategies as st

from scrapy_dedup.core.canonical import (
    SCOPES,
    CanonicalLink,
    canonical_from_html,
    canonical_from_link_header,
    canonical_scope_check,
    resolve_canonical,
)

DOZEN = ", ".join(
    [f'</style{i}.css>; rel="preload"; as="style"' for i in range(6)]
    + ['<https://cdn.example/a,b>; rel=alternate; hreflang="de, en"']
    + ['</x>; title="rel=canonical, really"; rel=next']
    + [f"</p{i}>; rel=prev" for i in range(3)]
    + ['<https://example.com/the,canonical>; rel="canonical"']
)

LINK_CASES = [
    ('<https://example.com/a>; rel="canonical"', "https://example.com/a"),
    ("<https://example.com/a>; rel=canonical", "https://example.com/a"),
    ("<https://example.com/a> ; REL = Canonical", "https://example.com/a"),
    ('</a>; rel="alternate canonical"', "/a"),
    ('</a>; rel="canonical\tnext"', "/a"),
    ('</next>; rel="next", </canon>; rel="canonical"', "/canon"),
    ('</first>; rel=canonical, </second>; rel=canonical', "/first"),
    (DOZEN, "https://example.com/the,canonical"),
    ('<  /spaced  >; rel=canonical', "/spaced"),
    ('</x>; rel="next"; rel="canonical"', None),  # only the first rel counts
    ('</x>; title="; rel=canonical"', None),  # inside a quoted string
    ('</x>; title="a \\" ; rel=canonical"', None),  # escaped quote stays inside
    ("</x>; rel=canonicalx", None),
    ("</x>; rel=shortlink", None),
    ("</x>; rel*=UTF-8''canonical", None),
    ('<>; rel=canonical, </real>; rel=canonical', "/real"),
    ("</x>", None),
    ("", None),
    ("garbage without brackets; rel=canonical", None),
    ("<unterminated; rel=canonical", None),
    (";;;,,,<<<>>>", None),
    ('</x>; rel="canonical', "/x"),  # unterminated quote, still readable
]


@pytest.mark.parametrize(("header", "expected"), LINK_CASES)
def test_canonical_from_link_header(header: str, expected: str | None) -> None:
    assert canonical_from_link_header(header) == expected
    assert canonical_from_link_header(header.encode("latin-1")) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([b'</style.css>; rel=stylesheet', b'</canon>; rel="canonical"'], "/canon"),
        (("</a>; rel=next", "</b>; rel=canonical"), "/b"),
        ([b"</c>; rel=canonical", "</d>; rel=canonical"], "/c"),
        ([], None),
        (None, None),
        ([None, 1, b"</e>; rel=canonical"], "/e"),
        (42, None),
        (bytearray(b"</f>; rel=canonical"), "/f"),
    ],
)
def test_canonical_from_several_headers(values: object, expected: str | None) -> None:
    assert canonical_from_link_header(values) == expected  # type: ignore[arg-type]


HTML_CASES = [
    ('<head><link rel="canonical" href="https://ex.com/a"></head>', ("https://ex.com/a", None)),
    ("<head><link rel='canonical' href='/a'></head>", ("/a", None)),
    ("<head><link rel=canonical href=/a></head>", ("/a", None)),
    ("<head><link rel=canonical href=/a/></head>", ("/a/", None)),
    ('<head><link href="/a" rel="canonical" /></head>', ("/a", None)),
    ('<HEAD><LINK REL="CANONICAL" HREF="/A"></HEAD>', ("/A", None)),
    ('<head><link\n  rel="alternate canonical"\n  href=" /a "></head>', ("/a", None)),
    ('<head><link rel="canonical" href="/a?x=1&amp;y=2&#47;&#x41;&eacute;"></head>', ("/a?x=1&y=2/Aé", None)),
    ('<head><link rel="canonical" href="/a" title=\'x>y\'></head>', ("/a", None)),
    ('<head><link title="a<b" rel=canonical href=/a><link rel=canonical href=/b></head>', ("/b", None)),
    ('<head><base href="https://cdn.ex.com/sub/"><link rel=canonical href=p></head>', ("p", "https://cdn.ex.com/sub/")),
    ('<head><link rel=canonical href=p><base href=/b/><base href=/c/></head>', ("p", "/b/")),
    ('<head><base target=_blank><base href="/b/"></head>', (None, "/b/")),
    ('<head><link rel=canonical href=/first><link rel=canonical href=/second></head>', ("/first", None)),
    ('<head><link rel=canonical><link rel=canonical href=""><link rel=canonical href=/ok></head>', ("/ok", None)),
    ('<head><link rel=stylesheet href=/s.css><link data-rel=canonical href=/no></head>', (None, None)),
    ('<head><link rel=canonical href=/a rel=stylesheet></head>', ("/a", None)),
    ('<head><link rel=stylesheet rel=canonical href=/a></head>', (None, None)),
    ('<head><linked rel=canonical href=/no></head>', (None, None)),
    # head boundaries
    ('<head></head><body><link rel=canonical href=/in-body></body>', (None, None)),
    ('<head><title>x</title><body class=x><link rel=canonical href=/in-body>', (None, None)),
    ('<link rel=canonical href=/no-head-tag><p>text', ("/no-head-tag", None)),
    ('<!doctype html><html><head><meta charset=utf-8><link rel=canonical href=/a>', ("/a", None)),
    # comments, scripts, styles
    ('<head><!-- <link rel=canonical href=/commented> --><link rel=canonical href=/real></head>', ("/real", None)),
    ('<head><!-- </head> --><link rel=canonical href=/after-comment></head>', ("/after-comment", None)),
    ('<head><script>var s = "<link rel=canonical href=/js>";</script></head>', (None, None)),
    ('<head><style>/* <base href=/css/> */</style><base href=/real/></head>', (None, "/real/")),
    ('<head><!-- unterminated <link rel=canonical href=/x>', (None, None)),
    # junk
    ("", (None, None)),
    ("<head><link rel=canonical href='/unterminated></head>", (None, None)),
    ("<<<>>><link<link rel=canonical href=/x>", ("/x", None)),
]


@pytest.mark.parametrize(("html", "expected"), HTML_CASES)
def test_canonical_from_html(html: str, expected: tuple[str | None, str | None]) -> None:
    assert canonical_from_html(html) == expected
    assert canonical_from_html(html.encode("utf-8")) == expected


def test_html_encodings() -> None:
    doc = '<head><link rel=canonical href="/caf\u00e9"></head>'
    assert canonical_from_html(doc.encode("latin-1"), "latin-1") == ("/caf\u00e9", None)
    assert canonical_from_html(doc.encode("cp1252"), "cp1252") == ("/caf\u00e9", None)
    assert canonical_from_html(doc.encode("utf-16"), "utf-16") == ("/caf\u00e9", None)
    assert canonical_from_html(doc.encode("utf-8"), "no-such-codec") == ("/caf\u00e9", None)
    assert canonical_from_html(b'<head><link rel=canonical href="/\xff"></head>') == ("/\ufffd", None)


def test_html_scan_is_limited_to_256_kib() -> None:
    padding = "<meta name=x content=y>" * (300 * 1024 // 23)
    late = f"<head>{padding}<link rel=canonical href=/late></head>"
    early = f"<head><link rel=canonical href=/early>{padding}</head>"
    assert canonical_from_html(late) == (None, None)
    assert canonical_from_html(late.encode()) == (None, None)
    assert canonical_from_html(early.encode()) == ("/early", None)


@pytest.mark.parametrize(
    "doc",
    [b"<link " * 50_000, b'<link href="' * 30_000, b"<" * 300_000, b"<script>" + b"<" * 300_000,
     b"<!--" * 70_000, b"</head " * 40_000, b"<link " + b'a="' * 100_000],
)
def test_html_scan_stays_linear_on_hostile_input(doc: bytes) -> None:
    # A backtracking (quadratic) pattern takes minutes on these; linear takes ms.
    start = time.perf_counter()
    assert canonical_from_html(doc) == (None, None)
    assert canonical_from_html(doc.decode()) == (None, None)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("header", ["<" * 100_000, '<a>; x="' * 20_000, "<a>" + ";" * 100_000])
def test_link_header_stays_linear_on_hostile_input(header: str) -> None:
    start = time.perf_counter()
    assert canonical_from_link_header(header) is None
    assert time.perf_counter() - start < 2.0


def test_html_bad_body_type() -> None:
    assert canonical_from_html(None) == (None, None)  # type: ignore[arg-type]


RESOLVE_CASES = [
    # HTML: relative href against the page
    ("https://ex.com/a/b", b"<head><link rel=canonical href=c></head>", None,
     CanonicalLink("https://ex.com/a/c", "html")),
    ("https://ex.com/a/b", b"<head><link rel=canonical href=../c?b=1&amp;a=2#x></head>", None,
     CanonicalLink("https://ex.com/c?a=2&b=1", "html")),
    # relative <base> resolved against the page, then the href against it
    ("https://ex.com/a/b", b'<head><base href="/docs/v2/"><link rel=canonical href="p"></head>', None,
     CanonicalLink("https://ex.com/docs/v2/p", "html")),
    ("https://ex.com/a/b", b'<head><base href="https://cdn.ex.com/"><link rel=canonical href="/p"></head>', None,
     CanonicalLink("https://cdn.ex.com/p", "html")),
    # normalization applied to the result
    ("https://ex.com/", b"<link rel=canonical href='HTTPS://EX.com:443/P/./q?utm_source=x'>", None,
     CanonicalLink("https://ex.com/P/q", "html")),
    ("https://ex.com/", b"<link rel=canonical href='//other.com/x'>", None,
     CanonicalLink("https://other.com/x", "html")),
    # the header wins over the HTML; header targets resolve against the page
    ("https://ex.com/a/b", b"<link rel=canonical href=/html>", '</hdr>; rel="canonical"',
     CanonicalLink("https://ex.com/hdr", "header")),
    ("https://ex.com/a/b", None, [b"<c>; rel=canonical"], CanonicalLink("https://ex.com/a/c", "header")),
    ("https://ex.com/a/b", b"<link rel=canonical href=/html>", "</n>; rel=next",
     CanonicalLink("https://ex.com/html", "html")),
    # non-http canonicals are returned as declared, for the scope check to reject
    ("https://ex.com/", b"<link rel=canonical href='file:///etc/passwd'>", None,
     CanonicalLink("file:///etc/passwd", "html")),
    # nothing declared
    ("https://ex.com/", b"<head><title>x</title></head>", None, None),
    ("https://ex.com/", b"", None, None),
    ("https://ex.com/", None, None, None),
    ("https://ex.com/", "<link rel=canonical href=/str-body>", [], CanonicalLink("https://ex.com/str-body", "html")),
]


@pytest.mark.parametrize(("page", "body", "link", "expected"), RESOLVE_CASES)
def test_resolve_canonical(page: str, body: object, link: object, expected: CanonicalLink | None) -> None:
    assert resolve_canonical(page, body, link) == expected  # type: ignore[arg-type]


def test_resolve_canonical_with_encoding() -> None:
    body = '<head><link rel=canonical href="/caf\u00e9"></head>'.encode("latin-1")
    assert resolve_canonical("http://ex.com/", body, None, "latin-1") == CanonicalLink(
        "http://ex.com/caf%C3%A9", "html"
    )


def test_resolve_canonical_survives_bad_base() -> None:
    body = b"<head><base href='http://[::1'><link rel=canonical href=/x></head>"
    assert resolve_canonical("http://ex.com/a", body, None) == CanonicalLink("http://ex.com/x", "html")


def test_canonical_link_is_frozen() -> None:
    link = CanonicalLink("http://a.com/", "html")
    with pytest.raises(dataclasses.FrozenInstanceError):
        link.url = "x"  # type: ignore[misc]


SCOPE_CASES = [
    # host: same host and port after normalization
    ("https://www.ex.com/a", "https://www.ex.com/b", "host", None),
    ("https://www.ex.com/a", "http://WWW.EX.com:80/b", "host", None),
    ("https://www.ex.com/a", "https://www.ex.com:8443/b", "host", "off_scope"),
    ("https://www.ex.com:8443/a", "https://www.ex.com:8443/b", "host", None),
    ("https://www.ex.com/a", "https://ex.com/b", "host", "off_scope"),
    ("https://www.ex.com/a", "https://other.com/b", "host", "off_scope"),
    ("http://bücher.de/a", "http://xn--bcher-kva.de/b", "host", None),
    ("http://[::1]:8080/a", "http://[::1]:8080/b", "host", None),
    # domain: approximate registrable domain
    ("https://www.ex.com/a", "https://blog.ex.com/b", "domain", None),
    ("https://www.ex.com/a", "https://ex.com/b", "domain", None),
    ("https://www.ex.com/a", "https://other.com/b", "domain", "off_scope"),
    ("https://shop.ex.co.uk/a", "https://www.ex.co.uk/b", "domain", None),
    ("https://shop.ex.co.uk/a", "https://www.other.co.uk/b", "domain", "off_scope"),
    ("https://a.ex.com.au/a", "https://b.ex.com.au/b", "domain", None),
    ("https://a.ex.co/a", "https://b.ex.co/b", "domain", None),
    ("http://10.0.0.1/a", "http://10.0.0.2/b", "domain", "off_scope"),
    ("http://10.0.0.1/a", "http://10.0.0.1:81/b", "domain", None),
    # any: only validity and scheme
    ("https://www.ex.com/a", "https://totally-different.org/b", "any", None),
    # off
    ("https://www.ex.com/a", "https://www.ex.com/b", "off", "disabled"),
    ("https://www.ex.com/a", "file:///etc/passwd", "off", "disabled"),
    # scheme and invalid, whatever the scope
    ("https://www.ex.com/a", "file:///etc/passwd", "host", "scheme"),
    ("https://www.ex.com/a", "javascript:alert(1)", "any", "scheme"),
    ("https://www.ex.com/a", "ftp://www.ex.com/a", "domain", "scheme"),
    ("https://www.ex.com/a", "http://[::1", "any", "invalid"),
    ("https://www.ex.com/a", "https://www.ex.com:99999/", "host", "invalid"),
    ("https://www.ex.com/a", "/relative", "host", "invalid"),
    ("https://www.ex.com/a", "", "any", "invalid"),
    ("https://www.ex.com/a", "1http://x", "any", "invalid"),
    ("not a url", "https://www.ex.com/b", "host", "invalid"),
    ("not a url", "https://www.ex.com/b", "any", None),
]


@pytest.mark.parametrize(("page", "canonical", "scope", "expected"), SCOPE_CASES)
def test_canonical_scope_check(page: str, canonical: str, scope: str, expected: str | None) -> None:
    assert canonical_scope_check(page, canonical, scope) == expected


@pytest.mark.parametrize("scope", ["", "HOST", "subdomain", None])
def test_unknown_scope_names_the_setting(scope: object) -> None:
    with pytest.raises(ValueError, match="DEDUP_CANONICAL_SCOPE"):
        canonical_scope_check("https://a.com/", "https://a.com/", scope)  # type: ignore[arg-type]


def test_scopes_constant() -> None:
    assert SCOPES == ("host", "domain", "any", "off")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200),
                 st.lists(st.one_of(st.text(alphabet='<>;,="\\ relcanonical/', max_size=40),
                                    st.binary(max_size=40)), max_size=5)))
def test_link_header_never_raises(value: object) -> None:
    result = canonical_from_link_header(value)  # type: ignore[arg-type]
    assert result is None or (isinstance(result, str) and result == result.strip() and result)


_HTMLISH = st.lists(
    st.sampled_from([
        "<head>", "</head>", "<body>", "<link rel=canonical href=/a>", "<base href=/b/>",
        "<!--", "-->", "<script>", "</script>", "'", '"', "<", ">", "&amp;", "rel=", "href=",
    ]) | st.text(max_size=10),
    max_size=20,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_HTMLISH, st.sampled_from(["utf-8", "latin-1", "utf-16", "bogus"]))
def test_html_never_raises(doc: str, encoding: str) -> None:
    for body in (doc, doc.encode("utf-8", "surrogatepass")):
        canonical, base = canonical_from_html(body, encoding)
        assert canonical is None or isinstance(canonical, str) and canonical
        assert base is None or isinstance(base, str) and base
    link = resolve_canonical("http://ex.com/p", doc.encode("utf-8", "surrogatepass"), None)
    assert link is None or link.source == "html"
