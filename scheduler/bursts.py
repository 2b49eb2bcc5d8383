"""Seeing a burst coming, and preparing it early enough that only the publishes are left for its
fire time.

A beat prepares a timer (claims it, writes its execution, builds its message) ``prepare_ahead_ms``
before it is due, which is plenty for the few timers of an ordinary millisecond. Ten thousand
cron jobs at the top of the minute take about a second to prepare: started 100 ms ahead, the
last of them went out seconds late. A burst is known in advance, though (its timers sit in the
beat's wheel up to ``lookahead_ms`` ahead), so the beat asks, before each preparation, whether
some later moment holds more than it could prepare in the time left, and if so prepares up to it
now. The occurrences still wait in memory for their fire time (the firer never publishes early),
and those prepared early are checked again against PostgreSQL ``prepare_ahead_ms`` before it
(:meth:`scheduler.firing.Firer`), so a job paused or deleted meanwhile does not fire.

A burst shared by tenants goes out in turns by tenant (:func:`in_turns`), retries too.

Pure logic: the wheel's counts and the measured preparation rate come in as numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")

# Timers prepared per ms assumed before any was measured: one replica on this machine (2 cores)
# prepares 7-19 a ms in a burst (slices of 500), and SAFETY halves it.
INITIAL_RATE_PER_MS = 6.0
# How much each measured slice moves the estimate (exponential moving average).
RATE_WEIGHT = 0.3
# Bounds of the estimate: a slow slice (a pause of the process) must not make the beat prepare
# the whole window at every turn, nor a fast tiny slice make it wait too long.
MIN_RATE_PER_MS = 0.5
MAX_RATE_PER_MS = 50.0
# Slices smaller than this say little about the rate of a burst (a small slice of a quiet
# moment runs faster a timer than a burst's, whose slices share the cores with the firer
# publishing the slice before) and are not counted.
MIN_MEASURED_SLICE = 200
# The forecast assumes this fraction of the measured rate: preparing too early costs little
# (memory, and the check of each occurrence before its time), preparing too late is the fault.
SAFETY = 0.5


class PrepareRate:
    """The beat's rate of preparation, timers per ms, as measured on its own slices."""

    def __init__(self, per_ms: float = INITIAL_RATE_PER_MS) -> None:
        self.per_ms = per_ms

    def measured(self, timers: int, elapsed_ms: float) -> None:
        if timers < MIN_MEASURED_SLICE or elapsed_ms <= 0:
            return
        sample = min(max(timers / elapsed_ms, MIN_RATE_PER_MS), MAX_RATE_PER_MS)
        self.per_ms += RATE_WEIGHT * (sample - self.per_ms)


def prepare_horizon(
    now_ms: int,
    due_counts: Sequence[tuple[int, int, int]],
    *,
    ahead_ms: int,
    rate_per_ms: float,
    window_ms: int,
) -> tuple[int, int | None]:
    """``(horizon, start_at)``: prepare now every timer due by ``horizon``; the next
    preparation must start by ``start_at`` (None: nothing ahead needs an early one).

    ``due_counts`` is the wheel's forecast, ``(from_ms, to_ms, count)`` earliest first. The
    timers due by the end of a span take ``cumulative / (rate * SAFETY)`` ms to prepare,
    earliest first, and must all be ready ``ahead_ms`` before the span begins; a burst (a span
    whose timers are denser than that rate: a steady flow the beat keeps up with is not one)
    for which that moment has come is prepared now, with everything before it. The horizon never
    reaches past ``now + window_ms`` (the beat's look-ahead, where its scans place every
    timer in the wheel's fine levels).
    """
    rate = rate_per_ms * SAFETY
    horizon = now_ms + ahead_ms
    start_at: int | None = None
    cumulative = 0
    for from_ms, to_ms, count in due_counts:
        cumulative += count
        if count <= rate * (to_ms - from_ms):
            continue  # no denser than the beat prepares: the usual course keeps up with it
        must_start = from_ms - ahead_ms - cumulative / rate
        if must_start <= now_ms:
            horizon = max(horizon, to_ms - 1)
        elif from_ms > horizon:
            start_ms = math.ceil(must_start)  # not before: it would be too early, and loop
            start_at = start_ms if start_at is None else min(start_at, start_ms)
    return min(horizon, max(now_ms + window_ms, now_ms + ahead_ms)), start_at


def in_turns(items: Sequence[T], tenant_of: Callable[[T], Hashable]) -> list[T]:
    """``items`` in turns by tenant, each tenant's in their own order: of a burst shared by a
    tenant's 10,000 jobs and another's 10, the 10 go out among the first 20 messages, not
    behind the 10,000 (a queue delivers in publish order, and RabbitMQ's quorum queues have no
    priorities). Round robin, not weighted: every tenant's next job before anyone's second."""
    by_tenant: dict[Hashable, list[T]] = {}
    for item in items:
        by_tenant.setdefault(tenant_of(item), []).append(item)
    return turns(list(by_tenant.values()))


def turns(queues: Sequence[list[T]]) -> list[T]:
    """The items of ``queues`` (one per tenant, each in its order), round robin: what
    :func:`in_turns` does once the items are grouped."""
    if len(queues) < 2:
        return list(queues[0]) if queues else []
    return [item for turn in itertools.zip_longest(*queues) for item in turn
            if item is not None]
