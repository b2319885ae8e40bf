"""Per-host URL-key policy: the ``DEDUP_HOST_RULES`` setting.

The setting maps a host pattern to a small dict of options::

    DEDUP_HOST_RULES = {
        "shop.example.com": {"allow_params": ["id", "page"]},
        "*.docs.example.org": {"trailing_slash": "keep", "path_case": "insensitive"},
    }

Host patterns
    * ``"shop.example.com"`` matches that hostname exactly (case-insensitive,
      IDN hosts may be written in Unicode or punycode).
    * ``"*.example.org"`` matches ``example.org`` itself **and** every
      subdomain at any depth, like Scrapy's ``allowed_domains``.  An exact
      entry for a host always beats a wildcard, and among wildcards the
      longest (most specific) one wins.
    * Patterns match the hostname only: a ``:port`` in a pattern is rejected
      rather than silently ignored.  IPv6 literals are written with brackets,
      ``"[::1]"``.

Options (all optional)
    ``allow_params``   list of query parameter names kept in the key; every
                       other parameter is dropped (names compared
                       case-insensitively).  Default: no allowlist.
    ``drop_params``    extra names or ``prefix*`` patterns dropped from the key.
    ``trailing_slash`` ``"strip"`` (default) or ``"keep"``.
    ``path_case``      ``"sensitive"`` (default) or ``"insensitive"`` (the key's
                       path is lowercased).
    ``directory_index`` ``true`` (default) drops a trailing ``index.html`` etc.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HostRule", "HostRules"]

_TRAILING_SLASH = ("strip", "keep")
_PATH_CASE = ("sensitive", "insensitive")
_KEYS = ("allow_params", "directory_index", "drop_params", "path_case", "trailing_slash")
# Characters a (punycode, lowercased) hostname may hold; anything else in a
# pattern is almost certainly a URL or a typo pasted into the setting.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()+,;=")
# Bounded so that a crawl over millions of hosts cannot grow it forever.
_CACHE_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class HostRule:
    """The key policy for one host.

    >>> HostRule()
    HostRule(allow_params=None, drop_params=(), trailing_slash='strip', path_case='sensitive', directory_index=True)
    >>> sorted(HostRule(allow_params=["ID", "page"]).allow_params)
    ['id', 'page']
    """

    allow_params: frozenset[str] | None = None
    drop_params: tuple[str, ...] = ()
    trailing_slash: str = "strip"
    path_case: str = "sensitive"
    directory_index: bool = True

    def __post_init__(self) -> None:
        # Lowercase once here so lookups on the hot path compare directly.
        if self.allow_params is not None:
            allow = frozenset(name.lower() for name in self.allow_params)
            object.__setattr__(self, "allow_params", allow)
        object.__setattr__(self, "drop_params", tuple(self.drop_params))
        if self.trailing_slash not in _TRAILING_SLASH:
            raise ValueError(f"trailing_slash must be one of {_TRAILING_SLASH}, got {self.trailing_slash!r}")
        if self.path_case not in _PATH_CASE:
            raise ValueError(f"path_case must be one of {_PATH_CASE}, got {self.path_case!r}")
        if not isinstance(self.directory_index, bool):
            raise ValueError(f"directory_index must be a bool, got {self.directory_index!r}")


_DEFAULT_RULE = HostRule()


def _normalize_hostname(host: str) -> str:
    """Lowercase, drop one trailing dot and IDNA-encode *host* (best effort)."""
    host = host.strip().lower()
    if host.endswith(".") and len(host) > 1:
        host = host[:-1]
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            pass  # leave as is; it simply won't match a pattern
    return host


class HostRules:
    """A validated, immutable set of per-host rules with cached lookups.

    >>> rules = HostRules.from_mapping({
    ...     "*.example.org": {"trailing_slash": "keep"},
    ...     "shop.example.org": {"allow_params": ["id"]},
    ... })
    >>> rules.for_host("shop.example.org").allow_params
    frozenset({'id'})
    >>> rules.for_host("a.b.example.org").trailing_slash
    'keep'
    >>> rules.for_host("example.org").trailing_slash  # the apex matches too
    'keep'
    >>> rules.for_host("other.net") == HostRule()
    True
    >>> bool(HostRules())
    False
    """

    __slots__ = ("_exact", "_wild", "_cache")

    def __init__(self, rules: Mapping[str, HostRule] | None = None) -> None:
        self._exact: dict[str, HostRule] = {}
        self._wild: dict[str, HostRule] = {}
        self._cache: dict[str, HostRule] = {}
        for pattern, rule in (rules or {}).items():
            if not isinstance(rule, HostRule):
                raise TypeError(f"{pattern!r}: expected a HostRule, got {type(rule).__name__}")
            is_wild, host = _parse_pattern(pattern, "HostRules")
            (self._wild if is_wild else self._exact)[host] = rule

    @classmethod
    def from_mapping(cls, mapping: Any, setting: str = "DEDUP_HOST_RULES") -> HostRules:
        """Validate a ``DEDUP_HOST_RULES`` value (dict, JSON string or None).

        Error messages name the setting, the host and the key:

        >>> HostRules.from_mapping({"shop.example.com": {"allow_param": ["id"]}})
        Traceback (most recent call last):
        ...
        ValueError: DEDUP_HOST_RULES["shop.example.com"]: unknown key 'allow_param' (expected one of allow_params, directory_index, drop_params, path_case, trailing_slash; did you mean 'allow_params'?)
        >>> bool(HostRules.from_mapping('{"a.com": {"path_case": "insensitive"}}'))
        True
        """
        if mapping is None:
            return cls()
        if isinstance(mapping, bytes):
            mapping = mapping.decode("utf-8", "replace")
        if isinstance(mapping, str):
            if not mapping.strip():
                return cls()
            try:
                mapping = json.loads(mapping)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{setting}: not valid JSON ({exc})") from None
        if not isinstance(mapping, Mapping):
            raise ValueError(f"{setting}: expected a dict of host pattern -> dict of options, got {type(mapping).__name__}")
        rules: dict[str, HostRule] = {}
        for pattern, options in mapping.items():
            where = f"{setting}[{json.dumps(pattern, ensure_ascii=False) if isinstance(pattern, str) else repr(pattern)}]"
            if not isinstance(pattern, str):
                raise ValueError(f"{where}: host pattern must be a string")
            _parse_pattern(pattern, where)  # validate early for a precise message
            rules[pattern] = _parse_options(options, where)
        return cls(rules)

    def for_host(self, host: str) -> HostRule:
        """Return the rule for *host* (a hostname; a ``:port`` is ignored).

        Exact entries beat wildcards, the longest wildcard beats shorter ones,
        and the default rule applies when nothing matches.
        """
        rule = self._cache.get(host)
        if rule is not None:
            return rule
        if not self._exact and not self._wild:
            return _DEFAULT_RULE
        rule = self._lookup(_normalize_hostname(_strip_port(host)))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[host] = rule
        return rule

    def _lookup(self, host: str) -> HostRule:
        rule = self._exact.get(host)
        if rule is not None:
            return rule
        if self._wild:
            # Suffixes are tried longest first, so the most specific wildcard wins.
            labels = host.split(".")
            for i in range(len(labels)):
                rule = self._wild.get(".".join(labels[i:]))
                if rule is not None:
                    return rule
        return _DEFAULT_RULE

    def __bool__(self) -> bool:
        return bool(self._exact or self._wild)

    def __len__(self) -> int:
        return len(self._exact) + len(self._wild)

    def __repr__(self) -> str:
        patterns = sorted(self._exact) + sorted("*." + h for h in self._wild)
        return f"HostRules({patterns!r})"


def _strip_port(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1] or host
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name
    return host


def _parse_pattern(pattern: str, where: str) -> tuple[bool, str]:
    """Return ``(is_wildcard, normalized_host)`` or raise ValueError."""
    is_wild = pattern.strip().startswith("*.")
    host = pattern.strip()[2:] if is_wild else pattern
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ValueError(f"{where}: bad IPv6 host pattern {pattern!r}")
        return is_wild, host.lower()
    if ":" in host:
        raise ValueError(f"{where}: host patterns match the hostname only; remove the port or scheme from {pattern!r}")
    host = _normalize_hostname(host)
    if not host or not set(host) <= _HOST_CHARS:
        raise ValueError(f"{where}: invalid host pattern {pattern!r} (expected 'host.example' or '*.example')")
    return is_wild, host


def _parse_options(options: Any, where: str) -> HostRule:
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: expected a dict of options, got {type(options).__name__}")
    for key in options:
        if key not in _KEYS:
            hint = difflib.get_close_matches(str(key), _KEYS, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ValueError(f"{where}: unknown key {key!r} (expected one of {', '.join(_KEYS)}{extra})")
    allow = options.get("allow_params")
    if allow is not None:
        allow = _name_list(allow, where, "allow_params", patterns=False)
    drop = _name_list(options.get("drop_params", ()), where, "drop_params", patterns=True)
    trailing = _choice(options, "trailing_slash", _TRAILING_SLASH, where)
    case = _choice(options, "path_case", _PATH_CASE, where)
    index = options.get("directory_index", True)
    if not isinstance(index, bool):
        raise ValueError(f"{where}: 'directory_index' must be true or false, got {index!r}")
    return HostRule(
        allow_params=frozenset(allow) if allow is not None else None,
        drop_params=drop,
        trailing_slash=trailing,
        path_case=case,
        directory_index=index,
    )


def _name_list(value: Any, where: str, key: str, *, patterns: bool) -> tuple[str, ...]:
    # A bare string would otherwise be iterated character by character.
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{where}: {key!r} must be a list of parameter names, got {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name or name == "*":
            raise ValueError(f"{where}: {key!r} has an invalid parameter name {name!r}")
        if "*" in name[:-1] or (not patterns and name.endswith("*")):
            allowed = "a trailing '*' (prefix match) only" if patterns else "no wildcards"
            raise ValueError(f"{where}: {key!r} name {name!r} is not valid ({allowed})")
    return names


def _choice(options: Mapping[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = options.get(key, choices[0])
    if value not in choices:
        raise ValueError(f"{where}: {key!r} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value
