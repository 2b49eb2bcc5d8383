"""``manage.py check --deploy`` is clean for the production settings (run in a subprocess,
since settings are read once per process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_check(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chronoadmin.settings_production", **env},
    )


def test_check_deploy_is_clean_for_the_production_settings():
    secret = "p" * 20 + "-production-secret-0123456789-abcdefghijklmnop"
    result = run_check(CHRONO_SECRET_KEY=secret, CHRONO_ALLOWED_HOSTS="chrono.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_with_the_development_secret_key():
    result = run_check(CHRONO_ALLOWED_HOSTS="chrono.example.com")
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
    secret = "p" * 20 + "-production-secret-0123456789-abcdefghijklmnop"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", VALIDATE_PASSWORDS],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "chronoadmin.settings_production",
             "CHRONO_SECRET_KEY": secret, "CHRONO_ALLOWED_HOSTS": "chrono.example.com"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "lockout axes.backends.AxesStandaloneBackend 10"
    assert lines[1].startswith("password1234 refused: This password is too common.")
    assert lines[2].startswith("314159265358979 refused: This password is entirely numeric.")
    assert lines[3].startswith("chrono-demo refused: This password is too short. It must "
                               "contain at least 12 characters.")
    assert lines[4] == "tr0ub4dor-and-3-horses accepted"
