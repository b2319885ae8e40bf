"""URL normalization (what is fetched) and URL keys (what is deduplicated).

:func:`normalize_url` applies only transformations that leave the fetched
resource unchanged; :func:`url_key` adds per-host policy on top of it
(session ids, trailing slashes, directory indexes, parameter allowlists).
Both are pure, idempotent and never raise unless ``strict=True``.

Parameter-name patterns (tracking, session, ``drop_params``) are names
compared case-insensitively; a trailing ``*`` makes a prefix match.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

from .hostrules import HostRule, HostRules

__all__ = [
    "DEFAULT_DIRECTORY_INDEXES",
    "DEFAULT_SESSION_PARAMS",
    "DEFAULT_TRACKING_PARAMS",
    "InvalidURL",
    "UrlRules",
    "normalize_url",
    "url_key",
]

DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*", "gclid", "fbclid", "msclkid", "mc_cid", "mc_eid",
    "_ga", "igshid", "yclid", "pk_*", "hsa_*",
)
DEFAULT_SESSION_PARAMS: tuple[str, ...] = (
    "jsessionid", "phpsessid", "sid", "sessionid", "aspsessionid*", "cfid", "cftoken",
)
DEFAULT_DIRECTORY_INDEXES: tuple[str, ...] = ("index.html", "index.htm", "index.php", "default.aspx")

HostRulesLike = HostRules | Mapping[str, Any] | str | bytes | None
# (exact lowercased names, lowercased prefixes) built from a pattern list
_Matcher = tuple[frozenset[str], tuple[str, ...]]
_DEFAULT_RULE = HostRule()


class InvalidURL(ValueError):
    """Raised by :func:`normalize_url` / :func:`url_key` in strict mode only."""


_DEFAULT_PORTS = {"http": "80", "https": "443"}
# WHATWG: leading/trailing C0 controls and spaces are stripped, tabs and
# newlines anywhere are removed (browsers and w3lib do the same).
_C0_SPACE = "".join(map(chr, range(0x21)))
_TAB_NL = str.maketrans("", "", "\t\n\r")
# "\" ends the authority of http(s) URLs like "/" (WHATWG, w3lib).
_AUTHORITY_END = re.compile(r"[/\\?#]")
_HOST_OK = re.compile(r"[a-z0-9\-._~!$&'()*+,;=]+")
_IPV6_OK = re.compile(r"[0-9a-f:.]+(?:%25[a-z0-9\-._~%]+)?|v[0-9a-f]+\.[a-z0-9\-._~!$&'()*+,;=:]+")

# RFC 3986 characters allowed raw in each component; everything else is
# percent-encoded.  "'" is encoded in the query as browsers and w3lib do, so
# that Scrapy's safe_url_string() leaves our output untouched.
_UNRESERVED = r"A-Za-z0-9\-._~"
_PATH_SAFE = _UNRESERVED + r"!$&'()*+,;=:@/"
_QUERY_SAFE = _UNRESERVED + r"!$&()*+,;=:@/?"
_USERINFO_SAFE = _UNRESERVED + r"!$&'()*+,;=:"


def _component_fixer(safe: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    # The first regex is the fast path (nothing to do); the second finds escapes
    # to normalize and characters to encode, including a lone "%".
    return re.compile(f"[{safe}]*"), re.compile(f"%[0-9A-Fa-f]{{2}}|[^{safe}]")


_PATH_OK, _PATH_FIX = _component_fixer(_PATH_SAFE)
_QUERY_OK, _QUERY_FIX = _component_fixer(_QUERY_SAFE)
_USERINFO_OK, _USERINFO_FIX = _component_fixer(_USERINFO_SAFE)
_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


def _escape_table() -> dict[str, str]:
    """Map every ``%xx`` spelling to its normal form (decoded if unreserved)."""
    unreserved = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    digits = "0123456789abcdefABCDEF"
    table = {}
    for hi in digits:
        for lo in digits:
            char = chr(int(hi + lo, 16))
            table["%" + hi + lo] = char if char in unreserved else "%" + (hi + lo).upper()
    return table


_ESCAPES = _escape_table()


@lru_cache(maxsize=1024)
def _encode_char(char: str) -> str:
    # surrogatepass: a lone surrogate must not make us raise.
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


def _fix_match(match: re.Match[str]) -> str:
    text = match.group()
    return _ESCAPES[text] if len(text) == 3 else _encode_char(text)


def _fix(text: str, ok: re.Pattern[str], fix: re.Pattern[str]) -> str:
    if ok.fullmatch(text):
        return text
    return fix.sub(_fix_match, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path.

    >>> _remove_dot_segments("/a/b/../c/./d/..")
    '/a/c/'
    >>> _remove_dot_segments("/../../x")
    '/x'
    """
    segments = path.split("/")
    out: list[str] = []
    for seg in segments[1:]:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    if segments[-1] in (".", ".."):
        out.append("")  # "/a/b/.." names the directory "/a/"
    return "/" + "/".join(out)


