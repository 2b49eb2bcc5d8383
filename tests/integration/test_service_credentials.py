"""The services ``chrono services up`` runs require the installation's generated credentials.

Against the real instances the other tests use (never restarted here): each refuses a client
without its credentials (none, a wrong password, the server's well-known default login) and
accepts the one that has them, and every Chrono process finds them the same way, through
``chronocore.config`` and the credentials file.
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import stat
import struct
import urllib.error
import urllib.request
from urllib.parse import unquote, urlsplit

import amqp
import psycopg
import pytest
import redis

import localservices
from chronocore.config import get_config
from chronocore.credentials import read_credentials
from localservices import search as search_service
from localservices.config import service_urls
from search.client import SearchClient


@pytest.fixture(scope="module")
def config(services_up) -> localservices.ServicesConfig:
    return localservices.ServicesConfig.from_env()


@pytest.fixture(scope="module")
def service(config):
    by_name = {s.name: s for s in localservices.registered_services(config)}
    return by_name.__getitem__


# ------------------------------------------------------------------------------ where they live


def test_the_credentials_file_is_root_s_alone_and_holds_a_generated_secret_per_service(config):
    path = get_config().credentials_path
    assert path == config.credentials_file
    status = path.stat()
    assert stat.S_IMODE(status.st_mode) == 0o600
    assert status.st_uid == os.geteuid() == 0, "`chrono services up` runs as root"
    stored = read_credentials(path)
    for name, secret in stored.as_dict().items():
        assert secret is not None, f"no {name} secret in {path}"
        assert len(secret.password) >= 43, name  # 32 random bytes, URL-safe base64


def test_every_process_finds_the_credentials_in_its_config(config):
    """What ``get_config()`` (web, beat, workers, reaper, indexer, tests, bench) connects with
    is what ``chrono services`` configured the servers with: the file's secrets, on the
    environment's hosts, ports and databases."""
    stored = read_credentials(get_config().credentials_path)
    urls = get_config().service_urls()
    for name, raw in service_urls().items():
        assert not urlsplit(raw).password, f"{name}: the suite runs with URLs without passwords"
        secret = getattr(stored, name)
        assert unquote(urlsplit(urls[name]).password) == secret.password, name
        assert (urlsplit(urls[name]).username or "") == secret.user, name
    assert (config.database.user, config.database.password) == (
        stored.database.user, stored.database.password)
    assert config.broker.password == stored.broker.password


# ---------------------------------------------------------------------------------- PostgreSQL


def _pg_login(config, *, user: str, password: str) -> None:
    e = config.database
    with psycopg.connect(host=e.host, port=e.port, user=user, password=password,
                         dbname=e.namespace, passfile="/nonexistent/.pgpass",
                         connect_timeout=5) as conn:
        conn.execute("SELECT 1")


@pytest.mark.parametrize("login", [
    pytest.param(("chrono", ""), id="no-password"),
    pytest.param(("chrono", "chrono"), id="old-default-password"),
    pytest.param(("chrono", "wrong"), id="wrong-password"),
    pytest.param(("postgres", ""), id="superuser-without-password"),
    pytest.param(("postgres", "postgres"), id="superuser-default-password"),
])
def test_postgresql_refuses_a_tcp_login_without_the_generated_password(config, login):
    user, password = login
    with pytest.raises(psycopg.OperationalError, match="password"):
        _pg_login(config, user=user, password=password)


def test_postgresql_accepts_the_generated_password(config):
    _pg_login(config, user=config.database.user, password=config.database.password)


def test_postgresql_asks_every_tcp_login_for_a_scram_password(service):
    """No trust, peer or ident line for any host address; trust only on the Unix socket, which
    sits in the 0700 data directory."""
    postgres = service("postgresql")
    with postgres._admin_connection() as conn:
        rules = conn.execute(
            "SELECT type, auth_method FROM pg_hba_file_rules WHERE error IS NULL"
        ).fetchall()
        (encryption,) = conn.execute("SHOW password_encryption").fetchone()
    assert {method for kind, method in rules if kind != "local"} == {"scram-sha-256"}
    assert {method for kind, method in rules if kind == "local"} == {"trust"}
    assert encryption == "scram-sha-256"
    assert stat.S_IMODE(postgres.data_dir.stat().st_mode) == 0o700


# --------------------------------------------------------------------------------------- Redis


def _redis(config, password: str | None) -> redis.Redis:
    e = config.redis
    return redis.Redis(host=e.host, port=e.port, password=password, socket_timeout=5)


@pytest.mark.parametrize("password", [None, "wrong"], ids=["no-password", "wrong-password"])
def test_redis_refuses_a_client_without_the_generated_password(config, password):
    with _redis(config, password) as client, pytest.raises(redis.AuthenticationError):
        client.ping()


