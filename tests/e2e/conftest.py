"""End-to-end tests run real beat and worker processes: see the ``platform`` fixture."""

import pytest

from tests.e2e.workflow_tasks import STEP_LOG_KEY

pytestmark = pytest.mark.e2e

WORKFLOW_TASKS = ("tests.e2e.workflow_tasks",)


@pytest.fixture
def workflow_platform(platform):
    platform.redis.delete(STEP_LOG_KEY)
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="threads", concurrency=8, include=WORKFLOW_TASKS)
    return platform


@pytest.fixture
def prefork_workflow_platform(platform):
    """A prefork worker: a running step is stopped in its pool child by the soft-timeout signal
    (a thread pool can only be stopped by killing the whole process after the grace)."""
    platform.redis.delete(STEP_LOG_KEY)
    with platform.together():
        platform.start_beat()
        platform.start_worker(pool="prefork", concurrency=2, include=WORKFLOW_TASKS)
    return platform