def _valid_ipv6(literal: str) -> bool:
    if not _IPV6_OK.fullmatch(literal):
        return False
    if literal.startswith("v"):
        return True  # IPvFuture: nothing more to check
    try:
        ipaddress.IPv6Address(literal.partition("%25")[0])
    except ValueError:
        return False
    return True


@lru_cache(maxsize=4096)
def _normalize_host(host: str) -> str | None:
    """Lowercase and IDNA-encode a host; None when it is not a valid host."""
    if "%" in host:
        # WHATWG, browsers and w3lib 2.6 decode a host's escapes: ex%41mple.com is example.com
        host = unquote(host)
    host = host.lower()
    if host.startswith("["):
        return host if host.endswith("]") and _valid_ipv6(host[1:-1]) else None
    if not host.isascii():
        try:
            # Stdlib codec (IDNA 2003 + nameprep), the same one w3lib uses, so
            # the host we produce is the host Scrapy connects to.
            host = host.encode("idna").decode("ascii")
        except (UnicodeError, ValueError):
            return None
    if not _HOST_OK.fullmatch(host):
        return None
    return _ipv4_host(host) if host[-1] in _IPV4_LAST else host


# A host that ends in a number is an IPv4 address to browsers, getaddrinfo() and w3lib 2.6+
# (WHATWG): "0" is 0.0.0.0, "0x7f.1" is 127.0.0.1, and "a.0" is no host at all.
_IPV4_LAST = frozenset("0123456789abcdefx.")
_IPV4_NUMBER = re.compile(r"0x([0-9a-f]*)|(0[0-7]*)|([1-9][0-9]*)")


def _ipv4_host(host: str) -> str | None:
    """The dotted-quad form of a host that ends in a number, None if it is no valid address.

    >>> _ipv4_host("0x7f.1"), _ipv4_host("010.0.0.1."), _ipv4_host("example.org")
    ('127.0.0.1', '8.0.0.1', 'example.org')
    >>> _ipv4_host("a.0"), _ipv4_host("1.256.0.0"), _ipv4_host("1.2.3.4.5")
    (None, None, None)
    """
    labels = host.split(".")
    if len(labels) > 1 and not labels[-1]:
        labels.pop()
    last = labels[-1]
    if not (last.isdigit() or last.startswith("0x") and _IPV4_NUMBER.fullmatch(last)):
        return host  # a name
    if len(labels) > 4:
        return None
    matches = [_IPV4_NUMBER.fullmatch(label) for label in labels]
    if None in matches:
        return None
    numbers = [_ipv4_number(*match.groups()) for match in matches if match]
    *leading, final = numbers
    if any(n > 255 for n in leading) or final >= 256 ** (5 - len(numbers)):
        return None
    address = final + sum(n << 8 * (3 - i) for i, n in enumerate(leading))
    return str(ipaddress.IPv4Address(address))


def _ipv4_number(hexadecimal: str | None, octal: str | None, decimal: str | None) -> int:
    # hexadecimal after "0x" ("0x" alone is 0), octal after any other leading "0", else decimal
    if hexadecimal is not None:
        return int(hexadecimal or "0", 16)
    return int(octal, 8) if octal is not None else int(decimal or "0")


@lru_cache(maxsize=256)
def _matcher(patterns: tuple[str, ...]) -> _Matcher:
    """Split patterns into exact names and prefixes, all lowercased."""
    exact = frozenset(p.lower() for p in patterns if not p.endswith("*"))
    prefixes = tuple(p[:-1].lower() for p in patterns if p.endswith("*"))
    return exact, prefixes


