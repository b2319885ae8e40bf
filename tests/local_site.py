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
    def __init__(self, reply: Callable[[str], Reply]) -> None:
        site_reply = reply

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site_reply(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
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

    def __enter__(self) -> LocalSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileSite:
    """A directory served on 127.0.0.1 (port 0) like a static web server: ``ETag`` and
    ``Last-Modified`` from each file's size and mtime, a 304 to a request whose
    ``If-None-Match`` or ``If-Modified-Since`` still holds, a listing for a directory without
    ``index.html``, a 404 for anything missing. Files may change between crawls.

    ``log`` keeps (path, status) of every request answered, ``bytes_sent`` the bodies' bytes.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log: list[tuple[str, int]] = []
        #: bytes of the bodies sent
        self.bytes_sent = 0
        site = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site._answer(unquote(urlsplit(self.path).path), self.headers)
                with lock:
                    site.log.append((self.path, status))
                    site.bytes_sent += len(body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

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

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FileSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