def test_redis_accepts_the_generated_password_and_keeps_it_in_its_config(config, service):
    with _redis(config, config.redis.password) as client:
        assert client.ping()
        assert client.config_get("requirepass") == {"requirepass": config.redis.password}
    conf = service("redis").conf_path
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640
    assert pwd.getpwuid(conf.stat().st_uid).pw_name == "redis"


def test_the_process_redis_client_logs_in_with_the_credentials_file():
    from chronocore.redis_client import redis_client

    assert redis_client().ping()


# ------------------------------------------------------------------------------------ RabbitMQ


def _amqp_login(config, *, user: str, password: str) -> None:
    e = config.broker
    connection = amqp.Connection(host=e.address, userid=user, password=password,
                                 virtual_host=e.namespace, connect_timeout=5)
    connection.connect()
    connection.close()


@pytest.mark.parametrize("login", [
    pytest.param(("guest", "guest"), id="guest"),
    pytest.param(("chrono", "wrong"), id="wrong-password"),
    pytest.param(("chrono", ""), id="no-password"),
])
def test_rabbitmq_refuses_a_login_without_the_generated_password(config, login):
    user, password = login
    with pytest.raises(amqp.exceptions.AccessRefused):
        _amqp_login(config, user=user, password=password)


def test_rabbitmq_accepts_the_generated_password_and_has_no_guest(config, service):
    _amqp_login(config, user=config.broker.user, password=config.broker.password)
    users = service("rabbitmq")._users()
    assert config.broker.user in users
    assert "guest" not in users


# -------------------------------------------------------------------------------- search node


def _search_status(config, authorization: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{config.search.address}/_cluster/health")
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 (loopback)
            return reply.status, dict(reply.headers)
    except urllib.error.HTTPError as error:
        error.close()
        return error.code, dict(error.headers)


@pytest.mark.parametrize("authorization", [
    pytest.param(None, id="no-credentials"),
    pytest.param("Basic Y2hyb25vOndyb25n", id="wrong-password"),  # chrono:wrong
    pytest.param("Basic YWRtaW46YWRtaW4=", id="opensearch-demo-admin"),  # admin:admin
    pytest.param("Bearer chrono", id="not-basic"),
])
def test_the_search_node_refuses_a_request_without_the_generated_password(config, authorization):
    status, headers = _search_status(config, authorization)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="chrono-search"')


def test_the_search_node_accepts_the_generated_password_through_chrono_s_client(config):
    with SearchClient(get_config().search_url) as client:
        assert client.cluster_status() in ("green", "yellow")
    users_file = localservices.SearchService(
        endpoint=config.search, data_dir=config.data_dir / "search").users_file
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    assert config.search.password not in users_file.read_text()  # a salted hash only


def test_the_search_node_s_transport_port_serves_no_outside_peer(config, service):
    """The node-to-node port would serve any action to whoever speaks the protocol: a real
    ``cluster:monitor/main`` request over TCP is answered with an error, not the node's info."""
    node = service("search")
    status, body = _transport_request(node.transport_port, "cluster:monitor/main")
    assert status & TRANSPORT_STATUS_ERROR, body[:200]
    assert b"serves no peer" in body


# A transport request as OpenSearch 2.x frames it (TcpHeader, OutboundMessage.Request): "ES",
# the length of the rest, request id, status, version, variable header (thread context request
# and response headers, features, action), then the request (a TransportRequest's parent task
# id, empty).
TRANSPORT_STATUS_ERROR = 0x02


def _transport_version_id() -> int:
    """The launcher's OpenSearch version as its wire id (``Version.id``: major, minor and
    revision as decimal digit pairs and 99, marked with bit 27 to tell OpenSearch from
    Elasticsearch)."""
    pom = (search_service.LAUNCHER_DIR / "pom.xml").read_text()
    version = re.search(r"<opensearch.version>(\d+)\.(\d+)\.(\d+)<", pom)
    major, minor, revision = (int(part) for part in version.groups())
    return (major * 1_000_000 + minor * 10_000 + revision * 100 + 99) ^ 0x08000000


def _vint(value: int) -> bytes:
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _transport_string(text: str) -> bytes:
    return _vint(len(text)) + text.encode()


def _transport_request(port: int, action: str) -> tuple[int, bytes]:
    variable = _vint(0) + _vint(0) + _vint(0) + _transport_string(action)
    rest = struct.pack(">qbii", 1, 0, _transport_version_id(), len(variable)) + variable
    rest += _transport_string("")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(b"ES" + struct.pack(">i", len(rest)) + rest)
        header = _receive(connection, 6)
        assert header[:2] == b"ES", header
        body = _receive(connection, struct.unpack(">i", header[2:])[0])
    return body[8], body


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        assert chunk, f"the node closed the connection after {len(data)} of {size} bytes"
        data += chunk
    return data
