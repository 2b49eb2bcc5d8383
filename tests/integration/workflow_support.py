"""Steps of a workflow run carried through by hand, as the beat and a worker would carry them,
for tests that drive the engine in process."""

from __future__ import annotations

from scheduler import occurrences
from scheduler.clock import datetime_to_ms, now_ms
from scheduler.executions import finish_execution, start_execution
from scheduler.lifecycle import execution_id_for
from scheduler.models import ExecutionStatus, Job
from workflows import engine
from workflows.runs import StepRef


def run_step_job(run, ref: StepRef, *, status: ExecutionStatus | None, result: object = None,
                 took_ms: int = 120) -> None:
    """Fire, start and (with ``status``) finish the first attempt of ``ref`` (a step or a map
    instance) of ``run``; the engine applies the end when next asked."""
    job_id = str(engine.task_job_id(run.run_id, ref, 1))
    fire_ms = datetime_to_ms(Job.objects.get(job_id=job_id).next_run_at)
    occurrences.load_and_insert([(job_id, fire_ms)])
    execution_id = execution_id_for(job_id, fire_ms)
    occurrences.record_dispatched([(execution_id, fire_ms, now_ms())],
                                  advances=[occurrences.JobAdvance(job_id, fire_ms, None,
                                                                   now_ms())])
    started_ms = now_ms()
    started = start_execution(str(execution_id), attempt=1, worker_id="w1",
                              lease_ttl_ms=60_000, at_ms=started_ms)
    if status is not None:
        finish_execution(started, status=status, result=result,
                         error="boom" if status != "SUCCEEDED" else "",
                         at_ms=started_ms + took_ms)
