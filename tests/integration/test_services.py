"""Chrono's own PostgreSQL, Redis, RabbitMQ and search node, as ``chrono services up`` leaves them.

These tests run against the instances other tests use, so they never stop or restart one; a
service that does not answer fails the run (``services_up``), it is never skipped.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pwd
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import amqp
import psycopg
import pytest

import localservices
from localservices import search as search_service


@pytest.fixture(scope="module")
def config(services_up) -> localservices.ServicesConfig:
    return localservices.ServicesConfig.from_env()


@pytest.fixture(scope="module")
def service_by_name(config) -> dict[str, localservices.Service]:
    return {service.name: service for service in localservices.registered_services(config)}


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
    assert localservices.status(config=config) == {
        "postgresql": True,
        "redis": True,
        "rabbitmq": True,
        "search": True,
    }
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["postgresql", "up", config.database.address]
    assert lines[3].split() == ["search", "up", config.search.address]


def test_python_dash_m_localservices_runs_the_command_line(config):
    result = subprocess.run(
        [sys.executable, "-m", "localservices", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["postgresql", "up"],
        ["redis", "up"],
        ["rabbitmq", "up"],
        ["search", "up"],
    ]


def test_a_search_engine_that_does_not_answer_is_reported_down(config, capsys):
    nothing_there = dataclasses.replace(
        config, search=localservices.parse_search_url(f"http://127.0.0.1:{_free_port()}")
    )
    assert localservices.status(config=nothing_there)["search"] is False
    assert capsys.readouterr().out.splitlines()[3].split()[:2] == ["search", "down"]


def test_up_leaves_instances_that_answer_alone(config, service_by_name):
    pids_before = {name: service.pid() for name, service in service_by_name.items()}
    assert None not in pids_before.values()
    localservices.up(config=config)
    assert {name: service.pid() for name, service in service_by_name.items()} == pids_before


def test_up_disables_the_distributions_own_units_so_they_cannot_take_the_ports_at_boot(
        config, service_by_name):
    # Debian's postgresql, redis-server and rabbitmq-server packages enable their own units when
    # installed; at the next boot those would start first and hold Chrono's ports.
    units = [service.debian_service for service in service_by_name.values()
             if service.debian_service]
    assert units == ["postgresql", "redis-server", "rabbitmq-server"]
    localservices.up(config=config)
    for unit in units:
        state = subprocess.run(["systemctl", "is-enabled", unit], capture_output=True,
                               text=True, check=False).stdout.strip()
        assert state == "disabled", (unit, state)


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


def test_search_node_is_opensearch_in_cluster_chrono_with_green_or_yellow_health(config):
    root = _get_json(config, "/")
    assert root["cluster_name"] == "chrono"
    assert root["version"]["distribution"] == "opensearch"
    assert root["version"]["number"].startswith("2.19.")
    assert _get_json(config, "/_cluster/health")["status"] in ("green", "yellow")
    plugins = {row["component"] for row in _get_json(config, "/_cat/plugins?format=json")}
    assert plugins == {
        "org.opensearch.transport.Netty4Plugin",
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        "org.opensearch.painless.PainlessPlugin",
        "chrono.search.ChronoAuthPlugin",
    }


def test_search_node_runs_as_its_own_user_with_its_data_in_the_data_dir(config, service_by_name):
    node = service_by_name["search"]
    owner = pwd.getpwuid(os.stat(f"/proc/{node.pid()}").st_uid).pw_name
    assert owner == (search_service.OS_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())[0])
    assert owner != "root"
    assert node.data_dir == config.data_dir / "search"
    assert (node.data_dir / "data" / "nodes").is_dir()
    assert (node.log_path / "chrono-search.log").stat().st_size > 0


def test_a_port_held_by_another_program_is_reported_and_never_killed(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        node = localservices.SearchService(
            endpoint=localservices.parse_search_url(f"http://127.0.0.1:{port}"), data_dir=tmp_path
        )
        with pytest.raises(localservices.PortBusyError, match=f"port {port}, needed by search"):
            localservices.free_ports(node)
        assert localservices.port_holders(port) == [os.getpid()]


def test_the_launcher_build_is_stale_until_built_and_again_when_a_source_changes(tmp_path):
    launcher = tmp_path / "launcher"
    source = launcher / "src" / "main" / "java" / "Node.java"
    source.parent.mkdir(parents=True)
    source.write_text("class Node {}")
    (launcher / "pom.xml").write_text("<project/>")
    assert search_service.build_is_stale(launcher)  # never built
    (launcher / "target" / "lib").mkdir(parents=True)
    stamp = launcher / "target" / search_service.BUILD_STAMP
    stamp.write_text("1\n")
    _age(launcher / "pom.xml", source, seconds=60)
    assert not search_service.build_is_stale(launcher)
    source.write_text("class Node { int changed; }")
    assert search_service.build_is_stale(launcher)


def test_the_real_launcher_sources_are_the_pom_and_the_java_main():
    sources = search_service.launcher_sources(search_service.LAUNCHER_DIR)
    names = {path.name for path in sources}
    assert {"pom.xml", "ChronoSearchNode.java", "ChronoAuthPlugin.java", "UsersFile.java",
            "log4j2.properties"} <= names


def _age(*paths: Path, seconds: float) -> None:
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get_json(config: localservices.ServicesConfig, path: str) -> object:
    e = config.search
    request = urllib.request.Request(f"http://{e.address}{path}")
    token = base64.b64encode(f"{e.user}:{e.password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 (loopback)
        return json.load(reply)


def test_search_url_must_be_plain_http_on_loopback_and_may_carry_credentials():
    endpoint = localservices.parse_search_url("http://127.0.0.1:9200")
    assert (endpoint.host, endpoint.port, endpoint.user, endpoint.password) == (
        "127.0.0.1", 9200, "", "")
    assert localservices.parse_search_url("http://localhost").port == 9200
    given = localservices.parse_search_url("http://chrono:s%40cret@127.0.0.1:9200")
    assert (given.user, given.password) == ("chrono", "s@cret")
    with pytest.raises(localservices.ServiceConfigError, match="scheme"):
        localservices.parse_search_url("https://127.0.0.1:9200")
    with pytest.raises(localservices.ServiceConfigError, match="point it at 127.0.0.1"):
        localservices.parse_search_url("http://search.internal:9200")


def test_search_url_default_is_the_one_of_chrono_config(tmp_path):
    from chronocore.config import load_config

    no_file = {"CHRONO_CREDENTIALS_FILE": str(tmp_path / "none.env")}
    assert localservices.DEFAULT_SEARCH_URL == load_config(no_file).search_url
    assert load_config(no_file).search_url == "http://127.0.0.1:9200"
    assert load_config({**no_file, "SEARCH_URL": "http://127.0.0.1:9201"}).search_url.endswith(
        ":9201")


def test_broker_url_with_double_slash_names_the_root_virtual_host():
    endpoint = localservices.parse_broker_url("amqp://chrono:secret@127.0.0.1:5672//")
    assert (endpoint.user, endpoint.namespace, endpoint.port) == ("chrono", "/", 5672)


def test_a_broker_url_logging_in_as_guest_is_refused_since_up_removes_guest():
    with pytest.raises(localservices.ServiceConfigError, match="removes RabbitMQ's default user"):
        localservices.parse_broker_url("amqp://guest:guest@127.0.0.1:5672//")


def test_a_url_for_another_host_is_refused_with_what_to_change():
    with pytest.raises(localservices.ServiceConfigError, match="point it at 127.0.0.1"):
        localservices.parse_database_url("postgresql://chrono:chrono@db.internal:5432/chrono")


def test_rabbitmq_provision_refuses_a_node_of_another_data_directory(service_by_name, tmp_path):
    """Two installations cannot share a node name: ``rabbitmqctl -n NAME`` would reach, and
    change, the other's node, so provisioning checks the node it reaches is its own first."""
    running = service_by_name["rabbitmq"]
    users_before = running._users()
    impostor = localservices.RabbitMQService(
        endpoint=running.endpoint, data_dir=tmp_path, node_name=running.node_name)
    with pytest.raises(localservices.ServiceStartError, match="CHRONO_RABBITMQ_NODE_NAME"):
        impostor.provision()
    assert running._users() == users_before


