"""The workflow engine: the pure evaluator (:mod:`workflows.evaluation`) wrapped in PostgreSQL
transactions, with Chrono's jobs as the way steps run.

**Runs.** A run's state is one document on its row (:mod:`workflows.persistence`). Every change
of a run (started, a step's end, cancel, retry from failure, deadline) is one transaction that
locks the row, evaluates, writes the new state and carries the decisions out: so a join is
decided from every parent's final state, once, and a second delivery of the same end finds the
step already past it (the evaluator refuses it) and advances nothing.

**Steps run as jobs.** Each attempt of a step (or map instance) becomes a one-time job due now
(or at its retry time) with the id ``task_job_id(run, step, attempt)``, inserted under that key
(inserting it twice inserts nothing), watched by ``workflow`` (:class:`~scheduler.models.
JobWatch`) and described by a :class:`~workflows.models.WorkflowTask`. Its timer is added on
commit and announced to the beat at once, which fires it through the ordinary path: claim,
execution row, confirmed publish, a worker's lease. A crash between the commit and the timer is
repaired as for any job (the jobs table is the truth: the reconciler's overdue sweep adds it within
seconds, and ``rebuild-timers``).
Step jobs never retry on their own (``max_attempts`` 1): the step's retry policy is the
evaluator's, and each retry is a new attempt with a job of its own, due at its backoff.

**Ends come back as rows.** When an execution of a watched job ends (succeeded, failed, lost,
cancelled), the statement that ends it writes a :class:`~scheduler.models.ExecutionEnd` (a row
trigger) and notifies ``chrono_execution_end``. :class:`EngineListener` (``chrono
workflow-engine``, which every worker runs as its child: :mod:`workflows.engine_child`) wakes on
the notification, or every second, and :func:`apply_pending_ends`
applies each run's ends under its lock and deletes them in the same transaction. Several
listeners share the work (``SKIP LOCKED``); nothing is lost while none runs: the rows wait.

**Sub-workflow steps** (:mod:`workflows.subworkflows`). Dispatching one starts a child run of
the named workflow (latest version, same tenant) in the parent's transaction, under an
idempotency key derived from (parent run, step, attempt), with ``parent_run_id`` and
``parent_step`` (``key#attempt``) set, and marks the step RUNNING at once: it has started,
and stopping the run must treat it as running. An unknown name, or a name already in the chain
of parent runs (a cycle), ends the step FAILED with that reason instead; a step is not retried
(``parse_definition`` refuses a retry policy): a run retried from failure starts a new child.

The child's end comes back through the same outbox as an execution's: the child's final
transaction inserts a ``chrono_execution_end`` row under the parent step's
``task_job_id`` (mapped to the step by a ``WorkflowTask`` row written when the child started;
no job exists) and notifies the channel, and the listener applies it to the parent like any
step end, batched with the others, in the parent's own transaction. Why not advance the parent
in the child's transaction: that would lock the parent row while holding the child's, and
stopping a parent locks its children while holding its own (terminate, request_cancel), so
the two would deadlock; with the outbox, locks are only ever taken parent → child. The row is
written in the transaction that ends the child, so the end is applied exactly once (the row
is deleted as it is applied; a late or duplicate end is refused by the evaluator's fencing).

When the parent stops, each running sub_workflow step gets its parent-close policy:
``terminate`` cancels the child run and ends the step CANCELLED in the same transaction, so the
parent ends without waiting for the child's running steps to stop (the child's end, when it
comes, is refused); ``request_cancel`` cancels the child the same way but leaves the step
RUNNING until the child's end comes back, so the parent ends after its child and the step
takes the child's outcome (SUCCEEDED if it finished first); ``abandon`` leaves the child
running and the step CANCELLED. Both cancels are the same soft-then-hard stop of the child's
steps: terminate is not a harder kill, only a parent that does not wait.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from django.db.models import Count
from django.utils import timezone

from chronocore import grants
from chronocore.config import get_config
from chronocore.models import Tenant
from scheduler import api as scheduler_api
from scheduler import job_writer, prepared
from scheduler.clock import ms_to_datetime, now_ms
from scheduler.models import Execution, ExecutionEnd, ExecutionStatus
from scheduler.prepared import array
from search import audit
from workflows.definitions import StepKind, WorkflowDefinition
from workflows.errors import DefinitionError, InvalidEvent, WorkflowError
from workflows.evaluation import evaluate, waiting_reasons
from workflows.models import WorkflowDefinitionVersion, WorkflowRun, WorkflowRunStatus
from workflows.persistence import reason_to_json, state_from_json, state_to_json
from workflows.runs import (
    CancelRequested,
    DeadlineCheck,
    Dispatch,
    Evaluation,
    EvaluationChain,
    Event,
    Reason,
    RetryDue,
    RetryFromFailure,
    RunStarted,
    RunState,
    StepEnded,
    StepRef,
    StepStarted,
    StepState,
    StopStep,
    admission,
)
from workflows.states import StepStatus
from workflows.subworkflows import (
    CHILD_CYCLE,
    CHILD_NOT_FOUND,
    child_idempotency_key,
    child_outcome,
    cycle_of,
    parent_step_label,
    parse_parent_step,
)
from workflows.writes import AuditRow, RunRow, StepJob, TaskRow, Writes, write

log = logging.getLogger("chrono.workflows")

WATCHER = "workflow"
ENGINE_ACTOR = "workflow-engine"
END_CHANNEL = "chrono_execution_end"
STEP_CLOCK_MARGIN = timedelta(days=1)
APPLY_BATCH = 1_000
DEADLINE_BATCH = 100
# A soft time limit raises in the task; the hard one kills its process this much later.
HARD_TIMEOUT_GRACE_MS = 5_000
TASK_NAMESPACE = uuid.UUID("6f1d3c1e-8a4b-5d2e-9c7f-0b1a2c3d4e5f")
ACTIVE_RUN_STATUSES = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.CANCELLING,
                       WorkflowRunStatus.TIMING_OUT)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


class WorkflowNotFound(WorkflowError, LookupError):
    """Raised when a workflow name, version or run id does not exist for the calling tenant
    (another tenant's included)."""


class RunStateConflict(WorkflowError, ValueError):
    """Raised when a run cannot do what was asked in its state (retry a run that did not fail,
    cancel one that ended)."""


@lru_cache(maxsize=65_536)  # a batch asks for each of its jobs' ids two or three times
def task_job_id(run_id: uuid.UUID | str, ref: StepRef, attempt: int) -> uuid.UUID:
    """The job of one attempt of one step (or map instance) of a run: the same every time it
    is asked for, so dispatching it twice inserts one job."""
    return uuid.uuid5(TASK_NAMESPACE, f"{run_id}/{ref}/{attempt}")


# ----------------------------------------------------------------------------- definitions


def _tenant_id(tenant: Tenant | uuid.UUID | str) -> uuid.UUID:
    if isinstance(tenant, Tenant):
        return tenant.tenant_id
    return uuid.UUID(str(tenant))


def parse_definition(spec: dict | WorkflowDefinition) -> WorkflowDefinition:
    """A definition from its JSON form, validated (DefinitionError names each field path at
    fault). A sub_workflow step may not have a retry policy or a step timeout: its child run
    is retried from failure and timed out as a run of its own (its ``run_timeout_s``)."""
    definition = spec if isinstance(spec, WorkflowDefinition) else WorkflowDefinition.from_dict(
        spec)
    problems = []
    for step in definition.steps:
        if step.kind is not StepKind.SUB_WORKFLOW:
            continue
        if step.retry.max_attempts > 1:
            problems.append((f"steps.{step.key}.retry", "a sub_workflow step is not retried: "
                             "retry its run from failure, or give the child workflow's steps "
                             "their retry policies"))
        if step.timeout_s is not None:
            problems.append((f"steps.{step.key}.timeout_s", "a sub_workflow step has no step "
                             "timeout: set run_timeout_s on the child workflow"))
    if problems:
        raise DefinitionError(problems)
    return definition


def define(tenant: Tenant | uuid.UUID | str, spec: dict | WorkflowDefinition, *,
           by: str = "") -> WorkflowDefinitionVersion:
    """Store a workflow definition as the next version of its name (the same spec as the
    latest version: that version, nothing new). Every step's task must be granted to the
    tenant on the step's queue (the default queue for a step without one): DefinitionError
    naming ``steps.<key>.task`` otherwise; a step is checked again when it is dispatched."""
    definition = parse_definition(spec)
    tenant_id = _tenant_id(tenant)
    check_steps_granted(tenant_id, definition)
    with transaction.atomic():
        with connection.cursor() as cursor:  # versions of one name are numbered one at a time
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                           [f"workflow:{tenant_id}:{definition.name}"])
        latest = (WorkflowDefinitionVersion.objects.filter(tenant_id=tenant_id,
                                                           name=definition.name)
                  .order_by("-version").first())
        fingerprint = definition.fingerprint()
        if latest is not None and latest.fingerprint == fingerprint:
            return latest
        version = WorkflowDefinitionVersion.objects.create(
            tenant_id=tenant_id, name=definition.name,
            version=1 if latest is None else latest.version + 1,
            spec=definition.to_dict(), fingerprint=fingerprint, created_by=by)
        audit.record(audit.WORKFLOW_DEFINED, tenant_id=tenant_id, actor=by,
                     message=f"Workflow {definition.name} v{version.version} defined",
                     data={"workflow": definition.name, "version": version.version})
    return version


