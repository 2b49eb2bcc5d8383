"""Chrono's client for the engine holding its audit log: Elasticsearch 8/9 or OpenSearch 2.

Why a thin client of our own: the official ``elasticsearch`` Python client checks that the
server says it is Elasticsearch and refuses to talk to anything else, OpenSearch included, and
``opensearch-py`` is not meant for Elasticsearch 8. Chrono runs against Elasticsearch in
production (Kibana needs it) and against OpenSearch in tests and the demo (its jars are what
these machines can fetch), so it keeps to the REST features both engines share and speaks them
over urllib3: composable index templates, data streams, ``_bulk`` with ``create`` and explicit
``_id``, ``_search``, ``_count`` and ``_refresh``. :meth:`SearchClient.engine` tells the two
apart by ``GET /`` for the few places where they differ (retention policies).

Errors are the :mod:`search.errors` family; nothing from urllib3 escapes.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit

import urllib3

from search.errors import (
    SearchNotFound,
    SearchRequestError,
    SearchResponseError,
    SearchUnavailable,
    UnsupportedEngine,
)

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

DEFAULT_URL = "http://127.0.0.1:9200"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_POOL_SIZE = 4
# Statuses that say "not now" rather than "never": overloaded, or a proxy without a backend.
UNAVAILABLE_STATUSES = frozenset({429, 502, 503, 504})
MIN_ELASTICSEARCH_MAJOR = 8
MIN_OPENSEARCH_MAJOR = 2
# What a _bulk reply needs to carry back, per item; the rest (shards, seq_no…) is dropped
# by the engine itself instead of being parsed here.
BULK_FILTER_PATH = "took,errors,items.*._id,items.*.status,items.*.error"
# Below both engines' default index.max_result_window (10,000).
IDS_PER_SEARCH = 5_000


class Engine(enum.Enum):
    """Which engine serves the URL."""

    ELASTICSEARCH = "elasticsearch"
    OPENSEARCH = "opensearch"


@dataclass(frozen=True, kw_only=True)
class EngineInfo:
    """What ``GET /`` says about the engine: which one, its version and cluster name."""

    engine: Engine
    version: str
    cluster_name: str

    @property
    def major(self) -> int:
        return _version_parts(self.version)[0]


class BulkOutcome(enum.Enum):
    """What became of one document of a ``_bulk`` request."""

    CREATED = "created"
    # A document with this _id is already there (409): for a re-shipped outbox row, success.
    ALREADY_EXISTS = "already_exists"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class BulkItemResult:
    """One document's result: ``status`` is its HTTP status, ``error`` the engine's error."""

    doc_id: str
    outcome: BulkOutcome
    status: int
    error: Mapping[str, Any] | None = None

    @property
    def retryable(self) -> bool:
        """Whether the failure is the engine's momentary state (queue full, shard not ready)."""
        return self.outcome is BulkOutcome.FAILED and (self.status == 429 or self.status >= 500)


@dataclass(frozen=True, kw_only=True)
class BulkResult:
    """The per-document results of one ``_bulk`` request, in the order the documents went."""

    items: tuple[BulkItemResult, ...]
    took_ms: int
    # Size of the request body (what a throughput figure counts).
    request_bytes: int = 0

    def ids(self, outcome: BulkOutcome) -> list[str]:
        return [item.doc_id for item in self.items if item.outcome is outcome]

    @property
    def created(self) -> list[str]:
        return self.ids(BulkOutcome.CREATED)

    @property
    def already_existing(self) -> list[str]:
        return self.ids(BulkOutcome.ALREADY_EXISTS)

    @property
    def failed(self) -> list[BulkItemResult]:
        return [item for item in self.items if item.outcome is BulkOutcome.FAILED]


