"""Chrono's settings, read once from the environment into one typed, validated object.

Every process (web, beat, worker, reaper, benchmarks) calls :func:`get_config` and never reads
``os.environ`` or ``django.conf.settings`` for Chrono's own knobs anywhere else. Units are in the
names: ``_ms`` is milliseconds, ``_s`` seconds, ``_bytes`` bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from chronocore.credentials import (
    DEFAULT_DATA_DIR,
    CredentialsError,
    credentials_path,
    fill_urls,
    read_credentials,
)
from chronocore.errors import ConfigError

# No credentials in the defaults: on loopback they come from the installation's credentials file
# (chronocore/credentials.py), which `chrono services up` generates.
DEFAULT_DATABASE_URL = "postgresql://chrono@127.0.0.1:5432/chrono"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_BROKER_URL = "amqp://127.0.0.1:5672//"
DEFAULT_SEARCH_URL = "http://127.0.0.1:9200"
URL_FIELDS = ("database_url", "redis_url", "broker_url", "search_url")


@dataclass(frozen=True, kw_only=True)
class ChronoConfig:
    """Every setting of a Chrono deployment. Field docs are in ``docs/architecture.md``."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = DEFAULT_REDIS_URL
    broker_url: str = DEFAULT_BROKER_URL
    search_url: str = DEFAULT_SEARCH_URL
    # Where `chrono services` keeps its servers, and the credentials file the URLs above take
    # their users and passwords from when they carry none (empty: credentials.env in data_dir).
    data_dir: str = DEFAULT_DATA_DIR
    credentials_file: str = ""
    secret_key: str = "chrono-dev-insecure-secret-key-change-me-in-production-0123456789"
    debug: bool = False
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")

    # Workflows: every worker's main process runs the engine's listener unless this is off, for
    # deployments that run `chrono workflow-engine` processes instead (a listener among a
    # thread pool's task threads waits for the GIL on every statement).
    workflow_engine_in_worker: bool = True

    # Timer store and beat.
    shard_count: int = 256
    tick_ms: int = 5
    lookahead_ms: int = 2_000
    scan_interval_ms: int = 500
    claim_batch_size: int = 1_000
    # Timers are claimed, and their executions written, this long before their fire time, so
    # that only the publish is left for it, by a thread that waits for nothing else; a slow
    # PostgreSQL statement shorter than half of this delays no publish (0: claim at the fire
    # time). A pause or edit that lands inside it applies from the next occurrence.
    prepare_ahead_ms: int = 100
    ack_deadline_ms: int = 30_000
    shard_lease_ttl_ms: int = 10_000
    # Each replica heartbeats its membership and renews its shard leases this often.
    ownership_refresh_interval_ms: int = 1_000
    # An occurrence more than this late (all replicas were down, the job was paused) follows
    # its job's misfire policy; within it, it simply fires.
    misfire_grace_ms: int = 60_000
    # The reconciler compares one shard's jobs with its timers every this often.
    reconcile_shard_interval_ms: int = 2_000

    # Workers.
    default_queue: str = "chrono"
    worker_heartbeat_interval_ms: int = 5_000
    execution_lease_ttl_ms: int = 60_000
    # Reaper: how often it looks, after how many missed heartbeats a worker is dead, and how
    # long past its retry time a waiting attempt is re-sent by the reaper (its sender died).
    reaper_interval_ms: int = 1_000
    worker_dead_after_missed_heartbeats: int = 3
    retry_overdue_grace_ms: int = 30_000
    # A running execution asked to cancel gets SoftTimeLimitExceeded at once, and its process
    # is killed if it still runs this long after.
    cancel_grace_ms: int = 10_000
    # An execution DISPATCHED for longer than this to a queue that has no consumer is flagged
    # (its reason says so, a metric counts it) by the reaper, which looks every
    # undelivered_check_interval_ms; the flag clears when a consumer appears or the run starts.
    undelivered_flag_after_ms: int = 60_000
    undelivered_check_interval_ms: int = 5_000

    # Probe port of the beat, worker, reaper and indexer (/metrics for Prometheus, /health for a
    # supervisor; docs/operations.md): 0 serves none. Each command's --metrics-port wins.
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    # When set, the web process's /metrics asks for "Authorization: Bearer <token>".
    metrics_bearer_token: str = ""

    # Tests: the database Django's test runner creates, and the Redis database the tests use,
    # so that several test runs on one machine do not trample each other.
    test_database_name: str = "test_chrono"
    test_redis_db: int = 15

    # Input limits.
    max_payload_bytes: int = 256 * 1024

    # REST API limits (per tenant where it says so). A one-time job's run_at may lie up to
    # run_at_grace_ms in the past (clock skew, a slow client) and then fires at once.
    api_rate_per_minute: int = 6_000
    api_max_request_bytes: int = 1024 * 1024
    api_default_page_size: int = 50
    api_max_page_size: int = 500
    bulk_max_items: int = 10_000
    bulk_max_request_bytes: int = 32 * 1024 * 1024
    pending_jobs_quota: int = 1_000_000
    pending_jobs_recount_s: int = 10
    run_at_grace_ms: int = 5_000
    idempotency_ttl_s: int = 24 * 3600
    idempotency_lock_timeout_s: int = 60
    # Each process keeps a tenant's task grants this long before reading them again; a grant
    # removed in another process (the admin, the CLI) is refused everywhere within it.
    grant_cache_ttl_ms: int = 5_000

    # Brute force (docs/security.md, "Brute force and rate limits"). API requests per client
    # address, up to a minute's worth at once: failed authentications (a wrong, revoked or
    # malformed key), after which every request with a key from that address is refused until
    # the budget refills, and requests with no credentials at all.
    api_failed_auth_per_minute: int = 30
    api_anonymous_rate_per_minute: int = 120
    # Admin logins (django-axes): a username is locked out from one client address at its
    # admin_login_failure_limit-th failure in a row, for admin_lockout_cooloff_s after the last.
    admin_login_failure_limit: int = 10
    admin_lockout_cooloff_s: int = 1_800
    # Reverse proxies in front of the web process, each appending the address it saw to
    # X-Forwarded-For: the client's address is the entry the outermost one appended. 0 (no
    # proxy) takes the connection's address and ignores the header, which any client can write.
    trusted_proxy_count: int = 0

    # Audit log (search/). Events go to the data stream logs-chrono.audit-<audit_namespace>;
    # tests use a namespace of their own so that runs side by side on one engine do not meet.
    # search_api_key is an Elasticsearch API key (base64 id:key); a user and password can go
    # in SEARCH_URL instead.
    search_api_key: str = ""
    audit_namespace: str = "default"
    audit_retention_days: int = 30
    audit_index_shards: int = 1
    audit_index_replicas: int = 1
    # Shipped outbox rows are deleted from PostgreSQL this long after they were shipped.
    audit_outbox_keep_hours: int = 24
    indexer_batch_size: int = 2_000
    indexer_poll_interval_ms: int = 250
    indexer_max_backoff_ms: int = 30_000
    # Rows sent without a known answer are looked up in the engine no sooner than this after
    # they were sent, so that a bulk request the engine was still executing has finished.
    indexer_in_doubt_grace_ms: int = 5_000

    @property
    def credentials_path(self) -> Path:
        """The credentials file the URLs were completed from (it need not exist)."""
        return _credentials_file(self.data_dir, self.credentials_file)

    def service_urls(self) -> dict[str, str]:
        """``{"database": DATABASE_URL, "redis": …, "broker": …, "search": …}``."""
        return {name.removesuffix("_url"): getattr(self, name) for name in URL_FIELDS}

    def __post_init__(self) -> None:
        for name, low in (
            ("shard_count", 1),
            ("tick_ms", 1),
            ("lookahead_ms", 100),
            ("scan_interval_ms", 10),
            ("claim_batch_size", 1),
            ("prepare_ahead_ms", 0),
            ("ack_deadline_ms", 1_000),
            ("shard_lease_ttl_ms", 1_000),
            ("ownership_refresh_interval_ms", 100),
            ("worker_heartbeat_interval_ms", 100),
            ("execution_lease_ttl_ms", 1_000),
            ("worker_dead_after_missed_heartbeats", 1),
            ("max_payload_bytes", 1_024),
            ("api_rate_per_minute", 1),
            ("api_max_request_bytes", 1_024),
            ("api_default_page_size", 1),
            ("api_max_page_size", 1),
            ("bulk_max_items", 1),
            ("bulk_max_request_bytes", 1_024),
            ("pending_jobs_quota", 0),
            ("pending_jobs_recount_s", 1),
            ("run_at_grace_ms", 0),
            ("grant_cache_ttl_ms", 0),
            ("api_failed_auth_per_minute", 1),
            ("api_anonymous_rate_per_minute", 1),
            ("admin_login_failure_limit", 1),
            ("admin_lockout_cooloff_s", 1),
            ("trusted_proxy_count", 0),
            ("idempotency_ttl_s", 60),
            ("idempotency_lock_timeout_s", 1),
            ("audit_retention_days", 1),
            ("audit_index_shards", 1),
            ("audit_index_replicas", 0),
            ("audit_outbox_keep_hours", 0),
            ("indexer_batch_size", 1),
            ("indexer_poll_interval_ms", 10),
            ("indexer_max_backoff_ms", 100),
            ("indexer_in_doubt_grace_ms", 0),
            ("undelivered_flag_after_ms", 1_000),
            ("undelivered_check_interval_ms", 100),
            ("metrics_port", 0),
        ):
            if getattr(self, name) < low:
                raise ConfigError(f"CHRONO_{name.upper()} must be at least {low}")
        if problems := cross_field_problems(self):
            raise ConfigError("\n".join(problems))
        if not re.fullmatch(r"[a-z0-9_]{1,64}", self.audit_namespace):
            raise ConfigError(
                f"CHRONO_AUDIT_NAMESPACE={self.audit_namespace!r} must be 1 to 64 lowercase "
                "letters, digits or underscores (it ends the data stream's name)"
            )
        if self.metrics_port > 65_535:
            raise ConfigError(f"CHRONO_METRICS_PORT={self.metrics_port} is not a TCP port "
                              "(0 to 65535; 0 serves none)")


