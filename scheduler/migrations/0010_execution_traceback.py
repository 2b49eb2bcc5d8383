"""Execution.traceback: the failure's traceback, for platform staff; ``error`` keeps what its
tenant sees (the exception's type and message). Rows written before hold the whole traceback
(its last 8,000 characters) in ``error``: it moves to ``traceback`` and ``error`` keeps its last
line, the exception's type and message. One pass over the executions that failed this way."""

from django.db import migrations, models

# A traceback starts with its header, or, when only its tail was kept, holds a frame line.
MOVE_TRACEBACKS = r"""
UPDATE chrono_execution
SET traceback = error,
    error = regexp_replace(rtrim(error, E' \n'), '^.*\n', '')
WHERE error LIKE 'Traceback (most recent call last):%' OR strpos(error, E'\n  File "') > 0
"""
RESTORE_TRACEBACKS = "UPDATE chrono_execution SET error = traceback WHERE traceback <> ''"


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0009_execution_ends'),
    ]

    operations = [
        migrations.AddField(
            model_name='execution',
            name='traceback',
            field=models.TextField(blank=True, db_default='', default='', help_text="The failure's Python traceback (platform staff only; tenants see error)."),
        ),
        migrations.RunSQL(MOVE_TRACEBACKS, RESTORE_TRACEBACKS),
    ]
