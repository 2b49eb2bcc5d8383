# Indexes reviewed for the rates of the product brief: every execution row is written four times
# (inserted, dispatched, started, finished), each a status change that writes every index.
# - chrono_job keeps the product brief's composite (status, next_run_at) in place of (status),
#   which 0004 had put instead (its prefix serves the same status filter).
# - chrono_execution loses three indexes nothing needs: the foreign keys' own indexes on job_id
#   and tenant_id (execution_job_started_idx and execution_tenant_status_idx start with those
#   columns) and worker_id's varchar_pattern_ops twin (no LIKE query); worker_id's plain index
#   stays, renamed. Foreign key constraints stay as they are (not dropped and re-validated).

import django.db.models.deletion
from django.db import migrations, models

JOB_FK_INDEX = "chrono_execution_job_id_ace8e089"
TENANT_FK_INDEX = "chrono_execution_tenant_id_7381d06d"
WORKER_INDEX = "chrono_execution_worker_id_70adfc4e"
WORKER_LIKE_INDEX = "chrono_execution_worker_id_70adfc4e_like"


class Migration(migrations.Migration):

    dependencies = [
        ('chronoadmin', '0002_api_keys_idempotency'),
        ('scheduler', '0004_job_indexes_for_ingest'),
    ]

    operations = [
        migrations.RemoveIndex(model_name='job', name='job_status_idx'),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(fields=['status', 'next_run_at'], name='job_status_next_run_idx'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='execution',
                    name='job',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='executions', to='scheduler.job'),
                ),
                migrations.AlterField(
                    model_name='execution',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='executions', to='chronoadmin.tenant'),
                ),
                migrations.AlterField(
                    model_name='execution',
                    name='worker_id',
                    field=models.CharField(blank=True, max_length=200, null=True),
                ),
                migrations.AddIndex(
                    model_name='execution',
                    index=models.Index(fields=['worker_id'], name='execution_worker_idx'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{JOB_FK_INDEX}"',
                    reverse_sql=f'CREATE INDEX "{JOB_FK_INDEX}" ON "chrono_execution" ("job_id")',
                ),
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{TENANT_FK_INDEX}"',
                    reverse_sql=(f'CREATE INDEX "{TENANT_FK_INDEX}" ON "chrono_execution" '
                                 '("tenant_id")'),
                ),
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{WORKER_LIKE_INDEX}"',
                    reverse_sql=(f'CREATE INDEX "{WORKER_LIKE_INDEX}" ON "chrono_execution" '
                                 '("worker_id" varchar_pattern_ops)'),
                ),
                migrations.RunSQL(
                    f'ALTER INDEX "{WORKER_INDEX}" RENAME TO "execution_worker_idx"',
                    reverse_sql=f'ALTER INDEX "execution_worker_idx" RENAME TO "{WORKER_INDEX}"',
                ),
            ],
        ),
    ]