def check_steps_granted(tenant_id: uuid.UUID, definition: WorkflowDefinition) -> None:
    """DefinitionError naming ``steps.<key>.task`` for each step whose task the tenant was not
    granted on the step's queue."""
    default_queue = get_config().default_queue
    problems = [
        (f"steps.{step.key}.task", refused)
        for step in definition.steps
        if step.task and (refused := grants.refusal(tenant_id, step.task,
                                                    step.queue or default_queue))
    ]
    if problems:
        raise DefinitionError(problems)


class _RecentlyUsed:
    """Values by key, the least recently used dropped past ``size``; shared by threads. A
    value is loaded outside the lock (two threads may load the same one; either is kept):
    only for what never changes once written, as definition versions."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        value = self.peek(key)
        if value is None:
            value = load()
            self.put(key, value)
        return value

    def peek(self, key: Any) -> Any:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)


# Parsed definitions by version id (versions never change). Keyed by id alone: a batch looks
# its runs' definitions up several times, and their spec (a 10,000-item map list, say) is not
# even loaded on a hit (the engine's queries defer it).
DEFINITION_CACHE_SIZE = 512
_definitions = _RecentlyUsed(DEFINITION_CACHE_SIZE)


class _ParsedStates:
    """The parsed state of the runs this process met last, by run id, each with its
    ``state_version``; the least recently used dropped past ``size``; shared by threads.

    A run's state is one JSON document that every pass over the run parses whole
    (``state_from_json``) and writes whole: 34 ms to parse for a map of 10,000 instances,
    whose ends come a few dozen a pass, so that the passes over a large fan-out cost the
    engine more than its children's ends together. Every write of a state bumps the version
    under the run's lock, so a (run, version) names one state for good: the state a pass
    wrote is kept once its transaction commits (:meth:`keep`, from ``on_commit``: a rolled
    back version may be written again, differently), and the next pass that locks the run
    at that version takes it instead of parsing the row. States are immutable (the evaluator
    copies what it changes)."""

    def __init__(self, size: int) -> None:
        self._kept = _RecentlyUsed(size)  # run id -> (state_version, state)

    def of(self, run: WorkflowRun) -> RunState:
        """``run``'s state at its ``state_version``, parsed from its row if not kept."""
        kept = self._kept.peek(run.run_id)
        if kept is not None and kept[0] == run.state_version:
            return kept[1]
        state = state_from_json(run.state)
        self.keep(run.run_id, run.state_version, state)
        return state

    def keep(self, run_id: uuid.UUID, version: int, state: RunState) -> None:
        self._kept.put(run_id, (version, state))


# A run's parsed state, at most this many runs: a 10,000-instance map's is a few MB, and a small
# run's parse is cheap (what is kept matters for the large runs, passed over again and again).
PARSED_STATE_CACHE_SIZE = 64
_parsed_states = _ParsedStates(PARSED_STATE_CACHE_SIZE)


def definition_of(version: WorkflowDefinitionVersion) -> WorkflowDefinition:
    """The parsed definition of a stored version (parsed once)."""
    return _definitions.get(version.definition_id,
                            lambda: WorkflowDefinition.from_dict(version.spec))


# ------------------------------------------------------------------------------------- runs


