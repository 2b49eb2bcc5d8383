"""The grant cache renewed ahead of its expiry (a worker's refresher), so a delivery never waits
on a grants query; a grant revoked is still refused within the TTL; a thread pool's threads exist
before the first job."""

from __future__ import annotations

import time

import pytest
from celery.concurrency.thread import TaskPool as ThreadTaskPool
from django.db import connection

from chronocore import grants
from chronocore.models import TaskGrant
from scheduler.worker import warm_threads

pytestmark = [pytest.mark.no_default_grants]

TASK, QUEUE = "reports.daily", "reports"


def _revoke_from_another_process(tenant) -> None:
    """Delete the tenant's grants without this process's signal (as another process would)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TaskGrant._meta.db_table} WHERE tenant_id = %s",
                       [tenant.tenant_id])


def _expire(tenant) -> None:
    grants._cache[str(tenant.tenant_id)].expires_at_s = time.monotonic() - 1


@pytest.mark.django_db
def test_a_refresh_renews_an_expired_entry_so_the_look_up_runs_no_query(
        tenant, django_assert_num_queries):
    grants.grant(tenant, "reports.*", QUEUE)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
    _expire(tenant)
    assert grants.refresh_all() >= 1
    with django_assert_num_queries(0):
        assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
        assert not grants.is_granted(tenant.tenant_id, TASK, "elsewhere")


@pytest.mark.django_db
def test_a_refresh_reads_a_grant_revoked_elsewhere(tenant):
    grants.grant(tenant, "reports.*", QUEUE)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
    _revoke_from_another_process(tenant)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)  # cached, within the TTL
    grants.refresh_all()
    assert grants.refusal(tenant.tenant_id, TASK, QUEUE) is not None


@pytest.mark.django_db
def test_an_entry_not_refreshed_still_expires_and_is_read_again(tenant):
    grants.grant(tenant, "reports.*", QUEUE)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
    _revoke_from_another_process(tenant)
    _expire(tenant)
    assert not grants.is_granted(tenant.tenant_id, TASK, QUEUE)


@pytest.mark.django_db
def test_a_refresh_begun_before_a_change_in_this_process_does_not_put_back_the_old_grants(
        tenant, monkeypatch):
    grants.grant(tenant, "reports.*", QUEUE)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
    real = grants.compile_rules

    def revoked_meanwhile(pairs):
        # The change lands while the refresh is between its reads and its writes.
        monkeypatch.setattr(grants, "compile_rules", real)
        TaskGrant.objects.filter(tenant=tenant).delete()  # signal: forget()
        return real(pairs)

    monkeypatch.setattr(grants, "compile_rules", revoked_meanwhile)
    grants._cache[str(tenant.tenant_id)].pairs = ()  # so that the refresh compiles its rules
    assert grants.refresh_all() == 0
    assert not grants.is_granted(tenant.tenant_id, TASK, QUEUE)


@pytest.mark.django_db(transaction=True)
def test_the_refresher_renews_entries_before_they_expire(tenant, django_assert_num_queries):
    grants.grant(tenant, "reports.*", QUEUE)
    try:
        assert grants.start_refresher(interval_s=0.05)  # reads every tenant's at its start
        assert not grants.start_refresher(interval_s=0.05)  # one a process
        first = grants._cache[str(tenant.tenant_id)].expires_at_s
        deadline = time.monotonic() + 5
        while grants._cache[str(tenant.tenant_id)].expires_at_s <= first:
            assert time.monotonic() < deadline, "the refresher did not renew the entry"
            time.sleep(0.02)
        with django_assert_num_queries(0):
            assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
        # A grant revoked by another process is refused after the next round.
        _revoke_from_another_process(tenant)
        deadline = time.monotonic() + 5
        while grants.is_granted(tenant.tenant_id, TASK, QUEUE):
            assert time.monotonic() < deadline, "the revoked grant is still answered"
            time.sleep(0.02)
    finally:
        grants.stop_refresher()


def test_a_thread_pools_threads_are_started_before_its_first_task():
    pool = ThreadTaskPool(limit=8)
    try:
        assert len(pool.executor._threads) == 0
        assert warm_threads(pool) == 8
        assert len(pool.executor._threads) == 8
        assert warm_threads(pool) == 8  # again (no thread more: they are reused)
        assert len(pool.executor._threads) == 8
    finally:
        pool.executor.shutdown(wait=True)


@pytest.mark.django_db
def test_a_refresh_reads_only_the_tenants_looked_up_lately(
        tenant, other_tenant, django_assert_num_queries):
    grants.grant(tenant, "reports.*", QUEUE)
    grants.grant(other_tenant, "reports.*", QUEUE)
    assert grants.is_granted(tenant.tenant_id, TASK, QUEUE)
    assert grants.is_granted(other_tenant.tenant_id, TASK, QUEUE)
    grants._cache[str(other_tenant.tenant_id)].used_at_s -= grants.KEEP_WARM_S + 1
    rules = grants._cache[str(tenant.tenant_id)].rules
    with django_assert_num_queries(2):
        assert grants.refresh_all() == 1
    assert grants._cache[str(tenant.tenant_id)].rules is rules  # unchanged: not compiled again
    _expire(other_tenant)
    with django_assert_num_queries(2):  # aged out of the refresh: read on use
        assert grants.is_granted(other_tenant.tenant_id, TASK, QUEUE)
    assert grants.refresh_all(every_tenant=True) >= 2
