"""The reconciler's pass over every owned shard after a Redis restart or failover
(:class:`scheduler.reconcile.FullPass`): when it ends, and what its summary counts, when shards
change hands during it. The pass itself against real Redis and PostgreSQL is in
``tests/cluster/test_redis_cluster.py``."""

from __future__ import annotations

from scheduler.reconcile import FullPass, ReconcileReport


def test_the_pass_ends_once_every_shard_of_it_was_reconciled_and_counts_each_once():
    full = FullPass({1, 2, 3}, started=10.0)
    full.note(1, ReconcileReport(checked=5, added=2))
    full.note(1, ReconcileReport(checked=5, added=2))  # its round-robin turn: not the pass's
    full.note(7, ReconcileReport(checked=9, added=9))  # gained later: not part of the pass
    assert full.summary(frozenset({1, 2, 3, 7}), now=11.0) is None
    full.note(2, ReconcileReport(checked=1, moved=1))
    full.note(3, ReconcileReport(checked=0))
    assert full.summary(frozenset({1, 2, 3, 7}), now=12.5) == (
        "reconciled every owned shard after the Redis restart or failover in 2.5 s: 6 timers "
        "checked, 2 missing added, 1 misplaced moved")


def test_a_shard_lost_and_gained_again_during_the_pass_is_waited_for_and_counted():
    # A node's outage: the keeper could not renew, the lease lapsed, the replica took the shard
    # back. Reconciled as a gained shard, it is the pass's all the same (its repairs are the
    # failover's).
    full = FullPass({1, 2}, started=0.0)
    full.note(1, ReconcileReport(checked=3))
    assert full.summary(frozenset({1, 2}), now=1.0) is None  # 2 owned, not reconciled yet
    full.note(2, ReconcileReport(checked=4, added=4))
    summary = full.summary(frozenset({1, 2}), now=2.0)
    assert summary is not None and "7 timers checked, 4 missing added" in summary


def test_a_shard_that_went_to_another_replica_ends_the_pass_and_is_named():
    full = FullPass({1, 2, 3}, started=0.0)
    full.note(1, ReconcileReport(checked=3))
    assert full.summary(frozenset({1, 3}), now=1.0) is None  # 3 is still owned
    full.note(3, ReconcileReport(checked=1))
    assert full.summary(frozenset({1, 3}), now=1.5) == (
        "reconciled every owned shard after the Redis restart or failover in 1.5 s: 4 timers "
        "checked, 0 missing added, 0 misplaced moved; 1 shard left this replica before their "
        "turn (their owner reconciles them when it gains them)")
