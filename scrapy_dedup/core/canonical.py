"""Declared canonical URLs: ``Link: <...>; rel="canonical"`` and ``<link rel=canonical>``.

Everything here is a cheap scan, not a parse: it runs on the reactor thread
for every response.  When a response declares a canonical both in an HTTP
``Link`` header and in the HTML, the header wins: it is set by the server (or
CDN) configuration, cannot be injected by page content, and is the only one
available for non-HTML documents such as PDFs.
"""

from __future__ import annotations

import codecs
import html
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

from .urls import InvalidURL, normalize_url

__all__ = [
    "SCOPES",
    "CanonicalLink",
    "canonical_from_html",
    "canonical_from_link_header",
    "canonical_scope_check",
    "resolve_canonical",
]

SCOPES = ("host", "domain", "any", "off")

# Only the document head is scanned, and never more than this many bytes.
HEAD_LIMIT = 256 * 1024


@dataclass(frozen=True, slots=True)
class CanonicalLink:
    """A resolved, normalized canonical URL and where it was declared."""

    url: str
    source: str  # "header" or "html"


# --- Link header (RFC 8288) -------------------------------------------------

# One link-value: <target> then parameters up to the next top-level comma.
# Quoted strings may hold commas and semicolons; "<" in params starts a new link.
_LINK_VALUE = re.compile(r'<([^<>]*)>((?:[^,"<]|"(?:[^"\\]|\\.)*"?)*)', re.S)
_LINK_PARAM = re.compile(
    r';\s*([^\s=;,"]+)\s*(?:=\s*(?:"((?:[^"\\]|\\.)*)"?|([^\s;,"]*)))?', re.S
)
_QUOTED_PAIR = re.compile(r"\\(.)", re.S)


def _header_strings(values: object) -> list[str]:
    if values is None:
        return []
    if isinstance(values, (str, bytes, bytearray)):
        values = [values]
    elif not isinstance(values, Iterable):
        return []
    out = []
    for value in values:
        if isinstance(value, (bytes, bytearray)):
            out.append(bytes(value).decode("latin-1"))  # header octets, never fails
        elif isinstance(value, str):
            out.append(value)
    return out


def _rel_of(params: str) -> str | None:
    """The first ``rel`` parameter's value (RFC 8288: later ones are ignored)."""
    for match in _LINK_PARAM.finditer(params):
        if match.group(1).lower() == "rel":
            quoted, token = match.group(2), match.group(3)
            return _QUOTED_PAIR.sub(r"\1", quoted) if quoted is not None else (token or "")
    return None


def canonical_from_link_header(values: str | bytes | Iterable[str | bytes] | None) -> str | None:
    """Return the first ``rel=canonical`` target of one or more Link headers.

    The target is returned as written (unresolved); empty targets are skipped.

    >>> canonical_from_link_header('<https://a.example/x,y>; rel="preload canonical"')
    'https://a.example/x,y'
    >>> canonical_from_link_header([b'</style.css>; rel=stylesheet, </p/1>; REL=Canonical'])
    '/p/1'
    >>> canonical_from_link_header('</next>; rel="next"') is None
    True
    """
    for header in _header_strings(values):
        for match in _LINK_VALUE.finditer(header):
            rel = _rel_of(match.group(2))
            target = match.group(1).strip()
            if rel and target and "canonical" in rel.lower().split():
                return target
    return None


# --- HTML head --------------------------------------------------------------

# Tokens that matter in a head, in document order.  Comments and script/style
# bodies are matched whole so a "<link>" inside them is skipped.  Kept linear
# on hostile input: tag bodies are "[^<>]*", so an unclosed tag fails at the
# next "<" or ">" (the price: a ">" inside a quoted attribute value ends the
# tag early).  Kept fast: the shared leading "<" lets the engine jump from "<"
# to "<", and comment/script bodies are skipped a run of characters at a time.
_HEAD_TOKENS = (
    r"<(?:!--(?:[^-]+|-)*?(?:-->|\Z)"
    r"|(?P<raw>script|style)\b[^<>]*>(?:[^<]+|<)*?(?:</(?P=raw)\s*>|\Z)"
    r"|(?P<end>/head\s*>|body[\s>/])"
    r"|(?P<tag>link|base)\b(?P<attrs>[^<>]*)>)"
)
_HEAD_STR = re.compile(_HEAD_TOKENS, re.I | re.S)
_HEAD_BYTES = re.compile(_HEAD_TOKENS.encode("ascii"), re.I | re.S)
_ATTR = r"""([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?"""
_ATTR_STR = re.compile(_ATTR)
_ATTR_BYTES = re.compile(_ATTR.encode("ascii"))


