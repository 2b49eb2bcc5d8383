"""``chrono services up`` brings servers that an older Chrono started without credentials to the
generated ones, keeping their data, and a second ``up`` changes nothing.

Each test runs a throwaway instance of its own (its own data directory and ports, never the
shared services): started the way the Chrono before credentials left it (Redis without
``requirepass``, PostgreSQL's role with the old default password, RabbitMQ with ``guest``, a
search node without a users file), holding some data, then brought up by today's
:func:`localservices.bring_up` with credentials. Redis, PostgreSQL and RabbitMQ change in place
(same process); the search node must restart, since a node started without the plugin's users
file cannot be told to require one.
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
import uuid

import amqp
import psycopg
import pytest
import redis

import localservices
from localservices.base import make_traversable, port_holders
from localservices.config import Endpoint
from localservices.secrets import new_password
from tests.helpers import wait_for

pytestmark = pytest.mark.e2e


def _free_port(*, also_free_at: int) -> int:
    """A free loopback port whose companion (``port + also_free_at``: RabbitMQ's distribution
    port, the search node's transport port) is free as well."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + also_free_at < 65_536 and not port_holders(port + also_free_at):
            return port
    raise AssertionError("no free pair of ports")


def _low_free_port(*, also_free_at: int) -> int:
    """As :func:`_free_port`, from 41,000 to 45,535: RabbitMQ's distribution port, 20,000
    above, then lies past Linux's ephemeral range (32,768-60,999), where an outgoing connection
    took it between this check and the node's start once ("dist_port_already_used")."""
    for candidate in range(41_000 + uuid.uuid4().int % 4_000, 45_536):
        if not port_holders(candidate) and not port_holders(candidate + also_free_at):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", candidate))
                except OSError:
                    continue
            return candidate
    raise AssertionError("no free pair of ports")


@pytest.fixture
def data_dir(tmp_path):
    make_traversable(tmp_path)  # the servers run as their own users
    return tmp_path


def _endpoint(port: int, *, user: str, password: str, namespace: str) -> Endpoint:
    return Endpoint(host="127.0.0.1", port=port, user=user, password=password,
                    namespace=namespace)


def _started(service, *, provision: bool = False) -> None:
    """Start ``service`` as an older Chrono did (``provision`` for PostgreSQL's role), and wait
    until it answers with the old endpoint's credentials."""
    service.start()
    assert wait_for(service.ready, timeout_s=service.start_timeout_s), (
        f"{service.name} did not come up: {localservices.base.log_tail(service.log_path)}")
    if provision:
        service.provision()
    assert wait_for(service.answers, timeout_s=service.start_timeout_s)


# --------------------------------------------------------------------------------------- Redis


def test_redis_without_a_password_requires_the_generated_one_in_place(data_dir):
    port = _free_port(also_free_at=0)
    old = localservices.RedisService(
        endpoint=_endpoint(port, user="default", password="", namespace="0"),
        data_dir=data_dir / "redis")
    _started(old)
    try:
        with old.client() as client:
            client.set("timer", "kept")
        new = localservices.RedisService(
            endpoint=_endpoint(port, user="default", password=new_password(), namespace="0"),
            data_dir=data_dir / "redis")
        assert not localservices.secured(new)
        pid = old.pid()

        localservices.bring_up(new)

        assert new.pid() == pid  # CONFIG SET, no restart
        assert new.refuses_anonymous()
        with new.client() as client:
            assert client.get("timer") == b"kept"
        assert f'requirepass "{new.endpoint.password}"' in new.conf_path.read_text()
        conf_before = (new.conf_path.read_text(), new.conf_path.stat().st_mtime_ns)
        localservices.bring_up(new)  # a second up: nothing to do
        assert (new.conf_path.read_text(), new.conf_path.stat().st_mtime_ns) == conf_before
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=5).ping()
    finally:
        new.stop()


# ---------------------------------------------------------------------------------- PostgreSQL


