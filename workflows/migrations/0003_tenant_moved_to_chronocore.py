# Tenant moved from chronoadmin to chronocore with its table (chrono_tenant) unchanged: the
# foreign keys of workflow definitions and runs point at the same table and column as before,
# so only the migration state changes (as scheduler 0011 does for jobs and executions).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chronocore', '0001_initial'),
        ('workflows', '0002_run_parent_index'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='workflowdefinitionversion',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='workflows', to='chronocore.tenant'),
                ),
                migrations.AlterField(
                    model_name='workflowrun',
                    name='tenant',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='workflow_runs', to='chronocore.tenant'),
                ),
            ],
        ),
    ]
