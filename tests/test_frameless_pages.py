"""A page whose blocks sit right in ``<body>`` keeps its headings and its definition terms.

pod2html (Perl's documentation, Debian's perl-doc 5.36.0) writes a page so: no ``<article>``,
``<main>`` or content ``<div>``, the headings, paragraphs and ``=item`` lists (``<dl>``) straight
in ``<body>``. Finding no frame, trafilatura kept the paragraphs, code and tables alone: 241 of
the 287 pages of the Perl documentation lost every heading ("SYNOPSIS", "DESCRIPTION") and every
``=item`` term, File::Path the signatures of its functions. Crawled through the real CLI from a
server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}


def pod_page() -> str:
    """A module page as pod2html writes it: its table of contents, then the POD's blocks."""
    return """<?xml version="1.0" ?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title></title></head><body>
<ul id="index">
  <li><a href="#NAME">NAME</a></li>
  <li><a href="#SYNOPSIS">SYNOPSIS</a></li>
  <li><a href="#DESCRIPTION">DESCRIPTION</a><ul><li><a href="#FUNCTIONS">FUNCTIONS</a></li></ul></li>
</ul>
<h1 id="NAME">NAME</h1>
<p>File::Path - Create or remove directory trees</p>
<h1 id="SYNOPSIS">SYNOPSIS</h1>
<pre><code>use File::Path qw(make_path remove_tree);
@created = make_path(&#39;foo/bar/baz&#39;, &#39;/zug/zwang&#39;);</code></pre>
<h1 id="DESCRIPTION">DESCRIPTION</h1>
<p>This module provides a convenient way to create directories of arbitrary depth and to delete
an entire directory subtree from the filesystem, the way the shell commands do it.</p>
<h2 id="FUNCTIONS">FUNCTIONS</h2>
<dl>
<dt id="make_path-dir1-dir2"><b>make_path( $dir1, $dir2, .... )</b></dt>
<dd>
<p>The make_path function creates the given directories if they do not exist before, much like
the Unix command mkdir -p. It returns the list of the directories it created, each of them,
parents included.</p>
</dd>
<dt id="remove_tree-dir1-dir2"><b>remove_tree( $dir1, $dir2, .... )</b></dt>
<dd>
<p>The remove_tree function deletes the given directories and any files and subdirectories they
might contain, much like the Unix command rm -rf or the del /s command on Windows.</p>
</dd>
</dl>
</body></html>"""


KEPT = ("SYNOPSIS", "DESCRIPTION", "FUNCTIONS", "make_path( $dir1, $dir2, .... )", "remove_tree( $dir1, $dir2, .... )")


def test_headings_and_terms_of_a_frameless_page_are_kept():
    text = extract_text(pod_page())
    lines = text.splitlines()
    for words in KEPT:
        assert words in text
    # the table of contents is not let in with them: each heading is in the text once
    assert lines.count("NAME") == 1 and lines.count("SYNOPSIS") == 1


def test_the_export_of_a_frameless_page_has_its_headings_and_terms(tmp_path):
    doc = crawled_page(pod_page(), tmp_path, SETTINGS)
    for words in KEPT:
        assert words in doc["text"]
    assert "make_path function creates the given directories" in doc["text"]
