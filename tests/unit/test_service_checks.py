"""The decisions of Chrono's system checks of its services (chronoadmin/checks.py): which
settings and versions are refused, at which level, naming the server and saying what to do.
The values come from the real services in tests/integration/test_service_checks.py."""

from __future__ import annotations

import pytest
from django.core.checks import ERROR, WARNING

from chronoadmin.checks import (
    parse_version,
    postgresql_problems,
    postgresql_settings_problems,
    queue_problems,
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


def test_a_redis_without_aof_is_an_error():
    (problem,) = redis_problems({**SOUND, "appendonly": "no"}, "7.0.0", where="r:6379")
    assert (problem.id, problem.level) == ("chrono.E002", ERROR)
    assert "appendonly yes" in problem.hint


def test_a_setting_redis_did_not_report_counts_as_not_set():
    assert ids(redis_problems({}, "7.0.0", where="r:6379")) == ["chrono.E001", "chrono.E002"]


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


DURABLE = {"synchronous_commit": "on", "fsync": "on", "full_page_writes": "on",
           "synchronous_standby_names": "", "transaction_read_only": "off"}


@pytest.mark.parametrize("commit", ["on", "remote_apply", "remote_write", "local"])
def test_a_postgresql_that_commits_durably_passes(commit):
    assert postgresql_settings_problems({**DURABLE, "synchronous_commit": commit},
                                        where="db:5432") == []


def test_synchronous_commit_off_is_an_error_saying_what_a_crash_loses_and_what_to_set():
    (problem,) = postgresql_settings_problems({**DURABLE, "synchronous_commit": "off"},
                                              where="db:5432")
    assert (problem.id, problem.level) == ("chrono.E006", ERROR)
    assert "PostgreSQL at db:5432 runs with synchronous_commit off" in problem.msg
    assert "jobs whose create call had returned" in problem.msg
    assert "synchronous_commit = on" in problem.hint


@pytest.mark.parametrize("name", ["fsync", "full_page_writes"])
def test_fsync_or_full_page_writes_off_is_an_error_naming_the_setting(name):
    (problem,) = postgresql_settings_problems({**DURABLE, name: "off"}, where="db:5432")
    assert (problem.id, problem.level) == ("chrono.E007", ERROR)
    assert f"runs with {name} off" in problem.msg
    assert f"`{name} = on`" in problem.hint


def test_a_read_only_session_is_an_error_pointing_at_target_session_attrs():
    (problem,) = postgresql_settings_problems({**DURABLE, "transaction_read_only": "on"},
                                              where="db2:5432")
    assert (problem.id, problem.level) == ("chrono.E008", ERROR)
    assert "target_session_attrs=read-write" in problem.hint


def test_standbys_named_but_commits_not_waiting_for_them_is_a_warning():
    settings = {**DURABLE, "synchronous_standby_names": "FIRST 1 (s1)",
                "synchronous_commit": "local"}
    (problem,) = postgresql_settings_problems(settings, where="db:5432")
    assert (problem.id, problem.level) == ("chrono.W011", WARNING)
    assert postgresql_settings_problems({**settings, "synchronous_commit": "on"},
                                        where="db:5432") == []


def test_a_classic_queue_of_chronos_name_is_an_error_naming_it_and_the_fix():
    reason = ("PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'chrono' in "
              "vhost '/': received the value 'quorum' of type 'longstr' but current is none")
    (problem,) = queue_problems({"chrono": reason}, where="mq:5672")
    assert (problem.id, problem.level) == ("chrono.E012", ERROR)
    assert "has the queue 'chrono' as a classic queue" in problem.msg
    assert reason in problem.msg
    assert "rabbitmqctl delete_queue chrono" in problem.hint
    assert queue_problems({}, where="mq:5672") == []


def test_the_start_up_mode_is_error_warn_or_off_and_a_typo_is_refused_by_name(tmp_path):
    from chronocore.config import ConfigError, load_config

    env = {"CHRONO_DATA_DIR": str(tmp_path)}
    assert load_config(env).service_checks == ""
    assert load_config({**env, "CHRONO_SERVICE_CHECKS": "error"}).service_checks == "error"
    with pytest.raises(ConfigError, match="CHRONO_SERVICE_CHECKS='strict' must be error, warn"):
        load_config({**env, "CHRONO_SERVICE_CHECKS": "strict"})
