"""Who gets in: tenant API keys (hashed, shown once, revocable) and staff sessions."""

from __future__ import annotations

import hashlib

import pytest
from rest_framework.test import APIClient

from chronocore.models import ApiKey

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
INVALID = ("Invalid API key: send 'Authorization: Bearer chrono_<prefix>_<secret>' with a key "
           "issued for your tenant.")


def test_no_key_is_401_with_the_bearer_challenge(db):
    response = APIClient().get(JOBS)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="chrono"'
    assert response.json() == {"detail": "Authentication credentials were not provided."}


@pytest.mark.parametrize("header", [
    "Bearer nonsense",
    "Bearer chrono_0123456789ab_wrongsecret",
    "Bearer chrono_XYZ_secret",
])
def test_an_invalid_key_is_401(tenant_api, header):
    response = APIClient(HTTP_AUTHORIZATION=header).get(JOBS)
    assert response.status_code == 401
    assert response.json() == {"detail": INVALID}


def test_a_right_prefix_with_a_wrong_secret_is_401(tenant_api):
    scheme, prefix, _ = tenant_api.full_key.split("_", 2)
    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {scheme}_{prefix}_x").get(JOBS)
    assert response.status_code == 401
    assert response.json() == {"detail": INVALID}


def test_a_malformed_authorization_header_is_401(tenant_api):
    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {tenant_api.full_key} extra").get(JOBS)
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Malformed Authorization header")


def test_a_revoked_key_is_401_saying_so(tenant_api):
    assert tenant_api.get(JOBS).status_code == 200
    ApiKey.objects.filter(tenant=tenant_api.tenant).update(revoked_at="2026-01-01T00:00:00Z")
    response = tenant_api.get(JOBS)
    assert response.status_code == 401
    assert response.json() == {
        "detail": "This API key was revoked; ask a platform administrator for a new one."}


def test_a_disabled_tenants_key_is_401(tenant_api):
    tenant_api.tenant.is_active = False
    tenant_api.tenant.save()
    response = tenant_api.get(JOBS)
    assert response.status_code == 401
    assert response.json() == {"detail": "This API key's tenant is disabled."}


def test_keys_are_stored_only_as_their_sha256_and_record_their_last_use(tenant_api):
    api_key = ApiKey.objects.get(tenant=tenant_api.tenant)
    assert api_key.key_hash == hashlib.sha256(tenant_api.full_key.encode()).hexdigest()
    secret = tenant_api.full_key.split("_", 2)[2]
    stored = [str(getattr(api_key, f.attname)) for f in ApiKey._meta.concrete_fields]
    assert not any(secret in value for value in stored)
    assert api_key.last_used_at is None
    tenant_api.get(JOBS)
    api_key.refresh_from_db()
    assert api_key.last_used_at is not None


def test_a_staff_session_may_not_use_tenant_endpoints(staff_api):
    response = staff_api.get(JOBS)
    assert response.status_code == 403
    assert response.json()["detail"].startswith("This endpoint acts for one tenant")


@pytest.mark.parametrize("path", ["/api/v1/workers/", "/api/v1/tenants/", "/api/v1/api-keys/"])
def test_a_tenant_key_may_not_use_platform_endpoints(tenant_api, path):
    response = tenant_api.get(path)
    assert response.status_code == 403
    assert response.json()["detail"].startswith("Only platform staff")


def test_a_signed_in_user_who_is_not_staff_may_not_use_platform_endpoints(db, redis_client):
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_login(User.objects.create_user("someone", password="x"))
    assert client.get("/api/v1/tenants/").status_code == 403