class SearchClient:
    """A connection pool to one engine at ``url`` (``http[s]://[user:password@]host:port``).

    Thread-safe; close it (or use it as a context manager) to release its connections.
    ``api_key`` is an Elasticsearch API key (the base64 ``id:key`` form) and wins over a user
    and password in the URL.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"search URL {url!r} must look like http://127.0.0.1:9200")
        port = f":{parts.port}" if parts.port else ""
        self.base_url = f"{parts.scheme}://{parts.hostname}{port}{parts.path.rstrip('/')}"
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"ApiKey {api_key}"
        elif parts.username:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            self._headers.update(urllib3.make_headers(basic_auth=credentials))
        self._pool = urllib3.PoolManager(
            maxsize=pool_size,
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
            retries=False,  # the caller retries, with its own back-off, on SearchUnavailable
        )
        self._engine: EngineInfo | None = None

    @classmethod
    def from_config(cls, config: ChronoConfig, **options: Any) -> SearchClient:
        """A client for ``config.search_url`` (``SEARCH_URL``) with its API key."""
        options.setdefault("api_key", config.search_api_key or None)
        return cls(config.search_url, **options)

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------ engine

    def engine(self) -> EngineInfo:
        """Which engine this is, by ``GET /`` (asked once, then remembered).

        OpenSearch says ``version.distribution: opensearch``; Elasticsearch has no
        distribution. Raises :class:`UnsupportedEngine` for anything older than
        Elasticsearch 8 or OpenSearch 2.
        """
        if self._engine is None:
            self._engine = detect_engine(self._request("GET", "/"))
        return self._engine

    # ----------------------------------------------------------------- templates and streams

    def put_index_template(self, name: str, body: Mapping[str, Any]) -> None:
        """Create or replace the composable index template ``name`` (``PUT _index_template``)."""
        self._request("PUT", f"/_index_template/{_name(name)}", body=body)

    def delete_index_template(self, name: str) -> None:
        """Delete the index template ``name``; one that is not there counts as deleted."""
        with suppress(SearchNotFound):
            self._request("DELETE", f"/_index_template/{_name(name)}")

    def create_data_stream(self, name: str, *, exist_ok: bool = True) -> bool:
        """Create the data stream ``name`` (a matching template must exist); False if it was
        already there and ``exist_ok``."""
        try:
            self._request("PUT", f"/_data_stream/{_name(name)}")
        except SearchRequestError as error:
            if exist_ok and error.error_type == "resource_already_exists_exception":
                return False
            raise
        return True

    def delete_data_stream(self, name: str) -> None:
        """Delete the data stream ``name`` and its backing indices (tests and clean-up).

        One that is not there counts as deleted: OpenSearch answers 200 for it and
        Elasticsearch 404, and the caller wanted it gone either way.
        """
        with suppress(SearchNotFound):
            self._request("DELETE", f"/_data_stream/{_name(name)}")

    def rollover(self, data_stream: str) -> str:
        """Start a new write index for ``data_stream`` now; the new index's name."""
        reply = self._request("POST", f"/{_name(data_stream)}/_rollover")
        return str(reply.get("new_index", ""))

    def data_stream_indices(self, name: str) -> list[str]:
        """The backing indices of the data stream ``name``, oldest first."""
        reply = self._request("GET", f"/_data_stream/{_name(name)}")
        streams = reply.get("data_streams") or []
        if not streams:
            raise SearchResponseError(f"GET _data_stream/{name} answered no data stream")
        return [str(index["index_name"]) for index in streams[0].get("indices", [])]

    def backing_index_stats(self, index_pattern: str) -> dict[str, tuple[int, int, int]]:
        """``{index: (creation time in epoch ms, bytes its primary shards store, documents
        in them)}`` for the indices matching ``index_pattern`` (hidden ones, as a data
        stream's backing indices are, included)."""
        created = self._request(
            "GET", f"/{_name(index_pattern)}/_settings",
            params={"expand_wildcards": "all",
                    "filter_path": "*.settings.index.creation_date"})
        stats = self._request(
            "GET", f"/{_name(index_pattern)}/_stats/store,docs",
            params={"expand_wildcards": "all", "level": "indices",
                    "filter_path": "indices.*.primaries.store.size_in_bytes,"
                                   "indices.*.primaries.docs.count"})
        primaries = {name: entry.get("primaries") or {}
                     for name, entry in (stats.get("indices") or {}).items()}
        return {
            name: (int(entry["settings"]["index"]["creation_date"]),
                   int((primaries.get(name, {}).get("store") or {}).get("size_in_bytes") or 0),
                   int((primaries.get(name, {}).get("docs") or {}).get("count") or 0))
            for name, entry in created.items()
        }

    def delete_index(self, name: str) -> None:
        """Delete the index ``name`` (a data stream's backing index other than its write
        index); one that is not there counts as deleted."""
        with suppress(SearchNotFound):
            self._request("DELETE", f"/{_name(name)}")

    def mapping(self, target: str) -> dict[str, Any]:
        """The field mappings of ``target``'s indices, ``{index: {"mappings": …}}``."""
        return self._request("GET", f"/{_name(target)}/_mapping")

    # -------------------------------------------------------------------- retention policies

    def plugin_names(self) -> set[str]:
        """Names of the plugins installed on any node (``GET _nodes/plugins``)."""
        reply = self._request(
            "GET", "/_nodes/plugins", params={"filter_path": "nodes.*.plugins.name"}
        )
        return {
            str(plugin.get("name"))
            for node in (reply.get("nodes") or {}).values()
            for plugin in node.get("plugins") or []
        }

    def put_ilm_policy(self, name: str, body: Mapping[str, Any]) -> None:
        """Create or replace the Elasticsearch ILM policy ``name``."""
        self._request("PUT", f"/_ilm/policy/{_name(name)}", body=body)

    def put_ism_policy(self, name: str, body: Mapping[str, Any]) -> None:
        """Create or replace the OpenSearch ISM policy ``name`` (an update must name the
        version it replaces, so the current one is read first)."""
        path = f"/_plugins/_ism/policies/{_name(name)}"
        try:
            current = self._request("GET", path)
        except SearchNotFound:
            self._request("PUT", path, body=body)
            return
        params = {"if_seq_no": current["_seq_no"], "if_primary_term": current["_primary_term"]}
        self._request("PUT", path, params=params, body=body)

    def attach_policy(self, index_pattern: str, name: str) -> None:
        """Put the retention policy ``name`` on the indices matching ``index_pattern`` that
        exist now (indices created later get it from their template or ``ism_template``).

        Elasticsearch: the ``index.lifecycle.name`` setting. OpenSearch: ``_ism/add``, which
        leaves alone an index that already has a policy (it says so in its reply, which is
        not an error here). A pattern matching nothing is not an error either.
        """
        params = {"allow_no_indices": True, "expand_wildcards": "all"}
        with suppress(SearchNotFound):
            if self.engine().engine is Engine.ELASTICSEARCH:
                self._request("PUT", f"/{_name(index_pattern)}/_settings", params=params,
                              body={"index": {"lifecycle": {"name": name}}})
            else:
                self._request("POST", f"/_plugins/_ism/add/{_name(index_pattern)}",
                              body={"policy_id": name})

    def delete_policy(self, name: str) -> None:
        """Delete the retention policy ``name`` of this engine; one that is not there, or an
        engine without policies, counts as deleted (tests and clean-up)."""
        if self.engine().engine is Engine.ELASTICSEARCH:
            path = f"/_ilm/policy/{_name(name)}"
        else:
            path = f"/_plugins/_ism/policies/{_name(name)}"
        with suppress(SearchRequestError):
            self._request("DELETE", path)

    def cluster_status(self) -> str:
        """The cluster's health colour (``green``, ``yellow``, ``red``), by ``GET
        _cluster/health``."""
        return str(self._request("GET", "/_cluster/health").get("status", "unknown"))

    def refresh(self, target: str) -> None:
        """Make everything indexed into ``target`` so far visible to search and count."""
        self._request("POST", f"/{_name(target)}/_refresh")

    # -------------------------------------------------------------------------- documents

    def bulk_create(
        self,
        target: str,
        documents: Iterable[tuple[str, Mapping[str, Any]]],
        *,
        refresh: bool | str = False,
    ) -> BulkResult:
        """Index ``(doc_id, source)`` pairs into ``target`` with ``op_type=create``.

        A document whose ``_id`` is already there is not overwritten: it comes back as
        :attr:`BulkOutcome.ALREADY_EXISTS`, so shipping the same rows again after a crash
        creates no duplicate. In a data stream that holds only while the ``_id`` is in the
        current write index: after a rollover, the new backing index does not know the old ids.
        ``refresh`` is ``True``, ``False`` or ``"wait_for"``.
        """
        return self.bulk_create_raw(
            target, ((str(doc_id), _dumps(source)) for doc_id, source in documents),
            refresh=refresh)

    def bulk_create_raw(
        self,
        target: str,
        documents: Iterable[tuple[str, bytes]],
        *,
        refresh: bool | str = False,
    ) -> BulkResult:
        """:meth:`bulk_create` of documents already encoded as JSON (one line each, as the
        execution-log spool holds them: the shipper sends them without decoding them)."""
        ids: list[str] = []
        lines: list[bytes] = []
        for doc_id, source in documents:
            ids.append(doc_id)
            lines.append(_dumps({"create": {"_id": doc_id}}))
            lines.append(source)
        if not ids:
            return BulkResult(items=(), took_ms=0)
        params = {"filter_path": BULK_FILTER_PATH, "refresh": _refresh_param(refresh)}
        body = b"\n".join(lines) + b"\n"
        reply = self._request(
            "POST",
            f"/{_name(target)}/_bulk",
            params=params,
            raw_body=body,
            content_type="application/x-ndjson",
        )
        items = reply.get("items", [])
        if len(items) != len(ids):
            raise SearchResponseError(
                f"_bulk into {target} answered {len(items)} items for {len(ids)} documents"
            )
        return BulkResult(
            items=tuple(_bulk_item(doc_id, item) for doc_id, item in zip(ids, items, strict=True)),
            took_ms=int(reply.get("took", 0)),
            request_bytes=len(body),
        )

    def search(
        self, target: str, body: Mapping[str, Any] | None = None, **params: Any
    ) -> dict[str, Any]:
        """``POST target/_search`` with ``body``; the engine's reply as it is (``hits.hits``,
        ``hits.total``, ``aggregations``). ``params`` go in the query string."""
        return self._request("POST", f"/{_name(target)}/_search", params=params, body=body or {})

    def existing_ids(self, target: str, doc_ids: Iterable[str]) -> set[str]:
        """Which of ``doc_ids`` are documents of ``target``, searched across every backing
        index of a data stream (what ``create`` alone cannot see after a rollover). Only
        refreshed documents are seen: :meth:`refresh` first."""
        doc_ids = [str(doc_id) for doc_id in doc_ids]
        found: set[str] = set()
        for start in range(0, len(doc_ids), IDS_PER_SEARCH):
            chunk = doc_ids[start : start + IDS_PER_SEARCH]
            reply = self.search(
                target,
                {"query": {"ids": {"values": chunk}}, "size": len(chunk), "_source": False},
                filter_path="hits.hits._id",
            )
            found.update(str(hit["_id"]) for hit in (reply.get("hits") or {}).get("hits", []))
        return found

    def count(self, target: str, query: Mapping[str, Any] | None = None) -> int:
        """How many documents of ``target`` match ``query`` (all of them without one)."""
        body = {"query": query} if query is not None else {}
        reply = self._request("POST", f"/{_name(target)}/_count", body=body)
        try:
            return int(reply["count"])
        except (KeyError, TypeError, ValueError):
            raise SearchResponseError(f"_count of {target} answered {reply!r}") from None

    # ---------------------------------------------------------------------------- transport

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        raw_body: bytes | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One HTTP request; the JSON reply, or the matching :mod:`search.errors` error."""
        if body is not None:
            raw_body = _dumps(body)
        url = self.base_url + path
        if params:
            url += "?" + urlencode({k: _param(v) for k, v in params.items() if v is not None})
        headers = dict(self._headers)
        if raw_body is not None:
            headers["Content-Type"] = content_type
        try:
            response = self._pool.request(method, url, body=raw_body, headers=headers)
        except urllib3.exceptions.HTTPError as error:
            raise SearchUnavailable(f"{method} {self.base_url}{path}: {error}") from None
        return _reply(method, path, response)


# ------------------------------------------------------------------------------------ helpers


def detect_engine(root: Mapping[str, Any]) -> EngineInfo:
    """Tell the engine from the body of its ``GET /``."""
    version = root.get("version") or {}
    number = str(version.get("number", ""))
    if not re.match(r"\d+\.\d+", number):
        raise UnsupportedEngine(f"GET / answered no version number: {dict(root)!r}")
    if version.get("distribution") == "opensearch":
        engine, minimum = Engine.OPENSEARCH, MIN_OPENSEARCH_MAJOR
    else:
        engine, minimum = Engine.ELASTICSEARCH, MIN_ELASTICSEARCH_MAJOR
    info = EngineInfo(engine=engine, version=number, cluster_name=str(root.get("cluster_name")))
    if info.major < minimum:
        raise UnsupportedEngine(
            f"{engine.value} {number} is too old: Chrono needs Elasticsearch "
            f"{MIN_ELASTICSEARCH_MAJOR}+ or OpenSearch {MIN_OPENSEARCH_MAJOR}+"
        )
    return info


def _version_parts(number: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", number.split("-")[0])[:3])


def _name(name: str) -> str:
    """An index, stream or template name (or a comma list, or a pattern) for a URL path."""
    if not name or name.startswith(("_", "/")):
        raise ValueError(f"{name!r} is not an index, data stream or template name")
    return quote(name, safe=",*-_.+")


def _dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _refresh_param(refresh: bool | str) -> str:
    if refresh in (True, False, "wait_for"):
        return _param(refresh) if isinstance(refresh, bool) else refresh
    raise ValueError(f"refresh must be True, False or 'wait_for', not {refresh!r}")


def _bulk_item(doc_id: str, item: Mapping[str, Any]) -> BulkItemResult:
    (result,) = item.values()  # {"create": {...}}
    status = int(result.get("status", 0))
    error = result.get("error")
    if 200 <= status < 300:
        outcome = BulkOutcome.CREATED
    elif status == 409:
        outcome = BulkOutcome.ALREADY_EXISTS
    else:
        outcome = BulkOutcome.FAILED
    return BulkItemResult(doc_id=doc_id, outcome=outcome, status=status, error=error)


def _reply(method: str, path: str, response: urllib3.BaseHTTPResponse) -> dict[str, Any]:
    status = response.status
    try:
        body = json.loads(response.data) if response.data else {}
    except ValueError:
        body = None
    if status in UNAVAILABLE_STATUSES:
        raise SearchUnavailable(f"{method} {path} answered {status}: {_reason(body, response)}")
    if status >= 400:
        error_class = SearchNotFound if status == 404 else SearchRequestError
        raise error_class(
            method=method,
            path=path,
            status=status,
            error_type=_error_type(body),
            reason=_reason(body, response),
        )
    if not isinstance(body, dict):
        raise SearchResponseError(f"{method} {path} answered {status} without a JSON object")
    return body


def _error_type(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("type", "unknown"))
    return "unknown"


def _reason(body: Any, response: urllib3.BaseHTTPResponse) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("reason", error))
    if error is not None:
        return str(error)
    return response.data[:200].decode(errors="replace") or response.reason or ""

