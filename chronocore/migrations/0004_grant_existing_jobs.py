"""Grants for what ran before grants existed.

Task grants (0002) made every tenant run only what it was granted, and a tenant starts with no
grant. An installation upgraded from before them would have seen every job it already had
refused by its workers ("not granted") at its next occurrence: an upgrade that silently stops
jobs. This grants each tenant exactly the (task, queue) pairs of its live jobs (active or
paused), nothing wider: a new task still needs a grant. It runs once, like any migration; on a
fresh database there are no jobs and it does nothing. Reversing it removes only the grants it
wrote (their ``created_by``).
"""

from django.db import migrations

GRANTED_BY = "migration chronocore 0004: a job of the tenant's before task grants"

GRANT_SQL = """
INSERT INTO chrono_task_grant (tenant_id, task_pattern, queue_pattern, created_at, created_by)
SELECT DISTINCT j.tenant_id, j.job_type, j.queue, now(), %s
FROM chrono_job j
WHERE j.status IN ('ACTIVE', 'PAUSED')
ON CONFLICT (tenant_id, task_pattern, queue_pattern) DO NOTHING
"""


def grant(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(GRANT_SQL, [GRANTED_BY])


def ungrant(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DELETE FROM chrono_task_grant WHERE created_by = %s", [GRANTED_BY])


class Migration(migrations.Migration):

    dependencies = [
        ("chronocore", "0003_tenant_memberships"),
        ("scheduler", "0012_job_counts"),
    ]

    operations = [migrations.RunPython(grant, ungrant)]
