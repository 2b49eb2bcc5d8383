"""The operator's pages in a real browser: the admin is styled, and the live dashboard's counts
and charts move while jobs run, without the page being reloaded (the all-tenants figures from
the reaper's snapshot, the page saying how old they are)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from scheduler import api
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _text(driver, selector: str) -> str | None:
    # Read in one script: the page redraws its cards and tables on every update, so an element
    # found by one WebDriver call may be gone by the next.
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e && e.innerText", selector)


def _card_value(driver, card: str, key: str) -> str | None:
    return _text(driver, f"#{card} dd[data-key='{key}']")


def test_the_admin_is_styled(platform, web, operator, browser):
    log_in(browser, web)
    header = browser.find_element(By.ID, "header")
    # Django's stylesheet paints the header; unstyled, it is transparent.
    assert header.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "")
    assert browser.find_element(By.ID, "site-name").text == "Chrono"
    screenshot(browser, "admin-index")


def test_the_dashboard_counts_and_charts_move_while_jobs_run_without_a_reload(
        platform, web, operator, browser, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=8)
        # The all-tenants view is served from the reaper's snapshot, as in production.
        platform.start_reaper(dashboard_snapshot_interval_ms=1_000)
    log_in(browser, web)
    browser.get(f"{web}/admin/dashboard/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.5)
    wait.until(lambda d: d.find_element(By.ID, "chrono-dashboard").get_attribute(
        "data-generated-at"))
    browser.execute_script("window.chronoNotReloaded = true;")
    first_update = browser.find_element(By.ID, "chrono-dashboard").get_attribute(
        "data-generated-at")
    assert _card_value(browser, "hour-totals", "succeeded") == "0"

    api.schedule_once_many("e2e.record_run", tenant=tenant, queue=platform.queue,
                           fire_times=[api_now_plus(ms) for ms in range(500, 2_500, 10)])
    wait.until(lambda d: _card_value(d, "hour-totals", "succeeded") == "200")
    chart_total = browser.execute_script(
        "return Chart.getChart('chart-rates').data.datasets[1].data.reduce((a, b) => a + b, 0)")
    assert chart_total == 200
    assert browser.execute_script(
        "return Chart.getChart('chart-lateness').data.datasets[1].data.some(v => v !== null)")
    assert browser.execute_script("return window.chronoNotReloaded === true")
    assert browser.find_element(By.ID, "chrono-dashboard").get_attribute(
        "data-generated-at") != first_update
    assert "e2e.record_run" in _text(browser, "#tasks tbody tr")
    # Its figures came from the snapshot, and the page says how old they are.
    wait.until(lambda d: d.find_element(By.ID, "dash-source").get_attribute(
        "data-source") == "snapshot")
    assert "s old (platform snapshot)" in _text(browser, "#dash-source")
    workers = _text(browser, "#workers tbody")
    assert "up" in workers.split()
    screenshot(browser, "dashboard")


def api_now_plus(ms: int):
    from django.utils import timezone

    return timezone.now() + timedelta(milliseconds=ms)
