"""The demo grants its tenant every built-in task it schedules (nobody else has them)."""

from __future__ import annotations

import inspect

from chronoadmin.management.commands import demo


def test_the_demo_grants_every_task_its_jobs_and_workflow_run():
    scheduled = {task for _, task, *_ in demo.CRON_JOBS}
    scheduled |= {step["task"] for step in demo.DEMO_WORKFLOW["steps"]}
    source = inspect.getsource(demo.Command.handle)
    scheduled |= {name for name in ("chrono.echo", "chrono.fail", "chrono.start_workflow")
                  if f'"{name}"' in source}
    assert scheduled <= set(demo.DEMO_TASKS), scheduled - set(demo.DEMO_TASKS)