def test_postgresql_with_the_old_default_password_takes_the_generated_one_in_place(data_dir):
    port = _free_port(also_free_at=0)
    old = localservices.PostgresService(
        endpoint=_endpoint(port, user="chrono", password="chrono", namespace="chrono"),
        data_dir=data_dir / "postgres")
    _started(old, provision=True)  # the role, with the old default DATABASE_URL's password
    new = localservices.PostgresService(
        endpoint=_endpoint(port, user="chrono", password=new_password(), namespace="chrono"),
        data_dir=data_dir / "postgres")
    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="chrono", password="chrono",
                             dbname="chrono") as conn:
            conn.execute("CREATE TABLE jobs (id int)")
            conn.execute("INSERT INTO jobs VALUES (1)")
        # An operator's edit that let TCP logins in without a password.
        hba = old.data_dir / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        with old._admin_connection() as conn:
            conn.execute("SELECT pg_reload_conf()")
        assert not new.refuses_anonymous()
        pid = old.pid()

        localservices.bring_up(new)

        assert new.pid() == pid  # ALTER ROLE and a reload, no restart
        assert new.refuses_anonymous()  # no password, a wrong one, "chrono", postgres
        with psycopg.connect(host="127.0.0.1", port=port, user="chrono",
                             password=new.endpoint.password, dbname="chrono") as conn:
            assert conn.execute("SELECT id FROM jobs").fetchall() == [(1,)]
        assert "127.0.0.1/32   scram-sha-256" in hba.read_text()
        localservices.bring_up(new)
        assert new.pid() == pid
    finally:
        new.stop()


# ------------------------------------------------------------------------------------ RabbitMQ


def test_rabbitmq_with_guest_gets_a_user_of_its_own_and_loses_guest_in_place(data_dir):
    port = _low_free_port(also_free_at=localservices.rabbitmq.RABBITMQ_DIST_PORT_OFFSET)
    node_name = f"chrono-test-{uuid.uuid4().hex[:8]}@localhost"
    old = localservices.RabbitMQService(
        endpoint=_endpoint(port, user="guest", password="guest", namespace="/"),
        data_dir=data_dir / "rabbitmq", node_name=node_name)
    _started(old)  # a node's first boot creates guest
    new = localservices.RabbitMQService(
        endpoint=_endpoint(port, user="chrono", password=new_password(), namespace="/"),
        data_dir=data_dir / "rabbitmq", node_name=node_name)
    try:
        _publish(old.endpoint, queue="kept", body=b"job")
        pid = old.pid()

        localservices.bring_up(new)

        assert new.pid() == pid  # users change on the running node
        assert new.refuses_anonymous()
        assert "guest" not in new._users()
        with _connection(new.endpoint) as connection:
            declared = connection.channel().queue_declare("kept", passive=True)
        assert declared.message_count == 1
        localservices.bring_up(new)
        assert new.pid() == pid
    finally:
        new.stop()


def _connection(endpoint: Endpoint) -> amqp.Connection:
    connection = amqp.Connection(host=endpoint.address, userid=endpoint.user,
                                 password=endpoint.password, virtual_host=endpoint.namespace)
    connection.connect()
    return connection


def _publish(endpoint: Endpoint, *, queue: str, body: bytes) -> None:
    with _connection(endpoint) as connection:
        channel = connection.channel()
        channel.confirm_select()
        channel.queue_declare(queue, durable=True, auto_delete=False,
                              arguments={"x-queue-type": "quorum"})
        channel.basic_publish(amqp.Message(body, delivery_mode=2), routing_key=queue)


# -------------------------------------------------------------------------------- search node


class SearchNodeOfAnOlderChrono(localservices.SearchService):
    """A node started as before credentials: no users file, so the plugin lets everyone in."""

    def _write_users_file(self) -> bool:
        return False

    def _java_command(self) -> list[str]:
        command = super()._java_command()
        at = command.index("--users-file")
        return command[:at] + command[at + 2:]


def test_a_search_node_without_a_users_file_restarts_with_one_and_keeps_its_documents(data_dir):
    port = _free_port(also_free_at=localservices.search.TRANSPORT_PORT_OFFSET)
    old = SearchNodeOfAnOlderChrono(
        endpoint=_endpoint(port, user="", password="", namespace=""),
        data_dir=data_dir / "search")
    _started(old)
    new = localservices.SearchService(
        endpoint=_endpoint(port, user="chrono", password=new_password(), namespace=""),
        data_dir=data_dir / "search")
    try:
        assert _http(port, "PUT", "/audit/_doc/1?refresh=true", {"action": "job.created"}) == 201
        assert new.restart_reason() is not None
        pid = old.pid()

        localservices.bring_up(new)

        assert new.pid() != pid  # restarted, with its users file
        assert new.refuses_anonymous()
        assert _http(port, "GET", "/audit/_doc/1") == 401
        assert _http(port, "GET", "/audit/_doc/1", auth=new.endpoint) == 200
        pid = new.pid()
        localservices.bring_up(new)
        assert new.pid() == pid
    finally:
        new.stop()


def _http(port: int, method: str, path: str, body: object = None, *,
          auth: Endpoint | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
    if auth is not None:
        token = base64.b64encode(f"{auth.user}:{auth.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310 (loopback)
            return reply.status
    except urllib.error.HTTPError as error:
        error.close()
        return error.code
