"""Connection to a Redis store and the server-side functions it runs.

``connect(url)`` opens a standalone server or a Redis Cluster (recognised from the
server's own ``INFO cluster``), with bounded retries and backoff, and never puts a
password in a message. :class:`StoreFunctions` loads ``functions.lua`` (Redis
7+ Functions, versioned) on every master and calls its functions with the keys of
:mod:`scrapy_dedup.store.redis.keys`.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from scrapy_dedup.store import is_redis_url
from scrapy_dedup.store.base import StoreError, StoreWriteError
from scrapy_dedup.store.redis import keys as rk
from scrapy_dedup.store.redis.wire import FunctionsMissing, StorePool

logger = logging.getLogger(__name__)

LIBRARY_NAME = "scrapy_dedup"
LIBRARY_CODE = resources.files("scrapy_dedup.store.redis").joinpath("functions.lua").read_text(encoding="utf-8")
_VERSION_LINE = re.search(r"^local LIBRARY_VERSION = (\d+)$", LIBRARY_CODE, re.M)
assert _VERSION_LINE is not None, "functions.lua declares its LIBRARY_VERSION"
LIBRARY_VERSION = int(_VERSION_LINE.group(1))
MIN_SERVER_MAJOR = 7

#: a cluster the client lost once its own retries ran out: no node reachable (redis-py 8's
#: RedisClusterUnreachableError; before, its base class), or a slot whose master is gone (its
#: nodes answer CLUSTERDOWN, or it is covered by no node the client knows)
_CLUSTER_LOST = (getattr(redis.exceptions, "RedisClusterUnreachableError", redis.exceptions.RedisClusterException),
                 redis.exceptions.ClusterDownError, redis.exceptions.SlotNotCoveredError)
#: what stops a crawl on the Redis store: the connection lost once the retries ran out, a write
#: the server refused because its memory limit (``maxmemory``) is reached (:func:`refused_as_full`),
#: a transaction it discarded whole at EXEC, or a server without the store's functions (restarted
#: empty or flushed: :class:`~scrapy_dedup.store.redis.wire.FunctionsMissing`)
_STORE_FAILURES = (redis.ConnectionError, redis.TimeoutError, *_CLUSTER_LOST,
                   redis.exceptions.OutOfMemoryError, redis.exceptions.ExecAbortError, FunctionsMissing)


def refused_as_full(exc: BaseException) -> bool:
    """Whether the server refused a write because its memory limit is reached: a command it
    refused (OOM), or a transaction it discarded at EXEC for that reason (the memory ran out
    after the transaction's commands were queued; EXECABORT, with no command of it refused).

    >>> refused_as_full(redis.exceptions.ExecAbortError(
    ...     "Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'."))
    True
    >>> refused_as_full(redis.exceptions.ExecAbortError("Transaction discarded because of previous errors."))
    False
    """
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return True
    return isinstance(exc, redis.exceptions.ExecAbortError) and "OOM" in str(exc)


class StoreConnectionLost(StoreWriteError):
    """The Redis store stopped answering and the retries ran out: the crawl stops."""


class StoreFull(StoreWriteError):
    """The Redis server refused a write, its memory limit (``maxmemory``) reached: the crawl stops."""


class StoreLost(StoreWriteError):
    """The Redis server lost the store's functions mid-crawl (restarted without persistence, or
    flushed), and with them most likely its records: the crawl stops."""


def redact(url: str) -> str:
    """The URL with its password replaced by ``***`` (for logs and errors).

    >>> redact("redis://user:s3cret@db.example:6380/2")
    'redis://user:***@db.example:6380/2'
    >>> redact("rediss://:s3cret@db.example/0")
    'rediss://:***@db.example/0'
    >>> redact("redis://db.example:6379/0")
    'redis://db.example:6379/0'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _scrub(text: str, url: str) -> str:
    password = urlsplit(url).password
    if password:
        for form in {password, unquote(password)}:
            text = text.replace(form, "***")
    return text


def _tls_hint(exc: BaseException | None) -> str:
    """What to check when ``exc`` came from setting up TLS: either side refused the handshake, or a
    certificate file named in the URL is missing."""
    while exc is not None and not isinstance(exc, (ssl.SSLError, FileNotFoundError)):
        exc = exc.__cause__ or exc.__context__
    if exc is None:
        return ""
    return (" (TLS: the server's certificate is checked against ssl_ca_certs, and a server that asks for "
            "the client's needs ssl_certfile and ssl_keyfile, in the URL's query)")


