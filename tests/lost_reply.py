"""A TCP relay on 127.0.0.1 in front of a real redis-server that loses replies: it passes a chunk
of commands to the server, then closes the connection instead of passing the server's reply back.
The server has run the commands; the client sees a dropped connection (reset), as when a server
is restarted right after a write. It loses the reply to the next chunk naming ``armed`` (then
disarms), and, with ``every``, to every ``every``-th chunk after the first ``after``. It can also
hold back the next chunk naming ``hold``'s bytes for ``hold``'s seconds (``holding`` is set
then): that round trip reaches the server late, while other connections go on."""

from __future__ import annotations

import socket
import struct
import threading
import time


class LostReplyRelay:
    def __init__(self, upstream_port: int, every: int = 0, after: int = 0) -> None:
        self.upstream_port = upstream_port
        self.armed: bytes | None = None
        self.every, self.after = every, after
        self.chunks = 0  # chunks passed to the server so far
        self.lost = 0  # replies lost so far
        self.hold: tuple[bytes, float] | None = None
        self.holding = threading.Event()
        self._count = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def __enter__(self) -> LostReplyRelay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        for s in self._sockets:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, server]
            losing = threading.Event()
            threading.Thread(target=self._up, args=(client, server, losing), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, losing), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, losing: threading.Event) -> None:
        try:
            while chunk := client.recv(65536):
                with self._count:
                    self.chunks += 1
                    nth = self.every and self.chunks > self.after and (self.chunks - self.after) % self.every == 0
                if nth or (self.armed is not None and self.armed in chunk):
                    self.armed = None
                    losing.set()
                if self.hold is not None and self.hold[0] in chunk:
                    seconds, self.hold = self.hold[1], None
                    self.holding.set()
                    time.sleep(seconds)
                server.sendall(chunk)
        except OSError:
            pass

    def _down(self, server: socket.socket, client: socket.socket, losing: threading.Event) -> None:
        try:
            while chunk := server.recv(65536):
                if losing.is_set():  # the server ran the command: its reply goes nowhere
                    self.lost += 1
                    for s in (client, server):
                        s.shutdown(socket.SHUT_RDWR)
                    # reset: a client still sending the rest of its commands fails there
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                    return
                client.sendall(chunk)
        except OSError:
            pass
