"""Workflows through kill -9: a worker killed mid-step (its lease expires, the reaper declares
the attempt lost, the step's retry runs it again), and every Chrono process kind killed between
steps. Every run ends in the right state, no step's job is dispatched twice, no step body runs
twice except the one whose worker died under it."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from chronocore.probe import free_port
from scheduler.models import Execution, Job
from tests.e2e.workflow_tasks import COMPLETED_KEY, STEP_LOG_KEY
from tests.helpers import process_gone, wait_for
from tests.metrics_support import http_get, value
from workflows import engine
from workflows.engine_child import engine_children
from workflows.models import WorkflowRun, WorkflowTask
from workflows.runs import StepRef

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FAST = {"execution_lease_ttl_ms": 3_000, "worker_heartbeat_interval_ms": 1_000,
        "reaper_interval_ms": 300, "shard_lease_ttl_ms": 3_000}
INCLUDE = ("tests.e2e.workflow_tasks",)


def _log(platform) -> list[str]:
    return [x.decode() for x in platform.redis.lrange(STEP_LOG_KEY, 0, -1)]


def _kill(process) -> None:
    process.signal_group(signal.SIGKILL)
    process.popen.wait(10)


def _finished(run) -> WorkflowRun:
    assert wait_for(lambda: WorkflowRun.objects.get(pk=run.pk).finished_at is not None,
                    timeout_s=90), WorkflowRun.objects.get(pk=run.pk).state
    return WorkflowRun.objects.get(pk=run.pk)


def test_a_worker_killed_mid_step_the_step_runs_again_and_the_run_succeeds(platform, tenant):
    platform.redis.delete(STEP_LOG_KEY)
    with platform.together():
        platform.start_beat(**FAST)
        platform.start_reaper(**FAST)
        victim = platform.start_worker("victim", concurrency=1, include=INCLUDE, **FAST)
    engine.define(tenant, {"name": "survivor", "steps": [
        {"key": "long", "task": "wf.sleep", "kwargs": {"label": "long", "seconds": 4},
         "retry": {"max_attempts": 2, "initial_delay_ms": 100}},
        {"key": "after", "task": "wf.echo", "parents": ["long"], "kwargs": {"label": "after"}},
    ]})
    run = engine.start_run("survivor", tenant=tenant, queue=platform.queue)
    assert wait_for(lambda: "long" in _log(platform), timeout_s=30)
    _kill(victim)
    platform.start_worker("rescuer", concurrency=1, include=INCLUDE, **FAST)
    run = _finished(run)
    assert run.status == "SUCCEEDED", run.state
    assert run.state["steps"]["long"]["attempt"] == 2
    assert Counter(_log(platform)) == {"long": 2, "after": 1}
    assert WorkflowTask.objects.filter(run_id=run.run_id).count() == 3  # long #1, #2, after


def test_every_process_kind_killed_between_steps_delays_but_never_doubles_a_step(platform,
                                                                                 tenant):
    """A kill lands between two steps, or just after the next one started (the handoff takes
    milliseconds): a step whose worker died under it is retried, and only such a step may
    complete twice; every other step completes once, and no step's job fires twice."""
    platform.redis.delete(STEP_LOG_KEY, COMPLETED_KEY)
    with platform.together():
        processes = {
            "beat": platform.start_beat("beat-1", **FAST),
            "reaper": platform.start_reaper(**FAST),
            "worker": platform.start_worker("w-0", concurrency=2, include=INCLUDE, **FAST),
            "indexer": platform.group.start("indexer", ["indexer"]),
            "web": platform.group.start("web", ["web", "127.0.0.1:0", "--workers", "1"]),
        }
    keys = [f"s{i}" for i in range(8)]
    engine.define(tenant, {"name": "chain", "steps": [
        {"key": key, "task": "wf.work", "kwargs": {"label": key, "seconds": 0.5},
         "parents": [keys[i - 1]] if i else [], "retry": {"max_attempts": 3,
                                                          "initial_delay_ms": 100}}
        for i, key in enumerate(keys)]})
    run = engine.start_run("chain", tenant=tenant, queue=platform.queue)
    restarts = {
        "beat": lambda n: platform.start_beat(f"beat-{n}", **FAST),
        "reaper": lambda n: platform.start_reaper(f"reaper-{n}", **FAST),
        "worker": lambda n: platform.start_worker(f"w-{n}", concurrency=2, include=INCLUDE,
                                                  **FAST),
        "indexer": lambda n: platform.group.start(f"indexer-{n}", ["indexer"]),
        "web": lambda n: platform.group.start(f"web-{n}", ["web", "127.0.0.1:0", "--workers",
                                                           "1"]),
    }
    kinds = ["worker", "beat", "reaper", "indexer", "web", "worker"]
    for n, (kind, key) in enumerate(zip(kinds, keys[:len(kinds)], strict=True), start=1):
        assert wait_for(lambda k=key: WorkflowRun.objects.get(pk=run.pk).state["steps"][k]
                        ["status"] == "SUCCEEDED", timeout_s=60), (
            kind, key, WorkflowRun.objects.get(pk=run.pk).state["steps"][key],
            list(Execution.objects.filter(job__in=Job.objects.filter(job_id__in=WorkflowTask
                 .objects.filter(run_id=run.run_id, step_key=key).values("job_id")))
                 .values_list("status", "reason")))
        _kill(processes[kind])
        processes[kind] = restarts[kind](n)
    run = _finished(run)
    assert run.status == "SUCCEEDED", run.state
    completed = Counter(x.decode() for x in platform.redis.lrange(COMPLETED_KEY, 0, -1))
    tasks = WorkflowTask.objects.filter(run_id=run.run_id)
    attempts = Counter(tasks.values_list("step_key", flat=True))
    for key in keys:
        assert 1 <= completed[key] <= attempts[key], (key, completed, attempts)
        if attempts[key] > 1:  # retried: an earlier attempt's worker was killed under it
            first = Execution.objects.get(job_id=engine.task_job_id(
                run.run_id, StepRef(key), 1))
            assert first.status == "FAILED" and "lost" in (first.reason or ""), first.reason
    assert sum(attempts.values()) <= len(keys) + 2, attempts  # two worker kills at most
    job_ids = list(tasks.values_list("job_id", flat=True))
    assert Job.objects.filter(job_id__in=job_ids).count() == len(job_ids)
    fired = Counter(Execution.objects.filter(job_id__in=job_ids).values_list("job_id",
                                                                            flat=True))
    assert set(fired.values()) == {1}, "a step's job fired twice"


