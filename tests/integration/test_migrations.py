"""The migrations agree with the models; tenancy's move from chronoadmin to chronocore
changes the migration state only (the tables, their rows and their content types stay); the
executions' worker index is rebuilt partition by partition with the rows in place."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

# Before the move: tenancy in chronoadmin, jobs' and executions' foreign keys pointing there.
BEFORE_THE_MOVE = [("chronocore", None)]
MOVED = {"tenant", "apikey", "idempotencyrecord"}


def _content_type_labels() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT app_label, model FROM django_content_type WHERE model = ANY(%s)",
            [list(MOVED)],
        )
        return set(cursor.fetchall())


def _migrate(targets: list[tuple[str, str | None]]):
    """Migrate to ``targets``; the apps of the migration state the database is then in."""
    MigrationExecutor(connection).migrate(targets)
    loader = MigrationExecutor(connection).loader
    return loader.project_state(list(loader.applied_migrations)).apps


def _leaf_nodes() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.mark.django_db
def test_the_models_need_no_new_migration():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_tenancy_moves_to_chronocore_and_back_without_touching_its_rows():
    leaves = _leaf_nodes()
    try:
        old_state = _migrate(BEFORE_THE_MOVE)
        assert old_state.get_model("chronoadmin", "Tenant")._meta.db_table == "chrono_tenant"
        assert (
            old_state.get_model("scheduler", "Job")._meta.get_field("tenant").related_model
            is old_state.get_model("chronoadmin", "Tenant")
        )
        old_state.get_model("chronoadmin", "Tenant").objects.create(slug="moved", name="Moved")
        assert _content_type_labels() == {("chronoadmin", model) for model in MOVED}

        new_state = _migrate(leaves)
        tenant_model = new_state.get_model("chronocore", "Tenant")
        assert tenant_model.objects.get(slug="moved").name == "Moved"
        assert (
            new_state.get_model("scheduler", "Execution")._meta.get_field("tenant").related_model
            is tenant_model
        )
        assert _content_type_labels() == {("chronocore", model) for model in MOVED}
    finally:
        _migrate(leaves)


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_grants_each_tenant_the_tasks_of_its_live_jobs_and_nothing_more():
    """chronocore 0004: jobs that existed before task grants keep running after the upgrade
    (their workers would refuse them otherwise); a finished job's task and any other task stay
    ungranted; going back removes only those grants."""
    leaves = _leaf_nodes()
    try:
        state = _migrate([("chronocore", "0003_tenant_memberships")])
        tenant = state.get_model("chronocore", "Tenant").objects.create(slug="old", name="Old")
        jobs = state.get_model("scheduler", "Job").objects
        for task, queue, status in (("billing.charge", "billing", "ACTIVE"),
                                    ("billing.charge", "billing", "PAUSED"),
                                    ("reports.daily", "chrono", "PAUSED"),
                                    ("old.finished", "chrono", "COMPLETED")):
            jobs.create(tenant=tenant, job_type=task, queue=queue, status=status)
        grants = state.get_model("chronocore", "TaskGrant").objects
        grants.create(tenant=tenant, task_pattern="ops.*", queue_pattern="*", created_by="ops")

        state = _migrate(leaves)
        granted = set(state.get_model("chronocore", "TaskGrant").objects
                      .filter(tenant_id=tenant.pk)
                      .values_list("task_pattern", "queue_pattern"))
        assert granted == {("billing.charge", "billing"), ("reports.daily", "chrono"),
                           ("ops.*", "*")}

        state = _migrate([("chronocore", "0003_tenant_memberships")])
        assert set(state.get_model("chronocore", "TaskGrant").objects
                   .filter(tenant_id=tenant.pk)
                   .values_list("task_pattern", "queue_pattern")) == {("ops.*", "*")}
    finally:
        _migrate(leaves)


def _worker_indexes() -> dict[str, tuple[str, bool]]:
    """The worker indexes of chrono_execution and its partitions: name → (definition, valid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(x.indexrelid), x.indisvalid FROM pg_index x "
            "JOIN pg_class c ON c.oid = x.indexrelid WHERE c.relname LIKE %s",
            ["%execution_worker%"])
        return {name: (definition, valid) for name, definition, valid in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_the_worker_index_keeps_running_rows_only_back_and_forth_with_rows_in_place(tenant):
    """scheduler 0016: the index on worker_id over every execution becomes one over RUNNING
    executions, built partition by partition; each partition's named after its parent index;
    back to 0015 restores the full one; a day created afterwards gets the new one."""
    from scheduler import api, partitions
    from scheduler.models import Execution

    job = api.schedule_once("tests.noop", tenant=tenant, delay=3600)
    now = timezone.now()
    for n, status in enumerate(["RUNNING", "SUCCEEDED", "FAILED"]):
        Execution.objects.create(job=job, tenant=tenant, scheduled_for=now, status=status,
                                 worker_id=f"w-{n}")
    leaves = _leaf_nodes()
    try:
        _migrate([("scheduler", "0015_execution_partitioned_by_day")])
        before = _worker_indexes()
        assert before and all(valid and "WHERE" not in definition
                              for definition, valid in before.values())
        assert all(name.endswith("execution_worker_idx") for name in before)
        _migrate(leaves)
        after = _worker_indexes()
        assert set(after) == {name.replace("execution_worker_idx", "execution_worker_running_idx")
                              for name in before}
        assert all(valid and definition.endswith("WHERE ((status)::text = 'RUNNING'::text)")
                   for definition, valid in after.values())
        today = partitions.partition_name(partitions.today_utc())
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f'SELECT worker_id FROM "{today}" WHERE status = %s', ["RUNNING"])
            assert cursor.fetchall() == [("w-0",)]
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN SELECT count(*) FROM chrono_execution "
                           "WHERE status = 'RUNNING' AND worker_id = 'w-0'")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert f"{today}_execution_worker_running_idx" in plan
        later = partitions.today_utc() + timedelta(days=60)
        partitions.create_day(later)
        assert f"{partitions.partition_name(later)}_execution_worker_running_idx" in (
            _worker_indexes())
    finally:
        _migrate(leaves)
