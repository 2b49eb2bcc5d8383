"""Where execution logs live in the engine: the data stream ``logs-chrono.execution-<namespace>``,
its index template and its field mappings (Elastic Common Schema, Chrono's own under
``chrono.*``), and the id rule of its documents.

The namespace is the deployment's ``audit_namespace`` (tests pick their own), so the audit log and
the execution logs of one deployment go together. A document's ``_id`` is
``<execution id>:<attempt>:<sequence>`` (:func:`document_id`), the sequence counting the lines of
one attempt from 1 in the order they were logged, so a line shipped twice is one document.
Its retention policy (ILM on Elasticsearch, ISM on OpenSearch: hot, rolled over daily, deleted
``execution_log_retention_days`` after rollover) ships as JSON in ``search/policies/`` and is
installed with the template, as the audit stream's is.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from search.client import Engine, SearchClient
from search.index_template import ECS_VERSION, POLICY_DIR, install_policy

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.logs")

DATASET = "chrono.execution"
TEMPLATE_PRIORITY = 200
TEMPLATE_VERSION = 1
# Lines are searchable this soon after the shipper wrote them (the audit stream takes 5 s; a
# user following a running job's log wants it sooner).
REFRESH_INTERVAL = "1s"
LEVELS = ("debug", "info", "warning", "error", "critical")
ILM_POLICY_FILE = POLICY_DIR / "ilm-chrono-execution-logs.json"
ISM_POLICY_FILE = POLICY_DIR / "ism-chrono-execution-logs.json"

_KEYWORD = {"type": "keyword", "ignore_above": 1024}
_LONG = {"type": "long"}
_INTEGER = {"type": "integer"}
_DATE = {"type": "date"}
_TEXT = {"type": "text"}

# "dynamic: false", as the audit stream's: a field not listed stays in _source, unmapped.
MAPPINGS: dict[str, Any] = {
    "dynamic": False,
    "date_detection": False,
    "properties": {
        "@timestamp": _DATE,
        "message": _TEXT,
        "ecs": {"properties": {"version": _KEYWORD}},
        "data_stream": {
            "properties": {"type": _KEYWORD, "dataset": _KEYWORD, "namespace": _KEYWORD}
        },
        "event": {
            "properties": {"kind": _KEYWORD, "dataset": _KEYWORD, "module": _KEYWORD,
                           "sequence": _LONG}
        },
        "log": {
            "properties": {
                "level": _KEYWORD,
                "logger": _KEYWORD,
                "origin": {
                    "properties": {
                        "file": {"properties": {"name": _KEYWORD, "line": _INTEGER}},
                        "function": _KEYWORD,
                    }
                },
            }
        },
        "error": {"properties": {"message": _TEXT, "type": _KEYWORD, "stack_trace": _TEXT}},
        "service": {"properties": {"name": _KEYWORD}},
        "host": {"properties": {"name": _KEYWORD}},
        "process": {"properties": {"pid": _LONG, "thread": {"properties": {"name": _KEYWORD}}}},
        "chrono": {
            "properties": {
                "tenant_id": _KEYWORD,
                "job_id": _KEYWORD,
                "execution_id": _KEYWORD,
                "attempt": _INTEGER,
                "worker_id": _KEYWORD,
                "job_type": _KEYWORD,
                "dropped_lines": _LONG,
                "dropped_bytes": _LONG,
            }
        },
    },
}


def document_id(execution_id: str, attempt: int, sequence: int) -> str:
    """The ``_id`` of line ``sequence`` of ``attempt`` of ``execution_id``."""
    return f"{execution_id}:{attempt}:{sequence}"


@dataclass(frozen=True)
class LogStream:
    """The names of one deployment's (or one test run's) execution-log data stream."""

    namespace: str

    @classmethod
    def from_config(cls, config: ChronoConfig) -> LogStream:
        return cls(config.audit_namespace)

    @property
    def name(self) -> str:
        return f"logs-{DATASET}-{self.namespace}"

    @property
    def template_name(self) -> str:
        return f"chrono-execution-logs-{self.namespace}"

    @property
    def policy_name(self) -> str:
        return f"chrono-execution-logs-{self.namespace}"

    @property
    def backing_index_pattern(self) -> str:
        return f".ds-{self.name}-*"


def index_template(stream: LogStream, *, shards: int, replicas: int,
                   ilm_policy: str | None = None) -> dict[str, Any]:
    """The composable index template of ``stream``; ``ilm_policy`` (Elasticsearch only) names
    the ILM policy its backing indices follow."""
    settings: dict[str, Any] = {
        "number_of_shards": shards,
        "number_of_replicas": replicas,
        "refresh_interval": REFRESH_INTERVAL,
        "codec": "best_compression",
    }
    if ilm_policy:
        settings["lifecycle"] = {"name": ilm_policy}
    return {
        "index_patterns": [stream.name],
        "data_stream": {},
        "priority": TEMPLATE_PRIORITY,
        "version": TEMPLATE_VERSION,
        "_meta": {"managed_by": "chrono", "description": "Chrono execution logs (ECS)"},
        "template": {"settings": {"index": settings}, "mappings": copy.deepcopy(MAPPINGS)},
    }


def install(client: SearchClient, config: ChronoConfig, stream: LogStream | None = None
            ) -> LogStream:
    """Put the retention policy, the template and the data stream in place (idempotent)."""
    stream = stream or LogStream.from_config(config)
    policy = install_policy(client, stream, retention_days=config.execution_log_retention_days,
                            ilm_file=ILM_POLICY_FILE, ism_file=ISM_POLICY_FILE)
    elasticsearch = client.engine().engine is Engine.ELASTICSEARCH
    client.put_index_template(stream.template_name, index_template(
        stream, shards=config.audit_index_shards, replicas=config.audit_index_replicas,
        ilm_policy=policy if elasticsearch else None))
    created = client.create_data_stream(stream.name)
    if created and policy:
        # Its first backing index was created after the policy, but attach it for certain
        # (an ISM template applies to indices created after the policy's last update).
        client.attach_policy(stream.backing_index_pattern, policy)
    log.info("execution-log data stream %s %s (retention policy: %s, %d days)", stream.name,
             "created" if created else "ready", policy or "none",
             config.execution_log_retention_days)
    return stream


def uninstall(client: SearchClient, stream: LogStream) -> None:
    client.delete_data_stream(stream.name)
    client.delete_index_template(stream.template_name)
    client.delete_policy(stream.policy_name)


def base_document(*, namespace: str) -> dict[str, Any]:
    """The fields every line's document shares (the capture adds the line's own)."""
    return {
        "ecs": {"version": ECS_VERSION},
        "data_stream": {"type": "logs", "dataset": DATASET, "namespace": namespace},
        "event": {"kind": "event", "dataset": DATASET, "module": "chrono"},
        "service": {"name": "chrono-worker"},
    }
