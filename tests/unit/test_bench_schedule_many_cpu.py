"""``chrono bench schedule-many``'s CPU figures: the CPU seconds of each role between two
readings of /proc, and jobs per CPU second of the client, the web process and PostgreSQL."""

from __future__ import annotations

import time

import pytest

from bench.common import cpu_by_role
from bench.schedule_many import cpu_seconds, jobs_per_cpu_s, median_rounds, parse_args


def test_the_cpu_this_process_burns_is_the_clients():
    before = cpu_by_role()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    spent = cpu_seconds(before, cpu_by_role(), web=False)
    assert set(spent) == {"client", "postgresql", "redis"}
    assert 0.15 <= spent["client"] <= 5  # /proc counts in clock ticks (10 ms)


def test_the_web_role_is_reported_only_for_the_rest_phase():
    before = {"bench": 1.0, "worker": 2.0, "postgresql": 3.0}
    after = {"bench": 1.5, "worker": 4.0, "postgresql": 4.25, "redis": 0.5}
    assert cpu_seconds(before, after, web=True) == {"client": 0.5, "web": 2.0,
                                                    "postgresql": 1.25, "redis": 0.5}
    assert "web" not in cpu_seconds(before, after, web=False)


def test_jobs_per_cpu_second_count_the_client_the_web_process_and_postgresql_not_redis():
    assert jobs_per_cpu_s(10_000, {"client": 0.2, "web": 0.1, "postgresql": 0.2,
                                   "redis": 5.0}) == 20_000.0
    assert jobs_per_cpu_s(10, {"client": 0.0, "postgresql": 0.0}) is None


def test_a_phase_of_several_rounds_reports_the_medians_and_every_rounds_rate():
    rounds = [{"rest_bulk_rate_per_s": rate, "rest_bulk_cpu_s": {"web": web},
               "rest_bulk_jobs_per_cpu_s": per_cpu}
              for rate, web, per_cpu in ((30.0, 1.0, None), (10.0, 3.0, 5.0), (20.0, 2.0, 7.0))]
    assert median_rounds(rounds) == {
        "rest_bulk_rate_per_s": 20.0, "rest_bulk_cpu_s": {"web": 2.0},
        "rest_bulk_jobs_per_cpu_s": 6.0, "rest_bulk_rounds_rate_per_s": [30.0, 10.0, 20.0]}


def test_rounds_below_one_are_refused():
    assert parse_args(["--rounds", "3"]).rounds == 3
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])
