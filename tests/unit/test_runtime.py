"""Long-running processes move their startup heap out of the cyclic collector's reach."""

from __future__ import annotations

import gc

from chronocore.runtime import freeze_startup_heap


def test_freezing_moves_the_live_objects_out_of_the_collectors_reach():
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        freeze_startup_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the test process's modules, Django and the app
        assert sum(gc.get_count()) < frozen
    finally:
        gc.unfreeze()


def test_the_worker_freezes_its_heap_once_ready_and_in_each_pool_child():
    from celery.signals import worker_process_init, worker_ready

    from chronoadmin import celery as chrono_celery

    for signal, handler in ((worker_ready, chrono_celery._prepare_worker),
                            (worker_process_init, chrono_celery._prepare_pool_child)):
        assert handler in [ref() for _, ref in signal.receivers], signal.name