def _as_patterns(patterns: Any) -> tuple[str, ...]:
    if isinstance(patterns, str):
        return (patterns,)  # a bare string is one pattern, not its characters
    return tuple(patterns or ())


def _is_match(name: str, matcher: _Matcher) -> bool:
    name = name.lower()
    return name in matcher[0] or (bool(matcher[1]) and name.startswith(matcher[1]))


# (scheme, "userinfo@host:port", host, path, ((name, "name=value"), ...))
_Parts = tuple[str, str, str, str, tuple[tuple[str, str], ...]]


def _parse_port(port: str, scheme: str) -> str | None:
    if not port:
        return ""  # "http://h:/" has an empty port, i.e. the default one
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        return None
    port = str(int(port))
    return "" if port == _DEFAULT_PORTS[scheme] else ":" + port


def _split_authority(authority: str, scheme: str) -> tuple[str, str] | str:
    """Return ``(normalized authority, host)`` or an error message."""
    userinfo, _, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        end = hostport.find("]") + 1
        host, rest = hostport[:end], hostport[end:]
        if not end or (rest and not rest.startswith(":")):
            return "invalid IPv6 host"
        port = rest[1:]
    else:
        host, _, port = hostport.partition(":")
    norm_host = _normalize_host(host) if host else None
    if norm_host is None:
        return "invalid or missing host"
    norm_port = _parse_port(port, scheme)
    if norm_port is None:
        return "invalid port"
    if userinfo:
        return _fix(userinfo, _USERINFO_OK, _USERINFO_FIX) + "@" + norm_host + norm_port, norm_host
    return norm_host + norm_port, norm_host


def _normalize_path(path: str) -> str:
    if not path:
        return "/"
    if "\\" in path:
        path = path.replace("\\", "/")
    path = _fix(path, _PATH_OK, _PATH_FIX)
    if "/." in path:  # cheap test; most paths have no dot segments
        path = _remove_dot_segments(path)
    return path


def _split_query(query: str, tracking: _Matcher) -> tuple[tuple[str, str], ...]:
    query = _fix(query, _QUERY_OK, _QUERY_FIX)
    params = []
    for piece in query.split("&"):
        if piece:  # "a=1&&b=2": empty pieces carry nothing
            name = piece.partition("=")[0]
            if not _is_match(name, tracking):
                params.append((name, piece))
    if len(params) > 1:
        params.sort(key=_first)  # stable: repeated keys keep their order
    return tuple(params)


def _first(pair: tuple[str, str]) -> str:
    return pair[0]


# Small: it serves the common "normalize, then key the same URL" sequence,
# and entries can be large (long query strings).
@lru_cache(maxsize=1024)
def _parse(url: str, tracking: tuple[str, ...]) -> _Parts | str:
    """Normalize *url* into parts, or return why it cannot be normalized."""
    if url[:1] <= " " or url[-1:] <= " ":
        url = url.strip(_C0_SPACE)
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.translate(_TAB_NL)
    head = url[:6].lower()
    if head.startswith("https:"):
        scheme, rest = "https", url[6:]
    elif head.startswith("http:"):
        scheme, rest = "http", url[5:]
    else:
        return "not an http(s) URL"
    if rest[:1] not in ("/", "\\") or rest[1:2] not in ("/", "\\"):
        return "missing '//' authority"
    rest = rest[2:]
    end = _AUTHORITY_END.search(rest)
    authority, tail = (rest[: end.start()], rest[end.start() :]) if end else (rest, "")
    split = _split_authority(authority, scheme)
    if isinstance(split, str):
        return split
    tail = tail.partition("#")[0]
    path, _, query = tail.partition("?")
    params = _split_query(query, _matcher(tracking)) if query else ()
    return scheme, split[0], split[1], _normalize_path(path), params


def _parse_checked(url: Any, tracking_params: Iterable[str], strict: bool) -> _Parts | None:
    if not isinstance(url, str):
        if strict:
            raise InvalidURL(f"expected a str URL, got {type(url).__name__}")
        return None
    patterns = _as_patterns(tracking_params)
    _matcher(patterns)  # a bad pattern list is a configuration error: raise it here
    try:
        parts = _parse(url, patterns)
    except Exception as exc:  # never raise in lenient mode, whatever the input
        parts = f"unparsable URL ({exc.__class__.__name__})"
    if isinstance(parts, str):
        if strict:
            shown = url if len(url) <= 200 else url[:200] + "..."
            raise InvalidURL(f"{parts}: {shown!r}")
        return None
    return parts


