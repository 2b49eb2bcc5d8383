"""Django system checks of the services' settings Chrono depends on (``chrono check --tag
chrono_services``).

What each one guards:

* **Redis** keeps the timers, the shard leases and their fencing counters. Under any
  ``maxmemory-policy`` but ``noeviction`` a full Redis drops keys: a timer (its job does not fire
  until the reconciler puts it back) or a fencing counter (a counter starting over hands out
  tokens again that a replica paused past its lease may still hold). Without AOF
  (``appendonly yes``, DESIGN.md decision 1) a restart loses every timer added since the last
  snapshot until the reconciler has gone round. Redis 7.0 or later: the API's quota takes
  ``EXPIRE … NX``, the reconciler ``ZMSCORE``.
* **RabbitMQ** 3.10 or later: the dispatch queues are quorum queues and the retry tiers quorum
  queues with a message TTL that dead-letter at least once, which 3.10 brought.
* **PostgreSQL** 14 or later, Django 5.2's floor and newer than anything Chrono's statements
  need.

They ask the services, with timeouts of their own (2 s), so they run only when asked for by their
tag (``chrono check --tag chrono_services``, ``manage.py check --tag chrono_services``), switched
on by Chrono's ``check`` command (:func:`asking_services`), as Django runs its own checks that do
I/O (the database's) only when asked. A plain ``check`` or ``check --deploy`` stays the static
check a build runs where the services are not; and Django runs the registered checks before most
other commands, whose processes (a beat, a worker) must neither wait for them nor refuse to start
because a service is down for a moment: their loops retry with back-off. A service that does not
answer is a warning (nothing could be checked), a setting that loses data or a version that
cannot run Chrono an error, each with a hint saying what to change.

The decisions are the pure functions below (``*_problems``), tested on their own; the check reads
the values from the real services.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator, Mapping
from typing import Any

import amqp
import redis
from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError, connection

from chronocore.broker_urls import split_broker_urls
from chronocore.config import ChronoConfig, get_config
from chronocore.redis_client import connect, is_cluster
from scheduler.dispatch import amqp_connection_params

SERVICES_TAG = "chrono_services"
TIMEOUT_S = 2.0

MIN_REDIS = (7, 0)
MIN_RABBITMQ = (3, 10)
MIN_POSTGRESQL = (14,)

_asking_services = contextvars.ContextVar("chrono_asking_services", default=False)


@contextlib.contextmanager
def asking_services() -> Iterator[None]:
    """Run :func:`check_services` for real inside this block (Chrono's ``check`` command)."""
    token = _asking_services.set(True)
    try:
        yield
    finally:
        _asking_services.reset(token)


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` → ``(7, 0, 15)``; what follows the numbers (``"3.13.0-rc.1"``) is left
    out, and text that starts with none is ``()``, older than any version."""
    numbers = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(n) for n in numbers.group().split(".")) if numbers else ()


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


# -- the decisions: pure ------------------------------------------------------------------


def redis_problems(settings: Mapping[str, str], version: str, *, where: str) -> list[CheckMessage]:
    """What is wrong with a Redis server whose ``CONFIG GET`` answered ``settings`` and whose
    ``INFO server`` says ``version``."""
    problems: list[CheckMessage] = []
    policy = settings.get("maxmemory-policy")
    if policy != "noeviction":
        problems.append(Error(
            f"Redis at {where} runs with maxmemory-policy {policy}: when it fills up it evicts "
            "keys, and with them timers (jobs that do not fire) and the shard leases' fencing "
            "counters (a paused beat replica could publish again after its lease passed on).",
            hint="Set `maxmemory-policy noeviction` in redis.conf (and CONFIG SET it on the "
                 "running server); give Redis the memory its timers need instead.",
            id="chrono.E001",
        ))
    if settings.get("appendonly") != "yes":
        problems.append(Warning(
            f"Redis at {where} runs without AOF (appendonly {settings.get('appendonly')}): a "
            "restart loses every timer added since its last snapshot, and those jobs wait for "
            "the reconciler (or `chrono rebuild-timers`) to fire.",
            hint="Set `appendonly yes` and `appendfsync everysec` in redis.conf (CONFIG SET "
                 "appendonly yes turns it on while it runs).",
            id="chrono.W002",
        ))
    if parse_version(version) < MIN_REDIS:
        problems.append(Error(
            f"Redis at {where} is version {version}; Chrono needs {_dotted(MIN_REDIS)} or "
            "later (EXPIRE … NX for the API's pending-job quota, ZMSCORE for the reconciler).",
            hint=f"Upgrade Redis to {_dotted(MIN_REDIS)} or later.",
            id="chrono.E003",
        ))
    return problems


def rabbitmq_problems(version: str, *, where: str) -> list[CheckMessage]:
    """What is wrong with a RabbitMQ broker that names itself ``version`` when connected."""
    if parse_version(version) >= MIN_RABBITMQ:
        return []
    return [Error(
        f"RabbitMQ at {where} is version {version}; Chrono's queues are quorum queues, and its "
        "retry tiers quorum queues with a message TTL that dead-letter at least once, which "
        f"need RabbitMQ {_dotted(MIN_RABBITMQ)} or later.",
        hint=f"Upgrade RabbitMQ to {_dotted(MIN_RABBITMQ)} or later.",
        id="chrono.E004",
    )]


def postgresql_problems(server_version_num: int, *, where: str) -> list[CheckMessage]:
    """What is wrong with a PostgreSQL server whose ``server_version_num`` is given (``150018``
    for 15.18)."""
    major = server_version_num // 10_000
    if (major,) >= MIN_POSTGRESQL:
        return []
    return [Error(
        f"PostgreSQL at {where} is version {major}; Chrono needs {_dotted(MIN_POSTGRESQL)} or "
        "later.",
        hint=f"Upgrade PostgreSQL to {_dotted(MIN_POSTGRESQL)} or later.",
        id="chrono.E005",
    )]


def unanswered(service: str, where: str, exc: BaseException) -> Warning:
    """A service that could not be asked: nothing of it was checked."""
    return Warning(
        f"{service} at {where} did not answer ({type(exc).__name__}: {exc}); its settings were "
        "not checked.",
        hint=f"Start {service} (`chrono services up` on a developer's machine), or point "
             "Chrono's URL setting at it, and run `chrono check` again.",
        id="chrono.W010",
    )


# -- asking the services ------------------------------------------------------------------


def redis_settings(client: redis.Redis) -> tuple[dict[str, str], str]:
    """``(CONFIG GET of the settings checked, the server's version)`` of a real Redis."""
    settings: dict[str, str] = {}
    for name in ("maxmemory-policy", "appendonly"):
        settings.update(_text(client.config_get(name)))
    return settings, str(client.info("server")["redis_version"])


def check_redis(client: redis.Redis, *, where: str) -> list[CheckMessage]:
    try:
        settings, version = redis_settings(client)
    except (redis.RedisError, OSError) as exc:
        return [unanswered("Redis", where, exc)]
    return redis_problems(settings, version, where=where)


def check_rabbitmq(url: str) -> list[CheckMessage]:
    """Every node of ``url`` (``BROKER_URL`` lists each node of a cluster, ``;``-separated)."""
    return [problem for node in split_broker_urls(url) for problem in _check_rabbitmq_node(node)]


def _check_rabbitmq_node(url: str) -> list[CheckMessage]:
    params = amqp_connection_params(url)
    where = str(params["host"])
    broker = amqp.Connection(**params, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S,
                             write_timeout=TIMEOUT_S)
    try:
        broker.connect()
        version = _text({"v": broker.server_properties.get("version", "")})["v"]
    except (OSError, amqp.exceptions.AMQPError) as exc:
        return [unanswered("RabbitMQ", where, exc)]
    finally:
        with contextlib.suppress(OSError, amqp.exceptions.AMQPError):
            broker.close()
    return rabbitmq_problems(version, where=where)


def check_postgresql() -> list[CheckMessage]:
    settings = connection.settings_dict
    where = f"{settings['HOST']}:{settings['PORT']}"
    try:
        connection.ensure_connection()
        version = connection.pg_version
    except DatabaseError as exc:  # Django refuses to connect to a server below its floor
        return [unanswered("PostgreSQL", where, exc)]
    return postgresql_problems(version, where=where)


def service_problems(config: ChronoConfig) -> list[CheckMessage]:
    """Every check above, against the services ``config`` names."""
    return (check_redis_deployment(config) + check_rabbitmq(config.broker_url)
            + check_postgresql())


def check_redis_deployment(config: ChronoConfig) -> list[CheckMessage]:
    """:func:`check_redis` of the one server of ``REDIS_URL``, or of every node of its Redis
    Cluster (a replica promoted by a failover must hold to the same settings)."""
    where = config.redis_url.rpartition("@")[2].split("/")[0]
    try:
        client = connect(config.redis_url, cluster=config.redis_cluster,
                         socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    except redis.RedisError as exc:
        return [unanswered("Redis", where, exc)]
    try:
        if not is_cluster(client):
            return check_redis(client, where=where)
        return [problem for node in client.get_nodes()
                for problem in check_redis(client.get_redis_connection(node), where=node.name)]
    finally:
        client.close()


def check_services(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The system check (registered by :class:`chronoadmin.apps.ChronoAdminConfig`): nothing
    unless Chrono's ``check`` command was asked for its tag (see the module's docstring)."""
    if not _asking_services.get():
        return []
    # A Django check has no owner to be handed the configuration: it reads the process's.
    return service_problems(get_config())


def _text(mapping: Mapping[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else str(k)):
            (v.decode() if isinstance(v, bytes) else str(v)) for k, v in mapping.items()}
