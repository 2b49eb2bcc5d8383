# Ended jobs (COMPLETED, CANCELLED) by the time of their end, oldest first: the retention pass
# deletes those whose executions are gone (scheduler/ended_jobs.py). Built CONCURRENTLY, so a
# deployment with millions of jobs keeps scheduling while it builds (not atomic: CREATE INDEX
# CONCURRENTLY runs outside a transaction).

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler", "0016_execution_worker_index_running_only"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(condition=models.Q(("status__in", ["COMPLETED", "CANCELLED"])),
                               fields=["updated_at"], name="job_ended_idx"),
        ),
    ]
