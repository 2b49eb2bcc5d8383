"""Fixtures of the integration tests: API clients per tenant (real keys, real authentication),
a staff session, a way to change one config limit for one test, and a RabbitMQ queue of the
test's own."""

from __future__ import annotations

import uuid

import amqp
import pytest
from rest_framework.test import APIClient

from chronocore.config import get_config
from scheduler.dispatch import amqp_connection_params


class TenantApi(APIClient):
    """A client sending one tenant's API key, with short JSON helpers."""

    def __init__(self, tenant, full_key: str) -> None:
        super().__init__(HTTP_AUTHORIZATION=f"Bearer {full_key}")
        self.tenant = tenant
        self.full_key = full_key

    def post_json(self, path: str, data=None, **headers):
        return self.post(path, data, format="json", headers=headers or None)

    def patch_json(self, path: str, data=None):
        return self.patch(path, data, format="json")

    def create_job(self, **fields):
        payload = {"job_type": "tests.noop", "delay_ms": 60_000} | fields
        response = self.post_json("/api/v1/jobs/", payload)
        assert response.status_code == 201, response.json()
        return response.json()


@pytest.fixture
def tenant_api(tenant, redis_client):
    from chronocore.models import ApiKey

    _, full_key = ApiKey.objects.issue(tenant=tenant, name="tests")
    return TenantApi(tenant, full_key)


@pytest.fixture
def other_api(other_tenant, redis_client):
    from chronocore.models import ApiKey

    _, full_key = ApiKey.objects.issue(tenant=other_tenant, name="tests")
    return TenantApi(other_tenant, full_key)


def platform_staff_user(username: str):
    """A staff user holding the platform flag (``chronocore.platform_staff``), not a superuser:
    sees every tenant in the admin and reaches the staff API."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="chronocore",
                                                     codename="platform_staff"))
    return User.objects.get(pk=user.pk)  # without the permission cache of the one above


@pytest.fixture
def staff_api(db, redis_client):
    user = platform_staff_user("operator")
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def chrono_config(monkeypatch):
    """``chrono_config(api_rate_per_minute=3)``: a config with those fields for this test."""

    def override(**values: object) -> None:
        for name, value in values.items():
            monkeypatch.setenv(f"CHRONO_{name.upper()}", str(value))
        get_config.cache_clear()

    yield override
    monkeypatch.undo()
    get_config.cache_clear()


@pytest.fixture
def queue(services_up):
    """A queue name of this test's own, deleted after it."""
    name = f"it-{uuid.uuid4().hex[:10]}"
    yield name
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        conn.channel().queue_delete(name)