def start_run(name: str, *, tenant: Tenant | uuid.UUID | str, run_input: Any = None,
              idempotency_key: str | None = None, version: int | None = None,
              queue: str | None = None, by: str = "", parent_run_id: uuid.UUID | None = None,
              parent_step: str = "") -> WorkflowRun:
    """Start a run of the latest version of ``name`` (or ``version``); a second call with the
    same ``idempotency_key`` returns the first run. Steps without a queue of their own run on
    ``queue`` (default: the configured default queue). A run over the definition's concurrency
    limit waits QUEUED, with that reason, until one of its runs ends. ``parent_run_id`` and
    ``parent_step`` make it the child run of a sub_workflow step (the engine sets them): its
    end comes back to that step."""
    tenant_id = _tenant_id(tenant)
    with transaction.atomic():
        if idempotency_key is not None:
            existing = WorkflowRun.objects.filter(tenant_id=tenant_id,
                                                  idempotency_key=idempotency_key).first()
            if existing is not None:
                return existing
        stored = _version(tenant_id, name, version)
        definition = definition_of(stored)
        _lock_admissions(tenant_id, {name})  # admission of one name's runs, one at a time
        active = WorkflowRun.objects.filter(tenant_id=tenant_id, name=name,
                                            status__in=ACTIVE_RUN_STATUSES).count()
        now = now_ms()
        run, state, waiting = _new_run(
            tenant_id, stored, definition, RunRequest(name, run_input, idempotency_key, version,
                                                      queue),
            by=by, now=now, active=active, parent_run_id=parent_run_id, parent_step=parent_step)
        run.save()
        _audit_run(run, audit.WORKFLOW_RUN_STARTED, by, _started_message(run, waiting))
        if waiting is None:
            _carry_out(run, definition, [evaluate(definition, state, RunStarted(), now_ms=now)])
    return run


@dataclass(frozen=True)
class RunRequest:
    """One run for :func:`start_runs` to start: the arguments of :func:`start_run` that differ
    from one run to the next."""

    name: str
    run_input: Any = None
    idempotency_key: str | None = None
    version: int | None = None
    queue: str | None = None


# Runs one start_runs call starts at most: its transaction holds every run's row and first
# step jobs, and its one write statement carries them all.
MAX_RUNS_PER_START = 10_000


def start_runs(requests: Sequence[RunRequest], *, tenant: Tenant | uuid.UUID | str,
               by: str = "") -> list[WorkflowRun]:
    """Start many runs in one transaction, each as :func:`start_run` would (same admission,
    idempotency and audit), in the order given; their first steps' jobs are written by one
    statement and their timers added together once it commits. The runs, in the order of
    ``requests`` (a request whose idempotency key a run already has, or that an earlier request
    of the call used: that run). Starting a hundred runs one ``start_run`` after another takes
    a second or more, so the first have ended before the last begin; these all begin at once."""
    requests = list(requests)
    if not all(isinstance(r, RunRequest) for r in requests):
        raise WorkflowError("start_runs takes RunRequest items (workflows.engine.RunRequest)")
    if len(requests) > MAX_RUNS_PER_START:
        raise WorkflowError(f"start_runs starts at most {MAX_RUNS_PER_START} runs a call, "
                            f"not {len(requests)}: split the requests")
    if not requests:
        return []
    tenant_id = _tenant_id(tenant)
    with transaction.atomic():
        keys = {r.idempotency_key for r in requests if r.idempotency_key is not None}
        by_key = ({run.idempotency_key: run for run in WorkflowRun.objects.filter(
            tenant_id=tenant_id, idempotency_key__in=keys)} if keys else {})
        # One look-up per workflow and version asked for; WorkflowNotFound before any write.
        stored = {pair: _version(tenant_id, *pair)
                  for pair in dict.fromkeys((r.name, r.version) for r in requests)}
        _lock_admissions(tenant_id, {r.name for r in requests})  # in one order: no deadlock
        active = dict(WorkflowRun.objects.filter(
            tenant_id=tenant_id, name__in={r.name for r in requests},
            status__in=ACTIVE_RUN_STATUSES).values_list("name").annotate(n=Count("run_id"))
            .order_by())
        now = now_ms()
        runs: list[WorkflowRun] = []
        new: list[tuple[WorkflowRun, WorkflowDefinition, RunState, Any]] = []
        for request in requests:
            if request.idempotency_key in by_key:
                runs.append(by_key[request.idempotency_key])
                continue
            version = stored[(request.name, request.version)]
            definition = definition_of(version)
            run, state, waiting = _new_run(tenant_id, version, definition, request, by=by,
                                           now=now, active=active.get(request.name, 0))
            if waiting is None:
                active[request.name] = active.get(request.name, 0) + 1
            if request.idempotency_key is not None:
                by_key[request.idempotency_key] = run
            runs.append(run)
            new.append((run, definition, state, waiting))
        WorkflowRun.objects.bulk_create([run for run, *_ in new])
        audits = [_run_audit(run, audit.WORKFLOW_RUN_STARTED, by, _started_message(run, waiting))
                  for run, _, _, waiting in new]
        _carry_out_many([(run, definition, [evaluate(definition, state, RunStarted(),
                                                     now_ms=now)])
                         for run, definition, state, waiting in new if waiting is None],
                        audits=audits)
    return runs


def _new_run(tenant_id: uuid.UUID, stored: WorkflowDefinitionVersion,
             definition: WorkflowDefinition, request: RunRequest, *, by: str, now: int,
             active: int, parent_run_id: uuid.UUID | None = None, parent_step: str = "",
             ) -> tuple[WorkflowRun, RunState, Reason | None]:
    """A new run of ``request`` (not saved), its first state, and why it waits QUEUED (None:
    it starts now), given the ``active`` runs of its workflow (the caller holds the admission
    lock of its name)."""
    state = RunState.new(definition, request.run_input, now_ms=now)
    run = WorkflowRun(
        tenant_id=tenant_id, definition=stored, name=request.name, input=request.run_input,
        state=state_to_json(state), idempotency_key=request.idempotency_key,
        queue=request.queue or get_config().default_queue, created_by=by,
        parent_run_id=parent_run_id, parent_step=parent_step,
        status=WorkflowRunStatus.RUNNING, started_at=ms_to_datetime(now),
        deadline_at=None if state.deadline_ms is None else ms_to_datetime(state.deadline_ms),
    )
    waiting = admission(definition, active)
    if waiting is not None:
        run.status, run.reason, run.started_at = WorkflowRunStatus.QUEUED, \
            reason_to_json(waiting), None
    return run, state, waiting


def _started_message(run: WorkflowRun, waiting: Reason | None) -> str:
    return (f"Workflow run {run.run_id} of {run.name} v{run.definition.version} "
            + ("queued: " + waiting.text if waiting else "started"))


def _version(tenant_id: uuid.UUID, name: str, version: int | None) -> WorkflowDefinitionVersion:
    versions = WorkflowDefinitionVersion.objects.filter(tenant_id=tenant_id, name=name)
    stored = (versions.order_by("-version").first() if version is None
              else versions.filter(version=version).first())
    if stored is None:
        what = f"workflow {name!r}" + ("" if version is None else f" version {version}")
        raise WorkflowNotFound(f"no {what} for this tenant")
    return stored


def _runs_for_update(*, skip_locked: bool = False):
    """Runs to lock, with their definition version (its spec left to :func:`definition_of`)."""
    return (WorkflowRun.objects.select_for_update(skip_locked=skip_locked, of=("self",))
            .select_related("definition").defer("definition__spec"))


