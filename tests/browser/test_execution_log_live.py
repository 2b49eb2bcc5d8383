"""A running execution's admin page in a real browser: a line its task logs after the page
loaded appears in the page's log without a reload, and the page stops following once the
execution is final (real web, beat, thread-pool worker and ``chrono indexer`` shipping the
spool the worker writes)."""

from __future__ import annotations

import uuid

import pytest
from selenium.webdriver.support.ui import WebDriverWait

from scheduler import api
from scheduler.models import Execution, ExecutionStatus
from tests.browser.conftest import log_in, screenshot
from tests.helpers import wait_for

pytest_plugins = ["tests.integration.audit_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _log_text(driver) -> str:
    # One script: the page appends rows while it is read.
    return driver.execute_script(
        "return document.getElementById('execution-log-lines').innerText")


def test_a_line_logged_after_the_page_loaded_appears_without_a_reload(
        audit_stream, search_client, platform, web, operator, browser, tenant):
    with platform.together():
        platform.start_beat()
        platform.group.start("indexer", ["indexer"], env={
            "CHRONO_LOG_SHIPPER_POLL_INTERVAL_MS": "50", "CHRONO_INDEXER_IN_DOUBT_GRACE_MS": "200"})
        platform.start_worker(pool="threads", concurrency=2, execution_log_flush_interval_ms=200)
    gate = f"e2e:gate:{uuid.uuid4().hex}"
    job = api.schedule_once("e2e.log_until_released", tenant=tenant, delay=0.3,
                            queue=platform.queue, kwargs={"gate": gate})
    running = Execution.objects.filter(job_id=job.job_id, status=ExecutionStatus.RUNNING)
    assert wait_for(running.exists, timeout_s=60)
    execution = running.get()

    log_in(browser, web)
    browser.get(f"{web}/admin/scheduler/execution/{execution.execution_id}/change/")
    browser.execute_script("window.chronoNotReloaded = true;")
    wait = WebDriverWait(browser, 60, poll_frequency=0.5)
    # Its first line, in the page as loaded or brought by the live view.
    wait.until(lambda d: f"waiting for {gate}" in _log_text(d))
    assert f"released by {gate}" not in _log_text(browser)
    assert "live" in browser.find_element("id", "execution-log-status").text

    platform.redis.set(gate, 1)  # the task logs its next line now, after the page loaded
    wait.until(lambda d: f"released by {gate}" in _log_text(d))
    assert browser.execute_script("return window.chronoNotReloaded === true")
    assert _log_text(browser).count(f"waiting for {gate}") == 1, "no line shown twice"
    screenshot(browser, "execution-log-live")

    # Final, and nothing more to come: the page stops asking.
    wait.until(lambda d: d.find_element("id", "execution-log-status").text == "SUCCEEDED")
    assert browser.find_element("id", "execution-logs").get_attribute("data-live") == "false"
