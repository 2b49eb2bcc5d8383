"""The indexer against the real engine: order, ids, crash windows, rollover, refusals, outages."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from chronocore.config import get_config
from search import audit
from search.client import SearchClient
from search.documents import OutboxRow, build_document
from search.errors import SearchUnavailable
from search.index_template import (
    ISM_PLUGIN,
    AuditStream,
    field_names,
    ilm_policy,
    index_template,
    install,
    ism_policy,
    uninstall,
)
from search.indexer import Indexer
from search.models import AuditEvent, IndexerState
from tests.integration.audit_support import documents

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = pytest.mark.django_db


def outbox_rows(tenant_id, count: int, *, action: str = audit.JOB_CREATED) -> list[AuditEvent]:
    job_id = uuid.uuid4()
    for i in range(count):
        audit.record(action, tenant_id=tenant_id, job_id=job_id, actor="user:bench",
                     data={"job_type": "bench.task", "name": f"job {i}"})
    return list(AuditEvent.objects.filter(job_id=job_id).order_by("id"))


def stream_ids(client: SearchClient, stream: AuditStream, rows: list[AuditEvent]) -> list[str]:
    """The ``_id`` of every document of ``rows`` in the stream, duplicates included."""
    client.refresh(stream.name)
    reply = client.search(stream.name, {
        "query": {"terms": {"event.sequence": [row.id for row in rows]}},
        "size": 10 * len(rows) or 1, "_source": False,
    })
    return sorted(hit["_id"] for hit in reply["hits"]["hits"])


def test_rows_are_shipped_in_id_order_with_the_row_id_as_document_id_then_marked(
    tenant, indexer, search_client, audit_stream
):
    rows = outbox_rows(tenant.tenant_id, 25)
    indexer.batch_size = 10
    reports = [indexer.ship_once() for _ in range(4)]
    assert [r.read for r in reports] == [10, 10, 5, 0]
    assert sum(r.created for r in reports) == 25
    assert not AuditEvent.objects.filter(shipped_at__isnull=True).exists()
    assert IndexerState.objects.get(data_stream=audit_stream.name).in_doubt_ids == []
    assert stream_ids(search_client, audit_stream, rows) == sorted(str(r.id) for r in rows)
    docs = documents(search_client, audit_stream, chrono__job_id=rows[0].job_id)
    assert [d["event"]["sequence"] for d in docs] == [r.id for r in rows]


def test_rows_sent_before_without_an_answer_are_not_indexed_twice_in_the_same_write_index(
    tenant, indexer, search_client, audit_stream
):
    rows = outbox_rows(tenant.tenant_id, 8)
    # A previous indexer sent these and died before marking them (no lookup: same write index).
    search_client.bulk_create(audit_stream.name, [(str(r.id), _document(r, audit_stream))
                                                  for r in rows[:5]])
    report = indexer.ship_once()
    assert (report.read, report.created, report.already_indexed) == (8, 3, 5)
    assert stream_ids(search_client, audit_stream, rows) == sorted(str(r.id) for r in rows)


def test_a_rollover_between_a_crash_and_the_restart_creates_no_duplicate_document(
    tenant, search_client, audit_stream
):
    config = get_config()
    rows = outbox_rows(tenant.tenant_id, 12)
    crashed = Indexer(client=search_client, config=config, stream=audit_stream, batch_size=12)
    # What a crashed indexer leaves: the batch noted in doubt, sent, then no mark...
    sent = crashed._fetch()
    search_client.bulk_create(audit_stream.name, [(str(r.id), build_document(
        r, namespace=audit_stream.namespace)) for r in sent[:7]])
    assert set(IndexerState.objects.get(data_stream=audit_stream.name).in_doubt_ids) >= {
        r.id for r in rows}
    # ... then ILM/ISM rolls the stream over: the new write index does not know those ids.
    before = search_client.data_stream_indices(audit_stream.name)
    search_client.rollover(audit_stream.name)
    assert len(search_client.data_stream_indices(audit_stream.name)) == len(before) + 1

    # The restarted indexer waits the grace period before looking (a request of the dead one
    # could still be running in the engine), then finds the 7 and sends the other 5.
    config = replace(config, indexer_in_doubt_grace_ms=300)
    restarted = Indexer(client=search_client, config=config, stream=audit_stream)
    started = time.monotonic()
    report = restarted.ship_once()
    assert time.monotonic() - started >= 0.3
    assert (report.created, report.already_indexed) == (5, 7)
    assert stream_ids(search_client, audit_stream, rows) == sorted(str(r.id) for r in rows)
    assert not AuditEvent.objects.filter(id__in=[r.id for r in rows],
                                         shipped_at__isnull=True).exists()
    assert IndexerState.objects.get(data_stream=audit_stream.name).in_doubt_ids == []


def test_a_document_the_engine_refuses_is_shipped_reduced_and_nothing_is_lost(
    tenant, indexer, search_client, audit_stream
):
    (odd,) = outbox_rows(tenant.tenant_id, 1)
    # chrono.attempt is an integer field: this row's document is refused for its content.
    AuditEvent.objects.filter(id=odd.id).update(data={"attempt": "first"})
    (fine,) = outbox_rows(tenant.tenant_id, 1)
    report = indexer.ship_once()
    assert (report.created, report.left) == (2, 0)
    search_client.refresh(audit_stream.name)
    (doc,) = documents(search_client, audit_stream, event__sequence=odd.id)
    assert doc["tags"] == ["chrono_reduced"]
    assert doc["chrono"]["tenant_id"] == str(tenant.tenant_id)
    assert doc["chrono"]["details"]["document"]["chrono"]["attempt"] == "first"
    (doc,) = documents(search_client, audit_stream, event__sequence=fine.id)
    assert "tags" not in doc


def test_a_workflow_step_transition_with_a_reason_is_indexed_whole(
    tenant, indexer, search_client, audit_stream
):
    """The engine's step rows carry a waiting or failure reason: its text is ECS's
    ``event.reason`` (a keyword) and its code a detail; a structured reason written by older
    code is indexed as its text. Neither is refused and sent reduced."""
    job_id = uuid.uuid4()
    audit.record(audit.WORKFLOW_STEP_CHANGED, tenant_id=tenant.tenant_id, job_id=job_id,
                 actor="workflow-engine", message="step load PENDING -> UPSTREAM_FAILED",
                 data={"run_id": str(uuid.uuid4()), "step": "load", "before": "PENDING",
                       "after": "UPSTREAM_FAILED", "attempt": 0,
                       "reason": "trigger rule all_success: extract FAILED",
                       "reason_code": "upstream_failed"})
    audit.record(audit.WORKFLOW_STEP_CHANGED, tenant_id=tenant.tenant_id, job_id=job_id,
                 actor="workflow-engine", message="step load READY -> CANCELLED",
                 data={"step": "load", "reason": {"code": "cancelled", "text": "run cancelled",
                                                  "details": {}}})
    report = indexer.ship_once()
    assert (report.created, report.left) == (2, 0)
    search_client.refresh(audit_stream.name)
    docs = documents(search_client, audit_stream, chrono__job_id=job_id)
    assert [d["event"]["reason"] for d in docs] == [
        "trigger rule all_success: extract FAILED", "run cancelled"]
    assert all("tags" not in d for d in docs)
    assert docs[0]["chrono"]["details"]["reason_code"] == "upstream_failed"


def test_an_engine_that_does_not_answer_leaves_the_rows_unshipped_and_in_doubt(
    tenant, audit_stream
):
    rows = outbox_rows(tenant.tenant_id, 3)
    with SearchClient(f"http://127.0.0.1:{_closed_port()}", connect_timeout_s=0.5) as down:
        indexer = Indexer(client=down, config=get_config(), stream=audit_stream)
        with pytest.raises(SearchUnavailable):
            indexer.ship_once()
    assert AuditEvent.objects.filter(id__in=[r.id for r in rows], shipped_at__isnull=True
                                     ).count() == 3
    assert {r.id for r in rows} <= set(
        IndexerState.objects.get(data_stream=audit_stream.name).in_doubt_ids)


def test_the_loop_logs_a_failed_batch_backs_off_and_stops_when_asked(
    tenant, audit_stream, caplog
):
    outbox_rows(tenant.tenant_id, 2)
    with SearchClient(f"http://127.0.0.1:{_closed_port()}", connect_timeout_s=0.2) as down:
        indexer = Indexer(client=down, config=get_config(), stream=audit_stream)
        # run() installs first: that fails too, and is retried with back-off, logged.
        loop = threading.Thread(target=indexer.run)
        with caplog.at_level(logging.ERROR, logger="chrono.indexer"):
            loop.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(caplog.records) < 3:
                time.sleep(0.05)
            indexer.stop()
            loop.join(timeout=10)
    assert not loop.is_alive()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) >= 3
    assert all("failed, retrying in" in m and "SearchUnavailable" in m for m in messages)
    waits = [float(m.split("retrying in ")[1].split(" s")[0]) for m in messages]
    assert waits[:3] == [0.2, 0.4, 0.8]


def test_shipped_rows_are_pruned_after_the_keep_period_and_unshipped_ones_never(
    tenant, indexer
):
    old, recent, unshipped = outbox_rows(tenant.tenant_id, 3)
    keep = timedelta(hours=get_config().audit_outbox_keep_hours)
    AuditEvent.objects.filter(id=old.id).update(shipped_at=timezone.now() - keep - timedelta(1))
    AuditEvent.objects.filter(id=recent.id).update(shipped_at=timezone.now())
    assert indexer.prune() >= 1
    assert set(AuditEvent.objects.filter(id__in=[old.id, recent.id, unshipped.id])
               .values_list("id", flat=True)) == {recent.id, unshipped.id}


def test_the_unshipped_scan_uses_the_partial_index(tenant):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM search_auditevent WHERE shipped_at IS NULL "
                       "ORDER BY id LIMIT 100")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "auditevent_unshipped_idx" in plan


def test_install_is_idempotent_and_without_ism_logs_that_retention_is_not_applied(
    search_client, caplog, db
):
    stream = AuditStream(f"t{uuid.uuid4().hex[:12]}")
    config = get_config()
    try:
        with caplog.at_level(logging.INFO, logger="chrono.indexer"):
            first = install(search_client, config, stream)
            second = install(search_client, config, stream)
        assert first.engine.value == second.engine.value == "opensearch"
        assert ISM_PLUGIN not in search_client.plugin_names()  # the test node has no ISM
        assert first.policy is None
        assert any("no Index State Management plugin" in r.getMessage() for r in caplog.records)
        assert search_client.data_stream_indices(stream.name)
    finally:
        uninstall(search_client, stream)


def test_the_engine_maps_every_field_of_the_template_as_declared(search_client, audit_stream):
    reply = search_client.search(audit_stream.name, {"size": 0})  # the stream answers
    assert "hits" in reply
    mapping = search_client.mapping(audit_stream.name)
    declared = {name: kind for name, kind in field_names().items() if name != "labels"}
    for index_mapping in mapping.values():
        mapped = field_names(index_mapping["mappings"])
        assert {name: mapped.get(name) for name in declared} == declared
        # Only labels.* are added as documents come, and only as keywords.
        extra = {name: kind for name, kind in mapped.items() if name not in declared}
        assert all(name.startswith("labels") for name in extra), extra
        assert set(extra.values()) <= {"keyword", "object"}


def test_retention_policies_for_both_engines_carry_the_configured_period():
    stream = AuditStream("default")
    ilm = ilm_policy(7)
    assert ilm["policy"]["phases"]["delete"] == {"min_age": "7d", "actions": {"delete": {}}}
    assert ilm["policy"]["phases"]["hot"]["actions"]["rollover"]["max_age"] == "1d"
    ism = ism_policy(stream, 7)["policy"]
    (to_delete,) = [t for s in ism["states"] for t in s["transitions"]
                    if t["state_name"] == "delete"]
    assert to_delete["conditions"] == {"min_rollover_age": "7d"}
    assert ism["ism_template"][0]["index_patterns"] == [".ds-logs-chrono.audit-default-*"]
    elasticsearch = index_template(stream, shards=2, replicas=1, ilm_policy="chrono-audit-default")
    assert elasticsearch["template"]["settings"]["index"]["lifecycle"] == {
        "name": "chrono-audit-default"}
    assert elasticsearch["index_patterns"] == ["logs-chrono.audit-default"]
    assert elasticsearch["data_stream"] == {}
    assert "lifecycle" not in index_template(stream, shards=1, replicas=0)["template"][
        "settings"]["index"]


def _document(row: AuditEvent, stream: AuditStream) -> dict:
    return build_document(OutboxRow(id=row.id, occurred_at=row.occurred_at, action=row.action,
                                    outcome=row.outcome, tenant_id=row.tenant_id,
                                    job_id=row.job_id, actor=row.actor, data=row.data),
                          namespace=stream.namespace)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