def _attributes(raw: str | bytes, encoding: str) -> dict[str, str]:
    """Parse a tag's attributes; the first occurrence of a name wins (HTML)."""
    attrs: dict[str, str] = {}
    pairs: Iterator[tuple[str, str]]
    if isinstance(raw, bytes):
        pairs = ((m.group(1).decode("latin-1"), _decode(m.group(2) or m.group(3) or m.group(4) or b"", encoding))
                 for m in _ATTR_BYTES.finditer(raw))
    else:
        pairs = ((m.group(1), m.group(2) or m.group(3) or m.group(4) or "") for m in _ATTR_STR.finditer(raw))
    for name, value in pairs:
        name = name.lower()
        if name not in attrs:
            attrs[name] = value
    return attrs


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding, "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


def _ascii_compatible(encoding: str) -> bool:
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return True  # _decode falls back to UTF-8
    return not name.startswith(("utf-16", "utf-32"))


def canonical_from_html(body: bytes | str, encoding: str = "utf-8") -> tuple[str | None, str | None]:
    """Return ``(canonical_href, base_href)`` declared in the document head.

    Hrefs are returned unresolved, entity-decoded and stripped.  The scan
    stops at ``</head>``, ``<body`` or after 256 KiB; links inside comments,
    scripts and styles are ignored.

    >>> canonical_from_html(b'<HEAD><Link HREF=/a?x=1&amp;y=2 rel="alternate Canonical">'
    ...                     b'<base href="https://cdn.example/">')
    ('/a?x=1&y=2', 'https://cdn.example/')
    >>> canonical_from_html('<head><!-- <link rel=canonical href=/old> --></head>'
    ...                     '<link rel=canonical href=/in-body>')
    (None, None)
    """
    if isinstance(body, (bytes, bytearray)):
        data: str | bytes = bytes(body[:HEAD_LIMIT])
        if not _ascii_compatible(encoding) or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            data = _decode(data, encoding)  # type: ignore[arg-type]
    elif isinstance(body, str):
        data = body[:HEAD_LIMIT]
    else:
        return None, None
    # Scanning bytes directly avoids decoding the whole head; hrefs are decoded
    # one by one.  UTF-16/32 bodies are decoded first since "<" is not one byte.
    matches: Iterator[re.Match[bytes]] | Iterator[re.Match[str]] = (
        _HEAD_BYTES.finditer(data) if isinstance(data, bytes) else _HEAD_STR.finditer(data)
    )
    canonical = base = None
    for match in matches:
        if match.group("end") is not None:
            break  # </head> or <body: the head is over
        tag = match.group("tag")
        if tag is None:
            continue  # comment, script or style
        attrs = _attributes(match.group("attrs"), encoding)
        href = attrs.get("href")
        if href is None:
            continue
        href = html.unescape(href).strip()
        if not href:
            continue
        if tag.lower() in ("base", b"base"):
            if base is None:
                base = href
        elif canonical is None and "canonical" in attrs.get("rel", "").lower().split():
            canonical = href
        if canonical is not None and base is not None:
            break
    return canonical, base


def _join(base: str, href: str) -> str | None:
    try:
        return urljoin(base, href)
    except ValueError:  # e.g. a malformed IPv6 literal in the base
        return None


