"""How the Redis store's commands go over the wire: packed by hiredis as given (redis-py's
encoder pass in Python was a tenth of the store's time a page), and the server's errors read
into the store's own classes where it must tell them apart (``ERR Function not found``: a
server restarted empty or flushed, which stops a crawl).
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.connection import DefaultParser

try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is installed with the redis extra
    hiredis = None  # type: ignore[assignment]  # read as "no hiredis": StorePool keeps redis-py's packer


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
        except TypeError:  # as redis-py takes them
            args = tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args)
        bad = [a for a in args if isinstance(a, bool) or not isinstance(a, (str, bytes, int, float))]
        if not bad:
            return [hiredis.pack_command(args)]
        name = args[0].decode("ascii", "replace") if isinstance(args[0], bytes) else str(args[0])
        raise redis.DataError(f"cannot send {bad[0]!r} to Redis (in a {name} command): give str, bytes, int or float")


class FunctionsMissing(redis.ResponseError):
    """The server does not have the store's functions (``ERR Function not found``): it restarted
    without persistence, or they were flushed; the store's records may be gone with them."""


_ERR_CLASSES = DefaultParser.EXCEPTION_CLASSES["ERR"]
assert isinstance(_ERR_CLASSES, dict), "redis-py maps the ERR code to its exception class by message"
_ERR_CLASSES = {**_ERR_CLASSES, "Function not found": FunctionsMissing}


_lost = threading.local()


def replies_lost() -> int:
    """How many round trips this thread has lost its connection in, sending or waiting for the
    replies. redis-py sends a round trip again when its connection drops, and when the server
    had run it (or, sent in pieces, the part that reached it) before the replies were lost, the
    second sending sees the first one's effect: a caller that reads a write's answer compares
    this count before and after its call."""
    return getattr(_lost, "count", 0)


# redis-py picks DefaultParser at import (its hiredis parser or its Python one) and declares it a
# variable of a union of classes; it is a class, which the checker cannot take as a base.
class StoreParser(DefaultParser):  # type: ignore[misc,valid-type]
    """redis-py's reply parser, reading ``ERR Function not found`` as :class:`FunctionsMissing`,
    and counting the connections dropped in :func:`replies_lost` (on one server and on every node
    of a cluster, whose client retries in a loop of its own): redis-py tells its parser of each,
    whether a send or a read failed.

    >>> parser = StoreParser(socket_read_size=65536)
    >>> [type(parser.parse_error(reply)).__name__ for reply in ("ERR Function not found", "ERR no such key", "OOM no")]
    ['FunctionsMissing', 'ResponseError', 'OutOfMemoryError']
    """

    EXCEPTION_CLASSES = {**DefaultParser.EXCEPTION_CLASSES, "ERR": _ERR_CLASSES}

    def on_disconnect(self) -> None:
        _lost.count = replies_lost() + 1
        super().on_disconnect()


class StorePool(redis.ConnectionPool):
    """redis-py's connection pool, its connections reading replies with :class:`StoreParser`
    and packing with :class:`HiredisPacker` when hiredis is installed. Given as
    ``connection_pool_class`` to a cluster client, it serves every node, including the ones it
    finds later."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", StoreParser)
        if hiredis is not None:
            kwargs.setdefault("command_packer", HiredisPacker())
        super().__init__(*args, **kwargs)
