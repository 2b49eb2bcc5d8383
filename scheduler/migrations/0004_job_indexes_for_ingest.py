# Indexes of chrono_job that every bulk-ingested row must update, reviewed (bench/RESULTS.md,
# "Ingest"): (status, next_run_at) becomes (status), as nothing reads next_run_at ranges across
# tenants any more (due jobs come from the timer store); the tenant foreign key's own index goes,
# job_tenant_status_idx starting with the tenant. The foreign key constraint itself stays, and is
# not dropped and re-created (AlterField would, checking every row again).

import django.db.models.deletion
from django.db import migrations, models

TENANT_INDEX = "chrono_job_tenant_id_ed59f8c7"


class Migration(migrations.Migration):

    dependencies = [
        ('chronoadmin', '0002_api_keys_idempotency'),
        ('scheduler', '0003_retries_timeouts_overlap'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='job_status_next_run_idx',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(fields=['status'], name='job_status_idx'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='jobs', to='chronoadmin.tenant'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{TENANT_INDEX}"',
                    reverse_sql=f'CREATE INDEX "{TENANT_INDEX}" ON "chrono_job" ("tenant_id")',
                ),
            ],
        ),
    ]