def _write_append_only_file(path: Path, *, keys: int, value_bytes: int) -> None:
    """An append-only file of ``keys`` SETs in RESP, as a Redis that ran for a while leaves."""
    value = b"v" * value_bytes
    tail = b"\r\n$%d\r\n%s\r\n" % (len(value), value)
    with path.open("wb") as out:
        for start in range(0, keys, 10_000):
            chunk = []
            for i in range(start, min(start + 10_000, keys)):
                key = b"chrono:test:%d" % i
                chunk.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s%s" % (len(key), key, tail))
            out.write(b"".join(chunk))


def test_up_waits_for_a_restarted_redis_to_load_its_append_only_file(tmp_path_factory):
    """After a reboot Redis listens while it replays its AOF and answers LOADING to a client
    that logs in: ``up`` must wait for it, not take it for a server that refuses the password
    (what a fresh machine's first ``make test`` met, with 54 MB of AOF)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Redis runs as its own user: the data directory must be reachable from outside root's tmp.
    data_dir = Path(os.environ.get("CHRONO_DATA_DIR", "/var/lib/chrono")) / f"test-redis-{port}"
    data_dir.mkdir(mode=0o750)
    password = uuid.uuid4().hex
    node = localservices.RedisService(
        endpoint=localservices.parse_redis_url(f"redis://:{password}@127.0.0.1:{port}/0"),
        data_dir=data_dir,
    )
    _write_append_only_file(data_dir / "appendonly.aof", keys=600_000, value_bytes=120)
    saw_loading = []
    ready = node.ready

    def watched_ready() -> bool:
        if node._listening() and node._ping(password) == "loading":
            saw_loading.append(True)
        return ready()

    node.ready = watched_ready
    try:
        localservices.bring_up(node)
        assert node.answers() and node.refuses_anonymous()
        with node.client() as client:
            assert client.dbsize() == 600_000
        assert saw_loading, "the server finished loading before the first probe: grow the AOF"
    finally:
        node.stop()
        subprocess.run(["rm", "-rf", str(data_dir)], check=True)
