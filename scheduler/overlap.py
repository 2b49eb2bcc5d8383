"""What a cron job's occurrence does while an earlier one still waits or runs: the overlap policy.

Pure functions, like their sibling :mod:`scheduler.misfire`; the beat looks up the earlier
occurrences that are still in flight (one query per claimed batch) and applies the decision:

``allow``            the occurrence fires, whatever else runs;
``skip`` (default)   it is recorded ``SKIPPED`` with the reason, and the job moves on to its next
                     occurrence;
``buffer_one``       while the earlier one runs and nothing else waits, the occurrence waits:
                     it is looked at again after ``RECHECK_MS``, or at the job's next
                     occurrence if that comes first (which is then the one waiting), and fires
                     once the earlier one ended; an occurrence that finds one already waiting
                     is skipped;
``cancel_previous``  it fires, and the earlier ones are cancelled (a running one is asked to
                     stop).

One-time jobs have no overlap policy: their one occurrence fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# How long an occurrence held back by ``buffer_one`` waits before it is looked at again.
RECHECK_MS = 1_000
RUNNING = "RUNNING"  # the execution status of an occurrence that runs (the others wait)


class OverlapPolicy(StrEnum):
    """The policies, as ``chrono_job.overlap_policy`` stores them (the same values as the
    model's choices, :class:`scheduler.models.OverlapPolicy`)."""

    ALLOW = "allow"
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    CANCEL_PREVIOUS = "cancel_previous"


class OverlapAction(StrEnum):
    FIRE = "fire"
    FIRE_AND_CANCEL_PREVIOUS = "fire_and_cancel_previous"
    HOLD = "hold"  # publish nothing now; look again at ``next_ms``
    SKIP = "skip"  # record the occurrence SKIPPED with ``reason``


@dataclass(frozen=True, slots=True)
class OverlapDecision:
    """What to do with one occurrence, and the job's next fire time after it (``next_ms``:
    unchanged, but for :attr:`OverlapAction.HOLD`, when it is looked at again)."""

    action: OverlapAction
    next_ms: int | None
    reason: str = ""


SKIP_REASON = "the previous occurrence is still running (overlap policy skip)"
BUFFER_FULL_REASON = "an occurrence is already waiting (overlap policy buffer_one)"


def is_guarded(policy: str, *, recurring: bool) -> bool:
    """Whether an occurrence's earlier ones must be looked up before it fires: a cron job's,
    under any policy but ``allow``."""
    return recurring and policy != OverlapPolicy.ALLOW


def decide(
    policy: str, previous_statuses: Iterable[str], *, next_ms: int | None, now_ms: int
) -> OverlapDecision:
    """The decision for an occurrence of a job under ``policy`` whose earlier occurrences
    have ``previous_statuses`` (of the ones in flight; none: nothing in the way), given the
    job's next fire time ``next_ms`` (None: none)."""
    statuses = set(previous_statuses)
    if not statuses or policy == OverlapPolicy.ALLOW:
        return OverlapDecision(OverlapAction.FIRE, next_ms)
    if policy == OverlapPolicy.CANCEL_PREVIOUS:
        return OverlapDecision(OverlapAction.FIRE_AND_CANCEL_PREVIOUS, next_ms)
    waiting = bool(statuses - {RUNNING})
    if policy == OverlapPolicy.BUFFER_ONE and not waiting:
        recheck_ms = now_ms + RECHECK_MS
        return OverlapDecision(OverlapAction.HOLD, min(recheck_ms, next_ms or recheck_ms))
    reason = SKIP_REASON if policy == OverlapPolicy.SKIP else BUFFER_FULL_REASON
    return OverlapDecision(OverlapAction.SKIP, next_ms, reason)
