"""DocBook's GUI words stay in the text, and in the export of pages merged as near duplicates.

DocBook writes the words of a program's interface as ``<span class="guimenu">``,
``"guisubmenu"``, ``"guimenuitem"`` and ``"guibutton"``, in the middle of sentences
("choose <span class="guimenu">Image</span> → <span class="guimenuitem">Flip
Horizontally</span>."). trafilatura cuts any element whose class names a menu or a button, so
those words left the text: the menu path to a command was in no document, and the pages of two
commands of a manual (the GIMP manual's "Rotate 90° clockwise" and "Rotate 90°
counter-clockwise") were merged with neither path in the export. Crawled through the real CLI
from a server on 127.0.0.1.
"""

from __future__ import annotations

import pytest
from crawl_helpers import exported
from local_site import LocalSite
from testing import run_crawl

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

DIRECTIONS = {"flip-h": "Flip Horizontally", "flip-v": "Flip Vertically"}


def command_page(command: str) -> str:
    """A DocBook command page of a manual: the command's name appears only in GUI spans."""
    gui = f'<span class="guimenuitem">{command}</span>'
    return f"""<!DOCTYPE html><html><head><title>{command}</title></head><body>
<div class="navheader"><a href="index.html">Prev</a> <a href="next.html">Next</a></div>
<div class="sect2"><div class="titlepage"><h3 class="title">{command}</h3></div>
<p>The {gui} command turns the whole image over, with every layer, channel and path in it,
so that what was on one side of the canvas is on the other. No pixel is lost or created: the
image keeps its size, its resolution and its color profile, and the command can be undone in
one step from the history of the image like any other change made to it.</p>
<div class="sect3"><h4 class="title">Activating the Command</h4>
<div class="itemizedlist"><ul class="itemizedlist"><li class="listitem"><p>
You can access this command from the image menubar through
<span class="guimenu">Image</span> → <span class="guisubmenu">Transform</span> → {gui}.
</p></li></ul></div>
<p>Press <span class="guibutton">OK</span> in the dialog that opens when the image is
large to confirm the change, or <span class="guibutton">Cancel</span> to leave it as it was.</p>
</div></div>
<div class="navfooter"><a href="index.html">Home</a></div></body></html>"""


def reply(path: str):
    if path == "/":
        links = "".join(f'<li><a href="/{name}.html">{title}</a></li>' for name, title in DIRECTIONS.items())
        return 200, {}, f"<html><head><title>Index</title></head><body><ul>{links}</ul></body></html>".encode()
    name = path.strip("/").removesuffix(".html")
    if name in DIRECTIONS:
        return 200, {}, command_page(DIRECTIONS[name]).encode()
    return 404, {}, b"not found"


def test_the_gui_words_of_a_sentence_are_kept():
    text = extract_text(command_page("Flip Horizontally"))
    assert "The Flip Horizontally command turns" in text
    assert "image menubar through Image → Transform → Flip Horizontally." in text
    assert "Press OK in the dialog" in text and "or Cancel to leave it" in text
    assert "Prev" not in text and "Home" not in text


@pytest.fixture(scope="module")
def site():
    with LocalSite(reply) as served:
        yield served


def test_the_menu_path_of_each_command_is_in_the_export(site, tmp_path):
    run_crawl(f"{site.url}/", tmp_path, SETTINGS)
    records = [r for r in exported(tmp_path / "store") if r["url"] != f"{site.url}/"]
    # the two pages differ in the command's name alone: near duplicates, merged
    [doc] = records
    assert sorted(s["url"] for s in doc["sources"]) == [f"{site.url}/{name}.html" for name in DIRECTIONS]
    # and the member's lines that name its command go with the document, with its URL
    carried: dict[str, str] = {}
    for passage in doc["merged_passages"]:
        carried[passage["source_url"]] = carried.get(passage["source_url"], "") + passage["text"] + "\n"
    for name, command in DIRECTIONS.items():
        url = f"{site.url}/{name}.html"
        text = doc["text"] if url == doc["url"] else carried[url]
        assert f"Image → Transform → {command}." in text
        assert f"The {command} command turns" in text
