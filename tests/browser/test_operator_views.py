"""More of the operator's pages in a real browser: the dashboard's queues panel (a queue a
worker consumes, one nobody does with its messages waiting), a workflow definition's runs ×
steps grid, and what a tenant's staff see (their tenant's rows and dashboard, nothing else)."""

from __future__ import annotations

import uuid

import amqp
import pytest
from django.contrib.auth.models import User
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from chronocore.config import get_config
from chronocore.models import StaffRole
from chronocore.staff import add_member
from scheduler import api
from scheduler.dispatch import amqp_connection_params
from tests.browser.conftest import log_in, screenshot, start_web
from workflows import engine
from workflows.models import WorkflowRun

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _queue_row(driver, queue: str) -> list[str] | None:
    # One script: the table is redrawn on every update.
    return driver.execute_script(
        "const tr = document.querySelector(`#queues tbody tr[data-queue='${arguments[0]}']`);"
        "return tr && Array.from(tr.cells).map(td => td.innerText)", queue)


@pytest.fixture
def unconsumed_queue(services_up):
    name = f"nobody-{uuid.uuid4().hex[:8]}"
    yield name
    with amqp.Connection(**amqp_connection_params(get_config().broker_url)) as conn:
        conn.connect()
        conn.channel().queue_delete(name)


def test_the_dashboard_shows_each_queues_depth_consumers_and_waiting_work(
        platform, operator, browser, tenant, unconsumed_queue):
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=4)
        web = start_web(platform, undelivered_flag_after_ms=1_000)
    for _ in range(3):
        api.schedule_once("e2e.record_run", tenant=tenant, queue=unconsumed_queue, delay=0)
    log_in(browser, web)
    browser.get(f"{web}/admin/dashboard/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.5)
    # The worker's queue: one consumer (the worker), nothing left waiting.
    wait.until(lambda d: (_queue_row(d, platform.queue) or [None] * 3)[2] == "1")
    # The queue nobody consumes: its three messages ready, no consumer, three waiting past the
    # web's threshold (1 s here), shown in the error colour.
    wait.until(lambda d: _queue_row(d, unconsumed_queue) == [unconsumed_queue, "3", "0", "3",
                                                             "0"])
    assert browser.find_element(By.ID, "queues-panel").get_attribute("data-state") == "ok"
    assert browser.execute_script(
        "return document.querySelector(`#queues tr[data-queue='${arguments[0]}'] td:nth-child(3)`)"
        ".classList.contains('health-bad')", unconsumed_queue)
    browser.execute_script("document.getElementById('queues-panel').scrollIntoView()")
    screenshot(browser, "dashboard-queues")


def test_a_definitions_grid_shows_its_runs_steps_by_state_and_links_to_each_run(
        platform, web, operator, browser, tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=4, include=("tests.e2e.workflow_tasks",))
    version = engine.define(tenant, {"name": "nightly", "steps": [
        {"key": "extract", "task": "wf.sleep",
         "kwargs": {"label": "extract", "seconds": {"$ref": "input.seconds"}}},
        {"key": "report", "task": "wf.echo", "parents": ["extract"],
         "kwargs": {"label": "report"}},
        {"key": "load", "task": "wf.echo", "parents": ["extract"], "kwargs": {"label": "load"}},
    ]})
    done = [engine.start_run("nightly", tenant=tenant, queue=platform.queue,
                             run_input={"seconds": 0.1}) for _ in range(2)]
    wait = WebDriverWait(browser, 60, poll_frequency=0.5)
    wait.until(lambda _: WorkflowRun.objects.filter(
        run_id__in=[r.run_id for r in done], status="SUCCEEDED").count() == 2)
    slow = engine.start_run("nightly", tenant=tenant, queue=platform.queue,
                            run_input={"seconds": 60})
    log_in(browser, web)
    page = f"{web}/admin/workflows/workflowdefinitionversion/{version.definition_id}/change/"

    def cells(driver) -> dict[str, list[str]]:
        driver.get(page)
        return dict(driver.execute_script(
            "return Array.from(document.querySelectorAll('#run-grid tbody tr')).map(tr =>"
            " [tr.dataset.step,"
            "  Array.from(tr.querySelectorAll('td')).map(td => td.dataset.status)])"))

    wait.until(lambda d: cells(d).get("extract") == ["SUCCEEDED", "SUCCEEDED", "RUNNING"])
    grid = cells(browser)
    assert grid == {"extract": ["SUCCEEDED", "SUCCEEDED", "RUNNING"],
                    "report": ["SUCCEEDED", "SUCCEEDED", "PENDING"],
                    "load": ["SUCCEEDED", "SUCCEEDED", "PENDING"]}
    first = browser.find_element(By.CSS_SELECTOR, "#run-grid tbody td.run-grid-cell")
    # Coloured by the state's class (run_graph.css), with the step's duration.
    assert first.value_of_css_property("background-color") == "rgba(159, 216, 168, 1)"
    assert first.text.endswith(" ms")
    screenshot(browser, "workflow-grid")
    running = browser.find_element(
        By.CSS_SELECTOR, f"#run-grid tbody td[data-run='{slow.run_id}'] a")
    running.click()
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "run-graph"))
    assert str(slow.run_id) in browser.current_url
    engine.cancel_run(slow.run_id, tenant=tenant)


def test_a_tenants_staff_see_their_tenant_only(platform, web, browser, tenant, other_tenant,
                                               redis_client):
    mine = api.schedule_cron("e2e.record_run", tenant=tenant, cron="0 3 * * *")
    theirs = api.schedule_cron("e2e.record_run", tenant=other_tenant, cron="0 3 * * *")
    user = User.objects.create_user("ann", password="ann-browser-password")
    add_member(user, tenant, StaffRole.VIEWER)
    log_in(browser, web, "ann", "ann-browser-password")
    browser.get(f"{web}/admin/scheduler/job/")
    assert browser.find_element(By.ID, "result_list")
    assert f"/admin/scheduler/job/{mine.job_id}/change/" in browser.page_source
    assert str(theirs.job_id) not in browser.page_source
    browser.get(f"{web}/admin/scheduler/job/{theirs.job_id}/change/")
    assert "Not Found" in browser.page_source
    browser.get(f"{web}/admin/dashboard/")
    wait = WebDriverWait(browser, 30, poll_frequency=0.5)
    wait.until(lambda d: d.find_element(By.ID, "chrono-dashboard").get_attribute(
        "data-generated-at"))
    tenant_filter = browser.find_element(By.ID, "tenant-filter")
    assert tenant_filter.get_attribute("value") == "acme"
    assert tenant_filter.get_attribute("readonly") is not None
    assert "tenant acme" in browser.find_element(By.ID, "dash-status").text
    for panel in ("queues-panel", "workers-panel", "platform-card"):  # the platform's
        assert not browser.find_element(By.ID, panel).is_displayed()
    screenshot(browser, "dashboard-tenant-staff")
