"""Chrono on several hosts (docs/production.md, "Topology"): two beat replicas, a worker and the
web process, each in a network namespace of its own, each with its own explicit configuration
(URLs with credentials, pointing at a non-loopback address; production settings; no credentials
file), run jobs end to end.

The shared services listen on 127.0.0.1 only and are left alone: each host reaches them through
the forwarder on its link's far address (``tests/e2e/deploy_hosts.py``), which counts the
connections, so the test also proves that every process connected from its own host.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

import pytest

from chronocore.config import get_config, load_config
from chronocore.credentials import read_credentials
from localservices.processes import ProcessGroup
from reaper.models import Worker
from scheduler.models import Execution, ExecutionStatus, Job
from tests.conftest import owned_shards
from tests.e2e.deploy_hosts import Forwarder, Host, network_hosts
from tests.helpers import FAST_FAILOVER, replicas_seen, runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WEB_PORT = 8000
JOBS = 60


def _service_ports() -> dict[str, int]:
    defaults = {"database": 5432, "redis": 6379, "broker": 5672, "search": 9200}
    return {name: urlsplit(url).port or defaults[name]
            for name, url in get_config().service_urls().items()}


def _host_environment(host: Host, *, ports: dict[str, int], database: str, redis_db: int,
                      tmp_path, queue: str) -> dict[str, str]:
    """What an operator would write in that host's /etc/chrono/chrono.env: every URL with its
    user and password and the host's gateway address, production settings, and a credentials
    file that does not exist (nothing may come from the local installation's)."""
    stored = read_credentials(get_config().credentials_path)
    assert stored.database and stored.redis and stored.broker and stored.search, (
        "the shared services' credentials file is incomplete: run `chrono services up`")

    def userinfo(secret) -> str:
        return f"{quote(secret.user, safe='')}:{quote(secret.password, safe='')}"

    at = host.gateway
    return {
        "DJANGO_SETTINGS_MODULE": "chronoadmin.settings_production",
        "DATABASE_URL": f"postgresql://{userinfo(stored.database)}@{at}:{ports['database']}/"
                        f"{database}?connect_timeout=10&application_name=chrono-{host.address}",
        "REDIS_URL": f"redis://:{quote(stored.redis.password, safe='')}@{at}:{ports['redis']}"
                     f"/{redis_db}",
        "BROKER_URL": f"amqp://{userinfo(stored.broker)}@{at}:{ports['broker']}//",
        "SEARCH_URL": f"http://{userinfo(stored.search)}@{at}:{ports['search']}",
        "CHRONO_CREDENTIALS_FILE": str(tmp_path / "nowhere" / "credentials.env"),
        "CHRONO_DATA_DIR": str(tmp_path / "nowhere"),
        "CHRONO_SECRET_KEY": secrets.token_urlsafe(64),
        "CHRONO_ALLOWED_HOSTS": host.address,
        "CHRONO_STATIC_ROOT": str(tmp_path / "static"),
        "CHRONO_DEFAULT_QUEUE": queue,
        "CHRONO_AUDIT_NAMESPACE": "deploy_many_hosts",
        # The suite's PostgreSQL commits asynchronously on purpose (a development box's,
        # localservices/service_conf/postgresql.conf), which the production settings refuse at
        # start-up: logged here instead (tests/cluster/test_startup_checks.py has the refusal).
        "CHRONO_SERVICE_CHECKS": "warn",
    }


@pytest.fixture
def hosts():
    with network_hosts(4) as made:
        yield made


@pytest.fixture
def forwarder(hosts):
    ports = _service_ports()
    relay = Forwarder()
    try:
        for host in hosts:
            for port in ports.values():
                relay.listen(host.gateway, port, port)
        yield relay
    finally:
        relay.close()


def _get(url: str, *, headers: dict[str, str], body: object | None = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={
        **headers, "Content-Type": "application/json"}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - test host
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_beats_a_worker_and_the_web_on_four_hosts_run_jobs_with_explicit_configuration(
        hosts, forwarder, tenant, redis_client, tmp_path):
    from django.db import connection

    from chronocore.models import ApiKey

    beat_a, beat_b, worker_host, web_host = hosts
    ports = _service_ports()
    queue = f"e2e-hosts-{secrets.token_hex(4)}"
    environment = {host: _host_environment(
        host, ports=ports, database=connection.settings_dict["NAME"],
        redis_db=load_config().test_redis_db, tmp_path=tmp_path, queue=queue) for host in hosts}
    # The configuration really is remote-only: no loopback host, nothing from a credentials file.
    for env in environment.values():
        config = load_config(env)
        assert all(urlsplit(url).hostname not in ("127.0.0.1", "localhost")
                   for url in config.service_urls().values())
        assert not config.credentials_path.exists()

    # Inside a host, the machine's loopback services are out of reach: a process that fell back
    # to a default 127.0.0.1 URL could not connect at all.
    for host in hosts:
        assert not _connects(host, "127.0.0.1", ports["database"]), host
        assert _connects(host, host.gateway, ports["database"]), host

    group = ProcessGroup(env={}, log_dir=tmp_path / "logs")
    try:
        collect = group.start("collectstatic", ["collectstatic", "--noinput"],
                              env=environment[web_host], wrapper=web_host.wrapper)
        assert collect.popen.wait(120) == 0, collect.log_tail()
        web = group.start("web", ["web", f"{web_host.address}:{WEB_PORT}", "--workers", "1"],
                          env=environment[web_host], wrapper=web_host.wrapper)
        for name, host in (("beat-a", beat_a), ("beat-b", beat_b)):
            beat_env = {**environment[host],
                        **{f"CHRONO_{k.upper()}": str(v) for k, v in FAST_FAILOVER.items()}}
            beat = group.start(name, ["beat", "--replica-id", name], env=beat_env,
                               wrapper=host.wrapper)
            beat.wait_until(lambda n=name: owned_shards(redis_client, n,
                                                        get_config().shard_count) > 0,
                            timeout_s=60, what="taking its shards")
        hostname = f"w1@{queue}"
        worker = group.start(
            "worker", ["worker", "--queues", queue, "--concurrency", "4", "--pool", "threads",
                       "--hostname", hostname, "--include", "tests.e2e.tasks"],
            env=environment[worker_host], wrapper=worker_host.wrapper)
        worker.wait_until(lambda: Worker.objects.filter(worker_id=hostname).exists(),
                          timeout_s=90, what="its first heartbeat")

        origin = f"http://{web_host.address}:{WEB_PORT}"
        # Production settings redirect plain HTTP; a TLS-terminating proxy says it was HTTPS.
        proxied = {"X-Forwarded-Proto": "https"}
        web.wait_until(lambda: _reachable(f"{origin}/health/", proxied), timeout_s=90,
                       what="answering /health/ from its host")
        status, health = _get(f"{origin}/health/", headers=proxied)
        assert status == 200, health
        _, key = ApiKey.objects.issue(tenant=tenant, name="many-hosts")
        status, created = _get(
            f"{origin}/api/v1/jobs/bulk", headers={**proxied, "Authorization": f"Bearer {key}"},
            body=[{"job_type": "e2e.record_run", "queue": queue, "delay_ms": 1_000 + 50 * i,
                   "kwargs": {"label": f"job-{i}"}} for i in range(JOBS)])
        assert status in (200, 201), created
        jobs = Job.objects.filter(tenant=tenant, queue=queue)
        assert jobs.count() == JOBS

        executions = Execution.objects.filter(job__in=jobs)
        assert wait_for(lambda: executions.filter(status=ExecutionStatus.SUCCEEDED).count()
                        == JOBS, timeout_s=90), (
            sorted(executions.values_list("status", flat=True)), worker.log_tail())
        ran = runs(redis_client)
        assert all(ran.get(str(e.execution_id)) == 1 for e in executions), "a body ran twice"
        assert set(replicas_seen(redis_client)) <= {"beat-a", "beat-b"}
    finally:
        group.stop_all()
        _delete_queue(queue)

    # Every process reached the services from its own host through the non-loopback address.
    seen = forwarder.connections
    for host in (beat_a, beat_b, worker_host):
        for service in ("database", "redis", "broker"):
            assert seen[(host.address, ports[service])] > 0, (host, service, seen)
    for service in ("database", "redis", "broker", "search"):  # /health/ asks all four
        assert seen[(web_host.address, ports[service])] > 0, (web_host, service, seen)


def _connects(host: Host, address: str, port: int) -> bool:
    probe = ("import socket, sys\n"
             "try:\n"
             f"    socket.create_connection(({address!r}, {port}), timeout=5).close()\n"
             "except OSError:\n"
             "    sys.exit(1)\n")
    return subprocess.run([*host.wrapper, sys.executable, "-c", probe], timeout=30).returncode == 0


def _reachable(url: str, headers: dict[str, str]) -> bool:
    try:
        return _get(url, headers=headers)[0] in (200, 503)
    except OSError:
        return False


def _delete_queue(queue: str) -> None:
    import amqp

    from scheduler.dispatch import amqp_connection_params

    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        conn.channel().queue_delete(queue)
