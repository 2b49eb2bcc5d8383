"""The arithmetic of ``chrono bench drain`` on fixed inputs: the plain worker's counts summed
over its processes' files, CPU per job between two samples, and its arguments."""

from __future__ import annotations

import pytest

from bench.drain import parse_args, per_job, plain_counts


def test_plain_counts_sum_every_process_and_span_first_start_to_last_finish(tmp_path):
    (tmp_path / "101").write_text("600 5000 9000\n")
    (tmp_path / "102").write_text("400 4000 9500\n")
    (tmp_path / "103.tmp").write_text("999 1 99999\n")  # a file being replaced: not read
    assert plain_counts(tmp_path) == (1000, 4000, 9500)


def test_plain_counts_of_a_worker_that_ran_nothing_yet(tmp_path):
    assert plain_counts(tmp_path) == (0, 0, 0)


def test_cpu_per_job_is_the_difference_per_job_in_ms_for_every_role_seen():
    before = {"worker": 1.0, "postgresql": 2.0}
    after = {"worker": 3.0, "postgresql": 2.5, "rabbitmq": 0.25}
    assert per_job(before, after, 1_000) == {"postgresql": 0.5, "rabbitmq": 0.25,
                                             "worker": 2.0}


def test_defaults_are_the_readme_worker_with_the_plain_comparison():
    args = parse_args([])
    assert (args.pool, args.concurrency, args.plain) == ("threads", 64, True)
    assert parse_args(["--no-plain"]).plain is False


@pytest.mark.parametrize("argv", [["--jobs", "5"], ["--concurrency", "0"],
                                  ["--timeout", "0"]])
def test_bad_arguments_are_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "--jobs must be at least 10" in capsys.readouterr().err
