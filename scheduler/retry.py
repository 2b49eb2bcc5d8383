"""Retry policies: how many attempts, how long between them, which errors not to retry.

Pure: the random source is passed in. Delays use exponential backoff with full jitter (AWS's
"full jitter": uniform in ``[0, min(cap, initial * multiplier ** (attempt - 1))]``), so a herd of
jobs failing together does not come back together. Short delays travel through RabbitMQ retry
tiers (TTL queues that dead-letter back to dispatch); a delay is rounded *down* to a tier, so the
realised delay never exceeds the policy's bound. Longer delays go back through the timer store.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from scheduler.inputs import control_character_problem, json_type, printable, whole_number_problem

# Fixed TTLs of the RabbitMQ retry tiers, in ms (queues chrono.retry.<ttl>).
RETRY_TIERS_MS: tuple[int, ...] = (1_000, 2_000, 5_000, 10_000, 30_000, 60_000)
IMMEDIATE_BELOW_MS = RETRY_TIERS_MS[0]


@dataclass(frozen=True)
class RetryPolicy:
    """A job's retry policy; ``max_attempts`` counts the first run (1 = never retry).

    Building one checks what the arithmetic needs (an attempt at least, no negative delay, a
    multiplier of 1 or more), so every policy a job row or a message ever held reads back. The
    bounds below are what every way in holds a policy to (:meth:`problems`, which the job spec
    validator runs for the REST API and the Python API alike): beyond them a value is surely a
    mistake (a unit, a typo), and a worker would wait a day or more between attempts."""

    MAX_ATTEMPTS: ClassVar[int] = 101
    MAX_DELAY_MS: ClassVar[int] = 86_400_000  # a day
    MAX_MULTIPLIER: ClassVar[int] = 100
    MAX_NON_RETRYABLE: ClassVar[int] = 50
    MAX_NAME_LENGTH: ClassVar[int] = 200
    EXCEPTION_NAME: ClassVar[re.Pattern[str]] = re.compile(
        r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
    FIELDS: ClassVar[tuple[str, ...]] = ("max_attempts", "initial_delay_ms", "multiplier",
                                         "max_delay_ms", "non_retryable")

    max_attempts: int = 1
    initial_delay_ms: int = 1_000
    multiplier: float = 2.0
    max_delay_ms: int = 300_000
    non_retryable: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (1 means no retry)")
        if self.initial_delay_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("retry delays cannot be negative")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        object.__setattr__(self, "non_retryable", tuple(self.non_retryable))

    @classmethod
    def problems(cls, fields: Mapping[str, object], *,
                 given: Collection[str] | None = None) -> dict[str, str]:
        """What to change in the policy whose fields are ``fields`` (all five), per field; empty
        when nothing. Each field in ``given`` (default: all) is checked against its type and
        bounds; the others are taken as they are (the job's own, or the defaults). The delays
        are checked against each other whatever was given."""
        found: dict[str, str] = {}

        def check(key: str, problem: str | None) -> None:
            if problem is not None and (given is None or key in given):
                found[key] = problem

        check("max_attempts", whole_number_problem(fields["max_attempts"], low=1,
                                                   high=cls.MAX_ATTEMPTS))
        for key in ("initial_delay_ms", "max_delay_ms"):
            check(key, whole_number_problem(fields[key], low=0, high=cls.MAX_DELAY_MS,
                                            unit="milliseconds"))
        check("multiplier", cls._multiplier_problem(fields["multiplier"]))
        check("non_retryable", cls._names_problem(fields["non_retryable"]))
        initial, cap = fields["initial_delay_ms"], fields["max_delay_ms"]
        if not found and isinstance(initial, int) and isinstance(cap, int) and initial > cap:
            found["initial_delay_ms"] = (
                f"Is {initial}, above max_delay_ms ({cap}), so every delay would be "
                "max_delay_ms; lower initial_delay_ms or raise max_delay_ms.")
        return found

    @classmethod
    def _multiplier_problem(cls, value: object) -> str | None:
        what = (f"a number from 1 (the same delay every time) to {cls.MAX_MULTIPLIER}, by which "
                "each delay grows")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"Must be {what}, got {json_type(value)}."
        if not (math.isfinite(value) and 1 <= value <= cls.MAX_MULTIPLIER):
            return f"Is {value}; use {what}."
        return None

    @classmethod
    def _names_problem(cls, value: object) -> str | None:
        example = "exception class names such as 'ValueError' or 'billing.errors.CardDeclined'"
        if not isinstance(value, list | tuple):
            return f"Must be a JSON array of {example}, got {json_type(value)}."
        if len(value) > cls.MAX_NON_RETRYABLE:
            return (f"Holds {len(value)} names; use at most {cls.MAX_NON_RETRYABLE} (a common "
                    "base class covers its subclasses only by its own name, so list the ones "
                    "raised).")
        for index, name in enumerate(value):
            if isinstance(name, str) and (problem := control_character_problem(name)):
                return problem
            if not (isinstance(name, str) and len(name) <= cls.MAX_NAME_LENGTH
                    and cls.EXCEPTION_NAME.match(name)):
                shown = printable(name[:64]) if isinstance(name, str) else name
                return f"Item {index} ({shown!r}) is not an exception name; use {example}."
        return None

    def to_json(self) -> dict[str, object]:
        """The policy as a job row and a message header hold it (every field; a list of names).
        Written out rather than by dataclasses.asdict, which cost most of a bulk item."""
        return {"max_attempts": self.max_attempts, "initial_delay_ms": self.initial_delay_ms,
                "multiplier": self.multiplier, "max_delay_ms": self.max_delay_ms,
                "non_retryable": list(self.non_retryable)}

    @classmethod
    def from_json(cls, data: dict | None) -> RetryPolicy:
        if not data:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def delay_bound_ms(self, attempt: int) -> int:
        """The largest delay before ``attempt`` (2 = the first retry)."""
        exponent = max(0, attempt - 2)
        return int(min(self.max_delay_ms, self.initial_delay_ms * self.multiplier**exponent))

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        """A delay before ``attempt`` drawn with full jitter."""
        return int(rng.uniform(0, self.delay_bound_ms(attempt)))

    def is_non_retryable(self, error_type: str) -> bool:
        """Whether ``error_type`` (``module.Class``) is listed, by full or short name."""
        return error_type in self.non_retryable or _short(error_type) in self.non_retryable

    def should_retry(self, *, failed_attempt: int, error_type: str) -> bool:
        """Whether the attempt that just failed gets another one."""
        if self.is_non_retryable(error_type):
            return False
        return failed_attempt < self.max_attempts


def _short(error_type: str) -> str:
    return error_type.rsplit(".", 1)[-1]


def retry_tier_ms(delay_ms: int, tiers: Sequence[int] = RETRY_TIERS_MS) -> int | None:
    """The tier to send a retry through: the largest tier not above ``delay_ms``; 0 to publish
    at once (below the smallest tier); None when the delay is beyond the largest tier (then the
    timer store takes it)."""
    if delay_ms < tiers[0]:
        return 0
    if delay_ms > tiers[-1]:
        return None
    return max(tier for tier in tiers if tier <= delay_ms)


def effective_policy(retry_policy: dict | None, max_retries: int) -> RetryPolicy:
    """A job's policy: its backoff settings, with ``max_retries`` giving the attempts unless the
    policy names ``max_attempts`` itself."""
    data = dict(retry_policy or {})
    data.setdefault("max_attempts", max_retries + 1)
    return RetryPolicy.from_json(data)

