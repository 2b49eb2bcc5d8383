"""Chrono's settings with :mod:`tests.web_failing_urls` as the URL map (error-handling tests)."""

from chronoadmin.settings import *  # noqa: F403

ROOT_URLCONF = "tests.web_failing_urls"
