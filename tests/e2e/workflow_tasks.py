"""Tasks for the workflow tests: each records its run in Redis (as ``tests.e2e.tasks`` does),
so a test can count how often each step's body ran, and returns something its children use."""

from __future__ import annotations

import time

from chronoadmin.celery import app
from tests.e2e.tasks import RUNS_KEY, _redis

STEP_LOG_KEY = "e2e:workflow-steps"


def _record(self, label: str) -> None:
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    redis = _redis()
    redis.hincrby(RUNS_KEY, execution_id, 1)
    redis.rpush(STEP_LOG_KEY, label)


@app.task(name="wf.echo", bind=True)
def echo(self, label: str, value=None):
    """Returns ``value`` (or ``label``)."""
    _record(self, label)
    return label if value is None else value


@app.task(name="wf.add", bind=True)
def add(self, label: str, a: int, b: int) -> int:
    _record(self, label)
    return a + b


@app.task(name="wf.fail", bind=True)
def fail(self, label: str) -> None:
    _record(self, label)
    raise RuntimeError(f"{label} fails on purpose")


@app.task(name="wf.flaky", bind=True)
def flaky(self, label: str, failures: int) -> str:
    """Fails its first ``failures`` runs (counted per label in Redis), then succeeds."""
    _record(self, label)
    if _redis().hincrby("e2e:flaky", label, 1) <= failures:
        raise RuntimeError(f"{label} flakes")
    return label


@app.task(name="wf.sleep", bind=True)
def sleep(self, label: str, seconds: float) -> float:
    _record(self, label)
    time.sleep(seconds)
    return seconds


@app.task(name="wf.choose", bind=True)
def choose(self, label: str, branch):
    """A branch step's body: returns the children to run."""
    _record(self, label)
    return branch


@app.task(name="wf.items", bind=True)
def items(self, label: str, count: int) -> list[int]:
    _record(self, label)
    return list(range(count))


@app.task(name="wf.square", bind=True)
def square(self, label: str, item: int) -> int:
    _record(self, label)
    return item * item

COMPLETED_KEY = "e2e:workflow-completed"


@app.task(name="wf.work", bind=True)
def work(self, label: str, seconds: float) -> str:
    """Works ``seconds``, then records that its body completed (``COMPLETED_KEY``)."""
    time.sleep(seconds)
    _redis().rpush(COMPLETED_KEY, label)
    return label
