"""Coverage-guided fuzzing of the same targets as tests/test_fuzz.py, with atheris (optional).

    pip install atheris
    DEDUP_ATHERIS=1 .venv/bin/python scripts/fuzz_atheris.py -atheris_runs=200000

Each input is cut into a URL, a Link header and an HTML body and fed to the public functions of
the core and to the analysis path of the pipeline; any exception is a finding (atheris stops and
writes the input to crash-*).  Without DEDUP_ATHERIS set, or without atheris, it says so and exits.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    if not os.environ.get("DEDUP_ATHERIS"):
        print("set DEDUP_ATHERIS=1 to run the atheris fuzzer (a long run, not part of make test)")
        return 0
    try:
        import atheris
    except ImportError:
        print("atheris is not installed: pip install atheris")
        return 1
    with atheris.instrument_imports():
        from scrapy_dedup.core import (
            canonical_from_html,
            canonical_from_link_header,
            canonical_scope_check,
            content_hash,
            normalize_url,
            resolve_canonical,
            url_key,
        )
        from scrapy_dedup.extraction.analysis import ExtractOptions, analyse_html, analyse_text
        from scrapy_dedup.extraction.headings import heading_spans

    options = ExtractOptions()

    def one_input(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        url = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 200))
        link = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
        body = fdp.ConsumeBytes(fdp.remaining_bytes())
        normalize_url(url)
        url_key(url, {"example.com": {"allow_params": ["id"]}})
        canonical_from_link_header(link)
        canonical_from_html(body, "utf-8")
        found = resolve_canonical(url, body, link)
        if found is not None:
            canonical_scope_check(url, found.url, "host")
        text, _ = analyse_html(body, url, options)
        heading_spans(body, text)
        analyse_text(text, options)
        content_hash(body.decode("utf-8", "surrogateescape"))

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
