"""The states of workflow runs and their steps: one vocabulary for models, API, admin and audit.

```
step:  PENDING ─trigger rule RUN, condition true─▶ READY ─lease─▶ RUNNING ─▶ SUCCEEDED
          │                                          │               ├──▶ FAILED (retries exhausted)
          │                                          │               ├──▶ RETRY_WAIT ─due─▶ READY
          │                                          │               ├──▶ SKIPPED (the task said so)
          │                                          │               └──▶ CANCELLED
          ├─trigger rule SKIP / condition false / branch not taken──▶ SKIPPED
          ├─trigger rule UPSTREAM_FAILED──▶ UPSTREAM_FAILED
          ├─condition or argument error, map over a non-list──▶ FAILED
          └─run cancelled──▶ CANCELLED                (READY and RETRY_WAIT too)
run:   RUNNING ─every step terminal─▶ SUCCEEDED | FAILED   (the leaf rule, see evaluation.py)
       RUNNING ─cancel──▶ CANCELLING ─running steps ended─▶ CANCELLED
       RUNNING ─run timeout──▶ TIMING_OUT ─running steps ended─▶ TIMED_OUT
       FAILED | TIMED_OUT ─retry from failure─▶ RUNNING
```

A map step's own status is the aggregate of its instances: RUNNING once it has expanded,
SUCCEEDED when every instance succeeded, FAILED when every instance ended and one did not
succeed. The names match Airflow's where the concept is Airflow's (``UPSTREAM_FAILED``,
``SKIPPED``) and the job/execution vocabulary of DESIGN.md elsewhere (``RETRY_WAIT``).
"""

from __future__ import annotations

from enum import StrEnum


class StepStatus(StrEnum):
    """Where one step (or one map instance) of a run is."""

    PENDING = "PENDING"
    READY = "READY"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STEP_STATUSES


TERMINAL_STEP_STATUSES = frozenset(
    {
        StepStatus.SUCCEEDED,
        StepStatus.FAILED,
        StepStatus.SKIPPED,
        StepStatus.UPSTREAM_FAILED,
        StepStatus.CANCELLED,
    }
)

# The states a worker, the reaper or the engine's timers are still working on.
ACTIVE_STEP_STATUSES = frozenset({StepStatus.READY, StepStatus.RUNNING, StepStatus.RETRY_WAIT})


class RunStatus(StrEnum):
    """Where a workflow run is."""

    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    TIMING_OUT = "TIMING_OUT"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES

    @property
    def is_stopping(self) -> bool:
        """Cancelling or timing out: no new step starts, running ones are being stopped."""
        return self in (RunStatus.CANCELLING, RunStatus.TIMING_OUT)


TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)
