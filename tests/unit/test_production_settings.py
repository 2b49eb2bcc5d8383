"""``manage.py check --deploy`` is clean for the production settings, which refuse to start
with the development secret key or empty or default service credentials (run in a subprocess,
since settings are read once per process; no service is contacted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chronocore.credentials import Secret, ServiceCredentials, render_credentials

ROOT = Path(__file__).resolve().parents[2]
SECRET_KEY = "p" * 20 + "-production-secret-0123456789-abcdefghijklmnop"
# Credentials of a production deployment, as its environment would give them.
PRODUCTION_URLS = {
    "DATABASE_URL": "postgresql://chrono:Kq7vY2mN4pX9rT1w@db.internal:5432/chrono",
    "REDIS_URL": "redis://:Lw8zB3nQ6sV0cU5e@redis.internal:6379/0",
    "BROKER_URL": "amqp://chrono:Mx9aC4oR7tW2dY6f@mq.internal:5672/chrono",
    "SEARCH_URL": "https://chrono:Ny0bD5pS8uX3eZ7g@search.internal:9200",
}


def production_env(**env: str) -> dict[str, str]:
    """The environment of a process with production settings: none of this machine's service
    URLs and no credentials file, unless ``env`` gives them."""
    base = {name: value for name, value in os.environ.items() if not name.endswith("_URL")}
    return {**base, "DJANGO_SETTINGS_MODULE": "chronoadmin.settings_production",
            "CHRONO_CREDENTIALS_FILE": "/nonexistent/credentials.env", **env}


def run_check(**env: str) -> subprocess.CompletedProcess:
    """``check --deploy`` with production settings (:func:`production_env`)."""
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=production_env(**env),
    )


def test_check_deploy_is_clean_for_the_production_settings():
    result = run_check(CHRONO_SECRET_KEY=SECRET_KEY, CHRONO_ALLOWED_HOSTS="chrono.example.com",
                       **PRODUCTION_URLS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_with_the_development_secret_key():
    result = run_check(CHRONO_ALLOWED_HOSTS="chrono.example.com", **PRODUCTION_URLS)
    assert result.returncode != 0
    assert "CHRONO_SECRET_KEY" in result.stderr


VALIDATE_PASSWORDS = """
from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
print("lockout", settings.AUTHENTICATION_BACKENDS[0], settings.AXES_FAILURE_LIMIT)
for password in ("password1234", "314159265358979", "chrono-demo", "tr0ub4dor-and-3-horses"):
    try:
        validate_password(password)
        print(password, "accepted")
    except ValidationError as error:
        print(password, "refused:", " ".join(error.messages))
"""


def test_production_refuses_weak_admin_passwords_and_locks_out_logins():
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", VALIDATE_PASSWORDS],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=production_env(CHRONO_SECRET_KEY=SECRET_KEY, CHRONO_ALLOWED_HOSTS="chrono.example.com",
                           **PRODUCTION_URLS),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "lockout axes.backends.AxesStandaloneBackend 10"
    assert lines[1].startswith("password1234 refused: This password is too common.")
    assert lines[2].startswith("314159265358979 refused: This password is entirely numeric.")
    assert lines[3].startswith("chrono-demo refused: This password is too short. It must "
                               "contain at least 12 characters.")
    assert lines[4] == "tr0ub4dor-and-3-horses accepted"


def test_production_refuses_default_or_empty_service_credentials_naming_each_url():
    result = run_check(
        CHRONO_SECRET_KEY=SECRET_KEY, CHRONO_ALLOWED_HOSTS="chrono.example.com",
        DATABASE_URL="postgresql://chrono:chrono@127.0.0.1:5432/chrono",
        BROKER_URL="amqp://guest:guest@127.0.0.1:5672//",
    )
    assert result.returncode != 0
    assert "refuse empty or default service credentials" in result.stderr
    for line in (
        "DATABASE_URL has a well-known default password: set it to postgresql://USER:PASSWORD@",
        "REDIS_URL has no password: set it to redis://:PASSWORD@HOST:6379/0",
        "BROKER_URL has a well-known default password",
        "SEARCH_URL has no password: set it to https://USER:PASSWORD@HOST:9200, or "
        "CHRONO_SEARCH_API_KEY",
        "/nonexistent/credentials.env, which `chrono services up` generates",
    ):
        assert line in result.stderr, result.stderr


def test_production_takes_loopback_credentials_from_the_credentials_file(tmp_path):
    generated = ServiceCredentials(**{
        name: Secret(user="" if name == "redis" else "chrono", password=f"{name}-Zx81qPw0vB5m")
        for name in ("database", "redis", "broker", "search")
    })
    path = tmp_path / "credentials.env"
    path.write_text(render_credentials(generated, header="test"))
    result = run_check(CHRONO_SECRET_KEY=SECRET_KEY, CHRONO_ALLOWED_HOSTS="chrono.example.com",
                       CHRONO_CREDENTIALS_FILE=str(path))
    assert result.returncode == 0, result.stdout + result.stderr
