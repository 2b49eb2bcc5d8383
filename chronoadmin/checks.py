"""Django system checks of the services' settings Chrono depends on (``chrono check --tag
chrono_services``, and every long-running process as it starts).

What each one guards:

* **Redis** keeps the timers, the shard leases and their fencing counters. Under any
  ``maxmemory-policy`` but ``noeviction`` a full Redis drops keys: a timer (its job does not fire
  until the reconciler puts it back) or a fencing counter (a counter starting over hands out
  tokens again that a replica paused past its lease may still hold). Without AOF
  (``appendonly yes``, DESIGN.md decision 1) a restart loses every timer added since the last
  snapshot until the reconciler has gone round. Redis 7.0 or later: the API's quota takes
  ``EXPIRE … NX``, the reconciler ``ZMSCORE``.
* **RabbitMQ** 3.10 or later: the dispatch queues are quorum queues and the retry tiers quorum
  queues with a message TTL that dead-letter at least once, which 3.10 brought. A queue of
  Chrono's that already exists with other arguments (a classic queue of the same name, made by
  an older deployment or another app) refuses Chrono's declaration: an error naming it.
* **PostgreSQL** 14 or later, Django 5.2's floor and newer than anything Chrono's statements
  need; ``synchronous_commit`` not ``off`` (a commit, a job's create call, returns only once it
  is durable), ``fsync`` and ``full_page_writes`` on, a session that may write (not a standby),
  and commits that wait for the synchronous standbys it names (docs/production.md, "Clusters").

They ask the services, with timeouts of their own (2 s), so they run only when asked for by their
tag (``chrono check --tag chrono_services``, ``manage.py check --tag chrono_services``), switched
on by Chrono's ``check`` command, and by every long-running process as it starts
(:func:`chronocore.service_checks.check_at_start`: ``CHRONO_SERVICE_CHECKS`` says whether an
error stops it), as Django runs its own checks that do I/O (the database's) only when asked. A
plain ``check`` or ``check --deploy`` stays the static check a build runs where the services are
not, and Django's own run of the registered checks before other commands asks nothing. A service
that does not answer is a warning (nothing could be checked: a process starts, its loops retry
with back-off), a setting that loses data or a version that cannot run Chrono an error, each
with a hint saying what to change.

The decisions are the pure functions below (``*_problems``), tested on their own; the check reads
the values from the real services.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import amqp
import redis
from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError, connection

from chronocore.broker_urls import split_broker_urls
from chronocore.config import ChronoConfig, get_config
from chronocore.redis_client import connect, is_cluster
from chronocore.service_checks import SERVICES_TAG, asked, asking_services
from scheduler.dispatch import (
    amqp_connection_params,
    declare_queue,
    declare_retry_tier,
    retry_tier_name,
)
from scheduler.retry import RETRY_TIERS_MS

__all__ = ["SERVICES_TAG", "asking_services", "check_services", "service_problems"]

TIMEOUT_S = 2.0

MIN_REDIS = (7, 0)
MIN_RABBITMQ = (3, 10)
MIN_POSTGRESQL = (14,)
# The PostgreSQL settings read for the checks, as Chrono's own session sees them (a role's or
# database's setting, or the URL's options, included).
POSTGRESQL_SETTINGS = ("synchronous_commit", "fsync", "full_page_writes",
                       "synchronous_standby_names", "transaction_read_only")


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
        problems.append(Error(
            f"Redis at {where} runs without AOF (appendonly {settings.get('appendonly')}): a "
            "restart loses every timer added since its last snapshot, and those jobs fire late, "
            "when the reconciler (or `chrono rebuild-timers`) has put them back.",
            hint="Set `appendonly yes` and `appendfsync everysec` in redis.conf (CONFIG SET "
                 "appendonly yes turns it on while it runs).",
            id="chrono.E002",
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


def queue_problems(refusals: Mapping[str, str], *, where: str) -> list[CheckMessage]:
    """What is wrong with Chrono's queues on a broker that refused their declarations as
    ``refusals`` says (queue name → the broker's reason; only queues that exist are declared)."""
    problems: list[CheckMessage] = []
    for queue, reason in sorted(refusals.items()):
        classic = "x-queue-type" in reason
        problems.append(Error(
            f"RabbitMQ at {where} has the queue {queue!r} "
            + ("as a classic queue, but Chrono's queues are quorum queues (replicated, "
               "at-least-once dead-lettering): " if classic else
               "with other arguments than Chrono declares it with: ")
            + f"declaring it is refused ({reason}).",
            hint=f"Move its messages elsewhere (a shovel) and delete it (`rabbitmqctl "
                 f"delete_queue {queue}`); Chrono declares it again as a quorum queue. Or "
                 "give Chrono another queue name (CHRONO_DEFAULT_QUEUE, the job's queue).",
            id="chrono.E012",
        ))
    return problems


def postgresql_settings_problems(settings: Mapping[str, str], *, where: str
                                 ) -> list[CheckMessage]:
    """What is wrong with the PostgreSQL session whose ``current_setting`` of
    :data:`POSTGRESQL_SETTINGS` answered ``settings``."""
    problems: list[CheckMessage] = []
    commit = settings.get("synchronous_commit")
    if commit == "off":
        problems.append(Error(
            f"PostgreSQL at {where} runs with synchronous_commit off: a commit returns before "
            "its WAL is on disk, so a crash loses jobs whose create call had returned (and "
            "executions' ends, which then run again).",
            hint="Set `synchronous_commit = on` in postgresql.conf and reload (or `ALTER ROLE "
                 "<Chrono's user> SET synchronous_commit = on`); with a standby to fail over "
                 "to, name it in synchronous_standby_names (docs/production.md, \"Clusters\").",
            id="chrono.E006",
        ))
    for name in ("fsync", "full_page_writes"):
        if settings.get(name) == "off":
            problems.append(Error(
                f"PostgreSQL at {where} runs with {name} off: a crash of the server can "
                "corrupt the database, every job in it included.",
                hint=f"Set `{name} = on` in postgresql.conf and restart PostgreSQL.",
                id="chrono.E007",
            ))
    if settings.get("transaction_read_only") == "on":
        problems.append(Error(
            f"PostgreSQL at {where} gives Chrono a read-only session (a standby, or "
            "default_transaction_read_only on): every write Chrono makes fails.",
            hint="Point DATABASE_URL at the primary; with several hosts add "
                 "`?target_session_attrs=read-write` so that each process finds it.",
            id="chrono.E008",
        ))
    if settings.get("synchronous_standby_names") and commit == "local":
        problems.append(Warning(
            f"PostgreSQL at {where} names synchronous standbys but Chrono's commits do not "
            "wait for them (synchronous_commit local): a failover to a standby loses the last "
            "commits, jobs accepted among them.",
            hint="Set `synchronous_commit = on` (or remote_apply) for Chrono's role.",
            id="chrono.W011",
        ))
    return problems


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


def chrono_queues(config: ChronoConfig) -> dict[str, Callable[[amqp.Channel], None]]:
    """Chrono's queues a process of ``config`` uses, each with the declaration Chrono makes of
    it: the default queue and the retry tiers."""
    queues: dict[str, Callable[[amqp.Channel], None]] = {
        config.default_queue: lambda channel: declare_queue(channel, config.default_queue)}
    for tier_ms in RETRY_TIERS_MS:
        queues[retry_tier_name(tier_ms)] = (
            lambda channel, tier=tier_ms: declare_retry_tier(channel, tier))
    return queues


def queue_refusals(broker: amqp.Connection,
                   queues: Mapping[str, Callable[[amqp.Channel], None]]) -> dict[str, str]:
    """For each of ``queues`` that exists on ``broker``, the broker's refusal of Chrono's own
    declaration of it (``PRECONDITION_FAILED - inequivalent arg 'x-queue-type'…`` for a
    classic queue); a queue that does not exist is not created (a passive declare first)."""
    refusals: dict[str, str] = {}
    for queue, declare in queues.items():
        channel = broker.channel()
        try:
            channel.queue_declare(queue, passive=True)
        except amqp.exceptions.NotFound:
            continue  # closed the channel; Chrono declares the queue when it first uses it
        try:
            declare(channel)
        except amqp.exceptions.PreconditionFailed as exc:
            refusals[queue] = str(exc.reply_text or exc)
            continue
        with contextlib.suppress(OSError, amqp.exceptions.AMQPError):
            channel.close()
    return refusals


def check_rabbitmq(url: str, queues: Mapping[str, Callable[[amqp.Channel], None]] | None = None
                   ) -> list[CheckMessage]:
    """Every node of ``url`` (``BROKER_URL`` lists each node of a cluster, ``;``-separated),
    and on each, Chrono's ``queues`` that exist (:func:`queue_refusals`)."""
    return [problem for node in split_broker_urls(url)
            for problem in _check_rabbitmq_node(node, queues)]


def _check_rabbitmq_node(url: str, queues: Mapping[str, Callable[[amqp.Channel], None]] | None
                         ) -> list[CheckMessage]:
    params = amqp_connection_params(url)
    where = str(params["host"])
    broker = amqp.Connection(**params, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S,
                             write_timeout=TIMEOUT_S)
    try:
        broker.connect()
        version = _text({"v": broker.server_properties.get("version", "")})["v"]
        refusals = queue_refusals(broker, queues or {})
    except (OSError, amqp.exceptions.AMQPError) as exc:
        return [unanswered("RabbitMQ", where, exc)]
    finally:
        with contextlib.suppress(OSError, amqp.exceptions.AMQPError):
            broker.close()
    return rabbitmq_problems(version, where=where) + queue_problems(refusals, where=where)


def postgresql_settings(names: Sequence[str] = POSTGRESQL_SETTINGS) -> dict[str, str]:
    """``current_setting`` of each of ``names`` in Chrono's own session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
                       [list(names)])
        return dict(cursor.fetchall())


def check_postgresql() -> list[CheckMessage]:
    settings = connection.settings_dict
    where = f"{settings['HOST']}:{settings['PORT']}"
    try:
        connection.ensure_connection()
        info = connection.connection.info
        where = f"{info.host}:{info.port}"  # of a multi-host URL, the server it reached
        version = connection.pg_version
        found = postgresql_settings()
    except DatabaseError as exc:  # Django refuses to connect to a server below its floor
        return [unanswered("PostgreSQL", where, exc)]
    return (postgresql_problems(version, where=where)
            + postgresql_settings_problems(found, where=where))


def service_problems(config: ChronoConfig) -> list[CheckMessage]:
    """Every check above, against the services ``config`` names."""
    return (check_redis_deployment(config)
            + check_rabbitmq(config.broker_url, chrono_queues(config)) + check_postgresql())


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
    unless Chrono's ``check`` command or a starting process asked for its tag (see the
    module's docstring)."""
    if not asked():
        return []
    # A Django check has no owner to be handed the configuration: it reads the process's.
    return service_problems(get_config())


def _text(mapping: Mapping[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else str(k)):
            (v.decode() if isinstance(v, bytes) else str(v)) for k, v in mapping.items()}
