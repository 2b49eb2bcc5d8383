"""Test-wide set-up: real services or a failed run, and a Redis database of the tests' own.

The tests use Redis database ``CHRONO_TEST_REDIS_DB`` (15; flushed by the fixtures that need a
clean store) so a demo running on database 0 of the same server keeps its timers; set it and
``CHRONO_TEST_DATABASE_NAME`` to run two test sessions side by side. A service that does not
answer fails the run with what to do; nothing is ever skipped.

The services' credentials are found as every Chrono process finds them: ``chronocore.config``
completes the URLs (REDIS_URL as rewritten below included) from the installation's credentials
file, and the processes the fixtures start read it themselves.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

from chronocore.config import DEFAULT_REDIS_URL, get_config, load_config
from localservices.processes import ProcessGroup
from scheduler.sharding import shard_tag


def _test_redis_url() -> str:
    parts = urlsplit(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    return urlunsplit(parts._replace(path=f"/{load_config().test_redis_db}"))


os.environ["REDIS_URL"] = _test_redis_url()
# Execution logs: the processes the tests start write and ship a spool of the run's own, not the
# installation's ($CHRONO_DATA_DIR/log-spool, which a demo's indexer on this machine ships).
os.environ["CHRONO_EXECUTION_LOG_SPOOL_DIR"] = tempfile.mkdtemp(prefix="chrono-test-spool-")
atexit.register(shutil.rmtree, os.environ["CHRONO_EXECUTION_LOG_SPOOL_DIR"], ignore_errors=True)
# WhiteNoise serves STATIC_ROOT besides the apps' files (development settings collect nothing) and
# warns "No directory at" each time a request handler is built while it does not exist: every
# test client, and the schema fuzz's WSGI application while the tests are collected. It is made
# here, before collection, as `chrono web` makes it before serving; until a test had started a
# web process, every test client warned.
Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
# Django's settings read the config before this module ran; what runs while tests are collected
# (the schema fuzz fetches the schema, which the anonymous rate limit counts in Redis) must use
# the tests' Redis database too, not the one of a demo on the same server.
get_config.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def _passwords_hashed_once():
    """Django's default hasher hashing each password once per session, not once per user
    created (``tests/password_hashing.py``): some 0.8 s per test that creates one."""
    from django.test import override_settings

    others = [h for h in settings.PASSWORD_HASHERS if not h.endswith(".PBKDF2PasswordHasher")]
    with override_settings(PASSWORD_HASHERS=[
            "tests.password_hashing.SessionSaltPBKDF2PasswordHasher", *others]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _fresh_config():
    """Settings were built before this module set REDIS_URL: drop every cached config."""
    from chronocore.config import get_config
    from chronocore.redis_client import redis_client
    from scheduler.timers import timer_store

    get_config.cache_clear()
    redis_client.cache_clear()
    timer_store.cache_clear()
    assert get_config().redis_url.endswith(f"/{get_config().test_redis_db}")
    yield


@pytest.fixture(scope="session")
def services_up():
    """Fail (never skip) when PostgreSQL, Redis or RabbitMQ does not answer."""
    import localservices

    down = [name for name, ok in localservices.status().items() if not ok]
    if down:
        pytest.fail(f"services not answering: {', '.join(down)}; run `chrono services up`")


@pytest.fixture
def redis_client(services_up):
    from chronocore.redis_client import redis_client as process_client

    client = process_client()
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(autouse=True)
def _tenants_granted_everything(request):
    """Every tenant a test creates (the fixtures below, Tenant.objects.create, the tenants API)
    is granted every task on every queue, so that the suite's tests, written before grants,
    schedule what they like; the grant tests mark themselves ``no_default_grants`` and grant
    what they mean to. A receiver rather than a grant per fixture: many tests create their
    tenants themselves."""
    from chronocore import grants

    grants.forget()
    if request.node.get_closest_marker("no_default_grants"):
        yield
        return
    from django.db.models.signals import post_save

    from chronocore.models import TaskGrant, Tenant

    def grant_everything(sender, instance, created, raw=False, **_):
        if created and not raw:
            TaskGrant.objects.get_or_create(tenant=instance, task_pattern="*",
                                            queue_pattern="*", defaults={"created_by": "tests"})

    post_save.connect(grant_everything, sender=Tenant, dispatch_uid="tests-grant-everything")
    yield
    post_save.disconnect(sender=Tenant, dispatch_uid="tests-grant-everything")


@pytest.fixture
def tenant(db):
    from chronocore.models import Tenant

    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db):
    from chronocore.models import Tenant

    return Tenant.objects.create(slug="globex", name="Globex")


def owned_shards(client, replica_id: str, shard_count: int) -> int:
    pipe = client.pipeline(transaction=False)
    for shard in range(shard_count):
        pipe.get(f"{shard_tag(shard)}:lease")
    prefix = f"{replica_id}|".encode()
    return sum(1 for value in pipe.execute() if value and value.startswith(prefix))


class Platform:
    """Starts beats and workers for one test and knows when each is ready.

    Each ``start_*`` returns once its process is ready; inside ``with platform.together():``
    it returns at once, and the block's end waits for each process the block started.
    """

    def __init__(self, group: ProcessGroup, redis_client, queue: str) -> None:
        self.group = group
        self.redis = redis_client
        self.queue = queue
        self._readiness_waits: list[Callable[[], None]] | None = None

    @contextmanager
    def together(self) -> Iterator[None]:
        """Start the block's processes at once, then wait for each to be ready: a start-up is
        2-4 s of imports and connections, and one after the other they left a core idle."""
        self._readiness_waits = []
        try:
            yield
            for wait in self._readiness_waits:
                wait()
        finally:
            self._readiness_waits = None

    def ready_when(self, process, ready: Callable[[], bool], *, timeout_s: float,
                   what: str) -> None:
        """Wait until ``ready()`` holds for ``process``: now, or inside ``together`` at the
        end of its block."""
        wait = partial(process.wait_until, ready, timeout_s=timeout_s, what=what)
        if self._readiness_waits is None:
            wait()
        else:
            self._readiness_waits.append(wait)

    def start_beat(self, replica_id: str = "beat-1", **env: str):
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        beat = self.group.start(replica_id, ["beat", "--replica-id", replica_id], env=extra)
        shard_count = get_config().shard_count
        self.ready_when(
            beat,
            lambda: owned_shards(self.redis, replica_id, shard_count) > 0,
            timeout_s=30,
            what="taking its shards",
        )
        return beat

    def start_reaper(self, name: str = "reaper", **env: object):
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        reaper = self.group.start(name, ["reaper"], env=extra)
        self.ready_when(reaper, lambda: "reaper started" in reaper.log_tail(), timeout_s=30,
                        what="starting")
        return reaper

    def leases_of(self, replica_id: str) -> set[str]:
        """The lease values ("<replica>|<token>") ``replica_id`` holds now."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(get_config().shard_count):
            pipe.get(f"{shard_tag(shard)}:lease")
        return {v.decode() for v in pipe.execute() if v and v.startswith(f"{replica_id}|".encode())}

    def owned(self, replica_id: str) -> int:
        return len(self.leases_of(replica_id))

    def start_worker(self, name: str = "worker-1", concurrency: int = 2,
                     include: tuple[str, ...] = (), pool: str = "prefork", **env: object):
        """A Chrono worker of the test queue; ``include`` adds task modules to tests.e2e.tasks."""
        from reaper.models import Worker

        hostname = f"{name}@{self.queue}"
        extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
        worker = self.group.start(
            name,
            ["worker", "--queues", self.queue, "--concurrency", str(concurrency),
             "--pool", pool, "--hostname", hostname,
             "--include", ",".join(("tests.e2e.tasks", *include)), "--loglevel", "INFO"],
            env=extra,
        )
        self.ready_when(
            worker,
            lambda: Worker.objects.filter(worker_id=hostname).exists(),
            timeout_s=60,
            what="its first heartbeat",
        )
        return worker


