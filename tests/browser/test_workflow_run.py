"""A workflow run's page in a real browser: its graph, steps coloured by state, updating while
the run runs (no reload) until every step has succeeded."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import log_in, screenshot
from workflows import engine

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _statuses(driver) -> dict[str, str]:
    # Read in one script: the page redraws the graph every 2 s, so an element found by one
    # WebDriver call may be gone by the next.
    return dict(driver.execute_script(
        "return Array.from(document.querySelectorAll('#run-graph g.node'))"
        ".map(g => [g.dataset.key, g.dataset.status])"))


def test_a_run_graph_shows_each_step_and_follows_the_run_live(platform, web, operator, browser,
                                                                tenant):
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=4, include=("tests.e2e.workflow_tasks",))
    engine.define(tenant, {"name": "nightly", "steps": [
        {"key": "extract", "task": "wf.sleep", "kwargs": {"label": "extract", "seconds": 5}},
        {"key": "transform", "task": "wf.echo", "parents": ["extract"],
         "kwargs": {"label": "transform"}},
        {"key": "report", "task": "wf.echo", "parents": ["extract"],
         "kwargs": {"label": "report"}},
        {"key": "load", "task": "wf.echo", "parents": ["transform", "report"],
         "kwargs": {"label": "load"}},
    ]})
    # Logged in before the run starts: a log-in that took longer than `extract` ran (a busy
    # CI machine) left nothing RUNNING for the page to show, and the wait below timed out.
    log_in(browser, web)
    run = engine.start_run("nightly", tenant=tenant, queue=platform.queue)
    browser.get(f"{web}/admin/workflows/workflowrun/{run.run_id}/change/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.3)
    wait.until(lambda d: _statuses(d).get("extract") == "RUNNING")
    browser.execute_script("window.chronoNotReloaded = true;")
    assert _statuses(browser)["load"] == "PENDING"
    waiting = browser.execute_script(
        "return document.querySelector(\"#run-steps tr[data-key='load']\").innerText")
    assert "waiting for" in waiting
    screenshot(browser, "workflow-run")
    wait.until(lambda d: set(_statuses(d).values()) == {"SUCCEEDED"})
    assert browser.execute_script("return window.chronoNotReloaded === true")
    assert browser.find_element(By.ID, "run-graph").get_attribute("data-status") == "SUCCEEDED"
    assert browser.execute_script(
        "return document.querySelectorAll('#run-graph path.edge').length") == 4
