# execution_worker_idx (worker_id, every row) becomes execution_worker_running_idx (worker_id)
# WHERE status = 'RUNNING'. What reads executions by worker is "what is this worker running
# now" (the dashboard's workers, a dead worker's executions); the API's ?worker= filter lists
# one tenant's executions newest first, which the scheduled_for index serves with the filter on
# top. The full index cost every status change of every execution an entry (a status change is
# never a HOT update: status is indexed) and a day of 10,000,000 executions ~10 % of its bytes,
# which the retention job's drop pays for at its commit (bench/RESULTS.md, "Session 18").
#
# Built without stopping writers: the partitioned table's own index is created ON ONLY (invalid
# until every partition has one), each partition's CONCURRENTLY and attached; then the old index
# is dropped (a moment's exclusive lock, no scan). Not atomic: CREATE INDEX CONCURRENTLY runs
# outside a transaction. Run again after a failure, it rebuilds what a failed build left invalid.
# A partition's index is named <partition>_<parent index>, as migration 0015 and
# scheduler/partitions.py name them.

from django.db import migrations, models

PARENT = "chrono_execution"
RUNNING_ONLY = ("execution_worker_running_idx", "(worker_id) WHERE status = 'RUNNING'")
EVERY_ROW = ("execution_worker_idx", "(worker_id)")


def _build(cursor, name: str, definition: str) -> None:
    """``CREATE INDEX name ON chrono_execution definition`` without blocking writers."""
    cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON ONLY {PARENT} {definition}")
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass ORDER BY c.relname", [PARENT])
    for (partition,) in cursor.fetchall():
        child = f"{partition}_{name}"[:63]
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                       [child])
        row = cursor.fetchone()
        if row is not None and not row[0]:  # left invalid by a build that failed
            cursor.execute(f'DROP INDEX CONCURRENTLY "{child}"')
            row = None
        if row is None:
            cursor.execute(f'CREATE INDEX CONCURRENTLY "{child}" ON "{partition}" {definition}')
        cursor.execute("SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(%s)", [child])
        if cursor.fetchone() is None:
            cursor.execute(f'ALTER INDEX {name} ATTACH PARTITION "{child}"')


def _replace(new: tuple[str, str], old: tuple[str, str]):
    def operation(apps, schema_editor) -> None:
        with schema_editor.connection.cursor() as cursor:
            _build(cursor, *new)
            cursor.execute(f"DROP INDEX IF EXISTS {old[0]}")
    return operation


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('scheduler', '0015_execution_partitioned_by_day'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_replace(RUNNING_ONLY, EVERY_ROW),
                                                      _replace(EVERY_ROW, RUNNING_ONLY))],
            state_operations=[
                migrations.RemoveIndex(model_name='execution', name='execution_worker_idx'),
                migrations.AddIndex(
                    model_name='execution',
                    index=models.Index(fields=['worker_id'],
                                       condition=models.Q(status='RUNNING'),
                                       name='execution_worker_running_idx'),
                ),
            ],
        ),
    ]
