"""Test-wide set-up: real services or a failed run, and a Redis database of the tests' own.

The tests use Redis database ``CHRONO_TEST_REDIS_DB`` (15; flushed by the fixtures that need a
clean store) so a demo running on database 0 of the same server keeps its timers; set it and
``CHRONO_TEST_DATABASE_NAME`` to run two test sessions side by side. A service that does not
answer fails the run with what to do; nothing is ever skipped.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from chronoadmin.config import DEFAULT_REDIS_URL, load_config


def _test_redis_url() -> str:
    parts = urlsplit(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    return urlunsplit(parts._replace(path=f"/{load_config().test_redis_db}"))


os.environ["REDIS_URL"] = _test_redis_url()


@pytest.fixture(scope="session", autouse=True)
def _fresh_config():
    """Settings were built before this module set REDIS_URL: drop every cached config."""
    from chronoadmin.config import get_config
    from scheduler.api import timer_store

    get_config.cache_clear()
    timer_store.cache_clear()
    assert get_config().redis_url.endswith(f"/{get_config().test_redis_db}")
    yield


@pytest.fixture(scope="session")
def services_up():
    """Fail (never skip) when PostgreSQL, Redis or RabbitMQ does not answer."""
    from chronoadmin import services

    down = [name for name, ok in services.status().items() if not ok]
    if down:
        pytest.fail(f"services not answering: {', '.join(down)}; run `chrono services up`")


@pytest.fixture
def redis_client(services_up):
    from scheduler.api import timer_store

    client = timer_store().client
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def tenant(db):
    from chronoadmin.models import Tenant

    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_tenant(db):
    from chronoadmin.models import Tenant

    return Tenant.objects.create(slug="globex", name="Globex")
