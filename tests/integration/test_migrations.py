"""The migrations agree with the models, and tenancy's move from chronoadmin to chronocore
changes the migration state only: the tables, their rows and their content types stay."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

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
