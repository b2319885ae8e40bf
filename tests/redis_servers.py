"""Real Redis servers for the tests and benchmarks: one standalone server and a 3-master cluster,
each started from the ``redis-server`` on PATH on free loopback ports, in a temporary directory,
with persistence off, and stopped (SIGTERM, then SIGKILL) when done.

``make redis-server`` installs the server when it is missing (see the Makefile); nothing here
falls back to a fake.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: a cluster node also listens on port + 10000 (the cluster bus)
_BUS_OFFSET = 10000
_START_TIMEOUT = 20.0


class RedisUnavailable(RuntimeError):
    """No usable redis-server binary."""


def redis_binaries() -> tuple[str, str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        raise RedisUnavailable(
            "redis-server and redis-cli are needed (Redis 7.0+): run `make redis-server`, "
            "or install Debian's redis-server package"
        )
    return server, cli


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(bus: bool = False) -> int:
    """A loopback port free now (and, with ``bus``, its cluster bus port too)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if bus and (port + _BUS_OFFSET > 65535 or not _port_free(port + _BUS_OFFSET)):
            continue
        return port
    raise RuntimeError("no free loopback port found")


def _ping(cli: str, port: int, *args: str) -> str:
    proc = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return proc.stdout.strip()


def _answers(port: int) -> bool:
    """The server accepts commands (a NOAUTH error counts: it is up, with a password)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1:``port``."""

    def __init__(self, directory: Path, *, cluster: bool = False, extra: tuple[str, ...] = ()) -> None:
        self.server, self.cli = redis_binaries()
        self.directory = directory
        self.cluster = cluster
        self.extra = extra
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int | None = None) -> RedisServer:
        """Start on ``port``, or on a free port chosen now."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for _attempt in range(5):  # the port may be taken between choosing and binding it
            self.port = port or free_port(bus=self.cluster)
            argv = [
                self.server,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "no",
                "--logfile", str(self.directory / "redis.log"),
                *self.extra,
            ]
            if self.cluster:
                argv += [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(self.directory / "nodes.conf"),
                    "--cluster-node-timeout", "5000",
                ]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + _START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _answers(self.port):
                    return self
                time.sleep(0.05)
            self.stop()
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"redis-server did not start in {self.directory}:\n{log}")

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server with ``sig`` and start it again on its port. It comes back with what its
        persistence kept: nothing unless ``extra`` turns some on (``--appendonly yes``), and with
        SIGKILL nothing written since its last fsync."""
        self.proc.send_signal(sig)
        self.proc.wait()
        self.proc = None
        self.start(self.port)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisCluster:
    """Three masters (no replicas) holding all 16,384 slots, built with ``redis-cli --cluster create``."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.directory = directory
        self.nodes = [RedisServer(directory / f"node{i}", cluster=True) for i in range(masters)]

    @property
    def url(self) -> str:
        """Any node's URL: a client finds the others from it."""
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            cli = self.nodes[0].cli
            proc = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            deadline = time.monotonic() + _START_TIMEOUT
            while time.monotonic() < deadline:
                states = [_ping(cli, p, "CLUSTER", "INFO") for p in self.ports]
                if all("cluster_state:ok" in s and f"cluster_known_nodes:{len(self.nodes)}" in s for s in states):
                    return self
                time.sleep(0.1)
            raise RuntimeError(f"the cluster did not become ready: {states}")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


if __name__ == "__main__":  # manual check: start both, print their URLs, stop
    work = temp_dir("redis-check-")
    try:
        with RedisServer(work / "single") as single, RedisCluster(work / "cluster") as cluster:
            print(single.url, cluster.url, os.getpid())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def counting_connection():
    """A redis-py connection class that counts the commands it sends and its round trips (one
    per write to the socket: a command alone, or a whole pipeline), for a store's pool to use;
    ``seconds`` is the wall time spent writing to the socket and reading replies (the server's
    work and the network, with the client's parsing of the replies)."""
    import time

    import redis

    class Counting(redis.Connection):
        commands = 0
        round_trips = 0
        seconds = 0.0

        def send_command(self, *args, **kwargs):
            Counting.commands += 1
            return super().send_command(*args, **kwargs)

        def pack_commands(self, commands):
            commands = list(commands)
            Counting.commands += len(commands)
            return super().pack_commands(commands)

        def send_packed_command(self, command, check_health=True):
            Counting.round_trips += 1
            start = time.perf_counter()
            try:
                return super().send_packed_command(command, check_health)
            finally:
                Counting.seconds += time.perf_counter() - start

        def read_response(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return super().read_response(*args, **kwargs)
            finally:
                Counting.seconds += time.perf_counter() - start

    return Counting
