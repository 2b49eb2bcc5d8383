# Finished runs by the time they finished, oldest first: the retention pass deletes those older
# than its cutoff with their step rows (workflows/retention.py). Built CONCURRENTLY, so runs go
# on advancing while it builds (not atomic: CREATE INDEX CONCURRENTLY runs outside a
# transaction).

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("workflows", "0005_run_state_lz4"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="workflowrun",
            index=models.Index(condition=models.Q(("finished_at__isnull", False)),
                               fields=["finished_at"], name="workflow_run_finished_idx"),
        ),
    ]
