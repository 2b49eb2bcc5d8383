"""Where audit documents live in the engine: the data stream, its composable index template, its
field mappings, and its retention policy (ILM on Elasticsearch, ISM on OpenSearch).

One data stream per deployment, named by the Elastic data stream naming scheme
``logs-chrono.audit-<namespace>`` (``audit_namespace``, "default" unless a test run picks its own),
so Kibana's log views find it and Kibana's built-in ``logs-*-*`` template (priority 100) yields to
ours (priority 200). :func:`install` is what ``chrono indexer`` runs at start; it is idempotent.
The retention policies are shipped as JSON files in ``search/policies/``; only the retention period
(and, for ISM, the index pattern the policy attaches itself to) is filled in when installing.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from search.client import Engine, SearchClient

if TYPE_CHECKING:
    from chronocore.config import ChronoConfig

log = logging.getLogger("chrono.indexer")

DATASET = "chrono.audit"
ECS_VERSION = "8.11.0"
TEMPLATE_PRIORITY = 200
TEMPLATE_VERSION = 1
ISM_PLUGIN = "opensearch-index-management"
POLICY_DIR = Path(__file__).with_name("policies")
ILM_POLICY_FILE = POLICY_DIR / "ilm-chrono-audit.json"
ISM_POLICY_FILE = POLICY_DIR / "ism-chrono-audit.json"

_KEYWORD = {"type": "keyword", "ignore_above": 1024}
_LONG = {"type": "long"}
_INTEGER = {"type": "integer"}
_DATE = {"type": "date"}
_TEXT = {"type": "text"}

# Root "dynamic: false": a field that is not mapped here stays in _source but creates no mapping,
# so a document can never be refused for its shape and the mapping cannot explode. labels.* are
# ECS's free key/value pairs (keywords); chrono.details keeps what has no field of its own.
MAPPINGS: dict[str, Any] = {
    "dynamic": False,
    "date_detection": False,
    "dynamic_templates": [
        {
            "labels_as_keywords": {
                "path_match": "labels.*",
                "match_mapping_type": "string",
                "mapping": _KEYWORD,
            }
        }
    ],
    "properties": {
        "@timestamp": _DATE,
        "message": _TEXT,
        "tags": _KEYWORD,
        "labels": {"type": "object", "dynamic": True},
        "ecs": {"properties": {"version": _KEYWORD}},
        "data_stream": {
            "properties": {"type": _KEYWORD, "dataset": _KEYWORD, "namespace": _KEYWORD}
        },
        "event": {
            "properties": {
                "action": _KEYWORD,
                "outcome": _KEYWORD,
                "kind": _KEYWORD,
                "category": _KEYWORD,
                "type": _KEYWORD,
                "dataset": _KEYWORD,
                "module": _KEYWORD,
                "id": _KEYWORD,
                "sequence": _LONG,
                "duration": _LONG,
                "reason": _KEYWORD,
            }
        },
        "log": {"properties": {"level": _KEYWORD, "logger": _KEYWORD}},
        "error": {"properties": {"message": _TEXT, "type": _KEYWORD, "stack_trace": _TEXT}},
        "service": {"properties": {"name": _KEYWORD}},
        "host": {"properties": {"name": _KEYWORD}},
        "process": {"properties": {"pid": _LONG}},
        "chrono": {
            "properties": {
                "tenant_id": _KEYWORD,
                "job_id": _KEYWORD,
                "execution_id": _KEYWORD,
                "attempt": _INTEGER,
                "actor": _KEYWORD,
                "worker_id": _KEYWORD,
                "job_type": _KEYWORD,
                "job_name": _KEYWORD,
                "queue": _KEYWORD,
                "scheduled_for": _DATE,
                "next_run_at": _DATE,
                "lateness_ms": _LONG,
                "exit_code": _INTEGER,
                "fencing_token": _LONG,
                "cron_expression": _KEYWORD,
                "timezone": _KEYWORD,
                "max_retries": _INTEGER,
                "details": {"type": "object", "enabled": False},
            }
        },
    },
}


class BackingIndices(Protocol):
    """What a retention policy needs to know of its data stream (:class:`AuditStream`, and
    the execution logs' :class:`search.log_stream.LogStream`): what :func:`install_policy`
    and :func:`search.stream_lifecycle.apply` read."""

    @property
    def name(self) -> str: ...

    @property
    def policy_name(self) -> str: ...

    @property
    def backing_index_pattern(self) -> str: ...


@dataclass(frozen=True)
class AuditStream:
    """The names of one deployment's (or one test run's) audit data stream and what goes with it."""

    namespace: str

    @classmethod
    def from_config(cls, config: ChronoConfig) -> AuditStream:
        return cls(config.audit_namespace)

    @property
    def name(self) -> str:
        return f"logs-{DATASET}-{self.namespace}"

    @property
    def template_name(self) -> str:
        return f"chrono-audit-{self.namespace}"

    @property
    def policy_name(self) -> str:
        return f"chrono-audit-{self.namespace}"

    @property
    def backing_index_pattern(self) -> str:
        return f".ds-{self.name}-*"


def index_template(
    stream: AuditStream, *, shards: int, replicas: int, ilm_policy: str | None = None
) -> dict[str, Any]:
    """The composable index template of ``stream``; ``ilm_policy`` (Elasticsearch only) names
    the ILM policy its backing indices follow."""
    settings: dict[str, Any] = {
        "number_of_shards": shards,
        "number_of_replicas": replicas,
        "refresh_interval": "5s",
        "codec": "best_compression",
    }
    if ilm_policy:
        settings["lifecycle"] = {"name": ilm_policy}
    return {
        "index_patterns": [stream.name],
        "data_stream": {},
        "priority": TEMPLATE_PRIORITY,
        "version": TEMPLATE_VERSION,
        "_meta": {"managed_by": "chrono", "description": "Chrono audit events (ECS)"},
        "template": {"settings": {"index": settings}, "mappings": copy.deepcopy(MAPPINGS)},
    }


def ilm_policy(retention_days: int, *, path: Path = ILM_POLICY_FILE) -> dict[str, Any]:
    """The shipped ILM policy at ``path`` (the audit stream's unless told) with its delete
    phase at ``retention_days``."""
    policy = json.loads(path.read_text())
    policy["policy"]["phases"]["delete"]["min_age"] = f"{retention_days}d"
    return policy


def ism_policy(stream: BackingIndices, retention_days: int, *, path: Path = ISM_POLICY_FILE
               ) -> dict[str, Any]:
    """The shipped ISM policy at ``path`` (the audit stream's unless told), deleting at
    ``retention_days`` after rollover and attaching itself to ``stream``'s backing indices."""
    policy = json.loads(path.read_text())
    for state in policy["policy"]["states"]:
        for transition in state["transitions"]:
            if transition["state_name"] == "delete":
                transition["conditions"]["min_rollover_age"] = f"{retention_days}d"
    policy["policy"]["ism_template"][0]["index_patterns"] = [stream.backing_index_pattern]
    return policy


def install_policy(
    client: SearchClient,
    stream: BackingIndices,
    *,
    retention_days: int,
    ilm_file: Path,
    ism_file: Path,
) -> str | None:
    """Create or replace ``stream``'s retention policy on this engine (ILM on Elasticsearch,
    ISM on OpenSearch with its plugin) and put it on the backing indices that exist already
    (a template or ``ism_template`` only reaches indices created after it); its name, or None
    when the engine has no policies (logged: :mod:`search.stream_lifecycle` then applies
    them)."""
    engine = client.engine().engine
    if engine is Engine.ELASTICSEARCH:
        client.put_ilm_policy(stream.policy_name, ilm_policy(retention_days, path=ilm_file))
    elif ISM_PLUGIN in client.plugin_names():
        client.put_ism_policy(
            stream.policy_name, ism_policy(stream, retention_days, path=ism_file))
    else:
        log.warning(
            "OpenSearch at %s has no Index State Management plugin (%s): Chrono's retention "
            "pass (the reaper, hourly) rolls %s over daily and deletes its indices %d days "
            "after their rollover itself; install the plugin and restart the indexer for the "
            "engine to do it",
            client.base_url, ISM_PLUGIN, stream.name, retention_days,
        )
        return None
    client.attach_policy(stream.backing_index_pattern, stream.policy_name)
    return stream.policy_name


@dataclass(frozen=True)
class Installed:
    """What :func:`install` put in place: the stream, the engine and the policy, if any."""

    stream: AuditStream
    engine: Engine
    policy: str | None


def install(
    client: SearchClient, config: ChronoConfig, stream: AuditStream | None = None
) -> Installed:
    """Put the retention policy, the index template and the data stream in place (each one
    created or replaced, so running it again changes nothing)."""
    stream = stream or AuditStream.from_config(config)
    engine = client.engine().engine
    policy = install_policy(client, stream, retention_days=config.audit_retention_days,
                            ilm_file=ILM_POLICY_FILE, ism_file=ISM_POLICY_FILE)
    client.put_index_template(
        stream.template_name,
        index_template(
            stream,
            shards=config.audit_index_shards,
            replicas=config.audit_index_replicas,
            ilm_policy=policy if engine is Engine.ELASTICSEARCH else None,
        ),
    )
    created = client.create_data_stream(stream.name)
    log.info(
        "audit data stream %s %s on %s %s (retention policy: %s)",
        stream.name, "created" if created else "ready", engine.value,
        client.engine().version, policy or "none",
    )
    return Installed(stream=stream, engine=engine, policy=policy)


def uninstall(client: SearchClient, stream: AuditStream) -> None:
    """Delete the data stream (with its documents), its template and its policy."""
    client.delete_data_stream(stream.name)
    client.delete_index_template(stream.template_name)
    client.delete_policy(stream.policy_name)


def field_names(mappings: Mapping[str, Any] = MAPPINGS) -> dict[str, str]:
    """Every mapped field as ``{dotted name: type}`` (objects are not listed, their fields are)."""
    return dict(_walk(mappings.get("properties", {}), ""))


def _walk(properties: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
    for name, spec in properties.items():
        dotted = f"{prefix}{name}"
        if "properties" in spec:
            yield from _walk(spec["properties"], f"{dotted}.")
        else:
            yield dotted, spec.get("type", "object")