@dataclass(frozen=True)
class RetryPolicy:
    """How often a lost connection is tried again, with exponential backoff (seconds)."""

    retries: int = 5
    backoff_base: float = 0.1
    backoff_cap: float = 5.0


def connect(url: str, *, retry: RetryPolicy = RetryPolicy(), timeout: float = 10.0) -> redis.Redis | RedisCluster:
    """A client for the server at ``url``: a cluster client when the server is a cluster node.

    Fails with one line (:class:`StoreError`) naming the URL, password hidden, when the
    server cannot be reached, is older than Redis 7, or evicts any key when its memory is full
    (``maxmemory-policy allkeys-*``: the store's records would go without an error).
    """
    if not is_redis_url(url):
        raise StoreError(f"not a Redis URL: {redact(str(url))!r} (use redis://host:port/db or rediss://...)")
    shown = redact(url)
    options = dict(
        # RESP2, whatever redis-py's default: redis-py 8 defaults to RESP3 and then turns on its
        # maintenance notifications (Redis Cloud's endpoint moves), which need a RESP3 parser and
        # fail at connect with redis-py's own one when hiredis is absent. RESP2 is what redis-py
        # 5-7 speak by default, every server understands it, and its replies are the same here
        # (the store's functions return arrays, integers and bulk strings).
        protocol=2,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(ExponentialBackoff(cap=retry.backoff_cap, base=retry.backoff_base), retry.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    try:
        # the first contact is not retried: a wrong address or password fails the crawl at once
        probe = redis.Redis.from_url(url, **{**options, "retry": Retry(ExponentialBackoff(), 0)})
        try:
            info = probe.info("server")
            policy = str(probe.info("memory").get("maxmemory_policy", "noeviction"))
            clustered = bool(probe.info("cluster").get("cluster_enabled"))
        finally:
            probe.close()
    except redis.AuthenticationError as exc:
        raise StoreError(f"the Redis store at {shown} refused the credentials: {_scrub(str(exc), url)}") from None
    except redis.exceptions.NoPermissionError as exc:
        raise StoreError(
            f"the Redis store at {shown} does not let this user run INFO (the store reads the server's version, "
            f"memory policy and cluster mode with it; see the user's ACL): {_scrub(str(exc), url)}"
        ) from None
    except (redis.RedisError, OSError, ValueError) as exc:
        raise StoreError(f"cannot reach the Redis store at {shown}: {_scrub(str(exc), url)}{_tls_hint(exc)}") from None
    except TypeError as exc:  # a query option the connection does not take (ssl_* on redis://, a typo)
        option = re.sub(r".*keyword argument ", "", str(exc))
        tls = " (TLS options need a rediss:// URL)" if option.startswith("'ssl_") and url.startswith("redis:") else ""
        raise StoreError(f"the Redis URL {shown} has a query option its connection does not take: {option}{tls}") from None
    version = str(info.get("redis_version", "0"))
    if int(version.split(".")[0]) < MIN_SERVER_MAJOR:
        raise StoreError(
            f"the Redis store at {shown} runs Redis {version}; Redis {MIN_SERVER_MAJOR}.0 or newer is needed (Functions)"
        )
    if policy.startswith("allkeys-"):
        raise StoreError(
            f"the Redis store at {shown} evicts keys when its memory is full (maxmemory-policy {policy}): the "
            "store's records would be lost without an error; use a server with maxmemory-policy noeviction, "
            "which refuses writes instead (the crawl then stops and resumes)"
        )
    client: redis.Redis | RedisCluster
    try:
        if clustered:
            # the db number is meaningless on a cluster (always 0): drop it rather than fail
            parts = urlsplit(url)
            client = RedisCluster.from_url(urlunsplit((parts.scheme, parts.netloc, "", parts.query, "")),
                                           connection_pool_class=StorePool, **options)
            _fcall_keys_from_arguments(client)
        else:
            client = redis.Redis(connection_pool=StorePool.from_url(url, **options))
            client.auto_close_connection_pool = True  # as Redis.from_url makes it: close() ends the pool
    except (redis.RedisError, OSError) as exc:
        raise StoreError(f"cannot reach the Redis store at {shown}: {_scrub(str(exc), url)}") from None
    logger.debug("connected to the Redis store at %s (%s)", shown, "cluster" if clustered else "standalone")
    return client


def _fcall_keys_from_arguments(client: RedisCluster) -> None:
    """Route FCALLs without asking the server for their keys.

    redis-py's cluster client finds the slot of a command whose keys may move by asking the
    server (``COMMAND GETKEYS``, one round trip), twice per FCALL in a pipeline: that was 75%
    of a near-duplicate decision's time on a cluster. An FCALL's keys are its ``numkeys``
    arguments after the function's name.
    """
    parser = client.commands_parser
    ask_server = parser.get_keys

    def get_keys(redis_conn: Any, *args: Any) -> Any:
        if len(args) >= 3 and str(args[0]).upper() in ("FCALL", "FCALL_RO"):
            keys = list(args[3 : 3 + int(args[2])])
            return keys or None
        return ask_server(redis_conn, *args)

    # the client's own parser instance is patched: its attribute shadows the class's method
    parser.get_keys = get_keys  # type: ignore[method-assign]


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster)


def primaries(client: Any) -> list[Any]:
    """One plain client per master (the client itself when standalone)."""
    if not is_cluster(client):
        return [client]
    return [client.get_redis_connection(node) for node in client.get_primaries()]


class StoreFunctions:
    """The server-side functions, called with this crawl's keys (prefix ``prefix``)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = rk.check_prefix(prefix)
        #: one server, no slots: one call or MULTI/EXEC may span slots (sdd_frontier_mark_owe, the
        #: writes that wait carried by a call), where a cluster goes slot by slot (journalled)
        self.fused = not is_cluster(client)
        self.ensure_library()

    # -- the library ------------------------------------------------------------------------
    def ensure_library(self) -> None:
        """Load the library on every master that lacks this version of it.

        The library is the server's, shared by every crawl on it whatever its prefix: an older
        one is replaced, and a newer one (loaded by a newer release of this extension) is
        refused before anything is written, since replacing it would break the crawls that run
        it."""
        for node in primaries(self.client):
            try:
                loaded = int(node.fcall_ro("sdd_version", 0))
            except redis.ResponseError:
                loaded = None
            if loaded is not None and loaded > LIBRARY_VERSION:
                raise StoreError(
                    f"the Redis server runs the {LIBRARY_NAME} functions version {loaded}, newer than "
                    f"this release's {LIBRARY_VERSION}: upgrade scrapy-dedup on this machine, or use "
                    "another server"
                )
            if loaded != LIBRARY_VERSION:
                node.function_load(LIBRARY_CODE, replace=True)
                logger.info("loaded server functions %s version %d", LIBRARY_NAME, LIBRARY_VERSION)

    # -- frontier ---------------------------------------------------------------------------
    def frontier_size(self) -> int:
        """URL keys in the frontier, read bucket by bucket (SCAN: no snapshot, no blocking)."""
        buckets = self.client.scan_iter(match=rk.frontier_pattern(self.prefix), count=1000)
        return sum(int(self.client.strlen(key)) // rk.FRONTIER_RECORD for key in buckets)

    # -- near-duplicate tables --------------------------------------------------------------
    def queue_near_read(
        self, pipe: Any, scope: str, simhash: int, max_distance: int
    ) -> Callable[[list], set[tuple[int, bytes]]]:
        """Queue the reads of the buckets of ``simhash``, one a table; the function returned turns
        their replies into the (simhash, token) records within ``max_distance`` of it."""
        for table, key in enumerate(rk.near_buckets(self.prefix, scope, simhash)):
            pipe.execute_command("HGET", key, rk.near_block(simhash, table).to_bytes(2, "big"))

        def decode(replies: list) -> set[tuple[int, bytes]]:
            return rk.records_near(b"".join(value for value in replies if value), simhash, max_distance)

        return decode

    # -- what a dead holder held ------------------------------------------------------------
    def claim(self, key: str, holder: str, dead: Sequence[str]) -> Iterator[tuple[bytes, bytes]]:
        """(field, what it held) of every entry of a ``dead`` holder in the hash ``key``, each
        now tagged with ``holder`` (``""``: deleted), a few hundred a call (``sdd_claim``)."""
        cursor: Any = 0
        while True:
            cursor, *flat = self.client.fcall("sdd_claim", 1, key, cursor, holder, *dead)
            for i in range(0, len(flat), 2):
                yield bytes(flat[i]), bytes(flat[i + 1])
            if int(cursor) == 0:
                return

