"""``chrono indexer`` as a real process: killed with SIGKILL mid-batch (with a rollover of the data
stream before it comes back), restarted, it leaves exactly one document per outbox row; and a job
run by real beat and worker processes reaches the audit log with every step."""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from chronocore.config import get_config
from localservices.processes import ProcessGroup
from scheduler import api
from search.models import AuditEvent, IndexerState
from tests.helpers import wait_for
from tests.integration.audit_support import actions, documents

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROWS = 80_000
BATCH = 2_000
MAX_KILLS = 6
PROBES_PER_KILL = 12
WINDOWS_WANTED = 2


def insert_outbox_rows(count: int) -> tuple[int, int]:
    """``count`` rows like a worker's "succeeded" events, with one SQL statement; (first, last)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO search_auditevent (tenant_id, occurred_at, action, outcome, job_id, "
            "execution_id, actor, message, data) "
            "SELECT %s, now() + g * interval '1 microsecond', 'execution.succeeded', 'success', "
            "gen_random_uuid(), gen_random_uuid(), 'worker:w1@e2e', '', jsonb_build_object("
            "'attempt', 1, 'worker_id', 'w1@e2e', 'exit_code', 0, 'duration_us', g) "
            "FROM generate_series(1, %s) AS g RETURNING id",
            [uuid.uuid4(), count],
        )
        ids = [row[0] for row in cursor.fetchall()]
    return min(ids), max(ids)


def test_killed_mid_batch_and_restarted_after_a_rollover_it_leaves_one_document_per_row(
    audit_stream, search_client, tmp_path
):
    first, last = insert_outbox_rows(ROWS)
    unshipped = AuditEvent.objects.filter(id__range=(first, last), shipped_at__isnull=True)
    group = ProcessGroup(env=_child_env(), log_dir=tmp_path / "logs")
    windows = kills = 0
    started = []
    try:
        while kills < MAX_KILLS and windows < WINDOWS_WANTED:
            before = unshipped.count()
            assert before > 3 * BATCH, "ran out of rows before catching a crash window"
            indexer = group.start(f"indexer-{kills}", ["indexer", "--batch-size", str(BATCH)])
            started.append(indexer)
            indexer.wait_until(lambda b=before: unshipped.count() < b, timeout_s=60,
                               what="shipping a batch")
            # A random kill lands between a _bulk and its mark only some of the time (the window
            # is the request's own duration), so the indexer is frozen with SIGSTOP at a random
            # moment of a later batch and looked at: in the window it gets its SIGKILL there and
            # then; outside it, SIGCONT, and another try.
            caught = False
            for _probe in range(PROBES_PER_KILL):
                time.sleep(random.uniform(0.0, 0.2))
                indexer.signal_group(signal.SIGSTOP)
                caught = _sent_but_not_marked(search_client, audit_stream.name)
                if caught:
                    break
                indexer.signal_group(signal.SIGCONT)
            indexer.signal_group(signal.SIGKILL)
            indexer.popen.wait(10)
            kills += 1
            if caught:
                windows += 1
                # ILM/ISM rolls over daily: here it happens while nothing runs, so the rows in
                # doubt are in an older backing index than the one the restart writes to.
                search_client.rollover(audit_stream.name)
        print(f"kills={kills} crash windows={windows}")
        assert windows >= 1, f"{kills} kills never landed between a _bulk and its mark"

        final = group.start("indexer-final", ["indexer", "--batch-size", str(BATCH)])
        started.append(final)
        final.wait_until(lambda: not unshipped.exists(), timeout_s=180, what="shipping it all")
        final.signal(signal.SIGTERM)
        assert final.popen.wait(30) == 0, final.log_tail()
        assert "indexer stopped" in final.log_tail()
    finally:
        group.stop_all()
    logs = "\n".join(process.log_tail(10_000) for process in started)
    # Each restart after a crash window found rows of the dead indexer already in the stream.
    assert logs.count("in doubt were already indexed") >= windows

    stream = audit_stream.name
    search_client.refresh(stream)
    in_range = {"range": {"event.sequence": {"gte": first, "lte": last}}}
    assert search_client.count(stream, in_range) == ROWS
    ids = [str(i) for i in range(first, last + 1)]
    assert search_client.existing_ids(stream, ids) == set(ids)  # ROWS distinct ids: no twin
    assert len(search_client.data_stream_indices(stream)) > windows
    assert IndexerState.objects.get(data_stream=stream).in_doubt_ids == []


def test_a_job_run_by_real_processes_reaches_the_audit_log_step_by_step(
    platform, tenant, audit_stream, search_client
):
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker()
        platform.group.start("indexer", ["indexer"], env={"CHRONO_INDEXER_POLL_INTERVAL_MS": "50"})
    job = api.schedule_once("e2e.record_run", tenant=tenant, delay=0.5, queue=platform.queue,
                            by="user:e2e")

    def history(job_id) -> list[str]:
        search_client.refresh(audit_stream.name)
        return actions(documents(search_client, audit_stream, chrono__job_id=job_id))

    assert wait_for(lambda: len(history(job.job_id)) >= 5, timeout_s=60), history(job.job_id)
    steps = history(job.job_id)
    # In time order; a worker may start a run a moment before the beat hears the publish
    # confirmed (the dispatch time), so only the ends of the history have a fixed place.
    assert sorted(steps) == sorted([
        "job.created", "execution.dispatched", "job.completed", "execution.started",
        "execution.succeeded",
    ])
    assert (steps[0], steps[-1]) == ("job.created", "execution.succeeded")
    hostname = f"worker-1@{platform.queue}"

    def worker_history() -> list[str]:
        search_client.refresh(audit_stream.name)
        return actions(documents(search_client, audit_stream, chrono__worker_id=hostname,
                                 event__category="host"))

    assert worker_history() == ["worker.up"]
    worker.stop()
    assert wait_for(lambda: worker_history() == ["worker.up", "worker.down"], timeout_s=30)


def _sent_but_not_marked(client, stream: str) -> bool:
    """Whether the killed indexer left rows in the engine that are not marked shipped."""
    state = IndexerState.objects.filter(data_stream=stream).first()
    if state is None:
        return False
    doubtful = list(AuditEvent.objects.filter(id__in=state.in_doubt_ids, shipped_at__isnull=True)
                    .values_list("id", flat=True))
    time.sleep(1.0)  # let a request the engine was still executing finish
    client.refresh(stream)
    return bool(doubtful) and bool(client.existing_ids(stream, [str(i) for i in doubtful]))


def _child_env() -> dict[str, str]:
    base = urlsplit(get_config().database_url)
    database = connection.settings_dict["NAME"]
    return {
        "DATABASE_URL": urlunsplit(base._replace(path=f"/{database}")),
        "REDIS_URL": os.environ["REDIS_URL"],
        "CHRONO_AUDIT_NAMESPACE": get_config().audit_namespace,
        "CHRONO_AUDIT_INDEX_REPLICAS": "0",
        "CHRONO_INDEXER_IN_DOUBT_GRACE_MS": "1000",
    }