def _locked_run(run_id: uuid.UUID | str, tenant_id: uuid.UUID | None) -> WorkflowRun:
    runs = _runs_for_update()
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    run = runs.filter(run_id=run_id).first()
    if run is None:
        raise WorkflowNotFound(f"no workflow run {run_id} for this tenant")
    return run


def cancel_run(run_id: uuid.UUID | str, *, tenant: Tenant | uuid.UUID | str,
               by: str = "") -> WorkflowRun:
    """Cancel a run: steps not started never start, running ones are stopped (the job
    cancellation's soft-then-hard stop); the run ends CANCELLED once they have. Cancelling a
    run that is stopping or has ended changes nothing."""
    with transaction.atomic():
        run = _locked_run(run_id, _tenant_id(tenant))
        if run.status == WorkflowRunStatus.QUEUED:
            run.status, run.finished_at = WorkflowRunStatus.CANCELLED, timezone.now()
            run.reason = {"code": "cancelled", "text": f"cancelled by {by or 'unknown'} "
                          "before it started", "details": {}}
            run.save(update_fields=["status", "finished_at", "reason"])
            _audit_run(run, audit.WORKFLOW_RUN_CANCEL_REQUESTED, by, "Workflow run cancelled")
            _end_parent_steps([run])
            return run
        if run.status not in ACTIVE_RUN_STATUSES:
            return run
        definition = definition_of(run.definition)
        evaluations = _evaluate_after_starts(run, definition, CancelRequested(requested_by=by))
        _audit_run(run, audit.WORKFLOW_RUN_CANCEL_REQUESTED, by,
                   f"Workflow run {run.run_id} cancelled by {by or 'unknown'}")
        _carry_out(run, definition, evaluations, actor=by)
    return run


def _evaluate_after_starts(run: WorkflowRun, definition: WorkflowDefinition,
                           event: Event) -> list[Evaluation]:
    """Evaluate ``event`` once the run's state knows which of its READY steps a worker has
    started: the engine hears of ends only, and stopping a run must tell a step that runs (stop
    it, then wait for its end) from one that has not started (cancel it now)."""
    chain = EvaluationChain(_parsed_states.of(run))
    now = now_ms()
    for started in _started_steps(run, chain.state):
        try:
            evaluation = evaluate(definition, chain.state, started, now_ms=now)
        except InvalidEvent:
            continue
        chain.add(evaluation)
    chain.add(evaluate(definition, chain.state, event, now_ms=now))
    return chain.evaluations()


def _refs(state: RunState) -> Iterable[tuple[StepRef, StepState]]:
    for key, step in state.steps.items():
        if step.instances is None:
            yield StepRef(key), step
        else:
            for index, instance in enumerate(step.instances):
                yield StepRef(key, index), instance


def _started_steps(run: WorkflowRun, state: RunState) -> list[StepStarted]:
    ready = {task_job_id(run.run_id, ref, step.attempt): (ref, step.attempt)
             for ref, step in _refs(state) if step.status is StepStatus.READY}
    if not ready:
        return []
    # A step's executions fire after its run began: bounding scheduled_for (the partition
    # key) keeps the look-up to the days since, not every day the table keeps; the margin
    # covers clocks of the processes that stamped the two apart.
    began = (run.started_at or run.created_at) - STEP_CLOCK_MARGIN
    running = Execution.objects.filter(job_id__in=list(ready), scheduled_for__gte=began,
                                       status=ExecutionStatus.RUNNING).values_list("job_id",
                                                                                   flat=True)
    return [StepStarted(ready[job_id][0].key, ready[job_id][1], ready[job_id][0].map_index)
            for job_id in running]


def retry_run(run_id: uuid.UUID | str, *, tenant: Tenant | uuid.UUID | str,
              by: str = "") -> WorkflowRun:
    """Retry a FAILED or TIMED_OUT run from its failures: the failed steps run again, the
    succeeded ones keep their results, and everything downstream is decided again."""
    with transaction.atomic():
        run = _locked_run(run_id, _tenant_id(tenant))
        definition = definition_of(run.definition)
        try:
            evaluation = evaluate(definition, _parsed_states.of(run), RetryFromFailure(),
                                  now_ms=now_ms())
        except InvalidEvent as exc:
            raise RunStateConflict(str(exc)) from None
        run.finished_at = None
        _audit_run(run, audit.WORKFLOW_RUN_RETRIED, by,
                   f"Workflow run {run.run_id} retried from failure by {by or 'unknown'}")
        _carry_out(run, definition, [evaluation], actor=by)
    return run


def check_deadlines(limit: int = DEADLINE_BATCH) -> int:
    """Time out the running runs whose deadline has passed (their running steps are stopped,
    then the run ends TIMED_OUT)."""
    due = list(WorkflowRun.objects.filter(status=WorkflowRunStatus.RUNNING,
                                          deadline_at__lte=timezone.now())
               .values_list("run_id", flat=True)[:limit])
    for run_id in due:
        with transaction.atomic():
            run = (_runs_for_update(skip_locked=True)
                   .filter(run_id=run_id, status=WorkflowRunStatus.RUNNING).first())
            if run is None:
                continue
            definition = definition_of(run.definition)
            _carry_out(run, definition, _evaluate_after_starts(run, definition, DeadlineCheck()))
    return len(due)


# ------------------------------------------------------------------------- applying ends


@dataclass(frozen=True)
class _End:
    end_id: int
    status: str
    result: Any
    error: str
    ref: StepRef
    attempt: int


# The runs with the oldest waiting ends (among the first ``ends``), at most ``runs`` of them,
# locked; those another listener holds are skipped (it applies their ends). The columns are
# WorkflowRun's, in its field order (:func:`_runs_from_rows`).
_RUN_FIELDS = WorkflowRun._meta.concrete_fields
_RUN_COLUMNS = tuple(f.column for f in _RUN_FIELDS)
_LOCK_RUNS_WITH_ENDS_SQL = (
    f"SELECT {', '.join('r.' + c for c in _RUN_COLUMNS)} FROM chrono_workflow_run r "  # nosec B608 # the model's own column names
    "WHERE r.run_id IN (SELECT t.run_id FROM chrono_execution_end e "
    "JOIN chrono_workflow_task t ON t.job_id = e.job_id "
    "WHERE e.watcher = %s ORDER BY e.id LIMIT %s) "
    "ORDER BY r.run_id LIMIT %s FOR UPDATE SKIP LOCKED"
)
# The ends of the locked runs, taken and deleted at once: they are applied in the same
# transaction, so a rollback puts them back. The rows taken are deleted by their ctid (an end
# row is never updated, and the lock holds it): joined by id, PostgreSQL planned a scan of the
# whole table for each row taken, as its statistics of this queue table (empty when last
# analysed) put it at two rows: 3,562 ends of a fan-out took 2.3 s (6.3 M rows read).
_TAKE_ENDS_SQL = """
WITH taken AS (
  SELECT e.ctid AS row FROM chrono_execution_end e
  JOIN chrono_workflow_task t ON t.job_id = e.job_id
  WHERE t.run_id = ANY(%s::uuid[]) AND e.watcher = %s
  FOR UPDATE OF e SKIP LOCKED)
DELETE FROM chrono_execution_end e USING chrono_workflow_task t
WHERE e.ctid = ANY(ARRAY(SELECT row FROM taken)) AND t.job_id = e.job_id
RETURNING e.id, t.run_id, e.status, e.result, e.error, t.step_key, t.map_index, t.attempt
"""
# Runs advanced by one transaction at most: their ends, evaluations and writes are batched
# (one statement per kind for all of them), so a burst of ends costs a few round trips, not a
# few per run.
RUNS_PER_TRANSACTION = 200


