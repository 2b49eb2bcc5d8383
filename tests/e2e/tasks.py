"""Tasks the end-to-end tests run on real workers; each leaves evidence of every run in Redis."""

from __future__ import annotations

import os

import redis

from chronoadmin.celery import app

RUNS_KEY = "e2e:runs"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])


@app.task(name="e2e.record_run", bind=True)
def record_run(self, label: str = "") -> str:
    """Counts each run of each execution in the hash ``e2e:runs`` (execution id -> runs)."""
    execution_id = getattr(self.request, "chrono_execution_id", None) or self.request.id
    _redis().hincrby(RUNS_KEY, execution_id, 1)
    return label
