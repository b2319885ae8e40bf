"""Sites served on 127.0.0.1 (port 0) for the tests' real crawls and the benchmarks.

``reply(path)`` answers every GET with ``(status, headers, body)``; the page is sent as HTML
with its length. Each request runs in a thread of its own, so a reply may block (a barrier
that answers several requests together) without holding up the others. ``FileSite`` serves a
directory with conditional GETs, as a static web server does.
"""

from __future__ import annotations

import mimetypes
import threading
from collections.abc import Callable
from email.utils import formatdate, parsedate_to_datetime
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

Reply = tuple[int, dict[str, str], bytes]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 32 concurrent requests of several crawl processes at once


class LocalSite:
    #: sent before the reply's own headers (``None``: the reply's headers only)
    content_type: str | None = "text/html; charset=utf-8"

    def __init__(self, reply: Callable[[str], Reply]) -> None:
        self._reply = reply
        self._serve()

    def answer(self, path: str, request_headers) -> Reply:
        """The reply to a GET of ``path`` (the raw request path, query included)."""
        return self._reply(path)

    def _serve(self) -> None:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site.answer(self.path, self.headers)
                self.send_response(status)
                if site.content_type is not None:
                    self.send_header("Content-Type", site.content_type)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        #: the site's origin, without a trailing slash
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSite(LocalSite):
    """A directory served on 127.0.0.1 (port 0) like a static web server: ``ETag`` and
    ``Last-Modified`` from each file's size and mtime, a 304 to a request whose
    ``If-None-Match`` or ``If-Modified-Since`` still holds, a listing for a directory without
    ``index.html``, a 404 for anything missing. Files may change between crawls.

    ``log`` keeps (path, status) of every request answered, ``bytes_sent`` the bodies' bytes.
    """

    content_type = None

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log: list[tuple[str, int]] = []
        #: bytes of the bodies sent
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._serve()

    def answer(self, path: str, request_headers) -> Reply:
        status, headers, body = self._answer(unquote(urlsplit(path).path), request_headers)
        with self._lock:
            self.log.append((path, status))
            self.bytes_sent += len(body)
        return status, headers, body

    def _answer(self, path: str, request_headers) -> Reply:
        target = (self.root / path.lstrip("/")).resolve()
        if self.root.resolve() not in (target, *target.parents) or not target.exists():
            return 404, {"Content-Type": "text/html"}, b"<html><body><p>Not found</p></body></html>"
        if target.is_dir():
            if not path.endswith("/"):
                return 301, {"Location": path + "/"}, b""
            if not (target / "index.html").is_file():
                names = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
                links = "".join(f'<li><a href="{quote(n)}">{escape(n)}</a></li>' for n in names)
                body = f"<html><head><title>Index of {escape(path)}</title></head><body><ul>{links}</ul></body></html>"
                return 200, {"Content-Type": "text/html; charset=utf-8"}, body.encode()
            target = target / "index.html"
        stat = target.stat()
        validators = {"ETag": f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"', "Last-Modified": formatdate(stat.st_mtime, usegmt=True)}
        if _not_modified(request_headers, validators["ETag"], int(stat.st_mtime)):
            return 304, validators, b""
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        return 200, {"Content-Type": kind, **validators}, target.read_bytes()

    def requests(self, status: int | None = None) -> list[str]:
        """The paths requested (answered with ``status``), in order."""
        return [path for path, answered in self.log if status is None or answered == status]


def _not_modified(headers, etag: str, mtime: int) -> bool:
    """RFC 9110: If-None-Match decides when present; else If-Modified-Since."""
    if_none_match = headers.get("If-None-Match")
    if if_none_match is not None:
        return etag in (tag.strip() for tag in if_none_match.split(",")) or if_none_match.strip() == "*"
    since = headers.get("If-Modified-Since")
    if since is None:
        return False
    try:
        return mtime <= parsedate_to_datetime(since).timestamp()
    except (TypeError, ValueError):
        return False
