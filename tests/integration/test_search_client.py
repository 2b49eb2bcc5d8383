"""Chrono's search client against the real engine ``chrono services up`` starts (OpenSearch 2).

Every test works in a data stream and template of its own, named with a random suffix, and
deletes them afterwards, so test runs side by side on one engine do not meet.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from chronocore.config import get_config
from search.client import (
    BulkOutcome,
    Engine,
    SearchClient,
    detect_engine,
)
from search.errors import (
    SearchNotFound,
    SearchRequestError,
    SearchUnavailable,
    UnsupportedEngine,
)

MAPPINGS = {
    "properties": {
        "@timestamp": {"type": "date"},
        "message": {"type": "text"},
        "event": {"properties": {"action": {"type": "keyword"}}},
        "chrono": {"properties": {"job_id": {"type": "keyword"}}},
    }
}


@pytest.fixture(scope="module")
def client(services_up):
    with SearchClient.from_config(get_config()) as client:
        yield client


@pytest.fixture
def stream(client):
    """A data stream (and the composable template it is created from) of this test's own."""
    name = f"chrono-test-audit-{uuid.uuid4().hex[:12]}"
    client.put_index_template(
        name,
        {
            "index_patterns": [name],
            "data_stream": {},
            "priority": 500,
            "template": {
                "settings": {"number_of_shards": 1, "number_of_replicas": 0},
                "mappings": MAPPINGS,
            },
        },
    )
    assert client.create_data_stream(name) is True
    yield name
    client.delete_data_stream(name)
    client.delete_index_template(name)


def _event(seconds: int, *, job_id: str = "job-1", action: str = "job.created") -> dict:
    return {
        "@timestamp": f"2025-01-01T00:00:{seconds:02d}Z",
        "message": f"{action.replace('.', ' ')} for {job_id}",
        "event": {"action": action},
        "chrono": {"job_id": job_id},
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_engine_is_detected_as_opensearch_2_by_get_root(client):
    info = client.engine()
    assert info.engine is Engine.OPENSEARCH
    assert info.major == 2
    assert info.cluster_name == "chrono"


def test_elasticsearch_8_and_9_are_told_apart_from_opensearch_by_their_root_reply():
    es9 = detect_engine({"cluster_name": "prod", "version": {"number": "9.0.1"}})
    es8 = detect_engine({"version": {"number": "8.15.0", "build_flavor": "default"}})
    opensearch = detect_engine({"version": {"number": "2.19.6", "distribution": "opensearch"}})
    assert (es9.engine, es9.major, es9.cluster_name) == (Engine.ELASTICSEARCH, 9, "prod")
    assert (es8.engine, es8.major) == (Engine.ELASTICSEARCH, 8)
    assert (opensearch.engine, opensearch.major) == (Engine.OPENSEARCH, 2)


@pytest.mark.parametrize(
    "version",
    [
        {"number": "7.17.9"},
        {"number": "1.3.14", "distribution": "opensearch"},
        {},
    ],
)
def test_an_engine_older_than_elasticsearch_8_or_opensearch_2_is_refused(version):
    with pytest.raises(UnsupportedEngine):
        detect_engine({"version": version})


def test_a_data_stream_from_a_composable_template_starts_empty_and_is_created_once(client, stream):
    assert client.count(stream) == 0
    assert client.create_data_stream(stream) is False  # exist_ok: already there
    with pytest.raises(SearchRequestError) as raised:
        client.create_data_stream(stream, exist_ok=False)
    assert raised.value.error_type == "resource_already_exists_exception"


def test_bulk_with_explicit_ids_twice_creates_each_document_once(client, stream):
    documents = [(f"outbox-{n}", _event(n % 60)) for n in range(200)]

    first = client.bulk_create(stream, documents, refresh=True)
    assert first.created == [doc_id for doc_id, _ in documents]
    assert client.count(stream) == 200

    again = client.bulk_create(stream, documents, refresh=True)
    assert again.created == [] and again.failed == []
    assert again.already_existing == [doc_id for doc_id, _ in documents]
    assert {item.status for item in again.items} == {409}
    assert client.count(stream) == 200


def test_bulk_reports_each_document_so_one_rejected_does_not_hide_the_others(client, stream):
    client.bulk_create(stream, [("outbox-1", _event(1))], refresh=True)
    result = client.bulk_create(
        stream,
        [
            ("outbox-1", _event(1)),
            ("outbox-2", {**_event(2), "@timestamp": "not a time"}),
            ("outbox-3", _event(3)),
        ],
        refresh=True,
    )
    outcomes = [(item.doc_id, item.outcome) for item in result.items]
    assert outcomes == [
        ("outbox-1", BulkOutcome.ALREADY_EXISTS),
        ("outbox-2", BulkOutcome.FAILED),
        ("outbox-3", BulkOutcome.CREATED),
    ]
    (rejected,) = result.failed
    assert rejected.status == 400 and not rejected.retryable
    assert rejected.error["type"] == "mapper_parsing_exception"
    assert client.count(stream) == 2


def test_bulk_of_nothing_sends_nothing(client, stream):
    result = client.bulk_create(stream, [])
    assert result.items == () and client.count(stream) == 0


def test_search_returns_a_jobs_documents_in_time_order(client, stream):
    client.bulk_create(
        stream,
        [
            ("e-3", _event(3, job_id="job-1", action="execution.succeeded")),
            ("e-1", _event(1, job_id="job-1", action="job.created")),
            ("e-9", _event(2, job_id="job-2", action="job.created")),
            ("e-2", _event(2, job_id="job-1", action="execution.dispatched")),
        ],
    )
    client.refresh(stream)
    reply = client.search(
        stream,
        {"query": {"term": {"chrono.job_id": "job-1"}}, "sort": [{"@timestamp": "asc"}]},
        track_total_hits=True,
    )
    assert reply["hits"]["total"] == {"value": 3, "relation": "eq"}
    assert [hit["_id"] for hit in reply["hits"]["hits"]] == ["e-1", "e-2", "e-3"]
    assert reply["hits"]["hits"][0]["_source"]["event"]["action"] == "job.created"
    assert client.count(stream, {"match": {"message": "created"}}) == 2


def test_a_missing_data_stream_is_not_found_and_deleting_it_is_no_error(client):
    missing = f"chrono-test-missing-{uuid.uuid4().hex[:12]}"
    with pytest.raises(SearchNotFound) as raised:
        client.count(missing)
    assert raised.value.status == 404
    client.delete_data_stream(missing)
    client.delete_index_template(missing)


def test_an_engine_that_does_not_answer_is_unavailable():
    with SearchClient(f"http://127.0.0.1:{_free_port()}", connect_timeout_s=1) as client:
        with pytest.raises(SearchUnavailable):
            client.engine()
