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
