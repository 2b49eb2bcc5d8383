"""A claimed batch that PostgreSQL refuses is split until only the bad timers are held back."""

from __future__ import annotations

import pytest
from django.db import OperationalError, ProgrammingError

from scheduler.beat import PREPARE_SLICE, dispatch_isolating, prepare_slices
from scheduler.timers import ClaimedTimer


def timers(*ids: str) -> list[ClaimedTimer]:
    return [ClaimedTimer(timer_id=i, fire_at_ms=1_000, shard=0, redelivered=False) for i in ids]


class FakeDispatch:
    """Refuses any batch that holds one of ``bad``; records the batches it accepted."""

    def __init__(self, *bad: str, error: type[Exception] = ProgrammingError) -> None:
        self.bad = set(bad)
        self.error = error
        self.accepted: list[str] = []
        self.calls = 0

    def __call__(self, batch) -> None:
        self.calls += 1
        if self.bad & {t.timer_id for t in batch}:
            raise self.error("ON CONFLICT DO UPDATE command cannot affect row a second time")
        self.accepted += [t.timer_id for t in batch]


def test_a_batch_without_refusal_is_dispatched_once_whole():
    dispatch, refused = FakeDispatch(), []
    dispatch_isolating(dispatch, timers("a", "b", "c"), lambda t, e: refused.append(t))
    assert (dispatch.calls, dispatch.accepted, refused) == (1, ["a", "b", "c"], [])


def test_only_the_refused_timers_are_held_back():
    ids = [f"t{i}" for i in range(100)]
    dispatch, refused = FakeDispatch("t17", "t80"), []
    dispatch_isolating(dispatch, timers(*ids), lambda t, e: refused.append(t.timer_id))
    assert sorted(dispatch.accepted) == sorted(set(ids) - {"t17", "t80"})
    assert refused == ["t17", "t80"]
    assert dispatch.calls < 30  # bisection, not one call per timer


def test_an_unreachable_database_is_not_split_but_raised_to_the_beat_loop():
    dispatch = FakeDispatch("a", error=OperationalError)
    with pytest.raises(OperationalError):
        dispatch_isolating(dispatch, timers("a", "b"), lambda t, e: None)
    assert dispatch.calls == 1


def test_a_large_claim_is_prepared_earliest_first_in_slices_of_at_most_the_slice_size():
    """A 10,000-timer claim (a fan-out, the top of the minute) is prepared 500 at a time, so
    the firer publishes the first slice while the next is prepared; nothing is dropped or
    prepared twice, and no slice holds a timer due before one of the slice before it."""
    claimed = [ClaimedTimer(timer_id=f"t{i}", fire_at_ms=(i * 7919) % 10_007, shard=i % 256,
                            redelivered=False) for i in range(10_000)]
    slices = prepare_slices(claimed)
    assert [len(s) for s in slices] == [PREPARE_SLICE] * (10_000 // PREPARE_SLICE)
    assert sorted(t.timer_id for s in slices for t in s) == sorted(t.timer_id for t in claimed)
    fire_times = [t.fire_at_ms for s in slices for t in s]
    assert fire_times == sorted(fire_times)
    assert [len(s) for s in prepare_slices(claimed[:3])] == [3]
    assert prepare_slices([]) == []
