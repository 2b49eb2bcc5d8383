"""The exception family of the search package: every error it raises is a SearchError.

Most come from the search-engine client: urllib3's errors never leave :mod:`search.client`; they
are translated here at the boundary, so a caller (the indexer loop, the search API) decides what to
do from one of these classes alone: :class:`SearchUnavailable` is worth a retry with back-off, a
:class:`SearchRequestError` is not. :class:`InvalidAuditQuery` is the user's: search parameters
the API and the admin page refuse (a 400 naming each parameter). The REST API's own answers
(``search.api.SearchEngineUnavailable``, a 503) are DRF exceptions, as in ``chronoadmin.api``.
"""

from __future__ import annotations

from collections.abc import Mapping


class SearchError(Exception):
    """Base class of every error the search package raises."""


class InvalidAuditQuery(SearchError, ValueError):
    """Raised when search parameters cannot be used; ``errors`` maps each parameter at fault to
    what to change."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = dict(errors)


class SearchUnavailable(SearchError):
    """Raised when the engine cannot be reached, times out, or answers that it is overloaded or
    not ready (HTTP 429, 502, 503, 504); the same request may succeed later."""


class UnsupportedEngine(SearchError):
    """Raised when ``GET /`` names neither Elasticsearch 8 or later nor OpenSearch 2 or later."""


class SearchResponseError(SearchError):
    """Raised when the engine's reply is not the JSON the request calls for."""


class SearchRequestError(SearchError):
    """Raised when the engine rejects a request (HTTP 4xx or 500); repeating it will not help.

    ``status`` is the HTTP status, ``error_type`` the engine's error type
    (``resource_already_exists_exception``, ``index_not_found_exception``, …) and ``reason``
    its explanation.
    """

    def __init__(self, *, method: str, path: str, status: int, error_type: str, reason: str):
        super().__init__(f"{method} {path} failed with {status} {error_type}: {reason}")
        self.method = method
        self.path = path
        self.status = status
        self.error_type = error_type
        self.reason = reason


class SearchNotFound(SearchRequestError):
    """Raised when a request names an index, data stream or template that does not exist."""
