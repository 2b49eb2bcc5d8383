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
