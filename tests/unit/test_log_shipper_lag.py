"""The shipper's lag (search/log_shipper.py): the oldest ``@timestamp`` of a batch found
without decoding its documents."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from search.log_shipper import oldest_timestamp


def line(stamp: str) -> tuple[str, bytes]:
    return "id", orjson.dumps({"ecs": {"version": "8"}, "@timestamp": stamp, "message": "x"})


def test_the_oldest_line_of_a_batch_is_found_whatever_its_place():
    lines = [line("2026-12-01T10:00:01.500Z"), line("2026-12-01T09:59:59.250Z"),
             line("2026-12-01T10:00:00.000Z")]
    expected = datetime(2026, 12, 1, 9, 59, 59, 250_000, tzinfo=UTC).timestamp()
    assert oldest_timestamp(lines) == expected


def test_lines_without_a_timestamp_give_none():
    assert oldest_timestamp([("id", b'{"message":"no time"}')]) is None
    assert oldest_timestamp([]) is None
