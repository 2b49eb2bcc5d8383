"""A run's state as the JSON document the run's row keeps, and back.

The pure core's :class:`~workflows.runs.RunState` is what the evaluator reads and returns; the
engine stores it whole on ``chrono_workflow_run.state`` and reads it back under the row's lock.
Every field round-trips (``attempt_offset`` and ``retry_at_ms`` included), so an evaluation made
after a restart decides exactly what one made before it would have.
"""

from __future__ import annotations

from typing import Any

from workflows.runs import Reason, RunState, StepState
from workflows.states import RunStatus, StepStatus


def reason_to_json(reason: Reason | None) -> dict[str, Any] | None:
    if reason is None:
        return None
    return {"code": reason.code, "text": reason.text, "details": dict(reason.details)}


def reason_from_json(data: dict[str, Any] | None) -> Reason | None:
    if data is None:
        return None
    return Reason(data["code"], data["text"], data.get("details") or {})


def step_to_json(step: StepState) -> dict[str, Any]:
    data: dict[str, Any] = {"status": str(step.status), "attempt": step.attempt}
    if step.result is not None:
        data["result"] = step.result
    if step.attempt_offset:
        data["attempt_offset"] = step.attempt_offset
    if step.reason is not None:
        data["reason"] = reason_to_json(step.reason)
    if step.retry_at_ms is not None:
        data["retry_at_ms"] = step.retry_at_ms
    if step.instances is not None:
        data["instances"] = [step_to_json(i) for i in step.instances]
    return data


def step_from_json(data: dict[str, Any]) -> StepState:
    instances = data.get("instances")
    return StepState(
        status=StepStatus(data["status"]),
        result=data.get("result"),
        attempt=data.get("attempt", 0),
        attempt_offset=data.get("attempt_offset", 0),
        reason=reason_from_json(data.get("reason")),
        retry_at_ms=data.get("retry_at_ms"),
        instances=None if instances is None else tuple(step_from_json(i) for i in instances),
    )


def state_to_json(state: RunState) -> dict[str, Any]:
    return {
        "status": str(state.status),
        "input": state.run_input,
        "started_at_ms": state.started_at_ms,
        "deadline_ms": state.deadline_ms,
        "reason": reason_to_json(state.reason),
        "steps": {key: step_to_json(step) for key, step in state.steps.items()},
    }


def state_from_json(data: dict[str, Any]) -> RunState:
    return RunState(
        status=RunStatus(data["status"]),
        run_input=data.get("input"),
        started_at_ms=data["started_at_ms"],
        steps={key: step_from_json(step) for key, step in data["steps"].items()},
        deadline_ms=data.get("deadline_ms"),
        reason=reason_from_json(data.get("reason")),
    )
