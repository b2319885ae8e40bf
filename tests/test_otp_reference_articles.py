"""A reference page that writes each of its functions as an ``<article>`` keeps them all.

Erlang/OTP's module reference pages (erlang-doc 25.2.3) hold the module's description in
sections and every exported function in an ``<article class="func">``. trafilatura reads the
page's first ``<article>`` as its main text: the text kept the description and lost every
function, in both its modes (memsup: 1,468 of 7,055 letters), and so did the export. (The
function heads, ``<h4>`` headings of ``<div>`` blocks, trafilatura still drops.) Crawled
through the real CLI from a server on 127.0.0.1.
"""

from __future__ import annotations

from crawl_helpers import crawled_page

from scrapy_dedup.extraction.main_text import extract_text

SETTINGS = {"DEDUP_WORKERS": 0, "CONCURRENT_REQUESTS": 1, "DEDUP_LOGSTATS_INTERVAL": 0}

#: eight functions, as a reference page has: each described in its own <article>
FUNCTIONS = {
    f"{name}() -> {result}": (
        f"Returns the {what} of the latest periodic memory check of the supervisor.",
        f"The value is read from the {source}, and it is refreshed each time the check runs again.",
        "The call does not start a check of its own: it answers with what the last one found.",
    )
    for name, result, what, source in [
        ("get_check_interval", "Milliseconds", "interval in milliseconds", "application environment"),
        ("get_memory_data", "{Total,Allocated,Worst}", "total and allocated memory", "operating system"),
        ("get_os_wordsize", "Wordsize", "word size of the operating system", "emulator's build flags"),
        ("get_procmem_high_watermark", "integer()", "process threshold as a percentage", "alarm handler"),
        ("get_sysmem_high_watermark", "integer()", "system threshold as a percentage", "alarm handler"),
        ("get_helper_timeout", "Seconds", "port program's timeout in seconds", "helper port program"),
        ("get_system_memory_data", "MemDataList", "list of tagged memory figures", "/proc/meminfo file"),
        ("set_check_interval", "ok", "new interval once it is set", "caller's argument"),
    ]
}


def section(title: str, body: str) -> str:
    return f"""<div class="innertube"><h3 id="{title.lower()}" class="title-link">
<div class="title-name">{title}</div><div class="title-anchors"><span class="ghlink-after">
<a href="#{title.lower()}" title="Link to this place!"><span class="paperclip-after"></span></a></span></div>
</h3><div class="REFBODY rb-3">{body}</div></div>"""


def function(head: str, doc: tuple[str, ...]) -> str:
    paragraphs = "".join(f"<p>{line}</p>" for line in doc)
    return f"""<article class="func"><div class="bold_code func-head"><h4 class="title-link">
<div class="title-name">{head}</div></h4></div>
<div class="exports-tube"><div class="REFBODY rb-5"><h3 id="types" class="func-types-title">Types</h3>
<div class="REFTYPES rt-4"><span class="bold_code">Milliseconds = Float = integer()</span></div></div>
<div class="REFBODY rb-3">{paragraphs}</div></div></article>"""


def reference_page() -> str:
    leftnav = "".join(f'<li><a href="#f{i}">{head.split("(")[0]}/0</a></li>' for i, head in enumerate(FUNCTIONS))
    description = "".join(
        f"<p>{line}</p>"
        for line in [
            "memsup is a process which supervises the memory usage for the system and for individual "
            "processes. It is part of the OS_Mon application, and it is available on every platform.",
            "Periodically it performs a memory check: if more than a certain amount of available "
            "system memory is allocated, as reported by the underlying operating system, an alarm is set.",
            "If any process in the system has allocated more than a certain amount of total system "
            "memory, another alarm is set, naming the process that holds it.",
            "Alarms are reported to the alarm handler of the release; to set one, the handler is "
            "called with the alarm and a description of its cause.",
            "The alarms are cleared automatically when their cause is no longer valid, at the first "
            "check that finds the memory below the threshold again.",
            "The total system memory reported is the number of physical pages times the page size, "
            "and the available memory the number of free pages times the page size.",
        ]
    )
    exports = "".join(function(head, doc) for head, doc in FUNCTIONS.items())
    return f"""<!DOCTYPE html><html><head><title>Erlang -- memsup</title></head><body>
<div id="container"><div id="leftnav"><div class="innertube"><ul class="flipMenu">{leftnav}</ul></div></div>
<div id="content"><div class="innertube"><center><h1>memsup</h1></center></div>
{section("Module", "memsup")}{section("Module Summary", "A Memory Supervisor Process")}
{section("Description", description)}
<div class="innertube"><h3 id="export" class="title-link"><div class="title-name">Exports</div></h3></div>
<div class="exports-body">{exports}</div>
<div class="footer"><hr><p>Copyright © 1996-2023 Ericsson AB. All Rights Reserved.</p></div>
</div></div></body></html>"""


def test_every_function_of_a_reference_page_is_kept():
    text = extract_text(reference_page())
    assert "supervises the memory usage" in text
    for doc in FUNCTIONS.values():
        assert all(line in text for line in doc)


def test_a_post_with_its_comments_in_articles_is_still_read_as_before():
    post = "<p>" + "The release moves the scheduler to a new queue and keeps the old one for a year. " * 6 + "</p>"
    comment = "<article class='reply'><p>Thanks, that settles the question I had about the queue.</p></article>"
    page = (
        f"<html><body><nav><a href='/'>Home</a></nav><article><h1>Release</h1>{post}{comment}</article></body></html>"
    )
    assert extract_text(page).startswith("Release\nThe release moves the scheduler")


def test_the_export_holds_every_function(tmp_path):
    doc = crawled_page(reference_page(), tmp_path, SETTINGS)
    for text in FUNCTIONS.values():
        assert all(line in doc["text"] for line in text)