# Rules between settings: (the setting held to another, that other, the rule, how it reads,
# why). Each problem names both variables with their values. The lease rule is the code's own:
# a replica publishes only while its shard lease is surely held, its TTL minus a fifth after
# the last renewal (scheduler.ownership.ShardOwnership.surely_held).
_CROSS_FIELD_RULES: tuple[tuple[str, str, Callable[[int, int], bool], str, str], ...] = (
    ("scan_interval_ms", "lookahead_ms", lambda a, b: a < b, "must be smaller than",
     "or timers could fall between two scans"),
    ("tick_ms", "lookahead_ms", lambda a, b: a * 10 <= b, "must be at most a tenth of",
     "the timing wheel's buckets are ticks: a window of fewer than ten holds all its timers in "
     "the wheel's exact-time heap, which the wheel is there to spare"),
    ("lookahead_ms", "ack_deadline_ms", lambda a, b: a < b, "must be smaller than",
     "or a replica could claim again, as expired, timers it loaded and is about to publish"),
    ("ownership_refresh_interval_ms", "shard_lease_ttl_ms", lambda a, b: a * 2 <= b,
     "must be at most half of",
     "a replica renews its shard leases once per refresh and publishes only while a lease "
     "is surely held (its TTL minus a fifth): a shorter lease lapses between renewals, and its "
     "shards stall or change hands"),
    ("api_default_page_size", "api_max_page_size", lambda a, b: a <= b, "must not exceed",
     "the default page is one a client may ask for"),
)