def _join(scheme: str, authority: str, path: str, params: Iterable[tuple[str, str]]) -> str:
    if params:
        return f"{scheme}://{authority}{path}?{'&'.join(p[1] for p in params)}"
    return f"{scheme}://{authority}{path}"


def normalize_url(url: str, *, tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS, strict: bool = False) -> str:
    """Return the URL to fetch: a normal form that names the same resource.

    >>> normalize_url("HTTP://Example.COM:80/a/./b/../c?b=2&utm_source=x&a=1&a=0#frag")
    'http://example.com/a/c?a=1&a=0&b=2'
    >>> normalize_url("https://bücher.de/%7euser/%2f%e2%82%ac?q=café")
    'https://xn--bcher-kva.de/~user/%2F%E2%82%AC?q=caf%C3%A9'
    >>> normalize_url("http://user:pw@[::1]:8080?")
    'http://user:pw@[::1]:8080/'
    >>> normalize_url("mailto:someone@example.com")
    'mailto:someone@example.com'
    >>> normalize_url("http://example.com:99999/", strict=True)
    Traceback (most recent call last):
    ...
    scrapy_dedup.core.urls.InvalidURL: invalid port: 'http://example.com:99999/'
    """
    parts = _parse_checked(url, tracking_params, strict)
    if parts is None:
        return url
    return _join(parts[0], parts[1], parts[3], parts[4])


def _coerce_rules(host_rules: HostRulesLike) -> HostRules | None:
    # a mapping or JSON text is validated on every call: pass a HostRules (or use
    # UrlRules, which also caches keys) where speed matters
    if host_rules is None or isinstance(host_rules, HostRules):
        return host_rules
    if isinstance(host_rules, (str, bytes, Mapping)):
        return HostRules.from_mapping(host_rules)
    raise TypeError(f"host_rules must be a HostRules, a mapping or None, got {type(host_rules).__name__}")


def _strip_session_path_params(path: str, session: _Matcher) -> str:
    """Drop ``;name=value`` path parameters whose name is a session id."""
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if ";" in seg:
            first, *params = seg.split(";")
            kept = [p for p in params if not _is_match(p.partition("=")[0], session)]
            if len(kept) != len(params):
                segments[i] = ";".join([first, *kept])
    return "/".join(segments)


def _trim_path(path: str, strip_slash: bool, indexes: frozenset[str]) -> str:
    # Loop: "/d/index.html/" and "/d/index.html/index.html" must reach a fixed
    # point in one call, or url_key would not be idempotent.
    while True:
        if strip_slash:
            path = path.rstrip("/") or "/"
        head, _, last = path.rpartition("/")
        if not indexes or last.lower() not in indexes:
            return path
        path = head + "/"


@lru_cache(maxsize=64)
def _index_set(indexes: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in indexes)


def _key_path(path: str, rule: HostRule, session: _Matcher, indexes: tuple[str, ...]) -> str:
    if ";" in path and (session[0] or session[1]):
        path = _strip_session_path_params(path, session)
        if "/." in path:  # "..;jsessionid=x" became a dot segment
            path = _remove_dot_segments(path)
    if rule.path_case == "insensitive":
        path = path.lower()
        if "%" in path:  # escapes stay uppercase, as normalize_url writes them
            path = _ESCAPE.sub(lambda m: m.group().upper(), path)
    index_set = _index_set(indexes) if rule.directory_index else frozenset()
    return _trim_path(path, rule.trailing_slash == "strip", index_set)


def _key_params(params: Iterable[tuple[str, str]], rule: HostRule, session: _Matcher) -> list[tuple[str, str]]:
    if rule.allow_params is not None:
        allow = rule.allow_params
        return [p for p in params if p[0].lower() in allow]
    drop = _matcher(rule.drop_params) if rule.drop_params else None
    return [
        p for p in params
        if not _is_match(p[0], session) and (drop is None or not _is_match(p[0], drop))
    ]


