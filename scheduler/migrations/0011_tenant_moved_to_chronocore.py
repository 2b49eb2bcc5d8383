# Tenant moved from chronoadmin to chronocore with its table (chrono_tenant) unchanged: the
# foreign keys of jobs and executions point at the same table and column as before, so only
# the migration state changes. Altering them in the database would drop and re-validate both
# constraints over every row for nothing.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chronocore', '0001_initial'),
        ('scheduler', '0010_execution_traceback'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='execution',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='executions', to='chronocore.tenant'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='jobs', to='chronocore.tenant'),
                ),
            ],
        ),
    ]
