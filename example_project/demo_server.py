"""Static web server for the scrapy-dedup demo site (patterns: demo_site/manifest.json).

    with DemoServer() as server:      # any free port; server.url = http://127.0.0.1:PORT
        ...                           # crawl server.url + "/"
        server.variant = "v2"         # same port: the re-crawl variant
        server.counts()["/docs/install.html"]

``python example_project/demo_server.py [--port N] [--variant v2]`` prints the
URL on its first line and serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mimetypes
import posixpath
import threading
from collections import Counter
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urljoin, urlsplit

DEMO_SITE = Path(__file__).resolve().parent / "demo_site"
DEFAULT_PORT = 8431
VARIANTS = ("v1", "v2")


def load_manifest(root: str | Path = DEMO_SITE) -> dict:
    return json.loads((Path(root) / "manifest.json").read_text("utf-8"))


def fill(text: str, host: str, port: int) -> str:
    """Replace the {{ORIGIN}}, {{HOST}} and {{PORT}} placeholders."""
    origin = f"http://{host}:{port}"
    return text.replace("{{ORIGIN}}", origin).replace("{{HOST}}", host).replace("{{PORT}}", str(port))


class Hit(NamedTuple):
    """One request as the server saw it."""

    method: str
    host: str  # the Host header
    path: str  # the request target as sent: path, path parameters and query
    status: int
    content_type: str


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes


def _page(status: int, title: str) -> Reply:
    body = f"<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>\n"
    return Reply(status, {"Content-Type": "text/html; charset=utf-8"}, body.encode())


class DemoServer:
    """Serve the demo site from a daemon thread; usable as a context manager."""

    def __init__(self, root: str | Path = DEMO_SITE, variant: str = "v1", host: str = "127.0.0.1", port: int = 0):
        self.root = Path(root).resolve()
        self.manifest = load_manifest(self.root)
        self.variant = variant
        self.host, self.port = host, port
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> DemoServer:
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.demo = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="demo-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = self._thread = None

    def __enter__(self) -> DemoServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, href: str) -> str:
        """Absolute URL of an href from the site or the manifest."""
        return urljoin(self.url + "/", fill(href, self.host, self.port))

    def hits(self) -> list[Hit]:
        with self._lock:
            return list(self.log)

    @property
    def requests(self) -> list[str]:
        """Request targets (path + query) in arrival order."""
        return [hit.path for hit in self.hits()]

    def counts(self) -> Counter:
        return Counter(self.requests)

    def clear(self) -> None:
        with self._lock:
            self.log.clear()

    def _record(self, hit: Hit) -> None:
        with self._lock:
            self.log.append(hit)

    def respond(self, target: str, request_headers=None) -> Reply:
        """The reply to a GET of ``target`` (path + query); no network involved."""
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        m, request_headers = self.manifest, request_headers or {}
        split = urlsplit(target)
        # Drop ;path=parameters (e.g. ;jsessionid=...) before decoding, then resolve dot segments.
        raw_path = "/".join(segment.split(";", 1)[0] for segment in split.path.split("/"))
        path = "/" + posixpath.normpath(unquote(raw_path)).lstrip("/")
        if path == "/manifest.json" or any(part.startswith((".", "_")) for part in path.split("/")):
            return _page(404, "Not found")
        if path in m["redirects"]:
            redirect = m["redirects"][path]
            return Reply(redirect["status"], {"Location": self.url_for(redirect["location"])}, b"")
        recrawl = m["recrawl"]
        if self.variant == "v2" and path in recrawl["deleted_404"]:
            return _page(404, "Not found")
        if self.variant == "v2" and path in recrawl["gone_410"]:
            return _page(410, "Gone")
        route = m["query_routes"].get(path)
        if route:
            value = parse_qs(split.query).get(route["param"], [None])[0]
            path = route["files"].get(value, path)

        file, overlay = self._find(path)
        if file is None:
            return _page(404, "Not found")
        body = file.read_bytes()
        content_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if content_type == "text/html":
            body = fill(body.decode("latin-1"), self.host, self.port).encode("latin-1")  # bytes-transparent
            content_type += "; charset=" + m["charsets"].get(path, "utf-8")
        headers = {
            "Content-Type": content_type,
            "ETag": f'"{hashlib.sha1(body).hexdigest()[:20]}"',
            "Last-Modified": m["last_modified"]["v2" if overlay else "v1"],
        }
        if path in m["link_headers"]:
            headers["Link"] = fill(m["link_headers"][path], self.host, self.port)
        if self._not_modified(headers, request_headers):
            return Reply(304, {k: v for k, v in headers.items() if k != "Content-Type"}, b"")
        return Reply(200, headers, body)

    def _find(self, path: str) -> tuple[Path | None, bool]:
        """The file serving ``path`` (dir -> dir/index.html), and whether it comes from the v2 overlay."""
        roots = [(self.root / self.manifest["recrawl"]["overlay"], True)] if self.variant == "v2" else []
        for base, overlay in roots + [(self.root, False)]:
            file = base / path.lstrip("/")
            if file.is_dir():
                file = file / "index.html"
            if file.is_file():
                if not file.resolve().is_relative_to(self.root):
                    return None, False  # a symlink out of the site
                return file, overlay
        return None, False

    @staticmethod
    def _not_modified(headers: dict, request_headers) -> bool:
        if_none_match, since = request_headers.get("If-None-Match"), request_headers.get("If-Modified-Since")
        if if_none_match is not None:  # takes precedence over If-Modified-Since (RFC 9110)
            tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
            return "*" in tags or headers["ETag"] in tags
        try:
            return bool(since) and parsedate_to_datetime(headers["Last-Modified"]) <= parsedate_to_datetime(since)
        except (TypeError, ValueError):
            return False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the default backlog (5) overflows under a crawl: 1 s SYN retries
    demo: DemoServer


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    server_version = "HarborDemo/1.0"

    def do_GET(self) -> None:
        demo = self.server.demo
        reply = demo.respond(self.path, self.headers)
        content_type = reply.headers.get("Content-Type", "")
        # Record before answering, so a client that got its answer always finds the hit.
        demo._record(Hit(self.command, self.headers.get("Host", ""), self.path, reply.status, content_type))
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(reply.body)

    do_HEAD = do_GET

    def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: no stderr spam
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the scrapy-dedup demo site.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 for any free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--variant", choices=VARIANTS, default="v1", help="v2 = the re-crawl variant")
    args = parser.parse_args(argv)
    server = DemoServer(host=args.host, port=args.port, variant=args.variant).start()
    print(server.url + "/", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