def apply_pending_ends(limit: int = APPLY_BATCH) -> int:
    """Apply the ends of step executions that wait, up to about ``limit``; how many were
    applied. Runs another listener holds are left to it (it applies their ends too)."""
    applied = 0
    while True:
        locked, ends = _apply_next_ends(limit)
        applied += ends
        # Fewer runs than a transaction takes, or none of their ends left to take: nothing
        # more waits that this listener may apply now.
        if locked < RUNS_PER_TRANSACTION or not ends or applied >= limit:
            return applied


def _apply_next_ends(limit: int) -> tuple[int, int]:
    """One transaction: lock up to :data:`RUNS_PER_TRANSACTION` runs among those of the
    oldest ``limit`` waiting ends, apply their ends; (runs locked, ends applied).

    Two prepared statements find, lock and take: no query of the ORM, whose compilation of
    the lock (with its definition's join) cost as much as the round trip, and no look-up of
    the waiting runs before the transaction. A step's end waits for this pass alone between
    its worker's commit and its successor's job (``chrono bench workflow``'s ``engine``
    stage)."""
    with transaction.atomic():
        with prepared.cursor() as cursor:
            cursor.execute(_LOCK_RUNS_WITH_ENDS_SQL, [WATCHER, limit, RUNS_PER_TRANSACTION],
                           rows=1)
            runs = {run.run_id: run for run in _runs_from_rows(cursor.fetchall())}
            if not runs:
                return 0, 0
            cursor.execute(_TAKE_ENDS_SQL, [array(runs), WATCHER], rows=len(runs))
            rows = sorted(cursor.fetchall())  # in the order they were written
        if not rows:
            return len(runs), 0
        ends: dict[uuid.UUID, list[_End]] = {}
        for row in rows:
            ends.setdefault(row[1], []).append(
                _End(row[0], row[2], _json(row[3]), row[4] or "", StepRef(row[5], row[6]),
                     row[7]))
        now = now_ms()
        changes = [(runs[run_id], definition_of(runs[run_id].definition),
                    _evaluate_ends(runs[run_id], run_ends, now))
                   for run_id, run_ends in ends.items()]
        _carry_out_many([change for change in changes if change[2]])
    return len(runs), len(rows)


_RUN_ATTNAMES = [f.attname for f in _RUN_FIELDS]
_RUN_DECODED = [i for i, f in enumerate(_RUN_FIELDS) if hasattr(f, "from_db_value")]


def _runs_from_rows(rows: list[tuple]) -> list[WorkflowRun]:
    """Runs built from raw rows of :data:`_RUN_COLUMNS`, their JSON decoded as the ORM
    does, each with its definition version (without its spec) from :func:`_version_of`."""
    runs = []
    for row in rows:
        values = list(row)
        for i in _RUN_DECODED:
            values[i] = _RUN_FIELDS[i].from_db_value(values[i], None, connection)
        run = WorkflowRun.from_db(DEFAULT_DB_ALIAS, _RUN_ATTNAMES, values)
        WorkflowRun.definition.field.set_cached_value(run, _version_of(run.definition_id))
        runs.append(run)
    return runs


# The definition versions the engine met, without their spec (definition_of parses it once).
_versions = _RecentlyUsed(DEFINITION_CACHE_SIZE)


def _version_of(definition_id: uuid.UUID) -> WorkflowDefinitionVersion:
    return _versions.get(definition_id, lambda: WorkflowDefinitionVersion.objects
                         .defer("spec").get(definition_id=definition_id))


def _evaluate_ends(run: WorkflowRun, ends: list[_End], now: int) -> list[Evaluation]:
    definition = definition_of(run.definition)
    chain = EvaluationChain(_parsed_states.of(run))
    for end in ends:
        _apply_in_turn(run, definition, chain, _events_of(chain.state, end), now,
                       f"end of {end.ref} attempt {end.attempt}")
    return chain.evaluations()


def _json(value: Any) -> Any:
    # Django's connection hands jsonb back as text, for its fields to decode.
    return json.loads(value) if isinstance(value, str) else value


def _step_state(state: RunState, ref: StepRef) -> StepState | None:
    step = state.steps.get(ref.key)
    if step is None or ref.map_index is None:
        return step
    if step.instances is None or ref.map_index >= len(step.instances):
        return None
    return step.instances[ref.map_index]


def _events_of(state: RunState, end: _End) -> list[Event]:
    """The evaluator's events for one execution end: the step's start (which the engine does
    not hear of separately) and its end, after its retry came due if it was waiting for it."""
    events: list[Event] = []
    step = _step_state(state, end.ref)
    key, index, attempt = end.ref.key, end.ref.map_index, end.attempt
    if step is not None and step.attempt == attempt and step.status is StepStatus.RETRY_WAIT:
        events.append(RetryDue(key, attempt, index))
        events.append(StepStarted(key, attempt, index))
    elif step is not None and step.attempt == attempt and step.status is StepStatus.READY:
        events.append(StepStarted(key, attempt, index))
    outcome = {"SUCCEEDED": StepStatus.SUCCEEDED, "CANCELLED": StepStatus.CANCELLED}.get(
        end.status, StepStatus.FAILED)
    events.append(StepEnded(
        key, attempt, outcome, result=end.result if outcome is StepStatus.SUCCEEDED else None,
        error_type=error_type_of(end.error) if outcome is StepStatus.FAILED else None,
        error=_error_summary(end.error, end.status) if outcome is StepStatus.FAILED else None,
        map_index=index))
    return events