def cross_field_problems(config: ChronoConfig) -> list[str]:
    """What is wrong between settings of ``config`` that are each fine on their own, every
    message naming both variables and their values; [] when nothing is."""
    problems = []
    for name, other, holds, relation, why in _CROSS_FIELD_RULES:
        value, limit = getattr(config, name), getattr(config, other)
        if not holds(value, limit):
            problems.append(f"{_env_name(name)}={value} {relation} {_env_name(other)}={limit}: "
                            f"{why}")
    if config.prepare_ahead_ms + config.scan_interval_ms >= config.lookahead_ms:
        problems.append(
            f"CHRONO_PREPARE_AHEAD_MS={config.prepare_ahead_ms} plus CHRONO_SCAN_INTERVAL_MS="
            f"{config.scan_interval_ms} must be smaller than CHRONO_LOOKAHEAD_MS="
            f"{config.lookahead_ms}, or a timer could be scanned after its preparation time")
    if config.worker_dead_after_missed_heartbeats < 2:
        problems.append(
            "CHRONO_WORKER_DEAD_AFTER_MISSED_HEARTBEATS="
            f"{config.worker_dead_after_missed_heartbeats} times CHRONO_WORKER_HEARTBEAT_"
            f"INTERVAL_MS={config.worker_heartbeat_interval_ms} must span at least two "
            "heartbeats: a worker whose one heartbeat is a little late would be declared dead "
            "and its running executions lost, and run again while it still runs them")
    return problems


