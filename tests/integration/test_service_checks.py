"""Chrono's system checks against real servers: the services the suite runs on pass, and a
scratch redis-server of this test's own, started with eviction on and without AOF, is refused by
what its real CONFIG GET answers, through `chrono check` itself."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from chronoadmin.checks import SERVICES_TAG, asking_services, check_redis, service_problems
from chronocore.config import get_config

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db
SCRATCH_PASSWORD = secrets.token_hex(16)


# What the suite's own servers are refused for: the PostgreSQL of `chrono services up` runs
# synchronous_commit = off on purpose (localservices/service_conf/postgresql.conf, a
# development box's speed), which the check names as any deployment's.
DEVELOPMENT_BOX = ["chrono.E006"]


def test_the_services_the_suite_runs_on_pass_but_for_the_development_boxs_commits(services_up):
    with asking_services():
        assert [m.id for m in checks.run_checks(tags=[SERVICES_TAG])] == DEVELOPMENT_BOX
    assert [m.id for m in service_problems(get_config())] == DEVELOPMENT_BOX


def test_chrono_check_asks_the_services_and_reports_the_development_box(services_up):
    with pytest.raises(SystemCheckError, match=r"\(chrono\.E006\) PostgreSQL at 127\.0\.0\.1:"):
        call_command("check", "--tag", SERVICES_TAG)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def evicting_redis(tmp_path):
    """A redis-server of this test's own (not the shared one), on a free port, that evicts
    keys when full and keeps no AOF; stopped when the test ends. It has a password of its own:
    a loopback URL without one would be given the shared server's from the credentials file."""
    port = _free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--requirepass", SCRATCH_PASSWORD,
         "--appendonly", "no", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    client = redis.Redis(port=port, password=SCRATCH_PASSWORD, socket_timeout=2)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port, client
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def test_a_redis_that_evicts_and_keeps_no_aof_is_refused_by_what_it_answers(evicting_redis):
    port, client = evicting_redis
    problems = check_redis(client, where=f"127.0.0.1:{port}")
    assert [(p.id, p.level) for p in problems] == [("chrono.E001", checks.ERROR),
                                                   ("chrono.E002", checks.ERROR)]
    assert "maxmemory-policy allkeys-lru" in problems[0].msg


def test_chrono_check_fails_on_it_with_the_hint_and_other_commands_do_not_ask(evicting_redis):
    port, _ = evicting_redis
    environ = {**os.environ, "REDIS_URL": f"redis://:{SCRATCH_PASSWORD}@127.0.0.1:{port}/0"}
    checked = subprocess.run(
        [sys.executable, "-m", "chronoadmin.cli", "check", "--tag", SERVICES_TAG],
        cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "(chrono.E001) Redis at 127.0.0.1:" in checked.stderr
    assert "HINT: Set `maxmemory-policy noeviction`" in checked.stderr
    assert "(chrono.E002)" in checked.stderr
    # A plain check (a build's, without the services) and any other command, which runs the
    # registered checks first, ask nothing of the services.
    for command in (["check"], ["check", "--deploy"], ["showmigrations", "chronocore"]):
        other = subprocess.run(
            [sys.executable, "-m", "chronoadmin.cli", *command],
            cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False)
        assert other.returncode == 0, (command, other.stdout + other.stderr)
        assert "chrono.E001" not in other.stdout + other.stderr, command
        assert "chrono.W010" not in other.stdout + other.stderr, command
