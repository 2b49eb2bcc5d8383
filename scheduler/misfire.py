"""What to do with occurrences that fell due while nothing dispatched them: the misfire policy.

Pure functions. An occurrence is *late* when it is more than ``grace_ms`` behind ``now`` (all
replicas were down, the job was paused, Redis was being rebuilt); occurrences within the grace are
on time and always fire, so a hiccup of a few seconds never skips anything. Late occurrences follow
the job's policy:

``fire_once`` (default)  the most recent late occurrence fires, the others are skipped;
``fire_all``             late occurrences fire, oldest first, up to ``fire_all_limit``; the rest
                         are skipped;
``skip``                 no late occurrence fires.

An occurrence one of the job's exclusion calendars excludes (:mod:`scheduler.calendars`) never
fires, late or on time: it is skipped with the reason ``calendar <name>`` before the policy
looks at the others, so ``fire_once`` fires the latest occurrence no calendar excludes.

Every skipped occurrence is returned with its reason so the ledger (executions with status
``SKIPPED``) shows an operator exactly what did not run and why.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import ClassVar

from scheduler.calendars import ExclusionCalendar, excluding_calendar, skip_reason
from scheduler.inputs import choice_problem, whole_number_problem
from scheduler.schedules import Schedule

MAX_OCCURRENCES_EXAMINED = 10_000


class MisfirePolicy(StrEnum):
    FIRE_ONCE = "fire_once"
    FIRE_ALL = "fire_all"
    SKIP = "skip"


@dataclass(frozen=True)
class MisfireRule:
    """A job's policy with its bound. Building one checks the limit is at least 1, so every rule
    a job row ever held reads back; ``MAX_FIRE_ALL_LIMIT`` is the bound every way in holds a rule
    to (:meth:`problems`, which the job spec validator runs for the REST API and the Python API
    alike): a thousand late occurrences at once is surely not what was meant."""

    MAX_FIRE_ALL_LIMIT: ClassVar[int] = 1_000
    POLICIES: ClassVar[tuple[str, ...]] = tuple(policy.value for policy in MisfirePolicy)

    policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    fire_all_limit: int = 10

    def __post_init__(self) -> None:
        if self.fire_all_limit < 1:
            raise ValueError("fire_all_limit must be at least 1")

    @classmethod
    def problems(cls, fields: Mapping[str, object]) -> dict[str, str]:
        """What to change in ``fields`` (``policy`` and/or ``fire_all_limit``, those given), per
        field; empty when nothing."""
        found = {}
        if "policy" in fields and (
            problem := choice_problem(fields["policy"], cls.POLICIES, "a misfire policy")
        ):
            found["policy"] = problem
        if "fire_all_limit" in fields and (problem := whole_number_problem(
                fields["fire_all_limit"], low=1, high=cls.MAX_FIRE_ALL_LIMIT)):
            found["fire_all_limit"] = problem
        return found

    def to_fields(self) -> dict[str, object]:
        """The rule as a job spec gives it: the limit only with ``fire_all``, the only policy it
        bounds (the validator refuses a limit given with another)."""
        if self.policy is MisfirePolicy.FIRE_ALL:
            return {"misfire_policy": self.policy.value,
                    "misfire_fire_all_limit": self.fire_all_limit}
        return {"misfire_policy": MisfirePolicy(self.policy).value}


@dataclass
class FirePlan:
    """The occurrences to fire now, those skipped (with why), and the next fire time."""

    fire_ms: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    next_ms: int | None = None


def plan_occurrences(
    *,
    schedule: Schedule | None,
    fire_at_ms: int,
    now_ms: int,
    rule: MisfireRule,
    grace_ms: int,
    excluded_by: Callable[[int], str | None] | None = None,
) -> FirePlan:
    """Plan a claimed occurrence ``fire_at_ms`` and, for a cron job, every later one up to
    ``now_ms``. ``schedule`` is None for a one-time job. ``excluded_by`` names the calendar
    that excludes a fire time (None: none does); without it nothing is excluded."""
    due = [fire_at_ms]
    if schedule is not None:
        while len(due) < MAX_OCCURRENCES_EXAMINED:
            following = schedule.next_fire_ms(due[-1])
            if following > now_ms:
                break
            due.append(following)
    plan = FirePlan()
    last_ms = due[-1]
    if excluded_by is not None:
        excluding = [(ms, excluded_by(ms)) for ms in due]
        plan.skipped = [(ms, skip_reason(name)) for ms, name in excluding if name is not None]
        due = [ms for ms, name in excluding if name is None]
    late = [ms for ms in due if now_ms - ms > grace_ms]
    on_time = [ms for ms in due if now_ms - ms <= grace_ms]
    if rule.policy is MisfirePolicy.FIRE_ONCE:
        plan.fire_ms = late[-1:]
        plan.skipped += [(ms, "missed; fired once for all (misfire policy fire_once)")
                         for ms in late[:-1]]
    elif rule.policy is MisfirePolicy.FIRE_ALL:
        plan.fire_ms = late[: rule.fire_all_limit]
        plan.skipped += [
            (ms, f"missed beyond the fire_all limit of {rule.fire_all_limit}")
            for ms in late[rule.fire_all_limit :]
        ]
    else:
        plan.skipped += [(ms, "missed (misfire policy skip)") for ms in late]
    plan.skipped.sort()
    plan.fire_ms += on_time
    if schedule is not None:
        plan.next_ms = schedule.next_fire_ms(max(last_ms, now_ms))
    return plan


def calendar_exclusion(job_id: str, schedule: Schedule | None, claimed_ms: int, jitter_ms: int,
                       calendars: Sequence[ExclusionCalendar] | None
                       ) -> Callable[[int], str | None] | None:
    """The ``excluded_by`` of :func:`plan_occurrences` for a job's claimed ``claimed_ms``: the
    name of the first of ``calendars`` that excludes a fire time; None for a job without
    calendars. A claimed time that is not an occurrence of the schedule (a trigger: someone
    asked for a run now) is never excluded."""
    if not calendars or schedule is None:
        return None
    trigger_ms = None
    if jittered_occurrence_ms(job_id, schedule, claimed_ms, jitter_ms) is None:
        trigger_ms = claimed_ms
    return lambda ms: None if ms == trigger_ms else excluding_calendar(calendars, ms)


def jittered_ms(job_id: str, occurrence_ms: int, jitter_ms: int) -> int:
    """``occurrence_ms`` delayed by a spread in ``[0, jitter_ms)`` that is the same every time
    it is computed for this job and occurrence (so a re-plan never moves an occurrence)."""
    if jitter_ms <= 0:
        return occurrence_ms
    digest = hashlib.blake2b(f"{job_id}@{occurrence_ms}".encode(), digest_size=8).digest()
    return occurrence_ms + int.from_bytes(digest, "big") % jitter_ms


def jittered_occurrence_ms(
    job_id: str, schedule: Schedule, pending_ms: int, jitter_ms: int
) -> int | None:
    """The occurrence of ``schedule`` that the jitter delayed into ``pending_ms``: the first
    one after ``pending_ms - jitter_ms`` (a jitter is below the schedule's gaps). None when
    ``pending_ms`` is not one: a time of its own, such as a trigger's."""
    occurrence_ms = schedule.next_fire_ms(pending_ms - jitter_ms - 1)
    return occurrence_ms if jittered_ms(job_id, occurrence_ms, jitter_ms) == pending_ms else None


# A jitter is checked against this many coming occurrences (an irregular schedule such as
# "0 9,10 * * *" has a short gap after a long one).
JITTER_OCCURRENCES_CHECKED = 10


@lru_cache(maxsize=256)  # a bulk request checks many jobs of one schedule at one now_ms
def jitter_room_ms(schedule: Schedule, now_ms: int) -> int:
    """The shortest gap between the schedule's coming occurrences: a jitter must stay below
    it, so that a delayed occurrence never passes the next one."""
    fire_times = schedule.fire_times_ms(now_ms, JITTER_OCCURRENCES_CHECKED + 1)
    return min(later - earlier for earlier, later in itertools.pairwise(fire_times))
