"""``chrono bench workflow``'s labels of its handoff figure: which handoff it measured, the runs
in flight and Little's-law bound on a step's cycle, and its refusal of negative sizes; the CPU
role of an engine process of its own."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from bench.common import cpu_by_role
from bench.workflow import cycle_bound_ms, handoff_label, in_flight, parse_args

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def test_the_label_names_what_kept_the_runs_apart():
    assert handoff_label(step_ms=0, stagger_ms=0) == "lockstep"
    assert handoff_label(step_ms=0, stagger_ms=500) == "staggered"
    assert handoff_label(step_ms=100, stagger_ms=0) == "drifting"
    assert handoff_label(step_ms=100, stagger_ms=500) == "drifting"


def test_runs_in_flight_are_their_summed_durations_over_the_window():
    # Two runs over the whole second and one over its half: 2.5 in flight on average.
    spans = [(at(0), at(1000)), (at(0), at(1000)), (at(250), at(750))]
    assert in_flight(spans) == 2.5
    assert in_flight([]) is None
    assert in_flight([(at(5), at(5))]) is None


def test_the_cycle_bound_is_littles_law():
    # 100 runs each waiting on one step at 700 steps/s: a step every 142.9 ms per run.
    assert cycle_bound_ms(100, 700) == 142.9
    assert cycle_bound_ms(None, 700) is None
    assert cycle_bound_ms(100, None) is None


@pytest.mark.parametrize("flag", ["--chains", "--diamonds", "--fanout", "--step-ms",
                                  "--stagger-ms"])
def test_a_negative_size_is_refused_by_name(flag, capsys):
    with pytest.raises(SystemExit):
        parse_args([flag, "-1"])
    assert f"{flag}: must be 0 or more" in capsys.readouterr().err


def test_defaults_start_every_run_at_once():
    args = parse_args([])
    assert (args.stagger_ms, args.step_ms) == (0.0, 0.0)
    assert handoff_label(step_ms=args.step_ms, stagger_ms=args.stagger_ms) == "lockstep"


def test_runs_are_started_by_at_least_one_thread(capsys):
    assert parse_args([]).start_threads == 1
    assert parse_args(["--start-threads", "8"]).start_threads == 8
    with pytest.raises(SystemExit):
        parse_args(["--start-threads", "0"])
    assert "--start-threads: must be 1 or more" in capsys.readouterr().err


def test_a_process_named_as_the_engine_is_counted_as_the_engine_and_nothing_else():
    burner = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.3"
                               "\nwhile time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while cpu_by_role(engine_pid=burner.pid).get("engine", 0) < 0.25:
            assert datetime.now(UTC) < deadline, "the engine's CPU was never counted"
        assert "engine" not in cpu_by_role()  # not named: no role of Chrono's
        assert cpu_by_role(worker_pid=burner.pid)["worker"] >= 0.25
    finally:
        burner.kill()
        burner.wait()
