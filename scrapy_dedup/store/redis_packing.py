"""The Redis store's commands packed for the wire in one call to hiredis.

redis-py with hiredis installed packs a command with hiredis too, but first passes every
argument through its encoder, in Python. A crawled page sends the store about 28 commands
and 224 arguments, and that pass was 0.17 ms of the store's 1.56 ms per page (400 PostgreSQL
pages decided in one process, 6 interleaved rounds, medians; ``benchmarks/bench_redis.py``,
store time per page). hiredis takes the arguments the encoder would give it (str as UTF-8,
bytes, memoryview, int, float) itself, and refuses the rest as the encoder does.

Without hiredis (it comes with the ``redis`` extra) redis-py's own packer is kept.
"""

from __future__ import annotations

from typing import Any

import redis

try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is installed with the redis extra
    hiredis = None


class HiredisPacker:
    """A redis-py ``command_packer``: the command, its arguments as given, packed by hiredis.

    >>> HiredisPacker().pack("FUNCTION LOAD", b"#!lua", 7)
    [b'*4\\r\\n$8\\r\\nFUNCTION\\r\\n$4\\r\\nLOAD\\r\\n$5\\r\\n#!lua\\r\\n$1\\r\\n7\\r\\n']
    >>> HiredisPacker().pack("SET", bytearray(b"k"), 1.5) == HiredisPacker().pack("SET", "k", "1.5")
    True
    >>> HiredisPacker().pack("SET", "k", None)
    Traceback (most recent call last):
    ...
    redis.exceptions.DataError: cannot send None to Redis (in a SET command): give str, bytes, int or float
    """

    def pack(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (isinstance(name, str) and " " in name) or (isinstance(name, bytes) and b" " in name):
            args = (*name.split(), *args[1:])  # redis-py names some commands in one string: "CONFIG SET"
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            pass
        args = tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args)  # as redis-py takes them
        bad = [a for a in args if isinstance(a, bool) or not isinstance(a, (str, bytes, int, float))]
        if not bad:
            return [hiredis.pack_command(args)]
        raise redis.DataError(
            f"cannot send {bad[0]!r} to Redis (in a {_text(args[0])} command): give str, bytes, int or float"
        )


def _text(name: Any) -> str:
    return name.decode("ascii", "replace") if isinstance(name, (bytes, bytearray)) else str(name)


class PackingPool(redis.ConnectionPool):
    """redis-py's connection pool, its connections packing with :class:`HiredisPacker` when
    hiredis is installed. Given as ``connection_pool_class`` to a cluster client, it serves
    every node, including the ones it finds later."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if hiredis is not None:
            kwargs.setdefault("command_packer", HiredisPacker())
        super().__init__(*args, **kwargs)
