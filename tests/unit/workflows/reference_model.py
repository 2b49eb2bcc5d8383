"""A reference model of workflow runs, written from the rules' text, for the property test.

It knows nothing of the evaluator: no events, no attempts in flight, no early firing. It takes
a workflow described as plain data (each step's parents, trigger rule, condition value, and
what its task would do) and repeats one step until nothing changes: a step whose parents have
all been decided (or whose rule is ``always``) gets its final state from the textual
definitions below. Because a decided state never changes, the fixpoint is the run's end.

The rules, as Airflow's documentation words them ("failed" = FAILED or UPSTREAM_FAILED, and
Chrono counts CANCELLED with them):

- all_success: all parents succeeded; else upstream_failed if one failed, else skipped.
- all_failed: all parents failed; else skipped.
- all_done: all parents are done.
- all_skipped: all parents were skipped; else skipped.
- one_success: at least one parent succeeded; else skipped if all were skipped, else
  upstream_failed.
- one_failed: at least one parent failed; else skipped.
- one_done: at least one parent succeeded or (really) failed; else skipped.
- none_failed: no parent failed; else upstream_failed.
- none_failed_min_one_success: no parent failed and one succeeded; upstream_failed if one
  failed; skipped if all were skipped.
- none_skipped: no parent was skipped; else skipped.
- always: runs.

A step that would run is skipped when its condition is false and failed when its condition
cannot be evaluated. A child that a branch did not choose is skipped, unless it is below a child
the branch chose. A map over an empty list is skipped; otherwise it succeeds when every item
succeeds. The run fails when a leaf failed, was upstream_failed or cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SUCCEEDED, FAILED, SKIPPED = "SUCCEEDED", "FAILED", "SKIPPED"
UPSTREAM_FAILED, CANCELLED = "UPSTREAM_FAILED", "CANCELLED"
FAILED_LIKE = {FAILED, UPSTREAM_FAILED, CANCELLED}


@dataclass
class ModelStep:
    key: str
    parents: list[str]
    rule: str = "all_success"
    kind: str = "task"  # task | branch | map
    condition: bool | str | None = None  # True, False, "error" or None (no condition)
    attempts: list[str] = field(default_factory=list)  # what each attempt ends as
    max_attempts: int = 1
    children: list[str] = field(default_factory=list)  # a branch's declared children
    choice: list[str] | str = field(default_factory=list)  # a branch's result; "invalid"
    items: list[list[str]] = field(default_factory=list)  # a map: each item's attempts


def _all(states, allowed):
    return all(s in allowed for s in states)


def _any(states, allowed):
    return any(s in allowed for s in states)


def rule_verdict(rule: str, states: list[str]) -> str:
    """RUN, or the state the step takes instead, from the parents' final states."""
    if rule == "all_success":
        if _all(states, {SUCCEEDED}):
            return "RUN"
        return UPSTREAM_FAILED if _any(states, FAILED_LIKE) else SKIPPED
    if rule == "all_failed":
        return "RUN" if _all(states, FAILED_LIKE) else SKIPPED
    if rule in ("all_done", "always"):
        return "RUN"
    if rule == "all_skipped":
        return "RUN" if _all(states, {SKIPPED}) else SKIPPED
    if rule == "one_success":
        if _any(states, {SUCCEEDED}):
            return "RUN"
        return SKIPPED if _all(states, {SKIPPED}) else UPSTREAM_FAILED
    if rule == "one_failed":
        return "RUN" if _any(states, FAILED_LIKE) else SKIPPED
    if rule == "one_done":
        return "RUN" if _any(states, {SUCCEEDED, FAILED, CANCELLED}) else SKIPPED
    if rule == "none_failed":
        return UPSTREAM_FAILED if _any(states, FAILED_LIKE) else "RUN"
    if rule == "none_failed_min_one_success":
        if _any(states, FAILED_LIKE):
            return UPSTREAM_FAILED
        return SKIPPED if _all(states, {SKIPPED}) else "RUN"
    if rule == "none_skipped":
        return SKIPPED if _any(states, {SKIPPED}) else "RUN"
    raise ValueError(rule)


def final_attempt(attempts: list[str], max_attempts: int) -> str:
    """Failed attempts are retried up to ``max_attempts``; the first other outcome stays."""
    for outcome in attempts[:max_attempts]:
        if outcome != FAILED:
            return outcome
    return FAILED


def _below(key: str, steps: dict[str, ModelStep]) -> set[str]:
    found, todo = set(), [key]
    while todo:
        node = todo.pop()
        for other in steps.values():
            if node in other.parents and other.key not in found:
                found.add(other.key)
                todo.append(other.key)
    return found


def _not_taken(step: ModelStep, steps: dict[str, ModelStep], state: dict[str, str]) -> bool:
    for parent in step.parents:
        branch = steps[parent]
        if branch.kind != "branch" or state[parent] != SUCCEEDED:
            continue
        chosen = [branch.choice] if isinstance(branch.choice, str) else branch.choice
        if step.key not in chosen and not any(step.key in _below(c, steps) for c in chosen):
            return True
    return False


def _run(step: ModelStep) -> str:
    if step.condition is False:
        return SKIPPED
    if step.condition == "error":
        return FAILED
    if step.kind == "map":
        if not step.items:
            return SKIPPED
        ends = [final_attempt(item, step.max_attempts) for item in step.items]
        return SUCCEEDED if all(e == SUCCEEDED for e in ends) else FAILED
    outcome = final_attempt(step.attempts, step.max_attempts)
    if step.kind == "branch" and outcome == SUCCEEDED and step.choice == "invalid":
        return FAILED
    return outcome


def predict(steps: list[ModelStep]) -> tuple[dict[str, str], str]:
    """Every step's final state, and the run's."""
    by_key = {s.key: s for s in steps}
    state: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for step in steps:
            if step.key in state:
                continue
            decided = all(p in state for p in step.parents)
            if not decided and step.rule != "always":
                continue
            if decided and _not_taken(step, by_key, state):
                state[step.key] = SKIPPED
            else:
                verdict = rule_verdict(step.rule, [state.get(p, "") for p in step.parents])
                state[step.key] = _run(step) if verdict == "RUN" else verdict
            changed = True
    leaves = [s.key for s in steps if not any(s.key in o.parents for o in steps)]
    failed = any(state[k] in FAILED_LIKE for k in leaves)
    return state, FAILED if failed else SUCCEEDED