def _two_step_run(platform, tenant, name: str) -> WorkflowRun:
    engine.define(tenant, {"name": name, "steps": [
        {"key": "first", "task": "wf.echo", "kwargs": {"label": "first"}},
        {"key": "second", "task": "wf.echo", "parents": ["first"],
         "kwargs": {"label": "second"}},
    ]})
    return engine.start_run(name, tenant=tenant, queue=platform.queue)


def test_a_worker_killed_alone_takes_its_engine_child_with_it(platform, tenant):
    """SIGKILL to the worker's process only (as the OOM killer sends it): its engine child
    stops too (PR_SET_PDEATHSIG), and the next worker's engine carries the run on."""
    platform.redis.delete(STEP_LOG_KEY)
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker("w-1", pool="threads", concurrency=4, include=INCLUDE)
    assert wait_for(lambda: len(engine_children(worker.pid)) == 1, timeout_s=30)
    [child] = engine_children(worker.pid)
    os.kill(worker.pid, signal.SIGKILL)
    worker.popen.wait(10)
    assert wait_for(lambda: process_gone(child), timeout_s=5), "the engine outlived its worker"
    run = _two_step_run(platform, tenant, "after-the-kill")
    platform.start_worker("w-2", pool="threads", concurrency=4, include=INCLUDE)
    assert _finished(run).status == "SUCCEEDED"
    assert _log(platform) == ["first", "second"]


def test_an_engine_child_killed_is_started_again_and_the_runs_go_on(platform, tenant):
    platform.redis.delete(STEP_LOG_KEY)
    port = free_port()
    with platform.together():
        platform.start_beat()
        worker = platform.start_worker("w-1", pool="threads", concurrency=4, include=INCLUDE,
                                       metrics_port=port)
    assert wait_for(lambda: len(engine_children(worker.pid)) == 1, timeout_s=30)
    [first] = engine_children(worker.pid)
    os.kill(first, signal.SIGKILL)
    run = _two_step_run(platform, tenant, "engine-killed")
    assert _finished(run).status == "SUCCEEDED"
    assert _log(platform) == ["first", "second"]
    [second] = engine_children(worker.pid)
    assert second != first
    assert f"workflow engine child {first} exited (signal SIGKILL)" in worker.log_tail(200)
    _, exposition = http_get(f"http://127.0.0.1:{port}/metrics")
    assert value(exposition.decode(), "chrono_worker_workflow_engine_exits_total") == 1
    worker.signal(signal.SIGTERM)  # a warm shutdown stops the child and does not restart it
    assert worker.popen.wait(30) == 0
    assert process_gone(second)