def test_an_administrator_issues_a_key_that_is_shown_once_and_then_revokes_it(
    staff_api, tenant, redis_client
):
    response = staff_api.post("/api/v1/api-keys/", {"tenant": str(tenant.tenant_id),
                                                    "name": "ci"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    full_key = body["key"]
    assert full_key.startswith(f"chrono_{body['prefix']}_")
    listed = staff_api.get("/api/v1/api-keys/").json()["results"]
    assert [item["key_id"] for item in listed] == [body["key_id"]]
    assert "key" not in listed[0]
    assert "key" not in staff_api.get(f"/api/v1/api-keys/{body['key_id']}/").json()

    tenant_client = APIClient(HTTP_AUTHORIZATION=f"Bearer {full_key}")
    assert tenant_client.get(JOBS).status_code == 200
    assert staff_api.delete(f"/api/v1/api-keys/{body['key_id']}/").status_code == 204
    assert tenant_client.get(JOBS).status_code == 401
    assert staff_api.get(f"/api/v1/api-keys/{body['key_id']}/").json()["revoked_at"]


def test_an_administrator_creates_lists_and_disables_tenants(staff_api, tenant):
    response = staff_api.post("/api/v1/tenants/", {"slug": "initech", "name": "Initech"},
                              format="json")
    assert response.status_code == 201, response.json()
    tenant_id = response.json()["tenant_id"]
    slugs = {item["slug"] for item in staff_api.get("/api/v1/tenants/").json()["results"]}
    assert slugs == {"acme", "initech"}
    response = staff_api.patch(f"/api/v1/tenants/{tenant_id}/", {"is_active": False},
                               format="json")
    assert response.status_code == 200 and response.json()["is_active"] is False
    response = staff_api.post("/api/v1/tenants/", {"slug": "acme", "name": "Again"},
                              format="json")
    assert response.status_code == 400
    assert response.json() == {"slug": ["tenant with this slug already exists."]}
    response = staff_api.patch(f"/api/v1/tenants/{tenant_id}/", {"tenant_id": "x"},
                               format="json")
    assert response.status_code == 400
    assert response.json() == {"tenant_id": [
        "Unknown field; the fields are: slug, name, is_active."]}
    assert staff_api.delete(f"/api/v1/tenants/{tenant_id}/").status_code == 405


def test_an_administrator_lists_workers(staff_api):
    from django.utils import timezone

    from reaper.models import Worker

    Worker.objects.create(worker_id="w1", queue_name="chrono", hostname="h",
                          last_heartbeat_at=timezone.now())
    response = staff_api.get("/api/v1/workers/")
    assert response.status_code == 200
    assert [w["worker_id"] for w in response.json()["results"]] == ["w1"]
    assert staff_api.get("/api/v1/workers/w1/").json()["queue_name"] == "chrono"


def test_the_admin_shows_a_new_key_once_and_stores_only_its_hash(tenant, client):
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("root", password="x"))
    response = client.post("/admin/chronocore/apikey/add/",
                           {"tenant": str(tenant.tenant_id), "name": "from admin"})
    assert response.status_code == 200
    api_key = ApiKey.objects.get(name="from admin")
    page = response.content.decode()
    start = page.index(f"chrono_{api_key.prefix}_")
    full_key = page[start:page.index("<", start)]
    assert api_key.key_hash == hashlib.sha256(full_key.encode()).hexdigest()
    change_page = client.get(f"/admin/chronocore/apikey/{api_key.pk}/change/").content.decode()
    assert full_key not in change_page


def test_an_administrator_issues_a_key_by_the_tenants_slug(staff_api, tenant, redis_client):
    response = staff_api.post("/api/v1/api-keys/", {"tenant": "acme", "name": "by slug"},
                              format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["tenant"] == str(tenant.tenant_id)
    unknown = staff_api.post("/api/v1/api-keys/", {"tenant": "nobody"}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["tenant"] == ["No tenant has the slug or id 'nobody'."]


def test_a_tenant_key_may_not_issue_keys_by_slug_either(tenant_api, other_tenant):
    response = tenant_api.post_json("/api/v1/api-keys/", {"tenant": "globex"})
    assert response.status_code == 403
