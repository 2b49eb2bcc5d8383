"""The ``chrono`` command as a shell runs it (a subprocess on the test database): the exit codes
a script reads, ``--version``, ``help``, dashed names in usage lines, and a long-running process
logging JSON lines at the level asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from chronocore.config import get_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env():
    from django.db import connection

    base = urlsplit(get_config().database_url)
    database_url = urlunsplit(base._replace(path=f"/{connection.settings_dict['NAME']}"))
    return {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": os.environ["REDIS_URL"]}


def run(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chronoadmin.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_exit_codes_a_script_can_rely_on(env, tenant):
    listed = run(env, "tenants", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["slug"] for t in json.loads(listed.stdout)] == ["acme"]

    usage = run(env, "jobs", "pause", "--tenant", "acme", "not-a-uuid")
    assert usage.returncode == 2 and "invalid UUID" in usage.stderr

    missing = run(env, "jobs", "pause", "--tenant", "acme", str(uuid.uuid4()), "--json")
    assert missing.returncode == 3, missing.stderr
    assert json.loads(missing.stdout)["error"]["code"] == "not_found"
    assert "no job" in missing.stderr

    taken = run(env, "tenants", "create", "acme")
    assert taken.returncode == 4 and "already exists" in taken.stderr

    unknown_action = run(env, "tenants", "rename", "acme")
    assert unknown_action.returncode == 2


def test_version_help_and_dashed_names(env):
    for args in (("--version",), ("beat", "--version")):
        shown = run(env, *args)
        assert shown.returncode == 0 and shown.stdout.startswith("chrono "), shown
        assert "Django" in shown.stdout
    listed = run(env, "help")
    assert listed.returncode == 0
    for command in ("tenants create|list", "api-keys issue|list|revoke", "jobs list|show",
                    "executions list|show", "config-reference",
                    "Any other Django management command", "collectstatic", "createsuperuser"):
        assert command in listed.stdout, command
    usage = run(env, "rebuild-timers", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: chrono rebuild-timers ")
    assert run(env, "help", "import-beat").stdout.startswith("usage: chrono import-beat ")


def test_a_reaper_logs_json_lines_at_the_level_asked(env):
    process = subprocess.Popen(
        [sys.executable, "-m", "chronoadmin.cli", "reaper", "--log-format", "json",
         "--log-level", "debug"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines: list[dict] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                lines.append(json.loads(line))
            if any(entry["message"] == "reaper started" for entry in lines):
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    started = [entry for entry in lines if entry["message"] == "reaper started"]
    assert started, lines
    assert (started[0]["level"], started[0]["logger"]) == ("INFO", "chrono.reaper")