def error_type_of(error: str) -> str | None:
    """``module.Class`` of the exception whose traceback ``error`` holds (its last line), as the
    retry policy names them (``builtins.ValueError``)."""
    for line in reversed(error.strip().splitlines()):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            name = match.group(1)
            return name if "." in name else f"builtins.{name}"
    return None


def _error_summary(error: str, status: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return last[:500] or f"the execution ended {status}"


# -------------------------------------------------------------------- carrying decisions out


def _carry_out(run: WorkflowRun, definition: WorkflowDefinition,
               evaluations: Sequence[Evaluation], *, actor: str = ENGINE_ACTOR) -> None:
    """:func:`_carry_out_many` for one run."""
    _carry_out_many([(run, definition, evaluations)], actor=actor)


def _carry_out_many(changes: Sequence[tuple[WorkflowRun, WorkflowDefinition,
                                            Sequence[Evaluation]]],
                    *, actor: str = ENGINE_ACTOR, audits: Sequence[AuditRow] = ()) -> None:
    """Write each run's new state and do what its evaluations decided: the step jobs of the
    dispatches and retries, the cancellation of steps to stop, the audit rows (``audits``
    besides); in the caller's transaction (one statement for every run,
    :mod:`workflows.writes`), the timers after its commit."""
    writes = Writes(audits=list(audits))
    now = now_ms()
    ended: list[WorkflowRun] = []
    for run, definition, evaluations in changes:
        evaluations = _settle_children(run, definition, evaluations, writes, actor)
        state = evaluations[-1].state
        jobs = [(d, now) for e in evaluations for d in e.dispatches]
        for retry in (r for e in evaluations for r in e.retries):
            jobs += [(d, retry.retry_at_ms) for d in _retry_dispatches(definition, state, retry)]
        _step_jobs(run, jobs, writes)
        _stop_steps(run, evaluations, actor)
        writes.audits += _transition_audits(run, evaluations, actor)
        was_active = run.status in ACTIVE_RUN_STATUSES
        run.state = state_to_json(state)
        run.status = WorkflowRunStatus(str(state.status))
        run.reason = reason_to_json(state.reason)
        run.state_version += 1
        transaction.on_commit(partial(_parsed_states.keep, run.run_id, run.state_version,
                                      state))
        if state.status.is_terminal and run.finished_at is None:
            run.finished_at = timezone.now()
        writes.runs.append(RunRow(run.run_id, run.state, run.status, run.reason,
                                  run.state_version, run.finished_at))
        if state.status.is_terminal and was_active:
            ended.append(run)
            writes.audits.append(_run_audit(
                run, audit.WORKFLOW_RUN_ENDED, ENGINE_ACTOR,
                f"Workflow run {run.run_id} of {run.name} ended {run.status}"))
    write(writes, watcher=WATCHER)
    if writes.jobs:
        timers, announce_before = writes.timers(), job_writer.announce_before_ms()
        transaction.on_commit(lambda: job_writer.add_timers(timers, announce_before))
    _end_parent_steps(ended)
    _admit_queued(ended)


def _retry_dispatches(definition: WorkflowDefinition, state: RunState, retry) -> tuple:
    """The dispatch the retry's attempt will make, worked out now so that its job can wait for
    the retry time in the timer store; the run's state keeps the step in RETRY_WAIT."""
    ref = retry.ref
    try:
        return evaluate(definition, state, RetryDue(ref.key, retry.attempt, ref.map_index),
                        now_ms=retry.retry_at_ms).dispatches
    except InvalidEvent:
        return ()


def _step_jobs(run: WorkflowRun, jobs: Iterable[tuple[Dispatch, int]], writes: Writes) -> None:
    name_prefix = f"workflow {run.name} {str(run.run_id)[:8]} "
    fire_at: dict[int, datetime] = {}  # the jobs of one batch share a few fire times
    for dispatch, fire_ms in jobs:
        if dispatch.task is None or (dispatch.ref, dispatch.attempt) in writes.refused:
            continue
        job_id = task_job_id(run.run_id, dispatch.ref, dispatch.attempt)
        soft_ms = None if dispatch.timeout_s is None else int(dispatch.timeout_s * 1000)
        if fire_ms not in fire_at:
            fire_at[fire_ms] = ms_to_datetime(fire_ms)
        writes.jobs.append(StepJob(
            job_id, run.tenant_id, f"{name_prefix}{dispatch.ref} #{dispatch.attempt}",
            dispatch.task, fire_at[fire_ms], soft_ms,
            None if soft_ms is None else soft_ms + HARD_TIMEOUT_GRACE_MS,
            list(dispatch.args), dict(dispatch.kwargs), dispatch.queue or run.queue))
        writes.tasks.append(TaskRow(job_id, run.run_id, dispatch.ref.key,
                                    dispatch.ref.map_index, dispatch.attempt))


def _stop_steps(run: WorkflowRun, evaluations: Sequence[Evaluation], actor: str) -> None:
    """Cancel the jobs of steps the run stops: running ones (their workers stop them) and those
    the evaluator cancelled before they started (their job may already have fired)."""
    targets = [(s.ref, s.attempt) for e in evaluations for s in e.stops if s.action == "cancel"]
    targets += [(t.ref, t.attempt) for e in evaluations for t in e.transitions
                if t.after is StepStatus.CANCELLED
                and t.before in (StepStatus.READY, StepStatus.RETRY_WAIT)]
    # One batch: a run stopping a 10,000-way fan-out cancels its instances' jobs at once. A
    # target without a job (a sub-workflow step, one that never dispatched) is left out.
    if targets:
        scheduler_api.cancel_many([task_job_id(run.run_id, ref, attempt)
                                   for ref, attempt in targets],
                                  tenant=run.tenant_id, by=actor or ENGINE_ACTOR)


def _transition_audits(run: WorkflowRun, evaluations: Sequence[Evaluation],
                       actor: str) -> list[AuditRow]:
    spec = audit.action(audit.WORKFLOW_STEP_CHANGED)
    now = timezone.now()
    by = audit.current_actor(actor)
    run_id = str(run.run_id)
    rows = []
    for e in evaluations:
        for t in e.transitions:
            step = str(t.ref)
            rows.append(AuditRow(
                run.tenant_id, now, spec.name, spec.outcome,
                task_job_id(run.run_id, t.ref, t.attempt) if t.attempt else None, by,
                f"Workflow run {run_id}: step {step} {t.before} -> {t.after}"
                + (f" ({t.reason.text})" if t.reason else ""),
                # ECS's event.reason is text: the reason's code goes beside it.
                {"run_id": run_id, "workflow": run.name, "step": step, "before": str(t.before),
                 "after": str(t.after), "attempt": t.attempt,
                 "reason": t.reason.text if t.reason else None,
                 "reason_code": t.reason.code if t.reason else None}))
    return rows


def _run_data(run: WorkflowRun) -> dict[str, Any]:
    return {"run_id": str(run.run_id), "workflow": run.name,
            "version": run.definition.version, "status": str(run.status)}


def _audit_run(run: WorkflowRun, action: str, actor: str, message: str) -> None:
    audit.record(action, tenant_id=run.tenant_id, actor=actor, message=message,
                 data=_run_data(run))


def _run_audit(run: WorkflowRun, action: str, actor: str, message: str) -> AuditRow:
    """:func:`_audit_run`'s row, for a batch's one statement."""
    spec = audit.action(action)
    return AuditRow(tenant_id=run.tenant_id, occurred_at=timezone.now(), action=spec.name,
                    outcome=spec.outcome, job_id=None, actor=audit.current_actor(actor),
                    message=message, data=_run_data(run))


def _admit_queued(ended: Sequence[WorkflowRun]) -> None:
    """For each run of ``ended``, start the oldest run of the same workflow that waited for the
    concurrency limit (one query tells which of their workflows have any)."""
    if not ended:
        return
    waiting = set(WorkflowRun.objects.filter(
        status=WorkflowRunStatus.QUEUED, tenant_id__in={run.tenant_id for run in ended},
        name__in={run.name for run in ended}).values_list("tenant_id", "name").distinct())
    for run in ended:
        if (run.tenant_id, run.name) in waiting:
            _admit_one(run)


def _admit_one(finished: WorkflowRun) -> None:
    """Start the oldest run of ``finished``'s workflow that waited for the concurrency limit."""
    queued = (_runs_for_update(skip_locked=True)
              .filter(tenant_id=finished.tenant_id, name=finished.name,
                      status=WorkflowRunStatus.QUEUED).order_by("created_at").first())
    if queued is None:
        return
    definition = definition_of(queued.definition)
    now = now_ms()
    state = RunState.new(definition, queued.input, now_ms=now)
    queued.status, queued.reason = WorkflowRunStatus.RUNNING, None
    queued.started_at = ms_to_datetime(now)
    queued.deadline_at = None if state.deadline_ms is None else ms_to_datetime(state.deadline_ms)
    queued.save(update_fields=["status", "reason", "started_at", "deadline_at"])
    _carry_out(queued, definition, [evaluate(definition, state, RunStarted(), now_ms=now)])


# ---------------------------------------------------------------------------- sub-workflows


def _settle_children(run: WorkflowRun, definition: WorkflowDefinition,
                     evaluations: Sequence[Evaluation], writes: Writes,
                     actor: str) -> list[Evaluation]:
    """Do what the evaluations decided for sub_workflow steps before the run's new state is
    written, since doing it changes that state: stop the children of the steps the run stops
    (their parent-close policy), start a child run for each dispatch. Each adds evaluations:
    the step CANCELLED at once (``terminate``), started (RUNNING: its child exists) or FAILED
    (no such workflow, a cycle), and what those decide next (a failure's successors, the next
    sub_workflow step's dispatch, started in the same pass)."""
    evaluations = list(evaluations)
    stops = [s for e in evaluations for s in e.stops if s.action in CHILD_STOP_ACTIONS]
    dispatches = [d for e in evaluations for d in e.dispatches if _settled_here(run, d)]
    now = now_ms()
    for stop in stops:
        evaluations += _evaluate_all(run, definition, evaluations[-1].state,
                                     _stop_child(run, stop, actor), now)
    while dispatches:
        # Admission takes each child workflow's advisory lock; take them in one order, so two
        # transactions starting children of the same two workflows cannot deadlock.
        _lock_admissions(run.tenant_id, {d.sub_workflow for d in dispatches})
        added: list[Evaluation] = []
        for dispatch in dispatches:
            events = (_start_child(run, dispatch, writes) if dispatch.sub_workflow
                      else _refuse_step(run, dispatch, writes))
            more = _evaluate_all(run, definition, (added or evaluations)[-1].state, events, now)
            added += more
        evaluations += added
        dispatches = [d for e in added for d in e.dispatches if _settled_here(run, d)]
    return evaluations


CHILD_STOP_ACTIONS = ("terminate", "request_cancel")  # abandon: the evaluator ended the step


def _evaluate_all(run: WorkflowRun, definition: WorkflowDefinition, state: RunState,
                  events: Iterable[Event], now: int) -> list[Evaluation]:
    chain = EvaluationChain(state)
    _apply_in_turn(run, definition, chain, events, now, "sub-workflow event")
    return chain.evaluations()


def _apply_in_turn(run: WorkflowRun, definition: WorkflowDefinition, chain: EvaluationChain,
                   events: Iterable[Event], now: int, what: str) -> None:
    """Evaluate ``events`` one after the other onto ``chain``; the first the evaluator refuses
    (a late or repeated end, say) stops them, logged as ``what``."""
    for event in events:
        try:
            evaluation = evaluate(definition, chain.state, event, now_ms=now)
        except InvalidEvent as exc:
            log.info("run %s: %s (%s) not applied: %s", run.run_id, what, event, exc)
            return
        chain.add(evaluation)


def _lock_admissions(tenant_id: uuid.UUID, names: set[str | None]) -> None:
    with connection.cursor() as cursor:
        for name in sorted(n for n in names if n):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                           [f"workflow-run:{tenant_id}:{name}"])