def resolve_canonical(
    page_url: str,
    body: bytes | str | None,
    headers_link_values: str | bytes | Iterable[str | bytes] | None,
    encoding: str = "utf-8",
) -> CanonicalLink | None:
    """Find the declared canonical, resolve it and pass it through normalize_url.

    The ``Link`` header wins over the HTML.  An HTML href is resolved against
    ``<base href>`` (itself resolved against the page URL), a header target
    against the page URL.  The result is not checked for scope: see
    :func:`canonical_scope_check`.

    >>> resolve_canonical("https://ex.com/a/b?utm_source=x",
    ...                   b'<head><base href="/docs/"><link rel=canonical href="../P?b=1&a=2">', None)
    CanonicalLink(url='https://ex.com/P?a=2&b=1', source='html')
    >>> resolve_canonical("https://ex.com/a", b'<link rel=canonical href=/html>', '</hdr>; rel=canonical')
    CanonicalLink(url='https://ex.com/hdr', source='header')
    >>> resolve_canonical("https://ex.com/a", b"<p>no head</p>", None) is None
    True
    """
    target = canonical_from_link_header(headers_link_values)
    if target is not None:
        resolved = _join(page_url, target)
        return CanonicalLink(normalize_url(resolved), "header") if resolved else None
    if not body:
        return None
    href, base_href = canonical_from_html(body, encoding)
    if href is None:
        return None
    base = (_join(page_url, base_href) if base_href else page_url) or page_url
    resolved = _join(base, href)
    return CanonicalLink(normalize_url(resolved), "html") if resolved else None


# --- Scope ------------------------------------------------------------------

# Second-level labels under which registrations happen in many ccTLDs
# (example.co.uk, example.com.au, example.ac.jp ...).
_COMMON_SLDS = frozenset({"co", "com", "org", "net", "ac", "gov", "edu"})
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")


def _registrable_domain(host: str) -> str:
    """Approximate the registrable domain without a public-suffix list.

    Last two labels, or last three when the TLD has two letters and the
    second-level label is a common one (co, com, org, net, ac, gov, edu).
    IP literals are their own domain.

    >>> _registrable_domain("www.shop.example.co.uk"), _registrable_domain("a.b.example.com")
    ('example.co.uk', 'example.com')
    """
    host = host.rstrip(".")
    if host.startswith("[") or _IPV4.fullmatch(host):
        return host
    labels = host.split(".")
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in _COMMON_SLDS:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def _host_port(normalized_url: str) -> tuple[str, str]:
    # normalize_url output always has "scheme://authority/": no parser needed.
    netloc = normalized_url.partition("://")[2].partition("/")[0].rpartition("@")[2]
    if netloc.startswith("["):
        end = netloc.find("]") + 1
        return netloc[:end], netloc[end:]
    host, _, port = netloc.partition(":")
    return host, port


def canonical_scope_check(page_url: str, canonical_url: str, scope: str) -> str | None:
    """Return None when the canonical may be trusted, else a short reason.

    Reasons: ``"disabled"`` (scope ``"off"``), ``"scheme"`` (not http/https),
    ``"invalid"`` (unparsable), ``"off_scope"`` (outside the scope).  Scope
    ``"host"`` compares host and port after normalization (so http -> https on
    default ports is in scope); ``"domain"`` compares approximate registrable
    domains (see ``_registrable_domain``); ``"any"`` only checks validity.

    >>> canonical_scope_check("https://www.ex.com/a", "http://WWW.ex.com:80/b", "host") is None
    True
    >>> canonical_scope_check("https://www.ex.com/a", "https://blog.ex.com/b", "host")
    'off_scope'
    >>> canonical_scope_check("https://www.ex.com/a", "https://blog.ex.com/b", "domain") is None
    True
    >>> canonical_scope_check("https://www.ex.com/a", "file:///etc/passwd", "any")
    'scheme'
    """
    if scope not in SCOPES:
        raise ValueError(f"DEDUP_CANONICAL_SCOPE: unknown scope {scope!r} (expected one of {', '.join(SCOPES)})")
    if scope == "off":
        return "disabled"
    scheme = canonical_url.partition(":")[0].strip().lower() if ":" in canonical_url else ""
    if scheme not in ("http", "https"):
        return "scheme" if _SCHEME.fullmatch(scheme) else "invalid"
    try:
        canonical = normalize_url(canonical_url, strict=True)
        page = normalize_url(page_url, strict=True) if scope != "any" else ""
    except InvalidURL:
        return "invalid"
    if scope == "any":
        return None
    canon_host, canon_port = _host_port(canonical)
    page_host, page_port = _host_port(page)
    if scope == "host":
        same = (canon_host, canon_port) == (page_host, page_port)
    else:
        same = _registrable_domain(canon_host) == _registrable_domain(page_host)
    return None if same else "off_scope"
