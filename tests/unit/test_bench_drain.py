"""The arithmetic of ``chrono bench drain`` on fixed inputs: the plain worker's counts summed
over its processes' files, CPU per job between two samples, the round printed of several, and
its arguments."""

from __future__ import annotations

import pytest

from bench.drain import median_round, parse_args, per_job, plain_counts


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


def _round(rate, plain, worker_ms=0.3):
    return {"rate_per_s": rate, "plain_rate_per_s": plain,
            "ratio_to_plain": round(rate / plain, 3) if plain else None,
            "steady_cpu_ms_per_job": {"worker": worker_ms}, "finished": 100}


def test_the_round_printed_is_the_one_whose_ratio_is_the_median_with_every_round_listed():
    rounds = [_round(2_000.0, 2_500.0, 0.31), _round(2_400.0, 2_400.0, 0.29),
              _round(1_800.0, 2_000.0, 0.33)]
    chosen = median_round(rounds)
    # ratios 0.8, 1.0, 0.9: the median is the third round's, not the median rate's (2,000)
    assert (chosen["rate_per_s"], chosen["ratio_to_plain"]) == (1_800.0, 0.9)
    assert chosen["median_of"] == "ratio_to_plain"
    assert [r["ratio_to_plain"] for r in chosen["each_round"]] == [0.8, 1.0, 0.9]
    assert [r["worker_cpu_ms_per_job"] for r in chosen["each_round"]] == [0.31, 0.29, 0.33]


def test_an_even_count_of_rounds_prints_the_lower_middle_one():
    rounds = [_round(1_000.0, 1_000.0), _round(700.0, 1_000.0), _round(900.0, 1_000.0),
              _round(800.0, 1_000.0)]
    assert median_round(rounds)["ratio_to_plain"] == 0.8


def test_without_the_plain_worker_the_median_rate_is_printed():
    rounds = [{"rate_per_s": r, "steady_cpu_ms_per_job": None} for r in (3.0, 1.0, 2.0)]
    chosen = median_round(rounds)
    assert (chosen["rate_per_s"], chosen["median_of"]) == (2.0, "rate_per_s")
    assert chosen["each_round"][0]["worker_cpu_ms_per_job"] is None


def test_rounds_default_to_three_and_must_be_positive(capsys):
    assert parse_args([]).rounds == 3
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err