def _start_child(run: WorkflowRun, dispatch: Dispatch, writes: Writes) -> list[Event]:
    """Start the child run of a sub_workflow step's attempt (once: under its idempotency key);
    the events for the step: started, and FAILED at once when the child cannot start."""
    ref, attempt, name = dispatch.ref, dispatch.attempt, str(dispatch.sub_workflow)
    started = StepStarted(ref.key, attempt, ref.map_index)
    cycle = cycle_of(_workflow_chain(run.run_id), name)
    if cycle is not None:
        return [started, _refused(dispatch, CHILD_CYCLE, f"starting workflow {name!r} here "
                                  f"would make a cycle of sub-workflows: {' → '.join(cycle)}")]
    try:
        start_run(name, tenant=run.tenant_id, run_input=dict(dispatch.kwargs),
                  idempotency_key=child_idempotency_key(run.run_id, ref, attempt),
                  queue=dispatch.queue or run.queue, by=ENGINE_ACTOR,
                  parent_run_id=run.run_id, parent_step=parent_step_label(ref, attempt))
    except WorkflowNotFound:
        return [started, _refused(dispatch, CHILD_NOT_FOUND, f"no workflow {name!r} for this "
                                  f"tenant: define it, then retry run {run.run_id}")]
    writes.tasks.append(TaskRow(task_job_id(run.run_id, ref, attempt), run.run_id, ref.key,
                                ref.map_index, attempt))
    return [started]


