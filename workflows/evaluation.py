"""The DAG evaluator: from a run's state and one event, the new state and the decisions.

The engine calls :func:`evaluate` inside the transaction that records the event (DESIGN.md
decision 13): it writes the transitions with conditional updates and their audit rows, inserts
the dispatches under their unique key, and schedules the retries, all in that transaction. The
evaluator is pure: same definition, state, event, ``now_ms`` and random source, same answer.

One evaluation applies the event, then makes a single pass over the steps in topological order,
deciding every PENDING step whose parents allow it (:mod:`workflows.rules`), so a skip or an
upstream failure cascades through the whole DAG in one evaluation. Only steps with a parent
that changed in this evaluation are looked at (every step when the run starts or restarts):
measured here, ~40 µs per event for a 10-step workflow, ~0.3 ms for a 1,000-step chain,
~90 ms to expand a 10,000-item map with its dispatches, ~0.15 ms per map instance event.

A step the trigger rule runs has its condition checked (false: SKIPPED; error: FAILED), then
its arguments resolved (error: FAILED) and it becomes READY with a dispatch; a map step
resolves ``map_over`` and becomes RUNNING with one READY instance per item (an empty list SKIPS
it, as Airflow does; a non-list or one over 10,000 items FAILS it). When every instance has
ended, the map step SUCCEEDED (its result: the instances' results in index order) or FAILED
(the failed indexes in its reason).

**Branches.** A branch step's task returns the children to run: a key, a list of keys, or
null / [] for none; anything else, or a key that is not one of its children, FAILS the branch
step. A child the branch did not choose is SKIPPED (reason ``branch_not_taken``), whatever its
trigger rule — but only once all its parents have ended — unless it is also below a chosen
child: then it is a join of the chosen path and its trigger rule decides, the branch counting
as SUCCEEDED (Airflow's ``skip_all_except`` makes the same exception). The usual join after a
branch is therefore ``none_failed_min_one_success``, as in Airflow's documentation.

**Retries.** A FAILED attempt is retried under the step's retry policy (not while the run is
stopping): the step goes to RETRY_WAIT with ``retry_at_ms = now_ms + delay`` (full jitter drawn
from ``rng``; the policy's upper bound when no ``rng`` is given) and the engine sends
:class:`~workflows.runs.RetryDue` then. Condition, argument and branch-result errors are not
retried: they would fail the same way.

**The run's outcome** is Airflow's leaf rule, once every step has ended: FAILED when a leaf
(a step no other depends on) is FAILED, UPSTREAM_FAILED or CANCELLED, SUCCEEDED otherwise
(every leaf SUCCEEDED or SKIPPED). As in Airflow, a leaf that handles failures (``all_done``,
``one_failed``) and succeeds makes the run SUCCEEDED. A cancelled run ends CANCELLED and a run
past its deadline TIMED_OUT, once their running steps have stopped.

**Why a step waits**: every non-terminal step gets a machine-readable reason in
:attr:`~workflows.runs.Evaluation.waiting` (also from :func:`waiting_reasons` at read time):
``{"code": "waiting_for_parents", "parents": {"load": "RUNNING"}, "text": "waiting for `load`
(RUNNING)"}``, ``queued``, ``retry_wait``, ``waiting_for_instances``, ``stopping``. Steps that
ended carry theirs in ``StepState.reason``: "trigger rule none_failed: `extract` (FAILED)".
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from workflows.arguments import resolve_arguments, resolve_value
from workflows.definitions import MAX_MAP_ITEMS, StepDefinition, StepKind, WorkflowDefinition
from workflows.errors import ArgumentError, InvalidEvent
from workflows.planning import plan_cancellation, plan_retry_from_failure
from workflows.rules import Verdict, decide
from workflows.runs import (
    BranchChoice,
    CancelRequested,
    DeadlineCheck,
    Dispatch,
    Evaluation,
    Event,
    Reason,
    RetryDue,
    RetryFromFailure,
    RetryScheduled,
    RunStarted,
    RunState,
    StepEnded,
    StepRef,
    StepStarted,
    StepState,
    StopStep,
    Transition,
)
from workflows.states import TERMINAL_STEP_STATUSES, RunStatus, StepStatus

_LEAF_FAILURES = frozenset({StepStatus.FAILED, StepStatus.UPSTREAM_FAILED, StepStatus.CANCELLED})


def evaluate(
    definition: WorkflowDefinition,
    state: RunState,
    event: Event,
    *,
    now_ms: int,
    rng: random.Random | None = None,
) -> Evaluation:
    """Apply ``event`` to ``state`` and advance the run as far as it can go now. Raises
    InvalidEvent when the event does not fit the state (a result for a step that is not
    RUNNING, an attempt other than the current one, an unknown step); nothing else escapes."""
    if state.steps.keys() != definition.keys:
        raise InvalidEvent("the run's steps do not match this definition: a run is pinned to "
                           "the version it started with")
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise InvalidEvent(f"not an event: {event!r}")
    run = _RunChange(definition, state, now_ms, rng)
    handler(run, event)
    run.advance()
    return run.evaluation()


class _RunChange:
    """The evaluation under way: the steps as they change, and the decisions taken."""

    def __init__(self, definition: WorkflowDefinition, state: RunState, now_ms: int,
                 rng: random.Random | None) -> None:
        self.definition = definition
        self.state = state
        self.steps = dict(state.steps)
        self.status = state.status
        self.reason = state.reason
        self.deadline_ms = state.deadline_ms
        self.now_ms = now_ms
        self.rng = rng
        self.transitions: list[Transition] = []
        self.dispatches: list[Dispatch] = []
        self.retries: list[RetryScheduled] = []
        self.stops: list[StopStep] = []
        self.choices: list[BranchChoice] = []
        # Steps whose status changed in this evaluation: only their children can be decided
        # anew (a full pass when the run starts or restarts).
        self.changed: set[str] = set()
        self.full_pass = False

    # -- reading and writing states -----------------------------------------------------

    def get(self, ref: StepRef) -> StepState:
        if ref.key not in self.steps:
            raise InvalidEvent(f"unknown step `{ref.key}`")
        step_state = self.steps[ref.key]
        if ref.map_index is None:
            return step_state
        instances = step_state.instances or ()
        if not 0 <= ref.map_index < len(instances):
            raise InvalidEvent(f"step `{ref.key}` has no map instance {ref.map_index}")
        return instances[ref.map_index]

    def set(self, ref: StepRef, new: StepState) -> None:
        old = self.get(ref)
        if ref.map_index is None:
            self.steps[ref.key] = new
        else:
            self.steps[ref.key] = self.steps[ref.key].with_instance(ref.map_index, new)
        if old.status is not new.status:
            self.changed.add(ref.key)
            self.transitions.append(Transition(ref, old.status, new.status, new.attempt,
                                               new.reason))

    def end(self, ref: StepRef, status: StepStatus, reason: Reason | None,
            result: Any = None) -> None:
        self.set(ref, replace(self.get(ref), status=status, reason=reason, result=result,
                              retry_at_ms=None))

    def snapshot(self) -> RunState:
        return self.state.with_steps(self.steps, status=self.status, reason=self.reason,
                                     deadline_ms=self.deadline_ms)

    def evaluation(self) -> Evaluation:
        state = self.snapshot()
        return Evaluation(
            state=state,
            transitions=tuple(self.transitions),
            dispatches=tuple(self.dispatches),
            retries=tuple(self.retries),
            stops=tuple(self.stops),
            branch_choices=tuple(self.choices),
            definition=self.definition,
        )

    # -- advancing ------------------------------------------------------------------------

    def advance(self) -> None:
        """One pass in topological order: a step is looked at when a parent (or, for a map,
        an instance) changed, so a cascade reaches the bottom of the DAG in this pass."""
        for key in self.definition.order:
            step_state = self.steps[key]
            if step_state.status is StepStatus.PENDING and self.status is RunStatus.RUNNING:
                if self.full_pass or not self.changed.isdisjoint(
                        self.definition.step(key).parents):
                    self.decide(key)
            elif step_state.instances is not None and step_state.status is StepStatus.RUNNING \
                    and key in self.changed:
                self.aggregate(key)
        if all(s.status in TERMINAL_STEP_STATUSES for s in self.steps.values()):
            self.finish()

    def decide(self, key: str) -> None:
        step = self.definition.step(key)
        parents = {p: self.steps[p].status for p in step.parents}
        if self._held_by_branch(step):
            return
        not_taken = [p for p in step.parents if self.not_taken_by(p, key)]
        if not_taken:
            if all(s.is_terminal for s in parents.values()):
                self.end(StepRef(key), StepStatus.SKIPPED, self._not_taken_reason(not_taken[0]))
            return
        decision = decide(step.trigger_rule, parents)
        if decision.verdict is Verdict.RUN:
            self.start(step)
        elif decision.verdict is not Verdict.WAIT:
            status = (StepStatus.SKIPPED if decision.verdict is Verdict.SKIP
                      else StepStatus.UPSTREAM_FAILED)
            self.end(StepRef(key), status, Reason(
                "trigger_rule", decision.text,
                {"rule": str(step.trigger_rule), "parents": _names(decision.deciding)}))

    def _held_by_branch(self, step: StepDefinition) -> bool:
        """Whether a branch parent is still open: then nothing is decided early."""
        return any(self.definition.step(p).kind is StepKind.BRANCH
                   and not self.steps[p].status.is_terminal for p in step.parents)

    def not_taken_by(self, parent: str, key: str) -> bool:
        """Whether branch ``parent`` ended without choosing ``key`` or a step above it."""
        if self.definition.step(parent).kind is not StepKind.BRANCH:
            return False
        if self.steps[parent].status is not StepStatus.SUCCEEDED:
            return False
        chosen = _chosen_children(self.steps[parent].result)
        return key not in chosen and not any(
            key in self.definition.descendants_of(c) for c in chosen)

    def _not_taken_reason(self, branch: str) -> Reason:
        chosen = list(_chosen_children(self.steps[branch].result))
        listed = ", ".join(f"`{c}`" for c in chosen) or "no child"
        return Reason("branch_not_taken", f"branch `{branch}` chose {listed}",
                      {"branch": branch, "chosen": chosen})

    def aggregate(self, key: str) -> None:
        if self.steps[key].open_instances:
            return
        instances = self.steps[key].instances or ()
        results = [i.result if i.status is StepStatus.SUCCEEDED else None for i in instances]
        failed = [n for n, i in enumerate(instances) if i.status is not StepStatus.SUCCEEDED]
        if not failed:
            self.end(StepRef(key), StepStatus.SUCCEEDED, None, results)
            return
        cancelled = all(instances[n].status is StepStatus.CANCELLED for n in failed)
        status = StepStatus.CANCELLED if cancelled else StepStatus.FAILED
        shown = ", ".join(map(str, failed[:10])) + (", ..." if len(failed) > 10 else "")
        self.end(StepRef(key), status, Reason(
            "map_failed", f"{len(failed)} of {len(instances)} items did not succeed: "
                          f"indexes {shown}", {"failed_indexes": failed[:1000],
                                               "failed": len(failed)}), results)

    def finish(self) -> None:
        if self.status is RunStatus.CANCELLING:
            self.status = RunStatus.CANCELLED
        elif self.status is RunStatus.TIMING_OUT:
            self.status = RunStatus.TIMED_OUT
        elif self.status is RunStatus.RUNNING:
            failed = {k: self.steps[k].status for k in self.definition.leaves
                      if self.steps[k].status in _LEAF_FAILURES}
            self.status = RunStatus.FAILED if failed else RunStatus.SUCCEEDED
            self.reason = Reason("leaf_failed", ", ".join(
                f"`{k}` {s}" for k, s in failed.items()), {"steps": _names(failed)}) \
                if failed else None

    # -- starting steps -------------------------------------------------------------------

    def start(self, step: StepDefinition) -> None:
        ref = StepRef(step.key)
        if step.condition is not None:
            verdict = step.condition.evaluate(self.state.run_input, self.steps)
            if verdict.error:
                self.end(ref, StepStatus.FAILED, Reason("condition_error", verdict.error))
                return
            if not verdict.passed:
                self.end(ref, StepStatus.SKIPPED, Reason(
                    "condition_false", f"condition `{step.condition.source}` is false"))
                return
        if step.kind is StepKind.MAP:
            self.expand(step)
        else:
            self.make_ready(step, ref, self.get(ref))

    def make_ready(self, step: StepDefinition, ref: StepRef, step_state: StepState,
                   item: Any = None, *, attempt: int | None = None) -> None:
        """Resolve the arguments and dispatch ``attempt`` (by default the next one)."""
        new, dispatch = self.prepare(step, ref, step_state, item, attempt)
        self.set(ref, new)
        if dispatch is not None:
            self.dispatches.append(dispatch)

    def prepare(self, step: StepDefinition, ref: StepRef, step_state: StepState, item: Any,
                attempt: int | None) -> tuple[StepState, Dispatch | None]:
        """The READY state and its dispatch, or the FAILED state when an argument cannot be
        resolved."""
        try:
            resolved = resolve_arguments(
                step, self.state.run_input, self.steps,
                **({"map_item": item, "map_index": ref.map_index}
                   if ref.map_index is not None else {}))
        except ArgumentError as e:
            return replace(step_state, status=StepStatus.FAILED, result=None, retry_at_ms=None,
                           reason=Reason("argument_error", f"argument {e.path}: {e.message}",
                                         {"argument": e.path})), None
        attempt = step_state.attempt + 1 if attempt is None else attempt
        ready = replace(step_state, status=StepStatus.READY, attempt=attempt, reason=None,
                        retry_at_ms=None, result=None)
        return ready, Dispatch(
            ref=ref, attempt=attempt, task=step.task, args=resolved.args,
            kwargs=resolved.kwargs, queue=step.queue, timeout_s=step.timeout_s,
            sub_workflow=step.sub_workflow)

    def map_items(self, step: StepDefinition) -> tuple[list[Any] | None, Reason | None]:
        """The list a map step fans out over, or why it cannot."""
        try:
            items = resolve_value(step.map_over_template, self.state.run_input, self.steps,
                                  "map_over")
        except ArgumentError as e:
            return None, Reason("argument_error", f"map_over: {e.message}")
        where = step.map_over if isinstance(step.map_over, str) else "the literal list"
        if not isinstance(items, list | tuple):
            return None, Reason("map_not_a_list", f"map_over `{where}` is "
                                                  f"{type(items).__name__}, not a list")
        if len(items) > MAX_MAP_ITEMS:
            return None, Reason("map_too_large", f"map_over `{where}` has {len(items):,} "
                                                 f"items; the limit is {MAX_MAP_ITEMS:,}")
        return list(items), None

    def expand(self, step: StepDefinition) -> None:
        ref = StepRef(step.key)
        items, problem = self.map_items(step)
        if problem is not None or items is None:
            self.end(ref, StepStatus.FAILED, problem)
            return
        if not items:
            self.end(ref, StepStatus.SKIPPED, Reason("map_empty", "map over an empty list"))
            return
        old = self.steps[step.key]
        # Instance attempts start above every attempt this step's instances ever had (the map
        # step's attempt keeps that high-water mark), so a late result of an instance from
        # before a retry from failure stays fenced out.
        base = old.attempt
        fresh = StepState(attempt=base, attempt_offset=base)
        instances, transitions = [], []
        for index, item in enumerate(items):
            instance = StepRef(step.key, index)
            new, dispatch = self.prepare(step, instance, fresh, item, None)
            instances.append(new)
            transitions.append(Transition(instance, fresh.status, new.status, new.attempt,
                                          new.reason))
            if dispatch is not None:
                self.dispatches.append(dispatch)
        self.set(ref, replace(old, status=StepStatus.RUNNING, attempt=base + 1,
                              instances=tuple(instances), reason=None))
        self.transitions.extend(transitions)

    # -- stopping -------------------------------------------------------------------------

    def begin_stop(self, status: RunStatus, reason: Reason) -> None:
        self.status, self.reason = status, reason
        plan = plan_cancellation(self.definition, self.snapshot())
        for ref in plan.cancel:
            self.end(ref, StepStatus.CANCELLED, reason)
        for stop in plan.stop:
            self.stops.append(stop)
            if stop.action == "abandon":
                self.end(stop.ref, StepStatus.CANCELLED, Reason(
                    "abandoned", "the sub-workflow's run was left running "
                                 "(parent_close_policy abandon)"))


def _chosen_children(result: Any) -> tuple[str, ...]:
    if result is None:
        return ()
    if isinstance(result, str):
        return (result,)
    return tuple(dict.fromkeys(result))


def _names(states: dict[str, StepStatus] | Any) -> dict[str, str]:
    return {k: str(s) for k, s in states.items()}


# -- event handlers ------------------------------------------------------------------------


def _expect(run: _RunChange, ref: StepRef, status: StepStatus, attempt: int) -> StepState:
    step_state = run.get(ref)
    if step_state.status is not status or step_state.attempt != attempt:
        raise InvalidEvent(f"step `{ref}` is {step_state.status} at attempt "
                           f"{step_state.attempt}, not {status} at attempt {attempt}")
    return step_state


def _on_run_started(run: _RunChange, event: RunStarted) -> None:
    if run.status is not RunStatus.RUNNING:
        raise InvalidEvent(f"the run is {run.status}")
    run.full_pass = True


def _on_step_started(run: _RunChange, event: StepStarted) -> None:
    ref = StepRef(event.key, event.map_index)
    step_state = _expect(run, ref, StepStatus.READY, event.attempt)
    run.set(ref, replace(step_state, status=StepStatus.RUNNING))


def _on_retry_due(run: _RunChange, event: RetryDue) -> None:
    ref = StepRef(event.key, event.map_index)
    step_state = _expect(run, ref, StepStatus.RETRY_WAIT, event.attempt)
    step = run.definition.step(event.key)
    item = None
    if ref.map_index is not None:
        items, _ = run.map_items(step)
        item = (items or [None] * (ref.map_index + 1))[ref.map_index]
    run.make_ready(step, ref, step_state, item, attempt=step_state.attempt)


def _on_step_ended(run: _RunChange, event: StepEnded) -> None:
    ref = StepRef(event.key, event.map_index)
    step_state = _expect(run, ref, StepStatus.RUNNING, event.attempt)
    step = run.definition.step(event.key)
    try:
        outcome = StepStatus(event.outcome)
    except ValueError:
        raise InvalidEvent(f"unknown outcome {event.outcome!r} (step `{ref}`)") from None
    if outcome is StepStatus.SUCCEEDED:
        _succeed(run, ref, step, event.result)
    elif outcome is StepStatus.FAILED:
        _fail(run, ref, step, step_state, event)
    elif outcome is StepStatus.CANCELLED:
        run.end(ref, StepStatus.CANCELLED, Reason("cancelled", "the attempt was cancelled"))
    elif outcome is StepStatus.SKIPPED and ref.map_index is None:
        run.end(ref, StepStatus.SKIPPED, Reason("task_skipped", "the task skipped itself"))
    else:
        raise InvalidEvent(f"an attempt cannot end {outcome} (step `{ref}`)")


def _succeed(run: _RunChange, ref: StepRef, step: StepDefinition, result: Any) -> None:
    if step.kind is not StepKind.BRANCH:
        run.end(ref, StepStatus.SUCCEEDED, None, result)
        return
    problem = _branch_result_problem(step, result)
    if problem:
        run.end(ref, StepStatus.FAILED, Reason("branch_result_invalid", problem))
        return
    chosen = _chosen_children(result)
    run.end(ref, StepStatus.SUCCEEDED, None, result)
    run.choices.append(BranchChoice(step.key, chosen,
                                    tuple(c for c in step.children if c not in chosen)))


def _branch_result_problem(step: StepDefinition, result: Any) -> str | None:
    children = ", ".join(f"`{c}`" for c in step.children)
    if result is not None and not isinstance(result, str) and not (
            isinstance(result, list) and all(isinstance(c, str) for c in result)):
        return (f"branch `{step.key}` returned {type(result).__name__}; it must name the "
                f"children to run: a key, a list of keys, or null ({children})")
    strangers = [c for c in _chosen_children(result) if c not in step.children]
    if strangers:
        return (f"branch `{step.key}` chose `{strangers[0]}`, which is not one of its "
                f"children ({children})")
    return None


def _fail(run: _RunChange, ref: StepRef, step: StepDefinition, step_state: StepState,
          event: StepEnded) -> None:
    error_type = event.error_type or ""
    tried = step_state.attempt - step_state.attempt_offset
    described = ": ".join(x for x in (event.error_type, event.error) if x) or "the task failed"
    if run.status is RunStatus.RUNNING and step.retry.should_retry(
            failed_attempt=tried, error_type=error_type):
        _schedule_retry(run, ref, step, step_state, described)
        return
    run.end(ref, StepStatus.FAILED, Reason(
        "task_failed", described, {"error_type": event.error_type, "attempts": tried}))


def _schedule_retry(run: _RunChange, ref: StepRef, step: StepDefinition,
                    step_state: StepState, described: str) -> None:
    tried = step_state.attempt - step_state.attempt_offset
    policy = step.retry
    delay = (policy.delay_ms(tried + 1, run.rng) if run.rng is not None
             else policy.delay_bound_ms(tried + 1))
    retry_at_ms = run.now_ms + delay
    attempt = step_state.attempt + 1
    reason = Reason("retry_wait", f"attempt {tried} of {policy.max_attempts} failed "
                                  f"({described}); the next is due at {retry_at_ms}",
                    {"attempt": attempt, "retry_at_ms": retry_at_ms})
    run.set(ref, replace(step_state, status=StepStatus.RETRY_WAIT, attempt=attempt,
                         retry_at_ms=retry_at_ms, reason=reason))
    run.retries.append(RetryScheduled(ref, attempt, retry_at_ms))


def _on_cancel(run: _RunChange, event: CancelRequested) -> None:
    if run.status.is_stopping:
        return  # cancelling twice is cancelling once
    if run.status is not RunStatus.RUNNING:
        raise InvalidEvent(f"the run is {run.status}: there is nothing to cancel")
    by = f" by {event.requested_by}" if event.requested_by else ""
    run.begin_stop(RunStatus.CANCELLING, Reason("cancelled", f"the run was cancelled{by}"))


def _on_deadline(run: _RunChange, event: DeadlineCheck) -> None:
    if run.status is not RunStatus.RUNNING or run.deadline_ms is None:
        return
    if run.now_ms >= run.deadline_ms:
        timeout = run.definition.run_timeout_s
        run.begin_stop(RunStatus.TIMING_OUT, Reason(
            "run_timeout", f"the run timeout of {timeout} s was reached",
            {"deadline_ms": run.deadline_ms}))


def _on_retry_from_failure(run: _RunChange, event: RetryFromFailure) -> None:
    plan = plan_retry_from_failure(run.definition, run.snapshot())
    run.status, run.reason, run.full_pass = RunStatus.RUNNING, None, True
    timeout = run.definition.run_timeout_s
    run.deadline_ms = run.now_ms + int(timeout * 1000) if timeout else None
    for key in plan.reset:
        old = run.steps[key]
        attempt = max([old.attempt] + [i.attempt for i in old.instances or ()])
        run.set(StepRef(key), StepState(attempt=attempt, attempt_offset=attempt))
    for key, indexes in plan.rerun_instances.items():
        _rerun_instances(run, key, indexes)


def _rerun_instances(run: _RunChange, key: str, indexes: tuple[int, ...]) -> None:
    step = run.definition.step(key)
    items, _ = run.map_items(step)
    old = run.steps[key]
    run.set(StepRef(key), replace(old, status=StepStatus.RUNNING, reason=None))
    for index in indexes:
        ref = StepRef(key, index)
        instance = run.get(ref)
        fresh = StepState(attempt=instance.attempt, attempt_offset=instance.attempt)
        run.set(ref, fresh)
        run.make_ready(step, ref, fresh, (items or [])[index] if items else None)


_HANDLERS: dict[type, Callable[[_RunChange, Any], None]] = {
    RunStarted: _on_run_started,
    StepStarted: _on_step_started,
    StepEnded: _on_step_ended,
    RetryDue: _on_retry_due,
    CancelRequested: _on_cancel,
    DeadlineCheck: _on_deadline,
    RetryFromFailure: _on_retry_from_failure,
}


# -- why a step waits -------------------------------------------------------------------------


def waiting_reasons(definition: WorkflowDefinition, state: RunState) -> dict[str, Reason]:
    """A reason for every step that has not ended: why it is not running (yet)."""
    reasons = {}
    for key in definition.order:
        reason = _waiting_reason(definition, state, key)
        if reason is not None:
            reasons[key] = reason
    return reasons


def _waiting_reason(definition: WorkflowDefinition, state: RunState, key: str
                    ) -> Reason | None:
    step_state = state.steps[key]
    status = step_state.status
    if status is StepStatus.RUNNING and state.status.is_stopping:
        return Reason("stopping", "the run is stopping; waiting for this attempt to stop")
    if status is StepStatus.PENDING:
        return _parents_reason(definition, state, key)
    if status is StepStatus.READY:
        return Reason("queued", f"ready (attempt {step_state.attempt}); waiting for a worker",
                      {"attempt": step_state.attempt})
    if status is StepStatus.RETRY_WAIT:
        return step_state.reason or Reason("retry_wait", "waiting to retry",
                                           {"retry_at_ms": step_state.retry_at_ms})
    if status is StepStatus.RUNNING and step_state.instances is not None:
        done = sum(i.status.is_terminal for i in step_state.instances)
        total = len(step_state.instances)
        return Reason("waiting_for_instances", f"{done} of {total} items done",
                      {"done": done, "total": total})
    return None


def _parents_reason(definition: WorkflowDefinition, state: RunState, key: str) -> Reason:
    step = definition.step(key)
    parents = {p: state.steps[p].status for p in step.parents}
    decision = decide(step.trigger_rule, parents)
    waiting = decision.waiting_for or {p: s for p, s in parents.items() if not s.is_terminal}
    if not waiting:
        return Reason("waiting_for_evaluation", "waiting for the run to be evaluated")
    text = "waiting for " + ", ".join(f"`{k}` ({s})" for k, s in waiting.items())
    return Reason("waiting_for_parents", text, {"parents": _names(waiting),
                                                "rule": str(step.trigger_rule)})
