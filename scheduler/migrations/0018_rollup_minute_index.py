# The dashboard's per-minute rollups by minute, oldest first: the retention pass deletes those
# older than rollup_retention_hours (scheduler/rollups.py, EXPIRED). Built CONCURRENTLY, so the
# processes go on writing their counts while it builds (not atomic: CREATE INDEX CONCURRENTLY
# runs outside a transaction).

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler", "0017_job_ended_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="executionrollup",
            index=models.Index(fields=["minute"], name="execution_rollup_minute_idx"),
        ),
    ]