TASK_NOT_GRANTED = "scheduler.errors.TaskNotGranted"


def _settled_here(run: WorkflowRun, dispatch: Dispatch) -> bool:
    """A dispatch :func:`_settle_children` handles: a sub_workflow step's, or a task step's
    whose task the run's tenant is no longer granted (it fails instead of becoming a job)."""
    if dispatch.sub_workflow:
        return True
    return bool(dispatch.task) and not grants.is_granted(
        run.tenant_id, dispatch.task, dispatch.queue or run.queue)


def _refuse_step(run: WorkflowRun, dispatch: Dispatch, writes: Writes) -> list[Event]:
    """The step of a dispatch whose task is not granted: started and FAILED at once, no job."""
    writes.refused.add((dispatch.ref, dispatch.attempt))
    message = grants.refusal(run.tenant_id, str(dispatch.task), dispatch.queue or run.queue)
    return [StepStarted(dispatch.ref.key, dispatch.attempt, dispatch.ref.map_index),
            _refused(dispatch, TASK_NOT_GRANTED, message or "task not granted")]


def _refused(dispatch: Dispatch, error_type: str, text: str) -> StepEnded:
    return StepEnded(dispatch.ref.key, dispatch.attempt, StepStatus.FAILED,
                     error_type=error_type, error=text, map_index=dispatch.ref.map_index)


_CHAIN_SQL = (
    "WITH RECURSIVE chain(run_id, parent_run_id, name, depth) AS ("
    " SELECT run_id, parent_run_id, name, 0 FROM chrono_workflow_run WHERE run_id = %s"
    " UNION ALL SELECT r.run_id, r.parent_run_id, r.name, c.depth + 1"
    " FROM chrono_workflow_run r JOIN chain c ON r.run_id = c.parent_run_id"
    " WHERE c.depth < %s) "
    "SELECT name FROM chain ORDER BY depth"
)
MAX_CHAIN_DEPTH = 1_000  # a guard against a loop of rows; names repeat long before


def _workflow_chain(run_id: uuid.UUID) -> list[str]:
    """The workflow names of ``run_id``'s run, its parent run, and so on up to the root."""
    with connection.cursor() as cursor:
        cursor.execute(_CHAIN_SQL, [run_id, MAX_CHAIN_DEPTH])
        return [row[0] for row in cursor.fetchall()]


def _stop_child(run: WorkflowRun, stop: StopStep, actor: str) -> list[Event]:
    """Cancel the child run of a sub_workflow step the run stops. ``terminate`` ends the step
    CANCELLED now; ``request_cancel`` leaves it RUNNING until the child's end comes back."""
    child_id = (WorkflowRun.objects.filter(
        tenant_id=run.tenant_id,
        idempotency_key=child_idempotency_key(run.run_id, stop.ref, stop.attempt))
        .values_list("run_id", flat=True).first())
    if child_id is not None:
        cancel_run(child_id, tenant=run.tenant_id,
                   by=f"parent run {run.run_id} ({stop.action}; {actor or ENGINE_ACTOR})")
    if stop.action == "terminate" or child_id is None:
        return [StepEnded(stop.ref.key, stop.attempt, StepStatus.CANCELLED,
                          map_index=stop.ref.map_index)]
    return []


def _end_parent_steps(ended: Iterable[WorkflowRun]) -> None:
    """Write the end of each child run among ``ended`` for its parent's step, as an execution
    end under the step's job id, in the child's final transaction: the parent's listener
    applies it under the parent's lock, in a transaction of its own."""
    rows = []
    for run in ended:
        if run.parent_run_id is None:
            continue
        try:
            ref, attempt = parse_parent_step(run.parent_step)
        except ValueError:
            log.error("run %s: parent step %r unreadable; its parent run %s is not told of its "
                      "end", run.run_id, run.parent_step, run.parent_run_id)
            continue
        outcome = child_outcome(definition_of(run.definition), state_from_json(run.state),
                                run_id=run.run_id, status=run.status,
                                reason_text=(run.reason or {}).get("text", ""))
        rows.append(ExecutionEnd(watcher=WATCHER,
                                 job_id=task_job_id(run.parent_run_id, ref, attempt),
                                 execution_id=run.run_id, status=outcome.status,
                                 result=outcome.result, error=outcome.error))
    if rows:
        ExecutionEnd.objects.bulk_create(rows)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [END_CHANNEL])


def child_runs_of(run: WorkflowRun) -> dict[str, uuid.UUID]:
    """The child runs of ``run``'s sub_workflow steps, by parent step label (``key#attempt``)."""
    return dict(WorkflowRun.objects.filter(tenant_id=run.tenant_id, parent_run_id=run.run_id)
                .values_list("parent_step", "run_id"))


def waiting_of(run: WorkflowRun) -> dict[str, dict]:
    """Why each pending step of ``run`` waits, machine-readable (``code``, ``text``, details)."""
    if run.status == WorkflowRunStatus.QUEUED:
        return {key: run.reason for key in run.state.get("steps", {})}
    reasons = waiting_reasons(definition_of(run.definition), state_from_json(run.state))
    return {key: reason.to_dict() for key, reason in reasons.items()}


# ---------------------------------------------------------------------------------- listener


class EngineListener(threading.Thread):
    """Applies step ends as they are written: wakes on ``chrono_execution_end`` notifications,
    and every ``interval_s`` anyway (ends written while no listener ran, deadlines)."""

    def __init__(self, *, interval_s: float = 1.0) -> None:
        super().__init__(name="chrono-workflow-engine", daemon=True)
        self.interval_s = interval_s
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        backoff_s = 0.5
        while not self._stopped.is_set():
            try:
                self._listen()
                backoff_s = 0.5
            except (DatabaseError, OSError) as exc:
                log.error("workflow engine listener failed, again in %.1f s: %r", backoff_s, exc)
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 10.0)
            finally:
                connection.close()

    def _listen(self) -> None:
        listening = connections.create_connection(DEFAULT_DB_ALIAS)
        try:
            listening.ensure_connection()
            raw = listening.connection
            # The raw connection's errors come out as Django's, which run() retries: a
            # connection broken by a PostgreSQL failover raised psycopg's and ended the thread.
            with listening.wrap_database_errors:
                raw.execute(f"LISTEN {END_CHANNEL}")
            last_deadline_check = 0.0
            while not self._stopped.is_set():
                while apply_pending_ends() >= APPLY_BATCH:
                    pass
                if time.monotonic() - last_deadline_check >= self.interval_s:
                    check_deadlines()
                    last_deadline_check = time.monotonic()
                with listening.wrap_database_errors:
                    for _ in raw.notifies(timeout=self.interval_s, stop_after=1):
                        pass
        finally:
            listening.close()
