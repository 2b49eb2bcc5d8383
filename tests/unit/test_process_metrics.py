"""The beat's and worker's series: counters read at scrape time, lateness observed per
occurrence, and the reaper's undelivered flag."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from chronocore.config import load_config


def test_the_beat_collector_reads_the_replicas_counters_at_scrape_time():
    from scheduler.beat import BeatCounters
    from scheduler.metrics import BeatCollector

    counters = BeatCounters(published=7, misfired=2, fenced=1)
    counters.phase_ms["publish"] = 1_500.0
    beat = SimpleNamespace(counters=counters, ownership=SimpleNamespace(leases={1: "a", 2: "b"}),
                           firer=SimpleNamespace(waiting=lambda: 4))
    registry = CollectorRegistry()
    registry.register(BeatCollector(beat))
    text = generate_latest(registry).decode()
    assert "chrono_beat_published_total 7.0" in text
    assert "chrono_beat_misfired_total 2.0" in text
    assert 'chrono_beat_phase_seconds_total{phase="publish"} 1.5' in text
    assert "chrono_beat_owned_shards 2.0" in text
    assert "chrono_beat_prepared_waiting 4.0" in text


def test_dispatch_lateness_is_observed_in_seconds_for_each_occurrence():
    from scheduler.beat import BeatCounters
    from scheduler.metrics import DISPATCH_LATENESS

    def count_and_sum() -> tuple[float, float]:
        samples = {s.name: s.value for s in DISPATCH_LATENESS.collect()[0].samples}
        return (samples["chrono_beat_dispatch_lateness_seconds_count"],
                samples["chrono_beat_dispatch_lateness_seconds_sum"])

    count, total = count_and_sum()
    BeatCounters().note_lateness(iter([5, 120]))
    after_count, after_total = count_and_sum()
    assert after_count == count + 2
    assert after_total == pytest.approx(total + 0.125)


def test_the_undelivered_flag_names_the_queue_and_the_configured_time():
    from reaper.undelivered import undelivered_reason

    assert undelivered_reason("billing", 60_000) == "no consumer on queue `billing` for 60 s"
    assert undelivered_reason("q", 1_500) == "no consumer on queue `q` for 1.5 s"


def test_each_process_goes_stale_after_a_time_drawn_from_its_own_settings():
    from reaper.reaper import stale_after_ms as reaper_stale_after_ms
    from scheduler.metrics import beat_stale_after_ms
    from search.indexer import stale_after_ms as indexer_stale_after_ms

    config = load_config({})
    # The leases have a thread of their own: a loop busy for seconds (a burst) is not stuck.
    assert beat_stale_after_ms(config) == 10_000 > config.shard_lease_ttl_ms
    long_leases = load_config({"CHRONO_SHARD_LEASE_TTL_MS": "20000"})
    assert beat_stale_after_ms(long_leases) == 20_000
    assert reaper_stale_after_ms(config) == 11_000  # past the longest back-off
    assert reaper_stale_after_ms(load_config({"CHRONO_REAPER_INTERVAL_MS": "5000"})) == 25_000
    assert indexer_stale_after_ms(config) == 35_000


def test_every_worker_outcome_has_a_counter_and_failed_statuses_map_to_one():
    from scheduler.metrics import EXECUTIONS, OUTCOMES, count_outcome, outcome_of_status

    count_outcome("succeeded")
    labels = {s.labels["outcome"] for s in EXECUTIONS.collect()[0].samples
              if s.name.endswith("_total")}
    assert labels == set(OUTCOMES)
    assert [outcome_of_status(s) for s in ("RETRY_WAIT", "DEAD_LETTERED", "FAILED")] == [
        "retrying", "dead_lettered", "failed"]
