"""What kind of content a response holds: markup to extract, plain text, or binary.

Scrapy sniffs bodies, so a small ASCII PDF can arrive as a TextResponse; the
declared Content-Type is trusted first. ``application/octet-stream`` declares no type (what a
server sends for a file it cannot name, such as AUTHORS or README): Scrapy's sniffing decides, as
for a response without a Content-Type.
"""

from __future__ import annotations

from scrapy.http import HtmlResponse, Response, TextResponse

MARKUP_TYPES = frozenset({"text/html", "application/xhtml+xml", "application/xml", "text/xml"})


def content_kind(response: Response) -> str:
    """``html`` (extract the main text), ``text`` (use as is) or ``binary`` (raw bytes only)."""
    declared = (response.headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower().decode("latin-1")
    if declared and declared != "application/octet-stream":
        if declared in MARKUP_TYPES or declared.endswith("+xml"):
            return "html" if isinstance(response, TextResponse) else "binary"
        if declared.startswith("text/"):
            return "text" if isinstance(response, TextResponse) else "binary"
        return "binary"
    if isinstance(response, HtmlResponse):
        return "html"
    return "text" if isinstance(response, TextResponse) else "binary"
