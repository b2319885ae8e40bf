"""The stored form of URL records and clusters: a JSON array in field order, read back
exactly, and the objects with field names of store format 3 and earlier still read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scrapy_dedup.core.records import Cluster, UrlRecord

FULL = UrlRecord(
    key="http://h/a", url="http://H/a?utm=1", status="near_duplicate", reason="near_duplicate",
    duplicate_of="http://h/b", cluster_id="00000000000000aa", scope="0123456789abcdef",
    content_hash="c" * 32, raw_hash="r" * 32, simhash=2**64 - 1, distance=0, jaccard=0.0, tokens=0,
    text_length=0, http_status=200, etag='"x"', last_modified="Fri, 01 Mar 2024 09:00:00 GMT",
    kind="document", canonical_mismatch="http://h/c", canonical_alias=True, first_seen=1.5,
    last_seen=2.25, fetched_at=0.0, fetch_count=3, first_run=2, links=True, title="A page",
    plain_text=True,
)  # fmt: skip


def test_every_field_comes_back_as_it_was():
    assert UrlRecord.from_json(FULL.to_json(), FULL.key) == FULL
    # zeros are values, not defaults: a distance of 0 stays 0 (not None)
    back = UrlRecord.from_json(UrlRecord("http://h/a", "http://h/a", distance=0, tokens=0).to_json(), "http://h/a")
    assert (back.distance, back.tokens, back.jaccard) == (0, 0, None)
    minimal = UrlRecord("http://h/a", "http://h/a")
    assert minimal.to_json() == b"[null,null]" and UrlRecord.from_json(minimal.to_json(), "http://h/a") == minimal
    # the store names a record by its key and gives it back: without it there is no record
    with pytest.raises(ValueError, match="without its key"):
        UrlRecord.from_json(minimal.to_json())
    cluster = Cluster("00000000000000aa", "http://h/a", "http://H/a", 1200, 2, True, "s", 5, 3, "digest", True)
    assert Cluster.from_json(cluster.to_json(), "00000000000000aa") == cluster
    same_url = Cluster("00000000000000aa", "http://h/a", "http://h/a", 1200, 2)
    assert Cluster.from_json(same_url.to_json(), "00000000000000aa") == same_url
    with pytest.raises(ValueError, match="without its id"):
        Cluster.from_json(same_url.to_json())
    # arrays written before the id was left out still carry it
    assert Cluster.from_json(b'["00000000000000aa","http://h/a",null,1200,2]') == same_url


def test_shorter_than_objects_with_field_names():
    as_object = json.dumps({k: v for k, v in dataclasses.asdict(FULL).items() if v not in (None, False, "")},
                           separators=(",", ":")).encode()  # fmt: skip
    assert len(FULL.to_json()) < 0.75 * len(as_object)


def test_the_objects_of_format_3_are_read():
    old = {"key": "http://h/a", "url": "http://h/a", "status": "new", "cluster_id": "00000000000000aa",
           "simhash": 7, "first_seen": 1.5, "fetch_count": 1, "first_run": 1}  # fmt: skip
    record = UrlRecord.from_json(json.dumps(old).encode())
    assert (record.key, record.url, record.status, record.simhash, record.fetch_count) == ("http://h/a", "http://h/a", "new", 7, 1)
    assert UrlRecord.from_json(json.dumps({**old, "from_a_newer_version": 1}).encode()) == record
    cluster = {"cluster_id": "00000000000000aa", "representative": "http://h/a", "rep_url": "http://h/a",
               "rep_text_length": 10, "rep_first_run": 1, "rep_canonical_alias": False, "scope": "", "size": 2,
               "max_distance": 1}  # fmt: skip
    assert Cluster.from_json(json.dumps(cluster).encode()) == Cluster("00000000000000aa", "http://h/a", "http://h/a", 10, 1, size=2, max_distance=1)


def test_fields_a_newer_version_appends_are_left_out():
    values = json.loads(FULL.to_json()) + ["a field of a later version"]
    assert UrlRecord.from_json(json.dumps(values).encode(), FULL.key) == FULL
    values = json.loads(Cluster("c", "http://h/a", "http://h/a", 1, 1, max_distance=2).to_json()) + [9]
    assert Cluster.from_json(json.dumps(values).encode(), "c").max_distance == 2


def test_a_kept_text_is_packed_in_the_worker_as_the_store_would():
    from scrapy_dedup.core.records import pack_text, unpack_text
    from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html, analyse_text, analysed_and_packed

    odd = "caf\u00e9 \ud800 " * 50  # a lone surrogate survives, as extracted text can hold one
    assert unpack_text(pack_text(odd)) == odd
    options = ExtractOptions(max_text_chars=40)
    text, fp, packed = analysed_and_packed(analyse_text, "word " * 100, options)
    assert (text, fp) == analyse_text("word " * 100, options)
    assert unpack_text(packed) == text[:40]  # what the store keeps: the text cut where the crawl cuts it
    html = "<html><body><article><p>" + "A sentence of the page. " * 30 + "</p></article></body></html>"
    text, fp, packed = analysed_and_packed(analyse_html, html, None, ExtractOptions())
    assert (text, fp) == analyse_html(html, None, ExtractOptions()) and unpack_text(packed) == text != ""


def test_records_read_share_their_few_values_and_keep_their_text():
    """Records read back share one object for a status, a reason, a kind and a scope (a settle
    reads every record of a store at once); a title in any script comes back as it was."""
    raw = dataclasses.replace(FULL, title="Страница — 頁").to_json()
    a, b = UrlRecord.from_json(raw, FULL.key), UrlRecord.from_json(bytearray(raw), FULL.key)
    assert a == b and a.title == "Страница — 頁"
    assert a.status is b.status and a.reason is b.reason and a.kind is b.kind and a.scope is b.scope
    assert UrlRecord.from_json(raw.decode(), FULL.key) == a