@pytest.fixture
def platform(transactional_db, redis_client, tmp_path):
    """Real beat and worker processes against the test database (tests using it must be
    ``transaction=True`` so what they write is committed and visible to the children)."""
    from django.db import connection

    settings = connection.settings_dict
    base = urlsplit(get_config().database_url)
    test_database_url = urlunsplit(base._replace(path=f"/{settings['NAME']}"))
    queue = f"e2e-{uuid.uuid4().hex[:10]}"
    group = ProcessGroup(
        env={
            "DATABASE_URL": test_database_url,
            "REDIS_URL": os.environ["REDIS_URL"],
            "CHRONO_DEFAULT_QUEUE": queue,
            "CHRONO_EXECUTION_LOG_SPOOL_DIR": str(tmp_path / "spool"),
        },
        log_dir=tmp_path / "logs",
    )
    yield Platform(group, redis_client, queue)
    _tell_all_to_stop(group)
    group.stop_all()
    _delete_queue(queue)


def _tell_all_to_stop(group: ProcessGroup) -> None:
    """SIGTERM (after SIGCONT) to every child at once, so that their shutdowns overlap: a
    worker's warm shutdown takes 2-3 s, and ``stop_all`` waits for one child after the other
    (it still does, and kills what outlives its timeout)."""
    for child in group.children:
        try:
            child.signal_group(signal.SIGCONT)
            child.signal(signal.SIGTERM)
        except ProcessLookupError:  # it exited since it was last polled
            pass


def _delete_queue(queue: str) -> None:
    import amqp

    from scheduler.dispatch import amqp_connection_params

    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        conn.channel().queue_delete(queue)
