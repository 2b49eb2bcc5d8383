"""A burst prepared ahead of its fire time (scheduler.bursts), against the real beat, Redis,
RabbitMQ and PostgreSQL: never published early, never for a job changed meanwhile, and not
lost with a replica killed while it holds the prepared burst.

No worker runs: every message stays in the test queue and is read back with the time the beat
published it (``chrono_published_ms``) and its execution id.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from bench.burst import read_back
from scheduler import api
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms
from scheduler.lifecycle import execution_id_for
from scheduler.models import Execution, Job, JobStatus
from scheduler.timers import timer_store
from tests.helpers import FAST_FAILOVER, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _burst(platform, tenant, count: int, at_ms: int) -> list[Job]:
    return api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                                  fire_times=[ms_to_datetime(at_ms)] * count)


def _prepared_early(jobs: list[Job], at_least: int, fire_ms: int) -> list[Job]:
    """Wait until the beat has written the executions of ``at_least`` of ``jobs`` (it does so as
    it prepares them) while more than 500 ms remain before their fire time; those jobs. A
    burst is prepared as the beat's scans bring it into view, a part of its shards at a time,
    so the first parts are prepared early and the last may be prepared at the usual time."""
    ids = [job.job_id for job in jobs]

    def prepared() -> list:
        return list(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True))

    assert wait_for(lambda: len(prepared()) >= at_least,
                    timeout_s=max(0.0, (fire_ms - 500 - now_ms()) / 1000), interval_s=0.02), (
        f"fewer than {at_least} of the burst prepared 500 ms before its fire time")
    done = set(prepared())
    return [job for job in jobs if job.job_id in done]


def _published(queue: str) -> Counter:
    """How many times each execution id was published; asserts none went out early."""
    messages = read_back(queue)
    early = [(e, fire, published) for e, fire, published in messages if published < fire]
    assert early == [], f"published before the fire time: {early[:3]}"
    return Counter(execution_id for execution_id, _, _ in messages)


def test_a_burst_is_prepared_early_and_a_job_changed_meanwhile_does_not_fire(platform, tenant):
    platform.start_beat("beat-a")
    fire_ms = (now_ms() // 1_000 + 6) * 1_000
    burst = _burst(platform, tenant, 3_000, fire_ms)
    early = _prepared_early(burst, 1_000, fire_ms)
    paused, deleted, moved = early[:10], early[10:20], early[20:30]
    later = ms_to_datetime(fire_ms + 60_000)
    for job in paused:
        assert api.pause(job.job_id, tenant=tenant)
    for job in deleted:
        api.delete(job.job_id, tenant=tenant)
    for job in moved:
        api.reschedule(job.job_id, tenant=tenant, at=later)
    # Changed before the beat looks at them again, 100 ms before their time.
    assert now_ms() < fire_ms - 150, f"changed only {fire_ms - now_ms()} ms ahead"

    changed = {job.job_id for job in paused + deleted + moved}
    kept = [job for job in burst if job.job_id not in changed]
    assert wait_for(lambda: Execution.objects.filter(job__in=kept, dispatched_at__isnull=False)
                    .count() == len(kept), timeout_s=30)
    published = _published(platform.queue)
    assert set(published) == {str(execution_id_for(str(job.job_id), fire_ms)) for job in kept}, (
        "a changed job fired, or a kept one did not")
    assert set(published.values()) == {1}
    assert Execution.objects.filter(job__in=paused + moved).count() == 0
    assert set(Job.objects.filter(job_id__in=[j.job_id for j in paused])
               .values_list("status", flat=True)) == {JobStatus.PAUSED}
    assert not Job.objects.filter(job_id__in=[j.job_id for j in deleted]).exists()
    for job in moved:
        assert datetime_to_ms(Job.objects.get(job_id=job.job_id).next_run_at) == fire_ms + 60_000
        assert timer_store().fire_time_of(str(job.job_id)) == fire_ms + 60_000


def test_a_replica_killed_holding_a_prepared_burst_loses_none_of_it(platform, tenant):
    victim = platform.start_beat("beat-a", **FAST_FAILOVER)
    fire_ms = (now_ms() // 1_000 + 5) * 1_000
    burst = _burst(platform, tenant, 2_000, fire_ms)
    _prepared_early(burst, 500, fire_ms)
    victim.signal(signal.SIGKILL)
    platform.start_beat("beat-b", **FAST_FAILOVER)  # takes the shards once their lease ends

    assert wait_for(lambda: Execution.objects.filter(job__in=burst, dispatched_at__isnull=False)
                    .count() == len(burst), timeout_s=60)
    published = _published(platform.queue)
    expected = {str(execution_id_for(str(job.job_id), fire_ms)) for job in burst}
    assert set(published) == expected, "an occurrence of the killed replica's burst was lost"
