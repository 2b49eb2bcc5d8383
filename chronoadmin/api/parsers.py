"""Request body parsers with a size limit: JSON (orjson) and NDJSON for bulk ingest.

A body over the limit is refused with 413 before it is parsed; the limit is the view's
``max_request_bytes()`` (the bulk endpoint allows more than the others). The raw bytes are kept
on the request (``request.raw_body``) for the idempotency fingerprint.

orjson reads an integer beyond 64 bits as a float (``18446744073709551616`` becomes
``1.8446744073709552e19``), so a body with a run of 19 digits or more, which may hold one, is
read again by the standard library, which keeps every integer exact: validation then refuses
the ones a job cannot hold, naming their path (:mod:`scheduler.inputs`), instead of a float
silently taking their place. A run of digits can only be that long in a wide number or in a
string, so other bodies (nearly all) keep orjson's speed; the check costs 0.4 ms a 750 kB body.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any

import orjson
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from chronoadmin.api.errors import RequestTooLarge

# get_config() here: DRF builds its parsers per request: the process edge, nothing owns them to
# hand them the configuration.
from chronocore.config import get_config

# Every digit as "0", every other byte as a space: a long run of digits is then a substring.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
# 9223372036854775808 (2**63) has 19 digits: no integer beyond 64 bits has fewer.
_LONG_DIGIT_RUN = b"0" * 19


def request_limit_bytes(parser_context: dict | None) -> int:
    view = (parser_context or {}).get("view")
    limit_of: Callable[[], int] | None = getattr(view, "max_request_bytes", None)
    return limit_of() if limit_of else get_config().api_max_request_bytes


def read_limited(stream: IO[bytes] | None, parser_context: dict | None) -> bytes:
    """The whole body, or 413 when it is longer than the view's limit."""
    limit = request_limit_bytes(parser_context)
    request = (parser_context or {}).get("request")
    declared = request.META.get("CONTENT_LENGTH") if request is not None else None
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(_too_large(int(declared), limit))
    raw = stream.read(limit + 1) if stream is not None else b""
    if len(raw) > limit:
        raise RequestTooLarge(_too_large(None, limit))
    if request is not None:
        request.raw_body = raw
    return raw


def _too_large(size: int | None, limit: int) -> str:
    size_text = f"{size} bytes" if size is not None else "more than that"
    return (
        f"The request body is {size_text}; this endpoint accepts at most {limit} bytes. "
        "Send fewer jobs per request, or pass references (ids, URLs) instead of large payloads."
    )


def loads_json(raw: bytes) -> Any:
    """Parse JSON strictly (no NaN, no lone surrogates), integers exact; ParseError saying
    where it broke."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"Malformed JSON: {exc}. Send a valid JSON document.") from None
    return exact_integers(raw) if may_hold_wide_integer(raw) else document


def may_hold_wide_integer(raw: bytes) -> bool:
    """Whether ``raw`` has a run of digits long enough for an integer beyond 64 bits."""
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZEROS)


def exact_integers(raw: bytes) -> Any:
    """``raw``, a document orjson found valid, read again with every integer exact."""
    try:
        return json.loads(raw)
    except RecursionError:  # orjson reads 1,024 levels deep, the standard library fewer
        raise ParseError("Malformed JSON: nested too deeply. Send a document nested at most "
                         "900 levels deep.") from None


class LimitedJSONParser(BaseParser):
    """``application/json`` with a size limit."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        raw = read_limited(stream, parser_context)
        if not raw.strip():
            raise ParseError("Malformed JSON: the body is empty. Send a JSON document.")
        return loads_json(raw)


class MalformedLine:
    """An NDJSON line that is not JSON; the bulk endpoint reports it as that item's error."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class NDJSONParser(BaseParser):
    """``application/x-ndjson``: one JSON object a line, blank lines ignored; a list of items
    where a line that does not parse is a :class:`MalformedLine`."""

    media_type = "application/x-ndjson"

    def parse(self, stream, media_type=None, parser_context=None) -> list:
        raw = read_limited(stream, parser_context)
        wide = may_hold_wide_integer(raw)
        items: list = []
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                items.append(MalformedLine(f"line {number} is not valid JSON: {exc}"))
                continue
            if wide and may_hold_wide_integer(line):
                try:
                    item = json.loads(line)
                except RecursionError:
                    item = MalformedLine(f"line {number} is nested too deeply; nest at most "
                                         "900 levels deep")
            items.append(item)
        return items
