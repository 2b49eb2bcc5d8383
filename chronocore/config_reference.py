"""The configuration reference, docs/configuration.md, generated from :class:`ChronoConfig`.

Every field's environment variable, type and default come from the dataclass itself; what it
does is :data:`DESCRIPTIONS`, one entry per field, grouped by :data:`SECTIONS`.
``chrono config-reference`` writes the page and ``--check`` says whether it is up to date;
``tests/unit/test_config_reference.py`` fails when a field has no description (or a
description no field) and when the page on disk is not what :func:`render` makes.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

from chronocore.config import ChronoConfig, _env_name

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# (heading, fields): every field of ChronoConfig in exactly one section.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Services and credentials", (
        "database_url", "redis_url", "redis_cluster", "redis_socket_timeout_ms", "broker_url",
        "search_url", "data_dir", "credentials_file", "search_api_key", "service_checks")),
    ("Django", ("secret_key", "debug", "allowed_hosts", "static_root")),
    ("Timer store and beat", (
        "shard_count", "tick_ms", "lookahead_ms", "scan_interval_ms", "claim_batch_size",
        "prepare_ahead_ms", "ack_deadline_ms", "shard_lease_ttl_ms",
        "ownership_refresh_interval_ms", "misfire_grace_ms", "reconcile_shard_interval_ms")),
    ("Workers, leases and the reaper", (
        "default_queue", "worker_heartbeat_interval_ms", "execution_lease_ttl_ms",
        "reaper_interval_ms", "worker_dead_after_missed_heartbeats", "retry_overdue_grace_ms",
        "cancel_grace_ms", "undelivered_flag_after_ms", "undelivered_check_interval_ms",
        "workflow_engine_in_worker")),
    ("The dashboard's snapshot", (
        "dashboard_snapshot_interval_ms", "dashboard_snapshot_max_age_ms")),
    ("Metrics and health", ("metrics_port", "metrics_address", "metrics_bearer_token")),
    ("Input and REST API limits", (
        "max_payload_bytes", "api_rate_per_minute", "api_max_request_bytes",
        "api_default_page_size", "api_max_page_size", "bulk_max_items",
        "bulk_max_request_bytes", "pending_jobs_quota", "pending_jobs_recount_s",
        "run_at_grace_ms", "idempotency_ttl_s", "idempotency_lock_timeout_s",
        "grant_cache_ttl_ms")),
    ("Brute force and proxies", (
        "api_failed_auth_per_minute", "api_anonymous_rate_per_minute",
        "admin_login_failure_limit", "admin_lockout_cooloff_s", "trusted_proxy_count")),
    ("Audit log and indexer", (
        "audit_namespace", "audit_retention_days", "audit_index_shards", "audit_index_replicas",
        "audit_outbox_keep_hours", "indexer_batch_size", "indexer_poll_interval_ms",
        "indexer_max_backoff_ms", "indexer_in_doubt_grace_ms")),
    ("Execution logs (docs/logs.md)", (
        "execution_logs_enabled", "execution_log_level", "execution_log_spool_dir",
        "execution_log_flush_interval_ms", "execution_log_max_bytes",
        "execution_log_buffer_bytes", "execution_log_line_bytes", "execution_log_segment_bytes",
        "log_shipper_batch_bytes", "log_shipper_poll_interval_ms",
        "execution_log_retention_days")),
    ("Retention (chrono retention)", (
        "execution_retention_days", "execution_partitions_ahead_days", "retention_interval_ms",
        "reaper_scan_window_days", "rollup_retention_hours")),
    ("Tests", ("test_database_name", "test_redis_db")),
)

DESCRIPTIONS: dict[str, str] = {
    "database_url": "PostgreSQL, the source of truth (`postgresql://user:password@host:port/"
    "name`), on any host; libpq's parameters go in the query (`?sslmode=verify-full&"
    "sslrootcert=/etc/chrono/db-ca.pem`, others refused by name). A loopback URL without a "
    "password takes its user and password from the credentials file. Several hosts "
    "(`@db1:5432,db2:5432`, a primary and its standbys) need `?target_session_attrs=read-write`:"
    " every process then reconnects to whichever accepts writes after a failover "
    "(docs/production.md, \"Clusters\").",
    "service_checks": "What beat, worker, reaper, indexer, workflow engine and web do at "
    "start-up about a service set in a way that loses work (Redis evicting or without AOF, a "
    "classic queue where Chrono's are quorum queues, PostgreSQL with `synchronous_commit`, "
    "`fsync` or `full_page_writes` off, a read-only connection): `error` refuses to start, "
    "naming the setting and what to change; `warn` logs it and starts; `off` asks nothing. "
    "Empty: `error` under `chronoadmin.settings_production`, `warn` under the development "
    "settings (`chrono services up`'s PostgreSQL runs `synchronous_commit = off`).",
    "redis_url": "Redis: the timer store, shard leases, rate limits and quotas. Loopback "
    "without a password: completed from the credentials file.",
    "redis_cluster": "On: `REDIS_URL` names a node of a Redis Cluster (any node: the client "
    "discovers the others and follows failovers), or several (`@node1:6379,node2:6379`, tried "
    "in turn when a process starts, so that one node down or hung does not keep it off the "
    "cluster), and every Redis client of Chrono is redis-py's "
    "`RedisCluster`; the announcements use sharded pub/sub (`SPUBLISH`). A cluster has "
    "database 0 only, so `REDIS_URL` must end in `/0` or name none (docs/production.md, "
    "\"Clusters\").",
    "redis_socket_timeout_ms": "How long every Redis client of Chrono waits for a connection or "
    "a reply before it treats Redis as unreachable (logged, retried, backed off). A node that "
    "hangs (stopped, or behind a network that drops packets) would otherwise hold a beat's "
    "loop and a worker's renewals after a Redis Cluster failed it over; with 2 s the jobs of a "
    "cluster whose primary hung went out at most 4.2-4.5 s late, with 5 s 10.2 s. No command of "
    "Chrono's takes near this long; raise it only for a Redis across a slow link.",
    "broker_url": "RabbitMQ (`amqp://user:password@host:port/vhost`, or `amqps://` for TLS "
    "with the certificate verified): dispatch and retry queues. A cluster: every node's URL, "
    "separated by `;` (kombu's fail-over form), all with the same virtual host; publishers "
    "and workers connect to the first that answers and to the next when it goes away "
    "(docs/production.md, Clusters). Loopback without a password: completed from the "
    "credentials file.",
    "search_url": "Elasticsearch or OpenSearch for the audit log; a user and password may go "
    "in the URL. Loopback without a password: completed from the credentials file.",
    "data_dir": "Where `chrono services` keeps its servers' data, and where the credentials "
    "file is by default.",
    "credentials_file": "The credentials file the loopback URLs are completed from (empty: "
    "`credentials.env` in the data directory).",
    "search_api_key": "An Elasticsearch API key (base64 `id:key`) sent instead of basic "
    "authentication.",
    "secret_key": "Django's `SECRET_KEY` (sessions, CSRF, signed values). The default is for "
    "development only: `chronoadmin.settings_production` refuses it and any key shorter than "
    "50 characters.",
    "debug": "Django's `DEBUG` (tracebacks in error pages). Never on in production; "
    "`chronoadmin.settings_production` forces it off.",
    "allowed_hosts": "Django's `ALLOWED_HOSTS`: the host names the web process answers, "
    "comma-separated (`chrono.example.com,10.0.0.5`).",
    "static_root": "Django's `STATIC_ROOT`: where `chrono collectstatic` writes the static "
    "files the web process serves with production settings. Empty: `.chrono/static` beside "
    "the code; a deployment gives a directory of its own (`/opt/chrono/static` in "
    "docs/production.md).",
    "shard_count": "Shards of the timer store. Fixed for a deployment's life: shards move "
    "between beat replicas, they never re-hash.",
    "tick_ms": "Tick of the beat's in-memory timing wheel; at most a tenth of the look-ahead.",
    "lookahead_ms": "How far ahead each beat reads its shards' timers into the wheel; timers "
    "due within twice this are announced to their beat when added.",
    "scan_interval_ms": "How often each beat reads its shards' next window (smaller than the "
    "look-ahead).",
    "claim_batch_size": "Most timers one claim moves from due to in-flight.",
    "prepare_ahead_ms": "Timers are claimed and their executions written this long before "
    "their fire time, so only the publish is left for it (0: claim at the fire time). A pause "
    "or edit landing inside it applies from the next occurrence.",
    "ack_deadline_ms": "A claimed timer not acknowledged within this (its beat died) is claimed "
    "and published again by its shard's owner.",
    "shard_lease_ttl_ms": "A beat's lease on a shard; it publishes only while the lease is "
    "surely held (its TTL minus a fifth). At least two ownership refreshes long. A replica killed "
    "has its shards taken over within about this plus one refresh.",
    "ownership_refresh_interval_ms": "How often each beat heartbeats its membership and renews "
    "its shard leases.",
    "misfire_grace_ms": "An occurrence dispatched more than this late (every beat was down, "
    "the job was paused) follows its job's misfire policy; within it, it simply fires.",
    "reconcile_shard_interval_ms": "The reconciler in each beat compares one owned shard's "
    "jobs with its timers this often.",
    "default_queue": "Queue of jobs that name none, and of `chrono worker` without `--queues`.",
    "worker_heartbeat_interval_ms": "How often a worker's main process writes its heartbeat.",
    "execution_lease_ttl_ms": "Lease of a running execution, renewed every third of it; an "
    "expired one is declared lost by the reaper and retried.",
    "reaper_interval_ms": "How often the reaper looks for dead workers, expired leases and "
    "overdue retries.",
    "worker_dead_after_missed_heartbeats": "A worker silent for this many heartbeat intervals "
    "is unhealthy and its running executions lost (at least two).",
    "retry_overdue_grace_ms": "An attempt waiting this long past its retry time (its sender "
    "died) is re-sent by the reaper.",
    "cancel_grace_ms": "A running execution asked to cancel gets SoftTimeLimitExceeded at once "
    "and its process is killed if it still runs this long after.",
    "undelivered_flag_after_ms": "An execution DISPATCHED for longer than this to a queue with "
    "no consumer is flagged (its reason, a metric) by the reaper.",
    "undelivered_check_interval_ms": "How often the reaper looks for executions on queues "
    "nobody consumes.",
    "dashboard_snapshot_interval_ms": "How often one reaper computes the dashboard's "
    "all-tenants figures into its snapshot in Redis (0: never; the view computes them itself).",
    "dashboard_snapshot_max_age_ms": "The all-tenants view serves the snapshot while it is "
    "younger than this; an older or missing one is computed live, the answer saying so "
    "(`source: live`).",
    "workflow_engine_in_worker": "Every worker runs a `chrono workflow-engine` child process that "
    "applies workflow step ends (restarted if it dies, stopped with the worker); turn off when "
    "`chrono workflow-engine` processes of their own do it instead.",
    "metrics_port": "Port of the beat's, worker's, reaper's and indexer's `/metrics` and "
    "`/health` (0: none); each command's `--metrics-port` wins.",
    "metrics_address": "Address the probe ports listen on.",
    "metrics_bearer_token": "When set, the web process's `/metrics` asks for "
    "`Authorization: Bearer <token>`.",
    "max_payload_bytes": "Largest `args` and `kwargs` of a job together, as JSON.",
    "api_rate_per_minute": "REST requests per minute per tenant (bursts up to a minute's "
    "worth).",
    "api_max_request_bytes": "Largest REST request body, but bulk ingest's.",
    "api_default_page_size": "Page size of REST lists when the client asks none.",
    "api_max_page_size": "Largest page a client may ask for.",
    "bulk_max_items": "Most jobs in one bulk request (and in one batch of `chrono jobs load`).",
    "bulk_max_request_bytes": "Largest bulk ingest request body.",
    "pending_jobs_quota": "Most pending jobs per tenant through the REST API (0: none may be "
    "created).",
    "pending_jobs_recount_s": "A tenant's pending count is read from PostgreSQL again this "
    "often (kept in Redis in between).",
    "run_at_grace_ms": "A one-time job's `run_at` may lie this far in the past (clock skew, a "
    "slow client) and fires at once.",
    "idempotency_ttl_s": "How long a REST `Idempotency-Key` answer is kept and replayed.",
    "idempotency_lock_timeout_s": "A request with an `Idempotency-Key` still running after "
    "this is taken as dead, and a retry may run.",
    "grant_cache_ttl_ms": "Each process keeps a tenant's task grants this long; a removed "
    "grant is refused everywhere within it.",
    "api_failed_auth_per_minute": "Failed REST authentications per client address per minute, "
    "after which requests with a key from that address are refused until the budget refills.",
    "api_anonymous_rate_per_minute": "REST requests without credentials per client address "
    "per minute.",
    "admin_login_failure_limit": "Failed admin logins in a row, per username and address, "
    "that lock the username out (django-axes).",
    "admin_lockout_cooloff_s": "How long an admin lockout lasts after the last failure.",
    "trusted_proxy_count": "Reverse proxies in front of the web process appending to "
    "`X-Forwarded-For`; 0 takes the connection's address and ignores the header.",
    "audit_namespace": "Audit events go to the data stream `logs-chrono.audit-<namespace>` "
    "(lowercase letters, digits, `_`).",
    "audit_retention_days": "Audit events older than this are deleted by the index lifecycle "
    "policy.",
    "audit_index_shards": "Primary shards of the audit data stream's indices.",
    "audit_index_replicas": "Replicas of the audit data stream's indices (0 on a single node).",
    "execution_log_retention_days": "Execution log lines are deleted by the data stream's "
    "lifecycle policy (ILM/ISM) this many days after their index rolled over (daily).",
    "execution_retention_days": "Executions scheduled more than this many UTC days ago are "
    "dropped from PostgreSQL with their day's partition, once every one of them is final and "
    "their audit events are shipped; jobs that ended and workflow runs that finished that long "
    "ago are deleted once nothing of theirs is left (docs/operations.md, \"Retention\").",
    "execution_partitions_ahead_days": "Daily partitions of the executions table created "
    "ahead of today.",
    "retention_interval_ms": "How often the reaper runs the retention pass (partitions ahead, "
    "expired days, shipped audit rows, and the data streams' rollover and expired indices on "
    "an engine without ILM/ISM); 0: never (run `chrono retention` yourself).",
    "reaper_scan_window_days": "The reaper's every-second scans of running and retry-waiting "
    "executions read only the partitions of this many last days; each retention pass scans "
    "them all.",
    "rollup_retention_hours": "The dashboard's per-minute counters (chrono_execution_rollup) "
    "are deleted by the retention pass this many hours after their minute (the dashboard shows "
    "the last hour; at least 2).",
    "audit_outbox_keep_hours": "Shipped rows of the PostgreSQL audit outbox are deleted this "
    "long after they were shipped.",
    "indexer_batch_size": "Outbox rows per `_bulk` request of the indexer (`chrono indexer "
    "--batch-size` wins).",
    "indexer_poll_interval_ms": "How often the indexer looks for new outbox rows when idle.",
    "indexer_max_backoff_ms": "Longest wait of the indexer between attempts when the search "
    "engine fails.",
    "indexer_in_doubt_grace_ms": "Rows sent without a known answer are looked up in the search "
    "engine no sooner than this after they were sent.",
    "execution_logs_enabled": "Whether workers capture what their tasks log (0: no capture, "
    "nothing shipped).",
    "execution_log_level": "The lowest level of a task's log line that is captured (a logger "
    "set higher creates no record below it).",
    "execution_log_spool_dir": "Where a host's workers write their log lines and its shipper "
    "(`chrono indexer`) reads them; shared by both (empty: `<data_dir>/log-spool`).",
    "execution_log_flush_interval_ms": "How often a worker process writes and fsyncs its lines "
    "to the spool: what a SIGKILL of it loses at most.",
    "execution_log_max_bytes": "The most an attempt keeps of its lines; what goes over is "
    "dropped and counted on its last line.",
    "execution_log_buffer_bytes": "The most a worker process holds waiting for the next flush; "
    "what goes over is dropped and counted.",
    "execution_log_line_bytes": "A line's message is cut at this many characters.",
    "execution_log_segment_bytes": "A worker process starts a new spool file past this size.",
    "log_shipper_batch_bytes": "Spool bytes per `_bulk` request of the log shipper.",
    "log_shipper_poll_interval_ms": "How often an idle log shipper looks for new lines.",
    "test_database_name": "The database Django's test runner creates (one per test session "
    "on a shared machine).",
    "test_redis_db": "The Redis database the tests use and flush.",
}


def _type_name(kind: object) -> str:
    return {"str": "text", "int": "integer", "bool": "boolean (1/0, true/false, yes/no, on/off)",
            "tuple[str, ...]": "comma-separated list"}.get(str(kind), str(kind))


def _default_text(value: object) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, tuple):
        return f"`{','.join(value)}`"
    if value == "":
        return "(empty)"
    if isinstance(value, int):
        return f"`{value}`"
    return f"`{value}`"


def undocumented() -> list[str]:
    """Fields without a description or a section, and descriptions or section entries that
    name no field; [] when the reference covers the dataclass exactly."""
    names = [f.name for f in fields(ChronoConfig)]
    in_sections = [name for _, section in SECTIONS for name in section]
    problems = [f"{name}: no description" for name in names if name not in DESCRIPTIONS]
    problems += [f"{name}: in no section" for name in names if name not in in_sections]
    problems += [f"{name}: described, but ChronoConfig has no such field"
                 for name in DESCRIPTIONS if name not in names]
    problems += [f"{name}: in a section, but ChronoConfig has no such field"
                 for name in in_sections if name not in names]
    problems += [f"{name}: in more than one section" for name in set(in_sections)
                 if in_sections.count(name) > 1]
    return problems


def render() -> str:
    """docs/configuration.md as it should read."""
    by_name = {f.name: f for f in fields(ChronoConfig)}
    lines = [_HEADER]
    for heading, names in SECTIONS:
        lines += [f"## {heading}", "", "| variable | type | default | what it does |",
                  "|---|---|---|---|"]
        for name in names:
            field = by_name[name]
            default = field.default if field.default is not MISSING else None
            lines.append(f"| `{_env_name(name)}` | {_type_name(field.type)} | "
                         f"{_default_text(default)} | {DESCRIPTIONS[name]} |")
        lines.append("")
    lines.append(_FOOTER)
    return "\n".join(lines)


_HEADER = """# Configuration reference

