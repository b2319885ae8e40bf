"""A TCP relay on 127.0.0.1 that holds every chunk for a fixed time in each direction: a
server "further away" on loopback, for measuring what round trips cost a crawl.

    with LatencyProxy("127.0.0.1", 6379, delay=0.0005) as proxy:   # +~1 ms per round trip
        client = redis.Redis(port=proxy.port)

    .venv/bin/python benchmarks/latency_proxy.py --upstream 127.0.0.1:6379 --delay-ms 0.5

Threads, not asyncio: asyncio's selector waits in whole milliseconds (epoll rounds a 0.5 ms
timeout up to 1 ms), while ``time.sleep`` sleeps to the microsecond. Per connection and
direction one thread reads and stamps each chunk with the time it is due, another sends it
then: chunks keep their order and a chunk read while an earlier one waits is not held longer.
``chunks_up`` counts the chunks sent towards the server (about one per round trip).
Measurement only: it is not part of the extension.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time


class LatencyProxy:
    def __init__(self, upstream_host: str, upstream_port: int, delay: float, port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay = delay
        self.chunks_up = 0
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> LatencyProxy:
        threading.Thread(target=self._accept, daemon=True, name="latency-proxy").start()
        return self

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                if self._closed:
                    return
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            self._pipe(client, server, up=True)
            self._pipe(server, client, up=False)

    def _pipe(self, source: socket.socket, target: socket.socket, up: bool) -> None:
        due: queue.SimpleQueue = queue.SimpleQueue()

        def read() -> None:
            try:
                while chunk := source.recv(65536):
                    due.put((time.perf_counter() + self.delay, chunk))
            except OSError:
                pass
            due.put((0.0, b""))

        def send() -> None:
            try:
                while True:
                    when, chunk = due.get()
                    if not chunk:
                        break
                    wait = when - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    target.sendall(chunk)
                    if up:
                        self.chunks_up += 1
                target.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=send, daemon=True).start()


def ping_ms(url: str, count: int = 200) -> float:
    """The median time of a Redis PING over one connection to ``url``, in ms."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()  # connect outside the timing
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - t0)
    finally:
        client.close()
    times.sort()
    return 1000 * times[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", default="127.0.0.1:6379", help="host:port of the server")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="added each way (default 0.5)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    with LatencyProxy(host, int(port), args.delay_ms / 1000, args.port) as proxy:
        print(f"relaying 127.0.0.1:{proxy.port} -> {args.upstream}, +{args.delay_ms} ms each way", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
