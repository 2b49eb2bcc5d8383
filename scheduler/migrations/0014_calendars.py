# Exclusion calendars (issue 16 item 4): chrono_calendar, and the names a job refers to.

import uuid

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chronocore', '0004_grant_existing_jobs'),
        ('scheduler', '0013_job_interval'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='calendars',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=100), blank=True, db_default=models.Value([], output_field=django.contrib.postgres.fields.ArrayField(base_field=models.CharField(max_length=100), size=None)), default=list, help_text="Names of the tenant's exclusion calendars (scheduler.calendars): an occurrence on a day one of them excludes is skipped.", size=None),
        ),
        migrations.CreateModel(
            name='Calendar',
            fields=[
                ('calendar_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=100)),
                ('timezone', models.CharField(default='UTC', max_length=64)),
                ('description', models.TextField(blank=True, default='')),
                ('dates', models.JSONField(blank=True, default=list, help_text='Days excluded, e.g. ["2026-12-25", "2027-01-01"].')),
                ('ranges', models.JSONField(blank=True, default=list, help_text='Ranges of days excluded, both ends included, e.g. ["2026-12-24/2027-01-02"].')),
                ('rules', models.JSONField(blank=True, default=list, help_text='Cron day fields (day-of-month month day-of-week), e.g. ["* * SAT,SUN", "25 DEC *"].')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('tenant', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='calendars', to='chronocore.tenant')),
            ],
            options={
                'db_table': 'chrono_calendar',
                'constraints': [models.UniqueConstraint(fields=('tenant', 'name'), name='calendar_tenant_name_uniq')],
            },
        ),
    ]
