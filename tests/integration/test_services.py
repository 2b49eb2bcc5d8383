"""Chrono's own PostgreSQL, Redis and RabbitMQ, as ``chrono services up`` leaves them.

These tests run against the instances other tests use, so they never stop or restart one; a
service that does not answer fails the run (``services_up``), it is never skipped.
"""

from __future__ import annotations

import time
import uuid

import amqp
import psycopg
import pytest

from chronoadmin import services


@pytest.fixture(scope="module")
def config(services_up) -> services.ServicesConfig:
    return services.ServicesConfig.from_env()


@pytest.fixture(scope="module")
def service_by_name(config) -> dict[str, services.Service]:
    return {service.name: service for service in services.registered_services(config)}


def _listen_addresses(port: int) -> set[str]:
    """Hex local addresses of the sockets listening on ``port`` (``0100007F`` is 127.0.0.1)."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(hex_port, 16) == port:
                    addresses.add(address)
    return addresses


def test_status_reports_every_service_up(config, capsys):
    assert services.status(config=config) == {
        "postgresql": True,
        "redis": True,
        "rabbitmq": True,
    }
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["postgresql", "up", config.database.address]


def test_up_leaves_instances_that_answer_alone(config, service_by_name):
    pids_before = {name: service.pid() for name, service in service_by_name.items()}
    assert None not in pids_before.values()
    services.up(config=config)
    assert {name: service.pid() for name, service in service_by_name.items()} == pids_before


def test_every_service_listens_on_loopback_only(service_by_name):
    for service in service_by_name.values():
        for port in service.ports:
            assert _listen_addresses(port) == {"0100007F"}, (service.name, port)


def test_redis_logs_every_write_and_fsyncs_once_a_second(service_by_name):
    with service_by_name["redis"].client() as client:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert client.config_get("maxmemory") == {"maxmemory": "0"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("dir")["dir"] == str(service_by_name["redis"].data_dir)


def test_postgresql_answers_on_database_url_as_a_role_that_may_create_databases(config):
    e = config.database
    with psycopg.connect(
        host=e.host, port=e.port, user=e.user, password=e.password, dbname=e.namespace
    ) as conn:
        assert conn.execute("SELECT current_user, current_database()").fetchone() == (
            e.user,
            e.namespace,
        )
        (may_create_databases,) = conn.execute(
            "SELECT rolcreatedb FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert may_create_databases
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('max_connections', 'synchronous_commit', 'fsync', 'listen_addresses')"
            ).fetchall()
        )
    assert settings == {
        "max_connections": "300",
        "synchronous_commit": "off",
        "fsync": "on",
        "listen_addresses": "127.0.0.1",
    }


def test_rabbitmq_delivers_through_a_quorum_queue(config):
    e = config.broker
    queue = f"test-services-{uuid.uuid4().hex}"
    connection = amqp.Connection(
        host=e.address, userid=e.user, password=e.password, virtual_host=e.namespace
    )
    connection.connect()
    try:
        channel = connection.channel()
        channel.confirm_select()
        channel.queue_declare(
            queue, durable=True, auto_delete=False, arguments={"x-queue-type": "quorum"}
        )
        channel.basic_publish(amqp.Message(b"tick"), routing_key=queue)
        message = _get_within(channel, queue, attempts=40)
        channel.queue_delete(queue)
    finally:
        connection.close()
    assert message is not None and message.body == b"tick"


def _get_within(channel: amqp.Channel, queue: str, *, attempts: int) -> amqp.Message | None:
    """basic_get until the message shows up (bounded; the publish was already confirmed)."""
    for _ in range(attempts):
        message = channel.basic_get(queue, no_ack=True)
        if message is not None:
            return message
        time.sleep(0.05)
    return None


def test_broker_url_with_double_slash_names_the_root_virtual_host():
    endpoint = services.parse_broker_url("amqp://guest:guest@127.0.0.1:5672//")
    assert (endpoint.user, endpoint.namespace, endpoint.port) == ("guest", "/", 5672)


def test_a_url_for_another_host_is_refused_with_what_to_change():
    with pytest.raises(services.ServiceConfigError, match="point it at 127.0.0.1"):
        services.parse_database_url("postgresql://chrono:chrono@db.internal:5432/chrono")
