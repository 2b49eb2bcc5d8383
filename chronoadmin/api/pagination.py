"""Cursor pagination with a page size the client may choose up to ``api_max_page_size``.

Cursors stay stable while rows are inserted (a bulk ingest does not shift pages), and a page size
outside 1..max is refused with 400 rather than silently clamped.
"""

from __future__ import annotations

from datetime import UTC

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

# get_config() here: DRF builds a paginator per request (and its schema at start-up): the process
# edge, nothing owns it to hand it the configuration.
from chronocore.config import get_config

PAGE_SIZE_PARAM = "page_size"


class ChronoCursorPagination(CursorPagination):
    page_size_query_param = PAGE_SIZE_PARAM
    ordering = ("-created_at", "-pk")

    def get_page_size(self, request: Request) -> int:
        config = get_config()
        self.max_page_size = config.api_max_page_size
        raw = request.query_params.get(PAGE_SIZE_PARAM)
        if raw is None:
            return config.api_default_page_size
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= config.api_max_page_size:
            raise ValidationError({PAGE_SIZE_PARAM: [
                f"'{raw[:32]}' is not allowed; use a whole number from 1 to "
                f"{config.api_max_page_size}."
            ]})
        return int(raw)

    def decode_cursor(self, request: Request):
        cursor = super().decode_cursor(request)
        # Every ordering the API offers is a timestamp, which this class writes with its UTC
        # offset; a tampered position must not reach SQL, where one beyond year 9999 in UTC
        # (9999-12-31T23:59:59-23:59) or with an offset PostgreSQL refuses was a 500.
        if cursor is not None and cursor.position is not None:
            try:
                moment = parse_datetime(cursor.position)
                if moment is None or moment.utcoffset() is None:
                    raise ValueError(cursor.position)
                position = moment.astimezone(UTC).isoformat()
            except (ValueError, OverflowError):
                raise NotFound(self.invalid_cursor_message) from None
            cursor = cursor._replace(position=position)
        return cursor

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == PAGE_SIZE_PARAM:
                parameter["schema"] = {
                    "type": "integer", "minimum": 1, "maximum": get_config().api_max_page_size,
                }
                parameter["description"] = (
                    f"Results per page, 1 to {get_config().api_max_page_size} "
                    f"(default {get_config().api_default_page_size})."
                )
        return parameters
