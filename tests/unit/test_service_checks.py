"""The decisions of Chrono's system checks of its services (chronoadmin/checks.py): which
settings and versions are refused, at which level, naming the server and saying what to do.
The values come from the real services in tests/integration/test_service_checks.py."""

from __future__ import annotations

import pytest
from django.core.checks import ERROR, WARNING

from chronoadmin.checks import (
    parse_version,
    postgresql_problems,
    rabbitmq_problems,
    redis_problems,
)

SOUND = {"maxmemory-policy": "noeviction", "appendonly": "yes"}


def ids(problems) -> list[str]:
    return [problem.id for problem in problems]


def test_a_redis_that_never_evicts_and_keeps_an_aof_passes():
    assert redis_problems(SOUND, "7.0.15", where="r:6379") == []


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-random",
                                    "volatile-ttl", "allkeys-lfu", "volatile-lfu"])
def test_a_redis_that_evicts_is_an_error_naming_its_policy_and_the_fix(policy):
    (problem,) = redis_problems({**SOUND, "maxmemory-policy": policy}, "7.2.4", where="r:6379")
    assert (problem.id, problem.level) == ("chrono.E001", ERROR)
    assert f"Redis at r:6379 runs with maxmemory-policy {policy}" in problem.msg
    assert "maxmemory-policy noeviction" in problem.hint


def test_a_redis_without_aof_is_a_warning():
    (problem,) = redis_problems({**SOUND, "appendonly": "no"}, "7.0.0", where="r:6379")
    assert (problem.id, problem.level) == ("chrono.W002", WARNING)
    assert "appendonly yes" in problem.hint


def test_a_setting_redis_did_not_report_counts_as_not_set():
    assert ids(redis_problems({}, "7.0.0", where="r:6379")) == ["chrono.E001", "chrono.W002"]


@pytest.mark.parametrize(("version", "refused"), [
    ("6.2.14", True), ("6.0.0", True), ("7.0.0", False), ("7.4.1", False), ("8.0.2", False),
])
def test_redis_older_than_7_is_an_error(version, refused):
    problems = redis_problems(SOUND, version, where="r:6379")
    assert ids(problems) == (["chrono.E003"] if refused else [])


@pytest.mark.parametrize(("version", "refused"), [
    ("3.8.35", True), ("3.9.29", True), ("3.10.0", False), ("3.13.7", False), ("4.1.0", False),
])
def test_rabbitmq_without_quorum_queue_ttl_and_dead_lettering_is_an_error(version, refused):
    problems = rabbitmq_problems(version, where="mq:5672")
    assert ids(problems) == (["chrono.E004"] if refused else [])
    if refused:
        assert "quorum queues" in problems[0].msg and "3.10" in problems[0].hint


@pytest.mark.parametrize(("server_version_num", "refused"), [
    (130016, True), (140000, False), (150018, False), (170002, False),
])
def test_postgresql_older_than_14_is_an_error(server_version_num, refused):
    problems = postgresql_problems(server_version_num, where="pg:5432")
    assert ids(problems) == (["chrono.E005"] if refused else [])


@pytest.mark.parametrize(("text", "version"), [
    ("7.0.15", (7, 0, 15)), ("3.13.0-rc.1", (3, 13, 0)), ("4.0", (4, 0)), ("", ()),
    ("unknown", ()),
])
def test_versions_read_as_numbers_up_to_what_is_not_one(text, version):
    assert parse_version(text) == version
