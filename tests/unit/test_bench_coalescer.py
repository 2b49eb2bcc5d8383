"""``chrono bench coalescer`` on a small run: its counts add up and it refuses bad flags."""

from __future__ import annotations

import pytest

from bench import coalescer


def test_a_small_run_counts_every_call_and_batches_them():
    report = coalescer.run.__wrapped__(["--threads", "8", "--calls", "20",
                                        "--statement-ms", "1"])
    assert report["calls"] == 8 * 20 * 2
    # Eight threads and a statement of 1 ms: callers arrive while one is in flight.
    assert 1 < report["items_per_batch"] <= 8
    assert report["cpu_us_per_call"] > 0 and report["floor_cpu_us_per_wait"] > 0


@pytest.mark.parametrize("flags", [["--threads", "0"], ["--calls", "0"],
                                   ["--statement-ms", "-1"]])
def test_bad_flags_are_refused(flags):
    with pytest.raises(SystemExit):
        coalescer.parse_args(flags)
