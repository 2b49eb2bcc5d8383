"""Request ids: every response of the web process carries ``X-Request-ID``, and every log line
about the request (a 500's traceback above all) names the same id, so a user who reports the id
of a failed call leads the operator to its traceback.

A client (or a proxy in front) may send its own ``X-Request-ID``; it is kept when it is short and
made of safe characters, so one id can follow a call through several systems. Anything else is
replaced by a new random id: a log line must never carry what a client typed unchecked.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")


def request_id_of(request: HttpRequest) -> str:
    """The id given to ``request`` (set by :class:`RequestIdMiddleware`), or ``-``."""
    return getattr(request, "chrono_request_id", "-")


def _incoming_or_new(request: HttpRequest) -> str:
    offered = request.headers.get(REQUEST_ID_HEADER, "")
    if _SAFE_REQUEST_ID.fullmatch(offered):
        return offered
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Gives each request an id (``request.chrono_request_id``) and returns it in the response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.chrono_request_id = _incoming_or_new(request)
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request.chrono_request_id
        return response


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to a record: from the request Django attaches to ``django.request``
    records, ``-`` for records about no request."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        record.request_id = request_id_of(request) if request is not None else "-"
        return True
