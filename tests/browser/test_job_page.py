"""A job's page in a real browser: its next fire times, and its Pause button, after which they
are gone and Resume is offered."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from scheduler import api
from scheduler.models import JobStatus
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_pausing_a_job_from_its_page_takes_its_next_fire_times_away(
        platform, web, operator, browser, tenant):
    job = api.schedule_cron("e2e.record_run", tenant=tenant, cron="*/5 * * * * *",
                            timezone="America/New_York", queue=platform.queue)
    log_in(browser, web)
    browser.get(f"{web}/admin/scheduler/job/{job.job_id}/change/")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#next-fire-times tr.fire-time")) == 10
    screenshot(browser, "job")

    browser.find_element(By.ID, "job-action-pause").click()
    assert "Pause: done." in browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
    assert browser.find_elements(By.CSS_SELECTOR, "#next-fire-times tr.fire-time") == []
    assert "None while paused" in browser.find_element(By.ID, "no-fire-times").text
    assert browser.find_element(By.ID, "job-action-resume").is_displayed()
    job.refresh_from_db()
    assert job.status == JobStatus.PAUSED
