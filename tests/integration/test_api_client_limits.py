"""Limits by client address (real Redis): failed API authentications and requests without
credentials get 429 with Retry-After once an address is over its budget; other addresses, and
keys that authenticate, are not touched. X-Forwarded-For counts only behind trusted proxies."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
WRONG_KEY = "Bearer chrono_0123456789ab_wrongsecret"


def from_address(address: str, authorization: str | None = None, **extra: str) -> APIClient:
    headers = {"REMOTE_ADDR": address, **extra}
    if authorization:
        headers["HTTP_AUTHORIZATION"] = authorization
    return APIClient(**headers)


def test_a_wrong_key_repeated_gets_429_with_retry_after_even_for_a_right_key(
    tenant_api, chrono_config
):
    chrono_config(api_failed_auth_per_minute=3)
    guesser = from_address("127.0.0.7", WRONG_KEY)
    assert [guesser.get(JOBS).status_code for _ in range(4)] == [401, 401, 401, 429]
    response = guesser.get(JOBS)
    assert response.status_code == 429
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= 20  # one failure per 20 s comes back
    assert response.json() == {"detail": (
        "Too many failed authentications from this address (at most 3 a minute); every "
        "request with an API key from it is refused until then. Expected available in "
        f"{retry_after} seconds.")}
    # While the address is over, a right key from it is refused the same way (letting it in
    # would tell the guesser which key is right) ...
    right_from_there = from_address("127.0.0.7", f"Bearer {tenant_api.full_key}")
    assert right_from_there.get(JOBS).status_code == 429
    # ... and from any other address it works as ever.
    right_elsewhere = from_address("127.0.0.8", f"Bearer {tenant_api.full_key}")
    assert right_elsewhere.get(JOBS).status_code == 200
    assert tenant_api.get(JOBS).status_code == 200  # the test client's own 127.0.0.1


@pytest.mark.parametrize("authorization", [
    "Bearer nonsense",  # malformed
    "Bearer chrono_0123456789ab_wrongsecret",  # no such key
    "Bearer a b",  # too many parts
])
def test_every_kind_of_failed_authentication_counts(tenant_api, chrono_config, authorization):
    chrono_config(api_failed_auth_per_minute=2)
    client = from_address("127.0.0.9", authorization)
    assert [client.get(JOBS).status_code for _ in range(3)] == [401, 401, 429]


def test_a_revoked_key_counts_as_a_failure(tenant_api, chrono_config):
    from chronocore.models import ApiKey

    chrono_config(api_failed_auth_per_minute=2)
    ApiKey.objects.filter(tenant=tenant_api.tenant).update(revoked_at="2026-01-01T00:00:00Z")
    client = from_address("127.0.0.10", f"Bearer {tenant_api.full_key}")
    assert [client.get(JOBS).status_code for _ in range(3)] == [401, 401, 429]


def test_keys_that_authenticate_never_count_as_failures(tenant_api, chrono_config):
    chrono_config(api_failed_auth_per_minute=1)
    statuses = {tenant_api.get(JOBS).status_code for _ in range(5)}
    assert statuses == {200}
    assert from_address("127.0.0.1", WRONG_KEY).get(JOBS).status_code == 401


def test_requests_without_credentials_are_limited_per_address(
    tenant_api, chrono_config
):
    chrono_config(api_anonymous_rate_per_minute=2)
    anonymous = from_address("127.0.0.11")
    assert anonymous.get(JOBS).status_code == 401
    assert anonymous.get("/api/schema/", {"format": "json"}).status_code == 200
    response = anonymous.get(JOBS)
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["detail"].startswith(
        "Too many requests without credentials from this address (at most 2 a minute).")
    assert anonymous.get("/api/schema/", {"format": "json"}).status_code == 429
    # Another address is not limited, and neither is a key from the same one.
    assert from_address("127.0.0.12").get(JOBS).status_code == 401
    keyed = from_address("127.0.0.11", f"Bearer {tenant_api.full_key}")
    assert keyed.get(JOBS).status_code == 200


def test_a_staff_session_is_not_anonymous(staff_api, chrono_config):
    chrono_config(api_anonymous_rate_per_minute=1)
    assert {staff_api.get("/api/v1/tenants/").status_code for _ in range(3)} == {200}


def test_x_forwarded_for_is_ignored_without_a_trusted_proxy(tenant_api, chrono_config):
    chrono_config(api_failed_auth_per_minute=2)
    statuses = [
        from_address("127.0.0.13", WRONG_KEY, HTTP_X_FORWARDED_FOR=f"127.0.2.{n}")
        .get(JOBS).status_code
        for n in range(3)
    ]
    assert statuses == [401, 401, 429]  # a new forged address each time changes nothing


def test_behind_a_trusted_proxy_the_address_it_appended_is_the_client(
    tenant_api, chrono_config, settings
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    chrono_config(api_failed_auth_per_minute=2)

    def via_proxy(client_address: str, forged: str = "127.0.3.1") -> int:
        # The client wrote its own X-Forwarded-For; the proxy appended what it saw.
        client = from_address("127.0.0.14", WRONG_KEY,
                              HTTP_X_FORWARDED_FOR=f"{forged}, {client_address}")
        return client.get(JOBS).status_code

    assert [via_proxy("127.0.4.5", forged=f"127.0.3.{n}") for n in range(3)] == [
        401, 401, 429]
    assert via_proxy("127.0.4.6") == 401  # another client behind the same proxy