def url_key(
    url: str,
    host_rules: HostRulesLike = None,
    *,
    tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS,
    session_params: Iterable[str] = DEFAULT_SESSION_PARAMS,
    directory_indexes: Iterable[str] = DEFAULT_DIRECTORY_INDEXES,
    strict: bool = False,
) -> str:
    """Return the deduplication identity of *url* (itself an absolute URL).

    >>> url_key("https://Example.com/shop/;jsessionid=A1?sid=9&page=2&utm_medium=x")
    'https://example.com/shop?page=2'
    >>> url_key("http://example.com/docs/index.html")
    'http://example.com/docs'
    >>> rules = {"shop.example.com": {"allow_params": ["id"], "path_case": "insensitive"}}
    >>> url_key("http://shop.example.com/Item/?sort=asc&id=7&color=red", rules)
    'http://shop.example.com/item?id=7'
    >>> url_key("javascript:void(0)")
    'javascript:void(0)'
    """
    parts = _parse_checked(url, tracking_params, strict)
    if parts is None:
        return url
    scheme, authority, host, path, params = parts
    rules = _coerce_rules(host_rules)
    rule = rules.for_host(host) if rules else _DEFAULT_RULE
    session = _matcher(_as_patterns(session_params))
    path = _key_path(path, rule, session, _as_patterns(directory_indexes))
    kept = _key_params(params, rule, session) if params else ()
    return _join(scheme, authority, path, kept)


class UrlRules:
    """The URL rules of one crawl as one value: what is fetched, and what is deduplicated.

    The crawl builds it from its settings, records :meth:`to_json` in the store,
    and ``scrapy dedup lookup`` rebuilds it with :meth:`from_json`, so that a URL
    looked up later is keyed the way the crawl keyed it.

    >>> rules = UrlRules({"shop.example.com": {"allow_params": ["id"]}})
    >>> rules.normalize("HTTP://shop.example.com/item?sort=asc&id=7&utm_source=x")
    'http://shop.example.com/item?id=7&sort=asc'
    >>> rules.key("http://shop.example.com/item?sort=asc&id=7")
    'http://shop.example.com/item?id=7'
    >>> UrlRules.from_json(rules.to_json()) == rules
    True
    """

    __slots__ = ("host_rules", "tracking_params", "session_params", "_source", "key")

    def __init__(
        self,
        host_rules: Mapping[str, Any] | str | bytes | None = None,
        tracking_params: Iterable[str] = DEFAULT_TRACKING_PARAMS,
        session_params: Iterable[str] = DEFAULT_SESSION_PARAMS,
        *,
        setting: str = "DEDUP_HOST_RULES",
        cache_size: int = 4096,
    ) -> None:
        if isinstance(host_rules, bytes):
            host_rules = host_rules.decode("utf-8", "replace")
        self.host_rules = HostRules.from_mapping(host_rules, setting=setting)
        #: the host rules as given, in JSON form: what the store records
        self._source: dict[str, Any]
        if isinstance(host_rules, str):
            self._source = json.loads(host_rules) if host_rules.strip() else {}
        else:
            self._source = json.loads(json.dumps(dict(host_rules or {})))
        self.tracking_params = _as_patterns(tracking_params)
        self.session_params = _as_patterns(session_params)
        # a page's URL is keyed by several components: remember the last few thousand
        self.key: Callable[[str], str] = lru_cache(maxsize=cache_size)(self._key)

    def normalize(self, url: str, *, strict: bool = False) -> str:
        """:func:`normalize_url` under these rules: the URL to fetch."""
        return normalize_url(url, tracking_params=self.tracking_params, strict=strict)

    def _key(self, url: str) -> str:
        return url_key(url, self.host_rules, tracking_params=self.tracking_params, session_params=self.session_params)

    def to_json(self) -> dict[str, Any]:
        return {
            "host_rules": self._source,
            "tracking_params": list(self.tracking_params),
            "session_params": list(self.session_params),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, default: UrlRules | None = None) -> UrlRules:
        """Rules recorded with :meth:`to_json`; what a record lacks comes from ``default``."""
        default = default or cls()
        data = data or {}
        return cls(
            data.get("host_rules", default._source),
            data.get("tracking_params", default.tracking_params),
            data.get("session_params", default.session_params),
            setting="the store's url_rules",
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UrlRules) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))

    def __repr__(self) -> str:
        return f"UrlRules({self._source!r}, tracking_params={self.tracking_params!r}, session_params={self.session_params!r})"
