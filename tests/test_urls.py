"""normalize_url and url_key: rule tables, bad input, hypothesis properties."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings, strategies as st
from w3lib.url import safe_url_string

from scrapy_dedup.core.hostrules import HostRules
from scrapy_dedup.core.urls import (
    DEFAULT_DIRECTORY_INDEXES,
    DEFAULT_SESSION_PARAMS,
    DEFAULT_TRACKING_PARAMS,
    InvalidURL,
    normalize_url,
    url_key,
)


def test_default_pattern_lists() -> None:
    assert DEFAULT_TRACKING_PARAMS == (
        "utm_*", "gclid", "fbclid", "msclkid", "mc_cid", "mc_eid",
        "_ga", "igshid", "yclid", "pk_*", "hsa_*",
    )
    assert DEFAULT_SESSION_PARAMS == (
        "jsessionid", "phpsessid", "sid", "sessionid", "aspsessionid*", "cfid", "cftoken",
    )
    assert DEFAULT_DIRECTORY_INDEXES == ("index.html", "index.htm", "index.php", "default.aspx")
    assert issubclass(InvalidURL, ValueError)


NORMALIZE_CASES = [
    # scheme and host case
    ("HTTP://WWW.Example.COM/Path", "http://www.example.com/Path"),
    ("HtTpS://Example.com", "https://example.com/"),
    # IDNA
    ("http://bücher.de/", "http://xn--bcher-kva.de/"),
    ("http://BÜCHER.de/x", "http://xn--bcher-kva.de/x"),
    ("http://XN--BCHER-KVA.de/", "http://xn--bcher-kva.de/"),
    ("http://例え.テスト/", "http://xn--r8jz45g.xn--zckzah/"),
    ("http://ＥＸＡＭＰＬＥ.com/", "http://example.com/"),
    # default ports
    ("http://example.com:80/a", "http://example.com/a"),
    ("https://example.com:443/a", "https://example.com/a"),
    ("http://example.com:443/a", "http://example.com:443/a"),
    ("https://example.com:80/a", "https://example.com:80/a"),
    ("http://example.com:8080/a", "http://example.com:8080/a"),
    ("http://example.com:0080/a", "http://example.com/a"),
    ("http://example.com:/a", "http://example.com/a"),
    # dot segments (RFC 3986 5.2.4)
    ("http://a.com/a/b/c/./../../g", "http://a.com/a/g"),
    ("http://a.com/mid/content=5/../6", "http://a.com/mid/6"),
    ("http://a.com/a/b/..", "http://a.com/a/"),
    ("http://a.com/a/b/.", "http://a.com/a/b/"),
    ("http://a.com/../../x", "http://a.com/x"),
    ("http://a.com/a/%2E%2E/b", "http://a.com/b"),
    ("http://a.com/a/.hidden/..x", "http://a.com/a/.hidden/..x"),
    # percent-encoding
    ("http://a.com/%7euser/%7E", "http://a.com/~user/~"),
    ("http://a.com/%41%62%2d%5F%2e", "http://a.com/Ab-_."),
    ("http://a.com/a%2fb%2Fc", "http://a.com/a%2Fb%2Fc"),
    ("http://a.com/%3a%40%21%e2%82%ac", "http://a.com/%3A%40%21%E2%82%AC"),
    ("http://a.com/?q=%26%3d%2b", "http://a.com/?q=%26%3D%2B"),
    ("http://a.com/%", "http://a.com/%25"),
    ("http://a.com/a%zz", "http://a.com/a%25zz"),
    ("http://a.com/%%341", "http://a.com/%2541"),
    # non-ASCII and characters not allowed raw
    ("http://a.com/café/€?q=naïve", "http://a.com/caf%C3%A9/%E2%82%AC?q=na%C3%AFve"),
    ("http://a.com/a b\"<>|^{}`", "http://a.com/a%20b%22%3C%3E%7C%5E%7B%7D%60"),
    ("http://a.com/?q=it's [x]", "http://a.com/?q=it%27s%20%5Bx%5D"),
    ("http://a.com/keep!$&'()*+,;=:@", "http://a.com/keep!$&'()*+,;=:@"),
    ("http://a.com/a\\b\\..\\c", "http://a.com/a/c"),
    ("http://a.com/x?a=b+c", "http://a.com/x?a=b+c"),
    # fragment and empty query
    ("http://a.com/x#frag", "http://a.com/x"),
    ("http://a.com/x?", "http://a.com/x"),
    ("http://a.com/x?#", "http://a.com/x"),
    ("http://a.com/x?a=1#f?b=2", "http://a.com/x?a=1"),
    # tracking parameters (case-insensitive, prefix patterns)
    ("http://a.com/?utm_source=x&id=1&UTM_Medium=y", "http://a.com/?id=1"),
    ("http://a.com/?gclid=1&fbclid=2&msclkid=3&mc_cid=4&mc_eid=5&_ga=6&igshid=7&yclid=8", "http://a.com/"),
    ("http://a.com/?pk_campaign=1&hsa_acc=2&Gclid=3&p=1", "http://a.com/?p=1"),
    ("http://a.com/?utm=1&utmx=2&_gac=3&sgclid=4", "http://a.com/?_gac=3&sgclid=4&utm=1&utmx=2"),
    ("http://a.com/?utm%5Fsource=1&%75tm_term=2&k=v", "http://a.com/?k=v"),
    # sorting: by key, stable for repeated keys; "key" and "key=" stay distinct
    ("http://a.com/?b=2&a=1&a=0", "http://a.com/?a=1&a=0&b=2"),
    ("http://a.com/?b&a=&a", "http://a.com/?a=&a&b"),
    ("http://a.com/?a=1&&b=2&", "http://a.com/?a=1&b=2"),
    ("http://a.com/?B=1&a=1", "http://a.com/?B=1&a=1"),
    # empty path, userinfo, IPv6
    ("http://a.com?x=1", "http://a.com/?x=1"),
    ("http://User:PW@A.com:80/", "http://User:PW@a.com/"),
    ("http://a@b@c.com/", "http://a%40b@c.com/"),
    ("http://@a.com/", "http://a.com/"),
    ("http://[::1]:8080/x", "http://[::1]:8080/x"),
    ("http://[2001:DB8::A]/", "http://[2001:db8::a]/"),
    ("https://[::FFFF:1.2.3.4]:443", "https://[::ffff:1.2.3.4]/"),
    # a host's escapes are decoded, and a host that ends in a number is an IPv4 address
    # (WHATWG, browsers, w3lib 2.6)
    ("http://ex%41mple.COM/", "http://example.com/"),
    ("http://b%C3%BCcher.de/", "http://xn--bcher-kva.de/"),
    ("http://0/", "http://0.0.0.0/"),
    ("http://0X7F.1:8080/a", "http://127.0.0.1:8080/a"),
    ("http://0177.0.0.1./", "http://127.0.0.1/"),
    ("http://4294967295/", "http://255.255.255.255/"),
    ("http://x.0x1g/", "http://x.0x1g/"),
    # whitespace handling (WHATWG): trim ends, drop tabs/newlines
    ("  http://a.com/x \n", "http://a.com/x"),
    ("http://exa\tmple.com/a\nb", "http://example.com/ab"),
]


@pytest.mark.parametrize(("url", "expected"), NORMALIZE_CASES)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected
    assert normalize_url(url, strict=True) == expected
    assert normalize_url(expected) == expected


def test_normalize_custom_tracking_params() -> None:
    url = "http://a.com/?utm_source=1&ref=2&refx=3&x=4"
    assert normalize_url(url, tracking_params=("ref",)) == "http://a.com/?refx=3&utm_source=1&x=4"
    assert normalize_url(url, tracking_params=["REF*"]) == "http://a.com/?utm_source=1&x=4"
    assert normalize_url(url, tracking_params="ref") == "http://a.com/?refx=3&utm_source=1&x=4"
    assert normalize_url(url, tracking_params=()) == "http://a.com/?ref=2&refx=3&utm_source=1&x=4"


BAD_INPUT = [
    "mailto:someone@example.com",
    "javascript:void(0)",
    "data:text/html,<b>hi</b>",
    "ftp://example.com/file.txt",
    "file:///etc/passwd",
    "/relative/path?x=1",
    "//example.com/protocol-relative",
    "example.com/no-scheme",
    "",
    "   ",
    "http:",
    "http://",
    "http:/example.com/one-slash",
    "http:example.com",
    "http://:80/",
    "http://@/",
    "http://[::1/",
    "http://[::1]x/",
    "http://[not-an-ip]/",
    "http://[:::::]/",
    "http://[1:2:3:4:5:6:7:8:9]/",
    "http://example.com:99999/",
    "http://example.com:abc/",
    "http://example.com:8o/",
    "http://example.com:²/",
    "http://example.com:80:80/",
    "http://exa mple.com/",
    "http://a..ü.com/",
    "http://ex%mple.com/",
    "http://ex%2Fmple.com/",
    "http://a.0/",
    "http://300.0/",
    "http://08/",
    "http://1.2.3.4.5/",
    "http://4294967296/",
    "http://\ud800.com/",
    "http://" + "ü" * 70 + ".com/",
]


@pytest.mark.parametrize("url", BAD_INPUT)
def test_bad_input_unchanged_and_strict_raises(url: str) -> None:
    assert normalize_url(url) == url
    assert url_key(url) == url
    with pytest.raises(InvalidURL) as info:
        normalize_url(url, strict=True)
    assert str(info.value)  # a message the adapter can log
    with pytest.raises(InvalidURL):
        url_key(url, strict=True)


@pytest.mark.parametrize("value", [None, b"http://a.com/", 42])
def test_non_string_input(value: object) -> None:
    assert normalize_url(value) is value  # type: ignore[arg-type]
    with pytest.raises(InvalidURL):
        normalize_url(value, strict=True)  # type: ignore[arg-type]


def test_strict_message_is_truncated_for_huge_input() -> None:
    with pytest.raises(InvalidURL) as info:
        normalize_url("ftp://" + "x" * 10_000, strict=True)
    assert len(str(info.value)) < 300


GARBAGE = [
    "http://a.com/?" + "&".join(f"k{i}=v{i}" for i in range(1500)),  # ~10 KB
    "http://a.com/?q=" + "é" * 10_000,
    "http://a.com/%zz%%%1%g0%",
    "http://a.com/?%=%&%zz=%%",
    "http://a.com/\ud800\udfff/?x=\udc80",
    "http://a.com/\x00\x01\x1f\x7f",
    "http://a.com/?\x00=\x00",
    "http://a.com/" + "../" * 500,
    "http://" + "a." * 3000 + "com/",
    "http://[" + ":" * 200 + "]/",
    "\x00http://a.com/\x00",
]


@pytest.mark.parametrize("url", GARBAGE)
def test_garbage_never_raises_and_is_stable(url: str) -> None:
    norm = normalize_url(url)
    key = url_key(url)
    assert normalize_url(norm) == norm
    assert url_key(key) == key
    assert url_key(norm) == key
    assert norm.isascii() or norm == url  # either normalized, or left alone


def test_huge_query_is_sorted() -> None:
    url = "http://a.com/?" + "&".join(f"k{i:04d}=v" for i in reversed(range(1500)))
    norm = normalize_url(url)
    keys = [p.split("=")[0] for p in urlsplit(norm).query.split("&")]
    assert keys == sorted(keys) and len(keys) == 1500


def test_lone_surrogate_path_is_encoded() -> None:
    assert normalize_url("http://a.com/\ud800") == "http://a.com/%ED%A0%80"


KEY_CASES = [
    # builds on normalize_url
    ("HTTP://A.com:80/x?utm_source=1&b=2&a=1#f", "http://a.com/x?a=1&b=2"),
    # session ids in the query (case-insensitive, prefix)
    ("http://a.com/x?jsessionid=1&id=2", "http://a.com/x?id=2"),
    ("http://a.com/x?PHPSESSID=1&SID=2&sessionid=3&cfid=4&CFTOKEN=5", "http://a.com/x"),
    ("http://a.com/x?ASPSESSIONIDQQ=1&aspsessionid=2&y=1", "http://a.com/x?y=1"),
    ("http://a.com/x?sidebar=1", "http://a.com/x?sidebar=1"),
    # session ids in path parameters
    ("http://a.com/a;jsessionid=ABC", "http://a.com/a"),
    ("http://a.com/a;jsessionid=ABC?x=1", "http://a.com/a?x=1"),
    ("http://a.com/a;JSESSIONID=abc/b/c", "http://a.com/a/b/c"),
    ("http://a.com/a;v=1;jsessionid=2;w=3/b", "http://a.com/a;v=1;w=3/b"),
    ("http://a.com/a;phpsessid/b;sid=1", "http://a.com/a/b"),
    ("http://a.com/a;v=1", "http://a.com/a;v=1"),
    ("http://a.com/x/..;jsessionid=1/y", "http://a.com/y"),
    # trailing slash
    ("http://a.com/a/", "http://a.com/a"),
    ("http://a.com/a//", "http://a.com/a"),
    ("http://a.com/", "http://a.com/"),
    ("http://a.com", "http://a.com/"),
    ("http://a.com/a/?x=1", "http://a.com/a?x=1"),
    # directory index
    ("http://a.com/dir/index.html", "http://a.com/dir"),
    ("http://a.com/dir/index.htm?x=1", "http://a.com/dir?x=1"),
    ("http://a.com/index.php", "http://a.com/"),
    ("http://a.com/dir/Default.aspx", "http://a.com/dir"),
    ("http://a.com/dir/INDEX.HTML/", "http://a.com/dir"),
    ("http://a.com/d/index.html/index.html", "http://a.com/d"),
    ("http://a.com/dir/index.html5", "http://a.com/dir/index.html5"),
    ("http://a.com/dir/myindex.html", "http://a.com/dir/myindex.html"),
    # path case kept
    ("http://a.com/A/B", "http://a.com/A/B"),
    # invalid input passes through
    ("mailto:x@y.z", "mailto:x@y.z"),
]


@pytest.mark.parametrize(("url", "expected"), KEY_CASES)
def test_url_key(url: str, expected: str) -> None:
    assert url_key(url) == expected
    assert url_key(expected) == expected
    assert url_key(normalize_url(url)) == expected


def test_url_key_options() -> None:
    url = "http://a.com/dir/index.html;jsessionid=1?sid=2&x=1"
    assert url_key(url) == "http://a.com/dir?x=1"
    assert url_key(url, directory_indexes=()) == "http://a.com/dir/index.html?x=1"
    assert url_key(url, session_params=()) == "http://a.com/dir/index.html;jsessionid=1?sid=2&x=1"
    assert url_key(url, session_params=("SID",)) == "http://a.com/dir/index.html;jsessionid=1?x=1"
    assert url_key("http://a.com/?utm_source=1", tracking_params=()) == "http://a.com/?utm_source=1"


def test_url_key_is_absolute_url() -> None:
    key = url_key("https://User@Bücher.de:8443/A/index.html?b=1&a=2#x")
    assert key == "https://User@xn--bcher-kva.de:8443/A?a=2&b=1"
    parts = urlsplit(key)
    assert (parts.scheme, parts.hostname, parts.port) == ("https", "xn--bcher-kva.de", 8443)


def test_bad_pattern_config_raises_even_when_lenient() -> None:
    with pytest.raises((TypeError, AttributeError)):
        normalize_url("http://a.com/", tracking_params=[1])  # type: ignore[list-item]


def test_url_key_rejects_bad_host_rules_type() -> None:
    with pytest.raises(TypeError):
        url_key("http://a.com/", 42)  # type: ignore[arg-type]


# --- hypothesis ---------------------------------------------------------------

_SEGMENTS = st.one_of(
    st.sampled_from([
        ".", "..", "", "index.html", "Default.ASPX", "a;jsessionid=X", "..;sid=1", ";x=1",
        "%2e", "%2E%2e", "%2F", "%7e", "%zz", "%", "%%341", "é", "a b", "\\", "%41", "A",
    ]),
    st.text(alphabet="aZ09-._~!$&'()*+,;=:@%/?[]|^{}é€ \\\x00", max_size=8),
)
_KEYS = st.one_of(
    st.sampled_from([
        "a", "b", "A", "utm_source", "UTM_Medium", "sid", "jsessionid", "id", "page",
        "sort", "x%5Fy", "%75tm_x", "", "é", "%", "+", "k%3D",
    ]),
    st.text(alphabet="abAB_%=+é", max_size=5),
)
_PARAMS = st.builds(
    lambda k, eq, v: k + eq + v,
    _KEYS,
    st.sampled_from(["", "="]),
    st.text(alphabet="ab1=%é +/?&;'", max_size=6),
)
_HOSTS = st.one_of(
    st.sampled_from([
        "example.com", "EXAMPLE.org", "bücher.de", "xn--bcher-kva.de", "例え.テスト",
        "[::1]", "[2001:DB8::1]", "[::1", "127.0.0.1", "a..b", "", "ex ample.com",
        "www.Example.CO.uk.", "shop.example.com", "x.docs.example.org",
    ]),
    st.from_regex(r"[a-zA-Z0-9\-]{1,8}(\.[a-zA-Z0-9\-]{1,8}){0,3}", fullmatch=True),
)
URLISH = st.builds(
    lambda scheme, sep, user, host, port, segs, q, query, frag: (
        scheme + sep + user + host + port + "/".join(["", *segs]) + q + "&".join(query) + frag
    ),
    st.sampled_from(["http", "https", "HTTP", "HtTpS", "ftp", "mailto", ""]),
    st.sampled_from(["://", ":\\\\", ":/", ":", "//"]),
    st.sampled_from(["", "user@", "user:pw@", "a@b@", ":@"]),
    _HOSTS,
    st.sampled_from(["", ":80", ":443", ":8080", ":", ":99999", ":abc", ":0080"]),
    st.lists(_SEGMENTS, max_size=6),
    st.sampled_from(["", "?"]),
    st.lists(_PARAMS, max_size=8),
    st.sampled_from(["", "#", "#frag", "#a?b=1"]),
)
RULES = st.sampled_from([
    None,
    HostRules.from_mapping({
        "shop.example.com": {"allow_params": ["id", "page"]},
        "*.example.org": {"trailing_slash": "keep", "path_case": "insensitive"},
        "example.com": {"drop_params": ["sort*", "b"], "directory_index": False},
    }),
    {"*.com": {"path_case": "insensitive", "trailing_slash": "keep", "allow_params": []}},
])
ANY_TEXT = st.one_of(URLISH, st.text(max_size=60))


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
def test_normalize_idempotent(url: str) -> None:
    norm = normalize_url(url)
    assert normalize_url(norm) == norm


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT, RULES)
def test_url_key_idempotent_and_normalize_invariant(url: str, rules: object) -> None:
    key = url_key(url, rules)  # type: ignore[arg-type]
    assert url_key(key, rules) == key  # type: ignore[arg-type]
    assert url_key(normalize_url(url), rules) == key  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_text(text: str) -> None:
    assert isinstance(normalize_url(text), str)
    assert isinstance(url_key(text), str)


@settings(max_examples=300, deadline=None)
@given(URLISH)
def test_strict_agrees_with_lenient(url: str) -> None:
    lenient = normalize_url(url)
    try:
        assert normalize_url(url, strict=True) == lenient
    except InvalidURL:
        assert lenient == url  # only unchanged input may be rejected


@settings(max_examples=300, deadline=None)
@given(URLISH)
def test_normalized_output_is_a_clean_absolute_url(url: str) -> None:
    try:
        norm = normalize_url(url, strict=True)
    except InvalidURL:
        return
    parts = urlsplit(norm)
    assert norm.isascii()
    assert parts.scheme in ("http", "https") and parts.netloc and not parts.fragment
    assert parts.path.startswith("/")
    assert ("?" in norm) == bool(parts.query)  # no empty "?"
    # Scrapy passes request URLs through safe_url_string(); ours must survive it.
    if "@" not in parts.netloc:
        assert safe_url_string(norm) == norm
    key = url_key(norm)
    assert urlsplit(key).scheme in ("http", "https") and urlsplit(key).netloc