def _env_name(field_name: str) -> str:
    return field_name.upper() if field_name.endswith("_url") else f"CHRONO_{field_name.upper()}"


def _parse(name: str, raw: str, kind: type) -> object:
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{name}={raw!r} is not a boolean; use 1/0, true/false")
    if kind is int:
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if kind == tuple[str, ...]:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def load_config(environ: Mapping[str, str] | None = None) -> ChronoConfig:
    """Build a config from ``environ``: ``DATABASE_URL``, ``REDIS_URL``, ``BROKER_URL``,
    ``SEARCH_URL`` and ``CHRONO_<FIELD>`` for every other field. A loopback URL without a
    password takes its service's user and password from the credentials file
    (:mod:`chronocore.credentials`). Raises :class:`ConfigError` on a bad value or an unreadable
    credentials file."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    kinds = {"str": str, "int": int, "bool": bool, "tuple[str, ...]": tuple[str, ...]}
    for field in fields(ChronoConfig):
        env_name = field.name.upper()
        if not field.name.endswith("_url"):
            env_name = f"CHRONO_{env_name}"
        if env_name in environ:
            values[field.name] = _parse(env_name, environ[env_name], kinds[str(field.type)])
    values.update(_urls_with_credentials(values))
    return ChronoConfig(**values)


def _urls_with_credentials(values: Mapping[str, object]) -> dict[str, str]:
    """The four service URLs, each given its credentials from the file when it has none."""
    defaults = ChronoConfig.__dataclass_fields__
    urls = {
        name.removesuffix("_url"): str(values.get(name, defaults[name].default))
        for name in URL_FIELDS
    }
    path = _credentials_file(
        str(values.get("data_dir", DEFAULT_DATA_DIR)), str(values.get("credentials_file", ""))
    )
    try:
        stored = read_credentials(path)
    except CredentialsError as error:
        raise ConfigError(str(error)) from None
    return {f"{name}_url": url for name, url in fill_urls(urls, stored).items()}


def _credentials_file(data_dir: str, credentials_file: str) -> Path:
    return credentials_path(
        {"CHRONO_DATA_DIR": data_dir, "CHRONO_CREDENTIALS_FILE": credentials_file}
    )


@lru_cache(maxsize=1)
def get_config() -> ChronoConfig:
    """The process-wide config, read from the environment on first use."""
    return load_config()


def database_settings(url: str) -> dict[str, object]:
    """Django ``DATABASES['default']`` for a ``postgresql://user:pass@host:port/name`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"DATABASE_URL must start with postgresql://, got {parts.scheme!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "chrono",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
