"""The arithmetic of ``chrono bench peers`` on fixed inputs: which occurrence a start belongs
to, fired, missed, duplicates, lateness and the burst's publish rate."""

from __future__ import annotations

from bench.peers_report import (
    Start,
    bytes_per_pending_job,
    markdown_table,
    occurrence_due,
    summarize,
)

M1, M2 = 1_800_000_000_000, 1_800_000_060_000


def test_a_cron_start_belongs_to_the_latest_minute_at_or_before_its_publish():
    assert occurrence_due(Start("a", None, M1 + 59_000, M1 + 70_000), [M1, M2]) == M1
    assert occurrence_due(Start("a", None, M2 + 10, M2 + 20), [M1, M2]) == M2
    # a scheduler that publishes a little early still fired for that minute
    assert occurrence_due(Start("a", None, M2 - 300, M2 + 20), [M1, M2]) == M2
    # without a publish time its start decides
    assert occurrence_due(Start("a", None, None, M1 + 5), [M1, M2]) == M1
    assert occurrence_due(Start("a", None, M1 - 5_000, M1), [M1, M2]) is None
    # a one-time job carries its own due time
    assert occurrence_due(Start("a", 42, 50, 60), [M1]) == 42


def test_fired_missed_duplicates_over_two_minutes():
    starts = [
        Start("a", None, M1 + 10, M1 + 100),
        Start("b", None, M1 + 20, M1 + 300),
        Start("a", None, M2 + 5, M2 + 50),
        Start("a", None, M2 + 5, M2 + 80),   # the same occurrence again: a duplicate
        Start("b", None, M2 + 120_000, M2 + 120_010),  # a third minute, not measured
    ]
    report = summarize(starts, expected=4, minutes=[M1, M2])
    assert report["fired"] == 3
    assert report["missed"] == 1  # b's second minute
    assert report["duplicates"] == 1
    assert report["unexpected"] == 1
    # lateness of each occurrence's first start: 10, 20, 5 published; 100, 300, 50 started
    assert report["publish_lateness_ms"] == {"p50": 10.0, "p95": 20.0, "p99": 20.0,
                                             "max": 20.0}
    assert report["start_lateness_ms"]["p50"] == 100.0
    assert report["start_lateness_ms"]["max"] == 300.0
    # minute 1: two publishes 10 ms apart -> 200/s; minute 2: one publish, no rate
    assert report["publish_rate_per_s"] == [200, None]


def test_one_time_jobs_with_their_due_times_and_one_rate_over_the_span():
    starts = [Start(f"j{i}", 1_000 + i * 100, 1_000 + i * 100 + 3, 1_000 + i * 100 + 40)
              for i in range(11)]
    report = summarize(starts, expected=12)
    assert (report["fired"], report["missed"], report["duplicates"]) == (11, 1, 0)
    assert report["publish_lateness_ms"]["max"] == 3.0
    assert report["start_lateness_ms"]["p99"] == 40.0
    assert report["publish_rate_per_s"] == [11]  # 11 publishes over 1,000 ms


def test_a_burst_published_within_one_millisecond_is_counted_over_one():
    starts = [Start(f"j{i}", M1, M1 + 2, M1 + 9) for i in range(30)]
    assert summarize(starts, expected=30)["publish_rate_per_s"] == [30_000]


def test_nothing_started():
    report = summarize([], expected=100, minutes=[M1, M2])
    assert (report["fired"], report["missed"], report["duplicates"]) == (0, 100, 0)
    assert report["start_lateness_ms"] is None
    assert report["publish_rate_per_s"] == [None, None]


def test_memory_per_pending_job():
    assert bytes_per_pending_job(baseline_rss=100_000, peak_rss=1_100_000, pending=1_000) == 1_000
    assert bytes_per_pending_job(baseline_rss=100_000, peak_rss=90_000, pending=10) == 0
    assert bytes_per_pending_job(baseline_rss=1, peak_rss=2, pending=0) is None


def test_table_row_of_a_run_and_of_a_skipped_system():
    row = {"system": "redbeat", "workload": "cron 1,000", **summarize(
        [Start("a", None, M1 + 10, M1 + 100)], expected=2, minutes=[M1, M2]),
        "worker_bytes_per_pending_job": 12}
    table = markdown_table([row, {"system": "beat", "workload": "one-time 10,000",
                                  "skipped": "no one-time jobs"}])
    lines = table.splitlines()
    assert lines[2] == ("| redbeat | cron 1,000 | 1 / 2 | 1 | 0 | 10 / 10 / 10 | 100 / 100 / 100 "
                        "| -, - | 12 |")
    assert lines[3].startswith("| beat | one-time 10,000 | no one-time jobs |")
