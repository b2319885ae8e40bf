"""A site served on 127.0.0.1 (port 0) for the tests' real crawls.

``reply(path)`` answers every GET with ``(status, headers, body)``; the page is sent as HTML
with its length. Each request runs in a thread of its own, so a reply may block (a barrier
that answers several requests together) without holding up the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
