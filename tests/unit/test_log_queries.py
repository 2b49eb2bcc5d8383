"""The parameters of the log searches (search/log_queries.py): a tenant's search across its
executions checked per parameter, its cursor refused unless a search wrote it, and its query
always filtered by the tenant."""

from __future__ import annotations

import pytest

from search.errors import InvalidAuditQuery
from search.log_queries import (
    decode_search_cursor,
    parse_log_search,
    read_search_page,
)
from search.queries import encode_cursor

TENANT = "0b6c2d1e-0000-4000-8000-000000000001"
EXECUTION = "5f1e0a2b-0000-4000-8000-000000000002"


def search(**params):
    return parse_log_search(params, tenant_id=TENANT, default_page_size=50, max_page_size=500)


def test_every_filter_becomes_a_clause_beside_the_tenants():
    body = search(job=EXECUTION, execution=EXECUTION, level="warn", q="card declined",
                  after="2026-12-01T10:00:00Z", before="2026-12-01T12:00:00+01:00").body()
    filters = body["query"]["bool"]["filter"]
    assert filters[0] == {"term": {"chrono.tenant_id": TENANT}}
    assert {"term": {"chrono.job_id": EXECUTION}} in filters
    assert {"term": {"chrono.execution_id": EXECUTION}} in filters
    assert {"terms": {"log.level": ["warning", "error", "critical"]}} in filters
    assert {"range": {"@timestamp": {"gte": "2026-12-01T10:00:00.000Z",
                                     "lt": "2026-12-01T11:00:00.000Z"}}} in filters
    assert body["query"]["bool"]["must"][0]["simple_query_string"]["query"] == "card declined"
    assert [next(iter(s)) for s in body["sort"]] == [
        "@timestamp", "chrono.execution_id", "chrono.attempt", "event.sequence"]
    assert all(next(iter(s.values()))["order"] == "desc" for s in body["sort"])


def test_since_must_come_before_until_and_each_bad_parameter_is_named():
    with pytest.raises(InvalidAuditQuery) as refused:
        search(level="loud", after="yesterday", job="42", execution="x", order="sideways",
               cursor="nope", page_size="0", colour="red")
    assert set(refused.value.errors) == {"level", "after", "job", "execution", "order",
                                         "cursor", "page_size", "colour"}
    assert "'loud' is not a level" in refused.value.errors["level"][0]
    with pytest.raises(InvalidAuditQuery) as backwards:
        search(after="2026-12-02T00:00:00Z", before="2026-12-01T00:00:00Z")
    assert set(backwards.value.errors) == {"before"}


def test_a_cursor_is_taken_only_as_a_search_wrote_it():
    reply = {"hits": {"total": {"value": 3, "relation": "eq"}, "hits": [
        {"_source": {"message": f"m{i}", "chrono": {"execution_id": EXECUTION, "attempt": 1}},
         "sort": [1_764_000_000_000 + i, EXECUTION, 1, i]} for i in range(3)]}}
    page = read_search_page(search(page_size="2"), reply)
    assert [line["message"] for line in page.lines] == ["m0", "m1"]
    assert page.lines[0]["execution_id"] == EXECUTION
    assert decode_search_cursor(page.next_cursor) == (1_764_000_000_001, EXECUTION, 1, 1)
    assert search(cursor=page.next_cursor).body()["search_after"] == [
        1_764_000_000_001, EXECUTION, 1, 1]
    for forged in ([1, 2], [1, "not-a-uuid", 1, 1], [-1, EXECUTION, 1, 1],
                   [1, EXECUTION, "1", 1], [1, EXECUTION, 1, 2**64]):
        assert decode_search_cursor(encode_cursor(forged)) is None, forged
