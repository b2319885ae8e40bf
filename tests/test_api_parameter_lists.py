"""An API reference's lists of parameters stay in the text, with their linked types.

Node.js's API docs (and many generated references) list a function's parameters with each type a
link: ``<li><code>path</code> <a class="type">&lt;string&gt;</a></li>``. trafilatura's
link-density test reads a short list whose items are mostly short links as navigation and cuts
it whole, in every mode: on nodejs-doc 18.20.4, 260 of the 2,561 lists of the module pages left
the text (``path.basename(path[, suffix])`` lost its parameters and what it returns, and
``crypto.scrypt`` the descriptions of its options). Crawled through the real CLI from a server on
127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

STRING = '<a href="https://developer.mozilla.org/#String_type" class="type">&lt;string&gt;</a>'


def api_page() -> str:
    """A module page of an API reference: a menu of links, then each method's parameters."""
    menu = "".join(f'<li><a href="{name}.html">{name.title()}</a></li>' for name in ("assert", "buffer", "fs", "url"))
    return f"""<!DOCTYPE html><html><head><title>Path | Reference</title></head><body>
<div id="column2"><ul>{menu}</ul></div>
<main id="apicontent"><h2>Path</h2>
<p>The path module provides utilities for working with file and directory paths. It can be
accessed using a require call, and every method below works on strings alone: no file system
access is made, so a path that names nothing on the disk is handled like any other one.</p>
<h3><code>path.basename(path[, suffix])</code></h3>
<ul>
<li><code>path</code> {STRING}</li>
<li><code>suffix</code> {STRING} An optional suffix to remove</li>
<li>Returns: {STRING}</li>
</ul>
<p>The basename method returns the last portion of a path, similar to the Unix basename
command. Trailing directory separators are ignored, and the suffix, when given and found at the
end of the last portion, is taken off what is returned.</p>
<h3><code>path.dirname(path)</code></h3>
<ul>
<li><code>path</code> {STRING}</li>
<li>Returns: {STRING}</li>
</ul>
<p>The dirname method returns the directory name of a path, similar to the Unix dirname
command. Trailing directory separators are ignored, and a path without any separator gives a
single dot, the current directory, as its directory name.</p>
</main></body></html>"""


def test_a_list_of_parameters_with_linked_types_is_kept():
    text = extract_text(api_page())
    assert "path <string>" in text
    assert "suffix <string> An optional suffix to remove" in text
    assert text.count("Returns: <string>") == 2
    # a list of links alone is still a menu
    assert "Buffer" not in text and "Assert" not in text


def test_the_parameters_of_each_method_are_in_the_export(tmp_path):
    text = crawled_page(api_page(), tmp_path, SETTINGS)["text"]
    basename, dirname = text.index("path.basename(path[, suffix])"), text.index("path.dirname(path)")
    assert "suffix <string> An optional suffix to remove" in text[basename:dirname]
    assert "Returns: <string>" in text[basename:dirname] and "Returns: <string>" in text[dirname:]
