"""Admin logins are locked out after repeated failures (django-axes, its PostgreSQL handler),
through the real admin login view: ten failures in a row for one username from one address lock
that pair for the cool-off, the right password included; another address, a success before the
limit, the end of the cool-off and ``axes_reset_username`` each let the administrator in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/?next=/admin/"
RIGHT = "correct horse battery staple"
WRONG_PASSWORD_ERROR = "Please enter the correct username and password for a staff account."
LOCKED = "Too many failed logins for this username from this address"


@pytest.fixture
def operator(db):
    return User.objects.create_user("operator", password=RIGHT, is_staff=True)


def log_in(client: Client, password: str, username: str = "operator"):
    return client.post(LOGIN, {"username": username, "password": password})


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(client: Client, times: int) -> None:
    for n in range(times):
        response = log_in(client, f"wrong-{n}")
        assert response.status_code == 200, n
        assert WRONG_PASSWORD_ERROR in response.content.decode(), n


def test_the_documented_limit_and_cool_off_are_in_force(settings):
    assert settings.AXES_FAILURE_LIMIT == 10
    assert settings.AXES_COOLOFF_TIME == timedelta(minutes=30)
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"


def test_the_eleventh_wrong_password_is_locked_out_and_so_is_the_right_one(operator):
    client = Client()
    fail(client, 9)
    tenth = log_in(client, "wrong-9")  # the failure that reaches the limit locks the pair
    assert tenth.status_code == 429
    eleventh = log_in(client, "wrong-10")
    assert eleventh.status_code == 429
    assert LOCKED in eleventh.content.decode()
    right = log_in(client, RIGHT)
    assert right.status_code == 429
    assert LOCKED in right.content.decode()
    assert not logged_in(client)
    # A new session from the same address is no way around it.
    fresh = Client()
    assert log_in(fresh, RIGHT).status_code == 429
    assert not logged_in(fresh)
    attempt = AccessAttempt.objects.get(username="operator")
    assert attempt.ip_address == "127.0.0.1"
    assert attempt.failures_since_start >= 11
    assert "wrong-" not in attempt.post_data and RIGHT not in attempt.post_data


def test_the_same_username_from_another_address_still_logs_in(operator):
    fail(Client(), 9)
    assert log_in(Client(), "wrong-9").status_code == 429
    elsewhere = Client(REMOTE_ADDR="127.0.0.2")
    response = log_in(elsewhere, RIGHT)
    assert response.status_code == 302 and response.headers["Location"] == "/admin/"
    assert logged_in(elsewhere)


def test_a_successful_login_resets_the_count(operator):
    client = Client()
    fail(client, 9)
    assert log_in(client, RIGHT).status_code == 302
    client.logout()
    fail(client, 9)  # nine more are answered as wrong passwords again, not locked out
    assert log_in(client, RIGHT).status_code == 302
    assert logged_in(client)


def test_after_the_cool_off_the_right_password_logs_in(operator, settings):
    client = Client()
    fail(client, 9)
    assert log_in(client, "wrong-9").status_code == 429
    # As if the last attempt were a cool-off and a second ago.
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time
        - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert log_in(client, RIGHT).status_code == 302
    assert logged_in(client)


def test_axes_reset_username_unlocks_at_once(operator):
    client = Client()
    fail(client, 9)
    assert log_in(client, "wrong-9").status_code == 429
    call_command("axes_reset_username", "operator")
    assert log_in(client, RIGHT).status_code == 302
    assert logged_in(client)
