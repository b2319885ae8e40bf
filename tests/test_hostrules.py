"""HostRule / HostRules: matching, validation, and their effect on url_key."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scrapy_dedup.core.hostrules import HostRule, HostRules
from scrapy_dedup.core.urls import url_key

RULES = {
    "shop.example.com": {"allow_params": ["id", "Page"]},
    "*.example.org": {"trailing_slash": "keep"},
    "*.docs.example.org": {"path_case": "insensitive"},
    "api.example.org": {"directory_index": False},
    "blog.example.net": {"drop_params": ["ref", "sort*"]},
    "bücher.de": {"path_case": "insensitive"},
    "[::1]": {"trailing_slash": "keep"},
}


@pytest.fixture(scope="module")
def rules() -> HostRules:
    return HostRules.from_mapping(RULES)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("shop.example.com", HostRule(allow_params=frozenset({"id", "page"}))),
        ("SHOP.Example.COM", HostRule(allow_params=frozenset({"id", "page"}))),
        ("shop.example.com.", HostRule(allow_params=frozenset({"id", "page"}))),
        ("shop.example.com:8080", HostRule(allow_params=frozenset({"id", "page"}))),
        ("other.example.com", HostRule()),
        ("example.com", HostRule()),
        # wildcard: the apex and any depth of subdomain
        ("example.org", HostRule(trailing_slash="keep")),
        ("www.example.org", HostRule(trailing_slash="keep")),
        ("a.b.c.example.org", HostRule(trailing_slash="keep")),
        ("badexample.org", HostRule()),
        ("example.org.evil.com", HostRule()),
        # the longest wildcard wins
        ("docs.example.org", HostRule(path_case="insensitive")),
        ("v2.docs.example.org", HostRule(path_case="insensitive")),
        # exact beats wildcard
        ("api.example.org", HostRule(directory_index=False)),
        ("v1.api.example.org", HostRule(trailing_slash="keep")),
        # IDN patterns match the punycode host and vice versa
        ("xn--bcher-kva.de", HostRule(path_case="insensitive")),
        ("BÜCHER.de", HostRule(path_case="insensitive")),
        ("[::1]", HostRule(trailing_slash="keep")),
        ("[::1]:8080", HostRule(trailing_slash="keep")),
    ],
)
def test_for_host(rules: HostRules, host: str, expected: HostRule) -> None:
    assert rules.for_host(host) == expected
    assert rules.for_host(host) is rules.for_host(host)  # cached


def test_empty_rules() -> None:
    for empty in (HostRules(), HostRules.from_mapping(None), HostRules.from_mapping({}),
                  HostRules.from_mapping(""), HostRules.from_mapping("  ")):
        assert not empty
        assert len(empty) == 0
        assert empty.for_host("anything.example") == HostRule()


def test_non_empty_rules(rules: HostRules) -> None:
    assert rules
    assert len(rules) == len(RULES)
    assert "*.example.org" in repr(rules)


def test_json_string_and_bytes_accepted(rules: HostRules) -> None:
    text = json.dumps(RULES)
    for value in (text, text.encode()):
        parsed = HostRules.from_mapping(value)
        assert parsed.for_host("v2.docs.example.org") == rules.for_host("v2.docs.example.org")
        assert parsed.for_host("shop.example.com").allow_params == frozenset({"id", "page"})


def test_host_rule_is_frozen_and_normalized() -> None:
    rule = HostRule(allow_params=["ID"], drop_params=["x"])  # type: ignore[arg-type]
    assert rule.allow_params == frozenset({"id"})
    assert rule.drop_params == ("x",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.trailing_slash = "keep"  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs", [{"trailing_slash": "remove"}, {"path_case": "lower"}, {"directory_index": "yes"}]
)
def test_host_rule_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        HostRule(**kwargs)


def test_host_rules_constructor_takes_rules() -> None:
    rules = HostRules({"*.a.com": HostRule(trailing_slash="keep"), "b.com": HostRule(path_case="insensitive")})
    assert rules.for_host("x.a.com").trailing_slash == "keep"
    assert rules.for_host("b.com").path_case == "insensitive"
    with pytest.raises(TypeError):
        HostRules({"a.com": {"trailing_slash": "keep"}})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("mapping", "fragments"),
    [
        ({"shop.example.com": {"allow_param": ["id"]}},
         ['DEDUP_HOST_RULES["shop.example.com"]', "unknown key 'allow_param'", "did you mean 'allow_params'"]),
        ({"a.com": {"trailing_slash": "remove"}}, ['["a.com"]', "'trailing_slash'", "'remove'"]),
        ({"a.com": {"path_case": "lower"}}, ['["a.com"]', "'path_case'", "'lower'"]),
        ({"a.com": {"directory_index": "false"}}, ['["a.com"]', "'directory_index'"]),
        ({"a.com": {"allow_params": "id"}}, ['["a.com"]', "'allow_params'", "list"]),
        ({"a.com": {"allow_params": ["id*"]}}, ['["a.com"]', "'allow_params'", "'id*'"]),
        ({"a.com": {"allow_params": [1]}}, ['["a.com"]', "'allow_params'"]),
        ({"a.com": {"drop_params": ["*"]}}, ['["a.com"]', "'drop_params'"]),
        ({"a.com": {"drop_params": ["a*b"]}}, ['["a.com"]', "'drop_params'", "'a*b'"]),
        ({"a.com": ["allow_params"]}, ['["a.com"]', "expected a dict of options"]),
        ({"a.com:8080": {}}, ['["a.com:8080"]', "hostname only"]),
        ({"http://a.com": {}}, ['["http://a.com"]', "hostname only"]),
        ({"a.com/path": {}}, ['["a.com/path"]', "invalid host pattern"]),
        ({"": {}}, ['[""]', "invalid host pattern"]),
        ({"*.": {}}, ['["*."]', "invalid host pattern"]),
        ({"a.*.com": {}}, ['["a.*.com"]', "invalid host pattern"]),
        ({"[::1": {}}, ['["[::1"]', "IPv6"]),
        ({1: {}}, ["DEDUP_HOST_RULES[1]", "must be a string"]),
        (["a.com"], ["DEDUP_HOST_RULES:", "expected a dict", "list"]),
        ("{not json", ["DEDUP_HOST_RULES:", "not valid JSON"]),
        ("[1, 2]", ["DEDUP_HOST_RULES:", "expected a dict"]),
    ],
)
def test_validation_errors_name_setting_host_and_key(mapping: object, fragments: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        HostRules.from_mapping(mapping)
    message = str(info.value)
    assert message.startswith("DEDUP_HOST_RULES")
    for fragment in fragments:
        assert fragment in message


def test_validation_uses_given_setting_name() -> None:
    with pytest.raises(ValueError, match=r'^MY_RULES\["a.com"\]: unknown key'):
        HostRules.from_mapping({"a.com": {"bogus": 1}}, setting="MY_RULES")


# --- effect on url_key --------------------------------------------------------

KEY_CASES = [
    # allowlist: facets, sort orders, tracking and session params all dropped
    ("https://shop.example.com/list?sort=price&color=red&page=2&id=5&utm_source=x&sid=1",
     "https://shop.example.com/list?id=5&page=2"),
    ("https://shop.example.com/list?ID=5&PAGE=2&view=grid", "https://shop.example.com/list?ID=5&PAGE=2"),
    ("https://shop.example.com/list?order=desc", "https://shop.example.com/list"),
    ("https://other.example.com/list?order=desc&id=5", "https://other.example.com/list?id=5&order=desc"),
    # keep the trailing slash (wildcard incl. apex); index still dropped
    ("http://example.org/dir/", "http://example.org/dir/"),
    ("http://www.example.org/dir/index.html", "http://www.example.org/dir/"),
    ("http://www.example.org/dir//", "http://www.example.org/dir//"),
    ("http://www.example.org/dir/index.html/", "http://www.example.org/dir/index.html/"),
    # case-insensitive path (longest wildcard); percent escapes stay uppercase
    ("http://docs.example.org/API/Intro%2fX/", "http://docs.example.org/api/intro%2Fx"),
    ("http://www.example.org/API/", "http://www.example.org/API/"),
    # directory_index false (exact beats wildcard: trailing slash stripped again)
    ("http://api.example.org/v1/index.html", "http://api.example.org/v1/index.html"),
    ("http://api.example.org/v1/", "http://api.example.org/v1"),
    # drop_params, with prefix patterns, on top of session params
    ("http://blog.example.net/p?ref=tw&sort_by=date&sortx=1&id=1&jsessionid=2",
     "http://blog.example.net/p?id=1"),
    ("http://blog.example.net/p?referrer=tw", "http://blog.example.net/p?referrer=tw"),
    # IDN host pattern
    ("http://Bücher.de/Buch/", "http://xn--bcher-kva.de/buch"),
    ("http://[::1]/x/", "http://[::1]/x/"),
]


@pytest.mark.parametrize(("url", "expected"), KEY_CASES)
def test_url_key_with_rules(rules: HostRules, url: str, expected: str) -> None:
    assert url_key(url, rules) == expected
    assert url_key(url, RULES) == expected  # a raw mapping works too
    assert url_key(url, json.dumps(RULES)) == expected  # and the JSON form
    assert url_key(expected, rules) == expected


def test_url_key_with_mutated_mapping_is_reparsed() -> None:
    mapping: dict = {"a.com": {"trailing_slash": "keep"}}
    assert url_key("http://a.com/x/", mapping) == "http://a.com/x/"
    mapping["a.com"]["trailing_slash"] = "strip"
    assert url_key("http://a.com/x/", mapping) == "http://a.com/x"


def test_url_key_with_invalid_mapping_raises() -> None:
    with pytest.raises(ValueError, match="DEDUP_HOST_RULES"):
        url_key("http://a.com/", {"a.com": {"nope": 1}})


def test_empty_allowlist_drops_every_param() -> None:
    assert url_key("http://a.com/x?b=1&a=2", {"a.com": {"allow_params": []}}) == "http://a.com/x"
