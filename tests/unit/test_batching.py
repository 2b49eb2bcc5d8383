"""Group commit: concurrent calls share batches, each caller gets its own result or error."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler.batching import Coalescer


class Doubler:
    def __init__(self, *, pause_s: float = 0.0, fail_on: int | None = None) -> None:
        self.pause_s = pause_s
        self.fail_on = fail_on
        self.sizes: list[int] = []

    def __call__(self, items):
        self.sizes.append(len(items))
        time.sleep(self.pause_s)
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"refused {self.fail_on}")
        return [2 * i for i in items]


def run_threads(coalescer: Coalescer, items: list[int]) -> dict[int, object]:
    outcomes: dict[int, object] = {}
    start = threading.Barrier(len(items))

    def call(item: int) -> None:
        start.wait()
        try:
            outcomes[item] = coalescer.submit(item)
        except ValueError as exc:
            outcomes[item] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a caller never returned"
    return outcomes


def test_a_caller_alone_runs_its_batch_of_one_at_once():
    run = Doubler()
    coalescer = Coalescer(run)
    assert [coalescer.submit(i) for i in range(3)] == [0, 2, 4]
    assert run.sizes == [1, 1, 1]


def test_concurrent_callers_share_statements_and_each_gets_its_own_result():
    run = Doubler(pause_s=0.02)
    coalescer = Coalescer(run)
    outcomes = run_threads(coalescer, list(range(40)))
    assert outcomes == {i: 2 * i for i in range(40)}
    assert sum(run.sizes) == 40
    assert len(run.sizes) <= 10, run.sizes  # the first runs alone, the rest pile up behind it


def test_batches_stay_within_max_batch():
    run = Doubler(pause_s=0.02)
    outcomes = run_threads(Coalescer(run, max_batch=4), list(range(30)))
    assert outcomes == {i: 2 * i for i in range(30)}
    assert max(run.sizes) <= 4


def test_an_error_reaches_every_caller_of_its_batch_and_later_batches_still_run():
    run = Doubler(pause_s=0.02, fail_on=7)
    coalescer = Coalescer(run)
    outcomes = run_threads(coalescer, list(range(20)))
    failed = {i for i, o in outcomes.items() if isinstance(o, ValueError)}
    assert 7 in failed
    assert all(outcomes[i] == 2 * i for i in set(range(20)) - failed)
    assert coalescer.submit(21) == 42


def test_a_wrong_number_of_results_is_an_error_not_a_mismatch():
    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        Coalescer(lambda items: []).submit(1)
