"""The arguments of ``chrono bench retention``: a filled day kept (--keep) or dropped as it is
(--reuse), never both."""

from __future__ import annotations

import pytest

from bench.retention import parse_args


def test_defaults_fill_and_drop_three_days_of_a_million():
    args = parse_args([])
    assert (args.rows, args.repeat, args.keep, args.reuse) == (1_000_000, 3, False, False)
    assert args.ended_jobs == 0  # no deletion of ended jobs measured unless asked


def test_ended_jobs_are_measured_when_asked():
    assert parse_args(["--ended-jobs", "1000000"]).ended_jobs == 1_000_000


def test_keep_and_reuse_are_each_allowed_alone():
    assert parse_args(["--keep"]).keep
    assert parse_args(["--reuse", "--rows", "10000000", "--repeat", "1"]).reuse


@pytest.mark.parametrize("argv", [["--keep", "--reuse"], ["--rows", "-1"], ["--repeat", "0"],
                                  ["--ended-jobs", "-5"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert "error" in capsys.readouterr().err
