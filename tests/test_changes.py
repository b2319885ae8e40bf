"""``scrapy dedup export --changes-since TOKEN``: an index that applies the changes since an export
holds what a full export of the store holds now.

The book of tests/test_recrawl.py is crawled and exported in full (the export prints its token),
then edited on disk: ``s1`` changes, ``s2`` is deleted, ``s4`` is added and ``s5`` (a longer copy
of ``s3``, linked from ``s4``) takes ``s3``'s document over. The re-crawl (every page due again)
and the changes since the token follow, through the real CLI, on LevelDB and on Redis.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from crawl_helpers import dedup
from local_site import FileSite
from test_recrawl import crawl, edit_book, page, text, write_book

from scrapy_dedup.core.urls import url_key
from scrapy_dedup.decide.clusters import cluster_id_for

TOKEN = re.compile(r"^change token: ([0-9a-f]{8}-[0-9]+) ", re.M)
#: what an index holds of a document: every field of the export but the fetch times
HELD = ("document_id", "url", "title", "text", "sources")


def take_over(root: Path) -> None:
    """Between the crawls: the edits of the recrawl tests, and ``s5``, a longer copy of ``s3``."""
    edit_book(root)
    book = root / "book"
    (book / "s4.html").write_text(page("Section 4", text("four"), ("s5.html",)))
    (book / "s5.html").write_text(page("Section 5", text("three") + " A closing note on section three."))


def run(store: Path, *args: str, redis: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """``scrapy dedup ARGS`` on the crawl's store: ``store``, or the Redis one (URL, prefix)."""
    if redis is None:
        return dedup(store, *args)
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "dedup", *args, "--store", redis[0], "--redis-prefix", redis[1]],
        capture_output=True, text=True, timeout=120, cwd=store,
    )  # fmt: skip


def lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def token_of(proc) -> str:
    found = TOKEN.search(proc.stderr)
    assert found, proc.stderr
    return found.group(1)


def doc_id(site_url: str, name: str) -> str:
    return cluster_id_for("", url_key(f"{site_url}/book/{name}"))


def apply(index: dict[str, dict], changes: list[dict]) -> dict[str, dict]:
    """An index keyed by document_id following the changes."""
    index = dict(index)
    for change in changes:
        if change["op"] == "delete":
            del index[change["document_id"]]
        else:
            index[change["document_id"]] = {f: change[f] for f in HELD}
    return index


def held(records: list[dict]) -> dict[str, dict]:
    return {r["document_id"]: {f: r[f] for f in HELD} for r in records}


@pytest.fixture(scope="module", params=["leveldb", "redis"])
def recrawl(request, tmp_path_factory):
    """(the site's URL, a function running ``scrapy dedup`` on the crawl's store, the first
    export's records and token)"""
    settings = {"DEDUP_REVISIT_AFTER": 0}
    redis = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_single")
        prefix = f"test:{uuid.uuid4().hex[:12]}"
        settings.update(DEDUP_STORE=server.url, DEDUP_REDIS_PREFIX=prefix)
        redis = (server.url, prefix)
    tmp_path = tmp_path_factory.mktemp(f"changes-{request.param}")
    store = tmp_path / "store"

    def cli(*args: str):
        return run(store if not redis else tmp_path, *args, redis=redis)

    def crawled(site) -> None:
        crawl(site, tmp_path, settings)
        if redis:  # a Redis store is one several processes may share: settled on demand
            assert cli("settle").returncode == 0

    write_book(tmp_path / "site")
    with FileSite(tmp_path / "site") as site:
        crawled(site)
        first = cli("export")
        take_over(tmp_path / "site")
        crawled(site)
    return site.url, cli, lines(first), token_of(first)


def test_the_changes_since_an_export_are_the_pages_changed_added_deleted_and_taken_over(recrawl):
    url, cli, before, token = recrawl
    changes = lines(cli("export", "--changes-since", token))
    assert [(c["op"], c["reason"], c["document_id"], c.get("into")) for c in changes] == [
        *sorted(
            [
                ("delete", "gone", doc_id(url, "s2.html"), None),
                ("delete", "merged", doc_id(url, "s3.html"), doc_id(url, "s5.html")),
            ],
            key=lambda c: c[2],
        ),
        *sorted(
            [
                ("upsert", "updated", doc_id(url, "s1.html"), None),
                ("upsert", "new", doc_id(url, "s4.html"), None),
                ("upsert", "re-represented", doc_id(url, "s5.html"), None),
            ],
            key=lambda c: c[2],
        ),
    ]
    after = lines(cli("export"))
    # an index of the first export that applies the changes holds the second export
    assert apply(held(before), changes) == held(after)
    assert len(after) == 5  # the table of contents, the part, s1, s4, and s5 with s3


def test_a_token_stays_good_across_full_settles_and_the_latest_one_has_no_changes(recrawl):
    url, cli, before, token = recrawl
    expected = lines(cli("export", "--changes-since", token))
    latest = cli("export")
    full = cli("settle", "--full")
    assert full.returncode == 0 and "(6 settled again)" in full.stdout
    assert lines(cli("export", "--changes-since", token)) == expected
    now = cli("export", "--changes-since", token_of(latest))
    assert lines(now) == [] and token_of(now) == token_of(latest)


@pytest.mark.parametrize(
    "bad, said",
    [("nonsense", "unknown change token 'nonsense'"), ("00000000-1", "unknown change token '00000000-1'")],
)
def test_a_token_the_store_never_gave_is_a_one_line_error_and_writes_nothing(recrawl, tmp_path, bad, said):
    url, cli, before, token = recrawl
    out = tmp_path / "out.jsonl"
    for given in (bad, token.rsplit("-", 1)[0] + "-99"):
        proc = cli("export", "--changes-since", given, "-o", str(out))
        assert proc.returncode == 1 and not out.exists()
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("scrapy dedup: unknown change token")
    assert said in cli("export", "--changes-since", bad).stderr
