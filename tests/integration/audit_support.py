"""Helpers of the audit tests: ship the outbox, read documents back (fixtures are in
:mod:`tests.integration.audit_fixtures`)."""

from __future__ import annotations

from typing import Any

from search.client import SearchClient
from search.index_template import AuditStream
from search.indexer import Indexer


def ship_all(indexer: Indexer) -> int:
    """Ship the whole outbox (as ``chrono indexer`` would) and make it searchable."""
    shipped = 0
    while True:
        report = indexer.ship_once()
        shipped += report.shipped
        if report.read == 0:
            break
        assert report.left == 0, "the engine refused documents"
    indexer.client.refresh(indexer.stream.name)
    return shipped


def documents(
    client: SearchClient, stream: AuditStream, *, size: int = 1_000, **terms: Any
) -> list[dict[str, Any]]:
    """The stream's documents matching every ``field=value`` (``chrono__job_id=…`` for
    ``chrono.job_id``), oldest first."""
    filters = [{"term": {name.replace("__", "."): str(value)}} for name, value in terms.items()]
    reply = client.search(
        stream.name,
        {
            "query": {"bool": {"filter": filters}},
            "sort": [{"@timestamp": "asc"}, {"event.sequence": "asc"}],
            "size": size,
        },
    )
    return [hit["_source"] | {"_id": hit["_id"]} for hit in reply["hits"]["hits"]]


def actions(docs: list[dict[str, Any]]) -> list[str]:
    return [doc["event"]["action"] for doc in docs]
