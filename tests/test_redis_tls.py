"""The Redis store over TLS (``rediss://``): a real redis-server listening on a TLS port with a
certificate made for the test, which asks clients for theirs (the same certificate here), a
password, and a crawl that ends as one on LevelDB does."""

from __future__ import annotations

import datetime
import ipaddress
import uuid
from pathlib import Path

import pytest
import redis
from redis_servers import RedisServer, free_port
from test_resume import Crawl, check_same_store, site, state_of, uninterrupted  # noqa: F401 - fixtures

from scrapy_dedup.store.base import StoreError
from scrapy_dedup.store.redis.functions import connect
from scrapy_dedup.store.redis.store import RedisStore
from scrapy_dedup.store.redis.wire import HiredisPacker

PASSWORD = "tls-s3cret"


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A key and a self-signed certificate for 127.0.0.1, valid for a day: (certificate, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scrapy-dedup test server")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.crt", directory / "server.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """(the server, its TLS port, the certificate: the server's, its CA, and the client's)."""
    directory = tmp_path_factory.mktemp("redis-tls")
    cert, key = _self_signed(directory)
    tls_port = free_port()
    tls = ("--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
           "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "yes", "--requirepass", PASSWORD)
    with RedisServer(directory, extra=tls) as server:
        yield server, tls_port, cert


def _url(tls_server, query: str) -> str:
    _, port, _ = tls_server
    return f"rediss://:{PASSWORD}@127.0.0.1:{port}/0{query}"


def _trusted(tls_server, client_certificate: bool = True) -> str:
    """The URL of a client that trusts the server's CA and, by default, shows its certificate."""
    cert = tls_server[2]
    mine = f"&ssl_certfile={cert}&ssl_keyfile={cert.with_suffix('.key')}" if client_certificate else ""
    return _url(tls_server, f"?ssl_ca_certs={cert}{mine}")


def test_a_crawl_over_tls_ends_as_one_on_leveldb(site, uninterrupted, tmp_path, tls_server):
    url = _trusted(tls_server)
    client = connect(url)
    try:
        pool = client.connection_pool
        assert pool.connection_class is redis.SSLConnection
        assert isinstance(pool.connection_kwargs["command_packer"], HiredisPacker)
    finally:
        client.close()
    prefix = f"tls:{uuid.uuid4().hex[:10]}"
    crawl = Crawl(site, tmp_path / "crawl", DEDUP_STORE=url, DEDUP_REDIS_PREFIX=prefix)
    log = crawl.run_to_end()
    assert PASSWORD not in log
    assert not crawl.double_fetches
    with RedisStore.open_existing(url, prefix=prefix) as store:
        check_same_store(state_of(store), uninterrupted)


@pytest.mark.parametrize("kind", ["no CA", "a missing CA file", "no client certificate"])
def test_a_tls_connection_either_side_refuses_fails_in_one_line_without_the_password(tls_server, kind):
    url = {"no CA": _url(tls_server, ""), "a missing CA file": _url(tls_server, "?ssl_ca_certs=/nonexistent/ca.pem"),
           "no client certificate": _trusted(tls_server, client_certificate=False)}[kind]
    with pytest.raises(StoreError) as info:
        connect(url)
    message = str(info.value)
    assert "\n" not in message and PASSWORD not in message and "***" in message
    assert message.startswith("cannot reach the Redis store at rediss://")
    assert message.endswith("(TLS: the server's certificate is checked against ssl_ca_certs, and a server that "
                            "asks for the client's needs ssl_certfile and ssl_keyfile, in the URL's query)")


def test_plain_redis_to_a_tls_port_fails_in_one_line(tls_server):
    _, port, _ = tls_server
    with pytest.raises(StoreError) as info:
        connect(f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    assert "\n" not in str(info.value) and PASSWORD not in str(info.value)