<!-- Generated by `chrono config-reference` from chronocore/config.py and
chronocore/config_reference.py: edit those, then run it again (a test fails while this page is
stale). -->

Every setting is read once from the environment when a process starts
(`chronocore/config.py`, `ChronoConfig`) and checked: a bad value stops the process with an
error naming the variable, and settings that cannot hold together are refused together, each
message naming both variables. The service URLs are `DATABASE_URL`, `REDIS_URL`, `BROKER_URL`
and `SEARCH_URL`; every other setting is `CHRONO_<NAME>`. Units are in the names: `_MS`
milliseconds, `_S` seconds, `_BYTES` bytes. Whole numbers may be written with `_`
(`CHRONO_BULK_MAX_ITEMS=10_000`).

## Settings modules

`DJANGO_SETTINGS_MODULE` picks the Django settings, built from these variables:

- `chronoadmin.settings` (the default of `chrono` and `manage.py`): development and tests.
- `chronoadmin.settings_production`: the same, hardened as `chrono check --deploy` asks (HTTPS
  only, secure cookies, HSTS, `DEBUG` off), serving the static files `chrono collectstatic
  --noinput` wrote. It refuses to start with the development `CHRONO_SECRET_KEY` or one shorter
  than 50 characters (`python -c 'import secrets; print(secrets.token_urlsafe(64))'`), and with
  empty or well-known service credentials (docs/security.md, "Credentials"). Set
  `CHRONO_ALLOWED_HOSTS` to the names the web process is reached by.
"""

_FOOTER = """Logging is not configured by variables: each long-running process takes
`--log-level` and `--log-format plain|json` (docs/cli.md).
"""
