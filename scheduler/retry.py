"""Retry policies: how many attempts, how long between them, which errors not to retry.

Pure: the random source is passed in. Delays use exponential backoff with full jitter (AWS's
"full jitter": uniform in ``[0, min(cap, initial * multiplier ** (attempt - 1))]``), so a herd of
jobs failing together does not come back together. Short delays travel through RabbitMQ retry
tiers (TTL queues that dead-letter back to dispatch); a delay is rounded *down* to a tier, so the
realised delay never exceeds the policy's bound. Longer delays go back through the timer store.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

# Fixed TTLs of the RabbitMQ retry tiers, in ms (queues chrono.retry.<ttl>).
RETRY_TIERS_MS: tuple[int, ...] = (1_000, 2_000, 5_000, 10_000, 30_000, 60_000)
IMMEDIATE_BELOW_MS = RETRY_TIERS_MS[0]


@dataclass(frozen=True)
class RetryPolicy:
    """A job's retry policy; ``max_attempts`` counts the first run (1 = never retry)."""

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

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["non_retryable"] = list(self.non_retryable)
        return data

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

