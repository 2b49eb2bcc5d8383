"""Browser tests: Debian's Chromium, headless, driven by Selenium through Debian's
chromium-driver, against a real ``chrono web`` (gunicorn) process and real beat and worker
processes. ``make test`` installs both packages; a missing browser fails the run, never skips.

Screenshots go to ``CHRONO_ARTIFACTS_DIR`` (default ``.chrono/artifacts``), kept after the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from localservices.processes import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# The flags of a quiet headless Chromium on a machine without outside network (without the
# background-networking ones it keeps trying to reach Google's hosts).
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                  "--window-size=1400,1000")
ADMIN_USER, ADMIN_PASSWORD = "operator", "browser-test-password"


def artifacts_dir() -> Path:
    path = Path(os.environ.get("CHRONO_ARTIFACTS_DIR", REPO_ROOT / ".chrono" / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def browser(tmp_path):
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(binary):
            pytest.fail(f"{binary} is missing: `make test` installs Debian's chromium and "
                        "chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def web(platform):
    """A ``chrono web`` process of the test's platform (same database, Redis and queue)."""
    return start_web(platform)


def start_web(platform, **env: object) -> str:
    """Start a ``chrono web`` process of ``platform`` (``env``: config fields of its own, as
    ``undelivered_flag_after_ms=1000``); its origin once it answers (inside
    ``platform.together()``, once the block has ended)."""
    port = _free_port()
    extra = {f"CHRONO_{k.upper()}": str(v) for k, v in env.items()}
    process = platform.group.start("web", ["web", f"127.0.0.1:{port}", "--workers", "1"],
                                   env=extra)
    origin = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        try:
            with urllib.request.urlopen(f"{origin}/health/", timeout=5):  # noqa: S310
                return True
        except OSError as error:
            return getattr(error, "code", None) == 503
    platform.ready_when(process, answering, timeout_s=60, what="answering HTTP")
    return origin


@pytest.fixture
def operator(transactional_db):
    from django.contrib.auth.models import User

    return User.objects.create_superuser(ADMIN_USER, password=ADMIN_PASSWORD)


def log_in(driver, origin: str, username: str = ADMIN_USER,
           password: str = ADMIN_PASSWORD) -> None:
    driver.get(f"{origin}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    # The login page has the site header too; only a logged-in page has the user tools (waiting
    # for the header let the next page load race the login's POST, and land on the login page).
    WebDriverWait(driver, 15).until(expected_conditions.presence_of_element_located(
        (By.ID, "user-tools")))


def screenshot(driver, name: str) -> Path:
    path = artifacts_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
