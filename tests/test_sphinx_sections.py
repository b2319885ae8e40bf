"""A Sphinx page keeps every section, whatever it is named after, and every API entry.

Two of trafilatura's cuts took real text from Sphinx manuals (Debian bookworm's python-babel-doc
2.10.3 and python-cryptography-doc 38.0.4):

- Sphinx names each section after its heading (``<section id="authors">``, its heading's
  permalink pointing to it) and trafilatura cuts an element whose id holds "author", "tags",
  "nav", "share", "related"...: Babel's license page lost its "Authors" section (134 names), its
  locale page the "Likely Subtags" section.
- Sphinx writes each API entry as a ``<dl>`` whose term, the signature, ends with two short links
  ("[source]", "¶"); trafilatura's link-density test cut the page's last entry as navigation,
  then the new last one: the exceptions page lost 2 classes of 6, the certificate transparency
  page 9 signatures of 19.

Crawled through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

NAMES = ("Ada Quill", "Basil Norrow", "Cleo Vantard", "Dmitri Oyelaran", "Esme Turnbull")


def sphinx_page(title: str, body: str) -> str:
    """A page as Sphinx 5 writes it with its Read the Docs theme: a side menu, then the text."""
    return f"""<!DOCTYPE html><html><head><title>{title} - Manual</title></head><body>
<nav class="wy-nav-side"><ul><li><a href="index.html">Index</a></li><li><a href="api.html">API</a></li></ul></nav>
<div class="wy-nav-content"><div role="main" class="document" itemscope="itemscope">
<div itemprop="articleBody"><section id="{title.lower()}">
<h1>{title}<a class="headerlink" href="#{title.lower()}" title="Permalink to this heading">¶</a></h1>
{body}
</section></div></div></div></body></html>"""


def section(name: str, slug: str, text: str) -> str:
    return f"""<section id="{slug}">
<h2>{name}<a class="headerlink" href="#{slug}" title="Permalink to this heading">¶</a></h2>
{text}
</section>"""


def license_page() -> str:
    names = "".join(f"<li><p>{name}</p></li>" for name in NAMES)
    return sphinx_page(
        "License",
        "<p>The library is licensed under a three clause BSD license: do what you want with it, as long as "
        "the copyright stays, the conditions are not modified and the disclaimer is present.</p>"
        + section(
            "Authors",
            "authors",
            "<p>The library is written and maintained by its team and various contributors:</p>"
            f'<ul class="simple">{names}</ul>'
            "<p>It was developed under the copyright of another company before 2013.</p>",
        )
        + section(
            "Likely Subtags",
            "likely-subtags",
            "<p>When dealing with locales you can run into the situation where a locale tag is not fully "
            "descriptive: the likely subtags fill in the script and the territory.</p>",
        )
        + section(
            "Full License Text",
            "full-license-text",
            "<p>Redistribution and use in source and binary forms, with or without modification, are "
            "permitted provided that the conditions below are met.</p>",
        ),
    )


def entry(name: str, text: str) -> str:
    """An API entry as Sphinx's autodoc writes it with viewcode: a signature linked to its source."""
    return f"""<dl class="py class">
<dt class="sig sig-object py" id="lib.exceptions.{name}">
<em class="property"><span class="pre">class</span> </em><span class="sig-prename descclassname"><span
class="pre">lib.exceptions.</span></span><span class="sig-name descname"><span class="pre">{name}</span></span><a
class="reference internal" href="_modules/lib/exceptions.html#{name}"><span class="viewcode-link"><span
class="pre">[source]</span></span></a><a class="headerlink" href="#lib.exceptions.{name}" title="Permalink to this definition">¶</a></dt>
<dd><p>{text}</p></dd></dl>"""


EXCEPTIONS = (
    ("UnsupportedAlgorithm", "Raised when the requested algorithm, or combination of algorithms, is not supported."),
    ("AlreadyFinalized", "This is raised when a context is used after being finalized."),
    ("InvalidSignature", "This is raised when signature verification fails."),
    ("AlreadyUpdated", "This is raised when additional data is added to a context after update was called."),
    ("InvalidKey", "This is raised when the verify method of a key derivation function fails."),
)


def exceptions_page() -> str:
    return sphinx_page("Exceptions", "".join(entry(name, text) for name, text in EXCEPTIONS))


def test_a_section_named_like_a_widget_keeps_its_text():
    text = extract_text(license_page())
    for words in (*NAMES, "Authors", "maintained by its team", "Likely Subtags", "fill in the script"):
        assert words in text
    # named otherwise, the sections give the same text
    renamed = license_page().replace('"authors"', '"people"').replace('"#authors"', '"#people"')
    renamed = renamed.replace('"likely-subtags"', '"likely-parts"').replace('"#likely-subtags"', '"#likely-parts"')
    assert extract_text(renamed) == text
    # the side menu is still no text
    assert "API" not in text


def test_the_last_api_entries_of_a_page_are_kept():
    text = extract_text(exceptions_page())
    for name, words in EXCEPTIONS:
        assert f"lib.exceptions.{name}" in text
        assert words in text


def test_the_export_of_a_sphinx_page_has_every_section(tmp_path):
    doc = crawled_page(license_page(), tmp_path, SETTINGS)
    for words in (*NAMES, "Likely Subtags"):
        assert words in doc["text"]


def test_the_export_of_an_api_page_has_its_last_entries(tmp_path):
    doc = crawled_page(exceptions_page(), tmp_path, SETTINGS)
    for _name, words in EXCEPTIONS:
        assert words in doc["text"]
