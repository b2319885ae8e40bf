"""Near duplicates in scripts written without spaces between words (Japanese, Chinese).

A run of kana and kanji between two punctuation marks is a clause, not a word: taken as one
word, a page of a few dozen clauses lost 5 of its shingles for one edited character, and a typo
fixed on a Japanese page made a new document (on the GIMP manual in Japanese, gimp-help-ja
2.10.34-2, 69 of 150 pages with one character changed were missed). Each character is a word.
"""

from __future__ import annotations

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.core.fingerprints import fingerprint, jaccard_estimate, near_match, shingle_jaccard

# A help page as such manuals write them: short clauses between 、 and 。, a few Latin names.
JA = (
    "レイヤーダイアログ\n"
    "このダイアログでは、画像のレイヤーを一覧で表示し、その順番や属性を変更できます。"
    "新しいレイヤーを作るには、ダイアログの下にあるボタンを押します。"
    "レイヤーの名前をダブルクリックすると、名前を変更できます。\n"
    "目のアイコンを押すと、そのレイヤーは見えなくなりますが、削除はされません。"
    "鎖のアイコンでつないだレイヤーは、一緒に移動したり、変形したりできます。\n"
    "不透明度の値を下げると、下のレイヤーが透けて見えます。"
    "モードを変えると、下のレイヤーとの混ぜ合わせ方が変わり、結果も大きく変わります。"
    "詳しくは、GIMP の描画モードの節を見てください。\n"
)
ZH = (
    "图层对话框\n"
    "在这个对话框中，可以列出图像的所有图层，并修改它们的顺序和属性。"
    "要新建图层，请按对话框底部的按钮。"
    "双击图层的名称，就可以为它改名。\n"
    "点击眼睛图标，该图层就会隐藏，但不会被删除。"
    "用链条图标连在一起的图层，可以一起移动，也可以一起变换。\n"
    "降低不透明度，下面的图层就会透出来。"
    "改变模式，与下面图层的混合方式就会改变，结果也会大不相同。"
    "详细内容请参阅 GIMP 绘画模式一节。\n"
)
#: one character of each fixed, as a typo is: 変形 for 変更 in the first paragraph
EDITED = {JA: JA.replace("属性を変更", "属性を変形"), ZH: ZH.replace("顺序和属性", "顺序与属性")}


@pytest.mark.parametrize("text", [JA, ZH], ids=["ja", "zh"])
def test_one_character_changed_is_a_near_duplicate(text):
    edited = EDITED[text]
    assert edited != text
    exact = shingle_jaccard(text, edited)
    assert exact > 0.9
    a, b = fingerprint(text), fingerprint(edited)
    assert abs(jaccard_estimate(a.minhash, b.minhash) - exact) < 0.1  # the MinHash finds the pair
    assert near_match(a, b, texts=(text, edited))[0] and near_match(a, b)[0]


def test_distinct_pages_are_not_merged():
    assert shingle_jaccard(JA, ZH) < 0.1
    assert not near_match(fingerprint(JA), fingerprint(ZH), texts=(JA, ZH))[0]


def _page(title: str, text: str) -> bytes:
    paragraphs = "".join(f"<p>{line}</p>" for line in text.splitlines()[1:])
    return f'<html lang="ja"><head><title>{title}</title></head><body><h1>{title}</h1>{paragraphs}</body></html>'.encode()


PAGES = {
    "/ja/layers.html": _page("レイヤー", JA),
    "/ja/layers-copy.html": _page("レイヤー", EDITED[JA]),
    "/zh/layers.html": _page("图层", ZH),
    "/zh/layers-copy.html": _page("图层", EDITED[ZH]),
}


def reply(path: str):
    if path == "/":
        links = "".join(f'<li><a href="{p}">{p}</a></li>' for p in PAGES)
        return 200, {}, f"<html><body><ul>{links}</ul></body></html>".encode()
    if path in PAGES:
        return 200, {}, PAGES[path]
    return 404, {}, b"<html><body><p>Not found</p></body></html>"


def test_a_crawl_merges_a_page_with_a_typo_fixed(tmp_path):
    with LocalSite(reply) as site:
        run_crawl(f"{site.url}/", tmp_path, {"DEDUP_WORKERS": 0, "DEDUP_LOGSTATS_INTERVAL": 0})
    sources = {
        frozenset(s["url"].removeprefix(site.url) for s in record["sources"])
        for record in exported(tmp_path / "store")
        if record["url"] != f"{site.url}/"
    }
    assert sources == {
        frozenset({"/ja/layers.html", "/ja/layers-copy.html"}),
        frozenset({"/zh/layers.html", "/zh/layers-copy.html"}),
    }
