"""Tasks that ship with Chrono: used by the demo, the benchmarks and the end-to-end tests."""

from __future__ import annotations

import logging
import time

from chronoadmin.celery import app
from chronocore.redis_client import redis_client

# Not under "chrono": Chrono's own loggers do not propagate to the root logger, where the capture
# of execution logs listens, and the demo's report is a job whose log the demo shows.
demo_log = logging.getLogger("chrono_demo.report")

BENCH_RUNS_KEY = "chrono:bench:runs"


@app.task(name="chrono.noop")
def noop(*args: object, **kwargs: object) -> None:
    """Does nothing: measures the platform, not the job."""
    return None


@app.task(name="chrono.echo")
def echo(*args: object, **kwargs: object) -> dict[str, object]:
    """Returns its arguments, so the recorded result shows what the job was given."""
    return {"args": list(args), "kwargs": kwargs}


@app.task(name="chrono.sleep")
def sleep(seconds: float = 1.0) -> float:
    """Sleeps ``seconds``: a stand-in for a long job."""
    time.sleep(seconds)
    return seconds


@app.task(name="chrono.fail")
def fail(message: str = "chrono.fail always fails") -> None:
    """Always raises: a stand-in for a broken job."""
    raise RuntimeError(message)


@app.task(name="chrono.demo.report", bind=True)
def demo_report(self, report: str = "daily") -> str:
    """The demo's recurring job: logs a line a real job would replace with work."""
    line = f"{report} report built by {self.request.hostname}"
    demo_log.info(line)
    return line


@app.task(name="chrono.bench.counted_sleep", bind=True)
def counted_sleep(self, seconds: float = 1.0) -> float:
    """Sleeps, then counts its run per execution in the Redis hash ``chrono:bench:runs``: the
    recovery benchmark reads it to tell runs that were lost from runs that happened twice."""
    time.sleep(seconds)
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    redis_client().hincrby(BENCH_RUNS_KEY, execution_id, 1)
    return seconds


bench_log = logging.getLogger("chrono_bench.task")


@app.task(name="chrono.bench.log_lines")
def log_lines(lines: int = 10, line_bytes: int = 200) -> int:
    """Logs ``lines`` INFO lines of about ``line_bytes`` characters each (logger
    ``chrono_bench.task``), the last one saying so: ``chrono bench logs`` times their way to
    the search engine."""
    filler = "x" * max(0, line_bytes - 40)
    for number in range(1, lines):
        bench_log.info("line %d of %d %s", number, lines, filler)
    bench_log.info("line %d of %d (last) %s", lines, lines, filler)
    return lines


@app.task(name="chrono.start_workflow", bind=True)
def start_workflow(self, workflow: str, run_input: object = None,
                   version: int | None = None, queue: str | None = None) -> str:
    """Start a run of ``workflow`` for the job's tenant: schedule this task (cron or one-time)
    to start workflows on a schedule. The run's idempotency key is the execution's id, so a
    redelivered message starts one run; returns the run id."""
    from workflows import engine

    tenant_id = getattr(self.request, "chrono_tenant_id", None)
    execution_id = getattr(self.request, "chrono_execution_id", None)
    if not tenant_id or not execution_id:
        raise ValueError("chrono.start_workflow runs only as a Chrono job (it needs the job's "
                         "tenant): schedule it with the API, not with .delay()")
    run = engine.start_run(workflow, tenant=tenant_id, run_input=run_input, version=version,
                           queue=queue, idempotency_key=f"job-execution:{execution_id}",
                           by=f"job:{getattr(self.request, 'chrono_job_id', '')}")
    return str(run.run_id)
